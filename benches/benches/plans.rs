//! Distribution plans (`cargo bench -p tessera-benches --bench plans`): SpMV
//! `y(i) = A(i,j) * x(j)` with a schedule, its block tasks run on `tessera-runtime`, beside
//! the same statement's unsplit interpreted kernel (what each block task runs today) and a
//! hand-written CSR loop.
//!
//! 1. Row split (`split(i, io, ii, P)`) at 1 and 2 threads vs the unsplit kernel: the cost of
//!    going through plans, stores, partitions and block tensors, and what two threads buy.
//! 2. Block work: entries visited summed over the blocks ÷ one unsplit run (must be 1.0).
//! 3. A column split: `extend` (parallel partials, reduced) vs sequential launches.
//! 4. Runtime overhead per launch (analysis µs per task from `Stats`).
//! 5. Compiled block kernels (what `tessera run`/`compile` programs run): the row-split SpMV
//!    and SpMM plans at 1 and 2 threads beside the unscheduled generated kernel with
//!    `parallelize(i)` at the same thread count (goal at 2 threads: ≥ 0.9× its speed): over
//!    host tensors (uploaded into stores on every run), and over inputs held in stores (as
//!    `tensor!(rt => ...)` holds them; the output read back each run). The host-tensor plan
//!    also beside the same plan over tensors cloned whole and moved in (the upload before
//!    `pos` was read in place instead of cloned). The "1t" rows (here and in section 1) run
//!    on one core: `Runtime::new(1)` is one worker plus the issuing thread, which runs points
//!    while it waits (two-wide on two cores), so they pin the process's threads to one CPU
//!    while they run (`OneCore`); the kernel's one-thread pool is pinned with them.
//! 6. Reductions of P extended blocks (`split(j, jo, ji, P); extend(jo)`, compiled, 2
//!    threads) for P = 2…64: partial outputs folded by the runtime's summation tree, beside
//!    the same blocks as P dependent launches adding into the output one after another (the
//!    serial fold), with peak RSS after each.
//!
//! Options (environment): `TESSERA_BENCH_N` rows (default 100 000), `TESSERA_BENCH_NNZ_ROW`
//! nonzeros per row (default 8), `TESSERA_BENCH_BLOCKS` (default 8), `TESSERA_BENCH_REPS`
//! (default 3; best of, median of interleaved repetitions in section 5),
//! `TESSERA_BENCH_COMPILED_ONLY=1` (section 5 alone).

use std::hint::black_box;
use std::time::Instant;
use tessera_benches::{best_of, env_or, median, Table};
use tessera_compiler::ir::{Block, Kernel};
use tessera_compiler::plan::on_runtime::{self, Stored};
use tessera_compiler::plan::{self, Plan};
use tessera_compiler::{check, interp, lower, parse};
use tessera_formats::{Level, Tensor};
use tessera_runtime::Runtime;

mod generated {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}

fn planned(src: &str) -> (Kernel, Plan) {
    let c = check::check(parse::program(src, 0).unwrap(), &check::Dims::new()).unwrap();
    let k = lower::lower(&c).unwrap();
    let p = plan::plan(&c, &k).unwrap();
    (k, p)
}

/// A CSR matrix with `per_row` entries per row at scattered columns.
fn matrix(n: usize, per_row: usize) -> Tensor<f64, u32> {
    let mut entries = Vec::with_capacity(n * per_row);
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..n {
        for _ in 0..per_row {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            entries.push((vec![i, (s % n as u64) as usize], 1.0 + (s % 7) as f64));
        }
    }
    Tensor::from_entries(vec![n, n], "csr", entries).unwrap()
}

/// The hand-written CSR loop.
fn spmv_by_hand(a: &Tensor<f64, u32>, x: &[f64]) -> Vec<f64> {
    let Level::Compressed { pos, crd } = &a.levels()[1] else {
        unreachable!("csr")
    };
    let vals = a.vals();
    (0..a.dims()[0])
        .map(|i| {
            (pos[i] as usize..pos[i + 1] as usize)
                .map(|k| vals[k] * x[crd[k] as usize])
                .sum()
        })
        .collect()
}

