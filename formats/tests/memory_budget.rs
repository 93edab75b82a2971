//! The converter's buffers stay within `--memory`: every heap allocation of the process is
//! counted (a global allocator in this test binary of its own, as process-global state must
//! be) and so are the input blocks the packer maps, and their peak during a conversion is
//! held against the budget. Sorted and unsorted `.tns` and sorted `.mtx`, at budgets down to
//! 16 MiB, on inputs that fill every buffer (the unsorted one makes several runs). This measures what the converter allocates, not
//! time or RSS (the conversion bench prints peak RSS beside each budget).

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use tessera_formats::{convert, ConvertOptions, NoProgress, TcsFile, Value};

/// The allocation counters are process-wide: tests that read them run one at a time.
static COUNTED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Heap bytes live now and the most at once since the last reset.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

struct Counting;

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // The old and new blocks may both be live while the system copies.
            grew(new_size);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Pseudo-random entries (a fixed LCG: the same file every run) of a 3-order tensor, or of a
/// matrix for `.mtx`, written sorted or in generation order.
fn write_text(path: &Path, entries: usize, sorted: bool, mtx: bool) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |m: u64| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) % m + 1
    };
    let rank = if mtx { 2 } else { 3 };
    let mut keys: Vec<Vec<u64>> = (0..entries)
        .map(|_| (0..rank).map(|_| next(20_000)).collect())
        .collect();
    if sorted {
        keys.sort();
    }
    keys.dedup();
    let mut s = String::with_capacity(entries * 24);
    if mtx {
        let _ = writeln!(s, "%%MatrixMarket matrix coordinate real general");
        let _ = writeln!(s, "20000 20000 {}", keys.len());
    } else {
        let _ = writeln!(s, "# dims 20000 20000 20000");
    }
    for k in &keys {
        for c in k {
            let _ = write!(s, "{c} ");
        }
        let _ = writeln!(s, "0.{}", next(999));
    }
    std::fs::write(path, s).unwrap();
}

/// Peak heap plus mapped input bytes of one conversion at `budget`, and its sorted runs.
fn peak_of(input: &Path, output: &Path, budget: usize) -> (usize, usize) {
    let opts = ConvertOptions {
        memory: budget,
        ..ConvertOptions::default()
    };
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    tessera_formats::convert::reset_mapped_peak();
    let report = convert(input, output, &opts, &NoProgress).unwrap();
    assert!(report.entries_written > 0);
    let peak = PEAK.load(Ordering::Relaxed) - before + tessera_formats::convert::mapped_peak();
    (peak, report.runs)
}

#[test]
fn conversion_buffers_stay_within_every_budget() {
    let _one = COUNTED.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // About 7 MB of text each: the unsorted ones make several runs at these budgets (the
    // matrix's entries take less room in a run: more of them).
    let inputs = [
        ("sorted.tns", true, false),
        ("unsorted.tns", false, false),
        ("sorted.mtx", true, true),
        ("unsorted.mtx", false, true),
    ];
    for (name, sorted, mtx) in inputs {
        let entries = if mtx && !sorted { 400_000 } else { 300_000 };
        write_text(&d.join(name), entries, sorted, mtx);
    }
    for budget_mib in [16usize, 32] {
        let budget = budget_mib << 20;
        // The share the converter gives its buffers: the rest is the process's own (code,
        // stacks, the allocator's keeping; `convert::working_memory`).
        let share = budget - (budget / 4).min(4 << 20);
        for (name, _, _) in inputs {
            let (peak, runs) = peak_of(&d.join(name), &d.join("out.tcs"), budget);
            assert_eq!(
                runs >= 2,
                name.starts_with("unsorted"),
                "{name}: {runs} runs"
            );
            assert!(
                peak <= share,
                "{name} at {budget_mib} MiB: the converter's buffers peaked at {:.1} MiB",
                peak as f64 / (1 << 20) as f64
            );
        }
    }
}

