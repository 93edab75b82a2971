//! The task runtime across ranks (control replication), on thread ranks of this process: the
//! 1-d stencil, CG (as written, and with its convergence test one iteration late) and SpMV at
//! 1, 2 and 4 ranks of one thread each, beside one rank (strong scaling; for the stencil weak
//! scaling too) and, for the stencil, beside a hand-written halo exchange over the same transport
//! doing the same work; the CPU time of all ranks beside one rank's (what ranks add, which
//! the machine's other load does not change); bytes moved ÷ the analytic minimum; bytes of
//! store elements each rank
//! holds after SpMV ÷ one rank's (`Stats::bytes_resident`; goal ≤ 0.35 at 4 ranks); and the
//! same CG written by hand on 1, 2 and 4 std threads (`ranks/hand_cg.rs`), the ceiling the
//! machine allows.
//!
//! Last, SpMV on a generated matrix of a few GB (`TESSERA_BENCH_SPMV_GB`, default 2; 0 skips),
//! every rank generating and holding only its rows (`ranks/big_spmv.rs`): time per multiply
//! beside one rank's, and bytes each rank holds beside one rank's.
//! `TESSERA_BENCH_ONLY=stencil|sparse|big` runs one part.
//!
//! Every rank runs a runtime of one processor; on this 2-core machine 4 ranks oversubscribe.
//! Ranks (and the hand-written CG's threads) are bound to cores as `mpirun` binds processes
//! (`run_ranks_bound`); `TESSERA_BENCH_BIND=0` leaves them to the scheduler.
//! Times are per step / iteration / multiply, the slowest rank's, median of
//! `TESSERA_BENCH_REPS` (default 5) interleaved runs. Sizes scale with `TESSERA_BENCH_SCALE`.
//! MPI ranks run the same code under `mpirun` (the `stencil` and `cg` examples, and
//! `runtime/tests/mpi_launch.rs`); this bench does not start mpirun.

#[path = "../../runtime/examples/sparse/mod.rs"]
mod sparse;

#[path = "ranks/hand_cg.rs"]
mod hand_cg;

#[path = "ranks/big_spmv.rs"]
mod big_spmv;

#[path = "ranks/work.rs"]
mod work;

use sparse::{cg, Csr, HostCsr};
use std::sync::Arc;
use std::time::Instant;
use tessera_benches::{env_or, median, Table};
use tessera_runtime::transport::{
    run_ranks, run_ranks_bound, Communicator, ThreadComm, TransportError,
};
use tessera_runtime::{Result, Runtime, Stats};
use work::{
    cg_lagged_runtime, cg_runtime, cpu_now, cpu_since, max_diff, stencil_runtime, HandBlock,
    Measured,
};

/// A run on several ranks: the slowest rank's seconds, every rank's statistics, and the
/// process CPU seconds the last rank to finish measured (its window covers the others').
type Timed = (f64, Vec<Stats>, f64);

/// One contestant of a race: a run on some ranks.
type Contestant<'a> = Box<dyn Fn() -> Timed + 'a>;

/// Runs `f` on `n` thread ranks bound to cores as `mpirun` binds processes
/// (`run_ranks_bound`), or unbound with `TESSERA_BENCH_BIND=0` (`run_ranks`: then the two
/// ranks of a 2-rank run often share one core of this VM, and CG at 2 ranks ran at 1.0-1.3x
/// one rank instead of 1.5-1.7x).
fn launch<T: Send, E: Send + std::fmt::Display + From<TransportError>>(
    n: usize,
    f: impl Fn(&ThreadComm) -> std::result::Result<T, E> + Sync,
) -> Vec<std::result::Result<T, E>> {
    if std::env::var("TESSERA_BENCH_BIND").is_ok_and(|v| v == "0") {
        run_ranks(n, f)
    } else {
        run_ranks_bound(n, f)
    }
}

