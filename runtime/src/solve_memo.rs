//! Replaying the solver's answer for a task issued again.
//!
//! Iterative programs issue the same tasks over the same store views step after step. The
//! solver's answer depends only on the task's constraints and fixed domain, each argument's
//! store, view and privilege, the key partitions of those stores, and — for image sources — the
//! version of the source's values (thesis §3.1.3: key partitions make the answer a function of
//! the stores' partitioning state). When all of these are unchanged the memo hands back the
//! earlier solution and each argument's per-point sub-stores, so the issuing thread skips the
//! solve, the sub-store arithmetic and the aliasing checks. Key partitions are compared by
//! per-store epochs (bumped when they change), so a lookup takes no locks. The dependence analysis still runs
//! for every task: it depends on what is pending, not on the shapes.
//!
//! This is the per-task half of memoised analysis; replaying whole recorded traces (automatic
//! tracing) builds on the same tokens.
//!
//! *Fresh stores.* An iterative program usually makes its intermediates anew every iteration
//! (`let q = spmv(a, p)`): keyed on store ids, every task naming such a store missed, was
//! solved again and left an entry that could never hit (3 of a CG iteration's 6 tasks, 8 of
//! BiCGSTAB's 12). On a miss the memo therefore looks again with the stores renamed: an
//! argument that is no image's source is named by its first appearance among the task's
//! arguments and described by its key partitions themselves (ids of interned partitions, which
//! do not name a store), which is all the solver reads of it; image sources keep their store
//! and state (the image is made from the source's values). An image's destination is renamed
//! too: its partition is a function of the source and the destination's bounds (`ImageKey`
//! names no destination store), so an SpMV over a vector made anew every iteration (CG written
//! naturally: `p = r + β p`) replays its solve instead of missing the memo every time.

use crate::constraint::Constraint;
use crate::issue::task::Args;
use crate::partition::{Domain, PartitionId};
use crate::rect::Rect;
use crate::solver::{Solution, SolverArg};
use rustc_hash::{FxHashMap as HashMap, FxHasher};
use smallvec::SmallVec;
use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Entries kept before the memo starts over (bounds memory for programs that never repeat).
const CAPACITY: usize = 4096;
/// Entries kept per task shape (the same task seen with different key partitions).
const PER_SHAPE: usize = 8;

/// The part of an argument's state that changes as tasks run: its store's key partitions (by
/// their epoch) and, for an image source, the version of its values.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Partitioning {
    key_epoch: u64,
    version: Option<u64>,
}

/// What the solver's answer depends on, for one argument.
#[derive(Clone, PartialEq, Eq)]
struct ArgState {
    root: u64,
    rect: Option<Rect>,
    writes: bool,
    now: Partitioning,
}

/// One solve: its inputs and its answer.
struct Entry {
    task: Arc<str>,
    args: Args<ArgState>,
    constraints: Args<Constraint>,
    fixed: Option<Domain>,
    solved: Solved,
}

/// A solution with each argument's per-point sub-stores (empty for unbound outputs).
#[derive(Clone)]
pub(crate) struct Solved {
    pub solution: Solution,
    pub rects: Args<Arc<[Rect]>>,
}

/// A task as the solver sees it.
pub(crate) struct SolveInputs<'a> {
    pub task: &'a Arc<str>,
    pub args: &'a [SolverArg<'a>],
    pub constraints: &'a [Constraint],
    pub fixed: Option<Domain>,
}

/// A task's inputs to the solver, read once per task: where to look in the memo and each
/// argument's partitioning state.
pub(crate) struct Probe {
    shape: u64,
    /// Eight inline, as `Issued::args`.
    now: SmallVec<[Partitioning; 8]>,
    /// Read only when the lookup by store ids missed ([`SolveMemo::get`]).
    renamed: Option<Renamed>,
}

/// One argument as the renamed lookup sees it.
#[derive(Clone, PartialEq, Eq)]
enum RenamedArg {
    /// An image's source, or an unbound output: the store itself and its state, as in the
    /// lookup by ids.
    Same { root: u64, now: Partitioning },
    /// Any other store: the position of its first appearance among the task's arguments and
    /// its key partitions (what `Solver::find_key` and `record_keys` read of it).
    Renamed {
        first: usize,
        keys: SmallVec<[PartitionId; 4]>,
    },
}

/// A task's arguments renamed, and their hash with the rest of its shape.
struct Renamed {
    shape: u64,
    args: Args<(RenamedArg, Option<Rect>, bool)>,
}

impl Renamed {
    fn new(t: &SolveInputs, now: &[Partitioning]) -> Renamed {
        let args: Args<_> = t
            .args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                // An image's destination is renamed like any store: the image is made from
                // the source's values and the destination's bounds only (`ImageKey`).
                let store = if a.rect.is_none() || is_image_src(t.constraints, i) {
                    RenamedArg::Same {
                        root: a.root.id,
                        now: now[i],
                    }
                } else {
                    let first = t.args[..i]
                        .iter()
                        .position(|b| Arc::ptr_eq(b.root, a.root))
                        .unwrap_or(i);
                    RenamedArg::Renamed {
                        first,
                        keys: a.root.meta().keys.iter().copied().collect(),
                    }
                };
                (store, a.rect, a.writes)
            })
            .collect();
        let mut h = FxHasher::default();
        h.write_usize(Arc::as_ptr(t.task) as *const u8 as usize);
        for (store, rect, writes) in &args {
            match store {
                RenamedArg::Same { root, .. } => h.write_u64(*root),
                RenamedArg::Renamed { first, keys } => {
                    h.write_usize(*first);
                    keys.iter().for_each(|k| h.write_u32(k.0));
                }
            }
            h.write_u8(*writes as u8);
            if let Some(r) = rect {
                r.lo().iter().chain(r.hi()).for_each(|&x| h.write_usize(x));
            }
        }
        t.constraints.hash(&mut h);
        t.fixed.hash(&mut h);
        Renamed {
            shape: h.finish(),
            args,
        }
    }
}

