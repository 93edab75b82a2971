//! The runtime across MPI ranks — processes started by `mpirun`, as users run it — beside one
//! rank and beside a hand-written MPI halo-exchange stencil (the `mpi` crate) doing the same
//! work: the 1-d stencil at about 1 ms of work per step and rank (strong and weak scaling), and
//! CG on the 2-d Laplacian (as written, and with its convergence test one iteration late), at
//! 1, 2 and 4 ranks. The `ranks` bench times the same code on thread ranks of one process.
//!
//! ```text
//! CARGO_TARGET_DIR=target/mpi cargo bench -p tessera-benches --features mpi --bench mpi_ranks
//! ```
//!
//! (after `scripts/install-deps.sh`, which installs OpenMPI). Run so, this binary is the
//! driver: it starts `mpirun -n R` of itself for every contestant and rank count,
//! `TESSERA_BENCH_REPS` times (default 5) interleaved, and prints the median of the slowest
//! rank's seconds per step or iteration, with the ratios and one JSON object as its last
//! line. Under `mpirun` (`--job NAME`) it is one rank of one contestant and prints one
//! `RESULT` line. `TESSERA_BENCH_RANKS` (default `1,2,4`) picks the rank counts,
//! `TESSERA_BENCH_SCALE` the sizes, `TESSERA_BENCH_MPIRUN` the launcher (default `mpirun
//! --allow-run-as-root --oversubscribe`, whose default binding puts one process on a core
//! up to 2 ranks on this machine). Every contestant checks its answer against the
//! sequential loop on every rank.

#[path = "../../runtime/examples/sparse/mod.rs"]
mod sparse;

#[path = "ranks/work.rs"]
mod work;

use mpi::collective::CommunicatorCollectives as _;
use mpi::point_to_point::{Destination, Source};
use mpi::topology::Communicator as _;
use sparse::HostCsr;
use std::process::Command;
use std::time::Instant;
use tessera_benches::{env_or, median, Table};
use tessera_runtime::transport::{launched_by_mpirun, mpi::run_world_threaded, Communicator as _};
use tessera_runtime::{Result, Runtime, RuntimeError};

/// The contestants, as `--job` names.
const JOBS: [&str; 5] = ["stencil", "stencil-weak", "stencil-hand", "cg", "cg-late"];

/// What one rank of a job prints for the driver.
const RESULT: &str = "TESSERA_MPI_RESULT";

/// Stencil cells: about 1 ms of work per step and rank at 2 ranks (as in the `ranks` bench).
fn stencil_cells(scale: f64) -> usize {
    (2_000_000.0 * scale) as usize
}

const STENCIL_STEPS: usize = 40;
const CG_ITERS: usize = 20;

fn laplacian(scale: f64) -> HostCsr {
    HostCsr::laplacian_2d((700.0 * scale.sqrt()) as usize)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--job") {
        Some(i) => {
            let job = args.get(i + 1).map(String::as_str).unwrap_or("");
            if let Err(e) = rank_job(job) {
                eprintln!("mpi_ranks --job {job}: {e}");
                std::process::exit(1);
            }
        }
        None if launched_by_mpirun() => {
            eprintln!("mpi_ranks: under mpirun this bench runs one contestant (--job NAME)");
            std::process::exit(2);
        }
        None => drive(),
    }
}

/// One rank of contestant `job`: times it and prints this rank's seconds per step or
/// iteration, its bytes sent and its peak RSS.
fn rank_job(job: &str) -> Result<()> {
    let scale: f64 = env_or("TESSERA_BENCH_SCALE", 1.0);
    let (rank, secs, sent) = match job {
        "stencil-hand" => stencil_by_hand(stencil_cells(scale), STENCIL_STEPS),
        "stencil" | "stencil-weak" | "cg" | "cg-late" => run_world_threaded(|comm| {
            let size = comm.size();
            let mut b = Runtime::builder().threads(1).min_piece_size(256);
            if size > 1 {
                b = b.communicator(comm.clone());
            }
            let rt = b.try_build()?;
            let (secs, stats, _) = match job {
                "stencil" => work::stencil_runtime(&rt, stencil_cells(scale), STENCIL_STEPS)?,
                // Weak scaling: each rank the strong runs' share at 2 ranks.
                "stencil-weak" => {
                    let n = stencil_cells(scale) / 2 * size;
                    work::stencil_runtime(&rt, n, STENCIL_STEPS)?
                }
                _ => {
                    let a = laplacian(scale);
                    let b: Vec<f64> = (0..a.rows).map(|i| 1.0 + (i % 5) as f64).collect();
                    if job == "cg" {
                        work::cg_runtime(&rt, &a, &b, CG_ITERS)?
                    } else {
                        work::cg_lagged_runtime(&rt, &a, &b, CG_ITERS)?
                    }
                }
            };
            Ok::<_, RuntimeError>((rt.rank(), secs, stats.bytes_sent))
        })?,
        other => {
            return Err(RuntimeError::Transport(format!(
                "unknown job `{other}` (one of {JOBS:?})"
            )))
        }
    };
    let peak = tessera_benches::peak_rss_bytes();
    println!("{RESULT} {rank} {secs} {sent} {peak}");
    Ok(())
}

