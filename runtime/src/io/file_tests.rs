//! Split and merge of files against the in-memory path, byte for byte, and their memory
//! bounds by accounting (see `held`): unit tests run with tiny chunks and sink limits, so
//! that small tensors cross many chunk boundaries and are written in many runs.

use super::held;
use super::partial::CHUNK_LEAVES;
use super::sink::sink_limit;
use super::*;
use crate::transport::{run_ranks, Communicator};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;
use tessera_formats::tcs::{write_tensor, ModeInfo};
use tessera_formats::{Format, Tensor};

type T = Tensor<f64, u32>;

/// `n` distinct entries spread uniformly (by a fixed LCG) over `dims`, in `format`.
fn uniform(dims: &[usize], n: usize, format: &str) -> T {
    let mut x: u64 = 0x9e37_79b9;
    let mut seen = BTreeSet::new();
    while seen.len() < n {
        let c: Vec<usize> = dims
            .iter()
            .map(|&d| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 33) as usize % d
            })
            .collect();
        seen.insert(c);
    }
    let entries = seen
        .into_iter()
        .enumerate()
        .map(|(i, c)| (c, 1.0 + i as f64));
    T::from_entries(
        dims.to_vec(),
        Format::parse(format, dims.len()).unwrap(),
        entries,
    )
    .unwrap()
}

fn split_on(ranks: usize, input: &Path, spec: &SplitSpec, out: &Path) -> Vec<usize> {
    run_ranks(ranks, |c| {
        held::reset();
        split_file(c, input, spec, out, &NoProgress).map(|_| held::peak())
    })
    .into_iter()
    .map(|r| r.expect("split succeeds"))
    .collect()
}

fn merge_on(ranks: usize, dir: &Path, out: &Path) -> Vec<usize> {
    run_ranks(ranks, |c| {
        held::reset();
        merge_dir(c, dir, out, &NoProgress).map(|_| held::peak())
    })
    .into_iter()
    .map(|r| r.expect("merge succeeds"))
    .collect()
}

/// Bytes of a tensor's `pos`, `crd` and `vals` arrays.
fn array_bytes(t: &T) -> usize {
    let index: usize = t
        .levels()
        .iter()
        .map(|l| match l {
            tessera_formats::Level::Compressed { pos, crd } => pos.len() + crd.len(),
            _ => 0,
        })
        .sum();
    index * 4 + t.vals().len() * 8
}

/// The most a sink may hold when `sinks` share a rank's budget: its segments up to the limit
/// plus what one entry adds past it (a `pos` and a `crd` per level and a value: this test's
/// tensors have no dense levels), and the reused buffers of the last run written (at most
/// twice their length, and at least Rust's smallest allocation of 4 per array).
fn sink_bound(sinks: usize, rank: usize) -> usize {
    let run = sink_limit(sinks) + 2 * rank + 1;
    (run + 2 * run + 4 * (2 * rank + 1)) * 8
}

