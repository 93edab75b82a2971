//! A tournament (winner) tree merging sorted leaf streams (SuperTaco §4.6.2).
//!
//! Each leaf of the tree is a [`Walker`] over one piece of one block, positioned at its
//! current entry; every inner node holds the leaf whose entry is smallest in its subtree, so
//! the root is the next entry of the merge. Taking it advances that one walker and replays
//! only its path to the root: `log k` comparisons per entry for `k` pieces.
//!
//! Comparisons are of one integer per leaf: its entry's coordinates packed, each level in the
//! bits its pieces' largest coordinate needs, most significant level first, so that integer
//! order is storage order. Exhausted and padding leaves hold [`EXHAUSTED`], which loses to
//! every entry. Where the coordinates need more than 63 bits, every live leaf holds the same
//! key and a tie compares the coordinate vectors.

use super::walk::{Level, Walk, Walker};
use tessera_formats::Index;

/// The key of a leaf with no entry: above every packed key (those take at most 63 bits).
const EXHAUSTED: u64 = u64::MAX;

pub(crate) struct Tournament<'t, T: Walk> {
    walkers: Vec<Walker<'t, T>>,
    current: Vec<Option<T::V>>,
    /// Per leaf (padding included) its entry's packed coordinates, or [`EXHAUSTED`].
    keys: Vec<u64>,
    /// Per level the shift of its coordinate in a key; `None` when they do not fit.
    shifts: Option<Vec<u32>>,
    /// `tree[1]` is the root; leaf `i` is node `width + i`.
    tree: Vec<usize>,
    width: usize,
    /// The smallest key of the leaves the root's winner beat (the winners of the subtrees
    /// beside its path): while the winner's next key is below it, the winner wins again and
    /// nothing needs replaying. Pieces of blocks give runs of entries from one leaf (a whole
    /// block row at a time), so most entries take one comparison instead of `log k`.
    runner_up: u64,
}

impl<'t, T: Walk> Tournament<'t, T> {
    pub fn new(walkers: Vec<Walker<'t, T>>) -> Self {
        let width = walkers.len().next_power_of_two().max(1);
        let shifts = packing(&walkers);
        let mut t = Tournament {
            current: vec![None; walkers.len()],
            walkers,
            keys: vec![EXHAUSTED; width],
            shifts,
            tree: (0..2 * width).map(|n| n.saturating_sub(width)).collect(),
            width,
            runner_up: EXHAUSTED,
        };
        t.reset();
        t
    }

    /// Back to the first entry of every piece.
    pub fn reset(&mut self) {
        for i in 0..self.walkers.len() {
            self.walkers[i].restart();
            self.step(i);
        }
        for node in (1..self.width).rev() {
            self.tree[node] = self.winner(self.tree[2 * node], self.tree[2 * node + 1]);
        }
        self.runner_up = self.runner_up();
    }

    /// The smallest key beside the root winner's path.
    fn runner_up(&self) -> u64 {
        let mut node = self.width + self.tree[1];
        let mut key = EXHAUSTED;
        while node > 1 {
            key = key.min(self.keys[self.tree[node ^ 1]]);
            node /= 2;
        }
        key
    }

    /// Advances leaf `i` to its next entry and keys it.
    fn step(&mut self, i: usize) {
        let w = &mut self.walkers[i];
        self.current[i] = w.advance().map(|(_, v)| v);
        self.keys[i] = match (&self.current[i], &self.shifts) {
            (None, _) => EXHAUSTED,
            (Some(_), None) => 0,
            (Some(_), Some(shifts)) => {
                let coords = w.coords();
                let mut key = 0;
                for (&c, &s) in coords.iter().zip(&shifts[..coords.len()]) {
                    key |= (c as u64) << s;
                }
                key
            }
        };
    }

    /// The leaf with the smaller entry; `a` on a tie (pieces in order).
    #[inline(always)]
    fn winner(&self, a: usize, b: usize) -> usize {
        let (ka, kb) = (self.keys[a], self.keys[b]);
        if ka != kb {
            return if kb < ka { b } else { a };
        }
        let unpacked = self.shifts.is_none() && ka != EXHAUSTED;
        if unpacked && self.walkers[b].coords() < self.walkers[a].coords() {
            b
        } else {
            a
        }
    }

    /// Calls `f(level-order coordinates, value)` on the next entry of the merge; false when
    /// every piece is exhausted.
    pub fn next_with(&mut self, f: impl FnOnce(&[usize], T::V)) -> bool {
        let w = self.tree[1];
        if self.keys[w] == EXHAUSTED {
            return false;
        }
        let v = self.current[w].expect("a live leaf has an entry");
        f(self.walkers[w].coords(), v);
        self.step(w);
        // Strictly below: on a tie the leaf further left wins, which may be another. (Unpacked,
        // where every live key is 0, only once every other leaf is exhausted.)
        if self.keys[w] < self.runner_up {
            return true;
        }
        let mut node = self.width + w;
        while node > 1 {
            node /= 2;
            self.tree[node] = self.winner(self.tree[2 * node], self.tree[2 * node + 1]);
        }
        self.runner_up = self.runner_up();
        true
    }
}

