//! Replay ahead of the solver: what a recording keeps of its tasks *as issued* (before
//! solving), and the partitioning state its solves started from and left.
//!
//! The solver's answer for a task depends on the task as issued (name, stores, views,
//! privileges, constraints, fixed domain), the key partitions of its stores, and, for an image
//! source, the values of the source (solve_memo.rs says why). Over a whole trace, the solves
//! run in order, each changing key partitions for the next: so if every replaced task equals
//! the recorded one field for field ([`IssuedSig`]), every store's key partitions equal the
//! recorded ones at the start of the trace, and every image source has the recorded version
//! (a version is bumped by every write, so equal versions mean equal values), each solve
//! would give the recorded answer. A replay then takes the recorded domains, tokens and
//! sub-stores instead of solving, and leaves the recorded key partitions behind
//! ([`Conditions::apply`]).

use super::record::{producer_in, Producer};
use crate::constraint::Constraint;
use crate::dtype::ReduceOp;
use crate::execute::context::ReadGroups;
use crate::execute::launch::{LaunchArg, Launched};
use crate::fusion::FusedShape;
use crate::issue::task::{
    broadcast_mask, Args, Issued, LaunchSpec, Privilege, ScalarArg, Scalars, TaskBody,
    UserConstraint, ViewId,
};
use crate::partition::Domain;
use crate::rect::Rect;
use crate::runtime::Plan;
use crate::store::{StoreRoot, ViewKey};
use smallvec::SmallVec;
use std::hash::Hasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One argument as issued. Its store is named by its first appearance in the trace
/// ([`numbering`]): a loop that makes fresh stores every iteration replays over the new ones.
struct IssuedArg {
    store: u32,
    /// The store's extent and type (what its number stands for, as far as solving goes).
    whole: Option<Rect>,
    dtype: crate::dtype::DType,
    /// The view, interned (`ViewKey`: equal keys exactly when equal views).
    view: ViewKey,
    privilege: Privilege,
}

/// The fields of an issued task that its solve and analysis depend on (compared at every
/// replay: tokens are hashes).
pub(crate) struct IssuedSig {
    name: Arc<str>,
    args: SmallVec<[IssuedArg; 4]>,
    constraints: SmallVec<[Constraint; 4]>,
    domain: Option<Domain>,
    scalars: SmallVec<[Producer; 2]>,
    result: Option<ReduceOp>,
    /// The sharding key across ranks.
    shard: Option<crate::issue::task::Args<usize>>,
}

/// Where a future argument of `t` comes from: a task before it in the trace or not.
fn producer(s: &ScalarArg, before: &[Issued]) -> Producer {
    producer_in(s, before.len(), |i, cell| {
        before[i]
            .result
            .as_ref()
            .is_some_and(|(_, c)| Arc::ptr_eq(c, cell))
    })
}

/// Each store of a sequence of arguments numbered by its first appearance: the number of
/// every argument, and the distinct stores in that order.
pub(crate) fn numbering<'a>(
    roots: impl Iterator<Item = &'a Arc<StoreRoot>>,
) -> (Vec<u32>, Vec<&'a Arc<StoreRoot>>) {
    let mut distinct: Vec<&Arc<StoreRoot>> = Vec::new();
    let numbers = roots
        .map(|r| match distinct.iter().position(|d| Arc::ptr_eq(d, r)) {
            Some(k) => k as u32,
            None => {
                distinct.push(r);
                distinct.len() as u32 - 1
            }
        })
        .collect();
    (numbers, distinct)
}

/// Every argument's store number in a trace of issued tasks.
fn issued_numbers(tasks: &[Issued]) -> Vec<u32> {
    numbering(tasks.iter().flat_map(|t| t.args.iter().map(|a| &a.root))).0
}

/// The issued tasks of a recorded trace.
pub(crate) struct IssuedTrace(Vec<IssuedSig>);

