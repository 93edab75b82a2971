//! Distributed split and merge of `.tcs` files: the file side of [`load_blocks`] and
//! [`merge_blocks`], with no data exchanged between ranks.
//!
//! - [`split_file`]: the ranks first check the input together (every array's checksum and
//!   the level invariants, each rank a share: `input_checks`); each rank then reads only its
//!   piece of the input, a chunk at a time, and walks it twice: pass one gathers a partial
//!   header per block, pooled over the ranks (the block layouts and every rank's starting
//!   counters); block owners create the block files at full length; pass two writes each
//!   entry's `pos`/`crd`/`vals` straight into its block file at its final offset (`sink`).
//!   Owners then write the tails and headers, with checksums combined from the ranks' runs,
//!   and rename the files into place.
//! - [`merge_dir`]: every rank reads every block's header (the blocks must be the complete
//!   grid of one split: `check_split`) and checks a share of the blocks in full, cuts every
//!   block at the same coordinate-space cuts and reads its sections straight from the block
//!   files; a tournament merge (twice: header, then runs) writes its piece of the output
//!   arrays at offsets from the pooled header into one temporary file; rank 0 finishes it and
//!   renames it into place.
//!
//! Only headers, counters and checksums travel between ranks, so a rank's memory is its
//! chunk or its sections plus bounded buffers, and the ranks' work is all in parallel.
//! Every step that can fail on one rank (a missing file, a corrupt block, a full disk) is
//! followed by [`Communicator::check`], so all ranks stop with an error together.

use super::assemble::{combine, PartialHeader, PieceStart, Shape, Totals};
use super::codec::Writer;
use super::held::Held;
use super::input_checks::{check_levels, check_split, verify_checksums, verify_shared};
use super::load::{piece_bounds, pool_headers, walk_blocks, Assigner, BlockShapes, ByBlock, Meta};
use super::partial::{open_probe, walk_chunks, FileProbe};
use super::section::Section;
use super::sink::{finish_file, header_of, io_err, sink_limit, FileSink, Written};
use super::split::BlockGrid;
use super::store::{
    describe_tree, first_leaf_at, leaves_of, merge_header, read_sections, send_sections, Layout,
};
use super::{IoError, Progress, SplitSpec};
use crate::transport::Communicator;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use tessera_formats::tcs::{ModeInfo, TcsHeader};
use tessera_formats::{retry_interrupted, Index, PendingFile, TensorView, Value, ValueType};

/// What a split or merge did, the same on every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Block files written (split) or read (merge).
    pub blocks: usize,
    /// Values stored in the input (split) or the output (merge), explicit zeros included.
    pub values: u64,
    /// Bytes of the input (split) or the output (merge) file.
    pub bytes: u64,
}

/// Runs `f` on this rank and shares its outcome: an error on any rank is an error on all.
pub(super) fn agreed<C: Communicator + ?Sized, T>(
    comm: &C,
    local: Result<T, IoError>,
) -> Result<T, IoError> {
    comm.check(local.as_ref().map(|_| ()).map_err(|e| e.to_string()))?;
    local
}

pub(super) fn file_err(e: tessera_formats::Error) -> IoError {
    IoError::File(e.to_string())
}

/// Splits the `.tcs` file `input` into blocks written to `out_dir` (which must not already
/// hold `.tcs` files). Each rank reads the header and only its piece of the arrays.
/// Collective.
pub fn split_file<C: Communicator + ?Sized>(
    comm: &C,
    input: &Path,
    spec: &SplitSpec,
    out_dir: &Path,
    progress: &dyn Progress,
) -> Result<Summary, IoError> {
    let opened = File::open(input)
        .map_err(|e| io_err(input, e))
        .and_then(|f| {
            TcsHeader::read_from(&f, input)
                .map(|h| (f, h))
                .map_err(file_err)
        });
    let (file, h) = agreed(comm, opened)?;
    let grid = agreed(comm, spec.grid(&h.dims()))?;
    // The pieces are read in ranges, which no checksum covers: the ranks first check every
    // array's checksum together, each a share of its bytes, as `TcsFile::open` would.
    verify_shared(comm, &file, input, &h, progress)?;
    let prepared = if comm.rank() == 0 {
        prepare_out_dir(out_dir)
    } else {
        Ok(())
    };
    agreed(comm, prepared)?;
    let args = (&file, input, &h, &grid, out_dir, progress);
    let written = match (h.value_type, h.index_bits) {
        (ValueType::F32, 32) => split_typed::<C, f32, u32>(comm, args),
        (ValueType::F32, _) => split_typed::<C, f32, u64>(comm, args),
        (ValueType::F64, 32) => split_typed::<C, f64, u32>(comm, args),
        (ValueType::F64, _) => split_typed::<C, f64, u64>(comm, args),
        (ValueType::I64, 32) => split_typed::<C, i64, u32>(comm, args),
        (ValueType::I64, _) => split_typed::<C, i64, u64>(comm, args),
    }?;
    let total = comm.all_sum(&[written as u64])?;
    Ok(Summary {
        blocks: total[0] as usize,
        values: h.nnz,
        bytes: h.file_len,
    })
}

