//! What a task body sees: its point, scalar arguments, and bounds-checked views of its
//! sub-stores. Indices passed to views are in the store view's coordinates (a slice starts at
//! 0); an index outside the point's sub-store panics, which fails the task with a clear message.

use crate::buffer::{Borrow, Buf, Data, Ledger};
use crate::dtype::{DType, Element, ReduceOp, Scalar};
use crate::execute::launch::{LaunchArg, Launched, PointOut};
use crate::fusion::SubShape;
use crate::issue::task::{Privilege, ScalarArg};
use crate::rect::{Rect, MAX_DIMS};
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// The context of one point task.
///
/// A body runs on a worker thread: it must not submit tasks, read stores back or wait on futures
/// (the work it would wait for may need that worker).
pub struct TaskContext<'a> {
    task: &'a Launched,
    point: usize,
    point_nd: [usize; MAX_DIMS],
    pub(crate) out: Outbox,
    /// In a fused task: the sub-task whose body runs (its argument and scalar numbering).
    sub: Option<&'a SubShape>,
    /// In a fused task: this point's scratch for arguments that became temporaries.
    locals: Option<&'a Locals>,
    /// The point's shared borrows of stores it only reads, through two or more arguments
    /// (branch ledger15): taken when the context is made, released when it drops (both
    /// inside the point's run, before it finishes).
    held: Held<'a>,
    /// A point of a verified replay (`tracing::verify`): its views hold no ledger borrows.
    trusted: bool,
}

/// One point's borrows of the stores it reads through several arguments and never writes:
/// one ledger operation per store and point instead of one per view (a stencil point's three
/// views of its input were three borrows and three releases on the line both points use).
#[derive(Default)]
struct Held<'a> {
    /// Bit `i`: a read view of (fused) argument `i` is covered by `borrows`, no borrow of its own
    /// (arguments from 64 on never are: `ReadGroups::of` groups at most 16).
    covered: u64,
    /// The borrows: most points hold one group (a stencil's input) or none, so the first is
    /// inline and the rest in a list that allocates only for a second group. Dropping these
    /// is a test of the option and of the list's capacity, inline; a `SmallVec` of borrows
    /// was an out-of-line drop (~30 instructions a point, branch metg22).
    first: Option<Borrow<'a>>,
    rest: Vec<Borrow<'a>>,
}

impl<'a> Held<'a> {
    /// Borrows, shared, the union of the point's sub-stores of every store that the task
    /// passes through two or more arguments all with `Privilege::Read` (not local), where that
    /// union is exactly one rectangle. Anything else (a store also written, reduced or
    /// overwritten by the point, sub-stores with gaps between them, a borrow refused) keeps
    /// one borrow per view, so every conflict is refused and reported as before: the union
    /// covers exactly the cells the arguments cover, and no view of this point can write them.
    ///
    /// Which arguments go together is the task's [`ReadGroups`], worked out once when it was
    /// launched (branch metg17); for a replayed task the union of each group at each point
    /// too, once per recording. What depends on the point or on time is checked here: each
    /// member is still a read, not local, of the group's store, the store is bound, and the
    /// point has a sub-store of each; then either their union is worked out, or the recorded
    /// union is taken once it is seen to contain every member's sub-store. So groups or
    /// unions that did not match the arguments could cost the sharing (or refuse a borrow,
    /// as an overlap does), never leave a view's cells outside the point's borrow.
    fn take(task: &'a Launched, point: usize, trusted: bool) -> Held<'a> {
        let mut held = Held::default();
        let groups = &task.read_groups;
        for (g, &mask) in groups.masks().iter().enumerate() {
            let Some(a) = task.args.get(mask.trailing_zeros() as usize) else {
                continue;
            };
            if a.root.bound().is_none() {
                continue;
            }
            // Checked against this task's arguments when it was launched (branch metg19).
            let rect = match groups.verified_union(g, point) {
                Some(u) => *u,
                None => {
                    let recorded = groups.union(g, point);
                    let mut rects: [&Rect; 16] = [&a.view; 16];
                    let Some(m) = members(&task.args, mask, point, recorded, &mut rects) else {
                        continue;
                    };
                    match recorded.copied().or_else(|| exact_union(&rects[..m])) {
                        Some(rect) => rect,
                        None => continue,
                    }
                }
            };
            let b = match trusted {
                true => Ok(a.root.unheld(rect, false, false)),
                false => a.root.ledger.borrow(rect, false),
            };
            if let Ok(b) = b {
                match held.first {
                    None => held.first = Some(b),
                    Some(_) => held.rest.push(b),
                }
                held.covered |= u64::from(mask);
                #[cfg(test)]
                tests::count_group_borrow(&a.root, groups.verified_union(g, point).is_some());
            }
        }
        held
    }
}

/// What a point leaves for its task's finish step ([`PointOut`]), made at the first thing
/// left. Most points leave nothing (a stencil's, any task without a finish step): for them the
/// context holds one null pointer, not a `PointOut` of four empty lists to build and to drop
/// at every point (~60 instructions a point, branch metg22).
#[derive(Default)]
pub(crate) struct Outbox(Mutex<Option<Box<PointOut>>>);

impl Outbox {
    /// Runs `f` on the point's `PointOut`, made empty first if nothing was left yet.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut PointOut) -> R) -> R {
        let mut out = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(out.get_or_insert_with(Box::default))
    }

    /// What the point left (empty if nothing), taken out.
    pub(crate) fn take(&mut self) -> PointOut {
        self.0
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .map_or_else(PointOut::default, |b| *b)
    }
}

/// The sub-stores at `point` of the arguments in `mask` (into `rects`, in argument order) and
/// their count, when there are two or more and each is a read, not local, of the store of the
/// first, has a sub-store at `point`, and lies in `within` (if given); else `None`. What a
/// point's shared borrow of a group needs of its members ([`Held::take`],
/// [`ReadGroups::verify`]).
fn members<'t>(
    args: &'t [LaunchArg],
    mask: u16,
    point: usize,
    within: Option<&Rect>,
    rects: &mut [&'t Rect; 16],
) -> Option<usize> {
    let a = args.get(mask.trailing_zeros() as usize)?;
    let (mut m, mut bits) = (0, mask);
    while bits != 0 {
        let j = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        let r = args
            .get(j)
            .filter(|b| ReadGroups::reads(b) && Arc::ptr_eq(&b.root, &a.root))
            .and_then(|b| b.rects.get(point))
            .filter(|r| within.is_none_or(|u| u.contains(r)))?;
        rects[m] = r;
        m += 1;
    }
    (m >= 2).then_some(m)
}

