//! A 1-d three-point stencil over views of one store: each step writes `next[1..n+1]` from the
//! aliasing views `cur[0..n]`, `cur[1..n+1]`, `cur[2..n+2]`, then the buffers swap. Points depend
//! on their neighbours' previous step through the overlapping views. Checks against a sequential
//! loop.
//!
//! Usage: `cargo run -p tessera-runtime --example stencil -- [n (default 10000)] [steps (100)] [threads]`

mod sparse;

use std::process::ExitCode;
use tessera_runtime::{Result, Runtime, Store};

fn main() -> ExitCode {
    sparse::example_main(&[10_000, 100, 4], |a| run(a[0], a[1], a[2]))
}

/// `out[i] = (l[i] + c[i] + r[i]) / 3` over this point's sub-store.
fn register(rt: &Runtime) -> Result<()> {
    rt.register("stencil3", |ctx| {
        let mut out = ctx.write::<f64>(0);
        let (l, c, r) = (ctx.read::<f64>(1), ctx.read::<f64>(2), ctx.read::<f64>(3));
        for i in out.range() {
            out.set_at(i, (l.at(i) + c.at(i) + r.at(i)) / 3.0);
        }
    })
}

fn step(rt: &Runtime, cur: &Store, next: &Store, n: usize) -> Result<()> {
    let out = next.slice(0, 1..n + 1)?;
    let (l, c, r) = (
        cur.slice(0, 0..n)?,
        cur.slice(0, 1..n + 1)?,
        cur.slice(0, 2..n + 2)?,
    );
    rt.task("stencil3")
        .write(&out)
        .read(&l)
        .read(&c)
        .read(&r)
        .align(&out, &l)
        .align(&out, &c)
        .align(&out, &r)
        .submit()
}

fn initial(n: usize) -> Vec<f64> {
    (0..n + 2)
        .map(|i| {
            if i == 0 || i == n + 1 {
                1.0
            } else {
                ((i * 7) % 11) as f64
            }
        })
        .collect()
}

fn sequential(n: usize, steps: usize) -> Vec<f64> {
    let mut cur = initial(n);
    let mut next = cur.clone();
    for _ in 0..steps {
        for i in 1..=n {
            next[i] = (cur[i - 1] + cur[i] + cur[i + 1]) / 3.0;
        }
        std::mem::swap(&mut cur, &mut next);
    }
    cur
}

fn run(n: usize, steps: usize, threads: usize) -> Result<bool> {
    let rt = Runtime::builder()
        .threads(threads)
        .min_piece_size(256)
        .build();
    register(&rt)?;
    let mut cur = rt.from_vec(&[n + 2], initial(n))?;
    let mut next = rt.from_vec(&[n + 2], initial(n))?;
    for _ in 0..steps {
        step(&rt, &cur, &next, n)?;
        std::mem::swap(&mut cur, &mut next);
    }
    let got = rt.read::<f64>(&cur)?;
    let ok = got == sequential(n, steps);
    let s = rt.stats();
    println!(
        "stencil n={n} steps={steps} threads={threads}: {} ({} tasks, {} points, {:.2} µs analysis/task, partitions created {} reused {})",
        if ok { "matches the sequential loop" } else { "MISMATCH" },
        s.tasks_issued,
        s.points_run,
        s.analysis_us_per_task(),
        s.partitions_created,
        s.partitions_reused
    );
    Ok(ok)
}
