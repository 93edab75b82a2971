//! The `.tcs` binary tensor format (specified in `docs/tcs.md`): a checksummed header and
//! 64-byte-aligned `pos`/`crd`/`vals` arrays that can be used in place once read.
//!
//! - [`header`]: the header's fields, its layout computation and its checked parsing;
//! - [`reader`]: [`TcsFile`], a validated in-memory copy handing out zero-copy [`TensorView`]s,
//!   and partial reads of one array's range without reading the whole file;
//! - [`writer`]: [`TcsWriter`], which writes arrays sequentially or at computed offsets into a
//!   temporary file and renames it into place.
//!
//! [`TensorView`]: crate::TensorView

pub mod header;
pub mod reader;
pub mod writer;

pub use header::{ArrayInfo, ArrayKind, Extent, LevelInfo, ModeInfo, TcsHeader};
pub use reader::{read_array_range, TcsFile};
pub use writer::{write_tensor, Appender, ArraySource, ArrayWriter, LateCrcs, TcsWriter};

use crate::tensor::TensorError;
use crate::value::ValueType;

#[cfg(target_endian = "big")]
compile_error!("the .tcs reader and writer assume a little-endian host");

/// File signature: a non-ASCII byte, `TCS`, then CR LF, SUB, LF (catches text-mode mangling).
pub const MAGIC: [u8; 8] = *b"\x89TCS\r\n\x1a\n";
/// The newest format version this crate reads and writes: 2 added singleton (COO) levels, 3
/// segmented arrays (an array is a list of extents, so that a streaming writer appends each
/// block's arrays in place). A file is written with the oldest version that can hold it (1
/// unless it has a singleton level; 3 only by writers that append), so older readers still
/// read every file they could express.
pub const VERSION: u32 = 3;
/// The oldest version this crate reads.
pub const MIN_VERSION: u32 = 1;
/// Alignment of the header length and of every array's offset.
pub const ALIGN: u64 = 64;
/// Largest rank a `.tcs` file may declare (bounds the header size of hostile files).
pub const MAX_RANK: usize = 64;

/// Why a `.tcs` file was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TcsError {
    #[error("not a .tcs file (bad magic bytes)")]
    BadMagic,
    #[error("unsupported version {0} (this reader supports versions {MIN_VERSION} to {VERSION})")]
    Version(u32),
    #[error("unsupported byte order tag {0} (only 1 = little-endian is supported)")]
    Endianness(u8),
    #[error("unknown value type tag {0} (1 = f32, 2 = f64, 3 = i64)")]
    ValueTypeTag(u8),
    #[error("unsupported coordinate width {0} (32 or 64)")]
    IndexWidth(u8),
    #[error("rank {0} exceeds the maximum of {MAX_RANK}")]
    Rank(u64),
    #[error("file is truncated: {needed} bytes needed, {len} present")]
    Truncated { needed: u64, len: u64 },
    #[error("file length is {actual} bytes but the header records {recorded}")]
    FileLength { recorded: u64, actual: u64 },
    #[error("the file changed while it was being read (another process truncated or extended it)")]
    Changed,
    #[error("header checksum mismatch (recorded {recorded:#010x}, computed {computed:#010x})")]
    HeaderChecksum { recorded: u32, computed: u32 },
    #[error("{what}: recorded {recorded}, expected {expected}")]
    Field {
        what: String,
        recorded: u64,
        expected: u64,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("checksum mismatch in {array} (recorded {recorded:#010x}, computed {computed:#010x})")]
    ArrayChecksum {
        array: String,
        recorded: u32,
        computed: u32,
    },
    #[error("nonzero padding byte at offset {0}")]
    Padding(u64),
    #[error("level arrays are inconsistent: {0}")]
    Levels(#[from] TensorError),
    #[error("level {level}: coordinate {coord} lies outside the block's split range [{lo}, {hi})")]
    OutsideSplit {
        level: usize,
        coord: u64,
        lo: u64,
        hi: u64,
    },
    #[error("the file holds {file_value} values with {file_bits}-bit coordinates, not {want_value} with {want_bits}-bit")]
    TypeMismatch {
        file_value: &'static str,
        file_bits: u32,
        want_value: &'static str,
        want_bits: u32,
    },
}

/// The tag stored for a value type.
pub(crate) fn value_tag(v: ValueType) -> u8 {
    match v {
        ValueType::F32 => 1,
        ValueType::F64 => 2,
        ValueType::I64 => 3,
    }
}

/// `x` rounded up to a multiple of [`ALIGN`], or `None` on overflow.
pub(crate) fn align_up(x: u64) -> Option<u64> {
    x.checked_add(ALIGN - 1).map(|y| y / ALIGN * ALIGN)
}

#[cfg(test)]
mod tests;
