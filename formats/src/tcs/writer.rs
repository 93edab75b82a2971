//! Writing `.tcs` files: arrays streamed sequentially or written in pieces at computed
//! offsets, checksums, then the header; the file appears only when complete.

use std::collections::VecDeque;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use super::header::{Extent, LevelInfo, ModeInfo, TcsHeader};
use super::{align_up, TcsError};
use crate::atomic::AtomicFile;
use crate::error::{Error, Result};
use crate::pack::Sink;
use crate::tensor::{Level, Tensor};
use crate::value::{Index, Value};

/// Bytes buffered per array by an [`ArrayWriter`] before a positioned write.
const WRITE_BUFFER: usize = 1 << 20;

/// A `.tcs` file being written: laid out by its header, filled array by array, and renamed
/// into place by [`finish`](TcsWriter::finish).
pub struct TcsWriter {
    file: AtomicFile,
    header: TcsHeader,
    /// Checksums of arrays written whole by an [`ArrayWriter`]; others are computed at finish.
    crcs: Mutex<Vec<Option<u32>>>,
}

impl TcsWriter {
    /// Whether finishing syncs the file to disk before renaming it ([`AtomicFile::set_sync`]).
    pub fn set_sync(&mut self, on: bool) {
        self.file.set_sync(on);
    }

    /// Creates the temporary file, sized to `header.file_len`.
    pub fn create(path: &Path, header: TcsHeader) -> Result<Self> {
        let file = AtomicFile::create(path)?;
        crate::retry_interrupted(|| file.file().set_len(header.file_len))
            .map_err(|e| Error::io(path, e))?;
        let crcs = Mutex::new(vec![None; header.arrays.len()]);
        Ok(TcsWriter { file, header, crcs })
    }

    /// The header the file is laid out by.
    pub fn header(&self) -> &TcsHeader {
        &self.header
    }