type SplitArgs<'a> = (
    &'a File,
    &'a Path,
    &'a TcsHeader,
    &'a super::BlockGrid,
    &'a Path,
    &'a dyn Progress,
);

fn prepare_out_dir(dir: &Path) -> Result<(), IoError> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    if !block_files(dir)?.is_empty() {
        return Err(IoError::File(format!(
            "{}: already holds .tcs files; split into an empty directory",
            dir.display()
        )));
    }
    Ok(())
}

fn split_typed<C: Communicator + ?Sized, V: Value, I: Index>(
    comm: &C,
    (file, input, header, grid, out_dir, progress): SplitArgs<'_>,
) -> Result<usize, IoError> {
    let (probe, meta) = agreed(comm, open_probe::<V, I>(file, input, header, grid.dims()))?;
    // Every rank checks a share of the levels (the pieces alone do not establish them).
    progress.start("split: check", 0);
    let share = (comm.rank() as u64, comm.size() as u64);
    agreed(
        comm,
        check_levels::<I>(file, input, header, share, progress),
    )?;
    let piece = piece_bounds(comm, &probe, &meta)?;
    agreed(comm, probe.take_error().map_or(Ok(()), Err))?;
    let assign = Assigner::new(&meta.format, grid);

    // Pass one: this rank's partial header of every block it has entries of, pooled.
    progress.start("split: headers", (piece.1 - piece.0) as u64);
    let mut headers = ByBlock::new(BTreeMap::new(), assign.blocks()?);
    let walked = walk_chunks(&probe, &meta, piece, progress, |walker| {
        walk_blocks(walker, &assign, progress, |key, coords, _| {
            headers
                .entry(key, || PartialHeader::new(coords.len()))
                .push(coords)
        })
    });
    agreed(comm, walked)?;
    let headers: BTreeMap<usize, PartialHeader> = headers.into_map();
    let mut w = Writer::default();
    for (key, h) in &headers {
        w.u64(*key as u64);
        h.write(&mut w);
    }
    let pooled = pool_headers(&comm.all_gather(&w.0)?, meta.format.rank())?;
    let targets = agreed(
        comm,
        block_targets::<C, V, I>(comm, &meta, grid, &headers, &pooled, out_dir),
    )?;

    // Owners create their block files under hidden names at full length; they get their
    // `.tcs` names only once every rank has written its runs and every owner has finished its
    // files: a split that fails anywhere (a full disk, a signal, a rank that died) leaves no
    // block files, only a complete set or nothing.
    let owned: Vec<&Target> = targets.values().filter(|t| t.owned).collect();
    let remove_owned = || {
        for t in &owned {
            let _ = std::fs::remove_file(&t.hidden);
            let _ = std::fs::remove_file(&t.shown);
        }
    };
    let created = owned.iter().try_for_each(|t| {
        File::create(&t.hidden)
            .and_then(|f| retry_interrupted(|| f.set_len(t.header.file_len)))
            .map_err(|e| io_err(&t.hidden, e))
    });
    let written = agreed(comm, created).and_then(|()| {
        let runs = write_runs(&probe, &meta, piece, &assign, &headers, &targets, progress);
        finish_blocks::<C, V, I>(comm, agreed(comm, runs)?, &owned)
    });
    if let Err(e) = written {
        remove_owned();
        return Err(e);
    }
    // Each block file was flushed before its rename; the renames are flushed once, by rank 0,
    // after every rank has renamed its blocks.
    let synced = if comm.rank() == 0 {
        sync_dir(Some(out_dir))
    } else {
        Ok(())
    };
    agreed(comm, synced)?;
    Ok(owned.len())
}

