//! An index task after analysis, and what running its points and its finish step does.

use crate::buffer::{Borrow, Buf, Data};
use crate::dtype::{DType, Element, PosRange, ReduceOp, Scalar};
use crate::error::RuntimeError;
use crate::execute::context::{ReadGroups, TaskContext};
use crate::execute::graph::{Node, NodeList, Work};
use crate::execute::Shared;
use crate::fusion::failure::{self, SubFailures};
use crate::fusion::FusedShape;
use crate::future::FutureCell;
use crate::issue::task::{Args, Privilege, ScalarArg, Scalars, TaskBody};
use crate::partition::Domain;
use crate::rect::Rect;
use crate::stats::Counters;
use crate::store::{Bound, StoreRoot};
use crate::timeline::{self, Ev};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) struct LaunchArg {
    pub root: Arc<StoreRoot>,
    /// The store view the task was given (root coordinates).
    pub view: Rect,
    pub privilege: Privilege,
    /// Points write every cell of their sub-stores (`TaskLauncher::write_all`).
    pub overwrite: bool,
    /// Each point's sub-store (root coordinates); empty for unbound outputs. Shared with the
    /// solve memo, which hands the same sub-stores to the next identical task.
    pub rects: Arc<[Rect]>,
    /// A fused task's temporary: each point works on scratch, the store is never touched.
    pub local: bool,
}

impl LaunchArg {
    /// The cells point `point` works on, in root coordinates (`None` for an unbound output,
    /// whose cells are not known before it is bound).
    pub(crate) fn cells(&self, point: usize) -> Option<Rect> {
        self.rects.get(point).copied()
    }

    /// Poisons, for the task at `at` whose reduction into this argument failed (no fold at
    /// all), the cells its points reduce into: only those keep a value short of the task's
    /// contributions. Not the whole store: a reader of other cells does not wait for the fold,
    /// so whether it saw a store-wide poison depended on timing
    /// (`a_failed_reduction_poisons_only_the_cells_reduced_into`).
    pub(crate) fn poison_reduced(&self, err: RuntimeError, at: u64) {
        if self.rects.is_empty() {
            return self.root.set_poison(err, at, Some(self.view));
        }
        for r in crate::rect::distinct(&self.rects) {
            self.root.set_poison(err.clone(), at, Some(r));
        }
    }

    /// The cells point `point` reads, for its look at their poison: the whole view where no
    /// sub-store is known.
    pub(crate) fn read_cells(&self, point: usize) -> &Rect {
        self.rects.get(point).unwrap_or(&self.view)
    }

    /// A point's (or a kernel-fused chunk loop's) borrow of the store's cells `rect`,
    /// exclusive where it writes them. A `write_all` argument's cells are not zeroed first:
    /// its body assigns every one before anything reads it, so a pool-recycled buffer skips
    /// a pass over the whole store (bs22). The runtime's ordering of tasks makes a conflict
    /// here a bug, hence the panic.
    /// `trusted`: for a point of a verified replay (`tracing::verify`), which the recorded
    /// graph already orders: no borrow is held, only stale cells are settled.
    pub(crate) fn borrow_cells(&self, rect: Rect, exclusive: bool, trusted: bool) -> Borrow<'_> {
        let ledger = &self.root.ledger;
        if trusted {
            return self.root.unheld(rect, exclusive, self.overwrite);
        }
        let borrow = if exclusive && self.overwrite {
            ledger.borrow_to_overwrite(rect)
        } else {
            ledger.borrow(rect, exclusive)
        };
        borrow.unwrap_or_else(|other| {
            panic!(
                "internal error: sub-store {rect:?} of store#{} is in use ({other:?})",
                self.root.id
            )
        })
    }
}

/// What one point leaves behind for the finish step.
#[derive(Default)]
pub(crate) struct PointOut {
    pub reduce: Vec<(usize, Data)>,
    pub pieces: Vec<(usize, Data)>,
    /// The point's contribution to each of the task's results (a fused task may have several).
    pub results: smallvec::SmallVec<[Option<Scalar>; 1]>,
    /// Across ranks, on rank 0: the lengths a remote point emitted per unbound argument (its
    /// pieces stay on its rank).
    pub remote_lens: Vec<(usize, u64)>,
}

/// The distinct stores of a launched task (`Launched::roots`): inline up to eight (SpMV has
/// five), not a list allocated per launch.
pub(crate) type Roots = smallvec::SmallVec<[Arc<StoreRoot>; 8]>;

