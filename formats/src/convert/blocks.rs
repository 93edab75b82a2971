//! Sorted text parsed *and packed* in parallel: the file is cut into blocks of bytes, each
//! block is read (positioned reads, so nothing is shared but the file descriptor), its lines
//! are parsed, and its entries are packed straight into a [`Piece`] of the level arrays — the
//! coordinates of the nodes it starts at every level, the positions where their children
//! start (counted from the block's own beginning), and the values, duplicates summed — on
//! the worker that parsed it. The consumer (`stitch`) joins the pieces in file order: only
//! the first entry of a block can continue a node of the previous block, so joining drops
//! at most one element per array and adds an offset to the positions.
//!
//! Workers take blocks in file order; a consumer credit per piece bounds the pieces in flight
//! (and recycles their buffers), and a piece that fills its share of the budget ends early,
//! the rest of its block packed as a block of its own before any later block, so memory
//! stays within the budget whatever the file size and however dense its lines (see
//! [`Blocks`]).

use std::fs::File;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};

use memmap2::{Mmap, MmapOptions};

use super::Duplicates;
use crate::error::SyntaxError;
use crate::tcs::LateCrcs;
use crate::value::{canonical_nan, Index};

/// Lines longer than this are rejected (as by the sequential readers).
pub(crate) const MAX_LINE: usize = 16 << 20;

/// How one line of a text format is parsed: coordinates (0-based, mode order) and the value,
/// `None` for a line without an entry (comment, blank), or the column and kind of an error.
pub(crate) trait LineSyntax: Sync {
    fn parse(&self, line: &[u8], coords: &mut [u64]) -> Result<Option<f64>, (u64, SyntaxError)>;

    /// True when data lines may take the one-pass scanner (`numbers::entry_line`: 1-based
    /// coordinates and a real value) before [`parse`](LineSyntax::parse).
    fn scans_entries(&self) -> bool {
        false
    }

    /// The declared bounds hold for `coords` (checked after a line is scanned in one pass).
    fn inside(&self, _coords: &[u64]) -> bool {
        true
    }

    /// The common shape of a data line at `text[at..]` parsed in one pass, without first
    /// finding the line's end: the value and where the next line begins, or `None` to have
    /// [`parse`](LineSyntax::parse) take the whole line (which also names the column of an
    /// error). It accepts only lines that `parse` accepts, with the same entry. Always inlined
    /// into the packing loop, with the scanner (see `numbers::entry_line`).
    #[inline(always)]
    fn entry<const R: usize>(
        &self,
        text: &[u8],
        at: usize,
        coords: &mut [u64; R],
    ) -> Option<(f64, usize)> {
        let found = self.entry_unbounded::<R>(text, at, coords)?;
        self.inside(coords).then_some(found)
    }

    /// [`entry`](LineSyntax::entry) without the check of the declared bounds, which the
    /// block packer makes once per block on its largest coordinates instead.
    #[inline(always)]
    fn entry_unbounded<const R: usize>(
        &self,
        text: &[u8],
        at: usize,
        coords: &mut [u64; R],
    ) -> Option<(f64, usize)> {
        if !self.scans_entries() {
            return None;
        }
        crate::numbers::entry_line::<R>(text, at, coords)
    }

    /// [`entry_unbounded`](LineSyntax::entry_unbounded) of a line that begins with the
    /// bytes of the first coordinate and separator of a line it took, that coordinate
    /// already in `coords[0]`, from `text[at..]` past them (see
    /// `numbers::entry_line_past_first`).
    #[inline(always)]
    fn entry_unbounded_past_first<const R: usize>(
        &self,
        text: &[u8],
        at: usize,
        coords: &mut [u64; R],
    ) -> Option<(f64, usize)> {
        if !self.scans_entries() {
            return None;
        }
        crate::numbers::entry_line_past_first::<R>(text, at, coords)
    }
}

/// What the packing of every block needs to know.
pub(crate) struct Plan {
    /// Mode of each level.
    pub order: Vec<usize>,
    /// Level 0 is dense (its children's positions are indexed by coordinate, not by node).
    pub dense_top: bool,
    /// The non-unique level that starts a run of singleton levels (the rank if none): from
    /// it down, every entry gets new nodes, and singleton levels have no `pos`.
    pub coo: usize,
    pub duplicates: Duplicates,
}

/// Why a block stopped before its end.
#[derive(Debug)]
pub(crate) enum Stop {
    /// A syntax error at a 1-based line of the block.
    Syntax {
        line: u64,
        column: u64,
        kind: SyntaxError,
    },
    /// An entry came before the one above it in storage order.
    Unsorted,
    /// A repeated entry (level-order coordinates) with `--duplicates error`.
    Duplicate(Vec<u64>),
    /// A coordinate too large for the coordinate width.
    Overflow(u64),
    Io(std::io::Error),
    /// A line longer than [`MAX_LINE`] starts in this block.
    LongLine,
}

/// The level arrays of one block, as if the block were the whole input.
#[derive(Default)]
pub(crate) struct Piece<I> {
    /// Per level: coordinates of the nodes the block starts (empty for a dense level).
    pub crd: Vec<Vec<I>>,
    /// Per level k >= 1 under a compressed parent: for every node the block starts at level
    /// k-1, where its children begin in `crd[k]` (counted from the block's beginning).
    pub pos: Vec<Vec<I>>,
    /// Under a dense level 0: (coordinate, where its children begin in `crd[1]`) per node.
    pub starts: Vec<(u64, I)>,
    /// One value per distinct entry, duplicates summed left to right (the last one may still
    /// grow in the next block).
    pub vals: Vec<f64>,
    /// The values of the first entry's duplicates, in order: the previous block's last entry
    /// may have the same coordinates, and then these are added to its value one by one.
    pub head: Vec<f64>,
    /// Level-order coordinates of the first and the last entry.
    pub first: Vec<u64>,
    pub last: Vec<u64>,
    /// Largest coordinate per level.
    pub max: Vec<u64>,
    /// Lines holding entries.
    pub entries: u64,
    /// Newlines in the piece's text (for line numbers of later pieces).
    pub newlines: u64,
    /// Bytes of text the piece took (its block's lines, or those up to where it stopped);
    /// entries for a key range of the external sort's merge.
    pub bytes: u64,
    /// The key of the job that goes on where this piece ends (see [`run`]): the next block,
    /// or the line this piece stopped before when it filled its share ([`Blocks::take`]).
    pub until: u64,
    /// True when the block's last line has no newline (the file's last line).
    pub open_last_line: bool,
    pub stop: Option<Stop>,
    /// Writes of this piece's arrays the consumer laid out, done by the worker that takes
    /// the piece next (so that the consumer, the serial part, only computes where).
    pub writes: Vec<Deferred>,
}

/// A part of a piece's array to be written at a byte offset of a file, and the slot of its
/// checksum.
#[derive(Debug)]
pub(crate) struct Deferred {
    pub file: usize,
    pub at: u64,
    pub crc_slot: usize,
    pub array: PieceArray,
    pub range: Range<usize>,
}

/// Which array of a piece.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PieceArray {
    Crd(usize),
    Pos(usize),
    Vals,
}

impl<I: Index> Piece<I> {
    /// Does the deferred writes into `files`, each with its checksum into `crcs` (hashed just
    /// before the write, so that the bytes come from memory once); the first failure is kept
    /// in `failed`.
    pub fn write_deferred(
        &mut self,
        files: &[File],
        crcs: &LateCrcs,
        failed: &Mutex<Option<std::io::Error>>,
    ) {
        for w in self.writes.drain(..) {
            let bytes: &[u8] = match w.array {
                PieceArray::Crd(k) => bytemuck::cast_slice(&self.crd[k][w.range]),
                PieceArray::Pos(k) => bytemuck::cast_slice(&self.pos[k][w.range]),
                PieceArray::Vals => bytemuck::cast_slice(&self.vals[w.range]),
            };
            crcs.hash(w.crc_slot, bytes);
            if let Err(e) = crate::piecewise::write_all_at(&files[w.file], bytes, w.at) {
                if let Ok(mut f) = failed.lock() {
                    f.get_or_insert(e);
                }
            }
        }
    }
}

