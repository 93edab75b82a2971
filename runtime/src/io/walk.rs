//! Walking the leaves of a level tree in storage order, by position vectors (SuperTaco §4.4.1,
//! §4.4.2).
//!
//! A leaf (a position in `vals`) determines its position at every level: going up, a dense
//! level's parent is `position / size` and a compressed level's parent is the segment of
//! `pos` that contains the position (a binary search). [`Walker`] starts at any leaf from
//! that position vector and then steps leaf by leaf, updating only the levels whose position
//! changes, so a rank can iterate exactly its piece `[start, end)` of the leaves.

use tessera_formats::{Index, LevelView, TensorView, Value};

/// What a walk needs of a level tree: its levels and arrays, which may be sections of larger
/// arrays (positions are always those of the whole tree).
pub(crate) trait Tree {
    type V: Copy;
    /// Number of levels.
    fn rank(&self) -> usize;
    /// `Some((size, offset))` for a dense level, `None` for a compressed one.
    fn dense(&self, k: usize) -> Option<(usize, usize)>;
    /// `pos[q]` of compressed level `k`.
    fn pos(&self, k: usize, q: usize) -> usize;
    /// `crd[i]` of compressed level `k`.
    fn crd(&self, k: usize, i: usize) -> usize;
}

/// A whole tensor view as a [`Tree`].
pub(crate) struct ViewTree<'v, 'a, V, I>(pub &'v TensorView<'a, V, I>);

impl<V: Value, I: Index> Tree for ViewTree<'_, '_, V, I> {
    type V = V;
    fn rank(&self) -> usize {
        self.0.levels().len()
    }
    fn dense(&self, k: usize) -> Option<(usize, usize)> {
        match self.0.levels()[k] {
            LevelView::Dense { size, offset, .. } => Some((size, offset)),
            LevelView::Compressed { .. } => None,
            LevelView::Singleton { .. } => {
                unreachable!("COO views are re-levelled at the public entry points (see `coo`)")
            }
        }
    }
    fn pos(&self, k: usize, q: usize) -> usize {
        match self.0.levels()[k] {
            LevelView::Compressed { pos, .. } => pos[q].to_usize(),
            LevelView::Dense { .. } | LevelView::Singleton { .. } => {
                unreachable!("pos of a dense or singleton level")
            }
        }
    }
    fn crd(&self, k: usize, i: usize) -> usize {
        match self.0.levels()[k] {
            LevelView::Compressed { crd, .. } | LevelView::Singleton { crd } => crd[i].to_usize(),
            LevelView::Dense { .. } => unreachable!("crd of a dense level"),
        }
    }
}

/// A level as a walk reads it: a dense level's extent, or a compressed level's `pos` and
/// `crd` parts, which hold the whole tree's entries from positions `pos_base` and `crd_base`
/// on (a section holds only the parts its leaves touch).
#[derive(Clone, Copy)]
pub(crate) enum Level<'a, I> {
    Dense {
        size: usize,
        offset: usize,
    },
    Compressed {
        pos: &'a [I],
        pos_base: usize,
        crd: &'a [I],
        crd_base: usize,
    },
}

/// A tree whose arrays are in memory, which a [`Walker`] reads as slices: the walk is the hot
/// loop of splitting, loading and merging, and a slice per level is what keeps it short
/// (one subtraction and one bounds check per array read, no per-read dispatch on the tree).
pub(crate) trait Walk: Tree {
    type I: Index;
    /// Level `k`.
    fn level(&self, k: usize) -> Level<'_, Self::I>;
    /// The `vals` part and the position of its first value.
    fn vals(&self) -> (&[Self::V], usize);
}

impl<V: Value, I: Index> Walk for ViewTree<'_, '_, V, I> {
    type I = I;
    fn level(&self, k: usize) -> Level<'_, I> {
        match self.0.levels()[k] {
            LevelView::Dense { size, offset, .. } => Level::Dense { size, offset },
            LevelView::Compressed { pos, crd } => Level::Compressed {
                pos,
                pos_base: 0,
                crd,
                crd_base: 0,
            },
            LevelView::Singleton { .. } => {
                unreachable!("COO views are re-levelled at the public entry points (see `coo`)")
            }
        }
    }
    fn vals(&self) -> (&[V], usize) {
        (self.0.vals(), 0)
    }
}

