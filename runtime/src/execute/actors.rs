//! A replayed trace compiled into actors (thesis ch. 6, Algorithm 4; issue 14 item 5).
//!
//! Compiled once per recording: every vertex of the trace's logical graph is owned by one
//! worker (point `p` by worker `p mod workers`, so that the same tile is touched by the same
//! core in every replay; a finish step by its task's point 0's owner), with a static list of
//! out-edges inside the trace and its count of in-edges inside the trace. A replay makes one
//! node per vertex whose pending count starts at that count (the "counter reset"), adds only
//! the edges that cross the trace's boundary, and a finishing vertex decrements its static
//! successors' counters directly — no lock, no edge list built per replay. A ready vertex goes
//! to its owner's mailbox (`executor.rs`).
//!
//! Boundaries: what came before a replay is either one entry vertex waiting for every pending
//! access of the trace's stores (the first replay of a run), or — when the replay directly
//! follows a replay of the same trace — the previous replay's vertices themselves, through the
//! recorded cross edges (`record::Cross`): consecutive replays overlap, with no barrier between
//! them. What comes after sees the trace's final accesses in the stores' access state, as
//! after ordinary analysis.

use crate::execute::graph::{Node, Work};
use crate::execute::launch::Launched;
use std::sync::{Arc, Mutex, OnceLock};

/// Where a vertex's work is: task index and point (`FINISH` for the finish step).
#[derive(Clone, Copy, Debug)]
struct At {
    task: u32,
    point: u32,
}

const FINISH: u32 = u32::MAX;

/// A trace's graph as actors: static out-edges (CSR), in-edge counts and owners per vertex.
#[derive(Debug)]
pub(crate) struct Compiled {
    first_succ: Vec<u32>,
    succs: Vec<u32>,
    in_edges: Vec<u32>,
    owner: Vec<u32>,
    at: Vec<At>,
    /// Finished nodes of an earlier replay that nobody holds any more, renewed by the next
    /// replay instead of allocated (see [`Run`]'s `Drop`).
    spare: Spare,
    /// Ended tasks of earlier replays that nobody holds, emptied ([`Launched::empty`]), for
    /// the next replays' launches (`ahead::SolvedTask::launch`).
    spare_tasks: Pool<Arc<Launched>>,
}

/// Recycled tasks (a wrapper: `Launched` has no `Debug`).
struct Pool<T>(Mutex<Vec<T>>);

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Pool(Mutex::new(Vec::new()))
    }
}

impl<T> Pool<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<T>> {
        // Only emptied tasks nobody holds are in it: a panic elsewhere leaves nothing half-done.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T> std::fmt::Debug for Pool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pool")
    }
}

/// Recycled nodes, one list per ended run (a wrapper: `Node` has no `Debug`). Not checked
/// when kept: [`Run::new`] checks each as it renews it ([`Node::renew`]), on the issuing
/// thread.
#[derive(Default)]
struct Spare(Mutex<Vec<Vec<Arc<Node>>>>);

impl Spare {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<Arc<Node>>>> {
        // Lists are only pushed and popped whole, and checked when renewed: a panic elsewhere
        // leaves nothing half-done.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for Spare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Spare")
    }
}

impl Compiled {
    /// Compiles a trace's logical graph (`tracing::record::Graph`): its `edges` between
    /// vertices, sorted by source, where the vertices are each task's `points[t]` points and
    /// then its finish step where `finish[t]`, in task order; for `workers` workers.
    pub(crate) fn new(
        edges: &[(u32, u32)],
        points: &[usize],
        finish: &[bool],
        workers: usize,
    ) -> Compiled {
        let n = points.iter().sum::<usize>() + finish.iter().filter(|&&f| f).count();
        let mut at = Vec::with_capacity(n);
        let mut owner = Vec::with_capacity(n);
        let workers = workers.max(1);
        for (t, (&pts, &fin)) in points.iter().zip(finish).enumerate() {
            for p in 0..pts {
                at.push(At {
                    task: t as u32,
                    point: p as u32,
                });
                owner.push((p % workers) as u32);
            }
            if fin {
                at.push(At {
                    task: t as u32,
                    point: FINISH,
                });
                owner.push(0);
            }
        }
        let mut first_succ = vec![0u32; n + 1];
        let mut in_edges = vec![0u32; n];
        for &(a, b) in edges {
            first_succ[a as usize + 1] += 1;
            in_edges[b as usize] += 1;
        }
        for v in 0..n {
            first_succ[v + 1] += first_succ[v];
        }
        // Edges are sorted by source: the CSR is their second components in order.
        let succs = edges.iter().map(|&(_, b)| b).collect();
        Compiled {
            first_succ,
            succs,
            in_edges,
            owner,
            at,
            spare: Spare::default(),
            spare_tasks: Pool::default(),
        }
    }