/// Bytes of a piece's level arrays `arrays`, `vals` values (summed and the first entry's)
/// and `starts` start pairs, by their lengths: a piece's arrays are reused with the
/// capacities earlier pieces left (see [`Builder::limit`]), so a limit on capacities would
/// stop every later piece at once.
fn piece_bytes<'a, I: 'a>(
    arrays: impl Iterator<Item = &'a Vec<I>>,
    vals: usize,
    starts: usize,
) -> usize {
    let nodes: usize = arrays.map(Vec::len).sum();
    nodes * std::mem::size_of::<I>() + vals * 8 + starts * std::mem::size_of::<(u64, I)>()
}

impl<I> Piece<I> {
    /// Bytes of the piece's arrays (their lengths).
    fn filled(&self) -> usize {
        let arrays = self.crd.iter().chain(&self.pos);
        piece_bytes(arrays, self.vals.len() + self.head.len(), self.starts.len())
    }

    pub fn reset(&mut self, rank: usize) {
        self.writes.clear();
        for v in [&mut self.crd, &mut self.pos] {
            v.resize_with(rank, Vec::new);
            v.iter_mut().for_each(Vec::clear);
        }
        self.starts.clear();
        self.vals.clear();
        self.head.clear();
        self.first.clear();
        self.last.clear();
        self.max.clear();
        self.max.resize(rank, 0);
        self.entries = 0;
        self.newlines = 0;
        self.bytes = 0;
        self.until = 0;
        self.open_last_line = false;
        self.stop = None;
    }
}

/// Bytes of a piece per byte of text at most: the shortest line (one digit per field) holds
/// `rank + 1` fields in `2 (rank + 1)` bytes, and its entry packs into at most `rank`
/// coordinates, `rank - 1` positions (or a start pair) and a value. The sample that sizes
/// the blocks is cut for it ([`sample`]).
pub(crate) fn piece_bytes_per_text_byte(rank: usize, index_bytes: usize) -> usize {
    let entry = rank * index_bytes + rank.saturating_sub(1) * index_bytes + 8 + 16;
    entry.div_ceil(2 * (rank + 1))
}

/// The blocks of a file's data section `[start, len)`, claimed by the workers one at a time
/// ([`Blocks::take`]). A block and the piece packed from it share `share` bytes. Blocks are
/// sized by what the file's first lines take ([`sample`]), so that lines like them fill the
/// share; a piece that fills its share before its block ends stops at a line (see
/// [`Builder::limit`]), and the rest of its block becomes a block of its own, taken before
/// any new one. So the memory stays within the budget however dense the lines, and blocks
/// are as large as the lines allow: at a small budget, blocks sized for the densest
/// possible lines were a sixth of what typical lines need, and each block costs a mapping,
/// a piece's writes and a hand-over between threads. Every cut depends on the file, the
/// budget and the number of parse threads alone (not on timing), so the output's bytes do
/// too.
pub(crate) struct Blocks {
    pub file: File,
    pub start: u64,
    pub len: u64,
    /// Bytes of text and piece one block may take together.
    share: usize,
    /// Entries a piece holds at most (tests cut pieces of a few entries with it).
    entries: Option<u64>,
    /// Bytes of a new block.
    size: u64,
    claims: Mutex<Claims>,
}

/// What [`Blocks::take`] hands out: the lines that start in `[lo, hi)` of the file. `lo` is
/// a line start when `at_line` (the first block, or the rest of a block whose piece filled
/// up); otherwise the lines begin after the first newline from `lo - 1`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Block {
    lo: u64,
    hi: u64,
    at_line: bool,
}

struct Claims {
    /// Where the next new block begins.
    next: u64,
    /// Rests of blocks whose pieces filled up, not taken yet.
    rests: Vec<Block>,
}

/// How much one piece may hold (see [`Builder::limit`]): bytes of its arrays, and entries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit {
    pub bytes: usize,
    pub entries: Option<u64>,
}

impl Limit {
    /// No limit: the piece takes the whole text.
    pub const NONE: Limit = Limit {
        bytes: usize::MAX,
        entries: None,
    };
}

impl Blocks {
    /// The blocks of `file`'s `[start, len)` of `size` bytes each, taken by number
    /// ([`Blocks::nth`]): the parallel parser of the external sort, whose blocks are sized
    /// by what its parsed entries take (the block packer's are set up by [`sample`]).
    pub fn fixed(file: File, (start, len): (u64, u64), size: u64) -> Self {
        Blocks {
            file,
            start,
            len,
            share: usize::MAX,
            entries: None,
            size,
            claims: Mutex::new(Claims {
                next: start,
                rests: Vec::new(),
            }),
        }
    }

    /// How many blocks of [`Blocks::fixed`] there are.
    pub fn count(&self) -> usize {
        (self.len.saturating_sub(self.start)).div_ceil(self.size) as usize
    }

    /// Block `i` of [`Blocks::fixed`].
    pub fn nth(&self, i: usize) -> Block {
        let lo = self.start + i as u64 * self.size;
        let hi = (lo + self.size).min(self.len);
        Block {
            lo,
            hi,
            at_line: i == 0,
        }
    }

    /// The next block to pack and its key (its first byte, the order the consumer joins
    /// pieces in): the rest of a block that stopped early, lowest first, or else a new
    /// block; `None` when neither is left now (a piece in the works may still leave a rest).
    pub fn take(&self) -> Option<(u64, Block)> {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let lowest = (0..claims.rests.len()).min_by_key(|&i| claims.rests[i].lo);
        if let Some(i) = lowest {
            let rest = claims.rests.swap_remove(i);
            return Some((rest.lo, rest));
        }
        if claims.next >= self.len {
            return None;
        }
        let lo = claims.next;
        let hi = (lo + self.size).min(self.len);
        claims.next = hi;
        let at_line = lo == self.start;
        Some((lo, Block { lo, hi, at_line }))
    }

    /// Leaves `rest`, the rest of a block whose piece filled up, to [`Blocks::take`].
    fn leave(&self, rest: Block) {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        claims.rests.push(rest);
    }

    /// Maps the lines that start in `block` (the last one to its end): the mapping, the
    /// file offset it begins at, and where those lines lie in it; `Err(None)` for a line
    /// longer than [`MAX_LINE`]. Each block is a mapping of its own, unmapped once packed,
    /// so that the resident text stays within the blocks in flight however large the file.
    pub(crate) fn map(
        &self,
        block: &Block,
    ) -> Result<(Mapped, u64, Range<usize>), Option<std::io::Error>> {
        let Block { lo, hi, at_line } = *block;
        // One byte before the block says whether the block begins at a line start.
        let from = if at_line { lo } else { lo - 1 };
        let own = (hi - from) as usize;
        // A page past the block holds the end of its last line but for long lines; the
        // mapping counts against the budget as the block's text (see `pack_block`).
        let mut extra = 4u64 << 10;
        loop {
            let to = (hi + extra).min(self.len);
            let map = map_range(&self.file, from, to).map_err(Some)?;
            let begin = if at_line {
                0
            } else {
                // No newline in the block: no line starts in it.
                memchr::memchr(b'\n', &map[..own]).map_or(own, |j| j + 1)
            };
            if begin >= own {
                return Ok((map, from, own..own));
            }
            // The last line that starts in the block ends at the first newline from `hi - 1`.
            let end = match memchr::memchr(b'\n', &map[own - 1..]) {
                Some(j) => own + j,
                None if to == self.len => map.len(),
                None if extra as usize >= MAX_LINE => return Err(None),
                None => {
                    extra *= 4;
                    continue;
                }
            };
            // Lines of `MAX_LINE` bytes or more are refused, as by the sequential reader; only
            // the last can be (the others lie inside the block).
            let last =
                memchr::memrchr(b'\n', &map[begin..own - 1]).map_or(begin, |k| begin + k + 1);
            if map[last..end]
                .strip_suffix(b"\n")
                .unwrap_or(&map[last..end])
                .len()
                >= MAX_LINE
            {
                return Err(None);
            }
            return Ok((map, from, begin..end));
        }
    }
}

/// Bytes of input the block packer has mapped now, and the most at once since
/// [`reset_mapped_peak`]: mapped text is resident like the heap, and a test accounts it
/// against the memory budget beside the converter's allocations.
static MAPPED: AtomicUsize = AtomicUsize::new(0);
static MAPPED_PEAK: AtomicUsize = AtomicUsize::new(0);

