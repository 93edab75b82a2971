//! What split and merge check of the files they read before trusting them (`TcsFile::open`
//! checks a whole file; split and merge read pieces, and check here what pieces cannot
//! show): the blocks of a merge form one complete grid of one split, every array's checksum,
//! and the levels' invariants across the pieces. Each is an error naming the file, not a
//! tensor short of entries or one built from corrupt arrays.

use super::files::{agreed, file_err};
use super::sink::io_err;
use super::{IoError, Progress};
use crate::transport::Communicator;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use tessera_formats::tcs::TcsHeader;
use tessera_formats::Index;

/// The blocks' split metadata (a whole tensor's file is the one piece of a split into 1 per
/// mode): every block of the same dimensions and split counts, each piece of the grid present
/// exactly once, and the pieces' ranges along each mode the same for the same index and
/// tiling `0..dim` in index order. A block missing, one copied twice, or one of another split
/// is an error naming the files, not a merged tensor short of entries.
pub(super) fn check_split(files: &[PathBuf], headers: &[TcsHeader]) -> Result<(), IoError> {
    let (Some(p0), Some(h0)) = (files.first(), headers.first()) else {
        return Ok(());
    };
    let mismatch = |p: &Path, what: String| {
        IoError::Mismatch(format!(
            "{} and {}: {what}; merge the blocks of one split",
            p0.display(),
            p.display()
        ))
    };
    // Per mode and piece index: the piece's range and a file that has it.
    let mut ranges: Vec<BTreeMap<u64, (u64, u64, &Path)>> = vec![BTreeMap::new(); h0.rank()];
    let mut pieces: BTreeMap<Vec<u64>, &Path> = BTreeMap::new();
    for (p, h) in files.iter().zip(headers) {
        if h.dims() != h0.dims() {
            return Err(mismatch(
                p,
                format!("dimensions {:?} and {:?}", h0.dims(), h.dims()),
            ));
        }
        for (m, (mode, first)) in h.modes.iter().zip(&h0.modes).enumerate() {
            if mode.split_count != first.split_count {
                return Err(mismatch(
                    p,
                    format!(
                        "mode {m} split into {} and {} pieces",
                        first.split_count, mode.split_count
                    ),
                ));
            }
            let range = (mode.split_lo, mode.split_hi, p.as_path());
            let seen = ranges[m].entry(mode.split_index).or_insert(range);
            if (seen.0, seen.1) != (range.0, range.1) {
                return Err(IoError::Mismatch(format!(
                    "{} and {}: piece {} of mode {m} covers [{}, {}) in one, [{}, {}) in the other; merge the blocks of one split",
                    seen.2.display(),
                    p.display(),
                    mode.split_index,
                    seen.0,
                    seen.1,
                    range.0,
                    range.1
                )));
            }
        }
        let index: Vec<u64> = h.modes.iter().map(|m| m.split_index).collect();
        if let Some(other) = pieces.insert(index.clone(), p) {
            return Err(IoError::Mismatch(format!(
                "{} and {} are both block {index:?} of the split",
                other.display(),
                p.display()
            )));
        }
    }
    let expected = h0
        .modes
        .iter()
        .try_fold(1u64, |n, m| n.checked_mul(m.split_count));
    if expected != Some(files.len() as u64) {
        // The first piece of the grid (row-major) that no file holds.
        let counts: Vec<u64> = h0.modes.iter().map(|m| m.split_count).collect();
        let mut index = vec![0u64; counts.len()];
        let missing = loop {
            if !pieces.contains_key(&index) {
                break Some(index);
            }
            let mut k = counts.len();
            loop {
                if k == 0 {
                    break;
                }
                k -= 1;
                index[k] += 1;
                if index[k] < counts[k] {
                    break;
                }
                index[k] = 0;
            }
            if index.iter().all(|&i| i == 0) {
                break None;
            }
        };
        return Err(IoError::Mismatch(format!(
            "the split has {} blocks ({counts:?} pieces per mode) but {} holds {}{}",
            expected.map_or("too many".to_string(), |n| n.to_string()),
            p0.parent().unwrap_or(Path::new(".")).display(),
            files.len(),
            missing.map_or(String::new(), |i| format!(": block {i:?} is missing"))
        )));
    }
    // Every index of every mode is present (the grid is complete): the ranges must tile.
    for (m, (by_index, mode)) in ranges.iter().zip(&h0.modes).enumerate() {
        let mut at = 0;
        for (&i, &(lo, hi, p)) in by_index {
            if lo != at || hi < lo {
                return Err(IoError::Mismatch(format!(
                    "{}: piece {i} of mode {m} covers [{lo}, {hi}), but the pieces before it end at {at}",
                    p.display()
                )));
            }
            at = hi;
        }
        if at != mode.dim {
            return Err(IoError::Mismatch(format!(
                "the pieces of mode {m} end at {at}, not at its dimension {}",
                mode.dim
            )));
        }
    }
    Ok(())
}

