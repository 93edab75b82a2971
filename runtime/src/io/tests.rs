//! Distributed load/store tests with thread ranks, against an independent reference: the
//! original tensor's entries filtered by each block's ranges.

use super::*;
use crate::transport::{run_ranks, Communicator};
use proptest::prelude::*;
use tessera_formats::{Format, LevelType, Tensor};

type T = Tensor<f64, u32>;

/// A random tensor: rank 1–3, small dimensions, a random format and mode order (a third of
/// the matrices and 3-tensors with a COO tail: `sq`, `dsq`, `sqq`), a random subset of
/// coordinates with nonzero values.
fn tensor_strategy() -> impl Strategy<Value = T> {
    (1usize..=3)
        .prop_flat_map(|rank| {
            (
                prop::collection::vec(1usize..7, rank),
                (prop::collection::vec(any::<bool>(), rank), 0..3 * rank),
                Just((0..rank).collect::<Vec<usize>>()).prop_shuffle(),
                any::<u64>(),
                0u32..=100,
            )
        })
        .prop_map(|(dims, (dense, coo), order, seed, density)| {
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
            if coo + 1 < levels.len() {
                levels[coo] = LevelType::Compressed;
                for l in &mut levels[coo + 1..] {
                    *l = LevelType::Singleton;
                }
            }
            let format = Format::new(levels, order).expect("a permutation");
            let total: usize = dims.iter().product();
            let mut entries = Vec::new();
            let mut state = seed | 1;
            for flat in 0..total {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                if (state % 100) < u64::from(density) {
                    let mut c = vec![0; dims.len()];
                    let mut rest = flat;
                    for m in (0..dims.len()).rev() {
                        c[m] = rest % dims[m];
                        rest /= dims[m];
                    }
                    entries.push((c, (state % 1000) as f64 + 1.0));
                }
            }
            T::from_entries(dims, format, entries).expect("valid entries")
        })
}

/// Per mode: equal ranges (possibly more ranges than coordinates) or explicit points
/// (uneven, repeated points give empty ranges).
fn split_strategy(dims: Vec<usize>) -> impl Strategy<Value = SplitSpec> {
    let per_mode: Vec<_> = dims
        .iter()
        .map(|&d| {
            prop_oneof![
                (1usize..5).prop_map(ModeSplit::Equal),
                prop::collection::vec(0..=d, 0..4).prop_map(|mut p| {
                    p.sort();
                    ModeSplit::Points(p)
                }),
            ]
        })
        .collect();
    per_mode.prop_map(|splits| SplitSpec::new(splits.into_iter().enumerate().collect()))
}

fn case() -> impl Strategy<Value = (T, SplitSpec, usize)> {
    tensor_strategy().prop_flat_map(|t| {
        let dims = t.dims().to_vec();
        (Just(t), split_strategy(dims), 1usize..=5)
    })
}

fn load_on_threads(t: &T, grid: &BlockGrid, ranks: usize) -> Vec<Vec<Block<f64, u32>>> {
    run_ranks(ranks, |c| load_blocks(c, &t.view(), grid, &NoProgress))
        .into_iter()
        .map(|r| r.expect("load succeeds"))
        .collect()
}

fn in_block(coords: &[usize], ranges: &[BlockRange]) -> bool {
    coords.iter().zip(ranges).all(|(c, r)| r.range.contains(c))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// Every block lands on its owner and holds exactly the original entries in its ranges,
    /// with dense levels narrowed to the block's range.
    #[test]
    fn blocks_hold_exactly_their_entries((t, spec, ranks) in case()) {
        let grid = spec.grid(t.dims()).unwrap();
        let per_rank = load_on_threads(&t, &grid, ranks);
        let mut keys = Vec::new();
        for (rank, blocks) in per_rank.iter().enumerate() {
            for b in blocks {
                prop_assert_eq!(BlockGrid::owner(b.key, ranks), rank);
                keys.push(b.key);
                let expect: Vec<_> = t.entries().filter(|(c, _)| in_block(c, &b.ranges)).collect();
                let got: Vec<_> = b.tensor.entries().collect();
                prop_assert_eq!(&got, &expect, "block {:?}", b.ranges);
                for (k, level) in b.tensor.levels().iter().enumerate() {
                    if let tessera_formats::Level::Dense { size, offset } = level {
                        let r = &b.ranges[t.format().mode_order()[k]].range;
                        prop_assert_eq!((*offset, *size), (r.start, r.len()));
                    }
                }
            }
        }
        keys.sort();
        prop_assert_eq!(keys, (0..grid.block_count().unwrap()).collect::<Vec<_>>());
    }

    /// The blocks do not depend on the number of ranks that built them.
    #[test]
    fn blocks_do_not_depend_on_rank_count((t, spec, ranks) in case()) {
        let grid = spec.grid(t.dims()).unwrap();
        let by_key = |per_rank: Vec<Vec<Block<f64, u32>>>| {
            let mut all: Vec<_> = per_rank.into_iter().flatten().collect();
            all.sort_by_key(|b| b.key);
            all
        };
        prop_assert_eq!(by_key(load_on_threads(&t, &grid, 1)), by_key(load_on_threads(&t, &grid, ranks)));
    }
}

