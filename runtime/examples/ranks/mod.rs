//! Running an example on several ranks: thread ranks of this process, or MPI ranks under
//! `mpirun` (built with the `mpi` feature). Shared by the `stencil` and `cg` examples (not by
//! the tests and benches that include `sparse/`, which are built without the feature).

use tessera_runtime::{Result, Runtime};

/// A communicator a runtime can run across ranks on.
pub type Comm = std::sync::Arc<dyn tessera_runtime::transport::Communicator + Send + Sync>;

/// Runs `run` once per rank: under `mpirun` (with the `mpi` feature) on this process's MPI
/// rank; else on `ranks` thread ranks of this process, bound to cores (one rank: no
/// communicator). Every rank must find the right answer.
pub fn on_ranks(ranks: usize, run: impl Fn(Option<Comm>) -> Result<bool> + Sync) -> Result<bool> {
    if tessera_runtime::transport::launched_by_mpirun() {
        #[cfg(feature = "mpi")]
        return tessera_runtime::transport::mpi::run_world_threaded(|c| run(Some(c.clone())));
        #[cfg(not(feature = "mpi"))]
        return Err(tessera_runtime::RuntimeError::Transport(
            "started by mpirun but built without the `mpi` feature".into(),
        ));
    }
    if ranks <= 1 {
        return run(None);
    }
    // Bound to cores as `mpirun` binds its processes (unbound, two ranks often share a core).
    let all = tessera_runtime::transport::run_ranks_bound(ranks, |c| {
        run(Some(std::sync::Arc::new(c.clone())))
    });
    all.into_iter().try_fold(true, |ok, r| Ok(ok & r?))
}

/// A runtime of `threads` processors per rank, pieces of at least `min_piece` elements, on
/// `comm` (one rank without).
pub fn runtime(threads: usize, min_piece: usize, comm: Option<Comm>) -> Result<Runtime> {
    let mut b = Runtime::builder()
        .threads(threads)
        .min_piece_size(min_piece);
    if let Some(c) = comm {
        b = b.communicator(c);
    }
    b.try_build()
}
