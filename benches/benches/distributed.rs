//! Distributed split and merge of a generated `.tcs` tensor at 1, 2 and 4 ranks, beside the
//! single-process streaming conversion (`tessera-data convert`) of the same tensor, and at 2
//! and 4 ranks beside 1 rank (the speed-up, which issue 16 wants at least 1.6 at 2 ranks).
//!
//! The machine is shared, so wall times alone say little about the speed-up: each rank also
//! reports the CPU time of its thread, and the busiest rank's CPU time at N ranks beside the
//! one rank's is the speed-up an idle machine would give if nothing but CPU counted (waiting
//! for the disk, e.g. the final flushes, is not in it). Both are printed, with the load
//! average before and after, and beside the wall-time speed-up of ideal parallel work (a
//! CPU-bound loop shared by the same number of threads), run in the same rounds: on a machine
//! whose other tenants leave one core free, no program gets a wall-time speed-up at 2 ranks.
//!
//! Each measured job runs in a child process (this program re-run with `TESSERA_BENCH_JOB`)
//! so that its peak RSS is its own; thread-rank jobs report the peak of the whole process
//! (all its ranks). With `TESSERA_DATA_MPI` set to a `tessera-data` built with
//! `--features mpi`, the same jobs also run as MPI ranks under `mpirun`, each rank a process
//! reporting its own peak RSS. Files are read warm from the page cache.
//!
//! Environment:
//! - `TESSERA_BENCH_DISTRIBUTED_BYTES`: approximate size of the `.tcs` tensor (default 256 MiB);
//! - `TESSERA_BENCH_DISTRIBUTED_REPS`: interleaved rounds, medians reported (default 3);
//! - `TESSERA_BENCH_DIR`: where to put the files (default: the system temp directory);
//! - `TESSERA_DATA_MPI`: path of an MPI-enabled `tessera-data` (optional).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tessera_benches::{child_job, env_or, parse_child_peak, peak_rss_bytes, Table};
use tessera_datasets::generate::{generate, Kind, Spec};
use tessera_formats::{convert, ConvertOptions, NoProgress};
use tessera_runtime::io::{merge_dir, split_file, NoProgress as NoIoProgress, SplitSpec};
use tessera_runtime::transport::run_ranks;

/// Dimensions of the generated tensor (CSF, 32-bit coordinates, f64 values).
const DIMS: [u64; 3] = [200_000, 100_000, 1_000];
/// Bytes per entry of a sparse rank-3 `.tcs` of this shape, about: vals 8 + crd 4 at the last
/// level, a little more for the upper levels.
const ENTRY_BYTES: u64 = 14;
const SPLIT: &str = "0:4,1:2";
const RANKS: [usize; 3] = [1, 2, 4];

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

#[derive(Clone, Copy)]
struct Job {
    seconds: f64,
    peak: u64,
    /// CPU seconds of the busiest rank's thread (thread-rank jobs; NaN otherwise).
    busiest_cpu: f64,
}

