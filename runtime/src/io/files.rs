//! Distributed split and merge of `.tcs` files: the file side of [`load_blocks`] and
//! [`merge_blocks`].
//!
//! - [`split_file`]: every rank maps the input, the blocks are loaded onto their owners, and
//!   each owner writes its blocks (one `.tcs` per block, with its split metadata).
//! - [`merge_dir`]: the block files are shared out over the ranks, merged, and every rank
//!   writes its piece of the output arrays at offsets computed from the pooled header into
//!   one temporary file; rank 0 writes the header (with array checksums combined from the
//!   ranks' partial checksums) and renames the file into place once every rank is done.
//!
//! Every step that can fail on one rank (a missing file, a corrupt block, a full disk) is
//! followed by [`Communicator::check`], so all ranks stop with an error together.

use super::partial::load_file_blocks;
use super::store::{merge_received, send_sections, Merged};
use super::{IoError, Progress, SplitSpec};
use crate::transport::Communicator;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use tessera_formats::tcs::{write_tensor, ArrayKind, LevelInfo, ModeInfo, TcsFile, TcsHeader};
use tessera_formats::{retry_interrupted, Index, Value, ValueType};

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
fn agreed<C: Communicator + ?Sized, T>(comm: &C, local: Result<T, IoError>) -> Result<T, IoError> {
    comm.check(local.as_ref().map(|_| ()).map_err(|e| e.to_string()))?;
    local
}

fn file_err(e: tessera_formats::Error) -> IoError {
    IoError::File(e.to_string())
}

fn io_err(path: &Path, e: std::io::Error) -> IoError {
    IoError::File(format!("{}: {e}", path.display()))
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
    let blocks = load_file_blocks::<C, V, I>(comm, file, input, header, grid, progress)?;
    progress.start("split: write blocks", blocks.len() as u64);
    // Blocks are written under hidden names and get their `.tcs` names only once every rank
    // has written all of its blocks: a split that fails anywhere (a full disk, a signal, a
    // rank that died) leaves no block files, only a complete set or nothing.
    let mut result = Ok(blocks.len());
    let mut names: Vec<(PathBuf, PathBuf)> = Vec::with_capacity(blocks.len());
    for b in &blocks {
        if progress.cancelled() {
            result = Err(IoError::Cancelled);
            break;
        }
        let name: Vec<String> = b.ranges.iter().map(|r| r.index.to_string()).collect();
        let name = format!("block-{}.tcs", name.join("-"));
        let path = out_dir.join(format!(".{name}.partial"));
        let modes = b
            .ranges
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
        if let Err(e) = write_tensor(&path, &b.tensor, Some(modes)) {
            result = Err(file_err(e));
            break;
        }
        names.push((path, out_dir.join(name)));
        progress.advance(1);
    }
    let remove_all = |names: &[(PathBuf, PathBuf)]| {
        for (hidden, shown) in names {
            let _ = std::fs::remove_file(hidden);
            let _ = std::fs::remove_file(shown);
        }
    };
    let written = agreed(comm, result).and_then(|n| {
        let renamed = names
            .iter()
            .try_for_each(|(hidden, shown)| {
                std::fs::rename(hidden, shown).map_err(|e| io_err(shown, e))
            })
            .map(|()| n);
        agreed(comm, renamed)
    });
    let written = match written {
        Ok(n) => n,
        Err(e) => {
            remove_all(&names);
            return Err(e);
        }
    };
    // Each block file was flushed before its rename; the renames are flushed once, by rank 0,
    // after every rank has written its blocks.
    let synced = if comm.rank() == 0 {
        sync_dir(Some(out_dir))
    } else {
        Ok(())
    };
    agreed(comm, synced)?;
    Ok(written)
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
    let (me, n) = (comm.rank(), comm.size());
    let mine: Vec<&PathBuf> = files.iter().skip(me).step_by(n).collect();
    let opened = agreed(
        comm,
        mine.iter()
            .map(|p| {
                let f = TcsFile::open(p).map_err(file_err)?;
                match f.format().coo_start() {
                    Some(_) => Err(super::coo::file_error(f.format())),
                    None => Ok(f),
                }
            })
            .collect::<Result<Vec<_>, _>>(),
    )?;
    // Every file must hold the same value type and coordinate width.
    let types: Vec<u64> = opened
        .iter()
        .flat_map(|f| {
            [
                f.header().value_type.size() as u64,
                u64::from(f.header().index_bits),
            ]
        })
        .collect();
    let all = comm.all_gather_u64(&types)?;
    let mut kinds: Vec<(u64, u64)> = all
        .iter()
        .flat_map(|v| v.chunks(2).map(|c| (c[0], c[1])))
        .collect();
    kinds.dedup();
    kinds.sort();
    kinds.dedup();
    let [(vsize, bits)] = kinds[..] else {
        return Err(IoError::Mismatch(format!(
            "block files in {} mix value types or coordinate widths",
            dir.display()
        )));
    };
    let summary = match (vsize, bits) {
        (4, 32) => merge_typed::<C, f32, u32>(comm, opened, output, progress),
        (4, _) => merge_typed::<C, f32, u64>(comm, opened, output, progress),
        (_, 32) => merge_typed::<C, f64, u32>(comm, opened, output, progress),
        (_, _) => merge_typed::<C, f64, u64>(comm, opened, output, progress),
    }?;
    Ok(Summary {
        blocks: files.len(),
        ..summary
    })
}