pub(crate) struct Launched {
    /// The task's place in the issued stream: its replicated sequence number across ranks,
    /// else its launch order on this runtime. Poisoning is ordered by it
    /// ([`StoreRoot::set_poison`]).
    pub position: u64,
    pub name: Arc<str>,
    pub body: TaskBody,
    pub domain: Domain,
    #[allow(dead_code)] // read by tracing, a later layer
    pub token: u64,
    pub args: Args<LaunchArg>,
    /// Which read arguments a point's one shared borrow covers together
    /// ([`ReadGroups::of`]`(&args)`, worked out once per task, not at every point).
    pub read_groups: ReadGroups,
    pub scalars: Scalars,
    /// Folded results, each with its future: one for `submit_reduce`, one per sub-task that
    /// has one in a fused task.
    pub results: Args<(ReduceOp, Arc<FutureCell>)>,
    /// For a fused task: its sub-tasks and how their arguments map onto the task's.
    pub fused: Option<Arc<FusedShape>>,
    /// Distinct stores the task uses (each holds one pending reference until the task ends).
    pub roots: Roots,
    pub remaining: AtomicUsize,
    /// What each point left for the finish step (empty when there is none).
    pub outs: Vec<Mutex<PointOut>>,
    pub failure: Mutex<Option<RuntimeError>>,
    /// A fused task's failed sub-tasks, each with its error; empty while none has failed
    /// ([`crate::fusion::failure`]). Across ranks: this rank's points', and those other ranks
    /// sent with their leftovers or outcome (`replicate::finish`).
    pub sub_failures: Mutex<SubFailures>,
    /// For each of `roots`, the latest task that wrote the store whole launched before this
    /// one ([`Launched::note_rewrites`]): a point ignores poisonings from before it
    /// ([`StoreRoot::poisoned_before`]).
    pub since: smallvec::SmallVec<[u64; 8]>,
    pub has_finish: bool,
    /// Across ranks: the task's place in the replicated stream (`None` on one rank).
    pub dist: Option<crate::replicate::finish::Dist>,
}

impl Launched {
    /// Marks every store the task names (scratch aside) as used by a launched task: fusion's
    /// temporaries test reads it (`Bound::is_used`). Called when the task is scheduled.
    pub(crate) fn mark_used(&self) {
        for a in self.args.iter().filter(|a| !a.local) {
            if let Some(b) = a.root.bound() {
                b.mark_used();
            }
        }
    }

