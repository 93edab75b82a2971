//! What values become: NaN, ±inf, subnormals and −0 in `.tns`/`.mtx` are accepted and kept
//! bit for bit (every NaN as the one canonical NaN); duplicates are summed left to right in
//! input order, so the output is byte-identical at every memory budget, run size and merge
//! fan-in. (docs/tcs.md, "Values".)

use std::path::Path;

use tessera_formats::{convert, ConvertOptions, NoProgress, TcsFile, ValueType};

/// Values of a rank-1 `.tcs` file with all levels compressed, in coordinate order.
fn values(path: &Path) -> Vec<(usize, u64)> {
    let f = TcsFile::open(path).unwrap();
    match f.header().value_type {
        ValueType::F64 => f
            .view::<f64, u32>()
            .unwrap()
            .entries()
            .map(|(c, v)| (c[0], v.to_bits()))
            .collect(),
        ValueType::F32 => f
            .view::<f32, u32>()
            .unwrap()
            .entries()
            .map(|(c, v)| (c[0], u64::from(v.to_bits())))
            .collect(),
        ValueType::I64 => unreachable!("these tests convert to f32 and f64 only"),
    }
}

fn to_tcs(input: &Path, output: &Path, opts: &ConvertOptions) {
    convert(input, output, opts, &NoProgress).unwrap_or_else(|e| panic!("{e}"));
}

const SPECIAL: [(&str, f64); 9] = [
    ("nan", f64::NAN),
    ("-NaN", f64::NAN),
    ("inf", f64::INFINITY),
    ("-Infinity", f64::NEG_INFINITY),
    ("4.9e-324", 4.9e-324),
    ("-2.2250738585072009e-308", -2.225_073_858_507_201e-308),
    ("-0", -0.0),
    ("1e400", f64::INFINITY),
    ("1.7976931348623157e308", f64::MAX),
];

#[test]
fn special_values_are_kept_bit_for_bit_through_tns_mtx_tcs_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let n = SPECIAL.len();
    let mut tns = format!("# dims {n}\n");
    let mut mtx = format!("%%MatrixMarket matrix coordinate real general\n{n} 1 {n}\n");
    for (k, (text, _)) in SPECIAL.iter().enumerate() {
        tns += &format!("{} {text}\n", k + 1);
        mtx += &format!("{} 1 {text}\n", k + 1);
    }
    std::fs::write(d.join("v.tns"), tns).unwrap();
    std::fs::write(d.join("v.mtx"), mtx).unwrap();
    let opts = ConvertOptions::default();
    to_tcs(&d.join("v.tns"), &d.join("v.tcs"), &opts);
    let want: Vec<(usize, u64)> = SPECIAL
        .iter()
        .enumerate()
        .map(|(k, (_, v))| (k, v.to_bits()))
        .collect();
    assert_eq!(values(&d.join("v.tcs")), want);
    // The canonical NaN, whatever the text said.
    assert_eq!(want[0].1, 0x7ff8_0000_0000_0000);
    assert_eq!(want[1].1, 0x7ff8_0000_0000_0000);

    // .mtx reads the same values (one matrix column: the row is the coordinate).
    let opts_ds = ConvertOptions {
        format: Some("ds:1,0".into()),
        ..ConvertOptions::default()
    };
    to_tcs(&d.join("v.mtx"), &d.join("m.tcs"), &opts_ds);
    let f = TcsFile::open(&d.join("m.tcs")).unwrap();
    let got: Vec<(usize, u64)> = f
        .view::<f64, u32>()
        .unwrap()
        .entries()
        .map(|(c, v)| (c[0], v.to_bits()))
        .collect();
    assert_eq!(got, want);

    // Back to text and in again: the same bytes.
    to_tcs_back(d, "v.tcs", "back.tns");
    to_tcs(&d.join("back.tns"), &d.join("again.tcs"), &opts);
    assert_eq!(tcs_bytes(&d.join("v.tcs")), tcs_bytes(&d.join("again.tcs")));

    // f32 output: each value rounded to the nearest f32 (overflow to ±inf, subnormals of
    // f32 kept, f64 subnormals flush to ±0 by rounding), NaN canonical.
    let opts32 = ConvertOptions {
        value_type: ValueType::F32,
        ..ConvertOptions::default()
    };
    to_tcs(&d.join("v.tns"), &d.join("v32.tcs"), &opts32);
    let want32: Vec<(usize, u64)> = SPECIAL
        .iter()
        .enumerate()
        .map(|(k, (_, v))| (k, u64::from((*v as f32).to_bits())))
        .collect();
    assert_eq!(values(&d.join("v32.tcs")), want32);
    assert_eq!(want32[0].1, 0x7fc0_0000);
    to_tcs_back(d, "v32.tcs", "back32.tns");
    to_tcs(&d.join("back32.tns"), &d.join("again32.tcs"), &opts32);
    assert_eq!(
        tcs_bytes(&d.join("v32.tcs")),
        tcs_bytes(&d.join("again32.tcs"))
    );
}

