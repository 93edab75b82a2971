//! Dependence analysis (thesis Definition 1) over the sub-stores point tasks touch.
//!
//! Each root store keeps the nodes that last wrote each region and the nodes that read it since.
//! A new reader depends on overlapping writers (true dependence); a new writer depends on
//! overlapping writers (output dependence) and readers (anti dependence). Reductions are folded
//! by a task's finish node, which counts as a writer: folds of different tasks into one store are
//! therefore ordered, which is what makes reductions deterministic.

use crate::graph::Node;
use crate::rect::Rect;
use std::sync::Arc;

pub(crate) struct AccessState {
    writers: Vec<(Rect, Arc<Node>)>,
    readers: Vec<(Rect, Arc<Node>)>,
    /// Reader-list length at which finished readers are next pruned.
    prune_at: usize,
}

impl Default for AccessState {
    fn default() -> Self {
        AccessState {
            writers: vec![],
            readers: vec![],
            prune_at: 16,
        }
    }
}

impl AccessState {
    /// Records that `node` reads `rect`, after the writers it overlaps.
    pub(crate) fn read(&mut self, rect: Rect, node: &Arc<Node>) {
        for (r, w) in &self.writers {
            if r.overlaps(&rect) {
                Node::add_edge(w, node);
            }
        }
        // Finished readers are dropped in batches (amortised O(1) per read).
        if self.readers.len() >= self.prune_at {
            self.readers.retain(|(_, n)| !n.is_done());
            self.prune_at = (2 * self.readers.len()).max(16);
        }
        self.readers.push((rect, node.clone()));
    }

    /// Records that `node` writes `rect`, after every overlapping reader and writer.
    pub(crate) fn write(&mut self, rect: Rect, node: &Arc<Node>) {
        // One pass per list: order `node` after every overlapping access, then drop accesses
        // wholly inside `rect` (later tasks need only wait for `node`) and finished ones.
        let mut visit = |(r, n): &(Rect, Arc<Node>)| {
            if n.is_done() {
                return false;
            }
            if r.overlaps(&rect) {
                Node::add_edge(n, node);
            }
            !rect.contains(r)
        };
        self.writers.retain(&mut visit);
        self.readers.retain(&mut visit);
        self.writers.push((rect, node.clone()));
    }

    /// Writers of `rect` that have not finished (what a read-back must wait for).
    pub(crate) fn pending_writers(&self, rect: &Rect) -> Vec<Arc<Node>> {
        self.writers
            .iter()
            .filter(|(r, n)| !n.is_done() && r.overlaps(rect))
            .map(|(_, n)| n.clone())
            .collect()
    }
}
