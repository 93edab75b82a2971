//! Streaming conversion of arbitrary text to `.tcs` and back. Input is either raw bytes (as
//! `.tns` or `.mtx`) or a structured tensor (`arbitrary`) written as `.tns`; options are
//! chosen by the fuzzer, with tiny memory budgets, forced external sorts, many runs and merge
//! rounds, sorted runs held in memory or spilled. A conversion either fails with an error, leaving no output and no temporary file,
//! or writes a file the validator accepts; converting that file back to text and again to
//! `.tcs` gives the same tensor.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tessera_formats::{convert, ConvertOptions, Duplicates, NoProgress, TcsFile, ValueType};
use tessera_fuzz::{clear, scratch, walk_tcs, write, ArbTensor};

#[derive(Debug, Arbitrary)]
enum Text {
    Tns(Vec<u8>),
    Mtx(Vec<u8>),
    Tensor(ArbTensor),
}

#[derive(Debug, Arbitrary)]
struct Input {
    text: Text,
    /// Bit k: level k dense; bit 7: reversed mode order; bit 6: the default (all compressed).
    format: u8,
    index64: bool,
    f32: bool,
    dup_error: bool,
    force_external: bool,
    run_entries: Option<u8>,
    fan_in: Option<u8>,
    /// Sorted runs written to disk even when they fit the budget (else held in memory).
    spill_runs: bool,
}

fn format_string(bits: u8, rank: usize) -> Option<String> {
    if bits & 64 != 0 || rank == 0 {
        return None;
    }
    let letters: String = (0..rank)
        .map(|k| if bits >> k & 1 == 1 { 'd' } else { 's' })
        .collect();
    if bits & 128 != 0 {
        let order: Vec<String> = (0..rank).rev().map(|k| k.to_string()).collect();
        Some(format!("{letters}:{}", order.join(",")))
    } else {
        Some(letters)
    }
}

fuzz_target!(|input: Input| {
    clear("c-");
    let (input_path, format) = match &input.text {
        Text::Tns(b) => (write("c-in.tns", b), None),
        Text::Mtx(b) => (write("c-in.mtx", b), None),
        Text::Tensor(t) => {
            let rank = t.shape().0.len();
            (
                write("c-in.tns", t.to_tns().as_bytes()),
                format_string(input.format, rank),
            )
        }
    };
    let opts = ConvertOptions {
        format,
        index_bits: if input.index64 { 64 } else { 32 },
        value_type: if input.f32 {
            ValueType::F32
        } else {
            ValueType::F64
        },
        memory: 1 << 20,
        duplicates: if input.dup_error {
            Duplicates::Error
        } else {
            Duplicates::Sum
        },
        temp_dir: None,
        force_external_sort: input.force_external,
        run_entries: input.run_entries.map(|n| n as usize % 8 + 1),
        fan_in: input.fan_in.map(|n| n as usize % 4 + 2),
        sync: false,
        spill_runs: input.spill_runs,
    };
    let out = scratch().join("c-out.tcs");
    let result = convert(&input_path, &out, &opts, &NoProgress);
    let leftovers = || -> Vec<String> {
        std::fs::read_dir(scratch())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.') || n.contains("partial") || n.contains("run"))
            .collect()
    };
    assert!(
        leftovers().is_empty(),
        "temporary files left: {:?}",
        leftovers()
    );
    if result.is_err() {
        assert!(!out.exists(), "a failed conversion left its output");
        return;
    }
    let first = std::fs::read(&out).unwrap();
    let file = TcsFile::open(&out).expect("the converter's output validates");
    walk_tcs(&file);

    // Back to text, and again to .tcs with the same options (no duplicates remain).
    let back = scratch().join("c-back.tns");
    convert(&out, &back, &opts, &NoProgress).expect("a valid .tcs converts back to text");
    let again = scratch().join("c-again.tcs");
    convert(&back, &again, &opts, &NoProgress).expect("text written by Tessera converts again");
    let second = std::fs::read(&again).unwrap();
    if first != second {
        let (a, b) = (TcsFile::open(&out).unwrap(), TcsFile::open(&again).unwrap());
        assert_eq!(a.dims(), b.dims());
        let (ea, eb) = (tessera_fuzz::entries_f64(&a), tessera_fuzz::entries_f64(&b));
        // Text has one NaN (its sign and payload are not kept), and dense levels store
        // zeros that are not written back (so −0 there comes back as +0).
        let same = |x: f64, y: f64| {
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()) || (x == 0.0 && y == 0.0)
        };
        assert_eq!(ea.len(), eb.len(), "entry counts differ after a round trip");
        for ((ca, va), (cb, vb)) in ea.iter().zip(&eb) {
            assert_eq!(ca, cb);
            assert!(same(*va, *vb), "{ca:?}: {va:?} became {vb:?}");
        }
    }
});