impl IssuedTrace {
    pub(crate) fn new(tasks: &[Issued]) -> IssuedTrace {
        let numbers = issued_numbers(tasks);
        let mut first = 0;
        IssuedTrace(
            (0..tasks.len())
                .map(|i| {
                    let n = tasks[i].args.len();
                    let sig = IssuedSig::new(&tasks[i], &tasks[..i], &numbers[first..first + n]);
                    first += n;
                    sig
                })
                .collect(),
        )
    }

    /// Whether `tasks` are, field for field, the tasks recorded, over stores that appear in
    /// the same pattern: if so, their distinct stores in order of first appearance (what a
    /// replay as actors keys its link to the last replay by), numbered once for both. Stores
    /// are numbered as they are compared (no list of every argument's number: growing it cost
    /// about a third of the compare).
    pub(crate) fn matches(&self, tasks: &[Issued]) -> Option<Vec<Arc<StoreRoot>>> {
        if tasks.len() != self.0.len() {
            return None;
        }
        let mut distinct: Vec<Arc<StoreRoot>> = Vec::with_capacity(8);
        let same = (0..tasks.len()).all(|i| self.matches_at(i, tasks, &mut distinct));
        same.then_some(distinct)
    }

    /// Tasks in the trace.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether `tasks[k]` (after `tasks[..k]`) is the recorded `k`-th task, its stores
    /// numbered on from `distinct` (the distinct stores of `tasks[..k]`, in order of first
    /// appearance, as [`IssuedTrace::matches`] leaves them): what a replay streak compares as
    /// each task comes (`replay.rs`), one task at a time.
    pub(crate) fn matches_at(
        &self,
        k: usize,
        tasks: &[Issued],
        distinct: &mut Vec<Arc<StoreRoot>>,
    ) -> bool {
        let mut number = |r: &Arc<StoreRoot>| number_on(distinct, r);
        k < self.0.len() && self.0[k].matches(&tasks[k], &tasks[..k], &mut number)
    }
}

impl IssuedTrace {
    /// Whether the launcher's `spec` (of the task registered as `name`, folding a result with
    /// `result`) is, field for field, the recorded `k`-th task after `tasks[..k]`: what
    /// [`IssuedTrace::matches_at`] compares, read from the spec before its constraints are
    /// resolved and before an `Issued` exists (a replay streak; the recorded task's resolved
    /// constraints and domain are then the ones it would have resolved to:
    /// [`IssuedTrace::resolved`]). `distinct` is numbered on as there; on `false` it may hold
    /// more stores than before (the caller restores it).
    pub(crate) fn spec_matches_at(
        &self,
        k: usize,
        name: &Arc<str>,
        spec: &LaunchSpec,
        result: Option<ReduceOp>,
        tasks: &[Issued],
        distinct: &mut Vec<Arc<StoreRoot>>,
    ) -> bool {
        let Some(sig) = self.0.get(k) else {
            return false;
        };
        (Arc::ptr_eq(&sig.name, name) || sig.name == *name)
            && same_domain(sig.domain, spec.domain.as_deref())
            && sig.shard == spec.shard
            && sig.result == result
            && sig.same_args(&spec.args, &mut |r| number_on(distinct, r))
            && sig.same_user_constraints(&spec.args, &spec.constraints)
            && sig.scalars.len() == spec.scalars.len()
            && sig
                .scalars
                .iter()
                .zip(&spec.scalars)
                .all(|(&s, a)| s == producer(a, &tasks[..k]))
    }

    /// The recorded `k`-th task's constraints over argument positions and its launch domain:
    /// what a launcher that [`IssuedTrace::spec_matches_at`] resolves to.
    pub(crate) fn resolved(&self, k: usize) -> (&[Constraint], Option<Domain>) {
        (&self.0[k].constraints, self.0[k].domain)
    }
}

