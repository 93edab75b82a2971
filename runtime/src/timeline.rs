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
}

#[cfg(feature = "timeline")]
mod imp {
    use super::Ev;
    use std::sync::{Arc, Mutex, OnceLock};
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
