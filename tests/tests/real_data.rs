//! Real public matrices (fetched by `scripts/fetch-real-data.sh` into `target/real-data`, or
//! `$TESSERA_REAL_DATA`): each `.mtx` goes to `.tcs` in several formats and back to `.mtx` and
//! `.tns`, and its content is compared with an independent Matrix Market reader written here
//! (symmetric and skew-symmetric halves expanded, pattern entries as 1). SpMV and transposed
//! SpMV through `tensor!` are checked against products over the independently read entries.
//! Files that reader rejects (some SuiteSparse test files are deliberately 0-based) must be
//! rejected by tessera-formats too, without leaving an output file.
//! Without the data directory the tests print a notice and pass.
#![allow(non_snake_case)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tessera::formats::{convert, ConvertOptions, NoProgress, TcsFile, Tensor};
use tessera::tensor;

/// Files above these sizes are skipped to keep the test fast (kinships.tns is ~110 KB).
const MAX_MTX_BYTES: u64 = 100_000;
const MAX_TNS_BYTES: u64 = 300_000;

/// Coordinates (0-based) to summed values.
type Entries = BTreeMap<Vec<usize>, f64>;

struct Reference {
    dims: Vec<usize>,
    entries: Entries,
}

fn data_dir() -> Option<PathBuf> {
    // Relative to the workspace root, as in scripts/fetch-real-data.sh (tests run in tests/).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = std::env::var_os("TESSERA_REAL_DATA")
        .map(|d| root.join(d))
        .unwrap_or_else(|| root.join("target/real-data"));
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "real_data: {} not found; skipping (run scripts/fetch-real-data.sh to enable)",
            dir.display()
        );
        None
    }
}

fn files_with_ext(dir: &Path, ext: &str, max_bytes: u64, out: &mut Vec<PathBuf>) {
    let mut items: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    items.sort_by_key(|e| e.path());
    for e in items {
        let p = e.path();
        if p.is_dir() {
            files_with_ext(&p, ext, max_bytes, out);
        } else if p.extension().is_some_and(|x| x == ext)
            && e.metadata().unwrap().len() <= max_bytes
        {
            out.push(p);
        }
    }
}

/// An independent Matrix Market coordinate reader: `Ok(None)` for dense `array` files, `Err`
/// for a file that breaks the format or that tessera does not support (complex fields).
fn read_mtx_reference(path: &Path) -> Result<Option<Reference>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default().to_ascii_lowercase();
    let words: Vec<&str> = header.split_whitespace().collect();
    if words.len() != 5 || words[..2] != ["%%matrixmarket", "matrix"] {
        return Err(format!("bad banner `{header}`"));
    }
    if words[2] == "array" {
        return Ok(None); // dense; the coordinate files cover the comparison
    }
    if words[2] != "coordinate" || !["real", "integer", "pattern"].contains(&words[3]) {
        return Err(format!("unsupported kind `{} {}`", words[2], words[3]));
    }
    let (pattern, symmetry) = (words[3] == "pattern", words[4]);
    if !["general", "symmetric", "skew-symmetric"].contains(&symmetry) {
        return Err(format!("unsupported symmetry `{symmetry}`"));
    }
    let mut rows = lines.filter(|l| !l.trim().is_empty() && !l.starts_with('%'));
    let size: Vec<usize> = rows
        .next()
        .ok_or("no size line")?
        .split_whitespace()
        .map(|w| w.parse().map_err(|_| format!("bad size `{w}`")))
        .collect::<Result<_, _>>()?;
    let [m, n, nnz] = size[..] else {
        return Err(format!("size line with {} numbers", size.len()));
    };
    let mut entries = Entries::new();
    let mut count = 0;
    for line in rows {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != if pattern { 2 } else { 3 } {
            return Err(format!("{} fields in `{line}`", f.len()));
        }
        let coord = |w: &str, dim: usize| match w.parse::<usize>() {
            Ok(c) if (1..=dim).contains(&c) => Ok(c - 1),
            _ => Err(format!("bad coordinate `{w}` in `{line}`")),
        };
        let (i, j) = (coord(f[0], m)?, coord(f[1], n)?);
        let v: f64 = if pattern {
            1.0
        } else {
            f.get(2)
                .and_then(|w| w.parse().ok())
                .ok_or(format!("bad value in `{line}`"))?
        };
        *entries.entry(vec![i, j]).or_default() += v;
        match symmetry {
            "symmetric" if i != j => *entries.entry(vec![j, i]).or_default() += v,
            "skew-symmetric" if i != j => *entries.entry(vec![j, i]).or_default() -= v,
            _ => {}
        }
        count += 1;
    }
    if count != nnz {
        return Err(format!("{count} entries, header says {nnz}"));
    }
    Ok(Some(Reference {
        dims: vec![m, n],
        entries,
    }))
}

