//! Crate paths in the expansion: everything the expansion names is reached through the
//! `tessera` facade, so a user's `Cargo.toml` lists `tessera` and nothing else.
//!
//! Kernels from `tessera_compiler::codegen` name the crates they use by absolute paths
//! (`::tessera_formats::Tensor`, `::rayon::prelude::*`, an element-wise chunk body's
//! `::tessera_runtime::Chunk`), as a crate that depends on those crates directly needs (the
//! programs `tessera compile` builds, the benches). [`rebase`] rewrites those roots to the
//! facade's re-exports: it only touches a leading `::` (not preceded by a name other than a
//! keyword, nor by `>`) followed by one of the [`ROOTS`].

use proc_macro2::{Group, Ident, Punct, Spacing, Span, TokenStream, TokenTree};

/// The facade's module of re-exports for expansions (`tessera::__private`).
pub const PRIVATE: [&str; 2] = ["tessera", "__private"];

/// The crate roots generated code names, all re-exported under [`PRIVATE`].
const ROOTS: [&str; 3] = ["tessera_formats", "rayon", "tessera_runtime"];

/// Keywords a path may follow (`use ::rayon::prelude::*`); after any other name, `::`
/// continues a path (`a::rayon`).
const KEYWORDS: [&str; 21] = [
    "as", "async", "const", "dyn", "else", "for", "if", "impl", "in", "let", "match", "move",
    "mut", "pub", "ref", "return", "static", "type", "unsafe", "use", "where",
];

/// `::tessera::__private` (with call-site spans).
pub fn private() -> TokenStream {
    let mut out = TokenStream::new();
    for name in PRIVATE {
        push_path_sep(&mut out);
        out.extend([TokenTree::Ident(Ident::new(name, Span::call_site()))]);
    }
    out
}

/// `tokens` with every `::ROOT` (for a root in [`ROOTS`]) replaced by
/// `::tessera::__private::ROOT`.
pub fn rebase(tokens: TokenStream) -> TokenStream {
    let tts: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = TokenStream::new();
    let mut k = 0;
    while k < tts.len() {
        if let [TokenTree::Punct(a), TokenTree::Punct(b), TokenTree::Ident(root), ..] = &tts[k..] {
            let sep = a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':';
            let leading = match k.checked_sub(1).map(|p| &tts[p]) {
                Some(TokenTree::Ident(i)) => KEYWORDS.iter().any(|kw| i == kw),
                // `Vec::<u8>::new` continues a path; `-> ::rayon::…` starts one.
                Some(TokenTree::Punct(p)) if p.as_char() == '>' => {
                    matches!(k.checked_sub(2).map(|q| &tts[q]),
                        Some(TokenTree::Punct(q)) if q.as_char() == '-' && q.spacing() == Spacing::Joint)
                }
                _ => true,
            };
            if sep && leading && ROOTS.iter().any(|r| root == r) {
                out.extend(private());
                push_path_sep(&mut out);
                out.extend([TokenTree::Ident(root.clone())]);
                k += 3;
                continue;
            }
        }
        out.extend([match &tts[k] {
            TokenTree::Group(g) => {
                let mut inner = Group::new(g.delimiter(), rebase(g.stream()));
                inner.set_span(g.span());
                TokenTree::Group(inner)
            }
            other => other.clone(),
        }]);
        k += 1;
    }
    out
}

fn push_path_sep(out: &mut TokenStream) {
    out.extend([
        TokenTree::Punct(Punct::new(':', Spacing::Joint)),
        TokenTree::Punct(Punct::new(':', Spacing::Alone)),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebases_crate_roots_only() {
        let ts: TokenStream = "use ::rayon::prelude::*; fn f(x: &::tessera_formats::Tensor<f64>) \
                               -> ::tessera_formats::Format { Vec::<u8>::new(); a::rayon::b(); }"
            .parse()
            .unwrap();
        let got = rebase(ts).to_string();
        assert!(
            got.contains(":: tessera :: __private :: rayon :: prelude"),
            "{got}"
        );
        assert!(
            got.contains(":: tessera :: __private :: tessera_formats :: Tensor"),
            "{got}"
        );
        assert!(got.contains("Vec ::< u8 >:: new"), "{got}");
        assert!(got.contains("a :: rayon :: b"), "{got}");
    }
}
