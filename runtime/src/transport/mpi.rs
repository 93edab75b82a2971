//! MPI ranks: one rank per process, over the system's MPI library through the `mpi` crate.
//!
//! Messages of any size are sent as a length followed by chunks of at most [`CHUNK`] bytes,
//! because MPI counts are 32-bit. [`run_world`] is the launcher: it initialises MPI, runs the
//! closure, and calls `MPI_Abort` when a rank fails alone, so no peer waits forever.

use super::{Communicator, Tag, TransportError, COLLECTIVE_TAG, RESERVED_TAG};
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator as _, SimpleCommunicator};
use std::cell::Cell;
use std::fmt::Display;

/// Largest single MPI message, in bytes.
const CHUNK: usize = 1 << 30;

/// A rank of an MPI job (the world communicator).
pub struct MpiComm {
    world: SimpleCommunicator,
    shared_failure: Cell<bool>,
}

impl MpiComm {
    fn peer(&self, rank: usize) -> Result<mpi::topology::Process<'_>, TransportError> {
        let size = self.size();
        if rank < size {
            Ok(self.world.process_at_rank(rank as i32))
        } else {
            Err(TransportError::BadRank { rank, size })
        }
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
            eprintln!(
                "error on rank {} of {}: {e}; aborting the MPI job",
                comm.rank(),
                comm.size()
            );
            comm.world.abort(1);
        }
    }
    drop(universe);
    out
}
