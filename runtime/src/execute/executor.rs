//! Executors: where ready point tasks run.
//!
//! The analysis hands a node to [`Executor::spawn`] once its in-edges are satisfied; the
//! executor runs it and spawns the successors it makes ready. `ThreadPool` does this with event
//! counting on worker threads. Replayed traces compiled into actors (`execute::actors`) run on
//! it too: their vertices are owned by workers, and each worker has a mailbox of the ready
//! vertices it owns beside the shared queue.
//!
//! The issuing thread is one of the processors: a runtime of `n` threads starts `n - 1` workers
//! (at least one), and the issuing thread runs ready nodes through [`Executor::help`] whenever it
//! waits (back-pressure, fences, read-back, futures). With a worker per core *plus* an issuer,
//! the issuer's bursts preempt a worker in the middle of a point, and every point of the next
//! step waits for that one; with the issuer as a processor, no core is oversubscribed and it
//! goes from running points back to issuing without a wake-up.

use crate::execute::graph::{Completion, Node};
use crate::execute::launch::run_node;
use crate::execute::Shared;
use crate::stats::Counters;
use crate::timeline::{self, Ev};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

pub(crate) trait Executor: Send + Sync {
    /// Runs `node`, whose dependences are all met.
    fn spawn(&self, node: Arc<Node>);
    /// Number of worker threads the executor runs on (the issuing thread not counted).
    #[allow(dead_code)]
    fn threads(&self) -> usize;
    /// Runs ready nodes on the calling thread until `done()` holds (true), or until none has been
    /// ready for a short while (false: the caller then sleeps in [`Executor::sleep_helper`]).
    fn help(&self, done: &mut dyn FnMut() -> bool) -> bool;
    /// Blocks the calling thread, which [`Executor::help`]s, until `done()` may hold
    /// (`completion` is signalled) or a node is queued for it to run.
    fn sleep_helper(&self, completion: &Completion, done: &mut dyn FnMut() -> bool);
    /// Called when a helping thread's wait is over: a node queued for it as its wait ended
    /// goes to a sleeping worker instead.
    fn leave(&self);
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

/// The shared queue and the threads asleep waiting for a node, under one lock: a push and a
/// sleeper's last look at the queue cannot miss each other.
#[derive(Default)]
struct Queue {
    nodes: VecDeque<Arc<Node>>,
    /// Workers asleep, each on its own condition variable. A push takes one out of the list
    /// as it wakes it, so the next push wakes another thread, never the same one again, and
    /// a push wakes one thread only: two threads woken for one node cost a wake-up and a
    /// context switch each, and one of them finds nothing.
    workers: Vec<usize>,
    /// Helping threads asleep (`sleep_helper`: the issuing thread in a wait), each with the
    /// flag a push sets to wake it.
    helpers: Vec<Arc<AtomicBool>>,
}

struct PoolState {
    queue: Mutex<Queue>,
    /// Per worker: the ready actor vertices it owns (`execute::actors`). Its owner takes from
    /// it first; an idle worker or the issuing thread takes from any, so an owner busy with a
    /// long point never holds up a ready vertex while a core is free.
    mailboxes: Vec<Mailbox>,
    /// Queue length, readable without the lock: spinning workers poll this, not the mutex.
    queued: AtomicUsize,
    /// Per worker: the condition variable it sleeps on (with `queue`'s lock).
    wake: Vec<Condvar>,
    /// Threads in `Queue::workers` or `Queue::helpers`, readable without the lock.
    asleep: AtomicUsize,
    /// Threads polling for a node (`poll`).
    searching: AtomicUsize,
    /// Polls before sleeping: spinning, then yielding (`SPINS`, `YIELDS`; `TESSERA_IDLE_SPIN`).
    spins: usize,
    yields: usize,
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

/// `(spins, yields)` of an idle thread: `SPINS` and `YIELDS`, or with `TESSERA_IDLE_SPIN=n`
/// `n` spins and no yield (spin, then sleep). Not a setting: a switch to compare the two in
/// one binary (spin-then-sleep was measured no faster twice; runtime/DESIGN.md).
fn idle_polls() -> (usize, usize) {
    match std::env::var("TESSERA_IDLE_SPIN")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) => (n, 0),
        None => (SPINS, YIELDS),
    }
}

