//! Faults injected into `tessera-data` as a user runs it, and survived:
//!
//! - a full disk (a small tmpfs, mounted here when running as root; skipped with a message
//!   elsewhere) under the output of `convert`, under its sorted runs, under `split`'s blocks
//!   and under `merge`'s output: a clear error naming the file, no temporary left, an
//!   existing output of the same name untouched;
//! - SIGINT and SIGTERM during `convert`, `split` and `merge`: either the command finished
//!   (its output is whole and valid) or it stopped, leaving no output and no temporary;
//! - a `.tcs` file truncated by another process while it is read: an error, never SIGBUS.
//!
//! Every assertion holds whenever the fault lands; how far the command got is not assumed.
//! Every wait is bounded.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{bin, failed, ok, run, Tmpfs};

/// Names in `dir` (recursively), sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            let inner = files(&p);
            if inner.is_empty() {
                out.push(format!("{name}/"));
            }
            out.extend(inner.into_iter().map(|n| format!("{name}/{n}")));
        } else {
            out.push(name);
        }
    }
    out.sort();
    out
}

/// Temporaries Tessera's writers make: dot files (`.out.tcs.X.partial`, `.tessera-sort.X/`,
/// `.out.tcs.merge-N.tmp`, `.block-….partial`).
fn temporaries(dir: &Path) -> Vec<String> {
    files(dir)
        .into_iter()
        .filter(|n| n.split('/').any(|part| part.starts_with('.')))
        .collect()
}

/// A tensor big enough to fill the small disks below: 2000 x 2000 with 200 000 nonzeros
/// (about 2.4 MB as .tcs, 4 MB as text).
fn big_input(d: &Path, name: &str) {
    ok(run(
        d,
        &[
            "generate",
            "--dims",
            "2000,2000",
            "--nnz",
            "200000",
            "--seed",
            "5",
            "-o",
            name,
            "-q",
        ],
    ));
}

const OLD: &[u8] = b"an older file of the same name\n";

#[test]
fn a_full_disk_under_convert_output_fails_naming_the_file_and_leaves_the_old_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    big_input(d, "t.tns");
    let Some(disk) = Tmpfs::mount("512k") else {
        return;
    };
    let out = disk.path().join("out.tcs");
    std::fs::write(&out, OLD).unwrap();
    let o = run(d, &["convert", "t.tns", out.to_str().unwrap(), "-q"]);
    let said = failed(o);
    assert!(said.contains("out.tcs"), "{said}");
    assert!(said.contains("No space left on device"), "{said}");
    assert_eq!(std::fs::read(&out).unwrap(), OLD);
    assert_eq!(files(disk.path()), vec!["out.tcs".to_string()]);

    // The way back (.tcs → .tns) onto the full disk: the same.
    ok(run(d, &["convert", "t.tns", "t.tcs", "-q"]));
    let back = disk.path().join("out.tns");
    std::fs::write(&back, OLD).unwrap();
    let said = failed(run(d, &["convert", "t.tcs", back.to_str().unwrap(), "-q"]));
    assert!(said.contains("out.tns"), "{said}");
    assert_eq!(std::fs::read(&back).unwrap(), OLD);
    assert_eq!(
        files(disk.path()),
        vec!["out.tcs".to_string(), "out.tns".to_string()]
    );
}

#[test]
fn a_full_disk_under_the_sorted_runs_fails_and_removes_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    big_input(d, "t.tns");
    let Some(disk) = Tmpfs::mount("256k") else {
        return;
    };
    std::fs::write(d.join("out.tcs"), OLD).unwrap();
    let temp = disk.path().to_str().unwrap();
    let said = failed(run(
        d,
        &[
            "convert",
            "t.tns",
            "out.tcs",
            "--memory",
            "1M",
            "--temp-dir",
            temp,
            "-q",
        ],
    ));
    assert!(said.contains("No space left on device"), "{said}");
    assert!(said.contains(temp), "the error names the run file: {said}");
    assert_eq!(files(disk.path()), Vec::<String>::new());
    assert_eq!(std::fs::read(d.join("out.tcs")).unwrap(), OLD);
    assert_eq!(temporaries(d), Vec::<String>::new());
}

