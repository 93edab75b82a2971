//! Dependence analysis (thesis Definition 1) over the sub-stores point tasks touch.
//!
//! Each root store keeps the nodes that last wrote each region and the nodes that read it since.
//! A new reader depends on overlapping writers (true dependence); a new writer depends on
//! overlapping writers (output dependence) and readers (anti dependence). Reductions are folded
//! by a task's finish node, which counts as a writer: folds of different tasks into one store are
//! therefore ordered, which is what makes reductions deterministic.
//!
//! Readers are grouped by the rectangle they read. Index tasks read the same tiles again and
//! again, so a write scans a handful of groups instead of every pending reader (pending readers
//! of cells that are never written, like a stencil's boundary, would otherwise pile up).

use crate::graph::Node;
use crate::rect::Rect;
use smallvec::SmallVec;
use std::sync::Arc;

pub(crate) struct AccessState {
    writers: Vec<(Rect, Arc<Node>)>,
    readers: Vec<ReaderGroup>,
    /// Group count at which groups of finished readers are next dropped.
    groups_prune_at: usize,
}

impl Default for AccessState {
    fn default() -> Self {
        AccessState {
            writers: vec![],
            readers: vec![],
            groups_prune_at: PRUNE_MIN,
        }
    }
}

/// The pending readers of one rectangle. Groups come and go with every write over them (a
/// stencil's tiles: one per step), so the first few readers are stored inline.
struct ReaderGroup {
    rect: Rect,
    nodes: SmallVec<[Arc<Node>; 4]>,
    /// Length at which finished nodes are next pruned (amortised O(1) per read).
    prune_at: usize,
}

const PRUNE_MIN: usize = 8;

/// The predecessors one node has been given by its task's analysis so far. A task that reads a
/// store through several views (a stencil's three slices) meets the same writers again, and
/// each edge locks a node the workers are using: edges are added once per predecessor.
#[derive(Default)]
pub(crate) struct Preds(SmallVec<[*const Node; 8]>);

impl Preds {
    fn edge(&mut self, pred: &Arc<Node>, succ: &Arc<Node>) {
        // Only compared, never dereferenced: every node met here is alive (the access lists
        // hold it) and no node is allocated while one task is analysed, so addresses are not
        // reused within a `Preds`' life.
        let p = Arc::as_ptr(pred);
        if !self.0.contains(&p) {
            self.0.push(p);
            Node::add_edge(pred, succ);
        }
    }
}

impl AccessState {
    /// Records that `node` reads `rect`, after the writers it overlaps.
    pub(crate) fn read(&mut self, rect: Rect, node: &Arc<Node>, preds: &mut Preds) {
        for (r, w) in &self.writers {
            if r.overlaps(&rect) {
                preds.edge(w, node);
            }
        }
        let group = match self.readers.iter().position(|g| g.rect == rect) {
            Some(i) => &mut self.readers[i],
            None => {
                if self.readers.len() >= self.groups_prune_at {
                    self.readers.retain_mut(|g| {
                        g.nodes.retain(|n| !n.is_done());
                        !g.nodes.is_empty()
                    });
                    self.groups_prune_at = (2 * self.readers.len()).max(PRUNE_MIN);
                }
                self.readers.push(ReaderGroup {
                    rect,
                    nodes: SmallVec::new(),
                    prune_at: PRUNE_MIN,
                });
                self.readers.last_mut().expect("just pushed")
            }
        };
        if group.nodes.len() >= group.prune_at {
            group.nodes.retain(|n| !n.is_done());
            group.prune_at = (2 * group.nodes.len()).max(PRUNE_MIN);
        }
        group.nodes.push(node.clone());
    }

    /// Records that `node` writes `rect`, after every overlapping reader and writer.
    pub(crate) fn write(&mut self, rect: Rect, node: &Arc<Node>, preds: &mut Preds) {
        // Order `node` after every overlapping access, then drop accesses wholly inside `rect`
        // (later tasks need only wait for `node`) and finished ones.
        self.writers.retain(|(r, n)| {
            if n.is_done() {
                return false;
            }
            if r.overlaps(&rect) {
                preds.edge(n, node);
            }
            !rect.contains(r)
        });
        self.readers.retain_mut(|g| {
            if !g.rect.overlaps(&rect) {
                return true;
            }
            g.nodes.retain(|n| !n.is_done());
            for n in &g.nodes {
                preds.edge(n, node);
            }
            !g.nodes.is_empty() && !rect.contains(&g.rect)
        });
        self.writers.push((rect, node.clone()));
    }

    /// A replayed trace's postcondition (`tracing::record`): `entry` waits for every pending
    /// access (they are its predecessors in `preds`) and stands for them as a writer of `whole`;
    /// the trace's final accesses come after it.
    pub(crate) fn replace<'a>(
        &mut self,
        whole: Rect,
        entry: &Arc<Node>,
        preds: &mut Preds,
        writers: impl Iterator<Item = (Rect, &'a Arc<Node>)>,
        readers: impl Iterator<Item = (Rect, &'a Arc<Node>)>,
    ) {
        for (_, w) in self.writers.drain(..) {
            if !w.is_done() {
                preds.edge(&w, entry);
            }
        }
        for g in self.readers.drain(..) {
            for n in g.nodes.iter().filter(|n| !n.is_done()) {
                preds.edge(n, entry);
            }
        }
        self.writers.push((whole, entry.clone()));
        self.push(writers, readers);
    }

    /// A replayed trace's postcondition when it follows a replay of the same trace (actors):
    /// the accesses recorded over both, which stand for every pending access (no edges).
    pub(crate) fn set<'a>(
        &mut self,
        writers: impl Iterator<Item = (Rect, &'a Arc<Node>)>,
        readers: impl Iterator<Item = (Rect, &'a Arc<Node>)>,
    ) {
        self.writers.clear();
        // The groups are kept, emptied, and dropped below if no reader comes back: a replay of
        // the same trace sets the same rectangles, more readers each than a group holds
        // inline, and reusing them saves an allocation and a free per group per replay.
        for g in &mut self.readers {
            g.nodes.clear();
            g.prune_at = PRUNE_MIN;
        }
        self.push(writers, readers);
        self.readers.retain(|g| !g.nodes.is_empty());
    }

    fn push<'a>(
        &mut self,
        writers: impl Iterator<Item = (Rect, &'a Arc<Node>)>,
        readers: impl Iterator<Item = (Rect, &'a Arc<Node>)>,
    ) {
        self.groups_prune_at = PRUNE_MIN;
        self.writers.extend(writers.map(|(r, n)| (r, n.clone())));
        for (rect, n) in readers {
            match self.readers.iter_mut().find(|g| g.rect == rect) {
                Some(g) => g.nodes.push(n.clone()),
                None => self.readers.push(ReaderGroup {
                    rect,
                    nodes: smallvec::smallvec![n.clone()],
                    prune_at: PRUNE_MIN,
                }),
            }
        }
    }

    /// Readers and writers of `rect` that have not finished (what overwriting this rank's
    /// copy of `rect` from outside the graph must wait for: a gather across ranks).
    pub(crate) fn pending(&self, rect: &Rect) -> Vec<Arc<Node>> {
        let mut out = self.pending_writers(rect);
        for g in self.readers.iter().filter(|g| g.rect.overlaps(rect)) {
            out.extend(g.nodes.iter().filter(|n| !n.is_done()).cloned());
        }
        out
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
