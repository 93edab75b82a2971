//! Each rank of a compiled `--mpi` program reads only its share of a `.tcs` input (issue 12
//! item 7). Every rank reads each `pos` whole (small beside `crd` and `vals`), takes the rows
//! its points will compute on (the plan's row tiles of the rank's points under the plan's
//! sharding key), follows `pos` to the ranges of `crd` and `vals` those rows hold, and reads
//! only those ranges ([`read_array_range`]). The stores are made with
//! [`Runtime::from_share`], so the valid-copy map knows which rank holds which range and
//! tasks move exactly what another rank's points need.
//!
//! Nothing read is trusted: `pos` is checked whole (starts at 0, never falls, ends at the
//! next level's length), each rank checks its `crd` (in range, increasing within a parent),
//! and the ranks exchange the CRC-32 of every range they read and combine them in order into
//! each array's checksum, which must equal the header's — the same checks a whole read makes.

use super::{PlanIndex, PlanRunError, PlanValue, Stored};
use crate::plan::{Partition, Plan, Role};
use std::fs::File;
use std::ops::Range;
use std::path::Path;
use tessera_formats::tcs::{read_array_range, ArrayInfo, ArrayKind, TcsHeader};
use tessera_formats::{Format, Index, LevelType, Value};
use tessera_runtime::transport::Communicator;
use tessera_runtime::Runtime;

/// Per rank, the ranges of an array it holds.
type Shares = Vec<Vec<Range<usize>>>;

/// One array, read in part: every rank's ranges, and this rank's elements of its own.
struct Part<T> {
    len: usize,
    shares: Shares,
    mine: Vec<T>,
}

/// This rank's share of a `.tcs` input: `pos` whole, `crd` and `vals` only in its ranges.
pub struct TcsShare<V, I> {
    dims: Vec<usize>,
    format: Format,
    /// Per compressed level (levels 1..): its `pos` whole, and its `crd` in part.
    levels: Vec<(Vec<I>, Part<I>)>,
    vals: Part<V>,
    bytes_read: u64,
    bytes_total: u64,
    header: TcsHeader,
}

impl<V, I> TcsShare<V, I> {
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    pub fn format(&self) -> &Format {
        &self.format
    }

    /// Bytes of the file's arrays this rank read, and of all of them.
    pub fn bytes_read(&self) -> (u64, u64) {
        (self.bytes_read, self.bytes_total)
    }
}

/// The rows of input `tensor` (its first level, `rows` long) each of `ranks` ranks will
/// compute on: the plan's tiles of that level for the points each rank runs (a tile shared by
/// points of several ranks goes to the first point's). `None` when no launch dimension tiles
/// the input's first level (it is read whole by every point: every rank reads it whole).
pub fn row_shares(plan: &Plan, tensor: &str, rows: usize, ranks: usize) -> Option<Shares> {
    let grid = &plan.grid;
    // The input's first store is tiled, or aligned with a tiled output (Fig. 7.2).
    let tiled_by = |p: &Partition| match p {
        Partition::Tiled { dims } => dims.first().copied().flatten(),
        _ => None,
    };
    let g = plan
        .args
        .iter()
        .filter(|a| a.store.tensor == tensor)
        .find_map(|a| match &a.partition {
            Partition::Aligned(to) => plan
                .args
                .iter()
                .find(|b| b.store == *to)
                .and_then(|b| tiled_by(&b.partition)),
            p => tiled_by(p),
        })?;
    if grid.vars[g].role == Role::Sequential {
        return None;
    }
    let key = plan.shard_dims();
    let owners = tessera_runtime::shard_owners(&grid.domain(), key.as_deref(), ranks)?;
    let mut taken = vec![false; grid.vars[g].count()];
    let mut shares: Shares = vec![Vec::new(); ranks];
    for (p, &rank) in owners.iter().enumerate() {
        let b = grid.index(0, p)[g];
        if !std::mem::replace(&mut taken[b], true) {
            shares[rank].push(grid.vars[g].range(b, rows));
        }
    }
    // Rows no block covers (none, for a grid that covers its dimension) go to rank 0, so that
    // the shares always cover the input.
    let mut covered: Vec<Range<usize>> = merged(shares.concat());
    covered.push(rows..rows);
    let mut next = 0;
    for r in covered {
        if r.start > next {
            shares[0].push(next..r.start);
        }
        next = next.max(r.end);
    }
    Some(shares.into_iter().map(merged).collect())
}

