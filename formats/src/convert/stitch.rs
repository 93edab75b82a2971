//! Sorted text → `.tcs` in one parallel pass (see `blocks`): the pieces of the blocks are
//! joined in file order and each piece's slice of every array is appended in place to the
//! output, a segmented (version 3) `.tcs` file whose header and extent table are written once
//! the level sizes are known. Nothing is written twice.
//!
//! The formats this path packs: every level compressed, or a dense level 0 over compressed
//! levels (CSR and its higher-order kin), of rank 1 to 4. Others take the general path.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::blocks::{
    self, Block, Builder, Deferred, LineSyntax, Piece, PieceArray, Plan, Stop, MAX_LINE,
};
use super::build::{check_dense_size, check_width, layout};
use super::runs::MergeSource;
use super::{duplicate_error, ConvertOptions, Duplicates, Progress};
use crate::error::{Error, Result};
use crate::format::{Format, LevelType};
use crate::tcs::Appender;
use crate::tensor::TensorError;
use crate::value::{canonical_nan, Index, Value, ValueType};

/// A text file to convert: its line syntax and where its data lines begin.
pub(crate) struct Input<S> {
    pub path: PathBuf,
    pub syntax: S,
    /// Byte offset of the first data line, and the number of lines before it.
    pub data_start: u64,
    pub lines_before: u64,
    pub dims: Option<Vec<u64>>,
    /// Entries the file's header promises (`.mtx`).
    pub entries: Option<u64>,
}

/// What the fast path did.
pub(crate) enum Outcome {
    Done(Done),
    /// The input is not sorted in storage order (and has no error before the first entry
    /// out of order): the external sort takes it.
    Unsorted,
    /// An `.mtx` file does not hold the entries its header promises: the general path says
    /// on which line it is wrong.
    Fallback,
}

pub(crate) struct Done {
    pub entries_read: u64,
    pub entries_written: u64,
    pub dims: Vec<u64>,
    pub bytes: u64,
}

/// True for the formats the fast path packs.
pub(crate) fn supports(format: &Format) -> bool {
    let levels = format.levels();
    (1..=4).contains(&levels.len())
        && levels[1..].iter().all(|t| t.is_sparse())
        && (levels[0] == LevelType::Compressed || levels.len() >= 2)
}

/// Converts sorted text to `.tcs` (see the module documentation).
pub(crate) fn convert<S: LineSyntax>(
    input: &Input<S>,
    output: &Path,
    format: &Format,
    opts: &ConvertOptions,
    temp_dir: &Path,
    progress: &dyn Progress,
) -> Result<Outcome> {
    let job = Job {
        input,
        output,
        format,
        opts,
        temp_dir,
        progress,
    };
    dispatch!(typed, S, &job, format.rank(), opts)
}

/// Calls `$body::<R, I, V, $s>($job)` for the rank and the options' widths.
macro_rules! dispatch {
    ($body:ident, $s:ty, $job:expr, $rank:expr, $opts:expr) => {{
        macro_rules! widths {
            ($r:literal) => {
                $crate::with_types!($opts.value_type, $opts.index_bits, |W, J| {
                    $body::<$r, J, W, $s>($job)
                })
            };
        }
        match $rank {
            1 => widths!(1),
            2 => widths!(2),
            3 => widths!(3),
            4 => widths!(4),
            r => unreachable!("rank {r} is not packed in blocks (see `supports`)"),
        }
    }};
}
use dispatch;

/// The external sort's merged entries (`source`), packed and written like sorted text: the
/// merge is cut into key ranges (`ranges::Ranges`) that workers merge and pack in parallel, as
/// they parse blocks of sorted text, and the pieces are joined in key order.
pub(crate) fn convert_merged(
    source: &MergeSource,
    input: &Input<()>,
    output: &Path,
    format: &Format,
    opts: &ConvertOptions,
    temp_dir: &Path,
    progress: &dyn Progress,
) -> Result<Done> {
    let job = Job {
        input,
        output,
        format,
        opts,
        temp_dir,
        progress,
    };
    let job = (job, source);
    dispatch!(merged, (), &job, format.rank(), opts)
}

