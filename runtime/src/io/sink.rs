//! Pass two's output written straight into a `.tcs` file at final offsets (SuperTaco §4.6.4,
//! sequential write-out), in bounded memory.
//!
//! A rank's piece of a tensor (or of one block) is a run of each array at offsets that the
//! pooled header fixed (see `assemble`). A [`FileSink`] builds the piece with a
//! [`PieceBuilder`] and, whenever the segments hold its part of [`SINK_ELEMS`] (shared by a
//! rank's sinks, at least `SINK_MIN` each), writes them at their offsets and keeps only a
//! running CRC-32 per array: memory stays bounded whatever the share. One rank (the file's finisher) then writes the tails after every rank's runs
//! ([`finish_file`]), combines the runs' checksums in element order and writes the header.
//!
//! So that the ranks never exchange the data itself: the output of a split or merge is the
//! union of the runs each rank writes, whether one file (merge) or one per block (split).

use super::assemble::{Piece, PieceBuilder, PieceStart, Shape, Totals};
use super::held::Held;
use super::IoError;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use tessera_formats::tcs::{ArrayInfo, ArrayKind, LevelInfo, ModeInfo, TcsHeader};
use tessera_formats::{retry_interrupted, Format, Index, LevelType, Value};

/// Elements (of all arrays together) that the sinks of one rank hold before they write them
/// out, shared by its sinks: 1 Mi, at most 8 MiB of segments (and as much again in the
/// buffers a sink keeps for reuse). Unit tests use a handful, so that their small tensors
/// are written in many runs.
pub(crate) const SINK_ELEMS: usize = if cfg!(test) { 6 } else { 1 << 20 };

/// The least a sink holds before it writes, however many share [`SINK_ELEMS`]: writes of
/// less than 32 KiB would cost more in system calls than they save.
const SINK_MIN: usize = if cfg!(test) { 2 } else { 1 << 12 };

/// Elements each of `sinks` sinks on a rank may hold.
pub(crate) fn sink_limit(sinks: usize) -> usize {
    (SINK_ELEMS / sinks.max(1)).max(SINK_MIN)
}

/// Entries between two checks of a sink's size: the check costs a few loads, and once every
/// 1024 entries is plenty for a bound of a million elements. (Every entry in unit tests.)
const CHECK_EVERY: usize = if cfg!(test) { 1 } else { 1024 };

pub(crate) fn io_err(path: &Path, e: std::io::Error) -> IoError {
    IoError::File(format!("{}: {e}", path.display()))
}

/// Per level of `shape` the header's array numbers of its `pos` (`None` for a singleton
/// level) and `crd` (`None` for a dense level), and the number of `vals`; `None` when the
/// header lacks one of them.
#[allow(clippy::type_complexity)]
pub(crate) fn array_numbers(
    header: &TcsHeader,
    shape: &Shape,
) -> Option<(Vec<Option<(Option<usize>, usize)>>, usize)> {
    let rank = shape.len();
    let mut arrays: Vec<(Option<usize>, Option<usize>)> = vec![(None, None); rank];
    let mut vals = None;
    for (i, a) in header.arrays.iter().enumerate() {
        let k = a.level as usize;
        match a.kind {
            ArrayKind::Pos if k < rank => arrays[k].0 = Some(i),
            ArrayKind::Crd if k < rank => arrays[k].1 = Some(i),
            ArrayKind::Vals => vals = Some(i),
            _ => {}
        }
    }
    let singleton =
        |k: usize| header.levels.get(k).map(|l| l.level_type) == Some(LevelType::Singleton);
    let arrays = arrays
        .into_iter()
        .zip(shape)
        .enumerate()
        .map(|(k, ((p, c), level))| match level {
            Some(_) => Some(None),
            None if singleton(k) => Some(Some((None, c?))),
            None => Some(Some((Some(p?), c?))),
        })
        .collect::<Option<_>>()?;
    Some((arrays, vals?))
}

fn open_write(path: &Path) -> Result<File, IoError> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io_err(path, e))
}

/// One rank's run of one array of one file: first element, element count, and the CRC-32 and
/// byte length that let the finisher combine the array's checksum without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Written {
    /// Which file (a block key in a split; 0 in a merge).
    pub file: u64,
    /// The array's number in the header.
    pub array: u64,
    pub start: u64,
    pub len: u64,
    pub crc: u32,
    pub bytes: u64,
}

impl Written {
    const WORDS: usize = 6;

    pub fn encode(runs: &[Written]) -> Vec<u64> {
        runs.iter()
            .flat_map(|w| [w.file, w.array, w.start, w.len, u64::from(w.crc), w.bytes])
            .collect()
    }

    pub fn decode(words: &[u64]) -> Result<Vec<Written>, IoError> {
        if !words.len().is_multiple_of(Self::WORDS) {
            return Err(IoError::Internal("a short run record".into()));
        }
        Ok(words
            .chunks(Self::WORDS)
            .map(|c| Written {
                file: c[0],
                array: c[1],
                start: c[2],
                len: c[3],
                crc: c[4] as u32,
                bytes: c[5],
            })
            .collect())
    }
}

