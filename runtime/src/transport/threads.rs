//! In-process ranks: every rank is an OS thread; messages are moved (never copied) through
//! one shared mailbox keyed by (source, destination, tag).
//!
//! A rank that returns an error or panics marks the job failed: a receive from it (or from
//! any rank that stopped afterwards) returns [`TransportError::PeerFailed`] with the first
//! failure's message; a receive from a rank that finished normally without sending returns
//! [`TransportError::PeerExited`]. Failures thus travel along the chain of waiting ranks and
//! a job of thread ranks ends with an error instead of hanging.
//!
//! **Wake-ups.** A post wakes a receiver only when one waits: the waiters of each kind are
//! counted under the mailbox lock, which the post holds, so the check cannot miss one. A
//! message on a tag that threads of the receiving rank poll ([`Communicator::polling`]) does
//! not wake its blocked `recv_any` either: a poller takes it, and one that stops polling
//! looks once more (`queued`, below). A futex call per message (`notify_all` on every post)
//! was most of a rank's system calls when nobody waited.

use super::{Communicator, Tag, TransportError, COLLECTIVE_TAG, RESERVED_TAG};
use std::collections::{HashMap, VecDeque};
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[derive(Default)]
struct Mailbox {
    queues: HashMap<(usize, usize, Tag), VecDeque<Vec<u8>>>,
    /// The first rank that failed, with its message.
    failed: Option<(usize, String)>,
    /// Ranks whose closure has returned.
    exited: Vec<bool>,
    /// Per rank: threads blocked in `take` (a receive from one rank, collectives).
    takers: Vec<usize>,
    /// Per rank: threads blocked in `recv_any`, and the tag each waits for.
    any_waiters: Vec<Vec<Tag>>,
}

/// Per rank: threads polling one tag (`Communicator::polling`) and messages queued for the
/// rank, readable without the lock.
#[derive(Default)]
struct Polling {
    pollers: AtomicUsize,
    tag: AtomicUsize,
    queued: AtomicUsize,
}