    /// The distinct stores of `args`, each now holding one pending reference (given back when
    /// the task ends).
    pub(crate) fn hold_roots<'a>(args: impl Iterator<Item = &'a Arc<StoreRoot>>) -> Roots {
        let mut roots = Roots::new();
        Launched::hold_roots_into(args, &mut roots);
        roots
    }

    /// [`Launched::hold_roots`] into `roots` (empty).
    pub(crate) fn hold_roots_into<'a>(
        args: impl Iterator<Item = &'a Arc<StoreRoot>>,
        roots: &mut Roots,
    ) {
        for root in args {
            if !roots.iter().any(|r| Arc::ptr_eq(r, root)) {
                root.pending_refs.fetch_add(1, Ordering::AcqRel);
                roots.push(root.clone());
            }
        }
    }

    /// A task that has ended, emptied for reuse: nothing of it is kept that could keep a store,
    /// a future or a buffer alive (a spare task waits for the next replay of its trace,
    /// which may never come). The fields are destructured so that a new one is not forgotten.
    pub(crate) fn empty(&mut self) {
        let Launched {
            position: _,
            name: _,
            body: _,
            domain: _,
            token: _,
            args,
            read_groups,
            scalars,
            results,
            fused,
            roots,
            remaining: _,
            outs,
            failure,
            sub_failures,
            since: _, // holds no reference; refilled by `note_rewrites`
            has_finish: _,
            dist,
        } = self;
        args.clear();
        *read_groups = ReadGroups::default();
        scalars.clear();
        results.clear();
        *fused = None;
        roots.clear();
        outs.clear();
        *failure.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
        sub_failures
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        *dist = None;
    }

    /// Where each of `points` points leaves what the finish step reads (nothing without one).
    pub(crate) fn outs(points: usize, has_finish: bool) -> Vec<Mutex<PointOut>> {
        if has_finish {
            (0..points).map(|_| Mutex::default()).collect()
        } else {
            vec![]
        }
    }

    /// True when the task needs a finish step after its points.
    pub(crate) fn needs_finish(
        mut privileges: impl Iterator<Item = Privilege>,
        result: bool,
    ) -> bool {
        result || privileges.any(|p| matches!(p, Privilege::Reduce(_) | Privilege::WriteUnbound))
    }

    /// Records that point `point` failed: the task fails, and what the point writes is
    /// poisoned ([`Launched::fail_at`]).
    fn fail(&self, point: usize, message: String) {
        let err = RuntimeError::TaskFailed {
            task: self.name.to_string(),
            point: self.domain.point(point)[..self.domain.dim()].to_vec(),
            message,
        };
        self.fail_at(err, Some(point));
    }

    /// Records the task's failure with nothing to tell of which point: every store it writes
    /// is poisoned whole (a failed finish step, a malformed message, the job's failure; a
    /// point's failure another rank reports is [`Launched::fail_remote`]).
    pub(crate) fn fail_with(&self, err: RuntimeError) {
        self.fail_at(err, None);
    }

    /// Records a failure of the task that another rank reports (a point's leftovers, rank 0's
    /// outcome: `replicate::finish::apply_failures`): the futures and folds fail, as on one
    /// rank, but nothing is poisoned here. The failed point poisoned its own cells on its own
    /// rank, and they reach this one only as poisoned pieces, when a task reads them; what
    /// one rank poisons whole (a reduced store, an unbound output) every rank poisons whole
    /// at the task's end ([`Launched::end`], `run_finish`). Poisoning every store the task
    /// writes whole, as until the third hunt, failed readers of cells that good points wrote
    /// (`a_task_with_a_finish_step_failing_on_one_rank_keeps_its_good_cells_on_every_rank`).
    pub(crate) fn fail_remote(&self, err: RuntimeError) {
        keep_earliest(
            &mut self.failure.lock().unwrap_or_else(|e| e.into_inner()),
            err,
        );
    }

    /// Records the task's failure (the lowest point's is kept, [`keep_earliest`]) and poisons
    /// at once, with this point's own error, what `point`
    /// writes (`None`: every store the task writes, whole). Why at once and not at `end`: a
    /// point of a later task depends only on the points it overlaps, so it may run while
    /// other points of this task still run; poisoning here, before the failing point
    /// completes, means a consumer point released by a failed point always sees the poison,
    /// whatever the timing (traced or not, any thread count). Why only the point's cells: a
    /// consumer point elsewhere in the store does not wait for this one, so whether it saw a
    /// store-wide poison depended on timing ([`StoreRoot::poisoned_before`]).
    fn fail_at(&self, err: RuntimeError, point: Option<usize>) {
        keep_earliest(
            &mut self.failure.lock().unwrap_or_else(|e| e.into_inner()),
            err.clone(),
        );
        // The point's own error: a reader of these cells is told which point wrote them.
        for a in self.written() {
            a.root
                .set_poison(err.clone(), self.position, point.and_then(|p| a.cells(p)));
        }
    }

    /// A fused task, whose sub-tasks fail one by one ([`crate::fusion::failure`]), on one
    /// rank and across ranks alike.
    pub(crate) fn per_sub(&self) -> Option<&FusedShape> {
        self.fused.as_deref()
    }

    /// Records that sub-task `s` of a fused task failed (the error of its lowest failed point
    /// is kept, [`keep_earliest`]).
    pub(crate) fn fail_sub(&self, shape: &FusedShape, s: usize, err: RuntimeError) {
        let mut f = self.sub_failures.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_empty() {
            f.resize(shape.subs.len(), None);
        }
        keep_earliest(&mut f[s], err);
    }

    /// [`Launched::fail_sub`] for each failed sub-task of `failed` (another rank's, across
    /// ranks; ignored for a task that is not fused).
    pub(crate) fn fail_subs(&self, failed: SubFailures) {
        let Some(shape) = self.per_sub() else {
            return;
        };
        for (s, e) in failed.into_iter().enumerate() {
            if let (Some(e), true) = (e, s < shape.subs.len()) {
                self.fail_sub(shape, s, e);
            }
        }
    }

    /// Poisons at once, as [`Launched::fail_at`] does for a failed point, `point`'s cells of
    /// the stores that the sub-tasks `failed` leave poisoned: not those a later sub-task
    /// rewrote whole (its readers' points may run before the task's end, and must see the
    /// rewrite's values as good, as unfused, where the failed task's poisoning comes before
    /// the rewrite).
    fn poison_failed_subs(
        &self,
        shape: &FusedShape,
        failed: &[Option<RuntimeError>],
        point: usize,
    ) {
        for (j, state) in failure::store_outcomes(self, shape, failed) {
            let a = &self.args[j];
            // A store reduced into is poisoned at the finish step, by the first failed
            // reduction (`run_finish`): its readers wait for that step, and a point's
            // poisoning here, at the fused task's position and the same cells, would win
            // over it when its point is lower, though its reduction comes later.
            if let (Some(err), false) = (state, matches!(a.privilege, Privilege::Reduce(_))) {
                a.root.set_poison(err, self.position, a.cells(point));
            }
        }
    }

    /// After the last point: every sub-task's outcome over all points (one that failed in
    /// some point fails those reading what it wrote everywhere), recorded; `None` when none
    /// failed.
    fn settled_subs(&self, shape: &FusedShape) -> Option<SubFailures> {
        let mut failed = self
            .sub_failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if failed.is_empty() {
            return None;
        }
        let before = failed.clone();
        // Only what the failures inside spread: a sub-task whose points ran is not failed
        // after the fact by an input poisoned since.
        failure::settle(self, shape, &mut failed, 0, false);
        for (s, (now, was)) in failed.iter().zip(&before).enumerate() {
            if let (Some(e), None) = (now, was) {
                self.fail_sub(shape, s, e.clone());
            }
        }
        Some(failed)
    }

    /// Called as the task is launched, in stream order: records, for each store the task
    /// uses, the latest whole rewrite launched before it ([`Launched::since`]), then tells
    /// each store the task writes whole that it does, at the task's position
    /// ([`StoreRoot::note_rewrite`]; the same stores a successful end clears,
    /// [`Launched::end`]).
    pub(crate) fn note_rewrites(&mut self) {
        self.since.clear();
        self.since
            .extend(self.roots.iter().map(|r| r.last_rewrite()));
        for a in self.written() {
            let whole = match a.privilege {
                Privilege::Reduce(_) => false,
                Privilege::WriteUnbound => true,
                _ => a.root.bound().is_some_and(|b| b.rect == a.view),
            };
            if whole {
                a.root.note_rewrite(self.position);
            }
        }
    }

    /// [`Launched::since`] of `root` (0 for a store the task does not name).
    pub(crate) fn since_of(&self, root: &Arc<StoreRoot>) -> u64 {
        (self.roots.iter())
            .position(|r| Arc::ptr_eq(r, root))
            .map_or(0, |i| self.since[i])
    }

    /// The arguments whose stores the task writes (a local one is not a store's contents).
    fn written(&self) -> impl Iterator<Item = &LaunchArg> {
        self.args
            .iter()
            .filter(|a| a.privilege.writes() && !a.local)
    }

    /// What every point left for the finish step, taken out (inline for a few points: a
    /// reduction's finish step runs once per task, and a dot product has a point per thread).
    pub(crate) fn take_outs(&self) -> smallvec::SmallVec<[PointOut; 4]> {
        self.outs
            .iter()
            .map(|o| std::mem::take(&mut *o.lock().unwrap_or_else(|e| e.into_inner())))
            .collect()
    }

    /// Runs after the last point (or the finish step): clears the poison of the stores a
    /// successful task wrote whole, and drops the task's pending references. A failure
    /// poisoned what it had to as it happened ([`Launched::fail_at`]; a fused task's failed
    /// sub-tasks, point by point); poisoning the stores whole here again would reach cells
    /// that no failed point wrote.
    ///
    /// Across ranks a bound store is not cleared here but by a `Work::Clear` node after every
    /// access of it on this rank up to this task (`replicate::schedule`,
    /// [`StoreRoot::clear_poison_before`]); and a failed task poisons whole, on every rank,
    /// what one rank poisons whole: its unbound outputs (the failed point poisoned them whole
    /// on its own rank only; a rank whose points emitted good pieces would read them as good)
    /// and the stores it reduces into (no fold at all: `run_finish` does it on the ranks that
    /// fold, this on the others).
    pub(crate) fn end(&self) {
        let failure = self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let at = self.position;
        if let (None, Some(shape)) = (&failure, self.per_sub()) {
            if let Some(failed) = self.settled_subs(shape) {
                self.end_subs(shape, &failed);
                self.end_refs();
                return;
            }
        }
        let ranks = self.dist.is_some();
        for a in self.written() {
            match &failure {
                Some(e) if ranks && matches!(a.privilege, Privilege::Reduce(_)) => {
                    a.poison_reduced(e.clone(), at)
                }
                Some(e) if ranks && a.privilege == Privilege::WriteUnbound => {
                    a.root.set_poison(e.clone(), at, None)
                }
                Some(_) => {}
                None if ranks && a.privilege != Privilege::WriteUnbound => {}
                // A successful write of the whole store makes it trustworthy again.
                None if !matches!(a.privilege, Privilege::Reduce(_))
                    && a.root.bound().is_some_and(|b| {
                        b.rect == a.view || a.privilege == Privilege::WriteUnbound
                    }) =>
                {
                    a.root.clear_poison(at)
                }
                None => {}
            }
        }
        self.end_refs();
    }

    /// A fused task's end when sub-tasks failed: each store as the sub-tasks that wrote it
    /// left it. Cleared after a good whole rewrite; an unbound output a failed sub-task wrote
    /// is poisoned whole. Its cells are not known before it is bound, so the failed point
    /// poisoned it whole, but only on its own rank: across ranks a rank whose points emitted
    /// nothing of it would read the others' pieces as good (on one rank this repeats the
    /// point's poisoning). Every other store stays as the failed points left it.
    /// Across ranks a bound store is cleared by `Work::Clear` instead (as in
    /// [`Launched::end`]), and a store a failed sub-task reduced into is poisoned whole here
    /// on every rank, as `run_finish` does on the ranks that fold.
    fn end_subs(&self, shape: &FusedShape, failed: &[Option<RuntimeError>]) {
        let ranks = self.dist.is_some();
        for (j, state) in failure::store_outcomes(self, shape, failed) {
            let a = &self.args[j];
            match state {
                None if ranks && a.privilege != Privilege::WriteUnbound => {}
                None => a.root.clear_poison(self.position),
                Some(e) if a.privilege == Privilege::WriteUnbound => {
                    a.root.set_poison(e, self.position, None)
                }
                Some(e) if ranks && matches!(a.privilege, Privilege::Reduce(_)) => {
                    a.poison_reduced(e, self.position)
                }
                Some(_) => {}
            }
        }
    }

    /// Gives back the pending reference the task holds on each of its stores.
    fn end_refs(&self) {
        for r in &self.roots {
            r.pending_refs.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Runs a ready node and returns the successors it made ready (none for a receive whose
/// message has not come: the communication thread completes it).
pub(crate) fn run_node(node: &Arc<Node>, shared: &Shared) -> NodeList {
    timeline::mark(Ev::NodeBegin, Arc::as_ptr(node) as u64);
    // A body that calls `fence` is told so instead of waiting for its own task for good.
    let _running = super::RunningNode::enter(shared);
    let ready = match node.take_work() {
        Some(Work::Actor { run, vertex }) => {
            match run.vertex(vertex) {
                (task, Some(point)) => {
                    timeline::mark(Ev::NodeTask, task.position << 16 | point as u64);
                    run_point(task, point, &shared.counters, run.trusted())
                }
                (task, None) => {
                    timeline::mark(Ev::NodeTask, task.position << 16 | 0xffff);
                    finish_step(task)
                }
            }
            shared.node_ran();
            let mut ready = node.complete(&shared.completion);
            run.release_succs(vertex, &mut ready);
            let _span = timeline::Span::new(Ev::LetGoBegin, Ev::LetGoEnd);
            drop(run);
            ready
        }
        work => run_work(node, work, shared),
    };
    timeline::mark(Ev::NodeEnd, 0);
    ready
}

/// Runs `work` (taken from `node`), counts the node run and completes it.
fn run_work(node: &Arc<Node>, work: Option<Work>, shared: &Shared) -> NodeList {
    match work {
        Some(Work::Actor { .. }) => unreachable!("actor vertices are dispatched by run_node"),
        None | Some(Work::Boundary) => {}
        Some(Work::Send {
            root,
            rect,
            to,
            key,
            since,
            at,
        }) => {
            let ch = shared.channel.get().expect("sends exist only across ranks");
            let as_of = (since, at);
            crate::replicate::send_rect(ch, &root, rect, to, key, as_of, &shared.counters);
        }
        Some(Work::Clear { root, at }) => root.clear_poison_before(at),
        Some(Work::Recv(recv)) => {
            let ch = shared
                .channel
                .get()
                .expect("receives exist only across ranks");
            if !ch.ready(node, recv) {
                return NodeList::new();
            }
        }
        Some(Work::Point { task, point }) => {
            timeline::mark(Ev::NodeTask, task.position << 16 | point as u64);
            run_point(&task, point, &shared.counters, false)
        }
        Some(Work::Finish { task }) => finish_step(&task),
    }
    shared.node_ran();
    node.complete(&shared.completion)
}

/// Runs `task`'s finish step. It has no user code; a panic here is a runtime bug: it is
/// reported as the task's failure rather than leave its future and dependents waiting forever.
fn finish_step(task: &Launched) {
    if catch_unwind(AssertUnwindSafe(|| run_finish(task))).is_err() {
        task.fail_with(finish_error(&task.name));
        let err = task
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (_, cell) in &task.results {
            let _ = cell.value.set(Err(err.clone().expect("just set")));
        }
        if let Some(d) = &task.dist {
            crate::replicate::finish::broadcast(task, d);
        }
        task.end();
    }
}

/// Why a point cannot run: an input written by a failed task, or a failed future argument.
fn failed_input(task: &Launched, point: usize) -> Option<String> {
    // `roots` holds every argument's store once (`Launched::hold_roots` over the arguments):
    // when none is tainted no input can be poisoned, and a stencil point looks at its two
    // stores instead of filtering its four arguments (branch metg22).
    if task.roots.iter().any(|r| r.tainted()) {
        if let Some(msg) = poisoned_input(task, point) {
            return Some(msg);
        }
    }
    failed_future(&task.scalars)
}

/// The first of `scalars` that is a failed future, as a message naming its place.
pub(crate) fn failed_future(scalars: &[ScalarArg]) -> Option<String> {
    scalars.iter().enumerate().find_map(|(i, s)| match s {
        ScalarArg::Future(cell) => match cell.value.get() {
            Some(Err(e)) => Some(format!("future argument {i} failed: {e}")),
            _ => None,
        },
        ScalarArg::Value(_) => None,
    })
}

/// Keeps in `kept` the failure of the lowest point (row-major) of `err` and the one kept:
/// the error a task reports (its futures, `read`) must not depend on which of its points
/// failed first in time. A failure not tied to a point (across ranks, the finish step) is
/// kept only when none is.
pub(crate) fn keep_earliest(kept: &mut Option<RuntimeError>, err: RuntimeError) {
    let point = |e: &RuntimeError| match e {
        RuntimeError::TaskFailed { point, .. } if !point.is_empty() => Some(point.clone()),
        _ => None,
    };
    let earlier = match kept.as_ref() {
        None => true,
        Some(old) => matches!((point(&err), point(old)), (Some(new), Some(old)) if new < old),
    };
    if earlier {
        *kept = Some(err);
    }
}

/// Why a task reading `root` cannot run, `err` the failure that poisoned it.
pub(crate) fn not_computed(root: &StoreRoot, err: &dyn std::fmt::Display) -> String {
    format!("input store#{} was not computed: {err}", root.id)
}

/// The first store the task reads (not a temporary) that a failed task from before it in the
/// stream wrote, as a message (a later task's failure is not this task's input:
/// [`StoreRoot::poisoned_before`](crate::store::StoreRoot::poisoned_before)).
fn poisoned_input(task: &Launched, point: usize) -> Option<String> {
    task.args
        .iter()
        .filter(|a| !a.local && matches!(a.privilege, Privilege::Read | Privilege::ReadWrite))
        .find_map(|a| {
            let (since, cells) = (task.since_of(&a.root), a.read_cells(point));
            let e = a.root.poisoned_before(since, task.position, cells)?;
            Some(not_computed(&a.root, &e))
        })
}

/// `trusted`: a point of a verified replay (`tracing::verify`), which takes no ledger borrows.
fn run_point(task: &Launched, point: usize, counters: &Counters, trusted: bool) {
    if let Some(shape) = task.per_sub() {
        return run_fused_subs(task, shape, point, counters, trusted);
    }
    if let Some(msg) = failed_input(task, point) {
        task.fail(point, msg);
        finish_point(task, point, counters);
        return;
    }
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut ctx = TaskContext::at(task, point, trusted);
        timeline::mark(Ev::BodyBegin, 0);
        (task.body)(&mut ctx);
        timeline::mark(Ev::BodyEnd, 0);
        // Only a finish step reads what a point leaves (most tasks have none).
        task.has_finish.then(|| ctx.out.take())
    }));
    match r {
        Ok(Some(out)) if task.has_finish => {
            *task.outs[point].lock().unwrap_or_else(|e| e.into_inner()) = out;
        }
        Ok(_) => {}
        Err(payload) => task.fail(point, panic_message(&*payload)),
    }
    finish_point(task, point, counters);
}