/// The number of store `r` among `distinct` (first appearance), added if new; and whether it
/// was new.
fn number_on(distinct: &mut Vec<Arc<StoreRoot>>, r: &Arc<StoreRoot>) -> (u32, bool) {
    match distinct.iter().position(|d| Arc::ptr_eq(d, r)) {
        Some(k) => (k as u32, false),
        None => {
            distinct.push(r.clone());
            (distinct.len() as u32 - 1, true)
        }
    }
}

/// Whether a launch domain given as extents is `recorded` (`Domain::new` of equal extents
/// gives the equal domain; the recorded one was valid).
fn same_domain(recorded: Option<Domain>, extents: Option<&[usize]>) -> bool {
    match (recorded, extents) {
        (None, None) => true,
        (Some(d), Some(e)) => {
            d.dim() == e.len() && e.iter().enumerate().all(|(k, &x)| d.extent(k) == x)
        }
        _ => false,
    }
}

impl IssuedSig {
    /// Whether `args` are the recorded arguments, stores numbered by `number`.
    fn same_args(
        &self,
        args: &[crate::issue::task::IssuedArg],
        number: &mut impl FnMut(&Arc<StoreRoot>) -> (u32, bool),
    ) -> bool {
        self.args.len() == args.len()
            && self.args.iter().zip(args).all(|(s, a)| {
                let (store, first) = number(&a.root);
                // A store's type and extent never change: compared where it first appears
                // (equal numbers are the same store on both sides).
                s.store == store
                    && s.privilege == a.privilege
                    && s.view == a.view
                    && (!first || (s.dtype == a.root.dtype && same_whole(s.whole, &a.root)))
            })
    }

    /// Whether the user's constraints (over views) resolve to the recorded ones (over argument
    /// positions), `args` being already the recorded arguments ([`IssuedSig::same_args`]).
    /// Resolving takes the first argument naming a view; the recorded position was the first
    /// in the recording, and arguments with the same store numbers and views name a view at
    /// the same positions, so it is the first here too: checking that the view names the
    /// argument at the recorded position is enough. Where a view is given as several
    /// arguments, resolving adds alignments (`validate::align_repeated_views`), and this
    /// resolves the launcher's constraints to compare them (rare). What resolving checks
    /// besides (a broadcast dimension within the store's rank, an image source's type, a
    /// tiling's cuts for the rank) holds as it held when recorded: ranks and types are the
    /// recorded ones.
    fn same_user_constraints(
        &self,
        args: &[crate::issue::task::IssuedArg],
        user: &[UserConstraint],
    ) -> bool {
        if crate::issue::validate::repeats_a_view(args) {
            return crate::issue::validate::resolve_constraints("", args, user)
                .is_ok_and(|c| c[..] == self.constraints[..]);
        }
        let names = |v: &ViewId, i: usize| v.names(&args[i]);
        self.constraints.len() == user.len()
            && self
                .constraints
                .iter()
                .zip(user)
                .all(|(c, u)| match (c, u) {
                    (Constraint::Align(i, j), UserConstraint::Align(a, b)) => {
                        names(a, *i) && names(b, *j)
                    }
                    (Constraint::Broadcast(i, mask), UserConstraint::Broadcast(v, dims)) => {
                        names(v, *i) && broadcast_mask(dims, args[*i].root.dim) == Some(*mask)
                    }
                    (Constraint::Image { src, dst }, UserConstraint::Image(a, b)) => {
                        names(a, *src) && names(b, *dst)
                    }
                    (Constraint::Tile(i, cuts), UserConstraint::Tile(v, c)) => {
                        names(v, *i) && (Arc::ptr_eq(cuts, c) || cuts[..] == c[..])
                    }
                    _ => false,
                })
    }

    fn new(t: &Issued, before: &[Issued], stores: &[u32]) -> IssuedSig {
        IssuedSig {
            shard: t.shard.clone(),
            name: t.name.clone(),
            args: t
                .args
                .iter()
                .zip(stores)
                .map(|(a, &store)| IssuedArg {
                    store,
                    whole: a.root.bound().map(|b| b.rect),
                    dtype: a.root.dtype,
                    view: a.view,
                    privilege: a.privilege,
                })
                .collect(),
            constraints: t.constraints.iter().cloned().collect(),
            domain: t.domain,
            scalars: t.scalars.iter().map(|s| producer(s, before)).collect(),
            result: t.result.as_ref().map(|(op, _)| *op),
        }
    }