/// Checks every array's checksum of the file `path` with the ranks sharing the work: rank
/// `r` of `n` hashes bytes `[len r / n, len (r+1) / n)` of each array (through its extents),
/// the ranks gather their checksums and combine them in order. Collective; a mismatch is an
/// error on every rank.
pub(super) fn verify_shared<C: Communicator + ?Sized>(
    comm: &C,
    file: &File,
    path: &Path,
    header: &TcsHeader,
    progress: &dyn Progress,
) -> Result<(), IoError> {
    let (me, n) = (comm.rank() as u64, comm.size() as u64);
    let share = |len: u64, r: u64| {
        let at = |r: u64| (u128::from(len) * u128::from(r) / u128::from(n)) as u64;
        at(r)..at(r + 1)
    };
    let total: u64 = header
        .arrays
        .iter()
        .map(|a| share(a.len, me).end - share(a.len, me).start)
        .sum();
    progress.start("split: verify", total);
    let mine = (|| {
        let mut buf = vec![0u8; CHECK_CHUNK as usize];
        let mut crcs = Vec::with_capacity(header.arrays.len());
        for (i, a) in header.arrays.iter().enumerate() {
            let want = share(a.len, me);
            let mut crc = crc32fast::Hasher::new();
            let mut start = 0u64;
            for (offset, len) in header.array_extents(i) {
                let (mut lo, hi) = (want.start.max(start), want.end.min(start + len));
                while lo < hi {
                    if progress.cancelled() {
                        return Err(IoError::Cancelled);
                    }
                    let k = (hi - lo).min(CHECK_CHUNK) as usize;
                    file.read_exact_at(&mut buf[..k], offset + (lo - start))
                        .map_err(|e| io_err(path, e))?;
                    crc.update(&buf[..k]);
                    progress.advance(k as u64);
                    lo += k as u64;
                }
                start += len;
            }
            crcs.push(u64::from(crc.finalize()));
        }
        Ok(crcs)
    })();
    let mine = agreed(comm, mine)?;
    let all = comm.all_gather_u64(&mine)?;
    for (i, a) in header.arrays.iter().enumerate() {
        let mut crc = crc32fast::Hasher::new();
        for (r, crcs) in all.iter().enumerate() {
            let part = share(a.len, r as u64);
            let got = crcs.get(i).copied().ok_or_else(|| {
                IoError::Internal(format!("rank {r} sent no checksum for array {i}"))
            })?;
            crc.combine(&crc32fast::Hasher::new_with_initial_len(
                got as u32,
                part.end - part.start,
            ));
        }
        if crc.finalize() != a.crc32 {
            return Err(corrupt(path, &a.name()));
        }
    }
    Ok(())
}

/// Elements read at once by [`check_levels`].
const CHECK_ELEMS: u64 = 1 << 16;

