//! In-process ranks: every rank is an OS thread; messages are moved (never copied) through
//! one shared mailbox keyed by (source, destination, tag).
//!
//! A rank that returns an error or panics marks the job failed: a receive from it (or from
//! any rank that stopped afterwards) returns [`TransportError::PeerFailed`] with the first
//! failure's message; a receive from a rank that finished normally without sending returns
//! [`TransportError::PeerExited`]. Failures thus travel along the chain of waiting ranks and
//! a job of thread ranks ends with an error instead of hanging.

use super::{Communicator, Tag, TransportError, COLLECTIVE_TAG, RESERVED_TAG};
use std::collections::{HashMap, VecDeque};
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[derive(Default)]
struct Mailbox {
    queues: HashMap<(usize, usize, Tag), VecDeque<Vec<u8>>>,
    /// The first rank that failed, with its message.
    failed: Option<(usize, String)>,
    /// Ranks whose closure has returned.
    exited: Vec<bool>,
}

struct Shared {
    size: usize,
    mailbox: Mutex<Mailbox>,
    /// Per destination rank: signalled when a message for it is posted (and, on every rank,
    /// when a rank fails or exits). One condition variable for all ranks woke every waiting
    /// rank on every message, to find nothing and wait again: at 2 thread ranks CG made about
    /// twice the futex calls its messages need (`strace -c -f` on the ranks bench).
    arrived: Vec<Condvar>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Mailbox> {
        // A panicking rank never holds the lock across user code, so poisoning carries no
        // broken invariant; keep going.
        self.mailbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(&self, rank: usize, message: String) {
        let mut mb = self.lock();
        mb.failed.get_or_insert((rank, message));
        mb.exited[rank] = true;
        self.wake_all();
    }

    fn exit(&self, rank: usize) {
        self.lock().exited[rank] = true;
        self.wake_all();
    }

    /// Wakes every rank's waiters: a failure or an exit concerns them all.
    fn wake_all(&self) {
        for c in &self.arrived {
            c.notify_all();
        }
    }
}

/// One thread rank's handle on the job. Clones are handles on the same rank (a runtime keeps
/// one for its communication thread).
#[derive(Clone)]
pub struct ThreadComm {
    rank: usize,
    shared: Arc<Shared>,
}

impl ThreadComm {
    fn check_rank(&self, rank: usize) -> Result<(), TransportError> {
        if rank < self.shared.size {
            Ok(())
        } else {
            Err(TransportError::BadRank {
                rank,
                size: self.shared.size,
            })
        }
    }

    fn post(&self, to: usize, tag: Tag, data: Vec<u8>) -> Result<(), TransportError> {
        self.check_rank(to)?;
        // Sending never fails on a failed job: a message already addressed lets a collective
        // that every rank entered complete, so all ranks see the same outcome.
        let mut mb = self.shared.lock();
        mb.queues
            .entry((self.rank, to, tag))
            .or_default()
            .push_back(data);
        // All of `to`'s waiters: its communication thread and a collective may both wait.
        self.shared.arrived[to].notify_all();
        Ok(())
    }

