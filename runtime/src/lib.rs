//! The Tessera task runtime.
//!
//! An application issues a sequential stream of tasks over *stores* (n-d arrays). Each task
//! names its stores with privileges and *partitioning constraints*; the runtime decides the
//! partitions late, finds the parallelism, and runs point tasks on worker threads with results
//! identical to executing the stream in order.
//!
//! ```text
//!  submit ─► window ─► solver (Algorithm 1, key partitions) ─► partitions (None/Tiling/Image,
//!  (issue)   (fusion     │                                        interned)
//!           seam)        ▼
//!                   dependence analysis (Definition 1) ─► graph of point tasks ─► executor
//!                   (per-store reader/writer lists)        (in-edge counters)     (threads; actor seam)
//! ```
//!
//! Module map (ARCHITECTURE §6, the highest layer first): `runtime` the public API, wiring
//! the layers (its children: `builder`, `flow` from the window on, `solve`, `schedule`);
//! `issue` launchers validated into issued tasks; `window` the issue→analysis seam and
//! `fusion` the pass there (task fusion, temporaries, memo, element-wise kernel fusion);
//! `constraint` and `solver` the front end, `partition` the middle end; `analysis`
//! dependences; `tracing` repeat finding and replays; `execute` execution (`graph`,
//! `executor`, `launch`, `actors` for replayed traces, `context` what task bodies see);
//! `replicate` control replication across ranks; [`store`](Store) stores and views; `dtype`
//! element types; `buffer` the shared cell buffers and the run-time range ledger that guards
//! every raw access (the only `unsafe` in the core is cell access under a ledger borrow;
//! `simd`, whose call of code compiled for AVX2 + FMA after the CPU was checked for them is
//! the other, lives in `tessera_formats` beside the generated kernels that use it too).

mod analysis;
mod buffer;
mod constraint;
mod dtype;
mod error;
mod execute;
mod fusion;
mod future;
mod issue;
mod machine;
mod partition;
mod rect;
mod replicate;
mod runtime;
mod solve_memo;
mod solver;
mod stats;
mod store;
mod window;

pub use constraint::Cut;
pub use dtype::{DType, Element, PosRange, ReduceOp, Scalar};
pub use error::{Result, RuntimeError};
pub use execute::context::{ReadView, ReduceView, TaskContext, WriteView};
pub use fusion::kernel::Chunk;
pub use future::Future;
pub use issue::task::{Privilege, TaskLauncher};
pub use rect::{Rect, MAX_DIMS};
pub use replicate::{shard_owners, MAX_RANKS};
pub use runtime::{Runtime, RuntimeBuilder, DEFAULT_TRACING, DEFAULT_WINDOW, RANKS_WINDOW};
pub use stats::Stats;
pub use store::Store;
pub use window::WindowPolicy;

pub mod io;
/// Element-wise code compiled for the CPU's wide vector instructions (shared with the
/// compiler's generated kernels, which name only `tessera_formats`).
pub use tessera_formats::simd;
#[doc(hidden)]
pub mod timeline;
pub mod tracing;
pub mod transport;
