use super::*;
use crate::error::SyntaxError;

type Read = (usize, Vec<(Vec<u64>, f64)>);

fn read_all(text: &str) -> Result<Read> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.tns");
    std::fs::write(&path, text).unwrap();
    let mut r = TnsReader::open(&path)?;
    let mut out = Vec::new();
    let mut c = vec![0; r.rank()];
    while let Some(v) = r.next_entry(&mut c)? {
        out.push((c.clone(), v));
    }
    Ok((r.rank(), out))
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
fn reads_comments_blank_lines_tabs_and_crlf() {
    let (rank, e) = read_all("# FROSTT\n\n1 2\t3 1.5\r\n  \n 4\t\t5 6 -2e1\n#end").unwrap();
    assert_eq!(rank, 3);
    assert_eq!(e, vec![(vec![0, 1, 2], 1.5), (vec![3, 4, 5], -20.0)]);
}

#[test]
fn a_single_number_is_a_scalar() {
    let (rank, e) = read_all("# scalar\n42\n").unwrap();
    assert_eq!((rank, e), (0, vec![(vec![], 42.0)]));
}

#[test]
fn malformed_lines_name_line_and_column() {
    assert_eq!(syntax_at("1 1 1.0\n2 x 1.0\n").0, 2);
    assert_eq!(syntax_at("1 1 1.0\n2 x 1.0\n").1, 3);
    assert!(matches!(
        syntax_at("1 1 1.0\n# c\n\n0 1 2\n"),
        (4, 1, SyntaxError::ZeroCoordinate)
    ));
    assert!(matches!(
        syntax_at("1 1 1.0\n1 2 3 4\n"),
        (
            2,
            7,
            SyntaxError::FieldCount {
                expected: 3,
                found: 4,
                ..
            }
        )
    ));
    assert!(matches!(
        syntax_at("1 1 1.0\n1 2\n"),
        (2, 4, SyntaxError::FieldCount { found: 2, .. })
    ));
    assert!(matches!(
        syntax_at("1 1 abc\n"),
        (1, 5, SyntaxError::BadValue(_))
    ));
    assert!(matches!(
        syntax_at("1 99999999999999999999999 1\n"),
        (1, 3, SyntaxError::Overflow)
    ));
    assert!(matches!(
        syntax_at("# only comments\n\n"),
        (3, 1, SyntaxError::Empty)
    ));
    assert!(matches!(syntax_at(""), (1, 1, SyntaxError::Empty)));
}

#[test]
fn writer_output_reads_back_and_is_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.tns");
    let mut w = TnsWriter::create(&path).unwrap();
    w.write_comment("made by a test").unwrap();
    w.write_entry(&[0, 9], 0.25f64).unwrap();
    w.write_entry(&[12345, 0], -3.0f32).unwrap();
    assert!(!path.exists(), "nothing at the target before finish");
    w.finish().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let (rank, e) = read_all(&text).unwrap();
    assert_eq!(rank, 2);
    assert_eq!(e, vec![(vec![0, 9], 0.25), (vec![12345, 0], -3.0)]);
    // An abandoned writer leaves nothing behind.
    let other = dir.path().join("x.tns");
    drop(TnsWriter::create(&other).unwrap());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_dims_comment_declares_the_shape_and_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.tns");
    std::fs::write(&path, "# dims 3 4\n").unwrap();
    let mut r = TnsReader::open(&path).unwrap();
    assert_eq!((r.rank(), r.declared_dims()), (2, Some(vec![3, 4])));
    assert_eq!(r.next_entry(&mut [0, 0]).unwrap(), None);
    assert!(matches!(
        syntax_at("# dims 3 4\n1 1 1\n1 5 1\n"),
        (3, 3, SyntaxError::OutOfBounds { coord: 5, dim: 4 })
    ));
    assert!(matches!(
        syntax_at("# dims 3 x\n"),
        (1, 10, SyntaxError::Header(_))
    ));
    assert!(matches!(
        syntax_at("# dims 3 4\n1 1 1 1\n"),
        (1.., _, SyntaxError::FieldCount { .. })
    ));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// The one-pass fast path agrees with the field-by-field parser on arbitrary lines.
    #[test]
    fn fast_and_careful_parsers_agree(line in "[0-9 \t.e+x-]{0,24}", rank in 0usize..4) {
        let mut a = vec![0; rank];
        let mut b = vec![0; rank];
        let fast = parse_entry(line.as_bytes(), &mut a);
        let slow = slow_entry(line.as_bytes(), &mut b);
        proptest::prop_assert_eq!(fast.is_ok(), slow.is_ok());
        if let (Ok(x), Ok(y)) = (fast, slow) {
            proptest::prop_assert!(x == y || (x.is_nan() && y.is_nan()));
            proptest::prop_assert_eq!(a, b);
        }
    }
}

