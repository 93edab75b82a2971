//! Shared element buffers and the range ledger that guards them.
//!
//! Point tasks of one store run at the same time on disjoint (or read-shared) sub-stores, so a
//! buffer hands out raw access to ranges of cells. This is the one place with `unsafe`. The
//! dependence analysis is what makes concurrent access disjoint; the [`Ledger`] checks it again
//! at run time: every view borrows its rectangle first, and a conflicting borrow (a write
//! overlapping any other borrow) is refused before any cell is touched. A bug in the analysis
//! therefore shows up as a failed task, never as a data race.

use crate::dtype::{DType, Element};
use crate::rect::Rect;
use std::cell::UnsafeCell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A fixed-size buffer of cells that several threads may access through ledger borrows.
///
/// A `Vec` (never resized) rather than a boxed slice, so that a host `Vec` becomes a buffer
/// and back without a pass over its elements or a shrinking reallocation.
pub struct Buf<T> {
    cells: Cells<T>,
}

/// Where a buffer's cells live.
enum Cells<T> {
    /// An ordinary allocation (host data moves in and out of it without a copy).
    Owned(Vec<UnsafeCell<T>>),
    /// A zero-filled anonymous mapping whose pages the OS backs with memory only when a cell
    /// on them is first written: a store across ranks keeps the whole store's layout (every
    /// view, fold and kernel indexes it by root coordinates, as on one rank) while a rank's
    /// memory holds only the pages of the pieces its points write or receive.
    Mapped(Mapped<T>),
}

/// An anonymous mapping of `len` cells and the pointer to its first one.
struct Mapped<T> {
    /// Keeps the mapping alive; never read through (all access goes through `ptr`).
    _map: memmap2::MmapMut,
    /// Taken from the mapping once, at creation, while it was exclusively owned.
    ptr: *mut T,
    len: usize,
}

// SAFETY: cells are only read or written through views that hold a ledger borrow; the ledger
// refuses a write borrow that overlaps any other borrow, so no two threads race on a cell.
unsafe impl<T: Send> Sync for Buf<T> {}
// SAFETY: a mapping is owned memory like a `Vec`'s: moving the owner to another thread moves
// the only handle to it (`ptr` points into `_map`, which moves with it).
unsafe impl<T: Send> Send for Buf<T> {}

/// Buffers at least this large are mapped (see [`Buf::sparse_zeros`]); smaller ones are
/// ordinary allocations: a few pages are not worth a system call.
pub(crate) const SPARSE_MIN_BYTES: usize = 64 << 10;

/// Reinterprets a `Vec<A>` as a `Vec<B>` without touching its elements.
///
/// Used only between `T` and `UnsafeCell<T>` (see [`Buf::from_vec`] and [`Buf::into_vec`]).
///
/// # Safety
/// `A` and `B` must have the same size, alignment and bit validity, and no drop glue that
/// differs: then the allocation's layout (`cap * size`, `align`) is the one it was made with,
/// and every element is a valid `B`. `UnsafeCell<T>` is `#[repr(transparent)]` over `T`
/// (same size, alignment and bit validity), and the elements here are `Copy` (no drop glue).
unsafe fn cast_vec<A, B>(v: Vec<A>) -> Vec<B> {
    // Checked when the cast is compiled, for each pair of types it is used with.
    const {
        assert!(std::mem::size_of::<A>() == std::mem::size_of::<B>());
        assert!(std::mem::align_of::<A>() == std::mem::align_of::<B>());
    }
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: the caller guarantees equal layout and validity; `v` is not dropped, so the
    // allocation has exactly one owner, the returned Vec.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<B>(), v.len(), v.capacity()) }
}

impl<T: Copy> Buf<T> {
    /// The buffer holding `v`: a move (O(1)), not a copy.
    pub(crate) fn from_vec(v: Vec<T>) -> Buf<T> {
        // SAFETY: `UnsafeCell<T>` is `repr(transparent)` over `T` and `T: Copy` (see `cast_vec`).
        Buf {
            cells: Cells::Owned(unsafe { cast_vec::<T, UnsafeCell<T>>(v) }),
        }
    }

    /// `len` zero cells whose memory is taken page by page as cells are written (an anonymous
    /// mapping), so a rank that writes only its share of a store holds only that share's
    /// pages. Small buffers, and a mapping the OS refuses, are ordinary zero-filled vectors.
    /// `T`'s all-zero bytes must be its default (true of every element type: numbers and
    /// `PosRange`).
    pub(crate) fn sparse_zeros(len: usize, pool: Option<&MapPool>) -> Buf<T>
    where
        T: Default,
    {
        let (buf, stale) = Buf::<T>::sparse(len, pool);
        // SAFETY: the stale ranges lie in the buffer's mapping, which `buf` owns alone.
        unsafe { zero_bytes(buf.base().cast(), &stale) };
        buf
    }

    /// [`Buf::sparse_zeros`] without zeroing a mapping kept by `pool`: the byte ranges it
    /// returns still hold a dropped store's values (initialised cells, but not zeros), and
    /// whoever hands the buffer out must zero them before anyone reads them ([`Stale`]).
    fn sparse(len: usize, pool: Option<&MapPool>) -> (Buf<T>, Vec<Range<usize>>)
    where
        T: Default,
    {
        let bytes = len * std::mem::size_of::<T>();
        if bytes >= SPARSE_MIN_BYTES {
            let kept = pool.and_then(|p| p.take(bytes));
            let (map, stale) = match kept {
                Some((map, stale)) => (Some(map), stale),
                None => (memmap2::MmapMut::map_anon(bytes).ok(), Vec::new()),
            };
            if let Some(mut map) = map {
                // Page-aligned, so aligned for any element type.
                let ptr = map.as_mut_ptr().cast::<T>();
                let cells = Cells::Mapped(Mapped {
                    _map: map,
                    ptr,
                    len,
                });
                return (Buf { cells }, stale);
            }
        }
        (Buf::from_vec(vec![T::default(); len]), Vec::new())
    }

    /// The mapping of a mapped buffer (for [`MapPool::put`]); `None` for an ordinary one.
    fn into_map(self) -> Option<memmap2::MmapMut> {
        match self.cells {
            Cells::Mapped(m) => Some(m._map),
            Cells::Owned(_) => None,
        }
    }

    /// The elements as a `Vec`: a move (O(1)) for an ordinary allocation, a copy for a mapped
    /// one. Taking `self` by value means no view of the cells can be alive.
    pub(crate) fn into_vec(self) -> Vec<T> {
        match self.cells {
            // SAFETY: as in `from_vec`, the other way round; `self` is owned, so no borrow of
            // a cell outlives the cast.
            Cells::Owned(cells) => unsafe { cast_vec::<UnsafeCell<T>, T>(cells) },
            Cells::Mapped(ref m) => {
                // SAFETY: `self` is owned (no view alive) and the mapping holds `len` cells.
                unsafe { std::slice::from_raw_parts(m.ptr, m.len) }.to_vec()
            }
        }
    }

    /// The cells as a slice, through exclusive access (no ledger needed: nothing else can
    /// see them).
    fn as_mut(&mut self) -> &mut [T] {
        match &mut self.cells {
            Cells::Owned(c) => {
                let len = c.len();
                // SAFETY: `&mut self` excludes every other access; `UnsafeCell<T>` has `T`'s
                // layout, so the cells are `len` initialised `T`s.
                unsafe { std::slice::from_raw_parts_mut(UnsafeCell::raw_get(c.as_ptr()), len) }
            }
            // SAFETY: as above; the mapping holds `len` zero-initialised cells.
            Cells::Mapped(m) => unsafe { std::slice::from_raw_parts_mut(m.ptr, m.len) },
        }
    }

