//! Tasks: registration under stable names, privileges, and the launcher that issues an index
//! task with its arguments and constraints.

use crate::constraint::Constraint;
use crate::dtype::{ReduceOp, Scalar};
use crate::error::Result;
use crate::execute::context::TaskContext;
use crate::fusion::kernel::Elementwise;
use crate::future::{Future, FutureCell};
use crate::partition::{Domain, PartitionId};
use crate::runtime::Runtime;
use crate::store::{Store, StoreRoot, ViewKey};
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A task body: called once per point with that point's sub-store views.
pub type TaskBody = Arc<dyn Fn(&mut TaskContext<'_>) + Send + Sync>;

/// How a task accesses a store argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Privilege {
    Read,
    /// Writes (some of) its sub-store; the old contents stay where it does not write.
    Write,
    ReadWrite,
    /// Folds values into the store with an operator; points see an identity-filled buffer,
    /// and the buffers of points that share a sub-store are folded by a summation tree.
    Reduce(ReduceOp),
    /// Produces an unbound store: each point emits a piece, concatenated in point order.
    WriteUnbound,
}

impl Privilege {
    pub(crate) fn writes(self) -> bool {
        !matches!(self, Privilege::Read)
    }
}

/// A registered task: its stable name, its body, and its element-wise description if it has
/// one (what kernel fusion needs to run it over cache-sized chunks).
#[derive(Clone)]
pub(crate) struct Registered {
    pub name: Arc<str>,
    pub body: TaskBody,
    pub kernel: Option<Arc<Elementwise>>,
}

/// Registered tasks, by stable name.
#[derive(Default)]
pub(crate) struct Registry {
    by_name: HashMap<String, usize>,
    bodies: Vec<Registered>,
}

impl Registry {
    /// Registers `body` under `name`; false if the name is taken.
    pub(crate) fn register(
        &mut self,
        name: &str,
        body: TaskBody,
        kernel: Option<Arc<Elementwise>>,
    ) -> bool {
        if self.by_name.contains_key(name) {
            return false;
        }
        self.by_name.insert(name.to_string(), self.bodies.len());
        self.bodies.push(Registered {
            name: name.into(),
            body,
            kernel,
        });
        true
    }

    pub(crate) fn get(&self, name: &str) -> Option<Registered> {
        self.by_name.get(name).map(|&i| self.bodies[i].clone())
    }
}

/// A scalar argument: a value now, or a future filled by an earlier task.
#[derive(Clone)]
pub(crate) enum ScalarArg {
    Value(Scalar),
    Future(Arc<FutureCell>),
}

/// A constraint as the user wrote it, over store views (resolved to argument positions at
/// submit).
pub(crate) enum UserConstraint {
    Align(ViewId, ViewId),
    Broadcast(ViewId, crate::constraint::Dims),
    Image(ViewId, ViewId),
    Tile(ViewId, std::sync::Arc<[crate::constraint::Cut]>),
}

/// The dimensions `dims` of a store of `rank` dimensions as a mask (`Constraint::Broadcast`),
/// or `None` if one is not below the rank.
pub(crate) fn broadcast_mask(dims: &[usize], rank: usize) -> Option<[bool; crate::rect::MAX_DIMS]> {
    let mut mask = [false; crate::rect::MAX_DIMS];
    for &d in dims {
        *mask.get_mut(d).filter(|_| d < rank)? = true;
    }
    Some(mask)
}

/// Which view of which store a constraint names. An identity, not a handle: naming a store
/// in a constraint takes no reference to it (it must also be an argument, which does). The
/// view is its interned key (24 bytes in all; compared as integers and a pointer).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct ViewId {
    pub runtime: u64,
    pub store: u64,
    pub view: ViewKey,
}

impl ViewId {
    fn of(s: &Store) -> ViewId {
        ViewId {
            runtime: s.root.runtime,
            store: s.root.id,
            view: s.view,
        }
    }

    /// True when `a` is this view.
    #[inline]
    pub(crate) fn names(&self, a: &IssuedArg) -> bool {
        a.view == self.view && a.root.id == self.store && a.root.runtime == self.runtime
    }
}

