//! `tessera compile --mpi`: the program of a distribution schedule run by `mpirun -n 2` and
//! `-n 4` gives the answer it gives as one process (started without `mpirun`), and a program
//! built without `--mpi` refuses to run under `mpirun`. Built only with the compiler's feature
//! `mpi` (scripts/test.sh runs it in its MPI step: OpenMPI, as root in a container).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tessera_formats::{TcsHeader, Tensor};

fn tessera() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    c.env(
        "TESSERA_CACHE",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("tessera-cache"),
    );
    c
}

fn text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `prog` under `mpirun -n ranks` (bounded: a hang is a failure), or alone for `ranks == 0`.
fn launch(prog: &Path, ranks: usize, args: &[String]) -> Output {
    let mut c = Command::new("timeout");
    c.arg("300");
    if ranks > 0 {
        c.args(["mpirun", "--allow-run-as-root", "--oversubscribe", "-n"])
            .arg(ranks.to_string());
    }
    let out = c
        .arg(prog)
        .args(args)
        .output()
        .expect("timeout and mpirun (openmpi-bin) are installed");
    assert_ne!(
        out.status.code(),
        Some(124),
        "{ranks} ranks hung:\n{}",
        text(&out)
    );
    out
}

/// A 300 × 200 CSR matrix with uneven rows (empty ones too) and a dense vector, as files.
fn inputs(dir: &Path) -> (PathBuf, PathBuf) {
    let (m, n) = (300usize, 200usize);
    let mut entries = Vec::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..m {
        let per_row = (next() % 12) as usize * usize::from(i % 7 != 3);
        for _ in 0..per_row {
            let j = (next() % n as u64) as usize;
            let v = (next() % 2000) as f64 / 100.0 - 10.0;
            entries.push((vec![i, j], v));
        }
    }
    let a = Tensor::<f64, u32>::from_entries(vec![m, n], "csr", entries).unwrap();
    let x: Vec<f64> = (0..n).map(|j| ((j * 7) % 11) as f64 - 5.0).collect();
    let x = Tensor::<f64, u32>::dense_from_vec(vec![n], x).unwrap();
    let (pa, px) = (dir.join("A.tcs"), dir.join("x.tns"));
    a.write(&pa).unwrap();
    x.write(&px).unwrap();
    (pa, px)
}

fn compile(dir: &Path, schedule: &str, mpi: bool, name: &str) -> PathBuf {
    compile_with(dir, "y(i) = A(i,j) * x(j)", &["A:csr"], schedule, mpi, name)
}

fn compile_with(
    dir: &Path,
    statement: &str,
    formats: &[&str],
    schedule: &str,
    mpi: bool,
    name: &str,
) -> PathBuf {
    let prog = dir.join(name);
    let out = tessera()
        .args(["compile", statement, "-s", schedule])
        .args(formats.iter().flat_map(|f| ["-f", f]))
        .args(mpi.then_some("--mpi"))
        .arg("-o")
        .arg(&prog)
        .output()
        .unwrap();
    assert!(out.status.success(), "compile {schedule}: {}", text(&out));
    prog
}

fn run_args(a: &Path, x: &Path, y: &Path) -> Vec<String> {
    vec![
        "-i".into(),
        format!("A={}", a.display()),
        "-i".into(),
        format!("x={}", x.display()),
        "-o".into(),
        y.display().to_string(),
        "--threads".into(),
        "1".into(),
        "--stats".into(),
    ]
}

fn read_y(path: &Path) -> Vec<f64> {
    Tensor::<f64, u32>::read(path, "d").unwrap().to_dense()
}

