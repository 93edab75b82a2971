//! The `tessera` binary end to end: compile and run statements on files, compare the output
//! files with the oracle, and check that bad input gets clear errors and a failure status.
//!
//! Builds two generated programs (tens of seconds the first time; the cache and its target
//! directory live under CARGO_TARGET_TMPDIR, so later runs are incremental).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use tessera_compiler::check::{check, Dims};
use tessera_compiler::oracle::{evaluate, DenseArray};
use tessera_compiler::parse;
use tessera_formats::{open_text, Format, MtxWriter, Tensor, TnsWriter};

fn tessera() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    c.env(
        "TESSERA_CACHE",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("tessera-cache"),
    );
    c
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn failed(out: Output, what: &str) -> String {
    assert!(!out.status.success(), "{what} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A small deterministic sparse tensor: entry k of the dense index space is present when
/// `(k * 7 + seed) % 3 != 0`, and has a value that depends on k.
fn tensor(dims: &[usize], seed: usize) -> Tensor<f64> {
    let total: usize = dims.iter().product();
    let entries = (0..total)
        .filter(|k| !(k * 7 + seed).is_multiple_of(3))
        .map(|k| {
            let mut c = vec![0; dims.len()];
            let mut r = k;
            for m in (0..dims.len()).rev() {
                c[m] = r % dims[m];
                r /= dims[m];
            }
            (c, (k as f64 * 0.37 + seed as f64).sin())
        });
    Tensor::from_entries(dims.to_vec(), Format::all_compressed(dims.len()), entries).unwrap()
}

fn write_tns(path: &Path, t: &Tensor<f64>) {
    let mut w = TnsWriter::create(path).unwrap();
    for (c, v) in t.entries() {
        w.write_entry(&c.iter().map(|&x| x as u64).collect::<Vec<_>>(), v)
            .unwrap();
    }
    w.finish().unwrap();
}

fn write_mtx(path: &Path, t: &Tensor<f64>) {
    let mut w = MtxWriter::create(
        path,
        t.dims()[0] as u64,
        t.dims()[1] as u64,
        Some(t.nnz() as u64),
    )
    .unwrap();
    for (c, v) in t.entries() {
        w.write_entry(c[0] as u64, c[1] as u64, v).unwrap();
    }
    w.finish().unwrap();
}

/// Reads an output file into a dense array of the given dims.
fn read_dense(path: &Path, dims: &[usize]) -> DenseArray {
    let mut out = DenseArray::zeros(dims.to_vec());
    let mut r = open_text(path).unwrap();
    let mut c = vec![0u64; r.rank()];
    while let Some(v) = r.next_entry(&mut c).unwrap() {
        let at = c
            .iter()
            .zip(dims)
            .fold(0, |acc, (&x, &d)| acc * d + x as usize);
        out.data[at] += v;
    }
    out
}

fn oracle(statement: &str, inputs: &[(&str, &Tensor<f64>)]) -> DenseArray {
    let c = check(parse::program(statement, 0).unwrap(), &Dims::new()).unwrap();
    let map: HashMap<String, DenseArray> = inputs
        .iter()
        .map(|(n, t)| {
            (
                n.to_string(),
                DenseArray::new(t.dims().to_vec(), t.to_dense()).unwrap(),
            )
        })
        .collect();
    evaluate(&c, &map, None).unwrap()
}

fn assert_close(got: &DenseArray, want: &DenseArray) {
    assert_eq!(got.dims, want.dims);
    for (g, w) in got.data.iter().zip(&want.data) {
        assert!(
            (g - w).abs() <= 1e-9 * (1.0 + w.abs()),
            "got {:?}\nwant {:?}",
            got.data,
            want.data
        );
    }
}

fn arg(name: &str, path: &Path) -> String {
    format!("{name}={}", path.display())
}

#[test]
fn compile_and_run_on_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| -> PathBuf { dir.path().join(name) };

    // `run`: y(i) = A(i,j) * x(j) + z(i) with A in CSR from a .mtx file, vectors from .tns.
    let (a, x, z) = (tensor(&[5, 4], 1), tensor(&[4], 2), tensor(&[5], 0));
    // The vectors must reach their last coordinate: a .tns has no header.
    let x = Tensor::from_entries(
        vec![4],
        Format::dense(1),
        x.entries().chain([(vec![3], 0.5)]),
    )
    .unwrap();
    let z = Tensor::from_entries(
        vec![5],
        Format::dense(1),
        z.entries().chain([(vec![4], 0.25)]),
    )
    .unwrap();
    write_mtx(&p("A.mtx"), &a);
    write_tns(&p("x.tns"), &x);
    write_tns(&p("z.tns"), &z);
    let expr = "y(i) = A(i,j) * x(j) + z(i)";
    // The same statement and matrix each time: only the vector x, the output and extra flags vary.
    let run = |x: &str, out: &str, extra: &[&str]| {
        tessera()
            .args(["run", expr, "-f", "A:csr", "-s", "parallelize(i)"])
            .args(["-i", &arg("A", &p("A.mtx")), "-i", &arg("x", &p(x))])
            .args(["-i", &arg("z", &p("z.tns"))])
            .args(["-o", &p(out).display().to_string()])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run("x.tns", "y.tns", &["--threads", "2"]);
    ok(out, "tessera run");
    let want = oracle(expr, &[("A", &a), ("x", &x), ("z", &z)]);
    assert_close(&read_dense(&p("y.tns"), &[5]), &want);

    // A second run of the same statement comes from the cache; this time written as .tcs.
    let out = run("x.tns", "y2.tcs", &[]);
    ok(out, "cached tessera run");
    let y2: Tensor<f64> = tessera_formats::TcsFile::open(&p("y2.tcs"))
        .unwrap()
        .to_tensor()
        .unwrap();
    assert_close(
        &DenseArray::new(y2.dims().to_vec(), y2.to_dense()).unwrap(),
        &want,
    );

    // A vector one element short: a run-time error naming the index, tensors and dimensions,
    // and no output file.
    let short = Tensor::from_entries(vec![3], Format::dense(1), [(vec![2], 1.0)]).unwrap();
    write_tns(&p("short.tns"), &short);
    let out = run("short.tns", "bad.tns", &[]);
    let err = failed(out, "mismatched run");
    assert!(err.contains("dimension mismatch for index `j`"), "{err}");
    assert!(
        err.contains("has dimension 3, but mode 1 of `A` has 4"),
        "{err}"
    );
    assert!(!p("bad.tns").exists());
    assert!(err.contains("without a `# dims"), "the likely cause: {err}");
    // Every .tns input declaring its dimensions: the note about undeclared ones is not given.
    let declared = |name: &str, t: &Tensor<f64>| {
        let mut w = TnsWriter::create(&p(name)).unwrap();
        w.write_comment(&format!("dims {}", t.dims()[0])).unwrap();
        for (c, v) in t.entries() {
            w.write_entry(&[c[0] as u64], v).unwrap();
        }
        w.finish().unwrap();
    };
    declared("z.tns", &z);
    declared("short.tns", &short);
    // (`tessera run` refuses declared dimensions that do not match before it builds; the
    // compiled program, from the cache, is what reads them.)
    let spmv = p("spmv");
    let out = tessera()
        .args(["compile", expr, "-f", "A:csr", "-s", "parallelize(i)", "-o"])
        .arg(&spmv)
        .output()
        .unwrap();
    ok(out, "tessera compile");
    let out = Command::new(&spmv)
        .args([
            "-i",
            &arg("A", &p("A.mtx")),
            "-i",
            &arg("x", &p("short.tns")),
        ])
        .args(["-i", &arg("z", &p("z.tns")), "-o"])
        .arg(p("bad.tns"))
        .output()
        .unwrap();
    let err = failed(out, "mismatched program");
    assert!(err.contains("dimension mismatch for index `j`"), "{err}");
    assert!(!err.contains("without a `# dims"), "{err}");

    // `compile`: a scalar from a rank-3 tensor, written as a one-line .tns.
    let b = tensor(&[3, 2, 4], 5);
    let b = Tensor::from_entries(
        vec![3, 2, 4],
        Format::all_compressed(3),
        b.entries().chain([(vec![2, 1, 3], 2.0)]),
    )
    .unwrap();
    write_tns(&p("B.tns"), &b);
    let prog = p("norm");
    let out = tessera()
        .args(["compile", "a = B(i,j,k) * B(i,j,k)", "-f", "B:sss", "-o"])
        .arg(&prog)
        .output()
        .unwrap();
    ok(out, "tessera compile");
    let out = Command::new(&prog)
        .args(["-i", &arg("B", &p("B.tns")), "-o"])
        .arg(p("a.tns"))
        .output()
        .unwrap();
    ok(out, "compiled program");
    let text = std::fs::read_to_string(p("a.tns")).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let got: f64 = text.trim().parse().unwrap();
    let want = oracle("a = B(i,j,k) * B(i,j,k)", &[("B", &b)]);
    assert!(
        (got - want.data[0]).abs() <= 1e-9 * want.data[0].abs(),
        "{got} vs {:?}",
        want.data
    );

    // The program's own argument errors.
    let err = failed(
        Command::new(&prog)
            .args(["-i", "C=x.tns", "-o", "a.tns"])
            .output()
            .unwrap(),
        "bad -i",
    );
    assert!(err.contains("`C` is not an input"), "{err}");
    let err = failed(
        Command::new(&prog).args(["-o", "a.tns"]).output().unwrap(),
        "missing -i",
    );
    assert!(err.contains("missing `-i B=PATH`"), "{err}");
    let err = failed(
        Command::new(&prog)
            .args(["-i", "B=", "-o", "a.tns"])
            .output()
            .unwrap(),
        "empty path",
    );
    assert!(err.contains("the path after `=` is empty"), "{err}");
    // The output may not replace an input file; the input stays as it was.
    let before = std::fs::read(p("B.tns")).unwrap();
    let err = failed(
        Command::new(&prog)
            .args(["-i", &arg("B", &p("B.tns")), "-o"])
            .arg(p("B.tns"))
            .output()
            .unwrap(),
        "output over an input",
    );
    assert!(err.contains("this is the file of input `B`"), "{err}");
    assert_eq!(std::fs::read(p("B.tns")).unwrap(), before);

    // Under `mpirun -n 2` (its environment, as Open MPI and MPICH set it) the plain program
    // refuses rather than run twice, and writes nothing; as one rank it runs.
    for var in ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"] {
        let err = failed(
            Command::new(&prog)
                .env(var, "2")
                .args(["-i", &arg("B", &p("B.tns")), "-o"])
                .arg(p("ranks.tns"))
                .output()
                .unwrap(),
            "plain program under mpirun",
        );
        assert!(err.contains("started by mpirun as 2 ranks"), "{err}");
        assert!(err.contains("--mpi"), "{err}");
        assert!(!p("ranks.tns").exists());
    }
    let out = Command::new(&prog)
        .env("OMPI_COMM_WORLD_SIZE", "1")
        .args(["-i", &arg("B", &p("B.tns")), "-o"])
        .arg(p("one.tns"))
        .output()
        .unwrap();
    ok(out, "plain program as one mpirun rank");
    assert_eq!(
        std::fs::read(p("one.tns")).unwrap(),
        std::fs::read(p("a.tns")).unwrap()
    );
}

#[test]
fn statement_errors_are_rendered_with_the_argument_and_span() {
    let out = tessera()
        .args(["emit", "y(i) = A(i,j) x(j)", "-f", "A:csr"])
        .output()
        .unwrap();
    let err = failed(out, "emit with a missing operator");
    assert!(err.contains("unexpected `x`"), "{err}");
    assert!(err.contains("expression:1:15"), "{err}");
    assert!(err.contains("factors are multiplied with `*`"), "{err}");

    let out = tessera()
        .args(["emit", "y(i) = A(i,j) * x(j)", "-f", "A:csr", "-f", "x:ds"])
        .output()
        .unwrap();
    let err = failed(out, "emit with a bad format");
    assert!(err.contains("bad format for `x`"), "{err}");
    assert!(err.contains("-f x:ds"), "{err}");

    let out = tessera()
        .args([
            "emit",
            "y(i) = A(i,j) * x(j)",
            "-s",
            "split(i, io, ii, 2); order(ii)",
        ])
        .output()
        .unwrap();
    let err = failed(out, "emit with a bad schedule");
    assert!(err.contains("not the outer variable of a split"), "{err}");

    // Dimensions declared in file headers are checked against the expression before anything
    // is built.
    let dir = tempfile::tempdir().unwrap();
    let (a, x) = (dir.path().join("A.mtx"), dir.path().join("x.tns"));
    write_mtx(&a, &tensor(&[3, 4], 1));
    std::fs::write(&x, "# dims 3\n1 1.0\n").unwrap();
    let out = tessera()
        .args([
            "run",
            "y(i) = A(i,j) * x(j)",
            "-f",
            "A:csr",
            "-i",
            &arg("A", &a),
            "-i",
            &arg("x", &x),
        ])
        .args(["-o", &dir.path().join("y.tns").display().to_string()])
        .output()
        .unwrap();
    let err = failed(out, "run with mismatched header dimensions");
    assert!(
        err.contains("dimension mismatch for index `j`: 3 in mode 0 of `x` but 4 in mode 1 of `A`"),
        "{err}"
    );
    assert!(err.contains("expression:1:19"), "{err}");

    let out = ok(
        tessera()
            .args(["emit", "y(i) = A(i,j) * x(j)", "-f", "A:csr"])
            .output()
            .unwrap(),
        "emit",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("pub fn kernel<"), "{text}");
}

/// A statement, its `-f` formats and the dimensions of its inputs.
type Case<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a [usize])]);

