//! Rectangles of indices: the bounds of stores, views and sub-stores.
//!
//! A `Rect` is a half-open box `[lo, hi)` of at most [`MAX_DIMS`] dimensions. It is `Copy` so
//! that the analysis can pass sub-store bounds around without allocating.

use smallvec::SmallVec;

/// The largest number of dimensions a store may have.
pub const MAX_DIMS: usize = 4;

/// A half-open n-d box `[lo, hi)`; empty when any `hi[d] <= lo[d]`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rect {
    dim: u8,
    lo: [usize; MAX_DIMS],
    hi: [usize; MAX_DIMS],
}

impl Rect {
    /// The box `[lo, hi)`. Panics if the two slices differ in length or exceed [`MAX_DIMS`]
    /// (callers validate user-given shapes first).
    pub fn new(lo: &[usize], hi: &[usize]) -> Rect {
        assert!(
            lo.len() == hi.len() && lo.len() <= MAX_DIMS,
            "rect dimension mismatch"
        );
        let mut r = Rect {
            dim: lo.len() as u8,
            lo: [0; MAX_DIMS],
            hi: [0; MAX_DIMS],
        };
        r.lo[..lo.len()].copy_from_slice(lo);
        r.hi[..hi.len()].copy_from_slice(hi);
        r
    }

    /// The box `[0, shape)`.
    pub fn from_shape(shape: &[usize]) -> Rect {
        Rect::new(&[0; MAX_DIMS][..shape.len()], shape)
    }

    #[inline]
    pub fn dim(&self) -> usize {
        self.dim as usize
    }

    #[inline]
    pub fn lo(&self) -> &[usize] {
        &self.lo[..self.dim()]
    }

    #[inline]
    pub fn hi(&self) -> &[usize] {
        &self.hi[..self.dim()]
    }

    /// Extent along dimension `d` (0 when empty along it).
    #[inline]
    pub fn extent(&self, d: usize) -> usize {
        self.hi[d].saturating_sub(self.lo[d])
    }

    /// The extents of every dimension.
    pub fn shape(&self) -> Vec<usize> {
        (0..self.dim()).map(|d| self.extent(d)).collect()
    }

    /// Number of points (1 for a 0-d box).
    pub fn volume(&self) -> usize {
        (0..self.dim()).map(|d| self.extent(d)).product()
    }

    pub fn is_empty(&self) -> bool {
        (0..self.dim()).any(|d| self.hi[d] <= self.lo[d])
    }

    /// True when the two boxes share at least one point.
    pub fn overlaps(&self, other: &Rect) -> bool {
        debug_assert_eq!(self.dim, other.dim);
        // The intersection is non-empty in every dimension; this also rules out an empty
        // operand (one pass, no separate emptiness checks: the analysis calls this a lot).
        (0..self.dim()).all(|d| self.lo[d].max(other.lo[d]) < self.hi[d].min(other.hi[d]))
    }

    /// True when every point of `other` lies in `self` (an empty `other` is contained).
    /// Inlined: a point's read group checks each member against its recorded union with it
    /// (`context::Held::take`), where the call cost more than the comparison.
    #[inline]
    pub fn contains(&self, other: &Rect) -> bool {
        other.is_empty()
            || (0..self.dim()).all(|d| self.lo[d] <= other.lo[d] && other.hi[d] <= self.hi[d])
    }

    /// True when `point` lies in the box.
    #[inline]
    pub fn contains_point(&self, point: &[usize]) -> bool {
        point.len() == self.dim()
            && (0..self.dim()).all(|d| self.lo[d] <= point[d] && point[d] < self.hi[d])
    }

    /// The common part of two boxes (possibly empty).
    pub fn intersect(&self, other: &Rect) -> Rect {
        let mut r = *self;
        for d in 0..self.dim() {
            r.lo[d] = self.lo[d].max(other.lo[d]);
            r.hi[d] = self.hi[d].min(other.hi[d]).max(r.lo[d]);
        }
        r
    }