    /// The values, through exclusive access (no ledger needed: nothing else can see them).
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = T> + '_ {
        self.as_mut().iter().copied()
    }

    /// The cells, through exclusive access (no ledger needed: nothing else can see them).
    pub(crate) fn cells_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.as_mut().iter_mut()
    }

    /// Copies `src` into the cells from `at` on, through exclusive access.
    pub(crate) fn copy_from(&mut self, at: usize, src: &[T]) {
        self.as_mut()[at..at + src.len()].copy_from_slice(src);
    }

    /// Number of cells.
    pub(crate) fn len(&self) -> usize {
        match &self.cells {
            Cells::Owned(c) => c.len(),
            Cells::Mapped(m) => m.len,
        }
    }

    /// Pointer to the first cell. Dereferencing it requires a ledger borrow that covers the
    /// cells touched, exclusive for writes.
    pub(crate) fn base(&self) -> *mut T {
        match &self.cells {
            Cells::Owned(c) => UnsafeCell::raw_get(c.as_ptr()),
            Cells::Mapped(m) => m.ptr,
        }
    }

    /// Bytes of memory the cells occupy now: all of an ordinary allocation; the pages of a
    /// mapped one that have been written (`mincore`: pages resident in memory).
    pub(crate) fn resident_bytes(&self) -> u64 {
        let full = (self.len() * std::mem::size_of::<T>()) as u64;
        match &self.cells {
            Cells::Owned(_) => full,
            Cells::Mapped(m) => resident(m.ptr.cast(), full as usize).min(full),
        }
    }
}

fn page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize
}

/// Per page of `[ptr, ptr + len)` (page-aligned `ptr`, a live mapping), whether it is
/// resident (`mincore`); `None` if that cannot be told.
fn residency(ptr: *mut u8, len: usize) -> Option<Vec<bool>> {
    let mut flags = vec![0u8; len.div_ceil(page_size())];
    // SAFETY: `ptr` is the page-aligned start of a live mapping of `len` bytes and `flags` has
    // one byte per page of it; `mincore` only writes `flags`.
    let rc = unsafe { libc::mincore(ptr.cast(), len, flags.as_mut_ptr()) };
    (rc == 0).then(|| flags.iter().map(|f| f & 1 == 1).collect())
}

/// Bytes of the pages of `[ptr, ptr + len)` (page-aligned `ptr`) that are resident.
fn resident(ptr: *mut u8, len: usize) -> u64 {
    match residency(ptr, len) {
        Some(pages) => pages.iter().filter(|&&r| r).count() as u64 * page_size() as u64,
        None => len as u64, // unknown: count all of it
    }
}

/// Mappings of a runtime's dropped stores, kept for its next store of the same size.
///
/// A store made per iteration (CG's `A p`) would otherwise be a fresh mapping each time,
/// and every page of the rank's share would fault in again (page faults and the kernel's
/// zeroing cost about 3 ms per CG iteration at 490k rows on 2 ranks, where one rank's
/// allocator reuses its memory). A reused mapping keeps its resident pages (the ones the
/// rank touched) and releases the rest (`MADV_DONTNEED`, which also drops any swapped-out
/// content), so the rank still holds only what it touches. The resident pages still hold
/// the old store's values: they are zeroed lazily, cell range by cell range as the new
/// store's accesses borrow them ([`Stale`]), and not at all where a borrower overwrites
/// every cell (a received range). Zeroing them all at once cost a pass over every page
/// the old store touched, which can be far more than the new one does (a mapping that a
/// whole-store `read` made fully resident, recycled for a store the rank writes half of).
///
/// On one rank a large store is an ordinary buffer (so that taking its elements moves them
/// without a copy), and the pool keeps those of dropped stores too: one of the same type and
/// size is reused whole, every cell stale ([`Data::reused`]). So it does with small ones
/// (from [`SMALL_MIN_BYTES`], at most [`SMALL_KEPT`] of them): a `tensor!` CG at 4096 rows
/// makes four 32 KiB vectors per iteration, and each was allocated and zero-filled anew
/// (calloc and memset were ~14 % of its instructions), often freed by a worker into the
/// issuing thread's malloc arena; reused whole, a vector written whole (`write_all`) is
/// neither zeroed nor allocated.
pub(crate) struct MapPool {
    maps: Mutex<Vec<memmap2::MmapMut>>,
    owned: Mutex<Vec<Data>>,
    /// Ordinary buffers of [`SMALL_MIN_BYTES`] up to [`SPARSE_MIN_BYTES`] (not included).
    small: Mutex<Vec<Data>>,
    /// Most bytes of ordinary buffers kept ([`pool_bytes`]).
    budget: usize,
}

impl Default for MapPool {
    /// A pool of the least budget ([`MIN_POOL_BYTES`]); a runtime's is
    /// [`MapPool::for_ranks`].
    fn default() -> MapPool {
        MapPool::with_budget(MIN_POOL_BYTES)
    }
}

/// Most mappings a pool keeps (dropped stores beyond this are unmapped).
const POOL_MAPS: usize = 4;

/// Most bytes of ordinary buffers the pool of one of `ranks` ranks keeps: a sixteenth of the
/// memory this process may use (the machine's, or its control group's limit where lower),
/// shared among the ranks, and at least [`MIN_POOL_BYTES`]. Enough for the vectors an
/// iterative method makes anew every iteration: a fixed 128 MiB stopped short of vectors of
/// 16 M cells, which then came from fresh pages every time, and page faults and the kernel's
/// zeroing took half of a CG iteration (runtime/DESIGN.md, "CG past the last-level cache").
fn pool_bytes(ranks: usize) -> usize {
    // SAFETY: `sysconf` has no preconditions; it answers -1 where it cannot tell.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    let machine = usize::try_from(pages)
        .unwrap_or(0)
        .saturating_mul(page_size());
    share(machine.min(cgroup_limit().unwrap_or(usize::MAX)), ranks)
}

/// A rank's [`pool_bytes`] out of `memory` bytes (0 where unknown).
fn share(memory: usize, ranks: usize) -> usize {
    (memory / 16 / ranks.max(1)).max(MIN_POOL_BYTES)
}

/// The memory limit of this process' control group (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`); `None` where there is none or it cannot be read.
fn cgroup_limit() -> Option<usize> {
    [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok()?.trim().parse().ok())
}

/// The least [`pool_bytes`]: 128 MiB, about what the allocator itself would keep.
const MIN_POOL_BYTES: usize = 128 << 20;

/// The least bytes of a small ordinary buffer the pool keeps: below this malloc's own free
/// lists are as quick as the pool's lock, scan and stale-cell bookkeeping.
const SMALL_MIN_BYTES: usize = 4 << 10;

/// Most small ordinary buffers a pool keeps (under [`SPARSE_MIN_BYTES`] each, so at most
/// 2 MiB in all): the vectors a few iterations of a solver drop.
const SMALL_KEPT: usize = 32;

impl MapPool {
    /// A pool keeping at most `budget` bytes of large ordinary buffers.
    pub(crate) fn with_budget(budget: usize) -> MapPool {
        MapPool {
            maps: Mutex::default(),
            owned: Mutex::default(),
            small: Mutex::default(),
            budget,
        }
    }

    /// The pool of one of `ranks` ranks ([`pool_bytes`]).
    pub(crate) fn for_ranks(ranks: usize) -> MapPool {
        MapPool::with_budget(pool_bytes(ranks))
    }

