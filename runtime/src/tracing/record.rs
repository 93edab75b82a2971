//! A recorded trace: what each launched task of one occurrence was (the fields the dependence
//! analysis depends on, checked before every replay) and the *logical* dependence graph of the
//! occurrence (thesis §5.2–5.3, issue 14 item 4).
//!
//! The graph is computed from the tasks alone, by Definition 1 over their sub-stores, never
//! from the live graph: the live analysis skips edges to finished nodes and prunes finished
//! accesses, so what it leaves depends on timing. Vertices are (task, point) pairs and each
//! task's finish step; edges come from overlapping accesses (reads after writes, writes after
//! reads and writes, a reduction's finish step as a writer), from a future made inside the
//! trace to the points that take it, and from each task's points to its finish step.
//!
//! What came before the trace is not part of the recording: a replay orders the graph's
//! sources after one *entry* vertex that waits for every pending access to the trace's stores
//! (its precondition, taken from the live state at each replay), and leaves as each store's
//! access state the entry vertex (standing for everything before) plus the trace's final
//! accesses (its postcondition). Because nothing about the state before the trace is assumed,
//! a trace whose first occurrence saw a different state (§5.4.3, non-idempotent traces) replays
//! correctly from any state; the solver's answers are replayed only from the key partitions
//! and image-source versions they were recorded from (`ahead.rs`). Stores are numbered by their
//! first appearance in the trace, so a replay may run over other stores in the same pattern.

use super::ahead::{numbering, Conditions, IssuedTrace, SolvedTask};
use super::fuse::{launches, Cut};
use super::verify::{self, Access};
use crate::dtype::ReduceOp;
use crate::execute::launch::LaunchArg;
use crate::fusion::FusedShape;
use crate::issue::task::{Privilege, ScalarArg, TaskBody};
use crate::partition::Domain;
use crate::rect::distinct;
use crate::rect::Rect;
use crate::runtime::Plan;
use smallvec::SmallVec;
use std::sync::Arc;

/// Where a task's scalar comes from, as far as dependences go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Producer {
    Value,
    /// A future made before the trace (or a ready one): its producer is found at replay.
    External,
    /// A future made by the trace's `plan`-th task.
    Internal {
        plan: u32,
    },
}

/// One argument as the analysis sees it.
#[derive(Debug)]
struct ArgSig {
    /// The store, numbered by its first appearance in the trace (`ahead::numbering`).
    store: u32,
    /// The store's extent (what [`PRE`] writes).
    whole: Rect,
    privilege: Privilege,
    local: bool,
    rects: Arc<[Rect]>,
}

/// The fields of one launched task that its analysis depends on. A replay compares them with
/// the task it replaces: tokens are hashes, and equal hashes prove nothing.
struct Sig {
    name: Arc<str>,
    fused: Option<Arc<FusedShape>>,
    domain: Domain,
    args: SmallVec<[ArgSig; 4]>,
    scalars: SmallVec<[Producer; 2]>,
    results: SmallVec<[ReduceOp; 1]>,
}

/// A store's accesses left by the trace: (rectangle, vertex).
#[derive(Debug, Default)]
pub(crate) struct FinalAccess {
    /// Where the store is found in a replay's tasks: (task, argument); in [`Cross`], of the
    /// replay before when `before` holds.
    pub at: (usize, usize),
    pub before: bool,
    /// The store's number (in [`Cross`]: over both traces).
    pub store: u32,
    pub writers: Vec<(Rect, u32)>,
    pub readers: Vec<(Rect, u32)>,
}

/// The logical dependence graph of one occurrence.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    /// Vertices: per task its points, then its finish step if it has one.
    pub vertices: usize,
    pub edges: Vec<(u32, u32)>,
    /// Vertices without an in-edge inside the trace: they wait for the entry vertex.
    pub sources: Vec<u32>,
    pub stores: Vec<FinalAccess>,
}

