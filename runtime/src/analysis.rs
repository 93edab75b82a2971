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
//!
//! A group that a write overlaps but does not cover survives it, and with an issuer running
//! ahead of the workers it grows: every write of a tile after it would add an edge from every
//! pending reader (a CG iteration's SpMV points read `p` through images wider than the tiles
//! the direction update writes). A write that meets more than [`JOIN_OVER`] pending readers
//! in such a group therefore joins them: one stand-in node ([`Work::Boundary`], no work) waits
//! for them all and replaces them in the group, and this write and every later one waits for
//! the stand-in alone (plus the readers added after it). The stand-in completes exactly when
//! the readers it replaced have, so the ordering is the same; the cost per write no longer
//! grows with the group. Stand-ins are made only for a caller that starts them
//! ([`Preds::joining`]).

use crate::execute::graph::{Node, Work};
use crate::rect::Rect;
use smallvec::SmallVec;
use std::sync::Arc;

/// Inline up to two writers and two reader groups: a store made in a loop (each iteration's
/// new vectors) has about that many before it is dropped, and its state is often freed on a
/// worker (the last task holding the store), where freeing the issuer's allocations contends
/// for the issuer's malloc arena.
pub(crate) struct AccessState {
    writers: SmallVec<[(Rect, Arc<Node>); 2]>,
    readers: SmallVec<[ReaderGroup; 2]>,
    /// Group count at which groups of finished readers are next dropped.
    groups_prune_at: usize,
}