/// The most input bytes mapped at once since the last [`reset_mapped_peak`].
pub fn mapped_peak() -> usize {
    MAPPED_PEAK.load(Ordering::Relaxed)
}

/// Starts a new measurement of [`mapped_peak`].
pub fn reset_mapped_peak() {
    MAPPED_PEAK.store(MAPPED.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// A mapped range of the input, counted in [`MAPPED`] while it lives.
pub(crate) struct Mapped(Mmap);

impl Mapped {
    fn new(map: Mmap) -> Self {
        let now = MAPPED.fetch_add(map.len(), Ordering::Relaxed) + map.len();
        MAPPED_PEAK.fetch_max(now, Ordering::Relaxed);
        Mapped(map)
    }
}

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        MAPPED.fetch_sub(self.0.len(), Ordering::Relaxed);
    }
}

/// Maps bytes `[from, to)` of `file` read-only. Not populated up front: the packer's first
/// touches map the pages that the kernel's fault-around brings (16 a fault), which costs less
/// than `MAP_POPULATE`'s walk of every page (perf, sorted `.tns`: the populate walk and the
/// page-table lock it holds against the other worker took ~5% of the CPU time).
fn map_range(file: &File, from: u64, to: u64) -> std::io::Result<Mapped> {
    // SAFETY: a mapping of a file is sound as long as the file does not change under it;
    // the input is a file the user asked to convert, which nothing in this process writes.
    // Another process truncating it meanwhile could fault the read (SIGBUS), as with any
    // tool that maps its input; this is the one place text is mapped.
    unsafe {
        MmapOptions::new()
            .offset(from)
            .len((to - from) as usize)
            .map(file)
            .map(Mapped::new)
    }
}

/// The blocks of sorted text `file`'s `[start, len)` for pieces of `entries` entries at most
/// (`None`: any) that take `share` bytes with their text: sized by packing the first lines
/// (as many as a block for the densest lines holds, see [`piece_bytes_per_text_byte`]).
pub(crate) fn sample<const R: usize, I: Index, S: LineSyntax>(
    file: File,
    data: (u64, u64),
    (share, entries): (usize, Option<u64>),
    syntax: &S,
    plan: &Plan,
) -> Blocks {
    const MAX: usize = 4 << 20;
    let worst = piece_bytes_per_text_byte(R, std::mem::size_of::<I>());
    let first = (share / (1 + worst)).clamp(4 << 10, MAX) as u64;
    let mut blocks = Blocks::fixed(file, data, first);
    // Piece bytes a text byte in the sample; the densest case when it cannot be read (the
    // run then reports the error) or need not be (blocks of the largest size fit anyway).
    let mut ratio = worst as f64;
    let sampled = (first as usize) < MAX && entries.is_none();
    let text = sampled.then(|| blocks.map(&blocks.nth(0)));
    if let Some(Ok((text, _, lines))) = text {
        let mut piece = Piece::<I>::default();
        pack::<R, I, S>(&text[lines.clone()], syntax, plan, Limit::NONE, &mut piece);
        if piece.stop.is_none() && lines.len() >= 1 << 10 {
            ratio = piece.filled() as f64 / lines.len() as f64;
        }
    }
    // The text and a quarter more than the sample's piece for it within the share; a third
    // of the share at least left to the piece.
    let size = share as f64 / (1.0 + (1.25 * ratio).max(0.5));
    blocks.size = match entries {
        Some(_) => 4 << 10,
        None => (size as usize).clamp(4 << 10, MAX) as u64 & !4095,
    };
    (blocks.share, blocks.entries) = (share, entries);
    blocks
}

/// The piece of `block` of `blocks`: its lines parsed and packed within the block's share
/// (see [`Blocks`]); a piece that fills up leaves the rest of its block to be taken next.
pub(crate) fn pack_block<const R: usize, I: Index, S: LineSyntax>(
    blocks: &Blocks,
    syntax: &S,
    plan: &Plan,
    block: Block,
    piece: &mut Piece<I>,
) {
    match blocks.map(&block) {
        Ok((text, from, lines)) => {
            // The share less the text mapped, but a quarter of it at least: a line much longer
            // than the block (mapped whole) would leave nothing, and cut a piece at every
            // repeat, each rest mapping that line again.
            let limit = Limit {
                bytes: blocks
                    .share
                    .saturating_sub(text.len())
                    .max(blocks.share / 4),
                entries: blocks.entries,
            };
            let rest = pack::<R, I, S>(&text[lines.clone()], syntax, plan, limit, piece);
            piece.bytes = rest.unwrap_or(lines.len()) as u64;
            piece.until = match rest {
                Some(at) => {
                    let lo = from + (lines.start + at) as u64;
                    // Before the piece is handed on: the credit it frees takes the rest.
                    blocks.leave(Block {
                        lo,
                        hi: block.hi,
                        at_line: true,
                    });
                    lo
                }
                None => block.hi,
            };
        }
        Err(e) => {
            piece.reset(R);
            piece.stop = Some(e.map_or(Stop::LongLine, Stop::Io));
            piece.until = block.hi;
        }
    }
}

/// Jobs `0..n` in order for [`run`], each keyed by its number (the piece of job `j` sets
/// [`Piece::until`] to `j + 1`).
pub(crate) fn numbered(n: usize) -> impl Fn() -> Option<(u64, usize)> + Sync {
    let next = AtomicUsize::new(0);
    move || {
        let j = next.fetch_add(1, Ordering::Relaxed);
        (j < n).then_some((j as u64, j))
    }
}

/// Runs `threads` workers over jobs (text blocks, or key ranges of the external sort's runs)
/// that `take` hands out with their keys, each filling a piece (`fill(job, piece)`), and
/// hands the pieces to `consume` in key order from `keys.start`: after the piece of key `k`
/// comes the piece whose key is its `until`, until `keys.end`. At most `in_flight` pieces
/// exist at once. `consume` returns false to stop early.
///
/// A job may add a job (the rest of a text block, see [`Blocks`]) that `take` hands out
/// before any other, as long as it does so before its piece is handed on: the consumer
/// then frees the credit that takes it, so the piece the consumer waits for is always
/// being filled or about to be.
pub(crate) fn run<I: Index, J, E>(
    keys: Range<u64>,
    (threads, in_flight): (usize, usize),
    before_reuse: &(dyn Fn(&mut Piece<I>) + Sync),
    take: &(dyn Fn() -> Option<(u64, J)> + Sync),
    fill: &(dyn Fn(J, &mut Piece<I>) + Sync),
    mut consume: impl FnMut(&mut Piece<I>) -> Result<bool, E>,
) -> Result<(), E> {
    let stop = AtomicBool::new(false);
    let in_flight = in_flight.max(1);
    // A credit carries a piece to reuse (or none yet).
    let (credit_tx, credit_rx) = mpsc::sync_channel::<Piece<I>>(in_flight);
    for _ in 0..in_flight {
        credit_tx
            .send(Piece::default())
            .expect("room for every credit");
    }
    let credit_rx = Mutex::new(credit_rx);
    let (done_tx, done_rx) = mpsc::channel::<(u64, Piece<I>)>();
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, in_flight) {
            let done_tx = done_tx.clone();
            let (stop, credit_rx) = (&stop, &credit_rx);
            scope.spawn(move || loop {
                let credit = credit_rx.lock().map(|rx| rx.recv());
                let Ok(Ok(mut piece)) = credit else { return };
                before_reuse(&mut piece);
                let job = match stop.load(Ordering::Relaxed) {
                    true => None,
                    false => take(),
                };
                let Some((key, job)) = job else {
                    // No job now (only near the end: new blocks are left until then): keep
                    // taking the pieces the consumer hands back, so that the last ones'
                    // deferred writes run on the workers in parallel rather than serially
                    // after them; the channel closes when the consumer is done. This credit is
                    // dropped; a rest added later is taken with the credit its piece frees.
                    continue;
                };
                fill(job, &mut piece);
                if done_tx.send((key, piece)).is_err() {
                    return;
                }
            });
        }
        drop(done_tx);
        let mut waiting = std::collections::BTreeMap::new();
        let mut result = Ok(());
        let mut want = keys.start;
        'blocks: while want < keys.end {
            let mut piece = loop {
                if let Some(p) = waiting.remove(&want) {
                    break p;
                }
                match done_rx.recv() {
                    Ok((k, p)) => {
                        let before = waiting.insert(k, p);
                        assert!(before.is_none(), "two pieces of key {k}");
                    }
                    Err(_) => break 'blocks,
                }
            };
            // A piece that did not move the key on would leave the consumer waiting for
            // nothing: a bug, said at once.
            assert!(piece.until > want, "a piece ends past its key");
            want = piece.until;
            match consume(&mut piece) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            let _ = credit_tx.send(piece);
        }
        // Workers waiting for a credit take those left and then see the channel close; those
        // working finish their block, find `stop` set and do the same.
        stop.store(true, Ordering::Relaxed);
        drop(credit_tx);
        drop(done_rx);
        result
    })?;
    // Pieces left when the workers stopped early (their last block no longer wanted) still
    // hold their deferred writes.
    if let Ok(rx) = credit_rx.into_inner() {
        for mut piece in rx.try_iter() {
            before_reuse(&mut piece);
        }
    }
    Ok(())
}