/// Seconds that a fixed amount of CPU-bound work (an integer hash chain, no memory traffic)
/// takes shared by `threads` threads: beside 1 thread, the speed-up the shared machine gives
/// perfectly parallel work at this moment.
fn ideal_parallel(threads: usize) -> f64 {
    const STEPS: u64 = 600_000_000;
    let t = Instant::now();
    std::thread::scope(|s| {
        for k in 0..threads {
            s.spawn(move || {
                let mut x = k as u64 + 1;
                for _ in 0..STEPS / threads as u64 {
                    x = (x ^ (x >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                }
                std::hint::black_box(x)
            });
        }
    });
    t.elapsed().as_secs_f64()
}

/// The 1-minute load average.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The median of `jobs`' field `f`.
fn median_of(jobs: &[Job], f: impl Fn(&Job) -> f64) -> f64 {
    let mut v: Vec<f64> = jobs.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Medians of each figure of `jobs` (each figure's own median).
fn median(jobs: &[Job]) -> Job {
    Job {
        seconds: median_of(jobs, |j| j.seconds),
        peak: median_of(jobs, |j| j.peak as f64) as u64,
        busiest_cpu: median_of(jobs, |j| j.busiest_cpu),
    }
}

/// Whether two `.tcs` files hold the same tensor (levels, values, dimensions, format).
fn same_tensor(a: &Path, b: &Path) -> bool {
    let read = |p: &Path| tessera_formats::Tensor::<f64, u32>::read(p, "sss").expect("read .tcs");
    read(a) == read(b)
}

fn main() {
    if let Some((job, args)) = child_job() {
        run_job(&job, &args);
        return;
    }
    let bytes = env_or("TESSERA_BENCH_DISTRIBUTED_BYTES", 256 << 20);
    let parent = std::env::var("TESSERA_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let dir = tempfile::tempdir_in(&parent).expect("temporary directory");
    let d = dir.path();
    let nnz = bytes / ENTRY_BYTES;
    eprintln!("generating {nnz} entries ({DIMS:?}) in {}", d.display());
    let t = Instant::now();
    let spec = Spec {
        dims: DIMS.to_vec(),
        nnz: Some(nnz),
        density: None,
        kind: Kind::Uniform,
        seed: 11,
        sorted: true,
        duplicates: false,
    };
    generate(
        &spec,
        &d.join("t.tns"),
        &ConvertOptions::default(),
        &NoProgress,
        &|_| {},
    )
    .expect("generate .tns");
    eprintln!("generated in {:.1} s", t.elapsed().as_secs_f64());

    let convert = child("convert", &[&d.join("t.tns"), &d.join("t.tcs")]);
    std::fs::remove_file(d.join("t.tns")).expect("remove the .tns");
    let load_before = load_average();
    let tcs_bytes = std::fs::metadata(d.join("t.tcs")).unwrap().len();
    let gb = tcs_bytes as f64 / 1e9;
    // Interleaved repetitions: every round splits and merges at every rank count.
    let reps = env_or("TESSERA_BENCH_DISTRIBUTED_REPS", 3usize).max(1);
    let mut split_runs: Vec<Vec<Job>> = RANKS.iter().map(|_| Vec::new()).collect();
    let mut merge_runs: Vec<Vec<Job>> = RANKS.iter().map(|_| Vec::new()).collect();
    let mpi_bin = std::env::var("TESSERA_DATA_MPI").ok();
    let mut mpi_runs: Vec<Vec<(usize, Job, Job)>> = Vec::new();
    let mut ideal_runs: Vec<Vec<f64>> = RANKS.iter().map(|_| Vec::new()).collect();
    for _ in 0..reps {
        if let Some(bin) = &mpi_bin {
            mpi_runs.push(mpi_jobs(bin, d));
        }
        for (i, r) in RANKS.iter().enumerate() {
            ideal_runs[i].push(ideal_parallel(*r));
            let blocks = d.join(format!("blocks{r}"));
            let _ = std::fs::remove_dir_all(&blocks);
            split_runs[i].push(child(
                "split",
                &[Path::new(&r.to_string()), &d.join("t.tcs"), &blocks],
            ));
            merge_runs[i].push(child(
                "merge",
                &[
                    Path::new(&r.to_string()),
                    &blocks,
                    &d.join(format!("m{r}.tcs")),
                ],
            ));
            // The same tensor, not the same bytes: `convert` writes `.tcs` version 3 (with an
            // extent list) and merge version 1, so the files differ in their headers.
            assert!(
                same_tensor(&d.join("t.tcs"), &d.join(format!("m{r}.tcs"))),
                "merge at {r} ranks gives the input back"
            );
            std::fs::remove_file(d.join(format!("m{r}.tcs"))).unwrap();
        }
    }
    let ideal: Vec<f64> = ideal_runs
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    let split: Vec<Job> = split_runs.iter().map(|r| median(r)).collect();
    let merge: Vec<Job> = merge_runs.iter().map(|r| median(r)).collect();
    // Per rank count, the medians of the MPI rounds.
    let mpi: Option<Vec<(usize, Job, Job)>> = mpi_bin.map(|_| {
        RANKS
            .iter()
            .map(|&r| {
                let (s, m): (Vec<Job>, Vec<Job>) = mpi_runs
                    .iter()
                    .flat_map(|round| round.iter().filter(|(q, _, _)| *q == r))
                    .map(|(_, s, m)| (*s, *m))
                    .unzip();
                (r, median(&s), median(&m))
            })
            .collect()
    });

    let mut table = Table::new(&format!(
        "distributed split ({SPLIT}) and merge of a {:.0} MB .tcs (csf, u32, f64), thread ranks; medians of {reps} interleaved rounds",
        tcs_bytes as f64 / 1e6
    ));
    for (i, r) in RANKS.iter().enumerate() {
        table.row(
            &format!("split, {r} thread ranks"),
            "GB/s",
            gb / split[i].seconds,
            "convert (1 process)",
            gb / convert.seconds,
            true,
        );
        table.row(
            &format!("merge, {r} thread ranks"),
            "GB/s",
            gb / merge[i].seconds,
            "convert (1 process)",
            gb / convert.seconds,
            true,
        );
    }
    for (i, r) in RANKS.iter().enumerate().skip(1) {
        // What the machine gives right now: the same CPU-bound work on 1 thread and shared
        // by r threads (ideal parallel work); split and merge cannot beat it.
        table.row(
            &format!("ideal parallel work wall, {r} vs 1 threads"),
            "s",
            ideal[i],
            "1 thread",
            ideal[0],
            false,
        );
        for (what, jobs) in [("split", &split), ("merge", &merge)] {
            table.row(
                &format!("{what} wall, {r} vs 1 thread ranks"),
                "s",
                jobs[i].seconds,
                "1 rank",
                jobs[0].seconds,
                false,
            );
            table.row(
                &format!("{what} busiest rank CPU, {r} vs 1"),
                "s",
                jobs[i].busiest_cpu,
                "1 rank",
                jobs[0].busiest_cpu,
                false,
            );
        }
    }
    // Peak RSS of the whole process (all its thread ranks) beside the tensor, which is the
    // sum of the ranks' shares: the target is each rank's share plus a bounded buffer.
    for (i, r) in RANKS.iter().enumerate() {
        for (what, jobs) in [("split", &split), ("merge", &merge)] {
            table.row(
                &format!("{what} peak RSS, {r} thread ranks"),
                "MiB",
                mib(jobs[i].peak),
                "all shares",
                mib(tcs_bytes),
                false,
            );
        }
    }
    if let Some(mpi) = &mpi {
        let one = mpi.iter().find(|(r, _, _)| *r == 1);
        for (r, s, m) in mpi {
            if let (Some((_, s1, m1)), true) = (one, *r > 1) {
                for (what, job, base) in [("split", s, s1), ("merge", m, m1)] {
                    table.row(
                        &format!("{what} wall, {r} vs 1 MPI ranks"),
                        "s",
                        job.seconds,
                        "1 rank",
                        base.seconds,
                        false,
                    );
                }
            }
            let share = mib(tcs_bytes) / *r as f64;
            for (what, job) in [("split", s), ("merge", m)] {
                table.row(
                    &format!("{what} peak RSS per rank, {r} MPI ranks"),
                    "MiB",
                    mib(job.peak),
                    "its share",
                    share,
                    false,
                );
                table.figure(
                    &format!("{what} {r} MPI ranks peak RSS above the share MiB"),
                    mib(job.peak) - share,
                );
            }
            table.row(
                &format!("split, {r} MPI ranks"),
                "GB/s",
                gb / s.seconds,
                "convert (1 process)",
                gb / convert.seconds,
                true,
            );
            table.row(
                &format!("merge, {r} MPI ranks"),
                "GB/s",
                gb / m.seconds,
                "convert (1 process)",
                gb / convert.seconds,
                true,
            );
        }
    }
    table.figure("load average before", load_before);
    table.figure("load average after", load_average());
    table.figure("convert seconds", convert.seconds);
    table.figure("convert peak RSS MiB", mib(convert.peak));
    table.figure("tensor MiB", mib(tcs_bytes));
    table.figure("entries", nnz as f64);
    table.print();
}

fn child(job: &str, args: &[&Path]) -> Job {
    let out = Command::new(std::env::current_exe().unwrap())
        .env("TESSERA_BENCH_JOB", job)
        .args(args)
        .output()
        .expect("spawn job");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "job {job} failed:\n{stderr}");
    let seconds = stderr
        .lines()
        .find_map(|l| l.strip_prefix("seconds=")?.trim().parse().ok())
        .unwrap_or(f64::NAN);
    let busiest_cpu = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("rank_cpu=")?.trim().parse::<f64>().ok())
        .reduce(f64::max)
        .unwrap_or(f64::NAN);
    let r = Job {
        seconds,
        peak: parse_child_peak(&stderr).unwrap_or(0),
        busiest_cpu,
    };
    eprintln!(
        "{job:>8} {:?}: {:.2} s, busiest rank {:.2} CPU s, peak RSS {:.0} MiB",
        args.iter()
            .map(|a| a.display().to_string())
            .collect::<Vec<_>>(),
        r.seconds,
        r.busiest_cpu,
        mib(r.peak)
    );
    r
}

fn run_job(job: &str, args: &[String]) {
    let t = Instant::now();
    match job {
        "convert" => {
            let opts = ConvertOptions {
                format: Some("sss".into()),
                ..ConvertOptions::default()
            };
            convert(Path::new(&args[0]), Path::new(&args[1]), &opts, &NoProgress).expect("convert");
        }
        "split" => {
            let spec = SplitSpec::parse_blocks(SPLIT).unwrap();
            let (input, out) = (Path::new(&args[1]), Path::new(&args[2]));
            for r in run_ranks(args[0].parse().unwrap(), |c| {
                split_file(c, input, &spec, out, &NoIoProgress)
                    .map(|_| tessera_benches::cpu_seconds_of("thread-self"))
            }) {
                eprintln!("rank_cpu={}", r.expect("split"));
            }
        }
        "merge" => {
            let (input, out) = (Path::new(&args[1]), Path::new(&args[2]));
            for r in run_ranks(args[0].parse().unwrap(), |c| {
                merge_dir(c, input, out, &NoIoProgress)
                    .map(|_| tessera_benches::cpu_seconds_of("thread-self"))
            }) {
                eprintln!("rank_cpu={}", r.expect("merge"));
            }
        }
        _ => panic!("unknown job {job}"),
    }
    eprintln!("seconds={}", t.elapsed().as_secs_f64());
    eprintln!("peak_rss_bytes={}", peak_rss_bytes());
}

/// One round of split and merge as MPI ranks: per rank count, (ranks, split, merge) with the
/// time the command reports (MPI start-up excluded) and the largest peak RSS of any rank.
fn mpi_jobs(bin: &str, d: &Path) -> Vec<(usize, Job, Job)> {
    let mut out = Vec::new();
    for r in RANKS {
        let blocks = d.join(format!("mpiblocks{r}"));
        let _ = std::fs::remove_dir_all(&blocks);
        let merged = d.join(format!("mpi{r}.tcs"));
        let s = mpirun(
            bin,
            r,
            &[
                "split",
                &d.join("t.tcs").display().to_string(),
                "--blocks",
                SPLIT,
                "-o",
                &blocks.display().to_string(),
                "-q",
            ],
        );
        let m = mpirun(
            bin,
            r,
            &[
                "merge",
                &blocks.display().to_string(),
                "-o",
                &merged.display().to_string(),
                "-q",
            ],
        );
        // The same tensor, not the same bytes: the converter lays large arrays out in
        // extents (`.tcs` version 3), a merge writes them whole (version 1).
        assert!(
            same_tensor(&d.join("t.tcs"), &merged),
            "MPI merge at {r} ranks gives the input back"
        );
        std::fs::remove_file(&merged).unwrap();
        out.push((r, s, m));
    }
    out
}

fn mpirun(bin: &str, ranks: usize, args: &[&str]) -> Job {
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            &ranks.to_string(),
            bin,
        ])
        .args(args)
        .env("TESSERA_REPORT_PEAK_RSS", "1")
        .output()
        .expect("mpirun");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mpirun {args:?} failed:\n{stdout}\n{stderr}"
    );
    // "... in 1.23 s (...)" from rank 0's summary line.
    let seconds = stdout
        .split(" in ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN);
    // Ranks write to one pipe, so their lines may run together: take every occurrence.
    let peak = stderr
        .split("peak_rss_bytes=")
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0);
    eprintln!(
        "     mpi {} x{ranks}: {seconds:.2} s, max peak RSS per rank {:.0} MiB",
        args[0],
        mib(peak)
    );
    Job {
        seconds,
        peak,
        busiest_cpu: f64::NAN,
    }
}
