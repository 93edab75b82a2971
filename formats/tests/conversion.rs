//! Streaming conversion: round trips through both the two-pass and external-sort paths,
//! duplicates, malformed input, and nothing left behind after a failure.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use tessera_formats::{
    convert, ConvertOptions, Duplicates, Error, Format, LevelType, NoProgress, SyntaxError,
    TcsFile, Value, ValueType,
};

type Entries = BTreeMap<Vec<u64>, f64>;

fn write_tns(path: &Path, dims: Option<&[u64]>, entries: &[(Vec<u64>, f64)]) {
    let mut s = String::from("# test tensor\n");
    if let Some(d) = dims {
        let d: Vec<String> = d.iter().map(|x| x.to_string()).collect();
        s.push_str(&format!("# dims {}\n", d.join(" ")));
    }
    for (c, v) in entries {
        for x in c {
            s.push_str(&format!("{} ", x + 1));
        }
        s.push_str(&format!("{v}\n"));
    }
    std::fs::write(path, s).unwrap();
}

/// Reads any file through the library's own text readers or the .tcs reader, keeping nonzeros.
fn read_nonzeros(path: &Path) -> Entries {
    let mut out = Entries::new();
    if path.extension().unwrap() == "tcs" {
        let f = TcsFile::open(path).unwrap();
        let h = f.header();
        let mut add = |c: Vec<usize>, v: f64| {
            if v != 0.0 {
                assert!(out
                    .insert(c.into_iter().map(|x| x as u64).collect(), v)
                    .is_none());
            }
        };
        tessera_formats::with_types!(h.value_type, h.index_bits, |V, I| f
            .view::<V, I>()
            .unwrap()
            .entries()
            .for_each(|(c, v)| add(c, Value::to_f64(v))));
    } else {
        let mut r = tessera_formats::open_text(path).unwrap();
        let mut c = vec![0; r.rank()];
        while let Some(v) = r.next_entry(&mut c).unwrap() {
            if v != 0.0 {
                *out.entry(c.clone()).or_insert(0.0) += v;
            }
        }
    }
    out
}

/// The independent reference: duplicates summed in a map, zeros dropped.
fn reference(entries: &[(Vec<u64>, f64)]) -> Entries {
    let mut m = Entries::new();
    for (c, v) in entries {
        *m.entry(c.clone()).or_insert(0.0) += v;
    }
    m.retain(|_, v| *v != 0.0);
    m
}

fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[derive(Debug, Clone)]
struct Case {
    dims: Vec<u64>,
    format: Format,
    entries: Vec<(Vec<u64>, f64)>,
    presorted: bool,
    index_bits: u32,
    f32: bool,
    run_entries: usize,
    fan_in: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=4)
        .prop_flat_map(|rank| {
            (
                proptest::collection::vec(1u64..6, rank),
                (proptest::collection::vec(any::<bool>(), rank), 0..3 * rank),
                Just((0..rank).collect::<Vec<_>>()).prop_shuffle(),
                any::<bool>(),
                prop_oneof![Just(32u32), Just(64u32)],
                any::<bool>(),
                1usize..6,
                2usize..4,
            )
        })
        .prop_flat_map(
            |(dims, (dense, coo), order, presorted, index_bits, f32, run_entries, fan_in)| {
                let mut levels: Vec<LevelType> = dense
                    .iter()
                    .map(|&d| {
                        if d {
                            LevelType::Dense
                        } else {
                            LevelType::Compressed
                        }
                    })
                    .collect();
                // A third of the formats end in a COO run below level `coo` (`sq`, `dsq`, ...).
                if coo + 1 < levels.len() {
                    levels[coo] = LevelType::Compressed;
                    for l in &mut levels[coo + 1..] {
                        *l = LevelType::Singleton;
                    }
                }
                let format = Format::new(levels, order).unwrap();
                let coord: Vec<_> = dims.iter().map(|&d| 0..d).collect();
                let entries =
                    proptest::collection::vec((coord, (-4i32..5).prop_map(f64::from)), 1..30);
                (
                    Just(dims),
                    Just(format),
                    entries,
                    Just(presorted),
                    Just(index_bits),
                    Just(f32),
                    Just(run_entries),
                    Just(fan_in),
                )
            },
        )
        .prop_map(
            |(dims, format, mut entries, presorted, index_bits, f32, run_entries, fan_in)| {
                if presorted {
                    let order = format.mode_order().to_vec();
                    entries.sort_by_key(|(c, _)| order.iter().map(|&m| c[m]).collect::<Vec<_>>());
                }
                Case {
                    dims,
                    format,
                    entries,
                    presorted,
                    index_bits,
                    f32,
                    run_entries,
                    fan_in,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// .tns → .tcs → .tns keeps every nonzero, whichever path the conversion takes.
    #[test]
    fn tns_tcs_tns_round_trip(c in case()) {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.tns");
        let declared = c.index_bits == 64 && c.f32;
        write_tns(&input, declared.then_some(&c.dims[..]), &c.entries);
        let opts = ConvertOptions {
            format: Some(c.format.to_string()),
            index_bits: c.index_bits,
            value_type: if c.f32 { ValueType::F32 } else { ValueType::F64 },
            force_external_sort: !c.presorted,
            run_entries: Some(c.run_entries),
            fan_in: Some(c.fan_in),
            ..ConvertOptions::default()
        };
        let tcs = dir.path().join("out.tcs");
        let report = convert(&input, &tcs, &opts, &NoProgress).unwrap();
        prop_assert_eq!(report.presorted, c.presorted);
        if !c.presorted && c.entries.len() > c.run_entries {
            prop_assert!(report.runs > 1);
        }
        let want = reference(&c.entries);
        prop_assert_eq!(&read_nonzeros(&tcs), &want);
        let f = TcsFile::open(&tcs).unwrap();
        prop_assert_eq!(f.format(), &c.format);
        // Dimensions are declared, or inferred from the largest coordinates.
        for (m, &d) in f.dims().iter().enumerate() {
            let max = c.entries.iter().map(|(x, _)| x[m]).max().unwrap();
            prop_assert_eq!(d as u64, if declared { c.dims[m] } else { max + 1 });
        }
        // The streaming converter and the in-memory path write the same bytes.
        let expected = dir.path().join("expected.tcs");
        let dims = f.dims().to_vec();
        let usize_entries: Vec<(Vec<usize>, f64)> =
            c.entries.iter().map(|(k, v)| (k.iter().map(|&x| x as usize).collect(), *v)).collect();
        match (c.f32, c.index_bits) {
            (true, 32) => write_expected::<f32, u32>(&expected, dims, &c.format, &usize_entries),
            (true, _) => write_expected::<f32, u64>(&expected, dims, &c.format, &usize_entries),
            (false, 32) => write_expected::<f64, u32>(&expected, dims, &c.format, &usize_entries),
            (false, _) => write_expected::<f64, u64>(&expected, dims, &c.format, &usize_entries),
        }
        prop_assert!(tcs_bytes(&expected) == tcs_bytes(&tcs));
        std::fs::remove_file(&expected).unwrap();
        let back = dir.path().join("back.tns");
        convert(&tcs, &back, &opts, &NoProgress).unwrap();
        prop_assert_eq!(&read_nonzeros(&back), &want);
        // Written .tns files declare their dimensions, so the shape survives the way back.
        let again = dir.path().join("again.tcs");
        convert(&back, &again, &opts, &NoProgress).unwrap();
        let again_dims = TcsFile::open(&again).unwrap().dims().to_vec();
        prop_assert_eq!(again_dims.as_slice(), f.dims());
        std::fs::remove_file(&again).unwrap();
        prop_assert_eq!(dir_names(dir.path()), vec!["back.tns", "in.tns", "out.tcs"]);
    }
}

fn write_expected<V: tessera_formats::Value, I: tessera_formats::Index>(
    path: &Path,
    dims: Vec<usize>,
    format: &Format,
    entries: &[(Vec<usize>, f64)],
) {
    let entries = entries.iter().map(|(c, v)| (c.clone(), V::from_f64(*v)));
    let t: tessera_formats::Tensor<V, I> =
        tessera_formats::Tensor::from_entries(dims, format.clone(), entries).unwrap();
    tessera_formats::tcs::write_tensor(path, &t, None).unwrap();
}

fn opts_with(duplicates: Duplicates, external: bool) -> ConvertOptions {
    ConvertOptions {
        duplicates,
        force_external_sort: external,
        run_entries: Some(2),
        fan_in: Some(2),
        ..ConvertOptions::default()
    }
}

#[test]
fn duplicates_are_summed_or_rejected_on_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("d.tns");
    std::fs::write(&input, "1 1 1\n1 2 2\n2 1 3\n2 1 4\n3 3 5\n").unwrap();
    for external in [false, true] {
        let out = dir.path().join("d.tcs");
        convert(
            &input,
            &out,
            &opts_with(Duplicates::Sum, external),
            &NoProgress,
        )
        .unwrap();
        assert_eq!(read_nonzeros(&out)[&vec![1, 0]], 7.0);
        std::fs::remove_file(&out).unwrap();
        let e = convert(
            &input,
            &out,
            &opts_with(Duplicates::Error, external),
            &NoProgress,
        )
        .unwrap_err();
        match &e {
            Error::Duplicate { coords, .. } => assert_eq!(coords, &vec![2, 1]),
            _ => panic!("unexpected error {e}"),
        }
        assert_eq!(
            dir_names(dir.path()),
            vec!["d.tns"],
            "nothing left after a failure"
        );
    }
}

#[test]
fn malformed_input_fails_with_its_line_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bad.tns");
    // The bad line comes late, after runs were already spilled.
    let mut text: String = (1..=20)
        .map(|i| format!("{} {} 1.0\n", 21 - i, i))
        .collect();
    text.push_str("3 4 oops\n");
    std::fs::write(&input, text).unwrap();
    for external in [false, true] {
        let out = dir.path().join("bad.tcs");
        let e = convert(
            &input,
            &out,
            &opts_with(Duplicates::Sum, external),
            &NoProgress,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Syntax {
                    line: 21,
                    column: 5,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("bad.tns:21:5"), "{e}");
        assert_eq!(dir_names(dir.path()), vec!["bad.tns"]);
    }
}

#[test]
fn symmetric_mtx_converts_to_its_full_matrix_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("s.mtx");
    std::fs::write(
        &input,
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 4\n1 1 1\n2 1 2\n3 1 3\n3 3 4\n",
    )
    .unwrap();
    let out = dir.path().join("s.tcs");
    let opts = ConvertOptions {
        format: Some("csc".into()),
        ..ConvertOptions::default()
    };
    let r = convert(&input, &out, &opts, &NoProgress).unwrap();
    assert_eq!(r.dims, vec![3, 3]);
    // The mirrored entries arrive out of CSC order: the external sort handles them.
    let want: Entries = [
        (vec![0, 0], 1.0),
        (vec![1, 0], 2.0),
        (vec![0, 1], 2.0),
        (vec![2, 0], 3.0),
        (vec![0, 2], 3.0),
        (vec![2, 2], 4.0),
    ]
    .into();
    assert_eq!(read_nonzeros(&out), want);
    let back = dir.path().join("back.mtx");
    convert(&out, &back, &opts, &NoProgress).unwrap();
    assert_eq!(read_nonzeros(&back), want);
    let tns = dir.path().join("s.tns");
    convert(&input, &tns, &opts, &NoProgress).unwrap();
    assert_eq!(read_nonzeros(&tns), want);
}

