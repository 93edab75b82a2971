//! Failures inside a fused task, sub-task by sub-task: a fused task fails where its sub-tasks
//! would have failed unfused, not as a whole.
//!
//! Unfused, a task fails when its body panics, when a future argument failed, or when it
//! reads a store that an earlier failed task wrote and that nothing rewrote whole since; the
//! tasks around it run. A fused task keeps that: a point works out which sub-tasks cannot run
//! ([`settle`], before it starts and again whenever a sub-task's body panics), runs the
//! others (the chunk loop skips the failed steps), and records each failed sub-task's error
//! ([`Launched::fail_sub`]). After the last point the task settles once more over all points
//! (a sub-task that failed in one point fails the sub-tasks reading what it wrote in every
//! point), and only then clears rewritten stores, poisons the folds and unbound outputs of
//! failed sub-tasks and completes futures, each by the sub-task that wrote it
//! ([`Launched::end`], `run_finish`).
//!
//! Across ranks it is the same, rank by rank: a rank's points settle and poison their own
//! cells as above, and what crosses ranks says which sub-tasks failed, not that the whole task
//! did (only a failure of the runtime's own work for a point does that). A poisoned piece sent to another rank carries the error of the sub-task that
//! wrote it and poisons the receiving task's input only (`StoreRoot::set_received_poison`,
//! which a fused receiver's sub-tasks see, [`settle`]); the finish step's messages carry each
//! failed sub-task's error (`replicate::finish`, `codec::Failures`), so the settle at the
//! task's end fails the same sub-tasks, folds and futures on every rank.

use super::FusedShape;
use crate::error::RuntimeError;
use crate::execute::launch::{failed_future, not_computed, LaunchArg, Launched};
use crate::issue::task::Privilege;
use crate::store::StoreRoot;
use smallvec::SmallVec;

/// Per sub-task, in issue order: its error, or `None` while it can run.
pub(crate) type SubFailures = SmallVec<[Option<RuntimeError>; 8]>;

/// What a sub-task's store argument stands for while settling: a store, or a temporary (one
/// per fused argument; it has no store contents).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cell {
    Store(*const StoreRoot),
    Temporary(usize),
}

fn cell(a: &LaunchArg, j: usize) -> Cell {
    if a.local {
        Cell::Temporary(j)
    } else {
        Cell::Store(std::sync::Arc::as_ptr(&a.root))
    }
}

/// A write after which the store is trustworthy again: the whole store, not a fold (as
/// [`Launched::end`] clears a store's poison).
fn whole_write(a: &LaunchArg, p: Privilege) -> bool {
    p.writes()
        && !matches!(p, Privilege::Reduce(_))
        && (p == Privilege::WriteUnbound || a.root.bound().is_some_and(|b| b.rect == a.view))
}

/// Fills in `failed` (known failures kept) with every sub-task that cannot run or cannot be
/// trusted, in issue order: one reading a store or a temporary that a failed sub-task before
/// it wrote (and no sub-task between rewrote whole); with `inputs` (before a point runs any
/// sub-task: an unfused task looks at its inputs only as its point starts) also one whose
/// future argument failed, or that reads a store poisoned before the fused task that no
/// sub-task before it rewrote whole. New errors name the sub-task and `point`.
pub(crate) fn settle(
    task: &Launched,
    shape: &FusedShape,
    failed: &mut [Option<RuntimeError>],
    point: usize,
    inputs: bool,
) {
    settle_over(task, shape, failed, None, point, inputs);
}

/// `failed` worked out afresh at `point` from the sub-tasks' own panics there (`panics`), as
/// unfused points in issue order would see them: each sub-task fails for its first input
/// that cannot be trusted (or its failed future) when there is one, else for its own panic.
/// A sub-task that failed for an input before an earlier one panicked may fail for another
/// input now (the one the panic reached, if it comes first), and one that panicked in a chunk
/// before an earlier sub-task panicked in a later chunk fails for the input that reaches it:
/// unfused it would not have run.
pub(crate) fn resettle(
    task: &Launched,
    shape: &FusedShape,
    failed: &mut [Option<RuntimeError>],
    panics: &[Option<RuntimeError>],
    point: usize,
) {
    failed.iter_mut().for_each(|f| *f = None);
    settle_over(task, shape, failed, Some(panics), point, true);
}

/// [`settle`], where a sub-task without an input failure takes its own panic from `panics`.
fn settle_over(
    task: &Launched,
    shape: &FusedShape,
    failed: &mut [Option<RuntimeError>],
    panics: Option<&[Option<RuntimeError>]>,
    point: usize,
    inputs: bool,
) {
    // What the sub-tasks so far left in each cell they wrote (`Left`).
    let mut left: SmallVec<[Left; 8]> = SmallVec::new();
    for (s, sub) in shape.subs.iter().enumerate() {
        if failed[s].is_none() {
            failed[s] = input_failure(task, sub, &left, inputs, point)
                .map(|message| RuntimeError::TaskFailed {
                    task: sub.name.to_string(),
                    point: task.domain.point(point)[..task.domain.dim()].to_vec(),
                    message,
                })
                .or_else(|| panics.and_then(|p| p[s].clone()));
        }
        for &(j, p) in sub.args.iter().filter(|(_, p)| p.writes()) {
            let (a, c) = (&task.args[j], cell(&task.args[j], j));
            Left::wrote(&mut left, c, whole_write(a, p), &failed[s]);
        }
    }
}