/// `work` on `ranks` thread ranks (one processor each), timed by `work` itself; the slowest
/// rank's time and every rank's statistics.
fn on_ranks(ranks: usize, work: impl Fn(&Runtime) -> Result<Measured> + Sync) -> Timed {
    let all = launch(ranks, |c: &ThreadComm| {
        let mut b = Runtime::builder().threads(1).min_piece_size(256);
        if ranks > 1 {
            b = b.communicator(Arc::new(c.clone()));
            // `TESSERA_BENCH_RANKS_WINDOW=N`: a fixed window of N across ranks instead of the
            // default (1: each task launched at submit, the default before issue 12's fusion).
            if let Some(n) = std::env::var("TESSERA_BENCH_RANKS_WINDOW")
                .ok()
                .and_then(|v| v.parse().ok())
            {
                b = b.window_size(n);
            }
        }
        work(&b.try_build()?)
    });
    let got: Vec<Measured> = all
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("a rank failed: {e}")))
        .collect();
    let slowest = got.iter().map(|(t, _, _)| *t).fold(0.0, f64::max);
    let cpu = got.iter().map(|(_, _, c)| *c).fold(0.0, f64::max);
    (slowest, got.into_iter().map(|(_, s, _)| s).collect(), cpu)
}

/// The same stencil written by hand on thread ranks: each rank owns a block of cells and
/// swaps one boundary cell with each neighbour per step (what an MPI halo exchange does).
fn stencil_by_hand(comm: &ThreadComm, n: usize, steps: usize) -> f64 {
    let (r, size) = (comm.rank(), comm.size());
    let mut block = HandBlock::new(n, r, size);
    let m = block.m();
    let exchange = |cur: &mut [f64]| {
        if r > 0 {
            comm.send(r - 1, 1, cur[1].to_le_bytes().to_vec()).unwrap();
        }
        if r + 1 < size {
            comm.send(r + 1, 2, cur[m].to_le_bytes().to_vec()).unwrap();
            cur[m + 1] = f64::from_le_bytes(comm.recv(r + 1, 1).unwrap()[..8].try_into().unwrap());
        }
        if r > 0 {
            cur[0] = f64::from_le_bytes(comm.recv(r - 1, 2).unwrap()[..8].try_into().unwrap());
        }
    };
    comm.all_gather(&[]).unwrap(); // start together
    let t = Instant::now();
    for _ in 0..steps {
        exchange(&mut block.cur);
        block.step();
    }
    let secs = t.elapsed().as_secs_f64() / steps as f64;
    block.check(n, steps, r);
    secs
}

/// Seconds per SpMV: `reps` multiplies of one vector into one output `y`, so each waits for
/// the one before (as in an iterative method). Independent multiplies would run two at a time
/// on one rank (its worker and its issuing thread, which runs tasks while it waits in
/// `fence`), and one rank would then use both cores: not a one-rank baseline.
fn spmv_runtime(rt: &Runtime, a: &HostCsr, reps: usize) -> Result<Measured> {
    sparse::register_spmv(rt)?;
    let m = Csr::upload(rt, a)?;
    let x = rt.from_vec(&[a.cols], (0..a.cols).map(|i| (i % 7) as f64).collect())?;
    let y = sparse::spmv(rt, &m, &x)?; // warm-up: images and partitions
    rt.read::<f64>(&y.slice(0, 0..1)?)?;
    let before = rt.stats();
    let (t, cpu) = (Instant::now(), cpu_now());
    for _ in 0..reps {
        sparse::spmv_into(rt, &m, &x, &y)?;
    }
    rt.fence()?;
    let secs = t.elapsed().as_secs_f64() / reps as f64;
    let cpu = cpu_since(cpu) / reps as f64;
    let stats = rt.stats().since(&before); // bytes_resident: before `read` gathers y and x
    let y = rt.read::<f64>(&y)?;
    assert_eq!(y, a.spmv(&rt.read::<f64>(&x)?), "spmv");
    Ok((secs, stats, cpu))
}