    /// A sequential, buffered writer of array number `array` from its first element.
    pub fn array_writer<T: bytemuck::Pod>(&self, array: usize) -> Result<ArrayWriter<'_, T>> {
        let a = self.array(array, std::mem::size_of::<T>())?;
        Ok(ArrayWriter {
            writer: self,
            array,
            at: a.offset,
            end: a.offset + a.len,
            buf: Vec::with_capacity(WRITE_BUFFER),
            crc: crc32fast::Hasher::new(),
            _marker: std::marker::PhantomData,
        })
    }

    /// Writes `data` at element `elem_offset` of array number `array` (pieces may come in any
    /// order and from several threads).
    pub fn write_at<T: bytemuck::Pod>(
        &self,
        array: usize,
        elem_offset: u64,
        data: &[T],
    ) -> Result<()> {
        let size = std::mem::size_of::<T>() as u64;
        let a = self.array(array, size as usize)?;
        let end = elem_offset
            .checked_add(data.len() as u64)
            .and_then(|e| e.checked_mul(size));
        if end.is_none_or(|e| e > a.len) {
            return Err(self.misuse(format!(
                "piece at element {elem_offset} of length {} overruns {}",
                data.len(),
                a.name()
            )));
        }
        self.crcs.lock().expect("no panics while locked")[array] = None;
        let at = a.offset + elem_offset * size;
        crate::piecewise::write_all_at(self.file.file(), bytemuck::cast_slice(data), at)
            .map_err(|e| Error::io(self.file.target(), e))
    }

    fn array(&self, array: usize, elem_size: usize) -> Result<super::ArrayInfo> {
        let a = *self
            .header
            .arrays
            .get(array)
            .ok_or_else(|| self.misuse(format!("no array {array}")))?;
        let expected = match a.kind {
            super::ArrayKind::Vals => self.header.value_type.size(),
            _ => self.header.index_bits as usize / 8,
        };
        if expected != elem_size {
            return Err(self.misuse(format!(
                "{} has {expected}-byte elements, got {elem_size}-byte",
                a.name()
            )));
        }
        Ok(a)
    }

    fn misuse(&self, what: String) -> Error {
        Error::Unsupported {
            path: self.file.target().to_path_buf(),
            what,
        }
    }

    /// Copies whole arrays from temporary files (spools, each read from its start; in the
    /// kernel where the platform allows), recording the checksum each caller computed while
    /// writing its source. The copies are cut into segments shared out among `threads`
    /// threads, and each source is emptied (truncated: its pages freed) as soon as its last
    /// segment is copied, so that this last stage of a conversion, which would be serial,
    /// uses every core.
    pub fn copy_arrays_from(&self, sources: Vec<ArraySource>, threads: usize) -> Result<()> {
        let target = self.file.target();
        let mut segments = Vec::new();
        for src in sources {
            let a = *self
                .header
                .arrays
                .get(src.array)
                .ok_or_else(|| self.misuse(format!("no array {}", src.array)))?;
            let len = src.file.metadata().map_err(|e| Error::io(target, e))?.len();
            if len != a.len {
                return Err(self.misuse(format!(
                    "{} needs {} bytes, the source has {len}",
                    a.name(),
                    a.len
                )));
            }
            self.crcs.lock().expect("no panics while locked")[src.array] = Some(src.crc32);
            let file = std::sync::Arc::new(src.file);
            let mut at = 0;
            while at < len {
                let n = (len - at).min(COPY_SEGMENT);
                segments.push((file.clone(), at, a.offset + at, n));
                at += n;
            }
        }
        // Each source is dropped with its last segment, on the thread that copied it.
        let segments: Vec<_> = segments.into_iter().map(|s| Mutex::new(Some(s))).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let failed = Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..threads.clamp(1, segments.len().max(1)) {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(seg) = segments.get(i) else { return };
                    let seg = seg.lock().ok().and_then(|mut s| s.take());
                    let Some((src, from, to, len)) = seg else {
                        return;
                    };
                    let mut done = copy_range(&src, from, self.file.file(), to, len);
                    // The last segment of a source empties it.
                    if let (Ok(()), Some(src)) = (&done, std::sync::Arc::into_inner(src)) {
                        done = crate::retry_interrupted(|| src.set_len(0));
                    }
                    if let Err(e) = done {
                        if let Ok(mut f) = failed.lock() {
                            f.get_or_insert(e);
                        }
                        return;
                    }
                });
            }
        });
        match failed.into_inner().ok().flatten() {
            Some(e) => Err(Error::io(target, e)),
            None => Ok(()),
        }
    }

    /// Computes missing checksums, writes the header and renames the file into place.
    pub fn finish(mut self) -> Result<()> {
        let target = self.file.target().to_path_buf();
        let crcs = self.crcs.lock().expect("no panics while locked").clone();
        for (a, crc) in self.header.arrays.iter_mut().zip(crcs) {
            a.crc32 = match crc {
                Some(c) => c,
                None => crc_of_range(self.file.file(), a.offset, a.len)
                    .map_err(|e| Error::io(&target, e))?,
            };
        }
        let bytes = self.header.to_bytes();
        self.file
            .file()
            .write_all_at(&bytes, 0)
            .map_err(|e| Error::io(&target, e))?;
        self.file.commit()
    }
}

/// A segmented (version 3) `.tcs` file written by appending, for writers that learn the level
/// sizes only at the end (a streaming conversion): pieces of the arrays arrive in any
/// interleaving, each is given the next place in the data section (an extent of its array, or
/// the continuation of the last extent when that one is of the same array), and the header
/// with the extent table is written by [`finish`](Appender::finish). Reserving is serial (it
/// decides the order); the writes into reserved places may come from any thread, through
/// [`file`](Appender::file), and so may the checksums of the bytes they write
/// ([`reserve_unhashed`](Appender::reserve_unhashed)).
///
/// What it holds while appending grows by 8 bytes an extent and no more: each extent packed
/// in 8 bytes (`Extents`), and per array one running checksum into which the parts'
/// checksums are folded, in order, as they come in (`ArrayCrc`); only the parts after a
/// checksum not given yet wait, and with them the slots of [`LateCrcs`] not yet folded (in a
/// conversion, those of the pieces in flight). [`finish`](Appender::finish) then holds the
/// extents unpacked, 24 bytes each, for the header.
pub struct Appender {
    file: AtomicFile,
    header_len: u64,
    at: u64,
    extents: Extents,
    /// Per array, the checksum of its bytes so far.
    crcs: Vec<ArrayCrc>,
    late: LateCrcs,
    /// The array of each slot of `late` not folded yet, oldest first.
    owners: VecDeque<u8>,
    /// Where the next [`FlushBehind`] request is due (`None`: not asked for), and the
    /// thread, started at the first request (small files never start it).
    flush_at: Option<u64>,
    flush_step: u64,
    flusher: Option<FlushBehind>,
    /// The file's length allocated so far ahead of the appended bytes (see
    /// [`allocate_ahead`](Self::allocate_ahead)), and whether to keep doing so.
    allocated: u64,
    allocates: bool,
}