/// Found by the `split_merge` fuzz target: a split built in code (not parsed) into zero equal
/// ranges divided by zero in `grid`.
#[test]
fn an_equal_split_into_zero_ranges_is_an_error_not_a_panic() {
    let spec = SplitSpec::new(vec![(0, ModeSplit::Equal(0))]);
    assert!(matches!(
        spec.grid(&[5]),
        Err(IoError::SplitPoints { mode: 0, .. })
    ));
}

#[test]
fn split_specs_parse_and_reject_bad_text() {
    let g = SplitSpec::parse_blocks("0:2,1:3")
        .unwrap()
        .grid(&[4, 9])
        .unwrap();
    assert_eq!(g.block_count().unwrap(), 6);
    assert_eq!(g.range(1, 2), 6..9);
    let g = SplitSpec::parse_points("1:2/2/7")
        .unwrap()
        .grid(&[3, 9])
        .unwrap();
    assert_eq!(
        (0..4).map(|i| g.range(1, i)).collect::<Vec<_>>(),
        vec![0..2, 2..2, 2..7, 7..9]
    );
    assert_eq!(g.range_index(1, 2), 2, "empty ranges are skipped");
    for bad in ["", "0", "x:2", "0:0", "0:-1"] {
        assert!(
            matches!(
                SplitSpec::parse_blocks(bad),
                Err(IoError::SplitSyntax { .. })
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        SplitSpec::parse_points("0:3/1").unwrap().grid(&[5]),
        Err(IoError::SplitPoints { mode: 0, .. })
    ));
    assert!(matches!(
        SplitSpec::parse_points("0:9").unwrap().grid(&[5]),
        Err(IoError::SplitPoints { mode: 0, .. })
    ));
    assert!(matches!(
        SplitSpec::parse_blocks("2:2").unwrap().grid(&[5, 5]),
        Err(IoError::SplitMode { mode: 2, rank: 2 })
    ));
    assert!(matches!(
        SplitSpec::parse_blocks("0:2,0:3").unwrap().grid(&[5]),
        Err(IoError::SplitTwice { mode: 0 })
    ));
}

#[test]
fn keys_and_indices_are_inverse() {
    let g = SplitSpec::parse_blocks("0:3,1:4,2:2")
        .unwrap()
        .grid(&[10, 10, 10])
        .unwrap();
    for key in 0..24 {
        assert_eq!(g.key(&g.index(key)), key);
    }
    assert_eq!(g.index(23), vec![2, 3, 1]);
}

#[test]
fn a_grid_for_other_dimensions_fails_on_every_rank() {
    let t = T::from_entries(
        vec![4, 4],
        Format::parse("csr", 2).unwrap(),
        [(vec![1, 2], 3.0)],
    )
    .unwrap();
    let grid = SplitSpec::parse_blocks("0:2")
        .unwrap()
        .grid(&[5, 4])
        .unwrap();
    let out = run_ranks(3, |c| load_blocks(c, &t.view(), &grid, &NoProgress));
    for r in out {
        assert!(
            matches!(r, Err(IoError::Local(ref m)) if m.contains("[5, 4]")),
            "{r:?}"
        );
    }
}

#[test]
fn load_balancing_gives_every_rank_a_share() {
    // 4 ranks over a 400x400 CSR matrix with 8 entries per row: each piece has about a
    // quarter of the entries, so every rank assembles pieces of several blocks.
    let entries =
        (0..400).flat_map(|i| (0..8).map(move |j| (vec![i, (i * 7 + j * 50) % 400], 1.0)));
    let t = T::from_entries(vec![400, 400], Format::parse("csr", 2).unwrap(), entries).unwrap();
    let grid = SplitSpec::parse_blocks("1:4")
        .unwrap()
        .grid(t.dims())
        .unwrap();
    let out = run_ranks(4, |c| {
        let view = t.view();
        let bounds = load::piece_bounds(c, &walk::ViewTree(&view), &load::Meta::of_view(&view))?;
        Ok::<_, IoError>(bounds)
    });
    let bounds: Vec<_> = out.into_iter().map(|r| r.unwrap()).collect();
    for (r, (start, end)) in bounds.iter().enumerate() {
        let share = end - start;
        assert!(
            (700..=900).contains(&share),
            "rank {r} got {share} of 3200 entries"
        );
    }
    assert_eq!(bounds.last().unwrap().1, 3200);
    let _ = grid;
}

fn round_trip(t: &T, grid: &BlockGrid, ranks: usize) -> T {
    let out = run_ranks(ranks, |c| {
        let blocks = load_blocks(c, &t.view(), grid, &NoProgress)?;
        let views: Vec<_> = blocks.iter().map(|b| b.tensor.view()).collect();
        store_to_root(c, &views, &NoProgress)
    });
    let mut out = out.into_iter().map(|r| r.expect("round trip succeeds"));
    let root = out.next().unwrap().expect("rank 0 holds the tensor");
    assert!(out.all(|r| r.is_none()));
    root
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// Split then merge gives back the original tensor exactly (same arrays, not only the
    /// same entries).
    #[test]
    fn split_then_merge_is_the_identity((t, spec, ranks) in case()) {
        let grid = spec.grid(t.dims()).unwrap();
        prop_assert_eq!(round_trip(&t, &grid, ranks), t);
    }

    /// Merging blocks held in any distribution over any number of ranks gives the same
    /// tensor (the merge does not depend on where blocks live).
    #[test]
    fn merge_does_not_depend_on_block_placement((t, spec, ranks) in case(), shift in 0usize..5) {
        let grid = spec.grid(t.dims()).unwrap();
        let blocks: Vec<Block<f64, u32>> = load_on_threads(&t, &grid, 1).into_iter().flatten().collect();
        let out = run_ranks(ranks, |c| {
            let mine: Vec<_> = blocks.iter().enumerate().filter(|(i, _)| (i + shift) % c.size() == c.rank()).map(|(_, b)| b.tensor.view()).collect();
            store_to_root(c, &mine, &NoProgress)
        });
        let merged = out.into_iter().next().unwrap().unwrap().unwrap();
        prop_assert_eq!(merged, t);
    }
}

#[test]
fn a_large_sparse_tensor_round_trips_on_four_ranks() {
    let entries =
        (0..3000usize).map(|e| (vec![(e * 37) % 500, (e * 91) % 300, e % 7], e as f64 + 0.5));
    let t = T::from_entries(vec![500, 300, 7], Format::parse("sds", 3).unwrap(), entries).unwrap();
    let grid = SplitSpec::parse_points("0:100/100/450,1:17")
        .unwrap()
        .grid(t.dims())
        .unwrap();
    assert_eq!(round_trip(&t, &grid, 4), t);
}

#[test]
fn overlapping_blocks_fail_on_every_rank() {
    let t = T::from_entries(
        vec![6, 6],
        Format::parse("dcsr", 2).unwrap(),
        (0..6).map(|i| (vec![i, 5 - i], 1.0)),
    )
    .unwrap();
    let out = run_ranks(3, |c| {
        // Ranks 0 and 1 both hold the whole tensor.
        let mine: Vec<_> = if c.rank() < 2 { vec![t.view()] } else { vec![] };
        store_to_root(c, &mine, &NoProgress).map(|_| ())
    });
    for r in out {
        let msg = r.expect_err("overlap is an error").to_string();
        assert!(msg.contains("overlap"), "{msg}");
    }
}

#[test]
fn blocks_of_different_tensors_fail_on_every_rank() {
    let a = T::from_entries(
        vec![4, 4],
        Format::parse("csr", 2).unwrap(),
        [(vec![0, 0], 1.0)],
    )
    .unwrap();
    let b = T::from_entries(
        vec![4, 5],
        Format::parse("csr", 2).unwrap(),
        [(vec![3, 3], 1.0)],
    )
    .unwrap();
    let out = run_ranks(2, |c| {
        let mine = if c.rank() == 0 {
            vec![a.view()]
        } else {
            vec![b.view()]
        };
        store_to_root(c, &mine, &NoProgress).map(|_| ())
    });
    for r in out {
        assert!(
            matches!(r, Err(IoError::Mismatch(ref m)) if m.contains("[4, 5]")),
            "{r:?}"
        );
    }
}

mod files {
    use super::*;
    use tessera_formats::tcs::{write_tensor, TcsFile};

    fn split_merge(
        t: &T,
        spec: &SplitSpec,
        split_ranks: usize,
        merge_ranks: usize,
    ) -> (T, Summary) {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.tcs");
        write_tensor(&input, t, None).unwrap();
        let blocks = dir.path().join("blocks");
        let out = run_ranks(split_ranks, |c| {
            split_file(c, &input, spec, &blocks, &NoProgress)
        });
        let split = out[0].clone().expect("split succeeds");
        assert!(
            out.iter().all(|r| r.as_ref() == Ok(&split)),
            "every rank reports the same"
        );
        let output = dir.path().join("out.tcs");
        let out = run_ranks(merge_ranks, |c| merge_dir(c, &blocks, &output, &NoProgress));
        let merged = out[0].clone().expect("merge succeeds");
        assert_eq!(merged.blocks, split.blocks);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
        (TcsFile::open(&output).unwrap().to_tensor().unwrap(), split)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// split → block files → merge gives back the input file's tensor, whatever the rank
        /// counts of the two steps.
        #[test]
        fn files_split_then_merge_is_the_identity((t, spec, ranks) in case(), merge_ranks in 1usize..5) {
            // Files with singleton levels are refused (see `coo_files_are_refused_by_name`).
            let t = t.view().relevel(&t.format().unique()).unwrap();
            let grid = spec.grid(t.dims()).unwrap();
            let (back, split) = split_merge(&t, &spec, ranks, merge_ranks);
            prop_assert_eq!(split.blocks, grid.block_count().unwrap());
            prop_assert_eq!(back, t);
        }
    }

    #[test]
    fn coo_files_are_refused_by_name() {
        let t =
            T::from_entries(vec![3, 4], "sq", vec![(vec![0, 1], 1.0), (vec![2, 3], 2.0)]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.tcs");
        write_tensor(&input, &t, None).unwrap();
        let spec = SplitSpec::parse_blocks("0:2").unwrap();
        let out = run_ranks(2, |c| {
            split_file(c, &input, &spec, &dir.path().join("blocks"), &NoProgress)
        });
        for r in out {
            let e = r.unwrap_err().to_string();
            assert!(e.contains("`sq`") && e.contains("-f ss"), "{e}");
        }
    }

    #[test]
    fn block_files_carry_their_split_metadata() {
        let t = T::from_entries(
            vec![6, 8],
            Format::parse("csr", 2).unwrap(),
            (0..6).map(|i| (vec![i, i + 1], i as f64)),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("m.tcs");
        write_tensor(&input, &t, None).unwrap();
        let spec = SplitSpec::parse_points("0:4,1:2/5").unwrap();
        run_ranks(2, |c| {
            split_file(c, &input, &spec, &dir.path().join("b"), &NoProgress)
        })
        .into_iter()
        .for_each(|r| {
            r.unwrap();
        });
        let b = TcsFile::open(&dir.path().join("b/block-1-2.tcs")).unwrap();
        let h = b.header();
        assert!(h.is_block);
        assert_eq!(
            (
                h.modes[0].split_lo,
                h.modes[0].split_hi,
                h.modes[0].split_index,
                h.modes[0].split_count
            ),
            (4, 6, 1, 2)
        );
        assert_eq!(
            (
                h.modes[1].split_lo,
                h.modes[1].split_hi,
                h.modes[1].split_index,
                h.modes[1].split_count
            ),
            (5, 8, 2, 3)
        );
        // Rows 4 and 5 hold (4,5) and (5,6): both in columns [5, 8). Dense rows start at 4.
        assert_eq!(h.levels[0].offset, 4);
        let got: Vec<_> = b.to_tensor::<f64, u32>().unwrap().entries().collect();
        assert_eq!(got, vec![(vec![4, 5], 4.0), (vec![5, 6], 5.0)]);
    }

    #[test]
    fn a_missing_input_fails_on_every_rank() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.tcs");
        let spec = SplitSpec::parse_blocks("0:2").unwrap();
        for r in run_ranks(3, |c| {
            split_file(c, &missing, &spec, &dir.path().join("b"), &NoProgress)
        }) {
            let msg = r.expect_err("missing file").to_string();
            assert!(msg.contains("nope.tcs"), "{msg}");
        }
    }

    #[test]
    fn a_corrupt_block_fails_every_rank_and_leaves_no_output() {
        let t = T::from_entries(
            vec![9, 9],
            Format::parse("dcsr", 2).unwrap(),
            (0..9).map(|i| (vec![i, (i * 4) % 9], 1.0 + i as f64)),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("m.tcs");
        write_tensor(&input, &t, None).unwrap();
        let blocks = dir.path().join("b");
        let spec = SplitSpec::parse_blocks("0:3").unwrap();
        run_ranks(2, |c| split_file(c, &input, &spec, &blocks, &NoProgress))
            .into_iter()
            .for_each(|r| {
                r.unwrap();
            });
        // Flip one byte of the last block's data: its checksum no longer matches.
        let victim = blocks.join("block-2-0.tcs");
        let mut bytes = std::fs::read(&victim).unwrap();
        let at = bytes.len() - 3;
        bytes[at] ^= 0x40;
        std::fs::write(&victim, bytes).unwrap();
        let output = dir.path().join("out.tcs");
        let out = run_ranks(3, |c| merge_dir(c, &blocks, &output, &NoProgress));
        for r in out {
            let msg = r.expect_err("corrupt block").to_string();
            assert!(msg.contains("block-2-0.tcs"), "{msg}");
        }
        assert!(!output.exists());
        assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with('.')));
    }

    #[test]
    fn splitting_into_a_directory_with_blocks_is_refused() {
        let t = T::from_entries(vec![4], Format::parse("s", 1).unwrap(), [(vec![1], 2.0)]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("v.tcs");
        write_tensor(&input, &t, None).unwrap();
        let spec = SplitSpec::parse_blocks("0:2").unwrap();
        let blocks = dir.path().join("b");
        assert!(
            run_ranks(2, |c| split_file(c, &input, &spec, &blocks, &NoProgress))
                .iter()
                .all(|r| r.is_ok())
        );
        for r in run_ranks(2, |c| split_file(c, &input, &spec, &blocks, &NoProgress)) {
            assert!(r
                .expect_err("refused")
                .to_string()
                .contains("already holds"));
        }
    }

    #[test]
    fn f32_values_and_u64_coordinates_round_trip() {
        let t = Tensor::<f32, u64>::from_entries(
            vec![5, 7, 3],
            Format::parse("sds:2,0,1", 3).unwrap(),
            (0..20usize).map(|e| (vec![e % 5, (e * 3) % 7, e % 3], e as f32 * 0.25)),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("t.tcs");
        write_tensor(&input, &t, None).unwrap();
        let blocks = dir.path().join("b");
        let spec = SplitSpec::parse_blocks("0:2,1:3,2:2").unwrap();
        assert!(
            run_ranks(3, |c| split_file(c, &input, &spec, &blocks, &NoProgress))
                .iter()
                .all(|r| r.is_ok())
        );
        let output = dir.path().join("o.tcs");
        assert!(
            run_ranks(2, |c| merge_dir(c, &blocks, &output, &NoProgress))
                .iter()
                .all(|r| r.is_ok())
        );
        assert_eq!(
            TcsFile::open(&output)
                .unwrap()
                .to_tensor::<f32, u64>()
                .unwrap(),
            t
        );
    }
}

mod partial_reads {
    use super::*;
    use tessera_formats::tcs::{write_tensor, ArrayKind, TcsHeader};

    /// A CSR file whose array `kind` of level 1 (or vals) gets `patch` written at element
    /// `at`, the array's checksum (and the header's) recomputed: a crafted file, which gets
    /// past the checksums to the structural checks of the pieces read.
    fn corrupt_file(
        dir: &std::path::Path,
        kind: ArrayKind,
        at: u64,
        patch: u32,
    ) -> std::path::PathBuf {
        let entries = (0..200usize).map(|i| (vec![i % 40, (i * 7) % 30], 1.0 + i as f64));
        let t = T::from_entries(vec![40, 30], Format::parse("csr", 2).unwrap(), entries).unwrap();
        let path = dir.join("c.tcs");
        write_tensor(&path, &t, None).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let h = TcsHeader::read_from(&f, &path).unwrap();
        let i = h.arrays.iter().position(|a| a.kind == kind).unwrap();
        let a = h.arrays[i];
        let mut bytes = std::fs::read(&path).unwrap();
        let off = (a.offset + at * 4) as usize;
        bytes[off..off + 4].copy_from_slice(&patch.to_le_bytes());
        let mut h = h;
        h.arrays[i].crc32 = crc32fast::hash(&bytes[a.offset as usize..(a.offset + a.len) as usize]);
        let head = h.to_bytes();
        bytes[..head.len()].copy_from_slice(&head);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn split_fails(path: &std::path::Path, dir: &std::path::Path, ranks: usize) -> Vec<String> {
        let spec = SplitSpec::parse_blocks("0:3,1:2").unwrap();
        let msgs: Vec<String> = run_ranks(ranks, |c| {
            split_file(c, path, &spec, &dir.join("b"), &NoProgress)
        })
        .into_iter()
        .map(|r| r.expect_err("corrupt input").to_string())
        .collect();
        assert!(msgs.iter().all(|m| !m.contains("panicked")), "{msgs:?}");
        msgs
    }

    #[test]
    fn a_decreasing_pos_fails_every_rank_without_panicking() {
        let dir = tempfile::tempdir().unwrap();
        let path = corrupt_file(dir.path(), ArrayKind::Pos, 20, 3);
        let msgs = split_fails(&path, dir.path(), 3);
        assert!(msgs.iter().any(|m| m.contains("c.tcs")), "{msgs:?}");
    }

    #[test]
    fn a_coordinate_outside_the_dimension_fails_every_rank() {
        let dir = tempfile::tempdir().unwrap();
        let path = corrupt_file(dir.path(), ArrayKind::Crd, 100, 1000);
        let msgs = split_fails(&path, dir.path(), 2);
        assert!(
            msgs.iter().any(|m| m.contains("outside the dimension")),
            "{msgs:?}"
        );
    }

    #[test]
    fn a_truncated_file_fails_every_rank() {
        let dir = tempfile::tempdir().unwrap();
        let path = corrupt_file(dir.path(), ArrayKind::Crd, 0, 0);
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 100)
            .unwrap();
        for msg in split_fails(&path, dir.path(), 2) {
            assert!(msg.contains("c.tcs"), "{msg}");
        }
    }
}

/// The per-block states of a walk hold the same whichever way they are kept: slots for a
/// grid of few blocks (4,096 here), a map past `SLOTS` (10,000 blocks).
#[test]
fn per_block_states_are_the_same_in_slots_and_in_a_map() {
    use load::ByBlock;
    use std::collections::BTreeMap;
    let keys = [7usize, 3, 7, 7, 0, 4_000, 3, 42];
    let run = |blocks: usize| {
        let mut start = BTreeMap::new();
        start.insert(42usize, vec![100usize]);
        let mut by = ByBlock::new(start, blocks);
        for (i, &k) in keys.iter().enumerate() {
            by.entry(k, Vec::new).push(i);
        }
        (matches!(by, ByBlock::Slots(_)), by.into_map())
    };
    let (slots, in_slots) = run(10_000.min(load::SLOTS));
    let (map, in_map) = run(10_000);
    assert!(slots && !map, "one of each");
    assert_eq!(in_slots, in_map);
    assert_eq!(in_map[&7], vec![0, 2, 3]);
    assert_eq!(
        in_map[&42],
        vec![100, 7],
        "a state given at the start is kept"
    );
    assert_eq!(in_map.len(), 5);
}
