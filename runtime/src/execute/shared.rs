//! What the worker threads share with the issuing side.

use super::graph::Completion;
use crate::replicate::channel::Channel;
use crate::stats::Counters;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// State the worker threads share with the issuing side.
#[derive(Default)]
pub(crate) struct Shared {
    /// Signalled when a watched node completes (`Node::watch`: read-back, futures) and when
    /// the pool wakes a sleeping issuer for a node.
    pub completion: Completion,
    pub counters: Counters,
    /// Nodes created and not yet run.
    pub outstanding: AtomicUsize,
    /// Signalled when `outstanding` is at or below `low_water` and when the pool wakes a
    /// sleeping issuer for a node: the issuer waiting on back-pressure or a fence is woken to
    /// run ready work or to go on, not by every completion.
    pub idle: Completion,
    pub low_water: AtomicUsize,
    /// Across ranks: the communication path (unset on one rank).
    pub channel: OnceLock<Arc<Channel>>,
    /// Told of every node run: set when the window is adaptive (`window::Adaptive`), which
    /// launches what it holds when that leaves a worker with nothing to run.
    pub on_node_ran: OnceLock<Arc<dyn OnNodeRan>>,
}

/// What a layer above execution does when a node has run, with `left` nodes outstanding
/// (the adaptive window decides there whether a worker goes idle). A hook rather than a
/// call, so that execution does not reach up into the window: one dynamic call a node
/// (measured with the move that brought it in: fusion bench CG under callgrind, 172.1 M
/// instructions before, 172.3 M after, within the run-to-run spread).
pub(crate) trait OnNodeRan: Send + Sync {
    fn node_ran(&self, left: usize);
}

impl Shared {
    /// Counts one node as run.
    pub(crate) fn node_ran(&self) {
        // SeqCst: pairs with the issuer's `held` store then outstanding load (`Adaptive::idle`).
        let left = self.outstanding.fetch_sub(1, Ordering::SeqCst) - 1;
        if left <= self.low_water.load(Ordering::Relaxed) {
            self.idle.notify();
        }
        if let Some(hook) = self.on_node_ran.get() {
            hook.node_ran(left);
        }
    }
}

thread_local! {
    /// The `Shared` (as an address) of the runtime whose node this thread is running, if any.
    static RUNNING: Cell<usize> = const { Cell::new(0) };
}

/// Marks the running thread as inside a node of `shared`'s runtime until dropped (a node
/// run while the issuing thread helps, inside another node's body's runtime call, nests).
pub(crate) struct RunningNode(usize);

impl RunningNode {
    pub(crate) fn enter(shared: &Shared) -> RunningNode {
        RunningNode(RUNNING.replace(shared as *const Shared as usize))
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        RUNNING.set(self.0);
    }
}

impl Shared {
    /// Whether this thread is running one of this runtime's nodes (a task body that called
    /// back into the runtime).
    pub(crate) fn in_node(&self) -> bool {
        RUNNING.get() == self as *const Shared as usize
    }
}
