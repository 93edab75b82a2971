//! The Tessera compiler. The pipeline, in order: `parse` (with `diagnostics`) → `check` →
//! `lower` (to `ir`) → `codegen` / `interp`, and `plan` (block tasks of a distribution schedule); `oracle` is the dense reference, `bind` the run-time
//! checks of `tensor!`, `driver` and `cli` the `tessera` binary.
pub mod ast;
pub mod bind;
pub mod check;
pub mod cli;
pub mod codegen;
pub mod diagnostics;
pub mod driver;
pub mod interp;
pub mod ir;
pub mod lower;
pub mod oracle;
pub mod parse;
pub mod plan;
