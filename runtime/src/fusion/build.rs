//! Building a fused task from a fusible prefix (thesis §4.2.2, "Fused Task Construction").
//!
//! The fused task's arguments are the prefix' arguments deduplicated by store and partition,
//! with privileges merged (read and written becomes read-write); reductions stay one argument
//! each, so that each sub-task's reduction folds into the store in issue order exactly as it
//! would unfused. Each sub-task keeps its own numbering: a [`SubShape`] maps its argument
//! positions to the fused task's, and names its range of the fused task's scalars and its
//! result slot. The shape depends only on the window's canonical form, so the memo reuses it
//! ([`super::memo`]); an instance fills in the stores, sub-stores, scalars and futures.

use super::kernel::Elementwise;
use super::Ready;
use crate::dtype::ReduceOp;
use crate::execute::launch::LaunchArg;
use crate::future::FutureCell;
use crate::issue::task::{Args, Privilege, Scalars, TaskBody};
use crate::runtime::Plan;
use crate::store::StoreRoot;
use std::hash::Hasher;
use std::ops::Range;
use std::sync::Arc;

/// One sub-task of a fused task.
pub(crate) struct SubShape {
    pub name: Arc<str>,
    pub body: TaskBody,
    pub kernel: Option<Arc<Elementwise>>,
    /// For each of the sub-task's arguments: the fused argument and the privilege the
    /// sub-task was given (what its body may do with it).
    pub args: Args<(usize, Privilege)>,
    /// The sub-task's scalars within the fused task's.
    pub scalars: Range<usize>,
    /// The fused task's result slot this sub-task's result goes to.
    pub result: Option<usize>,
}

/// One argument of a fused task.
pub(crate) struct FusedArg {
    /// The sub-task and its argument that name this one first (where an instance finds the
    /// store and its sub-stores).
    pub from: (usize, usize),
    pub privilege: Privilege,
    /// A temporary: scratch per point (or per chunk), the store is never touched.
    pub local: bool,
}

/// What a fused task is, apart from its stores and scalar values.
pub(crate) struct FusedShape {
    pub name: Arc<str>,
    pub subs: Vec<SubShape>,
    pub args: Args<FusedArg>,
    /// Every sub-task is element-wise (reads, writes and results only): one chunked loop.
    pub kernel: bool,
    /// For each argument, the chunk buffer a temporary lives in when the chunked loop runs,
    /// and how many buffers (temporaries whose lives do not overlap share one: `scratch.rs`).
    pub scratch: (Vec<Option<usize>>, usize),
}

fn merge(a: Privilege, b: Privilege) -> Privilege {
    use Privilege::*;
    match (a, b) {
        (Read, Read) => Read,
        (Write, Write) => Write,
        _ => ReadWrite,
    }
}

/// The shape of the task fusing `prefix`; `local(root)` says which stores are temporaries.
pub(crate) fn shape(prefix: &[Box<Ready>], local: impl Fn(&Arc<StoreRoot>) -> bool) -> FusedShape {
    let mut args: Args<FusedArg> = Args::new();
    // (store, partition) of each fused argument, to deduplicate; reductions and unbound
    // outputs never merge.
    let mut keys: Vec<Option<(*const StoreRoot, crate::partition::PartitionId)>> = vec![];
    let mut subs = Vec::with_capacity(prefix.len());
    let (mut scalars, mut results) = (0, 0);
    for (k, t) in prefix.iter().enumerate() {
        let mut map = Args::new();
        for (i, (a, part)) in t.args.iter().zip(&t.parts).enumerate() {
            let key = match (a.privilege, part) {
                (Privilege::Read | Privilege::Write | Privilege::ReadWrite, Some(p)) => {
                    Some((Arc::as_ptr(&a.root), *p))
                }
                _ => None,
            };
            let found = key.and_then(|key| keys.iter().position(|k| *k == Some(key)));
            let j = match found {
                Some(j) => {
                    args[j].privilege = merge(args[j].privilege, a.privilege);
                    j
                }
                None => {
                    keys.push(key);
                    args.push(FusedArg {
                        from: (k, i),
                        privilege: a.privilege,
                        local: key.is_some() && local(&a.root),
                    });
                    args.len() - 1
                }
            };
            map.push((j, a.privilege));
        }
        let n = t.issued.scalars.len();
        let result = t.issued.result.as_ref().map(|_| {
            results += 1;
            results - 1
        });
        subs.push(SubShape {
            name: t.issued.name.clone(),
            body: t.issued.body.clone(),
            kernel: t.issued.kernel.clone(),
            args: map,
            scalars: scalars..scalars + n,
            result,
        });
        scalars += n;
    }
    let kernel = subs.iter().all(|s| {
        s.kernel.is_some()
            && s.args.iter().all(|(_, p)| {
                matches!(p, Privilege::Read | Privilege::Write | Privilege::ReadWrite)
            })
    });
    let names: Vec<&str> = subs.iter().map(|s| &*s.name).collect();
    let local: Vec<bool> = args.iter().map(|a| a.local).collect();
    let scratch = super::scratch::share(subs.iter().map(|s| &s.args[..]), &local);
    FusedShape {
        name: format!("fused({})", names.join(",")).into(),
        subs,
        args,
        kernel,
        scratch,
    }
}