/// Which of a task's arguments a point's [`Held`] borrow covers together: per store that the
/// task passes through two or more arguments, all `Privilege::Read` and none local, the mask
/// of those arguments (at most 16 arguments looked at, so at most 8 groups). A function of
/// the arguments' stores, privileges and locality alone, the same at every point: worked out
/// once per launched task ([`Launched::read_groups`]: by `Inner::launched` and
/// `launch_fused`, and once per recording for a replayed task, whose stores and privileges
/// every replay verifies) instead of at every point, as ledger15 did (~+320 instructions a
/// point, most of them this search and the union).
#[derive(Default, Debug)]
pub(crate) struct ReadGroups {
    masks: [u16; 8],
    len: u8,
    /// A recorded task's: each group's union at each point (`[point * len + group]`,
    /// [`exact_union`] of its members' sub-stores, `None` where there is none), worked out
    /// once per recording from the sub-stores every replay launches with
    /// ([`ReadGroups::with_unions`]). `None`: worked out at each point.
    unions: Option<Arc<[Option<Rect>]>>,
    /// Bit `point * len + group` (the first 64): that union holds the sub-store of each of
    /// the group's members at that point, as recorded ([`ReadGroups::check_unions`], once
    /// per recording).
    contained: u64,
    /// The bits of `contained` that hold for the launched task's own arguments
    /// ([`ReadGroups::verify`], once per task on the issuing thread): the group's members
    /// are reads, not local, of one store, with the very sub-stores the unions were checked
    /// against. A point takes such a union as it is. Never copied: it is about one task.
    verified: u64,
}

impl Clone for ReadGroups {
    /// A copy is not verified (`verified` is about one task's arguments).
    fn clone(&self) -> Self {
        ReadGroups {
            masks: self.masks,
            len: self.len,
            unions: self.unions.clone(),
            contained: self.contained,
            verified: 0,
        }
    }
}

impl ReadGroups {
    /// The groups of `args`.
    pub(crate) fn of(args: &[LaunchArg]) -> ReadGroups {
        let mut groups = ReadGroups::default();
        if args.len() < 2 || args.len() > 16 {
            return groups;
        }
        let mut seen = 0u32;
        for (i, a) in args.iter().enumerate() {
            if seen >> i & 1 == 1 || !ReadGroups::reads(a) {
                continue;
            }
            let (mut group, mut ok) = (0u16, true);
            for (j, b) in args.iter().enumerate() {
                if Arc::ptr_eq(&a.root, &b.root) {
                    seen |= 1 << j;
                    ok &= ReadGroups::reads(b);
                    group |= 1 << j;
                }
            }
            if ok && group.count_ones() >= 2 {
                groups.masks[usize::from(groups.len)] = group;
                groups.len += 1;
            }
        }
        groups
    }

    /// [`ReadGroups::of`] `args`, with each group's union at each of `points` points (a
    /// recorded task's: its sub-stores are the same at every replay).
    pub(crate) fn with_unions(args: &[LaunchArg], points: usize) -> ReadGroups {
        let mut groups = ReadGroups::of(args);
        if groups.len == 0 {
            return groups;
        }
        let unions = (0..points)
            .flat_map(|p| {
                groups.masks().iter().map(move |&mask| {
                    let rects: Option<Vec<&Rect>> = (0..args.len())
                        .filter(|j| mask >> j & 1 == 1)
                        .map(|j| args[j].rects.get(p))
                        .collect();
                    exact_union(&rects?)
                })
            })
            .collect();
        groups.unions = Some(unions);
        groups.check_unions(args);
        groups
    }

    /// Sets [`ReadGroups::contained`]: which recorded unions hold every member's sub-store
    /// at their point in `args` (the recorded arguments, whose sub-stores every replay
    /// launches with).
    fn check_unions(&mut self, args: &[LaunchArg]) {
        self.contained = 0;
        let Some(unions) = self.unions.as_deref() else {
            return;
        };
        let len = usize::from(self.len);
        for (i, u) in unions.iter().enumerate().take(64) {
            let Some(u) = u else {
                continue;
            };
            let (point, g) = (i / len, i % len);
            if members(args, self.masks[g], point, Some(u), &mut [u; 16]).is_some() {
                self.contained |= 1 << i;
            }
        }
    }

    /// Which recorded unions a point of the launched task whose arguments are `args` may take
    /// without checking them (branch metg19): those [`ReadGroups::contained`] says hold
    /// their members' recorded sub-stores, for groups whose members in `args` are still
    /// reads, not local, of one store, each with the very sub-stores recorded (`recorded(j)`:
    /// argument `j`'s, the same `Arc`). That is what [`Held::take`] checks at each point
    /// (~200 instructions a stencil point, on the critical path of a step), once per task on
    /// the issuing thread, with no rectangle compared. Call once the arguments are final.
    pub(crate) fn verify<'r>(
        &mut self,
        args: &[LaunchArg],
        recorded: impl Fn(usize) -> Option<&'r Arc<[Rect]>>,
    ) {
        self.verified = 0;
        if self.contained == 0 {
            return;
        }
        let len = usize::from(self.len);
        for g in 0..len {
            let mask = self.masks[g];
            let Some(a) = args.get(mask.trailing_zeros() as usize) else {
                continue;
            };
            let (mut bits, mut ok) = (mask, true);
            while bits != 0 && ok {
                let j = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                ok = args.get(j).is_some_and(|b| {
                    ReadGroups::reads(b)
                        && Arc::ptr_eq(&b.root, &a.root)
                        && recorded(j).is_some_and(|r| Arc::ptr_eq(r, &b.rects))
                });
            }
            if ok {
                // Group `g` at every point: bits g, g + len, g + 2 len, ... (doubling).
                let (mut at, mut step) = (1u64 << g, len);
                while step < 64 {
                    at |= at << step;
                    step *= 2;
                }
                self.verified |= self.contained & at;
            }
        }
    }

    /// The recorded union of group `g` at `point` when [`ReadGroups::verify`] found it right
    /// for this task's arguments.
    fn verified_union(&self, g: usize, point: usize) -> Option<&Rect> {
        let i = point * usize::from(self.len) + g;
        if i >= 64 || self.verified >> i & 1 == 0 {
            return None;
        }
        self.unions.as_deref()?.get(i)?.as_ref()
    }

    /// The recorded union of group `g` at `point`, if there is one.
    fn union(&self, g: usize, point: usize) -> Option<&Rect> {
        self.unions
            .as_deref()?
            .get(point * usize::from(self.len) + g)?
            .as_ref()
    }

    /// Whether a point's view of `a` may be covered by a group's borrow.
    fn reads(a: &LaunchArg) -> bool {
        a.privilege == Privilege::Read && !a.local
    }

    fn masks(&self) -> &[u16] {
        &self.masks[..usize::from(self.len)]
    }
}

