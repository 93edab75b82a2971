//! Running one point of a fused task: the element-wise chunk loop when every sub-task is
//! element-wise and the point's sub-stores line up, else each sub-task's body in issue order.

use super::failure::{self, SubFailures};
use super::kernel::{fused_chunk, run_chunks, zero_kernel, Slot, Step, CHUNK};
use super::scratch::Scratch;
use super::{FusedShape, SubShape};
use crate::buffer::{Borrow, Data};
use crate::dtype::{DType, Scalar};
use crate::error::RuntimeError;
use crate::execute::context::{Locals, TaskContext};
use crate::execute::launch::{panic_message, Launched, PointOut};
use crate::issue::task::{Privilege, ScalarArg};
use crate::rect::Rect;
use smallvec::SmallVec;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// Runs `point` of fused task `task` and returns what it leaves for the finish step.
/// `trusted`: a point of a verified replay (`tracing::verify`), whose views hold no ledger
/// borrows. `failed`: the sub-tasks that cannot run (skipped); a sub-task whose body panics
/// is added, with those it fails in turn ([`failure::settle`]), and the others go on.
pub(crate) fn run_fused_point(
    task: &Launched,
    shape: &FusedShape,
    point: usize,
    trusted: bool,
    failed: &mut SubFailures,
) -> PointOut {
    // Each sub-task's own panic in this point, kept apart from `failed` (which also says
    // what failed for want of inputs): a later panic of an earlier sub-task settles again.
    let mut panics: SubFailures = smallvec::smallvec![None; shape.subs.len()];
    if shape.kernel {
        if let Some(out) = kernel_point(task, shape, point, trusted, failed, &mut panics) {
            return out;
        }
    }
    let locals = Locals::new(task, point);
    let mut out = PointOut {
        results: smallvec::smallvec![None; task.results.len()],
        ..PointOut::default()
    };
    let Some(first) = shape.subs.first() else {
        return out;
    };
    let mut ctx = TaskContext::for_sub(task, point, first, &locals, trusted);
    for (s, sub) in shape.subs.iter().enumerate() {
        if failed[s].is_some() {
            continue;
        }
        ctx.set_sub(sub);
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| (sub.body)(&mut ctx))) {
            // What it left is dropped: its folds and results are not to be used.
            drop(ctx.out.take());
            sub_panicked(task, shape, point, failed, &mut panics, s, p);
            continue;
        }
        let o = ctx.out.take();
        out.reduce.extend(o.reduce);
        out.pieces.extend(o.pieces);
        for (slot, v) in o.results.into_iter().enumerate() {
            if v.is_some() {
                out.results[slot] = v;
            }
        }
    }
    out
}

/// Sub-task `s` panicked in `point`: recorded in `panics`, and `failed` settled anew from
/// the panics so far ([`failure::resettle`]): a later sub-task that this failure reaches
/// fails with the error its unfused point would give, even where it had failed already
/// for another input (it checked its inputs before `s` ran; unfused, `s` fails first).
fn sub_panicked(
    task: &Launched,
    shape: &FusedShape,
    point: usize,
    failed: &mut SubFailures,
    panics: &mut SubFailures,
    s: usize,
    payload: Box<dyn std::any::Any + Send>,
) {
    panics[s] = Some(RuntimeError::TaskFailed {
        task: shape.subs[s].name.to_string(),
        point: task.domain.point(point)[..task.domain.dim()].to_vec(),
        message: panic_message(&*payload),
    });
    failure::resettle(task, shape, failed, panics, point);
}

/// The cells `rect` covers in a store laid out over `whole`, when they are one run.
fn contiguous(rect: &Rect, whole: &Rect) -> Option<(usize, usize)> {
    if rect.is_empty() {
        return Some((0, 0));
    }
    let whole_rows =
        (1..rect.dim()).all(|d| rect.lo()[d] == whole.lo()[d] && rect.hi()[d] == whole.hi()[d]);
    whole_rows.then(|| (whole.linear(rect.lo()), rect.volume()))
}

fn base(d: &Data) -> *mut u8 {
    match d {
        Data::F64(b) => b.base() as *mut u8,
        Data::F32(b) => b.base() as *mut u8,
        Data::I64(b) => b.base() as *mut u8,
        Data::I32(b) => b.base() as *mut u8,
        Data::U64(b) => b.base() as *mut u8,
        Data::U32(b) => b.base() as *mut u8,
        Data::Range(b) => b.base() as *mut u8,
    }
}