#[test]
fn parallel_batches_match_sequential_entries_and_report_global_lines() {
    use crate::chunks::Chunk;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.tns");
    // Enough lines for several 2 MiB blocks, with comments and blank lines mixed in.
    let mut text = String::new();
    for i in 0..300_000u64 {
        if i % 1000 == 0 {
            text.push_str("# comment\n\n");
        }
        text.push_str(&format!("{} {} {}.5\n", i % 977 + 1, i % 13 + 1, i));
    }
    std::fs::write(&path, &text).unwrap();
    let mut seq = TnsReader::open(&path).unwrap();
    let mut par = TnsReader::open(&path).unwrap();
    let mut chunk = Chunk::default();
    let mut c = vec![0; 2];
    let mut n = 0;
    while par.next_chunk(&mut chunk).unwrap() {
        for e in 0..chunk.len() {
            let v = seq.next_entry(&mut c).unwrap().unwrap();
            assert_eq!(
                (&chunk.coords[2 * e..2 * e + 2], chunk.vals[e]),
                (&c[..], v)
            );
            n += 1;
        }
    }
    assert_eq!(n, 300_000);
    assert_eq!(seq.next_entry(&mut c).unwrap(), None);
    // An error deep in the file names its global line.
    text.push_str("1 2 3 4\n");
    let lines = text.lines().count() as u64;
    std::fs::write(&path, &text).unwrap();
    let mut par = TnsReader::open(&path).unwrap();
    let err = loop {
        match par.next_chunk(&mut chunk) {
            Ok(true) => {}
            Ok(false) => panic!("error not found"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, Error::Syntax { line, .. } if line == lines),
        "{err}"
    );
}

#[test]
fn coordinate_only_parsing_agrees_on_coordinates_and_still_rejects_bad_fields() {
    for line in [
        "1 2 3.5",
        " 4\t5  -1e3 ",
        "1 2 3 4",
        "1 2",
        "0 1 1",
        "1 2 x",
        "1 2 3.5 #",
    ] {
        let (mut a, mut b) = (vec![0; 2], vec![0; 2]);
        let full = parse_line(line.as_bytes(), &mut a, None);
        let coords = parse_line_coords(line.as_bytes(), &mut b, None);
        match (&full, &coords) {
            (Ok(Some(_)), Ok(Some(v))) => assert_eq!((a, *v), (b, 0.0), "{line}"),
            // A malformed value is the one thing the coordinate pass may let through.
            (Err((_, SyntaxError::BadValue(_))), _) => {}
            _ => assert_eq!(full.is_err(), coords.is_err(), "{line}"),
        }
    }
}

#[test]
fn parallel_parser_handles_lines_longer_than_a_block_and_rejects_huge_ones() {
    use crate::chunks::Chunk;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.tns");
    let long_comment = format!("#{}\n", "x".repeat(3 << 20));
    std::fs::write(&path, format!("1 1 1\n{long_comment}2 2 2\n3 3 3")).unwrap();
    let mut r = TnsReader::open(&path).unwrap();
    let mut chunk = Chunk::default();
    let mut vals = Vec::new();
    while r.next_chunk(&mut chunk).unwrap() {
        vals.extend_from_slice(&chunk.vals);
    }
    assert_eq!(
        vals,
        vec![1.0, 2.0, 3.0],
        "last line without a newline is read too"
    );
    let huge = format!("1 1 1\n#{}\n", "x".repeat(17 << 20));
    std::fs::write(&path, huge).unwrap();
    let mut r = TnsReader::open(&path).unwrap();
    let err = loop {
        match r.next_chunk(&mut chunk) {
            Ok(true) => {}
            Ok(false) => panic!("a 17 MiB line was accepted"),
            Err(e) => break e,
        }
    };
    assert!(err.to_string().contains("longer than"), "{err}");
    // The limit is exact, as for the sequential reader: a line (without its newline) of
    // `MAX_LINE - 1` bytes is read, one of `MAX_LINE` refused, wherever it starts.
    let max = 16 << 20;
    for (len, ok) in [(max - 1, true), (max, false)] {
        let comment = format!("#{}\n", "x".repeat(len - 1));
        std::fs::write(&path, format!("1 1 1\n{comment}2 2 2\n")).unwrap();
        let mut r = TnsReader::open(&path).unwrap();
        let mut n = 0;
        let got = loop {
            match r.next_chunk(&mut chunk) {
                Ok(true) => n += chunk.len(),
                Ok(false) => break Ok(n),
                Err(e) => break Err(e),
            }
        };
        assert_eq!(got.is_ok(), ok, "a line of {len} bytes: {got:?}");
        if ok {
            assert_eq!(got.unwrap(), 2);
        }
    }
}

/// A reader asked to pack keys hands out each entry as its packed key (fields by level,
/// modes permuted by the order, the last level lowest) and its value's bits, lines of the
/// common shape and others alike; it declines without declared dimensions, with fields too
/// narrow for them, or after `next_entry`.
#[test]
fn packing_readers_hand_out_packed_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.tns");
    // The second line takes the careful parser (a tab and spaces, an exponent).
    let text = "# dims 5 300 2\n3 200 1 0.5\n5\t1  2 -1.5e1\n1 300 2 2\n";
    std::fs::write(&path, text).unwrap();
    // Levels: mode 1 (9 bits for 299), mode 2 (1 bit), mode 0 (3 bits for 4).
    let (order, bits) = ([1, 2, 0], [9, 1, 3]);
    let mut r = TnsReader::open(&path).unwrap();
    assert!(r.pack_keys(&order, &bits));
    let mut chunk = Chunk::default();
    let mut pairs = Vec::new();
    while r.next_chunk(&mut chunk).unwrap() {
        assert!(chunk.coords.is_empty() && chunk.vals.is_empty());
        pairs.extend_from_slice(&chunk.pairs);
    }
    let key = |c: [u64; 3]| (c[1] << 4) | (c[2] << 3) | c[0];
    let want = vec![
        [key([2, 199, 0]), 0.5f64.to_bits()],
        [key([4, 0, 1]), (-15.0f64).to_bits()],
        [key([0, 299, 1]), 2.0f64.to_bits()],
    ];
    assert_eq!(pairs, want);
    // Fields too narrow for the declared dimensions (8 bits cannot hold 299).
    let mut r = TnsReader::open(&path).unwrap();
    assert!(!r.pack_keys(&order, &[8, 1, 3]));
    // No declared dimensions: nothing bounds the coordinates.
    let plain = dir.path().join("q.tns");
    std::fs::write(&plain, "3 200 1 0.5\n").unwrap();
    assert!(!TnsReader::open(&plain).unwrap().pack_keys(&order, &bits));
    // After `next_entry` the reader is sequential.
    let mut r = TnsReader::open(&path).unwrap();
    let mut c = vec![0; 3];
    r.next_entry(&mut c).unwrap();
    assert!(!r.pack_keys(&order, &bits));
}
