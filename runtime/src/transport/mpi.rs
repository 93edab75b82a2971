//! MPI ranks: one rank per process, over the system's MPI library through the `mpi` crate.
//!
//! Messages of any size are sent as a length followed by chunks of at most [`CHUNK`] bytes,
//! because MPI counts are 32-bit. [`run_world`] is the launcher: it initialises MPI, runs the
//! closure, and calls `MPI_Abort` when a rank fails alone, so no peer waits forever.

use super::{Communicator, Tag, TransportError, COLLECTIVE_TAG, RESERVED_TAG};
use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::topology::{Communicator as _, SimpleCommunicator};
use std::cell::Cell;
use std::fmt::Display;
use std::time::{Duration, Instant};

/// Largest single MPI message, in bytes.
const CHUNK: usize = 1 << 30;

/// A rank of an MPI job (the world communicator).
pub struct MpiComm {
    world: SimpleCommunicator,
    shared_failure: Cell<bool>,
}

/// Rank `rank` of `world`, or an error naming the world's size.
fn peer(
    world: &SimpleCommunicator,
    rank: usize,
) -> Result<mpi::topology::Process<'_>, TransportError> {
    let size = world.size() as usize;
    if rank < size {
        Ok(world.process_at_rank(rank as i32))
    } else {
        Err(TransportError::BadRank { rank, size })
    }
}

impl MpiComm {
    fn peer(&self, rank: usize) -> Result<mpi::topology::Process<'_>, TransportError> {
        peer(&self.world, rank)
    }

    /// Sends length + chunks with non-blocking sends, while receiving the matching message
    /// from `from` (if any); completes both.
    fn send_recv(
        &self,
        to: usize,
        tag: Tag,
        data: &[u8],
        from: Option<usize>,
    ) -> Result<Vec<u8>, TransportError> {
        let dest = self.peer(to)?;
        let src = from.map(|r| self.peer(r)).transpose()?;
        let tag = i32::from(tag);
        let len = (data.len() as u64).to_le_bytes();
        Ok(mpi::request::scope(|scope| {
            let mut reqs = vec![dest.immediate_send_with_tag(scope, &len[..], tag)];
            for chunk in data.chunks(CHUNK) {
                reqs.push(dest.immediate_send_with_tag(scope, chunk, tag));
            }
            let received = src
                .map(|src| receive_chunked(&src, tag))
                .unwrap_or_default();
            for r in reqs {
                r.wait();
            }
            received
        }))
    }
}

fn receive_chunked(src: &mpi::topology::Process<'_>, tag: i32) -> Vec<u8> {
    let mut len = [0u8; 8];
    src.receive_into_with_tag(&mut len[..], tag);
    let mut buf = vec![0u8; u64::from_le_bytes(len) as usize];
    for chunk in buf.chunks_mut(CHUNK) {
        src.receive_into_with_tag(chunk, tag);
    }
    buf
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn send(&self, to: usize, tag: Tag, data: Vec<u8>) -> Result<(), TransportError> {
        if tag >= RESERVED_TAG {
            return Err(TransportError::ReservedTag { tag });
        }
        self.send_recv(to, tag, &data, None).map(|_| ())
    }

    fn recv(&self, from: usize, tag: Tag) -> Result<Vec<u8>, TransportError> {
        if tag >= RESERVED_TAG {
            return Err(TransportError::ReservedTag { tag });
        }
        Ok(receive_chunked(&self.peer(from)?, i32::from(tag)))
    }

    fn exchange(&self, to: usize, data: Vec<u8>, from: usize) -> Result<Vec<u8>, TransportError> {
        self.send_recv(to, COLLECTIVE_TAG, &data, Some(from))
    }

    fn note_shared_failure(&self) {
        self.shared_failure.set(true);
    }
}

pub use super::launched_by_mpirun;

/// Initialises MPI, runs `f` on this process's rank of the world, and finalises MPI.
///
/// If `f` fails on this rank alone (the error was not shared through
/// [`Communicator::check`]), the error is printed and the whole job is aborted with
/// `MPI_Abort`, ending every rank; a shared error is returned normally on every rank.
pub fn run_world<T, E, F>(f: F) -> Result<T, E>
where
    E: Display + From<TransportError>,
    F: FnOnce(&MpiComm) -> Result<T, E>,
{
    let Some(universe) = mpi::initialize() else {
        return Err(E::from(TransportError::Launch(
            "MPI was already initialised".into(),
        )));
    };
    let comm = MpiComm {
        world: universe.world(),
        shared_failure: Cell::new(false),
    };
    let out = f(&comm);
    if let Err(e) = &out {
        if !comm.shared_failure.get() {
            say_aborting(comm.rank(), comm.size(), e);
            comm.world.abort(1);
        }
    }
    drop(universe);
    out
}