/// The union of `rects` (same dimension) when it is exactly one non-empty rectangle that
/// covers no cell outside them, found only in the simple case: all equal except along one
/// dimension, along which they overlap or touch. `None` otherwise (including any empty one).
/// No copies and no sort: a handful of sub-stores, once per point.
fn exact_union(rects: &[&Rect]) -> Option<Rect> {
    let first = *rects.first()?;
    let dim = first.dim();
    let (flo, fhi) = (first.lo(), first.hi());
    let mut along = None;
    for r in rects {
        if r.is_empty() || r.dim() != dim {
            return None;
        }
        let (rlo, rhi) = (r.lo(), r.hi());
        for d in 0..dim {
            if rlo[d] != flo[d] || rhi[d] != fhi[d] {
                match along {
                    None => along = Some(d),
                    Some(k) if k == d => {}
                    Some(_) => return None,
                }
            }
        }
    }
    let Some(k) = along else {
        return Some(*first);
    };
    let (mut lo, mut hi) = (flo[k], fhi[k]);
    for r in rects {
        lo = lo.min(r.lo()[k]);
        hi = hi.max(r.hi()[k]);
    }
    // No gap: every run that ends before `hi` ends inside another run.
    for r in rects {
        let e = r.hi()[k];
        if e < hi && !rects.iter().any(|s| s.lo()[k] <= e && e < s.hi()[k]) {
            return None;
        }
    }
    Some(first.with_range(k, lo, hi))
}

/// One point's task-local buffers for a fused task's temporaries, by fused argument: each
/// holds the point's sub-store, zero-filled like the lazily allocated store it replaces.
pub(crate) struct Locals {
    bufs: Vec<Option<(Data, Ledger)>>,
}

impl Locals {
    pub(crate) fn new(task: &Launched, point: usize) -> Locals {
        if !task.args.iter().any(|a| a.local) {
            // Most fused tasks have no temporary: no allocation per point for them.
            return Locals { bufs: Vec::new() };
        }
        Locals {
            bufs: task
                .args
                .iter()
                .map(|a| {
                    a.local.then(|| {
                        let len = a.rects[point].volume();
                        (Data::zeros(a.root.dtype, len), Ledger::default())
                    })
                })
                .collect(),
        }
    }
}

impl<'a> TaskContext<'a> {
    /// The context of `task`'s point `point`; `trusted`: a point of a verified replay, whose
    /// views hold no ledger borrows (`tracing::verify`).
    pub(crate) fn at(task: &'a Launched, point: usize, trusted: bool) -> TaskContext<'a> {
        TaskContext {
            task,
            point,
            point_nd: task.domain.point(point),
            out: Outbox::default(),
            sub: None,
            locals: None,
            held: Held::take(task, point, trusted),
            trusted,
        }
    }

    /// The context sub-task `sub` of a fused task sees at `point`.
    pub(crate) fn for_sub(
        task: &'a Launched,
        point: usize,
        sub: &'a SubShape,
        locals: &'a Locals,
        trusted: bool,
    ) -> TaskContext<'a> {
        TaskContext {
            sub: Some(sub),
            locals: Some(locals),
            ..TaskContext::at(task, point, trusted)
        }
    }

    /// Makes this context the one sub-task `sub` of the same fused task sees at the same point
    /// (one context per point, not one per sub-task).
    pub(crate) fn set_sub(&mut self, sub: &'a SubShape) {
        self.sub = Some(sub);
    }

    /// The fused argument behind the body's argument `arg`.
    #[inline]
    fn map(&self, arg: usize) -> usize {
        let n = self.args_len();
        if arg >= n {
            no_argument(arg, n);
        }
        self.sub.map_or(arg, |s| s.args[arg].0)
    }

    /// Number of store arguments the body was given.
    #[inline]
    pub(crate) fn args_len(&self) -> usize {
        self.sub.map_or(self.task.args.len(), |s| s.args.len())
    }

    /// Number of scalar arguments the body was given.
    pub(crate) fn scalars_len(&self) -> usize {
        self.sub
            .map_or(self.task.scalars.len(), |s| s.scalars.len())
    }

    /// The privilege the body's argument `arg` was passed with.
    pub(crate) fn privilege(&self, arg: usize) -> Privilege {
        match self.sub {
            Some(s) => s.args[arg].1,
            None => self.arg(arg).privilege,
        }
    }

    /// The operator of the result this body contributes to, if it was submitted with one.
    pub(crate) fn result_op(&self) -> Option<ReduceOp> {
        match self.sub {
            Some(s) => s.result.map(|slot| self.task.results[slot].0),
            None => self.task.results.first().map(|r| r.0),
        }
    }

    /// The point's coordinates in the launch domain.
    pub fn point(&self) -> &[usize] {
        &self.point_nd[..self.task.domain.dim()]
    }

    /// The point's row-major index in the launch domain.
    pub fn linear_point(&self) -> usize {
        self.point
    }

    /// The launch domain's extents.
    pub fn domain(&self) -> Vec<usize> {
        self.task.domain.extents()
    }

    /// The element type of store argument `arg`.
    pub fn dtype(&self, arg: usize) -> DType {
        self.arg(arg).root.dtype
    }

    /// This point's sub-store of argument `arg`, in the store view's coordinates.
    pub fn rect(&self, arg: usize) -> Rect {
        let a = self.arg(arg);
        if a.privilege == Privilege::WriteUnbound {
            panic!("argument {arg} is unbound: it has no sub-store until its pieces are emitted");
        }
        a.rects[self.point].untranslate(a.view.lo())
    }

