//! Dataset generators and converters behind the `tessera-data` CLI.
//!
//! - [`generate`]: deterministic, streamed synthetic tensors (uniform, power-law, banded,
//!   2-D/3-D Poisson stencils) written as `.tns`, `.mtx` or `.tcs` with bounded memory;
//! - [`size`]: memory sizes such as `256M` or `1.5GiB`;
//! - [`progress`]: indicatif progress bars for the stages of long operations.

pub mod generate;
pub mod progress;
pub mod rng;
pub mod size;
