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
//!    `parallelize(i)` at the same thread count (goal at 2 threads: ≥ 0.9× its speed).
//!
//! Options (environment): `TESSERA_BENCH_N` rows (default 100 000), `TESSERA_BENCH_NNZ_ROW`
//! nonzeros per row (default 8), `TESSERA_BENCH_BLOCKS` (default 8), `TESSERA_BENCH_REPS`
//! (default 3, best of).

use std::hint::black_box;
use tessera_benches::{best_of, env_or, Table};
use tessera_compiler::ir::{Block, Kernel};
use tessera_compiler::plan::{self, on_runtime, Plan};
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
    t.print();
}

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
    let cases: [(
        &str,
        &str,
        Vec<&Tensor<f64, u32>>,
        Vec<usize>,
        Par,
        on_runtime::BlockFn<f64, u32>,
    ); 2] = [
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
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let rt = Runtime::new(threads);
            // Interleaved: the plan, then the kernel, repeated; best of each.
            let (mut t_plan, mut t_par) = (f64::MAX, f64::MAX);
            for _ in 0..reps {
                let (s, y) = best_of(1, || {
                    on_runtime::run_compiled(&rt, &p, &k, &inputs, &out_dims, block).unwrap()
                });
                t_plan = t_plan.min(s);
                let (s, want) = best_of(1, || pool.install(|| par(&inputs, &out_dims)));
                t_par = t_par.min(s);
                assert_eq!(
                    y.vals(),
                    want.vals(),
                    "{name}: the plan gives the kernel's answer"
                );
            }
            t.row(
                &format!("{name} row-split plan, compiled, {threads}t"),
                "ms",
                t_plan * 1e3,
                &format!("parallelize(i) kernel, {threads}t"),
                t_par * 1e3,
                false,
            );
        }
    }
}
