//! How issued tasks move on from the window: enqueued, solved ahead, launched as fusible
//! prefixes (at a flush, when a worker goes idle under the adaptive window, or when the
//! window is full), and the issuer throttled or helping while it waits.

use super::{Front, Inner, Plan};
use crate::constraint::Constraint;
use crate::error::{Result, RuntimeError};
use crate::execute::executor::Executor;
use crate::execute::graph::Completion;
use crate::fusion::{build, memo, FusedShape, Ready};
use crate::issue::task::{Issued, Privilege};
use crate::stats::Counters;
use crate::store::StoreRoot;
use crate::window::{self, Adaptive};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

impl Inner {
    /// Analyses every task in the window, in issue order (fusing what may be fused).
    pub(crate) fn flush(&self) -> Result<()> {
        let mut front = self.front.lock().unwrap_or_else(|e| e.into_inner());
        let r = self.flush_locked(&mut front);
        let r = r.and(front.deferred.take().map_or(Ok(()), Err));
        self.release(front);
        r
    }

    /// For a `Future::get` whose value is known already: [`Inner::flush`] unless the window is
    /// adaptive and tracing is off. Whether the value is known yet depends on whether workers
    /// (and, across ranks, messages) have finished its task, so a `get` flushes known or not
    /// wherever decisions must follow from the task stream alone: a fixed window (across
    /// ranks, a rank that skipped the flush would hold tasks the others launched and fuse
    /// them differently) and the tracer (it cuts at every `get`; no trace spans one). An
    /// adaptive window's launches follow timing anyway, and skipping spares a lock.
    pub(crate) fn flush_known(&self) -> Result<()> {
        if self.adaptive.get().is_none() {
            return self.flush();
        }
        let traced = self
            .front
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tracing
            .is_some();
        if traced {
            self.flush()
        } else {
            Ok(())
        }
    }

    /// Lets go of the front lock; with an adaptive window, first publishes whether it holds
    /// tasks (an empty window disarms the window thread), and afterwards launches it if a
    /// worker went idle meanwhile and found the lock taken (it left that to the holder). A
    /// worker that went idle before the issuer's `held` store is seen by the issuer's
    /// outstanding count instead (`issue_adaptive` then arms the window thread).
    pub(super) fn release(&self, front: std::sync::MutexGuard<'_, Front>) {
        let Some(a) = self.adaptive.get() else {
            return;
        };
        let held = !front.window.is_empty();
        a.held.store(held, Ordering::SeqCst);
        if !held {
            a.disarm();
        }
        drop(front);
        if a.wanted.load(Ordering::SeqCst) {
            self.idle_flush(a, false);
        }
    }

    /// Issues a task into an adaptive window: solved at once (so a bad launch fails at
    /// `submit`, as with a window of one) and held. What is held is launched when it needs
    /// values a held task makes (the issuer would block on them: what is ahead goes first),
    /// when the window is full (its fusible prefix), when a worker would go idle (`node_ran`),
    /// or, if a worker is idle now, by the window thread once no task has followed for
    /// [`window::HOLD`] (so a chain issued in one go fuses from its first task), and in any
    /// case by the window thread after [`window::STALL`] without a submit.
    ///
    /// Timed as analysis once per submit (two clock reads, the second also the hold's
    /// deadline), not once per task solved and prefix launched (runtime/DESIGN.md, `fmemo`).
    fn issue_adaptive(&self, front: &mut Front, a: &Adaptive, t: Issued) -> Result<()> {
        let t0 = Instant::now();
        // `held` before reading the outstanding count: see `Adaptive::idle`.
        a.held.store(true, Ordering::SeqCst);
        let outstanding = self.shared.outstanding.load(Ordering::SeqCst);
        let idle = outstanding < a.workers;
        // A lone task predicted to begin a prefix that makes no temporary: holding it idles the
        // worker for at most one launch saved, also when the worker is only about to idle. It
        // is launched as a window of one launches it, without being moved into the window,
        // boxed, taken out and unpended (runtime/DESIGN.md, "Task fusion", `tiny2`).
        let dry = a.running_dry(outstanding);
        if a.early && front.window.predicted_gainless(&t, dry) {
            let r = self.launch_now(front, t);
            self.add_analysis(t0.elapsed());
            return r;
        }
        front.window.push(t);
        let mut first = Ok(());
        self.solve_ahead(front, &mut first);
        let held = front.window.len();
        let r = if !front.window.tasks.is_empty() || (idle && a.hold_idle.is_zero()) {
            self.drain(front, true)
        } else if front.window.is_full() {
            self.drain(front, idle)
        } else if a.early {
            self.launch_complete(front, idle)
        } else {
            Ok(())
        };
        // Still idle: nothing was launched for the idle worker.
        let idle = idle && front.window.len() == held;
        let now = Instant::now();
        self.add_analysis(now - t0);
        if !front.window.is_empty() {
            if idle {
                a.held_while_idle();
            }
            if a.hold(now, if idle { a.hold_idle } else { window::STALL }) {
                Counters::add(&self.shared.counters.window_wakes, 1);
            }
        }
        first.and(r)
    }

