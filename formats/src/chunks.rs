//! Parsing `.tns` text on worker threads: the file is cut into blocks of the lines that start
//! in each fixed byte range, which the workers map (as the block packer does,
//! `convert::blocks::Blocks`) and parse in parallel into batches of binary entries; batches
//! are handed out in file order with line numbers (for errors) restored from each block's
//! count of newlines. At most a few blocks per worker are in flight, so memory stays bounded.
//!
//! Mapped, not read (conv26): a `read` into a buffer is a copy in the kernel, and on the bench
//! VM's Zen 3 host that copy took 8% of an unsorted conversion's samples, on a thread of its
//! own; mapping costs a fault per 16 pages and an unmap per block. Unsorted `.tns` at 256 MiB
//! 0.54 -> 0.49 s and 0.58 -> 0.54 s (7 and 9 interleaved single jobs), at 1 GB 2.15 -> 1.96 s
//! (`.mtx` 1.79 -> 1.67 s). On the earlier Zen 5 host the copy was 3.6% and mapping gained
//! nothing (pack18, `convert/mod.rs`).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use crate::convert::blocks::{Blocks, MAX_LINE};
use crate::error::{Error, Result, SyntaxError};

/// Text mapped per block at most (less under a small memory budget).
const BLOCK: usize = 2 << 20;

/// A batch of entries: `coords` holds `rank` 0-based coordinates per entry, in mode order,
/// and `vals` their values; or, from a reader asked to pack keys
/// ([`EntryReader::pack_keys`](crate::EntryReader::pack_keys)), `pairs` holds each entry as
/// its packed key and its value's bits, and `coords` and `vals` stay empty.
#[derive(Default, Debug)]
pub struct Chunk {
    pub coords: Vec<u64>,
    pub vals: Vec<f64>,
    pub pairs: Vec<[u64; 2]>,
}

impl Chunk {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.vals.len().max(self.pairs.len())
    }

    /// True when the batch holds no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn clear(&mut self) {
        self.coords.clear();
        self.vals.clear();
        self.pairs.clear();
    }
}

/// How a parser packs each entry's key into one `u64` (see [`Chunk::pairs`]): level `k`'s
/// coordinate (that of mode `order[k]`) in a field of `bits[k]` bits, the last level lowest,
/// so that packed keys order as level-order keys. The fields come from declared dimensions,
/// which the parser checks every coordinate against, so every key fits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyPacking {
    pub order: Vec<usize>,
    pub bits: Vec<u32>,
}

impl KeyPacking {
    /// The packing of `bits` in mode `order`, when it holds every coordinate inside the
    /// declared `dims` ([`KeyPacking::fits`]).
    pub fn of(dims: &[u64], order: &[usize], bits: &[u32]) -> Option<KeyPacking> {
        Self::fits(dims, order, bits).then(|| KeyPacking {
            order: order.to_vec(),
            bits: bits.to_vec(),
        })
    }

    /// True when fields of `bits` (levels in mode `order`) hold every coordinate inside
    /// the declared `dims`, in one `u64`.
    pub fn fits(dims: &[u64], order: &[usize], bits: &[u32]) -> bool {
        let rank = dims.len();
        order.len() == rank
            && bits.len() == rank
            && bits.iter().sum::<u32>() <= 64
            && order
                .iter()
                .zip(bits)
                .all(|(&m, &b)| m < rank && (b >= 64 || dims[m].saturating_sub(1) >> b == 0))
    }
}

/// The key of mode-order `coords` packed by `order` and `bits` (see [`KeyPacking`]); a
/// field of 64 bits is the whole key (the others are empty), hence the checked shift.
#[inline(always)]
pub(crate) fn pack_key(coords: &[u64], order: &[usize], bits: &[u32]) -> u64 {
    order
        .iter()
        .zip(bits)
        .fold(0, |p, (&m, &b)| p.checked_shl(b).unwrap_or(0) | coords[m])
}

/// How a line of a block is parsed: fills `coords` and returns the value, `None` for lines
/// that hold no entry (comments, blank lines), or the column and kind of an error.
pub(crate) type LineParser =
    fn(&[u8], &mut [u64], Option<&[u64]>) -> Result<Option<f64>, (u64, SyntaxError)>;

/// Symmetric storage of a matrix (`.mtx`): each entry (i, j, v) must lie in the lower
/// triangle and stands also for (j, i, v), or (j, i, -v) when skew-symmetric, which then
/// has no diagonal. The workers check and mirror, so errors keep their line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mirror {
    Symmetric,
    Skew,
}