/// The stencil written by hand over MPI: each rank owns a block of cells and swaps one
/// boundary cell with each neighbour per step (non-blocking sends, blocking receives), then
/// runs the same loop as the runtime's task body. Returns (rank, seconds per step, bytes sent).
fn stencil_by_hand(n: usize, steps: usize) -> (usize, f64, u64) {
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let (r, size) = (world.rank() as usize, world.size() as usize);
    let mut block = work::HandBlock::new(n, r, size);
    let m = block.m();
    let mut sent = 0u64;
    world.barrier();
    let t = Instant::now();
    for _ in 0..steps {
        let cur = &mut block.cur;
        let (first, last) = (cur[1], cur[m]);
        mpi::request::scope(|scope| {
            let mut reqs = vec![];
            if r > 0 {
                let left = world.process_at_rank(r as i32 - 1);
                reqs.push(left.immediate_send_with_tag(scope, &first, 1));
            }
            if r + 1 < size {
                let right = world.process_at_rank(r as i32 + 1);
                reqs.push(right.immediate_send_with_tag(scope, &last, 2));
                cur[m + 1] = right.receive_with_tag::<f64>(1).0;
            }
            if r > 0 {
                cur[0] = world
                    .process_at_rank(r as i32 - 1)
                    .receive_with_tag::<f64>(2)
                    .0;
            }
            sent += 8 * reqs.len() as u64;
            for q in reqs {
                q.wait();
            }
        });
        block.step();
    }
    let secs = t.elapsed().as_secs_f64() / steps as f64;
    block.check(n, steps, r);
    (r, secs, sent)
}

/// What a job reported: the slowest rank's seconds, the bytes all ranks sent and the largest
/// peak RSS of one rank (each rank is a process).
struct Ran {
    secs: f64,
    sent: u64,
    peak: u64,
}

