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

/// A text file as users write them: entries in any order, duplicates, explicit zeros,
/// decimals of every length, with or without a `# dims` comment (or a `.mtx` header:
/// general, symmetric or skew-symmetric, real or pattern), as `(file name, contents, rank)`.
fn text_file() -> impl Strategy<Value = (String, String, usize)> {
    let value = prop_oneof![
        (-50i32..50).prop_map(|v| v.to_string()),
        (any::<i64>(), -12i32..12).prop_map(|(m, e)| format!("{}e{e}", m as f64 / 1e9)),
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(|v| format!("{v}")),
        Just("0".to_string()),
    ];
    (1usize..4, any::<bool>(), 0usize..3, any::<bool>())
        .prop_flat_map(move |(rank, declared, symmetry, pattern)| {
            let coord = proptest::collection::vec(1u64..7, rank);
            let entries = proptest::collection::vec((coord, value.clone()), 0..40);
            (Just((rank, declared, symmetry, pattern)), entries)
        })
        .prop_map(|((rank, declared, symmetry, pattern), entries)| {
            let mut text = String::new();
            if rank == 2 && declared {
                // The lower triangle only where the matrix is symmetric (the diagonal too) or
                // skew-symmetric (not the diagonal), as the format requires; a pattern matrix
                // has no values (each entry is 1).
                let kind = ["general", "symmetric", "skew-symmetric"][symmetry];
                let kept: Vec<_> = entries
                    .iter()
                    .filter(|(c, _)| match symmetry {
                        0 => true,
                        1 => c[0] >= c[1],
                        _ => c[0] > c[1],
                    })
                    .collect();
                let field = if pattern { "pattern" } else { "real" };
                text += &format!("%%MatrixMarket matrix coordinate {field} {kind}\n");
                let rows = if symmetry > 0 { 7 } else { 6 };
                text += &format!("% a comment\n{rows} 7 {}\n", kept.len());
                for (c, v) in kept {
                    let v = if pattern { "" } else { v.as_str() };
                    text += &format!("{} {} {v}\n", c[0], c[1]);
                }
                return ("t.mtx".to_string(), text, rank);
            }
            if declared {
                let dims: Vec<String> = (0..rank).map(|m| (7 + m).to_string()).collect();
                text += &format!("# dims {}\n", dims.join(" "));
            }
            for (c, v) in &entries {
                let c: Vec<String> = c.iter().map(u64::to_string).collect();
                text += &format!("{} {v}\n", c.join(" "));
            }
            ("t.tns".to_string(), text, rank)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Reading a text file through the streaming converter gives exactly the tensor the
    /// in-memory reader builds (same dimensions, levels and value bits), in any format, in
    /// `f64` and (rounded once) `f32`, with 32- and 64-bit coordinates.
    #[test]
    fn text_read_through_the_converter_equals_the_in_memory_reader(
        ((name, text, _), format) in text_file()
            .prop_flat_map(|f| { let rank = f.2; (Just(f), format_of(rank)) })
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(&name);
        std::fs::write(&path, &text).unwrap();
        let temp = dir.path().join("temp");
        std::fs::create_dir(&temp).unwrap();
        let fast = read_converted::<f64, u32>(&path, &format, &NoProgress, &temp);
        let Ok(slow) = read_text::<f64, u32>(&path, format.clone(), &NoProgress) else {
            // No entries and no declared dimensions: no rank; both refuse the file.
            let e = fast.expect_err("the in-memory reader refused the file").to_string();
            prop_assert!(e.contains(&name), "{}", e);
            return Ok(());
        };
        let fast = fast.unwrap().expect("f64 goes through the converter");
        prop_assert_eq!(&fast, &slow);
        // In f32 the converter sums duplicates in f64 and rounds once, where the in-memory
        // reader rounds each and sums in f32: the same entries, the converter's values those
        // of the f64 read rounded.
        let narrow: Tensor<f32, u64> = read_converted(&path, &format, &NoProgress, &temp)
            .unwrap()
            .expect("f32 goes through the converter");
        let slow = read_text::<f32, u64>(&path, format.clone(), &NoProgress).unwrap();
        prop_assert_eq!((narrow.dims(), narrow.levels()), (slow.dims(), slow.levels()));
        let rounded: Vec<f32> = fast.vals().iter().map(|&v| v as f32).collect();
        prop_assert_eq!(narrow.vals(), &rounded[..]);
        // i64 as `Tensor::read` does it: the converter's tensor where it has one, else the
        // in-memory reader's; either way what the in-memory reader alone gives (or refuses).
        let ints = read_converted::<i64, u32>(&path, &format, &NoProgress, &temp)
            .and_then(|t| t.map_or_else(|| read_text(&path, format.clone(), &NoProgress), Ok));
        match (ints, read_text::<i64, u32>(&path, format.clone(), &NoProgress)) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => prop_assert!(false, "{:?} against {:?}", a, b),
        }
        // Nothing is left behind in the temporary directory.
        prop_assert_eq!(std::fs::read_dir(&temp).unwrap().count(), 0);
    }
}

/// Integer values take the converter when every value is an integer below 2^53 and no entry
/// repeats; a fraction, a larger integer or a duplicate leaves the file to the in-memory
/// reader, which refuses the first two naming the entry and sums the third in `i64`.
#[test]
fn integer_text_takes_the_converter_only_where_it_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let temp = dir.path().join("temp");
    std::fs::create_dir(&temp).unwrap();
    let csr = Format::parse("csr", 2).unwrap();
    let cases = [
        ("ints.tns", "2 1 7\n1 2 -3\n3 3 9007199254740991\n", true),
        ("half.tns", "2 1 7\n1 2 0.5\n", false),
        ("halves.tns", "1 2 0.5\n1 2 0.5\n", false),
        ("twice.tns", "1 2 4\n1 2 5\n", false),
        ("big.tns", "1 2 9007199254740993\n", false),
    ];
    for (name, text, fast) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let t = read_converted::<i64, u32>(&path, &csr, &NoProgress, &temp).unwrap();
        assert_eq!(t.is_some(), fast, "{name}");
        let slow = read_text::<i64, u32>(&path, csr.clone(), &NoProgress);
        match (t, slow) {
            (Some(t), Ok(s)) => assert_eq!(t, s, "{name}"),
            (None, Ok(s)) => assert_eq!(s.to_dense(), vec![0, 9], "{name}: summed"),
            (None, Err(e)) => assert!(e.to_string().contains(name), "{e}"),
            (Some(_), Err(e)) => panic!("{name}: the converter read what is refused: {e}"),
        }
    }
    assert_eq!(std::fs::read_dir(&temp).unwrap().count(), 0);
}

/// Where no temporary directory can be made the in-memory reader takes over; an input's
/// error names the input (not a temporary file) and leaves nothing behind.
#[test]
fn text_read_falls_back_and_names_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tns");
    std::fs::write(&path, "2 1 1.5\n1 2 -2\n").unwrap();
    let csr = Format::parse("csr", 2).unwrap();
    let nowhere = dir.path().join("missing").join("dir");
    let none = read_converted::<f64, u32>(&path, &csr, &NoProgress, &nowhere).unwrap();
    assert!(
        none.is_none(),
        "no temporary directory: the in-memory reader"
    );
    let t: Tensor<f64> = Tensor::read(&path, "csr").unwrap();
    assert_eq!(t.to_dense(), vec![0.0, -2.0, 1.5, 0.0]);

    let temp = dir.path().join("temp");
    std::fs::create_dir(&temp).unwrap();
    let bad = dir.path().join("bad.tns");
    std::fs::write(&bad, "1 1 1.0\n2 x 3.0\n").unwrap();
    let e = read_converted::<f64, u32>(&bad, &csr, &NoProgress, &temp)
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad.tns:2:"), "{e}");
    assert_eq!(std::fs::read_dir(&temp).unwrap().count(), 0);
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