/// How the workers parse and what they hand out: with `scan`, data lines of the common
/// shape are parsed in one pass (`numbers::entry_line`) before the line parser is tried
/// (only for parsers that accept those lines with the same entries); keys packed by
/// `packing`; rank-2 entries mirrored by `mirror`.
#[derive(Clone, Debug, Default)]
pub(crate) struct How {
    pub scan: bool,
    pub packing: Option<KeyPacking>,
    pub mirror: Option<Mirror>,
}

struct Parsed {
    chunk: Chunk,
    newlines: u64,
    bytes: u64,
    /// Data lines parsed into entries (before mirroring).
    lines: u64,
    /// 1-based line within the block, column, kind.
    error: Option<(u64, u64, SyntaxError)>,
}

/// Batches handed back for reuse: allocating a fresh batch for every block lets
/// the allocator's arenas grow well past what is in use (their peak RSS, not the
/// parser's, then broke small memory budgets).
#[derive(Default)]
struct Spare {
    chunks: Mutex<Vec<Chunk>>,
}

impl Spare {
    fn take_chunk(&self) -> Chunk {
        self.chunks
            .lock()
            .map(|mut v| v.pop())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    fn give_chunk(&self, c: Chunk) {
        if let Ok(mut v) = self.chunks.lock() {
            v.push(c);
        }
    }
}

/// What a worker hands back for one block.
enum Block {
    Parsed(Parsed),
    /// Mapping the block failed (I/O error).
    Failed(std::io::Error),
    /// The next line is longer than [`MAX_LINE`].
    LongLine,
}

/// The parallel block parser of one file: workers take block numbers in order, map and parse
/// those blocks, and the consumer takes the results in file order. The consumer returns a
/// credit for every block it takes; a worker takes a block for a credit, which bounds the
/// blocks in flight.
pub(crate) struct ParallelParser {
    path: PathBuf,
    credits: Option<mpsc::SyncSender<()>>,
    results: mpsc::Receiver<(u64, Block)>,
    workers: Vec<JoinHandle<()>>,
    done: bool,
    next_take: u64,
    pending: BTreeMap<u64, Block>,
    line_base: u64,
    bytes_done: u64,
    /// Data lines handed out as entries (before mirroring).
    entry_lines: u64,
    spare: Arc<Spare>,
}

impl ParallelParser {
    /// Starts parsing `path` with `threads` workers from byte `from.0`, the start of a line
    /// with `from.1` lines before it (the header of an `.mtx` file), each line by `parse`
    /// as `how` says.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        path: &Path,
        rank: usize,
        dims: Option<Vec<u64>>,
        parse: LineParser,
        how: How,
        from: (u64, u64),
        threads: usize,
        memory: usize,
    ) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        // A block in flight holds its text and its parsed entries (about 2.5 blocks in all);
        // an eighth of the memory budget bounds how many may be in flight.
        // Under a small budget the blocks shrink before their number does.
        let block = (memory / 128).clamp(64 << 10, BLOCK);
        let in_flight = (memory / 8 / (block * 5 / 2)).clamp(1, 2 * threads.max(1));
        let threads = threads.clamp(1, in_flight);
        let blocks = Arc::new(Blocks::fixed(file, (from.0, len), block as u64));
        let count = blocks.count() as u64;
        let (res_tx, res_rx) = mpsc::channel();
        let (credit_tx, credit_rx) = mpsc::sync_channel::<()>(in_flight);
        for _ in 0..in_flight {
            credit_tx.send(()).expect("room for every credit");
        }
        // The credits and the next block's number, under one lock: a worker takes a credit,
        // then a block, so that blocks go out in order, one per credit.
        let next = Arc::new(Mutex::new((credit_rx, 0u64)));
        let spare = Arc::new(Spare::default());
        let dims = Arc::new(dims);
        let how = Arc::new(how);
        let workers = (0..threads)
            .map(|_| {
                let (next, tx, dims) = (Arc::clone(&next), res_tx.clone(), Arc::clone(&dims));
                let (spare, how, blocks) =
                    (Arc::clone(&spare), Arc::clone(&how), Arc::clone(&blocks));
                std::thread::spawn(move || loop {
                    let seq = {
                        let Ok(mut next) = next.lock() else { return };
                        let (credits, seq) = &mut *next;
                        if *seq == count || credits.recv().is_err() {
                            return;
                        }
                        *seq += 1;
                        *seq - 1
                    };
                    let block = match blocks.map(&blocks.nth(seq as usize)) {
                        Ok((text, _, lines)) => {
                            let chunk = spare.take_chunk();
                            let args = (parse, &*how);
                            let text = &text[lines];
                            Block::Parsed(parse_block(text, rank, dims.as_deref(), args, chunk))
                        }
                        Err(Some(e)) => Block::Failed(e),
                        Err(None) => Block::LongLine,
                    };
                    if tx.send((seq, block)).is_err() {
                        return;
                    }
                })
            })
            .collect();
        drop(res_tx);
        Ok(ParallelParser {
            path: path.to_path_buf(),
            credits: Some(credit_tx),
            results: res_rx,
            workers,
            done: false,
            next_take: 0,
            pending: BTreeMap::new(),
            line_base: from.1,
            bytes_done: 0,
            entry_lines: 0,
            spare,
        })
    }

    /// Bytes of the file whose entries have been handed out.
    pub fn bytes_done(&self) -> u64 {
        self.bytes_done
    }

    /// Data lines whose entries have been handed out (before mirroring).
    pub fn entry_lines(&self) -> u64 {
        self.entry_lines
    }

    /// Fills `chunk` with the next nonempty batch; false at the end of the file.
    pub fn next_chunk(&mut self, chunk: &mut Chunk) -> Result<bool> {
        loop {
            if self.done {
                return Ok(false);
            }
            let block = loop {
                if let Some(b) = self.pending.remove(&self.next_take) {
                    break b;
                }
                match self.results.recv() {
                    Ok((seq, b)) => {
                        self.pending.insert(seq, b);
                    }
                    // Reader and workers are gone and every block was taken: the end.
                    Err(_) => {
                        self.done = true;
                        return Ok(false);
                    }
                }
            };
            self.next_take += 1;
            if let Some(c) = &self.credits {
                let _ = c.send(());
            }
            let parsed = match block {
                Block::Parsed(p) => p,
                Block::Failed(e) => {
                    self.done = true;
                    return Err(Error::io(&self.path, e));
                }
                Block::LongLine => {
                    self.done = true;
                    let line = self.line_base + 1;
                    let msg = format!(
                        "line {line} or one soon after it is longer than {} MiB",
                        MAX_LINE >> 20
                    );
                    let e = std::io::Error::new(std::io::ErrorKind::InvalidData, msg);
                    return Err(Error::io(&self.path, e));
                }
            };
            // Counted before an error too: the `.mtx` reader compares the entries before an
            // error with those its header declares.
            self.entry_lines += parsed.lines;
            if let Some((line, column, kind)) = parsed.error {
                self.done = true;
                return Err(Error::Syntax {
                    path: self.path.clone(),
                    line: self.line_base + line,
                    column,
                    kind,
                });
            }
            self.line_base += parsed.newlines;
            self.bytes_done += parsed.bytes;
            let mut c = parsed.chunk;
            std::mem::swap(chunk, &mut c);
            self.spare.give_chunk(c);
            if !chunk.is_empty() {
                return Ok(true);
            }
        }
    }
}