#[test]
fn a_full_disk_under_split_and_merge_fails_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    big_input(d, "t.tcs");
    let Some(disk) = Tmpfs::mount("1m") else {
        return;
    };
    // split: some blocks fit, the rest do not; no block may stay.
    let blocks = disk.path().join("blocks");
    let said = failed(run(
        d,
        &[
            "split",
            "t.tcs",
            "--blocks",
            "0:4,1:2",
            "-o",
            blocks.to_str().unwrap(),
            "--ranks",
            "2",
            "-q",
        ],
    ));
    assert!(said.contains("No space left on device"), "{said}");
    assert!(said.contains("blocks"), "the error names the file: {said}");
    let left: Vec<String> = files(disk.path());
    assert!(
        left.iter().all(|n| !n.ends_with(".tcs")) && temporaries(disk.path()).is_empty(),
        "split left {left:?}"
    );

    // merge: blocks on a roomy disk, output on the full one next to an older file.
    ok(run(
        d,
        &[
            "split", "t.tcs", "--blocks", "0:3", "-o", "b", "--ranks", "2", "-q",
        ],
    ));
    let _ = std::fs::remove_dir_all(&blocks);
    let out = disk.path().join("t2.tcs");
    std::fs::write(&out, OLD).unwrap();
    let said = failed(run(
        d,
        &[
            "merge",
            "b",
            "-o",
            out.to_str().unwrap(),
            "--ranks",
            "3",
            "-q",
        ],
    ));
    assert!(said.contains("No space left on device"), "{said}");
    assert!(said.contains("t2.tcs"), "{said}");
    assert_eq!(std::fs::read(&out).unwrap(), OLD);
    assert_eq!(files(disk.path()), vec!["t2.tcs".to_string()]);
}

/// Waits for `child` at most `limit`; kills it and fails the test past that.
fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "no exit within {limit:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `args`, waits until `started` holds (or the command ends, or 20 s pass), sends
/// `signal`, and returns the command's output.
fn interrupt(d: &Path, args: &[&str], signal: &str, started: impl Fn() -> bool) -> Output {
    let child = bin()
        .args(args)
        .current_dir(d)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = child;
    let start = Instant::now();
    while !started() && child.try_wait().unwrap().is_none() && start.elapsed().as_secs() < 20 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status();
    wait_bounded(child, Duration::from_secs(120))
}

/// After a signal: finished with a valid output, or stopped with no output; no temporaries.
fn check_interrupted(d: &Path, o: &Output, output: &str, what: &str) {
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code().is_some(),
        "{what}: died of the signal instead of stopping cleanly: {:?} {stderr}",
        o.status
    );
    let temps = temporaries(d);
    assert!(temps.is_empty(), "{what}: left {temps:?}; {stderr}");
    let out = d.join(output);
    if o.status.success() {
        if out.extension().is_some_and(|e| e == "tcs") {
            ok(run(d, &["info", output, "-q"]));
        }
    } else {
        assert!(stderr.contains("interrupted"), "{what}: {stderr}");
        let left = if out.is_dir() {
            files(&out)
                .into_iter()
                .filter(|n| n.ends_with(".tcs"))
                .count()
        } else {
            usize::from(out.exists())
        };
        assert_eq!(left, 0, "{what}: an interrupted command left output");
    }
}

fn any_temporary(d: PathBuf) -> impl Fn() -> bool {
    move || !temporaries(&d).is_empty()
}

#[test]
fn sigint_and_sigterm_during_convert_split_and_merge_leave_nothing_half_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    big_input(d, "t.tns");
    ok(run(d, &["convert", "t.tns", "t.tcs", "-q"]));
    ok(run(
        d,
        &["split", "t.tcs", "--blocks", "0:4", "-o", "b", "-q"],
    ));
    for signal in ["INT", "TERM"] {
        let o = interrupt(
            d,
            &["convert", "t.tns", "c.tcs", "--memory", "1M", "-q"],
            signal,
            any_temporary(d.to_path_buf()),
        );
        check_interrupted(d, &o, "c.tcs", &format!("convert, SIG{signal}"));
        let _ = std::fs::remove_file(d.join("c.tcs"));

        let o = interrupt(
            d,
            &["split", "t.tcs", "--blocks", "0:8,1:8", "-o", "s", "-q"],
            signal,
            || d.join("s").exists(),
        );
        check_interrupted(d, &o, "s", &format!("split, SIG{signal}"));
        let _ = std::fs::remove_dir_all(d.join("s"));

        let o = interrupt(
            d,
            &["merge", "b", "-o", "m.tcs", "--ranks", "3", "-q"],
            signal,
            any_temporary(d.to_path_buf()),
        );
        check_interrupted(d, &o, "m.tcs", &format!("merge, SIG{signal}"));
        let _ = std::fs::remove_file(d.join("m.tcs"));
    }
}