/// [`run_point`] for a fused task whose sub-tasks fail one by one: the sub-tasks that cannot
/// run are skipped, and each that fails is recorded ([`crate::fusion::failure`]).
fn run_fused_subs(
    task: &Launched,
    shape: &FusedShape,
    point: usize,
    counters: &Counters,
    trusted: bool,
) {
    let mut failed: SubFailures = smallvec::smallvec![None; shape.subs.len()];
    if failure::may_fail_early(task) {
        failure::settle(task, shape, &mut failed, point, true);
    }
    let r = catch_unwind(AssertUnwindSafe(|| {
        crate::fusion::run::run_fused_point(task, shape, point, trusted, &mut failed)
    }));
    match r {
        Ok(out) if task.has_finish => {
            *task.outs[point].lock().unwrap_or_else(|e| e.into_inner()) = out;
        }
        Ok(_) => {}
        // Outside any sub-task's body (the runtime's own work for the point): the whole task.
        Err(payload) => task.fail(point, panic_message(&*payload)),
    }
    if failed.iter().any(Option::is_some) {
        task.poison_failed_subs(shape, &failed, point);
        for (s, e) in failed.into_iter().enumerate() {
            if let Some(e) = e {
                task.fail_sub(shape, s, e);
            }
        }
    }
    finish_point(task, point, counters);
}