/// Parses the lines of `text` and packs their entries into `piece`.
/// Where it stopped when the piece filled up (`limit`) before the text's end.
fn pack<const R: usize, I: Index, S: LineSyntax>(
    text: &[u8],
    syntax: &S,
    plan: &Plan,
    limit: Limit,
    piece: &mut Piece<I>,
) -> Option<usize> {
    // Levels in mode order (the common case) need no permutation of each entry's key.
    let in_order = plan.order.iter().enumerate().all(|(k, &m)| k == m);
    let rest = if in_order {
        pack_lines::<R, I, S, true, false, true>(text, syntax, plan, limit, piece)
    } else {
        pack_lines::<R, I, S, false, false, true>(text, syntax, plan, limit, piece)
    };
    // The declared bounds hold for every entry when they hold for the largest coordinates of
    // each mode: one check per block instead of one per line. When they do not (or a
    // coordinate overflowed the width, which declared bounds that fit it rule out as well),
    // the block is packed again checking each line, which stops at the first bad line with
    // the error the sequential parser gives, before any later stop.
    let mut largest = [0u64; R];
    for (k, &m) in plan.order.iter().enumerate() {
        largest[m] = piece.max[k];
    }
    let overflow = matches!(piece.stop, Some(Stop::Overflow(_)));
    if piece.entries > 0 && (overflow || !syntax.inside(&largest)) {
        // The same lines up to the same point, or a stop before it.
        return if in_order {
            pack_lines::<R, I, S, true, true, true>(text, syntax, plan, limit, piece)
        } else {
            pack_lines::<R, I, S, false, true, true>(text, syntax, plan, limit, piece)
        };
    }
    rest
}

/// [`pack`], for levels in mode order (`IN_ORDER`) or not, each line checked against the
/// declared bounds (`BOUNDED`) or not.
fn pack_lines<
    const R: usize,
    I: Index,
    S: LineSyntax,
    const IN_ORDER: bool,
    const BOUNDED: bool,
    const SAME_LEAD: bool,
>(
    text: &[u8],
    syntax: &S,
    plan: &Plan,
    limit: Limit,
    piece: &mut Piece<I>,
) -> Option<usize> {
    let mut order = [0usize; R];
    order.copy_from_slice(&plan.order);
    let mut coords = [0u64; R];
    let mut key = [0u64; R];
    let mut line_no = 0u64;
    let mut at = 0;
    let builder = Builder::<R, I>::new(std::mem::take(piece), plan);
    let mut builder = builder.limit(limit);
    let mut stop = None;
    while at < text.len() {
        if builder.full() {
            break;
        }
        if builder.runs() {
            // The common lines, many at a time: those the one-pass scanner takes, with
            // distinct entries in order. The builder hands back the entry it stopped at, if
            // it needs the general path; a line the scanner refuses is left to the loop below.
            // Every line the run takes is an entry it pushes or the one it gives back.
            let before = builder.piece.entries;
            // In mode order, a line that begins with the bytes of the line before's first
            // coordinate and the separator after it (`lead` of `lead_mask`, `lead_len` bytes;
            // no mask at a run's first line) has its first coordinate, which the key still
            // holds: only the rest of the line is scanned. In sorted text the first
            // coordinate changes least often.
            let (mut lead, mut lead_mask, mut lead_len) = (0u64, 0u64, 0usize);
            let pending = builder.push_run(|key| {
                if at >= text.len() {
                    return None;
                }
                if IN_ORDER && !BOUNDED && R >= 2 && SAME_LEAD {
                    let word = text
                        .get(at..at + 8)
                        .map(|w| u64::from_le_bytes(w.try_into().expect("eight bytes")));
                    let Some(word) = word else {
                        let (v, next) = syntax.entry_unbounded::<R>(text, at, key)?;
                        at = next;
                        return Some(v);
                    };
                    let (v, next) = if lead_mask != 0 && (word ^ lead) & lead_mask == 0 {
                        syntax.entry_unbounded_past_first::<R>(text, at + lead_len, key)?
                    } else {
                        let found = syntax.entry_unbounded::<R>(text, at, key)?;
                        // The first coordinate's digits and the separator after them, when
                        // they lie within the word.
                        lead_len = crate::numbers::digits_in_word(word) + 1;
                        lead_mask = match lead_len {
                            2..=8 => u64::MAX >> (64 - 8 * lead_len),
                            _ => 0,
                        };
                        lead = word;
                        found
                    };
                    at = next;
                    return Some(v);
                }
                // Levels in mode order: the coordinates are scanned straight into the key (a
                // line refused half-way leaves it half-written, and the run ends unused).
                let into = if IN_ORDER { &mut *key } else { &mut coords };
                let (v, next) = if BOUNDED {
                    syntax.entry::<R>(text, at, into)
                } else {
                    syntax.entry_unbounded::<R>(text, at, into)
                }?;
                at = next;
                if !IN_ORDER {
                    for k in 0..R {
                        key[k] = coords[order[k]];
                    }
                }
                Some(v)
            });
            line_no += builder.piece.entries - before + u64::from(pending.is_some());
            if builder.full() {
                // Filled by the run, so no line is pending: a new piece takes the rest.
                continue;
            }
            if let Some((key, v)) = pending {
                if let Err(s) = builder.push(key, v) {
                    stop = Some(s);
                    break;
                }
                continue;
            }
            if at >= text.len() {
                break;
            }
        }
        line_no += 1;
        let scanned = if BOUNDED {
            syntax.entry::<R>(text, at, &mut coords)
        } else {
            syntax.entry_unbounded::<R>(text, at, &mut coords)
        };
        let v = match scanned {
            Some((v, next)) => {
                at = next;
                v
            }
            None => {
                let nl = memchr::memchr(b'\n', &text[at..]);
                let end = nl.map_or(text.len(), |j| at + j);
                let mut line = &text[at..end];
                at = end + 1;
                if let Some(l) = line.strip_suffix(b"\r") {
                    line = l;
                }
                match syntax.parse(line, &mut coords) {
                    Ok(Some(v)) => v,
                    Ok(None) => continue,
                    Err((column, kind)) => {
                        stop = Some(Stop::Syntax {
                            line: line_no,
                            column,
                            kind,
                        });
                        break;
                    }
                }
            }
        };
        if IN_ORDER {
            key = coords;
        } else {
            for k in 0..R {
                key[k] = coords[order[k]];
            }
        }
        if let Err(s) = builder.push(key, v) {
            stop = Some(s);
            break;
        }
    }
    let rest = (stop.is_none() && builder.full() && at < text.len()).then_some(at);
    *piece = builder.finish();
    // Every line ends with a newline but perhaps the file's last one.
    let to_end = stop.is_none() && rest.is_none();
    piece.open_last_line = to_end && !text.is_empty() && text.last() != Some(&b'\n');
    piece.newlines = line_no - u64::from(piece.open_last_line);
    piece.stop = stop;
    rest
}

