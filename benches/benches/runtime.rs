//! Runtime overheads (`cargo bench -p tessera-benches --bench runtime`).
//!
//! 1. Per-task overhead: issue + analysis + run of an empty task, independent and chained.
//! 2. A Task Bench-style `stencil_1d` graph (width = threads, 1000 steps, each task a compute
//!    loop of adjustable length) swept over task duration to find METG(50) — the smallest task
//!    granularity at which 50 % of peak throughput is reached — without and with automatic
//!    tracing and with tracing + actors, beside the same graph run by a hand-written rayon
//!    loop with a barrier per step
//!    (the three interleaved at every sweep point).
//! 3. CG (1-d Laplacian as a stencil matvec, dot products as futures, stores reused) with
//!    tracing: share of launched tasks replayed in iterations 21–60 and the first iteration
//!    with a replay; the same for the runtime example's CG (a fresh `ap` store every
//!    iteration) and for a `tensor!` CG (fresh stores for every statement).
//!
//! Options (environment): `TESSERA_BENCH_THREADS` (default: available cores; rayon's pool
//! and the stencil's width), `TESSERA_BENCH_WORKERS` (the runtimes' worker threads for the
//! stencil; default threads - 1, i.e. `Runtime::new(threads)`, whose issuing thread is the
//! last processor: see "Which runtime against rayon" below),
//! `TESSERA_BENCH_STEPS` (default 1000), `TESSERA_BENCH_QUICK=1` (a shorter sweep),
//! `TESSERA_BENCH_SWEEPS` (default 3: whole sweeps repeated, medians reported),
//! `TESSERA_BENCH_MIN_POW` / `TESSERA_BENCH_MAX_POW` (sweep kernel lengths 2^min..=2^max
//! iterations; defaults 0 and 14 quick / 17 full).

#[path = "../../runtime/examples/sparse/mod.rs"]
mod sparse;
#[path = "../../tests/tests/common/tensor_cg.rs"]
mod tensor_cg;

use rayon::prelude::*;
use std::hint::black_box;
use std::time::Instant;
use tessera_benches::{best_of, env_or, median, Table};
use tessera_runtime::{DType, Future, Runtime, Store};

/// The compute kernel: a dependent multiply-add chain of `iters` steps (latency bound, so its
/// time per iteration does not depend on how many cores run it).
#[inline(never)]
fn kernel(iters: u64, seed: f64) -> f64 {
    let mut x = seed;
    for _ in 0..iters {
        x = black_box(x * 0.999_999_9 + 1e-7);
    }
    x
}

/// Seconds per kernel iteration on one core.
fn calibrate() -> f64 {
    let iters = 20_000_000;
    let (t, _) = best_of(3, || kernel(iters, 1.0));
    t / iters as f64
}

/// µs per empty task: `chained` tasks all read-write one store (each waits for the last);
/// otherwise every task is independent.
fn empty_task_overhead(threads: usize, n: usize, chained: bool, mode: Mode) -> (f64, f64) {
    let rt = mode.runtime(threads);
    rt.register("empty", |_| {}).expect("register");
    let stores: Vec<Store> = (0..64)
        .map(|_| rt.create(DType::F64, &[1]).expect("store"))
        .collect();
    let (t, analysis) = best_of(3, || {
        let before = rt.stats();
        let t0 = Instant::now();
        for i in 0..n {
            let s = if chained {
                &stores[0]
            } else {
                &stores[i % stores.len()]
            };
            let t = rt.task("empty");
            let t = if chained { t.read_write(s) } else { t.read(s) };
            t.launch_domain(&[1]).submit().expect("submit");
        }
        rt.fence().expect("fence");
        let el = t0.elapsed().as_secs_f64();
        (el, rt.stats().since(&before).analysis_us_per_task())
    })
    .1;
    (t / n as f64 * 1e6, analysis)
}