    /// Launches the adaptive window's *complete* fusible prefixes (those a later task already
    /// ends; no task issued later can join them) and keeps the last, still growing one. With
    /// a worker idle, every complete prefix goes; with the workers busy, those that holding
    /// could still give a temporary stay (`Prefix::may_gain_temporary`: a store the
    /// application may yet drop the handle of), and launch when a worker would go idle.
    ///
    /// Why not hold them all while the workers are busy: a complete prefix gains nothing more
    /// by waiting, and "busy" is often one worker finishing its last node. The fusion bench's
    /// BiCGSTAB issues an iteration's 13 tasks (5 prefixes) after waiting on futures; held to
    /// the next idle worker or `get`, its SpMVs started one launch later than unfused, on the
    /// critical path of every iteration (runtime/DESIGN.md, "Task fusion").
    fn launch_complete(&self, front: &mut Front, idle: bool) -> Result<()> {
        let mut first = Ok(());
        while front.window.ready.len() > 1
            && front.window.fusible_prefix() < front.window.ready.len()
        {
            if !idle && front.window.complete_prefix_may_gain() {
                break;
            }
            self.launch_prefix_into(front, &mut first);
        }
        first
    }

    /// Launches the window's next fusible prefix; its error, if it is the first of a pass,
    /// goes to `first` (the pass goes on: the other prefixes still launch).
    fn launch_prefix_into(&self, front: &mut Front, first: &mut Result<()>) {
        if let Err(e) = self.launch_prefix(front) {
            if first.is_ok() {
                *first = Err(e);
            }
        }
    }

    /// Adds `d` to the analysis time. The window's entry points (a submit, a flush, an idle
    /// worker's launch) time themselves once, not each task solved or prefix launched: every
    /// clock read is ~26 ns here, 24 per fused CG iteration before.
    fn add_analysis(&self, d: std::time::Duration) {
        Counters::add(&self.shared.counters.analysis_ns, d.as_nanos() as u64);
    }

    /// `f`, timed as analysis (one of the window's entry points).
    fn analysed<T>(&self, f: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let r = f();
        self.add_analysis(t0.elapsed());
        r
    }

    /// A worker would go idle and the adaptive window holds tasks: launch every solved task in
    /// it (fused where allowed). Never blocks: if another thread holds the front lock, `wanted`
    /// tells it to do this when it lets go. Errors wait in `deferred` for the issuing thread.
    pub(crate) fn idle_flush(&self, a: &Adaptive, timer: bool) {
        // Before `wanted`: a holder that sees `wanted` also sees who asked.
        if timer {
            a.wanted_by_timer.store(true, Ordering::SeqCst);
        }
        a.wanted.store(true, Ordering::SeqCst);
        while a.wanted.load(Ordering::SeqCst) {
            let mut front = match self.front.try_lock() {
                Ok(f) => f,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return,
            };
            a.wanted.store(false, Ordering::SeqCst);
            let timer = a.wanted_by_timer.swap(false, Ordering::SeqCst) || timer;
            if !front.window.ready.is_empty() {
                let c = &self.shared.counters;
                Counters::add(
                    if timer {
                        &c.timer_flushes
                    } else {
                        &c.idle_flushes
                    },
                    1,
                );
                self.analysed(|| {
                    while !front.window.ready.is_empty() {
                        if let Err(e) = self.launch_prefix(&mut front) {
                            front.deferred.get_or_insert(e);
                        }
                    }
                });
            }
            let held = !front.window.is_empty();
            a.held.store(held, Ordering::SeqCst);
            if !held {
                a.disarm();
            }
        }
    }