/// An independent `.tns` reader (lines of 1-based coordinates and a value; `#` comments).
fn read_tns_reference(path: &Path) -> Entries {
    let mut entries = Entries::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let (coord, value) = f.split_at(f.len() - 1);
        let coord = coord
            .iter()
            .map(|w| w.parse::<usize>().unwrap() - 1)
            .collect();
        *entries.entry(coord).or_default() += value[0].parse::<f64>().unwrap();
    }
    entries
}

/// Equal as sparse tensors: every coordinate of either side agrees (a missing entry is 0).
fn assert_same_entries(got: &Entries, want: &Entries, what: &str) {
    for (c, w) in want {
        let g = got.get(c).copied().unwrap_or(0.0);
        assert!(
            (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
            "{what}: at {c:?} got {g}, want {w}"
        );
    }
    for (c, g) in got {
        assert!(
            want.contains_key(c) || *g == 0.0,
            "{what}: extra entry {c:?} = {g}"
        );
    }
}

fn tensor_entries(t: &Tensor<f64>) -> Entries {
    let mut e = Entries::new();
    for (c, v) in t.entries() {
        *e.entry(c).or_default() += v;
    }
    e
}

/// Converts to `.tcs` and reads the result back. `dcsr` goes through the external sort with
/// small runs and merge rounds, so the spilling path sees real data too.
fn to_tcs(input: &Path, output: &Path, format: &str) -> tessera::formats::Result<Tensor<f64>> {
    let spill = format == "dcsr";
    let opts = ConvertOptions {
        format: Some(format.to_string()),
        force_external_sort: spill,
        run_entries: spill.then_some(97),
        fan_in: spill.then_some(3),
        ..ConvertOptions::default()
    };
    convert(input, output, &opts, &NoProgress)?;
    TcsFile::open(output)?.to_tensor::<f64, u32>()
}

/// A deterministic dense vector with distinct entries.
fn vector(n: usize, salt: usize) -> Tensor<f64> {
    let data = (0..n).map(|k| ((k * 7 + salt) % 13) as f64 - 6.5).collect();
    Tensor::dense_from_vec(vec![n], data).unwrap()
}

/// `y = A x` (or `Aᵀ x` when `transpose`) over reference entries.
fn product(r: &Reference, x: &[f64], transpose: bool) -> Vec<f64> {
    let (out, inn) = if transpose { (1, 0) } else { (0, 1) };
    let mut y = vec![0.0; r.dims[out]];
    for (c, v) in &r.entries {
        y[c[out]] += v * x[c[inn]];
    }
    y
}

fn assert_vec_close(got: &Tensor<f64>, want: &[f64], what: &str) {
    let got = got.to_dense();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-9 * (1.0 + w.abs());
        assert!((g - w).abs() <= tol, "{what}: y[{k}] = {g}, want {w}");
    }
}