    fn arg(&self, arg: usize) -> &'a LaunchArg {
        &self.task.args[self.map(arg)]
    }

    /// Scalar argument `i` (scalars and futures, in the order they were added).
    pub fn scalar(&self, i: usize) -> Scalar {
        let n = self.scalars_len();
        if i >= n {
            panic!("scalar {i} does not exist (the task has {n})");
        }
        let at = self.sub.map_or(i, |s| s.scalars.start + i);
        match &self.task.scalars[at] {
            ScalarArg::Value(v) => *v,
            ScalarArg::Future(cell) => match cell.value.get() {
                Some(Ok(v)) => *v,
                Some(Err(e)) => panic!("future argument {i} failed: {e}"),
                None => panic!("internal error: future argument {i} not ready"),
            },
        }
    }

    /// This point's contribution to the task's result (see `submit_reduce`).
    pub fn set_result(&self, v: impl Into<Scalar>) {
        let slot = match self.sub {
            Some(s) => s.result,
            None => (!self.task.results.is_empty()).then_some(0),
        };
        // A result nobody asked for (a plain `submit`) is dropped, as it always was.
        if let Some(slot) = slot {
            self.out.with(|out| {
                if out.results.len() <= slot {
                    out.results.resize(slot + 1, None);
                }
                out.results[slot] = Some(v.into());
            });
        }
    }

    /// Emits this point's piece of unbound argument `arg`.
    pub fn emit<T: Element>(&self, arg: usize, piece: Vec<T>) {
        let (_, at) = self.check(
            arg,
            T::DTYPE,
            |p| p == Privilege::WriteUnbound,
            "write_unbound",
        );
        self.out
            .with(|out| out.pieces.push((at, T::wrap(Buf::from_vec(piece)))));
    }

    /// Argument `arg`, the privilege the body was given it with and its (fused) argument
    /// number, looked up once (a view used to look the argument up three times, through
    /// calls that were not inlined).
    #[inline]
    fn arg_privilege(&self, arg: usize) -> (&'a LaunchArg, Privilege, usize) {
        // One bounds check of the list the body's numbering indexes (not `args_len` and then
        // an index: each a look at whether the small vector spilled, branch metg22).
        match self.sub {
            Some(s) => {
                let Some(&(i, p)) = s.args.get(arg) else {
                    no_argument(arg, s.args.len())
                };
                (&self.task.args[i], p, i)
            }
            None => {
                let Some(a) = self.task.args.get(arg) else {
                    no_argument(arg, self.task.args.len())
                };
                (a, a.privilege, arg)
            }
        }
    }

    /// Argument `arg` and its (fused) argument number, after checking that its privilege
    /// allows `what` and it holds `dtype`. The failures are out of line (`#[cold]`), so that
    /// this inlines into the views a body makes (branch metg19).
    #[inline(always)]
    fn check(
        &self,
        arg: usize,
        dtype: DType,
        ok: impl Fn(Privilege) -> bool,
        what: &str,
    ) -> (&'a LaunchArg, usize) {
        let (a, p, at) = self.arg_privilege(arg);
        if !ok(p) {
            not_allowed(arg, p, what);
        }
        if a.root.dtype != dtype {
            wrong_dtype(arg, a.root.dtype, dtype);
        }
        (a, at)
    }

    /// A view of argument `arg` (`a`, already checked; `at`: its fused argument number).
    /// A read the point's borrow already covers (`Held::take`: the stencil's three reads)
    /// needs no borrow of its own and is made inline in the body; the rest out of line.
    #[inline(always)]
    fn view<T: Element>(
        &self,
        a: &'a LaunchArg,
        at: usize,
        arg: usize,
        exclusive: bool,
    ) -> RawView<'a, T> {
        // `covered` has a bit per argument below 64 (read groups only form among 16): a
        // fused task has more arguments than that, whose shift would overflow.
        if !exclusive && !a.local && at < 64 && self.held.covered >> at & 1 == 1 {
            return RawView::of_store(a, &a.rects[self.point], None);
        }
        self.view_borrowed(a, at, arg, exclusive)
    }

    /// A view that takes a borrow of its own (or a temporary's scratch).
    #[inline(never)]
    fn view_borrowed<T: Element>(
        &self,
        a: &'a LaunchArg,
        at: usize,
        arg: usize,
        exclusive: bool,
    ) -> RawView<'a, T> {
        if a.local {
            return self.local_view(a, at, arg, exclusive);
        }
        let rect = &a.rects[self.point];
        let borrow = a.borrow_cells(*rect, exclusive, self.trusted);
        RawView::of_store(a, rect, Some(borrow))
    }

    /// A view of a temporary's scratch: the point's sub-store, laid out on its own.
    fn local_view<T: Element>(
        &self,
        a: &'a LaunchArg,
        at: usize,
        arg: usize,
        exclusive: bool,
    ) -> RawView<'a, T> {
        let (data, ledger) = self
            .locals
            .and_then(|l| l.bufs.get(at)?.as_ref())
            .expect("a local argument has scratch in its point");
        let rect = &a.rects[self.point];
        RawView {
            buf: T::buf(data).expect("dtype checked"),
            whole: rect,
            rect,
            origin: &a.view,
            _borrow: Some(
                ledger
                    .borrow(*rect, exclusive)
                    .unwrap_or_else(|_| panic!("internal error: scratch of argument {arg} in use")),
            ),
        }
    }

    /// A read-only view of argument `arg` (passed with `read` or `read_write`).
    #[inline]
    pub fn read<T: Element>(&self, arg: usize) -> ReadView<'a, T> {
        let (a, at) = self.check(
            arg,
            T::DTYPE,
            |p| matches!(p, Privilege::Read | Privilege::ReadWrite),
            "reading",
        );
        ReadView {
            raw: self.view(a, at, arg, false),
        }
    }

    /// A writable view of argument `arg` (passed with `write` or `read_write`).
    #[inline]
    pub fn write<T: Element>(&self, arg: usize) -> WriteView<'a, T> {
        let (a, at) = self.check(
            arg,
            T::DTYPE,
            |p| matches!(p, Privilege::Write | Privilege::ReadWrite),
            "writing",
        );
        WriteView {
            raw: self.view(a, at, arg, true),
        }
    }

    /// A reduction view of argument `arg`: starts at the operator's identity and is folded into
    /// the store after all points, in point order.
    pub fn reduce<T: Element>(&self, arg: usize) -> ReduceView<'_, T> {
        let (a, at) = self.check(
            arg,
            T::DTYPE,
            |p| matches!(p, Privilege::Reduce(_)),
            "reducing",
        );
        let Privilege::Reduce(op) = self.privilege(arg) else {
            unreachable!()
        };
        let rect = a.rects[self.point];
        let id = T::identity(op).expect("reduction operator checked at submit");
        ReduceView {
            values: vec![id; rect.volume()],
            rect,
            origin: a.view,
            op,
            arg: at,
            sink: &self.out,
        }
    }
}

/// A body named an argument its task does not have.
#[cold]
#[inline(never)]
fn no_argument(arg: usize, n: usize) -> ! {
    panic!("argument {arg} does not exist (the task has {n})");
}

/// A body asked for a view its argument's privilege does not allow.
#[cold]
#[inline(never)]
fn not_allowed(arg: usize, p: Privilege, what: &str) -> ! {
    panic!("argument {arg} was passed with {p:?}, which does not allow {what}");
}

/// A body asked for a view of another element type than its argument holds.
#[cold]
#[inline(never)]
fn wrong_dtype(arg: usize, has: DType, want: DType) -> ! {
    panic!("argument {arg} holds {has:?}, not {want:?}");
}

/// The shared part of read and write views.
///
/// The rectangles are borrowed from the launched task and the store, not copied: a `Rect` is
/// 72 bytes, and copying three per view was most of a view's own cost (a body makes one per
/// argument per point).
struct RawView<'a, T> {
    buf: &'a Buf<T>,
    /// The whole root store (the buffer's layout).
    whole: &'a Rect,
    /// The sub-store, root coordinates.
    rect: &'a Rect,
    /// The store view the task was given, root coordinates.
    origin: &'a Rect,
    /// `None` when the point's own borrow covers the view ([`Held`]). A ledger borrow, which
    /// refuses any overlapping borrow held for writing; in a point of a verified replay, one
    /// that holds nothing ([`crate::buffer::Ledger::unheld`]), in whose place the trace's
    /// recorded graph, checked once to order every two conflicting accesses of the trace and
    /// of two linked replays (`tracing::verify`), keeps other points off these cells.
    _borrow: Option<Borrow<'a>>,
}

