//! CSR SpMV exactly as thesis Figure 7.2: `align(y, pos)`, `image(pos → crd, vals)`,
//! `image(crd → x)`. Checks the result against a sequential SpMV.
//!
//! Usage: `cargo run -p tessera-runtime --example spmv -- [grid side k (default 64)] [threads
//! per rank (4)] [thread ranks (1)]`; under `mpirun` (built with `--features mpi`) every process
//! is one rank.

mod ranks;
mod sparse;

use sparse::{Csr, HostCsr};
use std::process::ExitCode;

fn main() -> ExitCode {
    sparse::example_main(&[64, 4, 1], |a| {
        ranks::on_ranks(a[2], |comm| run(a[0], a[1], comm))
    })
}

fn run(k: usize, threads: usize, comm: Option<ranks::Comm>) -> tessera_runtime::Result<bool> {
    let rt = ranks::runtime(threads, 64, comm)?;
    sparse::register_spmv(&rt)?;
    let host = HostCsr::laplacian_2d(k);
    let a = Csr::upload(&rt, &host)?;
    let xs: Vec<f64> = (0..host.cols).map(|i| (i % 13) as f64 - 6.0).collect();
    let x = rt.from_vec(&[host.cols], xs.clone())?;
    let y = sparse::spmv(&rt, &a, &x)?;
    let got = rt.read::<f64>(&y)?;
    let want = host.spmv(&xs);
    let ok = got == want;
    let s = rt.stats();
    println!(
        "spmv {}x{} ({} nonzeros) on {} threads, rank {} of {}: {} (tasks {}, partitions created {}, reused {}, bytes sent {})",
        host.rows,
        host.cols,
        host.vals.len(),
        threads,
        rt.rank(),
        rt.ranks(),
        if ok {
            "matches the sequential SpMV"
        } else {
            "MISMATCH"
        },
        s.tasks_issued,
        s.partitions_created,
        s.partitions_reused,
        s.bytes_sent
    );
    Ok(ok)
}
