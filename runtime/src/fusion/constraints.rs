//! The four fusion constraints (thesis Fig. 4.4) and the longest fusible prefix, found
//! incrementally together with the prefix' canonical form (the memo key, [`super::memo`]).
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
//!
//! The pass is incremental: the window keeps one [`Prefix`] for its solved tasks and extends
//! it as tasks are solved, so each task is checked once between two launches (asking "is the
//! prefix complete?" at every submit used to rescan the window). The stores and partitions
//! the pass numbers by first appearance are exactly the canonical renaming of §4.3.2, so the
//! key is written as the tasks join, not in a second pass at launch.

use super::memo;
use super::temporaries;
use super::Ready;
use crate::dtype::ReduceOp;
use crate::issue::task::{Privilege, ScalarArg};
use crate::partition::PartitionId;
use crate::store::StoreRoot;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::Arc;

/// What the prefix so far did to one store.
#[derive(Default)]
struct Effects {
    written: Option<PartitionId>,
    read: SmallVec<[PartitionId; 2]>,
    reduced: Option<ReduceOp>,
    /// Written unbound (kept: never a temporary).
    unbound: bool,
}

/// An `Arc`'s address, only ever compared (a plain integer, so the window stays `Send`). The
/// window's tasks hold every `Arc` named here, so no address is reused while the prefix lives.
fn addr<T: ?Sized>(a: &Arc<T>) -> usize {
    Arc::as_ptr(a) as *const u8 as usize
}

/// One store the prefix names, in order of first appearance (its canonical number).
struct Seen {
    root: usize,
    /// The task and argument that name it first (where to find its `Arc`).
    first: (usize, usize),
    effects: Effects,
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

/// The longest fusible prefix of a window's solved tasks so far, its per-store effects and
/// its canonical form without the temporary flags (those depend on what follows the prefix
/// and on the application's handles, so they are read at launch: [`Prefix::temporaries`]).
///
/// The lists are `Vec`s, not `SmallVec`s: the window keeps one `Prefix` and clears it, so they
/// allocate once, while a `SmallVec` tests whether it spilled on every access.
#[derive(Default)]
pub(crate) struct Prefix {
    stores: Vec<Seen>,
    /// Partitions by first appearance (the key's renaming).
    parts: Vec<PartitionId>,
    /// Futures the prefix' tasks make.
    made: Vec<usize>,
    /// Tasks in the prefix.
    len: usize,
    /// A task after the prefix broke a constraint: no later task can join.
    complete: bool,
    key: Vec<u64>,
}

impl Prefix {
    /// Forgets the prefix (its tasks were launched), keeping the allocations.
    pub(crate) fn clear(&mut self) {
        self.stores.clear();
        self.parts.clear();
        self.made.clear();
        self.len = 0;
        self.complete = false;
        self.key.clear();
    }

    /// True when a task after the prefix broke a constraint (no later task can join).
    pub(crate) fn is_complete(&self) -> bool {
        self.complete
    }

    /// Tasks in the prefix.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Extends the prefix over `ready` (the window's solved tasks, of which the first `len`
    /// are the prefix) until a task breaks a constraint or the tasks run out.
    pub(crate) fn extend(&mut self, ready: &VecDeque<Box<Ready>>) {
        while !self.complete && self.len < ready.len() {
            let t = &ready[self.len];
            if self.check(ready.front().map(|f| &**f), t).is_err() {
                self.complete = true;
            } else {
                self.push(t);
            }
        }
    }

    fn seen(&self, root: &Arc<StoreRoot>) -> Option<&Effects> {
        let p = addr(root);
        self.stores.iter().find(|s| s.root == p).map(|s| &s.effects)
    }

