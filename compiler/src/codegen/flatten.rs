//! Flattened levels: a loop over a compressed level whose coordinate nothing below reads, and
//! whose only work is the loop over the next level of the same tensor, is not emitted; that
//! next loop walks its level's positions under the whole range at once. The children of
//! positions `lo..hi` of a compressed level are positions `pos[lo]..pos[hi]` of the next
//! (`pos` is non-decreasing in a valid tensor), so the same positions are visited in the same
//! order: TTV's `A(i,j) = B(i,j,k) * c(k)` with `A` copying `B`'s first two levels walks `B`'s
//! fibres in one loop, as the hand-written `for p1 in 0..fibres` does, instead of a loop over
//! `i` whose every iteration reads `pos`, `crd` and starts the fibre loop again.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::{mentions, Gen, OutTarget};
use crate::ir::{Domain, LevelRef, Nest};
use tessera_formats::LevelType;

impl Gen<'_> {
    /// Loop `d` flattened into loop `d + 1`, or `None` where that could change what is
    /// visited or computed. Block kernels narrow each loop to the block by binary search within
    /// one parent's sorted coordinates, which a range over several parents is not: never there.
    pub(super) fn flattened(
        &self,
        nest: &Nest,
        d: usize,
        target: OutTarget,
    ) -> Option<TokenStream> {
        let r = self.flattenable(nest, d)?;
        if !self.hoisted_rows(nest, d, target).is_empty() {
            return None;
        }
        let inner = Gen {
            flat: Some(r),
            ..*self
        }
        .run_loop(nest, d + 1, target);
        // The loop over `r` binds its coordinate, its position and its label; where the inner
        // loop still names one of them (an output indexed by the coordinate, a mirrored output
        // written at the position, a `break` to the label), the level is needed.
        let own = [
            self.var(nest.loops[d].var),
            self.pos(r),
            format_ident!("l{d}"),
        ];
        if own.iter().any(|id| mentions(&inner, id)) {
            return None;
        }
        let (lo, hi) = self.range(nest, r);
        Some(quote! {
            let (flat_lo, flat_hi): (usize, usize) = (#lo, #hi);
            #inner
        })
    }

    /// The level loop `d` walks, if its visit is nothing but loop `d + 1` over the next level
    /// of the same access (no locates, no accumulator begun or written, no workspace
    /// flushed), both levels compressed with unique coordinates.
    fn flattenable(&self, nest: &Nest, d: usize) -> Option<LevelRef> {
        let (lp, next) = (&nest.loops[d], nest.loops.get(d + 1)?);
        if self.block
            || !matches!(lp.domain, Domain::Single)
            || !matches!(next.domain, Domain::Single)
            || !lp.locate.is_empty()
            || d + 1 == nest.acc_depth
            || self.flushes_at(nest, d + 1)
        {
            return None;
        }
        let (r, child) = (lp.iterate[0], next.iterate[0]);
        let unique_compressed =
            |l: LevelRef| self.k.level_type(l) == LevelType::Compressed && !self.non_unique(l);
        (child.access == r.access
            && child.level == r.level + 1
            && unique_compressed(r)
            && unique_compressed(child))
        .then_some(r)
    }

    /// `(lo, hi)` of a level whose parent loop was flattened into its own: the children of the
    /// whole range the parent loop would have walked.
    pub(super) fn flat_range(&self, r: LevelRef) -> Option<(TokenStream, TokenStream)> {
        let parent = self.flat?;
        if parent.access != r.access || parent.level + 1 != r.level {
            return None;
        }
        let pos = self.lvl(self.tensor_of(r.access), r.level, "pos");
        Some((
            quote!(#pos[flat_lo].to_usize()),
            quote!(#pos[flat_hi].to_usize()),
        ))
    }
}