    /// Up to `n` spare tasks for a replay's launches (see [`Compiled::spare_tasks`]).
    pub(crate) fn take_spare_tasks(&self, n: usize) -> Vec<Arc<Launched>> {
        let mut spare = self.spare_tasks.lock();
        let keep = spare.len().saturating_sub(n);
        spare.split_off(keep)
    }

    /// Lets go of the spare nodes and tasks kept for the next replays (at a fence: the trace
    /// may never be replayed again, and its spares would stay for good). Freed outside the
    /// locks.
    pub(crate) fn let_go_of_spares(&self) {
        let nodes = std::mem::take(&mut *self.spare.lock());
        let tasks = std::mem::take(&mut *self.spare_tasks.lock());
        drop((nodes, tasks));
    }

    /// Ended runs' node lists kept for renewal.
    #[cfg(test)]
    pub(crate) fn spare_runs(&self) -> usize {
        self.spare.lock().len()
    }

    fn succs(&self, v: u32) -> &[u32] {
        let v = v as usize;
        &self.succs[self.first_succ[v] as usize..self.first_succ[v + 1] as usize]
    }
}

/// One replay of a compiled trace: its tasks and one node per vertex.
pub(crate) struct Run {
    compiled: Arc<Compiled>,
    tasks: Vec<Arc<Launched>>,
    /// Whether its points view their stores without ledger borrows (`tracing::verify`).
    trusted: bool,
    /// Set once right after the nodes are made (each node's work refers to this run; the
    /// cycle ends as each node runs and drops its work).
    nodes: OnceLock<Vec<Arc<Node>>>,
}

/// How many replays' worth of nodes a compiled trace keeps for recycling: the issuing thread
/// replays several runs ahead of the workers, and their runs end in a batch.
const SPARE_RUNS: usize = 8;

/// The run ends when the last reference goes: usually the issuing thread's
/// (`Tracing::end_runs`), else the worker that ran its last vertex — in the middle of a stencil
/// step's critical path, since the next step's points are queued only after `run_node`
/// returns (ending a run there cost ~1.4–3.5 µs, branch `metg11`: emptying its tasks, checking
/// its nodes, waiting for the lock `Run::new` held while it built nodes). Its node list goes
/// to the compiled trace (up to [`SPARE_RUNS`] runs' worth) untouched: which of them nothing
/// else holds (not a store's last access, not a worker's hand) is checked by [`Run::new`] as
/// it renews them, where writing the node touches its cache line anyway.
impl Drop for Run {
    fn drop(&mut self) {
        let Some(nodes) = self.nodes.take() else {
            return;
        };
        let mut spare = self.compiled.spare.lock();
        let extra = if spare.len() < SPARE_RUNS {
            spare.push(nodes);
            None
        } else {
            Some(nodes)
        };
        drop(spare);
        // More than `SPARE_RUNS` runs ended unrenewed (the trace is not being replayed): let
        // go outside the lock.
        drop(extra);
        // Every vertex has run, so every task has ended (`Launched::end`): those nobody else
        // holds are emptied (their stores and futures let go now) and kept.
        let mut tasks = std::mem::take(&mut self.tasks);
        let cap = SPARE_RUNS * tasks.len();
        tasks.retain_mut(|t| Arc::get_mut(t).map(Launched::empty).is_some());
        let mut spare = self.compiled.spare_tasks.lock();
        let room = cap.saturating_sub(spare.len());
        spare.extend(tasks.into_iter().take(room));
    }
}

impl Run {
    /// One replay of `compiled` over `tasks`: one node per vertex, each pending on its
    /// in-edges inside the trace (plus the issue guard), not yet started. The replay's
    /// tasks and nodes are read through the run ([`Run::tasks`], [`Run::nodes`]), not
    /// copied out of it (two lists of reference counts per replay).
    /// `trusted`: the recorded graph (and the link to the replay before, if any) was verified
    /// to order every conflicting access (`tracing::verify`), so the points take no ledger
    /// borrows.
    pub(crate) fn new(
        compiled: &Arc<Compiled>,
        tasks: Vec<Arc<Launched>>,
        trusted: bool,
    ) -> Arc<Run> {
        let run = Arc::new(Run {
            compiled: compiled.clone(),
            tasks,
            trusted,
            nodes: OnceLock::new(),
        });
        // One ended run's nodes, taken out under the lock and renewed after it: a worker
        // ending a run never waits for the nodes to be made.
        let mut spare = compiled.spare.lock().pop().unwrap_or_default();
        let nodes: Vec<Arc<Node>> = (0..compiled.at.len())
            .map(|v| {
                let work = Work::Actor {
                    run: run.clone(),
                    vertex: v as u32,
                };
                let (owner, in_edges) = (compiled.owner[v], compiled.in_edges[v] as usize);
                // Only a finished node nobody else holds is renewed; the others are let go.
                let old = std::iter::from_fn(|| spare.pop())
                    .find_map(|mut n| Node::is_spare(&mut n).then_some(n));
                Node::renew(old, work, owner, in_edges)
            })
            .collect();
        drop(spare);
        let _ = run.nodes.set(nodes);
        run
    }

