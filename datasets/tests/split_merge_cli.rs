//! `tessera-data split` / `merge` as a user runs them: the round trip is byte-identical for
//! any split and rank counts, and bad input fails with a message and no partial output.

mod common;

use std::process::Command;

use common::{failed, ok, run, tcs_bytes};

#[test]
fn split_then_merge_gives_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run(
        d,
        &[
            "generate",
            "--dims",
            "300,200,9",
            "--nnz",
            "5000",
            "--seed",
            "7",
            "-o",
            "t.tcs",
            "-q",
        ],
    ));
    let cases: [(&[&str], &str, &str); 4] = [
        (&["--blocks", "0:4,1:3"], "3", "2"),
        (&["--split-points", "0:10/10/290,2:4"], "4", "1"),
        (&["--blocks", "2:20"], "1", "4"),
        (&["--blocks", "0:1"], "5", "3"),
    ];
    for (i, (split, split_ranks, merge_ranks)) in cases.iter().enumerate() {
        let blocks = format!("blocks{i}");
        let out = format!("back{i}.tcs");
        let mut args = vec![
            "split",
            "t.tcs",
            "-o",
            &blocks,
            "--ranks",
            split_ranks,
            "-q",
        ];
        args.extend_from_slice(split);
        let said = ok(run(d, &args));
        assert!(said.contains("blocks"), "{said}");
        ok(run(
            d,
            &["merge", &blocks, "-o", &out, "--ranks", merge_ranks, "-q"],
        ));
        assert_eq!(
            tcs_bytes(&d.join("t.tcs")),
            tcs_bytes(&d.join(&out)),
            "case {i}: {split:?}"
        );
    }
    ok(run(d, &["info", "blocks1/block-1-0-1.tcs"]));
}

#[test]
fn bad_splits_and_inputs_fail_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run(
        d,
        &[
            "generate", "--dims", "30,20", "--nnz", "100", "--seed", "1", "-o", "m.tcs", "-q",
        ],
    ));
    assert!(failed(run(d, &["split", "m.tcs", "--blocks", "0:x", "-o", "b"])).contains("--blocks"));
    assert!(failed(run(d, &["split", "m.tcs", "--blocks", "4:2", "-o", "b"])).contains("mode 4"));
    assert!(failed(run(
        d,
        &["split", "m.tcs", "--split-points", "0:9/3", "-o", "b"]
    ))
    .contains("must not decrease"));
    assert!(
        failed(run(d, &["split", "nope.tcs", "--blocks", "0:2", "-o", "b"])).contains("nope.tcs")
    );
    assert!(failed(run(d, &["merge", "empty", "-o", "x.tcs"])).contains("empty"));
    // Thread ranks cost time and memory with the square of their number: 100000 of them
    // took 23 GB before they were refused.
    for n in ["0", "100000"] {
        let err = failed(run(
            d,
            &["split", "m.tcs", "--blocks", "0:2", "-o", "r", "--ranks", n],
        ));
        assert!(err.contains("--ranks") && err.contains("1 to 256"), "{err}");
        assert!(!d.join("r").exists());
    }
    ok(run(
        d,
        &["split", "m.tcs", "--blocks", "0:2", "-o", "b", "-q"],
    ));
    assert!(
        failed(run(d, &["split", "m.tcs", "--blocks", "0:3", "-o", "b"])).contains("already holds")
    );
    // A block that is not a .tcs file: the merge fails on every rank and writes nothing.
    std::fs::write(d.join("b/zz.tcs"), b"not a tensor").unwrap();
    assert!(failed(run(d, &["merge", "b", "-o", "x.tcs", "--ranks", "3"])).contains("zz.tcs"));
    assert!(!d.join("x.tcs").exists());
    assert!(std::fs::read_dir(d).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with('.')));
}

/// A binary without MPI support started by mpirun would run as N copies writing the same
/// files: it must refuse instead.
#[cfg(not(feature = "mpi"))]
#[test]
fn without_mpi_support_a_launch_by_mpirun_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tessera-data"))
        .args(["merge", "blocks", "-o", "x.tcs"])
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(failed(o).contains("--features mpi"));
}