fn merge_typed<C: Communicator + ?Sized, V: Value, I: Index>(
    comm: &C,
    opened: Vec<TcsFile>,
    output: &Path,
    progress: &dyn Progress,
) -> Result<Summary, IoError> {
    let (layout, incoming) = {
        let views = opened
            .iter()
            .map(|f| f.view::<V, I>().map_err(file_err))
            .collect::<Result<Vec<_>, _>>();
        let views = agreed(comm, views)?;
        send_sections(comm, &views, progress)?
    };
    // The local blocks went out as sections: unmap them before merging.
    drop(opened);
    let merged = merge_received::<C, V, I>(comm, layout, incoming, progress)?;
    write_merged::<C, V, I>(comm, &merged, output, progress)
}

/// The header of the merged tensor, laid out by the formats crate.
fn merged_header<V: Value, I: Index>(merged: &Merged<V, I>) -> Result<TcsHeader, IoError> {
    let modes = merged
        .dims
        .iter()
        .map(|&d| ModeInfo::whole(d as u64))
        .collect();
    let levels = merged
        .shape
        .iter()
        .zip(merged.format.mode_order())
        .enumerate()
        .map(|(k, (level, &m))| match level {
            Some((size, offset)) => LevelInfo {
                mode: m as u32,
                level_type: tessera_formats::LevelType::Dense,
                size: *size as u64,
                offset: *offset as u64,
            },
            None => LevelInfo {
                mode: m as u32,
                level_type: tessera_formats::LevelType::Compressed,
                size: merged.totals.positions[k],
                offset: 0,
            },
        })
        .collect();
    TcsHeader::new(V::TYPE, I::BITS, false, modes, levels)
        .map_err(|e| IoError::File(format!("laying out the merged tensor: {e}")))
}

/// The segment of one array a rank wrote: first element, element count, and the CRC-32 and
/// byte length that let rank 0 combine the array's checksum without reading it.
struct Written {
    start: u64,
    len: u64,
    crc: u32,
    bytes: u64,
}