/// Ranges sorted and joined where they meet; empty ones dropped.
fn merged(mut v: Vec<Range<usize>>) -> Vec<Range<usize>> {
    v.retain(|r| !r.is_empty());
    v.sort_by_key(|r| r.start);
    let mut out: Vec<Range<usize>> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => out.push(r),
        }
    }
    out
}

/// Reads this rank's share of the `.tcs` file `path` for input `tensor` of `plan`, or `None`
/// when the file is not one a share can be read of — then the caller reads it whole: a file
/// in another format or of other types than the program's (it is converted), a block of a
/// split tensor, a format that is not one dense level over compressed ones, or an input no
/// launch dimension tiles. A collective: every rank calls it for the same inputs in order,
/// and every rank gets an error when any rank's read or check fails.
pub fn read_tcs_share<V: PlanValue, I: PlanIndex>(
    path: &Path,
    format: &Format,
    plan: &Plan,
    tensor: &str,
    comm: &dyn Communicator,
) -> Result<Option<TcsShare<V, I>>, PlanRunError> {
    let local = read_local::<V, I>(path, format, plan, tensor, comm);
    // One word for "no share" or "failed", else the checksums of this rank's ranges.
    let words = match &local {
        Ok(Some((_, checks))) => checks.concat(),
        Ok(None) => vec![NO_SHARE],
        Err(_) => vec![FAILED],
    };
    let all = comm
        .all_gather_u64(&words)
        .map_err(|e| PlanRunError::Input(e.to_string()))?;
    let local = local?;
    if let Some(r) = all.iter().position(|w| w[..] == [FAILED]) {
        return Err(err(path, format!("rank {r} could not read its share")));
    }
    let Some((share, _)) = local else {
        return Ok(None);
    };
    check_crcs(path, &share.header, &all)?;
    Ok(Some(share))
}

/// The words a rank gathers instead of checksums when it reads no share, or failed (a
/// checksum record is four words).
const NO_SHARE: u64 = u64::MAX - 1;
const FAILED: u64 = u64::MAX;

/// A rank's share and the checksum records of its ranges (`[array, byte, bytes, crc]` each).
type Local<V, I> = (TcsShare<V, I>, Vec<Vec<u64>>);

