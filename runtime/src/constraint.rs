//! Partitioning constraints between the store arguments of one task (thesis §3.1.3).

use crate::rect::MAX_DIMS;
use smallvec::SmallVec;

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
}
