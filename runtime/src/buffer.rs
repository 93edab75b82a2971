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
    cells: Vec<UnsafeCell<T>>,
}

// SAFETY: cells are only read or written through views that hold a ledger borrow; the ledger
// refuses a write borrow that overlaps any other borrow, so no two threads race on a cell.
unsafe impl<T: Send> Sync for Buf<T> {}

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
            cells: unsafe { cast_vec::<T, UnsafeCell<T>>(v) },
        }
    }

    /// The elements as a `Vec`: a move (O(1)). Taking `self` by value means no view of the
    /// cells can be alive.
    pub(crate) fn into_vec(self) -> Vec<T> {
        // SAFETY: as in `from_vec`, the other way round; `self` is owned, so no borrow of a
        // cell outlives the cast.
        unsafe { cast_vec::<UnsafeCell<T>, T>(self.cells) }
    }

    /// The values, through exclusive access (no ledger needed: nothing else can see them).
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = T> + '_ {
        self.cells.iter_mut().map(|c| *c.get_mut())
    }

    /// The cells, through exclusive access (no ledger needed: nothing else can see them).
    pub(crate) fn cells_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.cells.iter_mut().map(|c| c.get_mut())
    }

    /// Number of cells.
    pub(crate) fn len(&self) -> usize {
        self.cells.len()
    }

    /// Pointer to the first cell. Dereferencing it requires a ledger borrow that covers the
    /// cells touched, exclusive for writes.
    pub(crate) fn base(&self) -> *mut T {
        UnsafeCell::raw_get(self.cells.as_ptr())
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
}
