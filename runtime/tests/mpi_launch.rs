//! Runs the `mpi-selftest` binary under `mpirun` (OpenMPI, as root in a container: allow run
//! as root, oversubscribe 2 cores). Built only with `--features mpi`.

use std::process::{Command, Output};

const SELFTEST: &str = env!("CARGO_BIN_EXE_mpi-selftest");

fn mpirun(ranks: usize, args: &[&str]) -> Output {
    let out = Command::new("timeout")
        .args([
            "180",
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            &ranks.to_string(),
            SELFTEST,
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