    /// Keeps `data` for reuse — its mapping, or an ordinary buffer of at least
    /// [`SMALL_MIN_BYTES`] — if the pool has room ([`POOL_MAPS`] mappings; [`SMALL_KEPT`]
    /// small buffers and [`POOL_MAPS`] large ones within its budget of bytes, the oldest
    /// given back to make room).
    pub(crate) fn put(&self, data: Data) {
        if data.is_mapped() {
            let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(map) = data.into_map().filter(|_| maps.len() < POOL_MAPS) {
                maps.push(map);
            }
            return;
        }
        let bytes = data.bytes();
        if (SMALL_MIN_BYTES..SPARSE_MIN_BYTES).contains(&bytes) {
            let mut small = self.small.lock().unwrap_or_else(|e| e.into_inner());
            // The oldest goes when full: a program whose vector sizes change gets the pool's
            // use back instead of keeping buffers of sizes it no longer makes.
            if small.len() >= SMALL_KEPT {
                small.remove(0);
            }
            small.push(data);
            return;
        }
        if !(SPARSE_MIN_BYTES..=self.budget).contains(&bytes) {
            return;
        }
        let mut owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        // The oldest go, as with small buffers: a store of a size the program no longer makes
        // must not keep its memory, nor the pool from the sizes it makes now. Freed after the
        // lock (unmapping a large buffer takes a while).
        let mut gone = Vec::new();
        while owned.len() >= POOL_MAPS
            || owned.iter().map(Data::bytes).sum::<usize>() + bytes > self.budget
        {
            gone.push(owned.remove(0));
        }
        owned.push(data);
        drop(owned);
        drop(gone);
    }

    /// A kept ordinary buffer of `dtype` and `len` cells.
    fn take_owned(&self, dtype: DType, len: usize) -> Option<Data> {
        let bytes = len * dtype.size();
        if bytes < SMALL_MIN_BYTES {
            return None;
        }
        let list = match bytes < SPARSE_MIN_BYTES {
            true => &self.small,
            false => &self.owned,
        };
        let mut owned = list.lock().unwrap_or_else(|e| e.into_inner());
        let i = owned
            .iter()
            .position(|d| d.dtype() == dtype && d.bytes() == len * dtype.size())?;
        Some(owned.swap_remove(i))
    }

    /// A kept mapping of exactly `bytes`, and the byte ranges of it that are not zeros (its
    /// resident pages; the others are released and read as zeros).
    fn take(&self, bytes: usize) -> Option<(memmap2::MmapMut, Vec<Range<usize>>)> {
        let mut map = {
            let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
            let i = maps.iter().position(|m| m.len() == bytes)?;
            maps.swap_remove(i)
        };
        let stale = release_absent(&mut map)?;
        Some((map, stale))
    }
}

/// Releases the pages of `map` that are not resident (they read as zeros again) and returns
/// the byte ranges of the resident ones, which hold whatever was written there. `None` if
/// residency cannot be told or a release fails.
fn release_absent(map: &mut memmap2::MmapMut) -> Option<Vec<Range<usize>>> {
    let (ptr, len, page) = (map.as_mut_ptr(), map.len(), page_size());
    let pages = residency(ptr, len)?;
    let mut resident = Vec::new();
    let mut i = 0;
    while i < pages.len() {
        let run = pages[i..].iter().take_while(|&&r| r == pages[i]).count();
        let (at, n) = (i * page, (run * page).min(len - i * page));
        if pages[i] {
            resident.push(at..at + n);
        } else {
            // SAFETY: a page-aligned range of the mapping `&mut` owns; no reference into
            // it exists. Anonymous private pages read as zeros after `MADV_DONTNEED`.
            let rc = unsafe { libc::madvise(ptr.add(at).cast(), n, libc::MADV_DONTNEED) };
            if rc != 0 {
                return None;
            }
        }
        i += run;
    }
    Some(resident)
}

/// Writes zeros over `ranges` (byte offsets) from `base`.
///
/// # Safety
/// Every range must lie in one live allocation starting at `base`, and no other thread may
/// read or write those bytes meanwhile.
unsafe fn zero_bytes(base: *mut u8, ranges: &[Range<usize>]) {
    for r in ranges {
        // SAFETY: the caller's promise.
        unsafe { base.add(r.start).write_bytes(0, r.len()) };
    }
}

/// The elements of one store, one variant per element type.
pub enum Data {
    F64(Buf<f64>),
    F32(Buf<f32>),
    I64(Buf<i64>),
    I32(Buf<i32>),
    U64(Buf<u64>),
    U32(Buf<u32>),
    Range(Buf<crate::dtype::PosRange>),
}

/// `$body` with `$b` bound to the buffer of whichever element type `$data` holds.
macro_rules! with_buf {
    ($data:expr, $b:ident => $body:expr) => {
        match $data {
            Data::F64($b) => $body,
            Data::F32($b) => $body,
            Data::I64($b) => $body,
            Data::I32($b) => $body,
            Data::U64($b) => $body,
            Data::U32($b) => $body,
            Data::Range($b) => $body,
        }
    };
}

impl Data {
    /// Bytes of the cells (mapped or not, resident or not).
    pub(crate) fn bytes(&self) -> usize {
        self.dtype().size() * with_buf!(self, b => b.len())
    }

    fn is_mapped(&self) -> bool {
        with_buf!(self, b => matches!(b.cells, Cells::Mapped(_)))
    }

    /// A dropped store's ordinary buffer from `pool` for a store of `dtype` over `whole`, and
    /// the [`Stale`] naming every cell of it: the store's ledger zeroes them as they are
    /// borrowed, except where a borrower overwrites them ([`Ledger::install_stale`]), so a
    /// store written whole every iteration is neither zeroed nor faulted in again.
    pub(crate) fn reused(dtype: DType, whole: Rect, pool: &MapPool) -> Option<(Data, Stale)> {
        let data = pool.take_owned(dtype, whole.volume())?;
        let stale = Stale {
            base: with_buf!(&data, b => b.base() as usize),
            size: dtype.size(),
            whole,
            ranges: std::iter::once(0..data.bytes()).collect(),
        };
        Some((data, stale))
    }

    pub(crate) fn dtype(&self) -> DType {
        match self {
            Data::F64(_) => DType::F64,
            Data::F32(_) => DType::F32,
            Data::I64(_) => DType::I64,
            Data::I32(_) => DType::I32,
            Data::U64(_) => DType::U64,
            Data::U32(_) => DType::U32,
            Data::Range(_) => DType::Range,
        }
    }

    /// Zero cells taken page by page as they are written (see [`Buf::sparse_zeros`]).
    pub(crate) fn sparse_zeros(dtype: DType, len: usize) -> Data {
        let (data, stale) = Data::sparse(dtype, Rect::from_shape(&[len]), None);
        debug_assert!(stale.is_none(), "a fresh mapping reads zeros");
        data
    }

    /// The cells of a store of extent `whole`, taken page by page as they are written (see
    /// [`Buf::sparse_zeros`]), in a mapping from `pool` when it keeps one of the size. Then
    /// the returned [`Stale`] names the cells that still hold a dropped store's values: the
    /// store's ledger zeroes them as they are borrowed ([`Ledger::install_stale`]), and
    /// nothing may read them before it has it.
    pub(crate) fn sparse(
        dtype: DType,
        whole: Rect,
        pool: Option<&MapPool>,
    ) -> (Data, Option<Stale>) {
        fn s<T: Element>(whole: Rect, pool: Option<&MapPool>) -> (Data, Option<Stale>) {
            let (buf, ranges) = Buf::<T>::sparse(whole.volume(), pool);
            let stale = (!ranges.is_empty()).then(|| Stale {
                base: buf.base() as usize,
                size: std::mem::size_of::<T>(),
                whole,
                ranges: ranges.into(),
            });
            (T::wrap(buf), stale)
        }
        match dtype {
            DType::F64 => s::<f64>(whole, pool),
            DType::F32 => s::<f32>(whole, pool),
            DType::I64 => s::<i64>(whole, pool),
            DType::I32 => s::<i32>(whole, pool),
            DType::U64 => s::<u64>(whole, pool),
            DType::U32 => s::<u32>(whole, pool),
            DType::Range => s::<crate::dtype::PosRange>(whole, pool),
        }
    }