#[test]
fn mpi_ranks_compute_what_one_process_computes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, x) = inputs(dir.path());
    for (i, (schedule, blocks)) in [
        ("split(i, io, ii, 4); map(io)", 4),
        ("split(i, io, ii, 7)", 7),
    ]
    .into_iter()
    .enumerate()
    {
        let prog = compile(dir.path(), schedule, true, &format!("spmv{i}"));
        let help = launch(&prog, 0, &["--help".to_string()]);
        assert!(
            String::from_utf8_lossy(&help.stdout).contains("mpirun -n N"),
            "{}",
            text(&help)
        );
        let one = dir.path().join(format!("y{i}-1.tns"));
        let out = launch(&prog, 0, &run_args(&a, &x, &one));
        assert!(out.status.success(), "one process: {}", text(&out));
        let want = read_y(&one);
        for ranks in [2, 4] {
            let y = dir.path().join(format!("y{i}-{ranks}.tns"));
            let out = launch(&prog, ranks, &run_args(&a, &x, &y));
            assert!(
                out.status.success(),
                "{schedule}, {ranks} ranks: {}",
                text(&out)
            );
            // Every row is summed by one point in the same order at any rank count.
            assert_eq!(read_y(&y), want, "{schedule}, {ranks} ranks");
            // Each rank runs only its shard: the blocks' points add up over the ranks.
            let stderr = String::from_utf8_lossy(&out.stderr);
            let run: usize = (0..ranks)
                .map(|r| {
                    points_run(&stderr, r, ranks)
                        .unwrap_or_else(|| panic!("no statistics from rank {r}: {}", text(&out)))
                })
                .sum();
            assert_eq!(run, blocks, "{schedule}, {ranks} ranks: {}", text(&out));
            // Each rank read `pos` whole and only its rows of `crd` and `vals`: together the
            // file's arrays once, plus `pos` once more per further rank.
            let read: Vec<(u64, u64)> = (0..ranks)
                .map(|r| {
                    bytes_read(&stderr, r, ranks)
                        .unwrap_or_else(|| panic!("no bytes read from rank {r}: {}", text(&out)))
                })
                .collect();
            let total = read[0].1;
            let pos = (300 + 1) * 4;
            let sum: u64 = read.iter().map(|r| r.0).sum();
            assert_eq!(
                sum,
                total + (ranks as u64 - 1) * pos,
                "{schedule}, {ranks} ranks"
            );
            assert!(read.iter().all(|r| r.0 < total), "{read:?}");
        }
    }
}

/// A `.tcs` output across ranks is written by every rank, each its own part (the distributed
/// storer, no gather): byte for byte the file one process writes, for a vector tiled by rows
/// (at 4 ranks one rank owns no tile), a matrix tiled by rows and columns or by rows alone, a
/// sparse matrix whose rows several ranks make (CSR and COO), and a scalar.
#[test]
fn a_tcs_output_stored_by_every_rank_is_the_file_one_process_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, x) = inputs(dir.path());
    // B(k,j): the vector x's 200 values as a 200 × 2 dense matrix (x, then 2x).
    let xs = read_y(&x);
    let b: Vec<f64> = xs.iter().flat_map(|&v| [v, 2.0 * v]).collect();
    let b = Tensor::<f64, u32>::dense_from_vec(vec![200, 2], b).unwrap();
    let pb = dir.path().join("B.tns");
    b.write(&pb).unwrap();
    let csr = &["A:csr"][..];
    let cases = [
        ("y(i) = A(i,j) * x(j)", csr, "split(i, io, ii, 3)", "x", &x),
        // Tiles of rows and columns: 2-d rectangles of the output store.
        (
            "C(i,j) = A(i,k) * B(k,j)",
            csr,
            "split(i, io, ii, 3); split(j, jo, ji, 2)",
            "B",
            &pb,
        ),
        // Rows only: the store merges the levels (i, j) into one dimension.
        (
            "C(i,j) = A(i,k) * B(k,j)",
            csr,
            "split(i, io, ii, 3)",
            "B",
            &pb,
        ),
        // A sparse output, its rows made by points on several ranks (`k` extended): each
        // rank stores the rows it owns, sent by the ranks that made them.
        (
            "C(i,j) = A(i,k) * B(k,j)",
            &["A:csr", "C:csr"][..],
            "split(i, io, ii, 2); split(k, ko, ki, 3); extend(ko)",
            "B",
            &pb,
        ),
        // The same in COO: the file one process writes in `sq`, not its unique form `ss`.
        (
            "C(i,j) = A(i,k) * B(k,j)",
            &["A:csr", "C:coo"][..],
            "split(i, io, ii, 2); split(k, ko, ki, 3); extend(ko)",
            "B",
            &pb,
        ),
        // A scalar has no modes to cut: rank 0 stores it.
        ("s = A(i,j) * x(j)", csr, "split(i, io, ii, 3)", "x", &x),
    ];
    for (n, (statement, formats, schedule, operand, input)) in cases.into_iter().enumerate() {
        let name = format!("tcs{n}");
        let prog = compile_with(dir.path(), statement, formats, schedule, true, &name);
        let args = |out: &Path| {
            let mut v = run_args(&a, input, out);
            v[3] = format!("{operand}={}", input.display());
            v
        };
        let one = dir.path().join(format!("out{n}-1.tcs"));
        let out = launch(&prog, 0, &args(&one));
        assert!(out.status.success(), "one process: {}", text(&out));
        let want = std::fs::read(&one).unwrap();
        for ranks in [2, 4] {
            let got = dir.path().join(format!("out{n}-{ranks}.tcs"));
            let out = launch(&prog, ranks, &args(&got));
            assert!(
                out.status.success(),
                "{statement}, {ranks} ranks: {}",
                text(&out)
            );
            assert!(
                std::fs::read(&got).unwrap() == want,
                "{statement} {formats:?}, {ranks} ranks: the stored file differs from one process's"
            );
            // Every rank wrote its own values, none all of them: no rank gathered the output.
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stored: Vec<(u64, u64)> = (0..ranks)
                .map(|r| {
                    values_stored(&stderr, r, ranks)
                        .unwrap_or_else(|| panic!("no output line from rank {r}: {}", text(&out)))
                })
                .collect();
            let total = stored[0].1;
            assert_eq!(stored.iter().map(|s| s.0).sum::<u64>(), total, "{stored:?}");
            assert!(
                total == 1 || stored.iter().all(|s| s.0 < total),
                "{statement}: {stored:?}"
            );
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "temporary files left behind: {left:?}");
}

