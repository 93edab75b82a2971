//! Validation of a launch: what can be refused before it is solved (privileges, another
//! runtime's futures, constraint membership and types, tilings, sharding keys) and after
//! (equal shapes under `align`, no two points racing on a store). Every refusal is a
//! [`RuntimeError`] naming the task and the store or argument, never a panic. The checks on
//! every submit (`check_privilege`, `check_futures`, `resolve_constraints`) are `#[inline]`, as
//! the first and last were inside `runtime.rs`: called across modules they cost ~110
//! instructions a task more (`stencil_steps`, callgrind).

use super::task::{broadcast_mask, Args, IssuedArg, Privilege, ScalarArg, UserConstraint, ViewId};
use crate::constraint::Constraint;
use crate::dtype::{DType, Element, PosRange};
use crate::error::{Result, RuntimeError};
use crate::execute::launch::LaunchArg;
use crate::future::FutureCell;
use crate::partition::{Domain, Interner, Partition};
use crate::rect::Rect;
use crate::runtime::Inner;
use crate::solver::{Solution, SolverArg};
use crate::store::StoreRoot;
use std::sync::Arc;

/// Checks that every future argument is a result of `rt` (or a ready value, or the result of
/// a runtime that is gone, whose value is known). Another runtime's task would set it without
/// this one's graph knowing: an edge from a node of another pool, or none while the producer
/// waits in that runtime's window, and the task ran before its value existed or never.
#[inline]
pub(crate) fn check_futures(task: &str, scalars: &[ScalarArg], rt: &Arc<Inner>) -> Result<()> {
    let foreign = |cell: &FutureCell| {
        !std::ptr::eq(cell.rt.as_ptr(), Arc::as_ptr(rt)) && cell.rt.strong_count() > 0
    };
    let found = scalars
        .iter()
        .position(|s| matches!(s, ScalarArg::Future(cell) if foreign(cell)));
    match found {
        Some(index) => Err(RuntimeError::ForeignFuture {
            task: task.to_string(),
            index,
        }),
        None => Ok(()),
    }
}

/// Checks that a store can be passed with a privilege.
#[inline]
pub(crate) fn check_privilege(task: &str, root: &StoreRoot, p: Privilege) -> Result<()> {
    let bound = root.bound().is_some();
    match p {
        Privilege::WriteUnbound if bound || root.meta().unbound_issued => {
            return Err(RuntimeError::UnboundMisuse {
                task: task.into(),
                store: root.id,
            });
        }
        Privilege::Reduce(op) => {
            let ok = match root.dtype {
                DType::F64 => f64::identity(op).is_some(),
                DType::F32 => f32::identity(op).is_some(),
                DType::I64 => i64::identity(op).is_some(),
                DType::I32 => i32::identity(op).is_some(),
                DType::U64 => u64::identity(op).is_some(),
                DType::U32 => u32::identity(op).is_some(),
                DType::Range => PosRange::identity(op).is_some(),
            };
            if !ok {
                return Err(RuntimeError::UnsupportedReduction {
                    task: task.into(),
                    store: root.id,
                    dtype: root.dtype,
                    op,
                });
            }
        }
        _ => {}
    }
    if p != Privilege::WriteUnbound && !bound && !root.meta().unbound_issued {
        return Err(RuntimeError::NeverBound {
            task: task.into(),
            store: root.id,
        });
    }
    Ok(())
}

