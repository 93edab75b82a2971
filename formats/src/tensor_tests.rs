use super::*;
use crate::format::LevelType::{Compressed as S, Dense as D};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn csr_example() -> Tensor<f64> {
    // [[1 0 2]
    //  [0 0 0]
    //  [0 3 0]]
    let entries = vec![(vec![2, 1], 3.0), (vec![0, 2], 2.0), (vec![0, 0], 1.0)];
    Tensor::from_entries(vec![3, 3], Format::parse("csr", 2).unwrap(), entries).unwrap()
}

#[test]
fn csr_arrays_are_the_textbook_ones() {
    let t = csr_example();
    assert_eq!(t.levels()[0], Level::Dense { size: 3, offset: 0 });
    assert_eq!(
        t.levels()[1],
        Level::Compressed {
            pos: vec![0, 2, 2, 3],
            crd: vec![0, 2, 1]
        }
    );
    assert_eq!(t.vals(), &[1.0, 2.0, 3.0]);
    assert_eq!(
        t.to_dense(),
        vec![1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0]
    );
}

#[test]
fn csc_stores_columns_first() {
    let entries = vec![(vec![2, 1], 3.0), (vec![0, 2], 2.0), (vec![0, 0], 1.0)];
    let t: Tensor<f64, u64> =
        Tensor::from_entries(vec![3, 3], Format::parse("csc", 2).unwrap(), entries).unwrap();
    assert_eq!(
        t.levels()[1],
        Level::Compressed {
            pos: vec![0, 1, 2, 3],
            crd: vec![0, 2, 0]
        }
    );
    assert_eq!(t.vals(), &[1.0, 3.0, 2.0]);
    let got: Vec<_> = t.entries().collect();
    assert_eq!(
        got,
        vec![(vec![0, 0], 1.0), (vec![2, 1], 3.0), (vec![0, 2], 2.0)]
    );
}

#[test]
fn duplicates_are_summed_and_bad_coordinates_rejected() {
    let f = Format::parse("dcsr", 2).unwrap();
    let t: Tensor<f32> = Tensor::from_entries(
        vec![2, 2],
        f.clone(),
        vec![(vec![1, 1], 1.0), (vec![1, 1], 2.5)],
    )
    .unwrap();
    assert_eq!(t.vals(), &[3.5]);
    let e = Tensor::<f32>::from_entries(vec![2, 2], f.clone(), vec![(vec![0, 2], 1.0)]);
    assert!(
        matches!(
            e,
            Err(TensorError::CoordOutOfRange {
                coord: 2,
                bound: 2,
                ..
            })
        ),
        "{e:?}"
    );
    let e = Tensor::<f32>::from_entries(vec![2, 2], f.clone(), vec![(vec![0], 1.0)]);
    assert!(matches!(
        e,
        Err(TensorError::EntryRank {
            expected: 2,
            got: 1,
            ..
        })
    ));
    let e = Tensor::<f32>::from_entries(vec![2], f, vec![]);
    assert!(matches!(e, Err(TensorError::RankMismatch { .. })));
    let e = Tensor::<f32, u32>::zeros(vec![1 << 33], Format::all_compressed(1));
    assert!(matches!(
        e,
        Err(TensorError::IndexOverflow { bits: 32, .. })
    ));
}

#[test]
fn scalars_have_one_value() {
    let t: Tensor<f64> =
        Tensor::from_entries(vec![], Format::dense(0), vec![(vec![], 2.0), (vec![], 1.0)]).unwrap();
    assert_eq!(t.vals(), &[3.0]);
    assert_eq!(t.entries().collect::<Vec<_>>(), vec![(vec![], 3.0)]);
    assert_eq!(
        Tensor::<f64>::zeros(vec![], Format::dense(0))
            .unwrap()
            .to_dense(),
        vec![0.0]
    );
}