impl ThreadPool {
    pub(crate) fn new(threads: usize, shared: Arc<Shared>, jitter_us: u32) -> ThreadPool {
        let (spins, yields) = idle_polls();
        let state = Arc::new(PoolState {
            queue: Mutex::default(),
            mailboxes: (0..threads).map(|_| Mailbox::default()).collect(),
            queued: AtomicUsize::new(0),
            wake: (0..threads).map(|_| Condvar::new()).collect(),
            asleep: AtomicUsize::new(0),
            searching: AtomicUsize::new(0),
            spins,
            yields,
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
            let _q = lock(&self.state);
            for cv in &self.state.wake {
                cv.notify_one();
            }
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

    fn sleep_helper(&self, completion: &Completion, done: &mut dyn FnMut() -> bool) {
        let st = &*self.state;
        let woken = Arc::new(AtomicBool::new(false));
        lock(st).helpers.push(woken.clone());
        st.asleep.fetch_add(1, Ordering::SeqCst);
        // Dekker with `wake_one` (it increments `queued`, then reads `asleep`): a node queued
        // before this thread counted itself asleep is seen here.
        if st.queued.load(Ordering::SeqCst) == 0 {
            timeline::mark(Ev::SleepBegin, 0);
            completion.wait_until(|| woken.load(Ordering::SeqCst) || done());
            timeline::mark(Ev::SleepEnd, 0);
        }
        if !woken.load(Ordering::SeqCst) {
            let mut q = lock(st);
            // A push may have taken it out (and set the flag) since the load above.
            if let Some(i) = q.helpers.iter().position(|w| Arc::ptr_eq(w, &woken)) {
                q.helpers.swap_remove(i);
                st.asleep.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    fn leave(&self) {
        let st = &*self.state;
        if st.queued.load(Ordering::SeqCst) > 0 {
            wake_one(st, None, None);
        }
    }
}

fn lock(st: &PoolState) -> MutexGuard<'_, Queue> {
    st.queue.lock().unwrap_or_else(|e| e.into_inner())
}

fn push(st: &PoolState, node: Arc<Node>) {
    timeline::mark(Ev::Ready, Arc::as_ptr(&node) as u64);
    let owner = node.owner() as usize;
    if let Some(mb) = st.mailboxes.get(owner) {
        mb.push(node);
        st.queued.fetch_add(1, Ordering::SeqCst);
        wake_one(st, Some(owner), None);
        return;
    }
    let mut q = lock(st);
    // Sends jump the queue: another rank's point may wait for the data, while the nodes
    // queued here wait only for this rank's processors. Behind this rank's next point (a
    // stencil step: the one node queued with it), a send held the other rank up for a whole
    // point each step, and the two ranks ran their points in turn.
    if node.is_send() {
        q.nodes.push_front(node);
    } else {
        q.nodes.push_back(node);
    }
    st.queued.fetch_add(1, Ordering::SeqCst);
    wake_one(st, None, Some(q));
}

/// Wakes one sleeping thread, if any, for a node just queued: worker `owner` (the node's
/// mailbox) if it sleeps, else a helping thread (the issuer in a wait: running the node may
/// be what ends its wait, and then nobody else need wake it), else any worker.
fn wake_one(st: &PoolState, owner: Option<usize>, q: Option<MutexGuard<'_, Queue>>) {
    // Dekker with the searchers and sleepers: the caller incremented `queued`, then this
    // reads `searching` and `asleep`; a searcher stops searching, then counts itself asleep
    // (or leaves), then reads `queued`. So a thread searching when this looked will see the
    // node (or take another), and a sleeper either sees the node or this sees it (and then
    // finds it in the lists: it is in them from before it counted itself until it is woken
    // or leaves). Nodes no more than searchers: they take them, nobody need wake.
    let searching = st.searching.load(Ordering::SeqCst);
    if st.asleep.load(Ordering::SeqCst) == 0 || st.queued.load(Ordering::SeqCst) <= searching {
        return;
    }
    let mut q = q.unwrap_or_else(|| lock(st));
    let woken = claim(&mut q, owner);
    if woken.is_some() {
        st.asleep.fetch_sub(1, Ordering::SeqCst);
    }
    drop(q);
    match woken {
        // Out of the list under the lock: the worker cannot go back to sleep unseen.
        Some(Sleeper::Worker(w)) => st.wake[w].notify_one(),
        Some(Sleeper::Helper(h)) => {
            h.store(true, Ordering::SeqCst);
            // The helper sleeps on one of the two; a notify with no waiter is a load.
            st.shared.idle.notify();
            st.shared.completion.notify();
        }
        None => {}
    }
}

/// A thread asleep waiting for a node.
#[derive(Debug)]
enum Sleeper {
    Worker(usize),
    Helper(Arc<AtomicBool>),
}

/// Takes the sleeper to wake for a node out of the lists (so no later push picks it again):
/// worker `owner`, else a helper, else any worker.
fn claim(q: &mut Queue, owner: Option<usize>) -> Option<Sleeper> {
    if let Some(i) = owner.and_then(|o| q.workers.iter().position(|&w| w == o)) {
        return Some(Sleeper::Worker(q.workers.swap_remove(i)));
    }
    if let Some(h) = q.helpers.pop() {
        return Some(Sleeper::Helper(h));
    }
    q.workers.pop().map(Sleeper::Worker)
}

/// A ready node for worker `me` (the issuing thread: `None`): its own mailbox first, then
/// the shared queue, then any other mailbox.
/// A thread that was searching (`poll`) stops counting as one when it takes a node.
fn try_pop(st: &PoolState, me: Option<usize>, searching: bool) -> Option<Arc<Node>> {
    if st.queued.load(Ordering::SeqCst) == 0 {
        return None;
    }
    let own = me.and_then(|i| st.mailboxes[i].pop());
    let n = own
        .or_else(|| pop_shared(st))
        .or_else(|| st.mailboxes.iter().find_map(Mailbox::pop));
    if n.is_some() {
        // Before `queued` drops: a push in between sees one node more than searchers, and
        // wakes someone, rather than leaving its node to a thread that is no longer looking.
        if searching {
            st.searching.fetch_sub(1, Ordering::SeqCst);
        }
        st.queued.fetch_sub(1, Ordering::SeqCst);
    }
    n
}

fn pop_shared(st: &PoolState) -> Option<Arc<Node>> {
    lock(st).nodes.pop_front()
}

/// Polls the queue `spins` times spinning, then `yields` times yielding, until a node is
/// there or `stop()` holds. Meanwhile the thread counts as searching: a push it will see
/// wakes nobody. Across ranks it polls the transport too (`Channel::drain`: a message taken
/// here wakes neither the communication thread nor, for what it makes ready, a processor).
fn poll(st: &PoolState, me: Option<usize>, mut stop: impl FnMut() -> bool) -> Option<Arc<Node>> {
    timeline::mark(Ev::PollBegin, 0);
    st.searching.fetch_add(1, Ordering::SeqCst);
    let ch = st.shared.channel.get().filter(|c| c.polled_by_processors());
    if let Some(ch) = ch {
        ch.begin_polling();
    }
    let mut found = None;
    let mut stopped = false;
    for i in 0..st.spins + st.yields {
        found = try_pop(st, me, true);
        if found.is_some() {
            break;
        }
        if ch.is_some_and(|ch| ch.drain()) {
            // What the message made ready is queued now.
            continue;
        }
        if stop() {
            stopped = true;
            break;
        }
        if i < st.spins {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    if let Some(ch) = ch {
        // While still searching: what a message left to this thread makes ready is queued
        // without waking anyone, and the look at the queue below or in the caller takes it.
        // Neither a node nor the end of its wait: this thread is about to sleep.
        ch.end_polling(found.is_none() && !stopped);
    }
    if found.is_none() {
        // Before it sleeps (`pop`, `sleep_helper`) or leaves (`leave`), each of which looks
        // at `queued` again: a push this thread was counted for is not lost.
        st.searching.fetch_sub(1, Ordering::SeqCst);
    }
    timeline::mark(Ev::PollEnd, found.is_some() as u64);
    found
}

fn pop(st: &PoolState, me: usize) -> Option<Arc<Node>> {
    if let Some(n) = poll(st, Some(me), || false) {
        return Some(n);
    }
    let mut q = lock(st);
    loop {
        if let Some(n) = q.nodes.pop_front() {
            st.queued.fetch_sub(1, Ordering::SeqCst);
            return Some(n);
        }
        // A count seen here with the shared queue empty is a node in a mailbox (pushed
        // outside this lock): drop the lock, as `try_pop` takes it.
        if st.queued.load(Ordering::SeqCst) > 0 {
            drop(q);
            if let Some(n) = try_pop(st, Some(me), false) {
                return Some(n);
            }
            q = lock(st);
            continue;
        }
        if st.stop.load(Ordering::SeqCst) {
            return None;
        }
        q.workers.push(me);
        st.asleep.fetch_add(1, Ordering::SeqCst);
        // Dekker with `wake_one`: a mailbox push that read `asleep` before it counted this
        // worker incremented `queued` first.
        if st.queued.load(Ordering::SeqCst) == 0 {
            // Asleep until a push takes it out of the list (spurious wake-ups leave it in).
            timeline::mark(Ev::SleepBegin, 0);
            while q.workers.contains(&me) && !st.stop.load(Ordering::SeqCst) {
                q = st.wake[me].wait(q).unwrap_or_else(|e| e.into_inner());
            }
            timeline::mark(Ev::SleepEnd, 0);
        }
        if let Some(i) = q.workers.iter().position(|&w| w == me) {
            q.workers.swap_remove(i);
            st.asleep.fetch_sub(1, Ordering::SeqCst);
        }
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
                timeline::mark(Ev::Ready, Arc::as_ptr(&r) as u64);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::execute::graph::Work;
    use crate::rect::Rect;
    use crate::replicate::channel::{Channel, Deliver, Recv};
    use crate::store::StoreRoot;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A pool of `workers` workers, returned once they all sleep.
    fn sleeping_pool(workers: usize) -> ThreadPool {
        let pool = ThreadPool::new(workers, Arc::new(Shared::default()), 0);
        wait_asleep(&pool, workers);
        pool
    }

    fn wait_asleep(pool: &ThreadPool, n: usize) {
        until(
            || pool.state.asleep.load(Ordering::SeqCst) >= n,
            "threads fell asleep",
        );
    }

    /// Yields until `cond` holds; a minute without is a hang, and fails the test.
    fn until(mut cond: impl FnMut() -> bool, what: &str) {
        let start = std::time::Instant::now();
        while !cond() {
            assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
            std::thread::yield_now();
        }
    }

    /// A node any thread may run, counted as outstanding as the runtime counts its nodes.
    fn node(pool: &ThreadPool) -> Arc<Node> {
        pool.state.shared.outstanding.fetch_add(1, Ordering::SeqCst);
        Node::new(Work::Boundary)
    }

    /// A thread helping `pool` with nothing to do: it sleeps until a push wakes it (or
    /// `done`), then reports.
    fn sleeping_helper(pool: &Arc<ThreadPool>, done: Arc<AtomicBool>) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        let p = pool.clone();
        std::thread::spawn(move || {
            let c = &p.state.shared.completion;
            p.sleep_helper(c, &mut || done.load(Ordering::SeqCst));
            let _ = tx.send(());
        });
        rx
    }

    #[test]
    fn a_queued_node_wakes_one_sleeper_the_waiting_issuer_first() {
        let pool = Arc::new(sleeping_pool(2));
        let rx = sleeping_helper(&pool, Arc::new(AtomicBool::new(false)));
        wait_asleep(&pool, 3);
        let n = node(&pool);
        pool.spawn(n.clone());
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the sleeping issuer is woken for the node");
        // Neither worker was woken: both are still in the list, and only the issuer left it.
        let q = lock(&pool.state);
        assert_eq!(q.workers.len(), 2, "a worker was woken too");
        assert!(q.helpers.is_empty());
        drop(q);
        assert_eq!(pool.state.asleep.load(Ordering::SeqCst), 2);
        // The issuer's wait ended without it taking the node: leaving hands it on.
        pool.leave();
        until(|| n.is_done(), "the node left behind ran");
        pool.shutdown();
    }

    #[test]
    fn each_push_claims_a_different_sleeper_the_owner_then_the_issuer_first() {
        let h = Arc::new(AtomicBool::new(false));
        let mut q = Queue {
            workers: vec![0, 1, 2],
            helpers: vec![h.clone()],
            ..Queue::default()
        };
        let mut woken = vec![];
        // A node for worker 2's mailbox, then four for anyone.
        woken.push(claim(&mut q, Some(2)));
        for _ in 0..4 {
            woken.push(claim(&mut q, None));
        }
        let got: Vec<String> = woken
            .iter()
            .map(|w| match w {
                Some(Sleeper::Worker(i)) => format!("worker {i}"),
                Some(Sleeper::Helper(x)) => {
                    assert!(Arc::ptr_eq(x, &h));
                    "issuer".into()
                }
                None => "nobody".into(),
            })
            .collect();
        assert_eq!(
            got,
            ["worker 2", "issuer", "worker 1", "worker 0", "nobody"]
        );
    }

    #[test]
    fn a_node_queued_while_only_the_issuer_sleeps_wakes_it() {
        // No worker sleeps (none exists to take the node): only the issuer can run it.
        let pool = Arc::new(sleeping_pool(1));
        let st = &pool.state;
        // Take the worker out of the list as a push would, without waking it: it is "busy".
        {
            let mut q = lock(st);
            q.workers.clear();
            st.asleep.fetch_sub(1, Ordering::SeqCst);
        }
        let rx = sleeping_helper(&pool, Arc::new(AtomicBool::new(false)));
        wait_asleep(&pool, 1);
        pool.spawn(node(&pool));
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the node woke the only sleeper, the issuer");
        // Let the worker go.
        st.wake[0].notify_one();
        pool.shutdown();
    }

    #[test]
    fn a_sleeping_helper_still_wakes_when_its_wait_is_over() {
        let pool = Arc::new(sleeping_pool(1));
        let done = Arc::new(AtomicBool::new(false));
        let rx = sleeping_helper(&pool, done.clone());
        wait_asleep(&pool, 2);
        done.store(true, Ordering::SeqCst);
        // What a watched node's completion does.
        pool.state.shared.completion.notify();
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the helper wakes when its condition holds");
        // It took itself out of the list: the next node wakes the worker, not it.
        assert_eq!(pool.state.asleep.load(Ordering::SeqCst), 1);
        assert!(lock(&pool.state).helpers.is_empty());
        let n = node(&pool);
        pool.spawn(n.clone());
        until(|| n.is_done(), "the worker ran the node");
        pool.shutdown();
    }

    #[test]
    fn shutdown_wakes_every_sleeping_worker() {
        let pool = Arc::new(sleeping_pool(3));
        let (tx, rx) = mpsc::channel();
        let p = pool.clone();
        std::thread::spawn(move || {
            p.shutdown();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("every worker woke and stopped");
    }

    #[test]
    fn a_push_wakes_nobody_while_a_searching_thread_can_take_its_node() {
        let pool = Arc::new(sleeping_pool(1));
        let st = &pool.state;
        let rx = sleeping_helper(&pool, Arc::new(AtomicBool::new(false)));
        wait_asleep(&pool, 2);
        // A thread polling (as `poll` counts it) will take the first node.
        st.searching.fetch_add(1, Ordering::SeqCst);
        let (a, b) = (node(&pool), node(&pool));
        pool.spawn(a.clone());
        let q = lock(st);
        assert_eq!(
            (q.workers.len(), q.helpers.len()),
            (1, 1),
            "a sleeper was woken"
        );
        drop(q);
        // A second node is one more than the searchers: it wakes a sleeper (the issuer).
        pool.spawn(b.clone());
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the second node woke the issuer");
        assert_eq!(lock(st).workers.len(), 1);
        // The searcher gives up and leaves: the nodes go to the worker.
        st.searching.fetch_sub(1, Ordering::SeqCst);
        pool.leave();
        until(|| a.is_done() && b.is_done(), "the nodes ran");
        pool.shutdown();
    }

    /// Rank 0 of two thread ranks, with a pool of one worker and a channel but no
    /// communication thread (only a processor can take a message); rank 1 sends it one
    /// message for a receive whose node `f` gets, when rank 0 says so. `f` returns what the
    /// test asserts.
    fn one_receive<T: Send>(
        f: impl Fn(&ThreadPool, &Channel, &Arc<Node>, &dyn Fn() -> Recv, &dyn Fn()) -> T + Sync,
    ) -> T {
        use crate::replicate::channel::{key, DATA_TAG, KIND_DATA};
        use crate::transport::{run_ranks, Communicator, ThreadComm, TransportError};
        let k = key(1, KIND_DATA, 0, 0, 0);
        let mut out = run_ranks(2, |c: &ThreadComm| {
            if c.rank() == 1 {
                c.recv(0, 1)?;
                // The key, then a failure instead of elements: delivering it poisons the store.
                let mut msg: Vec<u8> = k.iter().flat_map(|w| w.to_le_bytes()).collect();
                let mut w = crate::replicate::codec::Writer::default();
                w.status(Some("sent on purpose"));
                msg.extend_from_slice(&w.0);
                c.send(0, DATA_TAG, msg)?;
                c.send(0, 2, vec![])?;
                return Ok::<_, TransportError>(None);
            }
            let shared = Arc::new(Shared::default());
            let pool = ThreadPool::new(1, shared.clone(), 0);
            wait_asleep(&pool, 1);
            let comm = Arc::new(c.clone());
            let ch = Arc::new(Channel::new(comm, false, &shared, pool.spawner()));
            let _ = shared.channel.set(ch.clone());
            shared.outstanding.fetch_add(1, Ordering::SeqCst);
            let root = Arc::new(StoreRoot::new(
                0,
                0,
                DType::F64,
                1,
                None,
                Arc::default(),
                false,
            ));
            let recv = || Recv {
                from: 1,
                key: k,
                deliver: Deliver::Data {
                    root: root.clone(),
                    rect: Rect::new(&[0], &[1]),
                },
            };
            let send_now = || {
                c.send(1, 1, vec![]).expect("to rank 1");
                // Rank 1 has posted the message when this comes.
                c.recv(1, 2).expect("from rank 1");
            };
            let node = Node::new(Work::Boundary);
            let got = f(&pool, &ch, &node, &recv, &send_now);
            assert!(
                root.poisoned().is_some(),
                "the message was not delivered to its store"
            );
            ch.stop();
            pool.shutdown();
            Ok(Some(got))
        });
        out.remove(0).expect("rank 0").expect("rank 0's outcome")
    }

    #[test]
    fn a_processor_waiting_on_the_runtime_takes_a_message_and_completes_its_parked_receive() {
        let (helped, taken) = one_receive(|pool, ch, node, recv, send_now| {
            assert!(!ch.ready(node, recv()), "no message yet: the receive parks");
            send_now();
            // The issuer in a runtime wait polls the transport as it polls the queue.
            let helped = pool.help(&mut || node.is_done());
            (helped, ch.taken_idle.load(Ordering::SeqCst))
        });
        assert!(helped, "the waiting processor did not take the message");
        assert_eq!(taken, 1);
    }

    /// A transport with nothing to receive that counts how processors stop polling.
    #[derive(Default)]
    struct Stops {
        to_sleep: AtomicUsize,
        other: AtomicUsize,
    }

    impl crate::transport::Communicator for Stops {
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            2
        }
        fn send(
            &self,
            _: usize,
            _: u16,
            _: Vec<u8>,
        ) -> Result<(), crate::transport::TransportError> {
            Ok(())
        }
        fn recv(&self, _: usize, _: u16) -> Result<Vec<u8>, crate::transport::TransportError> {
            unreachable!("the test receives nothing")
        }
        fn exchange(
            &self,
            _: usize,
            _: Vec<u8>,
            _: usize,
        ) -> Result<Vec<u8>, crate::transport::TransportError> {
            unreachable!("the test runs no collective")
        }
        fn note_shared_failure(&self) {}
        fn poll_any(
            &self,
            _: u16,
        ) -> Result<Option<(usize, Vec<u8>)>, crate::transport::TransportError> {
            Ok(None)
        }
        fn polling(&self, _: u16, on: bool) -> bool {
            if !on {
                self.other.fetch_add(1, Ordering::SeqCst);
            }
            false
        }
        fn polling_ends_in_sleep(&self, _: u16) -> bool {
            self.to_sleep.fetch_add(1, Ordering::SeqCst);
            false
        }
    }

    #[test]
    fn a_processor_tells_the_transport_when_it_stops_polling_to_sleep_and_only_then() {
        let shared = Arc::new(Shared::default());
        let pool = ThreadPool::new(1, shared.clone(), 0);
        wait_asleep(&pool, 1);
        let comm = Arc::new(Stops::default());
        let ch = Arc::new(Channel::new(comm.clone(), false, &shared, pool.spawner()));
        let _ = shared.channel.set(ch.clone());
        // The worker runs a node, polls with nothing to find, and sleeps: it says so.
        let n = node(&pool);
        pool.spawn(n.clone());
        until(
            || n.is_done() && pool.state.asleep.load(Ordering::SeqCst) == 1,
            "the worker ran the node and slept again",
        );
        assert_eq!(comm.to_sleep.load(Ordering::SeqCst), 1);
        assert_eq!(comm.other.load(Ordering::SeqCst), 0);
        // The issuer's wait ends while it polls: it goes back to its work, not to sleep.
        let mut looks = 0;
        assert!(pool.help(&mut || {
            looks += 1;
            looks > 1
        }));
        assert_eq!(
            comm.to_sleep.load(Ordering::SeqCst),
            1,
            "the issuer said it sleeps"
        );
        assert_eq!(comm.other.load(Ordering::SeqCst), 1);
        ch.stop();
        pool.shutdown();
    }

    #[test]
    fn a_receive_whose_message_waits_in_the_transport_completes_at_once() {
        let delivered = one_receive(|_, ch, node, recv, send_now| {
            send_now();
            ch.ready(node, recv())
        });
        assert!(delivered, "the receive parked though its message was there");
    }

    #[test]
    fn a_ready_send_is_taken_before_the_nodes_queued_ahead_of_it() {
        // No workers: nothing takes the nodes but this test.
        let pool = ThreadPool::new(0, Arc::new(Shared::default()), 0);
        let root = Arc::new(StoreRoot::new(
            0,
            0,
            DType::F64,
            1,
            None,
            Arc::default(),
            false,
        ));
        let point = node(&pool);
        pool.spawn(point.clone());
        pool.state.shared.outstanding.fetch_add(1, Ordering::SeqCst);
        let send = Node::new(Work::Send {
            root,
            rect: Rect::new(&[0], &[1]),
            to: 1,
            key: [0; 4],
            since: 0,
            at: 0,
        });
        pool.spawn(send.clone());
        let first = try_pop(&pool.state, None, false).expect("two nodes queued");
        assert!(
            Arc::ptr_eq(&first, &send),
            "the point queued first went first"
        );
        let second = try_pop(&pool.state, None, false).expect("the point still queued");
        assert!(Arc::ptr_eq(&second, &point));
        pool.shutdown();
    }
}