/// Entries of a key range of the parallel final merge ([`convert_merged`]) under `memory`,
/// for keys of `rank` coordinates of `index_bytes` each: half the budget holds the pieces
/// in flight (a piece takes at most a coordinate, a position and a value per level and
/// entry, and the summed value's bits), with room for ranges of twice the target; an eighth
/// the workers' read buffers, one per run, or the range a worker merges in memory: a
/// 16-byte pair per record, at most 32 / `per_entry` (≤ 1) of an eighth for ranges of twice
/// the target, and read in chunks of half its read buffers.
pub(crate) fn merge_target(
    memory: usize,
    rank: usize,
    index_bytes: usize,
    run_entries: Option<usize>,
    threads: usize,
) -> u64 {
    let in_flight = 2 * threads as u64;
    let per_entry = (2 * rank * index_bytes + 8 + 16) as u64;
    match run_entries {
        Some(n) => n as u64,
        None => (memory as u64 / 4 / in_flight / per_entry).max(1 << 10),
    }
}

fn merged<const R: usize, I: Index, V: Value, S: Sync>(
    (job, source): &(Job<'_, S>, &MergeSource),
) -> Result<Done> {
    let Job {
        input,
        output,
        format,
        opts,
        temp_dir,
        progress,
    } = *job;
    check_dims::<I, V, S>(input, format)?;
    let threads = crate::chunks::parse_threads();
    let in_flight = 2 * threads;
    let index_bytes = std::mem::size_of::<I>();
    let target = merge_target(opts.memory, R, index_bytes, opts.run_entries, threads);
    let ranges = source.ranges(target, 4 * threads, threads)?;
    let buffer = (opts.memory / 8 / threads / source.run_count().max(1))
        .clamp(super::runs::MIN_RUN_BUFFER, 1 << 20);
    let (app, files) = appender(format, output, opts.sync)?;
    let crcs = app.late_crcs();
    let failed = Mutex::new(None);
    let mut st = Stitcher::<I, V, S>::new(input, format, opts, app);
    let plan = Plan {
        order: (0..R).collect(),
        dense_top: format.levels()[0] == LevelType::Dense,
        coo: format.coo_start().unwrap_or(R),
        duplicates: opts.duplicates,
    };
    let fill = |j: usize, piece: &mut Piece<I>| {
        let mut builder = Builder::<R, I>::new(std::mem::take(piece), &plan);
        let mut stop = None;
        let merged = ranges
            .span(j)
            .and_then(|span| match source.pairs_bits(&span, 2 * target) {
                // Merged in memory: batches of packed pairs, each key unpacked into an array
                // here (the common case: one tight loop per rank and width).
                Some(bits) => {
                    let bits: [u32; R] = bits.try_into().expect("a field per level");
                    source.merge_range_pairs(&span, buffer, &mut |batch| {
                        let mut pairs = batch.iter();
                        let mut next = |key: &mut [u64; R]| {
                            let p = pairs.next()?;
                            *key = super::runs::unpack_fixed(p[0], &bits);
                            Some(canonical_nan(f64::from_bits(p[1])))
                        };
                        loop {
                            // Distinct entries in order many at a time; the others one by one.
                            let entry = if builder.runs() {
                                builder.push_run(&mut next)
                            } else {
                                let mut key = [0; R];
                                next(&mut key).map(|v| (key, v))
                            };
                            let Some((key, v)) = entry else {
                                return Ok(());
                            };
                            if let Err(s) = builder.push(key, v) {
                                stop = Some(s);
                                return Err(Error::Cancelled);
                            }
                        }
                    })
                }
                None => source.merge_range(&span, (buffer, 2 * target), &mut |k, v| {
                    let key: [u64; R] = k.try_into().expect("keys of the tensor's rank");
                    builder.push(key, canonical_nan(v)).map_err(|s| {
                        stop = Some(s);
                        Error::Cancelled
                    })
                }),
            });
        *piece = builder.finish();
        piece.bytes = piece.entries;
        piece.until = j as u64 + 1;
        piece.stop = match (stop, merged) {
            (Some(s), _) => Some(s),
            (None, Err(e)) => Some(Stop::Io(std::io::Error::other(e.to_string()))),
            (None, Ok(())) => None,
        };
    };
    let write = |p: &mut Piece<I>| p.write_deferred(&files, &crcs, &failed);
    progress.stage("merge", 0);
    let (keys, take) = (0..ranges.len() as u64, blocks::numbered(ranges.len()));
    let ran = blocks::run::<I, _, Error>(keys, (threads, in_flight), &write, &take, &fill, |p| {
        let joined = st.take(p, progress)?;
        if !joined {
            let e = std::io::Error::other("merged entries came out of order (a bug)");
            return Err(Error::io(&input.path, e));
        }
        Ok(true)
    });
    progress.end_stage();
    ran?;
    if let Some(e) = failed.lock().ok().and_then(|mut f| f.take()) {
        return Err(Error::io(output, e));
    }
    let _ = temp_dir;
    st.finish(progress)
}

/// Declared dimensions must fit the coordinate width, and the dense levels' values a file.
fn check_dims<I: Index, V: Value, S>(input: &Input<S>, format: &Format) -> Result<()> {
    let tensor_err = |source| Error::Tensor {
        path: input.path.clone(),
        source,
    };
    if let Some(dims) = &input.dims {
        check_width::<I>(dims, &[]).map_err(tensor_err)?;
        check_dense_size::<V>(format, dims).map_err(tensor_err)?;
    }
    Ok(())
}

/// The output, appended to in place, and a second handle on its file for the workers' writes
/// (`Deferred::file` 0).
fn appender(format: &Format, output: &Path, sync: bool) -> Result<(Appender, [File; 1])> {
    let arrays: usize = 1 + format
        .levels()
        .iter()
        .map(|t| match t {
            LevelType::Compressed => 2,
            LevelType::Singleton => 1,
            LevelType::Dense => 0,
        })
        .sum::<usize>();
    let mut app = Appender::create(output, format.rank(), arrays)?;
    app.set_sync(sync);
    app.flush_behind();
    let file = app.file().try_clone().map_err(|e| Error::io(output, e))?;
    Ok((app, [file]))
}

/// The arguments of a conversion, passed on to its typed body.
struct Job<'a, S> {
    input: &'a Input<S>,
    output: &'a Path,
    format: &'a Format,
    opts: &'a ConvertOptions,
    temp_dir: &'a Path,
    progress: &'a dyn Progress,
}