/// A panic's message, as a task failure reports it.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    panic_text(payload).unwrap_or_else(|| "task body panicked".into())
}

/// A panic's text, when it carries one (`panic!` with a message).
fn panic_text(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
}

fn finish_point(task: &Launched, point: usize, counters: &Counters) {
    Counters::add(&counters.points_run, 1);
    if let Some(d) = task.dist.as_ref().filter(|_| task.has_finish) {
        // This point's leftovers go to the ranks that run the finish step.
        crate::replicate::finish::after_point(task, point, d);
    }
    if task.remaining.fetch_sub(1, Ordering::AcqRel) == 1 && !task.has_finish {
        task.end();
    }
}

/// Folds reductions (a summation tree per sub-store) and results in point order, binds unbound
/// outputs, completes the future.
fn run_finish(task: &Launched) {
    let mut outs = task.take_outs();
    let failed = task
        .failure
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    // A fused task's sub-tasks that failed: their folds are skipped and their futures fail,
    // the others' go ahead.
    let mut subs = match (&failed, task.per_sub()) {
        (None, Some(shape)) => Some((
            shape,
            task.settled_subs(shape)
                .unwrap_or_else(|| smallvec::smallvec![None; shape.subs.len()]),
        )),
        _ => None,
    };
    let sub_failed = |subs: &Option<(&FusedShape, SubFailures)>, owner: Option<usize>| {
        let (_, f) = subs.as_ref()?;
        f[owner?].clone()
    };
    for (i, a) in task.args.iter().enumerate() {
        let owner = subs
            .as_ref()
            .map(|(shape, _)| failure::reduce_owner(shape, i));
        match a.privilege {
            Privilege::Reduce(op) => match failed.clone().or_else(|| sub_failed(&subs, owner)) {
                None => {
                    let folded = catch_unwind(AssertUnwindSafe(|| {
                        for (rect, data) in summation_trees(a, i, op, &mut outs) {
                            fold(&a.root, rect, op, &data);
                        }
                    }));
                    if let Err(payload) = folded {
                        fold_panicked(task, &mut subs, owner, payload);
                    }
                }
                // No fold at all: every cell reduced into keeps its old value, not only the
                // failed point's (which it poisoned as it failed).
                // Fused, only the first failed reduction into the store: unfused, its
                // poisoning comes first in the stream, and a reader sees the earliest.
                Some(e) if !a.local && !failed_before(task, &subs, i) => {
                    a.poison_reduced(e, task.position)
                }
                Some(_) => {}
            },
            Privilege::WriteUnbound => match &task.dist {
                Some(d) => {
                    let lens = crate::replicate::finish::piece_lens(&outs, i);
                    crate::replicate::finish::bind_pieces(task, i, &lens, &mut outs, d);
                }
                None => bind(&a.root, i, &mut outs),
            },
            _ => {}
        }
    }
    // Every fold first, then the futures: a sub-task whose result fails to fold fails its
    // futures, all of them, as unfused.
    let mut values: smallvec::SmallVec<[Option<Scalar>; 2]> = smallvec::SmallVec::new();
    for (slot, (op, _)) in task.results.iter().enumerate() {
        let owner = subs
            .as_ref()
            .and_then(|(shape, _)| failure::result_owner(shape, slot));
        let folded = catch_unwind(AssertUnwindSafe(|| fold_results(&outs, slot, *op)));
        values.push(folded.map_or_else(
            |payload| {
                fold_panicked(task, &mut subs, owner, payload);
                None
            },
            Some,
        ));
    }
    for (slot, ((_, cell), v)) in task.results.iter().zip(values).enumerate() {
        let owner = subs
            .as_ref()
            .and_then(|(shape, _)| failure::result_owner(shape, slot));
        let value = match failed.clone().or_else(|| sub_failed(&subs, owner)) {
            Some(e) => Err(e),
            None => Ok(v.expect("a fold that failed failed its sub-task")),
        };
        let _ = cell.value.set(value);
    }
    if let Some(d) = &task.dist {
        crate::replicate::finish::broadcast(task, d);
    }
    task.end();
}

