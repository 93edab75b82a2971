//! The graph of point tasks: nodes with atomic in-edge counters and successor lists.
//!
//! A node starts with one extra pending count (the "issue guard") so that it cannot become ready
//! while the analysis is still adding its in-edges; [`Node::release`] drops the guard.

use crate::execute::launch::Launched;
use smallvec::SmallVec;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// What a node does when it runs.
pub(crate) enum Work {
    /// One point of an index task.
    Point { task: Arc<Launched>, point: usize },
    /// The step after all points: fold reductions in point order, bind unbound outputs,
    /// complete the task's future.
    Finish { task: Arc<Launched> },
    /// A replayed trace's entry: it waits for what came before the trace (no work).
    Boundary,
    /// A vertex of a trace replayed as actors: its work is in the run; finishing it counts
    /// down its static successors' in-edges (`execute::actors`).
    Actor {
        run: Arc<crate::execute::actors::Run>,
        vertex: u32,
    },
    /// Across ranks: sends this rank's copy of `rect` of a store to rank `to`, with the
    /// poisonings of it that the task at stream position `at` sees (none from before `since`,
    /// the latest whole rewrite launched before it: `replicate::piece`).
    Send {
        root: Arc<crate::store::StoreRoot>,
        rect: crate::rect::Rect,
        to: usize,
        key: crate::replicate::channel::Key,
        since: u64,
        at: u64,
    },
    /// Across ranks: after every access of a store on this rank up to the task at `at`, which
    /// writes it whole, drops its poisonings from before that task
    /// ([`crate::store::StoreRoot::clear_poison_before`]).
    Clear {
        root: Arc<crate::store::StoreRoot>,
        at: u64,
    },
    /// Across ranks: a message this node waits for (completed by the communication thread
    /// when it arrives after the node's local predecessors are done).
    Recv(crate::replicate::channel::Recv),
}

/// A short list of nodes: most nodes have a handful of successors (a 1-d stencil point has
/// more than four: the next step's readers of its tile and the next writer), and inline storage
/// saves the issuing thread an allocation per node (and the finishing worker one per completion).
pub(crate) type NodeList = SmallVec<[Arc<Node>; 8]>;

/// [`Node::owner`] of a node any thread may run.
pub(crate) const NO_OWNER: u32 = u32::MAX;

pub(crate) struct Node {
    pending: AtomicUsize,
    /// The worker whose mailbox the node goes to when ready ([`NO_OWNER`]: the shared queue).
    owner: u32,
    done: AtomicBool,
    /// A thread waits for this node in particular ([`Node::watch`]): its completion signals
    /// the runtime's [`Completion`]; other nodes' completions do not, so a waiting issuer is
    /// not woken by every node its rank completes.
    watched: AtomicBool,
    succs: Mutex<NodeList>,
    /// Taken when the node runs: finished nodes stay in the dependence lists of the stores
    /// they touched, and must not keep the task (and through it those stores) alive.
    work: Mutex<Option<Work>>,
}

impl Node {
    pub(crate) fn new(work: Work) -> Arc<Node> {
        Node::owned(work, NO_OWNER, 0)
    }

    /// A node owned by worker `owner` that waits for `in_edges` predecessors besides the
    /// edges added to it (an actor vertex: its in-edges inside the trace are counted, never
    /// listed at their sources).
    pub(crate) fn owned(work: Work, owner: u32, in_edges: usize) -> Arc<Node> {
        Arc::new(Node::fresh(work, owner, in_edges))
    }

    fn fresh(work: Work, owner: u32, in_edges: usize) -> Node {
        Node {
            pending: AtomicUsize::new(1 + in_edges),
            owner,
            done: AtomicBool::new(false),
            watched: AtomicBool::new(false),
            succs: Mutex::default(),
            work: Mutex::new(Some(work)),
        }
    }

    /// [`Node::owned`] in `spare`'s allocation when nobody else holds it (no strong or weak
    /// reference: no one can see it change); otherwise a new node. A replayed trace makes a
    /// node per vertex per replay, and recycling them saves an allocation and a free each.
    pub(crate) fn renew(
        spare: Option<Arc<Node>>,
        work: Work,
        owner: u32,
        in_edges: usize,
    ) -> Arc<Node> {
        if let Some(mut node) = spare {
            if let Some(n) = Arc::get_mut(&mut node) {
                *n = Node::fresh(work, owner, in_edges);
                return node;
            }
        }
        Node::owned(work, owner, in_edges)
    }

    /// Whether the node finished and nothing else holds it (its successors released, its
    /// work dropped): it can be renewed as good as new.
    pub(crate) fn is_spare(node: &mut Arc<Node>) -> bool {
        Arc::get_mut(node).is_some_and(|n| {
            *n.done.get_mut()
                && n.succs.get_mut().is_ok_and(|s| s.is_empty())
                && n.work.get_mut().is_ok_and(|w| w.is_none())
        })
    }

    pub(crate) fn owner(&self) -> u32 {
        self.owner
    }

    /// Whether the node sends store data to another rank: the pool runs those first, since
    /// another rank's point may be waiting for the data.
    pub(crate) fn is_send(&self) -> bool {
        matches!(
            *self.work.lock().unwrap_or_else(|e| e.into_inner()),
            Some(Work::Send { .. })
        )
    }