/// This rank's part of [`read_tcs_share`]: its share, and the checksums of its ranges.
fn read_local<V: PlanValue, I: PlanIndex>(
    path: &Path,
    format: &Format,
    plan: &Plan,
    tensor: &str,
    comm: &dyn Communicator,
) -> Result<Option<Local<V, I>>, PlanRunError> {
    let file = File::open(path).map_err(|e| err(path, e.to_string()))?;
    let header = TcsHeader::read_from(&file, path)?;
    if !shareable::<V, I>(&header, format) {
        return Ok(None);
    }
    let rows = header.levels[0].size as usize;
    let Some(rows_of) = row_shares(plan, tensor, rows, comm.size()) else {
        return Ok(None);
    };
    if comm.rank() == 0 {
        check_gaps(&file, path, &header)?;
    }
    let reader = Reader {
        file: &file,
        path,
        header: &header,
        me: comm.rank(),
    };
    let mut levels = Vec::new();
    let mut bytes_read = 0;
    // Each rank's parent positions at the level being read: rows, then `crd` ranges.
    let mut parents = rows_of;
    let mut checks = Vec::new();
    for level in 1..header.levels.len() {
        let pos_at = reader.array(ArrayKind::Pos, level)?;
        let crd_at = reader.array(ArrayKind::Crd, level)?;
        let n = header.arrays[pos_at].len as usize / size_of::<I>();
        let pos: Vec<I> = reader.read(pos_at, 0..n)?;
        reader.check_crc(pos_at, &pos)?;
        let len = header.arrays[crd_at].len as usize / size_of::<I>();
        check_pos(&pos, len).map_err(|w| err(path, format!("pos of level {level}: {w}")))?;
        let children: Shares = parents
            .iter()
            .map(|list| {
                let v = list.iter().map(|r| at(&pos, r.start)..at(&pos, r.end));
                merged(v.collect())
            })
            .collect();
        let mine: Vec<I> = reader.read_ranges(crd_at, &children[reader.me])?;
        let dim = header.modes[header.levels[level].mode as usize].dim;
        check_crd(&pos, &parents[reader.me], &children[reader.me], &mine, dim)
            .map_err(|w| err(path, format!("crd of level {level}: {w}")))?;
        checks.push(crc_ranges(crd_at, &children[reader.me], &mine));
        bytes_read += ((n + mine.len()) * size_of::<I>()) as u64;
        let crd = Part {
            len,
            shares: children.clone(),
            mine,
        };
        levels.push((pos, crd));
        parents = children;
    }
    let vals_at = reader.array(ArrayKind::Vals, header.levels.len())?;
    let mine: Vec<V> = reader.read_ranges(vals_at, &parents[reader.me])?;
    checks.push(crc_ranges(vals_at, &parents[reader.me], &mine));
    bytes_read += (mine.len() * size_of::<V>()) as u64;
    let share = TcsShare {
        dims: header.dims(),
        format: format.clone(),
        levels,
        vals: Part {
            len: header.nnz as usize,
            shares: parents,
            mine,
        },
        bytes_read,
        bytes_total: header.arrays.iter().map(|a| a.len).sum(),
        header: header.clone(),
    };
    Ok(Some((share, checks)))
}

/// The file's alignment padding is zero bytes, as a whole read checks (one process refused a
/// file that ranks reading shares accepted). A few bytes per array: rank 0 reads them all,
/// and its failure fails every rank's read.
fn check_gaps(file: &File, path: &Path, header: &TcsHeader) -> Result<(), PlanRunError> {
    use std::os::unix::fs::FileExt;
    for g in header.gaps() {
        let mut gap = vec![0u8; (g.end - g.start) as usize];
        file.read_exact_at(&mut gap, g.start)
            .map_err(|e| err(path, e.to_string()))?;
        if let Some(i) = gap.iter().position(|&b| b != 0) {
            let at = g.start + i as u64;
            return Err(err(path, format!("nonzero padding byte at offset {at}")));
        }
    }
    Ok(())
}

/// A file a share can be read of: the program's types and format, not a block, one dense
/// level (from 0, whole) over compressed ones.
fn shareable<V: Value, I: Index>(header: &TcsHeader, format: &Format) -> bool {
    let levels = format.levels();
    header.value_type == V::TYPE
        && header.index_bits == I::BITS
        && !header.is_block
        && header.format() == *format
        && levels.len() >= 2
        && levels[0] == LevelType::Dense
        && levels[1..].iter().all(|l| *l == LevelType::Compressed)
        && header.levels[0].offset == 0
}

fn err(path: &Path, what: String) -> PlanRunError {
    PlanRunError::Input(format!("{}: {what}", path.display()))
}

fn at<I: Index>(pos: &[I], p: usize) -> usize {
    pos[p].to_usize()
}

/// `pos` starts at 0, never falls, and ends at `len` (the next array's length).
fn check_pos<I: Index>(pos: &[I], len: usize) -> Result<(), String> {
    if pos.first().map(|p| p.to_usize()) != Some(0) {
        return Err("does not start at 0".into());
    }
    if let Some(i) = pos.windows(2).position(|w| w[1] < w[0]) {
        return Err(format!("falls after entry {i}"));
    }
    match pos.last().map(|p| p.to_usize()) {
        Some(end) if end == len => Ok(()),
        end => Err(format!("ends at {end:?}, but crd holds {len}")),
    }
}

