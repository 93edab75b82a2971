//! Value types and coordinate widths through `tessera run` and `tessera compile`: one statement
//! on f64 text, f32 `.tcs`, u64-coordinate `.tcs` and i64 counting inputs, each compared with
//! the interpreter in the type the program chose (f32 within the rounding a sum of its length
//! allows, i64 exactly); the output file holds that type; mixed inputs and what i64 cannot
//! compute are errors before any build.
//!
//! Builds three programs besides the f64 one `cli.rs` builds, in the program cache the CLI
//! tests share (its build directory is reused, so each is seconds once it is warm).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tessera_compiler::{check, interp, lower, parse};
use tessera_formats::{Index, TcsFile, Tensor, Value, ValueType};

const EXPR: &str = "y(i) = A(i,j) * x(j)";
const ROWS: usize = 30;
const COLS: usize = 20;

fn tessera() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    c.env(
        "TESSERA_CACHE",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("tessera-cache"),
    );
    c
}

/// `tessera run EXPR -f A:csr -i A=a -i x=x -o out` with `extra` flags.
fn run(a: &Path, x: &Path, out: &Path, extra: &[&str]) -> Output {
    run_expr(EXPR, a, x, out, extra)
}

fn run_expr(expr: &str, a: &Path, x: &Path, out: &Path, extra: &[&str]) -> Output {
    tessera()
        .args(["run", expr, "-f", "A:csr"])
        .arg("-i")
        .arg(format!("A={}", a.display()))
        .arg("-i")
        .arg(format!("x={}", x.display()))
        .arg("-o")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn ok(out: Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what} failed: {stderr}");
    stderr
}

