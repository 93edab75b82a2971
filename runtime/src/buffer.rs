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
        let bytes = len * std::mem::size_of::<T>();
        if bytes >= SPARSE_MIN_BYTES {
            let map = pool.and_then(|p| p.take(bytes));
            if let Some(mut map) = map.or_else(|| memmap2::MmapMut::map_anon(bytes).ok()) {
                // Page-aligned, so aligned for any element type.
                let ptr = map.as_mut_ptr().cast::<T>();
                return Buf {
                    cells: Cells::Mapped(Mapped {
                        _map: map,
                        ptr,
                        len,
                    }),
                };
            }
        }
        Buf::from_vec(vec![T::default(); len])
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
/// allocator reuses its memory). A reused mapping is cleaned instead: its resident pages
/// (the ones the rank wrote, its share) are zeroed in place and stay resident, and the rest
/// are released (`MADV_DONTNEED`, which also drops any swapped-out content), so the new
/// store reads zeros everywhere and the rank still holds only what it writes.
#[derive(Default)]
pub(crate) struct MapPool {
    maps: Mutex<Vec<memmap2::MmapMut>>,
}

/// Most mappings a pool keeps (dropped stores beyond this are unmapped).
const POOL_MAPS: usize = 4;

impl MapPool {
    /// Keeps `data`'s mapping for reuse, if it has one and the pool has room.
    pub(crate) fn put(&self, data: Data) {
        if let Some(map) = data.into_map() {
            let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
            if maps.len() < POOL_MAPS {
                maps.push(map);
            }
        }
    }

    /// A kept mapping of exactly `bytes`, cleaned to zeros.
    fn take(&self, bytes: usize) -> Option<memmap2::MmapMut> {
        let mut map = {
            let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
            let i = maps.iter().position(|m| m.len() == bytes)?;
            maps.swap_remove(i)
        };
        clean(&mut map).then_some(map)
    }
}

/// Makes every byte of `map` zero: resident pages by writing zeros, the others by
/// releasing them (they read as zeros again). False if residency cannot be told.
fn clean(map: &mut memmap2::MmapMut) -> bool {
    let (ptr, len, page) = (map.as_mut_ptr(), map.len(), page_size());
    let Some(pages) = residency(ptr, len) else {
        return false;
    };
    let mut i = 0;
    while i < pages.len() {
        let run = pages[i..].iter().take_while(|&&r| r == pages[i]).count();
        let (at, n) = (i * page, (run * page).min(len - i * page));
        if pages[i] {
            // SAFETY: `[at, at + n)` lies in the mapping, which `&mut` owns exclusively.
            unsafe { ptr.add(at).write_bytes(0, n) };
        } else {
            // SAFETY: a page-aligned range of the mapping `&mut` owns; no reference into
            // it exists. Anonymous private pages read as zeros after `MADV_DONTNEED`.
            let rc = unsafe { libc::madvise(ptr.add(at).cast(), n, libc::MADV_DONTNEED) };
            if rc != 0 {
                return false;
            }
        }
        i += run;
    }
    true
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

impl Data {
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

    /// Zero cells taken page by page as they are written (see [`Buf::sparse_zeros`]), in a
    /// mapping from `pool` when it has one of the size.
    pub(crate) fn sparse_zeros(dtype: DType, len: usize, pool: Option<&MapPool>) -> Data {
        Data::zeros_of(dtype, len, Some(pool))
    }

    fn into_map(self) -> Option<memmap2::MmapMut> {
        match self {
            Data::F64(b) => b.into_map(),
            Data::F32(b) => b.into_map(),
            Data::I64(b) => b.into_map(),
            Data::I32(b) => b.into_map(),
            Data::U64(b) => b.into_map(),
            Data::U32(b) => b.into_map(),
            Data::Range(b) => b.into_map(),
        }
    }

    /// Bytes of memory the elements occupy now (see [`Buf::resident_bytes`]).
    pub(crate) fn resident_bytes(&self) -> u64 {
        match self {
            Data::F64(b) => b.resident_bytes(),
            Data::F32(b) => b.resident_bytes(),
            Data::I64(b) => b.resident_bytes(),
            Data::I32(b) => b.resident_bytes(),
            Data::U64(b) => b.resident_bytes(),
            Data::U32(b) => b.resident_bytes(),
            Data::Range(b) => b.resident_bytes(),
        }
    }

    pub(crate) fn zeros(dtype: DType, len: usize) -> Data {
        Data::zeros_of(dtype, len, None)
    }

    /// Zero cells: an ordinary vector, or taken page by page when `sparse` (from its pool).
    fn zeros_of(dtype: DType, len: usize, sparse: Option<Option<&MapPool>>) -> Data {
        fn z<T: Element>(len: usize, sparse: Option<Option<&MapPool>>) -> Data {
            T::wrap(match sparse {
                Some(pool) => Buf::sparse_zeros(len, pool),
                None => Buf::from_vec(vec![T::default(); len]),
            })
        }
        match dtype {
            DType::F64 => z::<f64>(len, sparse),
            DType::F32 => z::<f32>(len, sparse),
            DType::I64 => z::<i64>(len, sparse),
            DType::I32 => z::<i32>(len, sparse),
            DType::U64 => z::<u64>(len, sparse),
            DType::U32 => z::<u32>(len, sparse),
            DType::Range => z::<crate::dtype::PosRange>(len, sparse),
        }
    }
}

/// A record of which rectangles of one store are borrowed right now.
///
/// Workers lock it for every view they make; aligned to its own cache lines so that this
/// traffic does not bounce the line holding the issuing side's fields of the store.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct Ledger {
    active: Mutex<Vec<(u64, Rect, bool)>>,
    next: std::sync::atomic::AtomicU64,
}

/// A held borrow; released on drop.
pub(crate) struct Borrow<'a> {
    ledger: &'a Ledger,
    id: u64,
}

impl Ledger {
    /// Borrows `rect`, exclusively for writes. Fails (and borrows nothing) if the borrow
    /// conflicts with one already held.
    pub(crate) fn borrow(&self, rect: Rect, exclusive: bool) -> Result<Borrow<'_>, Rect> {
        let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, other, _)) = active
            .iter()
            .find(|(_, r, ex)| (exclusive || *ex) && r.overlaps(&rect))
        {
            return Err(*other);
        }
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        active.push((id, rect, exclusive));
        Ok(Borrow { ledger: self, id })
    }
}

impl Drop for Borrow<'_> {
    fn drop(&mut self) {
        let mut active = self.ledger.active.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = active.iter().position(|(id, _, _)| *id == self.id) {
            active.swap_remove(i);
        }
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
}