    /// Puts a task in the window (past the tracer, if tracing is on).
    pub(crate) fn enqueue(&self, front: &mut Front, t: Issued) -> Result<()> {
        if let Some(a) = self.adaptive.get() {
            self.issue_adaptive(front, a, t)
        } else if front.window.bypass() {
            // Nothing buffered and nothing to buffer for: analyse now, without a copy of the
            // task into the window and out again.
            self.analyze_now(front, t)
        } else if front.window.push(t) {
            self.analysed(|| self.drain(front, false))
        } else if self.fusion.enabled && self.machine.ranks > 1 {
            self.analysed(|| self.launch_ended(front))
        } else {
            Ok(())
        }
    }

    /// Across ranks the fixed window solves each task as it comes and launches the prefixes a
    /// later task has ended, instead of holding them until the window fills or the program
    /// flushes: a bad launch fails at its `submit`, as on one rank, and no task issued later
    /// could join an ended prefix, so holding it changed no fusion decision. What launches
    /// when is still a function of the stream alone — the solves, the prefixes' ends and the
    /// application's handles (`complete_prefix_may_gain`: a prefix that holding may still
    /// give a temporary stays) — so ranks agree. A fixed window asked for on one rank still
    /// holds everything (its errors come at the flush, as documented); there the adaptive
    /// default launches ended prefixes when a worker would go idle.
    fn launch_ended(&self, front: &mut Front) -> Result<()> {
        let mut first = Ok(());
        loop {
            self.solve_ahead(front, &mut first);
            if front.window.tasks.is_empty() {
                break;
            }
            // The next task needs values a solved task makes: it ends every prefix ahead.
            while !front.window.ready.is_empty() {
                self.launch_prefix_into(front, &mut first);
            }
        }
        let r = self.launch_complete(front, false);
        first.and(r)
    }

    /// Launches everything issued so far: the tracer's held tasks (issued after everything in
    /// the window) go to the window or are replayed, then the window is launched.
    fn flush_locked(&self, front: &mut Front) -> Result<()> {
        let r = match front.tracing.take() {
            Some(mut tr) => {
                let r = self.release_held(front, &mut tr);
                front.window.settle_later(tr.held());
                front.tracing = Some(tr);
                r
            }
            None => Ok(()),
        };
        let d = self.drain_all(front);
        r.and(d)
    }

    /// Launches every task in the window (timed as analysis).
    pub(crate) fn drain_all(&self, front: &mut Front) -> Result<()> {
        self.analysed(|| self.drain(front, true))
    }

    /// Solves and launches one task without passing it through the window.
    fn analyze_now(&self, front: &mut Front, t: Issued) -> Result<()> {
        self.analysed(|| self.launch_now(front, t))
    }

    /// [`Inner::analyze_now`], untimed (its callers time themselves).
    fn launch_now(&self, front: &mut Front, t: Issued) -> Result<()> {
        let ready = self.solve(front, t)?;
        Counters::add(&self.shared.counters.tasks_launched, 1);
        let plan = Plan::single(ready);
        self.agree_launch(&plan)?;
        self.analyse(plan);
        Ok(())
    }

    /// Fusion passes over the window: until it is empty (`all`: a read, fence, future or
    /// drop), or, with fusion on, until it is no longer full (the rest waits for more tasks,
    /// so that the next prefix can grow). Untimed: its callers time themselves.
    fn drain(&self, front: &mut Front, all: bool) -> Result<()> {
        let mut first = Ok(());
        loop {
            self.solve_ahead(front, &mut first);
            if front.window.ready.is_empty() {
                break;
            }
            self.launch_prefix_into(front, &mut first);
            // Without fusion there is no prefix to grow: a full window is analysed whole.
            let one_pass = !all && self.fusion.enabled;
            if front.window.is_empty() || (one_pass && !front.window.is_full()) {
                break;
            }
        }
        first
    }