/// The checksum of a run of an array's bytes: computed when reserved, or by the writer of the
/// bytes into a slot of [`LateCrcs`].
enum CrcPart {
    Now(crc32fast::Hasher),
    Later { slot: usize, len: u64 },
}

/// The checksum of one array of an [`Appender`], folded as its parts' checksums come in.
/// Combining checksums depends on their order, so a part whose writer has not given its
/// checksum yet holds up the parts after it.
#[derive(Default)]
struct ArrayCrc {
    /// The checksum of the array's bytes before those of `pending`.
    done: crc32fast::Hasher,
    /// The parts after those, in order: empty, or a `Later` part first (whose checksum was
    /// not there when the parts before it were folded). Consecutive `Now` parts are one.
    pending: VecDeque<CrcPart>,
}

impl ArrayCrc {
    /// The next bytes, hashed now: folded at once unless parts before them are pending.
    fn update(&mut self, bytes: &[u8]) {
        match self.pending.back_mut() {
            None => self.done.update(bytes),
            Some(CrcPart::Now(h)) => h.update(bytes),
            Some(CrcPart::Later { .. }) => {
                let mut h = crc32fast::Hasher::new();
                h.update(bytes);
                self.pending.push_back(CrcPart::Now(h));
            }
        }
    }

    /// Folds the parts at the front of `pending` whose checksums are known (`landed` gives
    /// those of slots), up to the first one that is not.
    fn fold(&mut self, landed: impl Fn(usize) -> Option<u32>) {
        while let Some(part) = self.pending.front() {
            let h = match *part {
                CrcPart::Now(ref h) => h.clone(),
                CrcPart::Later { slot, len } => match landed(slot) {
                    Some(crc) => crc32fast::Hasher::new_with_initial_len(crc, len),
                    None => return,
                },
            };
            self.done.combine(&h);
            self.pending.pop_front();
        }
    }

    /// The array's checksum, its pending parts folded with the checksums in `slots`; `None`
    /// if one is missing.
    fn finish(mut self, slots: &Slots) -> Option<u32> {
        self.fold(|slot| slots.get(slot));
        self.pending.is_empty().then(|| self.done.finalize())
    }
}

/// Checksums of appended bytes that the threads writing them compute (see
/// [`Appender::reserve_unhashed`]), one slot per reservation: the serial appender only
/// combines them, and the bytes are read once, by the thread that writes them while they are
/// in its cache. The appender folds the checksums as they come in, oldest slot first, and
/// drops the slots it folded: only the slots from the oldest one still unhashed on are held
/// (their numbers keep increasing).
#[derive(Clone, Default)]
pub struct LateCrcs(std::sync::Arc<Mutex<Slots>>);

/// The slots of [`LateCrcs`] not folded yet.
#[derive(Default)]
struct Slots {
    /// Number of the first slot of `crcs` (those before it are folded).
    base: usize,
    crcs: VecDeque<Option<u32>>,
}

impl Slots {
    fn get(&self, slot: usize) -> Option<u32> {
        *self.crcs.get(slot.checked_sub(self.base)?)?
    }
}

/// The slot of a reservation of no bytes (nothing to hash).
const NO_SLOT: usize = usize::MAX;

impl LateCrcs {
    /// Records the checksum of `bytes`, exactly the bytes reserved as `slot`.
    pub fn hash(&self, slot: usize, bytes: &[u8]) {
        let crc = crc32fast::hash(bytes);
        let mut slots = self.lock();
        let base = slots.base;
        if let Some(s) = slot.checked_sub(base).and_then(|i| slots.crcs.get_mut(i)) {
            *s = Some(crc);
        }
    }

    /// The slots. No critical section can leave them half-changed (each is a single push,
    /// pop or store), so a lock poisoned by a panicking thread is taken as it is: a slot its
    /// writer never hashed still makes [`Appender::finish`] fail.
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new slot, not hashed yet.
    fn push(&self) -> usize {
        let mut slots = self.lock();
        slots.crcs.push_back(None);
        slots.base + slots.crcs.len() - 1
    }