/// Medians over `reps` interleaved rounds of each contestant (index into `runs`).
fn race(reps: usize, runs: &[&dyn Fn() -> Timed]) -> Vec<Timed> {
    let mut times = vec![vec![]; runs.len()];
    let mut cpus = vec![vec![]; runs.len()];
    let mut stats = vec![vec![]; runs.len()];
    for _ in 0..reps.max(1) {
        for (i, run) in runs.iter().enumerate() {
            let (t, s, c) = run();
            times[i].push(t);
            cpus[i].push(c);
            stats[i] = s;
        }
    }
    times
        .into_iter()
        .zip(stats)
        .zip(cpus)
        .map(|((t, s), c)| (median(t), s, median(c)))
        .collect()
}

fn main() {
    let scale: f64 = env_or("TESSERA_BENCH_SCALE", 1.0);
    let reps: usize = env_or("TESSERA_BENCH_REPS", 5);
    let mut table = Table::new(&format!(
        "The runtime across thread ranks, 1 processor per rank (scale {scale}, median of {reps}; \
         ratio > 1: Tessera faster)"
    ));
    // `TESSERA_BENCH_ONLY=stencil`, `=sparse` (CG and SpMV) or `=big` (the few-GB SpMV) runs
    // one part (all when unset);
    // `=cg` runs CG alone, once, for instruction counts (below).
    let only = std::env::var("TESSERA_BENCH_ONLY").unwrap_or_default();
    let ranks_list = [1usize, 2, 4];
    if only == "cg" {
        cg_part(&mut table, scale);
        table.print();
        return;
    }
    if only.is_empty() || only.contains("stencil") {
        stencil_part(&mut table, scale, reps, &ranks_list);
    }
    if only.is_empty() || only.contains("sparse") {
        sparse_part(&mut table, scale, reps, &ranks_list);
    }
    if only.is_empty() || only.contains("big") {
        big_part(&mut table, &ranks_list);
    }
    table.figure(
        "peak rss MiB (all ranks of the process)",
        tessera_benches::peak_rss_bytes() as f64 / (1 << 20) as f64,
    );
    table.print();
}

/// The stencil at 1, 2 and 4 ranks beside one rank and the hand-written halo exchange.
fn stencil_part(table: &mut Table, scale: f64, reps: usize, ranks_list: &[usize]) {
    // About 1 ms of stencil work per step and rank at 2 ranks.
    let n = (2_000_000.0 * scale) as usize;
    let steps = 40;
    let runtime_runs: Vec<Contestant> = ranks_list
        .iter()
        .map(|&r| Box::new(move || on_ranks(r, |rt| stencil_runtime(rt, n, steps))) as Contestant)
        .collect();
    let hand_runs: Vec<Contestant> = ranks_list
        .iter()
        .map(|&r| {
            Box::new(move || {
                let t = launch(r, |c: &ThreadComm| {
                    Ok::<_, tessera_runtime::RuntimeError>(stencil_by_hand(c, n, steps))
                });
                let slowest = t.into_iter().map(|x| x.unwrap()).fold(0.0, f64::max);
                (slowest, vec![], 0.0)
            }) as Contestant
        })
        .collect();
    // Weak scaling: each rank `n / 2` cells (the strong runs' share at 2 ranks), on 1..r ranks.
    let per_rank = n / 2;
    let weak_runs: Vec<Contestant> = ranks_list
        .iter()
        .map(|&r| {
            Box::new(move || on_ranks(r, |rt| stencil_runtime(rt, per_rank * r, steps)))
                as Contestant
        })
        .collect();
    let all: Vec<&dyn Fn() -> Timed> = runtime_runs
        .iter()
        .chain(&hand_runs)
        .chain(&weak_runs)
        .map(|b| b.as_ref())
        .collect();
    let got = race(reps, &all);
    let runs = ranks_list.len();
    let (rt1, hand1) = (got[0].0, got[runs].0);
    table.row(
        "stencil step, 1 rank",
        "ms",
        rt1 * 1e3,
        "hand-written",
        hand1 * 1e3,
        false,
    );
    for (k, &r) in ranks_list.iter().enumerate().skip(1) {
        let (t, stats) = (&got[k].0, &got[k].1);
        let name = format!("stencil step, {r} ranks");
        table.row(&name, "ms", t * 1e3, "1 rank", rt1 * 1e3, false);
        table.row(
            &format!("{name}, CPU of all ranks"),
            "ms",
            got[k].2 * 1e3,
            "1 rank",
            got[0].2 * 1e3,
            false,
        );
        table.row(
            &format!("{name} vs hand-written"),
            "ms",
            t * 1e3,
            "hand-written halo",
            got[runs + k].0 * 1e3,
            false,
        );
        // Efficiency: one rank's time on its share ÷ r ranks' on r shares (1 is ideal).
        table.row(
            &format!(
                "stencil weak scaling, {r} ranks ({}k cells each)",
                per_rank / 1000
            ),
            "ms",
            got[2 * runs + k].0 * 1e3,
            "1 rank",
            got[2 * runs].0 * 1e3,
            false,
        );
        // Per step after the first, each inner boundary moves one cell each way.
        let sent: u64 = stats.iter().map(|s| s.bytes_sent).sum();
        let minimum = (2 * (r - 1) * 8 * (steps - 1)) as f64;
        table.figure(
            &format!("stencil {r} ranks bytes moved / minimum"),
            sent as f64 / minimum,
        );
    }
}

