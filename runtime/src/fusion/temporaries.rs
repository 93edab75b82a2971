//! Temporary store elimination (thesis Definition 4, §4.3.1).
//!
//! A store is temporary in a fused prefix when nothing outside the prefix can see what the
//! prefix does to it:
//! 1. it is created in the prefix: written by it, and fresh before it (made by `create`, never
//!    allocated and never written by a launched task, so its old contents are the zeros a
//!    scratch buffer starts with; this stands in for the thesis' "every read is preceded by a
//!    covering write" and also admits partial writes);
//! 2. no task after the prefix (solved or not yet solved in the window) uses it;
//! 3. the application holds no handle to it (the split reference count: `app_refs`).
//!
//! Every access of a written store in a fused prefix goes through one partition (the true- and
//! anti-dependence constraints), so each point's scratch is exactly its sub-store. Reduced and
//! unbound stores are kept. Conditions 1 and 2 within the window are read from the prefix'
//! per-store effects (`constraints::Prefix::temporaries`); this module checks the rest.

use crate::issue::task::Issued;
use crate::store::StoreRoot;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Whether `root` may be a temporary as far as the world outside the window goes: no
/// application handle, never named by a launched task (so never allocated or written; the
/// flag is set at scheduling, in stream order, where allocation depends on timing), and not
/// named by a task still waiting in the window unsolved.
pub(crate) fn outside_dead(root: &Arc<StoreRoot>, unsolved: &VecDeque<Issued>) -> bool {
    outside_dead_among(root, unsolved)
}

/// [`outside_dead`] with `later` the tasks issued after the prefix and not solved (the
/// window's, or those the tracer holds after a replayed trace: `tracing/record.rs`).
pub(crate) fn outside_dead_among<'a>(
    root: &Arc<StoreRoot>,
    later: impl IntoIterator<Item = &'a Issued>,
) -> bool {
    fresh_and_unheld(root)
        && !later
            .into_iter()
            .any(|t| t.args.iter().any(|a| Arc::ptr_eq(&a.root, root)))
}

/// The part of [`outside_dead`] that is the store's own state: no application handle, never
/// allocated, never written.
pub(crate) fn fresh_and_unheld(root: &Arc<StoreRoot>) -> bool {
    root.app_refs.load(Ordering::Acquire) == 0 && fresh(root)
}

/// Never allocated and never written: its contents are still the zeros of a fresh store.
pub(crate) fn fresh(root: &Arc<StoreRoot>) -> bool {
    root.bound().is_some_and(|b| !b.is_used()) && root.meta().version == 0
}