fn main() {
    let n: usize = env_or("TESSERA_BENCH_N", 100_000);
    let per_row: usize = env_or("TESSERA_BENCH_NNZ_ROW", 8);
    let blocks: usize = env_or("TESSERA_BENCH_BLOCKS", 8);
    let reps: usize = env_or("TESSERA_BENCH_REPS", 3);
    let a = matrix(n, per_row);
    let xs: Vec<f64> = (0..n).map(|i| (i % 13) as f64 - 6.0).collect();
    let x = Tensor::<f64, u32>::dense_from_vec(vec![n], xs.clone()).unwrap();
    let inputs = [&a, &x];
    let mut t = Table::new(&format!(
        "plans: SpMV {n}x{n}, {} nonzeros, {blocks} blocks",
        a.nnz()
    ));
    let profile_runs: usize = env_or("TESSERA_BENCH_PROFILE_RUNS", 0);
    if profile_runs > 0 {
        // One contestant alone, `profile_runs` times after a warm-up (for callgrind's
        // instruction counts of one run: the difference of two run counts).
        profile(&a, &x, blocks, profile_runs);
        return;
    }
    if env_or("TESSERA_BENCH_COMPILED_ONLY", 0) == 1 {
        // Section 5 alone (for profiles of the plan's overhead).
        compiled_rows(&mut t, &a, &x, blocks, reps);
        t.print();
        return;
    }

    let (plain, _) = planned("y(i) = A(i,j) * x(j); A: csr");
    let (t_hand, y_hand) = best_of(reps, || spmv_by_hand(&a, &xs));
    let (t_plain, y_plain) = best_of(reps, || interp::run(&plain, &inputs, &[n]).unwrap());
    assert_eq!(
        y_plain.vals(),
        &y_hand[..],
        "the interpreter and the hand loop agree"
    );
    t.row(
        "unsplit interpreted kernel",
        "ms",
        t_plain * 1e3,
        "hand-written loop",
        t_hand * 1e3,
        false,
    );

    let (k, rows) = planned(&format!(
        "y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, {blocks})"
    ));
    let mut per_launch_us = 0.0;
    for threads in [1, 2] {
        // One core at 1 thread (see `OneCore`).
        let _pin = (threads == 1).then(OneCore::pin);
        let rt = Runtime::new(threads);
        let (t_plan, y) = best_of(reps, || {
            on_runtime::run(&rt, &rows, &k, &inputs, &[n]).unwrap()
        });
        assert_eq!(
            y.vals(),
            y_plain.vals(),
            "a row split gives the unsplit answer bitwise"
        );
        t.row(
            &format!("row-split plan, {threads} thread(s)"),
            "ms",
            t_plan * 1e3,
            "unsplit kernel, 1 thread",
            t_plain * 1e3,
            false,
        );
        per_launch_us = rt.stats().analysis_us_per_task();
    }
    t.figure("analysis_us_per_launch", per_launch_us);

    // Block work: summed over the blocks vs one unsplit run.
    let dims = interp::checked_dims(&k, &inputs, &[n]).unwrap();
    let (_, one) = interp::run_block(&k, &inputs, &[n], &Block::whole(&dims)).unwrap();
    let split = plan::exec::run_interp(&rows, &k, &inputs, &[n], 1).unwrap();
    t.figure(
        "block_work_ratio",
        split.work.leaves as f64 / one.leaves.max(1) as f64,
    );

    // A column split: extended (parallel, reduced) vs sequential launches, 2 threads.
    let rt = Runtime::new(2);
    for (name, sched) in [
        (
            "column split, extend",
            format!("split(j, jo, ji, {blocks}); extend(jo)"),
        ),
        (
            "column split, sequential",
            format!("split(j, jo, ji, {blocks})"),
        ),
    ] {
        let (k, p) = planned(&format!("y(i) = A(i,j) * x(j); A: csr; {sched}"));
        let (secs, y) = best_of(reps, || {
            on_runtime::run(&rt, &p, &k, &inputs, &[n]).unwrap()
        });
        black_box(y);
        t.row(
            name,
            "ms",
            secs * 1e3,
            "unsplit kernel, 1 thread",
            t_plain * 1e3,
            false,
        );
    }
    compiled_rows(&mut t, &a, &x, blocks, reps);
    tree_vs_serial(&mut t, &a, &x, reps);
    t.print();
}