/// A block file this rank writes runs of or finishes (its owner).
struct Target {
    key: u64,
    shape: Shape,
    header: TcsHeader,
    totals: Totals,
    /// Where this rank's runs start.
    start: PieceStart,
    owned: bool,
    hidden: PathBuf,
    shown: PathBuf,
}

/// The block files this rank writes to (the blocks it saw entries of) or owns, laid out from
/// the pooled partial headers.
fn block_targets<C: Communicator + ?Sized, V: Value, I: Index>(
    comm: &C,
    meta: &Meta,
    grid: &BlockGrid,
    headers: &BTreeMap<usize, PartialHeader>,
    pooled: &BTreeMap<usize, Vec<PartialHeader>>,
    out_dir: &Path,
) -> Result<BTreeMap<usize, Target>, IoError> {
    let (me, n) = (comm.rank(), comm.size());
    let shapes = BlockShapes {
        grid,
        format: &meta.format,
        dense: &meta.dense,
    };
    let keys: BTreeSet<usize> = headers
        .keys()
        .copied()
        .chain((me..grid.block_count()?).step_by(n))
        .collect();
    let mut targets = BTreeMap::new();
    for key in keys {
        let shape = shapes.shape(key);
        let parts = pooled.get(&key).map_or(&[][..], Vec::as_slice);
        let (starts, totals) = combine(&shape, None, parts)?;
        let ranges = grid.block_ranges(key);
        let modes = ranges
            .iter()
            .zip(grid.dims())
            .map(|(r, &dim)| ModeInfo {
                dim: dim as u64,
                split_lo: r.range.start as u64,
                split_hi: r.range.end as u64,
                split_index: r.index as u64,
                split_count: r.count as u64,
            })
            .collect();
        let header = header_of::<V, I>(&meta.dims, &meta.format, &shape, &totals, Some(modes))?;
        let name: Vec<String> = ranges.iter().map(|r| r.index.to_string()).collect();
        let name = format!("block-{}.tcs", name.join("-"));
        targets.insert(
            key,
            Target {
                key: key as u64,
                shape,
                header,
                totals,
                start: starts.get(me).cloned().unwrap_or_default(),
                owned: BlockGrid::owner(key, n) == me,
                hidden: out_dir.join(format!(".{name}.partial")),
                shown: out_dir.join(name),
            },
        );
    }
    Ok(targets)
}

/// Pass two: walks this rank's piece again and writes each entry into its block's file, at
/// final positions; returns the runs written.
fn write_runs<V: Value, I: Index>(
    probe: &FileProbe<'_, V, I>,
    meta: &Meta,
    piece: (usize, usize),
    assign: &Assigner<'_>,
    headers: &BTreeMap<usize, PartialHeader>,
    targets: &BTreeMap<usize, Target>,
    progress: &dyn Progress,
) -> Result<Vec<Written>, IoError> {
    progress.start("split: write", (piece.1 - piece.0) as u64);
    let mut sinks = BTreeMap::new();
    let limit = sink_limit(headers.len());
    for key in headers.keys() {
        let t = &targets[key];
        let (path, shape) = (&t.hidden, &t.shape);
        let sink = FileSink::<V, I>::open(*key as u64, path, &t.header, shape, &t.start, limit)?;
        sinks.insert(*key, sink);
    }
    let mut sinks = ByBlock::new(sinks, assign.blocks()?);
    walk_chunks(probe, meta, piece, progress, |walker| {
        walk_blocks(walker, assign, progress, |key, coords, v| {
            sinks
                .entry(key, || {
                    unreachable!("a sink for every block seen in pass one")
                })
                .push(coords, v)
        })
    })?;
    let mut runs = Vec::new();
    for sink in sinks.into_map().into_values() {
        runs.extend(sink.finish()?);
    }
    Ok(runs)
}

