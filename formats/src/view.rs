//! Zero-copy views of level arrays (from an in-memory [`Tensor`](crate::Tensor) or a mapped
//! `.tcs` file), iteration in storage order, sub-block windows, and the validation that makes
//! arrays from untrusted sources safe to iterate.

use std::ops::Range;

use crate::format::{Format, LevelType};
use crate::tensor::{checked_product, TensorError};
use crate::value::{Index, Value};

/// A borrowed level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LevelView<'a, I> {
    /// A dense level of `size` coordinates starting at `offset` (child position of coordinate
    /// `i` under parent `p` is `p * size + (i - offset)`), of which the view shows the
    /// coordinates `lo..hi` (the whole level unless narrowed by a sub-block).
    Dense {
        size: usize,
        offset: usize,
        lo: usize,
        hi: usize,
    },
    /// `pos`/`crd` arrays as in [`Level::Compressed`](crate::Level::Compressed).
    Compressed { pos: &'a [I], crd: &'a [I] },
    /// A `crd` array as in [`Level::Singleton`](crate::Level::Singleton).
    Singleton { crd: &'a [I] },
}

impl<'a, I: Index> LevelView<'a, I> {
    /// A dense level showing all of its coordinates.
    pub fn dense(size: usize, offset: usize) -> Self {
        LevelView::Dense {
            size,
            offset,
            lo: offset,
            hi: offset + size,
        }
    }

    /// The level's type.
    pub fn level_type(&self) -> LevelType {
        match self {
            LevelView::Dense { .. } => LevelType::Dense,
            LevelView::Compressed { .. } => LevelType::Compressed,
            LevelView::Singleton { .. } => LevelType::Singleton,
        }
    }

    /// The positions of the visible children of parent position `parent`.
    pub fn children(&self, parent: usize) -> Range<usize> {
        match *self {
            LevelView::Dense {
                size,
                offset,
                lo,
                hi,
            } => {
                let base = parent * size;
                base + (lo - offset)..base + (hi - offset)
            }
            LevelView::Compressed { pos, .. } => pos[parent].to_usize()..pos[parent + 1].to_usize(),
            LevelView::Singleton { .. } => parent..parent + 1,
        }
    }

    /// The coordinate of child position `child` of parent position `parent`.
    pub fn coord(&self, parent: usize, child: usize) -> usize {
        match *self {
            LevelView::Dense { size, offset, .. } => offset + (child - parent * size),
            LevelView::Compressed { crd, .. } | LevelView::Singleton { crd } => {
                crd[child].to_usize()
            }
        }
    }

    /// Number of positions at this level given the number at the level above.
    fn positions(&self, parents: usize) -> Option<usize> {
        match *self {
            LevelView::Dense { size, .. } => parents.checked_mul(size),
            LevelView::Compressed { pos, .. } => pos.last().map(|p| p.to_usize()),
            LevelView::Singleton { .. } => Some(parents),
        }
    }
}

/// A borrowed tensor: dimensions, format, level views and values.
#[derive(Clone, Debug)]
pub struct TensorView<'a, V, I> {
    dims: &'a [usize],
    format: &'a Format,
    levels: Vec<LevelView<'a, I>>,
    vals: &'a [V],
}

impl<'a, V: Value, I: Index> TensorView<'a, V, I> {
    /// A view over arrays that are already known to be valid (they come from a validated
    /// tensor, or windows of one): nothing is checked, so it costs no pass over the arrays.
    /// Arrays that are not valid make readers panic (all indexing here is bounds-checked),
    /// never read out of bounds. What a distribution plan's point tasks hand their block
    /// kernels: windows of stores uploaded from tensors.
    pub fn new_unchecked(
        dims: &'a [usize],
        format: &'a Format,
        levels: Vec<LevelView<'a, I>>,
        vals: &'a [V],
    ) -> Self {
        TensorView {
            dims,
            format,
            levels,
            vals,
        }
    }

    /// A view over borrowed arrays, validated like
    /// [`Tensor::from_parts`](crate::Tensor::from_parts).
    pub fn new(
        dims: &'a [usize],
        format: &'a Format,
        levels: Vec<LevelView<'a, I>>,
        vals: &'a [V],
    ) -> Result<Self, TensorError> {
        if dims.len() != format.rank() {
            return Err(TensorError::RankMismatch {
                format: format.rank(),
                dims: dims.to_vec(),
            });
        }
        validate_levels(dims, format, &levels, vals.len())?;
        Ok(TensorView {
            dims,
            format,
            levels,
            vals,
        })
    }

