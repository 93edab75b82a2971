//! Partitioning constraints between the store arguments of one task (thesis §3.1.3).

use crate::rect::MAX_DIMS;
use smallvec::SmallVec;
use std::sync::Arc;

/// How [`TaskLauncher::tile`](crate::TaskLauncher::tile) cuts one dimension of a store.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Cut {
    /// Not cut: every point sees the whole dimension.
    Whole,
    /// Cut along launch dimension `k` into equal tiles of `⌈n / extent(k)⌉` (the last may be
    /// shorter, and tiles past the end are empty).
    Equal(usize),
    /// Cut along launch dimension `k` at split points `p` (non-decreasing): tiles `[0, p[0])`,
    /// `[p[0], p[1])`, …, `[p[last], n)`; `extent(k)` must be `p.len() + 1`. Equal points and
    /// points past the end give empty tiles.
    At(usize, Vec<usize>),
}

impl Cut {
    /// The launch dimension that drives this store dimension.
    pub(crate) fn launch_dim(&self) -> Option<usize> {
        match self {
            Cut::Whole => None,
            Cut::Equal(k) | Cut::At(k, _) => Some(*k),
        }
    }
}

/// Dimensions a user names in a `broadcast` (checked against the store's rank at submit).
pub(crate) type Dims = SmallVec<[usize; MAX_DIMS]>;

/// A constraint over argument positions of a task.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Constraint {
    /// Both arguments get the same partition (`equal` in the thesis); shapes must match.
    Align(usize, usize),
    /// The marked dimensions of the argument are not split.
    Broadcast(usize, [bool; MAX_DIMS]),
    /// The destination's sub-store at each point covers what the source's sub-store points at:
    /// ranges for `pos -> crd`, coordinates for `crd -> x`.
    Image { src: usize, dst: usize },
    /// The argument's partition, decided by the application: which launch dimension cuts
    /// which store dimension, and where (SuperTaco's block grid).
    Tile(usize, Arc<[Cut]>),
}
