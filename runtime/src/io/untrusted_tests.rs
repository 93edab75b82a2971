//! Untrusted block files and inputs of split/merge (found by stop 59's review of the file
//! formats): missing, mixed or out-of-range blocks, corrupt or crafted arrays.

use super::*;
use crate::transport::run_ranks;
use std::path::Path;
use tessera_formats::tcs::{write_tensor, TcsFile, TcsHeader};
use tessera_formats::{Format, Tensor};

type T = Tensor<f64, u32>;

/// A 12 x 10 CSR matrix with an entry in every row.
fn matrix() -> T {
    matrix_in("csr")
}

fn matrix_in(format: &str) -> T {
    let entries = (0..60usize).map(|i| (vec![i % 12, (i * 7) % 10], 1.0 + i as f64));
    T::from_entries(vec![12, 10], Format::parse(format, 2).unwrap(), entries).unwrap()
}

fn split(ranks: usize, input: &Path, spec: &str, out: &Path) -> Result<Summary, IoError> {
    let spec = SplitSpec::parse_blocks(spec).unwrap();
    run_ranks(ranks, |c| split_file(c, input, &spec, out, &NoProgress)).remove(0)
}

fn merge(ranks: usize, dir: &Path, out: &Path) -> Result<Summary, IoError> {
    run_ranks(ranks, |c| merge_dir(c, dir, out, &NoProgress)).remove(0)
}

/// Rewrites array `array` of the contiguous (version 1/2) file `path` with `f`, then fixes
/// its checksum and the header's: a crafted file whose header and checksums are consistent.
fn patch(path: &Path, array: usize, f: impl FnOnce(&mut [u32])) {
    let mut bytes = std::fs::read(path).unwrap();
    let mut h = TcsHeader::parse(&bytes, bytes.len() as u64).unwrap();
    let a = h.arrays[array];
    let range = a.offset as usize..(a.offset + a.len) as usize;
    let mut elems: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes[range.clone()]);
    f(&mut elems);
    bytes[range].copy_from_slice(bytemuck::cast_slice(&elems));
    h.arrays[array].crc32 = crc32fast::hash(bytemuck::cast_slice(&elems));
    let head = h.to_bytes();
    bytes[..head.len()].copy_from_slice(&head);
    std::fs::write(path, bytes).unwrap();
}

/// A merge of a directory that lacks one of the blocks of a split succeeds and writes a
/// tensor without that block's entries: the split metadata of the block headers (split
/// index and count per mode) is never checked.
#[test]
fn a_merge_with_a_block_missing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tcs");
    write_tensor(&input, &matrix(), None).unwrap();
    let blocks = dir.path().join("b");
    split(2, &input, "0:3", &blocks).unwrap();
    std::fs::remove_file(blocks.join("block-1-0.tcs")).unwrap();
    let out = dir.path().join("out.tcs");
    let merged = merge(2, &blocks, &out);
    let kept = merged
        .as_ref()
        .ok()
        .map(|_| TcsFile::open(&out).unwrap().header().nnz);
    assert!(
        merged.is_err(),
        "a merge without block 1 of 3 succeeded: {kept:?} of 60 values"
    );
}

/// Blocks of two different splits (here: 2 and 3 pieces along mode 0) mixed in one
/// directory: when their entries do not collide the merge succeeds, although the blocks'
/// ranges neither tile the tensor nor come from one split.
#[test]
fn blocks_of_two_splits_mixed_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tcs");
    write_tensor(&input, &matrix(), None).unwrap();
    let (two, three) = (dir.path().join("two"), dir.path().join("three"));
    split(2, &input, "0:2", &two).unwrap(); // rows [0,6) [6,12)
    split(2, &input, "0:3", &three).unwrap(); // rows [0,4) [4,8) [8,12)
    let mixed = dir.path().join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    std::fs::copy(two.join("block-0-0.tcs"), mixed.join("block-0-0.tcs")).unwrap(); // [0,6)
    std::fs::copy(three.join("block-2-0.tcs"), mixed.join("block-2-0.tcs")).unwrap(); // [8,12)
    let out = dir.path().join("out.tcs");
    let merged = merge(2, &mixed, &out);
    assert!(
        merged.is_err(),
        "blocks [0,6) of 2 and [8,12) of 3 merged: {merged:?}"
    );
}

