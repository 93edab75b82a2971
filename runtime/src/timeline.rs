//! Per-thread wall-clock event log for splitting where a step's time goes (branch `metg11`):
//! node and body begin/end, idle polling, sleeps, submits, waits and replays, each with a
//! timestamp. Compiled in only with the crate feature `timeline`; without it every `mark` is
//! an empty inline function, so the hot paths pay nothing. [`dump`] writes the log as text,
//! one line per event (`thread ns kind id`), for `scripts/timeline_split.py`.
//!
//! Not a profiler of instructions: a mark costs a clock read and an uncontended lock (~40 ns
//! here), so a step of ~10 marks is measured ~0.4 µs slower than it runs unlogged. The split
//! between threads and between kinds of time is what it is for.

/// What happened (the second column of the dump).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Ev {
    /// A node starts running on this thread (`id`: the node's address).
    NodeBegin,
    /// The node's task and point (`id`: `position << 16 | point`, `0xffff` for a finish step).
    NodeTask,
    /// The node ran (work, completion and successors counted down).
    NodeEnd,
    /// The task body starts / ends.
    BodyBegin,
    BodyEnd,
    /// A ready node is queued (`id`: its address) — a mailbox or the shared queue.
    Ready,
    /// An idle thread starts polling for a node / stops (`id` 1: found one).
    PollBegin,
    PollEnd,
    /// A thread sleeps waiting for a node or the end of its wait / wakes.
    SleepBegin,
    SleepEnd,
    /// The application's `submit` (issue path) begins / returns.
    IssueBegin,
    IssueEnd,
    /// The issuing thread waits helping (back-pressure, fence, read, future) / the wait ends.
    HelpBegin,
    HelpEnd,
    /// A replay (`Inner::replay`) begins / ends.
    ReplayBegin,
    ReplayEnd,
    /// A node lets go of its replay (`Run`): the last one ends the run (recycling).
    LetGoBegin,
    LetGoEnd,
    /// A ledger lock was found held: the thread waits for it / has it (branch `ledger14`;
    /// only contended acquisitions are marked, see [`ledger_locks`]).
    LedgerWaitBegin,
    LedgerWaitEnd,
}

/// How often the stores' ledgers were locked since the start, summed over threads (branch
/// `ledger14`): all zeros without the `timeline` feature.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LedgerLocks {
    /// Acquisitions of a ledger's lock of held borrows (a borrow and its release: one each).
    pub taken: u64,
    /// Of those, the ones that found the lock held by another thread and waited.
    pub contended: u64,
    /// Wall time spent waiting in those, ns.
    pub waited_ns: u64,
}

#[cfg(feature = "timeline")]
mod imp {
    use super::Ev;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
    use std::time::Instant;

    type Log = Arc<Mutex<Vec<(u64, Ev, u64)>>>;

    fn epoch() -> Instant {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        *EPOCH.get_or_init(Instant::now)
    }