/// One solve under renamed stores.
struct RenamedEntry {
    task: Arc<str>,
    args: Args<(RenamedArg, Option<Rect>, bool)>,
    constraints: Args<Constraint>,
    fixed: Option<Domain>,
    solved: Solved,
}

impl RenamedEntry {
    fn matches(&self, t: &SolveInputs, r: &Renamed) -> bool {
        Arc::ptr_eq(&self.task, t.task)
            && self.fixed == t.fixed
            && self.constraints[..] == *t.constraints
            && self.args == r.args
    }
}

#[derive(Default)]
pub(crate) struct SolveMemo {
    /// By a hash of the task's shape (name, stores, views, privileges, constraints, domain);
    /// a bucket holds that shape's solves under different partitioning states.
    entries: HashMap<u64, SmallVec<[Entry; 1]>>,
    len: usize,
    /// The same solves under renamed stores ([`Renamed`]), by their hash.
    renamed: HashMap<u64, SmallVec<[RenamedEntry; 1]>>,
    renamed_len: usize,
}

impl Probe {
    pub(crate) fn new(t: &SolveInputs) -> Probe {
        let (args, constraints) = (t.args, t.constraints);
        // Hash small integers only (no derived `Hash` over whole rectangles): this runs for
        // every task issued.
        let mut h = FxHasher::default();
        h.write_usize(Arc::as_ptr(t.task) as *const u8 as usize);
        for a in args {
            h.write_u64(a.root.id);
            h.write_u8(a.writes as u8);
            if let Some(r) = a.rect {
                r.lo().iter().chain(r.hi()).for_each(|&x| h.write_usize(x));
            }
        }
        constraints.hash(&mut h);
        t.fixed.hash(&mut h);
        let now = args
            .iter()
            .enumerate()
            .map(|(i, a)| Partitioning {
                key_epoch: a.root.key_epoch.load(Ordering::Relaxed),
                version: is_image_src(constraints, i).then(|| a.root.meta().version),
            })
            .collect();
        Probe {
            shape: h.finish(),
            now,
            renamed: None,
        }
    }
}

fn is_image_src(constraints: &[Constraint], i: usize) -> bool {
    constraints
        .iter()
        .any(|c| matches!(c, Constraint::Image { src, .. } if *src == i))
}

impl Entry {
    fn matches(&self, t: &SolveInputs, now: &[Partitioning]) -> bool {
        Arc::ptr_eq(&self.task, t.task)
            && self.fixed == t.fixed
            && self.args.len() == t.args.len()
            && self.constraints[..] == *t.constraints
            && self.args.iter().zip(t.args).zip(now).all(|((e, a), n)| {
                e.root == a.root.id && e.rect == a.rect && e.writes == a.writes && e.now == *n
            })
    }
}

impl SolveMemo {
    /// The solution recorded for this task, if its inputs are unchanged: first by store ids,
    /// then with its stores renamed (which reads their key partitions, under their locks, only
    /// on a miss by ids).
    pub(crate) fn get(&self, probe: &mut Probe, t: &SolveInputs) -> Option<&Solved> {
        if let Some(e) = self
            .entries
            .get(&probe.shape)
            .and_then(|b| b.iter().find(|e| e.matches(t, &probe.now)))
        {
            return Some(&e.solved);
        }
        let r = probe.renamed.insert(Renamed::new(t, &probe.now));
        self.renamed
            .get(&r.shape)?
            .iter()
            .find(|e| e.matches(t, r))
            .map(|e| &e.solved)
    }

    /// Records a solution under the state `probe` read before solving (by a lookup that
    /// missed).
    pub(crate) fn insert(&mut self, probe: Probe, t: &SolveInputs, solved: Solved) {
        if let Some(r) = probe.renamed {
            let entry = RenamedEntry {
                task: t.task.clone(),
                args: r.args,
                constraints: t.constraints.into(),
                fixed: t.fixed,
                solved: solved.clone(),
            };
            push_bounded(&mut self.renamed, &mut self.renamed_len, r.shape, entry);
        }
        let entry = Entry {
            task: t.task.clone(),
            args: t
                .args
                .iter()
                .zip(probe.now)
                .map(|(a, now)| ArgState {
                    root: a.root.id,
                    rect: a.rect,
                    writes: a.writes,
                    now,
                })
                .collect(),
            constraints: t.constraints.into(),
            fixed: t.fixed,
            solved,
        };
        push_bounded(&mut self.entries, &mut self.len, probe.shape, entry);
    }
}

/// Adds `entry` under `shape` to a memo map holding `len` entries: a full map is emptied, and
/// a shape keeps its [`PER_SHAPE`] most recent entries.
fn push_bounded<E>(
    map: &mut HashMap<u64, SmallVec<[E; 1]>>,
    len: &mut usize,
    shape: u64,
    entry: E,
) {
    if *len >= CAPACITY {
        map.clear();
        *len = 0;
    }
    let bucket = map.entry(shape).or_default();
    if bucket.len() >= PER_SHAPE {
        bucket.remove(0);
        *len -= 1;
    }
    bucket.push(entry);
    *len += 1;
}