    /// Mode-space extents.
    pub fn dims(&self) -> &'a [usize] {
        self.dims
    }

    /// Storage format.
    pub fn format(&self) -> &'a Format {
        self.format
    }

    /// Level views, outermost first.
    pub fn levels(&self) -> &[LevelView<'a, I>] {
        &self.levels
    }

    /// Stored values (of the whole underlying tensor; a sub-block indexes into them).
    pub fn vals(&self) -> &'a [V] {
        self.vals
    }

    /// The sub-block whose coordinates at dense level `level` lie in `range` (a window in that
    /// level's coordinates; no data is copied). Errors if the level is compressed or the range
    /// is not inside the current window.
    pub fn sub_block(&self, level: usize, range: Range<usize>) -> Result<Self, TensorError> {
        let mut out = self.clone();
        match out.levels.get_mut(level) {
            Some(LevelView::Dense {
                size,
                offset,
                lo,
                hi,
            }) => {
                if range.start > range.end || range.start < *lo || range.end > *hi {
                    return Err(TensorError::OutsideDenseRange {
                        entry: 0,
                        level,
                        coord: if range.start < *lo {
                            range.start
                        } else {
                            range.end
                        },
                        offset: *lo,
                        size: *hi - *lo,
                    });
                }
                let _ = (size, offset);
                *lo = range.start;
                *hi = range.end;
                Ok(out)
            }
            Some(l) => Err(TensorError::LevelType {
                level,
                expected: LevelType::Dense,
                got: l.level_type(),
            }),
            None => Err(TensorError::LevelCount {
                level_count: level + 1,
                rank: self.levels.len(),
            }),
        }
    }

    /// Every visible stored entry as (mode-space coordinates, value), in storage order.
    pub fn entries(&self) -> Entries<'a, V, I> {
        Entries::new(self.clone())
    }

    /// Calls `f(level-order coordinates, value)` for every visible stored entry, in storage
    /// order, without allocating per entry.
    pub fn for_each_level_entry(&self, mut f: impl FnMut(&[usize], V)) {
        let r: Result<(), std::convert::Infallible> = self.try_for_each_level_entry(|c, v| {
            f(c, v);
            Ok(())
        });
        let Ok(()) = r;
    }

    /// Like [`for_each_level_entry`](Self::for_each_level_entry), stopping at the first error.
    pub fn try_for_each_level_entry<E>(
        &self,
        mut f: impl FnMut(&[usize], V) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut coords = vec![0; self.levels.len()];
        self.walk(0, 0, &mut coords, &mut f)
    }

    fn walk<E>(
        &self,
        k: usize,
        parent: usize,
        coords: &mut [usize],
        f: &mut impl FnMut(&[usize], V) -> Result<(), E>,
    ) -> Result<(), E> {
        if k == self.levels.len() {
            return f(coords, self.vals[parent]);
        }
        let level = self.levels[k];
        for child in level.children(parent) {
            coords[k] = level.coord(parent, child);
            self.walk(k + 1, child, coords, f)?;
        }
        Ok(())
    }

    /// Row-major dense array over `dims` holding the visible entries.
    pub fn to_dense(&self) -> Vec<V> {
        let total = checked_product(self.dims).expect("dense size overflows usize");
        let mut out = vec![V::zero(); total];
        let level_of_mode = self.format.level_of_mode();
        let dims = self.dims;
        self.for_each_level_entry(|c, v| {
            let mut at = 0;
            for (m, &d) in dims.iter().enumerate() {
                at = at * d + c[level_of_mode[m]];
            }
            out[at] += v;
        });
        out
    }
}

/// Iterator over the entries of a [`TensorView`] in storage order (see
/// [`TensorView::entries`]).
pub struct Entries<'a, V, I> {
    view: TensorView<'a, V, I>,
    /// Per level: the parent position, the current child position and the end of the range.
    parent: Vec<usize>,
    cur: Vec<usize>,
    end: Vec<usize>,
    depth: usize,
    done: bool,
}

