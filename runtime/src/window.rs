//! The window between issuing a task and analysing it.
//!
//! Issued tasks wait here until the window is full, someone needs a result (a read, a
//! fence, a future, dropping the runtime) or, with the adaptive policy (the default), a worker
//! would go idle. The fusion pass solves them ahead in issue order
//! (`ready`: partitions known, not yet launched) and launches the longest fusible prefix as
//! one task; the rest stays for the next pass.

use crate::execute::OnNodeRan;
use crate::fusion::constraints::Prefix;
use crate::fusion::Ready;
use crate::issue::task::Issued;
use crate::runtime::Inner;
use crate::store::StoreRoot;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

pub(crate) struct Window {
    /// Solved tasks, in issue order; all of them were issued before every task in `tasks`.
    /// A ring: each pass launches a prefix, and a `Vec` would shift every solved task behind
    /// it. Boxed: a `Ready` is kilobytes, and the pass makes the ring contiguous and drains
    /// prefixes out of it, which moved whole tasks (measured: 8 k instructions per CG
    /// iteration, 14 k per `tensor!` CG iteration, in memcpy); boxes move as pointers.
    pub ready: VecDeque<Box<Ready>>,
    /// Issued tasks not solved yet, in issue order.
    pub tasks: VecDeque<Issued>,
    /// The fusible prefix of `ready` as far as it has been checked: extended as tasks are
    /// solved, forgotten when its tasks leave ([`Window::take`]).
    pub prefix: Prefix,
    capacity: usize,
    /// Names (interned `Arc<str>` addresses, compared only) of tasks whose last complete
    /// prefix, begun by them, made no temporary (a prefix of one task never does); the most
    /// recent [`GAINLESS`].
    gainless: smallvec::SmallVec<[usize; GAINLESS]>,
    /// Tasks issued so far whose name was in `gainless`, predicted on or not: every
    /// [`RECHECK`]-th is held, so that a prediction that has gone stale (the chain after the
    /// task now makes a temporary) is seen again.
    gainless_issues: u32,
    /// Predictions made by [`Window::complete_prefix_may_gain`]; every [`RECHECK`]-th is not
    /// acted on. Counted apart from `gainless_issues`, so that neither moves the other's
    /// re-checks.
    shape_predictions: u32,
    /// [`Prefix::shape_hash`]es of complete prefixes that made no temporary when last
    /// launched, the most recent [`GAINLESS`] ([`Window::complete_prefix_may_gain`]).
    gainless_shapes: smallvec::SmallVec<[u64; GAINLESS]>,
    /// Ids of the stores named by tasks issued after every task here that the tracer holds
    /// or is issuing ([`Window::note_later`]): tasks this window cannot see, so a store one
    /// of them names is no temporary of a prefix here, whatever the application's handles
    /// say (CG's `q` is dropped by the application while the tracer holds the task that reads
    /// it). A superset: entries of tasks that left the tracer stay until it holds nothing,
    /// which can only keep a store that would have been a temporary. Ids, not addresses: an
    /// id is never reused, and it is the same on every rank.
    pub later: Vec<u64>,
    /// Boxes of launched tasks, emptied ([`Ready::hollow`]), for the next tasks solved
    /// ([`rebox`]); at most [`SPARE`]. Boxes on purpose: what is kept is the allocation.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Ready>>,
}

/// Empty boxes the window keeps (a CG iteration has six tasks in it at most).
const SPARE: usize = 16;

/// [`Window::later`] is rebuilt from the tracer's held tasks past this many entries.
const LATER_MAX: usize = 1024;

/// A prefix taken out of the window to be launched ([`Window::take`]): a handful of tasks
/// (CG fuses at most three), so inline, not a list allocated per launch.
pub(crate) type Taken = smallvec::SmallVec<[Box<Ready>; 8]>;

/// Task names remembered as beginning prefixes that made no temporary.
const GAINLESS: usize = 8;