impl<'a, T: Element> RawView<'a, T> {
    /// The cells `rect` of argument `a`'s (bound) store, in the store's own buffer.
    #[inline(always)]
    fn of_store(a: &'a LaunchArg, rect: &'a Rect, borrow: Option<Borrow<'a>>) -> RawView<'a, T> {
        let (bound, data) = a.root.bound_data().expect("bound stores only");
        RawView {
            buf: T::buf(data).expect("dtype checked"),
            whole: &bound.rect,
            rect,
            origin: &a.view,
            _borrow: borrow,
        }
    }

    /// Buffer offset of view index `idx`, after checking it lies in the sub-store.
    #[inline]
    fn offset(&self, idx: &[usize]) -> usize {
        let mut p = [0; MAX_DIMS];
        let n = self.rect.dim();
        if idx.len() == n {
            for d in 0..n {
                p[d] = idx[d] + self.origin.lo()[d];
            }
        }
        if !self.rect.contains_point(&p[..n]) || idx.len() != n {
            panic!(
                "index {idx:?} is outside this point's sub-store {:?}",
                self.rect.untranslate(self.origin.lo())
            );
        }
        self.whole.linear(&p[..n])
    }

    fn contiguous(&self) -> Option<(usize, usize)> {
        let n = self.rect.dim();
        let whole_rows = (1..n).all(|d| {
            self.rect.lo()[d] == self.whole.lo()[d] && self.rect.hi()[d] == self.whole.hi()[d]
        });
        if self.rect.is_empty() {
            return Some((0, 0));
        }
        (n <= 1 || whole_rows).then(|| (self.whole.linear(self.rect.lo()), self.rect.volume()))
    }

    /// Buffer offset of index `i` of a 1-d view, checked as `offset` checks it: the element
    /// accessors of a stencil or vector body call this per element, so the 1-d case is one
    /// add, one range check and one subtraction (`Rect::linear` of one dimension), inline;
    /// anything else (and the panic) goes through `offset`.
    #[inline(always)]
    fn offset_1d(&self, i: usize) -> usize {
        if self.rect.dim() == 1 {
            if let Some(p) = i.checked_add(self.origin.lo()[0]) {
                if self.rect.lo()[0] <= p && p < self.rect.hi()[0] {
                    return p - self.whole.lo()[0];
                }
            }
        }
        self.offset(&[i])
    }

    #[inline]
    fn get(&self, idx: &[usize]) -> T {
        let o = self.offset(idx);
        // SAFETY: the view holds a borrow of `rect` (see `_borrow`), which contains `o`
        // (checked above).
        unsafe { *self.buf.base().add(o) }
    }

    #[inline(always)]
    fn get_at(&self, i: usize) -> T {
        let o = self.offset_1d(i);
        // SAFETY: as in `get`: `offset_1d` checked that `rect` contains the cell.
        unsafe { *self.buf.base().add(o) }
    }

    /// Pointer to the first cell of a contiguous sub-store, and its length. The pointer comes
    /// from the cells themselves (not from a shared slice), so writing through it is allowed.
    fn run(&self) -> (*mut T, usize) {
        let (start, len) = self
            .contiguous()
            .unwrap_or_else(|| panic!("sub-store {:?} is not contiguous", self.rect));
        // SAFETY: `start + len` lies inside the buffer (the sub-store is inside the store).
        (unsafe { self.buf.base().add(start) }, len)
    }

    fn slice(&self) -> &[T] {
        let (ptr, len) = self.run();
        // SAFETY: `[ptr, ptr+len)` is exactly the borrowed sub-store.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    fn range(&self) -> Range<usize> {
        dim0_range(self.rect, self.origin)
    }
}

/// The indices of dimension 0 that sub-store `rect` of view `origin` covers, in view
/// coordinates. A 0-d store has no dimension 0: that is named instead of failing the task
/// with an index out of bounds inside the runtime.
fn dim0_range(rect: &Rect, origin: &Rect) -> Range<usize> {
    if rect.dim() == 0 {
        panic!(
            "`range` of a 0-d store: it has no dimension 0 (read its one element with `get(&[])`)"
        );
    }
    let lo = rect.lo()[0] - origin.lo()[0];
    lo..lo + rect.extent(0)
}

/// A read-only, bounds-checked view of a sub-store.
pub struct ReadView<'a, T> {
    raw: RawView<'a, T>,
}

impl<T: Element> ReadView<'_, T> {
    /// The sub-store's bounds in view coordinates.
    pub fn rect(&self) -> Rect {
        self.raw.rect.untranslate(self.raw.origin.lo())
    }
    /// The indices of dimension 0 this point owns.
    ///
    /// # Panics
    ///
    /// On a 0-d store, which has no dimension 0 (failing the task, as any panic in a body).
    pub fn range(&self) -> Range<usize> {
        self.raw.range()
    }
    /// The element at n-d index `idx`.
    #[inline]
    pub fn get(&self, idx: &[usize]) -> T {
        self.raw.get(idx)
    }
    /// The element at index `i` of a 1-d store.
    #[inline]
    pub fn at(&self, i: usize) -> T {
        self.raw.get_at(i)
    }
    /// The sub-store as a slice (1-d stores, or n-d sub-stores of whole rows); element 0 is the
    /// sub-store's first index.
    pub fn as_slice(&self) -> &[T] {
        self.raw.slice()
    }
}

/// A writable, bounds-checked view of a sub-store.
pub struct WriteView<'a, T> {
    raw: RawView<'a, T>,
}

impl<T: Element> WriteView<'_, T> {
    /// The sub-store's bounds in view coordinates.
    pub fn rect(&self) -> Rect {
        self.raw.rect.untranslate(self.raw.origin.lo())
    }
    /// The indices of dimension 0 this point owns.
    ///
    /// # Panics
    ///
    /// On a 0-d store, which has no dimension 0 (failing the task, as any panic in a body).
    pub fn range(&self) -> Range<usize> {
        self.raw.range()
    }
    /// The element at n-d index `idx`.
    #[inline]
    pub fn get(&self, idx: &[usize]) -> T {
        self.raw.get(idx)
    }
    /// The element at index `i` of a 1-d store.
    #[inline]
    pub fn at(&self, i: usize) -> T {
        self.raw.get_at(i)
    }
    /// Sets the element at n-d index `idx`.
    #[inline]
    pub fn set(&mut self, idx: &[usize], v: T) {
        let o = self.raw.offset(idx);
        // SAFETY: exclusive borrow of `rect` (see `RawView::_borrow`), which contains `o`.
        unsafe { *self.raw.buf.base().add(o) = v }
    }
    /// Sets the element at index `i` of a 1-d store.
    #[inline]
    pub fn set_at(&mut self, i: usize, v: T) {
        let o = self.raw.offset_1d(i);
        // SAFETY: exclusive borrow of `rect` (see `RawView::_borrow`), which contains `o`
        // (checked by `offset_1d`).
        unsafe { *self.raw.buf.base().add(o) = v }
    }
    /// The sub-store as a slice (1-d stores, or n-d sub-stores of whole rows).
    pub fn as_slice(&self) -> &[T] {
        self.raw.slice()
    }
    /// The sub-store as a mutable slice (1-d stores, or n-d sub-stores of whole rows).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        let (ptr, len) = self.raw.run();
        // SAFETY: exclusive borrow of exactly these cells (see `RawView::_borrow`); `&mut self`
        // prevents aliases.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }
    /// Sets every element of the sub-store to `v`.
    pub fn fill(&mut self, v: T) {
        let base = self.raw.buf.base();
        self.raw.rect.for_each_run(self.raw.whole, |start, len| {
            for i in start..start + len {
                // SAFETY: runs of `rect` lie in the exclusively borrowed sub-store.
                unsafe { *base.add(i) = v }
            }
        });
    }
}