    fn take(&self, from: usize, tag: Tag) -> Result<Vec<u8>, TransportError> {
        self.check_rank(from)?;
        let key = (from, self.rank, tag);
        let mut mb = self.shared.lock();
        loop {
            if let Some(msg) = mb.queues.get_mut(&key).and_then(|q| q.pop_front()) {
                return Ok(msg);
            }
            // Only a peer that has stopped can no longer send: while it runs, its message may
            // still come, so a failure elsewhere reaches this rank through the chain of ranks
            // that stop because of it.
            if mb.exited[from] {
                return Err(match &mb.failed {
                    Some((rank, message)) => TransportError::PeerFailed {
                        rank: *rank,
                        message: message.clone(),
                    },
                    None => TransportError::PeerExited {
                        rank: from,
                        me: self.rank,
                        tag,
                    },
                });
            }
            mb = self.shared.arrived[self.rank]
                .wait(mb)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Communicator for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn send(&self, to: usize, tag: Tag, data: Vec<u8>) -> Result<(), TransportError> {
        if tag >= RESERVED_TAG {
            return Err(TransportError::ReservedTag { tag });
        }
        self.post(to, tag, data)
    }

    fn recv(&self, from: usize, tag: Tag) -> Result<Vec<u8>, TransportError> {
        if tag >= RESERVED_TAG {
            return Err(TransportError::ReservedTag { tag });
        }
        self.take(from, tag)
    }

    fn exchange(&self, to: usize, data: Vec<u8>, from: usize) -> Result<Vec<u8>, TransportError> {
        // Sends never block here, so send-then-receive cannot deadlock.
        self.post(to, COLLECTIVE_TAG, data)?;
        self.take(from, COLLECTIVE_TAG)
    }

    fn note_shared_failure(&self) {}

    fn has_exited(&self, rank: usize) -> bool {
        self.shared
            .lock()
            .exited
            .get(rank)
            .copied()
            .unwrap_or(false)
    }

    fn recv_any(
        &self,
        tag: Tag,
        timeout: std::time::Duration,
    ) -> Result<Option<(usize, Vec<u8>)>, TransportError> {
        if tag >= RESERVED_TAG {
            return Err(TransportError::ReservedTag { tag });
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut mb = self.shared.lock();
        loop {
            // Lowest rank first: a fixed order, so no sender starves another.
            for from in 0..self.shared.size {
                if let Some(msg) = mb
                    .queues
                    .get_mut(&(from, self.rank, tag))
                    .and_then(|q| q.pop_front())
                {
                    return Ok(Some((from, msg)));
                }
            }
            if let Some((rank, message)) = &mb.failed {
                return Err(TransportError::PeerFailed {
                    rank: *rank,
                    message: message.clone(),
                });
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            mb = self.shared.arrived[self.rank]
                .wait_timeout(mb, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Runs `f` on `n` thread ranks and returns each rank's result, indexed by rank.
///
/// When a rank returns `Err` or panics, the job is marked failed: every other rank's next
/// blocking operation returns [`TransportError::PeerFailed`], so the call always returns.
/// A panic becomes an `Err` built from its message with `E: From<TransportError>`.
pub fn run_ranks<T, E, F>(n: usize, f: F) -> Vec<Result<T, E>>
where
    T: Send,
    E: Send + Display + From<TransportError>,
    F: Fn(&ThreadComm) -> Result<T, E> + Sync,
{
    let n = n.max(1);
    let shared = Arc::new(Shared {
        size: n,
        mailbox: Mutex::new(Mailbox {
            exited: vec![false; n],
            ..Default::default()
        }),
        arrived: (0..n).map(|_| Condvar::new()).collect(),
    });
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let comm = ThreadComm {
                    rank,
                    shared: shared.clone(),
                };
                let f = &f;
                std::thread::Builder::new()
                    .name(format!("rank-{rank}"))
                    .spawn_scoped(scope, move || run_one(&comm, f))
                    .expect("spawning a rank thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread result"))
            .collect()
    })
}

fn run_one<T, E, F>(comm: &ThreadComm, f: &F) -> Result<T, E>
where
    E: Display + From<TransportError>,
    F: Fn(&ThreadComm) -> Result<T, E>,
{
    let outcome = catch_unwind(AssertUnwindSafe(|| f(comm)));
    match outcome {
        Ok(Ok(v)) => {
            comm.shared.exit(comm.rank);
            Ok(v)
        }
        Ok(Err(e)) => {
            comm.shared.fail(comm.rank, e.to_string());
            Err(e)
        }
        Err(panic) => {
            let message = panic_message(&panic);
            comm.shared.fail(comm.rank, format!("panicked: {message}"));
            Err(E::from(TransportError::PeerFailed {
                rank: comm.rank,
                message: format!("panicked: {message}"),
            }))
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}