/// `runs` runs (`TESSERA_BENCH_PROFILE_RUNS`), after one warm-up run, of the row-split SpMV
/// plan over stored inputs at 2 threads, each taking its output, or with
/// `TESSERA_BENCH_PROFILE=kernel` of the `parallelize(i)` kernel at 2 threads (for profiles).
fn profile(a: &Tensor<f64, u32>, x: &Tensor<f64, u32>, blocks: usize, runs: usize) {
    let n = a.dims()[0];
    if std::env::var("TESSERA_BENCH_PROFILE").is_ok_and(|v| v == "kernel") {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build();
        let pool = pool.unwrap();
        for _ in 0..=runs {
            black_box(pool.install(|| generated::spmv_par::<f64, u32>(&[a, x], &[n])));
        }
        return;
    }
    let (k, p) = planned(&format!(
        "y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, {blocks})"
    ));
    let rt = Runtime::new(2);
    let stored = [
        Stored::from_tensor(&rt, a.clone()).unwrap(),
        Stored::from_tensor(&rt, x.clone()).unwrap(),
    ];
    let block: on_runtime::BlockFn<f64, u32> = generated::spmv_block::<f64, u32>;
    for _ in 0..=runs {
        let y = on_runtime::run_stored_inputs(&rt, &p, &k, &stored, &[n], Some(block));
        black_box(y.unwrap());
    }
}

/// While held, the calling thread, and the threads it starts, run on one CPU (the first it
/// may run on): a runtime built then, whose issuing thread helps its one worker, runs one
/// point at a time, as a one-thread kernel does. Dropped, the thread may run anywhere again.
struct OneCore(nix::sched::CpuSet);

impl OneCore {
    fn pin() -> OneCore {
        use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
        use nix::unistd::Pid;
        let all = sched_getaffinity(Pid::from_raw(0)).expect("this thread's CPUs");
        let first = (0..CpuSet::count())
            .find(|&c| all.is_set(c).unwrap_or(false))
            .expect("a thread runs on some CPU");
        let mut one = CpuSet::new();
        one.set(first).expect("a CPU index from the set");
        sched_setaffinity(Pid::from_raw(0), &one).expect("pinning to one CPU");
        OneCore(all)
    }
}

impl Drop for OneCore {
    fn drop(&mut self) {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &self.0);
    }
}

/// Section 6: P extended blocks (summation tree) vs P sequential launches (serial fold).
fn tree_vs_serial(t: &mut Table, a: &Tensor<f64, u32>, x: &Tensor<f64, u32>, reps: usize) {
    let n = a.dims()[0];
    let inputs = [a, x];
    let rt = Runtime::new(2);
    let block: on_runtime::BlockFn<f64, u32> = generated::spmv_block::<f64, u32>;
    for p in [2, 4, 8, 16, 32, 64] {
        let src = "y(i) = A(i,j) * x(j); A: csr";
        let (ke, pe) = planned(&format!("{src}; split(j, jo, ji, {p}); extend(jo)"));
        let (ks, ps) = planned(&format!("{src}; split(j, jo, ji, {p})"));
        let (mut t_tree, mut t_serial) = (f64::MAX, f64::MAX);
        for _ in 0..reps {
            let (s, y) = best_of(1, || {
                on_runtime::run_compiled(&rt, &pe, &ke, &inputs, &[n], block).unwrap()
            });
            t_tree = t_tree.min(s);
            black_box(y);
            let (s, y) = best_of(1, || {
                on_runtime::run_compiled(&rt, &ps, &ks, &inputs, &[n], block).unwrap()
            });
            t_serial = t_serial.min(s);
            black_box(y);
        }
        t.row(
            &format!("{p} extended blocks, summation tree"),
            "ms",
            t_tree * 1e3,
            &format!("{p} sequential launches"),
            t_serial * 1e3,
            false,
        );
    }
    t.figure(
        "peak_rss_mib_after_reductions",
        tessera_benches::peak_rss_bytes() as f64 / (1 << 20) as f64,
    );
}

