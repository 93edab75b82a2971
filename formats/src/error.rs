//! Errors of file reading, writing and conversion. Each names the file, and for text input
//! the line and column, so a user can find the fault.

use std::path::PathBuf;

use crate::format::FormatError;
use crate::tcs::TcsError;
use crate::tensor::TensorError;

/// What is wrong with one place of a text (`.tns`/`.mtx`) file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    #[error("expected a positive integer coordinate, found `{0}`")]
    BadCoordinate(String),
    #[error("coordinates are 1-based; found 0")]
    ZeroCoordinate,
    #[error("expected a number, found `{0}`")]
    BadValue(String),
    #[error("expected {expected} fields ({what}), found {found}")]
    FieldCount {
        expected: usize,
        found: usize,
        what: String,
    },
    #[error("coordinate {coord} exceeds the dimension {dim} declared in the header")]
    OutOfBounds { coord: u64, dim: u64 },
    #[error("{0}")]
    Header(String),
    #[error("the header declares {expected} entries but the file has {found}")]
    EntryCount { expected: u64, found: u64 },
    #[error("more entries than the {0} the header declares")]
    ExtraEntry(u64),
    #[error("no entries: a .tns file needs at least one line to know the tensor's rank")]
    Empty,
    #[error("entry above the diagonal in a {0} matrix (only the lower triangle may be stored)")]
    UpperTriangle(&'static str),
    #[error(
        "diagonal entry in a skew-symmetric matrix (its diagonal must be zero and not stored)"
    )]
    SkewDiagonal,
    #[error(
        "duplicate entry (same coordinates as an earlier one) and --duplicates error was given"
    )]
    Duplicate,
    #[error("coordinate does not fit in 64 bits")]
    Overflow,
}

/// Any error of reading, writing or converting tensor files.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {kind}")]
    Syntax {
        path: PathBuf,
        line: u64,
        column: u64,
        kind: SyntaxError,
    },
    #[error("{path}: invalid .tcs file: {source}")]
    Tcs { path: PathBuf, source: TcsError },
    #[error("{path}: {source}")]
    Tensor { path: PathBuf, source: TensorError },
    #[error("{path}: duplicate entry at coordinates {coords:?} (1-based) and --duplicates error was given")]
    Duplicate { path: PathBuf, coords: Vec<u64> },
    #[error("{path}: {source}")]
    Format { path: PathBuf, source: FormatError },
    #[error("{path}: {what}")]
    Unsupported { path: PathBuf, what: String },
    #[error("interrupted; no output was written")]
    Cancelled,
}

impl Error {
    /// The file the error names (none for [`Error::Cancelled`]).
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Error::Io { path, .. }
            | Error::Syntax { path, .. }
            | Error::Tcs { path, .. }
            | Error::Tensor { path, .. }
            | Error::Duplicate { path, .. }
            | Error::Format { path, .. }
            | Error::Unsupported { path, .. } => Some(path),
            Error::Cancelled => None,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Shorthand for results of this crate's file operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