#[test]
fn bad_options_are_reported_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("m.tns");
    std::fs::write(&input, "1 1 1 1\n").unwrap();
    let out = dir.path().join("m.tcs");
    let opts = ConvertOptions {
        format: Some("csr".into()),
        ..ConvertOptions::default()
    };
    let e = convert(&input, &out, &opts, &NoProgress).unwrap_err();
    assert!(matches!(e, Error::Format { .. }), "{e}");
    let e = convert(
        &input,
        &dir.path().join("m.txt"),
        &ConvertOptions::default(),
        &NoProgress,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let big = dir.path().join("big.tns");
    std::fs::write(&big, "5000000000 1 1.0\n").unwrap();
    let e = convert(&big, &out, &ConvertOptions::default(), &NoProgress).unwrap_err();
    assert!(e.to_string().contains("64-bit"), "{e}");
    let opts = ConvertOptions {
        index_bits: 64,
        ..ConvertOptions::default()
    };
    convert(&big, &out, &opts, &NoProgress).unwrap();
    assert_eq!(TcsFile::open(&out).unwrap().dims(), &[5_000_000_000, 1]);
}

/// Lines that are mostly plausible with some garbage mixed in.
fn messy_text(header: &'static str) -> impl Strategy<Value = String> {
    let token = prop_oneof![
        4 => (1u64..6).prop_map(|x| x.to_string()),
        1 => Just("0".to_string()),
        1 => Just("-2.5e1".to_string()),
        1 => Just("x".to_string()),
        1 => Just("99999999999999999999999".to_string()),
        1 => Just("%".to_string()),
        1 => Just("#".to_string()),
        1 => Just("nan".to_string()),
    ];
    let line = proptest::collection::vec(token, 0..5)
        .prop_map(|t| t.join(if t.len() % 2 == 0 { " " } else { "\t" }));
    proptest::collection::vec(line, 0..12)
        .prop_map(move |lines| format!("{header}{}\n", lines.join("\n")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever the text, conversion either succeeds with a valid file or fails with an error
    /// and leaves nothing behind; it never panics or hangs.
    #[test]
    fn messy_text_never_panics_or_leaves_output(
        text in prop_oneof![
            messy_text(""),
            messy_text("%%MatrixMarket matrix coordinate real general\n5 5 3\n"),
            messy_text("%%MatrixMarket matrix coordinate pattern symmetric\n5 5 2\n"),
            messy_text("%%MatrixMarket matrix array integer skew-symmetric\n3 3\n"),
        ],
        external in any::<bool>(),
        dense in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let ext = if text.starts_with("%%") { "mtx" } else { "tns" };
        let input = dir.path().join(format!("in.{ext}"));
        std::fs::write(&input, &text).unwrap();
        let out = dir.path().join("out.tcs");
        let opts = ConvertOptions {
            format: dense.then(|| "dense".to_string()),
            force_external_sort: external,
            run_entries: Some(2),
            fan_in: Some(2),
            ..ConvertOptions::default()
        };
        match convert(&input, &out, &opts, &NoProgress) {
            Ok(_) => prop_assert!(TcsFile::open(&out).is_ok()),
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                prop_assert_eq!(dir_names(dir.path()), vec![format!("in.{ext}")]);
            }
        }
    }
}

/// Cancels at the first progress report.
struct CancelAtOnce;

impl tessera_formats::Progress for CancelAtOnce {
    fn stage(&self, _: &str, _: u64) {}
    fn update(&self, _: u64) {}
    fn cancelled(&self) -> bool {
        true
    }
}

#[test]
fn cancelled_conversions_stop_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("c.tns");
    std::fs::write(&input, "1 1 1\n2 2 2\n3 3 3\n").unwrap();
    for external in [false, true] {
        let out = dir.path().join("c.tcs");
        let e = convert(
            &input,
            &out,
            &opts_with(Duplicates::Sum, external),
            &CancelAtOnce,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Cancelled), "{e}");
        assert_eq!(dir_names(dir.path()), vec!["c.tns"]);
    }
}