/// Starts `ranks` processes of `job` under the launcher and reads their `RESULT` lines.
fn launch(launcher: &[String], ranks: usize, job: &str) -> std::result::Result<Ran, String> {
    let me = std::env::current_exe().map_err(|e| format!("this bench's path: {e}"))?;
    let out = Command::new(&launcher[0])
        .args(&launcher[1..])
        .arg("-n")
        .arg(ranks.to_string())
        .arg(&me)
        .args(["--job", job])
        .output()
        .map_err(|e| {
            format!(
                "cannot start `{}` ({e}): install OpenMPI with scripts/install-deps.sh",
                launcher[0]
            )
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{job} on {ranks} ranks failed ({}):\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let lines: Vec<(f64, u64, u64)> = stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix(RESULT)?.split_whitespace().skip(1);
            let secs = w.next()?.parse().ok()?;
            Some((secs, w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect();
    if lines.len() != ranks {
        return Err(format!(
            "{job} on {ranks} ranks: {} result lines, expected one per rank:\n{stdout}",
            lines.len()
        ));
    }
    Ok(Ran {
        secs: lines.iter().map(|l| l.0).fold(0.0, f64::max),
        sent: lines.iter().map(|l| l.1).sum(),
        peak: lines.iter().map(|l| l.2).max().unwrap_or(0),
    })
}

/// The driver: every (job, rank count) `reps` times, interleaved; the table and the JSON.
fn drive() {
    let scale: f64 = env_or("TESSERA_BENCH_SCALE", 1.0);
    let reps: usize = env_or("TESSERA_BENCH_REPS", 5);
    let ranks_list = work::ranks_from_env("1,2,4");
    let launcher: Vec<String> = std::env::var("TESSERA_BENCH_MPIRUN")
        .unwrap_or_else(|_| "mpirun --allow-run-as-root --oversubscribe".into())
        .split_whitespace()
        .map(String::from)
        .collect();
    let runs: Vec<(&str, usize)> = JOBS
        .iter()
        .flat_map(|&j| ranks_list.iter().map(move |&r| (j, r)))
        .collect();
    let mut secs = vec![vec![]; runs.len()];
    let mut sent = vec![0; runs.len()];
    let mut peak = vec![0; runs.len()];
    for _ in 0..reps.max(1) {
        for (i, &(job, r)) in runs.iter().enumerate() {
            match launch(&launcher, r, job) {
                Ok(ran) => {
                    secs[i].push(ran.secs);
                    sent[i] = ran.sent;
                    peak[i] = ran.peak;
                }
                Err(e) => {
                    eprintln!("mpi_ranks: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
    let time = |job: &str, r: usize| {
        let i = runs.iter().position(|&x| x == (job, r))?;
        Some(Ran {
            secs: median(secs[i].clone()),
            sent: sent[i],
            peak: peak[i],
        })
    };
    let mut table = Table::new(&format!(
        "The runtime across MPI ranks (mpirun, 1 processor per rank; scale {scale}, median of \
         {reps}; ratio > 1: Tessera faster)"
    ));
    rows(&mut table, &ranks_list, &time, scale);
    table.print();
}

/// The table's rows from the medians `time(job, ranks)`.
fn rows(
    table: &mut Table,
    ranks_list: &[usize],
    time: &dyn Fn(&str, usize) -> Option<Ran>,
    scale: f64,
) {
    let n = stencil_cells(scale);
    let cg_rows = laplacian(scale).rows;
    for &r in ranks_list {
        let (Some(ran), Some(hand)) = (time("stencil", r), time("stencil-hand", r)) else {
            continue;
        };
        let (t, hand) = (ran.secs, hand.secs);
        // Row names differ per alternative: the JSON keys are the names.
        let name = format!("stencil step {}k cells, {r} ranks", n / 1000);
        table.row(&name, "ms", t * 1e3, "hand-written MPI", hand * 1e3, false);
        if r > 1 {
            if let Some(one) = time("stencil", 1) {
                let scaling = format!("{name}, scaling");
                table.row(&scaling, "ms", t * 1e3, "1 rank", one.secs * 1e3, false);
            }
            if let (Some(one), Some(weak)) = (time("stencil-weak", 1), time("stencil-weak", r)) {
                // Efficiency: one rank on its share ÷ r ranks on r shares (1 is ideal).
                let name = format!("stencil weak scaling, {r} ranks ({}k cells each)", n / 2000);
                table.row(
                    &name,
                    "ms",
                    weak.secs * 1e3,
                    "1 rank",
                    one.secs * 1e3,
                    false,
                );
            }
            // Each step after the first, each inner boundary moves one cell each way.
            let minimum = (2 * (r - 1) * 8 * (STENCIL_STEPS - 1)) as f64;
            table.figure(
                &format!("stencil {r} ranks bytes moved / minimum"),
                ran.sent as f64 / minimum,
            );
        }
    }
    for (job, label) in [
        ("cg", "cg iteration"),
        ("cg-late", "cg iteration (test one late)"),
    ] {
        let Some(one) = time(job, 1) else {
            continue;
        };
        for &r in ranks_list.iter().filter(|&&r| r > 1) {
            if let Some(t) = time(job, r) {
                let name = format!("{label} {}k rows, {r} ranks", cg_rows / 1000);
                table.row(&name, "ms", t.secs * 1e3, "1 rank", one.secs * 1e3, false);
            }
        }
    }
    // Each rank is a process. Its peak includes what every contestant builds whole on every
    // rank (the initial vector it hands to `from_vec`, the sequential loop it checks against,
    // the final `read`), so it falls little with ranks; the runtime's own holdings per rank
    // are the `ranks` bench's `bytes_resident` rows (0.50 at 2 ranks, 0.25 at 4).
    for job in ["stencil", "cg"] {
        for &r in ranks_list {
            if let Some(t) = time(job, r) {
                let mib = t.peak as f64 / (1 << 20) as f64;
                table.figure(
                    &format!("{job} {r} ranks: peak RSS MiB per rank (largest)"),
                    mib,
                );
            }
        }
    }
}
