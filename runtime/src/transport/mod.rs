//! Transport: the collective and point-to-point operations that distributed work runs on.
//!
//! One interface, [`Communicator`], two implementations:
//! - [`threads`]: in-process ranks on OS threads (always built); start them with [`run_ranks`]
//!   (or [`run_ranks_bound`]: each rank bound to its block of cores, as `mpirun` binds).
//! - `mpi` (cargo feature `mpi`): one rank per process over the system's MPI library; start
//!   it with `mpi::run_world` under `mpirun`.
//!
//! Implementations provide only point-to-point byte messages; every collective is built on
//! them here, so both transports share one (tested) definition of each collective.
//!
//! **Failures end every rank.** A rank that fails must not leave its peers blocked forever:
//! - [`Communicator::check`] is a collective that turns one rank's local error into an error
//!   on every rank ([`TransportError::PeerFailed`]); distributed code calls it after each phase
//!   that can fail locally (opening a file, validating input).
//! - Outside such points, the launchers handle it: the thread launcher marks the job failed
//!   when a rank returns an error or panics, which wakes every blocked receive with an error;
//!   the MPI launcher calls `MPI_Abort`, which ends every process of the job.

mod bind;
pub mod threads;

#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod backoff;

#[cfg(feature = "mpi")]
pub mod mpi;

pub use threads::{run_ranks, run_ranks_bound, ThreadComm};

/// A message tag for [`Communicator::send`]/[`Communicator::recv`]. Tags at or above
/// [`RESERVED_TAG`] belong to the collectives.
pub type Tag = u16;

/// First tag reserved for collectives (MPI guarantees tags up to 32767).
pub const RESERVED_TAG: Tag = 30_000;

/// Tag used by the collectives built on [`Communicator::exchange`].
pub(crate) const COLLECTIVE_TAG: Tag = RESERVED_TAG;

/// True when this process was started by an MPI launcher (OpenMPI, MPICH/Hydra, PMIx/Slurm):
/// a binary built without the `mpi` feature uses it to refuse running as N unaware copies.
pub fn launched_by_mpirun() -> bool {
    [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_RANK",
        "MPI_LOCALNRANKS",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some())
}

/// Why a transport operation did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// Another rank failed; this rank stops with its message.
    #[error("rank {rank} failed: {message}")]
    PeerFailed { rank: usize, message: String },
    /// A peer finished its work while this rank still waited for a message from it
    /// (the ranks did not run the same sequence of operations).
    #[error("rank {rank} finished without sending the message rank {me} waits for (tag {tag})")]
    PeerExited { rank: usize, me: usize, tag: Tag },
    /// A rank number outside `0..size`.
    #[error("rank {rank} is out of range for a job of {size} ranks")]
    BadRank { rank: usize, size: usize },
    /// A user tag in the reserved range.
    #[error("tag {tag} is reserved for collectives (user tags are below {RESERVED_TAG})")]
    ReservedTag { tag: Tag },
    /// A collective got a message of the wrong shape (ranks disagree on the protocol).
    #[error("malformed message from rank {rank}: {what}")]
    Malformed { rank: usize, what: String },
    /// The launcher could not start the job.
    #[error("cannot start ranks: {0}")]
    Launch(String),
}