/// Packs entries (level-order coordinates) that come in storage order into a piece.
pub(crate) struct Builder<const R: usize, I> {
    piece: Piece<I>,
    /// The level arrays as fixed-size arrays of their own, so that the loops over levels
    /// unroll and index without bounds checks; given back by [`Builder::finish`].
    crd: [Vec<I>; R],
    pos: [Vec<I>; R],
    /// The newest entries' nodes, not yet appended to the arrays (see [`Batch`]); only
    /// when `batched`.
    batch: Batch<R, I>,
    prev: [u64; R],
    have: bool,
    in_head: bool,
    dense_top: bool,
    coo: usize,
    /// No singleton levels (every level compressed, or a dense level 0 above compressed
    /// ones): distinct entries go through the batch.
    batched: bool,
    duplicates: Duplicates,
    /// The piece is full once its arrays hold more than `cap` bytes or it has `cap_entries`
    /// entries (see [`Builder::limit`]); `full` says the first is reached.
    cap: usize,
    cap_entries: u64,
    full: bool,
}

/// Entries in a batch before it is appended to the level arrays.
const BATCH: usize = 256;

/// The nodes of the last few distinct entries, per array, in rings of [`BATCH`] slots: the
/// node numbered `n` at level `k` (counted from the piece's beginning) lies in
/// `crd[k][n % BATCH]`, and the first child at level `k` of node `n` of level `k - 1` in
/// `pos[k][n % BATCH]`, so that the node counts alone place every write. An entry writes its
/// candidate node to every ring and moves each count on only where it really starts a node,
/// with no branch and no capacity check; every [`BATCH`] entries the rings are appended to
/// the arrays with a copy or two per array. Under a dense level 0, `crd[0]` and `pos[1]` hold
/// the piece's `starts`.
struct Batch<const R: usize, I> {
    crd: [[I; BATCH]; R],
    pos: [[I; BATCH]; R],
    vals: [f64; BATCH],
    /// Nodes per level so far, appended or not (the last level's count is the values').
    nodes: [usize; R],
}

impl<const R: usize, I: Index> Batch<R, I> {
    fn new() -> Self {
        let zero = I::default();
        Batch {
            crd: [[zero; BATCH]; R],
            pos: [[zero; BATCH]; R],
            vals: [0.0; BATCH],
            nodes: [0; R],
        }
    }

    /// Writes the nodes and value of a distinct entry new from level `f` down (no singleton
    /// levels: it is a new node at every level from `f` down, the first child of each new
    /// node above), with the node counts in `nodes`; true when the rings are to be appended.
    /// A slot written for a node the entry does not start is the next free one: at most
    /// `BATCH - 1` nodes wait in a ring when an entry comes, as each entry starts at most one
    /// node per ring and the rings are appended every `BATCH` entries.
    #[inline(always)]
    fn put(
        crd: &mut [[I; BATCH]; R],
        pos: &mut [[I; BATCH]; R],
        vals: &mut [f64; BATCH],
        nodes: &mut [usize; R],
        key: &[u64; R],
        f: usize,
        v: f64,
    ) -> bool {
        let m = BATCH - 1;
        vals[nodes[R - 1] & m] = v;
        // Bottom up, so that each level's count is read before the entry moves it on.
        for k in (0..R).rev() {
            if k > 0 {
                pos[k][nodes[k - 1] & m] = I::from_usize(nodes[k]);
            }
            crd[k][nodes[k] & m] = I::from_usize(key[k] as usize);
            nodes[k] += usize::from(k >= f);
        }
        nodes[R - 1] & m == 0
    }
}

/// Appends ring slots `from..to` (node numbers) to `out`.
fn append_ring<T: Copy>(out: &mut Vec<T>, ring: &[T; BATCH], from: usize, to: usize) {
    let (a, n) = (from % BATCH, to - from);
    let first = n.min(BATCH - a);
    out.extend_from_slice(&ring[a..a + first]);
    out.extend_from_slice(&ring[..n - first]);
}

impl<const R: usize, I: Index> Builder<R, I> {
    /// Starts filling `piece` (emptied first).
    pub fn new(mut piece: Piece<I>, plan: &Plan) -> Self {
        piece.reset(R);
        Builder {
            crd: std::array::from_fn(|k| std::mem::take(&mut piece.crd[k])),
            pos: std::array::from_fn(|k| std::mem::take(&mut piece.pos[k])),
            piece,
            batch: Batch::new(),
            prev: [0; R],
            have: false,
            in_head: true,
            dense_top: plan.dense_top,
            coo: plan.coo,
            batched: plan.coo >= R && R >= 2,
            duplicates: plan.duplicates,
            cap: usize::MAX,
            cap_entries: u64::MAX,
            full: false,
        }
    }

    /// Makes the piece full (see [`Builder::full`]) once its arrays hold more than
    /// `limit.bytes` bytes, checked every [`BATCH`] distinct entries and at every repeat (so
    /// a piece may pass it by one batch), or once it holds `limit.entries` entries (tests cut
    /// pieces of a few entries with it; it turns off [`Builder::push_run`], see
    /// [`Builder::runs`]). The arrays, reused from piece to piece, keep the
    /// capacities earlier pieces gave them, each as large as its largest (different pieces
    /// may peak in different arrays); when those add up to more than twice the limit, they
    /// are let go and grow again, so that they stay within about twice what one piece holds.
    pub fn limit(mut self, limit: Limit) -> Self {
        self.cap = limit.bytes;
        self.cap_entries = limit.entries.unwrap_or(u64::MAX);
        if self.capacities() > limit.bytes.saturating_mul(2) {
            self.crd
                .iter_mut()
                .chain(&mut self.pos)
                .for_each(|a| *a = Vec::new());
            let p = &mut self.piece;
            (p.vals, p.head, p.starts) = (Vec::new(), Vec::new(), Vec::new());
        }
        self
    }

    /// Heap bytes the arrays hold (their capacities).
    fn capacities(&self) -> usize {
        let (p, arrays) = (&self.piece, self.crd.iter().chain(&self.pos));
        let nodes: usize = arrays.map(Vec::capacity).sum();
        nodes * std::mem::size_of::<I>()
            + (p.vals.capacity() + p.head.capacity()) * 8
            + p.starts.capacity() * std::mem::size_of::<(u64, I)>()
    }

    /// True when the piece has reached its [`limit`](Builder::limit): the caller stops
    /// pushing, and a piece of its own takes the entries that follow.
    pub fn full(&self) -> bool {
        self.full || self.piece.entries >= self.cap_entries
    }

    /// Bytes of the level arrays and values so far.
    fn filled(&self) -> usize {
        let (p, arrays) = (&self.piece, self.crd.iter().chain(&self.pos));
        piece_bytes(arrays, p.vals.len() + p.head.len(), p.starts.len())
    }

    /// Adds an entry; an error when it comes out of order, repeats one that may not be
    /// repeated, or has a coordinate too large for the width. `v` must be canonical
    /// (`canonical_nan`): values parsed from text are; the external sort's sums canonicalize
    /// before they come. Inlined into the packing loops:
    /// the common entry (new from some level down, in order) takes no call and no copy of
    /// its key; the first entry and repeated ones take the out-of-line paths.
    #[inline(always)]
    pub fn push(&mut self, key: [u64; R], v: f64) -> Result<(), Stop> {
        self.piece.entries += 1;
        if !self.have {
            return self.push_first(key, v);
        }
        let f = (0..R).position(|k| key[k] != self.prev[k]).unwrap_or(R);
        if f == R {
            return self.push_repeat(key, v);
        }
        if key[f] < self.prev[f] {
            return Err(Stop::Unsorted);
        }
        self.in_head = false;
        self.push_new(key, f, v)
    }

    #[cold]
    #[inline(never)]
    fn push_first(&mut self, key: [u64; R], v: f64) -> Result<(), Stop> {
        self.piece.head.push(v);
        self.piece.first.extend_from_slice(&key);
        self.push_new(key, 0, v)
    }

    /// An entry with the coordinates of the one before: its value is added to that one's.
    #[inline(never)]
    fn push_repeat(&mut self, key: [u64; R], v: f64) -> Result<(), Stop> {
        if self.duplicates == Duplicates::Error {
            return Err(Stop::Duplicate(key.to_vec()));
        }
        self.flush();
        let last = self.piece.vals.last_mut().expect("an entry before");
        *last = canonical_nan(*last + v);
        if self.in_head {
            self.piece.head.push(v);
        }
        Ok(())
    }