/// A fused task's instance: what scheduling needs besides the shape.
pub(crate) struct Instance {
    pub token: u64,
    pub args: Args<LaunchArg>,
    pub scalars: Scalars,
    pub results: Args<(ReduceOp, Arc<FutureCell>)>,
}

/// The fused task's argument `f`, made from `a`, the argument of the sub-task that names it first.
fn fused_arg(f: &FusedArg, a: &LaunchArg) -> LaunchArg {
    LaunchArg {
        root: a.root.clone(),
        view: a.view,
        privilege: f.privilege,
        // The sub-task naming the argument first writes every cell of each point's sub-store
        // (same store and partition, so the same sub-stores) before a later sub-task of the
        // point touches them: their old values need no zeroing.
        overwrite: a.overwrite,
        rects: a.rects.clone(),
        local: f.local,
    }
}

/// Fills `shape` with the prefix' stores, sub-stores, scalars and futures.
pub(crate) fn instantiate(shape: &FusedShape, prefix: &mut [Box<Ready>]) -> Instance {
    let args = shape
        .args
        .iter()
        .map(|f| fused_arg(f, &prefix[f.from.0].args[f.from.1]))
        .collect();
    let mut h = rustc_hash::FxHasher::default();
    let mut scalars = Scalars::new();
    let mut results = Args::new();
    for t in prefix.iter_mut() {
        h.write_u64(t.token);
        scalars.extend(std::mem::take(&mut t.issued.scalars));
        results.extend(t.issued.result.take());
    }
    Instance {
        token: h.finish(),
        args,
        scalars,
        results,
    }
}

/// The task fusing `plans` (the prefix' tasks, solved and each made a `Plan` on its own) by
/// `shape`: what [`instantiate`] makes of the same tasks as `Ready`, for a replayed trace
/// (`tracing/replay.rs`), which launches recorded solves without a window.
pub(crate) fn fuse_plans(shape: &Arc<FusedShape>, plans: Vec<Plan>, body: TaskBody) -> Plan {
    let args = shape
        .args
        .iter()
        .map(|f| fused_arg(f, &plans[f.from.0].args[f.from.1]))
        .collect();
    let mut h = rustc_hash::FxHasher::default();
    let mut scalars = Scalars::new();
    let mut results = Args::new();
    let domain = plans[0].domain;
    let mut shard = None;
    for (k, p) in plans.into_iter().enumerate() {
        h.write_u64(p.token);
        scalars.extend(p.scalars);
        results.extend(p.results);
        if k == 0 {
            // Fusion joins only tasks of one sharding key (constraints.rs).
            shard = p.shard;
        }
    }
    Plan {
        name: shape.name.clone(),
        body,
        domain,
        token: h.finish(),
        args,
        scalars,
        results,
        fused: Some(shape.clone()),
        shard,
    }
}