/// The header of a stored tensor (or block) of `format` whose levels have `shape` and, for
/// compressed and singleton levels (as `format` says), the sizes in `totals`. `modes` carries a block's split metadata
/// (`None`: a whole tensor).
pub(crate) fn header_of<V: Value, I: Index>(
    dims: &[usize],
    format: &Format,
    shape: &Shape,
    totals: &Totals,
    modes: Option<Vec<ModeInfo>>,
) -> Result<TcsHeader, IoError> {
    let is_block = modes.is_some();
    let modes = modes.unwrap_or_else(|| dims.iter().map(|&d| ModeInfo::whole(d as u64)).collect());
    let levels = shape
        .iter()
        .zip(format.mode_order())
        .enumerate()
        .map(|(k, (level, &m))| match level {
            Some((size, offset)) => LevelInfo {
                mode: m as u32,
                level_type: LevelType::Dense,
                size: *size as u64,
                offset: *offset as u64,
            },
            None => LevelInfo {
                mode: m as u32,
                level_type: format.levels()[k],
                size: totals.positions[k],
                offset: 0,
            },
        })
        .collect();
    TcsHeader::new(V::TYPE, I::BITS, is_block, modes, levels)
        .map_err(|e| IoError::File(format!("laying out the stored tensor: {e}")))
}

/// Bytes per element of an array.
fn elem_size<V: Value, I: Index>(kind: ArrayKind) -> u64 {
    if kind == ArrayKind::Vals {
        V::TYPE.size() as u64
    } else {
        u64::from(I::BITS / 8)
    }
}

/// A run being written: where it starts, how far it got, its checksum so far.
struct Run {
    start: u64,
    len: u64,
    crc: crc32fast::Hasher,
}

/// Builds one rank's piece of one file and writes it out in pieces of bounded size.
pub(crate) struct FileSink<'s, V, I> {
    file_key: u64,
    builder: PieceBuilder<'s, V, I>,
    /// The last piece written, kept for its buffers' capacity (`spare_elems` elements).
    spare: Piece<V, I>,
    spare_elems: usize,
    /// Elements the segments hold before they are written.
    limit: usize,
    /// The file, open only while a run is written: a rank may write thousands of blocks.
    file: Option<File>,
    path: PathBuf,
    /// Per level the header's array numbers of its `pos` (singleton levels: none) and `crd`
    /// (dense levels: neither).
    arrays: Vec<Option<(Option<usize>, usize)>>,
    vals: usize,
    /// Per header array: (byte offset, element size).
    layout: Vec<(u64, u64)>,
    runs: Vec<Option<Run>>,
    pushes: usize,
    /// What the segments hold, in bytes (counted as values: an upper bound).
    held: Held,
    elem_bytes: usize,
    /// The first failed write; later pushes only build (and are dropped at the next flush).
    error: Option<IoError>,
}

impl<'s, V: Value, I: Index> FileSink<'s, V, I> {
    /// A sink for this rank's piece of the file `path` (already created at its full length)
    /// laid out by `header`, starting at `start`, holding up to `limit` elements (see
    /// [`sink_limit`]).
    pub fn open(
        file_key: u64,
        path: &Path,
        header: &TcsHeader,
        shape: &'s Shape,
        start: &PieceStart,
        limit: usize,
    ) -> Result<Self, IoError> {
        let (arrays, vals) = array_numbers(header, shape)
            .ok_or_else(|| IoError::Internal(format!("{}: an array is missing", path.display())))?;
        Ok(FileSink {
            file_key,
            builder: PieceBuilder::new(shape, start),
            spare: Piece::default(),
            spare_elems: 0,
            limit,
            file: None,
            path: path.to_path_buf(),
            arrays,
            vals,
            layout: header
                .arrays
                .iter()
                .map(|a| (a.offset, elem_size::<V, I>(a.kind)))
                .collect(),
            runs: header.arrays.iter().map(|_| None).collect(),
            pushes: 0,
            held: Held::new(0),
            elem_bytes: std::mem::size_of::<V>().max(std::mem::size_of::<I>()),
            error: None,
        })
    }

    /// Appends one entry (level-order coordinates, strictly after the previous one).
    pub fn push(&mut self, coords: &[usize], v: V) {
        self.builder.push(coords, v);
        self.pushes = self.pushes.wrapping_add(1);
        if self.pushes.is_multiple_of(CHECK_EVERY) {
            let buffered = self.builder.buffered();
            self.held
                .set((buffered + self.spare_elems) * self.elem_bytes);
            if buffered >= self.limit {
                self.flush();
            }
        }
    }

    /// Writes what the builder holds at its offsets.
    fn flush(&mut self) {
        let piece = self.builder.take(std::mem::take(&mut self.spare));
        if self.error.is_none() {
            if let Err(e) = self.write_piece(&piece) {
                self.error = Some(e);
            }
        }
        self.file = None;
        self.spare_elems = piece.vals.capacity()
            + (piece.pos.iter().chain(&piece.crd))
                .map(Vec::capacity)
                .sum::<usize>();
        self.spare = piece;
        self.held.set(self.spare_elems * self.elem_bytes);
    }