/// Inline capacities for a task's arguments, constraints and scalars: most tasks have a few,
/// and the launcher and the issued task are built for every task (no allocation on that path).
/// Four scalars: a CG or BiCGSTAB step takes a value and two futures (with two inline, each
/// such task spilled its scalars to the heap when issued).
pub(crate) type Args<T> = SmallVec<[T; 4]>;
pub(crate) type Scalars = SmallVec<[ScalarArg; 4]>;
/// A launcher's and an issued task's arguments: eight inline, since an argument is small
/// (a store and its interned view) and SpMV over CSR has five (`y`, `pos`, `crd`, `vals`, `x`).
pub(crate) type IssuedArgs = SmallVec<[IssuedArg; 8]>;

/// An issued task waiting in the window for analysis.
pub(crate) struct Issued {
    pub name: Arc<str>,
    pub body: TaskBody,
    pub kernel: Option<Arc<Elementwise>>,
    pub args: IssuedArgs,
    pub constraints: Args<Constraint>,
    pub scalars: Scalars,
    pub domain: Option<Domain>,
    pub result: Option<(ReduceOp, Arc<FutureCell>)>,
    /// The sharding key: the launch dimensions whose indices pick a point's rank
    /// ([`TaskLauncher::shard_by`]); `None` is block sharding of the whole domain.
    pub shard: Option<Args<usize>>,
}

pub(crate) struct IssuedArg {
    pub root: Arc<StoreRoot>,
    /// The view, interned (the store handle's key; `ViewKey::rect` gives the rectangle):
    /// the launcher, the issued task and their moves stay small, and views compare as
    /// pointers.
    pub view: ViewKey,
    pub privilege: Privilege,
    /// A `Write` whose points write every cell of their sub-stores
    /// ([`TaskLauncher::write_all`]): their old values need not be zeroed first. Not part of
    /// the dependence analysis (such an argument is a `Write` there).
    pub overwrite: bool,
}

impl Issued {
    /// The issued task of `reg` from a checked launcher's `spec` (its arguments, scalars and
    /// sharding key are taken; what is left serves the next launcher), with its resolved
    /// constraints, launch domain and result.
    pub(crate) fn from_spec(
        reg: Registered,
        spec: &mut LaunchSpec,
        constraints: Args<Constraint>,
        domain: Option<Domain>,
        result: Option<(ReduceOp, Arc<FutureCell>)>,
    ) -> Issued {
        let args = std::mem::take(&mut spec.args);
        // The launcher's references become the issued task's, which the window and the
        // tracer see (the caller holds the front lock: no prefix is decided in between).
        LaunchSpec::unhold(&args);
        Issued {
            name: reg.name,
            body: reg.body,
            kernel: reg.kernel,
            args,
            constraints,
            scalars: std::mem::take(&mut spec.scalars),
            domain,
            result,
            shard: spec.shard.take(),
        }
    }

    /// A hash of what the task does and to what: its name, each scalar's kind and value, its
    /// stores with their views, privileges and partitions, its launch domain, and whether it
    /// folds a result (and with which operator). Stable across ranks running the same stream.
    ///
    /// A token *identifies a candidate*: tasks with different tokens differ, but equal tokens
    /// are no proof of equality (a 64-bit hash collides). Whatever replays a recorded analysis
    /// must compare the recorded fields of every task it replaces and analyse as usual on
    /// any difference. A future argument hashes as "a future" without its identity: in a loop
    /// each iteration passes a different future (made by the iteration before), so its
    /// producer is one of the fields a replay verifies, not part of the token.
    pub(crate) fn token(&self, domain: &Domain, parts: &[Option<PartitionId>]) -> u64 {
        // FxHasher has no per-process seed (unlike `RandomState`): every rank computes the
        // same token for the same task. FxHasher mixes every integer width the same way, so
        // each scalar hashes a kind tag first: a future, `U64(1)` and `I64(1)` must differ.
        let mut h = rustc_hash::FxHasher::default();
        self.name.hash(&mut h);
        self.scalars.len().hash(&mut h);
        for s in &self.scalars {
            let (kind, bits) = match s {
                ScalarArg::Value(Scalar::F64(x)) => (0u8, x.to_bits()),
                ScalarArg::Value(Scalar::I64(x)) => (1, *x as u64),
                ScalarArg::Value(Scalar::U64(x)) => (2, *x),
                ScalarArg::Future(_) => (3, 0),
            };
            (kind, bits).hash(&mut h);
        }
        self.args.len().hash(&mut h);
        for (a, p) in self.args.iter().zip(parts) {
            a.root.id.hash(&mut h);
            // The view's bounds as small integers (no derived `Hash` over a whole `Rect`, as in
            // the solve memo's probe: this runs for every task issued).
            match &a.view.rect() {
                None => h.write_usize(usize::MAX),
                Some(r) => {
                    h.write_usize(r.dim());
                    r.lo().iter().chain(r.hi()).for_each(|&x| h.write_usize(x));
                }
            }
            a.privilege.hash(&mut h);
            p.hash(&mut h);
        }
        domain.hash(&mut h);
        self.result.as_ref().map(|(op, _)| *op).hash(&mut h);
        self.shard.hash(&mut h);
        h.finish()
    }
}