/// Sorted input is converted in one pass; input found out of order part-way (after many
/// sorted entries, so that arrays were already spooled) falls back to the external sort and
/// still gives the right tensor, with or without a `# dims` comment, leaving no temporaries.
#[test]
fn out_of_order_input_found_late_falls_back_to_sorting() {
    let dir = tempfile::tempdir().unwrap();
    let mut entries: Vec<(Vec<u64>, f64)> = (0..5000u64)
        .map(|i| (vec![i / 100, (i * 7) % 100], (i % 13) as f64 + 0.5))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let sorted = entries.clone();
    entries.push((vec![3, 3], 2.0)); // out of order, and a duplicate of an earlier entry
    let dims = [50u64, 100];
    for (name, declared, list, presorted) in [
        ("a", Some(&dims[..]), &entries, false),
        ("b", None, &entries, false),
        ("c", None, &sorted, true),
        ("d", Some(&dims[..]), &sorted, true),
    ] {
        let input = dir.path().join(format!("{name}.tns"));
        let output = dir.path().join(format!("{name}.tcs"));
        write_tns(&input, declared, list);
        for fmt in ["ss", "ss:1,0", "ds", "sd"] {
            let opts = ConvertOptions {
                format: Some(fmt.into()),
                run_entries: Some(700),
                fan_in: Some(3),
                ..ConvertOptions::default()
            };
            let report = convert(&input, &output, &opts, &NoProgress).unwrap();
            // Sortedness is judged in the target order: a column-major order is unsorted.
            let in_order = presorted && !fmt.contains(':');
            assert_eq!(report.presorted, in_order, "{name} {fmt}");
            assert_eq!(read_nonzeros(&output), reference(list), "{name} {fmt}");
            assert_eq!(report.dims, vec![50, 100], "{name} {fmt}");
            std::fs::remove_file(&output).unwrap();
        }
    }
    assert_eq!(
        dir_names(dir.path()),
        vec!["a.tns", "b.tns", "c.tns", "d.tns"]
    );
}

/// The external sort stores runs with 32-bit coordinates when they fit and 64-bit ones when
/// not; runs of both kinds merged together (in several rounds) give the right tensor.
#[test]
fn external_sort_mixes_narrow_and_wide_runs() {
    let dir = tempfile::tempdir().unwrap();
    let big = 1u64 << 40;
    // Runs of 8 entries: some have a coordinate beyond u32 range, others do not.
    let entries: Vec<(Vec<u64>, f64)> = (0..200u64)
        .map(|i| {
            let j = (i * 37) % 200;
            let c = if (j / 8) % 3 == 0 { big - 1 - j } else { j };
            (vec![c, j % 5], (j % 7) as f64 + 1.0)
        })
        .collect();
    let input = dir.path().join("wide.tns");
    let output = dir.path().join("wide.tcs");
    write_tns(&input, Some(&[big, 5]), &entries);
    let opts = ConvertOptions {
        index_bits: 64,
        force_external_sort: true,
        run_entries: Some(8),
        fan_in: Some(3),
        ..ConvertOptions::default()
    };
    let report = convert(&input, &output, &opts, &NoProgress).unwrap();
    assert!(report.merge_rounds >= 2);
    assert_eq!(read_nonzeros(&output), reference(&entries));
}

/// `.mtx` → `.tns` → `.mtx` keeps the declared shape: empty trailing rows and columns are
/// not lost, because the `.tns` states its dimensions.
#[test]
fn text_to_text_keeps_the_dimensions() {
    let dir = tempfile::tempdir().unwrap();
    let mtx = dir.path().join("e.mtx");
    std::fs::write(
        &mtx,
        "%%MatrixMarket matrix coordinate real general\n5 7 1\n1 1 2\n",
    )
    .unwrap();
    let tns = dir.path().join("e.tns");
    let back = dir.path().join("back.mtx");
    let opts = ConvertOptions::default();
    let report = convert(&mtx, &tns, &opts, &NoProgress).unwrap();
    assert_eq!(report.dims, vec![5, 7]);
    let report = convert(&tns, &back, &opts, &NoProgress).unwrap();
    assert_eq!(report.dims, vec![5, 7]);
    let text = std::fs::read_to_string(&back).unwrap();
    let size_line = text.lines().find(|l| !l.starts_with('%')).unwrap();
    assert_eq!(
        size_line.split_whitespace().collect::<Vec<_>>(),
        ["5", "7", "1"]
    );
}

