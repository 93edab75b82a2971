//! `tessera run` with a distribution schedule: the plan's block tasks run on the task runtime
//! and give the unscheduled kernel's answer — on a generated matrix for every kind of split,
//! and on the real public matrices of `target/real-data` when they have been fetched
//! (`scripts/fetch-real-data.sh`; without them that part prints a notice).

use std::path::{Path, PathBuf};
use std::process::Command;
use tessera_compiler::{check, interp, lower, parse};
use tessera_formats::Tensor;

fn tessera() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    // The program cache the other CLI tests share: its build directory is reused.
    c.env(
        "TESSERA_CACHE",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("tessera-cache"),
    );
    c
}

/// The unscheduled kernel's output for `y(i) = A(i,j) * x(j)` on these files, by the
/// interpreter.
fn reference(a: &Path, x: &Path) -> Vec<f64> {
    let stmt = parse::program("y(i) = A(i,j) * x(j); A: csr", 0).unwrap();
    let c = check::check(stmt, &check::Dims::new()).unwrap();
    let k = lower::lower(&c).unwrap();
    let a: Tensor<f64, u32> = Tensor::read(a, "csr").unwrap();
    let x: Tensor<f64, u32> = Tensor::read(x, "d").unwrap();
    interp::run(&k, &[&a, &x], &[a.dims()[0]])
        .unwrap()
        .to_dense()
}

/// How `tessera run` runs a plan: the compiled program (block kernels generated and built), or
/// `--interpret` (the interpreter's block entry point, in process).
#[derive(Clone, Copy, Debug)]
enum Mode {
    Compiled,
    Interpreted,
}

/// Runs `tessera run` with `schedule` and returns the output and what `--stats` printed.
fn run_scheduled(dir: &Path, a: &Path, x: &Path, schedule: &str, mode: Mode) -> (Vec<f64>, String) {
    let out = dir.join("y.tns");
    let r = tessera()
        .args(["run", "y(i) = A(i,j) * x(j)", "-f", "A:csr", "-s", schedule])
        .arg("-i")
        .arg(format!("A={}", a.display()))
        .arg("-i")
        .arg(format!("x={}", x.display()))
        .arg("-o")
        .arg(&out)
        .args(["--threads", "2", "--stats"])
        .args(matches!(mode, Mode::Interpreted).then_some("--interpret"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&r.stderr).to_string();
    assert!(r.status.success(), "{schedule} ({mode:?}): {stderr}");
    let y: Tensor<f64, u32> = Tensor::read(&out, "d").unwrap();
    (y.to_dense(), stderr)
}

fn close(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= 1e-9 * (1.0 + w.abs()))
}

/// A dense vector of `n` values for the matrix's columns.
fn vector(dir: &Path, n: usize) -> PathBuf {
    let x: Vec<f64> = (0..n).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
    let path = dir.join("x.tns");
    Tensor::<f64, u32>::dense_from_vec(vec![n], x)
        .unwrap()
        .write(&path)
        .unwrap();
    path
}

const SCHEDULES: [&str; 5] = [
    "split(i, io, ii, 4)",
    "split(i, io, ii, [1, 2, 30])",
    "split(j, jo, ji, 3); extend(jo)",
    "split(j, jo, ji, [5, 9])",
    "split(i, io, ii, 2); split(j, jo, ji, 2); extend(jo); order(jo, io); map(io)",
];

#[test]
fn scheduled_runs_equal_the_unscheduled_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let (m, n) = (37, 23);
    let entries: Vec<(Vec<usize>, f64)> = (0..m * n)
        .filter(|k| (k * 2654435761usize).is_multiple_of(7))
        .map(|k| (vec![k / n, k % n], (k % 13) as f64 - 6.5))
        .collect();
    let a = dir.path().join("A.mtx");
    Tensor::<f64, u32>::from_entries(vec![m, n], "csr", entries)
        .unwrap()
        .write(&a)
        .unwrap();
    let x = vector(dir.path(), n);
    let want = reference(&a, &x);
    for s in SCHEDULES {
        for mode in [Mode::Interpreted, Mode::Compiled] {
            let (got, stats) = run_scheduled(dir.path(), &a, &x, s, mode);
            assert!(close(&got, &want), "{s} ({mode:?}): {got:?}\nwant {want:?}");
            assert!(
                stats.contains("tasks issued") && stats.contains("point tasks run"),
                "{stats}"
            );
        }
    }
}

#[test]
fn scheduled_runs_on_real_matrices() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/real-data");
    let Ok(dir) = std::fs::read_dir(&root) else {
        eprintln!(
            "cli_plans: {} not found; skipping (scripts/fetch-real-data.sh)",
            root.display()
        );
        return;
    };
    let mut files: Vec<PathBuf> = Vec::new();
    let mut stack: Vec<PathBuf> = dir.flatten().map(|e| e.path()).collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        } else if p.extension().is_some_and(|e| e == "mtx") && p.metadata().unwrap().len() < 200_000
        {
            files.push(p);
        }
    }
    files.sort();
    let tmp = tempfile::tempdir().unwrap();
    let mut ran = 0;
    for a in files.iter().take(6) {
        // Files the reader rejects (deliberately broken test matrices) are not SpMV inputs.
        let Ok(t) = Tensor::<f64, u32>::read(a, "csr") else {
            continue;
        };
        let x = vector(tmp.path(), t.dims()[1]);
        let want = reference(a, &x);
        for s in ["split(i, io, ii, 4)", "split(j, jo, ji, 3); extend(jo)"] {
            let (got, _) = run_scheduled(tmp.path(), a, &x, s, Mode::Compiled);
            assert!(close(&got, &want), "{} with {s}", a.display());
        }
        ran += 1;
    }
    eprintln!("cli_plans: {ran} real matrices checked");
}

/// A schedule the planner refuses (a nested split) still emits its plain kernel; `emit --plan`
/// and `compile` (whose program would run the plan) report the refusal, with the directive's
/// span.
#[test]
fn a_refused_plan_fails_only_where_the_plan_is_used() {
    let sched = "split(i, io, ii, 4); split(ii, iio, iii, 2)";
    let emit = |extra: &[&str]| {
        tessera()
            .args(["emit", "y(i) = A(i,j) * x(j)", "-f", "A:csr", "-s", sched])
            .args(extra)
            .output()
            .unwrap()
    };
    assert!(emit(&[]).status.success());
    let r = emit(&["--plan"]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("made by a split") && err.contains("split(ii, iio, iii, 2)"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let r = tessera()
        .args([
            "compile",
            "y(i) = A(i,j) * x(j)",
            "-f",
            "A:csr",
            "-s",
            sched,
            "-o",
        ])
        .arg(dir.path().join("prog"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success() && err.contains("split(ii, iio, iii, 2)"),
        "{err}"
    );
    assert!(!dir.path().join("prog").exists());
}

#[test]
fn mpi_needs_a_distribution_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("prog");
    let r = tessera()
        .args([
            "compile",
            "y(i) = A(i,j) * x(j)",
            "-f",
            "A:csr",
            "--mpi",
            "-o",
        ])
        .arg(&prog)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "{err}");
    assert!(
        err.contains("`--mpi`")
            && err.contains("no distribution schedule")
            && err.contains("split("),
        "{err}"
    );
    assert!(!prog.exists());
}