/// Per level the shift that packs a coordinate vector of these walkers into at most 63 bits
/// in storage order: each level gets the bits of the largest coordinate any walker can give
/// there (a dense level's last, a compressed level's largest in its `crd` part), the levels
/// after it the bits below. `None` when that takes more than 63 bits.
fn packing<T: Walk>(walkers: &[Walker<'_, T>]) -> Option<Vec<u32>> {
    let rank = walkers.first()?.levels().len();
    let mut largest = vec![0usize; rank];
    for w in walkers {
        for (m, level) in largest.iter_mut().zip(w.levels()) {
            let top = match *level {
                Level::Dense { size, offset } => (offset + size).saturating_sub(1),
                Level::Compressed { crd, .. } => {
                    crd.iter().map(|c| c.to_usize()).max().unwrap_or(0)
                }
            };
            *m = (*m).max(top);
        }
    }
    let bits: Vec<u32> = largest
        .iter()
        .map(|&m| usize::BITS - m.leading_zeros())
        .collect();
    if bits.iter().sum::<u32>() > 63 {
        return None;
    }
    let mut shift = 0;
    let mut shifts = vec![0; rank];
    for k in (0..rank).rev() {
        shifts[k] = shift;
        shift += bits[k];
    }
    Some(shifts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::load::Meta;
    use crate::io::walk::{leaf_path_in, ViewTree};
    use proptest::prelude::*;
    use tessera_formats::{Format, LevelType, Tensor};

    type T = Tensor<f64, u64>;
    /// Per piece its entries: coordinates in mode order and a value.
    type Pieces = Vec<Vec<(Vec<usize>, f64)>>;

    /// Merges `pieces` (entries with distinct coordinates within a piece, in any order) with a
    /// tournament over walkers of compressed tensors in mode order `order`, and returns the
    /// merged (level-order coordinates, value) sequence and whether keys were packed.
    fn merged(
        dims: &[usize],
        order: &[usize],
        pieces: &[Vec<(Vec<usize>, f64)>],
    ) -> (Vec<(Vec<usize>, f64)>, bool) {
        let format = Format::new(vec![LevelType::Compressed; dims.len()], order.to_vec()).unwrap();
        let tensors: Vec<T> = pieces
            .iter()
            .map(|p| T::from_entries(dims.to_vec(), format.clone(), p.clone()).unwrap())
            .collect();
        let views: Vec<_> = tensors.iter().map(|t| t.view()).collect();
        let trees: Vec<_> = views.iter().map(ViewTree).collect();
        let walkers = trees
            .iter()
            .map(|t| {
                let n = t.0.vals().len();
                let first = match n {
                    0 => vec![0; dims.len()],
                    _ => leaf_path_in(t, 0, &Meta::of_view(t.0).bounds),
                };
                Walker::new(t, 0, n, first)
            })
            .collect();
        let mut merge = Tournament::new(walkers);
        let packed = merge.shifts.is_some();
        let mut out = Vec::new();
        // Twice: `reset` starts the merge over.
        for round in 0..2 {
            merge.reset();
            let mut all = Vec::new();
            while merge.next_with(|c, v| all.push((c.to_vec(), v))) {}
            if round == 1 {
                assert_eq!(all, out, "a reset merge gives the same entries");
            }
            out = all;
        }
        (out, packed)
    }

    /// The reference: every piece's entries in level order, pieces one after another, sorted
    /// stably by level-order coordinates (a tie goes to the earlier piece, as in the merge).
    fn reference(order: &[usize], pieces: &[Vec<(Vec<usize>, f64)>]) -> Vec<(Vec<usize>, f64)> {
        let mut all: Vec<(Vec<usize>, f64)> = pieces
            .iter()
            .flat_map(|p| {
                let mut p: Vec<_> = p
                    .iter()
                    .map(|(c, v)| (order.iter().map(|&m| c[m]).collect::<Vec<_>>(), *v))
                    .collect();
                p.sort_by(|a, b| a.0.cmp(&b.0));
                p
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Pieces of a rank-2 or -3 tensor: distinct coordinates within a piece, some repeated
    /// across pieces; coordinates scaled by `2^scale` so that large scales overflow 63 bits.
    fn pieces() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Pieces)> {
        (2usize..=3, prop_oneof![Just(0u32), Just(30), Just(40)]).prop_flat_map(|(rank, scale)| {
            let coord = prop::collection::vec(0usize..6, rank);
            let piece = prop::collection::btree_map(coord, -9i32..9, 0..20);
            (
                Just((0..rank).collect::<Vec<usize>>()).prop_shuffle(),
                prop::collection::vec(piece, 0..6),
            )
                .prop_map(move |(order, ps)| {
                    let dims = vec![6usize << scale; rank];
                    let ps = ps
                        .into_iter()
                        .map(|m| {
                            m.into_iter()
                                .map(|(c, v)| {
                                    (c.iter().map(|&x| x << scale).collect(), f64::from(v))
                                })
                                .collect()
                        })
                        .collect();
                    (dims, order, ps)
                })
        })
    }

    proptest! {
        #[test]
        fn the_merge_is_the_stable_sort_of_the_pieces((dims, order, ps) in pieces()) {
            let (got, packed) = merged(&dims, &order, &ps);
            prop_assert_eq!(got, reference(&order, &ps));
            // Keys are packed exactly when the largest coordinates of the levels fit 63 bits
            // together (no pieces: nothing to merge, nothing packed).
            let bits: u32 = (0..dims.len())
                .map(|m| {
                    let top = ps.iter().flatten().map(|(c, _)| c[m]).max().unwrap_or(0);
                    usize::BITS - top.leading_zeros()
                })
                .sum();
            prop_assert_eq!(packed, !ps.is_empty() && bits <= 63, "{} bits", bits);
        }
    }
}