/// CG alone, one run per rank count (`TESSERA_BENCH_RANKS`, default `1,2`) of
/// `TESSERA_BENCH_CG_ITERS` iterations (default 20), for profilers: run it at two iteration
/// counts under `valgrind --tool=callgrind` (or cachegrind) and the difference per iteration
/// is what an iteration costs, setup excluded. Prints launches per iteration per rank.
fn cg_part(table: &mut Table, scale: f64) {
    let a = HostCsr::laplacian_2d((700.0 * scale.sqrt()) as usize);
    let b: Vec<f64> = (0..a.rows).map(|i| 1.0 + (i % 5) as f64).collect();
    let iters: usize = env_or("TESSERA_BENCH_CG_ITERS", 20);
    let ranks_list = work::ranks_from_env("1,2");
    for r in ranks_list {
        let (t, stats, cpu) = on_ranks(r, |rt| cg_runtime(rt, &a, &b, iters));
        let name = format!("cg iteration {}k rows, {r} ranks", a.rows / 1000);
        table.figure(&format!("{name}: ms"), t * 1e3);
        table.figure(&format!("{name}: CPU ms of all ranks"), cpu * 1e3);
        let s = &stats[0];
        let per = |v: u64| v as f64 / iters as f64;
        table.figure(
            &format!("{name}: tasks issued per iteration"),
            per(s.tasks_issued),
        );
        table.figure(
            &format!("{name}: tasks launched per iteration"),
            per(s.tasks_launched),
        );
        table.figure(
            &format!("{name}: messages sent per iteration (rank 0)"),
            per(s.messages_sent),
        );
        // The least a solve must move: each iteration, the `k` cells of `p` on each side of
        // each of the r − 1 block boundaries (the five-point stencil reaches one grid row);
        // at the end, `x` read on every rank (each receives the n − n/r cells it lacks).
        let k = (a.rows as f64).sqrt().round() as usize;
        let minimum = (iters * 2 * (r - 1) * k + (r - 1) * a.rows) * 8;
        let sent: u64 = stats.iter().map(|s| s.bytes_sent).sum();
        if r > 1 {
            table.figure(
                &format!("{name}: bytes moved / minimum"),
                sent as f64 / minimum as f64,
            );
        }
    }
}

