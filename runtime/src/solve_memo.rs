//! Replaying the solver's answer for a task issued again.
//!
//! Iterative programs issue the same tasks over the same store views step after step. The
//! solver's answer depends only on the task's constraints and fixed domain, each argument's
//! store, view and privilege, the key partitions of those stores, and — for image sources — the
//! version of the source's values (thesis §3.1.3: key partitions make the answer a function of
//! the stores' partitioning state). When all of these are unchanged the memo hands back the
//! earlier solution and each argument's per-point sub-stores, so the issuing thread skips the
//! solve, the sub-store arithmetic and the aliasing checks. The dependence analysis still runs
//! for every task: it depends on what is pending, not on the shapes.
//!
//! This is the per-task half of memoised analysis; replaying whole recorded traces (automatic
//! tracing) builds on the same tokens.

use crate::constraint::Constraint;
use crate::partition::{Domain, PartitionId};
use crate::rect::Rect;
use crate::solver::{Solution, SolverArg};
use crate::task::Args;
use rustc_hash::{FxHashMap as HashMap, FxHasher};
use smallvec::SmallVec;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Entries kept before the memo starts over (bounds memory for programs that never repeat).
const CAPACITY: usize = 4096;

/// What the solver's answer depends on, for one argument.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ArgState {
    root: u64,
    rect: Option<Rect>,
    writes: bool,
    /// The store's key partitions when the task was solved.
    keys: SmallVec<[PartitionId; 4]>,
    /// The store's version, for image sources (their values decide the image).
    version: Option<u64>,
}

/// Everything the solver's answer depends on.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct SolveKey {
    task: Arc<str>,
    args: Args<ArgState>,
    constraints: Args<Constraint>,
    fixed: Option<Domain>,
}

impl SolveKey {
    /// The current state of a task's inputs to the solver.
    pub(crate) fn new(
        task: &Arc<str>,
        args: &[SolverArg],
        constraints: &[Constraint],
        fixed: Option<Domain>,
    ) -> SolveKey {
        let is_image_src = |i: usize| {
            constraints
                .iter()
                .any(|c| matches!(c, Constraint::Image { src, .. } if *src == i))
        };
        let args = args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let meta = a.root.meta();
                ArgState {
                    root: a.root.id,
                    rect: a.rect,
                    writes: a.writes,
                    keys: meta.keys.iter().copied().collect(),
                    version: is_image_src(i).then_some(meta.version),
                }
            })
            .collect();
        SolveKey {
            task: task.clone(),
            args,
            constraints: constraints.iter().cloned().collect(),
            fixed,
        }
    }

    fn hash64(&self) -> u64 {
        let mut h = FxHasher::default();
        self.hash(&mut h);
        h.finish()
    }
}

/// A solution with each argument's per-point sub-stores (empty for unbound outputs).
#[derive(Clone)]
pub(crate) struct Solved {
    pub solution: Solution,
    pub rects: Args<Arc<[Rect]>>,
}

#[derive(Default)]
pub(crate) struct SolveMemo {
    /// By the key's hash; a bucket holds the (rare) colliding keys.
    entries: HashMap<u64, SmallVec<[(SolveKey, Solved); 1]>>,
    len: usize,
}

impl SolveMemo {
    /// The solution recorded for `key`, if its inputs are unchanged.
    pub(crate) fn get(&self, key: &SolveKey) -> Option<&Solved> {
        let bucket = self.entries.get(&key.hash64())?;
        bucket.iter().find(|(k, _)| k == key).map(|(_, s)| s)
    }

    /// Records a solution (replayable ones only: see [`Solution::replayable`]).
    pub(crate) fn insert(&mut self, key: SolveKey, solved: Solved) {
        if !solved.solution.replayable {
            return;
        }
        if self.len >= CAPACITY {
            self.entries.clear();
            self.len = 0;
        }
        let bucket = self.entries.entry(key.hash64()).or_default();
        if !bucket.iter().any(|(k, _)| *k == key) {
            bucket.push((key, solved));
            self.len += 1;
        }
    }
}