    /// Whether `t` (after `before` in the trace, its stores numbered by `number`) is the task
    /// recorded.
    fn matches(
        &self,
        t: &Issued,
        before: &[Issued],
        number: &mut impl FnMut(&Arc<StoreRoot>) -> (u32, bool),
    ) -> bool {
        (Arc::ptr_eq(&self.name, &t.name) || self.name == t.name)
            && self.domain == t.domain
            && self.shard == t.shard
            && self.result == t.result.as_ref().map(|(op, _)| *op)
            && self.same_args(&t.args, number)
            && self.constraints[..] == t.constraints[..]
            && self.scalars.len() == t.scalars.len()
            && self
                .scalars
                .iter()
                .zip(&t.scalars)
                .all(|(&s, a)| s == producer(a, before))
    }
}

/// Whether `root`'s extent is `whole` (`None`: not bound).
fn same_whole(whole: Option<Rect>, root: &StoreRoot) -> bool {
    match (whole, root.bound()) {
        (Some(w), Some(b)) => w == b.rect,
        (None, None) => true,
        _ => false,
    }
}

/// What one solve answered, as the launch needs it.
pub(crate) struct SolvedTask {
    domain: Domain,
    token: u64,
    /// Per argument: its view and per-point sub-stores.
    args: SmallVec<[(Rect, Arc<[Rect]>); 4]>,
    /// The task's read groups and their unions at each point: a function of its stores'
    /// pattern and privileges, which every replay verifies (`IssuedTrace::matches`), and of
    /// the recorded sub-stores, so worked out once here.
    read_groups: ReadGroups,
}

impl SolvedTask {
    pub(crate) fn of(p: &Plan) -> SolvedTask {
        SolvedTask {
            domain: p.domain,
            token: p.token,
            args: p.args.iter().map(|a| (a.view, a.rects.clone())).collect(),
            read_groups: ReadGroups::with_unions(&p.args, p.domain.len()),
        }
    }

    /// `t` launched as recorded (no solve).
    pub(crate) fn plan(&self, t: Issued) -> Plan {
        Plan {
            name: t.name,
            body: t.body,
            domain: self.domain,
            token: self.token,
            args: t
                .args
                .into_iter()
                .zip(&self.args)
                .map(|(a, (view, rects))| LaunchArg {
                    root: a.root,
                    view: *view,
                    privilege: a.privilege,
                    overwrite: a.overwrite,
                    rects: rects.clone(),
                    local: false,
                })
                .collect(),
            scalars: t.scalars,
            results: t.result.into_iter().collect(),
            fused: None,
            shard: t.shard,
        }
    }
}