    /// The oldest slot and its checksum, removed, if its writer gave the checksum.
    fn pop_landed(&self) -> Option<(usize, u32)> {
        let mut slots = self.lock();
        let crc = (*slots.crcs.front()?)?;
        slots.crcs.pop_front();
        slots.base += 1;
        Some((slots.base - 1, crc))
    }

    fn take(&self) -> Slots {
        std::mem::take(&mut *self.lock())
    }
}

/// Bits of a packed extent (see [`Extents`]) that hold its length; the array number has the
/// other 8 (an appender has at most 256 arrays, a file at most `2 MAX_RANK + 1` = 129).
const LEN_BITS: u32 = 56;
const MAX_EXTENT_LEN: u64 = (1 << LEN_BITS) - 1;
/// Most arrays an [`Appender`] holds: what the array numbers of [`Extents`] can tell apart.
const MAX_ARRAYS: usize = 1 << (64 - LEN_BITS);
/// Packed extents per chunk of [`Extents`] (32 KiB).
const EXTENT_CHUNK: usize = 4096;

/// The extents of an [`Appender`], 8 bytes each: the array number in the top bits, the length
/// in the low [`LEN_BITS`]. Their offsets need not be kept: the first extent lies at
/// `header_len` and each next one at the previous one's end aligned up to [`ALIGN`], as
/// [`Appender::place`] lays them out (and the format requires). In chunks of at most
/// [`EXTENT_CHUNK`], so that the list never holds much more than its size or copies itself
/// to grow.
///
/// [`ALIGN`]: super::ALIGN
#[derive(Default)]
struct Extents {
    chunks: Vec<Vec<u64>>,
}

impl Extents {
    fn push(&mut self, array: usize, len: u64) {
        assert!(
            len <= MAX_EXTENT_LEN,
            "an extent of {len} bytes (2^56 or more)"
        );
        debug_assert!(array < MAX_ARRAYS);
        let packed = (array as u64) << LEN_BITS | len;
        match self.chunks.last_mut() {
            Some(c) if c.len() < EXTENT_CHUNK => c.push(packed),
            _ => self.chunks.push(vec![packed]),
        }
    }

    /// Lengthens the last extent by `len` if it is one of array `array` (and stays within
    /// [`MAX_EXTENT_LEN`]); whether it did.
    fn extend_last(&mut self, array: usize, len: u64) -> bool {
        let Some(last) = self.chunks.last_mut().and_then(|c| c.last_mut()) else {
            return false;
        };
        match (*last & MAX_EXTENT_LEN).checked_add(len) {
            Some(n) if *last >> LEN_BITS == array as u64 && n <= MAX_EXTENT_LEN => {
                *last = *last & !MAX_EXTENT_LEN | n;
                true
            }
            _ => false,
        }
    }

    /// The extents with their offsets, the first at `header_len`, and where the last one
    /// ends; the packed chunks are freed as they are read.
    fn unpack(self, header_len: u64) -> (Vec<Extent>, u64) {
        let mut extents = Vec::with_capacity(self.chunks.iter().map(Vec::len).sum());
        let mut at = header_len;
        for chunk in self.chunks {
            for packed in chunk {
                let offset = align_up(at).expect("placed before");
                let len = packed & MAX_EXTENT_LEN;
                let array = (packed >> LEN_BITS) as u32;
                extents.push(Extent { array, offset, len });
                at = offset + len;
            }
        }
        (extents, at)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }
}

/// The least and the most an [`Appender`] allocates ahead of its appends at a time.
const MIN_AHEAD: u64 = 1 << 20;
const MAX_AHEAD: u64 = 64 << 20;

/// Bytes appended between two requests to the [`FlushBehind`] thread.
const FLUSH_STEP: u64 = 16 << 20;