/// The most a chunk of the input holds: per leaf a value and per level a `pos` and a `crd`,
/// and the `pos` entries past the chunk's last node.
fn chunk_bound(rank: usize) -> usize {
    CHUNK_LEAVES * (8 + 2 * rank * 4) + 2 * rank * 4
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The block files `split_file` writes are, byte for byte, what writing the blocks of the
    /// in-memory loader gives; merging them gives the input file back byte for byte.
    #[test]
    fn files_are_byte_identical_to_the_in_memory_path(
        n in 1usize..400,
        format in prop::sample::select(vec!["sss", "dss", "sds", "ssd", "dsd"]),
        split in prop::sample::select(vec!["0:3", "1:2", "0:2,2:3", "0:4,1:2,2:2"]),
        ranks in 1usize..4,
        merge_ranks in 1usize..4,
    ) {
        let t = uniform(&[13, 11, 7], n, format);
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.tcs");
        write_tensor(&input, &t, None).unwrap();
        let spec = SplitSpec::parse_blocks(split).unwrap();
        let grid = spec.grid(t.dims()).unwrap();
        split_on(ranks, &input, &spec, &dir.path().join("b"));
        let blocks = run_ranks(1, |c| load_blocks(c, &t.view(), &grid, &NoProgress));
        for b in blocks.into_iter().next().unwrap().unwrap() {
            let modes = b.ranges.iter().zip(t.dims()).map(|(r, &dim)| ModeInfo {
                dim: dim as u64,
                split_lo: r.range.start as u64,
                split_hi: r.range.end as u64,
                split_index: r.index as u64,
                split_count: r.count as u64,
            });
            let expected = dir.path().join("expected.tcs");
            write_tensor(&expected, &b.tensor, Some(modes.collect())).unwrap();
            let name: Vec<String> = b.ranges.iter().map(|r| r.index.to_string()).collect();
            let got = dir.path().join(format!("b/block-{}.tcs", name.join("-")));
            prop_assert!(std::fs::read(&got).unwrap() == std::fs::read(&expected).unwrap(),
                "{} differs from the in-memory block", got.display());
        }
        let out = dir.path().join("out.tcs");
        merge_on(merge_ranks, &dir.path().join("b"), &out);
        prop_assert!(std::fs::read(&out).unwrap() == std::fs::read(&input).unwrap());
    }
}

/// A split rank holds one chunk of its piece and its sinks' bounded segments, not its share:
/// here a share is ten times that bound, and the peak stays within it at 1, 2 and 3 ranks.
#[test]
fn a_split_rank_holds_a_chunk_and_bounded_segments_not_its_share() {
    let t = uniform(&[60, 50, 40], 6000, "sss");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tcs");
    write_tensor(&input, &t, None).unwrap();
    let spec = SplitSpec::parse_blocks("0:3,1:2").unwrap();
    let bound = chunk_bound(3) + 6 * sink_bound(6, 3);
    for ranks in 1..=3 {
        let share = array_bytes(&t) / ranks;
        assert!(
            share > 10 * bound,
            "the test needs shares ({share}) well above {bound}"
        );
        let peaks = split_on(ranks, &input, &spec, &dir.path().join(format!("b{ranks}")));
        for (r, peak) in peaks.into_iter().enumerate() {
            assert!(peak > 0, "rank {r} accounts for its buffers");
            assert!(
                peak <= bound,
                "{ranks} ranks: rank {r} held {peak} B, bound {bound} B"
            );
        }
    }
}

/// A merge rank holds its sections (its share of the blocks) and one sink's bounded segments:
/// at 2 and 3 ranks of a uniform tensor no rank holds much more than its share of the bytes.
#[test]
fn a_merge_rank_holds_its_share_and_bounded_segments() {
    let t = uniform(&[60, 50, 40], 6000, "sss");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tcs");
    write_tensor(&input, &t, None).unwrap();
    let spec = SplitSpec::parse_blocks("0:3,1:2").unwrap();
    split_on(2, &input, &spec, &dir.path().join("b"));
    for ranks in 2..=3 {
        let share = array_bytes(&t) / ranks;
        let bound = share + share / 4 + sink_bound(1, 3);
        let out = dir.path().join(format!("out{ranks}.tcs"));
        let peaks = merge_on(ranks, &dir.path().join("b"), &out);
        for (r, peak) in peaks.into_iter().enumerate() {
            assert!(
                peak <= bound,
                "{ranks} ranks: rank {r} held {peak} B, share {share} B"
            );
        }
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&input).unwrap());
    }
}

/// i64 values (counting tensors) split and merge as i64: the merged file records i64, not
/// another 8-byte type.
#[test]
fn i64_values_round_trip_as_i64() {
    let entries = (0..40usize).map(|i| (vec![i % 9, (i * 5) % 8], i as i64 - 20));
    let t = Tensor::<i64, u32>::from_entries(vec![9, 8], Format::parse("csr", 2).unwrap(), entries)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tcs");
    write_tensor(&input, &t, None).unwrap();
    let spec = SplitSpec::parse_blocks("0:2,1:3").unwrap();
    split_on(2, &input, &spec, &dir.path().join("b"));
    let out = dir.path().join("out.tcs");
    merge_on(3, &dir.path().join("b"), &out);
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&input).unwrap());
}

