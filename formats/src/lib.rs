//! Level formats, in-memory sparse tensors, `.tns`/`.mtx`/`.tcs` files and streaming conversion.
//!
//! - [`Format`] / [`LevelType`]: a mode order plus dense or compressed levels (TACO strings).
//! - [`Tensor`] / [`Level`]: level arrays in memory; [`TensorView`] / [`LevelView`]: zero-copy
//!   borrowed views with sub-block windows along dense levels.
//! - [`Value`] (`f32`, `f64`) and [`Index`] (`u32`, `u64`): what kernels are generic over.

mod format;
mod pack;
mod tensor;
mod value;
mod view;

pub use format::{Format, FormatError, LevelType};
pub use pack::{CountSink, PackError, PackedSizes, Packer, Sink};
pub use tensor::{Level, Tensor, TensorError};
pub use value::{Index, Value, ValueType};
pub use view::{Entries, LevelView, TensorView};