fn typed<const R: usize, I: Index, V: Value, S: LineSyntax>(job: &Job<'_, S>) -> Result<Outcome> {
    let Job {
        input,
        output,
        format,
        opts,
        temp_dir,
        progress,
    } = *job;
    check_dims::<I, V, S>(input, format)?;
    let file = File::open(&input.path).map_err(|e| Error::io(&input.path, e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io(&input.path, e))?
        .len();
    let threads = crate::chunks::parse_threads();
    // Each worker holds a block it packs and one waiting for the consumer: half the budget
    // holds their text and pieces.
    let in_flight = 2 * threads;
    let data = (input.data_start, len);
    let entries = opts.run_entries.map(|n| n.max(1) as u64);
    let dense_top = format.levels()[0] == LevelType::Dense;
    let plan = Plan {
        order: format.mode_order().to_vec(),
        dense_top,
        coo: format.coo_start().unwrap_or(R),
        duplicates: opts.duplicates,
    };
    let share = (opts.memory / 2 / in_flight, entries);
    let blocks = blocks::sample::<R, I, S>(file, data, share, &input.syntax, &plan);
    let (app, files) = appender(format, output, opts.sync)?;
    let crcs = app.late_crcs();
    let failed = Mutex::new(None);
    let mut st = Stitcher::<I, V, S>::new(input, format, opts, app);
    progress.stage("convert", len);
    let write = |p: &mut Piece<I>| p.write_deferred(&files, &crcs, &failed);
    let fill = |b: Block, p: &mut Piece<I>| {
        blocks::pack_block::<R, I, S>(&blocks, &input.syntax, &plan, b, p)
    };
    let take = || blocks.take();
    let keys = input.data_start..len;
    let ran = blocks::run::<I, _, Error>(keys, (threads, in_flight), &write, &take, &fill, |p| {
        st.take(p, progress)
    });
    progress.end_stage();
    ran?;
    if let Some(e) = failed.lock().ok().and_then(|mut f| f.take()) {
        return Err(Error::io(output, e));
    }
    let _ = temp_dir;
    if st.unsorted {
        return Ok(Outcome::Unsorted);
    }
    if st.fallback || input.entries.is_some_and(|n| n != st.entries_read) {
        return Ok(Outcome::Fallback);
    }
    st.finish(progress).map(Outcome::Done)
}

/// Joins pieces in file order (see `blocks`).
struct Stitcher<'a, I, V, S> {
    input: &'a Input<S>,
    /// The output, its arrays appended piece by piece.
    app: Appender,
    format: &'a Format,
    duplicates: Duplicates,
    dense_top: bool,
    /// Per level, the numbers of its arrays in the header: `pos` (None for a dense level and
    /// a singleton) and `crd` (None for a dense level).
    pos: Vec<Option<usize>>,
    crd: Vec<Option<usize>>,
    vals: usize,
    /// Coordinates stored so far per level.
    base: Vec<u64>,
    /// Under a dense level 0: positions of level 1 written so far.
    filled: u64,
    /// The last entry so far (level order) and its value, which may still grow.
    last: Vec<u64>,
    pending: Option<f64>,
    max: Vec<u64>,
    entries_read: u64,
    entries_written: u64,
    lines: u64,
    bytes: u64,
    /// More entries than an `.mtx` header promises ([`Outcome::Fallback`]).
    fallback: bool,
    /// An entry out of order ([`Outcome::Unsorted`]).
    unsorted: bool,
    scratch_i: Vec<I>,
    scratch_v: Vec<V>,
}