    /// A distinct entry that differs from the one before from level `f` down.
    #[inline(always)]
    fn push_new(&mut self, key: [u64; R], f: usize, v: f64) -> Result<(), Stop> {
        // One test for the whole key: the widths' maxima are all ones (2^32 - 1, 2^64 - 1),
        // so the OR of the coordinates exceeds the maximum exactly when one of them does;
        // levels above `f` repeat the entry before, which passed already.
        const { assert!(I::MAX_U64 == u64::MAX || (I::MAX_U64 + 1).is_power_of_two()) };
        if key.iter().fold(0, |a, &c| a | c) > I::MAX_U64 {
            let c = key[f..].iter().copied().find(|&c| c > I::MAX_U64);
            return Err(Stop::Overflow(c.expect("a coordinate above the maximum")));
        }
        if self.batched {
            let b = &mut self.batch;
            if Batch::put(
                &mut b.crd,
                &mut b.pos,
                &mut b.vals,
                &mut b.nodes,
                &key,
                f,
                v,
            ) {
                self.flush();
            }
        } else {
            self.push_nodes(key, f);
            // Values come canonical (see `push`).
            self.piece.vals.push(v);
            if self.piece.vals.len().is_multiple_of(BATCH) {
                self.full = self.filled() > self.cap;
            }
        }
        self.prev = key;
        self.have = true;
        Ok(())
    }

    /// True when [`push_run`](Builder::push_run) may take the next entries: after the first
    /// entry, in a format without singleton levels.
    pub fn runs(&self) -> bool {
        // Not under a limit of entries (tests): counting them in this loop, the hottest,
        // cost the sorted packer 5-10% even behind a constant.
        self.batched && self.have && self.cap_entries == u64::MAX
    }

    /// Pushes the entries `next` fills in (returning their values) until it returns `None`
    /// or an entry needs more than new nodes from some level down (one that repeats the
    /// entry before, comes before it, or has a coordinate past the width): that entry is
    /// given back, not pushed, for [`push`](Builder::push). The node counts are a local
    /// here, so that the loop keeps them in registers. Only when [`runs`](Builder::runs).
    #[inline(always)]
    pub fn push_run(
        &mut self,
        mut next: impl FnMut(&mut [u64; R]) -> Option<f64>,
    ) -> Option<([u64; R], f64)> {
        debug_assert!(self.runs());
        let mut nodes = self.batch.nodes;
        let mut prev = self.prev;
        let mut key = [0u64; R];
        let mut pending = None;
        let before = nodes[R - 1];
        while let Some(v) = next(&mut key) {
            let f = (0..R).position(|k| key[k] != prev[k]).unwrap_or(R);
            if f == R || key[f] < prev[f] || key.iter().fold(0, |a, &c| a | c) > I::MAX_U64 {
                pending = Some((key, v));
                break;
            }
            let b = &mut self.batch;
            prev = key;
            if Batch::put(&mut b.crd, &mut b.pos, &mut b.vals, &mut nodes, &key, f, v) {
                b.nodes = nodes;
                self.flush();
                if self.full {
                    break;
                }
            }
        }
        self.batch.nodes = nodes;
        self.prev = prev;
        // Every distinct entry is a node of the last level.
        let pushed = (nodes[R - 1] - before) as u64;
        self.piece.entries += pushed;
        if pushed > 0 {
            self.in_head = false;
        }
        pending
    }

    /// Appends the nodes waiting in the batch to the arrays.
    #[inline(never)]
    fn flush(&mut self) {
        if !self.batched {
            return;
        }
        let b = &self.batch;
        for k in 0..R {
            let have = if k == 0 && self.dense_top {
                self.piece.starts.len()
            } else {
                self.crd[k].len()
            };
            if k == 0 && self.dense_top {
                for n in have..b.nodes[0] {
                    let slot = n % BATCH;
                    let start = (b.crd[0][slot].to_usize() as u64, b.pos[1][slot]);
                    self.piece.starts.push(start);
                }
                continue;
            }
            append_ring(&mut self.crd[k], &b.crd[k], have, b.nodes[k]);
            if k > 0 && !(k == 1 && self.dense_top) {
                let have = self.pos[k].len();
                append_ring(&mut self.pos[k], &b.pos[k], have, b.nodes[k - 1]);
            }
        }
        let have = self.piece.vals.len();
        append_ring(&mut self.piece.vals, &b.vals, have, b.nodes[R - 1]);
        self.full = self.filled() > self.cap;
    }

    /// The nodes of an entry new from level `f` down, under a dense level 0 or over
    /// singleton levels.
    #[inline(always)]
    fn push_nodes(&mut self, key: [u64; R], f: usize) {
        // A distinct entry is a new node at every level from the non-unique one down.
        let f = f.min(self.coo);
        for (k, &c) in key.iter().enumerate().skip(f) {
            if k == 0 && self.dense_top {
                let start = I::from_usize(self.crd[1].len());
                self.piece.starts.push((c, start));
                continue;
            }
            if k > f && k <= self.coo && !(k == 1 && self.dense_top) {
                self.pos[k].push(I::from_usize(self.crd[k].len()));
            }
            self.crd[k].push(I::from_usize(c as usize));
        }
    }