/// Rank, entries (coordinates and an index into [`VALUES`]), dense level 0, coordinate
/// width, f32 values, `.mtx` (for rank 2).
/// (rank, entries, dense top, index bits, f32, (mtx, COO tail)).
type SortedTextCase = (usize, Vec<(Vec<u64>, usize)>, bool, u32, bool, (bool, bool));

/// Sorted text with runs of duplicates, long enough to span many blocks at a small budget.
fn sorted_text_case() -> impl Strategy<Value = SortedTextCase> {
    (1usize..=4).prop_flat_map(|rank| {
        let coord = proptest::collection::vec(0u64..4, rank);
        (
            Just(rank),
            proptest::collection::vec((coord, 0usize..VALUES.len()), 1..2500),
            any::<bool>(),
            prop_oneof![Just(32u32), Just(64u32)],
            any::<bool>(),
            (any::<bool>(), any::<bool>()),
        )
    })
}

/// The `.tcs` file at `path` re-levelled into `format` and written again: its bytes.
fn relevelled<V: tessera_formats::Value, I: tessera_formats::Index>(
    path: &Path,
    format: &Format,
) -> Vec<u8> {
    let f = TcsFile::open(path).unwrap();
    let t = f.view::<V, I>().unwrap().relevel(format).unwrap();
    let out = path.with_extension("relevelled.tcs");
    tessera_formats::tcs::write_tensor(&out, &t, None).unwrap();
    std::fs::read(&out).unwrap()
}

/// Values whose sums depend on the order of addition, and the special ones kept bit for bit.
const VALUES: [&str; 10] = [
    "0.1",
    "0.2",
    "0.3",
    "1e-17",
    "-0.7",
    "0.3333333333333333",
    "nan",
    "inf",
    "-inf",
    "-0",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Sorted input packed in parallel blocks (a 64 KiB budget makes 4 KiB blocks) gives the
    /// bytes of the external sort, duplicates summed left to right across block boundaries,
    /// for `.tns` and `.mtx`, compressed and dense-top formats.
    #[test]
    fn blocks_give_the_bytes_of_the_external_sort(
        (rank, raw, dense_top, index_bits, f32, (mtx, coo)) in sorted_text_case()
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mtx = mtx && rank == 2;
        let mut entries = raw;
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut text = if mtx {
            format!("%%MatrixMarket matrix coordinate real general\n% c\n4 4 {}\n", entries.len())
        } else {
            "# dims 4 4 4 4\n".replace("4 4 4 4", &vec!["4"; rank].join(" "))
        };
        for (k, (c, v)) in entries.iter().enumerate() {
            for x in c {
                text += &format!("{} ", x + 1);
            }
            text += VALUES[*v];
            text += if k % 7 == 3 { "\r\n" } else { "\n" };
        }
        let input = dir.path().join(if mtx { "in.mtx" } else { "in.tns" });
        std::fs::write(&input, text).unwrap();
        let mut levels: Vec<char> = (0..rank).map(|k| if k == 0 && dense_top && rank > 1 { 'd' } else { 's' }).collect();
        // COO tails (`sq`, `dsq`, `sqqq`): every level below the first compressed one a `q`.
        let first_sparse = usize::from(levels[0] == 'd');
        if coo {
            for l in levels.iter_mut().skip(first_sparse + 1) {
                *l = 'q';
            }
        }
        let opts = |external| ConvertOptions {
            format: Some(levels.iter().collect()),
            index_bits,
            value_type: if f32 { ValueType::F32 } else { ValueType::F64 },
            memory: 64 << 10,
            force_external_sort: external,
            ..ConvertOptions::default()
        };
        let (fast, slow) = (dir.path().join("fast.tcs"), dir.path().join("slow.tcs"));
        let r = convert(&input, &fast, &opts(false), &NoProgress).unwrap();
        prop_assert!(r.presorted);
        convert(&input, &slow, &opts(true), &NoProgress).unwrap();
        prop_assert!(tcs_bytes(&fast) == tcs_bytes(&slow));
        // The block packer appends each block's arrays in place: a segmented file.
        prop_assert_eq!(TcsFile::open(&fast).unwrap().header().version, 3);
        if levels.contains(&'q') {
            // Its unique form (`ss` for `sq`), packed by the blocks too, holds the same
            // entries: re-levelled into it, the COO file gives its bytes.
            let format = Format::parse(&levels.iter().collect::<String>(), rank).unwrap();
            let unique = dir.path().join("unique.tcs");
            let u_opts = ConvertOptions { format: Some(format.unique().to_string()), ..opts(false) };
            convert(&input, &unique, &u_opts, &NoProgress).unwrap();
            let got = match (f32, index_bits) {
                (true, 32) => relevelled::<f32, u32>(&fast, &format.unique()),
                (true, _) => relevelled::<f32, u64>(&fast, &format.unique()),
                (false, 32) => relevelled::<f64, u32>(&fast, &format.unique()),
                (false, _) => relevelled::<f64, u64>(&fast, &format.unique()),
            };
            prop_assert!(got == tcs_bytes(&unique));
        }
    }
}

