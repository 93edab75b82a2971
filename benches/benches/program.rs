//! A compiled SpMV program over a large `.tcs` matrix (1 GiB by default), as a user runs one:
//! `tessera compile` with a distribution schedule (`split(i, io, ii, 8)`: eight row blocks as
//! tasks on the task runtime) beside the same statement compiled without one (the plain
//! `parallelize(i)` kernel on rayon), both at 2 threads. Each run is its own process, timed by
//! the program itself (`--timings`: read, compute, write seconds) and measured for peak RSS.
//!
//! The matrix is CSR with 32-bit coordinates and f64 values, random columns, about the same
//! number per row; it is written once and read warm from the page cache. Programs are built
//! into a cache under the bench's target directory, so only the first run of this bench pays
//! for building them (minutes for the planned program, which links the compiler and runtime).
//!
//! Environment:
//! - `TESSERA_BENCH_PROGRAM_BYTES`: approximate size of the matrix file (default 1 GiB);
//! - `TESSERA_BENCH_PROGRAM_REPS`: interleaved rounds, medians reported (default 3);
//! - `TESSERA_BENCH_DIR`: where to put the files (default: the system temp directory).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use nix::sys::resource::{getrusage, UsageWho};
use tessera_benches::{child_job, env_or, median, parse_child_peak, random_csr, Rng, Table};
use tessera_formats::Tensor;

const STATEMENT: &str = "y(i) = A(i,j) * x(j)";
/// Bytes of one stored entry (a u32 column and an f64 value) and of one row's `pos` entry.
const ENTRY_BYTES: u64 = 12;
const ROW_BYTES: u64 = 4;
const THREADS: &str = "2";

/// The two programs: the name in the table and the schedule they are compiled with.
const PROGRAMS: [(&str, &str); 2] = [
    ("planned", "split(i, io, ii, 8)"),
    ("plain kernel", "parallelize(i)"),
];

fn main() {
    if let Some((job, args)) = child_job() {
        assert_eq!(job, "run", "unknown job {job}");
        run_job(&args);
        return;
    }
    let bytes: u64 = env_or("TESSERA_BENCH_PROGRAM_BYTES", 1 << 30);
    let reps: usize = env_or("TESSERA_BENCH_PROGRAM_REPS", 3);
    let parent = std::env::var("TESSERA_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let dir = tempfile::tempdir_in(&parent).expect("temporary directory");
    let d = dir.path();

    let t = Instant::now();
    let file_bytes = write_inputs(d, bytes);
    eprintln!(
        "wrote a {:.0} MiB CSR matrix in {:.1} s",
        file_bytes as f64 / (1 << 20) as f64,
        t.elapsed().as_secs_f64()
    );
    let progs: Vec<PathBuf> = PROGRAMS
        .iter()
        .enumerate()
        .map(|(k, (_, schedule))| compile(schedule, &d.join(format!("spmv{k}"))))
        .collect();

    // Interleaved rounds: load from other tenants falls on both programs alike.
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); progs.len()];
    for _ in 0..reps {
        for (k, prog) in progs.iter().enumerate() {
            runs[k].push(run(prog, d));
        }
    }
    let [planned, plain] = [0, 1].map(|k| Run::median_of(&runs[k]));
    let mut table = Table::new(&format!(
        "SpMV program over a {:.0} MiB .tcs matrix, {THREADS} threads, medians of {reps} rounds: \
         planned = split(i, io, ii, 8) on the task runtime, plain kernel = parallelize(i)",
        file_bytes as f64 / (1 << 20) as f64
    ));
    let (ours, theirs) = (PROGRAMS[0].0, PROGRAMS[1].0);
    for (name, a, b) in [
        ("load (read inputs)", planned.read, plain.read),
        ("compute", planned.compute, plain.compute),
        ("store (write output)", planned.write, plain.write),
        ("wall, start to exit", planned.wall, plain.wall),
    ] {
        table.row(&format!("{name}, {ours}"), "s", a, theirs, b, false);
    }
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    table.row(
        &format!("peak RSS, {ours}"),
        "MiB",
        mib(planned.peak),
        theirs,
        mib(plain.peak),
        false,
    );
    table.figure("matrix_mib", mib(file_bytes));
    table.figure(
        "load_gb_per_s_planned",
        file_bytes as f64 / planned.read / 1e9,
    );
    table.figure(
        "peak_rss_vs_file_planned",
        planned.peak as f64 / file_bytes as f64,
    );
    table.print();
}