    /// The piece, with its arrays, last entry and maxima.
    pub fn finish(mut self) -> Piece<I> {
        self.flush();
        let mut piece = self.piece;
        for (k, (c, p)) in self.crd.iter_mut().zip(&mut self.pos).enumerate() {
            piece.crd[k] = std::mem::take(c);
            piece.pos[k] = std::mem::take(p);
        }
        if self.have {
            piece.last.extend_from_slice(&self.prev);
        }
        // Every entry's coordinate at a level is one of the level's nodes (a new node, or the
        // one before it repeats), so the largest node is the largest coordinate: one pass
        // over each array instead of a comparison per entry and level.
        for k in 0..R {
            piece.max[k] = if k == 0 && self.dense_top {
                piece.starts.iter().map(|&(c, _)| c).max().unwrap_or(0)
            } else {
                // Compared in the width itself (which vectorizes), widened once.
                let top = piece.crd[k].iter().fold(I::default(), |a, &c| a.max(c));
                top.to_usize() as u64
            };
        }
        piece
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Limit = Limit::NONE;

    fn plan(rank: usize, dense_top: bool) -> Plan {
        Plan {
            order: (0..rank).collect(),
            dense_top,
            coo: rank,
            duplicates: Duplicates::Sum,
        }
    }

    /// Sorted rank-3 text whose first `sparse` lines are long (padded) and the rest short,
    /// every entry new at every level, the value of line `n` being `n + 0.5`.
    fn sparse_then_dense(sparse: usize, lines: usize) -> Vec<u8> {
        let mut text = String::new();
        for n in 0..lines {
            let (a, b, c) = (n + 1, n % 7 + 1, n % 5 + 1);
            let pad = if n < sparse {
                " ".repeat(60)
            } else {
                String::new()
            };
            text += &format!("{a} {b} {c}{pad} {n}.5\n");
        }
        text.into_bytes()
    }

    /// A piece that fills its share stops at a line and the rest of its block makes the
    /// next piece: on text whose first lines are sparse (so blocks are sized for them) and
    /// the rest dense, at a tight and an ample share, the pieces in key order hold every
    /// line once, in order (their values and leaf coordinates joined are the whole text's),
    /// each within its share but for one batch; the tight share cuts blocks into more
    /// pieces than there are blocks, the ample one does not.
    #[test]
    fn pieces_that_fill_their_share_leave_the_rest_of_their_block_to_the_next() {
        let text = sparse_then_dense(3_000, 60_000);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tns");
        std::fs::write(&path, &text).unwrap();
        let (syntax, plan) = (crate::tns::TnsSyntax { dims: None }, plan(3, false));
        let mut whole = Piece::<u64>::default();
        pack::<3, u64, _>(&text, &syntax, &plan, NONE, &mut whole);
        for (share, cut) in [(96 << 10, true), (64 << 20, false)] {
            let file = File::open(&path).unwrap();
            let data = (0, text.len() as u64);
            let blocks = sample::<3, u64, _>(file, data, (share, None), &syntax, &plan);
            let fresh = text.len().div_ceil(blocks.size as usize);
            let (mut vals, mut leaves, mut pieces) = (Vec::new(), Vec::new(), 0);
            let (mut lines, mut bytes) = (0, 0);
            let fill = |b: Block, p: &mut Piece<u64>| {
                pack_block::<3, u64, _>(&blocks, &syntax, &plan, b, p)
            };
            let take = || blocks.take();
            run::<u64, _, ()>(data.0..data.1, (2, 4), &|_| {}, &take, &fill, |p| {
                assert!(p.stop.is_none(), "{:?}", p.stop);
                assert!(p.filled() <= share + BATCH * 48, "{} > {share}", p.filled());
                vals.extend_from_slice(&p.vals);
                leaves.extend_from_slice(&p.crd[2]);
                (lines, bytes, pieces) = (lines + p.newlines, bytes + p.bytes, pieces + 1);
                Ok(true)
            })
            .unwrap();
            assert_eq!((lines, bytes), (60_000, text.len() as u64), "share {share}");
            assert_eq!(vals, whole.vals, "share {share}");
            assert_eq!(leaves, whole.crd[2], "share {share}");
            assert_eq!(
                pieces > fresh,
                cut,
                "share {share}: {pieces} pieces, {fresh} blocks"
            );
        }
    }

    fn plan_coo(rank: usize, coo: usize) -> Plan {
        Plan {
            coo,
            ..plan(rank, false)
        }
    }

    /// A piece of a format with singleton levels (the builder without batches) fills up by
    /// its distinct entries even when every other line repeats the one before (every 256th
    /// entry then a repeat), and the first entry's repeats (its `head`) count too.
    #[test]
    fn repeated_entries_fill_a_piece_up_like_distinct_ones() {
        let limit = Limit {
            bytes: 1000,
            entries: None,
        };
        let mut b = Builder::<3, u32>::new(Piece::default(), &plan_coo(3, 0)).limit(limit);
        for i in 0..20_000u64 {
            b.push([i, i % 5, i % 3], 1.0).unwrap();
            b.push([i, i % 5, i % 3], 1.0).unwrap();
            if b.full() {
                break;
            }
        }
        assert!(b.full());
        assert!(b.finish().filled() < 1000 + BATCH * 48);
        let mut b = Builder::<3, u32>::new(Piece::default(), &plan_coo(3, 3)).limit(limit);
        for _ in 0..200_000 {
            b.push([1, 1, 1], 1.0).unwrap();
            if b.full() {
                break;
            }
        }
        assert!(b.full());
        assert!(b.finish().head.len() * 8 < 1000 + BATCH * 48);
    }

    /// `run` hands every piece on once, in key order, however its jobs leave rests (at
    /// random places, packed slowly or quickly) and at any count of threads and credits.
    #[test]
    fn run_hands_on_every_piece_in_key_order_whatever_rests_jobs_leave() {
        let (n, size) = (40u64, 10u64);
        for seed in 0..40u64 {
            for (threads, in_flight) in [(1, 1), (1, 2), (2, 1), (2, 2), (2, 4), (4, 3), (3, 8)] {
                // (next new block, rests not taken)
                let state = Mutex::new((0u64, Vec::<(u64, u64)>::new()));
                let take = || {
                    let mut s = state.lock().unwrap();
                    if let Some(i) = (0..s.1.len()).min_by_key(|&i| s.1[i].0) {
                        let r = s.1.swap_remove(i);
                        return Some((r.0, r));
                    }
                    let lo = s.0;
                    s.0 += size;
                    (lo < n * size).then_some((lo, (lo, lo + size)))
                };
                let fill = |(lo, hi): (u64, u64), p: &mut Piece<u32>| {
                    p.reset(1);
                    let mut x = seed ^ lo.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    x ^= x >> 29;
                    if x % 7 == 0 {
                        std::thread::sleep(std::time::Duration::from_micros(x % 300));
                    }
                    let cut = hi - lo > 1 && x % 3 == 0;
                    let end = if cut { lo + 1 + x % (hi - lo - 1) } else { hi };
                    if end < hi {
                        state.lock().unwrap().1.push((end, hi));
                    }
                    (p.bytes, p.until) = (lo, end);
                };
                let mut at = 0;
                run::<u32, _, ()>(
                    0..n * size,
                    (threads, in_flight),
                    &|_| {},
                    &take,
                    &fill,
                    |p| {
                        assert_eq!(p.bytes, at, "seed {seed}, {threads} threads, {in_flight}");
                        at = p.until;
                        Ok(true)
                    },
                )
                .unwrap();
                assert_eq!(at, n * size);
            }
        }
    }

    /// A coordinate too large for 32 bits stops the block with that coordinate, at the
    /// first entry or at a later one whichever level it is on; 64 bits take it.
    #[test]
    fn coordinates_past_the_width_stop_the_block() {
        let big = 1u64 << 32;
        for bad in [[big, 0, 0], [0, big, 1], [0, 0, big], [0, 1, big]] {
            for first in [true, false] {
                let mut b = Builder::<3, u32>::new(Piece::default(), &plan(3, false));
                if !first {
                    b.push([0, 0, 0], 1.0).unwrap();
                }
                match b.push(bad, 2.0) {
                    Err(Stop::Overflow(c)) => assert_eq!(c, big, "{bad:?}"),
                    other => panic!("{bad:?}: {other:?}"),
                }
            }
            let mut b = Builder::<3, u64>::new(Piece::default(), &plan(3, false));
            b.push([0, 0, 0], 1.0).unwrap();
            b.push(bad, 2.0).unwrap();
        }
    }

    /// Keys in storage order, with repeats and steps at every level, deterministic.
    fn sorted_keys(n: usize, seed: u64) -> Vec<[u64; 3]> {
        let mut x = seed;
        let mut key = [0u64; 3];
        let mut keys = vec![key];
        while keys.len() < n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Mostly steps at the last level (long runs of one node above), some at the
            // middle and top levels, some repeats.
            match (x >> 33) % 16 {
                0 => {}
                1 => key = [key[0] + 1 + (x >> 60), x >> 61, (x >> 50) % 7],
                2..=4 => key = [key[0], key[1] + 1, (x >> 40) % 5],
                _ => key[2] += 1 + (x >> 62),
            }
            keys.push(key);
        }
        keys
    }

    /// The piece a builder makes from `keys`: through `push_run` where it may (the batch
    /// of node rings) or through `push` alone (the arrays appended to directly).
    fn build(keys: &[[u64; 3]], dense_top: bool, runs: bool) -> Piece<u32> {
        build_of::<3, u32>(keys, dense_top, runs)
    }

    /// The batch of node rings makes the arrays that pushing each node makes, over many
    /// batches, with repeats (which append the rings early, mid-batch) and steps at every
    /// level, under a compressed or a dense top level.
    #[test]
    fn batched_nodes_make_the_arrays_of_single_pushes() {
        for (n, seed) in [(1, 1), (255, 2), (256, 3), (257, 4), (5000, 5), (20_000, 6)] {
            let keys = sorted_keys(n, seed);
            for dense_top in [false, true] {
                let (a, b) = (
                    build(&keys, dense_top, true),
                    build(&keys, dense_top, false),
                );
                let what = format!("{n} entries, dense top {dense_top}");
                assert_eq!(a.crd, b.crd, "{what}");
                assert_eq!(a.pos, b.pos, "{what}");
                assert_eq!(a.starts, b.starts, "{what}");
                assert_eq!(a.vals, b.vals, "{what}");
                assert_eq!(a.head, b.head, "{what}");
                assert_eq!((&a.first, &a.last, &a.max), (&b.first, &b.last, &b.max));
                assert_eq!(a.entries, n as u64, "{what}");
                assert_eq!(b.entries, n as u64, "{what}");
            }
        }
    }