/// Whether a fused argument before reduction argument `i` reduces into the same store for
/// a sub-task that failed (`subs`: the fused task's settled sub-task failures).
fn failed_before(task: &Launched, subs: &Option<(&FusedShape, SubFailures)>, i: usize) -> bool {
    let Some((shape, failed)) = subs else {
        return false;
    };
    let root = &task.args[i].root;
    (0..i).any(|k| {
        matches!(task.args[k].privilege, Privilege::Reduce(_))
            && Arc::ptr_eq(&task.args[k].root, root)
            && failed[failure::reduce_owner(shape, k)].is_some()
    })
}

/// Result slot `slot` folded over the points in point order with `op` (the operator's `f64`
/// identity when no point set one).
fn fold_results(outs: &[PointOut], slot: usize, op: ReduceOp) -> Scalar {
    outs.iter()
        .filter_map(|o| o.results.get(slot).copied().flatten())
        .reduce(|a, b| Scalar::combine(op, a, b))
        .unwrap_or(Scalar::F64(
            f64::identity(op).expect("f64 has every identity"),
        ))
}

/// A fold of the finish step panicked (integer folds wrap since stop 61 and float folds cannot
/// panic, so this is a guard against an internal error, kept so that one fails as unfused).
/// Unfused, the folding task's finish step fails: its futures fail and every store it writes
/// is poisoned whole ([`finish_step`]). A fused task fails only the sub-task `owner` whose
/// fold it was, as that task would have failed alone: its futures fail, and the stores it
/// writes that are left poisoned (not those a later sub-task rewrote whole:
/// [`failure::store_outcomes`]) are poisoned whole. Its other sub-tasks' outputs, folds and futures stand, as they do
/// unfused (it used to fail the whole fused task). Not fused: the panic goes on to
/// [`finish_step`].
fn fold_panicked(
    task: &Launched,
    subs: &mut Option<(&FusedShape, SubFailures)>,
    owner: Option<usize>,
    payload: Box<dyn std::any::Any + Send>,
) {
    let (Some((shape, failed)), Some(s)) = (subs.as_mut(), owner) else {
        std::panic::resume_unwind(payload);
    };
    let err = finish_error(&shape.subs[s].name);
    task.fail_sub(shape, s, err.clone());
    failed[s] = Some(err);
    let writes = |root: &Arc<StoreRoot>| {
        (shape.subs[s].args.iter())
            .any(|&(k, p)| p.writes() && Arc::ptr_eq(&task.args[k].root, root))
    };
    // As readers would see them (the first failure since the last whole rewrite).
    for (j, state) in failure::store_outcomes(task, shape, failed) {
        let root = &task.args[j].root;
        if let (Some(e), true) = (state, writes(root)) {
            root.set_poison(e, task.position, None);
        }
    }
}