/// A recorded trace: signatures of its tasks (as issued and as solved), the partitioning
/// state its solves started from and left, the solves' answers, and its logical graph.
pub(crate) struct Recording {
    sigs: Vec<Sig>,
    pub issued: IssuedTrace,
    pub solved: Vec<SolvedTask>,
    pub conditions: Conditions,
    /// The launches the issued tasks make (`fuse.rs`): `solved` is per issued task, the
    /// signatures and the graph per launch.
    pub cuts: Vec<Cut>,
    pub graph: Graph,
    /// For a replay right after a replay of the trace given as key (actors), made when first
    /// needed.
    /// The key also says which of the previous replay's stores this one's are (by number:
    /// [`Recording::cross_after`]).
    pub cross: rustc_hash::FxHashMap<(super::TraceId, Vec<u32>), Arc<Cross>>,
    /// The graph compiled into actors (on first replay with actors on).
    pub actors: Option<std::sync::Arc<crate::execute::actors::Compiled>>,
    /// Whether the graph orders every two conflicting accesses of the trace (checked apart
    /// from the analysis that made it, `verify.rs`): its replays as actors view their stores
    /// without ledger borrows.
    pub trusted: bool,
    /// Replays in a row that found the tasks as recorded but not the temporary flags
    /// (`Tracing::flags_went_stale`).
    pub flag_misses: u8,
    /// Recorded or replayed since the last fence (`Tracing::let_go_of_replays`).
    pub used: bool,
    /// Fences in a row before which the recording was neither made nor replayed: at
    /// `KEEP_IDLE` it is let go (`Tracing::let_go_of_unused_recordings`).
    pub idle: u8,
}

impl Recording {
    /// Records the occurrence `plans` (tasks the tracer holds are traceable: no unbound
    /// outputs; each solved alone), solved from the tasks `issued` starting from
    /// `conditions`, launched as `cuts` say (fused tasks running `body`). Returns the
    /// launches too.
    pub(crate) fn new(
        plans: Vec<Plan>,
        cuts: Vec<Cut>,
        body: &TaskBody,
        issued: IssuedTrace,
        mut conditions: Conditions,
    ) -> (Recording, Vec<Plan>) {
        conditions.after(&plans);
        let solved = plans.iter().map(SolvedTask::of).collect();
        let plans = launches(&cuts, plans, body);
        let numbers = plan_numbers(&plans);
        let sigs: Vec<Sig> = plans
            .iter()
            .enumerate()
            .map(|(i, p)| sig(p, &plans[..i], &numbers[i]))
            .collect();
        let graph = graph(&sigs);
        let trusted = verify::conflicts_ordered(
            graph.vertices,
            &graph.edges,
            PRE,
            &accesses(&[(&sigs, None)]),
            |_, _| true,
        );
        let rec = Recording {
            trusted,
            sigs,
            issued,
            solved,
            conditions,
            cuts,
            graph,
            cross: Default::default(),
            actors: None,
            flag_misses: 0,
            used: true,
            idle: 0,
        };
        (rec, plans)
    }

    /// Whether `plans` are, field for field, the tasks recorded.
    pub(crate) fn matches(&self, plans: &[Plan]) -> bool {
        let numbers = plan_numbers(plans);
        plans.len() == self.sigs.len()
            && plans
                .iter()
                .enumerate()
                .zip(&self.sigs)
                .all(|((i, p), s)| same(s, p, &plans[..i], &numbers[i]))
    }

    /// Where each task's scalars come from (as recorded and verified).
    pub(crate) fn producers(&self, task: usize) -> &[Producer] {
        &self.sigs[task].scalars
    }
}

/// Whether `t` can be held back and replayed: tasks producing unbound stores bind them in
/// their finish step, which later tasks' solving waits for, so they are never held. A task
/// reading such a store may be: a replay waits for the binding before it records or compares
/// anything. The answer depends on the task alone, never on whether a store is bound yet
/// (that depends on whether a worker has run its producer, and ranks would decide apart).
pub(crate) fn traceable(t: &crate::issue::task::Issued) -> bool {
    t.args
        .iter()
        .all(|a| a.privilege != Privilege::WriteUnbound)
}