/// Builds one index task: arguments (in the order the body indexes them), scalars, constraints.
///
/// Constraints name views (a store handle or a slice of it). A view given as several
/// arguments (`read(&v).read(&v)`, a dot of `v` with itself) is one operand to the constraints
/// that name it: every occurrence gets the partition they give. To partition two occurrences
/// differently, give one of them a view of its own (`v.slice(0, 0..n)` is one).
///
/// ```
/// # use tessera_runtime::*;
/// let rt = Runtime::new(2);
/// rt.register("scale", |ctx| {
///     let k = ctx.scalar(0).as_f64();
///     let x = ctx.read::<f64>(0);
///     let mut y = ctx.write::<f64>(1);
///     for i in x.range() {
///         y.set_at(i, k * x.at(i));
///     }
/// }).unwrap();
/// let x = rt.from_vec(&[4], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
/// let y = rt.create(DType::F64, &[4]).unwrap();
/// rt.task("scale").read(&x).write(&y).scalar(2.0).align(&x, &y).submit().unwrap();
/// assert_eq!(rt.read::<f64>(&y).unwrap(), vec![2.0, 4.0, 6.0, 8.0]);
/// ```
pub struct TaskLauncher<'rt> {
    pub(crate) rt: &'rt Runtime,
    /// Boxed: the builder methods move the launcher by value, and a few inline arguments with
    /// their views would be a kilobyte to copy per call.
    pub(crate) spec: Box<LaunchSpec>,
}

/// What a launcher has been told so far.
pub(crate) struct LaunchSpec {
    /// The registered task, looked up once when the launcher is made; the unknown name
    /// otherwise (reported by `submit`).
    pub task: std::result::Result<Registered, String>,
    /// Arguments as the issued task will hold them: a reference to the store's root, counted
    /// as an application handle (`StoreRoot::app_refs`) until the task is issued
    /// ([`Issued::from_spec`]) or the launcher dropped: the task it will issue may read the
    /// store, so no fused prefix may make it a temporary meanwhile.
    pub args: IssuedArgs,
    pub constraints: Args<UserConstraint>,
    pub scalars: Scalars,
    pub domain: Option<Args<usize>>,
    pub shard: Option<Args<usize>>,
}

impl LaunchSpec {
    /// Gives back the application references a launcher's arguments took
    /// ([`TaskLauncher::read`] and the like).
    fn unhold(args: &[IssuedArg]) {
        for a in args {
            a.root
                .app_refs
                .fetch_sub(1, std::sync::atomic::Ordering::Release);
        }
    }
}

impl Drop for LaunchSpec {
    fn drop(&mut self) {
        LaunchSpec::unhold(&self.args);
    }
}

// The builder methods are small and called once per task per argument: `#[inline]` lets
// them inline across crates, so the launcher is built in place rather than moved per call.
impl<'rt> TaskLauncher<'rt> {
    #[inline]
    fn arg(mut self, s: &Store, p: Privilege) -> Self {
        // Until submitted, an application reference (`LaunchSpec::args`).
        s.root
            .app_refs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.spec.args.push(IssuedArg {
            root: s.root.clone(),
            view: s.view,
            privilege: p,
            overwrite: false,
        });
        self
    }

    #[inline]
    pub fn read(self, s: &Store) -> Self {
        self.arg(s, Privilege::Read)
    }

    #[inline]
    pub fn write(self, s: &Store) -> Self {
        self.arg(s, Privilege::Write)
    }

    /// [`write`](Self::write), with a promise: every point writes every cell of its
    /// sub-store of `s` (with [`TaskContext::write`](crate::TaskContext::write)). The runtime
    /// then skips making those cells zero before the body runs, which a plain `write` does
    /// where the store's memory held an earlier store's values (a recycled buffer across
    /// ranks). Dependences, sub-stores and views are exactly those of `write`.
    ///
    /// A body that breaks the promise is still memory-safe, but a cell it leaves unwritten
    /// holds an arbitrary (initialised) value of the element type: zero, or a value a dropped
    /// store of this runtime held there. Use `write` for a body that writes only some cells.
    #[inline]
    pub fn write_all(mut self, s: &Store) -> Self {
        self = self.arg(s, Privilege::Write);
        if let Some(a) = self.spec.args.last_mut() {
            a.overwrite = true;
        }
        self
    }