/// Writes the appended data back to disk while the rest is still being produced: a thread of
/// its own calls `fdatasync` each time another [`FLUSH_STEP`] bytes were reserved, so that
/// the final `fsync` of [`AtomicFile::commit`] waits only for the last bytes instead of the
/// whole file (the disk and the producers' cores work at the same time; measured on the
/// conversion bench, that final `fsync` was a serial third of a sorted conversion's wall
/// time). Durability is unchanged: the file is still synced whole before it is renamed.
struct FlushBehind {
    /// A request to sync what was written so far; full while the thread is syncing, and then
    /// a request is simply skipped (the next step asks again).
    ask: std::sync::mpsc::SyncSender<()>,
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

impl FlushBehind {
    fn start(file: &std::fs::File) -> Option<Self> {
        // The same open file description: a write-back error that this thread's `fdatasync`
        // reports is not reported again to the final `fsync`, so the thread keeps it and
        // `finish` returns it.
        let file = file.try_clone().ok()?;
        let (ask, asked) = std::sync::mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("tcs-flush".into())
            .spawn(move || {
                for () in asked {
                    crate::retry_interrupted(|| file.sync_data())?;
                }
                Ok(())
            })
            .ok()?;
        Some(FlushBehind { ask, thread })
    }

    /// Waits for the thread; the first write-back error it met.
    fn stop(self) -> std::io::Result<()> {
        drop(self.ask);
        self.thread
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the flush thread panicked")))
    }
}

impl Appender {
    /// Creates the temporary file for a tensor of `rank` levels holding `arrays` arrays (the
    /// header's length depends on these alone).
    pub fn create(path: &Path, rank: usize, arrays: usize) -> Result<Self> {
        let header_len =
            super::header::header_len(rank, arrays).ok_or_else(|| Error::Unsupported {
                path: path.to_path_buf(),
                what: format!("a header for rank {rank}"),
            })?;
        if arrays > MAX_ARRAYS {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                what: format!("appending {arrays} arrays"),
            });
        }
        Ok(Appender {
            file: AtomicFile::create(path)?,
            header_len,
            at: header_len,
            extents: Extents::default(),
            crcs: (0..arrays).map(|_| ArrayCrc::default()).collect(),
            late: LateCrcs::default(),
            owners: VecDeque::new(),
            flush_at: None,
            flush_step: FLUSH_STEP,
            flusher: None,
            allocated: 0,
            allocates: true,
        })
    }

    /// Whether the file is allocated ahead of the appends (on by default; tests compare).
    #[cfg(test)]
    pub(crate) fn set_allocate_ahead(&mut self, on: bool) {
        self.allocates = on;
    }

    /// Allocates the file's blocks ahead of the appended bytes (`fallocate`), as much again as
    /// was appended, from [`MIN_AHEAD`] to [`MAX_AHEAD`] at a time: the writes then fill
    /// allocated blocks instead of reserving each page's block as they come (ext4's delayed
    /// allocation), a third less system time per byte written (measured: 224 MiB in 1 MiB
    /// writes, 0.040 -> 0.025 s). The file grows ahead of the data; [`finish`](Self::finish)
    /// sets its final length, and the allocated zeros past the data are cut off. Only a hint:
    /// where the file system cannot allocate ahead (or has no room for the lead), the writes
    /// allocate as before.
    fn allocate_ahead(&mut self) {
        if !self.allocates || self.at <= self.allocated {
            return;
        }
        let to = self.at + self.at.clamp(MIN_AHEAD, MAX_AHEAD);
        let (file, from) = (self.file.file(), self.allocated);
        match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), from, to - from) {
            Ok(()) => self.allocated = to,
            Err(_) => self.allocates = false,
        }
    }

    /// Whether finishing syncs the file to disk before renaming it ([`AtomicFile::set_sync`]);
    /// without the sync there is nothing to write back early either.
    pub fn set_sync(&mut self, on: bool) {
        self.file.set_sync(on);
        if !on {
            self.flush_at = None;
        }
    }

    /// Writes the data back to disk while it is being appended (see [`FlushBehind`]), for
    /// files large enough that the final `fsync` would otherwise wait for all of it; nothing
    /// when the file is not synced.
    pub fn flush_behind(&mut self) {
        self.flush_behind_every(FLUSH_STEP);
    }

    /// [`flush_behind`](Self::flush_behind) every `step` bytes (tests take small steps).
    pub(crate) fn flush_behind_every(&mut self, step: u64) {
        if !self.file.syncs() {
            return;
        }
        self.flush_step = step.max(1);
        self.flush_at = Some(self.at + self.flush_step);
    }

    /// Asks the [`FlushBehind`] thread (started now if need be) for a sync when the data
    /// passed the next step; skipped while it is still syncing.
    fn flush_if_due(&mut self) {
        match self.flush_at {
            Some(due) if self.at >= due => {}
            _ => return,
        }
        self.flush_at = Some(self.at + self.flush_step);
        if self.flusher.is_none() {
            self.flusher = FlushBehind::start(self.file.file());
        }
        if let Some(f) = &self.flusher {
            let _ = f.ask.try_send(());
        }
    }

    /// The temporary file, for writes at the offsets [`reserve`](Self::reserve) returned.
    pub fn file(&self) -> &std::fs::File {
        self.file.file()
    }

    /// The final path.
    pub fn target(&self) -> &Path {
        self.file.target()
    }

    /// Takes the next place in the data section for `bytes`, the next bytes of array number
    /// `array`, and returns its file offset (the caller writes them there).
    pub fn reserve(&mut self, array: usize, bytes: &[u8]) -> u64 {
        if bytes.is_empty() {
            return self.at;
        }
        self.crcs[array].update(bytes);
        self.place(array, bytes.len() as u64)
    }

    /// [`reserve`](Self::reserve) for `len` bytes whose checksum the writer gives later, into
    /// the returned slot of [`late_crcs`](Self::late_crcs) (before [`finish`](Self::finish);
    /// for no bytes, a slot that takes nothing).
    pub fn reserve_unhashed(&mut self, array: usize, len: u64) -> (u64, usize) {
        if len == 0 {
            return (self.at, NO_SLOT);
        }
        let at = self.place(array, len);
        let slot = self.late.push();
        self.owners.push_back(array as u8);
        self.crcs[array]
            .pending
            .push_back(CrcPart::Later { slot, len });
        self.fold_landed();
        (at, slot)
    }

    /// Folds the checksums the writers gave for the oldest slots into their arrays' and drops
    /// those slots, up to the first slot not hashed yet: each slot once, so O(1) a slot.
    fn fold_landed(&mut self) {
        while let Some((slot, crc)) = self.late.pop_landed() {
            let array = self.owners.pop_front().expect("an array for every slot");
            // The oldest slot is its array's oldest pending part, first in its `pending`.
            let a = &mut self.crcs[array as usize];
            debug_assert!(
                matches!(a.pending.front(), Some(CrcPart::Later { slot: s, .. }) if *s == slot)
            );
            a.fold(|s| (s == slot).then_some(crc));
        }
    }

    /// The parts waiting for a checksum, over all arrays, the slots not folded yet and the
    /// extents.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> (usize, usize, usize) {
        let parts = self.crcs.iter().map(|c| c.pending.len()).sum();
        (parts, self.late.lock().crcs.len(), self.extents.len())
    }

    /// Where the writers of [`reserve_unhashed`](Self::reserve_unhashed) bytes put their
    /// checksums.
    pub fn late_crcs(&self) -> LateCrcs {
        self.late.clone()
    }

    /// The next `len` (> 0) bytes of array number `array`: their file offset. The last extent
    /// always ends at `at` (nothing else moves it), so one of the same array goes on.
    fn place(&mut self, array: usize, len: u64) -> u64 {
        if !self.extents.extend_last(array, len) {
            self.at = align_up(self.at).expect("a file shorter than 2^64 bytes");
            self.extents.push(array, len);
        }
        self.at += len;
        self.allocate_ahead();
        self.flush_if_due();
        self.at - len
    }

    /// Writes `data` as the next bytes of array number `array`, now.
    pub fn append<T: bytemuck::Pod>(&mut self, array: usize, data: &[T]) -> Result<()> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let at = self.reserve(array, bytes);
        crate::piecewise::write_all_at(self.file.file(), bytes, at)
            .map_err(|e| Error::io(self.file.target(), e))
    }

    /// Completes the file: `header` (laid out by [`TcsHeader::new`] from the final level
    /// sizes) takes the extents and checksums, then the extent table and the header are
    /// written and the file renamed into place. Fails if the appended bytes do not tile the
    /// arrays the header lays out. Returns the file's length.
    pub fn finish(mut self, mut header: TcsHeader) -> Result<u64> {
        let target = self.file.target().to_path_buf();
        if let Some(f) = self.flusher.take() {
            f.stop().map_err(|e| Error::io(&target, e))?;
        }
        let misuse = |what: String| Error::Unsupported {
            path: target.clone(),
            what,
        };
        if header.header_len != self.header_len || header.arrays.len() != self.crcs.len() {
            return Err(misuse(
                "the header does not match the appended arrays".into(),
            ));
        }
        let slots = self.late.take();
        for (a, crc) in header.arrays.iter_mut().zip(std::mem::take(&mut self.crcs)) {
            let Some(crc) = crc.finish(&slots) else {
                return Err(misuse(format!("bytes of {} written unhashed", a.name())));
            };
            a.crc32 = crc;
        }
        // The transient peak of finishing, 32 bytes an extent: the extents unpacked (24 bytes
        // each, allocated whole: `segmented` checks them whole) while the packed ones (8) are
        // freed a chunk at a time; the table is then encoded a chunk at a time
        // (`table_chunks`), to be written and hashed, never whole.
        let (extents, end) = std::mem::take(&mut self.extents).unpack(self.header_len);
        debug_assert_eq!(end, self.at);
        let header = header
            .segmented(extents)
            .map_err(|e| misuse(format!("appended arrays: {e}")))?;
        let f = self.file.file();
        let io = |e| Error::io(&target, e);
        let mut at = header.file_len - header.table_len();
        for chunk in header.table_chunks() {
            f.write_all_at(&chunk, at).map_err(io)?;
            at += chunk.len() as u64;
        }
        f.write_all_at(&header.to_bytes(), 0).map_err(io)?;
        crate::retry_interrupted(|| f.set_len(header.file_len)).map_err(io)?;
        self.file.commit()?;
        Ok(header.file_len)
    }
}

