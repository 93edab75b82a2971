use super::*;
use crate::error::SyntaxError;
use std::collections::BTreeMap;
use std::path::Path;

fn read_all(text: &str) -> Result<BTreeMap<(u64, u64), f64>> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.mtx");
    std::fs::write(&path, text).unwrap();
    let mut r = MtxReader::open(&path)?;
    let mut out = BTreeMap::new();
    let mut c = [0u64; 2];
    while let Some(v) = r.next_entry(&mut c)? {
        assert!(out.insert((c[0], c[1]), v).is_none(), "entry repeated");
    }
    Ok(out)
}

fn syntax_at(text: &str) -> (u64, u64, SyntaxError) {
    match read_all(text).unwrap_err() {
        Error::Syntax {
            line, column, kind, ..
        } => (line, column, kind),
        e => panic!("expected a syntax error, got {e}"),
    }
}

#[test]
fn symmetric_entries_are_mirrored() {
    let m = read_all(
        "%%MatrixMarket matrix coordinate real symmetric\n% c\n3 3 3\n1 1 2\n3 1 -1.5\n3 2 4\n",
    )
    .unwrap();
    let want: BTreeMap<_, _> = [
        ((0, 0), 2.0),
        ((2, 0), -1.5),
        ((0, 2), -1.5),
        ((2, 1), 4.0),
        ((1, 2), 4.0),
    ]
    .into();
    assert_eq!(m, want);
}

#[test]
fn skew_symmetric_entries_are_negated_when_mirrored() {
    let m = read_all("%%MatrixMarket matrix coordinate integer skew-symmetric\n2 2 1\n2 1 5\n")
        .unwrap();
    assert_eq!(m, [((1, 0), 5.0), ((0, 1), -5.0)].into());
    assert!(matches!(
        syntax_at("%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n1 1 5\n"),
        (3, 1, SyntaxError::SkewDiagonal)
    ));
    assert!(matches!(
        syntax_at("%%MatrixMarket matrix coordinate real symmetric\n2 2 1\n1 2 5\n"),
        (3, 1, SyntaxError::UpperTriangle(_))
    ));
}

#[test]
fn pattern_matrices_have_unit_values() {
    let m =
        read_all("%%MatrixMarket matrix coordinate pattern general\n2 3 2\n1 3\n2 1\n").unwrap();
    assert_eq!(m, [((0, 2), 1.0), ((1, 0), 1.0)].into());
}

#[test]
fn array_format_is_column_major_and_skips_zeros() {
    let m = read_all("%%MatrixMarket matrix array real general\n2 2\n1\n0\n3\n4\n").unwrap();
    assert_eq!(m, [((0, 0), 1.0), ((0, 1), 3.0), ((1, 1), 4.0)].into());
    let s = read_all("%%MatrixMarket matrix array real symmetric\n2 2\n1\n2\n3\n").unwrap();
    assert_eq!(
        s,
        [((0, 0), 1.0), ((1, 0), 2.0), ((0, 1), 2.0), ((1, 1), 3.0)].into()
    );
}

#[test]
fn malformed_files_name_line_and_column() {
    let h = "%%MatrixMarket matrix coordinate real general\n";
    assert!(matches!(
        syntax_at("%%MatrixMarket matrix coordinate complex general\n1 1 0\n"),
        (1, 34, SyntaxError::Header(_))
    ));
    assert!(matches!(
        syntax_at("hello\n"),
        (1, 1, SyntaxError::Header(_))
    ));
    assert!(matches!(
        syntax_at(&format!("{h}2 2\n")),
        (2, 1, SyntaxError::Header(_))
    ));
    assert!(matches!(
        syntax_at(&format!("{h}2 2 1\n3 1 1\n")),
        (3, 1, SyntaxError::OutOfBounds { coord: 3, dim: 2 })
    ));
    assert!(matches!(
        syntax_at(&format!("{h}2 2 1\n1 1 zz\n")),
        (3, 5, SyntaxError::BadValue(_))
    ));
    assert!(matches!(
        syntax_at(&format!("{h}2 2 2\n1 1 1\n")),
        (
            4,
            1,
            SyntaxError::EntryCount {
                expected: 2,
                found: 1
            }
        )
    ));
    assert!(matches!(
        syntax_at(&format!("{h}2 2 1\n1 1 1\n%\n2 2 2\n")),
        (5, 1, SyntaxError::ExtraEntry(1))
    ));
    assert!(matches!(
        syntax_at(&format!("{h}2 2 1\n1 1\n")),
        (3, 4, SyntaxError::FieldCount { .. })
    ));
    assert!(matches!(
        syntax_at("%%MatrixMarket matrix coordinate real symmetric\n2 3 0\n"),
        (2, 1, SyntaxError::Header(_))
    ));
}

