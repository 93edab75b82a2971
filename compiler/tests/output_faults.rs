//! A compiled program whose output disk fills up: a clear error naming the output file, a
//! failure status (not a panic), no temporary file left, and an older file of the same name
//! untouched. The disk is a small tmpfs mounted by the test (as root; skipped with a message
//! where mounting is not allowed).
//!
//! Uses the statement of `cli.rs`, so both share one cached program build.

use std::path::Path;
use std::process::Command;

use tessera_formats::{MtxWriter, TnsWriter};

fn tessera() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    c.env(
        "TESSERA_CACHE",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("tessera-cache"),
    );
    c
}

// The tmpfs of `tessera-data`'s fault tests (one definition for both crates' tests).
#[path = "../../datasets/tests/common/tmpfs.rs"]
mod tmpfs;
use tmpfs::Tmpfs;

const OLD: &[u8] = b"an older output\n";

/// The inputs of `y = A x + z` in `dir`: `A.mtx` the `n × n` identity, `x.tns` and `z.tns`
/// dense (so the output has `n` lines).
fn write_identity_system(dir: &Path, n: u64) {
    let p = |name: &str| dir.join(name);
    let mut a = MtxWriter::create(&p("A.mtx"), n, n, Some(n)).unwrap();
    let mut x = TnsWriter::create(&p("x.tns")).unwrap();
    let mut z = TnsWriter::create(&p("z.tns")).unwrap();
    for i in 0..n {
        a.write_entry(i, i, 1.0).unwrap();
        x.write_entry(&[i], 0.5 + i as f64).unwrap();
        z.write_entry(&[i], 0.25).unwrap();
    }
    a.finish().unwrap();
    x.finish().unwrap();
    z.finish().unwrap();
}

#[test]
fn a_full_disk_under_a_programs_output_fails_naming_the_file() {
    let Some(disk) = Tmpfs::mount("256k") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    // y = A x + z with A the identity: 60 000 output lines, about 1 MB of text.
    let n = 60_000u64;
    write_identity_system(dir.path(), n);
    for out in ["y.tns", "y.tcs"] {
        let y = disk.path().join(out);
        std::fs::write(&y, OLD).unwrap();
        let arg = |name: &str, file: &str| format!("{name}={}", p(file).display());
        let o = tessera()
            .args(["run", "y(i) = A(i,j) * x(j) + z(i)", "-f", "A:csr"])
            .args(["-s", "parallelize(i)"])
            .args(["-i", &arg("A", "A.mtx"), "-i", &arg("x", "x.tns")])
            .args(["-i", &arg("z", "z.tns")])
            .args(["-o", &y.display().to_string()])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success(),
            "{out}: a full disk went unnoticed: {said}"
        );
        assert!(!said.contains("panicked"), "{out}: {said}");
        assert!(
            said.contains(out),
            "{out}: the error names the file: {said}"
        );
        assert!(said.contains("No space left on device"), "{out}: {said}");
        assert_eq!(
            std::fs::read(&y).unwrap(),
            OLD,
            "{out}: the old output changed"
        );
        let left: Vec<String> = std::fs::read_dir(disk.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.iter().any(|n| n == out), "{left:?}");
        assert!(
            left.iter().all(|n| !n.starts_with('.')),
            "temporary left: {left:?}"
        );
    }
}

/// `y = A x + z` compiled (with a schedule, so its output is written by the parallel path)
/// into `dir/prog`, beside its inputs from [`write_identity_system`] of `n` rows.
fn identity_program(dir: &Path, n: u64) -> std::path::PathBuf {
    write_identity_system(dir, n);
    let prog = dir.join("prog");
    let o = tessera()
        .args(["compile", "y(i) = A(i,j) * x(j) + z(i)", "-f", "A:csr"])
        .args(["-s", "parallelize(i)", "-o"])
        .arg(&prog)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    prog
}

/// Starts `dir/prog` on its inputs in `dir`, writing `output`, with `TMPDIR` set to `temp`;
/// sends it `signal` as soon as `ready()` holds; waits for it. Returns whether the signal was
/// sent (not if the program finished first) and how the program ended.
fn signalled_when(
    dir: &Path,
    output: &Path,
    temp: &Path,
    signal: &str,
    ready: impl Fn() -> bool,
) -> (bool, std::process::ExitStatus) {
    let arg = |name: &str, file: &str| format!("{name}={}", dir.join(file).display());
    let mut child = Command::new(dir.join("prog"))
        .args(["-i", &arg("A", "A.mtx"), "-i", &arg("x", "x.tns")])
        .args(["-i", &arg("z", "z.tns"), "-o"])
        .arg(output)
        .env("TMPDIR", temp)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let mut signalled = false;
    while child.try_wait().unwrap().is_none() && start.elapsed().as_secs() < 120 {
        if ready() {
            Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status()
                .unwrap();
            signalled = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    (signalled, child.wait().unwrap())
}

/// A compiled program interrupted (SIGINT, then SIGTERM) while it writes its output leaves
/// nothing half-written: either it finished and the output is complete, or it stopped with
/// no output and no temporary. The signal is sent as soon as the temporary appears, so the
/// test does not depend on how fast the machine is (a program that finishes first passes too).
#[test]
fn a_program_interrupted_while_writing_leaves_nothing_half_written() {
    let dir = tempfile::tempdir().unwrap();
    let n = 400_000u64;
    identity_program(dir.path(), n);
    let out_dir = tempfile::tempdir().unwrap();
    for signal in ["-INT", "-TERM"] {
        let y = out_dir.path().join("y.tns");
        let _ = std::fs::remove_file(&y);
        let partial = || {
            std::fs::read_dir(out_dir.path()).unwrap().any(|e| {
                e.unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".partial")
            })
        };
        let (signalled, status) =
            signalled_when(dir.path(), &y, &std::env::temp_dir(), signal, partial);
        eprintln!("{signal}: signalled while writing: {signalled}, {status:?}");
        assert!(!partial(), "{signal}: a temporary was left behind");
        if status.success() {
            let lines = std::fs::read_to_string(&y).unwrap().lines().count() as u64;
            assert!(
                lines >= n,
                "{signal}: the output is incomplete ({lines} lines)"
            );
        } else {
            assert!(signalled, "{signal}: failed without a signal: {status:?}");
            assert!(
                !y.exists(),
                "{signal}: an output appeared though the run was stopped"
            );
        }
    }
}

/// A compiled program interrupted (SIGINT, then SIGTERM) while it reads a text input leaves
/// nothing in `TMPDIR`: the input goes through the streaming converter into a temporary
/// directory there, which the signal handler removes with what it holds. The signal is sent
/// as soon as that directory appears (a program that finishes first passes too).
#[test]
fn a_program_interrupted_while_reading_text_leaves_no_temporary_directory() {
    let dir = tempfile::tempdir().unwrap();
    identity_program(dir.path(), 400_000);
    for signal in ["-INT", "-TERM"] {
        let temp = tempfile::tempdir().unwrap();
        let reading = || std::fs::read_dir(temp.path()).unwrap().next().is_some();
        let y = dir.path().join("y.tcs");
        let (signalled, status) = signalled_when(dir.path(), &y, temp.path(), signal, reading);
        eprintln!("{signal}: signalled while reading: {signalled}, {status:?}");
        let left: Vec<_> = std::fs::read_dir(temp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{signal}: left in TMPDIR: {left:?}");
        assert!(
            status.success() || signalled,
            "{signal}: failed without a signal: {status:?}"
        );
    }
}