/// Step 5, write-out: every rank writes its piece at its offsets; rank 0 finishes the file.
fn write_merged<C: Communicator + ?Sized, V: Value, I: Index>(
    comm: &C,
    merged: &Merged<V, I>,
    output: &Path,
    progress: &dyn Progress,
) -> Result<Summary, IoError> {
    let header = merged_header::<V, I>(merged)?;
    // Rank 0 names and creates the temporary file; under MPI the ranks are processes with
    // different ids, so the name travels with an all-gather.
    let (temp, created) = if comm.rank() == 0 {
        let temp = temp_path(output);
        let created = File::create(&temp)
            .and_then(|f| retry_interrupted(|| f.set_len(header.file_len)))
            .map_err(|e| io_err(&temp, e));
        (temp, created)
    } else {
        (PathBuf::new(), Ok(()))
    };
    agreed(comm, created)?;
    // From here on, any failure (a full disk, a signal, a rank that died) removes the
    // temporary file, on whichever ranks know its name.
    let result = write_into_temp::<C, V, I>(comm, merged, output, progress, &header, &temp);
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// [`write_merged`] once the temporary file exists: every rank writes its segments, rank 0
/// finishes the file.
fn write_into_temp<C: Communicator + ?Sized, V: Value, I: Index>(
    comm: &C,
    merged: &Merged<V, I>,
    output: &Path,
    progress: &dyn Progress,
    header: &TcsHeader,
    temp: &Path,
) -> Result<Summary, IoError> {
    let names = comm.all_gather(temp.to_string_lossy().as_bytes())?;
    let temp = PathBuf::from(String::from_utf8_lossy(&names[0]).into_owned());
    if progress.cancelled() {
        agreed(comm, Err::<(), _>(IoError::Cancelled))?;
    }
    agreed(comm, Ok(()))?;
    progress.start("merge: write", header.file_len);
    let segs = segments::<V, I>(header, merged);
    // Where the tails start: the end of the last nonempty segment of each array.
    let ends: Vec<u64> = segs
        .iter()
        .zip(&header.arrays)
        .map(|((start, b), a)| {
            if b.is_empty() {
                0
            } else {
                start + b.len() as u64 / elem_size::<V, I>(a.kind)
            }
        })
        .collect();
    let all_ends = comm.all_gather_u64(&ends)?;
    let tail_start: Vec<u64> = (0..ends.len())
        .map(|i| {
            all_ends
                .iter()
                .map(|e| e.get(i).copied().unwrap_or(0))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let last = comm.rank() + 1 == comm.size();
    let written = write_piece::<V, I>(&temp, header, merged, segs, last.then_some(&tail_start[..]));
    let written = agreed(comm, written);
    let written = match written {
        Ok(w) => w,
        Err(e) => {
            // Every rank knows the name now; the first to get here removes the file.
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
    };
    // Pool the partial checksums in rank order (segments follow each other in rank order).
    let mut mine = Vec::new();
    for w in &written {
        mine.extend([w.start, w.len, u64::from(w.crc), w.bytes]);
    }
    let all = comm.all_gather_u64(&mine)?;
    let finished = if comm.rank() == 0 {
        finish_file(&temp, output, header.clone(), &all)
    } else {
        Ok(())
    };
    agreed(comm, finished)?;
    progress.advance(header.file_len);
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

/// This rank's segment of each array as (first element, bytes), in header order, borrowed
/// from its piece.
fn segments<'m, V: Value, I: Index>(
    header: &TcsHeader,
    merged: &'m Merged<V, I>,
) -> Vec<(u64, &'m [u8])> {
    let piece = &merged.piece;
    header
        .arrays
        .iter()
        .map(|a| {
            let k = a.level as usize;
            match a.kind {
                ArrayKind::Pos => (
                    piece.pos_start[k],
                    bytemuck::cast_slice::<I, u8>(&piece.pos[k]),
                ),
                ArrayKind::Crd => (
                    piece.crd_start[k],
                    bytemuck::cast_slice::<I, u8>(&piece.crd[k]),
                ),
                ArrayKind::Vals => (piece.val_start, bytemuck::cast_slice::<V, u8>(&piece.vals)),
            }
        })
        .collect()
}

/// Bytes per element of an array.
fn elem_size<V: Value, I: Index>(kind: ArrayKind) -> u64 {
    if kind == ArrayKind::Vals {
        V::TYPE.size() as u64
    } else {
        u64::from(I::BITS / 8)
    }
}

/// Writes this rank's segments into the temporary file; the last rank also writes each
/// array's tail from `tail_start` (the end of all segments) to the array's end: the final
/// count repeated in `pos`, zeros in `vals`. Returns per array what was written.
fn write_piece<V: Value, I: Index>(
    temp: &Path,
    header: &TcsHeader,
    merged: &Merged<V, I>,
    segs: Vec<(u64, &[u8])>,
    tail_start: Option<&[u64]>,
) -> Result<Vec<Written>, IoError> {
    let file = OpenOptions::new()
        .write(true)
        .open(temp)
        .map_err(|e| io_err(temp, e))?;
    let mut out = Vec::with_capacity(header.arrays.len());
    for (i, (a, (start, bytes))) in header.arrays.iter().zip(segs).enumerate() {
        let elem = elem_size::<V, I>(a.kind);
        let mut start = if bytes.is_empty() { 0 } else { start };
        let mut crc = crc32fast::Hasher::new();
        if !bytes.is_empty() {
            file.write_all_at(bytes, a.offset + start * elem)
                .map_err(|e| io_err(temp, e))?;
            crc.update(bytes);
        }
        let mut len = bytes.len() as u64 / elem;
        if let Some(tails) = tail_start {
            if bytes.is_empty() {
                start = tails[i];
            }
            let tail = tail_bytes::<V, I>(a, merged, tails[i])?;
            if !tail.is_empty() {
                file.write_all_at(&tail, a.offset + tails[i] * elem)
                    .map_err(|e| io_err(temp, e))?;
                crc.update(&tail);
                len += tail.len() as u64 / elem;
            }
        }
        out.push(Written {
            start,
            len,
            crc: crc.clone().finalize(),
            bytes: crc.total_len(),
        });
    }
    retry_interrupted(|| file.sync_all()).map_err(|e| io_err(temp, e))?;
    Ok(out)
}

/// An array's tail from element `from` to its end: the final count repeated in `pos`
/// (up to the sentinel), zeros in `vals` (trailing dense positions); `crd` has none.
fn tail_bytes<V: Value, I: Index>(
    a: &tessera_formats::tcs::ArrayInfo,
    merged: &Merged<V, I>,
    from: u64,
) -> Result<Vec<u8>, IoError> {
    let elem = elem_size::<V, I>(a.kind);
    let missing = (a.len / elem).saturating_sub(from) as usize;
    Ok(match a.kind {
        ArrayKind::Pos => {
            let last = merged.totals.positions[a.level as usize];
            let v = I::try_from_usize(last as usize).ok_or(IoError::IndexOverflow {
                value: last,
                bits: I::BITS,
            })?;
            bytemuck::cast_slice(&vec![v; missing]).to_vec()
        }
        ArrayKind::Vals => vec![0u8; missing * elem as usize],
        ArrayKind::Crd if missing == 0 => Vec::new(),
        ArrayKind::Crd => {
            return Err(IoError::Internal(format!(
                "{}: {missing} coordinates were never written",
                a.name()
            )))
        }
    })
}

/// Rank 0: checks that the segments tile every array, combines checksums, writes the header
/// and renames the file into place.
fn finish_file(
    temp: &Path,
    output: &Path,
    mut header: TcsHeader,
    all: &[Vec<u64>],
) -> Result<(), IoError> {
    for (i, a) in header.arrays.iter_mut().enumerate() {
        let mut crc = crc32fast::Hasher::new();
        let mut at = 0u64;
        for (rank, segs) in all.iter().enumerate() {
            let Some(&[start, len, c, bytes]) = segs.get(i * 4..i * 4 + 4) else {
                return Err(IoError::Internal(format!(
                    "rank {rank} sent a short segment record"
                )));
            };
            if len == 0 {
                continue;
            }
            if start != at {
                return Err(IoError::Internal(format!(
                    "{}: rank {rank} wrote from element {start}, expected {at}",
                    a.name()
                )));
            }
            crc.combine(&crc32fast::Hasher::new_with_initial_len(c as u32, bytes));
            at = start + len;
        }
        if crc.total_len() != a.len {
            return Err(IoError::Internal(format!(
                "{}: ranks wrote {} of its {} bytes",
                a.name(),
                crc.total_len(),
                a.len
            )));
        }
        a.crc32 = crc.finalize();
    }
    let file = OpenOptions::new()
        .write(true)
        .open(temp)
        .map_err(|e| io_err(temp, e))?;
    file.write_all_at(&header.to_bytes(), 0)
        .map_err(|e| io_err(temp, e))?;
    retry_interrupted(|| file.sync_all()).map_err(|e| io_err(temp, e))?;
    std::fs::rename(temp, output).map_err(|e| io_err(output, e))?;
    sync_dir(output.parent())
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