impl SolvedTask {
    /// `t` launched as recorded at stream `position`, straight into its `Launched` (no
    /// `Plan` in between: the task is large, and every move of it shows on the issuing
    /// thread of a replayed trace). What `Inner::launched` makes of [`SolvedTask::plan`].
    /// `spare`: an ended task of an earlier replay ([`Launched::empty`], `actors::Run`'s
    /// `Drop`), renewed in place rather than allocating (the issuer's allocations of tasks the
    /// workers free missed its thread cache, and the new task was copied into its `Arc`).
    ///
    /// The held task stays where it is held (moving it out took two copies per task) but
    /// gives up what the launch keeps without a copy: its scalars and result are taken, its
    /// name and body swapped for the spare's (metg23: a clone and the held copy's drop were
    /// two atomic read-modify-writes per reference). Its arguments are read: taking their
    /// stores too (`SmallVec::drain`) saved 8 atomics a task but cost ~80 instructions more
    /// than it saved, and was slower on the stencil (runtime/DESIGN.md, metg23). The caller
    /// drops the held task right after, so nothing reads what was taken.
    pub(crate) fn launch(
        &self,
        t: &mut Issued,
        position: u64,
        spare: Option<Arc<Launched>>,
    ) -> Arc<Launched> {
        let has_finish =
            Launched::needs_finish(t.args.iter().map(|a| a.privilege), t.result.is_some());
        let points = self.domain.len();
        if let Some(mut spare) = spare {
            if let Some(l) = Arc::get_mut(&mut spare) {
                self.renew(l, t, position, has_finish);
                l.note_rewrites();
                return spare;
            }
        }
        let mut results = Args::new();
        if let Some(r) = t.result.take() {
            results.push(r);
        }
        let args = self.launch_args(t);
        let mut read_groups = self.read_groups.clone();
        read_groups.verify(&args, |j| self.args.get(j).map(|a| &a.1));
        let mut task = Launched {
            position,
            name: t.name.clone(),
            body: t.body.clone(),
            domain: self.domain,
            token: self.token,
            roots: Launched::hold_roots(t.args.iter().map(|a| &a.root)),
            args,
            read_groups,
            scalars: std::mem::take(&mut t.scalars),
            results,
            fused: None,
            remaining: AtomicUsize::new(points),
            outs: Launched::outs(points, has_finish),
            failure: Mutex::new(None),
            sub_failures: Mutex::default(),
            since: Default::default(),
            has_finish,
            dist: None,
        };
        task.note_rewrites();
        Arc::new(task)
    }

    /// What [`SolvedTask::launch`] makes, written over an emptied spare task (every field:
    /// destructured, so that a new field is not forgotten).
    fn renew(&self, l: &mut Launched, t: &mut Issued, at: u64, finish: bool) {
        let points = self.domain.len();
        let Launched {
            position,
            name,
            body,
            domain,
            token,
            args,
            read_groups,
            scalars,
            results,
            fused,
            roots,
            remaining,
            outs,
            failure,
            sub_failures,
            since: _, // refilled by `note_rewrites`
            has_finish,
            dist,
        } = l;
        *position = at;
        // Swapped, not cloned: the held task drops the spare's (the same ones, as a rule).
        std::mem::swap(name, &mut t.name);
        std::mem::swap(body, &mut t.body);
        *domain = self.domain;
        *token = self.token;
        self.push_args(t, args);
        read_groups.clone_from(&self.read_groups);
        read_groups.verify(args, |j| self.args.get(j).map(|a| &a.1));
        // The spare's list is empty ([`Launched::empty`]): the held task drops it.
        std::mem::swap(scalars, &mut t.scalars);
        results.clear();
        if let Some(r) = t.result.take() {
            results.push(r);
        }
        *fused = None;
        roots.clear();
        Launched::hold_roots_into(t.args.iter().map(|a| &a.root), roots);
        *remaining.get_mut() = points;
        outs.clear();
        if finish {
            outs.extend((0..points).map(|_| Mutex::default()));
        }
        *failure.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
        sub_failures
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        *has_finish = finish;
        *dist = None;
    }

    /// `t`'s arguments with the recorded views and sub-stores. Pushed one by one: `collect`
    /// went through `SmallVec::extend`'s general path, twice the instructions.
    fn launch_args(&self, t: &Issued) -> Args<LaunchArg> {
        let mut args: Args<LaunchArg> = Args::new();
        self.push_args(t, &mut args);
        args
    }

    /// [`SolvedTask::launch_args`] into `args` (emptied first).
    fn push_args(&self, t: &Issued, args: &mut Args<LaunchArg>) {
        args.clear();
        for (a, (view, rects)) in t.args.iter().zip(&self.args) {
            args.push(LaunchArg {
                root: a.root.clone(),
                view: *view,
                privilege: a.privilege,
                overwrite: a.overwrite,
                rects: rects.clone(),
                local: false,
            });
        }
    }
}