/// The hand-written CG's `x` at every thread count against the sequential CG (the folds of
/// partial sums differ from the loop's order, so relative to the solution's size).
fn check_hand_cg(a: &HostCsr, b: &[f64], iters: usize) {
    let (want, _) = cg::solve_sequential(a, b, 0.0, iters);
    for threads in [1, 2, 4] {
        let (_, _, x) = hand_cg::solve(a, b, threads, iters);
        let (diff, size) = max_diff(&x, &want);
        assert!(
            diff <= 1e-10 * size,
            "hand-written CG on {threads} threads differs by {diff} (of {size})"
        );
    }
}

/// The hand-written CG's rows: `r` threads beside one thread (the speed-up this machine
/// allows: its cores share memory bandwidth), and the runtime at `r` ranks beside it.
fn hand_cg_rows(table: &mut Table, got: &[Timed], rows: usize, ranks_list: &[usize]) {
    let hand = 9; // after CG, SpMV and the lagged CG, three contestants each
    let (one, one_cpu) = (got[hand].0, got[hand].2);
    for (k, &r) in ranks_list.iter().enumerate() {
        let (t, cpu) = (got[hand + k].0, got[hand + k].2);
        let name = format!("cg iteration {}k rows, hand-written", rows / 1000);
        if k > 0 {
            table.row(
                &format!("{name}, {r} threads"),
                "ms",
                t * 1e3,
                "1 thread",
                one * 1e3,
                false,
            );
            table.row(
                &format!("{name}, {r} threads, CPU of all threads"),
                "ms",
                cpu * 1e3,
                "1 thread",
                one_cpu * 1e3,
                false,
            );
        }
        // Not the name of the row beside one rank: the JSON keys are the names.
        table.row(
            &format!(
                "cg iteration {}k rows, {r} ranks vs hand-written",
                rows / 1000
            ),
            "ms",
            got[k].0 * 1e3,
            &format!("hand {r} threads"),
            t * 1e3,
            false,
        );
    }
}