/// Pools every rank's runs; each owner finishes its blocks (tails, checksums, header) and,
/// once every owner has, renames them into place. Collective.
fn finish_blocks<C: Communicator + ?Sized, V: Value, I: Index>(
    comm: &C,
    runs: Vec<Written>,
    owned: &[&Target],
) -> Result<(), IoError> {
    let all = comm.all_gather_u64(&Written::encode(&runs))?;
    let mut by_file: BTreeMap<u64, Vec<Written>> = BTreeMap::new();
    for words in &all {
        for w in Written::decode(words)? {
            by_file.entry(w.file).or_default().push(w);
        }
    }
    let finished = owned.iter().try_for_each(|t| {
        let runs = by_file.get(&t.key).map_or(&[][..], Vec::as_slice);
        finish_file::<V, I>(&t.hidden, t.header.clone(), &t.totals, runs)
    });
    agreed(comm, finished)?;
    let renamed = owned
        .iter()
        .try_for_each(|t| std::fs::rename(&t.hidden, &t.shown).map_err(|e| io_err(&t.shown, e)));
    agreed(comm, renamed)
}

/// The `.tcs` files of a directory, sorted by name.
fn block_files(dir: &Path) -> Result<Vec<PathBuf>, IoError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
        let path = entry.map_err(|e| io_err(dir, e))?.path();
        if path.extension().is_some_and(|x| x == "tcs") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Merges the block files in `dir` into one `.tcs` file `output`. Collective.
///
/// Every rank reads every block's header, cuts every block at the same coordinate-space
/// cuts (SuperTaco §4.6.1) and reads its own sections of them straight from the files: the
/// ranks exchange headers and checksums, never the data. Each rank also verifies the
/// checksums of a share of the files (a bit flip anywhere fails the merge).
pub fn merge_dir<C: Communicator + ?Sized>(
    comm: &C,
    dir: &Path,
    output: &Path,
    progress: &dyn Progress,
) -> Result<Summary, IoError> {
    let files = agreed(
        comm,
        block_files(dir).and_then(|f| {
            if f.is_empty() {
                Err(IoError::File(format!(
                    "{}: no .tcs block files",
                    dir.display()
                )))
            } else {
                Ok(f)
            }
        }),
    )?;
    // Files are opened one at a time, whenever read: a merge of thousands of blocks must not
    // hold thousands of descriptors.
    let headers = agreed(
        comm,
        files
            .iter()
            .map(|p| {
                let h = TcsHeader::read_from(&open(p)?, p).map_err(file_err)?;
                match h.format().coo_start() {
                    Some(_) => Err(super::coo::file_error(&h.format())),
                    None => Ok(h),
                }
            })
            .collect::<Result<Vec<_>, _>>(),
    )?;
    // The blocks must be the whole grid of one split, each piece once.
    agreed(comm, check_split(&files, &headers))?;
    // Every file must hold the same value type and coordinate width.
    let mut kinds: Vec<(ValueType, u32)> = headers
        .iter()
        .map(|h| (h.value_type, h.index_bits))
        .collect();
    kinds.dedup();
    let [(vtype, bits)] = kinds[..] else {
        return Err(IoError::Mismatch(format!(
            "block files in {} mix value types or coordinate widths",
            dir.display()
        )));
    };
    let blocks = Blocks {
        paths: &files,
        headers: &headers,
    };
    let summary = match (vtype, bits) {
        (ValueType::F32, 32) => merge_typed::<C, f32, u32>(comm, blocks, output, progress),
        (ValueType::F32, _) => merge_typed::<C, f32, u64>(comm, blocks, output, progress),
        (ValueType::F64, 32) => merge_typed::<C, f64, u32>(comm, blocks, output, progress),
        (ValueType::F64, _) => merge_typed::<C, f64, u64>(comm, blocks, output, progress),
        (ValueType::I64, 32) => merge_typed::<C, i64, u32>(comm, blocks, output, progress),
        (ValueType::I64, _) => merge_typed::<C, i64, u64>(comm, blocks, output, progress),
    }?;
    Ok(Summary {
        blocks: files.len(),
        ..summary
    })
}

