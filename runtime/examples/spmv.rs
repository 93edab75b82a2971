//! CSR SpMV exactly as thesis Figure 7.2: `align(y, pos)`, `image(pos → crd, vals)`,
//! `image(crd → x)`. Checks the result against a sequential SpMV.
//!
//! Usage: `cargo run -p tessera-runtime --example spmv -- [grid side k (default 64)] [threads]`

mod sparse;

use sparse::{Csr, HostCsr};
use std::process::ExitCode;
use tessera_runtime::Runtime;

fn main() -> ExitCode {
    sparse::example_main(&[64, 4], |a| run(a[0], a[1]))
}

fn run(k: usize, threads: usize) -> tessera_runtime::Result<bool> {
    let rt = Runtime::builder()
        .threads(threads)
        .min_piece_size(64)
        .build();
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
        "spmv {}x{} ({} nonzeros) on {} threads: {} (tasks {}, partitions created {}, reused {})",
        host.rows,
        host.cols,
        host.vals.len(),
        threads,
        if ok {
            "matches the sequential SpMV"
        } else {
            "MISMATCH"
        },
        s.tasks_issued,
        s.partitions_created,
        s.partitions_reused
    );
    Ok(ok)
}