    /// The node's work, once (`None` if it was already taken).
    pub(crate) fn take_work(&self) -> Option<Work> {
        self.work.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Makes `succ` wait for `pred` (nothing if `pred` already finished).
    pub(crate) fn add_edge(pred: &Arc<Node>, succ: &Arc<Node>) {
        // A finished predecessor needs no edge; seeing `done` without the lock skips a lock
        // on a node the workers are touching (`done` never goes back to false).
        if Arc::ptr_eq(pred, succ) || pred.is_done() {
            return;
        }
        let mut succs = pred.succs.lock().unwrap_or_else(|e| e.into_inner());
        // `done` is set under this lock, so checking it here cannot miss a completion.
        if pred.done.load(Ordering::Acquire) {
            return;
        }
        succ.pending.fetch_add(1, Ordering::AcqRel);
        succs.push(succ.clone());
    }

    /// Drops one pending count; true when the node just became ready to run.
    pub(crate) fn release(&self) -> bool {
        self.pending.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Marks the node done and returns the successors that became ready.
    pub(crate) fn complete(&self, completion: &Completion) -> NodeList {
        let mut succs = {
            let mut s = self.succs.lock().unwrap_or_else(|e| e.into_inner());
            self.done.store(true, Ordering::Release);
            // Most nodes of a replayed trace have no listed successor (their edges inside
            // the trace are counted, `execute::actors`): nothing to move out.
            if s.is_empty() {
                NodeList::new()
            } else {
                std::mem::take(&mut *s)
            }
        };
        // Dekker pattern with a waiter (`watch`, then `wait_until`'s fence, then `is_done`):
        // either it sees `done` or this sees `watched`.
        fence(Ordering::SeqCst);
        if self.watched.load(Ordering::SeqCst) || completion.any.load(Ordering::SeqCst) > 0 {
            completion.notify();
        }
        // In place: collecting into a new list took `SmallVec::extend`'s general path. Not
        // called on the empty list an actor vertex takes (an out-of-line call, ~28
        // instructions a point, branch metg22).
        if !succs.is_empty() {
            succs.retain(|s| s.release());
        }
        succs
    }

    /// Makes the node's completion signal the runtime's [`Completion`]: call before waiting
    /// on it for this node.
    pub(crate) fn watch(&self) {
        self.watched.store(true, Ordering::SeqCst);
    }

    /// Blocks the calling thread until the node is done.
    pub(crate) fn wait(&self, completion: &Completion) {
        self.watch();
        completion.wait_until(|| self.is_done());
    }
}

/// Wakes threads blocked on a node (read-back, futures, fences).
#[derive(Default)]
pub(crate) struct Completion {
    lock: Mutex<()>,
    cv: Condvar,
    waiters: AtomicUsize,
    /// Waiters that no single node's completion can tell about ([`Completion::watch_any`]):
    /// while there are any, every completion signals.
    any: AtomicUsize,
}

/// Held while a wait needs every node's completion signalled ([`Completion::watch_any`]).
pub(crate) struct WatchAny<'a>(&'a Completion);

impl Drop for WatchAny<'_> {
    fn drop(&mut self) {
        self.0.any.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Completion {
    /// Makes every node's completion signal this until the guard drops: for a wait whose
    /// condition no one watched node's completion is known to make true.
    pub(crate) fn watch_any(&self) -> WatchAny<'_> {
        self.any.fetch_add(1, Ordering::SeqCst);
        WatchAny(self)
    }

    /// Wakes the waiters. Call after making their condition true.
    pub(crate) fn notify(&self) {
        // Only pay for the lock when someone waits. Dekker pattern with `wait_until`: each side
        // writes (the condition / the waiter count), fences, then reads the other's variable, so
        // at least one of them sees the other and no wake-up is lost.
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.cv.notify_all();
        }
    }

    pub(crate) fn wait_until(&self, mut ready: impl FnMut() -> bool) {
        if ready() {
            return;
        }
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        while !ready() {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A thread that waits on `completion` until `ready()`, and reports when it returns.
    fn waiter(
        completion: &Arc<Completion>,
        ready: impl Fn() -> bool + Send + 'static,
    ) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        let c = completion.clone();
        std::thread::spawn(move || {
            c.wait_until(ready);
            let _ = tx.send(());
        });
        rx
    }

    #[test]
    fn a_wait_for_one_node_wakes_when_that_node_completes() {
        let c = Arc::new(Completion::default());
        let (a, b) = (Node::new(Work::Boundary), Node::new(Work::Boundary));
        let (tx, rx) = mpsc::channel();
        let (c2, a2) = (c.clone(), a.clone());
        std::thread::spawn(move || {
            a2.wait(&c2);
            let _ = tx.send(());
        });
        b.complete(&c);
        a.complete(&c);
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the wait for `a` ended when `a` completed");
    }

    #[test]
    fn only_watched_nodes_signal_unless_a_wait_watches_any() {
        let c = Arc::new(Completion::default());
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        // Waits for the flag without watching a node: an unwatched completion does not
        // wake it (this is what spares a waiting issuer its rank's other completions).
        let quiet = waiter(&c, move || f.load(Ordering::SeqCst));
        // Blocked: it counted itself a waiter under the lock, which it holds until it sleeps.
        while c.waiters.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        drop(c.lock.lock().unwrap());
        flag.store(true, Ordering::SeqCst);
        Node::new(Work::Boundary).complete(&c);
        assert!(
            quiet.recv_timeout(Duration::from_millis(200)).is_err(),
            "an unwatched completion signalled"
        );
        // While a wait watches any node, any completion signals.
        let _any = c.watch_any();
        Node::new(Work::Boundary).complete(&c);
        quiet
            .recv_timeout(Duration::from_secs(60))
            .expect("a completion while a wait watches any node signals");
    }
}