fn to_tcs_back(d: &Path, from: &str, to: &str) {
    convert(
        &d.join(from),
        &d.join(to),
        &ConvertOptions::default(),
        &NoProgress,
    )
    .unwrap();
}

/// A deterministic stream of values whose sums depend on the order of addition.
fn order_sensitive(k: u64) -> f64 {
    const V: [f64; 8] = [0.1, 0.2, 0.3, 1e-3, 1.0 / 3.0, 7.0, -0.7, 1e-17];
    V[(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61) as usize]
}

#[test]
fn duplicates_are_summed_in_input_order_at_every_budget_run_size_and_fan_in() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 60 coordinates, each repeated many times, shuffled; values that do not associate.
    let entries: Vec<(u64, f64)> = (0..30_000u64)
        .map(|k| ((k * 7919 + k / 13) % 60, order_sensitive(k)))
        .collect();
    let mut text = String::from("# dims 60\n");
    let mut want = vec![None::<f64>; 60];
    for &(c, v) in &entries {
        text += &format!("{} {v}\n", c + 1);
        want[c as usize] = Some(match want[c as usize] {
            None => v,
            Some(acc) => acc + v,
        });
    }
    std::fs::write(d.join("dup.tns"), text).unwrap();
    let want: Vec<(usize, u64)> = want
        .iter()
        .enumerate()
        .map(|(c, v)| (c, v.unwrap().to_bits()))
        .collect();
    let mut outputs = Vec::new();
    let configs: [(usize, bool, Option<usize>, Option<usize>); 6] = [
        (256 << 20, false, None, None),
        (256 << 20, true, None, None),
        (1 << 20, true, None, None),
        (1 << 20, true, Some(1000), Some(2)),
        (1 << 20, true, Some(777), Some(3)),
        (1 << 20, true, Some(29_999), Some(2)),
    ];
    for (k, &(memory, force, run_entries, fan_in)) in configs.iter().enumerate() {
        let out = d.join(format!("dup{k}.tcs"));
        let opts = ConvertOptions {
            memory,
            force_external_sort: force,
            run_entries,
            fan_in,
            ..ConvertOptions::default()
        };
        let report = convert(&d.join("dup.tns"), &out, &opts, &NoProgress).unwrap();
        assert_eq!(report.entries_written, 60);
        assert_eq!(values(&out), want, "config {k}: {opts:?}");
        outputs.push(tcs_bytes(&out));
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn a_nan_sum_of_duplicates_is_the_canonical_nan() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("n.tns"), "1 inf\n2 1\n1 -inf\n").unwrap();
    for force in [false, true] {
        let opts = ConvertOptions {
            force_external_sort: force,
            run_entries: force.then_some(1),
            ..ConvertOptions::default()
        };
        to_tcs(&d.join("n.tns"), &d.join("n.tcs"), &opts);
        assert_eq!(
            values(&d.join("n.tcs")),
            vec![(0, f64::NAN.to_bits()), (1, 1f64.to_bits())]
        );
    }
}

/// A `.tcs` file's contents in the contiguous layout: equal for equal tensors, however the
/// writer segmented the arrays.
fn tcs_bytes(path: &Path) -> Vec<u8> {
    TcsFile::open(path).unwrap().contiguous_bytes()
}