/// The kernel catalogue through `tessera run` on files, against the oracle. Builds
/// one program per statement (minutes on two cores), so it is not part of the default run:
/// `cargo test -p tessera-compiler --test cli -- --ignored`.
#[test]
#[ignore]
fn catalogue_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    // (statement, formats, input dimensions)
    let catalogue: &[Case] = &[
        (
            "y(i) = A(i,j) * x(j)",
            &["A:csr"],
            &[("A", &[7, 5]), ("x", &[5])],
        ),
        (
            "y(j) = A(i,j) * x(i)",
            &["A:csr"],
            &[("A", &[7, 5]), ("x", &[7])],
        ),
        (
            "y(j) = A(i,j) * x(i)",
            &["A:csc"],
            &[("A", &[7, 5]), ("x", &[7])],
        ),
        (
            "y(i) = A(j,i) * x(j)",
            &["A:csc"],
            &[("A", &[5, 7]), ("x", &[5])],
        ),
        (
            "y(i) = A(i,j) * x(j) + z(i)",
            &["A:csr"],
            &[("A", &[6, 4]), ("x", &[4]), ("z", &[6])],
        ),
        (
            "C(i,k) = A(i,j) * B(j,k)",
            &["A:csr"],
            &[("A", &[5, 6]), ("B", &[6, 3])],
        ),
        (
            "C(i,j) = A(i,k) * B(k,j)",
            &["A:csr", "B:csr", "C:csr"],
            &[("A", &[5, 6]), ("B", &[6, 4])],
        ),
        (
            "C(i,j) = A(i,k) * A(k,j)",
            &["A:csr", "C:csr"],
            &[("A", &[6, 6])],
        ),
        (
            "A(i,j) = B(i,j) * C(i,k) * D(k,j)",
            &["B:csr", "A:csr"],
            &[("B", &[5, 4]), ("C", &[5, 3]), ("D", &[3, 4])],
        ),
        (
            "C(i,j) = A(i,j) + B(i,j)",
            &["A:csr", "B:dcsr", "C:dcsr"],
            &[("A", &[5, 4]), ("B", &[5, 4])],
        ),
        (
            "C(i,j) = A(i,j) - B(i,j)",
            &["A:csr", "B:csr", "C:csr"],
            &[("A", &[5, 4]), ("B", &[5, 4])],
        ),
        (
            "C(i,j) = A(i,j) * B(i,j)",
            &["A:csr", "B:dcsr", "C:csr"],
            &[("A", &[5, 4]), ("B", &[5, 4])],
        ),
        ("a = b(i) * c(i)", &["b:s"], &[("b", &[9]), ("c", &[9])]),
        ("a = B(i,j,k) * B(i,j,k)", &["B:sss"], &[("B", &[3, 4, 5])]),
        (
            "A(i,j) = B(i,j,k) * c(k)",
            &["B:sss"],
            &[("B", &[3, 4, 5]), ("c", &[5])],
        ),
        (
            "A(i,j,k) = B(i,j,l) * C(k,l)",
            &["B:sss", "A:sss"],
            &[("B", &[3, 4, 5]), ("C", &[2, 5])],
        ),
        (
            "A(i,j) = B(i,k,l) * C(k,j) * D(l,j)",
            &["B:sss"],
            &[("B", &[3, 4, 5]), ("C", &[4, 2]), ("D", &[5, 2])],
        ),
        (
            "A(i,j) = B(i,k,l,m) * C(k,j) * D(l,j) * E(m,j)",
            &["B:ssss"],
            &[
                ("B", &[3, 2, 3, 2]),
                ("C", &[2, 2]),
                ("D", &[3, 2]),
                ("E", &[2, 2]),
            ],
        ),
        (
            "R(i,j,k,l,m) = S(i,j,k,l,m) * T(i,j,k,l,m)",
            &["S:sssss", "R:sssss"],
            &[("S", &[2, 3, 2, 2, 3]), ("T", &[2, 3, 2, 2, 3])],
        ),
        (
            "y(i) = exp(x(i)) + sqrt(abs(z(i))) - log(abs(w(i)) + 1) / 2",
            &[],
            &[("x", &[6]), ("z", &[6]), ("w", &[6])],
        ),
    ];
    for (n, (statement, formats, inputs)) in catalogue.iter().enumerate() {
        let mut tensors = Vec::new();
        let mut cmd = tessera();
        cmd.args(["run", statement]);
        for f in formats.iter() {
            cmd.args(["-f", f]);
        }
        for (k, (name, dims)) in inputs.iter().enumerate() {
            let t = tensor(dims, n * 7 + k);
            let path = dir.path().join(format!("{n}_{name}.tns"));
            let mut w = TnsWriter::create(&path).unwrap();
            let d: Vec<String> = dims.iter().map(|x| x.to_string()).collect();
            w.write_comment(&format!("dims {}", d.join(" "))).unwrap();
            for (c, v) in t.entries() {
                w.write_entry(&c.iter().map(|&x| x as u64).collect::<Vec<_>>(), v)
                    .unwrap();
            }
            w.finish().unwrap();
            cmd.args(["-i", &arg(name, &path)]);
            tensors.push((*name, t));
        }
        let out = dir.path().join(format!("{n}_out.tns"));
        cmd.args(["-o", &out.display().to_string()]);
        ok(cmd.output().unwrap(), statement);
        let named: Vec<(&str, &Tensor<f64>)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
        let want = oracle(statement, &named);
        let got = read_dense(&out, &want.dims);
        for (g, w) in got.data.iter().zip(&want.data) {
            assert!(
                (g - w).abs() <= 1e-9 * (1.0 + w.abs()),
                "{statement}: got {:?}, want {:?}",
                got.data,
                want.data
            );
        }
    }
}