    fn logs() -> &'static Mutex<Vec<(String, Log)>> {
        static LOGS: OnceLock<Mutex<Vec<(String, Log)>>> = OnceLock::new();
        LOGS.get_or_init(Mutex::default)
    }

    thread_local! {
        static MINE: Log = {
            let log: Log = Arc::new(Mutex::new(Vec::with_capacity(1 << 20)));
            let name = std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .to_string();
            logs()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((name, log.clone()));
            log
        };
    }

    #[inline]
    pub fn mark(ev: Ev, id: u64) {
        let t = epoch().elapsed().as_nanos() as u64;
        MINE.with(|l| {
            l.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((t, ev, id))
        });
    }

    /// Per-thread lock counters (taken, contended, waited ns): each thread adds to its own.
    type Counts = Arc<[AtomicU64; 3]>;

    fn counts() -> &'static Mutex<Vec<Counts>> {
        static COUNTS: OnceLock<Mutex<Vec<Counts>>> = OnceLock::new();
        COUNTS.get_or_init(Mutex::default)
    }

    thread_local! {
        static MY_COUNTS: Counts = {
            let c: Counts = Arc::default();
            counts().lock().unwrap_or_else(|e| e.into_inner()).push(c.clone());
            c
        };
    }

    /// Locks `m` (a ledger's), counting the acquisition; a contended one is timed and marked.
    pub fn lock_counted<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        let guard = match m.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                mark(Ev::LedgerWaitBegin, 0);
                let t = Instant::now();
                let g = m.lock().unwrap_or_else(|e| e.into_inner());
                let ns = t.elapsed().as_nanos() as u64;
                mark(Ev::LedgerWaitEnd, 0);
                MY_COUNTS.with(|c| {
                    c[1].fetch_add(1, Ordering::Relaxed);
                    c[2].fetch_add(ns, Ordering::Relaxed);
                });
                g
            }
        };
        MY_COUNTS.with(|c| c[0].fetch_add(1, Ordering::Relaxed));
        guard
    }

    pub fn ledger_locks() -> super::LedgerLocks {
        let mut s = super::LedgerLocks::default();
        for c in counts().lock().unwrap_or_else(|e| e.into_inner()).iter() {
            s.taken += c[0].load(Ordering::Relaxed);
            s.contended += c[1].load(Ordering::Relaxed);
            s.waited_ns += c[2].load(Ordering::Relaxed);
        }
        s
    }

    pub fn dump(path: &std::path::Path) -> std::io::Result<bool> {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        for (name, log) in logs().lock().unwrap_or_else(|e| e.into_inner()).iter() {
            for (t, ev, id) in log.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                writeln!(f, "{name} {t} {ev:?} {id}")?;
            }
        }
        f.flush()?;
        Ok(true)
    }
}

/// Logs `ev` on this thread (a no-op without the `timeline` feature).
#[cfg(feature = "timeline")]
#[inline]
pub fn mark(ev: Ev, id: u64) {
    imp::mark(ev, id)
}

/// Logs `ev` on this thread (a no-op without the `timeline` feature).
#[cfg(not(feature = "timeline"))]
#[inline(always)]
pub fn mark(_ev: Ev, _id: u64) {}

/// Logs `begin` now and `end` when dropped (both no-ops without the `timeline` feature).
pub struct Span(#[allow(dead_code)] Ev);

impl Span {
    #[inline(always)]
    pub fn new(begin: Ev, end: Ev) -> Span {
        mark(begin, 0);
        Span(end)
    }
}

impl Drop for Span {
    #[inline(always)]
    fn drop(&mut self) {
        mark(self.0, 0);
    }
}

/// Writes every thread's events so far to `path` and clears them; `Ok(false)` (nothing
/// written) without the `timeline` feature.
#[cfg(feature = "timeline")]
pub fn dump(path: &std::path::Path) -> std::io::Result<bool> {
    imp::dump(path)
}

/// Writes every thread's events so far to `path` and clears them; `Ok(false)` (nothing
/// written) without the `timeline` feature.
#[cfg(not(feature = "timeline"))]
pub fn dump(_path: &std::path::Path) -> std::io::Result<bool> {
    Ok(false)
}

/// Locks a ledger's mutex; with the `timeline` feature the acquisition is counted (and a
/// contended one timed and marked), see [`ledger_locks`].
#[cfg(feature = "timeline")]
#[inline]
pub(crate) fn lock_counted<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    imp::lock_counted(m)
}

/// Locks a ledger's mutex (poisoning ignored: the ledger's state is consistent at every
/// unlock).
#[cfg(not(feature = "timeline"))]
#[inline(always)]
pub(crate) fn lock_counted<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The ledgers' lock counts so far (all zeros without the `timeline` feature).
#[cfg(feature = "timeline")]
pub fn ledger_locks() -> LedgerLocks {
    imp::ledger_locks()
}

/// The ledgers' lock counts so far (all zeros without the `timeline` feature).
#[cfg(not(feature = "timeline"))]
pub fn ledger_locks() -> LedgerLocks {
    LedgerLocks::default()
}