#[test]
fn writer_round_trips_with_known_and_patched_counts() {
    let dir = tempfile::tempdir().unwrap();
    for known in [Some(2), None] {
        let path = dir.path().join("w.mtx");
        let mut w = MtxWriter::create(&path, 3, 4, known).unwrap();
        w.write_entry(2, 3, 1.25f64).unwrap();
        w.write_entry(0, 0, -1f64).unwrap();
        w.finish().unwrap();
        let m = read_all(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(m, [((2, 3), 1.25), ((0, 0), -1.0)].into());
    }
}

/// Every entry of `path` by `next_entry` (the sequential reader).
fn entries_one_by_one(path: &Path) -> Result<Vec<([u64; 2], u64)>> {
    let mut r = MtxReader::open(path)?;
    let mut out = Vec::new();
    let mut c = [0u64; 2];
    while let Some(v) = r.next_entry(&mut c)? {
        out.push((c, v.to_bits()));
    }
    Ok(out)
}

/// Every entry of `path` by `next_chunk` (the parallel parser, small blocks), keys packed
/// in mode order `order` when given.
fn entries_in_batches(path: &Path, order: Option<[usize; 2]>) -> Result<Vec<([u64; 2], u64)>> {
    let mut r = MtxReader::open(path)?;
    r.set_memory_budget(0);
    let bits_of = |d: u64| 64 - d.saturating_sub(1).leading_zeros();
    let bits = order.map(|o| {
        [
            bits_of([r.rows, r.cols][o[0]]),
            bits_of([r.rows, r.cols][o[1]]),
        ]
    });
    if let (Some(o), Some(b)) = (order, bits) {
        assert!(r.pack_keys(&o, &b), "a coordinate file packs");
    }
    let mut out = Vec::new();
    let mut chunk = Chunk::default();
    while r.next_chunk(&mut chunk)? {
        match (order, bits) {
            (Some(o), Some(b)) => {
                assert!(chunk.vals.is_empty());
                for &[key, v] in &chunk.pairs {
                    let mut c = [0u64; 2];
                    c[o[0]] = key >> b[1];
                    c[o[1]] = key & ((1u64 << b[1]) - 1);
                    out.push((c, v));
                }
            }
            _ => {
                assert!(chunk.pairs.is_empty());
                for (c, v) in chunk.coords.chunks(2).zip(&chunk.vals) {
                    out.push(([c[0], c[1]], v.to_bits()));
                }
            }
        }
    }
    Ok(out)
}

/// The text of a random `.mtx` file: `symmetry` and `field` as in its banner, entries
/// (0-based) kept in the stored triangle, comments, blank lines and CRLF ends sprinkled in.
fn mtx_text(symmetry: &str, field: &str, n: u64, raw: &[(u64, u64, i32)], odd: u8) -> String {
    let mut s = format!("%%MatrixMarket matrix coordinate {field} {symmetry}\r\n% made\n\n");
    s += &format!("{n} {n} {}\n", raw.len());
    for (k, &(i, j, x)) in raw.iter().enumerate() {
        let (i, j) = match symmetry {
            "general" => (i, j),
            "skew-symmetric" => (i.max(j) + 1, i.min(j)),
            _ => (i.max(j), i.min(j)),
        };
        let v = match field {
            "pattern" => String::new(),
            "integer" => format!(" {x}"),
            _ => format!(" {}", f64::from(x) / 8.0),
        };
        let end = if (k as u8) & odd == 1 { "\r\n" } else { "\n" };
        s += &format!("{} {}{v}{end}", i + 1, j + 1);
        if (k as u8).wrapping_mul(odd) == 7 {
            s += "% between\n\n";
        }
    }
    s
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// The parallel parser hands out the entries of the sequential reader, in its order,
    /// for every field and symmetry, sorted or not, over blocks of 64 KiB, with keys packed
    /// in either mode order or not.
    #[test]
    fn batches_hold_the_entries_read_one_by_one(
        symmetry in proptest::sample::select(vec!["general", "symmetric", "skew-symmetric"]),
        field in proptest::sample::select(vec!["real", "integer", "pattern"]),
        mut raw in proptest::collection::vec((0u64..3000, 0u64..3000, -9i32..9), 0..9000),
        sorted in proptest::bool::ANY,
        odd in 0u8..16,
    ) {
        if sorted {
            raw.sort();
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.mtx");
        std::fs::write(&path, mtx_text(symmetry, field, 3001, &raw, odd)).unwrap();
        let want = entries_one_by_one(&path).unwrap();
        proptest::prop_assert_eq!(&entries_in_batches(&path, None).unwrap(), &want);
        proptest::prop_assert_eq!(&entries_in_batches(&path, Some([0, 1])).unwrap(), &want);
        proptest::prop_assert_eq!(&entries_in_batches(&path, Some([1, 0])).unwrap(), &want);
    }
}

/// (symmetry, declared entries, the line after the good ones, the expected line, kind).
type ErrorCase = (
    &'static str,
    u64,
    &'static str,
    u64,
    fn(&SyntaxError) -> bool,
);

/// A bad line deep in a big file (past many 64 KiB blocks) makes the parallel parser fail
/// with the sequential reader's error: the same line, column and kind, for a bad value,
/// a coordinate out of bounds, an entry above the diagonal of a symmetric matrix, one on
/// the diagonal of a skew-symmetric one, and entry counts too large or too small (also
/// where a bad line follows the last declared entry: the extra entry is reported).
#[test]
fn errors_deep_in_big_files_name_the_line_of_the_sequential_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.mtx");
    let good = 30_000u64;
    let cases: [ErrorCase; 7] = [
        ("general", good + 1, "7 7 zz\n", good + 3, |k| {
            matches!(k, SyntaxError::BadValue(_))
        }),
        ("general", good + 1, "7 40001 1\n", good + 3, |k| {
            matches!(k, SyntaxError::OutOfBounds { .. })
        }),
        ("symmetric", good + 1, "7 8 1\n", good + 3, |k| {
            matches!(k, SyntaxError::UpperTriangle(_))
        }),
        ("skew-symmetric", good + 1, "8 8 1\n", good + 3, |k| {
            matches!(k, SyntaxError::SkewDiagonal)
        }),
        ("general", good, "7 7 1\n", good + 3, |k| {
            matches!(k, SyntaxError::ExtraEntry(_))
        }),
        ("general", good, "7 7 zz\n", good + 3, |k| {
            matches!(k, SyntaxError::ExtraEntry(_))
        }),
        ("general", good + 2, "7 7 1\n", good + 4, |k| {
            matches!(k, SyntaxError::EntryCount { .. })
        }),
    ];
    for (symmetry, declared, last, want_line, want_kind) in cases {
        let mut text = format!("%%MatrixMarket matrix coordinate real {symmetry}\n");
        text += &format!("40000 40000 {declared}\n");
        for k in 0..good {
            text += &format!("{} {} 0.5\n", k + 2, k % 7 + 1);
        }
        text += last;
        std::fs::write(&path, text).unwrap();
        let seq = entries_one_by_one(&path).unwrap_err();
        for order in [None, Some([0, 1])] {
            let par = entries_in_batches(&path, order).unwrap_err();
            assert_eq!(par.to_string(), seq.to_string(), "{symmetry} {last:?}");
            match par {
                Error::Syntax { line, kind, .. } => {
                    assert_eq!(line, want_line, "{symmetry} {last:?}: {kind:?}");
                    assert!(want_kind(&kind), "{symmetry} {last:?}: {kind:?}");
                }
                e => panic!("expected a syntax error, got {e}"),
            }
        }
    }
}

/// The one-pass parsers of integer and pattern lines take exactly the lines the careful
/// parser takes, with its values: decimals, exponents and stray characters are refused with
/// the sequential reader's error, and integers too long for an exact `f64` keep its value.
#[test]
fn integer_and_pattern_lines_parse_as_read_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.mtx");
    let cases = [
        ("integer", "3 4 -17"),
        ("integer", "3 4 +17"),
        ("integer", "3 4 0017\t "),
        ("integer", "3 4 12345678901234567"),
        ("integer", "3 4 9007199254740993"),
        ("integer", "3 4 3.5"),
        ("integer", "3 4 1e3"),
        ("integer", "3 4 --5"),
        ("integer", "3 4 5-"),
        ("pattern", "3 4"),
        ("pattern", " 3\t4  "),
        ("pattern", "3 4 1"),
        ("pattern", "3 4x"),
        ("pattern", "3x 4"),
        ("pattern", "3"),
        ("pattern", "0 4"),
    ];
    for (field, last) in cases {
        let mut text = format!("%%MatrixMarket matrix coordinate {field} general\n9 9 3\n");
        let v = if field == "pattern" { "" } else { " 2" };
        text += &format!("1 1{v}\n2 2{v}\n{last}\n");
        std::fs::write(&path, text).unwrap();
        let seq = entries_one_by_one(&path).map_err(|e| e.to_string());
        let par = entries_in_batches(&path, None).map_err(|e| e.to_string());
        assert_eq!(par, seq, "{field} {last:?}");
    }
}