    fn into_map(self) -> Option<memmap2::MmapMut> {
        with_buf!(self, b => b.into_map())
    }

    /// Bytes of memory the elements occupy now (see [`Buf::resident_bytes`]).
    pub(crate) fn resident_bytes(&self) -> u64 {
        with_buf!(self, b => b.resident_bytes())
    }

    /// Zero cells in an ordinary vector.
    pub(crate) fn zeros(dtype: DType, len: usize) -> Data {
        fn z<T: Element>(len: usize) -> Data {
            T::wrap(Buf::from_vec(vec![T::default(); len]))
        }
        match dtype {
            DType::F64 => z::<f64>(len),
            DType::F32 => z::<f32>(len),
            DType::I64 => z::<i64>(len),
            DType::I32 => z::<i32>(len),
            DType::U64 => z::<u64>(len),
            DType::U32 => z::<u32>(len),
            DType::Range => z::<crate::dtype::PosRange>(len),
        }
    }
}

/// A record of which rectangles of one store are borrowed right now.
///
/// Workers lock it for every view they make; aligned to its own cache lines so that this
/// traffic does not bounce the line holding the issuing side's fields of the store.
///
/// It also makes a recycled buffer read as zeros ([`Stale`]): every access to a store's cells
/// borrows them first, so a borrow is where their old values are zeroed, just before the
/// borrower touches them (on its own thread, while they are in its cache), and only those.
#[derive(Default)]
#[repr(C, align(128))]
pub(crate) struct Ledger {
    /// Held borrows: rectangle, and how the holder uses the cells (first: on the ledger's
    /// first cache line).
    active: Mutex<Active>,
    /// The cells not yet zeroed, while there are any.
    stale: Mutex<Option<Stale>>,
    /// Whether `stale` holds anything: a borrow looks at this alone when not.
    has_stale: AtomicBool,
}

/// Borrows a ledger keeps in the slots on its first cache line (the rest spill to a list).
const SLOTS: usize = 6;

/// Bounds a slot's word holds: below 2^30 for a 1-d rectangle, below 2^15 for a 2-d one.
const SLOT_BOUND: usize = 1 << 30;
const SLOT_BOUND_2D: usize = 1 << 15;

/// A ledger's held borrows (branch `ledger14`).
///
/// The two points of a step borrow and release the same two stores at the same time on two
/// cores, 16 lock operations a step, each on cache lines the other core wrote last; every
/// line an operation touches under the lock lengthens the time the other core waits for it.
/// So a borrow of a 1-d rectangle with bounds below 2^30, or a 2-d one below 2^15, is one
/// word in `slots`, which lie on the lock's own cache line with it; the
/// borrow holds its slot's index, so a release clears one word without searching. Others
/// (more than `SLOTS` held, other rectangles) go to `more`, looked at only once there have
/// been any. Numbers in DESIGN.md ("The ledger's lock between the two points of a step").
#[derive(Default)]
struct Active {
    /// A slot's word: 0 when free, else [`Settle::slot_word`].
    slots: [u64; SLOTS],
    /// Borrows that do not fit a slot, once there have been any (boxed: the lock and the
    /// slots fill one cache line; kept when it empties, so a store whose borrows do not fit,
    /// a 2-d one, allocates it once).
    more: Option<Box<More>>,
}

/// Borrows that do not fit a ledger's slots.
struct More {
    /// Id (`SLOTS` and up), rectangle, how it settles.
    held: Vec<(u64, Rect, Settle)>,
    /// The id of the next one, less `SLOTS`.
    next: u64,
}

// The lock and the slots share one cache line (the `Ledger` is aligned to its own lines).
const _: () = assert!(std::mem::size_of::<Mutex<Active>>() <= 64);

/// The rectangle of a slot's word.
fn slot_rect(w: u64) -> Rect {
    let (dim, lo, hi) = slot_bounds(w);
    Rect::new(&lo[..dim], &hi[..dim])
}

/// The dimension and bounds of a slot's word's rectangle ([`Settle::slot_word`]).
#[inline]
fn slot_bounds(w: u64) -> (usize, [usize; 2], [usize; 2]) {
    let f = |at: u32, bits: u32| ((w >> at) & ((1 << bits) - 1)) as usize;
    if w & 8 == 0 {
        (1, [f(4, 30), 0], [f(34, 30), 0])
    } else {
        (2, [f(4, 15), f(34, 15)], [f(19, 15), f(49, 15)])
    }
}

impl Active {
    /// The rectangle of a held borrow that conflicts with borrowing `rect` (`exclusive`: for
    /// a write), if any.
    #[inline]
    fn conflict(&self, rect: &Rect, exclusive: bool) -> Option<Rect> {
        // A ledger's rectangles all have its store's dimension: slots hold 1-d and 2-d ones.
        let d = rect.dim();
        if d <= 2 {
            let (lo, hi) = (rect.lo(), rect.hi());
            for &w in &self.slots {
                if w != 0 && (exclusive || Settle::slot_exclusive(w)) {
                    let (wd, l, h) = slot_bounds(w);
                    debug_assert_eq!(wd, d);
                    if (0..d).all(|k| l[k].max(lo[k]) < h[k].min(hi[k])) {
                        return Some(slot_rect(w));
                    }
                }
            }
        }
        self.more
            .as_ref()?
            .held
            .iter()
            .find(|(_, r, h)| (exclusive || h.exclusive()) && r.overlaps(rect))
            .map(|(_, r, _)| *r)
    }

    /// Records a borrow of `rect` (checked: no conflict); returns its id.
    #[inline]
    fn insert(&mut self, rect: Rect, how: Settle) -> u64 {
        if let Some(w) = how.slot_word(&rect) {
            if let Some(i) = self.slots.iter().position(|&s| s == 0) {
                self.slots[i] = w;
                return i as u64;
            }
        }
        let more = self.more.get_or_insert_with(|| {
            Box::new(More {
                held: Vec::new(),
                next: 0,
            })
        });
        let id = SLOTS as u64 + more.next;
        more.next += 1;
        more.held.push((id, rect, how));
        id
    }

    /// Forgets the borrow `id`.
    #[inline]
    fn remove(&mut self, id: u64) {
        if id < SLOTS as u64 {
            self.slots[id as usize] = 0;
        } else if let Some(more) = self.more.as_mut() {
            if let Some(i) = more.held.iter().position(|(m, _, _)| *m == id) {
                more.held.swap_remove(i);
            }
        }
    }

    /// Every held borrow's rectangle and how it settles (inline up to two: the borrow that
    /// allocated a recycled buffer is usually the only one).
    fn held(&self) -> smallvec::SmallVec<[(Rect, Settle); 2]> {
        let slots = self.slots.iter().filter(|&&w| w != 0);
        slots
            .map(|&w| (slot_rect(w), Settle::of_slot(w)))
            .chain(
                self.more
                    .iter()
                    .flat_map(|m| m.held.iter().map(|(_, r, h)| (*r, *h))),
            )
            .collect()
    }
}

