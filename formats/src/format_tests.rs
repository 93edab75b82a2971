use super::*;
use LevelType::{Compressed as S, Dense as D};

#[test]
fn names_and_letters_parse_to_the_expected_levels() {
    let csc = Format::parse("csc", 2).unwrap();
    assert_eq!(csc.levels(), &[D, S]);
    assert_eq!(csc.mode_order(), &[1, 0]);
    assert_eq!(Format::parse("ds:1,0", 2).unwrap(), csc);
    assert_eq!(
        Format::parse("csr", 2).unwrap(),
        Format::parse("ds", 2).unwrap()
    );
    assert_eq!(Format::parse("dcsr", 2).unwrap().levels(), &[S, S]);
    assert_eq!(Format::parse("csf", 4).unwrap(), Format::all_compressed(4));
    assert_eq!(Format::parse("dense", 3).unwrap(), Format::dense(3));
    assert_eq!(
        Format::parse("sds:2,0,1", 3).unwrap().mode_order(),
        &[2, 0, 1]
    );
    assert_eq!(Format::parse("dense", 0).unwrap().rank(), 0);
}

#[test]
fn display_round_trips_through_parse() {
    for (s, r) in [
        ("ds:1,0", 2),
        ("sss", 3),
        ("d", 1),
        ("ssd:2,1,0", 3),
        ("dense", 0),
    ] {
        let f = Format::parse(s, r).unwrap();
        assert_eq!(f.to_string(), s);
        assert_eq!(Format::parse(&f.to_string(), r).unwrap(), f);
    }
    assert_eq!(Format::parse("csc", 2).unwrap().to_string(), "ds:1,0");
}

#[test]
fn bad_formats_say_what_was_expected() {
    let e = Format::parse("csr", 3).unwrap_err();
    assert!(
        matches!(
            e,
            FormatError::RankMismatch {
                expected: 2,
                rank: 3,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("rank-2"));
    let e = Format::parse("dx", 2).unwrap_err();
    assert!(
        matches!(
            e,
            FormatError::BadLetter {
                ch: 'x',
                column: 2,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        Format::parse("ds", 3),
        Err(FormatError::LevelCount { levels: 2, .. })
    ));
    assert!(matches!(
        Format::parse("ds:0,0", 2),
        Err(FormatError::NotPermutation { .. })
    ));
    assert!(matches!(
        Format::parse("ds:0,2", 2),
        Err(FormatError::NotPermutation { .. })
    ));
    assert!(matches!(
        Format::parse("ds:0", 2),
        Err(FormatError::NotPermutation { .. })
    ));
    assert!(matches!(
        Format::parse("ds:a,b", 2),
        Err(FormatError::BadModeOrder { .. })
    ));
    assert!(matches!(Format::parse("", 2), Err(FormatError::Empty)));
    assert!(Format::new(vec![D, S], vec![1, 1]).is_err());
}

#[test]
fn level_of_mode_inverts_the_mode_order() {
    let f = Format::parse("sds:2,0,1", 3).unwrap();
    let inv = f.level_of_mode();
    for (level, &mode) in f.mode_order().iter().enumerate() {
        assert_eq!(inv[mode], level);
    }
}

#[test]
fn singleton_levels_parse_as_coo() {
    use LevelType::Singleton as Q;
    assert_eq!(Format::parse("sq", 2).unwrap().levels(), &[S, Q]);
    assert_eq!(
        Format::parse("coo", 2).unwrap(),
        Format::parse("sq", 2).unwrap()
    );
    assert_eq!(Format::parse("coo", 3).unwrap().levels(), &[S, Q, Q]);
    assert_eq!(Format::parse("coo", 1).unwrap().levels(), &[S]);
    let f = Format::parse("dsq:2,0,1", 3).unwrap();
    assert_eq!(f.levels(), &[D, S, Q]);
    assert_eq!(f.coo_start(), Some(1));
    assert!(f.is_non_unique(1) && !f.is_non_unique(2) && !f.is_non_unique(0));
    assert_eq!(f.to_string(), "dsq:2,0,1");
    assert_eq!(Format::parse("ssqq", 4).unwrap().coo_start(), Some(1));
    assert_eq!(Format::parse("ds", 2).unwrap().coo_start(), None);
}

#[test]
fn misplaced_singleton_levels_name_the_column_and_the_fix() {
    let msg = |s: &str, r: usize| Format::parse(s, r).unwrap_err().to_string();
    let first = msg("qs", 2);
    assert!(
        first.contains("column 1") && first.contains("first level"),
        "{first}"
    );
    assert!(first.contains("write `sq`"), "{first}");
    let after_dense = msg("dq:1,0", 2);
    assert!(
        after_dense.contains("column 2") && after_dense.contains("dense"),
        "{after_dense}"
    );
    assert!(after_dense.contains("write `sq:1,0`"), "{after_dense}");
    let after_q = msg("sqs", 3);
    assert!(
        after_q.contains("column 3") && after_q.contains("write `sqq`"),
        "{after_q}"
    );
    assert!(msg("dsqd", 4).contains("write `dsqq`"));
    // The same rule holds for formats built from parts.
    use LevelType::Singleton as Q;
    let e = Format::new(vec![D, Q], vec![0, 1]).unwrap_err();
    assert!(matches!(e, FormatError::Singleton { column: 2, .. }), "{e}");
}
