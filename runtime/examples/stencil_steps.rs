//! The `runtime` bench's `stencil_1d` issuing loop with empty-ish bodies, for instruction
//! counts: `valgrind --tool=callgrind target/release/examples/stencil_steps [steps] [width]
//! [threads]` with `TESSERA_TRACING` / `TESSERA_ACTORS` choosing the mode. The views are made
//! once (as in the bench), so per step only the `submit` path and the points are counted.
//! An optional fourth argument gives every point a body of that many dependent multiply-adds
//! (the bench's kernel, ~4 ns each here: 300 make a ~1.25 µs body) for kernel-side profiles at METG-like granularity
//! (`perf stat` / `perf trace -s` / `perf sched`): default 0. Built with `--features timeline`
//! and run with `TESSERA_TIMELINE=FILE`, it writes the runtime's per-thread event log there.

mod sparse;

use sparse::stencil::{bench_step, bench_views};
use tessera_runtime::{DType, Runtime, Store};

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (steps, width, threads, iters) = (arg(1, 4000), arg(2, 2), arg(3, 2), arg(4, 0));
    let rt = Runtime::builder().window_size(1).threads(threads).build();
    rt.register("stencil_point", move |ctx| {
        let (l, c, r) = (ctx.read::<f64>(1), ctx.read::<f64>(2), ctx.read::<f64>(3));
        let mut out = ctx.write::<f64>(0);
        for i in out.range() {
            let mut x = (l.at(i) + c.at(i) + r.at(i)) / 3.0;
            for _ in 0..iters {
                x = std::hint::black_box(x * 0.999_999_9 + 1e-7);
            }
            out.set_at(i, x);
        }
    })
    .expect("register");
    let a = rt.create(DType::F64, &[width + 2]).expect("store");
    let b = rt.create(DType::F64, &[width + 2]).expect("store");
    rt.fill(&a, 1.0).expect("fill");
    rt.fill(&b, 1.0).expect("fill");
    rt.fence().expect("fence");
    let views = |s: &Store| bench_views(s, width).expect("view");
    let (va, vb) = (views(&a), views(&b));
    let t0 = std::time::Instant::now();
    for step in 0..steps {
        let (cur, next) = if step % 2 == 0 {
            (&va, &vb)
        } else {
            (&vb, &va)
        };
        issue_step(&rt, cur, next, width);
    }
    rt.fence().expect("fence");
    let wall = t0.elapsed();
    // With the `timeline` feature: the per-thread event log (`scripts/timeline_split.py`).
    if let Some(path) = std::env::var_os("TESSERA_TIMELINE") {
        let wrote = tessera_runtime::timeline::dump(std::path::Path::new(&path)).expect("dump");
        if !wrote {
            eprintln!("TESSERA_TIMELINE: built without the `timeline` feature, nothing written");
        }
        // The ledgers' lock counts (branch ledger14): how often a borrow or a release found
        // the lock held by the other thread, and how long it waited.
        let l = tessera_runtime::timeline::ledger_locks();
        if l.taken > 0 {
            println!(
                "ledger locks: {:.2} per step, {:.4} contended per step ({:.2} %), {:.1} ns waited per step",
                l.taken as f64 / steps as f64,
                l.contended as f64 / steps as f64,
                100.0 * l.contended as f64 / l.taken as f64,
                l.waited_ns as f64 / steps as f64
            );
        }
    }
    let s = rt.stats();
    println!(
        "steps {steps} width {width}: {} tasks issued, {} solved, {} traced, {} actor replays \
         ({} verified); {:.3} µs per step; tracing path {:.0} ns per launched task",
        s.tasks_issued,
        s.tasks_solved,
        s.tasks_traced,
        s.actor_replays,
        s.verified_replays,
        wall.as_secs_f64() * 1e6 / steps as f64,
        // The runtime bench's figure of the same name (issue 14): the issuing thread's time
        // in the tracer, the streak's compares and the replays (sampled clock reads).
        s.tracing_ns as f64 / (s.tasks_traced + s.tasks_analysed).max(1) as f64
    );
}

/// One step's submit (kept out of line so callgrind shows the issuing thread's cost per step).
#[inline(never)]
fn issue_step(rt: &Runtime, cur: &[Store; 4], next: &[Store; 4], width: usize) {
    bench_step(rt, "stencil_point", cur, next, width, 1).expect("submit");
}