/// What the sub-tasks so far left in one cell (a store, or a temporary), as unfused tasks
/// would have left it for a reader: `whole`, a sub-task rewrote it whole (failed or not:
/// poisonings from before it no longer reach the sub-tasks after, as a task's latest whole
/// rewrite hides older poisonings, `StoreRoot::last_rewrite`); `bad`, the first failure
/// since, which a reader sees (a store's reader sees its earliest poisoning since its last
/// whole rewrite, `Poison::first_within`, not the latest).
struct Left {
    cell: Cell,
    whole: bool,
    bad: Option<RuntimeError>,
}

impl Left {
    /// Sub-task outcome `failed` wrote cell `c`, whole or not.
    fn wrote(left: &mut SmallVec<[Left; 8]>, c: Cell, whole: bool, failed: &Option<RuntimeError>) {
        let i = match left.iter().position(|l| l.cell == c) {
            Some(i) => i,
            None => {
                left.push(Left {
                    cell: c,
                    whole: false,
                    bad: None,
                });
                left.len() - 1
            }
        };
        let l = &mut left[i];
        if whole {
            l.whole = true;
            l.bad = failed.clone();
        } else if l.bad.is_none() {
            l.bad = failed.clone();
        }
    }
}

/// Why sub-task `sub` cannot run at `point`, as the unfused task's point would say it: its
/// first input that cannot be trusted, poisoned before the fused task (the earliest
/// poisoning wins, unless a sub-task before rewrote the store whole) or by a failed sub-task
/// before it; then its failed future.
fn input_failure(
    task: &Launched,
    sub: &super::SubShape,
    left: &[Left],
    inputs: bool,
    point: usize,
) -> Option<String> {
    let reads = sub
        .args
        .iter()
        .filter(|(_, p)| matches!(p, Privilege::Read | Privilege::ReadWrite));
    for &(j, _) in reads {
        let a = &task.args[j];
        let c = cell(a, j);
        let l = left.iter().find(|l| l.cell == c);
        // Poisonings from before the fused task only (and, across ranks, failed pieces
        // received for it, its inputs): its own position's are its sub-tasks' (`left`),
        // which a sub-task before the failed one must not see.
        if inputs && !a.local && !l.is_some_and(|l| l.whole) {
            let (since, cells) = (task.since_of(&a.root), a.read_cells(point));
            if let Some(e) = a.root.poisoned_by_earlier(since, task.position, cells) {
                return Some(not_computed(&a.root, &e));
            }
        }
        if let Some(e) = l.and_then(|l| l.bad.as_ref()) {
            return Some(not_computed(&a.root, e));
        }
    }
    // After the inputs, as an unfused point looks (`launch::failed_input`): a sub-task with
    // a poisoned input and a failed future reports the input, fused or not.
    if inputs {
        return failed_future(&task.scalars[sub.scalars.clone()]);
    }
    None
}

/// Whether a point must settle before it starts: a store it names is poisoned or a future
/// argument failed (otherwise no sub-task can fail before its body runs).
pub(crate) fn may_fail_early(task: &Launched) -> bool {
    task.roots.iter().any(|r| r.tainted()) || failed_future(&task.scalars).is_some()
}

/// What a fused task leaves each store it writes, by its sub-tasks in issue order, as its
/// readers after it would see it unfused: poisoned by the first failed sub-task since the
/// last that wrote it whole (that one included), cleared when that one did not fail and none
/// failed after it, else untouched.
pub(crate) fn store_outcomes(
    task: &Launched,
    shape: &FusedShape,
    failed: &[Option<RuntimeError>],
) -> SmallVec<[(usize, Option<RuntimeError>); 8]> {
    // Per written store argument (first fused argument of its store): `Some(Some(e))`
    // poisoned, `Some(None)` cleared, absent untouched.
    let mut out: SmallVec<[(usize, Option<RuntimeError>); 8]> = SmallVec::new();
    for (s, sub) in shape.subs.iter().enumerate() {
        for &(j, p) in sub.args.iter().filter(|(_, p)| p.writes()) {
            let a = &task.args[j];
            if a.local {
                continue;
            }
            let whole = whole_write(a, p);
            if failed[s].is_none() && !whole {
                continue;
            }
            let same = |(k, _): &(usize, Option<RuntimeError>)| {
                std::sync::Arc::ptr_eq(&task.args[*k].root, &a.root)
            };
            match out.iter_mut().find(|o| same(o)) {
                // A whole rewrite: its own outcome. A partial failed write: the earlier
                // failure since the last whole rewrite, if any, stays the one readers see.
                Some(o) if whole || o.1.is_none() => o.1 = failed[s].clone(),
                Some(_) => {}
                None => out.push((j, failed[s].clone())),
            }
        }
    }
    out
}

/// The sub-task whose result fills result slot `slot`.
pub(crate) fn result_owner(shape: &FusedShape, slot: usize) -> Option<usize> {
    shape.subs.iter().position(|s| s.result == Some(slot))
}

/// The sub-task that reduces into fused argument `j` (reductions are never shared).
pub(crate) fn reduce_owner(shape: &FusedShape, j: usize) -> usize {
    shape.args[j].from.0
}