/// The error of a task whose finish step failed.
fn finish_error(task: &str) -> RuntimeError {
    RuntimeError::TaskFailed {
        task: task.to_string(),
        point: vec![],
        message: "internal error in the finish step".into(),
    }
}

/// The points' private buffers for reduction argument `arg`, combined per sub-store by a
/// summation tree: the points that reduce into the same rectangle, in point order, are folded
/// pairwise, neighbours first (`((p0+p1)+(p2+p3))+p4`): a fixed shape for a given launch, depth
/// log2 of the points, and the association a tree of partial sums is expected to have
/// (SuperTaco §4.5.4). Returns one buffer per rectangle, in order of its first point.
fn summation_trees(
    a: &LaunchArg,
    arg: usize,
    op: ReduceOp,
    outs: &mut [PointOut],
) -> Vec<(Rect, Data)> {
    let mut groups: Vec<(Rect, Vec<Data>)> = Vec::new();
    for (p, out) in outs.iter_mut().enumerate() {
        let mut mine = Vec::new();
        out.reduce.retain_mut(|(i, data)| {
            if *i == arg {
                mine.push(std::mem::replace(data, Data::zeros(DType::F64, 0)));
            }
            *i != arg
        });
        let rect = a.rects[p];
        for data in mine {
            match groups.iter_mut().find(|(r, _)| *r == rect) {
                Some((_, list)) => list.push(data),
                None => groups.push((rect, vec![data])),
            }
        }
    }
    groups
        .into_iter()
        .map(|(rect, mut level)| {
            while level.len() > 1 {
                let mut next = Vec::with_capacity(level.len().div_ceil(2));
                let mut it = level.into_iter();
                while let Some(mut x) = it.next() {
                    if let Some(y) = it.next() {
                        combine_into(op, &mut x, y);
                    }
                    next.push(x);
                }
                level = next;
            }
            (rect, level.pop().expect("a group has a buffer"))
        })
        .collect()
}

