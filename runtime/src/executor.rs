//! Executors: where ready point tasks run.
//!
//! The analysis hands a node to [`Executor::spawn`] once its in-edges are satisfied; the
//! executor runs it and spawns the successors it makes ready. `ThreadPool` does this with event
//! counting on worker threads. Replayed traces compiled into actors (`tracing::actors`) run on
//! it too: their vertices are owned by workers, and each worker has a mailbox of the ready
//! vertices it owns beside the shared queue.
//!
//! The issuing thread is one of the processors: a runtime of `n` threads starts `n - 1` workers
//! (at least one), and the issuing thread runs ready nodes through [`Executor::help`] whenever it
//! waits (back-pressure, fences, read-back, futures). With a worker per core *plus* an issuer,
//! the issuer's bursts preempt a worker in the middle of a point, and every point of the next
//! step waits for that one; with the issuer as a processor, no core is oversubscribed and it
//! goes from running points back to issuing without a wake-up.

use crate::graph::Node;
use crate::launch::run_node;
use crate::runtime::Shared;
use crate::stats::Counters;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

pub(crate) trait Executor: Send + Sync {
    /// Runs `node`, whose dependences are all met.
    fn spawn(&self, node: Arc<Node>);
    /// Number of worker threads the executor runs on (the issuing thread not counted).
    #[allow(dead_code)]
    fn threads(&self) -> usize;
    /// Runs ready nodes on the calling thread until `done()` holds (true), or until none has been
    /// ready for a short while (false: the caller then blocks until `done()` or
    /// [`Executor::has_ready`]; queueing a node signals both of the issuer's completions).
    fn help(&self, done: &mut dyn FnMut() -> bool) -> bool;
    /// True when a node is waiting for a thread.
    fn has_ready(&self) -> bool;
}

/// A queue of ready nodes with its length readable without the lock.
#[derive(Default)]
struct Mailbox {
    queue: Mutex<VecDeque<Arc<Node>>>,
    len: AtomicUsize,
}

impl Mailbox {
    fn push(&self, node: Arc<Node>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(node);
        self.len.fetch_add(1, Ordering::SeqCst);
    }

    fn pop(&self) -> Option<Arc<Node>> {
        if self.len.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let n = self
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        if n.is_some() {
            self.len.fetch_sub(1, Ordering::SeqCst);
        }
        n
    }
}

struct PoolState {
    queue: Mutex<VecDeque<Arc<Node>>>,
    /// Per worker: the ready actor vertices it owns (`tracing::actors`). Its owner takes from
    /// it first; an idle worker or the issuing thread takes from any, so an owner busy with a
    /// long point never holds up a ready vertex while a core is free.
    mailboxes: Vec<Mailbox>,
    /// Queue length, readable without the lock: spinning workers poll this, not the mutex.
    queued: AtomicUsize,
    cv: Condvar,
    sleepers: AtomicUsize,
    stop: AtomicBool,
    shared: Arc<Shared>,
    /// Test hook (`RuntimeBuilder::worker_jitter`): workers sleep up to this many µs, at
    /// random, before each node, so tests can check that nothing but the task stream decides
    /// what the issuing side does.
    jitter_us: u32,
}

/// N worker threads sharing one FIFO of ready nodes.
pub(crate) struct ThreadPool {
    state: Arc<PoolState>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    threads: usize,
}

/// Polls before sleeping: a worker that sleeps on every empty queue pays a futex wake-up
/// (several µs, far more on a loaded machine) per dependent task. The first polls spin; the
/// rest yield the core, so an issuing thread sharing it still makes progress (the shape of
/// rayon's sleep protocol).
const SPINS: usize = 16;
const YIELDS: usize = 64;

impl ThreadPool {
    pub(crate) fn new(threads: usize, shared: Arc<Shared>, jitter_us: u32) -> ThreadPool {
        let state = Arc::new(PoolState {
            queue: Mutex::default(),
            mailboxes: (0..threads).map(|_| Mailbox::default()).collect(),
            queued: AtomicUsize::new(0),
            cv: Condvar::new(),
            sleepers: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            shared,
            jitter_us,
        });
        let workers = (0..threads)
            .map(|i| {
                let st = state.clone();
                std::thread::Builder::new()
                    .name(format!("tessera-worker-{i}"))
                    .spawn(move || worker(&st, i))
                    .expect("spawn worker thread")
            })
            .collect();
        ThreadPool {
            state,
            workers: Mutex::new(workers),
            threads,
        }
    }

    /// A handle that queues ready nodes from another thread (the communication thread).
    pub(crate) fn spawner(&self) -> Box<dyn Fn(Arc<Node>) + Send + Sync> {
        let st = self.state.clone();
        Box::new(move |n| push(&st, n))
    }

    /// Stops the workers once the queue is empty and joins them.
    pub(crate) fn shutdown(&self) {
        self.state.stop.store(true, Ordering::SeqCst);
        {
            let _q = self.state.queue.lock().unwrap_or_else(|e| e.into_inner());
            self.state.cv.notify_all();
        }
        for h in self
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = h.join();
        }
    }
}