    /// Solves the window's tasks in issue order until one needs values that a solved, not yet
    /// launched task produces (an unbound store it reads, an image of a store written in the
    /// window) or would block the issuing thread: the fusible prefix ends before it, and it
    /// is solved after the tasks ahead of it are launched. A task that fails to solve is
    /// dropped (its future gets the error), and the first error is kept for the caller.
    /// Untimed: its callers time themselves.
    fn solve_ahead(&self, front: &mut Front, first: &mut Result<()>) {
        while let Some(t) = front.window.tasks.front() {
            if !front.window.ready.is_empty() && needs_values(t, &front.window.ready) {
                break;
            }
            let t = front.window.tasks.pop_front().expect("just seen");
            // Into the box of a task launched before, if the window kept one.
            let spare = front.window.spare_box();
            // A task that fails leaves the window here: its pending references go back.
            let r = self.solve_then(front, t, window::unpend_task, |r| window::rebox(spare, r));
            match r {
                Ok(ready) => front.window.ready.push_back(ready),
                Err(e) => {
                    if first.is_ok() {
                        *first = Err(e);
                    }
                }
            }
        }
    }

    /// Launches the longest fusible prefix of the solved tasks: one fused task, or the first
    /// task alone.
    fn launch_prefix(&self, front: &mut Front) -> Result<()> {
        let counters = &self.shared.counters;
        if let Some(a) = self.adaptive.get() {
            Counters::add(&counters.idle_held_ns, a.idle_held_ns());
        }
        let (n, shape) = self.decide(front);
        let temporaries = shape
            .as_ref()
            .is_some_and(|s| s.args.iter().any(|a| a.local));
        let mut prefix = front.window.take(n, temporaries);
        Counters::add(&counters.tasks_launched, 1);
        let plan = match shape {
            // Taken out of its box, which the window keeps (`Window::give_back`).
            None => Plan::take_single(&mut prefix[0]),
            Some(shape) => {
                Counters::add(&counters.fused_launches, 1);
                Counters::add(&counters.tasks_fused, n as u64);
                Counters::add(&counters.kernel_fused_launches, shape.kernel as u64);
                counters
                    .max_fused_prefix
                    .fetch_max(n as u64, Ordering::Relaxed);
                for a in shape.args.iter().filter(|a| a.local) {
                    let root = &prefix[a.from.0].args[a.from.1].root;
                    Counters::add(&counters.temporaries_eliminated, 1);
                    let bytes = root.bound().map_or(0, |b| b.bytes());
                    Counters::add(&counters.bytes_not_allocated, bytes);
                }
                // Fusion joins only tasks of one sharding key (fusion/constraints.rs).
                let shard = prefix[0].issued.shard.clone();
                let inst = build::instantiate(&shape, &mut prefix);
                Plan {
                    name: shape.name.clone(),
                    body: self.fused_body.clone(),
                    domain: prefix[0].domain,
                    token: inst.token,
                    args: inst.args,
                    scalars: inst.scalars,
                    results: inst.results,
                    fused: Some(shape),
                    shard,
                }
            }
        };
        let r = self.agree_launch(&plan);
        if r.is_ok() {
            self.analyse(plan);
        }
        // The tasks outlive their plan: they give their references back in place.
        prefix.iter().for_each(|t| window::unpend_task(&t.issued));
        front.window.give_back(prefix);
        r
    }