/// One run of the stencil graph on Tessera: returns wall seconds and the seconds the issuing
/// loop took (before the fence; it includes points the issuing thread ran while throttled).
fn stencil_tessera(rt: &Runtime, width: usize, steps: usize, iters: u64) -> (f64, f64) {
    let a = rt.create(DType::F64, &[width + 2]).expect("store");
    let b = rt.create(DType::F64, &[width + 2]).expect("store");
    rt.fill(&a, 1.0).expect("fill");
    rt.fill(&b, 1.0).expect("fill");
    rt.fence().expect("fence");
    let views = |s: &Store| sparse::stencil::bench_views(s, width).expect("view");
    let (va, vb) = (views(&a), views(&b));
    let t0 = Instant::now();
    for step in 0..steps {
        let (cur, next) = if step % 2 == 0 {
            (&va, &vb)
        } else {
            (&vb, &va)
        };
        sparse::stencil::bench_step(rt, "stencil_point", cur, next, width, iters).expect("submit");
    }
    let issued = t0.elapsed().as_secs_f64();
    rt.fence().expect("fence");
    (t0.elapsed().as_secs_f64(), issued)
}

fn register_stencil(rt: &Runtime) {
    rt.register("stencil_point", |ctx| {
        let iters = ctx.scalar(0).as_u64();
        let (l, c, r) = (ctx.read::<f64>(1), ctx.read::<f64>(2), ctx.read::<f64>(3));
        let mut out = ctx.write::<f64>(0);
        for i in out.range() {
            let seed = (l.at(i) + c.at(i) + r.at(i)) / 3.0;
            out.set_at(i, kernel(iters, seed));
        }
    })
    .expect("register");
}

/// The same graph by hand: a parallel loop over the width per step (the join is the barrier).
fn stencil_rayon(pool: &rayon::ThreadPool, width: usize, steps: usize, iters: u64) -> f64 {
    let mut cur = vec![1.0f64; width + 2];
    let mut next = cur.clone();
    let t0 = Instant::now();
    pool.install(|| {
        for _ in 0..steps {
            next[1..width + 1]
                .par_iter_mut()
                .enumerate()
                .for_each(|(i, o)| {
                    *o = kernel(iters, (cur[i] + cur[i + 1] + cur[i + 2]) / 3.0);
                });
            std::mem::swap(&mut cur, &mut next);
        }
    });
    black_box(&cur);
    t0.elapsed().as_secs_f64()
}

/// One point of the sweep: task granularity (µs of wall × cores per task) and the useful work
/// rate (kernel-seconds per wall-second, `threads` at best).
#[derive(Clone, Copy, Debug)]
struct Sample {
    granularity_us: f64,
    rate: f64,
    efficiency: f64,
}

fn sample(wall: f64, tasks: usize, threads: usize, task_seconds: f64) -> Sample {
    Sample {
        granularity_us: wall * threads as f64 / tasks as f64 * 1e6,
        rate: tasks as f64 * task_seconds / wall,
        efficiency: 0.0,
    }
}

/// Efficiency as Task Bench defines it: the work rate relative to the peak rate, where the peak
/// is the best rate measured by either system (robust to cores lost to other processes).
fn set_efficiency(samples: &mut [Sample], peak: f64) {
    for s in samples {
        s.efficiency = s.rate / peak;
    }
}

/// METG(50): the granularity where efficiency crosses 50 %, interpolated in log space between
/// the sweep points around the crossing (samples ordered by increasing task length).
fn metg(samples: &[Sample]) -> f64 {
    let first_ok = samples.iter().position(|s| s.efficiency >= 0.5);
    match first_ok {
        None => f64::INFINITY,
        Some(0) => samples[0].granularity_us,
        Some(i) => {
            let (a, b) = (samples[i - 1], samples[i]);
            let f = (0.5 - a.efficiency) / (b.efficiency - a.efficiency);
            (a.granularity_us.ln() + f * (b.granularity_us.ln() - a.granularity_us.ln())).exp()
        }
    }
}

/// How the Tessera runtime runs the stencil: analysed task by task, traced (replays through
/// the thread pool's nodes), traced with replays as actors.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Untraced,
    Traced,
    Actors,
}

const MODES: [Mode; 3] = [Mode::Untraced, Mode::Traced, Mode::Actors];

impl Mode {
    /// The mode's runtime. Every mode launches each task as it is issued (a window of one, the
    /// default whenever tracing is on), so that the modes differ in tracing alone: with
    /// `TESSERA_BENCH_DEFAULT_WINDOW=1` the untraced runtime keeps the default adaptive window.
    fn runtime(self, threads: usize) -> Runtime {
        let default_window = matches!(self, Mode::Untraced)
            && std::env::var_os("TESSERA_BENCH_DEFAULT_WINDOW").is_some();
        let b = Runtime::builder();
        let b = if default_window { b } else { b.window_size(1) };
        b.threads(threads)
            .tracing(!matches!(self, Mode::Untraced))
            .actors(matches!(self, Mode::Actors))
            .build()
    }
}