/// The cells of a buffer recycled from the [`MapPool`] that still hold a dropped store's
/// values (initialised, so reading them would be no memory error, but a new store promises
/// zeros).
pub(crate) struct Stale {
    /// Address of the buffer's first byte (an address, not a pointer: ledgers are shared).
    base: usize,
    /// Bytes per cell, and the store's extent: how a rectangle's cells lie in the buffer.
    size: usize,
    whole: Rect,
    /// Sorted, disjoint byte ranges of the buffer that still hold old values.
    ranges: Ranges,
}

/// Byte ranges of a buffer, inline up to two: a store's points claim their cells as they
/// borrow them, on the workers, and a 1-d point's cells are one run (no allocation, whose
/// free on another thread would contend for the allocating thread's arena).
type Ranges = smallvec::SmallVec<[Range<usize>; 2]>;

impl Stale {
    /// Removes `rect`'s cells from the stale ranges; returns the byte ranges removed.
    fn claim(&mut self, rect: Rect) -> Ranges {
        let mut runs = Ranges::new();
        let size = self.size;
        // Row-major runs come in increasing order.
        rect.for_each_run(&self.whole, |start, len| {
            runs.push(start * size..(start + len) * size)
        });
        let (Some(first), Some(last)) = (runs.first(), runs.last()) else {
            return Ranges::new();
        };
        // The stale ranges that can meet a run: a binary search each way.
        let a = self.ranges.partition_point(|r| r.end <= first.start);
        let b = self.ranges.partition_point(|r| r.start < last.end);
        if a >= b {
            return Ranges::new();
        }
        let (mut kept, mut claimed) = (Ranges::new(), Ranges::new());
        let mut j = 0;
        for r in &self.ranges[a..b] {
            // Runs ending before `r` cannot meet it or any later range.
            while j < runs.len() && runs[j].end <= r.start {
                j += 1;
            }
            let mut at = r.start;
            for run in runs[j..].iter().take_while(|run| run.start < r.end) {
                let (lo, hi) = (run.start.max(at), run.end.min(r.end));
                if lo < hi {
                    if at < lo {
                        kept.push(at..lo);
                    }
                    claimed.push(lo..hi);
                    at = hi;
                }
            }
            if at < r.end {
                kept.push(at..r.end);
            }
        }
        self.ranges.drain(a..b);
        self.ranges.insert_many(a, kept);
        claimed
    }
}

/// What a borrow does with the stale cells it covers.
#[derive(Clone, Copy)]
enum Settle {
    /// Zero them before any other borrower may see them: under the lock (a shared borrow:
    /// another reader of the same cells waits for the lock, then finds them zeroed).
    ZeroLocked,
    /// Zero them after releasing the lock (an exclusive borrow: nobody else can borrow them
    /// meanwhile, and other points of the store settle their own cells in parallel).
    Zero,
    /// Leave them: the borrower writes every one of them before anyone can read it.
    Overwrite,
}

impl Settle {
    /// Whether the borrow excludes every other borrow of its cells (a write).
    fn exclusive(self) -> bool {
        !matches!(self, Settle::ZeroLocked)
    }

    /// A slot's word for a borrow of `rect` that settles so: occupied (bit 0), how (bits 1-2),
    /// 2-d (bit 3), then a 1-d rectangle's low and high bound (30 bits each, from bit 4) or a
    /// 2-d one's `lo[0]`, `hi[0]`, `lo[1]`, `hi[1]` (15 bits each, from bits 4, 19, 34, 49);
    /// `None` for other dimensions or larger bounds.
    fn slot_word(self, rect: &Rect) -> Option<u64> {
        let (lo, hi) = (rect.lo(), rect.hi());
        let how = match self {
            Settle::ZeroLocked => 0,
            Settle::Zero => 1,
            Settle::Overwrite => 2,
        };
        let b = |x: usize| x as u64;
        match rect.dim() {
            1 if lo[0].max(hi[0]) < SLOT_BOUND => {
                Some(1 | how << 1 | b(lo[0]) << 4 | b(hi[0]) << 34)
            }
            2 if lo.iter().chain(hi).all(|&x| x < SLOT_BOUND_2D) => Some(
                1 | how << 1 | 8 | b(lo[0]) << 4 | b(hi[0]) << 19 | b(lo[1]) << 34 | b(hi[1]) << 49,
            ),
            _ => None,
        }
    }

    /// How the borrow in a slot's word settles.
    fn of_slot(w: u64) -> Settle {
        match (w >> 1) & 3 {
            0 => Settle::ZeroLocked,
            1 => Settle::Zero,
            _ => Settle::Overwrite,
        }
    }

    /// Whether the borrow in a slot's word is exclusive (`of_slot(w).exclusive()`).
    #[inline]
    fn slot_exclusive(w: u64) -> bool {
        (w >> 1) & 3 != 0
    }
}

/// A held borrow; released on drop.
pub(crate) struct Borrow<'a> {
    ledger: &'a Ledger,
    id: u64,
}

/// The id of a borrow [`Ledger::unheld`] made: nothing to release.
const UNHELD: u64 = u64::MAX;