/// Where scalar `s` comes from, `makes(i, cell)` telling whether the trace's `i`-th task (of
/// the `n` before it) makes the future `cell`.
pub(crate) fn producer_in(
    s: &ScalarArg,
    n: usize,
    makes: impl Fn(usize, &Arc<crate::future::FutureCell>) -> bool,
) -> Producer {
    match s {
        ScalarArg::Value(_) => Producer::Value,
        ScalarArg::Future(cell) => (0..n)
            .position(|i| makes(i, cell))
            .map_or(Producer::External, |i| Producer::Internal {
                plan: i as u32,
            }),
    }
}

fn producer(s: &ScalarArg, before: &[Plan]) -> Producer {
    producer_in(s, before.len(), |i, cell| {
        before[i].results.iter().any(|(_, c)| Arc::ptr_eq(c, cell))
    })
}

/// Each task's arguments' store numbers in a trace of solved tasks.
fn plan_numbers(plans: &[Plan]) -> Vec<Vec<u32>> {
    let (all, _) = numbering(plans.iter().flat_map(|p| p.args.iter().map(|a| &a.root)));
    let mut all = all.into_iter();
    plans
        .iter()
        .map(|p| all.by_ref().take(p.args.len()).collect())
        .collect()
}

fn sig(p: &Plan, before: &[Plan], stores: &[u32]) -> Sig {
    Sig {
        name: p.name.clone(),
        fused: p.fused.clone(),
        domain: p.domain,
        args: p
            .args
            .iter()
            .zip(stores)
            .map(|(a, &store)| ArgSig {
                store,
                whole: a.root.bound().map_or(a.view, |b| b.rect),
                privilege: a.privilege,
                local: a.local,
                rects: a.rects.clone(),
            })
            .collect(),
        scalars: p.scalars.iter().map(|s| producer(s, before)).collect(),
        results: p.results.iter().map(|(op, _)| *op).collect(),
    }
}

fn same_arg(s: &ArgSig, a: &LaunchArg, store: u32) -> bool {
    s.store == store
        && s.privilege == a.privilege
        && s.local == a.local
        && (Arc::ptr_eq(&s.rects, &a.rects) || *s.rects == *a.rects)
}

fn same(s: &Sig, p: &Plan, before: &[Plan], stores: &[u32]) -> bool {
    let same_shape = match (&s.fused, &p.fused) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    };
    same_shape
        && (Arc::ptr_eq(&s.name, &p.name) || s.name == p.name)
        && s.domain == p.domain
        && s.args.len() == p.args.len()
        && s.args
            .iter()
            .zip(&p.args)
            .zip(stores)
            .all(|((s, a), &n)| same_arg(s, a, n))
        && s.scalars.len() == p.scalars.len()
        && s.scalars
            .iter()
            .zip(&p.scalars)
            .all(|(&s, a)| s == producer(a, before))
        && s.results.len() == p.results.len()
        && s.results.iter().zip(&p.results).all(|(a, (b, _))| a == b)
}

/// Definition 1 over vertex numbers, for one store (no pruning: nothing has run).
#[derive(Default)]
struct Logical {
    writers: Vec<(Rect, u32)>,
    readers: Vec<(Rect, u32)>,
}

impl Logical {
    fn read(&mut self, rect: Rect, v: u32, edges: &mut Vec<(u32, u32)>) {
        for &(r, w) in &self.writers {
            if r.overlaps(&rect) && w != v {
                edges.push((w, v));
            }
        }
        self.readers.push((rect, v));
    }

    fn write(&mut self, rect: Rect, v: u32, edges: &mut Vec<(u32, u32)>) {
        for &(r, u) in self.writers.iter().chain(&self.readers) {
            if r.overlaps(&rect) && u != v {
                edges.push((u, v));
            }
        }
        self.writers.retain(|(r, _)| !rect.contains(r));
        self.readers.retain(|(r, _)| !rect.contains(r));
        self.writers.push((rect, v));
    }
}

