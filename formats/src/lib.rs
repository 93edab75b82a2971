//! Level formats, in-memory sparse tensors, `.tns`/`.mtx`/`.tcs` files and streaming conversion.
//!
//! - [`Format`] / [`LevelType`]: a mode order plus dense or compressed levels (TACO strings).
//! - [`Tensor`] / [`Level`]: level arrays in memory; [`TensorView`] / [`LevelView`]: zero-copy
//!   borrowed views with sub-block windows along dense levels.
//! - [`Value`] (`f32`, `f64`) and [`Index`] (`u32`, `u64`): what kernels are generic over.
//! - [`Tensor::read`] / [`Tensor::write`]: `.tns`, `.mtx` and `.tcs` files; [`Tensor::to_format`]:
//!   conversion in memory.
//! - Features `sprs`, `nalgebra`, `faer`, `ndarray`: conversions to and from those crates'
//!   matrices and arrays (`interop/`), zero-copy where the layouts agree.

mod atomic;
pub mod caches;
mod chunks;
pub mod convert;
mod error;
mod format;
pub mod gather;
pub mod heap;
#[cfg(any(
    feature = "sprs",
    feature = "nalgebra",
    feature = "faer",
    feature = "ndarray"
))]
mod interop;
mod io;
mod lines;
pub mod math;
mod mtx;
/// Number scanners of the text parsers' hot loops (for the conversion bench's parse floor).
#[doc(hidden)]
pub mod numbers;
mod pack;
mod piecewise;
pub mod simd;
pub mod tcs;
mod tensor;
mod text;
mod tns;
mod value;
mod view;

pub use atomic::{
    output_path_problem, remove_pending_files, retry_interrupted, AtomicFile, PendingFile,
};
pub use chunks::Chunk;
pub use convert::{convert, ConvertOptions, ConvertReport, Duplicates, NoProgress, Progress};
pub use error::{Error, Result, SyntaxError};
pub use format::{Format, FormatError, IntoFormat, LevelType};
pub use io::text_value;
pub use mtx::{MtxReader, MtxWriter};
pub use pack::{CountSink, PackError, PackedArrays, PackedSizes, Packer, Sink};
pub use tcs::{TcsError, TcsFile, TcsHeader, TcsWriter};
pub use tensor::{Level, Tensor, TensorError};
pub use text::{open_text, EntryReader, FileKind};
pub use tns::{TnsReader, TnsWriter};
pub use value::{Index, Value, ValueType};
pub use view::{Entries, LevelView, TensorView};

// The crates the interop features convert to and from (one module each in `interop/`),
// re-exported so that a program can name the versions Tessera was built with.
#[cfg(feature = "faer")]
pub use faer;
#[cfg(feature = "nalgebra")]
pub use nalgebra_sparse;
#[cfg(feature = "ndarray")]
pub use ndarray;
#[cfg(feature = "sprs")]
pub use sprs;
