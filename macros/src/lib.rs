//! The `tensor!` macro: Einstein notation compiled to a sparse kernel at build time.
//!
//! Use it through the `tessera` facade (`tessera::tensor`), which is the only dependency a
//! program needs:
//!
//! ```ignore
//! use tessera::{tensor, BindError, Tensor};
//! fn spmv(A: &Tensor<f64>, x: &Tensor<f64>) -> Result<Tensor<f64>, BindError> {
//!     tensor!(y(i) = A(i,j) * x(j); A: csr)
//! }
//! ```
//!
//! The input is a statement in the language of `docs/language.md`: an assignment, then
//! `;`-separated formats (`A: csr`, `B: ds:1,0`) and schedule directives (`parallelize(i)`).
//! Every tensor on the right-hand side names a `tessera::Tensor<V, I>` (or a reference to
//! one) in scope. The expansion checks, when it runs, that each tensor has the declared
//! format and that dimensions agree (`tessera_kernel_rt::bind`), then calls the generated
//! kernel; it evaluates to `Result<Tensor<V, I>, BindError>` holding the output.
//! `y(i) += ...` reads the tensor `y` in scope and returns the updated tensor.
//!
//! Errors in the statement (syntax, ranks, formats, schedule, impossible loop orders) are
//! `compile_error!`s at the tokens they are about. The expansion names only paths under
//! `::tessera::__private` (see the `paths` module), so this crate's own dependencies — the
//! compiler and its front end — run inside rustc and never link into the user's program.

use proc_macro::TokenStream;
use proc_macro2::{
    Delimiter, Group, Literal, Punct, Spacing, Span, TokenStream as TokenStream2, TokenTree,
};
use quote::{format_ident, quote, quote_spanned};
use tessera_compiler::check::{self, Dims};
use tessera_compiler::diagnostics::Diagnostic;
use tessera_compiler::ir::{DimSource, Kernel};
use tessera_compiler::{codegen, diagnostics, lower, parse, plan};

mod paths;

#[proc_macro]
pub fn tensor(input: TokenStream) -> TokenStream {
    let (runtime, statement) = match split_runtime(input.into()) {
        Ok(split) => split,
        Err(error) => return error.into(),
    };
    let source = Source::from_tokens(statement);
    let expanded = match runtime {
        None => expand(&source),
        Some(rt) => expand_on_runtime(&source, rt),
    };
    match expanded {
        Ok(ts) => ts.into(),
        Err(d) => compile_error(&d, source.span_range(&d.span)).into(),
    }
}

/// `RT => STATEMENT`: the runtime the statement runs on (a name, or an expression in
/// parentheses), when the input starts with one.
/// A runtime given as anything else (`self.rt => ...`, `&rt => ...`) is a compile error at
/// it, rather than the statement parser's "unexpected character" at its first token.
fn split_runtime(ts: TokenStream2) -> Result<(Option<TokenTree>, TokenStream2), TokenStream2> {
    let tts: Vec<TokenTree> = ts.into_iter().collect();
    let arrow = |w: &[TokenTree]| {
        matches!(w, [TokenTree::Punct(a), TokenTree::Punct(b)]
            if a.as_char() == '=' && a.spacing() == Spacing::Joint && b.as_char() == '>')
    };
    if let [first @ (TokenTree::Ident(_) | TokenTree::Group(_)), ..] = &tts[..] {
        if tts.len() >= 3 && arrow(&tts[1..3]) {
            return Ok((Some(first.clone()), tts[3..].iter().cloned().collect()));
        }
    }
    match tts.windows(2).position(arrow) {
        Some(0) => Err(misplaced_runtime(&tts[..2], None)),
        Some(k) => Err(misplaced_runtime(&tts[..k], Some(&tts[..k]))),
        None => Ok((None, tts.into_iter().collect())),
    }
}

/// The error at `at` for the tokens before a `=>` (`runtime`, none when `=>` comes first)
/// that are not a runtime the macro can take.
fn misplaced_runtime(at: &[TokenTree], runtime: Option<&[TokenTree]>) -> TokenStream2 {
    let d = match runtime {
        Some(runtime) => {
            let text: TokenStream2 = runtime.iter().cloned().collect();
            Diagnostic::new(
                "the runtime before `=>` must be a name or an expression in parentheses",
                0..0,
            )
            .label("the runtime")
            .hint(format!("write `tensor!(({text}) => STATEMENT)`"))
        }
        None => Diagnostic::new("the runtime is missing before `=>`", 0..0)
            .label("no runtime")
            .hint(
                "write `tensor!(rt => STATEMENT)` with the `tessera::runtime::Runtime` to run on",
            ),
    };
    compile_error(&d, (at[0].span(), at[at.len() - 1].span()))
}