impl Executor for ThreadPool {
    fn spawn(&self, node: Arc<Node>) {
        push(&self.state, node);
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn help(&self, done: &mut dyn FnMut() -> bool) -> bool {
        let st = &*self.state;
        while !done() {
            // A point in flight on a worker is about to make more ready: poll as an idle worker
            // does before giving up (the caller then blocks).
            let Some(node) = poll(st, None, &mut *done) else {
                return done();
            };
            // Once the wait is over the issuer goes back to its own work and leaves the next
            // ready node to the workers.
            let ran = run_chain(st, None, node, || !done());
            Counters::add(&st.shared.counters.nodes_helped, ran);
        }
        true
    }

    fn has_ready(&self) -> bool {
        self.state.queued.load(Ordering::SeqCst) > 0
    }
}

fn push(st: &PoolState, node: Arc<Node>) {
    if let Some(mb) = st.mailboxes.get(node.owner() as usize) {
        mb.push(node);
        st.queued.fetch_add(1, Ordering::SeqCst);
        // A worker about to sleep counts itself a sleeper, then looks at `queued` again
        // (`pop`): with both sides sequentially consistent, either it sees this node or this
        // sees it. Only then is the queue lock needed, so that the wake-up cannot come before
        // it waits (it holds the lock until `wait` releases it). All sleepers wake: the owner
        // may be any of them (the rest find nothing and sleep).
        if st.sleepers.load(Ordering::SeqCst) > 0 {
            let _q = st.queue.lock().unwrap_or_else(|e| e.into_inner());
            st.cv.notify_all();
        }
        st.shared.idle.notify();
        st.shared.completion.notify();
        return;
    }
    let sleepers = {
        let mut q = st.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(node);
        st.queued.fetch_add(1, Ordering::SeqCst);
        st.sleepers.load(Ordering::SeqCst)
    };
    if sleepers > 0 {
        st.cv.notify_one();
    }
    // The issuing thread may be blocked in a wait it would rather spend running this node
    // (`Inner::wait_helping`). Each notify costs a fence and a load unless someone waits.
    st.shared.idle.notify();
    st.shared.completion.notify();
}

/// A ready node for worker `me` (the issuing thread: `None`): its own mailbox first, then
/// the shared queue, then any other mailbox.
fn try_pop(st: &PoolState, me: Option<usize>) -> Option<Arc<Node>> {
    if st.queued.load(Ordering::SeqCst) == 0 {
        return None;
    }
    let own = me.and_then(|i| st.mailboxes[i].pop());
    let n = own
        .or_else(|| pop_shared(st))
        .or_else(|| st.mailboxes.iter().find_map(Mailbox::pop));
    if n.is_some() {
        st.queued.fetch_sub(1, Ordering::SeqCst);
    }
    n
}

fn pop_shared(st: &PoolState) -> Option<Arc<Node>> {
    st.queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop_front()
}

/// Polls the queue `SPINS` times spinning, then `YIELDS` times yielding, until a node is
/// there or `stop()` holds.
fn poll(st: &PoolState, me: Option<usize>, mut stop: impl FnMut() -> bool) -> Option<Arc<Node>> {
    for i in 0..SPINS + YIELDS {
        if let Some(n) = try_pop(st, me) {
            return Some(n);
        }
        if stop() {
            return None;
        }
        if i < SPINS {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    None
}

fn pop(st: &PoolState, me: usize) -> Option<Arc<Node>> {
    if let Some(n) = poll(st, Some(me), || false) {
        return Some(n);
    }
    let mut q = st.queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(n) = q.pop_front() {
            st.queued.fetch_sub(1, Ordering::SeqCst);
            return Some(n);
        }
        // Mailboxes are pushed outside this lock but notified under it: a count seen here is
        // a node to take (drop the lock: `try_pop` takes it for the shared queue).
        if st.queued.load(Ordering::SeqCst) > 0 {
            drop(q);
            if let Some(n) = try_pop(st, Some(me)) {
                return Some(n);
            }
            q = st.queue.lock().unwrap_or_else(|e| e.into_inner());
            continue;
        }
        if st.stop.load(Ordering::SeqCst) {
            return None;
        }
        st.sleepers.fetch_add(1, Ordering::SeqCst);
        // A mailbox push that missed the sleeper count above incremented `queued` first.
        if st.queued.load(Ordering::SeqCst) > 0 {
            st.sleepers.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        q = st.cv.wait(q).unwrap_or_else(|e| e.into_inner());
        st.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `node`, then one newly ready successor at a time (it likely uses what the node before
/// just wrote; on a worker, one owned by another worker goes to that worker) while `more()`
/// holds, queueing the others for other threads. Returns the number of nodes run.
fn run_chain(
    st: &PoolState,
    me: Option<usize>,
    node: Arc<Node>,
    mut more: impl FnMut() -> bool,
) -> u64 {
    // The issuing thread (no mailbox) keeps any successor: posting it would only have the
    // issuer take it back from the mailbox while it waits.
    let mine = |n: &Arc<Node>| {
        let o = n.owner() as usize;
        me.is_none_or(|me| o >= st.mailboxes.len() || o == me)
    };
    let mut ran = 0;
    let mut next = Some(node);
    while let Some(n) = next.take() {
        if me.is_some() && st.jitter_us > 0 {
            jitter(st.jitter_us);
        }
        let ready = run_node(&n, &st.shared);
        ran += 1;
        for r in ready {
            if next.is_none() && mine(&r) {
                next = Some(r);
            } else {
                push(st, r);
            }
        }
        if let Some(r) = next.take_if(|_| !more()) {
            push(st, r);
        }
    }
    ran
}

/// Sleeps between 0 and `max_us` µs, drawn from a per-thread xorshift (a test hook: see
/// `PoolState::jitter_us`).
fn jitter(max_us: u32) {
    use std::cell::Cell;
    thread_local!(static STATE: Cell<u64> = Cell::new({
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&std::thread::current().id(), &mut h);
        std::hash::Hasher::finish(&h) | 1
    }));
    let r = STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x
    });
    std::thread::sleep(std::time::Duration::from_micros(r % (max_us as u64 + 1)));
}

fn worker(st: &PoolState, me: usize) {
    while let Some(node) = pop(st, me) {
        run_chain(st, Some(me), node, || true);
    }
}