/// The level invariants `TcsFile::open` checks, on share `share` of `shares` of the file's
/// parent positions at each compressed level, streamed a chunk at a time: `pos` starts at 0,
/// never falls (each share reads one element past its end, the next share's first) and ends
/// at the length of `crd`; under every parent `crd` strictly increases and lies in the
/// mode's split range (`0..dim` for a whole tensor). The pieces split and merge read are
/// checked one by one, which cannot see a `pos` that falls between them or a parent that no
/// piece walks; together the shares see all. Singleton levels are refused by the callers.
pub(super) fn check_levels<I: Index>(
    file: &File,
    path: &Path,
    header: &TcsHeader,
    (share, shares): (u64, u64),
    progress: &dyn Progress,
) -> Result<(), IoError> {
    use tessera_formats::tcs::{read_array_range, ArrayKind};
    use tessera_formats::LevelType;
    let corrupt = |what: String| IoError::File(format!("{}: {what}", path.display()));
    let read = |array: usize, r: std::ops::Range<u64>| {
        read_array_range::<I>(file, path, header, array, r).map_err(file_err)
    };
    let find = |kind: ArrayKind, k: usize| {
        header
            .arrays
            .iter()
            .position(|a| a.kind == kind && a.level as usize == k)
            .ok_or_else(|| corrupt(format!("no {kind:?} array for level {k}")))
    };
    let mut parents: u64 = 1;
    for (k, l) in header.levels.iter().enumerate() {
        match l.level_type {
            LevelType::Dense => {
                parents = parents
                    .checked_mul(l.size)
                    .ok_or_else(|| corrupt("too many positions".into()))?;
                continue;
            }
            LevelType::Singleton => return Ok(()),
            LevelType::Compressed => {}
        }
        let (pos_at, crd_at) = (find(ArrayKind::Pos, k)?, find(ArrayKind::Crd, k)?);
        let len = l.size;
        let mode = &header.modes[l.mode as usize];
        let range = mode.split_lo..mode.split_hi;
        let part = |r: u64| (u128::from(parents) * u128::from(r) / u128::from(shares)) as u64;
        let (a, b) = (part(share), part(share + 1));
        // pos[a..=b], and crd from pos[a] on, a chunk at a time.
        let mut prev: Option<u64> = None;
        let mut crd: Vec<I> = Vec::new();
        let (mut crd_at_elem, mut crd_next) = (0u64, 0u64);
        let mut q = a;
        while q <= b {
            if progress.cancelled() {
                return Err(IoError::Cancelled);
            }
            let end = (q + CHECK_ELEMS).min(b + 1);
            let pos = read(pos_at, q..end)?;
            for (i, p) in pos.iter().enumerate() {
                let (at, p) = (q + i as u64, p.to_usize() as u64);
                if at == 0 && p != 0 {
                    return Err(corrupt(format!("pos of level {k} starts at {p}, not 0")));
                }
                if p > len || prev.is_some_and(|x| p < x) {
                    return Err(corrupt(format!(
                        "pos of level {k} falls or passes the end of crd ({len}) at {at}"
                    )));
                }
                if at == parents && p != len {
                    return Err(corrupt(format!(
                        "pos of level {k} ends at {p}, but crd holds {len}"
                    )));
                }
                if let Some(from) = prev {
                    // The segment of parent at - 1: crd[from..p].
                    let mut last: Option<u64> = None;
                    for c in from..p {
                        if c >= crd_next {
                            crd_at_elem = c;
                            crd_next = (c + CHECK_ELEMS).min(len);
                            crd = read(crd_at, crd_at_elem..crd_next)?;
                        }
                        let x = crd[(c - crd_at_elem) as usize].to_usize() as u64;
                        if !range.contains(&x) {
                            return Err(corrupt(format!(
                                "crd of level {k} holds {x} at {c}, outside the dimension (or the block's split range) {range:?}"
                            )));
                        }
                        if last.is_some_and(|y| x <= y) {
                            return Err(corrupt(format!(
                                "crd of level {k} does not increase under parent {} at {c}",
                                at - 1
                            )));
                        }
                        last = Some(x);
                    }
                }
                prev = Some(p);
            }
            q = end;
        }
        parents = len;
    }
    Ok(())
}

/// Bytes read at once when verifying a checksum.
const CHECK_CHUNK: u64 = 1 << 20;

/// Recomputes the checksum of every array of a block file, reading it a chunk at a time.
pub(super) fn verify_checksums(
    file: &File,
    path: &Path,
    header: &TcsHeader,
) -> Result<(), IoError> {
    let mut buf = vec![0u8; CHECK_CHUNK as usize];
    for (i, a) in header.arrays.iter().enumerate() {
        let mut crc = crc32fast::Hasher::new();
        // A segmented (version 3) file holds an array in several extents.
        for (offset, len) in header.array_extents(i) {
            let mut at = 0;
            while at < len {
                let n = (len - at).min(CHECK_CHUNK) as usize;
                file.read_exact_at(&mut buf[..n], offset + at)
                    .map_err(|e| io_err(path, e))?;
                crc.update(&buf[..n]);
                at += n as u64;
            }
        }
        if crc.finalize() != a.crc32 {
            return Err(corrupt(path, &a.name()));
        }
    }
    Ok(())
}

/// The error of an array whose checksum does not match its data.
fn corrupt(path: &Path, array: &str) -> IoError {
    IoError::File(format!(
        "{}: the checksum of {array} does not match its data (the file is corrupt)",
        path.display()
    ))
}