    #[inline]
    pub fn read_write(self, s: &Store) -> Self {
        self.arg(s, Privilege::ReadWrite)
    }

    #[inline]
    pub fn reduce(self, s: &Store, op: ReduceOp) -> Self {
        self.arg(s, Privilege::Reduce(op))
    }

    /// An unbound output: each point emits its piece with [`TaskContext::emit`].
    #[inline]
    pub fn write_unbound(self, s: &Store) -> Self {
        self.arg(s, Privilege::WriteUnbound)
    }

    /// A scalar argument, read in the body with [`TaskContext::scalar`].
    #[inline]
    pub fn scalar(mut self, v: impl Into<Scalar>) -> Self {
        self.spec.scalars.push(ScalarArg::Value(v.into()));
        self
    }

    /// A future as a scalar argument: the task waits for it, the caller does not.
    #[inline]
    pub fn future(mut self, f: &Future) -> Self {
        self.spec.scalars.push(ScalarArg::Future(f.cell.clone()));
        self
    }

    /// `a` and `b` get the same partition (their shapes must be equal).
    #[inline]
    pub fn align(mut self, a: &Store, b: &Store) -> Self {
        self.spec
            .constraints
            .push(UserConstraint::Align(ViewId::of(a), ViewId::of(b)));
        self
    }

    /// The listed dimensions of `s` are not split: every point sees them whole.
    #[inline]
    pub fn broadcast(mut self, s: &Store, dims: &[usize]) -> Self {
        self.spec
            .constraints
            .push(UserConstraint::Broadcast(ViewId::of(s), dims.into()));
        self
    }

    /// `dst`'s sub-store at each point covers what `src`'s sub-store points at (`src` holds
    /// ranges, like `pos`, or coordinates, like `crd`).
    #[inline]
    pub fn image(mut self, src: &Store, dst: &Store) -> Self {
        self.spec
            .constraints
            .push(UserConstraint::Image(ViewId::of(src), ViewId::of(dst)));
        self
    }

    /// `s` is cut as `cuts` says, one [`Cut`](crate::Cut) per dimension: which launch
    /// dimension drives which store dimension, in equal tiles or at split points. Aligned
    /// arguments get the same tiles. Needs a fixed [`launch_domain`](Self::launch_domain).
    #[inline]
    pub fn tile(mut self, s: &Store, cuts: &[crate::constraint::Cut]) -> Self {
        self.spec
            .constraints
            .push(UserConstraint::Tile(ViewId::of(s), cuts.into()));
        self
    }

    /// Fixes the launch domain instead of sizing it from the machine.
    #[inline]
    pub fn launch_domain(mut self, extents: &[usize]) -> Self {
        self.spec.domain = Some(extents.into());
        self
    }

    /// Across ranks, the launch dimensions `dims` (of a fixed
    /// [`launch_domain`](Self::launch_domain)) pick which rank runs a point: points equal
    /// along `dims` run on the same rank, and the coordinates along `dims` (row-major, in the
    /// order given) are cut into one block of consecutive values per rank — the plan's
    /// `map(...)` key (SuperTaco §4.5.5). Without it the whole domain is cut in blocks. On one
    /// rank it changes nothing.
    #[inline]
    pub fn shard_by(mut self, dims: &[usize]) -> Self {
        self.spec.shard = Some(dims.into());
        self
    }

    /// Issues the task. Returns at once; errors in the arguments or constraints are reported
    /// here.
    #[inline]
    pub fn submit(self) -> Result<()> {
        let _span = crate::timeline::Span::new(
            crate::timeline::Ev::IssueBegin,
            crate::timeline::Ev::IssueEnd,
        );
        self.rt.issue(self, None).map(|_| ())
    }

    /// Issues the task and returns a future of the points' results
    /// ([`TaskContext::set_result`]) folded with `op` in point order (the operator's `f64`
    /// identity when no point sets one).
    #[inline]
    pub fn submit_reduce(self, op: ReduceOp) -> Result<Future> {
        let _span = crate::timeline::Span::new(
            crate::timeline::Ev::IssueBegin,
            crate::timeline::Ev::IssueEnd,
        );
        self.rt
            .issue(self, Some(op))
            .map(|f| f.expect("a reduce submit makes a future"))
    }
}
