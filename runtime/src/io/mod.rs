//! Distributed loading and storing of tensor blocks (SuperTaco §4.4, §4.6), over the
//! [`transport`](crate::transport).
//!
//! - [`split`]: split points per mode, the block grid, mapping keys and owners.
//! - [`load_blocks`]: a tensor in memory → its blocks, each on its owner rank (§4.4).
//! - [`merge_blocks`] / [`store_to_root`]: blocks spread over ranks → one tensor, balanced
//!   by coordinate space and merged by tournament trees (§4.6).
//! - [`split_file`] / [`merge_dir`]: the same over `.tcs` files, without moving the data
//!   between ranks: each rank reads only its piece of the input (`partial`, a chunk at a time
//!   for a split) and writes its runs of the output arrays straight into the output files at
//!   their final offsets (`sink`); the files' owners finish them (`files`).
//! - [`store_file`]: blocks in memory spread over ranks (a distributed result) → one `.tcs`
//!   file: sections exchanged as in `merge_blocks`, each rank's piece written at its offsets.
//!
//! Inside: `walk` steps through a range of leaves by position vectors (over a whole tensor,
//! a file, or a `section` of arrays); `assemble` builds level arrays in pieces from pooled
//! partial headers and joins them; `tournament` merges sorted pieces; `codec` encodes the
//! messages ranks exchange; `held` accounts for the bytes a rank's buffers hold (tests check
//! memory bounds with it).
//!
//! Every function here is collective: all ranks call it with the same arguments (their own
//! blocks aside), and a failure on one rank is an error on all.

mod assemble;
mod codec;
mod coo;
mod files;
mod held;
mod input_checks;
mod load;
mod partial;
mod section;
mod sink;
pub mod split;
mod store;
mod tournament;
mod walk;

pub use files::{merge_dir, split_file, store_file, store_file_cut, Summary};
pub use load::{load_blocks, Block};
pub use split::{BlockGrid, BlockRange, ModeSplit, SplitSpec};
pub use store::{merge_blocks, store_to_root, Merged};

use crate::transport::{CheckError, TransportError};

/// Why a distributed load or store failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IoError {
    #[error("split `{text}`: {why}")]
    SplitSyntax { text: String, why: String },
    #[error("split names mode {mode}, but the tensor has rank {rank}")]
    SplitMode { mode: usize, rank: usize },
    #[error("split names mode {mode} twice")]
    SplitTwice { mode: usize },
    #[error("split points of mode {mode}: {why}")]
    SplitPoints { mode: usize, why: String },
    #[error("the split gives more blocks than can be counted")]
    TooManyBlocks,
    #[error("a rank-0 tensor (scalar) has no modes to split")]
    Scalar,
    #[error("the block grid is for dimensions {grid:?} but the tensor has {tensor:?}")]
    GridDims {
        tensor: Vec<usize>,
        grid: Vec<usize>,
    },
    #[error("dense level {level} is a narrowed window; load the whole tensor")]
    Windowed { level: usize },
    #[error("blocks overlap: the entry at level coordinates {coords:?} is in two blocks")]
    Overlap { coords: Vec<usize> },
    #[error("blocks disagree: {0}")]
    Mismatch(String),
    #[error("the tensor is too large to address")]
    TooLarge,
    #[error("value {value} does not fit in {bits}-bit coordinates")]
    IndexOverflow { value: u64, bits: u32 },
    #[error("invalid assembled tensor: {0}")]
    Tensor(#[from] tessera_formats::TensorError),
    #[error("{0}")]
    File(String),
    #[error("{0}")]
    Local(String),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("interrupted; no output was written")]
    Cancelled,
    #[error("internal error in distributed I/O (a bug): {0}")]
    Internal(String),
}

impl From<CheckError> for IoError {
    fn from(e: CheckError) -> Self {
        match e {
            CheckError::Local(msg) => IoError::Local(msg),
            CheckError::Transport(t) => IoError::Transport(t),
        }
    }
}

/// Progress of long phases (shown by the CLI on rank 0; silent elsewhere).
pub trait Progress: Sync {
    /// A new phase with `total` units of work (0 when unknown).
    fn start(&self, _phase: &str, _total: u64) {}
    /// `n` more units done.
    fn advance(&self, _n: u64) {}
    /// True when the user asked to stop (a signal): the work stops at its next step with
    /// [`IoError::Cancelled`] on every rank, removing what it wrote.
    fn cancelled(&self) -> bool {
        false
    }
}

/// Reports nothing.
pub struct NoProgress;

impl Progress for NoProgress {}

#[cfg(test)]
mod file_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod untrusted_tests;