impl<'a, V: Value, I: Index> Entries<'a, V, I> {
    pub(crate) fn new(view: TensorView<'a, V, I>) -> Self {
        let rank = view.levels.len();
        let mut it = Entries {
            parent: vec![0; rank],
            cur: vec![0; rank],
            end: vec![0; rank],
            depth: 0,
            done: false,
            view,
        };
        if rank > 0 {
            it.enter(0, 0);
        } else {
            it.done = it.view.vals.is_empty();
        }
        it
    }

    fn enter(&mut self, k: usize, parent: usize) {
        let r = self.view.levels[k].children(parent);
        self.parent[k] = parent;
        self.cur[k] = r.start;
        self.end[k] = r.end;
        self.depth = k;
    }

    fn emit(&self) -> (Vec<usize>, V) {
        let order = self.view.format.mode_order();
        let mut coords = vec![0; order.len()];
        for (k, &m) in order.iter().enumerate() {
            coords[m] = self.view.levels[k].coord(self.parent[k], self.cur[k]);
        }
        let leaf = self.cur.last().copied().unwrap_or(0);
        (coords, self.view.vals[leaf])
    }
}

impl<V: Value, I: Index> Iterator for Entries<'_, V, I> {
    type Item = (Vec<usize>, V);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let rank = self.cur.len();
        if rank == 0 {
            self.done = true;
            return Some((Vec::new(), self.view.vals[0]));
        }
        loop {
            let k = self.depth;
            if self.cur[k] >= self.end[k] {
                if k == 0 {
                    self.done = true;
                    return None;
                }
                self.depth = k - 1;
                self.cur[k - 1] += 1;
                continue;
            }
            if k + 1 == rank {
                let item = self.emit();
                self.cur[k] += 1;
                return Some(item);
            }
            let child = self.cur[k];
            self.enter(k + 1, child);
        }
    }
}