/// The vertex standing for everything before the first copy (a writer of each whole store)
/// in [`Cross`].
pub(crate) const PRE: u32 = u32::MAX;

/// What one replay of a trace needs when it directly follows a replay of the same trace
/// (nothing else analysed in between): Definition 1 over two copies of the trace, starting
/// from one writer of every whole store ([`PRE`]). Vertices `0..n` are the previous replay's,
/// `n..2n` the new one's.
#[derive(Debug, Default)]
pub(crate) struct Cross {
    /// Edges into the new replay from the previous one (or from [`PRE`]): (u, v - n).
    pub edges: Vec<(u32, u32)>,
    /// Each store's accesses after both copies (vertices numbered as above, or [`PRE`]).
    pub stores: Vec<FinalAccess>,
    /// Whether the second trace uses only stores the first one uses. Only those stores'
    /// access states are known to be [`PRE`] and the first trace's final accesses: the
    /// second trace is linked to the first only if it holds.
    pub closed: bool,
    /// Whether every access of the first trace that conflicts with one of the second reaches
    /// it through both traces' edges and these (`verify.rs`).
    pub trusted: bool,
}

/// The trace's logical graph, in the order `Inner::schedule` analyses (futures, arguments,
/// then points before the finish step), so that it has the edges ordinary analysis of the same
/// tasks would add with nothing finished.
fn graph(sigs: &[Sig]) -> Graph {
    let (edges, next, stores) = logical(&[(sigs, None)], false);
    let mut has_pred = vec![false; next as usize];
    edges.iter().for_each(|&(_, b)| has_pred[b as usize] = true);
    Graph {
        vertices: next as usize,
        sources: (0..next).filter(|&v| !has_pred[v as usize]).collect(),
        edges,
        stores,
    }
}

impl Recording {
    /// [`Cross`] of this trace replayed right after `before`: the edges from `before`'s
    /// vertices (and from before it) into this one's, and the accesses both leave. This
    /// trace's store `k` is `before`'s store `same[k]` (a number past `before`'s stores: one
    /// it does not use).
    pub(crate) fn cross_after(&self, before: &Recording, same: &[u32]) -> Cross {
        let n = before.graph.vertices as u32;
        let both = [(&before.sigs[..], None), (&self.sigs[..], Some(same))];
        let (edges, _, stores) = logical(&both, true);
        let cross = edges
            .iter()
            .filter(|&&(u, v)| v >= n && (u < n || u == PRE))
            .copied();
        let shifted = self.graph.edges.iter().map(|&(u, v)| (u + n, v + n));
        let all: Vec<(u32, u32)> = before
            .graph
            .edges
            .iter()
            .copied()
            .chain(cross)
            .chain(shifted)
            .collect();
        let trusted = before.trusted
            && self.trusted
            && verify::conflicts_ordered(
                n as usize + self.graph.vertices,
                &all,
                PRE,
                &accesses(&both),
                |u, v| u < n && v >= n,
            );
        Cross {
            trusted,
            edges: edges
                .into_iter()
                .filter(|&(u, v)| v >= n && (u < n || u == PRE))
                .map(|(u, v)| (u, v - n))
                .collect(),
            closed: stores.iter().all(|s| s.before),
            stores,
        }
    }
}

/// Every vertex's accesses to the stores of `traces` in a row, numbered as [`logical`]
/// numbers them (stores through each trace's map): a point's reads and writes of its
/// sub-stores, a finish step's writes of what its task reduces. Scratch (`local`) is the
/// point's own.
fn accesses(traces: &[(&[Sig], Option<&[u32]>)]) -> Vec<Access> {
    let mut out = Vec::new();
    let mut next = 0u32;
    for &(sigs, map) in traces {
        for s in sigs {
            let n = s.domain.len() as u32;
            let finish = next + n;
            for a in s.args.iter().filter(|a| !a.local) {
                let store = map.map_or(a.store, |m| m[a.store as usize]);
                let access = |vertex, rect, writes| Access {
                    vertex,
                    store,
                    rect,
                    writes,
                };
                match a.privilege {
                    Privilege::Reduce(_) => out.extend(
                        distinct(&a.rects[..])
                            .into_iter()
                            .map(|r| access(finish, r, true)),
                    ),
                    p => out.extend(
                        (next..finish)
                            .zip(a.rects.iter())
                            .map(|(v, &r)| access(v, r, p.writes())),
                    ),
                }
            }
            next = finish + s.has_finish() as u32;
        }
    }
    out
}