/// Ranks that exchange byte messages; collectives are provided methods built on
/// [`Communicator::exchange`]. Every rank must call the collectives in the same order.
pub trait Communicator {
    /// This rank, in `0..size()`.
    fn rank(&self) -> usize;
    /// Number of ranks in the job.
    fn size(&self) -> usize;
    /// Sends `data` to rank `to` with a user tag. Thread ranks never wait here; MPI ranks may
    /// wait until the receiver posts the matching receive (as `MPI_Send` does for large
    /// messages), so ranks must not all send to each other before receiving: use
    /// [`Communicator::exchange`] or the collectives for that.
    fn send(&self, to: usize, tag: Tag, data: Vec<u8>) -> Result<(), TransportError>;
    /// Receives the next message from rank `from` with tag `tag` (messages between two ranks
    /// with one tag arrive in the order they were sent).
    fn recv(&self, from: usize, tag: Tag) -> Result<Vec<u8>, TransportError>;
    /// Sends `data` to `to` and receives one message from `from`, on the collective tag,
    /// without deadlocking when every rank does the same at once.
    fn exchange(&self, to: usize, data: Vec<u8>, from: usize) -> Result<Vec<u8>, TransportError>;
    /// Records that a [`Communicator::check`] failed on every rank, so that a launcher knows
    /// the error is already shared (no abort needed).
    fn note_shared_failure(&self);

    /// Receives the next message on user tag `tag` from any rank, waiting at most `timeout`:
    /// `Ok(None)` when none came, `Err` once the job has failed. This is what a communication
    /// thread polls, so that no single missing message blocks the others (used by the runtime
    /// across ranks). Transports that cannot do it say so.
    fn recv_any(
        &self,
        tag: Tag,
        timeout: std::time::Duration,
    ) -> Result<Option<(usize, Vec<u8>)>, TransportError> {
        let _ = (tag, timeout);
        Err(TransportError::Launch(
            "this transport has no receive from any rank (recv_any)".into(),
        ))
    }

    /// [`Communicator::recv_any`] without waiting: the next message on `tag` from any rank if
    /// one is here now. Any thread of the rank may call it (an idle processor of the runtime).
    fn poll_any(&self, tag: Tag) -> Result<Option<(usize, Vec<u8>)>, TransportError> {
        self.recv_any(tag, std::time::Duration::ZERO)
    }

    /// A thread of this rank starts (`on`) or stops polling `tag` with
    /// [`Communicator::poll_any`]. Meanwhile a transport may leave messages on `tag` to the
    /// pollers instead of waking a thread blocked in `recv_any` (a futex call and a context
    /// switch per message, which a poller saves). So a caller keeps polling until it stops,
    /// and when stopping returns true polls until nothing is left (a message may have been
    /// left to it after its last poll). One polled tag per rank. Transports without
    /// wake-ups to save return false.
    fn polling(&self, tag: Tag, on: bool) -> bool {
        let _ = (tag, on);
        false
    }

    /// [`Communicator::polling`]`(tag, false)` from a thread that found nothing to do and is
    /// about to sleep: a transport that lets a thread blocked in `recv_any` back off while
    /// others poll ends that back-off now (the thread is the one that receives again).
    fn polling_ends_in_sleep(&self, tag: Tag) -> bool {
        self.polling(tag, false)
    }

    /// Whether rank `rank` has stopped (it can send nothing more). Transports that cannot
    /// tell say `false`; under MPI a rank that stops abnormally ends the whole job instead.
    fn has_exited(&self, rank: usize) -> bool {
        let _ = rank;
        false
    }

    /// Personalised all-to-all: `outgoing[j]` goes to rank `j`; returns what every rank sent
    /// to this one, indexed by source rank. Pairwise exchange in `size` rounds.
    fn all_to_all(&self, mut outgoing: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, TransportError> {
        let (me, n) = (self.rank(), self.size());
        if outgoing.len() != n {
            return Err(TransportError::Malformed {
                rank: me,
                what: format!("all_to_all given {} buffers for {n} ranks", outgoing.len()),
            });
        }
        let mut incoming = vec![Vec::new(); n];
        incoming[me] = std::mem::take(&mut outgoing[me]);
        for step in 1..n {
            let to = (me + step) % n;
            let from = (me + n - step) % n;
            incoming[from] = self.exchange(to, std::mem::take(&mut outgoing[to]), from)?;
        }
        Ok(incoming)
    }

    /// All-gather of variable-sized buffers: returns every rank's `mine`, indexed by rank.
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        self.all_to_all(vec![mine.to_vec(); self.size()])
    }