impl Default for AccessState {
    fn default() -> Self {
        AccessState {
            writers: SmallVec::new(),
            readers: SmallVec::new(),
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

/// Pending readers of a surviving group above which a write joins them behind a stand-in.
/// Up to this many, direct edges cost less than allocating and running a node.
pub(crate) const JOIN_OVER: usize = 4;

/// The predecessors one node has been given by its task's analysis so far. A task that reads a
/// store through several views (a stencil's three slices) meets the same writers again, and
/// each edge locks a node the workers are using: edges are added once per predecessor.
#[derive(Default)]
pub(crate) struct Preds {
    seen: SmallVec<[Arc<Node>; 8]>,
    /// Stand-ins made for reader groups ([`AccessState::write`]), to be started by the caller
    /// ([`Preds::take_joins`]); `None`: the caller does not start them, so none are made.
    joins: Option<Vec<Arc<Node>>>,
}

impl Preds {
    /// Predecessors of a node whose writes may join long reader groups behind stand-ins: the
    /// caller must start the nodes [`Preds::take_joins`] returns (count them outstanding and
    /// release them, as any node), or the writers waiting on them never run.
    pub(crate) fn joining() -> Preds {
        Preds {
            seen: SmallVec::new(),
            joins: Some(Vec::new()),
        }
    }

    /// The stand-ins made so far, for the caller to start.
    pub(crate) fn take_joins(&mut self) -> Vec<Arc<Node>> {
        self.joins.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn edge(&mut self, pred: &Arc<Node>, succ: &Arc<Node>) {
        // `seen` holds its nodes alive. A predecessor met earlier may be pruned from every
        // access list and finish meanwhile, and a stand-in allocated later in the same analysis
        // could then take its address: compared as bare addresses, the stand-in would look
        // already seen and the write would not wait for the readers behind it.
        if !self.seen.iter().any(|s| Arc::ptr_eq(s, pred)) {
            self.seen.push(pred.clone());
            Node::add_edge(pred, succ);
        }
    }

    /// A stand-in that completes when every node of `group` but `writer` has (the writer
    /// itself may have read the group through another argument; it must not wait for
    /// itself), or `None` when this caller starts no stand-ins.
    fn join(&mut self, group: &[Arc<Node>], writer: &Arc<Node>) -> Option<Arc<Node>> {
        let joins = self.joins.as_mut()?;
        let j = Node::new(Work::Boundary);
        for n in group.iter().filter(|n| !Arc::ptr_eq(n, writer)) {
            Node::add_edge(n, &j);
        }
        joins.push(j.clone());
        Some(j)
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
            let survives = !rect.contains(&g.rect);
            if survives && g.nodes.len() > JOIN_OVER {
                if let Some(j) = preds.join(&g.nodes, node) {
                    // The writer stays listed as a reader if it was one (it is not behind
                    // the stand-in).
                    let own = g.nodes.iter().any(|n| Arc::ptr_eq(n, node));
                    g.nodes.clear();
                    g.nodes.push(j);
                    if own {
                        g.nodes.push(node.clone());
                    }
                    g.prune_at = PRUNE_MIN;
                }
            }
            for n in &g.nodes {
                preds.edge(n, node);
            }
            !g.nodes.is_empty() && survives
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
    /// the accesses recorded over both (no edges), added to the pending accesses of earlier
    /// replays that they do not supersede.
    ///
    /// An earlier access is dropped only when it has finished or lies inside a rectangle one
    /// of the new writers writes (other than `pre`, which comes before every replay of the
    /// chain): that writer is ordered after it, since the access conflicts with the writer's
    /// copy in the replay after its own, and the writer's copies are ordered one after the
    /// next. Every other earlier access stays: reads of a store no replay writes are ordered
    /// after nothing of the later replays, and a later writer must wait for each of them
    /// (review39: keeping only the two last replays' accesses let it overtake the reads of
    /// the replay two back).
    pub(crate) fn set<'a>(
        &mut self,
        pre: &Arc<Node>,
        writers: impl Iterator<Item = (Rect, &'a Arc<Node>)>,
        readers: impl Iterator<Item = (Rect, &'a Arc<Node>)>,
    ) {
        let writers: SmallVec<[(Rect, &Arc<Node>); 4]> = writers.collect();
        let covered = |r: &Rect| {
            writers
                .iter()
                .any(|(w, n)| !Arc::ptr_eq(n, pre) && w.contains(r))
        };
        self.writers.retain(|(r, n)| !n.is_done() && !covered(r));
        // Emptied groups are kept, and dropped below if no reader comes back: a replay of the
        // same trace reads the same rectangles, and reusing a group saves an allocation and a
        // free per group per replay.
        for g in &mut self.readers {
            if covered(&g.rect) {
                g.nodes.clear();
            } else {
                g.nodes.retain(|n| !n.is_done());
            }
            g.prune_at = PRUNE_MIN;
        }
        self.push(writers.into_iter(), readers);
        self.readers.retain(|g| !g.nodes.is_empty());
    }

    /// Adds final accesses of a replay, each once (after [`AccessState::set`] the last
    /// replay's pending accesses are both kept and among the new ones).
    fn push<'a>(
        &mut self,
        writers: impl Iterator<Item = (Rect, &'a Arc<Node>)>,
        readers: impl Iterator<Item = (Rect, &'a Arc<Node>)>,
    ) {
        self.groups_prune_at = PRUNE_MIN;
        for (rect, n) in writers {
            if !self
                .writers
                .iter()
                .any(|(r, m)| *r == rect && Arc::ptr_eq(m, n))
            {
                self.writers.push((rect, n.clone()));
            }
        }
        for (rect, n) in readers {
            match self.readers.iter_mut().find(|g| g.rect == rect) {
                Some(g) if g.nodes.iter().any(|m| Arc::ptr_eq(m, n)) => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execute::graph::Completion;

    fn rect(lo: usize, hi: usize) -> Rect {
        Rect::new(&[lo], &[hi])
    }

    fn node() -> Arc<Node> {
        Node::new(Work::Boundary)
    }

    /// Runs nodes as the executor would: completing one runs the stand-ins it makes ready at
    /// once (they have no work); other nodes made ready are collected.
    struct Sim {
        c: Completion,
        joins: Vec<Arc<Node>>,
        ready: Vec<Arc<Node>>,
    }

    impl Sim {
        fn new() -> Sim {
            Sim {
                c: Completion::default(),
                joins: vec![],
                ready: vec![],
            }
        }

        /// Drops the issue guard of `n` (as `Inner::start`), running it if a stand-in.
        fn start(&mut self, n: &Arc<Node>) {
            if n.release() {
                self.became_ready(n.clone());
            }
        }

        fn became_ready(&mut self, n: Arc<Node>) {
            if self.joins.iter().any(|j| Arc::ptr_eq(j, &n)) {
                self.finish(&n);
            } else {
                self.ready.push(n);
            }
        }

        fn finish(&mut self, n: &Arc<Node>) {
            for s in n.complete(&self.c) {
                self.became_ready(s);
            }
        }

        fn is_ready(&self, n: &Arc<Node>) -> bool {
            self.ready.iter().any(|r| Arc::ptr_eq(r, n))
        }

        /// `node` writes `r` as one point of a task that is analysed, then started.
        fn write(&mut self, s: &mut AccessState, r: Rect, node: &Arc<Node>) -> Preds {
            let mut p = Preds::joining();
            s.write(r, node, &mut p);
            self.joins.extend(p.joins.clone().unwrap_or_default());
            p
        }
    }

    /// Six readers of a whole store (more than `JOIN_OVER`), then a task whose two points
    /// write its halves: each point waits for every reader (tried with each reader finishing
    /// last), through one stand-in the second point reuses (one predecessor, not six).
    #[test]
    fn a_tile_write_after_a_long_reader_group_waits_for_every_reader_through_one_stand_in() {
        for last in 0..6 {
            let mut s = AccessState::default();
            let mut sim = Sim::new();
            let readers: Vec<_> = (0..6).map(|_| node()).collect();
            for r in &readers {
                s.read(rect(0, 8), r, &mut Preds::default());
            }
            let (w0, w1) = (node(), node());
            sim.write(&mut s, rect(0, 4), &w0);
            let p1 = sim.write(&mut s, rect(4, 8), &w1);
            assert_eq!(sim.joins.len(), 1, "one stand-in for the group");
            assert_eq!(
                p1.seen.len(),
                1,
                "the second point waits for the stand-in alone"
            );
            for n in [&w0, &w1].into_iter().chain(sim.joins.clone().iter()) {
                sim.start(n);
            }
            for (i, r) in readers.iter().enumerate().filter(|(i, _)| *i != last) {
                sim.finish(r);
                assert!(
                    !sim.is_ready(&w0) && !sim.is_ready(&w1),
                    "a write ran before reader {last} (after reader {i} finished)"
                );
            }
            sim.finish(&readers[last]);
            assert!(sim.is_ready(&w0) && sim.is_ready(&w1));
        }
    }

    /// A reader that comes after the stand-in is waited for by the next write directly, and a
    /// writer that read the group itself does not wait for itself through the stand-in.
    #[test]
    fn a_stand_in_covers_only_earlier_readers_and_never_the_writer_itself() {
        let mut s = AccessState::default();
        let mut sim = Sim::new();
        let readers: Vec<_> = (0..5).map(|_| node()).collect();
        let both = node();
        for r in readers.iter().chain([&both]) {
            s.read(rect(0, 8), r, &mut Preds::default());
        }
        sim.write(&mut s, rect(0, 4), &both);
        assert_eq!(sim.joins.len(), 1);
        let later = node();
        s.read(rect(0, 8), &later, &mut Preds::default());
        let w = node();
        sim.write(&mut s, rect(4, 8), &w);
        for n in [&both, &w].into_iter().chain(sim.joins.clone().iter()) {
            sim.start(n);
        }
        for r in &readers {
            sim.finish(r);
        }
        assert!(sim.is_ready(&both), "the writer waited for itself");
        sim.finish(&both);
        assert!(!sim.is_ready(&w), "the write ran before the later reader");
        sim.finish(&later);
        assert!(sim.is_ready(&w));
    }

    /// A point writes B after pending reader `r` of B, `r` finishes and another point's write
    /// of B prunes it (its last reference), then the first point writes C behind a long reader
    /// group: the stand-in may be allocated at `r`'s old address, and the point must still wait
    /// for it (a `seen` of bare addresses took it for `r` and added no edge).
    #[test]
    fn a_stand_in_allocated_where_a_freed_predecessor_was_is_still_waited_for() {
        for _ in 0..20 {
            let (mut b, mut c) = (AccessState::default(), AccessState::default());
            let mut sim = Sim::new();
            let r = node();
            b.read(rect(0, 8), &r, &mut Preds::default());
            let readers: Vec<_> = (0..6).map(|_| node()).collect();
            for x in &readers {
                c.read(rect(0, 8), x, &mut Preds::default());
            }
            let (p, q) = (node(), node());
            let mut pp = Preds::joining();
            b.write(rect(0, 4), &p, &mut pp);
            sim.finish(&r);
            drop(r);
            sim.write(&mut b, rect(4, 8), &q);
            c.write(rect(0, 4), &p, &mut pp);
            sim.joins.extend(pp.take_joins());
            assert_eq!(sim.joins.len(), 1, "one stand-in for C's readers");
            for n in [&p].into_iter().chain(sim.joins.clone().iter()) {
                sim.start(n);
            }
            for x in &readers[..5] {
                sim.finish(x);
            }
            assert!(
                !sim.is_ready(&p),
                "the write of C ran before its last reader"
            );
            sim.finish(&readers[5]);
            assert!(sim.is_ready(&p));
        }
    }

    /// Without a caller that starts stand-ins (`Preds::default`), none are made.
    #[test]
    fn no_stand_in_is_made_for_a_caller_that_cannot_start_it() {
        let mut s = AccessState::default();
        for _ in 0..6 {
            s.read(rect(0, 8), &node(), &mut Preds::default());
        }
        let mut p = Preds::default();
        s.write(rect(0, 4), &node(), &mut p);
        assert_eq!(p.seen.len(), 6);
        assert!(p.take_joins().is_empty());
    }
}
