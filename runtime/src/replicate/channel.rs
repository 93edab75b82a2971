//! The communication path of one rank: receives arrive on a thread of their own, so no worker
//! ever blocks on the network.
//!
//! A receive is a node of the dependence graph (`Work::Recv`). When its local predecessors
//! are done a worker hands it to [`Channel::ready`]: if its message has arrived it is
//! delivered there and then; otherwise the node waits in the channel, and the communication
//! thread delivers and completes it when the message comes (its successors then go to the
//! pool). Sends (`Work::Send`, outs and finish messages) are posted by whoever produces them;
//! the transport's `send` does not wait for the receiver. Every message starts with a [`Key`]
//! naming the task (its sequence number, the same on every rank), the kind of transfer, the
//! argument and the point or piece.
//!
//! **Who receives.** Idle processors of the rank (workers about to sleep, the issuing thread
//! in a runtime wait: `executor::poll`) poll the transport themselves ([`Channel::drain`])
//! and run what a message makes ready; while one polls, the transport leaves messages to it
//! instead of waking the communication thread (`Communicator::polling`). So that thread
//! wakes only when no processor is looking: all of them run nodes or sleep. Each message it
//! takes costs a wake-up of it and usually one of a processor after it; one a polling
//! processor takes costs neither. `TESSERA_IDLE_RECV=0` (read at start) leaves every message
//! to the communication thread, as before, so one binary can compare the two. Under MPI,
//! where nothing wakes the thread and it probes every 50 µs, it backs off while a processor
//! polls instead (`transport::backoff`); a processor that stops polling to sleep says so
//! ([`Channel::end_polling`]), which ends the back-off.