    /// How many solved tasks to fuse, and the fused task's shape (`None`: launch one task as
    /// issued). The window extends its fusible prefix as tasks are solved (each task checked
    /// once); the shape is looked up by the prefix' canonical form when the memo is on, so an
    /// isomorphic prefix reuses the fused task built before (its name, body and argument maps).
    fn decide(&self, front: &mut Front) -> (usize, Option<Arc<FusedShape>>) {
        if !self.fusion.enabled || front.window.ready.len() == 1 {
            return (1, None);
        }
        let n = front.window.fusible_prefix();
        if n == 1 {
            return (1, None);
        }
        let memo = self.fusion.memo.then_some(&mut front.fusion_memo);
        let (shape, hit) = memo::fused_shape(&mut front.window, memo);
        let c = &self.shared.counters;
        match hit {
            Some(true) => Counters::add(&c.fusion_memo_hits, 1),
            Some(false) => Counters::add(&c.fusion_memo_misses, 1),
            None => {}
        }
        (n, Some(shape))
    }

    /// Waits while more than `max_pending` point tasks are outstanding.
    pub(super) fn throttle(&self) {
        let shared = &self.shared;
        if shared.outstanding.load(Ordering::Acquire) > self.max_pending {
            let low = self.max_pending / 2;
            self.wait_helping(&shared.idle, || {
                shared.outstanding.load(Ordering::Acquire) <= low
            });
        }
    }

    /// Waits until `done()` holds, running ready tasks on this thread meanwhile; sleeps on
    /// `completion` (which must be signalled when `done` may have become true; the pool signals
    /// it when it wakes this thread for a node) only while none are ready. Never call it
    /// holding the front lock: a task body runs here.
    pub(crate) fn wait_helping(&self, completion: &Completion, mut done: impl FnMut() -> bool) {
        let _span = crate::timeline::Span::new(
            crate::timeline::Ev::HelpBegin,
            crate::timeline::Ev::HelpEnd,
        );
        while !self.pool.help(&mut done) {
            self.pool.sleep_helper(completion, &mut done);
        }
        self.pool.leave();
    }

    /// Waits (on the issuing side) for an unbound store's producer to bind it. A producer
    /// that failed binds what its points left, and poisons the store: the waiting task is
    /// then issued like any reader of a poisoned store, and fails at its points. Returning
    /// the poison here instead made the issuing call fail only when the producer had not
    /// ended yet: the same program failed at `submit` or at its points by timing (found by
    /// the held-out panicking streams). Only a store still unbound after its producer ended
    /// is an error here.
    pub(crate) fn wait_bound(&self, root: &StoreRoot, task: &str) -> Result<()> {
        if root.bound().is_some() {
            return Ok(());
        }
        let producer = root.meta().producer.clone();
        let producer = producer.ok_or_else(|| RuntimeError::NeverBound {
            task: task.into(),
            store: root.id,
        })?;
        Counters::add(&self.shared.counters.blocking_waits, 1);
        producer.wait(&self.shared.completion);
        if root.bound().is_some() {
            return Ok(());
        }
        Err(root.poisoned().unwrap_or(RuntimeError::NeverBound {
            task: task.into(),
            store: root.id,
        }))
    }
}

/// Whether solving `t` now needs values a solved, not yet launched task produces, or would
/// make the issuing thread wait: an input that is still unbound, or an image whose source a
/// solved task writes.
fn needs_values(t: &Issued, ready: &VecDeque<Box<Ready>>) -> bool {
    // Decided by the stream alone (not by whether a producer has run yet), so that every
    // rank cuts the window at the same task.
    let written_by = |root: &Arc<StoreRoot>, unbound: bool| {
        ready.iter().any(|r| {
            r.args.iter().any(|a| {
                a.privilege.writes()
                    && (!unbound || a.privilege == Privilege::WriteUnbound)
                    && Arc::ptr_eq(&a.root, root)
            })
        })
    };
    let written_here = |root: &Arc<StoreRoot>| written_by(root, false);
    // A store some solved task writes unbound is unbound now (that task has not run), so a
    // bound input needs no scan of the window: the answer is the same, found in O(1) for the
    // common case (the scan is O(window) per task).
    let unbound_input = t.args.iter().any(|a| {
        a.privilege != Privilege::WriteUnbound
            && a.root.bound().is_none()
            && written_by(&a.root, true)
    });
    let image_of_written = t.constraints.iter().any(|c| match c {
        Constraint::Image { src, .. } => written_here(&t.args[*src].root),
        _ => false,
    });
    unbound_input || image_of_written
}