/// One sweep over kernel lengths, Tessera (untraced, traced, traced + actors) and rayon side
/// by side.
struct Sweep<'a> {
    /// One runtime per [`MODES`] entry.
    runtimes: &'a [Runtime; 3],
    pool: &'a rayon::ThreadPool,
    threads: usize,
    steps: usize,
    per_iter: f64,
    pows: std::ops::RangeInclusive<usize>,
}

impl Sweep<'_> {
    /// METG(50) per mode and of rayon (µs), each mode's granularity and issuing-loop µs per
    /// step at the shortest task.
    fn run(&self) -> SweepResult {
        let (threads, width) = (self.threads, self.threads);
        let tasks = width * self.steps;
        let mut samples: [Vec<Sample>; 4] = Default::default();
        let mut issue_us = [0.0; 3];
        for (k, p) in self.pows.clone().enumerate() {
            let iters = 1u64 << p;
            let task_seconds = iters as f64 * self.per_iter;
            let reps = if p < 12 { 3 } else { 2 };
            let s = |wall| sample(wall, tasks, threads, task_seconds);
            let mut line = format!(
                "iters 2^{p:<2} task {:>9.2} µs | granularity µs (rate):",
                task_seconds * 1e6
            );
            for (m, rt) in self.runtimes.iter().enumerate() {
                let (wall, issued) =
                    best_of(reps, || stencil_tessera(rt, width, self.steps, iters));
                if k == 0 {
                    issue_us[m] = issued.1 / self.steps as f64 * 1e6;
                }
                samples[m].push(s(wall));
            }
            let (rw, _) = best_of(reps, || stencil_rayon(self.pool, width, self.steps, iters));
            samples[3].push(s(rw));
            for (name, v) in NAMES.iter().zip(&samples) {
                let last = v.last().expect("just pushed");
                line += &format!(" {name} {:>9.2} ({:>5.2})", last.granularity_us, last.rate);
            }
            eprintln!("{line}");
        }
        let peak = samples.iter().flatten().map(|s| s.rate).fold(0.0, f64::max);
        for v in &mut samples {
            set_efficiency(v, peak);
        }
        eprintln!("peak rate {peak:.2} kernel-seconds per second ({threads} threads ideal)");
        for i in 0..samples[0].len() {
            let mut line = "granularity µs (eff %):".to_string();
            for (name, v) in NAMES.iter().zip(&samples) {
                let s = &v[i];
                line += &format!(
                    " {name} {:>9.2} ({:>5.1})",
                    s.granularity_us,
                    s.efficiency * 100.0
                );
            }
            eprintln!("{line}");
        }
        SweepResult {
            metg: std::array::from_fn(|m| metg(&samples[m])),
            floor: std::array::from_fn(|m| samples[m][0].granularity_us),
            issue_us,
        }
    }
}

/// Column names: the three modes, then rayon.
const NAMES: [&str; 4] = ["untraced", "traced", "actors", "rayon"];

/// One sweep's METG(50) values (µs: the three modes, then rayon), the modes' granularities at
/// the shortest task and their issuing-loop µs per step there.
#[derive(Clone, Copy, Debug)]
struct SweepResult {
    metg: [f64; 4],
    floor: [f64; 3],
    issue_us: [f64; 3],
}

fn register_cg(rt: &Runtime) {
    // ap[i] = 2 p[i] - p[i-1] - p[i+1] on the interior (p's two ends stay 0).
    rt.register("cg_matvec", |ctx| {
        let (l, c, r) = (ctx.read::<f64>(1), ctx.read::<f64>(2), ctx.read::<f64>(3));
        let mut out = ctx.write::<f64>(0);
        for i in out.range() {
            out.set_at(i, 2.0 * c.at(i) - l.at(i) - r.at(i));
        }
    })
    .expect("register");
    // dot, axpy_ratio and xpay_ratio: the runtime's CG example's bodies.
    sparse::cg::register(rt).expect("register");
}