/// Turns constraints over stores into constraints over argument positions, checking what can be
/// checked before shapes are known.
#[inline]
pub(crate) fn resolve_constraints(
    task: &str,
    args: &[IssuedArg],
    cons: &[UserConstraint],
) -> Result<Args<Constraint>> {
    // Unbound outputs have no extent to partition: constraints cannot name them.
    let pos = |v: &ViewId, c: &'static str| match args.iter().position(|a| v.names(a)) {
        None => Err(RuntimeError::NotAnArgument {
            task: task.into(),
            constraint: c,
            store: v.store,
        }),
        Some(i) if args[i].privilege == Privilege::WriteUnbound => {
            Err(RuntimeError::UnboundMisuse {
                task: task.into(),
                store: v.store,
            })
        }
        Some(i) => Ok(i),
    };
    let one = |c: &UserConstraint| -> Result<Constraint> {
        Ok(match c {
            UserConstraint::Align(a, b) => Constraint::Align(pos(a, "align")?, pos(b, "align")?),
            UserConstraint::Broadcast(s, dims) => {
                let i = pos(s, "broadcast")?;
                let rank = args[i].root.dim;
                let Some(mask) = broadcast_mask(dims, rank) else {
                    let d = dims.iter().copied().find(|&d| d >= rank).unwrap_or(rank);
                    return Err(RuntimeError::BroadcastDim {
                        task: task.into(),
                        store: s.store,
                        dim: d,
                        rank,
                    });
                };
                Constraint::Broadcast(i, mask)
            }
            UserConstraint::Image(src, dst) => {
                let (i, j) = (pos(src, "image")?, pos(dst, "image")?);
                let root = &args[i].root;
                let ok_type = matches!(
                    root.dtype,
                    DType::Range | DType::I64 | DType::I32 | DType::U64 | DType::U32
                );
                if !ok_type || root.dim != 1 {
                    return Err(RuntimeError::ImageSource {
                        task: task.into(),
                        store: root.id,
                        dtype: root.dtype,
                        rank: root.dim,
                    });
                }
                Constraint::Image { src: i, dst: j }
            }
            UserConstraint::Tile(s, cuts) => {
                let i = pos(s, "tile")?;
                check_cuts(task, s.store, args[i].root.dim, cuts)?;
                Constraint::Tile(i, cuts.clone())
            }
        })
    };
    // A loop, not `collect` into a `Result`: that goes through a shunt that pushes one by
    // one with a capacity check each (~350 instructions per stencil task).
    let mut out = Args::new();
    for c in cons {
        out.push(one(c)?);
    }
    if repeats_a_view(args) {
        align_repeated_views(args, &mut out);
    }
    Ok(out)
}

/// Whether two arguments are the same view of one store (both read: aliasing with a write is
/// refused). A few comparisons; almost never true.
#[inline]
pub(crate) fn repeats_a_view(args: &[IssuedArg]) -> bool {
    (1..args.len()).any(|j| args[..j].iter().any(|a| same_view(a, &args[j])))
}

fn same_view(a: &IssuedArg, b: &IssuedArg) -> bool {
    a.view == b.view && Arc::ptr_eq(&a.root, &b.root)
}

/// A constraint names a view, and a view given as several arguments is one operand to it:
/// each later occurrence of a view that a constraint resolved to (its first occurrence) is
/// aligned with that one, so every occurrence gets the partition the constraints give
/// (`read(v).read(v).align(v, v)`, a dot of `v` with itself, tiles both alike; an image into
/// `w` that is also the tiled `y` is the solver's clear "tiled ... cannot also be an image",
/// not the image's points reading a tile). An alignment already there is not added twice.
#[cold]
fn align_repeated_views(args: &[IssuedArg], out: &mut Args<Constraint>) {
    let named: Vec<usize> = out.iter().flat_map(positions).collect();
    for &first in &named {
        for k in first + 1..args.len() {
            let align = Constraint::Align(first, k);
            if same_view(&args[first], &args[k]) && !out.contains(&align) {
                out.push(align);
            }
        }
    }
}

/// The argument positions a constraint names.
fn positions(c: &Constraint) -> smallvec::SmallVec<[usize; 2]> {
    match *c {
        Constraint::Align(a, b) => smallvec::smallvec![a, b],
        Constraint::Image { src, dst } => smallvec::smallvec![src, dst],
        Constraint::Broadcast(a, _) | Constraint::Tile(a, _) => smallvec::smallvec![a],
    }
}

