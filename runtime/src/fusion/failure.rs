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
    // Cells written by a failed sub-task so far (with its error), and stores rewritten whole
    // by one that did not fail (an older poison no longer reaches the sub-tasks after it).
    let mut bad: SmallVec<[(Cell, RuntimeError); 4]> = SmallVec::new();
    let mut rewritten: SmallVec<[Cell; 8]> = SmallVec::new();
    for (s, sub) in shape.subs.iter().enumerate() {
        if failed[s].is_none() {
            failed[s] = input_failure(task, sub, &bad, &rewritten, inputs, point)
                .map(|message| RuntimeError::TaskFailed {
                    task: sub.name.to_string(),
                    point: task.domain.point(point)[..task.domain.dim()].to_vec(),
                    message,
                })
                .or_else(|| panics.and_then(|p| p[s].clone()));
        }
        for &(j, p) in sub.args.iter().filter(|(_, p)| p.writes()) {
            let (a, c) = (&task.args[j], cell(&task.args[j], j));
            // Only a failed writer or a whole rewrite changes what the cell holds for the
            // sub-tasks after: a partial write leaves a failed writer's cells (unfused, a
            // partial write does not clear a poison either).
            match &failed[s] {
                Some(e) => {
                    bad.retain(|(b, _)| *b != c);
                    bad.push((c, e.clone()));
                }
                None if whole_write(a, p) => {
                    bad.retain(|(b, _)| *b != c);
                    rewritten.push(c);
                }
                None => {}
            }
        }
    }
}

/// Why sub-task `sub` cannot run at `point`, as the unfused task's point would say it.
fn input_failure(
    task: &Launched,
    sub: &super::SubShape,
    bad: &[(Cell, RuntimeError)],
    rewritten: &[Cell],
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
        if let Some((_, e)) = bad.iter().find(|(b, _)| *b == c) {
            return Some(not_computed(&a.root, e));
        }
        // Poisonings from before the fused task only (and, across ranks, failed pieces
        // received for it, its inputs): its own position's are its sub-tasks' (`bad` above),
        // which a sub-task before the failed one must not see.
        if inputs && !a.local && !rewritten.contains(&c) {
            let (since, cells) = (task.since_of(&a.root), a.read_cells(point));
            if let Some(e) = a.root.poisoned_by_earlier(since, task.position, cells) {
                return Some(not_computed(&a.root, &e));
            }
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

/// What a fused task leaves each store it writes, by its sub-tasks in issue order: poisoned
/// by the last failed sub-task that wrote it (unless one after rewrote it whole), cleared
/// when a sub-task rewrote it whole and none failed after, else untouched.
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
            let state = match &failed[s] {
                Some(e) => Some(e.clone()),
                None if whole_write(a, p) => None,
                None => continue,
            };
            let same = |(k, _): &(usize, Option<RuntimeError>)| {
                std::sync::Arc::ptr_eq(&task.args[*k].root, &a.root)
            };
            match out.iter_mut().find(|o| same(o)) {
                Some(o) => o.1 = state,
                None => out.push((j, state)),
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