/// A coordinate past the declared dimensions in a later block is an error naming its line,
/// whether the lines after it are in order or not, and whether it fits the coordinate width
/// or not (the block packer checks the bounds once per block and packs a block that breaks
/// them again line by line).
#[test]
fn coordinates_past_the_declared_dimensions_name_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bounds.tns");
    for bad in ["4", "5000000000"] {
        for tail in ["", "1 1 0.5\n"] {
            let mut text = String::from("# dims 20000 3\n");
            for i in 1..=15_000 {
                text += &format!("{i} 1 0.5\n");
            }
            text += &format!("15001 {bad} 0.5\n");
            text += "15002 2 0.5\n";
            text += tail;
            std::fs::write(&input, text).unwrap();
            for (external, err) in errors_sorted_and_external(&input) {
                assert!(
                    matches!(
                        err,
                        Error::Syntax {
                            line: 15002,
                            column: 7,
                            kind: SyntaxError::OutOfBounds { .. },
                            ..
                        }
                    ),
                    "{bad:?} {tail:?} external sort {external}: {err}"
                );
                assert_eq!(dir_names(dir.path()), vec!["bounds.tns"]);
            }
        }
    }
}

#[test]
fn errors_in_later_blocks_name_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("late.tns");
    let mut text = String::new();
    for i in 1..=20_000 {
        text += &format!("{i} 1 0.5\n");
    }
    text += "20001 x 0.5\n";
    std::fs::write(&input, text).unwrap();
    // Sorted (the block packer) and forced through the external sort (the parallel chunk
    // parser): both scan good lines in one pass and still name the bad one.
    for (external, err) in errors_sorted_and_external(&input) {
        assert!(
            matches!(
                err,
                Error::Syntax {
                    line: 20001,
                    column: 7,
                    ..
                }
            ),
            "external sort {external}: {err}"
        );
        assert_eq!(dir_names(dir.path()), vec!["late.tns"]);
    }
}

/// Lines that the block packer's runs of distinct entries give back (a repeated entry,
/// summed; one out of order, which sends the file to the external sort) still count for
/// the line an error names, in earlier blocks and in the bad line's own block.
#[test]
fn errors_after_repeated_entries_name_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("repeats.tns");
    for disorder in [false, true] {
        let mut text = String::new();
        let mut lines = 0;
        for i in 1..=5_000 {
            text += &format!("{i} 1 0.5\n");
            lines += 1;
            if i % 7 == 0 {
                text += &format!("{i} 1 0.25\n");
                lines += 1;
            }
        }
        if disorder {
            text += "2 1 0.5\n";
            lines += 1;
        }
        text += "5001 1 0.5\n5001 1 0.5\n5002 x 0.5\n";
        lines += 3;
        std::fs::write(&input, text).unwrap();
        for (external, err) in errors_sorted_and_external(&input) {
            assert!(
                matches!(err, Error::Syntax { line, column: 6, .. } if line == lines),
                "out of order {disorder}, external sort {external}: {err} (want line {lines})"
            );
        }
    }
}

/// The errors converting `input` (which must fail) within 64 KiB, sorted (the block packer) and
/// forced through the external sort (the parallel chunk parser), each with which it was.
fn errors_sorted_and_external(input: &Path) -> Vec<(bool, Error)> {
    [false, true]
        .into_iter()
        .map(|external| {
            let opts = ConvertOptions {
                memory: 64 << 10,
                force_external_sort: external,
                ..ConvertOptions::default()
            };
            let out = input.with_file_name("o.tcs");
            (
                external,
                convert(input, &out, &opts, &NoProgress).unwrap_err(),
            )
        })
        .collect()
}

/// A `.tcs` file's contents in the contiguous layout: equal for equal tensors, however the
/// writer segmented the arrays.
fn tcs_bytes(path: &Path) -> Vec<u8> {
    TcsFile::open(path).unwrap().contiguous_bytes()
}

/// (rank, unsorted entries, coordinate spread, wide coordinates, mode order rotated,
/// 64-bit coordinates, budget case).
type PackedCase = (usize, Vec<Vec<u64>>, bool, bool, bool, usize);