impl<'a, I: Index, V: Value, S> Stitcher<'a, I, V, S> {
    fn new(input: &'a Input<S>, format: &'a Format, opts: &ConvertOptions, app: Appender) -> Self {
        let rank = format.rank();
        let mut next = 0;
        let mut spool = || {
            next += 1;
            next - 1
        };
        let dense_top = format.levels()[0] == LevelType::Dense;
        let mut pos = Vec::new();
        let mut crd = Vec::new();
        for k in 0..rank {
            let compressed = format.levels()[k] == LevelType::Compressed;
            pos.push(compressed.then(&mut spool));
            crd.push(format.levels()[k].is_sparse().then(&mut spool));
        }
        let vals = spool();
        Stitcher {
            input,
            app,
            format,
            duplicates: opts.duplicates,
            dense_top,
            pos,
            crd,
            vals,
            base: vec![0; rank],
            filled: 0,
            last: Vec::new(),
            pending: None,
            max: vec![0; rank],
            entries_read: 0,
            entries_written: 0,
            lines: input.lines_before,
            bytes: input.data_start,
            fallback: false,
            unsorted: false,
            scratch_i: Vec::new(),
            scratch_v: Vec::new(),
        }
    }

    fn overflow(&self, value: u64) -> Error {
        Error::Tensor {
            path: self.input.path.clone(),
            source: TensorError::IndexOverflow {
                value,
                bits: I::BITS,
            },
        }
    }