/// The same round trip with real MPI ranks: `mpirun -n 2` splits, `mpirun -n 4` merges, and
/// the merged file equals the original byte for byte. The ranks' own report of how they ran
/// ("MPI ranks") proves the binary was not started as N unaware single-rank copies.
#[cfg(feature = "mpi")]
#[test]
fn split_and_merge_under_mpirun_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run(
        d,
        &[
            "generate", "--dims", "120,80,7", "--nnz", "3000", "--seed", "11", "-o", "t.tcs", "-q",
        ],
    ));
    let mpirun = |n: &str, args: &[&str]| {
        Command::new("mpirun")
            .args(["--allow-run-as-root", "--oversubscribe", "-n", n])
            .arg(env!("CARGO_BIN_EXE_tessera-data"))
            .args(args)
            .current_dir(d)
            .output()
            .expect("mpirun runs (install OpenMPI: scripts/install-deps.sh)")
    };
    let said = ok(mpirun(
        "2",
        &["split", "t.tcs", "--blocks", "0:3,2:2", "-o", "b"],
    ));
    assert!(said.contains("2 MPI ranks"), "{said}");
    let said = ok(mpirun("4", &["merge", "b", "-o", "back.tcs"]));
    assert!(said.contains("4 MPI ranks"), "{said}");
    assert_eq!(tcs_bytes(&d.join("t.tcs")), tcs_bytes(&d.join("back.tcs")));
}

/// `mpirun -n 4`, one rank killed with SIGKILL in the middle of a split and of a merge: the
/// job ends (every rank, within a bounded time) with a failure, and no output file appears.
#[cfg(feature = "mpi")]
#[test]
fn a_rank_killed_during_split_or_merge_fails_the_job_without_output() {
    use std::path::Path;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(run(
        d,
        &[
            "generate",
            "--dims",
            "3000,3000",
            "--nnz",
            "1000000",
            "--seed",
            "3",
            "-o",
            "t.tcs",
            "-q",
        ],
    ));
    ok(run(
        d,
        &["split", "t.tcs", "--blocks", "0:4,1:2", "-o", "b", "-q"],
    ));
    let children = |pid: u32| -> Vec<u32> {
        let o = Command::new("pgrep")
            .args(["-P", &pid.to_string()])
            .output()
            .expect("pgrep runs");
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    let temporary = |d: &Path| {
        std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains(".merge-"))
    };
    type Started<'a> = &'a dyn Fn() -> bool;
    let s_started = || d.join("s").exists();
    let m_started = || temporary(d);
    let cases: [(&[&str], &str, Started); 2] = [
        (
            &["split", "t.tcs", "--blocks", "0:16,1:16", "-o", "s", "-q"],
            "s",
            &s_started,
        ),
        (&["merge", "b", "-o", "m.tcs", "-q"], "m.tcs", &m_started),
    ];
    for (args, output, started) in cases {
        let mut job = Command::new("mpirun")
            .args(["--allow-run-as-root", "--oversubscribe", "-n", "4"])
            .arg(env!("CARGO_BIN_EXE_tessera-data"))
            .args(args)
            .current_dir(d)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mpirun runs (install OpenMPI: scripts/install-deps.sh)");
        // The four ranks, once they exist and the work has begun (at most 60 s).
        let start = Instant::now();
        let mut ranks = Vec::new();
        while start.elapsed() < Duration::from_secs(60) && job.try_wait().unwrap().is_none() {
            ranks = children(job.id());
            if ranks.len() == 4 && started() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(ranks.len(), 4, "{args:?}: the ranks did not start");
        let victim = ranks[2];
        let _ = Command::new("kill")
            .args(["-9", &victim.to_string()])
            .status();
        // Every rank must end: mpirun returns only when all have (bounded: 120 s).
        let waited = Instant::now();
        while job.try_wait().unwrap().is_none() {
            if waited.elapsed() > Duration::from_secs(120) {
                let _ = job.kill();
                panic!("{args:?}: the job did not end after a rank was killed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = job.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success(),
            "{args:?}: killed job reported success: {said}"
        );
        // A rank still running (not a zombie) 30 s after mpirun returned is a rank that hung.
        let running = |r: &u32| {
            std::fs::read_to_string(format!("/proc/{r}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        let after = Instant::now();
        while ranks.iter().any(running) && after.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let hung: Vec<&u32> = ranks.iter().filter(|r| running(r)).collect();
        assert!(
            hung.is_empty(),
            "{args:?}: rank processes {hung:?} outlived the job"
        );
        let out = d.join(output);
        let outputs = if out.is_dir() {
            std::fs::read_dir(&out)
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".tcs"))
                .count()
        } else {
            usize::from(out.exists())
        };
        assert_eq!(outputs, 0, "{args:?}: output appeared: {said}");
        let _ = std::fs::remove_dir_all(d.join("s"));
    }
}
