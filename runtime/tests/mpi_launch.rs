//! Runs the `mpi-selftest` binary under `mpirun` (OpenMPI, as root in a container: allow run
//! as root, oversubscribe 2 cores). Built only with `--features mpi`.

use std::process::{Command, Output};

const SELFTEST: &str = env!("CARGO_BIN_EXE_mpi-selftest");
const RUNTIME: &str = env!("CARGO_BIN_EXE_mpi-runtime");

fn mpirun(ranks: usize, args: &[&str]) -> Output {
    mpirun_bin(SELFTEST, ranks, args)
}

fn mpirun_bin(bin: &str, ranks: usize, args: &[&str]) -> Output {
    let out = Command::new("timeout")
        .args([
            "180",
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            &ranks.to_string(),
            bin,
        ])
        .args(args)
        .output()
        .expect("mpirun (openmpi-bin) is installed");
    assert_ne!(
        out.status.code(),
        Some(124),
        "mpirun -n {ranks} {args:?} hung:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn two_ranks_pass_the_self_test() {
    let out = mpirun(2, &["2"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 ranks OK"),
        "{}",
        text(&out)
    );
}

#[test]
fn four_ranks_pass_the_self_test() {
    let out = mpirun(4, &["4"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("4 ranks OK"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_binary_started_without_mpirun_does_not_pass() {
    let out = Command::new(SELFTEST).arg("2").output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("expected a world of 2 ranks but this one has 1"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_rank_with_a_missing_file_makes_every_rank_fail() {
    let out = mpirun(4, &["4", "--fail-rank", "2"]);
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // mpirun may end the other ranks as soon as the first exits with an error, so not every
    // rank gets to print; every rank that does names rank 2's missing file.
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("mpi-selftest:"))
        .collect();
    assert!(!lines.is_empty(), "{}", text(&out));
    assert!(
        lines.iter().all(|l| l.contains("missing.tcs")),
        "{}",
        text(&out)
    );
}

#[test]
fn a_rank_failing_alone_aborts_the_job() {
    let out = mpirun(3, &["3", "--abort-rank", "1"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rank 1 fails on purpose"),
        "{}",
        text(&out)
    );
}

/// The runtime across MPI ranks: stencil (bitwise, halo bytes, points per rank), banded SpMV
/// with images, CG bitwise equal to one rank (see src/bin/mpi_runtime.rs).
fn runtime_passes(ranks: usize) {
    let out = mpirun_bin(RUNTIME, ranks, &[&ranks.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("runtime on {ranks} ranks OK")),
        "{}",
        text(&out)
    );
}

#[test]
fn the_runtime_on_two_ranks_equals_one_rank() {
    runtime_passes(2);
}

#[test]
fn the_runtime_on_four_ranks_equals_one_rank() {
    runtime_passes(4);
}

#[test]
fn a_task_failing_on_one_rank_ends_every_rank_with_its_error() {
    let out = mpirun_bin(RUNTIME, 2, &["2", "--fail-rank", "1"]);
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("rank error:"))
        .collect();
    assert!(!errors.is_empty(), "{}", text(&out));
    assert!(
        errors
            .iter()
            .all(|l| l.contains("the point on rank 1 refuses")),
        "{}",
        text(&out)
    );
}

#[test]
fn a_rank_killed_mid_run_ends_the_job_with_an_error() {
    // `mpirun` (through `mpirun_bin`'s timeout) must end the job, not hang on the dead rank.
    let out = mpirun_bin(RUNTIME, 4, &["4", "--kill-rank", "2"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rank 2 dies on purpose"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_rank_returning_early_ends_every_other_rank_with_an_error() {
    // Rank 1 returns normally after 3 of the 20 stencil steps: it is alive (finalising), so
    // mpirun would not end the job; the others must see its goodbye and fail, not hang.
    let out = mpirun_bin(RUNTIME, 3, &["3", "--leave-rank", "1"]);
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rank 1 leaves early on purpose"),
        "{}",
        text(&out)
    );
    assert!(
        stderr.contains("rank 1 finished without sending")
            || stderr.contains("rank 1: the rank stopped before sending"),
        "{}",
        text(&out)
    );
    assert!(!stderr.contains("runtime on 3 ranks OK"), "{}", text(&out));
}