/// A property test's budget case as (memory, entries per run, fan-in): the input kept in
/// memory, many runs spilled, merged in rounds, or a 16 MiB budget.
fn budget_case(case: usize) -> (usize, Option<usize>, Option<usize>) {
    match case {
        0 => (256 << 20, None, None),
        1 => (256 << 20, Some(97), None),
        2 => (256 << 20, Some(61), Some(2)),
        _ => (16 << 20, None, None),
    }
}

fn packed_case() -> impl Strategy<Value = PackedCase> {
    (1usize..=4).prop_flat_map(|rank| {
        (
            Just(rank),
            proptest::collection::vec(proptest::collection::vec(0u64..40, rank), 1..1500),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            0usize..4,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// With `# dims` declared, the external sort's parse workers pack every key as a run
    /// stores it (`EntryReader::pack_keys`); without, runs are collected as records and
    /// packed when spilled. The two give the same `.tcs` contents (`tcs_bytes`: the extent
    /// table may differ, since only packed keys are bucketed, `MergeSource::bucketed`, and
    /// bucketed runs merge in ranges of whole buckets), for unsorted and sorted input, ranks 1 to
    /// 4, a rotated mode order, coordinates past 32 bits, and budgets that keep the input
    /// in memory, spill many runs, merge in rounds, or take 16 MiB.
    #[test]
    fn keys_packed_while_parsing_give_the_bytes_of_the_record_runs(
        (rank, mut keys, sorted, wide, rotated, budget) in packed_case()
    ) {
        // Wide coordinates (past 32 bits) on one mode; a key still fits 64 bits at rank 1.
        let scale = if wide { 1u64 << 29 } else { 1 };
        for k in &mut keys {
            k[0] *= scale;
        }
        if sorted {
            keys.sort();
        }
        let dims: Vec<u64> =
            (0..rank).map(|m| keys.iter().map(|k| k[m]).max().unwrap() + 1).collect();
        let entries: Vec<(Vec<u64>, f64)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), [0.1, -0.3, 1e-17, 0.7][i % 4]))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let (declared, plain) = (dir.path().join("declared.tns"), dir.path().join("plain.tns"));
        write_tns(&declared, Some(&dims), &entries);
        write_tns(&plain, None, &entries);
        let order: Vec<String> = (0..rank).map(|k| ((k + 1) % rank).to_string()).collect();
        let format = format!("{}{}", "s".repeat(rank), if rotated { format!(":{}", order.join(",")) } else { String::new() });
        let (memory, run_entries, fan_in) = budget_case(budget);
        let opts = ConvertOptions {
            format: Some(format),
            index_bits: if wide { 64 } else { 32 },
            memory,
            run_entries,
            fan_in,
            force_external_sort: sorted,
            ..ConvertOptions::default()
        };
        let (a, b) = (dir.path().join("declared.tcs"), dir.path().join("plain.tcs"));
        let ra = convert(&declared, &a, &opts, &NoProgress).unwrap();
        let rb = convert(&plain, &b, &opts, &NoProgress).unwrap();
        prop_assert_eq!(
            (ra.entries_read, ra.entries_written, &ra.dims, ra.runs),
            (rb.entries_read, rb.entries_written, &rb.dims, rb.runs)
        );
        prop_assert!(tcs_bytes(&a) == tcs_bytes(&b));
        let want = reference(&entries);
        prop_assert_eq!(read_nonzeros(&a), want);
    }
}

/// (symmetry, field, entries (row, column, value), sorted, forced through the external sort,
/// budget case).
type MtxCase = (
    &'static str,
    &'static str,
    Vec<(u64, u64, i32)>,
    bool,
    bool,
    usize,
);