/// `split` reads its input in ranges and never checks the arrays' checksums: a bit flipped
/// in `vals` goes into the blocks, which get fresh, valid checksums (the corruption is
/// laundered; merging them back gives a valid file with the wrong value).
#[test]
fn a_split_of_a_corrupt_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tcs");
    write_tensor(&input, &matrix(), None).unwrap();
    let mut bytes = std::fs::read(&input).unwrap();
    let h = TcsHeader::parse(&bytes, bytes.len() as u64).unwrap();
    let vals = h.arrays.last().unwrap();
    bytes[vals.offset as usize + 5] ^= 0x10; // inside the first value
    std::fs::write(&input, &bytes).unwrap();
    assert!(TcsFile::open(&input).is_err(), "the reader sees the flip");
    let blocks = dir.path().join("b");
    let split = split(2, &input, "0:2", &blocks);
    assert!(
        split.is_err(),
        "a file whose vals checksum does not match was split: {split:?}"
    );
}

/// What a split and a merge make of crafted files whose header and checksums are consistent
/// but whose arrays break the invariants `TcsFile::open` checks: each must be an error, not
/// a panic and not a success.
#[test]
fn split_and_merge_refuse_crafted_arrays() {
    // Arrays of a CSR file: 0 pos of level 1, 1 crd of level 1, 2 vals.
    type Patch = fn(&mut [u32]);
    let cases: [(&str, usize, Patch); 5] = [
        ("pos not monotone", 0, |p| p.swap(3, 4)),
        ("crd unsorted in a row", 1, |c| c.swap(0, 1)),
        ("crd repeated in a row", 1, |c| c[1] = c[0]),
        ("pos not starting at 0", 0, |p| p[0] = 1),
        ("pos ending short of crd", 0, |p| {
            *p.last_mut().unwrap() -= 1
        }),
    ];
    let mut wrong = Vec::new();
    for (what, array, f) in cases {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.tcs");
        write_tensor(&input, &matrix(), None).unwrap();
        patch(&input, array, f);
        assert!(TcsFile::open(&input).is_err(), "{what}: open rejects it");
        let blocks = dir.path().join("b");
        let s = std::panic::catch_unwind(|| split(2, &input, "0:2", &blocks));
        match &s {
            Ok(Err(_)) => {}
            Ok(Ok(_)) => {
                let valid: Vec<bool> = std::fs::read_dir(&blocks)
                    .unwrap()
                    .map(|e| TcsFile::open(&e.unwrap().path()).is_ok())
                    .collect();
                wrong.push(format!("{what}: split succeeded (blocks valid: {valid:?})"))
            }
            Err(_) => wrong.push(format!("{what}: split panicked")),
        }
        // The crafted file as the one block of a merge.
        let one = dir.path().join("one");
        std::fs::create_dir(&one).unwrap();
        std::fs::copy(&input, one.join("block-0.tcs")).unwrap();
        let out = dir.path().join("out.tcs");
        let m = std::panic::catch_unwind(|| merge(2, &one, &out));
        match &m {
            Ok(Err(_)) => {}
            Ok(Ok(_)) => {
                let valid = TcsFile::open(&out).is_ok();
                wrong.push(format!("{what}: merge succeeded (output valid: {valid})"))
            }
            Err(_) => wrong.push(format!("{what}: merge panicked")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Block files whose split ranges tile the tensor but do not hold their entries (row 5 lies
/// in block 0, whose header now says rows [0, 5)): the merge must refuse them, as
/// `TcsFile::open` does (`OutsideSplit`), rather than trust the ranges. DCSR: a dense row
/// level outside the range is already refused by the header checks.
#[test]
fn a_block_with_entries_outside_its_range_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tcs");
    write_tensor(&input, &matrix_in("dcsr"), None).unwrap();
    let blocks = dir.path().join("b");
    split(2, &input, "0:2", &blocks).unwrap(); // rows [0,6) [6,12)
    for (name, lo, hi) in [("block-0-0.tcs", 0, 5), ("block-1-0.tcs", 5, 12)] {
        let path = blocks.join(name);
        let mut bytes = std::fs::read(&path).unwrap();
        let mut h = TcsHeader::parse(&bytes, bytes.len() as u64).unwrap();
        (h.modes[0].split_lo, h.modes[0].split_hi) = (lo, hi);
        let head = h.to_bytes();
        bytes[..head.len()].copy_from_slice(&head);
        std::fs::write(&path, bytes).unwrap();
    }
    assert!(TcsFile::open(&blocks.join("block-0-0.tcs")).is_err());
    let out = dir.path().join("out.tcs");
    let merged = merge(2, &blocks, &out);
    assert!(
        merged.is_err(),
        "blocks with entries outside their ranges merged"
    );
    assert!(!out.exists());
}