#[test]
fn a_tcs_file_truncated_while_it_is_read_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    big_input(d, "t.tcs");
    let whole = std::fs::read(d.join("t.tcs")).unwrap();
    // Opened, then truncated by someone else: the reader holds what it validated.
    std::fs::write(d.join("v.tcs"), &whole).unwrap();
    let f = tessera_formats::TcsFile::open(&d.join("v.tcs")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(d.join("v.tcs"))
        .unwrap()
        .set_len(100)
        .unwrap();
    let t = f.to_tensor::<f64, u32>().unwrap();
    let original = tessera_formats::TcsFile::open(&d.join("t.tcs")).unwrap();
    assert!(t == original.to_tensor::<f64, u32>().unwrap());
    // Truncated while `info` and `convert` read it, at whatever moment the truncation lands.
    for (k, args) in [
        &["info", "v.tcs", "-q"][..],
        &["convert", "v.tcs", "v.tns", "-q"][..],
    ]
    .iter()
    .cycle()
    .take(6)
    .enumerate()
    {
        std::fs::write(d.join("v.tcs"), &whole).unwrap();
        let child = bin()
            .args(*args)
            .current_dir(d)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(k as u64 * 3));
        std::fs::File::options()
            .write(true)
            .open(d.join("v.tcs"))
            .unwrap()
            .set_len(whole.len() as u64 / 2)
            .unwrap();
        let o = wait_bounded(child, Duration::from_secs(60));
        assert!(
            o.status.code().is_some(),
            "{args:?}: killed by {:?}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        if !o.status.success() {
            let said = String::from_utf8_lossy(&o.stderr);
            assert!(said.contains("v.tcs"), "{said}");
        }
        assert!(temporaries(d).is_empty(), "{:?}", temporaries(d));
        let _ = std::fs::remove_file(d.join("v.tns"));
    }
}

/// Found by hand (hostile inputs): one entry far from the origin, converted to a dense
/// format, writes zeros for minutes (80 GB for 100000 x 100000) and ignored SIGINT/SIGTERM,
/// which were checked only between entries; a dense size beyond what a file can address
/// spun forever. Now the zeros stop at a signal, and the impossible size is refused.
#[test]
fn a_huge_dense_output_stops_at_a_signal_and_an_impossible_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("far.tns"), "100000 100000 1\n").unwrap();
    std::fs::write(
        d.join("far.mtx"),
        "%%MatrixMarket matrix coordinate real general\n100000 100000 1\n100000 100000 1\n",
    )
    .unwrap();
    for (input, signal) in [("far.tns", "INT"), ("far.mtx", "TERM")] {
        let o = interrupt(
            d,
            &["convert", input, "far.tcs", "-f", "dense", "-q"],
            signal,
            any_temporary(d.to_path_buf()),
        );
        check_interrupted(d, &o, "far.tcs", &format!("dense {input}, SIG{signal}"));
        assert!(!o.status.success(), "80 GB were written that fast?");
    }
    std::fs::write(d.join("huge.tns"), "# dims 4000000000 4000000000\n1 1 1\n").unwrap();
    let said = failed(run(d, &["convert", "huge.tns", "huge.tcs", "-f", "dense"]));
    assert!(said.contains("too large"), "{said}");
    assert!(files(d)
        .iter()
        .all(|n| !n.starts_with("huge.tcs") && !n.starts_with('.')));
}

/// A second Ctrl-C exits at once (`exit(130)`, no unwinding); it must still
/// remove the temporaries (`.c.tcs.X.partial`, `.tessera-sort.X/`). Two signals sent back to
/// back land either both before the cleanup (exit 130) or one after it (exit 1): nothing may
/// be left either way. Before the fix, runs that exited 130 left both temporaries.
#[test]
fn a_second_sigint_during_convert_leaves_no_temporaries() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    big_input(d, "t.tns");
    for round in 0..4 {
        let child = bin()
            .args(["convert", "t.tns", "c.tcs", "--memory", "1M", "-q"])
            .current_dir(d)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let mut child = child;
        while temporaries(d).is_empty()
            && child.try_wait().unwrap().is_none()
            && start.elapsed().as_secs() < 20
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = child.id().to_string();
        let _ = Command::new("sh")
            .args(["-c", &format!("kill -INT {pid}; kill -INT {pid}")])
            .status();
        let o = wait_bounded(child, Duration::from_secs(120));
        let temps = temporaries(d);
        assert!(
            temps.is_empty(),
            "round {round}: exit {:?} left {temps:?}",
            o.status.code()
        );
        if !o.status.success() {
            assert!(!d.join("c.tcs").exists(), "round {round}: output left");
        }
        let _ = std::fs::remove_file(d.join("c.tcs"));
    }
}