/// `store_file` of blocks held in memory across ranks (a distributed result) writes, byte for
/// byte, the file of the whole tensor, whichever ranks hold which blocks and in dense formats
/// too (a rank's dense block covers only its range); overlapping blocks are an error on every
/// rank and leave no file behind.
#[test]
fn blocks_in_memory_store_to_the_file_of_the_whole_tensor() {
    let dir = tempfile::tempdir().unwrap();
    for (format, split) in [
        ("sss", "0:3"),
        ("dsd", "0:2,2:3"),
        ("ddd", "0:4,1:2"),
        ("ddd", "2:3"),
        ("ssd", "1:2"),
    ] {
        let dims = [13, 11, 7];
        let t = if format == "ddd" {
            let vals = (0..dims.iter().product::<usize>()).map(|v| v as f64 - 40.0);
            T::dense_from_vec(dims.to_vec(), vals.collect()).unwrap()
        } else {
            uniform(&dims, 300, format)
        };
        let whole = dir.path().join("whole.tcs");
        write_tensor(&whole, &t, None).unwrap();
        let grid = SplitSpec::parse_blocks(split)
            .unwrap()
            .grid(t.dims())
            .unwrap();
        for ranks in 1..=4 {
            let out = dir.path().join(format!("{format}-{ranks}.tcs"));
            let done = run_ranks(ranks, |c| {
                let mine = load_blocks(c, &t.view(), &grid, &NoProgress)?;
                let views: Vec<_> = mine.iter().map(|b| b.tensor.view()).collect();
                store_file(c, &views, &out, &NoProgress)
            });
            for (rank, s) in done.into_iter().enumerate() {
                let s = s.unwrap_or_else(|e| panic!("{format} {split}, rank {rank}: {e}"));
                assert_eq!(s.values, t.vals().len() as u64, "{format} {split}");
            }
            assert!(
                std::fs::read(&out).unwrap() == std::fs::read(&whole).unwrap(),
                "{format} split {split} stored from {ranks} ranks differs from the whole file"
            );
        }
    }
    // Two ranks both holding the whole tensor: overlapping blocks.
    let t = uniform(&[13, 11, 7], 50, "sss");
    let out = dir.path().join("overlap.tcs");
    let done = run_ranks(2, |c| store_file(c, &[t.view()], &out, &NoProgress));
    for r in done {
        let e = r.expect_err("overlapping blocks are refused").to_string();
        assert!(e.contains("overlap"), "{e}");
    }
    assert!(!out.exists());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "temporary files left behind: {left:?}");
}

/// `store_file_cut`: the ranks' runs of the file cut where the caller says — at its blocks'
/// own (uneven) boundaries, or anywhere else — still give the whole tensor's file; cuts of the
/// wrong number or length are an error on every rank, and leave nothing behind.
#[test]
fn blocks_stored_with_given_cuts_make_the_file_of_the_whole_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let t = uniform(&[13, 11, 7], 300, "sss");
    let whole = dir.path().join("whole.tcs");
    write_tensor(&whole, &t, None).unwrap();
    // Rank r holds rows rows[r]..rows[r + 1]: one heavy row, then the rest.
    let rows = [0, 1, 2, 13];
    let block = |r: usize| {
        let mine = t
            .entries()
            .filter(|(c, _)| (rows[r]..rows[r + 1]).contains(&c[0]));
        T::from_entries(t.dims().to_vec(), "sss", mine.collect::<Vec<_>>()).unwrap()
    };
    let at = |row: usize| vec![row, 0, 0];
    for cuts in [vec![at(1), at(2)], vec![at(5), at(9)], vec![at(0), at(13)]] {
        let out = dir.path().join("cut.tcs");
        let done = run_ranks(3, |c| {
            let b = block(c.rank());
            store_file_cut(c, &[b.view()], Some(&cuts), &out, &NoProgress)
        });
        for (rank, s) in done.into_iter().enumerate() {
            let s = s.unwrap_or_else(|e| panic!("cuts {cuts:?}, rank {rank}: {e}"));
            assert_eq!(s.values, t.vals().len() as u64);
        }
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&whole).unwrap(),
            "cuts {cuts:?}: the stored file differs from the whole file"
        );
    }
    for cuts in [vec![at(1)], vec![vec![1, 0], vec![2, 0]]] {
        let out = dir.path().join("bad.tcs");
        let done = run_ranks(3, |c| {
            let b = block(c.rank());
            store_file_cut(c, &[b.view()], Some(&cuts), &out, &NoProgress)
        });
        for r in done {
            let e = r.expect_err("wrong cuts are refused").to_string();
            assert!(e.contains("cuts"), "{e}");
        }
        assert!(!out.exists());
    }
}