/// CG on a 1-d Laplacian of `n` unknowns for `iterations` iterations (the issuing thread
/// waits for the residual each iteration, as a convergence test does). Returns the share of
/// launched tasks replayed after iteration `warm_up`, and the first iteration (from 1) in
/// which any task was replayed.
fn cg_tracing(threads: usize, n: usize, iterations: usize, warm_up: usize) -> (f64, usize) {
    let rt = Mode::Actors.runtime(threads);
    register_cg(&rt);
    let zeros = |len| rt.create(DType::F64, &[len]).expect("store");
    let full = |s: &Store| s.slice(0, 1..n + 1).expect("view");
    // p has a zero halo; the others are plain vectors of n.
    let p_all = zeros(n + 2);
    let (p, l, r_) = (
        full(&p_all),
        p_all.slice(0, 0..n).expect("view"),
        p_all.slice(0, 2..n + 2).expect("view"),
    );
    let b: Vec<f64> = (0..n).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
    let x = zeros(n);
    let r = rt.from_vec(&[n], b.clone()).expect("store");
    let ap = zeros(n);
    rt.task("xpay_ratio")
        .read(&r)
        .read_write(&p)
        .future(&Future::ready(0.0))
        .future(&Future::ready(1.0))
        .align(&r, &p)
        .submit()
        .expect("submit");
    let mut rs = sparse::cg::dot(&rt, &r, &r).expect("submit");
    let (mut before, mut first) = (rt.stats(), 0);
    for it in 1..=iterations {
        rt.task("cg_matvec")
            .write(&ap)
            .read(&l)
            .read(&p)
            .read(&r_)
            .align(&ap, &l)
            .align(&ap, &p)
            .align(&ap, &r_)
            .submit()
            .expect("submit");
        rs = sparse::cg::update(&rt, &rs, &p, &ap, &x, &r).expect("submit");
        black_box(rs.get().expect("residual"));
        if first == 0 && rt.stats().tasks_traced > 0 {
            first = it;
        }
        if it == warm_up {
            before = rt.stats();
        }
    }
    (rt.stats().since(&before).traced_share(), first)
}

/// The runtime example's CG (`sparse::cg::solve`: a fresh `ap` store every iteration) with
/// tracing + actors: the share of tasks replayed in iterations `warm_up + 1..=iterations`, as
/// the difference of a run of `iterations` and one of `warm_up` (the same stream up to there).
fn example_cg_tracing(threads: usize, n: usize, iterations: usize, warm_up: usize) -> f64 {
    let run = |iters| {
        let rt = Mode::Actors.runtime(threads);
        sparse::cg::register(&rt).expect("register");
        let a = sparse::Csr::upload(&rt, &sparse::HostCsr::tridiagonal(n)).expect("upload");
        let b: Vec<f64> = (0..n).map(|i| 1.0 + (i % 3) as f64).collect();
        // No tolerance: exactly `iters` iterations.
        sparse::cg::solve(&rt, &a, &b, 0.0, iters).expect("cg");
        rt.stats()
    };
    let (short, long) = (run(warm_up), run(iterations));
    let traced = long.tasks_traced.saturating_sub(short.tasks_traced);
    traced as f64 / long.tasks_issued.saturating_sub(short.tasks_issued).max(1) as f64
}

/// A `tensor!` CG (tests/tests/common/tensor_cg.rs: fresh stores for every statement, a read
/// every iteration) with tracing + actors: the share of tasks replayed in iterations
/// `warm_up + 1..=iterations` and the first iteration (from 1) with a replay (0: none).
fn tensor_cg_tracing(threads: usize, n: usize, iterations: usize, warm_up: usize) -> (f64, usize) {
    let rt = Mode::Actors.runtime(threads);
    let (_, stats) = tensor_cg::tensor_cg(&rt, n, iterations).expect("tensor! CG");
    let (share, first) = tensor_cg::replayed(&stats, warm_up, iterations);
    (share, first.map_or(0, |i| i + 1))
}

/// Rows of `what` traced and with actors, each beside the untraced figure (µs, per mode).
fn versus_untraced(table: &mut Table, what: &str, per_mode: &[f64; 3]) {
    for m in 1..3 {
        table.row(
            &format!("{what}, {}", NAMES[m]),
            "µs",
            per_mode[m],
            "untraced",
            per_mode[0],
            false,
        );
    }
}