/// Bytes copied as one piece of work by [`TcsWriter::copy_arrays_from`].
const COPY_SEGMENT: u64 = 32 << 20;

/// An array's bytes in a file of their own, and their checksum.
pub struct ArraySource {
    /// Number of the array in the header.
    pub array: usize,
    pub file: std::fs::File,
    pub crc32: u32,
}

/// Copies `len` bytes at `from` in `src` to `to` in `dst` with positioned calls only (so
/// that threads can share both files): `copy_file_range` in the kernel, or where the file
/// systems do not allow it, reads and writes through a small buffer.
fn copy_range(
    src: &std::fs::File,
    mut from: u64,
    dst: &std::fs::File,
    mut to: u64,
    mut len: u64,
) -> std::io::Result<()> {
    while len > 0 {
        let chunk = len.min(1 << 30) as usize;
        match rustix::fs::copy_file_range(src, Some(&mut from), dst, Some(&mut to), chunk) {
            Ok(n) if n > 0 => len -= n as u64,
            Err(rustix::io::Errno::INTR) => {}
            // Another file system, no kernel support, or a file that cannot be spliced (the
            // buffered copy below then says what is wrong, if anything).
            Ok(_) | Err(_) => break,
        }
    }
    let mut buf = vec![0u8; (len as usize).min(256 << 10)];
    while len > 0 {
        let n = (len as usize).min(buf.len());
        src.read_exact_at(&mut buf[..n], from)?;
        dst.write_all_at(&buf[..n], to)?;
        (from, to, len) = (from + n as u64, to + n as u64, len - n as u64);
    }
    Ok(())
}