/// The point tasks rank `r` of `ranks` ran, from its `--stats` line
/// ("rank R of N: runtime: … P point tasks run, …").
fn points_run(stderr: &str, r: usize, ranks: usize) -> Option<usize> {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix(&format!("rank {r} of {ranks}: ")))?;
    let before = &line[..line.find(" point tasks run")?];
    before.rsplit(' ').next()?.parse().ok()
}

/// Rank `r`'s values of a `.tcs` output it stored, and the output's, from its `--stats` line
/// ("rank R of N: output values stored M of T").
fn values_stored(stderr: &str, r: usize, ranks: usize) -> Option<(u64, u64)> {
    let prefix = format!("rank {r} of {ranks}: output values stored ");
    let rest = stderr.lines().find_map(|l| l.strip_prefix(&prefix))?;
    let mut words = rest.split(' ');
    let mine = words.next()?.parse().ok()?;
    let all = words.nth(1)?.parse().ok()?;
    Some((mine, all))
}

/// Rank `r`'s bytes of `.tcs` input arrays read, and their total, from its `--stats` line
/// ("… input bytes read B of T …").
fn bytes_read(stderr: &str, r: usize, ranks: usize) -> Option<(u64, u64)> {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix(&format!("rank {r} of {ranks}: ")))?;
    let rest = &line[line.find("input bytes read ")? + "input bytes read ".len()..];
    let mut words = rest.split(' ');
    let read = words.next()?.parse().ok()?;
    let total = words.nth(1)?.parse().ok()?;
    Some((read, total))
}

#[test]
fn a_missing_input_on_every_rank_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = inputs(dir.path());
    let prog = compile(dir.path(), "split(i, io, ii, 4); map(io)", true, "spmv");
    let missing = dir.path().join("nope.tns");
    let y = dir.path().join("y.tns");
    let out = launch(&prog, 2, &run_args(&a, &missing, &y));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nope.tns"),
        "the error names the file: {}",
        text(&out)
    );
    assert!(!y.exists(), "no output is written");
}

/// A `.tcs` input whose alignment padding is damaged is refused across ranks as on one
/// process (the ranks reading shares did not look at the padding, and computed).
#[test]
fn a_tcs_input_with_damaged_padding_is_refused_across_ranks_too() {
    let dir = tempfile::tempdir().unwrap();
    let (a, x) = inputs(dir.path());
    let header = TcsHeader::read_from(&std::fs::File::open(&a).unwrap(), &a).unwrap();
    let gap = (header.gaps().into_iter())
        .find(|g| !g.is_empty())
        .expect("an array padded to alignment");
    let mut bytes = std::fs::read(&a).unwrap();
    bytes[gap.start as usize] = 1;
    std::fs::write(&a, bytes).unwrap();
    let prog = compile(dir.path(), "split(i, io, ii, 4); map(io)", true, "spmv");
    for ranks in [0, 2] {
        let y = dir.path().join(format!("y{ranks}.tns"));
        let out = launch(&prog, ranks, &run_args(&a, &x, &y));
        assert!(!out.status.success(), "{ranks} ranks: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("A.tcs") && stderr.contains("padding"),
            "{ranks} ranks: {}",
            text(&out)
        );
        assert!(!y.exists());
    }
}

#[test]
fn a_program_built_without_mpi_refuses_mpirun() {
    let dir = tempfile::tempdir().unwrap();
    let (a, x) = inputs(dir.path());
    let prog = compile(dir.path(), "split(i, io, ii, 4); map(io)", false, "spmv");
    let y = dir.path().join("y.tns");
    let out = launch(&prog, 2, &run_args(&a, &x, &y));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tessera compile --mpi"),
        "{}",
        text(&out)
    );
    assert!(!y.exists());
    // A job of one rank is one process: it runs (the docs refuse only several ranks).
    let one = dir.path().join("y1.tns");
    let out = launch(&prog, 0, &run_args(&a, &x, &one));
    assert!(out.status.success(), "one process: {}", text(&out));
    let out = launch(&prog, 1, &run_args(&a, &x, &y));
    assert!(out.status.success(), "mpirun -n 1: {}", text(&out));
    assert_eq!(read_y(&y), read_y(&one));
}