    fn write_piece(&mut self, piece: &Piece<V, I>) -> Result<(), IoError> {
        for k in 0..self.arrays.len() {
            if let Some((pos, crd)) = self.arrays[k] {
                if let Some(pos) = pos {
                    self.write(pos, piece.pos_start[k], bytemuck::cast_slice(&piece.pos[k]))?;
                }
                self.write(crd, piece.crd_start[k], bytemuck::cast_slice(&piece.crd[k]))?;
            }
        }
        self.write(
            self.vals,
            piece.val_start,
            bytemuck::cast_slice(&piece.vals),
        )
    }

    /// Writes `bytes` as elements from `start` of array `array`, extending its run.
    fn write(&mut self, array: usize, start: u64, bytes: &[u8]) -> Result<(), IoError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let (offset, elem) = self.layout[array];
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(open_write(&self.path)?),
        };
        file.write_all_at(bytes, offset + start * elem)
            .map_err(|e| io_err(&self.path, e))?;
        let len = bytes.len() as u64 / elem;
        match &mut self.runs[array] {
            Some(run) if run.start + run.len == start => {
                run.len += len;
                run.crc.update(bytes);
            }
            Some(run) => {
                return Err(IoError::Internal(format!(
                    "{}: array {array} written at {start} after a run ending at {}",
                    self.path.display(),
                    run.start + run.len
                )))
            }
            None => {
                let mut crc = crc32fast::Hasher::new();
                crc.update(bytes);
                self.runs[array] = Some(Run { start, len, crc });
            }
        }
        Ok(())
    }

    /// Writes the rest, flushes the file, and returns this rank's runs.
    pub fn finish(mut self) -> Result<Vec<Written>, IoError> {
        self.flush();
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let file = open_write(&self.path)?;
        retry_interrupted(|| file.sync_data()).map_err(|e| io_err(&self.path, e))?;
        Ok(self
            .runs
            .into_iter()
            .enumerate()
            .filter_map(|(array, run)| {
                let run = run?;
                Some(Written {
                    file: self.file_key,
                    array: array as u64,
                    start: run.start,
                    len: run.len,
                    crc: run.crc.clone().finalize(),
                    bytes: run.crc.total_len(),
                })
            })
            .collect())
    }
}

/// The finisher of a file: writes each array's tail after the ranks' runs (`runs`: every
/// rank's runs of this file, any order), checks that the runs tile every array, combines
/// their checksums into the header, writes it and flushes the file.
pub(crate) fn finish_file<V: Value, I: Index>(
    path: &Path,
    mut header: TcsHeader,
    totals: &Totals,
    runs: &[Written],
) -> Result<(), IoError> {
    let file = open_write(path)?;
    for (i, a) in header.arrays.iter_mut().enumerate() {
        let mut mine: Vec<&Written> = runs.iter().filter(|w| w.array == i as u64).collect();
        mine.sort_by_key(|w| w.start);
        let elem = elem_size::<V, I>(a.kind);
        let tail_start = mine.last().map_or(0, |w| w.start + w.len);
        let tail = tail_bytes::<I>(a, elem, totals, tail_start)?;
        let mut crc = crc32fast::Hasher::new();
        let mut at = 0u64;
        for w in &mine {
            if w.start != at {
                return Err(IoError::Internal(format!(
                    "{}: {}: a run starts at element {}, expected {at}",
                    path.display(),
                    a.name(),
                    w.start
                )));
            }
            crc.combine(&crc32fast::Hasher::new_with_initial_len(w.crc, w.bytes));
            at = w.start + w.len;
        }
        if !tail.is_empty() {
            file.write_all_at(&tail, a.offset + tail_start * elem)
                .map_err(|e| io_err(path, e))?;
            crc.update(&tail);
        }
        if crc.total_len() != a.len {
            return Err(IoError::Internal(format!(
                "{}: {}: ranks wrote {} of its {} bytes",
                path.display(),
                a.name(),
                crc.total_len(),
                a.len
            )));
        }
        a.crc32 = crc.finalize();
    }
    file.write_all_at(&header.to_bytes(), 0)
        .map_err(|e| io_err(path, e))?;
    retry_interrupted(|| file.sync_all()).map_err(|e| io_err(path, e))
}

/// An array's tail from element `from` to its end: the final count repeated in `pos`
/// (up to the sentinel), zeros in `vals` (trailing dense positions); `crd` has none.
fn tail_bytes<I: Index>(
    a: &ArrayInfo,
    elem: u64,
    totals: &Totals,
    from: u64,
) -> Result<Vec<u8>, IoError> {
    let missing = (a.len / elem).saturating_sub(from) as usize;
    Ok(match a.kind {
        ArrayKind::Pos => {
            let last = totals.positions[a.level as usize];
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