#[test]
fn from_parts_rejects_each_broken_invariant() {
    let t = csr_example();
    let (dims, format, levels, vals) = t.clone().into_parts();
    let rebuilt = Tensor::from_parts(dims.clone(), format.clone(), levels.clone(), vals.clone());
    assert_eq!(rebuilt.unwrap(), t);
    let with = |pos: Vec<u32>, crd: Vec<u32>, vals: Vec<f64>| {
        let levels = vec![levels[0].clone(), Level::Compressed { pos, crd }];
        Tensor::from_parts(dims.clone(), format.clone(), levels, vals).unwrap_err()
    };
    let v3 = vec![1.0, 2.0, 3.0];
    assert!(matches!(
        with(vec![0, 2, 3], vec![0, 2, 1], v3.clone()),
        TensorError::PosLength { .. }
    ));
    assert!(matches!(
        with(vec![1, 2, 2, 3], vec![0, 2, 1], v3.clone()),
        TensorError::PosStart { .. }
    ));
    assert!(matches!(
        with(vec![0, 2, 1, 3], vec![0, 2, 1], v3.clone()),
        TensorError::PosNotMonotone { at: 2, .. }
    ));
    assert!(matches!(
        with(vec![0, 2, 2, 4], vec![0, 2, 1], v3.clone()),
        TensorError::CrdLength { .. }
    ));
    assert!(matches!(
        with(vec![0, 2, 2, 3], vec![0, 3, 1], v3.clone()),
        TensorError::CrdOutOfRange {
            at: 1,
            coord: 3,
            ..
        }
    ));
    assert!(matches!(
        with(vec![0, 2, 2, 3], vec![2, 0, 1], v3.clone()),
        TensorError::CrdNotIncreasing { at: 1, .. }
    ));
    assert!(matches!(
        with(vec![0, 2, 2, 3], vec![0, 2, 1], vec![1.0]),
        TensorError::ValsLength { .. }
    ));
    let dense_too_big = vec![Level::Dense { size: 3, offset: 1 }, levels[1].clone()];
    let e = Tensor::from_parts(dims.clone(), format.clone(), dense_too_big, vals.clone());
    assert!(matches!(e, Err(TensorError::DenseRange { .. })));
    let wrong_type = vec![levels[1].clone(), levels[1].clone()];
    let e = Tensor::from_parts(dims, format, wrong_type, vals);
    assert!(matches!(e, Err(TensorError::LevelType { level: 0, .. })));
}

#[test]
fn dense_from_vec_is_row_major() {
    let t = Tensor::<f64>::dense_from_vec(vec![2, 3], (0..6).map(f64::from).collect()).unwrap();
    assert_eq!(t.to_dense(), (0..6).map(f64::from).collect::<Vec<_>>());
    let got: Vec<_> = t.entries().map(|(c, _)| c).collect();
    assert_eq!(got[4], vec![1, 1]);
    assert!(Tensor::<f64>::dense_from_vec(vec![2, 3], vec![0.0; 5]).is_err());
}

#[test]
fn sub_block_views_a_window_without_copying() {
    let dims = vec![4, 3];
    let entries: Vec<_> = (0..4)
        .flat_map(|i| (0..3).map(move |j| (vec![i, j], (i * 3 + j) as f64)))
        .filter(|(_, v)| *v as usize % 2 == 1)
        .collect();
    for fmt in ["ds", "dd", "dd:1,0"] {
        let t: Tensor<f64> = Tensor::from_entries(
            dims.clone(),
            Format::parse(fmt, 2).unwrap(),
            entries.clone(),
        )
        .unwrap();
        let v = t.view();
        let block = v.sub_block(0, 1..3).unwrap();
        assert!(std::ptr::eq(block.vals(), t.vals()));
        let mode0 = t.format().mode_order()[0];
        let expected: Vec<_> = t
            .entries()
            .filter(|(c, _)| (1..3).contains(&c[mode0]))
            .collect();
        assert_eq!(block.entries().collect::<Vec<_>>(), expected, "{fmt}");
        // Narrowing again inside the window works; stepping outside it does not.
        let inner = block.sub_block(0, 2..3).unwrap();
        assert!(inner.entries().all(|(c, _)| c[mode0] == 2));
        assert!(block.sub_block(0, 0..2).is_err());
    }
    let dcsr: Tensor<f64> =
        Tensor::from_entries(dims, Format::parse("dcsr", 2).unwrap(), entries).unwrap();
    assert!(dcsr.view().sub_block(0, 0..1).is_err());
}