/// The chunk loop over `point`, or `None` when the point's sub-stores do not line up (not
/// contiguous, different lengths, or an element type other than a kernel's): the caller then
/// runs the bodies.
fn kernel_point(
    task: &Launched,
    shape: &FusedShape,
    point: usize,
    trusted: bool,
    failed: &mut SubFailures,
    panics: &mut SubFailures,
) -> Option<PointOut> {
    let (n, spans) = line_up(task, shape, point)?;
    let (element, chunk, prefetch) = chunking(task, shape);
    let mut scratch = Scratch::default();
    let bases: SmallVec<[*mut u8; 8]> = element
        .iter()
        .map(|&e| scratch.take(chunk.min(n) * e))
        .collect();
    // Held for the whole loop: every store cell the point touches, exclusive where written.
    let mut borrows: SmallVec<[Borrow<'_>; 8]> = SmallVec::new();
    let (slots, cleared) = slots(task, shape, point, trusted, &spans, &bases, &mut borrows);
    let (steps, first_sub) = steps(task, shape, &slots, cleared, failed);
    let mut results: SmallVec<[Option<Scalar>; 1]> = smallvec::smallvec![None; task.results.len()];
    let mut live: SmallVec<[bool; 8]> = (0..steps.len())
        .map(|i| i < first_sub || failed[i - first_sub].is_none())
        .collect();
    run_chunks(
        n,
        chunk,
        &steps,
        &mut results,
        &mut live,
        &mut |i, payload, live| {
            // The zeroing step is the runtime's own: a panic there fails the whole task.
            if i < first_sub {
                resume_unwind(payload);
            }
            sub_panicked(task, shape, point, failed, panics, i - first_sub, payload);
            for (l, f) in live[first_sub..].iter_mut().zip(failed.iter()) {
                *l = f.is_none();
            }
        },
        prefetch,
    );
    drop((borrows, scratch));
    Some(PointOut {
        results,
        ..PointOut::default()
    })
}

/// Per argument, the index of the point's first cell in its store (0 in scratch) and the
/// number of cells.
type Spans = SmallVec<[(usize, usize); 8]>;

/// Where each argument's cells start in its store (or scratch) and how many the point has,
/// with that common length; `None` unless every argument is one contiguous run of the same
/// length and every sub-task's arguments hold its kernel's element type.
fn line_up(task: &Launched, shape: &FusedShape, point: usize) -> Option<(usize, Spans)> {
    let mut n = None;
    let mut spans = Spans::new();
    for a in &task.args {
        let rect = a.rects[point];
        let span = if a.local {
            (0, rect.volume())
        } else {
            contiguous(&rect, &a.root.bound()?.rect)?
        };
        if *n.get_or_insert(span.1) != span.1 {
            return None;
        }
        spans.push(span);
    }
    for s in &shape.subs {
        let dtype = s.kernel.as_ref()?.dtype;
        if s.args
            .iter()
            .any(|(j, _)| task.args[*j].root.dtype != dtype)
        {
            return None;
        }
    }
    Some((n.unwrap_or(0), spans))
}

/// The bytes per element of each scratch buffer, the chunk length, and whether the loop
/// prefetches the next chunk.
fn chunking(task: &Launched, shape: &FusedShape) -> (SmallVec<[usize; 8]>, usize, bool) {
    // Temporaries live in this thread's reused chunk buffers (no allocation per point), those
    // whose lives do not overlap in one buffer (`shape.scratch`), as large as its largest
    // element type needs.
    let (buffer_of, buffers) = &shape.scratch;
    let mut element: SmallVec<[usize; 8]> = smallvec::smallvec![0; *buffers];
    let mut stores = 0;
    for (a, b) in task.args.iter().zip(buffer_of) {
        match (a.local, b) {
            (true, Some(b)) => element[*b] = element[*b].max(a.root.dtype.size()),
            _ => stores += a.root.dtype.size(),
        }
    }
    // Chunks sized so that one of every array stays in L1, the next one prefetched while the
    // steps run (`kernel::fused_chunk`), except where a sub-task folds a scalar result: its
    // chunks' partial results fold in chunk order, and only chunks of the unfused body's
    // length fold to the unfused result bit for bit. At that length the prefetch does not
    // pay (Jacobi with its residual 3.6-3.8 ms without, 4.2-4.3 ms with).
    let l1 = if task.results.is_empty() {
        fused_chunk(stores + element.iter().sum::<usize>())
    } else {
        None
    };
    let (chunk, prefetch) = l1.map_or((CHUNK, false), |c| (c, true));
    (element, chunk, prefetch)
}

/// Temporaries read before they are written, with their element types: each is cleared
/// before every chunk by the zeroing kernel of its own type.
type Cleared = SmallVec<[(DType, Slot); 4]>;

/// Each argument's slot: its store's cells from the point's first (borrowed into `borrows`
/// for the whole loop), or a temporary's scratch buffer (`bases`); and the temporaries read
/// before they are written, which are cleared before every chunk.
fn slots<'t>(
    task: &'t Launched,
    shape: &FusedShape,
    point: usize,
    trusted: bool,
    spans: &[(usize, usize)],
    bases: &[*mut u8],
    borrows: &mut SmallVec<[Borrow<'t>; 8]>,
) -> (SmallVec<[Slot; 8]>, Cleared) {
    let mut slots: SmallVec<[Slot; 8]> = SmallVec::new();
    let mut cleared = Cleared::new();
    let buffer_of = &shape.scratch.0;
    for (((a, f), &(start, _)), b) in task.args.iter().zip(&shape.args).zip(spans).zip(buffer_of) {
        let size = a.root.dtype.size();
        if a.local {
            let slot = Slot {
                base: bases[b.expect("a temporary has a buffer")],
                size,
                scratch: true,
            };
            // The sub-task naming it first was given `write`: its body assigns every element.
            if shape.subs[f.from.0].args[f.from.1].1 != Privilege::Write {
                cleared.push((a.root.dtype, slot));
            }
            slots.push(slot);
            continue;
        }
        let rect = a.rects[point];
        // Not zeroed where the sub-task naming it first promised `write_all`: each chunk's
        // steps run in issue order, so that sub-task assigns the chunk before a later reads it.
        borrows.push(a.borrow_cells(rect, a.privilege.writes(), trusted));
        let data = a.root.data().expect("bound");
        slots.push(Slot {
            base: base(data).wrapping_add(start * size),
            size,
            scratch: false,
        });
    }
    (slots, cleared)
}

/// The chunk loop's steps: the clearing of `cleared` first where there is any (one step per
/// element type: a zeroing kernel clears `len` elements of its own type), then one per
/// sub-task, in issue order; and the index of the first sub-task's step.
fn steps<'s>(
    task: &Launched,
    shape: &'s FusedShape,
    slots: &[Slot],
    cleared: Cleared,
    failed: &SubFailures,
) -> (SmallVec<[Step<'s>; 8]>, usize) {
    let mut clear: SmallVec<[Step<'s>; 2]> = SmallVec::new();
    for (dtype, slot) in cleared {
        match clear.iter_mut().find(|s| s.kernel.dtype == dtype) {
            Some(s) => s.outs.push(slot),
            None => clear.push(Step {
                kernel: zero_kernel(dtype),
                ins: SmallVec::new(),
                outs: smallvec::smallvec![slot],
                scalars: SmallVec::new(),
                result: None,
            }),
        }
    }
    let first_sub = clear.len();
    let slots_with = |s: &SubShape, read: bool| {
        s.args
            .iter()
            .filter(|(_, p)| (*p == Privilege::Read) == read)
            .map(|(j, _)| slots[*j])
            .collect()
    };
    let steps = clear
        .into_iter()
        .chain(shape.subs.iter().zip(failed.iter()).map(|(s, f)| {
            Step {
                kernel: s.kernel.as_deref().expect("checked by line_up"),
                ins: slots_with(s, true),
                outs: slots_with(s, false),
                // A failed sub-task's step never runs (its futures may have failed).
                scalars: match f {
                    Some(_) => SmallVec::new(),
                    None => task.scalars[s.scalars.clone()]
                        .iter()
                        .map(scalar_value)
                        .collect(),
                },
                result: s.result.map(|slot| (task.results[slot].0, slot)),
            }
        }))
        .collect();
    (steps, first_sub)
}

fn scalar_value(s: &ScalarArg) -> Scalar {
    match s {
        ScalarArg::Value(v) => *v,
        ScalarArg::Future(cell) => match cell.value.get() {
            Some(Ok(v)) => *v,
            Some(Err(e)) => panic!("future argument failed: {e}"),
            None => panic!("internal error: future argument not ready"),
        },
    }
}