/// A reduction view: a private buffer over the sub-store, starting at the operator's identity.
pub struct ReduceView<'c, T: Element> {
    values: Vec<T>,
    rect: Rect,
    origin: Rect,
    op: ReduceOp,
    arg: usize,
    sink: &'c Outbox,
}

impl<T: Element> ReduceView<'_, T> {
    /// The sub-store's bounds in view coordinates.
    pub fn rect(&self) -> Rect {
        self.rect.untranslate(self.origin.lo())
    }
    /// The indices of dimension 0 this point owns.
    ///
    /// # Panics
    ///
    /// On a 0-d store, which has no dimension 0 (failing the task, as any panic in a body).
    pub fn range(&self) -> Range<usize> {
        dim0_range(&self.rect, &self.origin)
    }
    /// Folds `v` into the element at n-d index `idx`.
    pub fn reduce(&mut self, idx: &[usize], v: T) {
        let mut p = [0; MAX_DIMS];
        let n = self.rect.dim();
        for d in 0..n.min(idx.len()) {
            p[d] = idx[d] + self.origin.lo()[d];
        }
        if idx.len() != n || !self.rect.contains_point(&p[..n]) {
            panic!(
                "index {idx:?} is outside this point's sub-store {:?}",
                self.rect()
            );
        }
        let o = self.rect.linear(&p[..n]);
        self.values[o] = T::combine(self.op, self.values[o], v);
    }
    pub fn reduce_at(&mut self, i: usize, v: T) {
        self.reduce(&[i], v)
    }
    /// The private buffer over the whole sub-store, row-major: for folding a whole tile at
    /// once instead of cell by cell (element 0 is the sub-store's first cell).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.values
    }
}