fn main() {
    let threads = env_or(
        "TESSERA_BENCH_THREADS",
        std::thread::available_parallelism().map_or(2, |n| n.get()),
    );
    let steps = env_or("TESSERA_BENCH_STEPS", 1000);
    let quick = env_or("TESSERA_BENCH_QUICK", 0) == 1;
    let per_iter = calibrate();
    eprintln!(
        "kernel: {:.3} ns per iteration; {threads} threads, {steps} steps",
        per_iter * 1e9
    );

    let n = if quick { 5_000 } else { 20_000 };
    // Per mode: µs per empty task (independent, chained) and analysis µs (untraced only).
    let empty: Vec<[(f64, f64); 2]> = MODES
        .iter()
        .map(|&m| [false, true].map(|chained| empty_task_overhead(threads, n, chained, m)))
        .collect();
    let (cg_share, cg_first) = cg_tracing(threads, 4096, 60, 20);
    let example_cg_share = example_cg_tracing(threads, 4096, 60, 20);
    let (tensor_cg_share, tensor_cg_first) = tensor_cg_tracing(threads, 4096, 60, 20);

    // Which runtime against rayon's `threads` threads: `threads(n)` builds n - 1 workers and
    // counts the issuing thread as the n-th processor, but the stencil's issuing thread runs
    // only a fifth of the points (it runs points only while it waits), so by default the
    // runtime has about one core fewer executing than rayon. `TESSERA_BENCH_WORKERS=threads`
    // gives it as many workers as rayon has threads, plus the issuing thread (which then
    // competes with them for the cores). The table's title says which was measured.
    let workers = env_or("TESSERA_BENCH_WORKERS", threads.saturating_sub(1).max(1)).max(1);
    let runtimes = MODES.map(|m| m.runtime(workers + 1));
    runtimes.iter().for_each(register_stencil);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool");
    let max_pow = env_or("TESSERA_BENCH_MAX_POW", if quick { 14 } else { 17 });
    let min_pow = env_or("TESSERA_BENCH_MIN_POW", 0).min(max_pow);
    // METG moves a lot between sweeps on a shared 2-core machine (the rayon loop runs the two
    // points of a step on one thread when they are short, which sits right at 50 % efficiency):
    // run whole sweeps several times and report medians.
    let sweeps = env_or("TESSERA_BENCH_SWEEPS", 3).max(1);
    let sweep = Sweep {
        runtimes: &runtimes,
        pool: &pool,
        threads,
        steps,
        per_iter,
        pows: min_pow..=max_pow,
    };
    let runs: Vec<SweepResult> = (0..sweeps)
        .map(|i| {
            eprintln!("sweep {} of {sweeps}", i + 1);
            sweep.run()
        })
        .collect();
    let med = |f: &dyn Fn(&SweepResult) -> f64| median(runs.iter().map(f).collect());
    let metg: [f64; 4] = std::array::from_fn(|m| med(&|r| r.metg[m]));
    let floor: [f64; 3] = std::array::from_fn(|m| med(&|r| r.floor[m]));
    let issue: [f64; 3] = std::array::from_fn(|m| med(&|r| r.issue_us[m]));
    let vs_rayon: [f64; 3] = std::array::from_fn(|m| med(&|r| r.metg[m] / r.metg[3]));
    let vs_untraced: [f64; 3] = std::array::from_fn(|m| med(&|r| r.metg[m] / r.metg[0]));
    eprintln!("METG(50) per sweep: {runs:?}");

    let mut table = Table::new(&format!(
        "runtime overheads ({threads} threads; stencil_1d width {threads}, {steps} steps; \
         stencil runtimes: {workers} workers + the issuing thread, rayon: {threads} threads)"
    ));
    for (k, what) in ["independent", "chained"].iter().enumerate() {
        table.row(
            &format!("empty task, {what} (issue+analysis+run)"),
            "µs",
            empty[0][k].0,
            "goal",
            20.0,
            false,
        );
        let per_mode: [f64; 3] = std::array::from_fn(|m| empty[m][k].0);
        versus_untraced(&mut table, &format!("empty task, {what}"), &per_mode);
    }
    for m in 0..3 {
        table.row(
            &format!("stencil_1d METG(50), {}", NAMES[m]),
            "µs",
            metg[m],
            "rayon+barrier",
            metg[3],
            false,
        );
    }
    let metg_modes = [metg[0], metg[1], metg[2]];
    versus_untraced(&mut table, "stencil_1d METG(50) vs untraced", &metg_modes);
    table.row(
        "stencil_1d METG(50), actors vs goal",
        "µs",
        metg[2],
        "goal",
        1.5,
        false,
    );
    versus_untraced(
        &mut table,
        "issuing loop per stencil step, shortest task",
        &issue,
    );
    table.figure("analysis per empty task, independent (µs)", empty[0][0].1);
    table.figure("analysis per empty task, chained (µs)", empty[0][1].1);
    let st = runtimes[0].stats();
    table.figure("analysis per stencil task (µs)", st.analysis_us_per_task());
    table.figure(
        "stencil tasks whose solution was replayed (%)",
        100.0 * st.solutions_replayed as f64 / st.tasks_issued.max(1) as f64,
    );
    // The issuing thread is one of the `threads` processors: the share of points it ran while
    // throttled or fencing instead of sleeping.
    table.figure(
        "stencil points run by the issuing thread (%)",
        100.0 * st.nodes_helped as f64 / st.points_run.max(1) as f64,
    );
    for m in 1..3 {
        let tst = runtimes[m].stats();
        let name = NAMES[m];
        table.figure(
            &format!("{name} stencil: launched tasks replayed (%)"),
            100.0 * tst.traced_share(),
        );
        table.figure(
            &format!("{name} stencil: tracing path ns per launched task"),
            tst.tracing_ns as f64 / (tst.tasks_traced + tst.tasks_analysed).max(1) as f64,
        );
        table.figure(
            &format!("{name} stencil: traces abandoned"),
            tst.traces_abandoned as f64,
        );
        table.figure(
            &format!("{name} stencil: issued tasks launched with no solve (%)"),
            100.0 * tst.tasks_unsolved as f64 / tst.tasks_issued.max(1) as f64,
        );
    }
    let ast = runtimes[2].stats();
    table.figure(
        "traced stencil: finder ns per launched task",
        ast.finder_ns_per_task(),
    );
    table.figure(
        "actors stencil: replays linked to the one before (%)",
        100.0 * ast.actor_linked_replays as f64 / ast.actor_replays.max(1) as f64,
    );
    // Points of a verified replay view their stores without ledger borrows (runtime/DESIGN.md,
    // "Replays without ledger borrows"; `TESSERA_VERIFIED_REPLAYS=0` keeps the borrows).
    table.figure(
        "actors stencil: replays verified, no ledger borrows (%)",
        100.0 * ast.verified_replays as f64 / ast.actor_replays.max(1) as f64,
    );
    table.figure(
        "CG (actors): tasks replayed in iterations 21-60 (%)",
        100.0 * cg_share,
    );
    table.figure("CG: first iteration with a replay", cg_first as f64);
    table.figure(
        "example CG, fresh ap (actors): tasks replayed in iterations 21-60 (%)",
        100.0 * example_cg_share,
    );
    table.figure(
        "tensor! CG (actors): tasks replayed in iterations 21-60 (%)",
        100.0 * tensor_cg_share,
    );
    table.figure(
        "tensor! CG: first iteration with a replay",
        tensor_cg_first as f64,
    );
    // The granularity at the shortest task is the per-step overhead floor: with the issuing
    // thread sharing the cores, METG cannot fall much below it.
    for m in 0..3 {
        table.figure(
            &format!(
                "stencil granularity floor, shortest task, {} (µs)",
                NAMES[m]
            ),
            floor[m],
        );
        table.figure(
            &format!("{} stencil METG / rayon METG, median", NAMES[m]),
            vs_rayon[m],
        );
    }
    for m in 1..3 {
        table.figure(
            &format!("{} / untraced stencil METG, median", NAMES[m]),
            vs_untraced[m],
        );
    }
    table.figure("metg_us_untraced", metg[0]);
    table.figure("metg_us_traced", metg[1]);
    table.figure("metg_us_traced_actors", metg[2]);
    table.figure("metg_us_rayon", metg[3]);
    table.figure("issue_us_per_step_untraced", issue[0]);
    table.figure("issue_us_per_step_traced", issue[1]);
    table.figure("issue_us_per_step_traced_actors", issue[2]);
    table.figure("cg_replayed_share", cg_share);
    table.figure("cg_first_replayed_iteration", cg_first as f64);
    table.figure("example_cg_replayed_share", example_cg_share);
    table.figure("tensor_cg_replayed_share", tensor_cg_share);
    table.figure("tensor_cg_first_replayed_iteration", tensor_cg_first as f64);
    table.figure("sweeps", sweeps as f64);
    table.figure("stencil_runtime_workers", workers as f64);
    table.figure("kernel ns per iteration", per_iter * 1e9);
    table.print();
}