/// `x = op(x, y)` element by element, for two private buffers of the same rectangle.
fn combine_into(op: ReduceOp, x: &mut Data, mut y: Data) {
    fn go<T: Element>(op: ReduceOp, x: &mut Data, y: &mut Data) {
        let dst = T::buf_mut(x).expect("same dtype");
        let src = T::buf_mut(y).expect("same dtype");
        for (d, s) in dst.cells_mut().zip(src.values_mut()) {
            *d = T::combine(op, *d, s);
        }
    }
    let y = &mut y;
    match x {
        Data::F64(_) => go::<f64>(op, x, y),
        Data::F32(_) => go::<f32>(op, x, y),
        Data::I64(_) => go::<i64>(op, x, y),
        Data::I32(_) => go::<i32>(op, x, y),
        Data::U64(_) => go::<u64>(op, x, y),
        Data::U32(_) => go::<u32>(op, x, y),
        Data::Range(_) => unreachable!("ranges are not reducible (checked at submit)"),
    }
}

/// Folds a point's private reduction buffer into the store.
fn fold(root: &StoreRoot, rect: Rect, op: ReduceOp, data: &Data) {
    fn go<T: Element>(root: &StoreRoot, rect: Rect, op: ReduceOp, data: &Data) {
        let bound = root.bound().expect("reduced stores are bound");
        let dst: &Buf<T> = T::buf(root.data().expect("bound")).expect("dtype checked");
        let src: &Buf<T> = T::buf(data).expect("same dtype");
        let _b = root
            .ledger
            .borrow(rect, true)
            .expect("fold is ordered after every other access");
        let mut k = 0;
        rect.for_each_run(&bound.rect, |start, len| {
            for i in start..start + len {
                // SAFETY: exclusive borrow of `rect` (dst); `src` is private to this step.
                unsafe {
                    let d = dst.base().add(i);
                    *d = T::combine(op, *d, *src.base().add(k));
                }
                k += 1;
            }
        });
    }
    match root.dtype {
        DType::F64 => go::<f64>(root, rect, op, data),
        DType::F32 => go::<f32>(root, rect, op, data),
        DType::I64 => go::<i64>(root, rect, op, data),
        DType::I32 => go::<i32>(root, rect, op, data),
        DType::U64 => go::<u64>(root, rect, op, data),
        DType::U32 => go::<u32>(root, rect, op, data),
        DType::Range => unreachable!("ranges are not reducible (checked at submit)"),
    }
}

/// Concatenates the pieces emitted for unbound argument `arg` in point order and binds the store.
fn bind(root: &StoreRoot, arg: usize, outs: &mut [PointOut]) {
    fn go<T: Element>(root: &StoreRoot, arg: usize, outs: &mut [PointOut]) {
        let mut all: Vec<T> = vec![];
        for out in outs.iter_mut() {
            for (_, d) in out.pieces.iter_mut().filter(|(a, _)| *a == arg) {
                all.extend(T::buf_mut(d).expect("emit checks the dtype").values_mut());
            }
        }
        let rect = Rect::from_shape(&[all.len()]);
        root.bind(Bound::with_data(rect, T::wrap(Buf::from_vec(all))));
    }
    match root.dtype {
        DType::F64 => go::<f64>(root, arg, outs),
        DType::F32 => go::<f32>(root, arg, outs),
        DType::I64 => go::<i64>(root, arg, outs),
        DType::I32 => go::<i32>(root, arg, outs),
        DType::U64 => go::<u64>(root, arg, outs),
        DType::U32 => go::<u32>(root, arg, outs),
        DType::Range => go::<PosRange>(root, arg, outs),
    }
}
