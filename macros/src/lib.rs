//! The `tensor!` macro: Einstein notation compiled to a sparse kernel at build time.
//!
//! ```ignore
//! use tessera_formats::Tensor;
//! use tessera_macros::tensor;
//! fn spmv(A: &Tensor<f64>, x: &Tensor<f64>) -> Result<Tensor<f64>, tessera_compiler::bind::BindError> {
//!     tensor!(y(i) = A(i,j) * x(j); A: csr)
//! }
//! ```
//!
//! The input is a statement in the language of `docs/language.md`: an assignment, then
//! `;`-separated formats (`A: csr`, `B: ds:1,0`) and schedule directives (`parallelize(i)`).
//! Every tensor on the right-hand side names a `tessera_formats::Tensor<V, I>` (or a
//! reference to one) in scope. The expansion checks, when it runs, that each tensor has the
//! declared format and that dimensions agree (`tessera_compiler::bind`), then calls the
//! generated kernel; it evaluates to `Result<Tensor<V, I>, BindError>` holding the output.
//! `y(i) += ...` reads the tensor `y` in scope and returns the updated tensor.
//!
//! Errors in the statement (syntax, ranks, formats, schedule, impossible loop orders) are
//! `compile_error!`s at the tokens they are about. The calling crate depends on
//! `tessera-formats` and `tessera-compiler` (and `rayon` when it uses `parallelize`).

use proc_macro::TokenStream;
use proc_macro2::{Delimiter, Spacing, Span, TokenStream as TokenStream2, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use tessera_compiler::check::{self, Checked, Dims};
use tessera_compiler::diagnostics::Diagnostic;
use tessera_compiler::{cli, codegen, lower, parse};

#[proc_macro]
pub fn tensor(input: TokenStream) -> TokenStream {
    let source = Source::from_tokens(input.into());
    match expand(&source) {
        Ok(ts) => ts.into(),
        Err(d) => {
            let span = source.span_of(&d.span);
            let mut msg = d.message.clone();
            if !d.label.is_empty() {
                msg += &format!("\n  = note: {}", d.label);
            }
            if let Some(h) = &d.hint {
                msg += &format!("\n  = help: {h}");
            }
            quote_spanned!(span=> ::core::compile_error!(#msg)).into()
        }
    }
}

/// The macro input as text for the parser, with the span of every token's byte range.
struct Source {
    text: String,
    tokens: Vec<(std::ops::Range<usize>, Span)>,
    /// Where to report when the input is empty.
    all: Span,
}

impl Source {
    fn from_tokens(ts: TokenStream2) -> Source {
        let mut s = Source {
            text: String::new(),
            tokens: Vec::new(),
            all: Span::call_site(),
        };
        s.push_stream(ts);
        s
    }

    fn push(&mut self, text: &str, span: Span, joint: bool) {
        let start = self.text.len();
        self.text += text;
        self.tokens.push((start..self.text.len(), span));
        // `+=` arrives as `+` (joint) then `=`: keep joint punctuation together.
        if !joint {
            self.text.push(' ');
        }
    }

    fn push_stream(&mut self, ts: TokenStream2) {
        for tt in ts {
            match tt {
                TokenTree::Group(g) => {
                    let (open, close) = match g.delimiter() {
                        Delimiter::Parenthesis => ("(", ")"),
                        Delimiter::Bracket => ("[", "]"),
                        Delimiter::Brace => ("{", "}"),
                        Delimiter::None => ("", ""),
                    };
                    if !open.is_empty() {
                        self.push(open, g.span_open(), false);
                    }
                    self.push_stream(g.stream());
                    if !close.is_empty() {
                        self.push(close, g.span_close(), false);
                    }
                }
                TokenTree::Punct(p) => self.push(
                    &p.as_char().to_string(),
                    p.span(),
                    p.spacing() == Spacing::Joint,
                ),
                TokenTree::Ident(i) => self.push(&i.to_string(), i.span(), false),
                TokenTree::Literal(l) => self.push(&l.to_string(), l.span(), false),
            }
        }
    }

    /// The span of the first token a byte range touches (the last token for the end of input).
    fn span_of(&self, range: &std::ops::Range<usize>) -> Span {
        let end = range.end.max(range.start + 1);
        self.tokens
            .iter()
            .find(|(r, _)| r.end > range.start && r.start < end)
            .or(self.tokens.last())
            .map_or(self.all, |(_, s)| *s)
    }

    /// An identifier for tensor `name` spanned like its first use, so that it resolves to the
    /// user's variable and a missing variable is reported there.
    fn ident(&self, name: &str, at: &std::ops::Range<usize>) -> proc_macro2::Ident {
        proc_macro2::Ident::new(name, self.span_of(at))
    }
}

fn expand(source: &Source) -> Result<TokenStream2, Diagnostic> {
    let stmt = parse::program(&source.text, 0)?;
    let checked = check::check(stmt, &Dims::new())?;
    let kernel = lower::lower(&checked).map_err(|e| cli::lower_diagnostic(&e))?;
    let kernel_fn = codegen::emit(&kernel);
    let inputs = kernel.inputs();
    let signature = signature(&checked, &inputs);
    let bindings: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let var = format_ident!("__tessera_in{}", k);
            let span = &checked.tensor(name).expect("input is a tensor").span;
            let user = source.ident(name, &(span.start..span.start + name.len()));
            quote! { let #var: &::tessera_formats::Tensor<_, _> = &#user; }
        })
        .collect();
    let vars: Vec<_> = (0..inputs.len())
        .map(|k| format_ident!("__tessera_in{}", k))
        .collect();
    Ok(quote! {
        {
            #[allow(clippy::all, unused, non_snake_case)]
            mod __tessera_kernel {
                #kernel_fn
            }
            const __TESSERA_SIGNATURE: ::tessera_compiler::bind::Signature<'static> = #signature;
            #(#bindings)*
            match __TESSERA_SIGNATURE.bind(&[#((#vars.dims(), #vars.format())),*]) {
                ::core::result::Result::Ok(__out_dims) => ::core::result::Result::Ok(
                    __tessera_kernel::kernel(&[#(#vars),*], &__out_dims)
                ),
                ::core::result::Result::Err(e) => ::core::result::Result::Err(e),
            }
        }
    })
}

/// The `bind::Signature` literal: per kernel input (and the output) its format and the
/// index variables of its first use.
fn signature(c: &Checked, inputs: &[&str]) -> TokenStream2 {
    let operand = |name: &str| {
        let info = c
            .tensor(name)
            .expect("kernel inputs are tensors of the statement");
        let access = c.uses(name).into_iter().next().expect("a tensor is used");
        let format = info.format.to_string();
        let vars = access.indices.iter().map(|i| i.name.as_str());
        quote! {
            ::tessera_compiler::bind::Operand { name: #name, format: #format, vars: &[#(#vars),*] }
        }
    };
    let output = operand(&c.output().name);
    let ins = inputs.iter().map(|n| operand(n));
    quote! {
        ::tessera_compiler::bind::Signature { output: #output, inputs: &[#(#ins),*] }
    }
}
