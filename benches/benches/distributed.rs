//! Distributed split and merge of a generated `.tcs` tensor at 1, 2 and 4 ranks, beside the
//! single-process streaming conversion (`tessera-data convert`) of the same tensor.
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
}

/// The job of median wall time.
fn median(jobs: &[Job]) -> Job {
    let mut v = jobs.to_vec();
    v.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    v[v.len() / 2]
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
    let tcs_bytes = std::fs::metadata(d.join("t.tcs")).unwrap().len();
    let gb = tcs_bytes as f64 / 1e9;
    // Interleaved repetitions: every round splits and merges at every rank count.
    let reps = env_or("TESSERA_BENCH_DISTRIBUTED_REPS", 3usize).max(1);
    let mut split_runs: Vec<Vec<Job>> = RANKS.iter().map(|_| Vec::new()).collect();
    let mut merge_runs: Vec<Vec<Job>> = RANKS.iter().map(|_| Vec::new()).collect();
    for _ in 0..reps {
        for (i, r) in RANKS.iter().enumerate() {
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
            assert_eq!(
                std::fs::read(d.join("t.tcs")).unwrap(),
                std::fs::read(d.join(format!("m{r}.tcs"))).unwrap(),
                "merge at {r} ranks gives the input back"
            );
            std::fs::remove_file(d.join(format!("m{r}.tcs"))).unwrap();
        }
    }
    let split: Vec<Job> = split_runs.iter().map(|r| median(r)).collect();
    let merge: Vec<Job> = merge_runs.iter().map(|r| median(r)).collect();
    let mpi = std::env::var("TESSERA_DATA_MPI")
        .ok()
        .map(|bin| mpi_jobs(&bin, d));

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
        table.row(
            &format!("split speed-up, {r} vs 1 thread ranks"),
            "s",
            split[i].seconds,
            "1 rank",
            split[0].seconds,
            false,
        );
        table.row(
            &format!("merge speed-up, {r} vs 1 thread ranks"),
            "s",
            merge[i].seconds,
            "1 rank",
            merge[0].seconds,
            false,
        );
    }
    // Peak RSS of the whole process (all its thread ranks) beside the tensor: the target is
    // the tensor (every rank's share) plus a bounded buffer.
    for (i, r) in RANKS.iter().enumerate() {
        table.row(
            &format!("split peak RSS, {r} thread ranks"),
            "MiB",
            mib(split[i].peak),
            "tensor",
            mib(tcs_bytes),
            false,
        );
        table.row(
            &format!("merge peak RSS, {r} thread ranks"),
            "MiB",
            mib(merge[i].peak),
            "tensor",
            mib(tcs_bytes),
            false,
        );
    }
    for (i, r) in RANKS.iter().enumerate() {
        table.figure(&format!("split {r} thread ranks seconds"), split[i].seconds);
        table.figure(&format!("merge {r} thread ranks seconds"), merge[i].seconds);
        table.figure(
            &format!("split {r} thread ranks process peak RSS MiB"),
            mib(split[i].peak),
        );
        table.figure(
            &format!("merge {r} thread ranks process peak RSS MiB"),
            mib(merge[i].peak),
        );
    }
    if let Some(mpi) = &mpi {
        for (r, s, m) in mpi {
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
            table.figure(
                &format!("split {r} MPI ranks peak RSS per rank MiB"),
                mib(s.peak),
            );
            table.figure(
                &format!("merge {r} MPI ranks peak RSS per rank MiB"),
                mib(m.peak),
            );
        }
    }
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
    let r = Job {
        seconds,
        peak: parse_child_peak(&stderr).unwrap_or(0),
    };
    eprintln!(
        "{job:>8} {:?}: {:.2} s, peak RSS {:.0} MiB",
        args.iter()
            .map(|a| a.display().to_string())
            .collect::<Vec<_>>(),
        r.seconds,
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
            }) {
                r.expect("split");
            }
        }
        "merge" => {
            let (input, out) = (Path::new(&args[1]), Path::new(&args[2]));
            for r in run_ranks(args[0].parse().unwrap(), |c| {
                merge_dir(c, input, out, &NoIoProgress)
            }) {
                r.expect("merge");
            }
        }
        _ => panic!("unknown job {job}"),
    }
    eprintln!("seconds={}", t.elapsed().as_secs_f64());
    eprintln!("peak_rss_bytes={}", peak_rss_bytes());
}

/// Split and merge as MPI ranks: per rank count, (ranks, split, merge) with the time the
/// command reports (MPI start-up excluded) and the largest peak RSS of any rank.
fn mpi_jobs(bin: &str, d: &Path) -> Vec<(usize, Job, Job)> {
    let mut out = Vec::new();
    for r in RANKS {
        let blocks = d.join(format!("mpiblocks{r}"));
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
        assert_eq!(
            std::fs::read(d.join("t.tcs")).unwrap(),
            std::fs::read(&merged).unwrap(),
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
    let peak = stderr
        .lines()
        .filter_map(|l| {
            l.strip_prefix("peak_rss_bytes=")?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    eprintln!(
        "     mpi {} x{ranks}: {seconds:.2} s, max peak RSS per rank {:.0} MiB",
        args[0],
        mib(peak)
    );
    Job { seconds, peak }
}