/// This rank's `crd` (`mine`, the ranges `children` of the positions of parents `parents`):
/// every coordinate below `dim`, strictly increasing under each parent.
fn check_crd<I: Index>(
    pos: &[I],
    parents: &[Range<usize>],
    children: &[Range<usize>],
    mine: &[I],
    dim: u64,
) -> Result<(), String> {
    // Position `q` of the level lies at `local(q)` in `mine` (children are sorted, disjoint).
    let mut base = Vec::with_capacity(children.len());
    let mut off = 0;
    for c in children {
        base.push((c.start, off));
        off += c.len();
    }
    let local = |q: usize| {
        let i = base.partition_point(|&(s, _)| s <= q) - 1;
        base[i].1 + (q - base[i].0)
    };
    if let Some(c) = mine.iter().find(|c| c.to_usize() as u64 >= dim) {
        return Err(format!("coordinate {c} is outside 0..{dim}"));
    }
    for p in parents.iter().flat_map(|r| r.clone()) {
        let (lo, hi) = (at(pos, p), at(pos, p + 1));
        if hi > lo {
            let seg = &mine[local(lo)..local(lo) + (hi - lo)];
            if let Some(i) = seg.windows(2).position(|w| w[1] <= w[0]) {
                return Err(format!(
                    "coordinates under parent {p} do not increase at position {}",
                    lo + i + 1
                ));
            }
        }
    }
    Ok(())
}

/// The file and header being read, and this rank.
struct Reader<'a> {
    file: &'a File,
    path: &'a Path,
    header: &'a TcsHeader,
    me: usize,
}

impl Reader<'_> {
    /// The index of the array of `kind` at `level` (`vals`: the rank).
    fn array(&self, kind: ArrayKind, level: usize) -> Result<usize, PlanRunError> {
        self.header
            .arrays
            .iter()
            .position(|a| a.kind == kind && a.level as usize == level)
            .ok_or_else(|| err(self.path, format!("no {kind:?} array for level {level}")))
    }

    fn read<T: bytemuck::Pod>(
        &self,
        array: usize,
        r: Range<usize>,
    ) -> Result<Vec<T>, PlanRunError> {
        let r = r.start as u64..r.end as u64;
        Ok(read_array_range(
            self.file,
            self.path,
            self.header,
            array,
            r,
        )?)
    }

    /// The elements of `ranges` of `array`, one after the other.
    fn read_ranges<T: bytemuck::Pod>(
        &self,
        array: usize,
        ranges: &[Range<usize>],
    ) -> Result<Vec<T>, PlanRunError> {
        let mut out = Vec::with_capacity(ranges.iter().map(|r| r.len()).sum());
        for r in ranges {
            out.extend(self.read::<T>(array, r.clone())?);
        }
        Ok(out)
    }

    /// A whole array's checksum against the header's.
    fn check_crc<T: bytemuck::Pod>(&self, array: usize, v: &[T]) -> Result<(), PlanRunError> {
        let got = crc32fast::hash(bytemuck::cast_slice(v));
        crc_matches(self.path, &self.header.arrays[array], got)
    }
}

fn crc_matches(path: &Path, a: &ArrayInfo, got: u32) -> Result<(), PlanRunError> {
    if got == a.crc32 {
        return Ok(());
    }
    Err(err(
        path,
        format!(
            "{} fails its checksum (recorded {:08x}, computed {got:08x}): the file is damaged",
            a.name(),
            a.crc32
        ),
    ))
}

/// Per range of `array` this rank read: `[array, first byte, bytes, crc]`.
fn crc_ranges<T: bytemuck::Pod>(array: usize, ranges: &[Range<usize>], mine: &[T]) -> Vec<u64> {
    let bytes: &[u8] = bytemuck::cast_slice(mine);
    let size = size_of::<T>();
    let mut out = Vec::new();
    let mut off = 0;
    for r in ranges {
        let b = &bytes[off..off + r.len() * size];
        off += b.len();
        let crc = crc32fast::hash(b);
        out.extend([
            array as u64,
            (r.start * size) as u64,
            b.len() as u64,
            crc.into(),
        ]);
    }
    out
}

