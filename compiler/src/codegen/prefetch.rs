//! Prefetch in loops that gather from dense tensors at a sparse level's coordinates: SpMV's
//! `x(j)`, SpMM's row `B(k,:)`, SDDMM's `D(j,:)` at each nonzero. Such a nest is emitted in up
//! to three copies (`tessera_formats::gather`, which explains why and when each pays): plain;
//! streaming, its walks over a last level asking for their own coordinates and values
//! `STREAM` positions on; and look-ahead, walking the coordinates `AHEAD` positions on beside
//! its own to ask for the lines it will gather then. Which one runs is decided once per call
//! from the data (`gather::decide`); all compute the same operations in the same order.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};
use tessera_formats::gather::Prefetch;
use tessera_formats::LevelType;

use super::Gen;
use crate::ir::{Domain, LevelRef, Nest};

/// How a loop over one level's positions `lo..hi` walks them: `for #item in #items { #bind
/// ... }`, `bind` naming the loop variable (and the zipped value).
pub(super) struct Walk {
    pub items: TokenStream,
    pub item: TokenStream,
    pub bind: TokenStream,
    /// References `item` binds to the elements of the arrays the walk streams through (a
    /// last level's coordinate and value), which the streaming copy asks for ahead.
    pub streams: Vec<TokenStream>,
}