/// Paths are checked before anything is built: the error names the path and the flag, and
/// the (fresh) cache stays empty.
#[test]
fn paths_are_checked_before_any_build() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cmd = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tessera"))
            .env("TESSERA_CACHE", &cache)
            .args(args)
            .output()
            .unwrap()
    };
    let nodir = dir.path().join("nodir/prog").display().to_string();
    let err = failed(
        cmd(&[
            "compile",
            "y(i) = A(i,j) * x(j)",
            "-f",
            "A:csr",
            "-o",
            &nodir,
        ]),
        "compile into a missing directory",
    );
    assert!(
        err.contains("nodir") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!err.contains("bin/"), "blames the cached binary: {err}");
    let missing = format!("A={}", dir.path().join("A.mtx").display());
    let out = dir.path().join("y.tns").display().to_string();
    let err = failed(
        cmd(&[
            "run",
            "y(i) = A(i,j) * x(j)",
            "-i",
            &missing,
            "-i",
            "x=x.tns",
            "-o",
            &out,
        ]),
        "run on a missing input",
    );
    assert!(
        err.contains("A.mtx") && err.contains("cannot read"),
        "{err}"
    );
    // What the program would refuse only after a build of minutes: an output or input of no
    // tensor file's extension, a name given twice, a text input with no entries, an absurd
    // thread count.
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let a = format!(
        "A={}",
        file(
            "A.mtx",
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.0\n"
        )
    );
    let x = format!("x={}", file("x.tns", "1 1.0\n2 2.0\n"));
    let x_txt = format!("x={}", file("x.txt", "1 1.0\n"));
    let x_empty = format!("x={}", file("e.tns", ""));
    let txt = dir.path().join("y.txt").display().to_string();
    let run = |inputs: &[&str], output: &str, more: &[&str]| {
        let mut args = vec!["run", "y(i) = A(i,j) * x(j)", "-f", "A:csr"];
        for i in inputs {
            args.extend(["-i", i]);
        }
        args.extend(["-o", output]);
        args.extend(more);
        cmd(&args)
    };
    let cases: [(Output, &[&str]); 5] = [
        (run(&[&a, &x], &txt, &[]), &["-o", "y.txt", "extension"]),
        (run(&[&a, &x_txt], &out, &[]), &["x.txt", "extension"]),
        (run(&[&a, &x, &x], &out, &[]), &["`x` is given twice"]),
        (run(&[&a, &x_empty], &out, &[]), &["e.tns", "no entries"]),
        (
            run(&[&a, &x], &out, &["--threads", "100000"]),
            &["--threads", "1 to 1024"],
        ),
    ];
    for (o, want) in cases {
        let err = failed(o, "a run refused before its build");
        assert!(want.iter().all(|w| err.contains(w)), "{want:?}: {err}");
        assert!(!err.contains("building"), "built first: {err}");
    }
    assert!(!cache.exists(), "something was built");

    // `cache info` and `cache clean` on that cache.
    std::fs::create_dir_all(cache.join("bin")).unwrap();
    std::fs::write(cache.join("bin/tessera-prog-x"), [0u8; 10]).unwrap();
    let info = String::from_utf8(ok(cmd(&["cache", "info"]), "cache info").stdout).unwrap();
    assert!(
        info.contains("1 program(s)") && info.contains("MiB"),
        "{info}"
    );
    ok(cmd(&["cache", "clean"]), "cache clean");
    assert!(!cache.exists());
}

