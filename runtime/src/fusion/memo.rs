//! Memoization of the fusion analysis by canonical renaming (thesis §4.3.2).
//!
//! Two prefixes are isomorphic when they are the same up to a renaming of stores (and of
//! partitions): the same tasks, domains, privileges, and the same pattern of which argument
//! names which store through which partition, with the same temporary flags. Renaming each
//! store and partition to the index of its first appearance (a De Bruijn-like form) turns
//! isomorphism into equality of the canonical forms; the fused task's shape is stored under
//! it and reused, so a fused task keeps its name and body from one iteration of a loop to
//! the next.
//!
//! The key is the fusible *prefix*, not the whole window, and it is written by the pass that
//! finds the prefix ([`super::constraints::Prefix`]): that pass numbers the stores it meets by
//! first appearance anyway, so a hit costs the temporary flags and one hash lookup (a second
//! renaming pass at launch cost as much as the constraint checks; measured in
//! runtime/DESIGN.md, "Task fusion"). What a hit saves is building the fused task (argument
//! deduplication, privilege merging, maps, its name).

use super::build::{self, FusedShape};
use super::temporaries;
use crate::issue::task::Privilege;
use crate::store::StoreRoot;
use crate::window::Window;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// Entries kept before the memo starts afresh (a program with that many window shapes is not
/// repeating itself).
const CAPACITY: usize = 4096;

#[derive(Default)]
pub(crate) struct FusionMemo {
    map: HashMap<Vec<u64>, Arc<FusedShape>>,
    /// The key of the latest lookup: one buffer for every lookup (a hit, the common case in
    /// a loop, then allocates nothing; a miss stores a copy).
    scratch: Vec<u64>,
}

impl FusionMemo {
    pub(crate) fn get(&self, key: &[u64]) -> Option<Arc<FusedShape>> {
        self.map.get(key).cloned()
    }

    pub(crate) fn insert(&mut self, key: Vec<u64>, d: Arc<FusedShape>) {
        if self.map.len() >= CAPACITY {
            self.map.clear();
        }
        self.map.insert(key, d);
    }
}

/// A privilege as a key word.
pub(crate) fn privilege_code(p: Privilege) -> u64 {
    match p {
        Privilege::Read => 0,
        Privilege::Write => 1,
        Privilege::ReadWrite => 2,
        Privilege::WriteUnbound => 3,
        Privilege::Reduce(op) => 4 + op as u64,
    }
}

/// The fused task for the window's fusible prefix (found already: [`Window::fusible_prefix`]),
/// and with `memo` whether it was a hit: looked up by the prefix' canonical form and built
/// only on a miss (without `memo`, always built).
pub(crate) fn fused_shape(
    w: &mut Window,
    memo: Option<&mut FusionMemo>,
) -> (Arc<FusedShape>, Option<bool>) {
    let ready = &*w.ready.make_contiguous();
    let (unsolved, later) = (&w.tasks, &w.later);
    // A store a task the tracer holds names is live too (`Window::later`).
    let temps = w.prefix.temporaries(ready, |r| {
        temporaries::outside_dead(r, unsolved) && !crate::window::named_in(later, r)
    });
    let n = w.prefix.len();
    let local = |r: &Arc<StoreRoot>| w.prefix.is_flagged(&temps, r);
    let Some(memo) = memo else {
        return (Arc::new(build::shape(&ready[..n], local)), None);
    };
    let mut key = std::mem::take(&mut memo.scratch);
    w.prefix.key_into(&temps, &mut key);
    let hit = memo.get(&key);
    let r = match hit {
        Some(shape) => (shape, Some(true)),
        None => {
            let shape = Arc::new(build::shape(&ready[..n], local));
            memo.insert(key.clone(), shape.clone());
            (shape, Some(false))
        }
    };
    memo.scratch = key;
    r
}
