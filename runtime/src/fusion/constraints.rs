//! The four fusion constraints (thesis Fig. 4.4) and the longest fusible prefix.
//!
//! A forwards pass over the solved tasks tracks, per store, the partitions it was read and
//! written through and whether it was reduced (with which operator). Task `j` joins the prefix
//! when
//! * **launch-domain equivalence**: its domain (and its sharding key across ranks) is the
//!   first task's;
//! * **true dependence**: it reads or writes no store an earlier task wrote through another
//!   partition;
//! * **anti-dependence**: it writes no store an earlier task read through another partition;
//! * **reduction**: it reads or writes no store an earlier task reduced, and reduces no store
//!   an earlier task read or wrote (two reductions with the same operator fuse);
//!
//! and, specific to this runtime, it takes no future whose producer is in the prefix (the
//! value is folded over every point only after the fused task's points have run).
//! Partition equality is by interned id: constant time, conservative (different ids are
//! assumed to alias).

use super::Ready;
use crate::dtype::ReduceOp;
use crate::partition::PartitionId;
use crate::store::StoreRoot;
use crate::task::{Privilege, ScalarArg};
use smallvec::SmallVec;
use std::sync::Arc;

/// What the prefix so far did to one store.
#[derive(Default)]
struct Effects {
    written: Option<PartitionId>,
    read: SmallVec<[PartitionId; 2]>,
    reduced: Option<ReduceOp>,
}

/// Why a task cannot join a prefix (the constraint it breaks), for tests and statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Break {
    LaunchDomain,
    TrueDependence,
    AntiDependence,
    Reduction,
    Future,
}

/// The per-store effects of a prefix, checked and extended task by task.
#[derive(Default)]
pub(crate) struct Prefix {
    stores: SmallVec<[(*const StoreRoot, Effects); 16]>,
}

impl Prefix {
    fn effects(&mut self, root: &Arc<StoreRoot>) -> &mut Effects {
        let p = Arc::as_ptr(root);
        match self.stores.iter().position(|(r, _)| *r == p) {
            Some(i) => &mut self.stores[i].1,
            None => {
                self.stores.push((p, Effects::default()));
                &mut self.stores.last_mut().expect("just pushed").1
            }
        }
    }

    fn seen(&self, root: &Arc<StoreRoot>) -> Option<&Effects> {
        let p = Arc::as_ptr(root);
        self.stores.iter().find(|(r, _)| *r == p).map(|(_, e)| e)
    }

    /// Whether `t` may follow the prefix (given the prefix' tasks for the future check).
    pub(crate) fn check(&self, prefix: &[Box<Ready>], t: &Ready) -> Result<(), Break> {
        // A fused task's points run where one key says: tasks sharded differently stay apart.
        if prefix
            .first()
            .is_some_and(|f| f.domain != t.domain || f.issued.shard != t.issued.shard)
        {
            return Err(Break::LaunchDomain);
        }
        for s in &t.issued.scalars {
            if let ScalarArg::Future(cell) = s {
                let made_here = prefix.iter().any(|p| {
                    p.issued
                        .result
                        .as_ref()
                        .is_some_and(|(_, c)| Arc::ptr_eq(c, cell))
                });
                if made_here {
                    return Err(Break::Future);
                }
            }
        }
        for (a, part) in t.args.iter().zip(&t.parts) {
            let Some(e) = self.seen(&a.root) else {
                continue;
            };
            let other = |p: &PartitionId| Some(*p) != *part;
            match a.privilege {
                Privilege::Read => {
                    if e.reduced.is_some() {
                        return Err(Break::Reduction);
                    }
                    if e.written.as_ref().is_some_and(other) {
                        return Err(Break::TrueDependence);
                    }
                }
                Privilege::Write | Privilege::ReadWrite | Privilege::WriteUnbound => {
                    if e.reduced.is_some() {
                        return Err(Break::Reduction);
                    }
                    if e.written.as_ref().is_some_and(other) {
                        return Err(Break::TrueDependence);
                    }
                    if e.read.iter().any(other) {
                        return Err(Break::AntiDependence);
                    }
                }
                Privilege::Reduce(op) => {
                    if e.written.is_some() || !e.read.is_empty() {
                        return Err(Break::Reduction);
                    }
                    if e.reduced.is_some_and(|o| o != op) {
                        return Err(Break::Reduction);
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds `t`'s accesses.
    pub(crate) fn push(&mut self, t: &Ready) {
        for (a, part) in t.args.iter().zip(&t.parts) {
            let e = self.effects(&a.root);
            match (a.privilege, part) {
                (Privilege::Reduce(op), _) => e.reduced = Some(op),
                (Privilege::Read, Some(p)) if !e.read.contains(p) => e.read.push(*p),
                (Privilege::Write | Privilege::ReadWrite, Some(p)) => e.written = Some(*p),
                // Unbound outputs have no partition; nothing in the window can read them
                // before they are bound (solving ahead stops at such a reader).
                _ => {}
            }
        }
    }
}

/// Length of the longest fusible prefix of `ready` (at least one task when there is one).
pub(crate) fn fusible_prefix(ready: &[Box<Ready>]) -> usize {
    let mut prefix = Prefix::default();
    for (j, t) in ready.iter().enumerate() {
        if prefix.check(&ready[..j], t).is_err() {
            return j;
        }
        prefix.push(t);
    }
    ready.len()
}