/// At a small budget an unsorted input sorted into more runs than a merge round takes at once
/// (85 at 16 MiB: a third of the budget in 64 KiB buffers) is merged by the parallel final
/// merge directly, with no serial merge round, within the budget, and into the same bytes as
/// a conversion with a few large runs.
#[test]
fn many_small_runs_are_merged_without_a_round_within_the_budget() {
    let _one = COUNTED.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = d.join("unsorted.tns");
    let entries = 300_000;
    write_text(&input, entries, false, false);
    let few = convert(
        &input,
        &d.join("few.tcs"),
        &ConvertOptions::default(),
        &NoProgress,
    )
    .unwrap();
    // About 100 run files whatever the core count: each run is cut into a piece per parse
    // thread (at most 4), and the parallel final merge takes 192 runs or more at 16 MiB.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let budget = 16 << 20;
    let opts = ConvertOptions {
        memory: budget,
        run_entries: Some(entries * threads / 100),
        ..ConvertOptions::default()
    };
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    tessera_formats::convert::reset_mapped_peak();
    let many = convert(&input, &d.join("many.tcs"), &opts, &NoProgress).unwrap();
    let peak = PEAK.load(Ordering::Relaxed) - before + tessera_formats::convert::mapped_peak();
    assert!(many.runs > 85, "{} runs", many.runs);
    assert_eq!(many.merge_rounds, 0, "{} runs", many.runs);
    let share = budget - (budget / 4).min(4 << 20);
    assert!(
        peak <= share,
        "peaked at {:.1} MiB",
        peak as f64 / (1 << 20) as f64
    );
    assert!(few.runs < many.runs);
    // The same tensor (the bytes differ: the extent table follows the merge's key ranges).
    let (a, b) = (
        entries_of(&d.join("few.tcs")),
        entries_of(&d.join("many.tcs")),
    );
    assert_eq!(a.len(), few.entries_written as usize);
    assert!(a == b, "the tensors differ");
}

/// Every stored entry of a `.tcs` file, in storage order.
fn entries_of(path: &Path) -> Vec<(Vec<usize>, f64)> {
    let f = TcsFile::open(path).unwrap();
    let h = f.header();
    let mut out = Vec::new();
    tessera_formats::with_types!(h.value_type, h.index_bits, |V, I| f
        .view::<V, I>()
        .unwrap()
        .entries()
        .for_each(|(c, v)| out.push((c, Value::to_f64(v)))));
    out
}

