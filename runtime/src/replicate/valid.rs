//! The valid-copy map of one store: which ranks hold the latest value of which rectangle.
//!
//! Derived from the analysis alone (writes move a rectangle to its writer, transfers add the
//! receiver), so it is the same on every rank and every rank knows, without asking, who must
//! send what to whom.

use crate::rect::Rect;
use smallvec::SmallVec;

/// Disjoint rectangles with the set of ranks (a bit mask) holding each one's latest value.
#[derive(Clone, Debug, Default)]
pub(crate) struct ValidMap {
    pieces: Vec<(Rect, u64)>,
}

/// A mask of the ranks `0..ranks`.
pub(crate) fn everyone(ranks: usize) -> u64 {
    if ranks >= 64 {
        u64::MAX
    } else {
        (1u64 << ranks) - 1
    }
}

impl ValidMap {
    /// Every rank holds all of `whole` (a store every rank created with the same contents).
    pub(crate) fn all(whole: Rect, ranks: usize) -> ValidMap {
        ValidMap {
            pieces: vec![(whole, everyone(ranks))],
        }
    }

    /// `rank` alone holds `rect` now (it wrote it). `rect` becomes one piece again, so a
    /// store rewritten tile by tile does not fragment into ever more pieces.
    pub(crate) fn write(&mut self, rect: Rect, rank: usize) {
        if rect.is_empty() {
            return;
        }
        let mut out = Vec::with_capacity(self.pieces.len() + 4);
        for (r, m) in self.pieces.drain(..) {
            if r.overlaps(&rect) {
                out.extend(subtract(&r, &rect).into_iter().map(|p| (p, m)));
            } else {
                out.push((r, m));
            }
        }
        out.push((rect, 1u64 << rank));
        self.pieces = out;
    }

    /// `rank` holds `rect` too (it received it).
    pub(crate) fn add_holder(&mut self, rect: Rect, rank: usize) {
        self.set(rect, |m| m | 1u64 << rank);
    }

    /// Replaces the holders of the part of every piece inside `rect` by `f(holders)`.
    fn set(&mut self, rect: Rect, f: impl Fn(u64) -> u64) {
        let mut out = Vec::with_capacity(self.pieces.len() + 4);
        let mut inside: Vec<(Rect, u64)> = vec![];
        for (r, m) in self.pieces.drain(..) {
            if !r.overlaps(&rect) || r.is_empty() {
                out.push((r, m));
                continue;
            }
            out.extend(subtract(&r, &rect).into_iter().map(|p| (p, m)));
            inside.push((r.intersect(&rect), f(m)));
        }
        out.extend(inside);
        self.pieces = out;
    }

    /// The parts of `rect` that `rank` does not hold, each with the rank that sends it (the
    /// lowest holder), in the map's order (the same on every rank).
    pub(crate) fn missing(&self, rect: &Rect, rank: usize) -> SmallVec<[(Rect, usize); 4]> {
        self.pieces
            .iter()
            .filter(|(r, m)| m & (1u64 << rank) == 0 && r.overlaps(rect))
            .map(|(r, m)| (r.intersect(rect), m.trailing_zeros() as usize))
            .filter(|(r, _)| !r.is_empty())
            .collect()
    }

    /// `rect` cut along the map's pieces, each part with its holders (the map covers the
    /// whole store, so the parts cover `rect`).
    pub(crate) fn split(&self, rect: &Rect) -> Vec<(Rect, u64)> {
        self.pieces
            .iter()
            .filter(|(r, _)| r.overlaps(rect))
            .map(|(r, m)| (r.intersect(rect), *m))
            .filter(|(r, _)| !r.is_empty())
            .collect()
    }

    /// The parts of `rect` some rank lacks, with their holders.
    pub(crate) fn incomplete(&self, rect: &Rect, ranks: usize) -> Vec<(Rect, u64)> {
        let all = everyone(ranks);
        self.pieces
            .iter()
            .filter(|(r, m)| *m != all && r.overlaps(rect))
            .map(|(r, m)| (r.intersect(rect), *m))
            .filter(|(r, _)| !r.is_empty())
            .collect()
    }
}