/// Every rank's range checksums (`all`, gathered), combined in file order into each array's:
/// each must match the header's (the ranks' ranges together cover every array read in part).
fn check_crcs(path: &Path, header: &TcsHeader, all: &[Vec<u64>]) -> Result<(), PlanRunError> {
    let mut ranges: Vec<[u64; 4]> = all
        .iter()
        .flat_map(|v| v.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]))
        .collect();
    ranges.sort_unstable();
    let mut arrays: Vec<u64> = ranges.iter().map(|c| c[0]).collect();
    arrays.dedup();
    for array in arrays {
        let a = &header.arrays[array as usize];
        let mut h = crc32fast::Hasher::new();
        let mut next = 0;
        for &[_, start, len, crc] in ranges.iter().filter(|c| c[0] == array) {
            if start != next {
                return Err(err(
                    path,
                    format!("the ranks' ranges of {} leave a gap", a.name()),
                ));
            }
            h.combine(&crc32fast::Hasher::new_with_initial_len(crc as u32, len));
            next += len;
        }
        crc_matches(path, a, h.finalize())?;
    }
    Ok(())
}

impl<V: PlanValue, I: PlanIndex> Stored<V, I> {
    /// The stores of a share read by every rank ([`read_tcs_share`]): each `pos` from its
    /// offsets, `crd` and `vals` from every rank's ranges ([`Runtime::from_share`]).
    pub fn from_share(rt: &Runtime, s: TcsShare<V, I>) -> Result<Self, PlanRunError> {
        let mut stores = Vec::new();
        let mut at = vec![None];
        for (pos, crd) in s.levels {
            at.push(Some((stores.len(), stores.len() + 1)));
            stores.push(rt.from_offsets(pos.iter().map(|p| p.to_usize() as u64))?);
            stores.push(rt.from_share(crd.len, &crd.shares, crd.mine)?);
        }
        let vals_at = stores.len();
        stores.push(rt.from_share(s.vals.len, &s.vals.shares, s.vals.mine)?);
        Ok(Stored {
            stores,
            layout: super::InputLayout {
                levels: at,
                vals: vals_at,
                prefix: 1,
                prefix_inner: 1,
            },
            dims: s.dims,
            format: s.format,
            value: Default::default(),
            _types: std::marker::PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_where_they_meet_and_empty_ones_go() {
        let got = merged(vec![5..7, 0..2, 3..3, 2..4, 8..9]);
        assert_eq!(got, [0..4, 5..7, 8..9]);
    }

    #[test]
    fn row_shares_follow_the_key_and_cover_every_row() {
        let plan = |s: &str| crate::plan::from_text(s).unwrap().1;
        // Four row blocks of ⌈10 / 4⌉ = 3 rows, block sharding at 2 ranks: blocks 0, 1 | 2, 3.
        let p = plan("y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 4); map(io)");
        let pairs = |s: Shares| -> Vec<Vec<(usize, usize)>> {
            s.iter()
                .map(|l| l.iter().map(|r| (r.start, r.end)).collect())
                .collect()
        };
        let got = pairs(row_shares(&p, "A", 10, 2).unwrap());
        assert_eq!(got, [vec![(0, 6)], vec![(6, 10)]]);
        // Keyed by `jo`, every row block's first point is on rank 0 (jo = 0).
        let p = plan(
            "C(i,j) = A(i,k) * B(k,j); A: csr; split(i, io, ii, 2); split(j, jo, ji, 2); \
             order(io, jo); map(jo)",
        );
        let got = pairs(row_shares(&p, "A", 10, 2).unwrap());
        assert_eq!(got, [vec![(0, 10)], vec![]]);
        // An input cut along a compressed level too (tensor blocks) is read whole.
        let p = plan(
            "y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 2); split(j, jo, ji, 2); extend(jo)",
        );
        assert!(row_shares(&p, "A", 10, 2).is_none());
        // Split points: uneven blocks, still every row once.
        let p = plan("y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, [3, 6]); map(io)");
        let got = row_shares(&p, "A", 10, 2).unwrap();
        let mut all: Vec<Range<usize>> = got.concat();
        all.sort_by_key(|r| r.start);
        assert_eq!(merged(all), vec![Range { start: 0, end: 10 }], "{got:?}");
        // A broadcast input has no row shares.
        assert!(row_shares(&p, "x", 10, 2).is_none());
    }
}
