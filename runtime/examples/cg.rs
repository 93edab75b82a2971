//! A conjugate-gradient solver built from SpMV, dot and axpy tasks, on the 2-d Laplacian.
//! Checks the answer against a sequential CG and the residual `‖b − A x‖`.
//!
//! Usage: `cargo run -p tessera-runtime --example cg -- [grid side k (default 48)] [threads per
//! rank (4)] [thread ranks (1)]`; under `mpirun` (built with `--features mpi`) every process is
//! one rank.

mod ranks;
mod sparse;

use sparse::{cg, Csr, HostCsr};
use std::process::ExitCode;

fn main() -> ExitCode {
    sparse::example_main(&[48, 4, 1], |a| {
        ranks::on_ranks(a[2], |comm| run(a[0], a[1], comm))
    })
}

fn run(k: usize, threads: usize, comm: Option<ranks::Comm>) -> tessera_runtime::Result<bool> {
    let rt = ranks::runtime(threads, 64, comm)?;
    cg::register(&rt)?;
    let host = HostCsr::laplacian_2d(k);
    let b: Vec<f64> = (0..host.rows).map(|i| 1.0 + (i % 5) as f64).collect();
    let (tol, max_iter) = (1e-8, 10 * host.rows);
    let a = Csr::upload(&rt, &host)?;
    let (x, iters) = cg::solve(&rt, &a, &b, tol, max_iter)?;
    let (x_seq, iters_seq) = cg::solve_sequential(&host, &b, tol, max_iter);
    let residual = host
        .spmv(&x)
        .iter()
        .zip(&b)
        .map(|(ax, bi)| (ax - bi).powi(2))
        .sum::<f64>()
        .sqrt();
    let diff = x
        .iter()
        .zip(&x_seq)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let ok = residual < 1e-6 && diff < 1e-6;
    let s = rt.stats();
    println!(
        "cg on {}x{} Laplacian, {threads} threads, rank {} of {}: {iters} iterations (sequential {iters_seq}), residual {residual:.2e}, max |x - x_seq| {diff:.2e}: {} ({} tasks, partitions created {} reused {})",
        k, k, rt.rank(), rt.ranks(), if ok { "ok" } else { "WRONG" }, s.tasks_issued, s.partitions_created, s.partitions_reused
    );
    Ok(ok)
}