/// `::core::compile_error!{"..."}` covering `start..end`: the path carries the first span and
/// the braces the last, so rustc underlines the whole range on stable (as `syn` does).
fn compile_error(d: &Diagnostic, (start, end): (Span, Span)) -> TokenStream2 {
    let mut msg = d.message.clone();
    if !d.label.is_empty() {
        msg += &format!("\n  = note: {}", d.label);
    }
    if let Some(h) = &d.hint {
        msg += &format!("\n  = help: {h}");
    }
    let punct = |c: char, spacing: Spacing| {
        let mut p = Punct::new(c, spacing);
        p.set_span(start);
        TokenTree::Punct(p)
    };
    let mut lit = Literal::string(&msg);
    lit.set_span(end);
    let mut body = Group::new(
        Delimiter::Brace,
        TokenStream2::from(TokenTree::Literal(lit)),
    );
    body.set_span(end);
    TokenStream2::from_iter([
        punct(':', Spacing::Joint),
        punct(':', Spacing::Alone),
        TokenTree::Ident(proc_macro2::Ident::new("core", start)),
        punct(':', Spacing::Joint),
        punct(':', Spacing::Alone),
        TokenTree::Ident(proc_macro2::Ident::new("compile_error", start)),
        punct('!', Spacing::Alone),
        TokenTree::Group(body),
    ])
}

/// The macro input as text for the parser, with the span of every token's byte range.
struct Source {
    text: String,
    tokens: Vec<(std::ops::Range<usize>, Span)>,
    /// The kind of the last token, which decides the space before the next one.
    last: Option<Kind>,
    /// Where to report when the input is empty.
    all: Span,
}

/// What a token is, for the spacing of the text (which runtime errors and task names quote).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// A name or a number.
    Word,
    Open,
    Close,
    /// Punctuation joined to the next token (`+` of `+=`, `.` of `.5`).
    Joint,
    /// `,` `;` `:`, written against what they follow.
    Separator,
    /// Other punctuation (`=`, `*`, an unjoined `+`).
    Operator,
}

impl Kind {
    /// Whether a space separates a token of kind `self` from the next one, of kind `next`.
    /// Words stay apart (`2 x` is not `2x`), as does punctuation Rust did not join (`+ =`
    /// is not `+=`); otherwise spaces only make the text read like the source.
    fn space_before(self, next: Kind) -> bool {
        !matches!(
            (self, next),
            (Kind::Open | Kind::Joint, _)
                | (_, Kind::Close | Kind::Separator)
                | (Kind::Word | Kind::Close, Kind::Open)
        )
    }
}

impl Source {
    fn from_tokens(ts: TokenStream2) -> Source {
        let mut s = Source {
            text: String::new(),
            tokens: Vec::new(),
            last: None,
            all: Span::call_site(),
        };
        s.push_stream(ts);
        s
    }

    fn push(&mut self, text: &str, span: Span, kind: Kind) {
        if self.last.is_some_and(|last| last.space_before(kind)) {
            self.text.push(' ');
        }
        let start = self.text.len();
        self.text += text;
        self.tokens.push((start..self.text.len(), span));
        self.last = Some(kind);
    }