/// What can be checked of a tiling before the launch domain is known: one cut per
/// dimension, split points that never decrease (equal points make empty tiles).
fn check_cuts(task: &str, store: u64, rank: usize, cuts: &[crate::Cut]) -> Result<()> {
    let err = |reason: String| RuntimeError::Tile {
        task: task.into(),
        store,
        reason,
    };
    if cuts.len() != rank {
        return Err(err(format!(
            "{} cuts given for a store of {rank} dimensions",
            cuts.len()
        )));
    }
    for c in cuts {
        if let crate::Cut::At(_, p) = c {
            if p.windows(2).any(|w| w[0] > w[1]) {
                return Err(err(format!("split points {p:?} decrease")));
            }
        }
    }
    Ok(())
}

/// A sharding key names each dimension of a fixed launch domain at most once.
pub(crate) fn check_shard(task: &str, dims: &[usize], domain: Option<&Domain>) -> Result<()> {
    let ok = domain.is_some_and(|d| {
        dims.iter()
            .enumerate()
            .all(|(i, &k)| k < d.dim() && !dims[..i].contains(&k))
    });
    if ok {
        return Ok(());
    }
    Err(RuntimeError::BadShardKey {
        task: task.into(),
        dims: dims.to_vec(),
        domain: domain.map(|d| d.extents()),
    })
}

/// `align` needs equal shapes; checked once shapes are known (unbound stores bind late).
pub(crate) fn check_shapes(task: &str, args: &[SolverArg], cons: &[Constraint]) -> Result<()> {
    for c in cons {
        if let Constraint::Align(a, b) = *c {
            let (Some(ra), Some(rb)) = (args[a].rect, args[b].rect) else {
                return Err(RuntimeError::UnboundMisuse {
                    task: task.into(),
                    store: args[a].root.id,
                });
            };
            if ra.shape() != rb.shape() {
                return Err(RuntimeError::AlignShapes {
                    task: task.into(),
                    a: args[a].root.id,
                    b: args[b].root.id,
                    sa: ra.shape(),
                    sb: rb.shape(),
                });
            }
        }
    }
    Ok(())
}

/// Refuses tasks whose points would race: two arguments on overlapping parts of one store where
/// one is written, or one written argument whose points' sub-stores overlap (reductions may
/// overlap: they fold in point order).
pub(crate) fn check_aliasing(
    task: &str,
    args: &[LaunchArg],
    sol: &Solution,
    interner: &Interner,
) -> Result<()> {
    let overlap = |a: &[Rect], b: &[Rect], distinct_points: bool| {
        a.iter().enumerate().any(|(p, ra)| {
            b.iter()
                .enumerate()
                .any(|(q, rb)| (!distinct_points || p != q) && ra.overlaps(rb))
        })
    };
    for (i, a) in args.iter().enumerate() {
        let written = matches!(a.privilege, Privilege::Write | Privilege::ReadWrite);
        if written {
            let part: &Partition = interner.get(sol.parts[i].expect("bound args are partitioned"));
            if !part.disjoint_by_construction(&sol.domain) && overlap(&a.rects, &a.rects, true) {
                return Err(RuntimeError::OverlappingWrites {
                    task: task.into(),
                    arg: i,
                    store: a.root.id,
                });
            }
        }
        for (j, b) in args.iter().enumerate().skip(i + 1) {
            // An unbound output has no sub-stores to overlap yet, and it is written whole:
            // given twice, the second argument's pieces were dropped without a word.
            let unbound = |x: &LaunchArg| x.privilege == Privilege::WriteUnbound;
            if Arc::ptr_eq(&a.root, &b.root)
                && (a.privilege.writes() || b.privilege.writes())
                && (unbound(a) || unbound(b) || overlap(&a.rects, &b.rects, false))
            {
                return Err(RuntimeError::AliasedArguments {
                    task: task.into(),
                    a: i,
                    b: j,
                    store: a.root.id,
                });
            }
        }
    }
    Ok(())
}
