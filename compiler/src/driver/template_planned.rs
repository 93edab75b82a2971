// The statement's distribution plan as block tasks on tessera-runtime (`--threads` workers),
// each point task running the generated block kernel on its sub-stores. The plan is rebuilt
// from the statement when the program starts (the compiler's one definition of it), and
// checked to come from the same kernel as the block kernel compiled in.
//
// Built with `tessera compile --mpi` (this crate's feature `mpi`), the program started by
// `mpirun` runs the plan across the job's ranks (control replication: every rank reads the
// inputs — of a `.tcs` input only its rows' share — issues the same tasks and runs its shard
// of the points; a `.tcs` output is written by every rank, each its own part, through the
// distributed storer, any other output by rank 0).
// Started without `mpirun` it is one rank.

use crate::{kernel_block, I, STATEMENT, V};
use std::error::Error;
use std::sync::Arc;
use tessera_compiler::plan::{self, on_runtime};
use std::path::Path;
use tessera_formats::{Format, Tensor};
use tessera_runtime::transport::Communicator;
use tessera_runtime::Runtime;

/// `plan::kernel_fingerprint` of the kernel `kernel_block` was generated from.
const FINGERPRINT: u64 = @FINGERPRINT@;

/// What `--help` says about ranks.
#[cfg(feature = "mpi")]
pub const RANKS_HELP: &str = "\n\nBuilt with MPI: `mpirun -n N PROG ...` runs the plan across N ranks (each \
     reads its share of `.tcs` inputs and runs its share of the block tasks; a `.tcs` \
     output is written by every rank, each its own part, any other output by rank 0).";
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
/// built without `--mpi` refuses several ranks, rather than run as N copies that each compute
/// everything; one rank is just this process).
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
    // A job of one rank is just this process (a launcher that does not say is refused).
    #[cfg(not(feature = "mpi"))]
    if mpirun_ranks() == Some(1) {
        return f(&Ranks(None));
    }
    #[cfg(not(feature = "mpi"))]
    Err("this program was started by mpirun but built without MPI support, so every rank \
         would compute the whole statement; build it with `tessera compile --mpi`"
        .into())
}

/// The job size `mpirun` gives its processes (Open MPI, MPICH/PMI), without linking MPI.
#[cfg(not(feature = "mpi"))]
fn mpirun_ranks() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// An input as this rank read it: the whole tensor, or (a `.tcs` file across ranks) its
/// share — `pos` whole, `crd` and `vals` only for the rows its points compute on.
pub enum Input {
    Whole(Tensor<V, I>),
    Share(on_runtime::TcsShare<V, I>),
}

impl Input {
    pub fn dims(&self) -> &[usize] {
        match self {
            Input::Whole(t) => t.dims(),
            Input::Share(s) => s.dims(),
        }
    }

    pub fn format(&self) -> &Format {
        match self {
            Input::Whole(t) => t.format(),
            Input::Share(s) => s.format(),
        }
    }
}

/// Reads input `name`: across ranks a `.tcs` file the plan tiles by rows is read in part
/// (`on_runtime::read_tcs_share`, a collective: every rank reads the same inputs in order);
/// anything else whole.
pub fn read_input(
    ranks: &Ranks,
    name: &str,
    path: &Path,
    format: &Format,
) -> Result<Input, Box<dyn Error>> {
    let tcs = path.extension().is_some_and(|x| x == "tcs");
    if let (Some(comm), true) = (ranks.0.as_deref(), tcs) {
        let (_, plan) = plan::from_text(STATEMENT)?;
        if let Some(s) = on_runtime::read_tcs_share::<V, I>(path, format, &plan, name, comm)? {
            return Ok(Input::Share(s));
        }
    }
    Ok(Input::Whole(crate::io::read(path, format)?))
}

pub fn compute(
    ranks: &Ranks,
    tensors: Vec<Input>,
    out_dims: &[usize],
    threads: Option<usize>,
    stats: bool,
) -> Result<Computed, Box<dyn Error>> {
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
    let (mut read, mut total) = (0, 0);
    // The loaded tensors move into the runtime's stores (no copy); shares become stores
    // valid on each rank's ranges.
    let stored = tensors
        .into_iter()
        .map(|t| match t {
            Input::Whole(t) => on_runtime::Stored::from_tensor(&rt, t),
            Input::Share(s) => {
                let (r, t) = s.bytes_read();
                (read, total) = (read + r, total + t);
                on_runtime::Stored::from_share(&rt, s)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let block = kernel_block::kernel_block::<V, I>;
    let result = on_runtime::run_stored_result(&rt, &plan, &kernel, &stored, out_dims, Some(block))?;
    // The points have run when `compute` returns: its time is the kernel's (`--timings`), and
    // the statistics count them. Their failures show when the output is read.
    rt.fence()?;
    if stats {
        let line = match rt.ranks() {
            1 => format!("{}\n", on_runtime::stats_line(&rt)),
            n => format!(
                "rank {} of {n}: {}, input bytes read {read} of {total} (.tcs shares)\n",
                rt.rank(),
                on_runtime::stats_line(&rt)
            ),
        };
        // One write, so that the lines of ranks sharing a terminal do not interleave.
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
    Ok(Computed { rt, result, stats })
}

/// The output as `compute` leaves it: still in the runtime's stores.
pub struct Computed {
    rt: Runtime,
    result: on_runtime::PlanResult<V, I>,
    stats: bool,
}

/// Writes the output to `path`. Across ranks a `.tcs` file is written by every rank, each its
/// own part (the distributed storer: no rank gathers the output), and another file by rank 0
/// after a gather to it alone; on one process the output moves out of its store. With
/// `--stats`, each rank storing a `.tcs` output says how many of its values it wrote.
pub fn write(ranks: &Ranks, path: &Path, out: Computed) -> Result<(), Box<dyn Error>> {
    let Computed { rt, result, stats } = out;
    let tcs = path.extension().is_some_and(|x| x == "tcs");
    match ranks.0.as_deref() {
        Some(comm) if comm.size() > 1 && tcs => {
            let (mine, all) = result.store_file(&rt, comm, path)?;
            if stats {
                let line = format!(
                    "rank {} of {}: output values stored {mine} of {all}\n",
                    comm.rank(),
                    comm.size()
                );
                let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            }
        }
        Some(comm) if comm.size() > 1 => {
            if let Some(t) = result.gather_on(&rt, 0)? {
                crate::io::write(path, &t)?;
            }
        }
        _ => crate::io::write(path, &result.into_tensor(&rt)?)?,
    }
    Ok(())
}