    fn push_stream(&mut self, ts: TokenStream2) {
        for tt in ts {
            match tt {
                TokenTree::Group(g) => {
                    let (open, close) = match g.delimiter() {
                        Delimiter::Parenthesis => ("(", ")"),
                        Delimiter::Bracket => ("[", "]"),
                        Delimiter::Brace => ("{", "}"),
                        // An invisible group is a `macro_rules!` fragment (`$e:expr`), one
                        // operand in Rust: `$e * 2` with `$e` = `a(i) + b(i)` is `(a(i) +
                        // b(i)) * 2`, so it keeps its parentheses here (a single token needs
                        // none, and a name must stay a name).
                        Delimiter::None if g.stream().into_iter().nth(1).is_some() => ("(", ")"),
                        Delimiter::None => ("", ""),
                    };
                    if !open.is_empty() {
                        self.push(open, g.span_open(), Kind::Open);
                    }
                    self.push_stream(g.stream());
                    if !close.is_empty() {
                        self.push(close, g.span_close(), Kind::Close);
                    }
                }
                TokenTree::Punct(p) => {
                    let kind = match p.as_char() {
                        // Rust splits the constant `.5` into `.` and `5`: kept together, it
                        // is one number again (`.` means nothing else in a statement).
                        '.' => Kind::Joint,
                        _ if p.spacing() == Spacing::Joint => Kind::Joint,
                        ',' | ';' | ':' => Kind::Separator,
                        _ => Kind::Operator,
                    };
                    self.push(&p.as_char().to_string(), p.span(), kind);
                }
                TokenTree::Ident(i) => self.push(&i.to_string(), i.span(), Kind::Word),
                TokenTree::Literal(l) => self.push(&l.to_string(), l.span(), Kind::Word),
            }
        }
    }

    /// The spans of the first and last tokens a byte range touches (the last token of the
    /// input for an error at its end).
    fn span_range(&self, range: &std::ops::Range<usize>) -> (Span, Span) {
        let end = range.end.max(range.start + 1);
        let touched: Vec<Span> = self
            .tokens
            .iter()
            .filter(|(r, _)| r.end > range.start && r.start < end)
            .map(|(_, s)| *s)
            .collect();
        match (touched.first(), touched.last()) {
            (Some(&first), Some(&last)) => (first, last),
            _ => {
                let s = self.tokens.last().map_or(self.all, |(_, s)| *s);
                (s, s)
            }
        }
    }

    /// The span of the first token a byte range touches.
    fn span_of(&self, range: &std::ops::Range<usize>) -> Span {
        self.span_range(range).0
    }

    /// An identifier for tensor `name` spanned like its first use, so that it resolves to the
    /// user's variable and a missing variable is reported there.
    fn ident(&self, name: &str, at: &std::ops::Range<usize>) -> proc_macro2::Ident {
        proc_macro2::Ident::new(name, self.span_of(at))
    }
}

/// The statement checked and lowered, with errors at their spans. `f(x(i))` may call a Rust
/// function `f` in scope.
fn front(source: &Source) -> Result<(check::Checked, Kernel), Diagnostic> {
    refuse_hash(source)?;
    refuse_rust_numbers(source)?;
    let stmt = parse::program(&source.text, 0)?;
    let checked = check::check_tensor_macro(stmt, &Dims::new())?;
    if checked.inputs().is_empty() {
        let rhs = &checked.statement.assignment.rhs;
        return Err(Diagnostic::new(
            "`tensor!` needs at least one input tensor",
            rhs.span.clone(),
        )
        .label("no tensor here")
        .hint("the value and coordinate types of the output come from the input tensors"));
    }
    let kernel = lower::lower(&checked).map_err(|e| {
        let mut d = diagnostics::lower_diagnostic(&e);
        // Lowering phrases format advice as a command-line flag; here it is a `NAME: FMT` item.
        d.hint = d.hint.map(|h| h.replace("(-f ", "("));
        d
    })?;
    Ok((checked, kernel))
}

/// Refuses a `#` anywhere in the input. In the statement language `#` starts a comment that
/// runs to the end of the line, and the macro's tokens are joined into one line: a stray `#`
/// (or a raw identifier `r#x`) would silently drop the rest of the statement, its formats
/// and schedule included.
fn refuse_hash(source: &Source) -> Result<(), Diagnostic> {
    let Some(at) = source.text.find('#') else {
        return Ok(());
    };
    let token = (source.tokens.iter())
        .map(|(range, _)| range.clone())
        .find(|range| range.contains(&at))
        .unwrap_or(at..at + 1);
    let raw = source.text[token.clone()].starts_with("r#");
    let d = Diagnostic::new(
        "`#` cannot appear in a `tensor!` statement",
        if raw { token } else { at..at + 1 },
    );
    Err(if raw {
        d.label("a raw identifier")
            .hint("name the tensor or function with a plain identifier (rename the variable)")
    } else {
        d.label("here").hint(
            "comments inside `tensor!` are Rust comments (`// ...`); `#` would comment out \
             the rest of the statement",
        )
    })
}