    /// The box moved by `+by` in every dimension.
    pub fn translate(&self, by: &[usize]) -> Rect {
        let mut r = *self;
        for (d, b) in by.iter().enumerate().take(self.dim()) {
            r.lo[d] += b;
            r.hi[d] += b;
        }
        r
    }

    /// The box moved by `-by` in every dimension (`by` must not exceed `lo`).
    pub fn untranslate(&self, by: &[usize]) -> Rect {
        let mut r = *self;
        for (d, b) in by.iter().enumerate().take(self.dim()) {
            r.lo[d] -= b;
            r.hi[d] = r.hi[d].saturating_sub(*b).max(r.lo[d]);
        }
        r
    }

    /// Replaces the range of dimension `d`.
    pub fn with_range(&self, d: usize, lo: usize, hi: usize) -> Rect {
        let mut r = *self;
        r.lo[d] = lo;
        r.hi[d] = hi.max(lo);
        r
    }

    /// Row-major linear offset of `point` inside a store whose full box is `self`.
    #[inline]
    pub(crate) fn linear(&self, point: &[usize]) -> usize {
        let mut off = 0;
        for (d, p) in point.iter().enumerate().take(self.dim()) {
            off = off * self.extent(d) + (p - self.lo[d]);
        }
        off
    }

    /// Calls `f` with the row-major linear offset (inside `whole`) of the start of every
    /// contiguous run of `self`, and the run length. `self` must lie in `whole`.
    pub(crate) fn for_each_run(&self, whole: &Rect, mut f: impl FnMut(usize, usize)) {
        if self.is_empty() {
            return;
        }
        let n = self.dim();
        if n == 0 {
            f(0, 1);
            return;
        }
        let run = self.extent(n - 1);
        // A copy of `lo`, not a `Vec`: this runs for every borrow of a recycled buffer's cells
        // (`buffer::Stale::claim`), on the workers, where an allocation is an arena lock.
        let mut idx = self.lo;
        loop {
            f(whole.linear(&idx[..n]), run);
            // Advance the multi-index over all dimensions but the last.
            let mut d = n - 1;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < self.hi[d] {
                    break;
                }
                idx[d] = self.lo[d];
            }
        }
    }
}

impl std::fmt::Debug for Rect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[")?;
        for d in 0..self.dim() {
            if d > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{}..{}", self.lo[d], self.hi[d])?;
        }
        write!(f, "]")
    }
}

/// The distinct rectangles of `rects`, in first-appearance order (a reduction's finish step
/// writes each sub-store once, however many points share it).
pub(crate) fn distinct(rects: &[Rect]) -> SmallVec<[Rect; 4]> {
    let mut seen: SmallVec<[Rect; 4]> = SmallVec::new();
    for r in rects {
        if !seen.contains(r) {
            seen.push(*r);
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_and_intersection_agree() {
        let a = Rect::new(&[0, 0], &[4, 4]);
        let b = Rect::new(&[3, 2], &[6, 8]);
        let c = Rect::new(&[4, 0], &[6, 4]);
        assert!(a.overlaps(&b));
        assert_eq!(a.intersect(&b), Rect::new(&[3, 2], &[4, 4]));
        assert!(!a.overlaps(&c));
        assert!(a.intersect(&c).is_empty());
        assert!(a.contains(&a.intersect(&b)));
    }

    #[test]
    fn overlap_means_a_shared_point_empty_boxes_included() {
        // Every 1-d box over [0, 4) (empty ones too) against every other, by brute force.
        let boxes: Vec<Rect> = (0..4)
            .flat_map(|lo| (0..4).map(move |hi| Rect::new(&[lo], &[hi])))
            .collect();
        for a in &boxes {
            for b in &boxes {
                let shared = (0..4).any(|p| a.contains_point(&[p]) && b.contains_point(&[p]));
                assert_eq!(a.overlaps(b), shared, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn runs_cover_a_sub_box_in_row_major_order() {
        let whole = Rect::from_shape(&[3, 5]);
        let sub = Rect::new(&[1, 1], &[3, 4]);
        let mut runs = vec![];
        sub.for_each_run(&whole, |start, len| runs.push((start, len)));
        assert_eq!(runs, vec![(6, 3), (11, 3)]);
    }
}