fn crc_of_range(file: &std::fs::File, offset: u64, len: u64) -> std::io::Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; WRITE_BUFFER.min(len as usize)];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], offset + done)?;
        h.update(&buf[..n]);
        done += n as u64;
    }
    Ok(h.finalize())
}

/// Appends elements to one array of a [`TcsWriter`], computing its checksum on the way.
pub struct ArrayWriter<'a, T> {
    writer: &'a TcsWriter,
    array: usize,
    at: u64,
    end: u64,
    buf: Vec<u8>,
    crc: crc32fast::Hasher,
    _marker: std::marker::PhantomData<T>,
}

impl<T: bytemuck::Pod> ArrayWriter<'_, T> {
    fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let len = self.buf.len() as u64;
        if self.at + len > self.end {
            let name = self.writer.header.arrays[self.array].name();
            return Err(self.writer.misuse(format!("more data than fits in {name}")));
        }
        self.crc.update(&self.buf);
        let file = self.writer.file.file();
        crate::piecewise::write_all_at(file, &self.buf, self.at)
            .map_err(|e| Error::io(self.writer.file.target(), e))?;
        self.at += len;
        self.buf.clear();
        Ok(())
    }

    /// Flushes and records the checksum; the array must be exactly full.
    pub fn finish(mut self) -> Result<()> {
        self.flush()?;
        if self.at != self.end {
            let name = self.writer.header.arrays[self.array].name();
            return Err(self
                .writer
                .misuse(format!("{name} is {} bytes short", self.end - self.at)));
        }
        let crc = std::mem::take(&mut self.crc).finalize();
        self.writer.crcs.lock().expect("no panics while locked")[self.array] = Some(crc);
        Ok(())
    }
}