/// The position at every level of leaf `leaf` (which must exist): `path[R-1] = leaf`.
/// For a compressed level the parent is found by binary search over `pos`, restricted to
/// `parent_bounds[k]` (the parent positions a section holds).
pub(crate) fn leaf_path_in<T: Tree>(
    tree: &T,
    leaf: usize,
    parent_bounds: &[(usize, usize)],
) -> Vec<usize> {
    let rank = tree.rank();
    let mut path = vec![0; rank];
    path[rank - 1] = leaf;
    for k in (1..rank).rev() {
        path[k - 1] = match tree.dense(k) {
            Some((size, _)) => path[k] / size,
            None => {
                // Largest parent q in bounds with pos[q] <= position.
                let (mut lo, mut hi) = parent_bounds[k];
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    if tree.pos(k, mid) <= path[k] {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                lo
            }
        };
    }
    path
}

/// The coordinate at level `k` of the node at position `p` whose parent is at `parent`.
#[inline]
pub(crate) fn coord<T: Tree>(tree: &T, k: usize, p: usize) -> usize {
    match tree.dense(k) {
        Some((size, offset)) => offset + p % size,
        None => tree.crd(k, p),
    }
}

/// Padding, in `usize`s, on each side of a walker's hot state: 128 bytes, two cache lines
/// (adjacent-line prefetch pairs them), so that no other allocation — in particular another
/// rank thread's hot state, which one allocator arena may place right beside it — shares a
/// line with the words written on every leaf (false sharing made the walk not scale over
/// thread ranks).
const PAD: usize = 16;

/// Steps through leaves `[start, end)` of a tree in storage order.
pub(crate) struct Walker<'t, T: Walk> {
    levels: Vec<Level<'t, T::I>>,
    vals: &'t [T::V],
    vals_base: usize,
    rank: usize,
    /// The per-leaf state in one buffer the walker owns: `PAD` words, then the position at
    /// every level (`path`), then the coordinate at every level (`coords`), then `PAD` words.
    state: Vec<usize>,
    next: usize,
    end: usize,
    started: bool,
    /// Start path (to restart the walk).
    first: Vec<usize>,
    start: usize,
}

impl<'t, T: Walk> Walker<'t, T> {
    /// A walker over leaves `[start, end)`, given the position vector of leaf `start` (any
    /// value when the range is empty).
    pub fn new(tree: &'t T, start: usize, end: usize, first: Vec<usize>) -> Self {
        let rank = tree.rank();
        let (vals, vals_base) = tree.vals();
        let mut walker = Walker {
            levels: (0..rank).map(|k| tree.level(k)).collect(),
            vals,
            vals_base,
            rank,
            state: vec![0; PAD + 2 * rank + PAD],
            next: start,
            end,
            started: false,
            first,
            start,
        };
        walker.restart();
        walker
    }

    /// Back to the first leaf.
    pub fn restart(&mut self) {
        // `first` may be shorter than the rank for an empty range (never walked).
        let path = &mut self.state[PAD..PAD + self.rank];
        for (p, &f) in path.iter_mut().zip(&self.first) {
            *p = f;
        }
        self.next = self.start;
        self.started = false;
    }

    /// The levels it reads.
    pub fn levels(&self) -> &[Level<'t, T::I>] {
        &self.levels
    }

    /// Level-order coordinates of the current leaf (after [`Walker::advance`] returned it).
    pub fn coords(&self) -> &[usize] {
        &self.state[PAD + self.rank..PAD + 2 * self.rank]
    }

    /// Moves to the next leaf and returns its value and the highest level whose coordinate
    /// may have changed; `None` past the end.
    pub fn advance(&mut self) -> Option<(usize, T::V)> {
        if self.next >= self.end {
            return None;
        }
        let rank = self.rank;
        let p = self.next;
        self.next += 1;
        let levels = &self.levels[..rank];
        let (path, coords) = self.state[PAD..PAD + 2 * rank].split_at_mut(rank);
        let v = self.vals[p - self.vals_base];
        if !self.started {
            self.started = true;
            for k in 0..rank {
                coords[k] = match levels[k] {
                    Level::Dense { size, offset } => offset + path[k] % size,
                    Level::Compressed { crd, crd_base, .. } => crd[path[k] - crd_base].to_usize(),
                };
            }
            return Some((0, v));
        }
        // Up from the leaf, one level at a time, while the position's parent differs from the
        // previous leaf's: each level's kind is read once (its coordinate and its parent both
        // depend on it).
        let mut k = rank - 1;
        let mut at = p;
        loop {
            path[k] = at;
            let parent = match levels[k] {
                Level::Dense { size, offset } => {
                    coords[k] = offset + at % size;
                    at / size
                }
                Level::Compressed {
                    pos,
                    pos_base,
                    crd,
                    crd_base,
                } => {
                    coords[k] = crd[at - crd_base].to_usize();
                    if k == 0 {
                        break;
                    }
                    // The parent is the segment of `pos` holding `at`: the previous leaf's
                    // parent or one after it (empty segments skipped).
                    let mut q = path[k - 1];
                    while pos[q + 1 - pos_base].to_usize() <= at {
                        q += 1;
                    }
                    q
                }
            };
            if k == 0 || parent == path[k - 1] {
                break;
            }
            at = parent;
            k -= 1;
        }
        Some((k, v))
    }
}