/// How long each contestant of the warm figures runs untimed before it is timed.
const HOT: std::time::Duration = std::time::Duration::from_millis(300);

/// Section 5: compiled row-split plans vs the unscheduled parallel kernel, SpMV and SpMM.
fn compiled_rows(
    t: &mut Table,
    a: &Tensor<f64, u32>,
    x: &Tensor<f64, u32>,
    blocks: usize,
    reps: usize,
) {
    let n = a.dims()[0];
    let cols = 16;
    let bs: Vec<f64> = (0..n * cols).map(|i| (i % 7) as f64 - 3.0).collect();
    let b = Tensor::<f64, u32>::dense_from_vec(vec![n, cols], bs).unwrap();
    type Par = fn(&[&Tensor<f64, u32>], &[usize]) -> Tensor<f64, u32>;
    /// (name, statement, inputs, output dimensions, parallel kernel, block kernel).
    type Case<'a> = (
        &'a str,
        &'a str,
        Vec<&'a Tensor<f64, u32>>,
        Vec<usize>,
        Par,
        on_runtime::BlockFn<f64, u32>,
    );
    let cases: [Case; 2] = [
        (
            "SpMV",
            "y(i) = A(i,j) * x(j); A: csr",
            vec![a, x],
            vec![n],
            generated::spmv_par::<f64, u32>,
            generated::spmv_block::<f64, u32>,
        ),
        (
            "SpMM (16 columns)",
            "C(i,k) = A(i,j) * B(j,k); A: csr",
            vec![a, &b],
            vec![n, cols],
            generated::spmm_par::<f64, u32>,
            generated::spmm_block::<f64, u32>,
        ),
    ];
    for (name, src, inputs, out_dims, par, block) in cases {
        let (k, p) = planned(&format!("{src}; split(i, io, ii, {blocks})"));
        for threads in [1, 2] {
            // One core: `Runtime::new(1)` is one worker plus the issuing thread (which runs
            // points while it waits), two-wide on two cores; pinned to one CPU, it and the
            // one-thread kernel run on one core each, like for like.
            let _pin = (threads == 1).then(OneCore::pin);
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let rt = Runtime::new(threads);
            // The inputs held in the runtime's stores once (as `tensor!(rt => ...)` and an
            // iterative solver hold them): each run reads them where they are.
            let stored: Vec<Stored<f64, u32>> = inputs
                .iter()
                .map(|t| Stored::from_tensor(&rt, (*t).clone()).unwrap())
                .collect();
            let stored: Vec<&Stored<f64, u32>> = stored.iter().collect();
            // One untimed run: the runtime computes the images of stores once and reuses them
            // while the stores are unchanged (what a solver's second iteration sees).
            let warm = on_runtime::run_stored(&rt, &p, &k, &stored, &out_dims, Some(block));
            black_box(warm.unwrap().to_tensor(&rt).unwrap());
            // Interleaved: the plan over host tensors, over stored ones, then the kernel,
            // repeated; the median of each.
            let (mut t_plan, mut t_stored, mut t_par) = (vec![], vec![], vec![]);
            let mut t_cloned = vec![];
            // Analysis (ns, launches) of the runs over host tensors and over stored ones.
            let (mut a_host, mut a_stored) = ((0, 0), (0, 0));
            let analysed = |acc: &mut (u64, u64), before: &tessera_runtime::Stats| {
                let d = rt.stats().since(before);
                *acc = (acc.0 + d.analysis_ns, acc.1 + d.tasks_issued);
            };
            for _ in 0..reps {
                let before = rt.stats();
                let (s, y) = best_of(1, || {
                    on_runtime::run_compiled(&rt, &p, &k, &inputs, &out_dims, block).unwrap()
                });
                t_plan.push(s);
                analysed(&mut a_host, &before);
                // The host path as it was: each tensor cloned whole on one thread, then moved.
                let (s, yc) = best_of(1, || {
                    let owned = inputs.iter().map(|t| (*t).clone()).collect();
                    on_runtime::run_compiled_owned(&rt, &p, &k, owned, &out_dims, block).unwrap()
                });
                t_cloned.push(s);
                let before = rt.stats();
                let (s, ys) = best_of(1, || {
                    let y = on_runtime::run_stored(&rt, &p, &k, &stored, &out_dims, Some(block));
                    y.unwrap().into_tensor(&rt).unwrap()
                });
                t_stored.push(s);
                analysed(&mut a_stored, &before);
                let (s, want) = best_of(1, || pool.install(|| par(&inputs, &out_dims)));
                t_par.push(s);
                for got in [&y, &ys, &yc] {
                    assert_eq!(
                        got.vals(),
                        want.vals(),
                        "{name}: the plan gives the kernel's answer"
                    );
                }
            }
            let t_par = median(t_par);
            let m_plan = median(t_plan);
            t.row(
                &format!("{name} row-split plan, compiled, {threads}t"),
                "ms",
                m_plan * 1e3,
                &format!("parallelize(i) kernel, {threads}t"),
                t_par * 1e3,
                false,
            );
            t.row(
                &format!("{name} host-tensor plan, {threads}t"),
                "ms",
                m_plan * 1e3,
                "tensors cloned whole, then moved",
                median(t_cloned) * 1e3,
                false,
            );
            t.row(
                &format!("{name} plan over stored inputs, {threads}t"),
                "ms",
                median(t_stored) * 1e3,
                &format!("parallelize(i) kernel, {threads}t"),
                t_par * 1e3,
                false,
            );
            // Warm: each contestant `reps` times back to back, its own inputs staying in cache.
            // Interleaved, the contestants' separate copies of A evict each other from the
            // last-level cache, and the cold parallel kernel barely gains from a second thread
            // (quiet machine: 1.5-1.9 ms at 2t interleaved, 0.54 ms warm), so the interleaved
            // ratio alone flatters the plan; both are reported. Each contestant first runs
            // untimed for `HOT` back to back: on this VM a thread woken after a short sleep
            // often starts about as late as a 0.5 ms kernel lasts (`perf sched latency`: ~1 ms
            // average delay), so rayon's second worker, asleep between short runs, joined too
            // late and the 2-thread kernel timed at its 1-thread speed in 9 runs but not in 200.
            let warm = |f: &mut dyn FnMut()| {
                let hot = Instant::now();
                while hot.elapsed() < HOT {
                    f();
                }
                median((0..reps).map(|_| best_of(1, &mut *f).0).collect())
            };
            let warm_stored = warm(&mut || {
                let y = on_runtime::run_stored(&rt, &p, &k, &stored, &out_dims, Some(block));
                black_box(y.unwrap().into_tensor(&rt).unwrap());
            });
            let warm_par = warm(&mut || {
                black_box(pool.install(|| par(&inputs, &out_dims)));
            });
            t.row(
                &format!("{name} plan over stored inputs, warm, {threads}t"),
                "ms",
                warm_stored * 1e3,
                &format!("parallelize(i) kernel, warm, {threads}t"),
                warm_par * 1e3,
                false,
            );
            if threads == 2 {
                let per = |(ns, n): (u64, u64)| ns as f64 / 1e3 / n.max(1) as f64;
                t.figure(&format!("{name} analysis_us_per_launch, host"), per(a_host));
                t.figure(
                    &format!("{name} analysis_us_per_launch, stored"),
                    per(a_stored),
                );
            }
        }
    }
}