/// A min-plus product through the command line, with mode orders that agree with no loop
/// order (one operand re-packed, and said so): the entries the program stores are the
/// oracle's finite ones, absent entries being +∞.
#[test]
fn min_plus_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| -> PathBuf { dir.path().join(name) };
    let (a, b, d) = (tensor(&[4, 3], 1), tensor(&[3, 5], 2), tensor(&[4, 5], 3));
    write_mtx(&p("A.mtx"), &a);
    write_mtx(&p("B.mtx"), &b);
    write_mtx(&p("D.mtx"), &d);
    let expr = "C(i,j) = min[k](A(i,k) + B(k,j) + D(i,j))";
    let out = tessera()
        .args([
            "run", expr, "-f", "A:csr", "-f", "B:csr", "-f", "D:csc", "-f", "C:dcsr",
        ])
        .args(["-i", &arg("A", &p("A.mtx")), "-i", &arg("B", &p("B.mtx"))])
        .args(["-i", &arg("D", &p("D.mtx"))])
        .args(["-o", &p("C.mtx").display().to_string()])
        .output()
        .unwrap();
    let out = ok(out, "tessera run min-plus");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("re-packed"), "{err}");
    let dense_inf = |t: &Tensor<f64>| {
        let mut d = DenseArray::new(
            t.dims().to_vec(),
            vec![f64::INFINITY; t.dims().iter().product()],
        )
        .unwrap();
        for (c, v) in t.entries() {
            d.data[c[0] * t.dims()[1] + c[1]] = v;
        }
        d
    };
    let c = check(parse::program(expr, 0).unwrap(), &Dims::new()).unwrap();
    let inputs: HashMap<String, DenseArray> = [("A", &a), ("B", &b), ("D", &d)]
        .map(|(n, t)| (n.to_string(), dense_inf(t)))
        .into();
    let want = evaluate(&c, &inputs, None).unwrap();
    let mut got = DenseArray::new(vec![4, 5], vec![f64::INFINITY; 20]).unwrap();
    let mut r = open_text(&p("C.mtx")).unwrap();
    let mut co = vec![0u64; 2];
    while let Some(v) = r.next_entry(&mut co).unwrap() {
        got.data[co[0] as usize * 5 + co[1] as usize] = v;
    }
    for (g, w) in got.data.iter().zip(&want.data) {
        assert!(
            g == w || (g - w).abs() <= 1e-9 * (1.0 + w.abs()),
            "got {:?}\nwant {:?}",
            got.data,
            want.data
        );
    }
}