/// A rank of an MPI job that several threads may use at once: a runtime across ranks
/// receives on its communication thread while its workers send and its issuing thread runs
/// collectives. Made by [`run_world_threaded`], which starts MPI at `MPI_THREAD_MULTIPLE`.
///
/// Every message is one MPI message (no length prefix), so a receive from any rank can take
/// it whole after a matched probe: messages from several threads never interleave. `send`
/// never waits: it starts an `MPI_Isend` and returns; the buffer stays alive until the send
/// completes, which `recv_any` (the runtime's communication thread) checks on every poll and
/// `run_world_threaded` waits for before MPI is finalised.
pub struct ThreadedMpiComm {
    world: SimpleCommunicator,
    shared_failure: std::sync::atomic::AtomicBool,
    in_flight: std::sync::Mutex<Vec<InFlight>>,
    /// Per rank: when its goodbye arrived (it ended its work normally; see [`GOODBYE_TAG`]).
    gone: std::sync::Mutex<Vec<Option<Instant>>>,
    /// The communication thread's pause between polls: long while a processor polls
    /// ([`super::backoff`]).
    backoff: super::backoff::Backoff,
}

/// Tag of the empty message a rank sends every other rank when its work ended normally.
///
/// Without it an MPI rank that returns early (without a collective or message its peers wait
/// for) would leave them waiting forever: it is alive, in `MPI_Finalize`, so `mpirun` ends
/// nothing. With it, every wait for a message from a rank also watches for that rank's
/// goodbye, and a rank whose goodbye came while a peer still waits for it fails that wait
/// with [`TransportError::PeerExited`]; the waiting rank then fails, and its launcher aborts
/// the job. A rank that said goodbye waits for everyone else's before finalising.
const GOODBYE_TAG: i32 = RESERVED_TAG as i32 + 1;

/// How long after a peer's goodbye a message it sent before may still arrive: MPI orders
/// messages per tag, not across the goodbye's tag, so a wait fails only once this has passed
/// (the peer had completed its sends before saying goodbye; this is only delivery).
const GOODBYE_GRACE: Duration = Duration::from_secs(1);

/// A send in progress and the buffer it reads (leaked while in flight, freed on completion).
struct InFlight {
    request: mpi::request::Request<'static, [u8], mpi::request::StaticScope>,
    buf: *mut [u8],
}

/// Frees a finished send's buffer.
///
/// SAFETY (of the one `unsafe` here): `buf` came from `Box::leak` in `send`, and the callers
/// pass it only after the request reading it completed (`test` returned `Ok` or `wait`
/// returned), so nothing refers to it any more.
fn free_buf(buf: *mut [u8]) {
    drop(unsafe { Box::from_raw(buf) });
}

// SAFETY: a `ThreadedMpiComm` exists only inside `run_world_threaded`, which initialised MPI
// with `MPI_THREAD_MULTIPLE` (and refuses to run otherwise): the MPI standard then allows
// calls on one communicator from any thread at the same time. The handle is never freed
// while in use (the world communicator lives until `MPI_Finalize`, after `f` returns).
unsafe impl Send for ThreadedMpiComm {}
unsafe impl Sync for ThreadedMpiComm {}