/// Dims of the COO formats the test below stores: small outer modes, so that entries share
/// their outer coordinates (the non-unique level's repeats).
fn coo_dims(format: &str) -> Vec<usize> {
    match format {
        "sq" | "sq:1,0" => vec![5, 9],
        "sqq" | "dsq" => vec![4, 5, 6],
        _ => vec![3, 4, 2, 5],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// `store_file` and `store_file_cut` of a tensor in a COO format (singleton levels), held
    /// as blocks by 2 to 4 thread ranks, write, byte for byte, the file one process writes of
    /// the whole tensor in that format (not its unique form), which reads back as the tensor:
    /// empty tensors, one entry, more ranks than entries, and cuts inside a run of entries
    /// that share their outer coordinates (the non-unique level's `pos` counts entries).
    #[test]
    fn coo_blocks_store_to_the_coo_file_of_the_whole_tensor(
        format in prop::sample::select(vec!["sq", "sq:1,0", "sqq", "dsq", "dsqq"]),
        fill in prop_oneof![Just(0usize), Just(1), 2usize..=100],
        split in prop::sample::select(vec!["0:2", "1:3", "0:3,1:2"]),
        ranks in 2usize..=4,
        cut_seed in any::<u64>(),
    ) {
        let dims = coo_dims(format);
        let total: usize = dims.iter().product();
        // Mostly sparse, sometimes empty, one entry, or nearly full.
        let n = match fill {
            0 => 0,
            1 => 1,
            f => total * f / 400,
        };
        let t = uniform(&dims, n, format);
        prop_assert!(t.format().coo_start().is_some());
        let dir = tempfile::tempdir().unwrap();
        let whole = dir.path().join("whole.tcs");
        write_tensor(&whole, &t, None).unwrap();
        let grid = SplitSpec::parse_blocks(split).unwrap().grid(t.dims()).unwrap();
        // `ranks - 1` sorted level-order cuts, anywhere in the coordinate box.
        let level_dims: Vec<usize> = t.format().mode_order().iter().map(|&m| dims[m]).collect();
        let mut x = cut_seed | 1;
        let mut cuts: Vec<Vec<usize>> = (1..ranks)
            .map(|_| {
                level_dims
                    .iter()
                    .map(|&d| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x % d as u64) as usize
                    })
                    .collect()
            })
            .collect();
        cuts.sort();
        for cut in [None, Some(&cuts[..])] {
            let out = dir.path().join("out.tcs");
            let done = run_ranks(ranks, |c| {
                let mine = load_blocks(c, &t.view(), &grid, &NoProgress)?;
                let views: Vec<_> = mine.iter().map(|b| b.tensor.view()).collect();
                store_file_cut(c, &views, cut, &out, &NoProgress)
            });
            for (rank, s) in done.into_iter().enumerate() {
                let s = s.map_err(|e| TestCaseError::fail(format!("rank {rank}: {e}")))?;
                prop_assert_eq!(s.values, n as u64);
            }
            prop_assert!(
                std::fs::read(&out).unwrap() == std::fs::read(&whole).unwrap(),
                "{} ({} entries) stored from {} ranks with cuts {:?} differs from the whole file",
                format, n, ranks, cut
            );
            let back: T = tessera_formats::tcs::TcsFile::open(&out).unwrap().to_tensor().unwrap();
            prop_assert!(back == t, "{} read back differs from the tensor", format);
        }
    }
}