/// CG (both ways) and SpMV at 1, 2 and 4 ranks beside one rank; bytes resident per rank after
/// SpMV.
fn sparse_part(table: &mut Table, scale: f64, reps: usize, ranks_list: &[usize]) {
    let a = HostCsr::laplacian_2d((700.0 * scale.sqrt()) as usize);
    let b: Vec<f64> = (0..a.rows).map(|i| 1.0 + (i % 5) as f64).collect();
    let cg_runs: Vec<Contestant> = ranks_list
        .iter()
        .map(|&r| {
            let (a, b) = (&a, &b);
            Box::new(move || on_ranks(r, |rt| cg_runtime(rt, a, b, 20))) as Contestant
        })
        .collect();
    let lagged_runs: Vec<Contestant> = ranks_list
        .iter()
        .map(|&r| {
            let (a, b) = (&a, &b);
            Box::new(move || on_ranks(r, |rt| cg_lagged_runtime(rt, a, b, 20))) as Contestant
        })
        .collect();
    let spmv_runs: Vec<Contestant> = ranks_list
        .iter()
        .map(|&r| {
            let a = &a;
            Box::new(move || on_ranks(r, |rt| spmv_runtime(rt, a, 20))) as Contestant
        })
        .collect();
    // The ceiling: the same CG by hand on 1, 2 and 4 std threads (checked once, first).
    check_hand_cg(&a, &b, 20);
    let hand_runs: Vec<Contestant> = ranks_list
        .iter()
        .map(|&r| {
            let (a, b) = (&a, &b);
            Box::new(move || {
                let (secs, cpu, _) = hand_cg::solve(a, b, r, 20);
                (secs, vec![], cpu)
            }) as Contestant
        })
        .collect();
    let all: Vec<&dyn Fn() -> Timed> = cg_runs
        .iter()
        .chain(&spmv_runs)
        .chain(&lagged_runs)
        .chain(&hand_runs)
        .map(|b| b.as_ref())
        .collect();
    let got = race(reps, &all);
    hand_cg_rows(table, &got, a.rows, ranks_list);
    let what = [
        ("cg iteration", 0),
        ("spmv", 3),
        ("cg iteration (test one late)", 6),
    ];
    for (what, base) in what {
        let (one, one_cpu) = (got[base].0, got[base].2);
        if base != 3 {
            table.figure(
                &format!(
                    "{what} {}k rows, 1 rank: tasks launched per iteration",
                    a.rows / 1000
                ),
                got[base].1[0].tasks_launched as f64 / 20.0,
            );
        }
        for (k, &r) in ranks_list.iter().enumerate().skip(1) {
            let name = format!("{what} {}k rows, {r} ranks", a.rows / 1000);
            table.row(
                &name,
                "ms",
                got[base + k].0 * 1e3,
                "1 rank",
                one * 1e3,
                false,
            );
            if base != 3 {
                // Launches per iteration (what fusion saves), rank 0's (and one rank's, below).
                table.figure(
                    &format!("{name}: tasks launched per iteration"),
                    got[base + k].1[0].tasks_launched as f64 / 20.0,
                );
            }
            // The work all ranks did beside one rank's: what ranks add, whatever the load.
            table.row(
                &format!("{name}, CPU of all ranks"),
                "ms",
                got[base + k].2 * 1e3,
                "1 rank",
                one_cpu * 1e3,
                false,
            );
        }
    }
    // Memory: the bytes of store elements each rank holds after the multiplies (A, x and the
    // last y; before the check reads y back), the largest rank's beside one rank's.
    let resident = |stats: &[Stats]| stats.iter().map(|s| s.bytes_resident).max().unwrap_or(0);
    let one = resident(&got[3].1).max(1) as f64;
    for (k, &r) in ranks_list.iter().enumerate().skip(1) {
        table.figure(
            &format!("spmv {r} ranks: bytes resident per rank / 1 rank"),
            resident(&got[3 + k].1) as f64 / one,
        );
    }
}

/// SpMV on a generated matrix of a few GB (`TESSERA_BENCH_SPMV_GB`, default 2; 0 skips) at 1,
/// 2 and 4 ranks, each rank generating and holding only its rows (`big_spmv`); medians of
/// `TESSERA_BENCH_BIG_REPS` (default 3) interleaved runs of 4 multiplies each.
fn big_part(table: &mut Table, ranks_list: &[usize]) {
    let gb: f64 = env_or("TESSERA_BENCH_SPMV_GB", 2.0);
    if gb <= 0.0 {
        return;
    }
    let big = big_spmv::Big::of_gb(gb);
    let reps: usize = env_or("TESSERA_BENCH_BIG_REPS", 3);
    let runs: Vec<Contestant> = ranks_list
        .iter()
        .map(|&r| Box::new(move || on_ranks(r, |rt| big_spmv::run(rt, big, 4))) as Contestant)
        .collect();
    let all: Vec<&dyn Fn() -> Timed> = runs.iter().map(|b| b.as_ref()).collect();
    let got = race(reps, &all);
    let what = format!(
        "spmv {:.1} GB matrix ({}M rows)",
        big.bytes() / 1e9,
        big.rows / 1_000_000
    );
    let resident = |stats: &[Stats]| stats.iter().map(|s| s.bytes_resident).max().unwrap_or(0);
    let one = resident(&got[0].1).max(1) as f64;
    table.figure(&format!("{what}, 1 rank: ms"), got[0].0 * 1e3);
    for (k, &r) in ranks_list.iter().enumerate().skip(1) {
        table.row(
            &format!("{what}, {r} ranks"),
            "ms",
            got[k].0 * 1e3,
            "1 rank",
            got[0].0 * 1e3,
            false,
        );
        table.figure(
            &format!("{what}, {r} ranks: bytes resident per rank / 1 rank"),
            resident(&got[k].1) as f64 / one,
        );
    }
}