/// The held tasks `tasks` (one cut of a trace, `solved` their recorded solves) fused by
/// `shape`, launched at stream `position`: what `Inner::launched` makes of
/// `build::fuse_plans` over each task's [`SolvedTask::plan`], read in place. Through plans,
/// every task was moved twice more (`memcpy` of a ~750-byte task) and its argument lists
/// allocated and freed: most of what fusing a replayed CG iteration added (cachegrind).
/// `spare`: an ended task renewed in place, as [`SolvedTask::launch`] does.
pub(crate) fn launch_fused(
    shape: &Arc<FusedShape>,
    body: &TaskBody,
    (tasks, solved): (&[Issued], &[SolvedTask]),
    position: u64,
    spare: Option<Arc<Launched>>,
) -> Arc<Launched> {
    if let Some(mut spare) = spare {
        if let Some(l) = Arc::get_mut(&mut spare) {
            renew_fused(l, shape, body, (tasks, solved), position);
            l.note_rewrites();
            return spare;
        }
    }
    let mut args: Args<LaunchArg> = Args::new();
    push_fused_args(shape, tasks, solved, &mut args);
    let (mut scalars, mut results) = (Scalars::new(), Args::new());
    let token = push_fused_scalars(tasks, solved, &mut scalars, &mut results);
    let domain = solved[0].domain;
    let points = domain.len();
    let has_finish = Launched::needs_finish(args.iter().map(|a| a.privilege), !results.is_empty());
    let mut task = Launched {
        position,
        name: shape.name.clone(),
        body: body.clone(),
        domain,
        token,
        roots: Launched::hold_roots(args.iter().map(|a| &a.root)),
        read_groups: ReadGroups::of(&args),
        args,
        scalars,
        results,
        fused: Some(shape.clone()),
        remaining: AtomicUsize::new(points),
        outs: Launched::outs(points, has_finish),
        failure: Mutex::new(None),
        sub_failures: Mutex::default(),
        since: Default::default(),
        has_finish,
        dist: None,
    };
    task.note_rewrites();
    Arc::new(task)
}

/// What [`launch_fused`] makes, written over an emptied spare task (every field:
/// destructured, so that a new field is not forgotten).
fn renew_fused(
    l: &mut Launched,
    shape: &Arc<FusedShape>,
    fused_body: &TaskBody,
    (tasks, solved): (&[Issued], &[SolvedTask]),
    at: u64,
) {
    let Launched {
        position,
        name,
        body,
        domain,
        token,
        args,
        read_groups,
        scalars,
        results,
        fused,
        roots,
        remaining,
        outs,
        failure,
        sub_failures,
        since: _, // refilled by `note_rewrites`
        has_finish,
        dist,
    } = l;
    *position = at;
    name.clone_from(&shape.name);
    body.clone_from(fused_body);
    *domain = solved[0].domain;
    push_fused_args(shape, tasks, solved, args);
    *read_groups = ReadGroups::of(args);
    *token = push_fused_scalars(tasks, solved, scalars, results);
    *fused = Some(shape.clone());
    roots.clear();
    Launched::hold_roots_into(args.iter().map(|a| &a.root), roots);
    let points = domain.len();
    let finish = Launched::needs_finish(args.iter().map(|a| a.privilege), !results.is_empty());
    *remaining.get_mut() = points;
    outs.clear();
    if finish {
        outs.extend((0..points).map(|_| Mutex::default()));
    }
    *failure.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
    sub_failures
        .get_mut()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
    *has_finish = finish;
    *dist = None;
}

/// The fused task's arguments (as `build::fuse_plans`) into `args`, emptied first.
fn push_fused_args(
    shape: &FusedShape,
    tasks: &[Issued],
    solved: &[SolvedTask],
    args: &mut Args<LaunchArg>,
) {
    args.clear();
    for f in &shape.args {
        let (k, j) = f.from;
        let a = &tasks[k].args[j];
        let (view, rects) = &solved[k].args[j];
        args.push(LaunchArg {
            root: a.root.clone(),
            view: *view,
            privilege: f.privilege,
            overwrite: a.overwrite,
            rects: rects.clone(),
            local: f.local,
        });
    }
}