/// `tessera emit ... | head` closes the pipe before the code is written: the tool ends
/// quietly with status 0 (as Unix tools do), never with a "failed printing to stdout" panic.
#[test]
fn emit_into_a_closed_pipe_ends_quietly() {
    let mut child = tessera()
        .args(["emit", "y(i) = A(i,j) * x(j)", "-f", "A:csr"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    // The only read end goes away before the child writes (it parses and generates first).
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("binary ends");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{:?}: {err}", o.status);
    assert!(!err.contains("panicked"), "{err}");
}

/// `--help` of every subcommand ends with the examples, the format and schedule syntax and the
/// environment variables a user compares paths with (as the README describes them).
#[test]
fn help_teaches_syntax_and_environment() {
    for sub in ["emit", "compile", "run"] {
        let o = ok(tessera().args([sub, "--help"]).output().unwrap(), sub);
        let help = String::from_utf8_lossy(&o.stdout);
        for needle in [
            "Examples:",
            "A:ds (CSR)",
            "split(i, io, ii, 4)",
            "TESSERA_CACHE_LIMIT",
            "TESSERA_SIMD=0|avx2",
            "TESSERA_PREFETCH=0|always|stream",
        ] {
            assert!(
                help.contains(needle),
                "{sub} --help lacks {needle}:\n{help}"
            );
        }
    }
}