/// Refuses a Rust number the statement language does not read (`2.0f32`, `1_000`, `0x10`):
/// the parser stopped inside it and advised a missing `*`.
fn refuse_rust_numbers(source: &Source) -> Result<(), Diagnostic> {
    for (range, _) in &source.tokens {
        let token = &source.text[range.clone()];
        if !token.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        if number_prefix(token) == token.len() {
            continue;
        }
        // `1_000` is `1000`, `2.0f32` is `2.0`; `0x10` has no decimal spelling here.
        let digits = token.replace('_', "");
        let number = &digits[..number_prefix(&digits)];
        let radix = matches!(
            digits.as_bytes().get(number.len()),
            Some(b'x' | b'o' | b'b')
        );
        let write = match radix {
            true => String::new(),
            false => format!("write `{number}`: "),
        };
        return Err(Diagnostic::new(
            format!("`{token}` is not a constant of the statement language"),
            range.clone(),
        )
        .label("a Rust number")
        .hint(format!(
            "{write}a constant is a plain decimal number (`2`, `2.5`, `1e-3`), without a type \
             suffix or `_`, and takes the tensors' value type"
        )));
    }
    Ok(())
}

/// The length of the decimal number (`12`, `1.5`, `2.`, `1e-3`) that `token` starts with.
fn number_prefix(token: &str) -> usize {
    let b = token.as_bytes();
    let digits = |mut k: usize| {
        while k < b.len() && b[k].is_ascii_digit() {
            k += 1;
        }
        k
    };
    let mut k = digits(0);
    if b.get(k) == Some(&b'.') {
        k = digits(k + 1);
    }
    if matches!(b.get(k), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(b.get(k + 1), Some(b'+' | b'-')));
        let exponent = digits(k + 1 + sign);
        if exponent > k + 1 + sign {
            k = exponent;
        }
    }
    k
}

/// The statement's signature and the bindings of its input tensors (`__tessera_in{k}`, each
/// a reference of type `ty<_, _>` to the user's variable).
struct Bound {
    signature: TokenStream2,
    bindings: Vec<TokenStream2>,
    vars: Vec<proc_macro2::Ident>,
}

fn bind_inputs(
    source: &Source,
    checked: &check::Checked,
    kernel: &Kernel,
    ty: TokenStream2,
) -> Result<Bound, Diagnostic> {
    let private = paths::private();
    let inputs = kernel.inputs();
    let signature: TokenStream2 =
        codegen::signature_source(checked, &inputs, &format!("{private}::bind"))
            .parse()
            .map_err(|e| {
                Diagnostic::new(format!("internal error: bad signature source: {e}"), 0..0)
            })?;
    let bindings: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let var = format_ident!("__tessera_in{}", k);
            let span = &checked.tensor(name).expect("input is a tensor").span;
            let user = source.ident(name, &(span.start..span.start + name.len()));
            if k == 0 {
                return quote! { let #var: &#ty<_, _> = &#user; };
            }
            // Every input has the first one's value and coordinate types; unified here, at
            // the operand's span, a mismatch is reported at that operand (`expected
            // &Tensor<f32>, found &Tensor<f64>`), not at the whole macro.
            let first = format_ident!("__tessera_in0");
            quote_spanned! {user.span()=>
                let [_, #var]: [&#ty<_, _>; 2] = [#first, &#user];
            }
        })
        .collect();
    let vars: Vec<_> = (0..inputs.len())
        .map(|k| format_ident!("__tessera_in{}", k))
        .collect();
    let mut bindings = bindings;
    bindings.extend(infinite_fill(source, checked));
    bindings.extend(fractions(source, checked));
    Ok(Bound {
        signature,
        bindings,
        vars,
    })
}