fn failed(out: Output, what: &str) -> String {
    assert!(!out.status.success(), "{what} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The matrix and vector of every case, with values `f(k)` for the k-th entry: about two
/// thirds of the matrix present, the vector dense (its values `f(k)` for `k` past the
/// matrix's).
fn inputs<V: Value, I: Index>(f: impl Fn(usize) -> V) -> (Tensor<V, I>, Tensor<V, I>) {
    let a = (0..ROWS * COLS)
        .filter(|k| k % 3 != 1)
        .map(|k| (vec![k / COLS, k % COLS], f(k)));
    let a = Tensor::from_entries(vec![ROWS, COLS], "csr", a).unwrap();
    let x = (0..COLS).map(|j| (vec![j], f(ROWS * COLS + 7 * j + 3)));
    let x = Tensor::from_entries(vec![COLS], "d", x).unwrap();
    (a, x)
}

/// The interpreter's `y` for these inputs, in their type.
fn reference<V: Value, I: Index>(a: &Tensor<V, I>, x: &Tensor<V, I>) -> Vec<V> {
    let c = check::check(
        parse::program(&format!("{EXPR}; A: csr"), 0).unwrap(),
        &check::Dims::new(),
    );
    let k = lower::lower(&c.unwrap()).unwrap();
    interp::run(&k, &[a, x], &[ROWS]).unwrap().to_dense()
}

/// The output `.tcs` file: its recorded types, and its values as `V`.
fn output<V: Value, I: Index>(path: &Path) -> (ValueType, u32, Vec<V>) {
    let h = TcsFile::open(path).unwrap().header().clone();
    let y: Tensor<V, I> = Tensor::read(path, "d").unwrap();
    (h.value_type, h.index_bits, y.to_dense())
}

fn write<V: Value, I: Index>(dir: &Path, name: &str, t: &Tensor<V, I>) -> PathBuf {
    let path = dir.join(name);
    t.write(&path).unwrap();
    path
}

#[test]
fn each_value_type_and_width_against_the_interpreter_in_that_type() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let value = |k: usize| ((k as f64) * 0.37).sin() * 10.0;

    // f64 from text (no type recorded): the default.
    let (a, x) = inputs::<f64, u32>(value);
    let (ta, tx) = (write(d, "a.mtx", &a), write(d, "x.tns", &x));
    ok(run(&ta, &tx, &d.join("y64.tcs"), &[]), "f64");
    let (vt, bits, y) = output::<f64, u32>(&d.join("y64.tcs"));
    assert_eq!((vt, bits), (ValueType::F64, 32));
    for (g, w) in y.iter().zip(reference(&a, &x)) {
        assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "f64: {g} vs {w}");
    }

    // f32 .tcs inputs: the program computes in f32. Two f32 sums of n terms in any order
    // differ by at most 2·γ_n·Σ|a·x| (γ_n ≈ n·2^-24); 4·n·2^-24 bounds it.
    let (a, x) = inputs::<f32, u32>(|k| value(k) as f32);
    let (fa, fx) = (write(d, "a32.tcs", &a), write(d, "x32.tcs", &x));
    ok(run(&fa, &fx, &d.join("y32.tcs"), &[]), "f32");
    let (vt, bits, y) = output::<f32, u32>(&d.join("y32.tcs"));
    assert_eq!((vt, bits), (ValueType::F32, 32));
    let want = reference(&a, &x);
    let (ad, xd) = (a.to_dense(), x.to_dense());
    for (i, (g, w)) in y.iter().zip(&want).enumerate() {
        let abs: f64 = (0..COLS)
            .map(|j| f64::from(ad[i * COLS + j] * xd[j]).abs())
            .sum();
        let tol = 4.0 * COLS as f64 * f64::from(f32::EPSILON) / 2.0 * abs;
        assert!(
            f64::from((g - w).abs()) <= tol,
            "f32 row {i}: {g} vs {w} (tol {tol})"
        );
    }

    // u64-coordinate .tcs: the program's coordinates widen to u64.
    let (a, x) = inputs::<f64, u64>(value);
    let wa = write(d, "a_u64.tcs", &a);
    ok(run(&wa, &tx, &d.join("y_u64.tcs"), &[]), "u64");
    let (vt, bits, y) = output::<f64, u64>(&d.join("y_u64.tcs"));
    assert_eq!((vt, bits), (ValueType::F64, 64));
    for (g, w) in y.iter().zip(reference(&a, &x)) {
        assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "u64: {g} vs {w}");
    }

    // i64 counts beyond 2^53, where f64 rounds: exact, from an i64 .tcs matrix and a .tns
    // vector of integers that takes the matrix's type.
    let count = |k: usize| {
        let small = (k as i64 * 7919) % 1000;
        if k < ROWS * COLS {
            (1 << 40) + small
        } else {
            (1 << 12) + small
        }
    };
    let (a, x) = inputs::<i64, u32>(count);
    let (ia, ix) = (write(d, "a_i64.tcs", &a), write(d, "x_i64.tns", &x));
    ok(run(&ia, &ix, &d.join("y_i64.tcs"), &[]), "i64");
    let (vt, bits, y) = output::<i64, u32>(&d.join("y_i64.tcs"));
    assert_eq!((vt, bits), (ValueType::I64, 32));
    let (ad, xd) = (a.to_dense(), x.to_dense());
    let exact: Vec<i64> = (0..ROWS)
        .map(|i| {
            let sum: i128 = (0..COLS)
                .map(|j| i128::from(ad[i * COLS + j]) * i128::from(xd[j]))
                .sum();
            i64::try_from(sum).unwrap()
        })
        .collect();
    assert_eq!(y, exact);
    assert_eq!(reference(&a, &x), exact);
    // As text, every digit (what f64 would round is read back exactly only from .tcs).
    ok(run(&ia, &ix, &d.join("y_i64.tns"), &[]), "i64 to .tns");
    let text = std::fs::read_to_string(d.join("y_i64.tns")).unwrap();
    let lines: Vec<i64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(lines, exact);
    let in_f64 = |i: usize| -> f64 {
        (0..COLS)
            .map(|j| ad[i * COLS + j] as f64 * xd[j] as f64)
            .sum()
    };
    assert!(
        (0..ROWS).any(|i| in_f64(i) as i64 != exact[i]),
        "the counts must be ones f64 cannot hold, or this case proves nothing"
    );

    // A fraction read as i64 is an error naming the file and the entry.
    let frac = d.join("x_frac.tns");
    std::fs::write(&frac, "1 1\n2 0.5\n").unwrap();
    let e = failed(
        run(&ia, &frac, &d.join("bad.tns"), &[]),
        "a fraction as i64",
    );
    assert!(
        e.contains("x_frac.tns") && e.contains("(2)") && e.contains("i64"),
        "{e}"
    );

    // The same i64 case distributed, in process (`--interpret`): exact too.
    let out = d.join("y_split.tcs");
    let split = ["-s", "split(i, io, ii, 4)", "--interpret", "--threads", "2"];
    ok(run(&ia, &ix, &out, &split), "i64 --interpret");
    assert_eq!(output::<i64, u32>(&out).2, exact);

    // Mixed value types: an error naming both inputs, before any build; `--type` converts.
    let fx64 = write(d, "x64.tcs", &inputs::<f64, u32>(value).1);
    let e = failed(run(&fa, &fx64, &d.join("m.tns"), &[]), "mixed types");
    for part in ["`A`", "a32.tcs", "f32", "`x`", "x64.tcs", "f64", "--type"] {
        assert!(e.contains(part), "{part} missing from: {e}");
    }
    ok(
        run(&fa, &fx64, &d.join("m.tcs"), &["--type", "f64"]),
        "--type f64",
    );
    let (vt, _, y) = output::<f64, u32>(&d.join("m.tcs"));
    let (a32, _) = inputs::<f32, u32>(|k| value(k) as f32);
    let widened: Tensor<f64> = Tensor::read(&fa, "csr").unwrap();
    assert_eq!(widened.nnz(), a32.nnz());
    assert_eq!(vt, ValueType::F64);
    for (g, w) in y
        .iter()
        .zip(reference(&widened, &inputs::<f64, u32>(value).1))
    {
        assert!(
            (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
            "--type f64: {g} vs {w}"
        );
    }

    // `tessera compile --type f32` is the f32 program above (cached), and says so.
    let prog = d.join("spmv32");
    ok(
        tessera()
            .args(["compile", EXPR, "-f", "A:csr", "--type", "f32", "-o"])
            .arg(&prog)
            .output()
            .unwrap(),
        "compile --type f32",
    );
    let help = Command::new(&prog).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("in f32 values with u32 coordinates"),
        "{help}"
    );
    assert!(help.contains("TESSERA_PREFETCH=0|always|stream"), "{help}");
}

#[test]
fn what_i64_cannot_compute_is_refused_before_any_build() {
    let dir = tempfile::tempdir().unwrap();
    let (a, x) = inputs::<i64, u32>(|k| k as i64 % 5);
    let ia = write(dir.path(), "a.tcs", &a);
    let x = write(dir.path(), "x.tns", &x);
    let cases = [
        ("y(i) = A(i,j) / x(j)", "divides"),
        ("y(i) = 0.5 * A(i,j) * x(j)", "0.5"),
        ("y(i) = min[j](A(i,j) + x(j))", "min or max"),
    ];
    for (expr, why) in cases {
        let e = failed(
            run_expr(expr, &ia, &x, &dir.path().join("y.tns"), &[]),
            expr,
        );
        assert!(
            e.contains(why) && e.contains("input `A`") && e.contains("--type f64"),
            "{expr}: {e}"
        );
    }
    // The flags are checked by name.
    let e = failed(
        tessera()
            .args(["run", EXPR, "--type", "u8", "-i", "A=a", "-o", "y.tns"])
            .output()
            .unwrap(),
        "--type u8",
    );
    assert!(e.contains("f32, f64 or i64"), "{e}");
}
