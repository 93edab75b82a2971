//! The Tessera compiler. The pipeline, in order: `parse` (with `diagnostics`) → `check` →
//! `lower` (to `ir`) → `codegen` / `interp`, and `plan` (the block tasks of a distribution
//! schedule, run on `tessera-runtime`); `oracle` is the dense reference, `bind` the run-time
//! checks of `tensor!`, `driver` and `cli` the `tessera` binary.
pub mod ast;
pub mod check;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "codegen")]
pub mod codegen;
pub mod diagnostics;
#[cfg(feature = "cli")]
pub mod driver;
pub mod interp;
pub mod ir;
pub mod lower;
pub mod oracle;
pub mod parse;
pub mod plan;
pub mod semiring;

/// The run-time checks of `tensor!` and generated programs; lives in `tessera-kernel-rt` so
/// that programs need no compiler when they run.
pub use tessera_kernel_rt::bind;
