//! Fusion inside a recorded trace (issue 13; runtime/DESIGN.md, "Fusion inside traces").
//!
//! A replayed task is never solved, probed or given to the window, so the window's fusion pass
//! never sees it. Instead the trace runs the same pass once, when it is recorded: over its
//! solved tasks as one window (the window is drained before a trace, so no prefix crosses the
//! trace's start; its end ends the last prefix), it records the *cuts* (how many tasks each
//! launch takes) and each fused launch's [`FusedShape`]. The recording's logical graph is then
//! over the launches (a temporary contributing no access), and a replay launches the recorded
//! fused tasks into it. The cuts follow from the recorded tasks and their solves alone, which
//! every replay verifies, so ranks and runs agree.
//!
//! *Temporaries are live state.* Whether a store is a temporary (Definition 4,
//! `fusion/temporaries.rs`) depends on the application's handles and on whether the store is
//! fresh, which may differ between occurrences of the same trace (the application keeps a
//! handle this time). The recording keeps, per fused launch, the stores that may be temporaries
//! as far as the trace goes (written in the launch, named by no other launch of the trace) and
//! whether each was one; a replay recomputes these flags and goes to ordinary analysis on any
//! difference, as for any failed verification.

use crate::fusion::constraints::Prefix;
use crate::fusion::temporaries::outside_dead_among;
use crate::fusion::{build, FusedShape, Ready};
use crate::issue::task::{Issued, TaskBody};
use crate::runtime::Plan;
use crate::store::StoreRoot;
use std::collections::VecDeque;
use std::sync::Arc;

/// One launch of a recorded trace: `len` issued tasks in a row, fused by `shape` if more than
/// one.
pub(crate) struct Cut {
    pub len: usize,
    pub shape: Option<Arc<FusedShape>>,
    /// The stores that may be temporaries of this launch as far as the trace goes: (task of
    /// the trace, argument) naming it first, and whether it was one when recorded.
    pub temps: Vec<(usize, usize, bool)>,
}

/// The trace's fusion pass over its solved tasks `ready`: the cuts (every task alone unless
/// `fuse`) and the tasks as plans, in order. `dead(root)`: the store's live state allows a
/// temporary (`outside_dead_among`, taken before the trace's solves bumped any version).
pub(crate) fn cut(
    ready: Vec<Ready>,
    fuse: bool,
    dead: impl Fn(&Arc<StoreRoot>) -> bool,
) -> (Vec<Cut>, Vec<Plan>) {
    // Boxed as in the window (`Prefix` and `build::shape` take the window's form).
    let mut q: VecDeque<Box<Ready>> = ready.into_iter().map(Box::new).collect();
    let mut cuts = Vec::new();
    let mut plans: Vec<Plan> = Vec::with_capacity(q.len());
    let mut prefix = Prefix::default();
    while !q.is_empty() {
        prefix.clear();
        prefix.extend(&q);
        let n = if fuse { prefix.len().max(1) } else { 1 };
        if n == 1 {
            cuts.push(Cut {
                len: 1,
                shape: None,
                temps: Vec::new(),
            });
        } else {
            let ready = &*q.make_contiguous();
            // A store an earlier launch of the trace names was used or written before this
            // one (in the window, the earlier prefix would have been launched): kept.
            let earlier = |r: &Arc<StoreRoot>| {
                plans
                    .iter()
                    .any(|p| p.args.iter().any(|a| Arc::ptr_eq(&a.root, r)))
            };
            let may = prefix.temporaries(ready, |r| !earlier(r));
            let flags = prefix.temporaries(ready, |r| !earlier(r) && dead(r));
            let local = |r: &Arc<StoreRoot>| prefix.is_flagged(&flags, r);
            let shape = Arc::new(build::shape(&ready[..n], local));
            let start = plans.len();
            let temps = prefix
                .firsts()
                .zip(may.iter().zip(&flags))
                .filter(|(_, (may, _))| **may)
                .map(|((i, j), (_, &flag))| (start + i, j, flag))
                .collect();
            cuts.push(Cut {
                len: n,
                shape: Some(shape),
                temps,
            });
        }
        plans.extend(q.drain(..n).map(|r| Plan::single(*r)));
    }
    (cuts, plans)
}

/// The launches of a trace: `plans` (its tasks in order, each solved alone) grouped by `cuts`,
/// a fused task per fused cut running `body` (the runtime's fused body).
pub(crate) fn launches(cuts: &[Cut], plans: Vec<Plan>, body: &TaskBody) -> Vec<Plan> {
    let mut plans = plans.into_iter();
    cuts.iter()
        .map(|c| match &c.shape {
            None => plans.next().expect("a cut per task"),
            Some(shape) => {
                build::fuse_plans(shape, plans.by_ref().take(c.len).collect(), body.clone())
            }
        })
        .collect()
}

/// Whether every store flagged in `cuts` is a temporary now exactly when it was when
/// recorded; `held`: the trace's tasks, `later`: the tasks held after them. Called before the
/// replay bumps any version.
pub(crate) fn temporaries_hold<'a>(
    cuts: &[Cut],
    held: &[Issued],
    later: impl Iterator<Item = &'a Issued> + Clone,
) -> bool {
    cuts.iter()
        .flat_map(|c| &c.temps)
        .all(|&(i, j, flag)| outside_dead_among(&held[i].args[j].root, later.clone()) == flag)
}

/// Whether a replay of `cuts` fuses anything.
pub(crate) fn fuses(cuts: &[Cut]) -> bool {
    cuts.iter().any(|c| c.shape.is_some())
}