struct Shared {
    size: usize,
    mailbox: Mutex<Mailbox>,
    /// Per destination rank: where its `take`s wait (and, on every rank, are woken when a
    /// rank fails or exits). One condition variable for all ranks woke every waiting rank on
    /// every message, to find nothing and wait again.
    arrived: Vec<Condvar>,
    /// Per destination rank: where its `recv_any` waits (its runtime's communication thread).
    arrived_any: Vec<Condvar>,
    polling: Vec<Polling>,
    /// Condition variables notified by posts (a test counts them).
    notified: AtomicUsize,
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
        for c in self.arrived.iter().chain(&self.arrived_any) {
            c.notify_all();
        }
    }

    /// Whether a post on `tag` to `to` is left to a thread of `to` polling that tag (then it
    /// wakes no `recv_any`). Dekker with [`ThreadComm::polling`]: the post counted the
    /// message in `queued` before this reads `pollers`; a poller that stops decrements
    /// `pollers`, then reads `queued`; one of them sees the other.
    fn left_to_pollers(&self, to: usize, tag: Tag) -> bool {
        let p = &self.polling[to];
        p.pollers.load(Ordering::SeqCst) > 0 && p.tag.load(Ordering::SeqCst) == tag as usize
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
        let sh = &*self.shared;
        let mut mb = sh.lock();
        mb.queues
            .entry((self.rank, to, tag))
            .or_default()
            .push_back(data);
        sh.polling[to].queued.fetch_add(1, Ordering::SeqCst);
        // Waiters count themselves under this lock before they wait: none is missed.
        let take = mb.takers[to] > 0;
        let any = mb.any_waiters[to].contains(&tag) && !sh.left_to_pollers(to, tag);
        drop(mb);
        if take {
            sh.notified.fetch_add(1, Ordering::Relaxed);
            sh.arrived[to].notify_all();
        }
        if any {
            sh.notified.fetch_add(1, Ordering::Relaxed);
            sh.arrived_any[to].notify_all();
        }
        Ok(())
    }

    /// Takes the next message from `from` on `tag` out of the mailbox, if there is one.
    fn pop(&self, mb: &mut Mailbox, from: usize, tag: Tag) -> Option<Vec<u8>> {
        let msg = mb.queues.get_mut(&(from, self.rank, tag))?.pop_front()?;
        self.shared.polling[self.rank]
            .queued
            .fetch_sub(1, Ordering::SeqCst);
        Some(msg)
    }

    /// The next message on `tag` from any rank, lowest rank first: a fixed order, so no
    /// sender starves another.
    fn pop_any(&self, mb: &mut Mailbox, tag: Tag) -> Option<(usize, Vec<u8>)> {
        (0..self.shared.size).find_map(|from| self.pop(mb, from, tag).map(|m| (from, m)))
    }

    fn take(&self, from: usize, tag: Tag) -> Result<Vec<u8>, TransportError> {
        self.check_rank(from)?;
        let mut mb = self.shared.lock();
        loop {
            if let Some(msg) = self.pop(&mut mb, from, tag) {
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
            mb.takers[self.rank] += 1;
            mb = self.shared.arrived[self.rank]
                .wait(mb)
                .unwrap_or_else(|e| e.into_inner());
            mb.takers[self.rank] -= 1;
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
            if let Some(got) = self.pop_any(&mut mb, tag) {
                return Ok(Some(got));
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
            mb.any_waiters[self.rank].push(tag);
            mb = self.shared.arrived_any[self.rank]
                .wait_timeout(mb, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            let waiters = &mut mb.any_waiters[self.rank];
            if let Some(i) = waiters.iter().position(|&t| t == tag) {
                waiters.swap_remove(i);
            }
        }
    }

    fn poll_any(&self, tag: Tag) -> Result<Option<(usize, Vec<u8>)>, TransportError> {
        if tag >= RESERVED_TAG {
            return Err(TransportError::ReservedTag { tag });
        }
        // Nothing queued for this rank (the common case for an idle processor): no lock.
        if self.shared.polling[self.rank].queued.load(Ordering::SeqCst) == 0 {
            return Ok(None);
        }
        let mut mb = self.shared.lock();
        if let Some(got) = self.pop_any(&mut mb, tag) {
            return Ok(Some(got));
        }
        match &mb.failed {
            Some((rank, message)) => Err(TransportError::PeerFailed {
                rank: *rank,
                message: message.clone(),
            }),
            None => Ok(None),
        }
    }

    fn polling(&self, tag: Tag, on: bool) -> bool {
        let p = &self.shared.polling[self.rank];
        if on {
            p.tag.store(tag as usize, Ordering::SeqCst);
            p.pollers.fetch_add(1, Ordering::SeqCst);
            return false;
        }
        p.pollers.fetch_sub(1, Ordering::SeqCst);
        // The other half of `Shared::left_to_pollers`.
        p.queued.load(Ordering::SeqCst) > 0
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
    launch(n, false, f)
}

/// [`run_ranks`] with each rank's thread bound to its block of the CPUs the calling thread
/// may run on (`transport::bind`), as `mpirun` binds each process to a core: the threads a
/// rank starts (a runtime's workers and communication thread) inherit it. With more ranks
/// than CPUs, neighbouring ranks share one.
pub fn run_ranks_bound<T, E, F>(n: usize, f: F) -> Vec<Result<T, E>>
where
    T: Send,
    E: Send + Display + From<TransportError>,
    F: Fn(&ThreadComm) -> Result<T, E> + Sync,
{
    launch(n, true, f)
}

fn launch<T, E, F>(n: usize, bound: bool, f: F) -> Vec<Result<T, E>>
where
    T: Send,
    E: Send + Display + From<TransportError>,
    F: Fn(&ThreadComm) -> Result<T, E> + Sync,
{
    let n = n.max(1);
    let cpus = if bound {
        super::bind::allowed()
    } else {
        vec![]
    };
    let shared = Arc::new(Shared {
        size: n,
        mailbox: Mutex::new(Mailbox {
            exited: vec![false; n],
            takers: vec![0; n],
            any_waiters: vec![Vec::new(); n],
            ..Default::default()
        }),
        arrived: (0..n).map(|_| Condvar::new()).collect(),
        arrived_any: (0..n).map(|_| Condvar::new()).collect(),
        polling: (0..n).map(|_| Polling::default()).collect(),
        notified: AtomicUsize::new(0),
    });
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let comm = ThreadComm {
                    rank,
                    shared: shared.clone(),
                };
                let f = &f;
                let mine = super::bind::share(&cpus, rank, n);
                std::thread::Builder::new()
                    .name(format!("rank-{rank}"))
                    .spawn_scoped(scope, move || {
                        super::bind::bind(&mine);
                        run_one(&comm, f)
                    })
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

#[cfg(test)]
mod wake_tests {
    //! The wake-up rules of a post: only a receiver that waits is woken, a message left to a
    //! poller is taken when it stops, and a failure wakes everyone.
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    const HOUR: Duration = Duration::from_secs(3600);

    /// Runs `f` on a thread and returns its result, or fails the test after a minute (a
    /// receiver nobody woke waits an hour).
    fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("a blocked receiver was never woken")
    }

    /// Yields until `cond` holds on `c`'s mailbox (a minute at most).
    fn until(c: &ThreadComm, cond: impl Fn(&Mailbox) -> bool) {
        let start = std::time::Instant::now();
        while !cond(&c.shared.lock()) {
            assert!(start.elapsed() < Duration::from_secs(60), "never happened");
            std::thread::yield_now();
        }
    }

    fn notified(c: &ThreadComm) -> usize {
        c.shared.notified.load(Ordering::SeqCst)
    }

    #[test]
    fn posts_notify_nobody_while_nobody_waits() {
        let out = run_ranks(1, |c| {
            for i in 0..10u8 {
                c.send(0, 7, vec![i])?;
                c.send(0, 8, vec![i])?;
            }
            let before = notified(c);
            let got: Vec<u8> = (0..10)
                .map(|_| c.recv(0, 7).map(|m| m[0]))
                .collect::<Result<_, _>>()?;
            let any: Vec<u8> = (0..10)
                .map(|_| c.poll_any(8).map(|m| m.expect("queued").1[0]))
                .collect::<Result<_, _>>()?;
            Ok::<_, TransportError>((before, got, any))
        });
        let (before, got, any) = out.into_iter().next().unwrap().unwrap();
        assert_eq!(before, 0, "a post notified with no receiver waiting");
        assert_eq!(got, (0..10).collect::<Vec<u8>>());
        assert_eq!(any, (0..10).collect::<Vec<u8>>());
    }

    #[test]
    fn a_receiver_blocked_in_recv_any_or_recv_is_woken_by_the_post() {
        let out = within_a_minute(|| {
            run_ranks(2, |c| {
                if c.rank() == 1 {
                    // Blocked for an hour unless a post wakes it.
                    let any = c.recv_any(7, HOUR)?.expect("woken with the message");
                    let one = c.recv(0, 8)?;
                    return Ok::<_, TransportError>(vec![any.1[0], one[0]]);
                }
                until(c, |mb| mb.any_waiters[1].contains(&7));
                c.send(1, 7, vec![1])?;
                until(c, |mb| mb.takers[1] > 0);
                c.send(1, 8, vec![2])?;
                // Woken by the post, not by this rank's exit (which wakes everyone).
                until(c, |mb| mb.takers[1] == 0);
                Ok(vec![])
            })
        });
        assert_eq!(out[1].as_ref().unwrap(), &vec![1, 2]);
    }

    #[test]
    fn a_message_left_to_a_poller_is_taken_when_it_stops_and_later_ones_wake_recv_any() {
        let out = within_a_minute(|| {
            run_ranks(2, |c| {
                if c.rank() == 1 {
                    // The communication thread's part: blocked in `recv_any` throughout.
                    return Ok::<_, TransportError>(c.recv_any(7, HOUR)?.map(|m| m.1));
                }
                let peer = ThreadComm {
                    rank: 1,
                    shared: c.shared.clone(),
                };
                until(c, |mb| mb.any_waiters[1].contains(&7));
                // A processor of rank 1 polls tag 7: posts on it wake nobody.
                assert!(!peer.polling(7, true));
                c.send(1, 7, vec![1])?;
                assert_eq!(notified(c), 0, "a message left to a poller woke recv_any");
                // It stops without having polled since: it is told to look once more.
                assert!(peer.polling(7, false), "stopping hid a message left to it");
                assert_eq!(peer.poll_any(7)?, Some((0, vec![1])));
                assert!(c.shared.lock().any_waiters[1].contains(&7));
                // Nobody polls now: the next message wakes the blocked receiver.
                c.send(1, 7, vec![2])?;
                assert_eq!(notified(c), 1);
                Ok(None)
            })
        });
        assert_eq!(out[1].as_ref().unwrap(), &Some(vec![2]));
    }

    #[test]
    fn a_poller_of_one_tag_leaves_other_tags_to_recv_any() {
        let out = within_a_minute(|| {
            run_ranks(2, |c| {
                if c.rank() == 1 {
                    return Ok::<_, TransportError>(c.recv_any(9, HOUR)?.map(|m| m.1));
                }
                let peer = ThreadComm {
                    rank: 1,
                    shared: c.shared.clone(),
                };
                until(c, |mb| mb.any_waiters[1].contains(&9));
                peer.polling(7, true);
                c.send(1, 9, vec![3])?;
                // Woken by the post, not by this rank's exit (which wakes everyone).
                until(c, |mb| mb.any_waiters[1].is_empty());
                peer.polling(7, false);
                Ok(None)
            })
        });
        assert_eq!(out[1].as_ref().unwrap(), &Some(vec![3]));
    }

    #[test]
    fn a_failed_rank_wakes_every_blocked_receiver_of_every_kind() {
        let out = within_a_minute(|| {
            run_ranks(3, |c| match c.rank() {
                0 => {
                    until(c, |mb| mb.any_waiters[1].contains(&7) && mb.takers[2] > 0);
                    Err(TransportError::Launch("rank 0 fails".into()))
                }
                1 => c.recv_any(7, HOUR).map(|_| ()),
                _ => c.recv(0, 8).map(|_| ()),
            })
        });
        for r in &out[1..] {
            assert!(
                matches!(r, Err(TransportError::PeerFailed { rank: 0, .. })),
                "{r:?}"
            );
        }
    }
}
