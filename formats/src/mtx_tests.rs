use super::*;
use crate::error::SyntaxError;
use std::collections::BTreeMap;

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