/// Sorted runs the budget holds in memory (`runs::Hold`) make the same tensor as the same
/// runs written to disk and read back (`ConvertOptions::spill_runs`), within the budget: at
/// 16 MiB a 12 MB input is held whole in runs made smaller for it (`Hold::plan`), a 16 MB
/// one is not held at all (it would not fit, and its final merge would not take the runs by
/// buckets: `Hold::planned`), at 64 MiB an 80 MB one is held in part (it would not fit: its
/// first runs are held while they fit, the rest spilled), and one of 700k entries whose first lines
/// are long (so that the estimate at the first run falls short) fills the room for held
/// runs part way through, the rest spilled; at 32 MiB the 16 MB input is held whole in runs
/// of the usual size. With repeated coordinates, whose values are summed in input order
/// across held and spilled runs (the values' bits are compared). Runs held whole are merged
/// by buckets of their keys' top bits (`MergeSource::bucketed`), cut into other key ranges
/// than sorted runs, so the file's segments differ: the same entries, dimensions and value
/// bits; where runs were spilled, held runs are sorted and merged as spilled ones, and the
/// files are the same byte for byte.
#[test]
fn runs_held_in_memory_make_the_tensor_of_spilled_runs_within_the_budget() {
    let _one = COUNTED.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let write = |name: &str, entries: usize, long: usize| {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % m + 1
        };
        let mut s = String::with_capacity(entries * 24);
        let _ = writeln!(s, "# dims 300 300 300");
        for _ in 0..entries {
            // 27 M coordinates: about one entry in 40 repeats an earlier one.
            let (i, j, k) = (next(300), next(300), next(300));
            if s.len() < long {
                let _ = writeln!(s, "{i} {j} {k} {}.{}000000000000000000", next(9), next(999));
            } else {
                let _ = writeln!(s, "{i} {j} {k} {}", next(9));
            }
        }
        let path = d.join(name);
        std::fs::write(&path, s).unwrap();
        path
    };
    let smaller = write("520k.tns", 520_000, usize::MAX);
    let larger = write("700k.tns", 700_000, usize::MAX);
    let uneven = write("uneven.tns", 700_000, 6 << 20);
    let largest = write("3500k.tns", 3_500_000, usize::MAX);
    // (input, budget, runs spilled: none, some or all)
    let (none, some, all) = (0, 1, 2);
    let cases = [
        (&smaller, 16usize, none),
        (&larger, 16, all),
        (&largest, 64, some),
        (&uneven, 16, some),
        (&larger, 32, none),
    ];
    for (input, budget_mib, spills) in cases {
        let budget = budget_mib << 20;
        let share = budget - (budget / 4).min(4 << 20);
        let opts = ConvertOptions {
            memory: budget,
            ..ConvertOptions::default()
        };
        let held_out = d.join("held.tcs");
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        tessera_formats::convert::reset_mapped_peak();
        let held = convert(input, &held_out, &opts, &NoProgress).unwrap();
        let peak = PEAK.load(Ordering::Relaxed) - before + tessera_formats::convert::mapped_peak();
        let what = format!("{} at {budget_mib} MiB", input.display());
        assert!(
            peak <= share,
            "{what}: the converter's buffers peaked at {:.1} MiB",
            peak as f64 / (1 << 20) as f64
        );
        let spill = ConvertOptions {
            spill_runs: true,
            ..opts.clone()
        };
        let spilled_out = d.join("spilled.tcs");
        let spilled = convert(input, &spilled_out, &spill, &NoProgress).unwrap();
        assert_eq!(spilled.runs_spilled, spilled.runs, "{what}");
        assert_eq!(held.runs, spilled.runs, "{what}");
        assert!(held.runs >= 2, "{what}: {} runs", held.runs);
        assert!(
            held.entries_written < held.entries_read,
            "no repeated entries"
        );
        let spilled_some = held.runs_spilled > 0 && held.runs_spilled < held.runs;
        let expected = match spills {
            0 => held.runs_spilled == 0,
            1 => spilled_some,
            _ => held.runs_spilled == held.runs,
        };
        assert!(
            expected,
            "{what}: {} of {} runs spilled",
            held.runs_spilled, held.runs
        );
        if spills == none {
            let bits = |path: &Path| {
                let entries = entries_of(path).into_iter();
                let f = TcsFile::open(path).unwrap();
                let h = f.header();
                let dims = format!("{:?} {:?} {}", h.modes, h.levels, h.nnz);
                (
                    dims,
                    entries.map(|(c, v)| (c, v.to_bits())).collect::<Vec<_>>(),
                )
            };
            let (a, b) = (bits(&held_out), bits(&spilled_out));
            assert_eq!(a.0, b.0, "{what}: modes, levels, values");
            assert_eq!(a.1.len(), b.1.len(), "{what}: entries");
            assert!(a.1 == b.1, "{what}: held and spilled runs differ");
        } else {
            let (a, b) = (
                std::fs::read(&held_out).unwrap(),
                std::fs::read(&spilled_out).unwrap(),
            );
            assert!(a == b, "{what}: held and spilled runs differ");
        }
        eprintln!(
            "{what}: {} runs, {} spilled, peak {:.1} MiB of {:.1}",
            held.runs,
            held.runs_spilled,
            peak as f64 / (1 << 20) as f64,
            share as f64 / (1 << 20) as f64
        );
    }
}