impl Ledger {
    /// Borrows `rect`, exclusively for writes. Fails (and borrows nothing) if the borrow
    /// conflicts with one already held. Cells of a recycled buffer that still hold old values
    /// are zeroed first.
    pub(crate) fn borrow(&self, rect: Rect, exclusive: bool) -> Result<Borrow<'_>, Rect> {
        let how = if exclusive {
            Settle::Zero
        } else {
            Settle::ZeroLocked
        };
        let b = self.hold(rect, how)?;
        if self.has_stale.load(Ordering::Acquire) {
            self.settle(rect, how);
        }
        Ok(b)
    }

    /// Borrows `rect` exclusively for a borrower that writes every one of its cells before
    /// it releases the borrow (a received range, a `write_all` task's point): their old
    /// values are not zeroed first. Should it leave a cell unwritten, the cell keeps whatever
    /// the buffer held there (a dropped store's value, or zero): initialised bytes, so no
    /// memory error, but not necessarily zero.
    pub(crate) fn borrow_to_overwrite(&self, rect: Rect) -> Result<Borrow<'_>, Rect> {
        let b = self.hold(rect, Settle::Overwrite)?;
        self.settle(rect, Settle::Overwrite);
        Ok(b)
    }

    /// What a point of a verified replay takes instead of a borrow (`tracing::verify`): the
    /// recorded graph orders it after every conflicting access, so nothing is held and
    /// nothing refused; the stale cells of `rect` are settled as [`Ledger::borrow`] (or,
    /// `overwrite`, [`Ledger::borrow_to_overwrite`]) would. The caller has made the store's
    /// elements first (callers go through `StoreRoot::unheld`): a recycled buffer installed
    /// later settles only the borrows held at that time.
    pub(crate) fn unheld(&self, rect: Rect, exclusive: bool, overwrite: bool) -> Borrow<'_> {
        let how = match (exclusive, overwrite) {
            (true, true) => Settle::Overwrite,
            (true, false) => Settle::Zero,
            (false, _) => Settle::ZeroLocked,
        };
        self.settle(rect, how);
        Borrow {
            ledger: self,
            id: UNHELD,
        }
    }

    fn hold(&self, rect: Rect, how: Settle) -> Result<Borrow<'_>, Rect> {
        let mut active = crate::timeline::lock_counted(&self.active);
        if let Some(other) = active.conflict(&rect, how.exclusive()) {
            return Err(other);
        }
        let id = active.insert(rect, how);
        Ok(Borrow { ledger: self, id })
    }

    /// Makes the stale cells of `rect` (whose borrow the caller holds) zeros, or leaves them
    /// to the borrower that overwrites them.
    fn settle(&self, rect: Rect, how: Settle) {
        if !self.has_stale.load(Ordering::Acquire) {
            return;
        }
        let mut guard = self.stale.lock().unwrap_or_else(|e| e.into_inner());
        let Some(stale) = guard.as_mut() else {
            return;
        };
        let claimed = stale.claim(rect);
        let base = stale.base as *mut u8;
        if matches!(how, Settle::ZeroLocked) {
            // SAFETY: the claimed ranges lie in the buffer (pieces of its stale ranges) and
            // are the cells of a borrow the caller holds; any other borrower of them settles
            // under this lock before touching them, and finds them claimed.
            unsafe { zero_bytes(base, &claimed) };
        }
        // Cleared only now: another reader of these cells that sees the flag clear skips the
        // lock, so the cells must be zeros by then (review39 found it cleared before).
        if stale.ranges.is_empty() {
            *guard = None;
            self.has_stale.store(false, Ordering::Release);
        }
        if matches!(how, Settle::Zero) {
            drop(guard);
            // SAFETY: as above, and the borrow is exclusive: no one else can borrow these
            // cells until it is released, so they may be zeroed after the flag is cleared.
            unsafe { zero_bytes(base, &claimed) }
        }
    }

    /// Puts `stale` under this ledger: the buffer it names has just been made the store's
    /// elements, and no one has touched its cells. Borrows already held are settled here
    /// (a view borrows its rectangle before it asks for the elements, which allocates them),
    /// later ones when they are made.
    pub(crate) fn install_stale(&self, stale: Stale) {
        let mut guard = self.stale.lock().unwrap_or_else(|e| e.into_inner());
        let stale = guard.insert(stale);
        // Set before the held borrows are listed: a borrow listed after this sees it (its
        // lock of `active` follows this one's), and one listed before is settled here.
        self.has_stale.store(true, Ordering::SeqCst);
        let held = {
            let active = self.active.lock().unwrap_or_else(|e| e.into_inner());
            active.held()
        };
        for (rect, how) in held {
            let claimed = stale.claim(rect);
            // An overwriter's cells are claimed (no one zeroes them later) but left as they
            // are: it writes them all.
            if matches!(how, Settle::Overwrite) {
                continue;
            }
            // SAFETY: the claimed ranges lie in the buffer, which no one has accessed yet
            // (its holders wait for the allocation this is part of); later borrowers of
            // these cells settle under this lock and find them claimed.
            unsafe { zero_bytes(stale.base as *mut u8, &claimed) };
        }
        if stale.ranges.is_empty() {
            *guard = None;
            self.has_stale.store(false, Ordering::Release);
        }
    }

    /// Zeroes every stale cell left: before the elements leave the store (the caller holds
    /// it exclusively, so no borrow is alive).
    pub(crate) fn settle_all(&mut self) {
        if let Some(stale) = self
            .stale
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            // SAFETY: the ranges lie in the buffer, and `&mut self` excludes every borrow.
            unsafe { zero_bytes(stale.base as *mut u8, &stale.ranges) };
        }
        *self.has_stale.get_mut() = false;
    }
}

