//! A tournament (winner) tree merging sorted leaf streams (SuperTaco §4.6.2).
//!
//! Each leaf of the tree is a [`Walker`] over one piece of one block, positioned at its
//! current entry; every inner node holds the leaf whose entry is smallest in its subtree, so
//! the root is the next entry of the merge. Taking it advances that one walker and replays
//! only its path to the root: `log k` comparisons per entry for `k` pieces. Exhausted and
//! padding leaves are `EMPTY`, which loses to everything.

use super::walk::{Walk, Walker};

const EMPTY: usize = usize::MAX;

pub(crate) struct Tournament<'t, T: Walk> {
    walkers: Vec<Walker<'t, T>>,
    current: Vec<Option<T::V>>,
    /// `tree[1]` is the root; leaf `i` is node `width + i`.
    tree: Vec<usize>,
    width: usize,
}

impl<'t, T: Walk> Tournament<'t, T> {
    pub fn new(walkers: Vec<Walker<'t, T>>) -> Self {
        let width = walkers.len().next_power_of_two().max(1);
        let mut t = Tournament {
            current: vec![None; walkers.len()],
            walkers,
            tree: vec![EMPTY; 2 * width],
            width,
        };
        t.reset();
        t
    }

    /// Back to the first entry of every piece.
    pub fn reset(&mut self) {
        for (i, w) in self.walkers.iter_mut().enumerate() {
            w.restart();
            self.current[i] = w.advance().map(|(_, v)| v);
        }
        for i in 0..self.width {
            self.tree[self.width + i] = if self.current.get(i).copied().flatten().is_some() {
                i
            } else {
                EMPTY
            };
        }
        for node in (1..self.width).rev() {
            self.tree[node] = self.winner(self.tree[2 * node], self.tree[2 * node + 1]);
        }
    }

    fn winner(&self, a: usize, b: usize) -> usize {
        match (a, b) {
            (EMPTY, _) => b,
            (_, EMPTY) => a,
            _ if self.walkers[b].coords() < self.walkers[a].coords() => b,
            _ => a,
        }
    }

    /// Calls `f(level-order coordinates, value)` on the next entry of the merge; false when
    /// every piece is exhausted.
    pub fn next_with(&mut self, f: impl FnOnce(&[usize], T::V)) -> bool {
        let w = self.tree[1];
        if w == EMPTY {
            return false;
        }
        let v = self.current[w].expect("a live leaf has an entry");
        f(self.walkers[w].coords(), v);
        self.current[w] = self.walkers[w].advance().map(|(_, v)| v);
        let mut node = self.width + w;
        self.tree[node] = if self.current[w].is_some() { w } else { EMPTY };
        while node > 1 {
            node /= 2;
            self.tree[node] = self.winner(self.tree[2 * node], self.tree[2 * node + 1]);
        }
        true
    }
}