/// An output in a directory that does not exist is refused by every rank before anything is
/// read or computed, naming the flag and the directory (it was found only when writing: after
/// the whole computation, as rank 0 aborting the job or as a temporary file's name).
#[test]
fn an_output_in_a_missing_directory_is_refused_before_computing() {
    let dir = tempfile::tempdir().unwrap();
    let (a, x) = inputs(dir.path());
    let prog = compile(dir.path(), "split(i, io, ii, 4); map(io)", true, "spmv");
    for name in ["y.tcs", "y.tns"] {
        let y = dir.path().join("nodir").join(name);
        let out = launch(&prog, 2, &run_args(&a, &x, &y));
        assert!(!out.status.success(), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.matches("nodir does not exist").count(),
            2,
            "each rank names the directory: {}",
            text(&out)
        );
        assert!(stderr.contains("`-o "), "the flag: {}", text(&out));
        // No `--stats` line: nothing ran.
        assert!(!stderr.contains("point tasks run"), "{}", text(&out));
    }
    assert!(!dir.path().join("nodir").exists());
}

/// Ranks interrupted (SIGINT, then SIGTERM, as each rank's own signal) while they store a
/// `.tcs` output leave no temporary file: the storer's temporary, which rank 0 names for all
/// ranks, is listed for the signal handler like any output's. Either the job finished and the
/// file is complete, or it stopped and there is no file. The signal is sent as soon as the
/// temporary appears; a job that finishes first passes too. Reuses the program of the `.tcs`
/// output test (`split(i, io, ii, 3)` of the SpMM), on a 40 MB output.
#[test]
fn ranks_interrupted_while_storing_a_tcs_output_leave_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let (m, k, n) = (50_000usize, 200usize, 100usize);
    let entries = (0..m).flat_map(|i| [(vec![i, i % k], 1.0), (vec![i, (i * 7) % k], -0.5)]);
    let a = Tensor::<f64, u32>::from_entries(vec![m, k], "csr", entries).unwrap();
    let b = (0..k * n).map(|v| (v % 13) as f64).collect();
    let b = Tensor::<f64, u32>::dense_from_vec(vec![k, n], b).unwrap();
    let (pa, pb) = (dir.path().join("A.tcs"), dir.path().join("B.tcs"));
    a.write(&pa).unwrap();
    b.write(&pb).unwrap();
    let statement = "C(i,j) = A(i,k) * B(k,j)";
    let prog = compile_with(
        dir.path(),
        statement,
        &["A:csr"],
        "split(i, io, ii, 3)",
        true,
        "mm",
    );
    let out_dir = tempfile::tempdir().unwrap();
    let c = out_dir.path().join("C.tcs");
    let temporary = || {
        std::fs::read_dir(out_dir.path())
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().contains(".merge-"))
    };
    for signal in ["-INT", "-TERM"] {
        let _ = std::fs::remove_file(&c);
        let mut args = run_args(&pa, &pb, &c);
        args[3] = format!("B={}", pb.display());
        let mut job = Command::new("mpirun")
            .args(["--allow-run-as-root", "--oversubscribe", "-n", "2"])
            .arg(&prog)
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let (mut signalled, start) = (false, std::time::Instant::now());
        let status = loop {
            if let Some(status) = job.try_wait().unwrap() {
                break status;
            }
            assert!(start.elapsed().as_secs() < 120, "{signal}: the job hung");
            if !signalled && temporary() {
                // The ranks themselves, by their parent's id: the signal a rank gets when
                // its terminal's Ctrl-C or a batch system stops it.
                let parent = job.id().to_string();
                let _ = Command::new("pkill").args([signal, "-P", &parent]).status();
                signalled = true;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        };
        eprintln!("{signal}: signalled while storing: {signalled}, {status:?}");
        assert!(!temporary(), "{signal}: a temporary was left behind");
        assert!(
            status.success() || signalled,
            "{signal}: failed without a signal: {status:?}"
        );
        // A file there is whole (its checksums hold), whatever the status.
        if status.success() || c.exists() {
            let read = Tensor::<f64, u32>::read(&c, "dd").unwrap();
            assert_eq!(read.dims(), [m, n], "{signal}");
        }
    }
}