/// `a` minus `b` as disjoint boxes: per dimension, the slabs of `a` below and above `b`, then
/// `a` narrowed to `b` in that dimension.
fn subtract(a: &Rect, b: &Rect) -> SmallVec<[Rect; 4]> {
    let mut out = SmallVec::new();
    let mut rest = *a;
    for d in 0..a.dim() {
        let (lo, hi) = (rest.lo()[d], rest.hi()[d]);
        let (blo, bhi) = (b.lo()[d].clamp(lo, hi), b.hi()[d].clamp(lo, hi));
        if blo > lo {
            out.push(rest.with_range(d, lo, blo));
        }
        if bhi < hi {
            out.push(rest.with_range(d, bhi, hi));
        }
        rest = rest.with_range(d, blo, bhi);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(lo: &[usize], hi: &[usize]) -> Rect {
        Rect::new(lo, hi)
    }

    #[test]
    fn subtract_covers_the_difference_exactly() {
        let a = r(&[0, 0], &[4, 4]);
        let b = r(&[1, 2], &[3, 6]);
        let parts = subtract(&a, &b);
        let vol: usize = parts.iter().map(|p| p.volume()).sum();
        assert_eq!(vol, a.volume() - a.intersect(&b).volume());
        for (i, p) in parts.iter().enumerate() {
            assert!(!p.overlaps(&b) && a.contains(p));
            assert!(parts[i + 1..].iter().all(|q| !q.overlaps(p)));
        }
    }

    #[test]
    fn writes_move_and_receives_add_holders() {
        let mut v = ValidMap::all(r(&[0], &[10]), 3);
        assert!(v.missing(&r(&[0], &[10]), 2).is_empty());
        v.write(r(&[0], &[5]), 1);
        assert_eq!(
            v.missing(&r(&[3], &[7]), 0).to_vec(),
            vec![(r(&[3], &[5]), 1)]
        );
        v.add_holder(r(&[4], &[5]), 0);
        assert_eq!(
            v.missing(&r(&[3], &[7]), 0).to_vec(),
            vec![(r(&[3], &[4]), 1)]
        );
        assert_eq!(v.incomplete(&r(&[0], &[10]), 3).len(), 2);
        v.add_holder(r(&[0], &[10]), 0);
        v.add_holder(r(&[0], &[10]), 2);
        assert!(v.incomplete(&r(&[0], &[10]), 3).is_empty());
    }

    use proptest::prelude::*;

    fn rect_in(h: usize, w: usize) -> impl Strategy<Value = Rect> {
        (0..=h, 0..=h, 0..=w, 0..=w)
            .prop_map(|(a, b, c, d)| Rect::new(&[a.min(b), c.min(d)], &[a.max(b), c.max(d)]))
    }

    proptest! {
        /// The map against a per-cell model: after any writes and receives, `missing` names
        /// exactly the cells a rank lacks, once each, with their lowest holder as sender.
        #[test]
        fn the_map_matches_a_per_cell_model(
            ops in proptest::collection::vec((any::<bool>(), rect_in(6, 5), 0usize..3), 0..12),
            query in rect_in(6, 5),
        ) {
            let ranks = 3;
            let whole = Rect::new(&[0, 0], &[6, 5]);
            let mut map = ValidMap::all(whole, ranks);
            let mut cells = [[true; 3]; 30];
            for (write, rect, rank) in &ops {
                if *write { map.write(*rect, *rank) } else { map.add_holder(*rect, *rank) }
                for i in rect.lo()[0]..rect.hi()[0] {
                    for j in rect.lo()[1]..rect.hi()[1] {
                        let c = &mut cells[i * 5 + j];
                        if *write { *c = [false; 3]; }
                        c[*rank] = true;
                    }
                }
            }
            for rank in 0..ranks {
                let mut seen = vec![None; 30];
                for (piece, sender) in map.missing(&query, rank) {
                    prop_assert!(query.contains(&piece));
                    for i in piece.lo()[0]..piece.hi()[0] {
                        for j in piece.lo()[1]..piece.hi()[1] {
                            prop_assert!(seen[i * 5 + j].is_none(), "cell sent twice");
                            seen[i * 5 + j] = Some(sender);
                        }
                    }
                }
                for i in query.lo()[0]..query.hi()[0] {
                    for j in query.lo()[1]..query.hi()[1] {
                        let c = cells[i * 5 + j];
                        let want = (!c[rank]).then(|| c.iter().position(|&h| h).expect("someone holds it"));
                        prop_assert_eq!(seen[i * 5 + j], want, "cell ({}, {}) for rank {}", i, j, rank);
                    }
                }
            }
        }
    }
}