impl Gen<'_> {
    /// The loop over positions `lo..hi` of loop `d`'s level (after `narrow`), visiting each
    /// coordinate with `visit` under `label`; in the look-ahead copy of a nest
    /// ([`Gen::prefetch_choice`]), asking for the lines of what it gathers `AHEAD` positions
    /// on (fewer within `AHEAD` of the level's end), in the streaming copy for the lines of
    /// `walk.streams` `STREAM` positions on.
    pub(super) fn walk_level(
        &self,
        nest: &Nest,
        d: usize,
        (lo, hi, narrow): (TokenStream, TokenStream, TokenStream),
        walk: Walk,
        label: &syn::Lifetime,
        visit: &TokenStream,
    ) -> TokenStream {
        let Walk {
            items,
            item,
            bind,
            streams,
        } = walk;
        let r = nest.loops[d].iterate[0];
        let gathered = self.gathered(nest, d);
        if self.prefetch != Prefetch::Ahead || gathered.is_empty() {
            let streams = if self.prefetch == Prefetch::Stream {
                streams
            } else {
                Vec::new()
            };
            return quote! {
                let (lo, hi) = (#lo, #hi);
                #narrow
                for #item in #items {
                    #(::tessera_formats::gather::prefetch_stream(#streams);)*
                    #bind
                    #label: { #visit }
                }
            };
        }
        let crd = self.lvl(self.tensor_of(r.access), r.level, "crd");
        let hints: Vec<TokenStream> = gathered.iter().map(|g| self.hint(*g)).collect();
        // One loop, the body once: within `AHEAD` of the level's end the window slides back
        // (`shift` shrinks to 0, hinting at positions already near), so no second copy of the
        // body is needed there (with one per gathering level, a nest's copies would double
        // per level). `hi <= crd.len()` in a valid tensor; were it not, `shift` is 0 and the
        // slice panics as the plain loop's own `crd[lo..hi]` would.
        quote! {
            let (lo, hi) = (#lo, #hi);
            #narrow
            let shift = ::tessera_formats::gather::AHEAD.min(#crd.len().saturating_sub(hi));
            let ahead = #crd[lo + shift..hi + shift].iter();
            for (#item, upcoming) in (#items).zip(ahead) {
                ::tessera_formats::gather::prefetch_past(upcoming);
                let upcoming: usize = upcoming.to_usize();
                #(#hints)*
                #bind
                #label: { #visit }
            }
        }
    }

    /// A nest that gathers, as copies (see the module's documentation), one picked per call
    /// from its flags by `gather::combine` (look-ahead where a gather is far, streaming where
    /// one reaches past level 1 into the caches, plain otherwise), so a kernel whose gathers
    /// stay in level 1 runs the loops it ran before prefetching existed, instruction for
    /// instruction. `None` for a nest that does not gather, and inside a copy.
    pub(super) fn prefetch_choice(&self, nest: &Nest) -> Option<TokenStream> {
        if self.prefetch != Prefetch::Plain {
            return None;
        }
        let flags: Vec<Ident> = self
            .nest_gathers(nest)
            .into_iter()
            .map(|(r, g)| self.prefetch_flag(r, g))
            .collect();
        if flags.is_empty() {
            return None;
        }
        let plain = self.plain_nest(nest);
        let plain_text = plain.to_string();
        // A copy that comes out the same as the plain one is not emitted (its case runs the
        // plain copy): a nest whose only gathering loop is not walked ahead (the outer loop
        // over threads of a parallel kernel), or that walks no last level with its values.
        let arms: Vec<TokenStream> = [Prefetch::Ahead, Prefetch::Stream]
            .into_iter()
            .filter_map(|prefetch| {
                let copy = Gen { prefetch, ..*self }.nest(nest);
                let name = format_ident!("{prefetch:?}");
                (copy.to_string() != plain_text)
                    .then(|| quote!(::tessera_formats::gather::Prefetch::#name => { #copy }))
            })
            .collect();
        if arms.is_empty() {
            return Some(plain);
        }
        Some(quote! {
            match ::tessera_formats::gather::combine(&[#(#flags),*]) {
                #(#arms)*
                _ => { #plain }
            }
        })
    }

    /// The dense tensors loop `d` gathers from at its own coordinate: every level dense, the
    /// first located at this loop's variable (a vector's value, a matrix's row), read by the
    /// nest. Only loops over one level's unique coordinates.
    fn gathered(&self, nest: &Nest, d: usize) -> Vec<LevelRef> {
        let lp = &nest.loops[d];
        if !matches!(lp.domain, Domain::Single) || self.non_unique(lp.iterate[0]) {
            return Vec::new();
        }
        lp.locate
            .iter()
            .copied()
            .filter(|r| {
                let t = self.tensor_of(r.access);
                r.level == 0
                    && self.k.level_var(*r) == lp.var
                    && r.access != self.k.output_access
                    && self.required(nest, r.access)
                    && self.k.tensors[t]
                        .format
                        .levels()
                        .iter()
                        .all(|l| *l == LevelType::Dense)
            })
            .collect()
    }

    /// The values of one slice of gathered tensor `g` below its first level: the product of
    /// its other levels' sizes (`1usize` for a vector).
    fn row_len(&self, g: LevelRef) -> TokenStream {
        let t = self.tensor_of(g.access);
        let sizes = (1..self.k.tensors[t].format.levels().len()).map(|l| self.lvl(t, l, "size"));
        // Saturating: a tensor with no values may still have huge trailing dimensions.
        quote!((1usize #(.saturating_mul(#sizes))*))
    }

    /// Asks for the lines of `g` at coordinate `upcoming` (bound by [`Gen::walk_level`]).
    fn hint(&self, g: LevelRef) -> TokenStream {
        let t = self.tensor_of(g.access);
        let (vals, off) = (self.vals(t), self.lvl(t, 0, "off"));
        if self.k.tensors[t].format.levels().len() == 1 {
            return quote!(::tessera_formats::gather::prefetch(#vals, upcoming.wrapping_sub(#off)););
        }
        let len = self.row_len(g);
        quote! {
            ::tessera_formats::gather::prefetch_row(#vals, upcoming.wrapping_sub(#off).wrapping_mul(#len), #len);
        }
    }

    /// The local holding the copy the gathers from `g` at level `r`'s coordinates ask for (a
    /// `gather::Prefetch`, see [`Gen::gather_flags`]).
    fn prefetch_flag(&self, r: LevelRef, g: LevelRef) -> Ident {
        let (t, w) = (self.tensor_of(r.access), self.tensor_of(g.access));
        format_ident!("prefetch_t{}_l{}_t{}", t, r.level, w)
    }

    /// Every `(iterated level, gathered tensor)` pair of one nest's loops, once each.
    fn nest_gathers(&self, nest: &Nest) -> Vec<(LevelRef, LevelRef)> {
        let pairs = (0..nest.loops.len()).flat_map(|d| {
            let r = nest.loops[d].iterate.first().copied();
            let r = move || r.expect("a gathering loop iterates a level");
            self.gathered(nest, d).into_iter().map(move |g| (r(), g))
        });
        self.unique(pairs)
    }

    /// Every pair of the kernel's nests, once each.
    fn gathers(&self) -> Vec<(LevelRef, LevelRef)> {
        self.unique(self.k.nests.iter().flat_map(|n| self.nest_gathers(n)))
    }

    /// `pairs` without repeats of a flag (the same iterated array and gathered tensor).
    fn unique(
        &self,
        pairs: impl Iterator<Item = (LevelRef, LevelRef)>,
    ) -> Vec<(LevelRef, LevelRef)> {
        let mut out: Vec<(LevelRef, LevelRef)> = Vec::new();
        for (r, g) in pairs {
            let flag = self.prefetch_flag(r, g);
            if out
                .iter()
                .all(|(r2, g2)| self.prefetch_flag(*r2, *g2) != flag)
            {
                out.push((r, g));
            }
        }
        out
    }

    /// Decides, once per call, each [`Gen::gathers`] pair's flag (`gather::decide` over the
    /// level's whole coordinate array, in slices of the gathered tensor).
    pub(super) fn gather_flags(&self) -> TokenStream {
        let flags = self.gathers().into_iter().map(|(r, g)| {
            let flag = self.prefetch_flag(r, g);
            let crd = self.lvl(self.tensor_of(r.access), r.level, "crd");
            let vals = self.vals(self.tensor_of(g.access));
            let len = self.row_len(g);
            quote! {
                let #flag: ::tessera_formats::gather::Prefetch = {
                    let len: usize = #len.max(1);
                    let bytes = len.saturating_mul(::std::mem::size_of::<V>());
                    ::tessera_formats::gather::decide(#crd, #vals.len() / len, bytes)
                };
            }
        });
        quote!(#(#flags)*)
    }

    /// The flags as parameters of the functions the nests are put in.
    pub(super) fn gather_params(&self) -> Vec<(Ident, TokenStream)> {
        let pairs = self.gathers().into_iter();
        pairs
            .map(|(r, g)| {
                (
                    self.prefetch_flag(r, g),
                    quote!(::tessera_formats::gather::Prefetch),
                )
            })
            .collect()
    }
}