/// Random dims, format (level types + mode order) and entries (with duplicates).
pub(crate) type Case = (Vec<usize>, Format, Vec<(Vec<usize>, f64)>);

pub(crate) fn tensor_case() -> impl Strategy<Value = Case> {
    (0usize..=4)
        .prop_flat_map(|rank| (proptest::collection::vec(1usize..5, rank), format_of(rank)))
        .prop_flat_map(|(dims, format)| {
            let coord = dims.iter().map(|&d| 0..d).collect::<Vec<_>>();
            let entry = (coord, (-8i32..8).prop_map(f64::from));
            (
                Just(dims),
                Just(format),
                proptest::collection::vec(entry, 0..24),
            )
        })
}

/// Independent reference: sum duplicates in a map keyed by coordinates.
fn reference(entries: &[(Vec<usize>, f64)]) -> BTreeMap<Vec<usize>, f64> {
    let mut m = BTreeMap::new();
    for (c, v) in entries {
        *m.entry(c.clone()).or_insert(0.0) += v;
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn entries_round_trip_and_to_dense_matches((dims, format, entries) in tensor_case()) {
        let t: Tensor<f64, u32> = Tensor::from_entries(dims.clone(), format.clone(), entries.clone()).unwrap();
        let want = reference(&entries);
        // Stored entries: every reference entry, plus explicit zeros from dense levels.
        let mut got = BTreeMap::new();
        let mut last_level_key: Option<Vec<usize>> = None;
        for (c, v) in t.entries() {
            let key: Vec<usize> = format.mode_order().iter().map(|&m| c[m]).collect();
            if let Some(prev) = &last_level_key {
                prop_assert!(prev < &key, "storage order must be increasing");
            }
            last_level_key = Some(key);
            prop_assert!(got.insert(c, v).is_none());
        }
        for (c, v) in &want {
            prop_assert_eq!(got.get(c), Some(v));
        }
        for (c, v) in &got {
            if !want.contains_key(c) { prop_assert_eq!(*v, 0.0); }
        }
        // Dense reference built from the entries, row-major.
        let mut dense = vec![0.0; dims.iter().product()];
        for (c, v) in &entries {
            let at = c.iter().zip(&dims).fold(0, |a, (&i, &d)| a * d + i);
            dense[at] += v;
        }
        prop_assert_eq!(t.to_dense(), dense);
        // Parts survive validation, and 64-bit coordinates give the same tensor.
        let (d, f, l, v) = t.clone().into_parts();
        prop_assert_eq!(Tensor::from_parts(d, f, l, v).unwrap(), t.clone());
        let wide: Tensor<f64, u64> = Tensor::from_entries(dims, format, entries).unwrap();
        prop_assert_eq!(wide.entries().collect::<Vec<_>>(), t.entries().collect::<Vec<_>>());
    }
}

/// A random format of `rank` levels: dense and compressed levels, and in about a third of
/// the matrices and higher-order tensors a COO tail (`sq`, `dsq`, `sqq`, ...).
pub(crate) fn format_of(rank: usize) -> impl Strategy<Value = Format> {
    (
        proptest::collection::vec(prop::bool::ANY, rank),
        Just((0..rank).collect::<Vec<_>>()).prop_shuffle(),
        0..3 * rank.max(1),
    )
        .prop_map(move |(dense, order, coo)| {
            let mut levels: Vec<LevelType> = dense.iter().map(|&d| if d { D } else { S }).collect();
            // `coo < rank - 1` starts a singleton run below level `coo`.
            if coo + 1 < rank {
                levels[coo] = S;
                for l in &mut levels[coo + 1..] {
                    *l = LevelType::Singleton;
                }
            }
            Format::new(levels, order).unwrap()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn to_format_keeps_the_values_and_drops_explicit_zeros(
        ((dims, format, entries), other) in tensor_case()
            .prop_flat_map(|c| { let rank = c.0.len(); (Just(c), format_of(rank)) })
    ) {
        let t: Tensor<f64> = Tensor::from_entries(dims, format.clone(), entries).unwrap();
        let u = t.to_format(&other).unwrap();
        prop_assert_eq!(u.format(), &other);
        prop_assert_eq!(u.dims(), t.dims());
        prop_assert_eq!(u.to_dense(), t.to_dense());
        let back = u.to_format(format.to_string()).unwrap();
        prop_assert_eq!(back.to_dense(), t.to_dense());
        if other.rank() > 0 && other.levels().iter().all(|l| l.is_sparse()) {
            prop_assert!(u.vals().iter().all(|&v| v != 0.0), "no explicit zeros in {:?}", u);
        }
    }
}

#[test]
fn formats_given_as_text_or_values_must_fit_the_rank() {
    let t = csr_example();
    assert_eq!(
        t.to_format("csc").unwrap().format(),
        &Format::parse("csc", 2).unwrap()
    );
    let err = t.to_format("sss").unwrap_err();
    assert!(
        matches!(err, TensorError::Format(FormatError::LevelCount { .. })),
        "{err}"
    );
    let err = t.to_format(Format::dense(3)).unwrap_err();
    assert!(err.to_string().contains("rank 2"), "{err}");
    let err = Tensor::<f64>::from_entries(vec![2], "csr", []).unwrap_err();
    assert!(err.to_string().contains("csr"), "{err}");
}

/// A dense tensor larger than any machine's memory is an error naming the bytes it needs,
/// not an abort of the whole process.
#[test]
fn a_dense_tensor_too_large_for_memory_is_an_error() {
    let dims = vec![1usize << 30, 1 << 20];
    let err = Tensor::<f64, u64>::zeros(dims.clone(), Format::dense(2)).unwrap_err();
    assert!(matches!(err, TensorError::OutOfMemory { bytes } if bytes == (1u128 << 50) * 8));
    assert!(err.to_string().contains("compressed levels"), "{err}");
    // The same through the first compressed level's `pos` (one entry per dense row, plus one).
    let rows = vec![1usize << 50, 4];
    let err = Tensor::<f64, u64>::from_entries(rows, Format::parse("ds", 2).unwrap(), [])
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, TensorError::OutOfMemory { .. }), "{err}");
}

#[test]
fn coo_stores_one_position_per_entry_and_validates_its_order() {
    use LevelType::Singleton as Q;
    let entries = vec![
        (vec![2, 0], 1.0),
        (vec![0, 3], 2.0),
        (vec![0, 1], 3.0),
        (vec![2, 0], 4.0),
    ];
    let t: Tensor<f64> = Tensor::from_entries(vec![3, 4], "sq", entries).unwrap();
    assert_eq!(t.format().levels(), &[S, Q]);
    let (dims, format, levels, vals) = t.clone().into_parts();
    // Row 0 is stored twice (once per entry), duplicates of (2,0) summed.
    assert_eq!(
        levels,
        vec![
            Level::Compressed {
                pos: vec![0u32, 3],
                crd: vec![0, 0, 2]
            },
            Level::Singleton { crd: vec![1, 3, 0] },
        ]
    );
    assert_eq!(vals, vec![3.0, 2.0, 5.0]);
    // Out of lexicographic order, or an entry twice: rejected by validation.
    let unsorted = vec![
        Level::Compressed {
            pos: vec![0u32, 3],
            crd: vec![0, 0, 2],
        },
        Level::Singleton { crd: vec![3, 1, 0] },
    ];
    let e = Tensor::from_parts(dims.clone(), format.clone(), unsorted, vals.clone());
    assert!(
        matches!(e, Err(TensorError::CrdNotIncreasing { level: 1, at: 1 })),
        "{e:?}"
    );
    let twice = vec![
        Level::Compressed {
            pos: vec![0u32, 3],
            crd: vec![0, 0, 2],
        },
        Level::Singleton { crd: vec![1, 1, 0] },
    ];
    assert!(Tensor::from_parts(dims.clone(), format.clone(), twice, vals.clone()).is_err());
    let short = vec![
        Level::Compressed {
            pos: vec![0u32, 3],
            crd: vec![0, 0, 2],
        },
        Level::Singleton { crd: vec![1, 3] },
    ];
    assert!(matches!(
        Tensor::from_parts(dims, format, short, vals),
        Err(TensorError::CrdLength {
            level: 1,
            expected: 3,
            got: 2
        })
    ));
    assert_eq!(t.to_format("csr").unwrap().to_dense(), t.to_dense());
}
