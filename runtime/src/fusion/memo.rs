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
//! The key is the fusible *prefix*, not the whole window: finding the prefix is a linear
//! scan with constant-time partition comparisons, about what building the canonical form of
//! the window would cost, while a key over the whole window made every pass linear in the
//! window (measured: no gain from the memo at a window of 32). What a hit saves is building
//! the fused task (argument deduplication, privilege merging, maps, its name).

use super::build::FusedShape;
use super::Ready;
use crate::partition::PartitionId;
use crate::store::StoreRoot;
use crate::task::{Privilege, ScalarArg};
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// Entries kept before the memo starts afresh (a program with that many window shapes is not
/// repeating itself).
const CAPACITY: usize = 4096;

#[derive(Default)]
pub(crate) struct FusionMemo {
    map: HashMap<Vec<u64>, Arc<FusedShape>>,
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

fn privilege_code(p: Privilege) -> u64 {
    match p {
        Privilege::Read => 0,
        Privilege::Write => 1,
        Privilege::ReadWrite => 2,
        Privilege::WriteUnbound => 3,
        Privilege::Reduce(op) => 4 + op as u64,
    }
}

/// The canonical form of a prefix: stores and partitions renamed by first appearance, and
/// each store's flag `dead(root)` (is it a temporary of the prefix).
/// Task names are compared by identity (a name is interned once per runtime).
pub(crate) fn canonical(ready: &[Box<Ready>], dead: impl Fn(&Arc<StoreRoot>) -> bool) -> Vec<u64> {
    let mut stores: Vec<*const StoreRoot> = vec![];
    let mut parts: Vec<PartitionId> = vec![];
    let mut key = Vec::with_capacity(ready.len() * 12);
    let mut flags = vec![];
    for (k, t) in ready.iter().enumerate() {
        key.push(Arc::as_ptr(&t.issued.name) as *const u8 as u64);
        key.push(t.domain.dim() as u64);
        key.extend(t.domain.extents().iter().map(|&e| e as u64));
        key.push(t.args.len() as u64);
        for (a, p) in t.args.iter().zip(&t.parts) {
            let ptr = Arc::as_ptr(&a.root);
            let s = match stores.iter().position(|&x| x == ptr) {
                Some(i) => i,
                None => {
                    stores.push(ptr);
                    flags.push(dead(&a.root) as u64);
                    stores.len() - 1
                }
            };
            let p = match p {
                None => u64::MAX,
                Some(p) => match parts.iter().position(|x| x == p) {
                    Some(i) => i as u64,
                    None => {
                        parts.push(*p);
                        (parts.len() - 1) as u64
                    }
                },
            };
            key.extend([s as u64, p, privilege_code(a.privilege)]);
        }
        key.push(t.issued.scalars.len() as u64);
        for s in &t.issued.scalars {
            // A future made by an earlier task of the window is named by that task's index.
            let code = match s {
                ScalarArg::Value(_) => u64::MAX,
                ScalarArg::Future(c) => ready[..k]
                    .iter()
                    .position(|r| {
                        r.issued
                            .result
                            .as_ref()
                            .is_some_and(|(_, x)| Arc::ptr_eq(x, c))
                    })
                    .map_or(u64::MAX - 1, |i| i as u64),
            };
            key.push(code);
        }
        key.push(t.issued.result.as_ref().map_or(0, |(op, _)| 1 + *op as u64));
    }
    key.push(u64::MAX);
    key.extend(flags);
    key
}