/// The sub-tasks' scalars and results concatenated into `scalars` and `results` (emptied
/// first), and the fused token: their tokens hashed in order (as `build::fuse_plans`).
fn push_fused_scalars(
    tasks: &[Issued],
    solved: &[SolvedTask],
    scalars: &mut Scalars,
    results: &mut Args<(ReduceOp, Arc<crate::future::FutureCell>)>,
) -> u64 {
    scalars.clear();
    results.clear();
    let mut h = rustc_hash::FxHasher::default();
    for (t, s) in tasks.iter().zip(solved) {
        h.write_u64(s.token);
        for x in &t.scalars {
            scalars.push(x.clone());
        }
        if let Some(r) = &t.result {
            results.push(r.clone());
        }
    }
    h.finish()
}

/// Each store of a trace, once, by where it first appears: (task, argument).
fn distinct_roots(tasks: &[Issued]) -> Vec<(usize, usize)> {
    let mut seen: Vec<(usize, usize)> = Vec::new();
    for (i, t) in tasks.iter().enumerate() {
        for (j, a) in t.args.iter().enumerate() {
            let root = |&(k, l): &(usize, usize)| &tasks[k].args[l].root;
            if !seen.iter().any(|at| Arc::ptr_eq(root(at), &a.root)) {
                seen.push((i, j));
            }
        }
    }
    seen
}

fn is_image_src(t: &Issued, root: &Arc<StoreRoot>) -> bool {
    t.constraints.iter().any(|c| match c {
        Constraint::Image { src, .. } => Arc::ptr_eq(&t.args[*src].root, root),
        _ => false,
    })
}

/// The partitioning state a trace's solves start from (precondition) and leave
/// (postcondition), per store of the trace.
pub(crate) struct Conditions {
    at: Vec<(usize, usize)>,
    keys_before: Vec<crate::store::Keys>,
    keys_after: Vec<crate::store::Keys>,
    /// For image sources: (store's index in `at`, its id, version at the start of the
    /// trace). An image is computed from the source's values: the same store at the same
    /// version (bumped by every write) has the same values; another store may not.
    versions: Vec<(usize, u64, u64)>,
}

impl Conditions {
    /// The state before the trace's first solve.
    pub(crate) fn before(tasks: &[Issued]) -> Conditions {
        let at = distinct_roots(tasks);
        let root = |&(i, j): &(usize, usize)| &tasks[i].args[j].root;
        let keys_before = at.iter().map(|p| root(p).meta().keys.clone()).collect();
        let versions = at
            .iter()
            .enumerate()
            .filter(|(_, p)| tasks.iter().any(|t| is_image_src(t, root(p))))
            .map(|(k, p)| (k, root(p).id, root(p).meta().version))
            .collect();
        Conditions {
            at,
            keys_before,
            keys_after: Vec::new(),
            versions,
        }
    }

    /// Records the state the trace's solves left (`plans`: the trace's tasks, solved).
    pub(crate) fn after(&mut self, plans: &[Plan]) {
        self.keys_after = self
            .at
            .iter()
            .map(|&(i, j)| plans[i].args[j].root.meta().keys.clone())
            .collect();
    }

    /// Whether `tasks` (already checked field for field) start from the recorded state.
    pub(crate) fn hold(&self, tasks: &[Issued]) -> bool {
        let root = |k: usize| {
            let (i, j) = self.at[k];
            &tasks[i].args[j].root
        };
        (0..self.at.len()).all(|k| root(k).meta().keys == self.keys_before[k])
            && self
                .versions
                .iter()
                .all(|&(k, id, v)| root(k).id == id && root(k).meta().version == v)
    }