/// The block files of a merge, with their headers.
#[derive(Clone, Copy)]
struct Blocks<'a> {
    paths: &'a [PathBuf],
    headers: &'a [TcsHeader],
}

fn open(path: &Path) -> Result<File, IoError> {
    File::open(path).map_err(|e| io_err(path, e))
}

fn merge_typed<C: Communicator + ?Sized, V: Value, I: Index>(
    comm: &C,
    blocks: Blocks<'_>,
    output: &Path,
    progress: &dyn Progress,
) -> Result<Summary, IoError> {
    let (me, n) = (comm.rank(), comm.size());
    let files = || blocks.paths.iter().zip(blocks.headers);
    progress.start("merge: verify", blocks.paths.len().div_ceil(n) as u64);
    let verified = files().skip(me).step_by(n).try_for_each(|(p, h)| {
        progress.advance(1);
        let file = open(p)?;
        verify_checksums(&file, p, h)?;
        check_levels::<I>(&file, p, h, (0, 1), progress)
    });
    agreed(comm, verified)?;
    // The layout and this rank's sections, the same computation on every rank.
    progress.start("merge: balance", 2 * blocks.paths.len() as u64);
    let described = files().try_fold(Writer::default(), |mut w, (p, h)| {
        let file = open(p)?;
        let (probe, meta) = open_probe::<V, I>(&file, p, h, &h.dims())?;
        describe_tree(&mut w, &meta.dims, &meta.format, &probe);
        progress.advance(1);
        probe.take_error().map_or(Ok(w), Err)
    });
    let layout = agreed(comm, described.and_then(|w| Layout::pool(&[w.0])))?;
    let cuts = layout.cuts(n);
    let sections = files()
        .map(|(p, h)| {
            let file = open(p)?;
            let (probe, meta) = open_probe::<V, I>(&file, p, h, &h.dims())?;
            let at = |j: usize| match j {
                0 => 0,
                j if j == n => meta.leaves,
                j => first_leaf_at(&probe, &meta.bounds, meta.leaves, &cuts[j - 1]),
            };
            let (start, end) = (at(me), at(me + 1));
            progress.advance(1);
            match probe.take_error() {
                Some(e) => Err(e),
                None if start < end => probe.section(&meta, start, end).map(Some),
                None => Ok(None),
            }
        })
        .filter_map(Result::transpose)
        .collect::<Result<Vec<_>, _>>();
    let sections = agreed(comm, sections)?;
    write_merged(comm, &layout, &sections, output, progress)
}