/// Checks that level arrays from any source form a valid tensor of `format` over `dims`
/// with `vals_len` values; after this, iteration cannot index out of bounds.
pub(crate) fn validate_levels<I: Index>(
    dims: &[usize],
    format: &Format,
    levels: &[LevelView<'_, I>],
    vals_len: usize,
) -> Result<(), TensorError> {
    validate_levels_with(dims, format, levels, vals_len, &mut || {})
}

/// Elements checked between calls of the `tick` of [`validate_levels_with`].
pub(crate) const TICK_ELEMENTS: usize = 1 << 22;

/// [`validate_levels`], calling `tick` every [`TICK_ELEMENTS`] elements (a mapped file uses
/// it to release pages it has checked, keeping resident memory bounded).
pub(crate) fn validate_levels_with<I: Index>(
    dims: &[usize],
    format: &Format,
    levels: &[LevelView<'_, I>],
    vals_len: usize,
    tick: &mut dyn FnMut(),
) -> Result<(), TensorError> {
    if levels.len() != format.rank() {
        return Err(TensorError::LevelCount {
            level_count: levels.len(),
            rank: format.rank(),
        });
    }
    let mut parents = 1usize;
    for (k, level) in levels.iter().enumerate() {
        let expected = format.levels()[k];
        if level.level_type() != expected {
            return Err(TensorError::LevelType {
                level: k,
                expected,
                got: level.level_type(),
            });
        }
        let dim = dims[format.mode_order()[k]];
        match *level {
            LevelView::Dense {
                size,
                offset,
                lo,
                hi,
            } => {
                let end = offset.checked_add(size).ok_or(TensorError::TooLarge)?;
                if end > dim {
                    return Err(TensorError::DenseRange {
                        level: k,
                        offset,
                        size,
                        dim,
                    });
                }
                if lo < offset || hi > end || lo > hi {
                    return Err(TensorError::DenseRange {
                        level: k,
                        offset: lo,
                        size: hi.saturating_sub(lo),
                        dim: end,
                    });
                }
            }
            LevelView::Compressed { pos, crd } => {
                let strict = !format.is_non_unique(k);
                validate_compressed(k, pos, crd, parents, dim, strict, tick)?
            }
            LevelView::Singleton { crd } => validate_singleton(k, crd, parents, dim)?,
        }
        parents = level.positions(parents).ok_or(TensorError::TooLarge)?;
    }
    if vals_len != parents {
        return Err(TensorError::ValsLength {
            expected: parents,
            got: vals_len,
        });
    }
    if let Some(start) = format.coo_start() {
        validate_coo_order(start, levels)?;
    }
    Ok(())
}

fn validate_singleton<I: Index>(
    level: usize,
    crd: &[I],
    parents: usize,
    dim: usize,
) -> Result<(), TensorError> {
    if crd.len() != parents {
        return Err(TensorError::CrdLength {
            level,
            expected: parents,
            got: crd.len(),
        });
    }
    match crd.iter().position(|c| c.to_usize() >= dim) {
        Some(at) => Err(TensorError::CrdOutOfRange {
            level,
            at,
            coord: crd[at].to_usize(),
            bound: dim,
        }),
        None => Ok(()),
    }
}

/// Within each segment of the non-unique level `start`, the entries' coordinates from
/// `start` down (a position is shared by `start` and every singleton level below it) must be
/// strictly increasing in lexicographic order: sorted, no entry twice. Iteration groups
/// equal coordinates of a non-unique level by this order.
fn validate_coo_order<I: Index>(
    start: usize,
    levels: &[LevelView<'_, I>],
) -> Result<(), TensorError> {
    let LevelView::Compressed { pos, .. } = levels[start] else {
        unreachable!("Format checks that a compressed level starts the singletons")
    };
    let crds: Vec<&[I]> = levels[start..]
        .iter()
        .map(|l| match l {
            LevelView::Compressed { crd, .. } | LevelView::Singleton { crd } => *crd,
            LevelView::Dense { .. } => unreachable!("only singletons follow"),
        })
        .collect();
    for w in pos.windows(2) {
        for p in w[0].to_usize() + 1..w[1].to_usize() {
            let differs = crds.iter().position(|c| c[p] != c[p - 1]);
            match differs {
                Some(k) if crds[k][p] > crds[k][p - 1] => {}
                Some(k) => {
                    return Err(TensorError::CrdNotIncreasing {
                        level: start + k,
                        at: p,
                    })
                }
                None => {
                    return Err(TensorError::CrdNotIncreasing {
                        level: levels.len() - 1,
                        at: p,
                    })
                }
            }
        }
    }
    Ok(())
}

fn validate_compressed<I: Index>(
    level: usize,
    pos: &[I],
    crd: &[I],
    parents: usize,
    dim: usize,
    strict: bool,
    tick: &mut dyn FnMut(),
) -> Result<(), TensorError> {
    let expected = parents.checked_add(1).ok_or(TensorError::TooLarge)?;
    if pos.len() != expected {
        return Err(TensorError::PosLength {
            level,
            expected,
            got: pos.len(),
        });
    }
    if pos[0].to_usize() != 0 {
        return Err(TensorError::PosStart {
            level,
            got: pos[0].to_usize(),
        });
    }
    for (at, w) in pos.windows(2).enumerate() {
        if at % TICK_ELEMENTS == TICK_ELEMENTS - 1 {
            tick();
        }
        if w[0] > w[1] {
            let (prev, next) = (w[0].to_usize(), w[1].to_usize());
            return Err(TensorError::PosNotMonotone {
                level,
                at: at + 1,
                prev,
                next,
            });
        }
    }
    let end = pos[pos.len() - 1].to_usize();
    if crd.len() != end {
        return Err(TensorError::CrdLength {
            level,
            expected: end,
            got: crd.len(),
        });
    }
    let mut next_tick = TICK_ELEMENTS;
    for w in pos.windows(2) {
        if w[1].to_usize() >= next_tick {
            tick();
            next_tick = w[1].to_usize() + TICK_ELEMENTS;
        }
        let seg = &crd[w[0].to_usize()..w[1].to_usize()];
        for (i, pair) in seg.windows(2).enumerate() {
            // A non-unique level repeats a coordinate for each entry below it.
            if pair[0] > pair[1] || (strict && pair[0] == pair[1]) {
                return Err(TensorError::CrdNotIncreasing {
                    level,
                    at: w[0].to_usize() + i + 1,
                });
            }
        }
        if let Some(last) = seg.last() {
            // Segments are increasing, so the last coordinate is the largest.
            if last.to_usize() >= dim {
                let at =
                    w[0].to_usize() + seg.iter().position(|c| c.to_usize() >= dim).unwrap_or(0);
                return Err(TensorError::CrdOutOfRange {
                    level,
                    at,
                    coord: crd[at].to_usize(),
                    bound: dim,
                });
            }
        }
    }
    Ok(())
}