    /// Keys of rank `R` in storage order, deterministic: steps at every level (a new node
    /// at level 0 every ~3 entries, as the rows of a sorted `.mtx`), repeats, and
    /// coordinates up to `top` (so that those of 32 bits take their highest bits).
    fn sorted_keys_of<const R: usize>(n: usize, seed: u64, top: u64) -> Vec<[u64; R]> {
        let mut x = seed;
        let mut key = [0u64; R];
        let mut keys = vec![key];
        while keys.len() < n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let level = match (x >> 33) % 8 {
                0 => None,
                1..=3 => Some(0),
                r => Some(r as usize % R),
            };
            if let Some(k) = level {
                let room = top - key[k];
                if room == 0 {
                    continue;
                }
                key[k] += 1 + (x >> 40) % room.min(1 << 20);
                if (x >> 61) == 0 {
                    // Now and then a jump to the width's top.
                    key[k] = top - (x >> 50) % ((top - key[k]).min(2) + 1);
                }
                key[k + 1..].fill(0);
            }
            keys.push(key);
        }
        keys
    }

    /// [`build`] for keys of rank `R` and width `I`.
    fn build_of<const R: usize, I: Index>(
        keys: &[[u64; R]],
        dense_top: bool,
        runs: bool,
    ) -> Piece<I> {
        let mut b = Builder::<R, I>::new(Piece::default(), &plan(R, dense_top));
        b.batched = runs && R >= 2;
        let mut i = 0;
        while i < keys.len() {
            if b.runs() {
                let pending = b.push_run(|key| {
                    *key = *keys.get(i)?;
                    i += 1;
                    Some(i as f64)
                });
                if let Some((key, v)) = pending {
                    b.push(key, v).unwrap();
                }
            } else {
                i += 1;
                b.push(keys[i - 1], i as f64).unwrap();
            }
        }
        b.finish()
    }

    /// Runs of entries (`push_run`) make the arrays that pushing each entry makes, at ranks
    /// 2 to 4 and both widths, with new nodes at level 0 every few entries (as the rows of
    /// a sorted `.mtx`) and coordinates up to the width's top.
    #[test]
    fn runs_make_the_arrays_of_single_pushes_at_every_rank_and_width() {
        fn check<const R: usize, I: Index>(top: u64) {
            for (n, seed) in [(2, 1), (300, 2), (5000, 3), (20_000, 4)] {
                let keys = sorted_keys_of::<R>(n, seed, top);
                let (a, b) = (
                    build_of::<R, I>(&keys, false, true),
                    build_of::<R, I>(&keys, false, false),
                );
                let what = format!("rank {R}, {} bits, {n} entries, top {top}", I::BITS);
                assert_eq!(a.crd, b.crd, "{what}");
                assert_eq!(a.pos, b.pos, "{what}");
                assert_eq!(a.vals, b.vals, "{what}");
                assert_eq!(a.head, b.head, "{what}");
                assert_eq!((&a.first, &a.last, &a.max), (&b.first, &b.last, &b.max));
                assert_eq!((a.entries, b.entries), (n as u64, n as u64), "{what}");
            }
        }
        for top in [7, 4_000_000, u64::from(u32::MAX)] {
            check::<2, u32>(top);
            check::<3, u32>(top);
            check::<4, u32>(top);
            check::<2, u64>(top);
        }
        check::<2, u64>(u64::MAX);
        check::<4, u64>(u64::MAX);
    }

    /// A run gives back, unpushed, the entry with a coordinate past 32 bits (at either
    /// level), one that repeats the entry before and one that comes before it; `push` then
    /// says what is wrong. (Fails with `push_run`'s check of the width removed: checked.)
    #[test]
    fn a_run_stops_at_a_coordinate_past_the_width_a_repeat_or_a_step_back() {
        let big = 1u64 << 32;
        for (bad, want) in [
            ([3, big], "Overflow"),
            ([4, big - 1 + big], "Overflow"),
            ([big, 0], "Overflow"),
            ([3, 6], "Duplicate"),
            ([3, 5], "Unsorted"),
            ([2, 9], "Unsorted"),
        ] {
            let mut plan = plan(2, false);
            plan.duplicates = Duplicates::Error;
            let mut b = Builder::<2, u32>::new(Piece::default(), &plan);
            b.push([3, 5], 1.0).unwrap();
            let mut keys = [[3, 6], bad, [9, 9]].into_iter();
            let pending = b.push_run(|key| {
                *key = keys.next()?;
                Some(2.0)
            });
            assert_eq!(pending, Some((bad, 2.0)), "{bad:?}");
            assert_eq!(b.piece.entries, 2, "{bad:?}");
            let stop = b.push(bad, 2.0).expect_err("a bad entry");
            assert!(format!("{stop:?}").starts_with(want), "{bad:?}: {stop:?}");
        }
    }

    /// Sorted text of rank `R` with first coordinates repeated over many lines, in the
    /// shapes the one-pass scanner takes and some it refuses, deterministic: separators of
    /// spaces and tabs, first coordinates that are prefixes of the next one's digits ("12 "
    /// then "123 "), of 1 to 9 digits, repeated entries, comments, CRLF, and (when `bad`) a
    /// line that begins like the one before but breaks later.
    fn lead_text<const R: usize>(lines: usize, seed: u64, bad: bool) -> Vec<u8> {
        let mut x = seed;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let mut key = [1u64; R];
        let mut s = String::new();
        for n in 0..lines {
            match next(64) {
                // A first coordinate whose digits begin with the last one's.
                0 if key[0] < 100_000_000 => {
                    key[0] = key[0] * 10 + next(10);
                    key[1..].fill(1);
                }
                0 | 1 => {
                    key[0] += 1 + next(3) * 1000;
                    key[1..].fill(1);
                }
                2 => key[0] += 1,
                3 => {}
                4 => s.push_str("# comment\n"),
                _ => key[R - 1] += 1 + next(3),
            }
            for (k, c) in key.iter().enumerate() {
                let sep = match (k, next(8)) {
                    (0, 0) => "\t",
                    (_, 1) => "  ",
                    (_, 2) => " \t",
                    _ => " ",
                };
                s.push_str(&format!("{c}{sep}"));
            }
            let end = if next(16) == 0 { "\r\n" } else { "\n" };
            if bad && n == lines / 2 {
                s.push_str(&format!("x{}{end}", next(100)));
            } else {
                s.push_str(&format!("{}.{}{end}", next(100), next(1000)));
            }
        }
        s.into_bytes()
    }

    /// The lines that begin with the line before's first coordinate and separator, scanned
    /// past them (`SAME_LEAD`), make the piece that scanning every line whole makes: the same
    /// arrays, maxima, counts and stop (a syntax error on the same line), at ranks 2 to 4.
    #[test]
    fn lines_with_the_same_first_coordinate_pack_as_whole_lines() {
        fn check<const R: usize>(seed: u64) {
            for (lines, bad) in [(1, false), (40, false), (3000, false), (3000, true)] {
                let text = lead_text::<R>(lines, seed, bad);
                let syntax = crate::tns::TnsSyntax { dims: None };
                let plan = plan(R, false);
                let mut a = Piece::<u32>::default();
                pack_lines::<R, u32, _, true, false, true>(&text, &syntax, &plan, NONE, &mut a);
                let mut b = Piece::<u32>::default();
                pack_lines::<R, u32, _, true, false, false>(&text, &syntax, &plan, NONE, &mut b);
                let what = format!("rank {R}, {lines} lines, seed {seed}, bad {bad}");
                assert_eq!(a.crd, b.crd, "{what}");
                assert_eq!(a.pos, b.pos, "{what}");
                assert_eq!(a.vals, b.vals, "{what}");
                assert_eq!(a.head, b.head, "{what}");
                assert_eq!((&a.first, &a.last, &a.max), (&b.first, &b.last, &b.max));
                assert_eq!((a.entries, a.newlines), (b.entries, b.newlines), "{what}");
                assert_eq!(format!("{:?}", a.stop), format!("{:?}", b.stop), "{what}");
                assert_eq!(a.stop.is_some(), bad, "{what}: {:?}", a.stop);
                assert!(a.entries >= (lines as u64) / 2, "{what}: {}", a.entries);
            }
        }
        for seed in 1..4 {
            check::<2>(seed);
            check::<3>(seed);
            check::<4>(seed);
        }
    }

    /// The largest coordinate of each level, wherever its entry lies in the block, under a
    /// compressed or a dense top level.
    #[test]
    fn a_piece_knows_each_levels_largest_coordinate() {
        let keys = [[0, 7, 3], [0, 7, 9], [0, 8, 2], [4, 1, 5], [4, 2, 0]];
        for dense_top in [false, true] {
            let mut b = Builder::<3, u32>::new(Piece::default(), &plan(3, dense_top));
            for (i, k) in keys.iter().enumerate() {
                b.push(*k, i as f64).unwrap();
            }
            let piece = b.finish();
            assert_eq!(piece.max, [4, 8, 9], "dense top: {dense_top}");
            assert_eq!(piece.last, [4, 2, 0]);
        }
    }
}