/// Stores the blocks that all ranks hold (views in memory: a distributed result) into one
/// `.tcs` file `output`; the file side of [`merge_blocks`](super::merge_blocks). The ranks
/// send each other their blocks' sections as `merge_blocks` does (step 1), then each merges
/// its sections and writes its piece of the output arrays at their final offsets, as
/// [`merge_dir`] does: no rank holds the whole tensor, and only headers, counters and
/// checksums travel after the sections. Blocks must not overlap. A format with singleton (COO)
/// levels is written as such: the file one process writes of the whole tensor. Collective.
pub fn store_file<C, V, I>(
    comm: &C,
    blocks: &[TensorView<'_, V, I>],
    output: &Path,
    progress: &dyn Progress,
) -> Result<Summary, IoError>
where
    C: Communicator + ?Sized,
    V: Value,
    I: Index,
{
    store_file_cut(comm, blocks, None, output, progress)
}

/// [`store_file`] with the ranks' runs of the file cut at `cuts` (`size - 1` level-order
/// coordinates, the same on every rank: rank `j` writes the entries from cut `j - 1` to cut
/// `j`) instead of into equal runs of the blocks' coordinate box. When each rank's blocks
/// lie between its cuts, no block moves: a caller that balanced its blocks keeps the balance
/// through the write. Collective.
pub fn store_file_cut<C, V, I>(
    comm: &C,
    blocks: &[TensorView<'_, V, I>],
    cuts: Option<&[Vec<usize>]>,
    output: &Path,
    progress: &dyn Progress,
) -> Result<Summary, IoError>
where
    C: Communicator + ?Sized,
    V: Value,
    I: Index,
{
    let (layout, incoming) = send_sections(comm, blocks, cuts, progress)?;
    let sections = agreed(comm, read_sections::<V, I>(layout.shape.len(), incoming))?;
    write_merged(comm, &layout, &sections, output, progress)
}

/// Merges this rank's `sections` of a tensor laid out as `layout` and writes its piece of
/// `output` at the final offsets; rank 0 finishes the file (tails, header, checksums combined
/// from every rank's runs) and renames it into place. On any failure on any rank, every rank
/// returns the error and the temporary file is removed. Collective.
fn write_merged<C: Communicator + ?Sized, V: Value, I: Index>(
    comm: &C,
    layout: &Layout,
    sections: &[Section<V, I>],
    output: &Path,
    progress: &dyn Progress,
) -> Result<Summary, IoError> {
    let me = comm.rank();
    let _held = Held::new(sections.iter().map(Section::bytes).sum());
    // A COO format is written as such: its levels from the non-unique one down per entry.
    let coo = layout.format.coo_start();
    let (mut merge, _, start, totals) = merge_header(comm, layout, sections, coo, progress)?;
    let header = header_of::<V, I>(&layout.dims, &layout.format, &layout.shape, &totals, None)?;
    // Rank 0 names and creates the temporary file; under MPI the ranks are processes with
    // different ids, so the name travels with an all-gather. It is listed for the program's
    // signal handler (`remove_pending_files`) while held: a Ctrl-C during the write, which
    // does not unwind, would otherwise leave a full-length file behind.
    let (temp, created) = if me == 0 {
        let temp = temp_path(output);
        let created = PendingFile::create(&temp)
            .and_then(|(f, listed)| {
                retry_interrupted(|| f.set_len(header.file_len)).map(|()| listed)
            })
            .map_err(|e| io_err(&temp, e));
        (temp, created.map(Some))
    } else {
        (PathBuf::new(), Ok(None))
    };
    let _listed = agreed(comm, created)?;
    let names = comm.all_gather(temp.to_string_lossy().as_bytes());
    let temp = match names {
        Ok(names) => PathBuf::from(String::from_utf8_lossy(&names[0]).into_owned()),
        Err(e) => {
            if me == 0 {
                let _ = std::fs::remove_file(&temp);
            }
            return Err(e.into());
        }
    };
    // From here on, any failure (a full disk, a signal, a rank that died) removes the
    // temporary file, on every rank.
    let result = (|| {
        // Pass two: this rank's runs of the output, written at their offsets.
        let leaves = leaves_of(sections);
        progress.start("merge: write", leaves);
        let runs = (|| {
            if progress.cancelled() {
                return Err(IoError::Cancelled);
            }
            let limit = sink_limit(1);
            let mut sink = FileSink::<V, I>::open(0, &temp, &header, &layout.shape, &start, limit)?;
            merge.reset();
            while merge.next_with(|c, v| sink.push(c, v)) {}
            progress.advance(leaves);
            sink.finish()
        })();
        let runs = agreed(comm, runs)?;
        // Every rank decodes the same records, so a malformed one fails them all here.
        let all = comm
            .all_gather_u64(&Written::encode(&runs))?
            .iter()
            .map(|words| Written::decode(words))
            .collect::<Result<Vec<_>, _>>()?
            .concat();
        let finished = if me == 0 {
            finish_file::<V, I>(&temp, header.clone(), &totals, &all)
                .and_then(|()| std::fs::rename(&temp, output).map_err(|e| io_err(output, e)))
                .and_then(|()| sync_dir(output.parent()))
        } else {
            Ok(())
        };
        agreed(comm, finished)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    Ok(Summary {
        blocks: 0,
        values: header.nnz,
        bytes: header.file_len,
    })
}

fn temp_path(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    output.with_file_name(format!(".{name}.merge-{}.tmp", std::process::id()))
}

/// Flushes a directory, so that the renames into it survive a crash: without this, a
/// command that reported success could lose its output file (or block files) on power loss.
/// One call per command, after all its renames (a few ms).
fn sync_dir(dir: Option<&Path>) -> Result<(), IoError> {
    let dir = match dir {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| retry_interrupted(|| d.sync_all()))
        .map_err(|e| io_err(dir, e))
}