impl ThreadedMpiComm {
    fn peer(&self, rank: usize) -> Result<mpi::topology::Process<'_>, TransportError> {
        peer(&self.world, rank)
    }

    /// Completes the sends that have finished and frees their buffers.
    fn progress(&self) {
        let mut list = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let pending = std::mem::take(&mut *list);
        for InFlight { request, buf } in pending {
            match request.test() {
                Ok(_) => free_buf(buf),
                Err(request) => list.push(InFlight { request, buf }),
            }
        }
    }

    /// Waits for every send in flight (before MPI is finalised).
    fn finish_sends(&self) {
        let pending =
            std::mem::take(&mut *self.in_flight.lock().unwrap_or_else(|e| e.into_inner()));
        for InFlight { request, buf } in pending {
            request.wait();
            free_buf(buf);
        }
    }

    /// Starts sending `data` (freed once the send completes: `progress`, `finish_sends`).
    fn post(&self, to: usize, tag: i32, data: Vec<u8>) -> Result<(), TransportError> {
        self.check_len(&data)?;
        let peer = self.peer(to)?;
        let buf: &'static mut [u8] = Box::leak(data.into_boxed_slice());
        let ptr: *mut [u8] = buf;
        // SAFETY: re-borrowing the leaked buffer shared for the send's lifetime; it is freed
        // only after the request completes (`free_buf`).
        let shared: &'static [u8] = unsafe { &*ptr };
        let request = peer.immediate_send_with_tag(mpi::request::StaticScope, shared, tag);
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(InFlight { request, buf: ptr });
        Ok(())
    }

    /// Whether `rank`'s goodbye has come (receiving it if it is there now), and when.
    fn goodbye_of(&self, rank: usize) -> Option<Instant> {
        let mut gone = self.gone.lock().unwrap_or_else(|e| e.into_inner());
        if gone[rank].is_none() {
            let probe = self
                .peer(rank)
                .ok()?
                .immediate_matched_probe_with_tag(GOODBYE_TAG);
            if let Some(m) = probe {
                let _ = m.matched_receive_vec::<u8>();
                gone[rank] = Some(Instant::now());
            }
        }
        gone[rank]
    }

    /// The next message from `from` on `tag`; an error if `from` ended its work normally
    /// first (its goodbye came, and the grace for its earlier messages passed).
    fn receive_from(&self, from: usize, tag: i32) -> Result<Vec<u8>, TransportError> {
        let src = self.peer(from)?;
        for polls in 0u64.. {
            if let Some(m) = src.immediate_matched_probe_with_tag(tag) {
                return Ok(m.matched_receive_vec::<u8>().0);
            }
            if polls % 256 == 255 {
                self.progress();
                let gone = self.goodbye_of(from);
                if gone.is_some_and(|t| t.elapsed() >= GOODBYE_GRACE) {
                    if let Some(m) = src.immediate_matched_probe_with_tag(tag) {
                        return Ok(m.matched_receive_vec::<u8>().0);
                    }
                    return Err(TransportError::PeerExited {
                        rank: from,
                        me: self.rank(),
                        tag: tag as Tag,
                    });
                }
            }
            // Spin briefly (collectives answer within microseconds), then stop taking a
            // core the workers need.
            if polls < 1024 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        unreachable!("the poll loop returns")
    }

    /// After this rank's work ended normally: tells every other rank, then waits until every
    /// other rank has said the same (so no rank finalises while a peer may still wait on it).
    fn goodbye(&self) {
        let me = self.rank();
        for r in (0..self.size()).filter(|&r| r != me) {
            let _ = self.post(r, GOODBYE_TAG, Vec::new());
        }
        for r in (0..self.size()).filter(|&r| r != me) {
            while self.goodbye_of(r).is_none() {
                self.progress();
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    fn check_len(&self, data: &[u8]) -> Result<(), TransportError> {
        if data.len() > i32::MAX as usize {
            return Err(TransportError::Malformed {
                rank: self.rank(),
                what: format!(
                    "a message of {} bytes (one MPI message holds < 2 GiB)",
                    data.len()
                ),
            });
        }
        Ok(())
    }
}

impl Communicator for ThreadedMpiComm {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn send(&self, to: usize, tag: Tag, data: Vec<u8>) -> Result<(), TransportError> {
        if tag >= RESERVED_TAG {
            return Err(TransportError::ReservedTag { tag });
        }
        self.post(to, i32::from(tag), data)
    }

    fn recv(&self, from: usize, tag: Tag) -> Result<Vec<u8>, TransportError> {
        if tag >= RESERVED_TAG {
            return Err(TransportError::ReservedTag { tag });
        }
        self.receive_from(from, i32::from(tag))
    }

    fn exchange(&self, to: usize, data: Vec<u8>, from: usize) -> Result<Vec<u8>, TransportError> {
        // The send is posted, not waited for here: if `from` has gone, this rank fails
        // without waiting on a send no one will receive (its buffer is kept until the end).
        self.post(to, i32::from(COLLECTIVE_TAG), data)?;
        self.receive_from(from, i32::from(COLLECTIVE_TAG))
    }

    /// Under MPI: whether `rank` ended its work normally (its goodbye came) at least
    /// [`GOODBYE_GRACE`] ago.
    fn has_exited(&self, rank: usize) -> bool {
        rank < self.size()
            && self
                .goodbye_of(rank)
                .is_some_and(|t| t.elapsed() >= GOODBYE_GRACE)
    }

    fn note_shared_failure(&self) {
        self.shared_failure
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn recv_any(
        &self,
        tag: Tag,
        timeout: std::time::Duration,
    ) -> Result<Option<(usize, Vec<u8>)>, TransportError> {
        if tag >= RESERVED_TAG {
            return Err(TransportError::ReservedTag { tag });
        }
        let t0 = std::time::Instant::now();
        loop {
            self.progress();
            let probe = self
                .world
                .any_process()
                .immediate_matched_probe_with_tag(i32::from(tag));
            if let Some(probed) = probe {
                let (data, status) = probed.matched_receive_vec::<u8>();
                return Ok(Some((status.source_rank() as usize, data)));
            }
            if t0.elapsed() >= timeout {
                return Ok(None);
            }
            // A failed peer ends the whole job (`MPI_Abort`) and one that stopped early is
            // seen by `has_exited` (the runtime's channel asks when a poll times out); the
            // pause keeps the polling thread off a core the workers need, and is long while
            // a processor polls in its stead.
            self.backoff.pause();
        }
    }

    /// A probe without the progress of sends `recv_any` makes (the communication thread does
    /// that on every poll): idle processors call this often.
    fn poll_any(&self, tag: Tag) -> Result<Option<(usize, Vec<u8>)>, TransportError> {
        if tag >= RESERVED_TAG {
            return Err(TransportError::ReservedTag { tag });
        }
        let probe = self
            .world
            .any_process()
            .immediate_matched_probe_with_tag(i32::from(tag));
        Ok(probe.map(|probed| {
            let (data, status) = probed.matched_receive_vec::<u8>();
            (status.source_rank() as usize, data)
        }))
    }

    /// Counts the processors polling, so the communication thread backs off meanwhile.
    /// Nothing is left to them that the thread would not take after its pause: false.
    fn polling(&self, _tag: Tag, on: bool) -> bool {
        if on {
            self.backoff.start();
        } else {
            self.backoff.stop(false);
        }
        false
    }

    fn polling_ends_in_sleep(&self, _tag: Tag) -> bool {
        self.backoff.stop(true);
        false
    }
}

/// [`run_world`] for a runtime across ranks: MPI at `MPI_THREAD_MULTIPLE` (an error if the
/// library cannot), `f` gets a communicator it may hand to
/// `RuntimeBuilder::communicator` (drop every runtime before `f` returns). A rank that fails
/// alone aborts the job, as in [`run_world`].
pub fn run_world_threaded<T, E, F>(f: F) -> Result<T, E>
where
    E: Display + From<TransportError>,
    F: FnOnce(&std::sync::Arc<ThreadedMpiComm>) -> Result<T, E>,
{
    let Some((universe, level)) = mpi::initialize_with_threading(mpi::Threading::Multiple) else {
        return Err(E::from(TransportError::Launch(
            "MPI was already initialised".into(),
        )));
    };
    if level != mpi::Threading::Multiple {
        return Err(E::from(TransportError::Launch(format!(
            "the MPI library offers thread level {level:?}; the runtime across ranks needs Multiple"
        ))));
    }
    let comm = std::sync::Arc::new(ThreadedMpiComm {
        world: universe.world(),
        shared_failure: std::sync::atomic::AtomicBool::new(false),
        in_flight: std::sync::Mutex::default(),
        gone: std::sync::Mutex::new(vec![None; universe.world().size() as usize]),
        backoff: super::backoff::Backoff::from_env(),
    });
    let out = f(&comm);
    if out.is_ok() {
        comm.goodbye();
        comm.finish_sends();
    } else {
        // A failed job may have sends no one will receive: waiting could hang. The process
        // is about to end; leave them (and their buffers) to it.
        let pending =
            std::mem::take(&mut *comm.in_flight.lock().unwrap_or_else(|e| e.into_inner()));
        std::mem::forget(pending);
    }
    if let Err(e) = &out {
        if !comm
            .shared_failure
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            say_aborting(comm.rank(), comm.size(), e);
            comm.world.abort(1);
        }
    }
    drop(comm);
    drop(universe);
    out
}

/// Prints why this rank aborts the job, as one write: `eprintln!` writes the formatted pieces
/// one by one, and `mpirun` forwards them as they come, so its own abort banner could land
/// in the middle of the message (CI saw "rank " + banner + "1 fails on purpose").
fn say_aborting(rank: usize, size: usize, e: &dyn std::fmt::Display) {
    use std::io::Write;
    let line = format!("error on rank {rank} of {size}: {e}; aborting the MPI job\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
