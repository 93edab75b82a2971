// The kernel on rayon's pool (`--threads` workers for a parallelized loop).

use crate::{kernel, I, V};
use std::error::Error;
use tessera_formats::Tensor;

/// What `--help` says about ranks: nothing (one process).
pub const RANKS_HELP: &str = "";

/// One process: the plain kernel does not run across ranks (that takes a distribution
/// schedule and `tessera compile --mpi`).
pub struct Ranks;

impl Ranks {
    pub fn writes(&self) -> bool {
        true
    }

    pub fn check<T>(&self, local: Result<T, Box<dyn Error>>) -> Result<T, Box<dyn Error>> {
        local
    }
}

/// Runs `f` as the one process. Started by `mpirun` with several ranks, it refuses: every rank
/// would compute the whole statement and write the same output.
pub fn with_ranks(
    f: impl FnOnce(&Ranks) -> Result<(), Box<dyn Error>>,
) -> Result<(), Box<dyn Error>> {
    match mpirun_ranks() {
        Some(n) if n > 1 => Err(format!(
            "this program was started by mpirun as {n} ranks, but its statement has no \
             distribution schedule, so every rank would compute all of it; run it without \
             mpirun, or compile the statement with a schedule and `--mpi` (e.g. `tessera \
             compile ... -s \"split(i, io, ii, {n}); map(io)\" --mpi`)"
        )
        .into()),
        _ => f(&Ranks),
    }
}

/// The job size `mpirun` gives its processes (Open MPI, MPICH/PMI), without linking MPI.
fn mpirun_ranks() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// An input as read: the whole tensor.
pub type Input = Tensor<V, I>;

pub fn read_input(
    _ranks: &Ranks,
    _name: &str,
    path: &std::path::Path,
    format: &tessera_formats::Format,
) -> Result<Input, Box<dyn Error>> {
    crate::io::read(path, format)
}

pub fn compute(
    _ranks: &Ranks,
    tensors: Vec<Tensor<V, I>>,
    out_dims: &[usize],
    threads: Option<usize>,
    stats: bool,
) -> Result<Tensor<V, I>, Box<dyn Error>> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        b = b.num_threads(n);
    }
    let pool = b.build()?;
    if stats {
        eprintln!(
            "note: `--stats` reports the task runtime, which only programs of a distributed \
             schedule (`split`) use; this one runs the plain kernel"
        );
    }
    let refs: Vec<&Tensor<V, I>> = tensors.iter().collect();
    Ok(pool.install(|| kernel::kernel::<V, I>(&refs, out_dims)))
}

/// The output as `compute` leaves it: the tensor.
pub type Computed = Tensor<V, I>;

/// Writes the output to `path`.
pub fn write(_ranks: &Ranks, path: &std::path::Path, out: Computed) -> Result<(), Box<dyn Error>> {
    crate::io::write(path, &out)
}