fn mtx_case() -> impl Strategy<Value = MtxCase> {
    (
        proptest::sample::select(vec!["general", "symmetric", "skew-symmetric"]),
        proptest::sample::select(vec!["real", "integer", "pattern"]),
        proptest::collection::vec((0u64..60, 0u64..60, -9i32..9), 1..1500),
        any::<bool>(),
        any::<bool>(),
        0usize..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// An `.mtx` file converts (its coordinate lines parsed, mirrored and packed by the
    /// parallel parser) to the bytes of a `.tns` file holding the entries the sequential
    /// `.mtx` reader gives, in its order, without declared dimensions (its runs then hold
    /// records packed when spilled, as the `.mtx` reader's did): general, symmetric and
    /// skew-symmetric; real, integer and pattern; sorted or not; on the block packer or the
    /// external sort; budgets that keep the input in memory, spill many runs, merge in rounds,
    /// or take 16 MiB.
    #[test]
    fn mtx_converts_to_the_bytes_of_its_entries_read_one_by_one(
        (symmetry, field, raw, sorted, external, budget) in mtx_case()
    ) {
        let mut stored: Vec<(u64, u64, i32)> = raw
            .iter()
            .map(|&(i, j, x)| match symmetry {
                "general" => (i, j, x),
                "skew-symmetric" => (i.max(j) + 1, i.min(j), x),
                _ => (i.max(j), i.min(j), x),
            })
            .collect();
        if sorted {
            stored.sort();
        }
        // Dimensions the entries reach, as the `.tns` file's are found.
        let rows = stored.iter().map(|e| e.0).max().unwrap() + 1;
        let cols = stored.iter().map(|e| e.1).max().unwrap() + 1;
        let (rows, cols) = if symmetry == "general" { (rows, cols) } else { (rows.max(cols), rows.max(cols)) };
        let mut text = format!("%%MatrixMarket matrix coordinate {field} {symmetry}\n% c\n");
        text += &format!("{rows} {cols} {}\n", stored.len());
        for &(i, j, x) in &stored {
            let v = match field {
                "pattern" => String::new(),
                "integer" => format!(" {x}"),
                _ => format!(" {}", f64::from(x) / 8.0),
            };
            text += &format!("{} {}{v}\n", i + 1, j + 1);
        }
        let dir = tempfile::tempdir().unwrap();
        let (mtx, tns) = (dir.path().join("m.mtx"), dir.path().join("m.tns"));
        std::fs::write(&mtx, text).unwrap();
        let mut r = tessera_formats::open_text(&mtx).unwrap();
        let mut c = [0u64; 2];
        let mut entries = Vec::new();
        while let Some(v) = r.next_entry(&mut c).unwrap() {
            entries.push((c.to_vec(), v));
        }
        write_tns(&tns, None, &entries);
        let (memory, run_entries, fan_in) = budget_case(budget);
        let opts = ConvertOptions {
            memory,
            run_entries,
            fan_in,
            force_external_sort: external,
            ..ConvertOptions::default()
        };
        let (a, b) = (dir.path().join("mtx.tcs"), dir.path().join("tns.tcs"));
        let ra = convert(&mtx, &a, &opts, &NoProgress).unwrap();
        let rb = convert(&tns, &b, &opts, &NoProgress).unwrap();
        prop_assert_eq!(&ra.dims, &rb.dims);
        prop_assert_eq!(ra.entries_read, rb.entries_read);
        // The contents, not the extent table (only packed keys are bucketed).
        prop_assert!(tcs_bytes(&a) == tcs_bytes(&b));
        prop_assert_eq!(read_nonzeros(&a), reference(&entries));
    }
}

/// Records the stages a conversion goes through.
#[derive(Default)]
struct Stages(std::sync::Mutex<Vec<String>>);

impl tessera_formats::Progress for Stages {
    fn stage(&self, name: &str, _: u64) {
        self.0.lock().unwrap().push(name.to_string());
    }
    fn update(&self, _: u64) {}
}

/// An unsorted `coordinate general` `.mtx` file found out of order by the block packer goes
/// straight to the external sort, as an unsorted `.tns` does (no second, checked pass that
/// stops at its first entry out of order), and gives the bytes of the plain external sort;
/// one that also promises more entries than it holds is still rejected.
#[test]
fn unsorted_mtx_goes_straight_to_the_external_sort() {
    let dir = tempfile::tempdir().unwrap();
    let n = 20_000u64;
    let lines: Vec<String> = (0..n)
        .map(|i| {
            let k = (i * 7919) % n;
            format!("{} {} {}.25", k % 300 + 1, k / 300 + 1, i % 17)
        })
        .collect();
    let input = dir.path().join("u.mtx");
    let header = format!("%%MatrixMarket matrix coordinate real general\n300 70 {n}\n");
    std::fs::write(&input, format!("{header}{}\n", lines.join("\n"))).unwrap();
    let (fast, plain) = (dir.path().join("fast.tcs"), dir.path().join("plain.tcs"));
    let stages = Stages::default();
    let opts = ConvertOptions::default();
    let report = convert(&input, &fast, &opts, &stages).unwrap();
    assert!(!report.presorted);
    let stages = stages.0.into_inner().unwrap();
    let sort = stages.iter().position(|s| s == "sort runs").unwrap();
    assert_eq!(stages[..sort], ["convert"], "{stages:?}");
    let forced = ConvertOptions {
        force_external_sort: true,
        ..ConvertOptions::default()
    };
    convert(&input, &plain, &forced, &NoProgress).unwrap();
    assert_eq!(tcs_bytes(&fast), tcs_bytes(&plain));

    let short = dir.path().join("short.mtx");
    let header = format!(
        "%%MatrixMarket matrix coordinate real general\n300 70 {}\n",
        n + 1
    );
    std::fs::write(&short, format!("{header}{}\n", lines.join("\n"))).unwrap();
    for opts in [&opts, &forced] {
        let e = convert(&short, &dir.path().join("s.tcs"), opts, &NoProgress).unwrap_err();
        assert!(e.to_string().contains("short.mtx"), "{e}");
    }
}
