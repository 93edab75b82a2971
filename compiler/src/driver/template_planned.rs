// The statement's distribution plan as block tasks on tessera-runtime (`--threads` workers),
// each point task running the generated block kernel on its sub-stores. The plan is rebuilt
// from the statement when the program starts (the compiler's one definition of it), and
// checked to come from the same kernel as the block kernel compiled in.
//
// Built with `tessera compile --mpi` (this crate's feature `mpi`), the program started by
// `mpirun` runs the plan across the job's ranks (control replication: every rank reads the
// inputs, issues the same tasks and runs its shard of the points; rank 0 writes the output).
// Started without `mpirun` it is one rank.

use crate::{kernel_block, I, STATEMENT, V};
use std::error::Error;
use std::sync::Arc;
use tessera_compiler::plan::{self, on_runtime};
use tessera_formats::Tensor;
use tessera_runtime::transport::Communicator;
use tessera_runtime::Runtime;

/// `plan::kernel_fingerprint` of the kernel `kernel_block` was generated from.
const FINGERPRINT: u64 = @FINGERPRINT@;

/// What `--help` says about ranks.
#[cfg(feature = "mpi")]
pub const RANKS_HELP: &str = "\n\nBuilt with MPI: `mpirun -n N PROG ...` runs the plan across N ranks (each \
     reads the inputs and runs its share of the block tasks; rank 0 writes the output).";
#[cfg(not(feature = "mpi"))]
pub const RANKS_HELP: &str = "";

/// The ranks this process computes with: none (one process) or an MPI job's communicator.
pub struct Ranks(Option<Arc<dyn Communicator + Send + Sync>>);

impl Ranks {
    /// Whether this rank writes the output and the report lines (rank 0).
    pub fn writes(&self) -> bool {
        self.0.as_ref().is_none_or(|c| c.rank() == 0)
    }

    /// `local` on every rank: one rank's failure (a missing input, say) becomes an error on
    /// all of them, so no rank waits for a peer that stopped.
    pub fn check<T>(&self, local: Result<T, Box<dyn Error>>) -> Result<T, Box<dyn Error>> {
        let Some(comm) = &self.0 else { return local };
        let shared = comm.check(local.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        let value = local?;
        shared?;
        Ok(value)
    }
}

/// Runs `f` on this process's ranks: under `mpirun`, on the job's communicator (a program
/// built without `--mpi` refuses, rather than run as N copies that each compute everything).
pub fn with_ranks(
    f: impl FnOnce(&Ranks) -> Result<(), Box<dyn Error>>,
) -> Result<(), Box<dyn Error>> {
    if !tessera_runtime::transport::launched_by_mpirun() {
        return f(&Ranks(None));
    }
    #[cfg(feature = "mpi")]
    return tessera_runtime::transport::mpi::run_world_threaded(|comm| {
        f(&Ranks(Some(comm.clone())))
    });
    #[cfg(not(feature = "mpi"))]
    Err("this program was started by mpirun but built without MPI support, so every rank \
         would compute the whole statement; build it with `tessera compile --mpi`"
        .into())
}

pub fn compute(
    ranks: &Ranks,
    tensors: Vec<Tensor<V, I>>,
    out_dims: &[usize],
    threads: Option<usize>,
    stats: bool,
) -> Result<Tensor<V, I>, Box<dyn Error>> {
    let (kernel, plan) = plan::from_text(STATEMENT)?;
    if plan::kernel_fingerprint(&kernel) != FINGERPRINT {
        return Err("this program's plan no longer matches its block kernel (the compiler \
                    changed since it was built); compile the statement again"
            .into());
    }
    let threads = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut builder = Runtime::builder().threads(threads);
    if let Some(comm) = &ranks.0 {
        builder = builder.communicator(comm.clone());
    }
    let rt = builder.try_build()?;
    // The loaded tensors move into the runtime's stores (no copy).
    let out = on_runtime::run_compiled_owned(
        &rt,
        &plan,
        &kernel,
        tensors,
        out_dims,
        kernel_block::kernel_block::<V, I>,
    )?;
    if stats {
        let line = match rt.ranks() {
            1 => format!("{}\n", on_runtime::stats_line(&rt)),
            n => format!("rank {} of {n}: {}\n", rt.rank(), on_runtime::stats_line(&rt)),
        };
        // One write, so that the lines of ranks sharing a terminal do not interleave.
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
    Ok(out)
}