    /// Joins the next piece; false to stop and take the general path.
    fn take(&mut self, piece: &mut Piece<I>, progress: &dyn Progress) -> Result<bool> {
        let rank = self.base.len();
        if let Some(stop) = piece.stop.take() {
            return self.stopped(stop);
        }
        self.entries_read += piece.entries;
        if self.input.entries.is_some_and(|n| self.entries_read > n) {
            self.fallback = true;
            return Ok(false);
        }
        self.lines += piece.newlines;
        self.bytes += piece.bytes;
        super::tick(progress, self.bytes)?;
        if piece.vals.is_empty() {
            return Ok(true);
        }
        let have = !self.last.is_empty();
        let f = if have {
            let f = (0..rank)
                .position(|k| piece.first[k] != self.last[k])
                .unwrap_or(rank);
            if f < rank && piece.first[f] < self.last[f] {
                self.unsorted = true;
                return Ok(false);
            }
            if f == rank && self.duplicates == Duplicates::Error {
                return Err(duplicate_error(&self.input.path, self.format, &piece.first));
            }
            f
        } else {
            0
        };
        // Values: the first entry continues the last one when their coordinates agree.
        let mut vals = &piece.vals[..];
        if f == rank {
            let mut v = self.pending.take().expect("a value before");
            for h in &piece.head {
                v += h;
            }
            self.pending = Some(canonical_nan(v));
            vals = &vals[1..];
        }
        let first = piece.vals.len() - vals.len();
        if let Some(&last) = vals.last() {
            if let Some(p) = self.pending.take() {
                self.emit(&[p])?;
            }
            let done = first..piece.vals.len() - 1;
            if V::TYPE == ValueType::F64 {
                self.entries_written += done.len() as u64;
                defer_range(&mut self.app, self.vals, piece, PieceArray::Vals, done);
            } else {
                let done = piece.vals[done].to_vec();
                self.emit(&done)?;
            }
            self.pending = Some(last);
        }
        // Arrays: levels above the first new one continue the previous block's nodes (a
        // distinct entry is new from the non-unique level of a COO format down).
        let f = if f < rank {
            f.min(self.format.coo_start().unwrap_or(rank))
        } else {
            f
        };
        for k in 0..rank {
            if k == 0 && self.dense_top {
                self.join_starts(piece, f)?;
                continue;
            }
            let dropped = usize::from(k < f);
            let singleton = self.format.levels()[k] == LevelType::Singleton;
            if k >= 1 && !(k == 1 && self.dense_top) && !singleton {
                let offset = self.base[k] - dropped as u64;
                let pos = &mut piece.pos[k][usize::from(k <= f)..];
                if let Some(&top) = pos.last() {
                    let top = top.to_usize() as u64 + offset;
                    if top > I::MAX_U64 {
                        return Err(self.overflow(top));
                    }
                    let offset = I::from_usize(offset as usize);
                    add_offset(pos, offset);
                }
                let start = usize::from(k <= f);
                let array = self.pos[k].expect("a pos array");
                defer(&mut self.app, array, piece, PieceArray::Pos(k), start);
            }
            let array = self.crd[k].expect("a crd array");
            defer(&mut self.app, array, piece, PieceArray::Crd(k), dropped);
            self.base[k] += (piece.crd[k].len() - dropped) as u64;
        }
        for (m, p) in self.max.iter_mut().zip(&piece.max) {
            *m = (*m).max(*p);
        }
        self.last.clear();
        self.last.extend_from_slice(&piece.last);
        Ok(true)
    }

    /// Under a dense level 0: the positions of level 1 for the rows up to the piece's last,
    /// empty rows repeating the next row's start.
    fn join_starts(&mut self, piece: &Piece<I>, f: usize) -> Result<()> {
        let offset = self.base[1] - u64::from(1 < f);
        let mut out = std::mem::take(&mut self.scratch_i);
        out.clear();
        for &(row, start) in &piece.starts[usize::from(f > 0)..] {
            let s = start.to_usize() as u64 + offset;
            if s > I::MAX_U64 {
                return Err(self.overflow(s));
            }
            let s = I::from_usize(s as usize);
            let n = (row + 1 - self.filled) as usize;
            out.resize(out.len() + n, s);
            self.filled = row + 1;
        }
        let r = self.app.append(self.pos[1].expect("a pos array"), &out);
        self.scratch_i = out;
        r
    }

    /// Appends final values.
    fn emit(&mut self, vals: &[f64]) -> Result<()> {
        self.entries_written += vals.len() as u64;
        if V::TYPE == ValueType::F64 {
            return self.app.append(self.vals, vals);
        }
        self.scratch_v.clear();
        self.scratch_v.extend(vals.iter().map(|&x| V::from_f64(x)));
        self.app.append(self.vals, &self.scratch_v)
    }