impl<T: Element> Drop for ReduceView<'_, T> {
    fn drop(&mut self) {
        let values = std::mem::take(&mut self.values);
        self.sink
            .with(|out| out.reduce.push((self.arg, T::wrap(Buf::from_vec(values)))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreRoot;
    use crate::{DType, Runtime};
    use proptest::prelude::*;

    /// Per store (its root's address while it lives): how many points took a group borrow of
    /// it, and how many of those took a union verified when the task was launched
    /// (`ReadGroups::verify`, branch metg19). Keyed by store, not a plain count, because
    /// tests run in parallel.
    static GROUP_BORROWS: Mutex<Vec<(usize, [usize; 2])>> = Mutex::new(Vec::new());

    pub(super) fn count_group_borrow(root: &Arc<StoreRoot>, unchecked: bool) {
        let key = Arc::as_ptr(root) as usize;
        let mut counts = GROUP_BORROWS.lock().unwrap_or_else(|e| e.into_inner());
        let add = [1, usize::from(unchecked)];
        match counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n = [n[0] + add[0], n[1] + add[1]],
            None => counts.push((key, add)),
        }
    }

    /// Group borrows counted for `root` since the last call, and how many took a verified
    /// union (the entry is removed: a later store at the same address starts from zero).
    fn group_borrows(root: &Arc<StoreRoot>) -> [usize; 2] {
        let key = Arc::as_ptr(root) as usize;
        let mut counts = GROUP_BORROWS.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts
            .iter()
            .find(|(k, _)| *k == key)
            .map_or([0, 0], |c| c.1);
        counts.retain(|(k, _)| *k != key);
        n
    }

    /// Every point of the stencil's step (three read views of one store, one write of the
    /// other) takes one group borrow of the store it reads, whether its task was analysed,
    /// replayed or replayed as actors (branch metg17: the grouping is worked out once per
    /// launched task, on each of the three paths that launch one, and per point only checked).
    /// Fails with the groups left empty on any path: `ReadGroups::default()` for
    /// `ReadGroups::of` in `SolvedTask::of` (replays) or in `Inner::launched` (analysed
    /// tasks), or `renew` not copying them into a reused task. Under actors every replayed
    /// task's points take their recorded union unchecked (branch metg19): fails with
    /// `ReadGroups::verify` left out of `SolvedTask::launch` or of `renew`.
    #[test]
    fn every_stencil_point_takes_one_borrow_for_its_three_reads_analysed_or_replayed() {
        let (steps, width) = (200usize, 3usize);
        for (tracing, actors) in [(false, false), (true, false), (true, true)] {
            let rt = Runtime::builder()
                .threads(2)
                .window_size(1)
                .tracing(tracing)
                .actors(actors)
                .build();
            rt.register("step", |ctx| {
                let (l, c, r) = (ctx.read::<f64>(1), ctx.read::<f64>(2), ctx.read::<f64>(3));
                let mut out = ctx.write::<f64>(0);
                for i in out.range() {
                    // The neighbours are read (their views are what is counted) but weigh 0.
                    out.set_at(i, c.at(i) + 1.0 + 0.0 * (l.at(i) + r.at(i)));
                }
            })
            .unwrap();
            let stores = [0, 1].map(|_| rt.create(DType::F64, &[width + 2]).unwrap());
            for s in &stores {
                rt.fill(s, 1.0).unwrap();
                group_borrows(&s.root);
            }
            let views = |s: &crate::Store| {
                [0..width, 1..width + 1, 2..width + 2].map(|r| s.slice(0, r).unwrap())
            };
            let [va, vb] = [views(&stores[0]), views(&stores[1])];
            for step in 0..steps {
                let (cur, next) = if step % 2 == 0 {
                    (&va, &vb)
                } else {
                    (&vb, &va)
                };
                rt.task("step")
                    .write(&next[1])
                    .read(&cur[0])
                    .read(&cur[1])
                    .read(&cur[2])
                    .align(&next[1], &cur[0])
                    .align(&next[1], &cur[1])
                    .align(&next[1], &cur[2])
                    .launch_domain(&[width])
                    .submit()
                    .unwrap();
            }
            rt.fence().unwrap();
            // Each interior cell gains one a step (step k writes k + 2; the last one, `a`).
            let got = rt.read::<f64>(&stores[0]).unwrap();
            assert_eq!(got[1..=width], vec![1.0 + steps as f64; width][..]);
            let s = rt.stats();
            if tracing {
                assert!(
                    s.tasks_traced > steps as u64 / 2,
                    "{tracing} {actors}: {s:?}"
                );
            }
            if actors {
                assert!(s.actor_replays > 0, "{s:?}");
            }
            let [taken, unchecked] = stores
                .iter()
                .map(|s| group_borrows(&s.root))
                .fold([0, 0], |[a, b], [c, d]| [a + c, b + d]);
            assert_eq!(
                taken,
                steps * width,
                "tracing {tracing} actors {actors}: group borrows"
            );
            // Replays without actors launch through a `Plan` (no recorded unions); with
            // actors, each replayed task (not its recording) is verified when launched.
            let replayed = if actors { s.tasks_unsolved as usize } else { 0 };
            assert!(!actors || replayed > steps / 2, "{s:?}");
            assert_eq!(
                unchecked,
                replayed * width,
                "tracing {tracing} actors {actors}: verified unions taken"
            );
        }
    }

    /// The cells of `r` (at most 2-d here), as a set.
    fn cells(r: &Rect) -> std::collections::BTreeSet<(usize, usize)> {
        let (lo, hi) = (r.lo(), r.hi());
        let (l1, h1) = if r.dim() == 2 { (lo[1], hi[1]) } else { (0, 1) };
        (lo[0]..hi[0])
            .flat_map(|i| (l1..h1).map(move |j| (i, j)))
            .collect()
    }

    /// A read of `root`'s cells [lo, hi) through a view of all four.
    fn read_arg(root: &Arc<StoreRoot>, lo: usize, hi: usize) -> LaunchArg {
        LaunchArg {
            root: root.clone(),
            view: Rect::new(&[0], &[4]),
            privilege: Privilege::Read,
            overwrite: false,
            rects: Arc::from(vec![Rect::new(&[lo], &[hi])]),
            local: false,
        }
    }

    /// A one-point task named `t` with an empty body, over `args`.
    fn one_point_task(
        args: crate::issue::task::Args<LaunchArg>,
        read_groups: ReadGroups,
    ) -> Launched {
        Launched {
            position: 0,
            name: Arc::from("t"),
            body: Arc::new(|_: &mut TaskContext<'_>| {}),
            domain: crate::partition::Domain::new(&[1]).unwrap(),
            token: 0,
            args,
            read_groups,
            scalars: Default::default(),
            results: Default::default(),
            fused: None,
            roots: Default::default(),
            remaining: std::sync::atomic::AtomicUsize::new(1),
            outs: Vec::new(),
            failure: Mutex::new(None),
            sub_failures: Mutex::default(),
            since: Default::default(),
            has_finish: false,
            dist: None,
        }
    }

    /// A recorded union is the point's borrow only where it holds every member's sub-store
    /// (`Rect::contains` in `Held::take`): one that does not match the arguments costs the sharing,
    /// never leaves a view's cells outside the point's borrows. Fails with the containment check
    /// removed (the point's borrow is the recorded [0, 2), both views count as covered, and a
    /// write of [2, 3), which the second view reads, is not refused).
    #[test]
    fn a_recorded_union_that_misses_a_member_s_cells_is_not_used() {
        let rt = Runtime::new(1);
        let x = rt.from_vec(&[4], vec![0.0f64; 4]).unwrap();
        let root = x.root.clone();
        let read = |lo: usize, hi: usize| read_arg(&root, lo, hi);
        let args: crate::issue::task::Args<LaunchArg> =
            [read(0, 2), read(1, 3)].into_iter().collect();
        let task = |read_groups: ReadGroups| {
            let args = args
                .iter()
                .map(|a| read(a.rects[0].lo()[0], a.rects[0].hi()[0]));
            one_point_task(args.collect(), read_groups)
        };
        let last = Rect::new(&[2], &[3]);
        // As recorded: the union [0, 3) covers both views; a write of [2, 3) is refused.
        let right = task(ReadGroups::with_unions(&args, 1));
        assert_eq!(right.read_groups.union(0, 0), Some(&Rect::new(&[0], &[3])));
        let held = Held::take(&right, 0, false);
        assert_eq!(held.covered, 0b11);
        assert!(root.ledger.borrow(last, true).is_err());
        drop(held);
        // A union that misses [2, 3): not used, no view covered, the write is not refused.
        let mut groups = ReadGroups::with_unions(&args, 1);
        groups.unions = Some(Arc::from(vec![Some(Rect::new(&[0], &[2]))]));
        let wrong = task(groups);
        let held = Held::take(&wrong, 0, false);
        assert_eq!(held.covered, 0);
        assert!(held.first.is_none() && held.rest.is_empty());
        assert!(root.ledger.borrow(last, true).is_ok());
    }

    /// A point that reads three stores, each through two arguments, holds one shared borrow
    /// of each for as long as its context lives: the first inline, the others in `Held::rest`
    /// (branch metg22). Fails with a borrow after the first not kept (`rest` not pushed): a
    /// write of the second or third store's cells is then not refused while the point runs.
    #[test]
    fn a_point_holds_every_group_s_borrow_until_it_drops() {
        let rt = Runtime::new(1);
        let roots: Vec<_> = (0..3)
            .map(|_| rt.from_vec(&[4], vec![0.0f64; 4]).unwrap().root.clone())
            .collect();
        let args: crate::issue::task::Args<LaunchArg> = roots
            .iter()
            .flat_map(|r| [read_arg(r, 0, 2), read_arg(r, 1, 3)])
            .collect();
        let groups = ReadGroups::of(&args);
        let task = one_point_task(args, groups);
        let held = Held::take(&task, 0, false);
        assert_eq!(held.covered, 0b11_1111);
        assert!(held.first.is_some());
        assert_eq!(held.rest.len(), 2);
        for (i, root) in roots.iter().enumerate() {
            let err = root.ledger.borrow(Rect::new(&[2], &[3]), true).err();
            assert_eq!(
                err,
                Some(Rect::new(&[0], &[3])),
                "store {i}: its union is held"
            );
            assert!(root.ledger.borrow(Rect::new(&[3], &[4]), true).is_ok());
        }
        drop(held);
        for root in &roots {
            assert!(root.ledger.borrow(Rect::new(&[0], &[4]), true).is_ok());
        }
    }

    /// A recorded union is taken at a point without checking (branch metg19) only where
    /// `ReadGroups::verify` found, for the launched task, that the group's members are still
    /// reads of one store with the very sub-stores recorded (the same `Arc`s), and
    /// `check_unions` found, once per recording, that the union holds them. Fails with
    /// `verify` not comparing the sub-stores' `Arc`s, the privileges or the stores, with
    /// `check_unions` not checking containment, with a copy keeping `verified`, or with
    /// `Held::take` taking the recorded union without looking at `verified` (the tampered
    /// union below is then the point's borrow and a write of [2, 3) is not refused).
    #[test]
    fn a_union_is_taken_unchecked_only_for_a_task_with_the_recorded_members() {
        let rt = Runtime::new(1);
        let [x, y] = [0, 1].map(|_| rt.from_vec(&[4], vec![0.0f64; 4]).unwrap());
        let arg = |root: &Arc<StoreRoot>, privilege, lo: usize, hi: usize| LaunchArg {
            root: root.clone(),
            view: Rect::new(&[0], &[4]),
            privilege,
            overwrite: false,
            rects: Arc::from(vec![Rect::new(&[lo], &[hi])]),
            local: false,
        };
        let recorded: crate::issue::task::Args<LaunchArg> = [
            arg(&x.root, Privilege::Read, 0, 2),
            arg(&x.root, Privilege::Read, 1, 3),
        ]
        .into_iter()
        .collect();
        // The recorded argument `j` with `f` applied (the same sub-stores `Arc`).
        let like = |j: usize, f: &dyn Fn(&mut LaunchArg)| {
            let a = &recorded[j];
            let mut b = LaunchArg {
                root: a.root.clone(),
                view: a.view,
                privilege: a.privilege,
                overwrite: a.overwrite,
                rects: a.rects.clone(),
                local: a.local,
            };
            f(&mut b);
            b
        };
        let task = |args: Vec<LaunchArg>, groups: &ReadGroups| {
            let mut read_groups = groups.clone();
            read_groups.verify(&args, |j| recorded.get(j).map(|a| &a.rects));
            one_point_task(args.into_iter().collect(), read_groups)
        };
        let groups = ReadGroups::with_unions(&recorded, 1);
        assert_eq!(groups.contained, 1);
        let last = Rect::new(&[2], &[3]);
        // The recorded members: verified, taken unchecked; a write of [2, 3) is refused.
        let same = task(vec![like(0, &|_| {}), like(1, &|_| {})], &groups);
        assert_eq!(same.read_groups.verified, 1);
        assert_eq!(
            same.read_groups.clone().verified,
            0,
            "a copy is not verified"
        );
        let held = Held::take(&same, 0, false);
        assert_eq!(held.covered, 0b11);
        assert!(x.root.ledger.borrow(last, true).is_err());
        drop(held);
        // Equal sub-stores in another `Arc`, a member written, a member of another store:
        // not verified (the point checks for itself, as before).
        let other_rects = |b: &mut LaunchArg| b.rects = Arc::from(vec![Rect::new(&[1], &[3])]);
        let written = |b: &mut LaunchArg| b.privilege = Privilege::ReadWrite;
        let elsewhere = |b: &mut LaunchArg| b.root = y.root.clone();
        for f in [
            &other_rects as &dyn Fn(&mut LaunchArg),
            &written,
            &elsewhere,
        ] {
            let t = task(vec![like(0, &|_| {}), like(1, f)], &groups);
            assert_eq!(t.read_groups.verified, 0);
        }
        // A union that misses [2, 3) of the second member (tampered with after recording):
        // not contained, not verified, and the point's own check refuses it.
        let mut wrong = groups.clone();
        wrong.unions = Some(Arc::from(vec![Some(Rect::new(&[0], &[2]))]));
        wrong.check_unions(&recorded);
        assert_eq!(wrong.contained, 0);
        let t = task(vec![like(0, &|_| {}), like(1, &|_| {})], &wrong);
        assert_eq!(t.read_groups.verified, 0);
        let held = Held::take(&t, 0, false);
        assert_eq!(held.covered, 0);
        assert!(x.root.ledger.borrow(last, true).is_ok());
    }

    /// A body's misuse of its arguments fails its task with the message it always had (the
    /// panics are out of line since branch metg19, so that `check` inlines into the views):
    /// an argument the task does not have, a view its privilege does not allow, another
    /// element type. Fails with any of the three messages changed.
    #[test]
    fn a_body_s_misuse_of_an_argument_fails_its_task_with_a_clear_message() {
        let rt = Runtime::new(2);
        rt.register("missing", |ctx| {
            ctx.read::<f64>(3);
        })
        .unwrap();
        rt.register("privilege", |ctx| {
            ctx.write::<f64>(0);
        })
        .unwrap();
        rt.register("dtype", |ctx| {
            ctx.read::<f32>(0);
        })
        .unwrap();
        for (name, want) in [
            ("missing", "argument 3 does not exist (the task has 1)"),
            (
                "privilege",
                "argument 0 was passed with Read, which does not allow writing",
            ),
            ("dtype", "argument 0 holds F64, not F32"),
        ] {
            let x = rt.create(DType::F64, &[4]).unwrap();
            rt.fill(&x, 1.0).unwrap();
            let f = rt
                .task(name)
                .read(&x)
                .submit_reduce(crate::ReduceOp::Sum)
                .unwrap();
            match f.get() {
                Err(crate::RuntimeError::TaskFailed { message, .. }) => {
                    assert!(message.contains(want), "{name}: {message}")
                }
                other => panic!("{name}: expected a task failure, got {other:?}"),
            }
        }
    }

    proptest! {
        /// `exact_union` (branch ledger15) never claims a rectangle that is not exactly the
        /// union of the sub-stores: the point's one borrow must cover no cell outside them, or
        /// it could refuse another point's write of a cell between them. Fails with the gap
        /// check (a run's end inside another run) removed, or with rectangles that differ in a
        /// second dimension accepted.
        #[test]
        fn exact_union_is_the_union_of_the_cells_or_nothing(
            two in any::<bool>(),
            rs in prop::collection::vec((0usize..6, 0usize..4, 0usize..3, 0usize..3), 1..5),
        ) {
            let rects: Vec<Rect> = rs
                .iter()
                .map(|&(a, la, b, lb)| {
                    if two {
                        Rect::new(&[a, b], &[a + la, b + lb])
                    } else {
                        Rect::new(&[a], &[a + la])
                    }
                })
                .collect();
            let all: std::collections::BTreeSet<_> = rects.iter().flat_map(cells).collect();
            let any_empty = rects.iter().any(|r| r.is_empty());
            match exact_union(&rects.iter().collect::<Vec<_>>()) {
                Some(u) => {
                    prop_assert!(!any_empty);
                    prop_assert_eq!(cells(&u), all);
                }
                None => {
                    // The cases it must find: 1-d runs that overlap or touch (the union is
                    // one interval), and equal rectangles.
                    let (first, last) = (all.first().map(|c| c.0), all.last().map(|c| c.0));
                    let one_run =
                        matches!((first, last), (Some(f), Some(l)) if l - f + 1 == all.len());
                    let unequal = rects.iter().any(|r| *r != rects[0]);
                    prop_assert!(any_empty || (two && unequal) || !one_run);
                }
            }
        }
    }
}