impl<T: bytemuck::Pod> Sink<T> for ArrayWriter<'_, T> {
    type Error = Error;
    fn push_n(&mut self, x: T, n: usize) -> Result<()> {
        let bytes = bytemuck::bytes_of(&x);
        for _ in 0..n {
            if self.buf.len() + bytes.len() > WRITE_BUFFER {
                self.flush()?;
            }
            self.buf.extend_from_slice(bytes);
        }
        Ok(())
    }
    fn push(&mut self, x: T) -> Result<()> {
        if self.buf.len() + std::mem::size_of::<T>() > WRITE_BUFFER {
            self.flush()?;
        }
        self.buf.extend_from_slice(bytemuck::bytes_of(&x));
        Ok(())
    }
}

/// Writes an in-memory tensor (or a block of one, when `modes` gives split ranges; `None`
/// means a whole tensor) to `path`.
pub fn write_tensor<V: Value, I: Index>(
    path: &Path,
    t: &Tensor<V, I>,
    modes: Option<Vec<ModeInfo>>,
) -> Result<()> {
    let is_block = modes.is_some();
    let modes = modes.unwrap_or_else(|| {
        t.dims()
            .iter()
            .map(|&d| ModeInfo::whole(d as u64))
            .collect()
    });
    let levels = t
        .levels()
        .iter()
        .zip(t.format().mode_order())
        .map(|(l, &m)| match l {
            Level::Dense { size, offset } => LevelInfo {
                mode: m as u32,
                level_type: crate::LevelType::Dense,
                size: *size as u64,
                offset: *offset as u64,
            },
            Level::Compressed { crd, .. } | Level::Singleton { crd } => LevelInfo {
                mode: m as u32,
                level_type: l.level_type(),
                size: crd.len() as u64,
                offset: 0,
            },
        })
        .collect();
    let tcs_err = |source: TcsError| Error::Tcs {
        path: path.to_path_buf(),
        source,
    };
    let header = TcsHeader::new(V::TYPE, I::BITS, is_block, modes, levels).map_err(tcs_err)?;
    let w = TcsWriter::create(path, header)?;
    let mut array = 0;
    for l in t.levels() {
        match l {
            Level::Compressed { pos, crd } => {
                w.write_at(array, 0, pos)?;
                w.write_at(array + 1, 0, crd)?;
                array += 2;
            }
            Level::Singleton { crd } => {
                w.write_at(array, 0, crd)?;
                array += 1;
            }
            Level::Dense { .. } => {}
        }
    }
    w.write_at(array, 0, t.vals())?;
    w.finish()
}

#[cfg(test)]
mod copy_tests {
    use super::copy_range;
    use std::os::unix::fs::FileExt;

    /// Positioned copies land at their offsets, within one file system (`copy_file_range`)
    /// and, where a second one is at hand, across two (the buffered fallback under the
    /// kernels that refuse it).
    #[test]
    fn ranges_are_copied_at_their_offsets_on_one_or_two_file_systems() {
        let data: Vec<u8> = (0..700_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut dirs = vec![std::env::temp_dir()];
        if std::path::Path::new("/dev/shm").is_dir() {
            dirs.push("/dev/shm".into());
        }
        for src_dir in &dirs {
            for dst_dir in &dirs {
                let src = tempfile::tempfile_in(src_dir).unwrap();
                src.write_all_at(&data, 0).unwrap();
                let dst = tempfile::tempfile_in(dst_dir).unwrap();
                copy_range(&src, 13, &dst, 4099, data.len() as u64 - 13).unwrap();
                let mut back = vec![0u8; data.len() - 13];
                dst.read_exact_at(&mut back, 4099).unwrap();
                assert_eq!(back, data[13..], "{src_dir:?} -> {dst_dir:?}");
                // Copying past the source's end is an error, not a short file.
                assert!(copy_range(&src, 10, &dst, 0, data.len() as u64).is_err());
            }
        }
    }
}