impl Sig {
    fn has_finish(&self) -> bool {
        !self.results.is_empty()
            || self
                .args
                .iter()
                .any(|a| matches!(a.privilege, Privilege::Reduce(_) | Privilege::WriteUnbound))
    }
}

/// Definition 1 over traces in a row (vertices numbered on from one to the next; each trace's
/// store numbers mapped through its map, if any, to numbers common to all), each store
/// starting with [`PRE`] as the writer of all of it when `pre` holds. Returns the sorted
/// edges, the vertex count and the final accesses.
#[allow(clippy::type_complexity)]
fn logical(
    traces: &[(&[Sig], Option<&[u32]>)],
    pre: bool,
) -> (Vec<(u32, u32)>, u32, Vec<FinalAccess>) {
    let mut edges = Vec::new();
    let mut stores: Vec<(FinalAccess, Logical)> = Vec::new();
    let mut finish_of: Vec<Option<u32>> = Vec::new();
    let mut next = 0u32;
    for (copy, &(sigs, map)) in traces.iter().enumerate() {
        let base = finish_of.len();
        for (i, s) in sigs.iter().enumerate() {
            let n = s.domain.len() as u32;
            let points = next..next + n;
            let finish = s.has_finish().then_some(next + n);
            next += n + finish.is_some() as u32;
            finish_of.push(finish);
            for prod in &s.scalars {
                if let Producer::Internal { plan } = *prod {
                    let f = finish_of[base + plan as usize]
                        .expect("a task with a result has a finish step");
                    edges.extend(points.clone().map(|v| (f, v)));
                }
            }
            for (j, a) in s.args.iter().enumerate().filter(|(_, a)| !a.local) {
                let store = map.map_or(a.store, |m| m[a.store as usize]);
                let k = match stores.iter().position(|(f, _)| f.store == store) {
                    Some(k) => k,
                    None => {
                        let mut l = Logical::default();
                        if pre {
                            l.writers.push((a.whole, PRE));
                        }
                        let f = FinalAccess {
                            at: (i, j),
                            before: copy + 1 < traces.len(),
                            store,
                            ..FinalAccess::default()
                        };
                        stores.push((f, l));
                        stores.len() - 1
                    }
                };
                let st = &mut stores[k].1;
                let per_point = points.clone().zip(a.rects.iter());
                match a.privilege {
                    Privilege::Read => per_point.for_each(|(v, r)| st.read(*r, v, &mut edges)),
                    Privilege::Write | Privilege::ReadWrite => {
                        per_point.for_each(|(v, r)| st.write(*r, v, &mut edges))
                    }
                    Privilege::Reduce(_) => {
                        let f = finish.expect("reductions have a finish step");
                        for r in distinct(&a.rects[..]) {
                            st.write(r, f, &mut edges);
                        }
                    }
                    Privilege::WriteUnbound => unreachable!("unbound outputs are never traced"),
                }
            }
            if let Some(f) = finish {
                edges.extend(points.map(|v| (v, f)));
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    let mut reach = Reach::new(&edges, next);
    let stores = stores
        .into_iter()
        .map(|(mut f, l)| {
            f.writers = l.writers;
            f.readers = reach.reduce(l.readers);
            f
        })
        .collect();
    (edges, next, stores)
}

/// Reachability over a trace's logical graph, to leave out of a store's final readers those
/// that another final reader stands for ([`Reach::reduce`]).
struct Reach {
    /// Out-edges (CSR over the sorted edges; edges from [`PRE`] left out: it reads nothing).
    first: Vec<u32>,
    succs: Vec<u32>,
    /// Per vertex, the search that last visited it (`stamp`).
    seen: Vec<u32>,
    stamp: u32,
    /// Vertices the searches may still visit: past it, readers are kept as they are.
    budget: usize,
}

/// Vertex visits [`Reach::reduce`] may spend per recording (or per [`Cross`]): far more than
/// a trace of a few tasks of a few points needs, and a bound on a huge one (whose readers are
/// then kept, which is always correct).
const REACH_BUDGET: usize = 1 << 20;

impl Reach {
    fn new(edges: &[(u32, u32)], vertices: u32) -> Reach {
        let n = vertices as usize;
        let mut first = vec![0u32; n + 1];
        let inner = || edges.iter().filter(|&&(u, _)| u != PRE);
        inner().for_each(|&(u, _)| first[u as usize + 1] += 1);
        for v in 0..n {
            first[v + 1] += first[v];
        }
        // Sorted by source: the second components in order are the CSR.
        let succs = inner().map(|&(_, v)| v).collect();
        Reach {
            first,
            succs,
            seen: vec![0; n],
            stamp: 0,
            budget: REACH_BUDGET,
        }
    }

    /// Marks every vertex reachable from `from` (by a path of one edge or more) with a new
    /// stamp; `false` if the budget ran out first (then nothing may be concluded).
    fn search(&mut self, from: u32) -> bool {
        self.stamp += 1;
        let mut stack = vec![from];
        while let Some(u) = stack.pop() {
            let Some(left) = self.budget.checked_sub(1) else {
                return false;
            };
            self.budget = left;
            let (a, b) = (self.first[u as usize], self.first[u as usize + 1]);
            for &v in &self.succs[a as usize..b as usize] {
                if self.seen[v as usize] != self.stamp {
                    self.seen[v as usize] = self.stamp;
                    stack.push(v);
                }
            }
        }
        true
    }

    /// A store's final readers without those another of them stands for: reader `(r, u)` is
    /// left out when a reader `(s, v)` with `s ⊇ r` follows it in the graph (`u` reaches `v`;
    /// or `v == u` with `s ⊋ r`, or an equal entry listed first). Whatever must wait for the
    /// readers of a rectangle is a write over it, which then waits for `v`, and `v` runs only
    /// after `u` (a node runs after its predecessors, or an edge from a finished one was not
    /// needed): the same order with fewer nodes in the access state. The relation is a strict
    /// order, so every reader left out has a kept reader standing for it. A stencil's halo
    /// cells are read every step and written by none, so their readers piled up: 32 final
    /// readers per store over two replays of the bench's trace, 6 after.
    fn reduce(&mut self, readers: Vec<(Rect, u32)>) -> Vec<(Rect, u32)> {
        let mut kept = Vec::with_capacity(readers.len());
        for (i, &(r, u)) in readers.iter().enumerate() {
            let others = || {
                readers
                    .iter()
                    .enumerate()
                    .filter(move |&(j, &(s, _))| j != i && s.contains(&r))
            };
            // The same vertex over a larger rectangle, or an equal entry listed first.
            let mut covered = others().any(|(j, &(s, v))| v == u && (s != r || j < i));
            // A later reader: one search from `u` answers for all of them.
            if !covered && others().any(|(_, &(_, v))| v != u) && self.search(u) {
                covered = others().any(|(_, &(_, v))| self.seen[v as usize] == self.stamp);
            }
            if !covered {
                kept.push((r, u));
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::super::below;
    use super::*;

    fn cell(lo: usize, hi: usize) -> Rect {
        Rect::new(&[lo], &[hi])
    }

    /// Whether `(s, v)` stands for `(r, u)` as [`Reach::reduce`] defines it, by a naive
    /// transitive closure (`path[u][v]`: a path of one edge or more).
    fn stands_for(
        path: &[Vec<bool>],
        (i, (r, u)): (usize, (Rect, u32)),
        (j, (s, v)): (usize, (Rect, u32)),
    ) -> bool {
        i != j
            && s.contains(&r)
            && if u == v {
                s != r || j < i
            } else {
                path[u as usize][v as usize]
            }
    }

    #[test]
    fn final_readers_another_final_reader_follows_over_as_much_are_left_out() {
        // 0 -> 1 -> 2, 3 alone: the halo cell [0, 1) is read by 0 and 2 (2 follows 0: 0 is
        // left out), by 3 (nothing follows it over [0, 1): kept); 1 reads [0, 2), which 2's
        // [0, 1) does not cover (kept); 2 reads [0, 1) twice (the second is left out).
        let edges = [(0, 1), (1, 2), (PRE, 0)];
        let mut reach = Reach::new(&edges, 4);
        let readers = vec![
            (cell(0, 1), 0),
            (cell(0, 2), 1),
            (cell(0, 1), 2),
            (cell(0, 1), 3),
            (cell(0, 1), 2),
        ];
        assert_eq!(
            reach.reduce(readers),
            vec![(cell(0, 2), 1), (cell(0, 1), 2), (cell(0, 1), 3)]
        );
        // With no budget left, nothing is left out on a path's account (always correct).
        let mut spent = Reach::new(&edges, 4);
        spent.budget = 0;
        let readers = vec![(cell(0, 1), 0), (cell(0, 1), 2)];
        assert_eq!(spent.reduce(readers.clone()), readers);
    }

    /// Random traces of tasks over three stores (reads, writes, reductions, futures made and
    /// taken inside the trace, 1-3 points with overlapping sub-stores): the logical graph
    /// orders every conflict, alone and as two linked copies (`verify.rs` checks it apart
    /// from the analysis that made it), and with an edge taken out, the check agrees with a
    /// naive search over every conflicting pair.
    #[test]
    fn logical_graphs_order_every_conflict_and_the_check_sees_a_missing_edge() {
        let mut next = below(0x2545_f491_4f6c_dd1du64);
        let mut outcomes = [0usize; 2];
        for _ in 0..300 {
            let mut sigs: Vec<Sig> = Vec::new();
            for _ in 0..1 + next(6) {
                let points = 1 + next(3) as usize;
                let mut args = SmallVec::new();
                // Each store once in a task, as a task's points never conflict with each
                // other: a written store's sub-stores are disjoint (three cells a point),
                // a read one's may overlap (a halo).
                let used: Vec<u32> = (0..3).filter(|_| next(2) == 0).collect();
                for store in used {
                    let privilege = match next(5) {
                        0 | 1 => Privilege::Read,
                        2 => Privilege::Write,
                        3 => Privilege::ReadWrite,
                        _ => Privilege::Reduce(ReduceOp::Sum),
                    };
                    let rects: Vec<Rect> = (0..points)
                        .map(|p| match privilege {
                            Privilege::Read => {
                                let lo = next(6) as usize;
                                cell(lo, lo + 1 + next(3) as usize)
                            }
                            _ => cell(3 * p, 3 * p + 1 + next(3) as usize),
                        })
                        .collect();
                    args.push(ArgSig {
                        store,
                        whole: cell(0, 9),
                        privilege,
                        local: false,
                        rects: rects.into(),
                    });
                }
                // A future made by an earlier task with a result, sometimes.
                let makers: Vec<u32> = (0..sigs.len() as u32)
                    .filter(|&i| !sigs[i as usize].results.is_empty())
                    .collect();
                let mut scalars = SmallVec::new();
                if !makers.is_empty() && next(2) == 0 {
                    let plan = makers[next(makers.len() as u64) as usize];
                    scalars.push(Producer::Internal { plan });
                }
                let mut results = SmallVec::new();
                if next(3) == 0 {
                    results.push(ReduceOp::Sum);
                }
                sigs.push(Sig {
                    name: "t".into(),
                    fused: None,
                    domain: Domain::new(&[points]).expect("domain"),
                    args,
                    scalars,
                    results,
                });
            }
            let one = [(&sigs[..], None)];
            let (edges, n, _) = logical(&one, false);
            let acc = accesses(&one);
            assert!(
                verify::conflicts_ordered(n as usize, &edges, PRE, &acc, |_, _| true),
                "edges {edges:?} accesses {acc:?}"
            );
            // Two copies linked as a replay after a replay: every conflict across them too.
            let same: Vec<u32> = (0..3).collect();
            let two = [(&sigs[..], None), (&sigs[..], Some(&same[..]))];
            let (edges2, n2, _) = logical(&two, true);
            let acc2 = accesses(&two);
            assert!(verify::conflicts_ordered(
                n2 as usize,
                &edges2,
                PRE,
                &acc2,
                |u, v| { u < n && v >= n }
            ));
            // One edge out: the check says what a naive search over the pairs says.
            if edges.is_empty() {
                continue;
            }
            let mut cut = edges.clone();
            cut.remove(next(edges.len() as u64) as usize);
            let reaches = |u: u32, v: u32| {
                let mut stack = vec![u];
                let mut seen = vec![false; n as usize];
                while let Some(w) = stack.pop() {
                    for &(_, b) in cut.iter().filter(|e| e.0 == w) {
                        if b == v {
                            return true;
                        }
                        if !std::mem::replace(&mut seen[b as usize], true) {
                            stack.push(b);
                        }
                    }
                }
                false
            };
            let naive = acc.iter().all(|a| {
                acc.iter().all(|b| {
                    a.vertex >= b.vertex
                        || a.store != b.store
                        || !(a.writes || b.writes)
                        || !a.rect.overlaps(&b.rect)
                        || reaches(a.vertex, b.vertex)
                })
            });
            let checked = verify::conflicts_ordered(n as usize, &cut, PRE, &acc, |_, _| true);
            assert_eq!(
                checked, naive,
                "edges {edges:?} cut {cut:?} accesses {acc:?}"
            );
            outcomes[checked as usize] += 1;
        }
        // Both answers came up often: the cases test something.
        assert!(outcomes.iter().all(|&k| k > 20), "{outcomes:?}");
    }

    /// Random DAGs and readers against the definition: a reader is kept exactly when no other
    /// reader stands for it, and every reader left out has a kept one standing for it.
    #[test]
    fn reduced_readers_match_the_definition_on_random_graphs() {
        let mut next = below(0x9e37_79b9_7f4a_7c15u64);
        for _ in 0..300 {
            let n = 1 + next(12) as u32;
            let mut edges: Vec<(u32, u32)> = (0..next(30))
                .map(|_| (next(n as u64) as u32, next(n as u64) as u32))
                .filter(|&(a, b)| a < b)
                .collect();
            edges.sort_unstable();
            edges.dedup();
            let mut path = vec![vec![false; n as usize]; n as usize];
            for &(a, b) in edges.iter().rev() {
                let from_b = path[b as usize].clone();
                let row = &mut path[a as usize];
                row[b as usize] = true;
                row.iter_mut().zip(from_b).for_each(|(x, y)| *x |= y);
            }
            let readers: Vec<(Rect, u32)> = (0..next(10))
                .map(|_| {
                    let lo = next(4) as usize;
                    (cell(lo, lo + 1 + next(3) as usize), next(n as u64) as u32)
                })
                .collect();
            let kept = Reach::new(&edges, n).reduce(readers.clone());
            let all: Vec<_> = readers.iter().copied().enumerate().collect();
            let want: Vec<(Rect, u32)> = all
                .iter()
                .filter(|&&a| !all.iter().any(|&b| stands_for(&path, a, b)))
                .map(|&(_, x)| x)
                .collect();
            assert_eq!(kept, want, "edges {edges:?} readers {readers:?}");
            for &a in &all {
                assert!(
                    kept.contains(&a.1)
                        || all
                            .iter()
                            .any(|&b| kept.contains(&b.1) && stands_for(&path, a, b)),
                    "{a:?} left out with no kept reader standing for it"
                );
            }
        }
    }
}