/// Round trips and both products for one matrix the reference reader accepts.
fn check_matrix(path: &Path, r: &Reference, tmp: &Path) {
    let name = path.display();
    for format in ["csr", "csc", "dcsr", "ds:1,0"] {
        let tcs = tmp.join(format!("{}.tcs", format.replace([':', ','], "_")));
        let t = to_tcs(path, &tcs, format).unwrap_or_else(|e| panic!("{name} -> {format}: {e}"));
        assert_eq!(t.dims(), &r.dims[..], "{name} {format}: dims");
        assert_same_entries(
            &tensor_entries(&t),
            &r.entries,
            &format!("{name} as {format}"),
        );
        for back in ["back.mtx", "back.tns"] {
            let out = tmp.join(back);
            convert(&tcs, &out, &ConvertOptions::default(), &NoProgress)
                .unwrap_or_else(|e| panic!("{name} {format} -> {back}: {e}"));
            let got = if back.ends_with("mtx") {
                read_mtx_reference(&out).unwrap().unwrap().entries
            } else {
                read_tns_reference(&out)
            };
            assert_same_entries(&got, &r.entries, &format!("{name} {format} -> {back}"));
        }
        if format == "csr" {
            let A = t;
            let x = vector(r.dims[1], 1);
            let y = tensor!(y(i) = A(i,j) * x(j); A: csr; parallelize(i)).unwrap();
            assert_vec_close(
                &y,
                &product(r, &x.to_dense(), false),
                &format!("{name} SpMV"),
            );
        } else if format == "csc" {
            let A = t;
            let x = vector(r.dims[0], 2);
            let y = tensor!(y(j) = A(i,j) * x(i); A: csc).unwrap();
            let want = product(r, &x.to_dense(), true);
            assert_vec_close(&y, &want, &format!("{name} transposed SpMV"));
        }
    }
}

#[test]
fn real_matrices_round_trip_and_multiply() {
    let Some(dir) = data_dir() else { return };
    let mut files = Vec::new();
    files_with_ext(&dir, "mtx", MAX_MTX_BYTES, &mut files);
    let tmp = tempfile::tempdir().unwrap();
    let (mut checked, mut rejected) = (0, 0);
    for path in &files {
        match read_mtx_reference(path) {
            Ok(Some(r)) => {
                check_matrix(path, &r, tmp.path());
                checked += 1;
            }
            Ok(None) => {}
            Err(why) => {
                // A broken file: tessera must refuse it too and leave nothing behind.
                let out = tmp.path().join("rejected.tcs");
                let res = convert(path, &out, &ConvertOptions::default(), &NoProgress);
                assert!(res.is_err(), "{}: accepted, but {why}", path.display());
                assert!(!out.exists(), "{}: output left behind", path.display());
                rejected += 1;
            }
        }
    }
    eprintln!("real_data: {checked} matrices checked, {rejected} broken files rejected");
    assert!(checked > 0, "no usable .mtx file under {}", dir.display());
}

#[test]
fn real_third_order_tensor_round_trip_and_ttv() {
    let Some(dir) = data_dir() else { return };
    let mut files = Vec::new();
    files_with_ext(&dir, "tns", MAX_TNS_BYTES, &mut files);
    eprintln!("real_data: {} .tns files", files.len());
    let tmp = tempfile::tempdir().unwrap();
    for path in &files {
        let want = read_tns_reference(path);
        let name = path.display();
        for format in ["sss", "dss", "sss:2,0,1"] {
            let tcs = tmp.path().join("t.tcs");
            let t = to_tcs(path, &tcs, format).unwrap_or_else(|e| panic!("{name} {format}: {e}"));
            if t.dims().len() != 3 {
                break;
            }
            assert_same_entries(&tensor_entries(&t), &want, &format!("{name} as {format}"));
            let back = tmp.path().join("back.tns");
            convert(&tcs, &back, &ConvertOptions::default(), &NoProgress).unwrap();
            assert_same_entries(&read_tns_reference(&back), &want, &format!("{name} back"));
            if format == "sss" {
                let T = t;
                let v = vector(T.dims()[1], 3);
                let Y = tensor!(Y(i,k) = T(i,j,k) * v(j); T: sss; parallelize(i)).unwrap();
                let vd = v.to_dense();
                let mut expect = Entries::new();
                for (c, x) in &want {
                    *expect.entry(vec![c[0], c[2]]).or_default() += x * vd[c[1]];
                }
                let got = tensor_entries(&Y);
                for (c, w) in &expect {
                    let g = got.get(c).copied().unwrap_or(0.0);
                    assert!(
                        (g - w).abs() <= 1e-9 * (1.0 + w.abs()),
                        "{name} TTV at {c:?}"
                    );
                }
                for (c, g) in &got {
                    assert!(
                        expect.contains_key(c) || *g == 0.0,
                        "{name} TTV extra {c:?}"
                    );
                }
            }
        }
    }
}
