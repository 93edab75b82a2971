//! The `tessera-data` binary as a user runs it: generate → convert → info, the way back,
//! errors with locations and exit codes, and no output left after failures.

use std::path::Path;
use std::process::{Command, Output};

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera-data"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("binary runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn generate_convert_info_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = run(
        d,
        &[
            "generate", "--dims", "40,50,60", "--nnz", "3000", "--seed", "3", "-o", "t.tns",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    // Deterministic: the same seed gives the same bytes.
    let o = run(
        d,
        &[
            "generate", "--dims", "40,50,60", "--nnz", "3000", "--seed", "3", "-o", "u.tns",
        ],
    );
    assert!(o.status.success());
    assert_eq!(
        std::fs::read(d.join("t.tns")).unwrap(),
        std::fs::read(d.join("u.tns")).unwrap()
    );
    let o = run(
        d,
        &[
            "convert",
            "t.tns",
            "t.tcs",
            "--format",
            "dss:2,0,1",
            "--index-width",
            "64",
            "--value",
            "f32",
            "--memory",
            "1M",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = run(d, &["info", "t.tcs"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for want in [
        "dims:        40 x 50 x 60",
        "format:      dss:2,0,1",
        "f32, 64-bit",
        "validation:  ok",
        // `generate --nnz 3000` gives 3000 distinct entries: nothing to sum.
        "nonzeros:    3000 stored values",
    ] {
        assert!(out.contains(want), "missing `{want}` in\n{out}");
    }
    let o = run(d, &["convert", "t.tcs", "back.tns"]);
    assert!(o.status.success(), "{}", text(&o));
    let info = text(&run(d, &["info", "back.tns"]));
    assert!(
        info.contains("dims:        40 x 50 x 60 (declared)"),
        "{info}"
    );
}

#[test]
fn generated_tcs_and_mtx_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = run(
        d,
        &[
            "generate",
            "--dims",
            "10,12",
            "--kind",
            "poisson2d",
            "-o",
            "p.tcs",
            "--format",
            "csr",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let info = text(&run(d, &["info", "p.tcs"]));
    // 120 cells, each with itself and its in-grid neighbours: 120 + 2*9*12 + 2*11*10.
    assert!(
        info.contains(&format!(
            "nonzeros:    {} stored values",
            120 + 2 * 9 * 12 + 2 * 11 * 10
        )),
        "{info}"
    );
    assert!(info.contains("format:      ds"), "{info}");
    let o = run(
        d,
        &[
            "generate",
            "--dims",
            "30,30",
            "--density",
            "0.1",
            "--kind",
            "powerlaw",
            "-o",
            "g.mtx",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let info = text(&run(d, &["info", "g.mtx"]));
    assert!(info.contains("entries:     90 "), "{info}");
    assert_eq!(
        names(d),
        vec!["g.mtx", "p.tcs"],
        "no temporary files remain"
    );
}

#[test]
fn invalid_files_fail_with_locations_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("bad.tns"), "# x\n1 2 3.0\n\n2 2 x\n").unwrap();
    let o = run(d, &["convert", "bad.tns", "bad.tcs"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("bad.tns:4:5"), "{}", text(&o));
    assert_eq!(names(d), vec!["bad.tns"]);
    let o = run(d, &["info", "bad.tns"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("validation:  FAILED"));
    std::fs::write(
        d.join("junk.tcs"),
        b"not a tensor at all, but long enough to hold a header prefix....",
    )
    .unwrap();
    let o = run(d, &["info", "junk.tcs"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("bad magic"), "{}", text(&o));
    let o = run(d, &["convert", "bad.tns", "out.tcs", "--memory", "lots"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("--memory"), "{}", text(&o));
    // Flags that only shape a .tcs output are refused for a text one, not ignored.
    std::fs::write(d.join("ok.tns"), "1 2 3.0\n").unwrap();
    for flags in [&["-f", "ds"][..], &["--temp-dir", "."]] {
        let o = run(d, &[&["convert", "ok.tns", "ok.mtx"][..], flags].concat());
        assert!(!o.status.success(), "{flags:?}");
        assert!(
            text(&o).contains(flags[0]) && text(&o).contains("ok.mtx"),
            "{}",
            text(&o)
        );
    }
    assert_eq!(names(d), vec!["bad.tns", "junk.tcs", "ok.tns"]);
    // A coordinate too large for any tensor is the input's fault, not the output's.
    std::fs::write(d.join("far.tns"), "18446744073709551615 1 1.0\n").unwrap();
    let o = run(d, &["convert", "far.tns", "far.tcs", "--index-width", "64"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("far.tns") && t.contains("mode 0") && !t.contains("far.tcs"),
        "{t}"
    );
    // A temporary directory that cannot take the sorted runs names its flag.
    std::fs::write(d.join("two.tns"), "2 1 1.0\n1 1 2.0\n").unwrap();
    let o = run(
        d,
        &[
            "convert",
            "two.tns",
            "two.tcs",
            "--memory",
            "1",
            "--temp-dir",
            "nowhere",
        ],
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("--temp-dir"), "{}", text(&o));
    for f in ["far.tns", "two.tns", "ok.tns"].map(|f| d.join(f)) {
        std::fs::remove_file(f).unwrap();
    }
    let o = run(d, &["generate", "--dims", "3,3", "-o", "x.tns"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("--nnz or --density"), "{}", text(&o));
    // A dimension past 32 bits names the flag that takes it.
    let huge = "%%MatrixMarket matrix coordinate real general\n99999999999 2 1\n1 1 1.0\n";
    std::fs::write(d.join("huge.mtx"), huge).unwrap();
    let o = run(d, &["convert", "huge.mtx", "huge.tcs"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("`--index-width 64`"), "{}", text(&o));
    std::fs::remove_file(d.join("huge.mtx")).unwrap();
    assert_eq!(names(d), vec!["bad.tns", "junk.tcs"]);
}

/// A budget far above the input and the machine (`--memory 1000T`) is a bound, not a size:
/// the run buffer of an unsorted input was reserved from it (103 GB), the allocation failed
/// and the process aborted, leaving its `.tessera-sort.*` directory behind.
#[test]
fn an_absurd_memory_budget_is_a_bound_not_a_reservation() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gen = [
        "generate", "--dims", "300,300", "--nnz", "2000", "-o", "u.tns", "-q",
    ];
    assert!(run(d, &gen).status.success());
    let o = run(d, &["convert", "u.tns", "u.tcs", "--memory", "1000T", "-q"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("2000 entries read"), "{}", text(&o));
    assert_eq!(
        names(d),
        vec!["u.tcs", "u.tns"],
        "no temporary files remain"
    );
}

#[test]
fn help_shows_examples() {
    for sub in ["convert", "info", "generate"] {
        let o = Command::new(env!("CARGO_BIN_EXE_tessera-data"))
            .args([sub, "--help"])
            .output()
            .unwrap();
        let out = text(&o);
        assert!(
            out.contains("Examples:") && out.contains(&format!("tessera-data {sub}")),
            "{out}"
        );
    }
}

/// An error is said once: the message of a file error already quotes its cause, so the
/// printed chain must not repeat it.
#[test]
fn an_error_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("t.tcs"), b"TCS\0trunc").unwrap();
    let o = run(d, &["convert", "t.tcs", "o.mtx"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(err.contains("t.tcs"), "{err}");
    let first_line = err.lines().find(|l| l.starts_with("error:")).unwrap();
    let words: Vec<&str> = first_line.split(": ").collect();
    let mut seen = std::collections::HashSet::new();
    assert!(
        words.iter().all(|w| seen.insert(*w)),
        "repeated cause: {first_line}"
    );
    assert!(!d.join("o.mtx").exists());
}

/// `tessera-data info t.tcs | head` closes the pipe before the report is written: the tool
/// ends quietly with status 0 (as Unix tools do), never with a "failed printing to stdout"
/// panic.
#[test]
fn info_into_a_closed_pipe_ends_quietly() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = run(
        d,
        &[
            "generate", "--dims", "30,30", "--nnz", "100", "--seed", "2", "-o", "t.tns",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera-data"))
        .args(["info", "t.tns", "-q"])
        .current_dir(d)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    // The only read end goes away before the child writes its report (it has a file to read
    // first).
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("binary ends");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{:?}: {err}", o.status);
    assert!(!err.contains("panicked"), "{err}");
}