use super::codec::{read_out, Reader};
use crate::error::RuntimeError;
use crate::execute::graph::Node;
use crate::execute::launch::Launched;
use crate::execute::Shared;
use crate::rect::Rect;
use crate::stats::Counters;
use crate::store::StoreRoot;
use crate::transport::{Communicator, Tag};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The user tag every runtime transfer travels on (below the collectives' range).
pub(crate) const DATA_TAG: Tag = 29_000;

/// Names one transfer: `[task sequence, kind << 32 | argument, point, piece]`.
pub(crate) type Key = [u64; 4];

/// Kinds of transfer (the second word of a [`Key`]).
pub(crate) const KIND_DATA: u64 = 1;
pub(crate) const KIND_OUTS: u64 = 2;
pub(crate) const KIND_FINISH: u64 = 3;

pub(crate) fn key(seq: u64, kind: u64, arg: usize, point: usize, piece: usize) -> Key {
    [seq, kind << 32 | arg as u64, point as u64, piece as u64]
}

/// What a received message is for.
pub(crate) enum Deliver {
    /// Elements of `rect` of a store, into this rank's copy.
    Data { root: Arc<StoreRoot>, rect: Rect },
    /// A remote point's leftovers for the finish step (rank 0).
    Outs { task: Arc<Launched>, point: usize },
    /// The finish step's outcome, from rank 0 (futures, unbound stores, failure).
    Finish { task: Arc<Launched> },
}

pub(crate) struct Recv {
    pub from: usize,
    pub key: Key,
    pub deliver: Deliver,
}

type Spawn = Box<dyn Fn(Arc<Node>) + Send + Sync>;

#[derive(Default)]
struct Inbox {
    arrived: HashMap<(usize, Key), Vec<u8>>,
    waiting: HashMap<(usize, Key), (Arc<Node>, Recv)>,
    /// Set once the job failed: every receive not yet delivered gets this error.
    failed: Option<RuntimeError>,
}

/// One rank's side of the job: the communicator and the receives in flight.
pub(crate) struct Channel {
    pub comm: Arc<dyn Communicator + Send + Sync>,
    pub rank: usize,
    pub ranks: usize,
    /// Check that every rank solved every task alike (debug mode).
    pub agreement: bool,
    /// Tasks scheduled so far: the sequence number in keys.
    pub seq: AtomicU64,
    /// Tasks solved so far (named in the agreement check's error).
    pub solved: AtomicU64,
    inbox: Mutex<Inbox>,
    stop: AtomicBool,
    spawn: Mutex<Option<Spawn>>,
    shared: Weak<Shared>,
    /// Idle processors receive (the module's "Who receives"; `TESSERA_IDLE_RECV`).
    idle_recv: bool,
    /// Messages taken by processors, not the communication thread (tests look).
    pub(crate) taken_idle: AtomicU64,
}

/// Whether idle processors receive: yes unless `TESSERA_IDLE_RECV=0`. Not a setting: a
/// switch to compare the two policies in one binary.
fn idle_recv_from_env() -> bool {
    std::env::var("TESSERA_IDLE_RECV").map_or(true, |v| v.trim() != "0")
}

impl Channel {
    pub(crate) fn new(
        comm: Arc<dyn Communicator + Send + Sync>,
        agreement: bool,
        shared: &Arc<Shared>,
        spawn: Spawn,
    ) -> Channel {
        Channel {
            rank: comm.rank(),
            ranks: comm.size(),
            comm,
            agreement,
            seq: AtomicU64::new(0),
            solved: AtomicU64::new(0),
            inbox: Mutex::default(),
            stop: AtomicBool::new(false),
            spawn: Mutex::new(Some(spawn)),
            shared: Arc::downgrade(shared),
            idle_recv: idle_recv_from_env(),
            taken_idle: AtomicU64::new(0),
        }
    }

    /// Whether idle processors poll this channel (`executor::poll` asks once per poll).
    pub(crate) fn polled_by_processors(&self) -> bool {
        self.idle_recv
    }

    /// An idle processor starts polling: until [`Channel::end_polling`], messages may be left
    /// to it rather than wake the communication thread.
    pub(crate) fn begin_polling(&self) {
        self.comm.polling(DATA_TAG, true);
    }

    /// The processor stops polling (`to_sleep`: it found nothing to run and is about to
    /// sleep). A message the transport left to it meanwhile (and that no poll took) is taken
    /// now: after this, new ones wake the communication thread again.
    pub(crate) fn end_polling(&self, to_sleep: bool) {
        let left = if to_sleep {
            self.comm.polling_ends_in_sleep(DATA_TAG)
        } else {
            self.comm.polling(DATA_TAG, false)
        };
        if left {
            self.drain();
        }
    }

    /// Takes every message that is here now, without waiting, and delivers it (a parked
    /// receive completes and its successors go to the pool, as from the communication
    /// thread). True if any came.
    pub(crate) fn drain(&self) -> bool {
        let mut any = false;
        while !self.stop.load(Ordering::Acquire) {
            match self.comm.poll_any(DATA_TAG) {
                Ok(Some((from, msg))) => {
                    self.taken_idle.fetch_add(1, Ordering::Relaxed);
                    self.arrive(from, msg);
                    any = true;
                }
                Ok(None) => break,
                Err(e) => {
                    self.fail(RuntimeError::Remote {
                        rank: self.rank,
                        message: e.to_string(),
                    });
                    return true;
                }
            }
        }
        any
    }

    fn inbox(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends a message (key first) to `to`. A failed send is not reported here: the job has
    /// failed, and the receive side learns it from the transport.
    pub(crate) fn send(&self, to: usize, key: Key, body: &[u8]) {
        let mut msg = Vec::with_capacity(32 + body.len());
        key.iter()
            .for_each(|w| msg.extend_from_slice(&w.to_le_bytes()));
        msg.extend_from_slice(body);
        if let Some(sh) = self.shared.upgrade() {
            Counters::add(&sh.counters.messages_sent, 1);
        }
        let _ = self.comm.send(to, DATA_TAG, msg);
    }

    /// Counts `n` bytes of store elements sent (reduction buffers; sub-stores count in
    /// `replicate::send_rect`).
    pub(crate) fn count_bytes(&self, n: usize) {
        if let Some(sh) = self.shared.upgrade() {
            Counters::add(&sh.counters.bytes_sent, n as u64);
        }
    }

    /// A receive node whose predecessors are done: delivers its message if it has come (true:
    /// the caller completes the node), else parks the node until it does (false).
    pub(crate) fn ready(&self, node: &Arc<Node>, recv: Recv) -> bool {
        if self.idle_recv {
            // Its message may be in the transport, not yet taken: parking would leave it to
            // another thread to take and to complete the node.
            self.drain();
        }
        let mut inbox = self.inbox();
        let k = (recv.from, recv.key);
        if let Some(msg) = inbox.arrived.remove(&k) {
            drop(inbox);
            deliver(recv, Ok(&msg));
            return true;
        }
        if let Some(e) = inbox.failed.clone() {
            drop(inbox);
            deliver(recv, Err(e));
            return true;
        }
        inbox.waiting.insert(k, (node.clone(), recv));
        false
    }

    /// The communication thread: receives until stopped, delivering to parked nodes.
    pub(crate) fn run(&self) {
        while !self.stop.load(Ordering::Acquire) {
            match self.comm.recv_any(DATA_TAG, Duration::from_millis(20)) {
                Ok(None) => self.fail_exited(),
                Ok(Some((from, msg))) => self.arrive(from, msg),
                Err(e) => {
                    self.fail(RuntimeError::Remote {
                        rank: self.rank,
                        message: e.to_string(),
                    });
                    return;
                }
            }
        }
    }

    fn arrive(&self, from: usize, msg: Vec<u8>) {
        let Some((head, _)) = msg.split_first_chunk::<32>() else {
            return self.fail(RuntimeError::Remote {
                rank: from,
                message: "message without a header".into(),
            });
        };
        let mut key = [0u64; 4];
        for (k, c) in key.iter_mut().zip(head.chunks_exact(8)) {
            *k = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
        let mut inbox = self.inbox();
        match inbox.waiting.remove(&(from, key)) {
            Some((node, recv)) => {
                drop(inbox);
                deliver(recv, Ok(&msg[32..]));
                self.complete(&node);
            }
            None => {
                inbox.arrived.insert((from, key), msg[32..].to_vec());
            }
        }
    }

    /// Receives parked for a rank that has stopped will never be delivered: they fail (with
    /// `PeerExited`) instead of waiting forever. Messages the rank sent before it stopped are
    /// taken first (it sends before it is marked stopped, so one more drain sees them all).
    fn fail_exited(&self) {
        let exited: Vec<usize> = {
            let inbox = self.inbox();
            let mut from: Vec<usize> = inbox.waiting.keys().map(|(r, _)| *r).collect();
            from.sort_unstable();
            from.dedup();
            from.retain(|&r| self.comm.has_exited(r));
            from
        };
        if exited.is_empty() {
            return;
        }
        while let Ok(Some((from, msg))) = self.comm.recv_any(DATA_TAG, Duration::ZERO) {
            self.arrive(from, msg);
        }
        let parked: Vec<_> = {
            let mut inbox = self.inbox();
            let keys: Vec<_> = inbox
                .waiting
                .keys()
                .filter(|(r, _)| exited.contains(r))
                .copied()
                .collect();
            keys.into_iter()
                .filter_map(|k| inbox.waiting.remove(&k).map(|v| (k.0, v)))
                .collect()
        };
        for (from, (node, recv)) in parked {
            let e = RuntimeError::Remote {
                rank: from,
                message: "the rank stopped before sending what this rank waits for (ranks must issue the same stream)".into(),
            };
            deliver(recv, Err(e));
            self.complete(&node);
        }
    }

    /// The job failed: every parked receive and every later one gets the error.
    fn fail(&self, e: RuntimeError) {
        let parked: Vec<_> = {
            let mut inbox = self.inbox();
            inbox.failed.get_or_insert(e.clone());
            inbox.waiting.drain().map(|(_, v)| v).collect()
        };
        for (node, recv) in parked {
            deliver(recv, Err(e.clone()));
            self.complete(&node);
        }
    }

    /// Completes a parked node and hands its ready successors to the pool.
    fn complete(&self, node: &Arc<Node>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        shared.node_ran();
        let ready = node.complete(&shared.completion);
        if let Some(spawn) = &*self.spawn.lock().unwrap_or_else(|e| e.into_inner()) {
            ready.into_iter().for_each(spawn);
        }
    }

    /// Stops the communication thread (at its next poll) and drops the pool handle.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.spawn.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// Applies a received message (or the job's failure) to what it is for.
fn deliver(recv: Recv, msg: Result<&[u8], RuntimeError>) {
    let from = recv.from;
    match recv.deliver {
        Deliver::Data { root, rect } => {
            // A failure that did not travel poisons at the receiving task's place in the
            // stream (the key's first word), as its input; the poisonings a piece carries
            // keep the sender's positions (`replicate::piece`).
            let _ = match msg {
                Ok(m) => {
                    super::receive_piece(&root, rect, &mut Reader { buf: m, from }, recv.key[0])
                }
                Err(e) => {
                    root.set_received_poison(e, recv.key[0], Some(rect));
                    Ok(())
                }
            };
        }
        Deliver::Outs { task, point } => {
            let r = msg.and_then(|m| read_out(&mut Reader { buf: m, from }));
            match r {
                Ok((out, failures)) => {
                    *task.outs[point].lock().unwrap_or_else(|e| e.into_inner()) = out;
                    super::finish::apply_failures(&task, failures);
                }
                Err(e) => task.fail_with(e),
            }
        }
        Deliver::Finish { task } => super::finish::apply(&task, msg, from),
    }
}