/// `bind::check_extents` over the index variables the kernel keeps an array over (see
/// `codegen::dense_extents`), each extent read from the input or output dimension it comes
/// from; a closure of `__out_dims` would capture nothing else.
fn extents_check(kernel: &Kernel) -> TokenStream2 {
    let private = paths::private();
    let extents = codegen::dense_extents(kernel)
        .into_iter()
        .map(|(var, dim)| {
            let dim = match dim {
                DimSource::Input { slot, mode } => {
                    let input = format_ident!("__tessera_in{}", slot);
                    quote!(#input.dims()[#mode])
                }
                DimSource::Output { mode } => quote!(__out_dims[#mode]),
            };
            quote!((#var, #dim))
        });
    quote!(#private::bind::check_extents(&[#(#extents),*]))
}

/// For a `min`/`max` reduction, whose missing entries are ±∞: a check that the value type
/// holds infinities (not `i64`), a type error at the reduction otherwise.
fn infinite_fill(source: &Source, checked: &check::Checked) -> Option<TokenStream2> {
    if checked.reduce.fill().is_finite() {
        return None;
    }
    let private = paths::private();
    let at = source.span_of(&checked.statement.assignment.rhs.span);
    Some(quote_spanned! {at=> #private::infinite_fill(__tessera_in0); })
}

/// For a statement with a fractional constant: a check that the value type holds fractions
/// (not `i64`, which would truncate it), a type error at the constant otherwise.
fn fractions(source: &Source, checked: &check::Checked) -> Option<TokenStream2> {
    let constant = fractional_constant(&checked.statement.assignment.rhs)?;
    let private = paths::private();
    let at = source.span_of(&constant.span);
    Some(quote_spanned! {at=> #private::fractions(__tessera_in0); })
}

/// The first constant of `e` that is not an integer.
fn fractional_constant(e: &tessera_compiler::ast::Expr) -> Option<&tessera_compiler::ast::Expr> {
    use tessera_compiler::ast::ExprKind;
    match &e.kind {
        ExprKind::Const(c) if c.fract() != 0.0 => Some(e),
        ExprKind::Access(_) | ExprKind::Const(_) => None,
        ExprKind::Neg(x) | ExprKind::Call(_, x) | ExprKind::UserCall(_, x) => {
            fractional_constant(x)
        }
        ExprKind::Reduce(_, _, x) => fractional_constant(x),
        ExprKind::Binary(_, a, b) => fractional_constant(a).or_else(|| fractional_constant(b)),
    }
}

/// The caller's functions a statement calls (`f(x(i))`), by name, each at its first call.
fn user_calls(e: &tessera_compiler::ast::Expr, out: &mut Vec<(String, std::ops::Range<usize>)>) {
    use tessera_compiler::ast::ExprKind;
    match &e.kind {
        ExprKind::UserCall(name, x) => {
            if !out.iter().any(|(n, _)| *n == name.name) {
                out.push((name.name.clone(), name.span.clone()));
            }
            user_calls(x, out);
        }
        ExprKind::Access(_) | ExprKind::Const(_) => {}
        ExprKind::Neg(x) | ExprKind::Call(_, x) | ExprKind::Reduce(_, _, x) => user_calls(x, out),
        ExprKind::Binary(_, a, b) => {
            user_calls(a, out);
            user_calls(b, out);
        }
    }
}

/// The caller's functions, as `&dyn Fn(V) -> V` in the kernel's order, named at their call
/// so that a type error points there.
fn user_fn_refs(source: &Source, checked: &check::Checked, kernel: &Kernel) -> Vec<TokenStream2> {
    let mut calls = Vec::new();
    user_calls(&checked.statement.assignment.rhs, &mut calls);
    kernel
        .user_functions
        .iter()
        .map(|name| {
            let span = &calls.iter().find(|(n, _)| n == name).expect("called").1;
            let f = source.ident(name, span);
            quote!({ let f: &(dyn Fn(_) -> _ + Sync) = &#f; f })
        })
        .collect()
}

fn expand(source: &Source) -> Result<TokenStream2, Diagnostic> {
    let (checked, kernel) = front(source)?;
    let fns = user_fn_refs(source, &checked, &kernel);
    let user_fns = if fns.is_empty() {
        quote!()
    } else {
        quote!(&[#(#fns),*],)
    };
    let kernel_fn = paths::rebase(codegen::emit(&kernel));
    let private = paths::private();
    let Bound {
        signature,
        bindings,
        vars,
    } = bind_inputs(
        source,
        &checked,
        &kernel,
        quote!(#private::tessera_formats::Tensor),
    )?;
    let extents = extents_check(&kernel);
    Ok(quote! {
        {
            #[allow(clippy::all, unused, non_snake_case)]
            mod __tessera_kernel {
                #kernel_fn
            }
            const __TESSERA_SIGNATURE: #private::bind::Signature<'static> = #signature;
            // This call site's parsed formats (one `static` per expansion).
            static __TESSERA_FORMATS: #private::bind::FormatCache =
                #private::bind::FormatCache::new();
            #(#bindings)*
            match __TESSERA_SIGNATURE
                .bind_cached(&__TESSERA_FORMATS, &[#((#vars.dims(), #vars.format())),*])
                .and_then(|__out_dims| #extents.map(|()| __out_dims))
            {
                ::core::result::Result::Ok(__out_dims) => ::core::result::Result::Ok(
                    __tessera_kernel::kernel(&[#(#vars),*], &__out_dims, #user_fns)
                ),
                ::core::result::Result::Err(e) => ::core::result::Result::Err(e),
            }
        }
    })
}

/// `tensor!(rt => ...)`: the statement's plan runs as block tasks on the runtime `rt`, over
/// `tessera::plans::Stored` tensors, each point running the generated block kernel (an
/// element-wise statement: one element-wise task running the generated chunk body); it
/// evaluates to `Result<Stored<V, I>, PlanRunError>` without waiting for the tasks.
fn expand_on_runtime(source: &Source, rt: TokenTree) -> Result<TokenStream2, Diagnostic> {
    let (checked, kernel) = front(source)?;
    // The plan is made again from the same text when the program runs; refuse here what the
    // planner refuses, at the directive's span.
    plan::plan(&checked, &kernel)?;
    let fingerprint = plan::kernel_fingerprint(&kernel);
    // An element-wise statement is one element-wise task (a chain of them fuses into one
    // loop); any other runs its plan's block tasks.
    let elementwise = plan::on_runtime::is_elementwise(&kernel);
    let (kernel_fn, run, entry) = if elementwise {
        let f = codegen::emit_elementwise(&kernel);
        (f, quote!(run_elementwise), quote!(kernel_chunk))
    } else {
        let f = codegen::emit_block(&kernel);
        (f, quote!(run_text), quote!(kernel_block))
    };
    // With the caller's functions, the entry the runtime calls is a closure handing them to
    // the generated one. It must capture nothing (so it is a `fn` pointer, runs on the
    // runtime's threads after this call returns, and is the same task on every run): the
    // functions must be items or closures that capture nothing, and a capturing closure is a
    // type error at its call in the statement.
    let fns = user_fn_refs(source, &checked, &kernel);
    let entry = match (fns.is_empty(), elementwise) {
        (true, _) => quote!(__tessera_kernel::#entry),
        (false, true) => quote!(|chunk| __tessera_kernel::#entry(chunk, &[#(#fns),*])),
        (false, false) => quote!(|inputs, out_dims, bounds, first, out| {
            __tessera_kernel::#entry(inputs, out_dims, &[#(#fns),*], bounds, first, out)
        }),
    };
    let kernel_fn = paths::rebase(kernel_fn);
    let private = paths::private();
    let Bound {
        signature,
        bindings,
        vars,
    } = bind_inputs(source, &checked, &kernel, quote!(#private::plans::Stored))?;
    let extents = extents_check(&kernel);
    let text = &source.text;
    Ok(quote! {
        {
            #[allow(clippy::all, unused, non_snake_case)]
            mod __tessera_kernel {
                #kernel_fn
            }
            const __TESSERA_SIGNATURE: #private::bind::Signature<'static> = #signature;
            // What this call site works out once: its parsed formats, its kernel and plan,
            // the shapes it ran over (one `static` each per expansion).
            static __TESSERA_FORMATS: #private::bind::FormatCache =
                #private::bind::FormatCache::new();
            static __TESSERA_SITE: #private::plans::Site = #private::plans::Site::new();
            #(#bindings)*
            match __TESSERA_SIGNATURE
                .bind_cached(&__TESSERA_FORMATS, &[#((#vars.dims(), #vars.format())),*])
                .and_then(|__out_dims| #extents.map(|()| __out_dims))
            {
                ::core::result::Result::Ok(__out_dims) => #private::plans::#run(
                    &#rt,
                    &__TESSERA_SITE,
                    #text,
                    #fingerprint,
                    &[#(#vars),*],
                    &__out_dims,
                    #entry,
                ),
                ::core::result::Result::Err(e) => {
                    ::core::result::Result::Err(#private::plans::PlanRunError::from(e))
                }
            }
        }
    })
}