impl Drop for ParallelParser {
    fn drop(&mut self) {
        // Without credits the workers stop.
        self.credits = None;
        while self.results.try_recv().is_ok() {}
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Parses the lines of `block` into `chunk`: lines of the common shape by the one-pass
/// scanner for ranks 1 to 4, others by `parse`; keys packed into pairs and entries mirrored
/// as `how` says.
fn parse_block(
    block: &[u8],
    rank: usize,
    dims: Option<&[u64]>,
    (parse, how): (LineParser, &How),
    chunk: Chunk,
) -> Parsed {
    if how.mirror.is_some() {
        // Symmetric storage: mirrored and checked entry by entry (no scanner).
        return mirror_lines(block, dims, (parse, how), chunk);
    }
    let packing = how.packing.as_ref();
    // The rank chosen once per block, not per line: the scanner's coordinates are then a
    // fixed array, copied into the chunk (or packed) without a loop of pushes.
    // Packing too: the loop then holds no per-line choice between pairs and coordinates.
    let args = (parse, packing);
    match (how.scan, rank, packing.is_some()) {
        (true, 1, false) => parse_lines::<1, false>(block, rank, dims, args, chunk),
        (true, 2, false) => parse_lines::<2, false>(block, rank, dims, args, chunk),
        (true, 3, false) => parse_lines::<3, false>(block, rank, dims, args, chunk),
        (true, 4, false) => parse_lines::<4, false>(block, rank, dims, args, chunk),
        (true, 1, true) => parse_lines::<1, true>(block, rank, dims, args, chunk),
        (true, 2, true) => parse_lines::<2, true>(block, rank, dims, args, chunk),
        (true, 3, true) => parse_lines::<3, true>(block, rank, dims, args, chunk),
        (true, 4, true) => parse_lines::<4, true>(block, rank, dims, args, chunk),
        _ => parse_lines::<0, false>(block, rank, dims, args, chunk),
    }
}

/// The lines of a block of a symmetric matrix's entries (rank 2), each entry followed by its
/// mirror off the diagonal, as the sequential `.mtx` reader gives them.
fn mirror_lines(
    block: &[u8],
    dims: Option<&[u64]>,
    (parse, how): (LineParser, &How),
    mut chunk: Chunk,
) -> Parsed {
    chunk.clear();
    let skew = how.mirror == Some(Mirror::Skew);
    let name = if skew { "skew-symmetric" } else { "symmetric" };
    let mut push = |c: [u64; 2], v: f64| match &how.packing {
        Some(p) => chunk
            .pairs
            .push([pack_key(&c, &p.order, &p.bits), v.to_bits()]),
        None => {
            chunk.coords.extend_from_slice(&c);
            chunk.vals.push(v);
        }
    };
    let mut coords = [0u64; 2];
    let (mut start, mut line_no, mut newlines, mut lines) = (0, 0u64, 0u64, 0u64);
    let mut error = None;
    while start < block.len() {
        let end = memchr::memchr(b'\n', &block[start..]).map(|i| start + i);
        let mut line = &block[start..end.unwrap_or(block.len())];
        line_no += 1;
        newlines += u64::from(end.is_some());
        start = end.map_or(block.len(), |e| e + 1);
        if let Some(stripped) = line.strip_suffix(b"\r") {
            line = stripped;
        }
        let v = match parse(line, &mut coords, dims) {
            Ok(Some(v)) => v,
            Ok(None) => continue,
            Err((column, kind)) => {
                error = Some((line_no, column, kind));
                break;
            }
        };
        let [i, j] = coords;
        if i < j || (skew && i == j) {
            let kind = if i < j {
                SyntaxError::UpperTriangle(name)
            } else {
                SyntaxError::SkewDiagonal
            };
            error = Some((line_no, 1, kind));
            break;
        }
        lines += 1;
        push([i, j], v);
        if i != j {
            push([j, i], if skew { -v } else { v });
        }
    }
    Parsed {
        chunk,
        newlines,
        bytes: block.len() as u64,
        lines,
        error,
    }
}

/// [`parse_block`], with the one-pass scanner for rank `R` (`R` = `rank`), or without it
/// (`R` = 0); `P`: the scanned lines' keys packed (`packing` is set).
fn parse_lines<const R: usize, const P: bool>(
    block: &[u8],
    rank: usize,
    dims: Option<&[u64]>,
    (parse, packing): (LineParser, Option<&KeyPacking>),
    mut chunk: Chunk,
) -> Parsed {
    chunk.clear();
    if packing.is_some() {
        chunk.pairs.reserve(block.len() / 16);
    } else {
        chunk.vals.reserve(block.len() / 16);
        chunk.coords.reserve(block.len() / 16 * rank);
    }
    // The packing of the scanned lines as each mode's shift in the key (the bits of the
    // levels below its own), so that packing unrolls into shifts and ORs, with no index
    // through the level order. A shift of 64 belongs to an empty field, whose coordinate
    // the declared bounds (checked on every scanned line) hold at 0.
    let mut shifts = [0u32; R];
    if let Some(p) = packing.filter(|_| R > 0) {
        for (k, &m) in p.order.iter().enumerate() {
            shifts[m] = p.bits[k + 1..].iter().sum();
        }
    }
    let mut coords = vec![0u64; rank];
    let mut fixed = [0u64; R];
    // The declared bounds of the scanned lines as an array (a mode without one, or no
    // declared dimensions: `u64::MAX`, above every scanned coordinate, as a scanned number
    // is at least 1), checked without a branch or an iterator per coordinate.
    let bounds: [u64; R] =
        std::array::from_fn(|k| dims.and_then(|d| d.get(k).copied()).unwrap_or(u64::MAX));
    // One count per line: every line but one at the block's end without a newline ends
    // with one, and every line holds an entry but those counted `no_entry` (comments, blank
    // lines, an error); the scanned lines' loop then counts nothing else (its counters
    // lived on the stack, beside the scanner's registers).
    let mut start = 0;
    let mut line_no = 0u64;
    let mut no_entry = 0u64;
    while start < block.len() {
        if R > 0 {
            if let Some((v, next)) = crate::numbers::entry_line::<R>(block, start, &mut fixed)
                .filter(|_| (0..R).fold(true, |ok, k| ok & (fixed[k] < bounds[k])))
            {
                line_no += 1;
                if P {
                    let key = (0..R).fold(0u64, |p, m| p | fixed[m].wrapping_shl(shifts[m]));
                    chunk.pairs.push([key, v.to_bits()]);
                } else {
                    chunk.coords.extend_from_slice(&fixed);
                    chunk.vals.push(v);
                }
                start = next;
                continue;
            }
        }
        let end = memchr::memchr(b'\n', &block[start..]).map(|i| start + i);
        let mut line = &block[start..end.unwrap_or(block.len())];
        line_no += 1;
        if let Some(stripped) = line.strip_suffix(b"\r") {
            line = stripped;
        }
        match parse(line, &mut coords, dims) {
            Ok(Some(v)) => {
                match packing {
                    Some(p) => chunk
                        .pairs
                        .push([pack_key(&coords, &p.order, &p.bits), v.to_bits()]),
                    None => {
                        // Element by element: a `memcpy` call per line costs more for a few
                        // words.
                        for &c in &coords {
                            chunk.coords.push(c);
                        }
                        chunk.vals.push(v);
                    }
                }
            }
            Ok(None) => no_entry += 1,
            Err((column, kind)) => {
                return Parsed {
                    chunk,
                    newlines: line_no - u64::from(end.is_none()),
                    bytes: block.len() as u64,
                    lines: line_no - no_entry - 1,
                    error: Some((line_no, column, kind)),
                };
            }
        }
        start = end.map_or(block.len(), |e| e + 1);
    }
    Parsed {
        chunk,
        newlines: line_no - u64::from(block.last().is_some_and(|&b| b != b'\n')),
        bytes: block.len() as u64,
        lines: line_no - no_entry,
        error: None,
    }
}

/// Worker threads for parsing: the machine's parallelism, at most 4 (beyond that the
/// consumer of the batches is the bottleneck, and each worker holds two blocks in flight).
pub(crate) fn parse_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(4)
}

#[cfg(test)]
mod tests {
    use super::{parse_block, Chunk, How, KeyPacking};

