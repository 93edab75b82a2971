//! A 1-d three-point stencil over views of one store: each step writes `next[1..n+1]` from the
//! aliasing views `cur[0..n]`, `cur[1..n+1]`, `cur[2..n+2]`, then the buffers swap. Points depend
//! on their neighbours' previous step through the overlapping views. Checks against a sequential
//! loop.
//!
//! Usage: `cargo run -p tessera-runtime --example stencil -- [n (default 10000)] [steps (100)]
//! [threads per rank (4)] [thread ranks (1)]`; under `mpirun` (built with `--features mpi`)
//! every process is one rank.

mod ranks;
mod sparse;

use sparse::stencil::{register, run as run_steps, sequential};
use std::process::ExitCode;
use tessera_runtime::Result;

fn main() -> ExitCode {
    sparse::example_main(&[10_000, 100, 4, 1], |a| {
        ranks::on_ranks(a[3], |comm| run(a[0], a[1], a[2], comm))
    })
}

fn run(n: usize, steps: usize, threads: usize, comm: Option<ranks::Comm>) -> Result<bool> {
    let rt = ranks::runtime(threads, 256, comm)?;
    register(&rt)?;
    let got = run_steps(&rt, n, steps)?;
    let ok = got == sequential(n, steps);
    let s = rt.stats();
    println!(
        "stencil n={n} steps={steps} threads={threads} rank {} of {}: {} ({} tasks, {} points, {} bytes sent, {:.2} µs analysis/task, partitions created {} reused {})",
        rt.rank(),
        rt.ranks(),
        if ok { "matches the sequential loop" } else { "MISMATCH" },
        s.tasks_issued,
        s.points_run,
        s.bytes_sent,
        s.analysis_us_per_task(),
        s.partitions_created,
        s.partitions_reused
    );
    Ok(ok)
}