impl Drop for Borrow<'_> {
    fn drop(&mut self) {
        if self.id == UNHELD {
            return;
        }
        let mut active = crate::timeline::lock_counted(&self.ledger.active);
        active.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_refuses_overlapping_writes_but_shares_reads() {
        let l = Ledger::default();
        let a = Rect::new(&[0], &[10]);
        let b = Rect::new(&[5], &[15]);
        let r1 = l.borrow(a, false).unwrap();
        let _r2 = l.borrow(b, false).unwrap();
        assert!(l.borrow(b, true).is_err());
        drop(r1);
        assert!(l.borrow(Rect::new(&[0], &[5]), true).is_ok());
    }

    #[test]
    fn a_dropped_borrow_gives_back_its_own_rectangle_only() {
        // Ids come from the ledger's own counter: a borrow given back must remove its entry,
        // not another one's (equal ids would free the wrong rectangle).
        let l = Ledger::default();
        let (a, b) = (Rect::new(&[0], &[10]), Rect::new(&[10], &[20]));
        let ra = l.borrow(a, false).unwrap();
        let rb = l.borrow(b, false).unwrap();
        drop(rb);
        assert!(l.borrow(a, true).is_err(), "a is still borrowed");
        assert!(l.borrow(b, true).is_ok(), "b was given back");
        drop(ra);
        assert!(l.borrow(a, true).is_ok());
    }

    #[test]
    fn the_ledger_refuses_exactly_the_borrows_a_model_of_held_rectangles_refuses() {
        // Random borrows (shared, exclusive, overwriting) and releases in any order against a
        // plain list of what is held, on 1-d and 2-d ledgers: borrows in slots and spilled ones
        // (more than the slots hold, or bounds too large for a slot's word, meeting small ones
        // around 2^30 and 2^15) are
        // checked against each other, a release frees its own, and an overwriter's borrow is
        // exclusive like a writer's.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..400 {
            let l = Ledger::default();
            let two_d = round % 2 == 1;
            let mut held: Vec<(Borrow, Rect, bool)> = Vec::new();
            for _ in 0..40 {
                if !held.is_empty() && next(3) == 0 {
                    held.swap_remove(next(held.len() as u64) as usize);
                    continue;
                }
                let mut corner = |bound: usize| {
                    let lo = next(12) as usize + if next(4) == 0 { bound - 8 } else { 0 };
                    (lo, lo + 1 + next(4) as usize)
                };
                let rect = if two_d {
                    let ((a, b), (c, d)) = (corner(SLOT_BOUND_2D), corner(SLOT_BOUND_2D));
                    Rect::new(&[a, c], &[b, d])
                } else {
                    let (a, b) = corner(SLOT_BOUND);
                    Rect::new(&[a], &[b])
                };
                let how = next(3);
                let exclusive = how != 0;
                let conflict = held
                    .iter()
                    .any(|(_, r, x)| (exclusive || *x) && r.overlaps(&rect));
                let got = match how {
                    0 => l.borrow(rect, false),
                    1 => l.borrow(rect, true),
                    _ => l.borrow_to_overwrite(rect),
                };
                match got {
                    Ok(b) => {
                        assert!(
                            !conflict,
                            "{rect:?} (exclusive {exclusive}) granted over a conflict"
                        );
                        held.push((b, rect, exclusive));
                    }
                    Err(other) => {
                        assert!(
                            conflict,
                            "{rect:?} (exclusive {exclusive}) refused, no conflict"
                        );
                        assert!(
                            held.iter().any(|(_, r, x)| *r == other
                                && (exclusive || *x)
                                && r.overlaps(&rect)),
                            "refused naming {other:?}, which is not a held conflicting borrow"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn from_vec_and_into_vec_move_the_allocation() {
        // Spare capacity too: no shrinking reallocation either way.
        let mut v: Vec<u32> = Vec::with_capacity(10);
        v.extend([3, 1, 4, 1, 5]);
        let (ptr, cap) = (v.as_ptr(), v.capacity());
        let mut b = Buf::from_vec(v);
        assert_eq!(b.len(), 5);
        assert_eq!(b.base().cast_const(), ptr);
        b.cells_mut().for_each(|c| *c += 1);
        let back = b.into_vec();
        assert_eq!((back.as_ptr(), back.capacity()), (ptr, cap));
        assert_eq!(back, [4, 2, 5, 2, 6]);
    }

    #[test]
    fn a_sparse_buffer_holds_only_the_pages_written() {
        // 1 MiB of u64: below a transparent huge page (2 MiB), so pages are 4 KiB here.
        let len = 1 << 17;
        let mut b = Buf::<u64>::sparse_zeros(len, None);
        assert!(b.resident_bytes() < 64 << 10, "nothing written yet");
        b.copy_from(1000, &[7; 4096]); // 32 KiB: at most 9 pages
        let resident = b.resident_bytes();
        assert!(
            (32 << 10..=40 << 10).contains(&resident),
            "{resident} bytes"
        );
        assert_eq!(b.values_mut().filter(|&v| v == 7).count(), 4096);
        let v = b.into_vec();
        assert_eq!(
            (v.len(), v[999], v[1000], v[5095], v[5096]),
            (len, 0, 7, 7, 0)
        );
        // Small buffers are ordinary allocations, whole.
        assert_eq!(Buf::<u64>::sparse_zeros(16, None).resident_bytes(), 128);
    }

    #[test]
    fn a_pooled_mapping_comes_back_zeroed_holding_only_the_pages_written_before() {
        let len = 1 << 17; // 1 MiB of u64, below a transparent huge page
        let pool = MapPool::default();
        let mut b = Buf::<u64>::sparse_zeros(len, Some(&pool));
        b.copy_from(8192, &[5; 1024]); // two pages
        let written = b.resident_bytes();
        let ptr = b.base();
        pool.put(Data::U64(b));
        assert!(
            pool.take(8).is_none(),
            "only a mapping of the same size is reused"
        );
        let mut again = Buf::<u64>::sparse_zeros(len, Some(&pool));
        assert_eq!(again.base(), ptr, "the kept mapping, not a new one");
        assert_eq!(
            again.resident_bytes(),
            written,
            "zeroed in place, nothing more"
        );
        assert!(again.values_mut().all(|v| v == 0));
    }

    #[test]
    fn a_large_ordinary_buffer_is_reused_whole_for_the_same_type_and_size_all_stale() {
        let pool = MapPool::default();
        let len = SPARSE_MIN_BYTES / 8; // u64 cells: the smallest size kept
        let b = Buf::from_vec(vec![5u64; len]);
        let ptr = b.base();
        pool.put(Data::U64(b));
        pool.put(Data::U64(Buf::from_vec(vec![5u64; 16]))); // small: not kept
        let whole = Rect::new(&[0], &[len]);
        assert!(
            Data::reused(DType::I64, whole, &pool).is_none(),
            "another type"
        );
        let (data, stale) = Data::reused(DType::U64, whole, &pool).expect("kept");
        let Data::U64(b) = &data else { unreachable!() };
        assert_eq!(b.base(), ptr, "the kept buffer, not a new one");
        assert_eq!(
            stale.ranges.to_vec(),
            vec![0..len * 8],
            "every cell still holds an old value"
        );
        assert!(
            Data::reused(DType::U64, whole, &pool).is_none(),
            "taken once"
        );
    }

    #[test]
    fn a_small_ordinary_buffer_is_reused_whole_up_to_the_count_kept() {
        let pool = MapPool::default();
        let len = SMALL_MIN_BYTES / 8; // u64 cells: the smallest size kept
        let b = Buf::from_vec(vec![5u64; len]);
        let ptr = b.base();
        pool.put(Data::U64(b));
        pool.put(Data::U64(Buf::from_vec(vec![5u64; len - 1]))); // smaller: not kept
        let whole = Rect::new(&[0], &[len]);
        let (data, stale) = Data::reused(DType::U64, whole, &pool).expect("kept");
        let Data::U64(b) = &data else { unreachable!() };
        assert_eq!(b.base(), ptr, "the kept buffer, not a new one");
        assert_eq!(
            stale.ranges.to_vec(),
            vec![0..len * 8],
            "every cell is stale"
        );
        let short = Rect::new(&[0], &[len - 1]);
        assert!(Data::reused(DType::U64, short, &pool).is_none());
        for _ in 0..SMALL_KEPT + 3 {
            pool.put(Data::F64(Buf::from_vec(vec![1.0; len])));
        }
        assert_eq!(
            pool.small.lock().unwrap().len(),
            SMALL_KEPT,
            "a bounded count"
        );
        assert!(pool.owned.lock().unwrap().is_empty(), "large ones apart");
        // Full of one size, a buffer of another is still kept (the oldest goes).
        pool.put(Data::U32(Buf::from_vec(vec![7u32; len * 2])));
        let other = Rect::new(&[0], &[len * 2]);
        assert!(
            Data::reused(DType::U32, other, &pool).is_some(),
            "the newest is kept"
        );
    }

    #[test]
    fn a_pool_keeps_at_most_its_bytes_of_ordinary_buffers_the_newest_first() {
        let budget = 4 * SPARSE_MIN_BYTES;
        let pool = MapPool::with_budget(budget);
        let len = budget / 8 / 2 + 1; // u64 cells: just over half the pool's bytes
        for v in 0..2u64 {
            pool.put(Data::U64(Buf::from_vec(vec![v; len])));
        }
        let kept = |pool: &MapPool| -> Vec<usize> {
            let owned = pool.owned.lock().unwrap();
            owned.iter().map(Data::bytes).collect()
        };
        assert_eq!(kept(&pool), [len * 8], "the two would pass the bytes");
        let whole = Rect::new(&[0], &[len]);
        let (data, _) = Data::reused(DType::U64, whole, &pool).expect("the newest");
        let Data::U64(b) = data else { unreachable!() };
        assert_eq!(b.into_vec()[0], 1, "the second, not the first");
        // A smaller size joins; one over the whole budget is never kept.
        pool.put(Data::U64(Buf::from_vec(vec![0; len])));
        pool.put(Data::U64(Buf::from_vec(vec![0; SPARSE_MIN_BYTES / 8])));
        assert_eq!(kept(&pool), [len * 8, SPARSE_MIN_BYTES]);
        pool.put(Data::U64(Buf::from_vec(vec![0; budget / 8 + 1])));
        assert_eq!(kept(&pool), [len * 8, SPARSE_MIN_BYTES]);
        // At most `POOL_MAPS` buffers, whatever their bytes.
        for _ in 0..POOL_MAPS + 1 {
            pool.put(Data::U64(Buf::from_vec(vec![0; SPARSE_MIN_BYTES / 8])));
        }
        assert_eq!(kept(&pool), [SPARSE_MIN_BYTES; POOL_MAPS]);
    }

    #[test]
    fn a_pool_s_budget_is_a_share_of_memory_never_below_the_least() {
        const GIB: usize = 1 << 30;
        assert_eq!(share(64 * GIB, 1), 4 * GIB);
        assert_eq!(share(64 * GIB, 4), GIB);
        assert_eq!(share(64 * GIB, 0), 4 * GIB, "no ranks reads as one");
        assert_eq!(share(0, 1), MIN_POOL_BYTES, "unknown memory: the least");
        assert_eq!(share(usize::MAX, usize::MAX), MIN_POOL_BYTES);
        assert!(pool_bytes(1) >= pool_bytes(4) && pool_bytes(4) >= MIN_POOL_BYTES);
    }

    /// A mapping of `len` u64 whose first `written` cells held 5, dropped into a pool, then
    /// taken again as a store of extent `[0, len)`: its elements (not zeroed) and the stale
    /// cells the store's ledger must zero.
    fn recycled(len: usize, written: usize) -> (Data, Stale) {
        let pool = MapPool::default();
        let mut b = Buf::<u64>::sparse_zeros(len, Some(&pool));
        b.copy_from(0, &vec![5; written]);
        pool.put(Data::U64(b));
        let whole = Rect::new(&[0], &[len]);
        let (data, stale) = Data::sparse(DType::U64, whole, Some(&pool));
        (data, stale.expect("the written pages are resident"))
    }

    fn cells(data: &mut Data, range: Range<usize>) -> Vec<u64> {
        let Data::U64(b) = data else { unreachable!() };
        b.values_mut().skip(range.start).take(range.len()).collect()
    }

    #[test]
    fn a_recycled_buffer_is_zeroed_as_its_cells_are_borrowed_except_where_overwritten() {
        let (len, written) = (1 << 17, 3 * 512); // 1 MiB of u64; three pages written
        let (mut data, stale) = recycled(len, written);
        assert_eq!(
            stale.ranges.to_vec(),
            vec![Range {
                start: 0,
                end: written * 8
            }],
            "the written pages, in bytes"
        );
        let l = Ledger::default();
        l.install_stale(stale);
        // Nothing is zeroed before it is borrowed (zeroing it all was the cost saved).
        assert!(cells(&mut data, 0..written).iter().all(|&v| v == 5));
        drop(l.borrow(Rect::new(&[0], &[100]), false).unwrap());
        drop(l.borrow(Rect::new(&[1000], &[1100]), true).unwrap());
        // A borrower that writes every cell gets the old values: no zeroing.
        drop(l.borrow_to_overwrite(Rect::new(&[200], &[300])).unwrap());
        // Only cells not yet settled are zeroed: 250..300 are the overwriter's already.
        drop(l.borrow(Rect::new(&[250], &[400]), false).unwrap());
        let got = cells(&mut data, 0..written);
        let want = |i: usize| match i {
            0..100 | 300..400 | 1000..1100 => 0,
            _ => 5,
        };
        for (i, v) in got.iter().enumerate() {
            assert_eq!(*v, want(i), "cell {i}");
        }
        let mut l = l;
        l.settle_all();
        let got = cells(&mut data, 0..len);
        for (i, v) in got.iter().enumerate() {
            // 200..300 are the overwriter's (which this test did not write).
            assert_eq!(*v, if (200..300).contains(&i) { 5 } else { 0 }, "cell {i}");
        }
        assert!(!l.has_stale.load(Ordering::Relaxed));
    }

    #[test]
    fn an_unheld_borrow_holds_nothing_and_settles_its_cells_as_a_borrow_would() {
        let (mut data, stale) = recycled(1 << 17, 1024);
        let l = Ledger::default();
        l.install_stale(stale);
        let read = l.unheld(Rect::new(&[0], &[100]), false, false);
        let write = l.unheld(Rect::new(&[100], &[200]), true, false);
        let over = l.unheld(Rect::new(&[200], &[300]), true, true);
        // Nothing held: borrows of the same cells are granted, and a real one still refuses.
        let held = l.borrow(Rect::new(&[0], &[300]), true).unwrap();
        assert!(l.borrow(Rect::new(&[50], &[60]), false).is_err());
        drop((read, write, over, held));
        let got = cells(&mut data, 0..1024);
        for (i, v) in got.iter().enumerate() {
            // Zeroed where read or written, the overwriter's cells left to it.
            let zero = i < 200;
            assert_eq!(*v, if zero { 0 } else { 5 }, "cell {i}");
        }
    }

    #[test]
    fn two_readers_of_stale_cells_both_see_zeros() {
        // The first reader zeroes the cells under the stale lock; the second, arriving while
        // it does, must not skip the lock on a flag cleared before the zeroing ends.
        let len = 1 << 17; // 1 MiB of u64, all written
        let mut saw_old = 0;
        for _ in 0..64 {
            let (_data, stale) = recycled(len, len);
            let base = stale.base;
            let l = Ledger::default();
            l.install_stale(stale);
            let start = std::sync::Barrier::new(2);
            let read = || {
                start.wait();
                let _b = l.borrow(Rect::new(&[0], &[len]), false).unwrap();
                // The last cell first: zeroing runs upwards, so it is zeroed last.
                (0..len).rev().step_by(4096).any(|i| {
                    // SAFETY: `i < len` cells of the buffer, alive in `_data`; a shared
                    // borrow of them is held.
                    unsafe { std::ptr::read_volatile((base as *const u64).add(i)) != 0 }
                })
            };
            saw_old += std::thread::scope(|s| {
                let other = s.spawn(read);
                let mine = read();
                mine as usize + other.join().unwrap() as usize
            });
        }
        assert_eq!(saw_old, 0, "a reader saw a stale cell after its borrow");
    }

    #[test]
    fn borrows_held_when_a_recycled_buffer_is_installed_are_zeroed_then() {
        // A view borrows its rectangle before it asks for the elements (which allocates
        // them): its cells must read zeros all the same.
        let (mut data, stale) = recycled(1 << 17, 1024);
        let l = Ledger::default();
        let held = l.borrow(Rect::new(&[10], &[20]), true).unwrap();
        let read = l.borrow(Rect::new(&[500], &[600]), false).unwrap();
        l.install_stale(stale);
        let got = cells(&mut data, 0..1024);
        for (i, v) in got.iter().enumerate() {
            let zero = (10..20).contains(&i) || (500..600).contains(&i);
            assert_eq!(*v, if zero { 0 } else { 5 }, "cell {i}");
        }
        drop((held, read));
        // Settled cells are not zeroed again (an overwriter's values stay).
        drop(l.borrow_to_overwrite(Rect::new(&[0], &[1024])).unwrap());
        assert!(
            !l.has_stale.load(Ordering::Relaxed),
            "every stale cell settled"
        );
    }

    #[test]
    fn an_overwriters_borrow_held_when_a_recycled_buffer_is_installed_keeps_its_cells() {
        // A `write_all` point borrows its cells before the allocation: they are claimed (no
        // later borrow zeroes them over what it wrote) but not zeroed (it writes them all).
        let (mut data, stale) = recycled(1 << 17, 1024);
        let l = Ledger::default();
        let over = l.borrow_to_overwrite(Rect::new(&[0], &[300])).unwrap();
        let write = l.borrow(Rect::new(&[300], &[400]), true).unwrap();
        l.install_stale(stale);
        let got = cells(&mut data, 0..1024);
        for (i, v) in got.iter().enumerate() {
            let zero = (300..400).contains(&i);
            assert_eq!(*v, if zero { 0 } else { 5 }, "cell {i}");
        }
        drop((over, write));
        drop(l.borrow(Rect::new(&[0], &[1024]), false).unwrap());
        let got = cells(&mut data, 0..1024);
        for (i, v) in got.iter().enumerate() {
            assert_eq!(*v, if i < 300 { 5 } else { 0 }, "cell {i}");
        }
    }

    #[test]
    fn stale_cells_of_a_two_d_store_are_claimed_run_by_run() {
        // A 4 x 8 store of 1-byte cells, all stale.
        let mut s = Stale {
            base: 0,
            size: 1,
            whole: Rect::new(&[0, 0], &[4, 8]),
            ranges: smallvec::smallvec![Range { start: 0, end: 32 }],
        };
        let claimed = s.claim(Rect::new(&[1, 2], &[3, 5]));
        assert_eq!(claimed[..], [10..13, 18..21]);
        assert_eq!(s.ranges[..], [0..10, 13..18, 21..32]);
        // A rectangle over claimed and stale cells claims only the stale ones.
        assert_eq!(
            s.claim(Rect::new(&[1, 0], &[3, 8]))[..],
            [8..10, 13..16, 16..18, 21..24]
        );
        assert_eq!(s.ranges[..], [0..8, 24..32]);
        assert!(s.claim(Rect::new(&[1, 0], &[3, 8])).is_empty());
        assert_eq!(s.claim(Rect::new(&[0, 0], &[4, 8]))[..], [0..8, 24..32]);
        assert!(s.ranges.is_empty());
    }
}