/// One in this many issues of a task predicted gainless holds the task anyway: a task
/// launched at submit never ends a complete prefix, so without a re-check its name would stay
/// "gainless" for good. The re-checks of a chain issued again and again must move along it:
/// only one on the chain's first task can fuse the chain (the others find it launched). So
/// the period is prime (with 16, a chain of two `ew_axpb` had every re-check on the second),
/// and the count is of every issue of a gainless name, predicted on or not. Counted only
/// where a prediction was made, a re-check that held a task left the window non-empty for
/// the rest of its chain, which then made no predictions; that shift put every later
/// re-check of `ew_axpb, ew_axpb, axpb` on the second `ew_axpb` (17 = 5 × 3 + 2), and the
/// chain stayed unfused in 10 runs of a test in 60.
const RECHECK: u32 = 17;

/// An `Arc`'s address, only compared: a task name is interned once per runtime and lives as
/// long as its registration.
fn addr<T: ?Sized>(a: &Arc<T>) -> usize {
    Arc::as_ptr(a) as *const u8 as usize
}

impl Window {
    pub(crate) fn new(capacity: usize) -> Window {
        Window {
            // Twice the window, so that the ring wraps (and `make_contiguous` rotates it) at
            // most once per window's worth of launches.
            ready: VecDeque::with_capacity(2 * capacity.clamp(1, 256)),
            tasks: VecDeque::new(),
            prefix: Prefix::default(),
            capacity: capacity.max(1),
            gainless: smallvec::SmallVec::new(),
            gainless_issues: 0,
            shape_predictions: 0,
            gainless_shapes: smallvec::SmallVec::new(),
            later: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// An empty box for the next task solved ([`rebox`]), if the window kept one.
    pub(crate) fn spare_box(&mut self) -> Option<Box<Ready>> {
        self.spare.pop()
    }

    /// Keeps the boxes of launched tasks (their pending references given back already)
    /// for the tasks solved next, emptied: a `Ready` is larger than the allocator's
    /// per-thread cache takes (1032 bytes in glibc), so each box allocated and freed took the
    /// allocator's arena lock, which a worker freeing what the issuer allocated (a launched
    /// task, a dropped store) holds as often; under that contention both threads slept in
    /// the kernel (runtime/DESIGN.md, "Task fusion", `tiny2`).
    pub(crate) fn give_back(&mut self, prefix: Taken) {
        for mut t in prefix {
            if self.spare.len() == SPARE {
                break;
            }
            t.hollow();
            self.spare.push(t);
        }
    }

    /// Notes the stores of `t`, a task the tracer is issuing (and may hold): until
    /// [`Window::settle_later`] finds the tracer holding nothing, no prefix here makes one of
    /// them a temporary.
    pub(crate) fn note_later(&mut self, t: &Issued) {
        self.later.extend(t.args.iter().map(|a| a.root.id));
    }

    /// [`Window::note_later`] for a task a replay streak holds: only with tasks here. A
    /// streak begins after a replay launched the window and hands nothing to it (an ended
    /// streak notes what it held: [`Window::note_held`]), so with the window empty no prefix
    /// is decided before the task is noted or launched.
    pub(crate) fn note_streak_task(&mut self, t: &Issued) {
        if !self.is_empty() {
            self.note_later(t);
        }
    }

    /// [`Window::note_later`] for every task in `held` (those a streak held unnoted, and what
    /// stays held when the tracer hands tasks to the window).
    pub(crate) fn note_held(&mut self, held: &[Issued]) {
        held.iter().for_each(|t| self.note_later(t));
    }

    /// Undoes one [`Window::note_later`] of `t`, which is entering the window: one entry per
    /// argument, so notes of the same stores made for other tasks stay.
    pub(crate) fn forget_later(&mut self, t: &Issued) {
        for a in &t.args {
            if let Some(i) = self.later.iter().rposition(|&id| id == a.root.id) {
                self.later.swap_remove(i);
            }
        }
    }

    /// After the tracer handed tasks on: forgets the stores of tasks no longer held (all of
    /// them when it holds none; else rebuilt from `held` once the list has grown long).
    pub(crate) fn settle_later(&mut self, held: &[Issued]) {
        if held.is_empty() {
            self.later.clear();
        } else if self.later.len() > LATER_MAX {
            self.later.clear();
            self.note_held(held);
        }
    }

    /// Whether a task the tracer holds or is issuing (after every task here) may name `root`.
    pub(crate) fn named_later(&self, root: &Arc<StoreRoot>) -> bool {
        named_in(&self.later, root)
    }

    pub(crate) fn len(&self) -> usize {
        self.ready.len() + self.tasks.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the window holds as many tasks as it may: time for a fusion pass.
    pub(crate) fn is_full(&self) -> bool {
        self.len() >= self.capacity
    }

    /// Adds a task; true when the window is full and should be analysed. The task holds a
    /// pending reference to each store it names until it leaves the window ([`unpend`]), so
    /// `Store::pending_refs` counts it as it counts a launched task.
    pub(crate) fn push(&mut self, t: Issued) -> bool {
        for (i, a) in t.args.iter().enumerate() {
            if !t.args[..i].iter().any(|b| Arc::ptr_eq(&a.root, &b.root)) {
                a.root.pending_refs.fetch_add(1, Ordering::AcqRel);
            }
        }
        self.tasks.push_back(t);
        self.is_full()
    }

    /// Length of the longest fusible prefix of the solved tasks (checking only the tasks solved
    /// since the last call).
    pub(crate) fn fusible_prefix(&mut self) -> usize {
        self.prefix.extend(&self.ready);
        self.prefix.len()
    }

    /// Removes the first `n` solved tasks (to be launched, `temporaries`: with some of their
    /// stores made temporaries); the prefix starts afresh.
    // Boxed on purpose: a `Ready` is kilobytes and the launch moves the tasks (see `ready`).
    #[allow(clippy::vec_box)]
    pub(crate) fn take(&mut self, n: usize, temporaries: bool) -> Taken {
        // What the next lone task of this name may expect (`predicted_gainless`): known only
        // for a prefix a later task ended, not one launched because a read or an idle worker
        // came (nor one launched at submit on this prediction).
        if self.prefix.is_complete() {
            let name = addr(&self.ready[0].issued.name);
            remember(&mut self.gainless, name, !temporaries);
            if n > 1 {
                remember(
                    &mut self.gainless_shapes,
                    self.prefix.shape_hash(),
                    !temporaries,
                );
            }
        }
        self.prefix.clear();
        self.ready.drain(..n).collect()
    }

    /// True when the window is empty and the last complete prefix begun by a task of `t`'s
    /// name (`t` is about to be issued) made no temporary (it ended right after it, or the
    /// tasks that joined it left no store dead): holding `t` for a chain to join is predicted
    /// to gain at most a launch, while a worker that could run it idles for the rest of the
    /// chain's issue. The caller then launches `t` at once, without passing it through the
    /// window. A prediction from the stream's history, as the adaptive window's launches
    /// already follow timing; a miss only launches a task that could have fused. A task whose
    /// last prefix made a temporary is held as before, and so is one never seen beginning a
    /// complete prefix (Black-Scholes' chain is launched by a read, not ended by a task).
    /// `dry`: the workers are about to idle, the only time holding costs. Every [`RECHECK`]-th
    /// issue of a gainless name answers false, to look at the prefix again.
    pub(crate) fn predicted_gainless(&mut self, t: &Issued, dry: bool) -> bool {
        if !self.gainless.contains(&addr(&t.name)) {
            return false;
        }
        self.gainless_issues = self.gainless_issues.wrapping_add(1);
        dry && self.is_empty() && !self.gainless_issues.is_multiple_of(RECHECK)
    }

    /// Whether holding the complete fusible prefix could still make one of its stores a
    /// temporary (only a fused prefix has temporaries: one task is launched as issued), and
    /// the last complete prefix of its canonical form did (or none was seen). A prefix that
    /// could, but whose form made none last time, is predicted not to (the fusion bench's
    /// BiCGSTAB: [SpMV t, t·s, t·t, x update] is complete when `x += ω s` is issued, but `t`
    /// could be a temporary until `r −= ω t` names it two submits later, and the worker
    /// idled for it). As for a lone task, every [`RECHECK`]-th such prediction is not acted
    /// on: a prefix launched on a prediction makes no temporary whatever the application
    /// does later, so only a held one can show that the prediction went stale.
    pub(crate) fn complete_prefix_may_gain(&mut self) -> bool {
        let unsolved = &self.tasks;
        let may = self.prefix.len() > 1
            && self.prefix.may_gain_temporary(&self.ready, |r| {
                self.named_later(r)
                    || unsolved
                        .iter()
                        .any(|t| t.args.iter().any(|a| Arc::ptr_eq(&a.root, r)))
            });
        if !may || !self.gainless_shapes.contains(&self.prefix.shape_hash()) {
            return may;
        }
        self.shape_predictions = self.shape_predictions.wrapping_add(1);
        self.shape_predictions.is_multiple_of(RECHECK)
    }

    /// True when a task issued now would be analysed at once (a window of one, empty): the
    /// caller may analyse it without passing it through.
    pub(crate) fn bypass(&self) -> bool {
        self.capacity == 1 && self.is_empty()
    }
}

/// Moves `key` to the end of `list` (the most recent [`GAINLESS`]) when `gainless`, else drops
/// it from the list.
fn remember<T: PartialEq + Copy>(
    list: &mut smallvec::SmallVec<[T; GAINLESS]>,
    key: T,
    gainless: bool,
) {
    list.retain(|x| *x != key);
    if gainless {
        if list.len() == GAINLESS {
            list.remove(0);
        }
        list.push(key);
    }
}

/// `r` in `spare` (an emptied box, [`Window::spare_box`]) or in a new box.
pub(crate) fn rebox(spare: Option<Box<Ready>>, r: Ready) -> Box<Ready> {
    match spare {
        Some(mut b) => {
            *b = r;
            b
        }
        None => Box::new(r),
    }
}

/// Whether `later` ([`Window::later`]) has `root`.
pub(crate) fn named_in(later: &[u64], root: &Arc<StoreRoot>) -> bool {
    later.contains(&root.id)
}

/// Drops the window's pending references of a task that left it (see [`Window::push`]), after
/// it was launched or when it failed to solve: once per store it names, as they were taken,
/// with no list of its stores made (a task launched alone leaves its box in place too:
/// `Plan::take_single`).
pub(crate) fn unpend_task(t: &Issued) {
    for (i, a) in t.args.iter().enumerate() {
        if !t.args[..i].iter().any(|b| Arc::ptr_eq(&a.root, &b.root)) {
            a.root.pending_refs.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// How many tasks the window holds before a fusion pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowPolicy {
    /// Exactly `n` tasks (or until a read, fence, future or drop): the same decisions on every
    /// run and every rank.
    Fixed(usize),
    /// Up to `max` tasks while the workers are busy; as soon as a worker would go idle (or the
    /// issuer would block) whatever the window holds is launched. A task never waits for the
    /// window to fill, so code that synchronises with running bodies behaves as with a window
    /// of one; the window grows only while the machine has work anyway.
    Adaptive {
        /// The most tasks held (a full window launches its fusible prefix).
        max: usize,
    },
}

impl WindowPolicy {
    /// The most tasks the window holds.
    pub(crate) fn capacity(self) -> usize {
        match self {
            WindowPolicy::Fixed(n) | WindowPolicy::Adaptive { max: n } => n.max(1),
        }
    }
}

/// What a thread that runs point tasks needs to know about an adaptive window without taking
/// the front lock: whether it holds tasks, and who to ask for a flush.
pub(crate) struct Adaptive {
    /// The runtime whose window this is (weak: the workers do not keep it alive).
    pub inner: Weak<Inner>,
    /// Worker threads: fewer outstanding nodes than this means a worker has nothing to run.
    pub workers: usize,
    /// The window holds tasks. Written under the front lock, read by workers.
    pub held: AtomicBool,
    /// A thread found a worker idle but could not take the front lock: whoever holds it
    /// launches the window after letting go of it.
    pub wanted: AtomicBool,
    /// The flush asked for through `wanted` came from the window thread (its deadline
    /// passed): the holder's flush counts as the window thread's (`Stats::timer_flushes`).
    pub wanted_by_timer: AtomicBool,
    /// When the window thread launches what is held while workers idle (`None`: nothing held
    /// that way), and whether the runtime is shutting down.
    pub timer: Mutex<Timer>,
    pub wake: Condvar,
    /// A deadline is set (read without the timer lock, so that launching an empty-handed
    /// window costs no lock when the thread is not armed).
    pub armed: AtomicBool,
    /// How long a task issued while a worker is idle is held ([`HOLD`] by default); zero
    /// launches it at submit.
    pub hold_idle: Duration,
    /// A submit that finds a worker idle launches the complete fusible prefixes at once
    /// (`Inner::launch_complete`).
    pub early: bool,
    /// A lone task predicted to begin a prefix that makes no temporary
    /// ([`Window::predicted_gainless`]) is launched at submit while at most this many nodes
    /// are outstanding ([`Adaptive::running_dry`]).
    dry: usize,
    /// When an issue found a worker idle and held its task anyway (nanoseconds after `epoch`
    /// plus one; 0: not since the last launch): the time until the next launch is time that
    /// worker idled because of the window (`Stats::idle_held_ns`).
    idle_since: AtomicU64,
    epoch: Instant,
}

/// [`Adaptive::dry`]: two nodes per worker, or `TESSERA_WINDOW_DRY=n` nodes. Not a setting:
/// a switch to compare rules in one binary (`TESSERA_WINDOW_DRY` one less than the workers is
/// the rule before: a worker already idle).
fn dry_nodes(workers: usize) -> usize {
    std::env::var("TESSERA_WINDOW_DRY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2 * workers)
}

#[derive(Default)]
pub(crate) struct Timer {
    pub deadline: Option<Instant>,
    pub stop: bool,
    /// How the window thread sleeps: what [`Adaptive::hold`] must wake it for.
    sleep: Sleep,
}

/// The window thread's state, under the timer lock.
#[derive(Clone, Copy, Default)]
enum Sleep {
    /// Running: it reads the deadline before it sleeps again.
    #[default]
    Awake,
    /// Asleep until notified (no deadline was set).
    Untimed,
    /// Asleep until this instant, or until notified.
    Until(Instant),
}

/// How long a task issued while a worker is idle waits for the next one before the window
/// thread launches it (the deadline moves with every issue; a full window or a blocking call
/// launches sooner). Issuing one task takes a few µs, so a chain issued in one go gathers in
/// the window whole and fuses from its first task, while a task followed by anything but
/// another submit (the caller waiting outside the runtime) starts this much later than with a
/// window of one.
pub(crate) const HOLD: Duration = Duration::from_micros(100);

/// How long tasks held while the workers look busy may wait without another submit before the
/// window thread launches them anyway. Idleness is read from the count of outstanding nodes,
/// which also counts nodes waiting on a running one: if that one is blocked on something
/// outside the runtime, no node finishes and no worker reports itself idle. This bounds the
/// wait; a program that keeps submitting never reaches it (each submit moves the deadline).
pub(crate) const STALL: Duration = Duration::from_millis(50);

impl Adaptive {
    pub(crate) fn new(
        inner: Weak<Inner>,
        workers: usize,
        hold_idle: Duration,
        early: bool,
    ) -> Adaptive {
        Adaptive {
            early,
            dry: dry_nodes(workers),
            inner,
            workers,
            held: AtomicBool::new(false),
            wanted: AtomicBool::new(false),
            wanted_by_timer: AtomicBool::new(false),
            timer: Mutex::default(),
            wake: Condvar::new(),
            armed: AtomicBool::new(false),
            hold_idle,
            idle_since: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// True when the workers are about to run out of work: at most two nodes per worker are
    /// outstanding (`outstanding`, read at submit), the ones they run and one more each. A
    /// lone task predicted to gain nothing by waiting is then launched at submit, not only
    /// for a worker already idle: issuing the rest of its chain takes longer than such nodes
    /// (a few µs per submit), and a task launched only after its worker ran dry waits for
    /// the next submit's flush and the worker's wake-up (the fusion bench's BiCGSTAB: its
    /// SpMV, issued while the worker ran the two points of the direction update launched
    /// just before, started ~15 µs after that update ended; unfused, 1.7 µs).
    pub(crate) fn running_dry(&self, outstanding: usize) -> bool {
        outstanding <= self.dry
    }

    /// Notes that a task was held while a worker was idle (the first such since the last
    /// launch starts the clock).
    pub(crate) fn held_while_idle(&self) {
        let now = self.epoch.elapsed().as_nanos() as u64 + 1;
        let _ = self
            .idle_since
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// At a launch: nanoseconds since a task was first held while a worker idled (0 if none
    /// was), and the clock stops.
    pub(crate) fn idle_held_ns(&self) -> u64 {
        if self.idle_since.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let since = self.idle_since.swap(0, Ordering::Relaxed);
        let now = self.epoch.elapsed().as_nanos() as u64 + 1;
        now.saturating_sub(since.max(1))
    }

    /// True when a node just run leaves `left` outstanding and the window should be launched:
    /// it holds tasks and some worker has nothing to run. Sequentially consistent with the
    /// issuer, which sets `held` before it reads the outstanding count (so one of the two sees
    /// the other and no task is left in the window with every worker idle).
    fn idle(&self, left: usize) -> bool {
        left < self.workers && self.held.load(Ordering::SeqCst)
    }

    /// Asks the window thread to launch the window `after` from now ([`HOLD`] or [`STALL`])
    /// unless something else does first. It is woken only if it would otherwise sleep past
    /// the new deadline (asleep with none, or until a later one); a thread that wakes earlier
    /// finds the moved deadline then. Why: a wake-up is a futex call on the issuing thread (about
    /// 3 µs here) and a context switch on a core a worker may be using; waking it whenever a
    /// deadline was set afresh cost the fusion bench's BiCGSTAB two per iteration.
    /// True when it woke the thread. `now` is the caller's clock read (the issuer reads the
    /// clock once at the end of a submit, for the analysis time and this deadline alike).
    pub(crate) fn hold(&self, now: Instant, after: Duration) -> bool {
        let mut t = self.timer.lock().unwrap_or_else(|e| e.into_inner());
        let deadline = now + after;
        t.deadline = Some(deadline);
        self.armed.store(true, Ordering::SeqCst);
        let wake = match t.sleep {
            Sleep::Awake => false,
            Sleep::Untimed => true,
            Sleep::Until(at) => at > deadline,
        };
        drop(t);
        if wake {
            self.wake.notify_one();
        }
        wake
    }

    /// Clears the deadline: the window was launched by other means, and a stale deadline would
    /// launch tasks held later (while workers are busy) early.
    pub(crate) fn disarm(&self) {
        if self.armed.load(Ordering::SeqCst) {
            let mut t = self.timer.lock().unwrap_or_else(|e| e.into_inner());
            t.deadline = None;
            self.armed.store(false, Ordering::SeqCst);
        }
    }

    /// Stops the window thread.
    pub(crate) fn stop(&self) {
        self.timer.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        self.wake.notify_one();
    }

    /// The window thread: sleeps until a deadline passes, then launches the window. With no
    /// deadline it first lingers for [`STALL`], asleep with a timeout, and only then sleeps
    /// until woken: a window launched by other means is usually refilled within microseconds,
    /// and a deadline set while it lingers needs no wake-up (see [`Adaptive::hold`]).
    pub(crate) fn run_timer(&self) {
        let mut t = self.timer.lock().unwrap_or_else(|e| e.into_inner());
        let mut lingered = false;
        while !t.stop {
            let now = Instant::now();
            let until = match t.deadline {
                Some(deadline) if now >= deadline => None,
                Some(deadline) => Some(deadline),
                None if !lingered => Some(now + STALL),
                None => {
                    t.sleep = Sleep::Untimed;
                    t = self.wake.wait(t).unwrap_or_else(|e| e.into_inner());
                    t.sleep = Sleep::Awake;
                    lingered = false;
                    continue;
                }
            };
            if let Some(until) = until {
                lingered = t.deadline.is_none();
                t.sleep = Sleep::Until(until);
                t = self
                    .wake
                    .wait_timeout(t, until - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                t.sleep = Sleep::Awake;
                continue;
            }
            t.deadline = None;
            self.armed.store(false, Ordering::SeqCst);
            drop(t);
            if let Some(inner) = self.inner.upgrade() {
                inner.idle_flush(self, true);
            }
            t = self.timer.lock().unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A worker about to go idle launches what the window holds (through `Shared::on_node_ran`).
impl OnNodeRan for Adaptive {
    fn node_ran(&self, left: usize) {
        if self.idle(left) {
            if let Some(inner) = self.inner.upgrade() {
                inner.idle_flush(self, false);
            }
        }
    }
}
