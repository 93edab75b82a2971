//! Executors: where ready point tasks run.
//!
//! The analysis hands a node to [`Executor::spawn`] once its in-edges are satisfied; the
//! executor runs it and spawns the successors it makes ready. `ThreadPool` does this with event
//! counting on worker threads. This trait is the seam where compiled actors (one worker per
//! processor, atomic in-edge counters, messages per edge) replace event scheduling for traced
//! graphs.
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

struct PoolState {
    queue: Mutex<VecDeque<Arc<Node>>>,
    /// Queue length, readable without the lock: spinning workers poll this, not the mutex.
    queued: AtomicUsize,
    cv: Condvar,
    sleepers: AtomicUsize,
    stop: AtomicBool,
    shared: Arc<Shared>,
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
    pub(crate) fn new(threads: usize, shared: Arc<Shared>) -> ThreadPool {
        let state = Arc::new(PoolState {
            queue: Mutex::default(),
            queued: AtomicUsize::new(0),
            cv: Condvar::new(),
            sleepers: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            shared,
        });
        let workers = (0..threads)
            .map(|i| {
                let st = state.clone();
                std::thread::Builder::new()
                    .name(format!("tessera-worker-{i}"))
                    .spawn(move || worker(&st))
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
            let Some(node) = poll(st, &mut *done) else {
                return done();
            };
            // Once the wait is over the issuer goes back to its own work and leaves the next
            // ready node to the workers.
            let ran = run_chain(st, node, || !done());
            Counters::add(&st.shared.counters.nodes_helped, ran);
        }
        true
    }

    fn has_ready(&self) -> bool {
        self.state.queued.load(Ordering::SeqCst) > 0
    }
}

fn push(st: &PoolState, node: Arc<Node>) {
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

fn try_pop(st: &PoolState) -> Option<Arc<Node>> {
    if st.queued.load(Ordering::SeqCst) == 0 {
        return None;
    }
    let n = st
        .queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop_front();
    if n.is_some() {
        st.queued.fetch_sub(1, Ordering::SeqCst);
    }
    n
}

/// Polls the queue `SPINS` times spinning, then `YIELDS` times yielding, until a node is
/// there or `stop()` holds.
fn poll(st: &PoolState, mut stop: impl FnMut() -> bool) -> Option<Arc<Node>> {
    for i in 0..SPINS + YIELDS {
        if let Some(n) = try_pop(st) {
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

fn pop(st: &PoolState) -> Option<Arc<Node>> {
    if let Some(n) = poll(st, || false) {
        return Some(n);
    }
    let mut q = st.queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(n) = q.pop_front() {
            st.queued.fetch_sub(1, Ordering::SeqCst);
            return Some(n);
        }
        if st.stop.load(Ordering::SeqCst) {
            return None;
        }
        st.sleepers.fetch_add(1, Ordering::SeqCst);
        q = st.cv.wait(q).unwrap_or_else(|e| e.into_inner());
        st.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `node`, then one newly ready successor at a time (it likely uses what the node before
/// just wrote) while `more()` holds, queueing the others for other threads. Returns the number
/// of nodes run.
fn run_chain(st: &PoolState, node: Arc<Node>, mut more: impl FnMut() -> bool) -> u64 {
    let mut ran = 0;
    let mut next = Some(node);
    while let Some(n) = next.take() {
        let mut ready = run_node(&n, &st.shared).into_iter();
        ran += 1;
        next = ready.next();
        ready.for_each(|r| push(st, r));
        if let Some(r) = next.take_if(|_| !more()) {
            push(st, r);
        }
    }
    ran
}

fn worker(st: &PoolState) {
    while let Some(node) = pop(st) {
        run_chain(st, node, || true);
    }
}