    /// Waits until every rank has reached the barrier.
    fn barrier(&self) -> Result<(), TransportError> {
        self.all_gather(&[]).map(|_| ())
    }

    /// Element-wise all-gather of `u64` vectors (every rank may pass a different length).
    fn all_gather_u64(&self, mine: &[u64]) -> Result<Vec<Vec<u64>>, TransportError> {
        let all = self.all_gather(&encode_u64s(mine))?;
        all.iter()
            .enumerate()
            .map(|(rank, b)| decode_u64s(b, rank))
            .collect()
    }

    /// Element-wise exclusive prefix sum over ranks: rank `r` gets the sum of ranks `0..r`'s
    /// vectors (zeros on rank 0). Every rank must pass the same length.
    fn exclusive_prefix_sum(&self, mine: &[u64]) -> Result<Vec<u64>, TransportError> {
        let all = self.all_gather_u64(mine)?;
        let mut sum = vec![0u64; mine.len()];
        for (rank, v) in all.iter().enumerate().take(self.rank()) {
            same_len(v, mine.len(), rank)?;
            for (s, x) in sum.iter_mut().zip(v) {
                *s += x;
            }
        }
        Ok(sum)
    }

    /// Element-wise sum over all ranks. Every rank must pass the same length.
    fn all_sum(&self, mine: &[u64]) -> Result<Vec<u64>, TransportError> {
        let all = self.all_gather_u64(mine)?;
        let mut sum = vec![0u64; mine.len()];
        for (rank, v) in all.iter().enumerate() {
            same_len(v, mine.len(), rank)?;
            for (s, x) in sum.iter_mut().zip(v) {
                *s += x;
            }
        }
        Ok(sum)
    }

    /// Error agreement: every rank passes its local outcome; if any rank failed, every rank
    /// returns an error (its own, or [`TransportError::PeerFailed`] naming the lowest failed
    /// rank). Call it wherever a rank can fail alone, so no rank waits for a failed peer.
    fn check(&self, local: Result<(), String>) -> Result<(), CheckError> {
        let mine = match &local {
            Ok(()) => vec![0u8],
            Err(msg) => [&[1u8][..], msg.as_bytes()].concat(),
        };
        let all = self.all_gather(&mine).map_err(CheckError::Transport)?;
        let first_failed = all.iter().position(|m| m.first() != Some(&0));
        match (local, first_failed) {
            (Err(msg), _) => {
                self.note_shared_failure();
                Err(CheckError::Local(msg))
            }
            (Ok(()), Some(rank)) => {
                self.note_shared_failure();
                let message = String::from_utf8_lossy(all[rank].get(1..).unwrap_or(&[])).into();
                Err(CheckError::Transport(TransportError::PeerFailed {
                    rank,
                    message,
                }))
            }
            (Ok(()), None) => Ok(()),
        }
    }
}

/// The outcome of a failed [`Communicator::check`]: this rank's own error, or a peer's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// This rank's own error.
    #[error("{0}")]
    Local(String),
    /// Another rank failed, or the transport did.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

fn same_len(v: &[u64], len: usize, rank: usize) -> Result<(), TransportError> {
    if v.len() == len {
        Ok(())
    } else {
        Err(TransportError::Malformed {
            rank,
            what: format!("vector of length {} where {len} was expected", v.len()),
        })
    }
}

/// Little-endian encoding of a `u64` slice.
pub fn encode_u64s(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Decodes [`encode_u64s`]; `rank` names the sender in the error.
pub fn decode_u64s(b: &[u8], rank: usize) -> Result<Vec<u64>, TransportError> {
    if !b.len().is_multiple_of(8) {
        return Err(TransportError::Malformed {
            rank,
            what: format!("{} bytes is not a whole number of u64", b.len()),
        });
    }
    Ok(b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

#[cfg(test)]
mod tests;