    /// Leaves the recorded key partitions (what the solves would have left) on the stores of
    /// `tasks` (already checked by [`Conditions::hold`]).
    pub(crate) fn apply(&self, tasks: &[Issued]) {
        for (&(i, j), keys) in self.at.iter().zip(&self.keys_after) {
            let root = &tasks[i].args[j].root;
            let mut meta = root.meta();
            if meta.keys != *keys {
                meta.keys.clone_from(keys);
                root.key_epoch.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::future::FutureCell;
    use crate::issue::task::{IssuedArg, Privilege};
    use crate::store::ViewKey;

    fn root(id: u64) -> Arc<StoreRoot> {
        StoreRoot::for_test(id)
    }

    fn issued(roots: &[&Arc<StoreRoot>]) -> Issued {
        let body: TaskBody = Arc::new(|_| {});
        Issued {
            name: Arc::from("t"),
            body,
            kernel: None,
            args: roots
                .iter()
                .map(|&r| IssuedArg {
                    root: r.clone(),
                    view: ViewKey::of(None),
                    privilege: Privilege::Read,
                    overwrite: false,
                })
                .collect(),
            constraints: Args::new(),
            scalars: Scalars::new(),
            domain: None,
            result: None,
            shard: None,
        }
    }

    fn solved(n: usize) -> SolvedTask {
        let whole = Rect::from_shape(&[4]);
        let lists: Arc<[Rect]> = Arc::from(vec![Rect::new(&[0], &[2]), Rect::new(&[2], &[4])]);
        SolvedTask {
            domain: Domain::new(&[2]).unwrap(),
            token: 0,
            args: (0..n).map(|_| (whole, lists.clone())).collect(),
            read_groups: ReadGroups::default(),
        }
    }

    fn with_result(mut t: Issued, cell: &Arc<FutureCell>) -> Issued {
        t.result = Some((ReduceOp::Sum, cell.clone()));
        t.scalars
            .push(crate::issue::task::ScalarArg::Future(cell.clone()));
        t
    }

    /// A launch takes the held task's scalars and result and swaps its name and body for a
    /// spare's (metg23: no clone of what the held task, dropped next, would let go), reads its
    /// arguments, and an emptied task keeps no store, scalar or future; renewed, it is what a
    /// new launch makes. Counted in references; fails with the scalars or the result cloned
    /// (one reference too many while the held task lives) or the name not swapped.
    #[test]
    fn a_replayed_launch_takes_the_held_task_s_scalars_result_and_name() {
        let (a, b) = (root(1), root(2));
        let cell = Arc::new(FutureCell {
            value: Default::default(),
            node: Default::default(),
            rt: std::sync::Weak::new(),
            launched_as: Default::default(),
        });
        let s = solved(2);
        let mut t = with_result(issued(&[&a, &b]), &cell);
        let mut l = s.launch(&mut t, 0, None);
        assert!(t.result.is_none() && t.scalars.is_empty(), "taken");
        assert_eq!(
            Arc::strong_count(&cell),
            3,
            "ours, the launch's result and scalar"
        );
        assert_eq!(
            Arc::strong_count(&a),
            4,
            "ours, the held task's, argument and root"
        );
        drop(t);
        Arc::get_mut(&mut l).expect("nobody else holds it").empty();
        assert_eq!(Arc::strong_count(&a), 1, "an emptied task keeps no store");
        assert_eq!(Arc::strong_count(&cell), 1, "nor a future");
        // Renewed: the held task gets the spare's name (and drops it with itself).
        let mut t = with_result(issued(&[&b, &a]), &cell);
        t.name = Arc::from("u");
        let l = s.launch(&mut t, 1, Some(l));
        assert_eq!((&*l.name, &*t.name), ("u", "t"));
        assert!(t.result.is_none() && t.scalars.is_empty(), "taken");
        assert_eq!(Arc::strong_count(&cell), 3);
        assert!(Arc::ptr_eq(&l.args[0].root, &b) && l.position == 1);
        assert_eq!((l.roots.len(), l.results.len(), l.scalars.len()), (2, 1, 1));
    }
}
