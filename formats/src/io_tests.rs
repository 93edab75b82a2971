use super::*;
use crate::tensor::tests::{format_of, tensor_case};
use proptest::prelude::*;

/// The file kinds a tensor of `rank` modes can be written to.
fn kinds(rank: usize) -> Vec<&'static str> {
    match rank {
        2 => vec!["tns", "mtx", "tcs"],
        _ => vec!["tns", "tcs"],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random tensors × formats × file kinds: what is written reads back the same, in any
    /// format, and `.tcs` also with other value and coordinate types.
    #[test]
    fn files_round_trip_in_every_format(
        ((dims, format, entries), other) in tensor_case()
            .prop_filter("a .tns file needs a rank", |c| !c.0.is_empty())
            .prop_flat_map(|c| { let rank = c.0.len(); (Just(c), format_of(rank)) })
    ) {
        let dir = tempfile::tempdir().unwrap();
        let t: Tensor<f64> = Tensor::from_entries(dims, format.clone(), entries).unwrap();
        for kind in kinds(t.dims().len()) {
            let path = dir.path().join(format!("t.{kind}"));
            t.write(&path).unwrap();
            let same: Tensor<f64> = Tensor::read(&path, &format).unwrap();
            prop_assert_eq!(same.dims(), t.dims(), "{}", kind);
            prop_assert_eq!(same.to_dense(), t.to_dense(), "{}", kind);
            let u: Tensor<f64, u64> = Tensor::read(&path, other.to_string()).unwrap();
            prop_assert_eq!(u.format(), &other);
            prop_assert_eq!(u.to_dense(), t.to_dense(), "{} as {}", kind, other);
            let narrow: Tensor<f32> = Tensor::read(&path, &other).unwrap();
            let widened: Vec<f64> = narrow.to_dense().iter().map(|&v| f64::from(v)).collect();
            prop_assert_eq!(widened, t.to_dense(), "{} as f32", kind);
        }
    }
}

#[test]
fn a_tcs_file_in_the_requested_format_reads_back_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tcs");
    let t: Tensor<f64, u64> =
        Tensor::from_entries(vec![3, 4], "csc", [(vec![2, 1], 1.5), (vec![0, 3], -2.0)]).unwrap();
    t.write(&path).unwrap();
    assert_eq!(Tensor::<f64, u64>::read(&path, "csc").unwrap(), t);
}

#[test]
fn errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let t: Tensor<f64> =
        Tensor::from_entries(vec![2, 2, 2], "sss", [(vec![1, 0, 1], 1.0)]).unwrap();
    let shown = |e: Error| e.to_string();

    let missing = dir.path().join("missing.tns");
    let e = shown(Tensor::<f64>::read(&missing, "ss").unwrap_err());
    assert!(e.contains("missing.tns"), "{e}");

    let odd = dir.path().join("t.csv");
    let e = shown(t.write(&odd).unwrap_err());
    assert!(e.contains("t.csv") && e.contains(".tns"), "{e}");

    let mtx = dir.path().join("t.mtx");
    let e = shown(t.write(&mtx).unwrap_err());
    assert!(e.contains("t.mtx") && e.contains("rank 3"), "{e}");
    assert!(!mtx.exists());

    let tns = dir.path().join("t.tns");
    t.write(&tns).unwrap();
    let e = shown(Tensor::<f64>::read(&tns, "csr").unwrap_err());
    assert!(e.contains("t.tns") && e.contains("csr"), "{e}");
    let e = shown(Tensor::<f64>::read(&tns, "sxs").unwrap_err());
    assert!(e.contains("t.tns") && e.contains("`x`"), "{e}");

    // A coordinate that 32-bit coordinates cannot hold.
    std::fs::write(&tns, "1 1 5000000000 1.0\n").unwrap();
    let e = shown(Tensor::<f64>::read(&tns, "sss").unwrap_err());
    assert!(e.contains("t.tns") && e.contains("4999999999"), "{e}");
}

/// Counting tensors: i64 values round-trip exactly through every file kind (beyond 2^53 in
/// `.tcs`, kept as it is in any format), and a fraction read as i64 is an error naming the
/// file and the entry, not a truncation.
#[test]
fn i64_tensors_round_trip_and_refuse_fractions() {
    let dir = tempfile::tempdir().unwrap();
    let big = (1i64 << 60) + 1;
    let t: Tensor<i64> =
        Tensor::from_entries(vec![3, 4], "csr", [(vec![2, 1], 7), (vec![0, 3], -3)]).unwrap();
    for kind in kinds(2) {
        let path = dir.path().join(format!("t.{kind}"));
        t.write(&path).unwrap();
        let back: Tensor<i64> = Tensor::read(&path, "csc").unwrap();
        assert_eq!(back.to_dense(), t.to_dense(), "{kind}");
    }
    let mtx = std::fs::read_to_string(dir.path().join("t.mtx")).unwrap();
    assert!(
        mtx.starts_with("%%MatrixMarket matrix coordinate integer general\n"),
        "{mtx}"
    );
    let wide: Tensor<i64, u64> = Tensor::from_entries(vec![2], "s", [(vec![1], big)]).unwrap();
    let path = dir.path().join("big.tcs");
    wide.write(&path).unwrap();
    assert_eq!(
        TcsFile::open(&path).unwrap().header().value_type,
        crate::ValueType::I64
    );
    let dense: Tensor<i64> = Tensor::read(&path, "d").unwrap();
    assert_eq!(dense.to_dense(), vec![0, big]);

    let frac = dir.path().join("frac.tns");
    std::fs::write(&frac, "1 1 2\n2 3 0.5\n").unwrap();
    let e = Tensor::<i64>::read(&frac, "csr").unwrap_err().to_string();
    assert!(
        e.contains("frac.tns") && e.contains("(2, 3)") && e.contains("0.5") && e.contains("i64"),
        "{e}"
    );
    let f: Tensor<f64> = Tensor::read(&frac, "csr").unwrap();
    let path = dir.path().join("frac.tcs");
    f.write(&path).unwrap();
    let e = Tensor::<i64>::read(&path, "csr").unwrap_err().to_string();
    assert!(e.contains("frac.tcs") && e.contains("0.5"), "{e}");
}

/// Text values are parsed as f64: an i64 of 2^53 or more would come back rounded, so it is
/// refused with the way out (`.tcs`), while one just below reads exactly.
#[test]
fn i64_text_values_of_2_pow_53_or_more_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let below = dir.path().join("below.tns");
    std::fs::write(&below, "1 9007199254740991\n2 -9007199254740991\n").unwrap();
    let t: Tensor<i64> = Tensor::read(&below, "s").unwrap();
    assert_eq!(t.to_dense(), vec![(1 << 53) - 1, 1 - (1 << 53)]);
    let big = dir.path().join("big.tns");
    std::fs::write(&big, "1 5\n3 9007199254740993\n").unwrap();
    let e = Tensor::<i64>::read(&big, "s").unwrap_err().to_string();
    assert!(
        e.contains("big.tns") && e.contains("(3)") && e.contains(".tcs"),
        "{e}"
    );
    let f: Tensor<f64> = Tensor::read(&big, "s").unwrap();
    assert_eq!(
        f.to_dense()[2],
        9007199254740992.0,
        "f64 reads it, rounded as f64 must"
    );
}