    /// Whether `t` may follow the prefix, whose first task is `first`.
    fn check(&self, first: Option<&Ready>, t: &Ready) -> Result<(), Break> {
        // A fused task's points run where one key says: tasks sharded differently stay apart.
        if self.len > 0
            && first.is_some_and(|f| f.domain != t.domain || f.issued.shard != t.issued.shard)
        {
            return Err(Break::LaunchDomain);
        }
        for s in &t.issued.scalars {
            if let ScalarArg::Future(cell) = s {
                if self.made.contains(&addr(cell)) {
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

    /// The canonical number of `root`, added (first named by argument `arg` of task `task`)
    /// if new.
    fn number(&mut self, root: &Arc<StoreRoot>, task: usize, arg: usize) -> usize {
        let p = addr(root);
        match self.stores.iter().position(|s| s.root == p) {
            Some(i) => i,
            None => {
                self.stores.push(Seen {
                    root: p,
                    first: (task, arg),
                    effects: Effects::default(),
                });
                self.stores.len() - 1
            }
        }
    }

    fn part_number(&mut self, p: Option<PartitionId>) -> u64 {
        let Some(p) = p else {
            return u64::MAX;
        };
        match self.parts.iter().position(|x| *x == p) {
            Some(i) => i as u64,
            None => {
                self.parts.push(p);
                (self.parts.len() - 1) as u64
            }
        }
    }

    /// Adds `t` (which passed [`Prefix::check`]): its accesses and its part of the key.
    fn push(&mut self, t: &Ready) {
        let k = self.len;
        if k == 0 {
            // Every task of a prefix has the first one's domain: it is keyed once.
            self.key.push(t.domain.dim() as u64);
            self.key
                .extend((0..t.domain.dim()).map(|d| t.domain.extent(d) as u64));
        }
        // Task names are compared by identity (a name is interned once per runtime).
        self.key.push(addr(&t.issued.name) as u64);
        self.key.push(t.args.len() as u64);
        for (i, (a, part)) in t.args.iter().zip(&t.parts).enumerate() {
            let s = self.number(&a.root, k, i);
            let p = self.part_number(*part);
            self.key
                .extend([s as u64, p, memo::privilege_code(a.privilege)]);
            let e = &mut self.stores[s].effects;
            match (a.privilege, part) {
                (Privilege::Reduce(op), _) => e.reduced = Some(op),
                (Privilege::Read, Some(p)) if !e.read.contains(p) => e.read.push(*p),
                (Privilege::Write | Privilege::ReadWrite, Some(p)) => e.written = Some(*p),
                // Unbound outputs have no partition; nothing in the window can read them
                // before they are bound (solving ahead stops at such a reader).
                (Privilege::WriteUnbound, _) => e.unbound = true,
                _ => {}
            }
        }
        self.key.push(t.issued.scalars.len() as u64);
        // A future taken inside a prefix is made before it (the future rule), so a value and
        // a future are all the key needs to tell apart.
        self.key.extend(t.issued.scalars.iter().map(|s| match s {
            ScalarArg::Value(_) => u64::MAX,
            ScalarArg::Future(_) => u64::MAX - 1,
        }));
        self.key
            .push(t.issued.result.as_ref().map_or(0, |(op, _)| 1 + *op as u64));
        if let Some((_, cell)) = &t.issued.result {
            self.made.push(addr(cell));
        }
        self.len += 1;
    }

    /// Which of the prefix' stores are temporaries (Definition 4, [`super::temporaries`]),
    /// in canonical order: written (not reduced, not unbound) by the prefix, named by no
    /// later task of the window, `dead(root)` outside it. `ready` is the window whose prefix
    /// this is.
    pub(crate) fn temporaries(
        &self,
        ready: &[Box<Ready>],
        dead: impl Fn(&Arc<StoreRoot>) -> bool,
    ) -> SmallVec<[bool; 16]> {
        self.stores
            .iter()
            .map(|s| {
                let e = &s.effects;
                let root = &ready[s.first.0].args[s.first.1].root;
                e.written.is_some()
                    && e.reduced.is_none()
                    && !e.unbound
                    && ready[self.len..]
                        .iter()
                        .all(|t| t.args.iter().all(|a| !Arc::ptr_eq(&a.root, root)))
                    && dead(root)
            })
            .collect()
    }

    /// Whether holding the prefix (complete: no task can join it) could still make one of its
    /// stores a temporary: a store it writes (not reduced, not unbound) that is fresh, named
    /// by no later task of the window (`later` names the unsolved ones), and still held by
    /// the application, which may drop its handle before the prefix is launched (a loop body
    /// drops its intermediates at the end of its scope). A store that is dead already is a
    /// temporary whenever the prefix is launched; one named later, or not fresh, never is.
    pub(crate) fn may_gain_temporary(
        &self,
        ready: &VecDeque<Box<Ready>>,
        later: impl Fn(&Arc<StoreRoot>) -> bool,
    ) -> bool {
        self.stores.iter().any(|s| {
            let e = &s.effects;
            if e.written.is_none() || e.reduced.is_some() || e.unbound {
                return false;
            }
            let root = &ready[s.first.0].args[s.first.1].root;
            root.app_refs.load(std::sync::atomic::Ordering::Acquire) > 0
                && temporaries::fresh(root)
                && !ready
                    .range(self.len..)
                    .any(|t| t.args.iter().any(|a| Arc::ptr_eq(&a.root, root)))
                && !later(root)
        })
    }

    /// Where each of the prefix' stores is first named, (task, argument), in canonical order
    /// (the order of [`Prefix::temporaries`]' flags).
    pub(crate) fn firsts(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.stores.iter().map(|s| s.first)
    }

    /// Whether `root` is the prefix' store flagged in `temps` ([`Prefix::temporaries`]).
    pub(crate) fn is_flagged(&self, temps: &[bool], root: &Arc<StoreRoot>) -> bool {
        let p = addr(root);
        self.stores
            .iter()
            .zip(temps)
            .any(|(s, &t)| t && s.root == p)
    }

    /// A hash of the prefix' canonical form without the temporary flags: the same for every
    /// occurrence of an isomorphic prefix (the window remembers which of them made no
    /// temporary: `Window::take`).
    pub(crate) fn shape_hash(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        // FxHash, as the solve memo's probe: SipHash over the key cost ~2 k instructions per
        // CG iteration (it runs at every launch and at every complete-prefix check).
        let mut h = rustc_hash::FxHasher::default();
        self.key.hash(&mut h);
        h.finish()
    }

    /// The canonical form of the prefix with its temporary flags: the memo's key, written
    /// into `key` (emptied first; the memo lends the same buffer for every lookup).
    pub(crate) fn key_into(&self, temps: &[bool], key: &mut Vec<u64>) {
        key.clear();
        key.reserve(self.key.len() + 1 + temps.len());
        key.extend_from_slice(&self.key);
        key.push(u64::MAX);
        key.extend(temps.iter().map(|&t| t as u64));
    }
}