/// Writes `A.tcs` (about `bytes` long) and `x.tcs` into `d`; returns the size of `A.tcs`.
fn write_inputs(d: &Path, bytes: u64) -> u64 {
    let rows: usize = 1 << 21;
    let per_row = ((bytes.saturating_sub(rows as u64 * ROW_BYTES)) / ENTRY_BYTES / rows as u64)
        .max(1) as usize;
    let mut rng = Rng(7);
    let a = random_csr(rows, per_row, &mut rng, Rng::value);
    a.write(d.join("A.tcs")).expect("write A.tcs");
    drop(a);
    let x: Tensor<f64, u32> =
        Tensor::dense_from_vec(vec![rows], (0..rows).map(|_| rng.value()).collect())
            .expect("dense x");
    x.write(d.join("x.tcs")).expect("write x.tcs");
    std::fs::metadata(d.join("A.tcs")).expect("A.tcs").len()
}

/// `tessera compile` of the statement with `schedule` into `out` (through cargo, so the bench
/// uses the compiler of this checkout; programs cached under the bench's target directory).
fn compile(schedule: &str, out: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("program-cache");
    eprintln!("tessera compile -s \"{schedule}\" (the first build of a program takes minutes)");
    let status = Command::new(env!("CARGO"))
        .current_dir(&root)
        .env("TESSERA_CACHE", &cache)
        .args(["run", "--release", "-q", "-p", "tessera-compiler", "--bin"])
        .args(["tessera", "--", "compile", STATEMENT, "-f", "A:csr", "-s"])
        .arg(schedule)
        .arg("-o")
        .arg(out)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "tessera compile -s \"{schedule}\" failed");
    out.to_path_buf()
}

/// One run's figures, in seconds and bytes.
#[derive(Clone, Copy)]
struct Run {
    read: f64,
    compute: f64,
    write: f64,
    wall: f64,
    peak: u64,
}

impl Run {
    /// Each figure's median over the runs (figures taken separately).
    fn median_of(runs: &[Run]) -> Run {
        let m = |f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
        Run {
            read: m(|r| r.read),
            compute: m(|r| r.compute),
            write: m(|r| r.write),
            wall: m(|r| r.wall),
            peak: m(|r| r.peak as f64) as u64,
        }
    }
}

/// Runs `prog` on the inputs in `d` through a child job of this bench (so that the peak RSS it
/// reports is the program's alone) and reads its figures.
fn run(prog: &Path, d: &Path) -> Run {
    let y = d.join("y.tcs");
    let _ = std::fs::remove_file(&y);
    let t = Instant::now();
    let out = Command::new(std::env::current_exe().expect("this bench"))
        .env("TESSERA_BENCH_JOB", "run")
        .arg(prog)
        .args(["-i", &format!("A={}", d.join("A.tcs").display())])
        .args(["-i", &format!("x={}", d.join("x.tcs").display())])
        .arg("-o")
        .arg(&y)
        .args(["--threads", THREADS, "--timings"])
        .output()
        .expect("the bench runs itself");
    let wall = t.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{} failed:\n{stderr}", prog.display());
    let (read, compute, write) =
        parse_timings(&stderr).unwrap_or_else(|| panic!("no --timings line in:\n{stderr}"));
    let peak = parse_child_peak(&stderr).expect("the job reports the peak RSS");
    Run {
        read,
        compute,
        write,
        wall,
        peak,
    }
}

/// The program's `read R s, kernel K s, write W s` line.
fn parse_timings(stderr: &str) -> Option<(f64, f64, f64)> {
    let line = stderr.lines().find(|l| l.starts_with("read "))?;
    let mut secs = line
        .split(", ")
        .map(|part| part.split_whitespace().nth(1)?.parse::<f64>().ok());
    Some((secs.next()??, secs.next()??, secs.next()??))
}

/// The child job: runs the program given as arguments, passes its stderr on, and reports the
/// peak RSS of its only child (the program) as `peak_rss_bytes=N`.
fn run_job(args: &[String]) {
    let (prog, rest) = args.split_first().expect("a program to run");
    let out = Command::new(prog)
        .args(rest)
        .output()
        .expect("the program starts");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        std::process::exit(1);
    }
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    // Linux reports ru_maxrss in KiB.
    let max_rss_kib = usage.max_rss() as u64;
    eprintln!("peak_rss_bytes={}", max_rss_kib * 1024);
}