    /// The counts a block hands out (newlines for the next block's line numbers, entry
    /// lines for the `.mtx` entry count, the line of an error), which the scanned lines'
    /// loop derives from one count per line: checked against the text itself, with and
    /// without packed keys, over comments, blank lines, CRLF ends, lines the scanner leaves
    /// to the line parser, a last line with or without its newline, and an error.
    #[test]
    fn block_counts_follow_the_text() {
        let blocks: [&[u8]; 6] = [
            b"1 2 3 1.5\n2 2 2 2.5\n",
            b"1 2 3 1.5\n# note\n\n2 2 2 -2.5e1\r\n3 1 1 4\n3 3 3 0.5",
            b"# c\n1 2 3 1.5\r\n",
            b"\n\n",
            b"1 2 3 1.5\n2  2\t2 1\n# x",
            b"",
        ];
        let dims = [3u64, 3, 3];
        for packing in [None, KeyPacking::of(&dims, &[0, 1, 2], &[2, 2, 2])] {
            let how = How {
                scan: true,
                packing: packing.clone(),
                mirror: None,
            };
            for text in blocks {
                let parse = crate::tns::parse_line as super::LineParser;
                let p = parse_block(text, 3, Some(&dims), (parse, &how), Chunk::default());
                let newlines = text.iter().filter(|&&b| b == b'\n').count() as u64;
                let entries = match &packing {
                    Some(_) => p.chunk.pairs.len(),
                    None => p.chunk.vals.len(),
                };
                assert_eq!(p.newlines, newlines, "{:?}", String::from_utf8_lossy(text));
                assert_eq!(
                    p.lines,
                    entries as u64,
                    "{:?}",
                    String::from_utf8_lossy(text)
                );
                assert!(p.error.is_none());
            }
            // An error on line 4 (of 5): the entries before it, and its line.
            let text = b"1 2 3 1.5\n# c\n2 2 2 1\n9 9 9 1\n1 1 1 1\n";
            let parse = crate::tns::parse_line as super::LineParser;
            let p = parse_block(text, 3, Some(&dims), (parse, &how), Chunk::default());
            assert_eq!(p.lines, 2);
            assert_eq!(p.error.map(|e| e.0), Some(4));
            assert_eq!(p.newlines, 4);
        }
    }
}