    /// The replay's nodes, one per vertex of the compiled trace.
    pub(crate) fn nodes(&self) -> &[Arc<Node>] {
        self.nodes
            .get()
            .expect("nodes are set when the run is made")
    }

    /// The replay's launched tasks, in trace order.
    pub(crate) fn tasks(&self) -> &[Arc<Launched>] {
        &self.tasks
    }

    /// What `vertex` runs: a point of one of the replay's tasks, or (`None`) its finish step.
    /// By reference: the run holds the tasks, so running a vertex takes no reference count
    /// of its task (whose count the workers running the task's other points touch too).
    pub(crate) fn vertex(&self, vertex: u32) -> (&Launched, Option<usize>) {
        let at = self.compiled.at[vertex as usize];
        let task = &self.tasks[at.task as usize];
        match at.point {
            FINISH => (task, None),
            point => (task, Some(point as usize)),
        }
    }

    /// Whether the replay's points take no ledger borrows ([`Run::new`]).
    pub(crate) fn trusted(&self) -> bool {
        self.trusted
    }

    /// Counts `vertex` done for its static successors; pushes those that became ready.
    pub(crate) fn release_succs(&self, vertex: u32, ready: &mut crate::execute::graph::NodeList) {
        let nodes = self.nodes.get().expect("nodes are set before any runs");
        for &s in self.compiled.succs(vertex) {
            let node = &nodes[s as usize];
            if node.release() {
                ready.push(node.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiling_keeps_every_edge_counts_in_edges_and_spreads_points_over_workers() {
        // Task 0: two points; task 1: two points and a finish step (vertex 4).
        let g = [(0, 2), (0, 3), (1, 3), (2, 4), (3, 4)];
        let c = Compiled::new(&g, &[2, 2], &[false, true], 2);
        let succs: Vec<Vec<u32>> = (0..5).map(|v| c.succs(v).to_vec()).collect();
        assert_eq!(succs, [vec![2, 3], vec![3], vec![4], vec![4], vec![]]);
        assert_eq!(c.in_edges, [0, 0, 1, 2, 2]);
        assert_eq!(c.owner, [0, 1, 0, 1, 0]);
        assert_eq!(c.at[4].point, FINISH);
        // One worker owns everything.
        let one = Compiled::new(&g, &[2, 2], &[false, true], 1);
        assert!(one.owner.iter().all(|&o| o == 0));
    }

    #[test]
    fn a_run_s_finished_nodes_nobody_holds_are_renewed_by_the_next_run_as_good_as_new() {
        let g = [(0, 2), (0, 3), (1, 3), (2, 4), (3, 4)];
        let c = Arc::new(Compiled::new(&g, &[2, 2], &[false, true], 2));
        let run = Run::new(&c, vec![], false);
        let nodes = run.nodes().to_vec();
        let done = crate::execute::graph::Completion::default();
        // Vertex 0 stays held (as a store's last access would hold it); vertex 1 is taken
        // but never completes; the other three finish and nothing holds them.
        for (v, n) in nodes.iter().enumerate() {
            assert!(n.take_work().is_some());
            if v != 1 {
                n.complete(&done);
            }
        }
        let held = nodes[0].clone();
        let old: Vec<*const Node> = nodes.iter().map(Arc::as_ptr).collect();
        drop(nodes);
        assert_eq!(c.spare.lock().len(), 0);
        // The run ends with the last reference to it (here; in a replay, its last node's work).
        drop(run);
        // The ending run keeps its node list as it is (its worker checks nothing): the next
        // run checks each node as it renews it.
        let kept: Vec<*const Node> = c.spare.lock().iter().flatten().map(Arc::as_ptr).collect();
        assert_eq!(kept, old);
        let spare = [old[2], old[3], old[4]];
        let next = Run::new(&c, vec![], false);
        assert!(c.spare.lock().is_empty());
        let renewed = next
            .nodes()
            .iter()
            .filter(|n| spare.contains(&Arc::as_ptr(n)));
        assert_eq!(renewed.count(), 3);
        // Vertex 0's node is made while every spare node is alive (taken from the list's
        // end): a freed one's address reused by the allocator cannot pass for a renewed one.
        assert_eq!(Arc::as_ptr(&next.nodes()[0]), old[4]);
        for (v, n) in next.nodes().iter().enumerate() {
            assert!(!Arc::ptr_eq(n, &held));
            assert!(!n.is_done());
            assert_eq!(n.owner(), c.owner[v]);
            // Pending on its in-edges plus the issue guard, as a new node.
            for _ in 0..c.in_edges[v] {
                assert!(!n.release());
            }
            assert!(n.release());
            match n.take_work() {
                Some(Work::Actor { vertex, .. }) => assert_eq!(vertex, v as u32),
                _ => panic!("vertex {v} has no actor work"),
            }
        }
        assert!(held.is_done());
    }
}
