//! How long a polling communication thread pauses between polls (MPI ranks).
//!
//! Under MPI nothing wakes a thread when a message arrives: the runtime's communication thread
//! probes, then sleeps a short while ([`SHORT`]), some 20,000 wake-ups a second per rank. While
//! an idle processor of the rank polls the transport itself (`Communicator::polling`), those
//! wake-ups buy nothing: the processor takes what comes. So while one polls, the thread parks
//! for a long while instead. A processor that stops polling to sleep (it found nothing), the
//! last to poll, unparks it: then no processor looks, and the thread is the one that receives,
//! at once, not after the long pause. One that stops because it found a node leaves the thread
//! parked: it will poll again when that node is done, before it can sleep; meanwhile a message
//! waits at most the long pause. The unpark is the only extra cost, one futex wake per
//! back-off that a sleeping poller ends (and a wake-up of the thread it would have had anyway).
//!
//! `TESSERA_MPI_BACKOFF_US` (hidden, read when the communicator is made): the long pause in
//! µs; `0` turns the back-off off (always [`SHORT`]), so one binary can be compared both ways.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::Thread;
use std::time::Duration;

/// The pause between polls while no processor polls.
pub(crate) const SHORT: Duration = Duration::from_micros(50);

/// The pause while one does, unless `TESSERA_MPI_BACKOFF_US` says otherwise. Bounded: a
/// stopped runtime's thread sees its stop flag, and sends make progress, at least this often.
const LONG: Duration = Duration::from_millis(2);

pub(crate) struct Backoff {
    /// Threads of the rank polling (`Communicator::polling`).
    pollers: AtomicUsize,
    /// The polling thread is parked (or about to park) for the long pause.
    parked: AtomicBool,
    /// Which thread that is (the last to pause long).
    sleeper: Mutex<Option<Thread>>,
    /// `None`: no back-off.
    long: Option<Duration>,
    /// Long pauses taken (tests look).
    pub(crate) backoffs: AtomicU64,
}

impl Backoff {
    /// The back-off `TESSERA_MPI_BACKOFF_US` asks for (default [`LONG`]).
    pub(crate) fn from_env() -> Backoff {
        let us = std::env::var("TESSERA_MPI_BACKOFF_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok());
        Backoff::new(match us {
            Some(0) => None,
            Some(us) => Some(Duration::from_micros(us)),
            None => Some(LONG),
        })
    }

    pub(crate) fn new(long: Option<Duration>) -> Backoff {
        Backoff {
            pollers: AtomicUsize::new(0),
            parked: AtomicBool::new(false),
            sleeper: Mutex::new(None),
            long,
            backoffs: AtomicU64::new(0),
        }
    }

    /// A processor starts polling.
    pub(crate) fn start(&self) {
        self.pollers.fetch_add(1, Ordering::SeqCst);
    }

    /// A processor stops polling; if it is the last and about to sleep (`to_sleep`), it ends
    /// a long pause.
    pub(crate) fn stop(&self, to_sleep: bool) {
        // Dekker with `pause`: it sets `parked`, then reads `pollers`; this decrements
        // `pollers`, then reads `parked`. Either the pause sees no poller (and does not park
        // long) or this sees it parked and unparks it (a token: an unpark before the park
        // makes the park return at once).
        let last = self.pollers.fetch_sub(1, Ordering::SeqCst) == 1;
        if last && to_sleep && self.parked.swap(false, Ordering::SeqCst) {
            if let Some(t) = &*self.sleeper.lock().unwrap_or_else(|e| e.into_inner()) {
                t.unpark();
            }
        }
    }

    /// The pause between two polls of the calling thread: long while a processor polls (or
    /// until the last one stops), else [`SHORT`].
    pub(crate) fn pause(&self) {
        let Some(long) = self.long else {
            return std::thread::sleep(SHORT);
        };
        if self.pollers.load(Ordering::SeqCst) == 0 {
            return std::thread::sleep(SHORT);
        }
        *self.sleeper.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current());
        self.parked.store(true, Ordering::SeqCst);
        if self.pollers.load(Ordering::SeqCst) > 0 {
            self.backoffs.fetch_add(1, Ordering::Relaxed);
            // Returns early when unparked (or spuriously): the caller polls again either way.
            std::thread::park_timeout(long);
        }
        self.parked.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;

    const HOUR: Duration = Duration::from_secs(3600);

    /// `b.pause()` on a thread of its own; the receiver says when it returned.
    fn pausing(b: &Arc<Backoff>) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        let b = b.clone();
        std::thread::spawn(move || {
            b.pause();
            let _ = tx.send(());
        });
        rx
    }

    fn until(mut cond: impl FnMut() -> bool, what: &str) {
        let start = std::time::Instant::now();
        while !cond() {
            assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn with_no_poller_the_pause_is_short() {
        let b = Arc::new(Backoff::new(Some(HOUR)));
        pausing(&b)
            .recv_timeout(Duration::from_secs(60))
            .expect("the pause without pollers ended");
        assert_eq!(b.backoffs.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn while_a_processor_polls_the_pause_is_long_until_the_last_poller_stops_to_sleep() {
        let b = Arc::new(Backoff::new(Some(HOUR)));
        b.start();
        b.start();
        let rx = pausing(&b);
        until(
            || b.backoffs.load(Ordering::SeqCst) == 1,
            "the thread backed off",
        );
        // One of two pollers stops: the other still takes what comes, the thread stays parked.
        b.stop(true);
        assert!(
            b.parked.load(Ordering::SeqCst),
            "unparked by a poller that was not the last"
        );
        // The last one stops to run a node: it will poll again before it sleeps.
        b.stop(false);
        assert!(
            b.parked.load(Ordering::SeqCst),
            "unparked by a poller that found work"
        );
        assert!(rx.try_recv().is_err());
        b.start();
        b.stop(true);
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the last poller to stop to sleep ended the long pause");
    }

    #[test]
    fn with_the_back_off_off_a_poller_changes_nothing() {
        let b = Arc::new(Backoff::new(None));
        b.start();
        pausing(&b)
            .recv_timeout(Duration::from_secs(60))
            .expect("the pause ended while a processor polls");
        assert_eq!(b.backoffs.load(Ordering::SeqCst), 0);
    }
}