    /// The error (or fallback) a piece stopped with; its line counted from the file's start.
    fn stopped(&mut self, stop: Stop) -> Result<bool> {
        let path = self.input.path.clone();
        Err(match stop {
            Stop::Unsorted => {
                self.unsorted = true;
                return Ok(false);
            }
            Stop::Syntax { line, column, kind } => Error::Syntax {
                path,
                line: self.lines + line,
                column,
                kind,
            },
            Stop::Duplicate(key) => duplicate_error(&path, self.format, &key),
            Stop::Overflow(c) => self.overflow(c),
            Stop::Io(e) => Error::io(&path, e),
            Stop::LongLine => {
                let msg = format!(
                    "line {} or one soon after it is longer than {} MiB",
                    self.lines + 1,
                    MAX_LINE >> 20
                );
                Error::io(
                    &path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, msg),
                )
            }
        })
    }

    /// Completes the arrays and writes the output's header and extent table.
    fn finish(mut self, progress: &dyn Progress) -> Result<Done> {
        let rank = self.base.len();
        if let Some(p) = self.pending.take() {
            self.emit(&[p])?;
        }
        let order = self.format.mode_order();
        let dims: Vec<u64> = match &self.input.dims {
            Some(d) => d.clone(),
            None => {
                let mut d = vec![0; rank];
                for (k, &m) in order.iter().enumerate() {
                    d[m] = self.max[k] + 1;
                }
                d
            }
        };
        let tensor_err = |source| Error::Tensor {
            path: self.input.path.clone(),
            source,
        };
        check_width::<I>(&dims, &self.base).map_err(tensor_err)?;
        for k in 0..rank {
            if self.format.levels()[k] == LevelType::Singleton {
                continue;
            }
            let end = I::from_usize(self.base[k] as usize);
            let tail = if k == 0 && !self.dense_top {
                vec![I::from_usize(0), end]
            } else if k == 1 && self.dense_top {
                vec![end; (dims[order[0]] + 1 - self.filled) as usize]
            } else if k >= 1 {
                vec![end]
            } else {
                continue;
            };
            self.app.append(self.pos[k].expect("a pos array"), &tail)?;
        }
        let counts: Vec<u64> = (0..rank)
            .map(|k| match self.format.levels()[k] {
                LevelType::Dense => dims[order[k]],
                LevelType::Compressed | LevelType::Singleton => self.base[k],
            })
            .collect();
        let header = layout::<V, I>(self.format, &dims, &counts).map_err(|source| Error::Tcs {
            path: self.app.target().to_path_buf(),
            source,
        })?;
        progress.stage("write", 0);
        let bytes = self.app.finish(header);
        progress.end_stage();
        let bytes = bytes?;
        Ok(Done {
            entries_read: self.entries_read,
            entries_written: self.entries_written,
            dims,
            bytes,
        })
    }
}

/// Appends an array of `piece` from element `from` on to array number `array` of the output,
/// written later by a worker (see `Piece::writes`).
fn defer<I: Index>(
    app: &mut Appender,
    array: usize,
    piece: &mut Piece<I>,
    which: PieceArray,
    from: usize,
) {
    let len = match which {
        PieceArray::Crd(k) => piece.crd[k].len(),
        PieceArray::Pos(k) => piece.pos[k].len(),
        PieceArray::Vals => piece.vals.len(),
    };
    defer_range(app, array, piece, which, from..len);
}

fn defer_range<I: Index>(
    app: &mut Appender,
    array: usize,
    piece: &mut Piece<I>,
    which: PieceArray,
    range: Range<usize>,
) {
    if range.is_empty() {
        return;
    }
    let bytes = range.len()
        * match which {
            PieceArray::Crd(_) | PieceArray::Pos(_) => std::mem::size_of::<I>(),
            PieceArray::Vals => std::mem::size_of::<f64>(),
        };
    let (at, crc_slot) = app.reserve_unhashed(array, bytes as u64);
    piece.writes.push(Deferred {
        file: 0,
        at,
        crc_slot,
        array: which,
        range,
    });
}

/// Adds `offset` to every position (a loop the compiler vectorizes).
fn add_offset<I: Index>(pos: &mut [I], offset: I) {
    if offset.to_usize() == 0 {
        return;
    }
    let off = offset.to_usize();
    for p in pos {
        *p = I::from_usize(p.to_usize() + off);
    }
}
