//! The runtime: stores, task registration, issue → window → solve → analyse → execute.

use crate::analysis::Preds;
use crate::buffer::{Buf, SPARSE_MIN_BYTES};
use crate::constraint::Constraint;
use crate::dtype::{DType, Element, PosRange, ReduceOp, Scalar};
use crate::error::{Result, RuntimeError};
use crate::execute::executor::{Executor, ThreadPool};
use crate::execute::graph::{Completion, Node, NodeList, Work};
use crate::execute::launch::{LaunchArg, Launched};
use crate::execute::Shared;
use crate::fusion::kernel::{unfused_body, Chunk, Elementwise};
use crate::fusion::memo::{self, FusionMemo};
use crate::fusion::{build, FusedShape, FusionConfig, Ready};
use crate::future::Future;
use crate::machine::Machine;
use crate::partition::{Domain, Interner, Partition};
use crate::rect::{Rect, MAX_DIMS};
use crate::replicate::channel::Channel;
use crate::solve_memo::{Probe, SolveInputs, SolveMemo, Solved};
use crate::solver::{record_keys, Solution, Solver, SolverArg};
use crate::stats::{Counters, Stats};
use crate::store::{Bound, Memory, Store, StoreRoot};
use crate::task::{
    broadcast_mask, Args, Issued, IssuedArg, LaunchSpec, Privilege, Registered, Registry,
    ScalarArg, Scalars, TaskBody, TaskLauncher, UserConstraint, ViewId,
};
use crate::tracing::replay::Tracing;
use crate::transport::Communicator;
use crate::window::{self, Adaptive, Window, WindowPolicy};
use crate::TaskContext;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

static NEXT_RUNTIME: AtomicU64 = AtomicU64::new(1);

/// The issuing side's state: the window and the partition table.
pub(crate) struct Front {
    pub(crate) window: Window,
    interner: Interner,
    memo: SolveMemo,
    fusion_memo: FusionMemo,
    /// Automatic tracing (`None` when switched off).
    /// Boxed: it is taken out and put back on every issued task (a move of the pointer, not
    /// of the tracer's state).
    pub(crate) tracing: Option<Box<Tracing>>,
    /// The first error of a task launched by an idle worker's flush (adaptive window): the
    /// issuing thread reports it at its next submit, read or fence.
    deferred: Option<RuntimeError>,
}

pub(crate) struct Inner {
    id: u64,
    machine: Machine,
    pub(crate) shared: Arc<Shared>,
    pool: ThreadPool,
    registry: RwLock<Registry>,
    front: Mutex<Front>,
    next_store: AtomicU64,
    /// On one rank: the next launched task's stream position (`Launched::position`).
    next_position: AtomicU64,
    max_pending: usize,
    fusion: FusionConfig,
    /// The body a fused task's `Launched` carries (never called: its points run the
    /// sub-tasks' bodies).
    pub(crate) fused_body: TaskBody,
    /// Bytes of store elements allocated so far (lazily, at first access), and held now.
    mem: Arc<Memory>,
    /// Across ranks, every store made so far, for [`Stats::bytes_resident`] (dead ones
    /// pruned as it grows). Not on one rank: `take` needs the only reference to a store.
    roots: Mutex<Vec<std::sync::Weak<StoreRoot>>>,
    /// Across ranks: the thread receiving this rank's messages.
    comm_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Set when the window is adaptive (also `Shared::on_idle`: how a worker about to go idle
    /// launches it).
    pub(crate) adaptive: std::sync::OnceLock<Arc<Adaptive>>,
    /// With an adaptive window: the thread that launches tasks held while workers idle.
    window_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// A submitted launcher's emptied spec, for the next [`Runtime::task`]: the spec is over a
    /// kilobyte (inline arguments and constraints), and allocating and freeing it per task
    /// cost the issuing thread ~350 instructions (callgrind, stencil). Taken and returned with
    /// `try_lock`: a thread that finds it busy allocates.
    spare_spec: Mutex<Option<Box<LaunchSpec>>>,
}

/// The communicator a runtime runs across ranks on (see [`RuntimeBuilder::communicator`]).
#[derive(Clone)]
pub struct Ranks(pub Arc<dyn Communicator + Send + Sync>);

impl std::fmt::Debug for Ranks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} of {}", self.0.rank(), self.0.size())
    }
}

/// Whether the agreement check is on unless the builder says otherwise: the environment
/// variable `TESSERA_AGREEMENT` (`0` off, `1` on), else on in debug builds.
fn agreement_default() -> bool {
    match std::env::var("TESSERA_AGREEMENT").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => cfg!(debug_assertions),
    }
}

/// Options for a [`Runtime`].
#[derive(Clone, Debug)]
pub struct RuntimeBuilder {
    threads: usize,
    min_piece: usize,
    /// `None`: the default (see [`DEFAULT_WINDOW`]).
    window: Option<WindowPolicy>,
    max_pending: Option<usize>,
    fusion: bool,
    fusion_memo: bool,
    tracing: bool,
    trace_sampling: usize,
    actors: bool,
    verified_replays: bool,
    ranks: Option<Ranks>,
    agreement: bool,
    worker_jitter_us: u32,
    hold_idle: std::time::Duration,
    early_prefix: bool,
}

/// Whether automatic tracing is on unless the builder says otherwise: the environment
/// variable `TESSERA_TRACING` (`0` off, `1` on), else [`DEFAULT_TRACING`].
fn tracing_default() -> bool {
    match std::env::var("TESSERA_TRACING").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => DEFAULT_TRACING,
    }
}

/// Whether replayed traces run as actors unless the builder says otherwise: the environment
/// variable `TESSERA_ACTORS` (`0` off, `1` on), else on.
fn actors_default() -> bool {
    !matches!(std::env::var("TESSERA_ACTORS").as_deref(), Ok("0"))
}

/// Automatic tracing's default: off. Held tasks start late (a body that waits for something
/// the issuing thread does later would deadlock, as with a larger window), and the stencil's
/// METG was worse traced on the runtime bench (runtime/DESIGN.md, "Tracing in the launch
/// path"). The runtime's tests and the workspace's CG test pass with it on as well.
pub const DEFAULT_TRACING: bool = false;

/// The most tasks the default, adaptive window holds (see [`RuntimeBuilder::adaptive_window`]):
/// it grows only while the workers are busy and is launched as soon as one would go idle, so a
/// task still starts as soon as a processor is free for it. The bound was chosen on the fusion
/// bench (runtime/DESIGN.md, "Task fusion", window size). It is the default with automatic
/// tracing on as well (behind the tracer: the tasks it releases); across ranks, a fixed window
/// of [`RANKS_WINDOW`] (an adaptive window's decisions depend on timing, and ranks must
/// agree).
pub const DEFAULT_WINDOW: usize = 32;

/// The default window across ranks: fixed, so that it is launched at the same points of the
/// stream on every rank. Chosen on the ranks and fusion benches (runtime/DESIGN.md, "Across
/// ranks", window): as large as the one-rank window, so that the same chains fuse whole.
/// Each task is solved at `submit` and a prefix launches as soon as a later task ends it
/// (unless holding may still make a temporary); the last prefix waits until the window fills
/// or the program reads, fences or waits on a future, so a body must not wait for something
/// the issuing thread does after submitting it.
pub const RANKS_WINDOW: usize = 32;

impl Default for RuntimeBuilder {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        RuntimeBuilder {
            threads,
            min_piece: 1024,
            window: None,
            max_pending: None,
            fusion: true,
            fusion_memo: true,
            tracing: tracing_default(),
            trace_sampling: 64,
            actors: actors_default(),
            // On since the second review of linked chains found no hole (review41, stop 41;
            // runtime/DESIGN.md, "Replays without ledger borrows").
            verified_replays: !matches!(
                std::env::var("TESSERA_VERIFIED_REPLAYS").as_deref(),
                Ok("0")
            ),
            ranks: None,
            agreement: agreement_default(),
            worker_jitter_us: 0,
            hold_idle: window::HOLD,
            early_prefix: true,
        }
    }
}

impl RuntimeBuilder {
    /// Processors that run point tasks (at least one; default: the available cores): `n - 1`
    /// worker threads (at least one) and the application's own thread, which runs ready tasks
    /// whenever it waits on the runtime (back-pressure in `submit`, `fence`, `read`,
    /// `Future::get`) instead of sleeping. `n` threads therefore keep `n` cores busy without an
    /// extra thread competing for them.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n.max(1);
        self
    }

    /// Smallest number of elements the solver gives one point task when it sizes a launch
    /// domain itself (default 1024).
    pub fn min_piece_size(mut self, n: usize) -> Self {
        self.min_piece = n.max(1);
        self
    }

    /// A fixed window: `n` tasks buffered between issue and analysis; the fusion pass looks
    /// for a fusible prefix among them. A read, a fence, a future's `get` and dropping the
    /// runtime analyse whatever the window holds. 1 launches each task at once. Unlike the
    /// default adaptive window, a task waits until the window fills: a body that waits for
    /// something the issuing thread does after submitting it deadlocks with `n > 1`. Across
    /// ranks each task is solved at `submit` and a prefix that a later task ends launches at
    /// once (see [`RANKS_WINDOW`]).
    pub fn window_size(mut self, n: usize) -> Self {
        self.window = Some(WindowPolicy::Fixed(n.max(1)));
        self
    }

    /// An adaptive window of at most `max` tasks (the default, with [`DEFAULT_WINDOW`]): tasks
    /// are buffered only while every worker has something to run, and launched (fused where
    /// the constraints allow) as soon as one would go idle or the issuing thread would block.
    /// Across ranks it is a fixed window of `max` (decisions that depend on timing would
    /// differ between ranks); with fusion off, a fixed window of one (holding a task only
    /// delays it).
    pub fn adaptive_window(mut self, max: usize) -> Self {
        self.window = Some(WindowPolicy::Adaptive { max: max.max(1) });
        self
    }

    /// Fuses adjacent tasks the four fusion constraints allow into one (default on). Off,
    /// every task is launched as issued (the window still buffers them).
    pub fn fusion(mut self, on: bool) -> Self {
        self.fusion = on;
        self
    }

    /// Reuses the fusion decision for windows isomorphic to one seen before (default on).
    pub fn fusion_memo(mut self, on: bool) -> Self {
        self.fusion_memo = on;
        self
    }

    /// Automatic tracing (default [`DEFAULT_TRACING`], or the environment variable
    /// `TESSERA_TRACING=0|1`): launched tasks are matched against repeated sequences found in
    /// the history, and a repeated sequence's dependences are replayed from a recording
    /// instead of analysed. While a candidate sequence still matches, its tasks are held back
    /// (not started); a read, fence or future's `get` hands them back. The tasks it hands on
    /// go to the window (by default the adaptive one, as untraced), where they are fused.
    pub fn tracing(mut self, on: bool) -> Self {
        self.tracing = on;
        self
    }

    /// How often (in launched tasks) tracing looks for repeats in its history (default 64;
    /// windows follow the ruler function, thesis §5.3.4).
    pub fn trace_sampling(mut self, unit: usize) -> Self {
        self.trace_sampling = unit.max(1);
        self
    }

    /// Test hook: every worker sleeps up to `max_us` µs, at random, before each point it
    /// runs, so a test can check that what the issuing side decides (the tracer above all)
    /// does not depend on how fast the workers are. Not for production use.
    #[doc(hidden)]
    pub fn worker_jitter(mut self, max_us: u32) -> Self {
        self.worker_jitter_us = max_us;
        self
    }

    /// Adaptive window: how long a task issued while a worker is idle is held for the next
    /// submit (default 100 µs); zero launches it at submit. For measuring
    /// the window (the fusion bench's `TESSERA_BENCH_HOLD_US`), not for production use.
    #[doc(hidden)]
    pub fn window_hold(mut self, hold: std::time::Duration) -> Self {
        self.hold_idle = hold;
        self
    }

    /// Adaptive window: whether a submit that finds a worker idle launches the window's
    /// complete fusible prefixes at once (default on) instead of holding them for the next
    /// submit. For measuring the window (the fusion bench's `TESSERA_BENCH_EARLY`).
    #[doc(hidden)]
    pub fn window_early_prefix(mut self, on: bool) -> Self {
        self.early_prefix = on;
        self
    }

    /// Runs replayed traces as actors (default on, or the environment variable
    /// `TESSERA_ACTORS=0|1`; only with tracing): each trace is compiled once into vertices
    /// owned by workers, with static out-edges and in-edge counters, and a replay that follows
    /// a replay of the same trace is linked to it by recorded edges instead of waiting behind
    /// an entry vertex, so consecutive replays overlap (thesis ch. 6, Algorithm 4).
    pub fn actors(mut self, on: bool) -> Self {
        self.actors = on;
        self
    }

    /// Lets the points of an actor replay view their stores without ledger borrows when the
    /// trace's recorded graph was verified, once, to order every two conflicting accesses
    /// (default on, or the environment variable `TESSERA_VERIFIED_REPLAYS=0|1`). Off, every
    /// view borrows its cells from the store's ledger, as ordinary tasks' do: a check paid at
    /// every view, on cache lines the points of one step share (runtime/DESIGN.md, "Replays
    /// without ledger borrows").
    pub fn verified_replays(mut self, on: bool) -> Self {
        self.verified_replays = on;
        self
    }

    /// Point tasks that may be issued and not yet run before `submit` waits (default 128 per
    /// thread, between 256 and 4096: enough lookahead to keep the workers fed without waking the
    /// issuer too often, short enough that the dependence lists the analysis scans stay short).
    /// Bounds memory and the dependence lists when the application issues faster than the
    /// workers run. (A task body must not wait for something the issuing thread does later.)
    pub fn max_pending(mut self, n: usize) -> Self {
        self.max_pending = Some(n.max(1));
        self
    }

    /// Runs the runtime across the ranks of `comm` (control replication): every rank must
    /// build its runtime with the same options and issue the same task stream. Each rank
    /// runs its block of every index task's points and receives the sub-stores they read
    /// from the ranks that hold them; `read` and futures give every rank the same values.
    /// Without a communicator the runtime is one rank. With [`crate::transport::run_ranks`]
    /// the ranks are threads of one process (`comm.clone()` of the `ThreadComm` it lends).
    pub fn communicator(mut self, comm: Arc<dyn Communicator + Send + Sync>) -> Self {
        self.ranks = Some(Ranks(comm));
        self
    }

    /// Across ranks: after solving each task, every rank compares a hash of its launch
    /// domain, partitions, token and sub-stores with the others', and a difference fails
    /// `submit` on every rank with [`RuntimeError::RanksDisagree`] (default: on in debug
    /// builds; `TESSERA_AGREEMENT=0|1` overrides). One collective per task: a debugging aid.
    pub fn agreement_check(mut self, on: bool) -> Self {
        self.agreement = on;
        self
    }

    /// Builds the runtime; panics only when a communicator was given and agreeing on the
    /// machine across ranks fails (use [`RuntimeBuilder::try_build`] to get that error).
    pub fn build(self) -> Runtime {
        self.try_build()
            .unwrap_or_else(|e| panic!("building the runtime across ranks: {e}"))
    }

    /// Builds the runtime. Across ranks this is a collective: the ranks agree on the
    /// processors per rank (the smallest any rank asked for), so launch domains and
    /// partitions are the same everywhere, not sized by each rank's own core count.
    pub fn try_build(self) -> Result<Runtime> {
        let (rank, ranks, agreed_threads) = match &self.ranks {
            None => (0, 1, self.threads),
            Some(Ranks(c)) => {
                if c.size() > crate::replicate::MAX_RANKS {
                    return Err(RuntimeError::Transport(format!(
                        "{} ranks; at most {} are supported",
                        c.size(),
                        crate::replicate::MAX_RANKS
                    )));
                }
                let all = c
                    .all_gather_u64(&[self.threads as u64])
                    .map_err(|e| RuntimeError::Transport(e.to_string()))?;
                let min = all.iter().filter_map(|v| v.first()).min().copied();
                (c.rank(), c.size(), min.unwrap_or(1).max(1) as usize)
            }
        };
        let shared = Arc::new(Shared::default());
        let policy = match self.window {
            // Without fusion holding tasks gains nothing: launch each at once.
            Some(WindowPolicy::Adaptive { .. }) | None if !self.fusion => WindowPolicy::Fixed(1),
            // Across ranks every decision must follow from the stream: an adaptive window's
            // launches follow the workers' timing, a fixed window's only the stream's flush
            // points (full, read, fence, `get`, drop), the same on every rank.
            Some(WindowPolicy::Adaptive { max }) if ranks > 1 => WindowPolicy::Fixed(max),
            None if ranks > 1 => WindowPolicy::Fixed(RANKS_WINDOW),
            Some(p) => p,
            // With automatic tracing on too: the tracer is fed the issued stream, ahead of the
            // window, so the traces found do not depend on the window; the tasks it releases
            // (a chain longer than a trace) fuse as untraced (runtime/DESIGN.md, `tfuse`).
            None => WindowPolicy::Adaptive {
                max: DEFAULT_WINDOW,
            },
        };
        let max_pending = self
            .max_pending
            .unwrap_or((128 * self.threads).clamp(256, 4096));
        shared.low_water.store(max_pending / 2, Ordering::Relaxed);
        let workers = self.threads.saturating_sub(1).max(1);
        let inner = Inner {
            id: NEXT_RUNTIME.fetch_add(1, Ordering::Relaxed),
            machine: Machine {
                threads: agreed_threads,
                ranks,
                rank,
                min_piece: self.min_piece,
            },
            pool: ThreadPool::new(workers, shared.clone(), self.worker_jitter_us),
            shared,
            registry: RwLock::default(),
            front: Mutex::new(Front {
                window: Window::new(policy.capacity()),
                interner: Interner::default(),
                memo: SolveMemo::default(),
                fusion_memo: FusionMemo::default(),
                // A replayed trace builds every point's node: not across ranks (yet).
                tracing: (self.tracing && ranks == 1).then(|| {
                    let mut t = Tracing::new(self.trace_sampling, self.actors.then_some(workers));
                    // Replayed traces are fused by the trace's own pass (tracing/fuse.rs).
                    t.fuse = self.fusion;
                    t.verified = self.verified_replays;
                    Box::new(t)
                }),
                deferred: None,
            }),
            next_store: AtomicU64::new(0),
            next_position: AtomicU64::new(0),
            spare_spec: Mutex::new(None),
            max_pending,
            fusion: FusionConfig {
                enabled: self.fusion,
                memo: self.fusion_memo,
            },
            fused_body: Arc::new(|_: &mut TaskContext<'_>| {
                unreachable!("a fused task runs its sub-tasks' bodies")
            }),
            mem: Arc::new(Memory::for_ranks(ranks)),
            roots: Mutex::default(),
            comm_thread: Mutex::default(),
            adaptive: std::sync::OnceLock::new(),
            window_thread: Mutex::default(),
        };
        if let Some(Ranks(comm)) = self.ranks.filter(|_| ranks > 1) {
            let ch = Arc::new(Channel::new(
                comm,
                self.agreement,
                &inner.shared,
                inner.pool.spawner(),
            ));
            let _ = inner.shared.channel.set(ch.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("tessera-comm-{rank}"))
                .spawn(move || ch.run());
            match spawned {
                Ok(h) => *inner.comm_thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(h),
                Err(e) => {
                    inner.pool.shutdown();
                    return Err(RuntimeError::Transport(format!(
                        "communication thread: {e}"
                    )));
                }
            }
        }
        let rt = Runtime {
            inner: Arc::new(inner),
        };
        if let WindowPolicy::Adaptive { .. } = policy {
            let a = Arc::new(Adaptive::new(
                Arc::downgrade(&rt.inner),
                workers,
                self.hold_idle,
                self.early_prefix,
            ));
            let _ = rt.inner.adaptive.set(a.clone());
            let _ = rt.inner.shared.on_idle.set(a.clone());
            let h = std::thread::Builder::new()
                .name("tessera-window".into())
                .spawn(move || a.run_timer())
                .map_err(|e| RuntimeError::Transport(format!("window thread: {e}")))?;
            *rt.inner
                .window_thread
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(h);
        }
        rt.register("tessera.fill", fill_body)
            .expect("fresh registry");
        Ok(rt)
    }
}

/// A task runtime: the application issues a sequential stream of tasks over stores; the runtime
/// partitions the stores, finds the parallelism and runs point tasks on worker threads (and on
/// the application's thread while it waits), with results identical to running the stream in
/// order.
pub struct Runtime {
    inner: Arc<Inner>,
}

impl Runtime {
    /// A runtime on `threads` processors ([`RuntimeBuilder::threads`]) and default options.
    pub fn new(threads: usize) -> Runtime {
        Runtime::builder().threads(threads).build()
    }

    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// Processors per rank that launch domains are sized for (across ranks: the number
    /// every rank agreed on), the application's thread included.
    pub fn threads(&self) -> usize {
        self.inner.machine.threads
    }

    /// This runtime's rank (0 on one rank).
    pub fn rank(&self) -> usize {
        self.inner.machine.rank
    }

    /// Ranks running the same task stream (1 without a communicator).
    pub fn ranks(&self) -> usize {
        self.inner.machine.ranks
    }

    /// Registers a task body under a stable name.
    pub fn register(
        &self,
        name: &str,
        body: impl Fn(&mut TaskContext<'_>) + Send + Sync + 'static,
    ) -> Result<()> {
        self.register_with(name, Arc::new(body), None)
    }

    /// Registers an element-wise task: every argument (all of element type `T`, passed with
    /// `read`, `write` or `read_write`, sub-stores of equal length) is accessed at the same
    /// index, and `body` runs over one [`Chunk`] of them at a time. Launched alone it runs
    /// over the point's sub-stores chunk by chunk; fused with other element-wise tasks, one
    /// loop applies every one of them to a cache-sized chunk before the next, and fused
    /// temporaries live in chunk-sized scratch. The body must assign every element of each
    /// output passed with `write`; results (`submit_reduce`) are folded with
    /// [`Chunk::add_result`]. The body runs through [`crate::simd::wide`] (AVX2 + FMA where the
    /// CPU has them, bitwise the same results): write it as an `#[inline(always)]` closure so
    /// that its loop is compiled for those instructions.
    pub fn register_elementwise<T: Element>(
        &self,
        name: &str,
        body: impl Fn(&mut Chunk<'_, T>) + Send + Sync + 'static,
    ) -> Result<()> {
        let kernel = Arc::new(Elementwise::new(body));
        let k = kernel.clone();
        let body: TaskBody = Arc::new(move |ctx: &mut TaskContext<'_>| unfused_body(&k, ctx));
        self.register_with(name, body, Some(kernel))
    }

    fn register_with(
        &self,
        name: &str,
        body: TaskBody,
        kernel: Option<Arc<Elementwise>>,
    ) -> Result<()> {
        let mut reg = self
            .inner
            .registry
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if reg.register(name, body, kernel) {
            Ok(())
        } else {
            Err(RuntimeError::DuplicateTask(name.into()))
        }
    }

    /// Starts building a launch of the task registered as `name` (an unknown name is reported
    /// by `submit`).
    pub fn task(&self, name: &str) -> TaskLauncher<'_> {
        let task = self
            .inner
            .registry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .ok_or_else(|| name.to_string());
        let spare = match self.inner.spare_spec.try_lock() {
            Ok(mut s) => s.take(),
            Err(_) => None,
        };
        let spec = match spare {
            Some(mut spec) => {
                spec.task = task;
                spec
            }
            None => Box::new(LaunchSpec {
                task,
                args: Default::default(),
                constraints: Default::default(),
                scalars: Default::default(),
                domain: None,
                shard: None,
            }),
        };
        TaskLauncher { rt: self, spec }
    }

    fn new_root(&self, dtype: DType, dim: usize, bound: Option<Bound>) -> Store {
        let id = self.inner.next_store.fetch_add(1, Ordering::Relaxed);
        let root = Arc::new(StoreRoot::new(
            id,
            self.inner.id,
            dtype,
            dim,
            bound,
            self.inner.mem.clone(),
            self.ranks() > 1,
        ));
        if self.ranks() == 1 {
            return Store::from_root(root, None);
        }
        let mut roots = self.inner.roots.lock().unwrap_or_else(|e| e.into_inner());
        if roots.len() == roots.capacity() {
            roots.retain(|r| r.strong_count() > 0);
        }
        roots.push(Arc::downgrade(&root));
        drop(roots);
        Store::from_root(root, None)
    }

    fn check_shape(dtype: DType, shape: &[usize]) -> Result<()> {
        if shape.len() > MAX_DIMS {
            return Err(RuntimeError::TooManyDims {
                shape: shape.to_vec(),
                dims: shape.len(),
                max: MAX_DIMS,
            });
        }
        let bytes = shape
            .iter()
            .try_fold(dtype.size(), |acc, &e| acc.checked_mul(e));
        if bytes.is_none_or(|b| b > isize::MAX as usize) {
            return Err(RuntimeError::ShapeTooLarge {
                shape: shape.to_vec(),
            });
        }
        Ok(())
    }

    /// A zero-filled store.
    pub fn create(&self, dtype: DType, shape: &[usize]) -> Result<Store> {
        Self::check_shape(dtype, shape)?;
        let rect = Rect::from_shape(shape);
        Ok(self.new_root(dtype, shape.len(), Some(Bound::zeros(rect, dtype))))
    }

    /// A store holding `data` (row-major).
    pub fn from_vec<T: Element>(&self, shape: &[usize], data: Vec<T>) -> Result<Store> {
        Self::check_shape(T::DTYPE, shape)?;
        let rect = Rect::from_shape(shape);
        if data.len() != rect.volume() {
            return Err(RuntimeError::HostDataLength {
                shape: shape.to_vec(),
                expected: rect.volume(),
                got: data.len(),
            });
        }
        if self.ranks() > 1 && rect.volume() * T::DTYPE.size() >= SPARSE_MIN_BYTES {
            return Ok(self.cut_to_share(rect, data));
        }
        Ok(self.new_root(
            T::DTYPE,
            shape.len(),
            Some(Bound::with_data(rect, T::wrap(Buf::from_vec(data)))),
        ))
    }

    /// Across ranks, a store of host data every rank made whole: this rank keeps only its
    /// share (`replicate::share`) in a buffer allocated page by page, and frees `data`.
    fn cut_to_share<T: Element>(&self, rect: Rect, data: Vec<T>) -> Store {
        let m = &self.inner.machine;
        let mine = crate::replicate::share::share(rect, m, m.rank);
        let mut buf = Buf::<T>::sparse_zeros(rect.volume(), None);
        // A share is whole rows: one run of the row-major buffer.
        let (start, len) = (rect.linear(mine.lo()), mine.volume());
        buf.copy_from(start, &data[start..start + len]);
        drop(data);
        let store = self.new_root(
            T::DTYPE,
            rect.dim(),
            Some(Bound::with_data(rect, T::wrap(buf))),
        );
        store.root.meta().valid = Some(crate::replicate::share::cut_map(rect, m));
        store
    }

    /// A 1-d store of `len` elements that the ranks made in parts (each read only its share of
    /// a file, say): `shares[r]` lists the ranges rank `r` holds — every rank passes the same
    /// list, one entry per rank, the ranges disjoint and together `0..len` — and `mine` is
    /// this rank's ranges' elements, in the order listed. The valid-copy map says who holds
    /// what, so tasks move exactly the parts another rank's points need; this rank allocates
    /// only its ranges (and what it later receives). On one rank `mine` is the whole store.
    pub fn from_share<T: Element>(
        &self,
        len: usize,
        shares: &[Vec<Range<usize>>],
        mine: Vec<T>,
    ) -> Result<Store> {
        let (me, ranks) = (self.rank(), self.ranks());
        check_shares(len, shares, ranks)?;
        let held: usize = shares[me].iter().map(|r| r.len()).sum();
        if mine.len() != held {
            return Err(RuntimeError::HostDataLength {
                shape: vec![held],
                expected: held,
                got: mine.len(),
            });
        }
        if ranks == 1 {
            return self.from_vec(&[len], mine);
        }
        let whole = Rect::from_shape(&[len]);
        let mut buf = Buf::<T>::sparse_zeros(len, None);
        let mut at = 0;
        for r in &shares[me] {
            buf.copy_from(r.start, &mine[at..at + r.len()]);
            at += r.len();
        }
        drop(mine);
        let store = self.new_root(T::DTYPE, 1, Some(Bound::with_data(whole, T::wrap(buf))));
        let mut valid = crate::replicate::valid::ValidMap::all(whole, ranks);
        for (rank, list) in shares.iter().enumerate() {
            for r in list.iter().filter(|r| !r.is_empty()) {
                valid.write(Rect::new(&[r.start], &[r.end]), rank);
            }
        }
        store.root.meta().valid = Some(valid);
        Ok(store)
    }

    /// A 1-d `PosRange` store of the ranges between consecutive `offsets` (a compressed
    /// level's `pos` in TACO's layout, `n + 1` offsets for `n` ranges). Whether the ranges are
    /// monotone is found while building them and recorded, so images from this store need no
    /// pass over it to find out (see `solver::monotone`).
    pub fn from_offsets(&self, offsets: impl IntoIterator<Item = u64>) -> Result<Store> {
        let mut it = offsets.into_iter();
        let (mut lo, mut falls) = (it.next().unwrap_or(0), false);
        // Consecutive ranges meet (`hi` is the next `lo`): monotone unless an offset falls.
        let ranges: Vec<PosRange> = it
            .map(|hi| {
                falls |= hi < lo;
                let r = PosRange::new(lo, hi);
                lo = hi;
                r
            })
            .collect();
        let store = self.from_vec(&[ranges.len()], ranges)?;
        let rect = store.rect().expect("bound");
        let mut meta = store.root.meta();
        meta.monotone = Some((meta.version, rect, !falls));
        drop(meta);
        Ok(store)
    }

    /// A 1-d store whose extent the task writing it decides (see `write_unbound`).
    pub fn create_unbound(&self, dtype: DType) -> Store {
        self.new_root(dtype, 1, None)
    }

    /// Sets every element of `store` to `value` (a deferred task).
    pub fn fill(&self, store: &Store, value: impl Into<Scalar>) -> Result<()> {
        let value = value.into();
        let fits = match store.dtype() {
            DType::F64 => f64::from_scalar(value).is_some(),
            DType::F32 => f32::from_scalar(value).is_some(),
            DType::I64 => i64::from_scalar(value).is_some(),
            DType::I32 => i32::from_scalar(value).is_some(),
            DType::U64 => u64::from_scalar(value).is_some(),
            DType::U32 => u32::from_scalar(value).is_some(),
            DType::Range => false,
        };
        if !fits {
            return Err(RuntimeError::FillValue {
                store: store.id(),
                dtype: store.dtype(),
                value,
            });
        }
        self.task("tessera.fill")
            .write(store)
            .scalar(value)
            .submit()
    }

    /// Waits for the tasks writing `store` and copies its elements out (row-major).
    ///
    /// Across ranks this is a collective (every rank reads the same stores in the same
    /// order) and every rank gets the same values.
    pub fn read<T: Element>(&self, store: &Store) -> Result<Vec<T>> {
        self.read_to(store, None)
            .map(|v| v.expect("every rank receives"))
    }

    /// [`Runtime::read`] whose values only rank `root` receives (`None` on the others): no
    /// other rank gathers the store. On one rank, `root` must be 0.
    pub fn read_on<T: Element>(&self, store: &Store, root: usize) -> Result<Option<Vec<T>>> {
        let ranks = self.ranks();
        if root >= ranks {
            return Err(RuntimeError::BadRank { rank: root, ranks });
        }
        self.read_to(store, Some(root))
    }

    /// Waits like [`Runtime::read`] and returns the store's elements, consuming the handle.
    ///
    /// On one rank, when this is the application's only handle on the store, the handle
    /// covers the whole store and no task uses it any more (`take` waits for those still
    /// running), the buffer is moved out: no copy. Otherwise (other handles or views, a view
    /// of part of the store, across ranks) the elements are copied as `read` copies them.
    /// Across ranks this is a collective like `read`, and every rank gets the same values.
    pub fn take<T: Element>(&self, mut store: Store) -> Result<Vec<T>> {
        let rect = self.ready_to_read::<T>(&store)?;
        let whole = store.root.bound().is_some_and(|b| b.rect == rect);
        if whole && self.inner.shared.channel.get().is_none() && store.app_refs() == 1 {
            // A finished node drops its task (and the task's handles on stores) before it is
            // marked done: once these are done, only handles outside the task graph remain.
            let pending = store.root.meta().access.pending(&rect);
            self.wait_then_check(pending, &store, &rect)?;
            // The authority: no other handle of any kind (a clone, a view, a task) exists.
            if let Some(root) = Arc::get_mut(&mut store.root) {
                return Ok(match root.take_data() {
                    Some(mut data) => {
                        let buf = T::buf_mut(&mut data).expect("dtype checked");
                        std::mem::replace(buf, Buf::from_vec(Vec::new())).into_vec()
                    }
                    // Never touched: zeros, as a read would see them.
                    None => vec![T::default(); rect.volume()],
                });
            }
        }
        self.copy_out(&store, rect, None)
            .map(|v| v.expect("every rank receives"))
    }

    /// Waits (helping) for `nodes`, then fails if a task writing `rect` of `store` failed.
    fn wait_then_check(&self, nodes: Vec<Arc<Node>>, store: &Store, rect: &Rect) -> Result<()> {
        for n in nodes {
            n.watch();
            self.inner
                .wait_helping(&self.inner.shared.completion, || n.is_done());
        }
        match store.root.poisoned_for_read(rect) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Checks a read of `store` as `T`, issues what the window holds and waits until the
    /// store is bound; returns the view's bounds.
    fn ready_to_read<T: Element>(&self, store: &Store) -> Result<Rect> {
        self.check_store(store)?;
        if store.dtype() != T::DTYPE {
            return Err(RuntimeError::DTypeMismatch {
                store: store.id(),
                requested: T::DTYPE,
                actual: store.dtype(),
            });
        }
        self.inner.flush()?;
        self.inner.wait_bound(&store.root, "read")?;
        Ok(store.rect().expect("bound"))
    }

    fn read_to<T: Element>(&self, store: &Store, to: Option<usize>) -> Result<Option<Vec<T>>> {
        let rect = self.ready_to_read::<T>(store)?;
        self.copy_out(store, rect, to)
    }

    /// Gathers `rect` of `store` across ranks (to rank `to`, or every rank), waits for its
    /// writers and copies it out.
    fn copy_out<T: Element>(
        &self,
        store: &Store,
        rect: Rect,
        to: Option<usize>,
    ) -> Result<Option<Vec<T>>> {
        if let Some(ch) = self.inner.shared.channel.get() {
            // Every rank reads the same stores in the same order: a collective.
            let inner = &self.inner;
            let wait = &mut |n: &Arc<Node>| {
                n.watch();
                inner.wait_helping(&inner.shared.completion, || n.is_done())
            };
            crate::replicate::gather(ch, &store.root, rect, to, &inner.shared.counters, wait)?;
            if to.is_some_and(|r| r != ch.rank) {
                return Ok(None);
            }
        }
        self.copy_local(store, rect).map(Some)
    }

    /// Waits for the tasks writing `rect` of `store` and copies this rank's elements of it
    /// out (row-major): the caller knows this rank holds them.
    fn copy_local<T: Element>(&self, store: &Store, rect: Rect) -> Result<Vec<T>> {
        let writers = store.root.meta().access.pending_writers(&rect);
        self.wait_then_check(writers, store, &rect)?;
        let bound = store.root.bound().expect("bound");
        let buf = T::buf(store.root.data().expect("bound")).expect("dtype checked");
        let _b =
            store
                .root
                .ledger
                .borrow(rect, false)
                .map_err(|r| RuntimeError::ConcurrentAccess {
                    store: store.id(),
                    rect: format!("{r:?}"),
                })?;
        let mut out = Vec::with_capacity(rect.volume());
        rect.for_each_run(&bound.rect, |start, len| {
            // SAFETY: shared ledger borrow of `rect`; runs lie inside it.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(buf.base().add(start), len)
            });
        });
        Ok(out)
    }

    /// This rank's own part of `store`, to write a distributed result piecewise (as
    /// `io::store_file` does) instead of gathering it on one rank: the rectangles whose latest
    /// value this rank holds and no lower-numbered rank does, each with its elements
    /// (row-major), in the same order on every rank. The ranks' parts are disjoint and cover
    /// the store (a part every rank holds is rank 0's); on one rank the part is the whole
    /// store. Waits for the tasks writing them.
    ///
    /// Not a collective: who holds what follows from the issued tasks alone, the same on
    /// every rank (the valid-copy map), so no rank asks another. A task that failed on
    /// another rank shows only where it poisons what this rank reads.
    pub fn read_own<T: Element>(&self, store: &Store) -> Result<Vec<(Rect, Vec<T>)>> {
        let rect = self.ready_to_read::<T>(store)?;
        let own: Vec<Rect> = match self.inner.shared.channel.get() {
            None => vec![rect],
            Some(ch) => match &store.root.meta().valid {
                Some(v) => v
                    .split(&rect)
                    .into_iter()
                    .filter(|(_, holders)| holders.trailing_zeros() as usize == ch.rank)
                    .map(|(r, _)| r)
                    .collect(),
                // Every rank holds all of it.
                None if ch.rank == 0 => vec![rect],
                None => vec![],
            },
        };
        own.into_iter()
            .map(|r| Ok((r, self.copy_local(store, r)?)))
            .collect()
    }

    /// Waits until every issued task has run. Fails only if analysing a task still in the window
    /// fails; task failures are reported by `read` and futures.
    pub fn fence(&self) -> Result<()> {
        self.inner.flush()?;
        let shared = &self.inner.shared;
        self.inner.wait_helping(&shared.idle, || {
            shared.outstanding.load(Ordering::Acquire) == 0
        });
        Ok(())
    }

    /// A snapshot of the runtime's counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.inner.shared.counters.snapshot();
        s.bytes_allocated = self.inner.mem.allocated.load(Ordering::Relaxed);
        s.bytes_resident = self.resident_bytes();
        s
    }

    /// Bytes of memory the elements of this runtime's live stores occupy now.
    fn resident_bytes(&self) -> u64 {
        if self.ranks() == 1 {
            return self.inner.mem.live_whole.load(Ordering::Relaxed);
        }
        let roots = self.inner.roots.lock().unwrap_or_else(|e| e.into_inner());
        roots
            .iter()
            .filter_map(|r| r.upgrade())
            .map(|r| r.resident_bytes())
            .sum()
    }

    fn check_store(&self, s: &Store) -> Result<()> {
        if s.root.runtime != self.inner.id {
            return Err(RuntimeError::ForeignStore { store: s.id() });
        }
        Ok(())
    }

    /// Validates a launch and puts it in the window.
    pub(crate) fn issue(
        &self,
        l: TaskLauncher<'_>,
        result: Option<ReduceOp>,
    ) -> Result<Option<Future>> {
        // Used in place: moving the spec out of its box would copy it.
        let mut l = l.spec;
        let found = std::mem::replace(&mut l.task, Err(String::new()));
        let Registered { name, body, kernel } = found.map_err(RuntimeError::UnknownTask)?;
        // An `Arc` clone, not a `String`: the name is only formatted when a check fails.
        let task = name.clone();
        for a in &l.args {
            if a.root.runtime != self.inner.id {
                return Err(RuntimeError::ForeignStore { store: a.root.id });
            }
            check_privilege(&task, &a.root, a.privilege)?;
        }
        let mut front = self.inner.front.lock().unwrap_or_else(|e| e.into_inner());
        let future = result.map(|_| Future::pending(Arc::downgrade(&self.inner)));
        let mut result = result.zip(future.as_ref().map(|f| f.cell.clone()));
        let mut reg = Registered { name, body, kernel };
        // In a replay streak the spec is compared with the recording's next task as it is: on
        // a match its constraints are not resolved, its domain not checked (the recording's
        // are taken) and the task is held at once (`Inner::streak_spec`, tracing/replay.rs).
        if front.tracing.as_ref().is_some_and(|t| t.in_streak()) {
            match self.inner.streak_spec(&mut front, &mut l, reg, result) {
                Ok(r) => {
                    self.keep_spec(l);
                    Counters::add(&self.inner.shared.counters.tasks_issued, 1);
                    return self.issued(front, r).map(|()| future);
                }
                Err(back) => (reg, result) = back,
            }
        }
        let constraints = resolve_constraints(&task, &l.args, &l.constraints)?;
        let domain = match &l.domain {
            Some(d) => Some(Domain::new(d).ok_or_else(|| RuntimeError::BadLaunchDomain {
                task: task.to_string(),
                domain: d.to_vec(),
            })?),
            None => None,
        };
        if let Some(dims) = &l.shard {
            check_shard(&task, dims, domain.as_ref())?;
        }
        let issued = Issued::from_spec(reg, &mut l, constraints, domain, result);
        self.keep_spec(l);
        Counters::add(&self.inner.shared.counters.tasks_issued, 1);
        // Later tasks may read the store before this one is analysed (it may wait in the
        // window): it is as good as bound for them.
        for a in &issued.args {
            if a.privilege == Privilege::WriteUnbound {
                a.root.meta().unbound_issued = true;
            }
        }
        let r = if front.tracing.is_some() {
            self.inner.trace_issue(&mut front, issued)
        } else {
            self.inner.enqueue(&mut front, issued)
        };
        self.issued(front, r).map(|()| future)
    }

    /// Empties a submitted spec (its `args`, `scalars`, `shard` and `task` are taken already)
    /// for the next launcher.
    fn keep_spec(&self, mut l: Box<LaunchSpec>) {
        l.constraints.clear();
        l.domain = None;
        if let Ok(mut spare) = self.inner.spare_spec.try_lock() {
            spare.get_or_insert(l);
        }
    }

    /// After a task went to the tracer or the window: the error of a deferred launch, if
    /// any, and the issuer throttled.
    fn issued(&self, mut front: std::sync::MutexGuard<'_, Front>, r: Result<()>) -> Result<()> {
        let r = r.and(front.deferred.take().map_or(Ok(()), Err));
        self.inner.release(front);
        r?;
        self.inner.throttle();
        Ok(())
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.fence();
        if let Some(a) = self.inner.adaptive.get() {
            a.stop();
            join(&self.inner.window_thread);
        }
        if let Some(ch) = self.inner.shared.channel.get() {
            ch.stop();
            join(&self.inner.comm_thread);
        }
        self.inner.pool.shutdown();
    }
}

/// Joins the thread in `slot`, if any (the runtime's communication or window thread).
fn join(slot: &Mutex<Option<std::thread::JoinHandle<()>>>) {
    let handle = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(h) = handle {
        let _ = h.join();
    }
}

/// Checks that a store can be passed with a privilege.
fn check_privilege(task: &str, root: &StoreRoot, p: Privilege) -> Result<()> {
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
fn resolve_constraints(
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
    Ok(out)
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

impl Inner {
    /// Analyses every task in the window, in issue order (fusing what may be fused).
    pub(crate) fn flush(&self) -> Result<()> {
        let mut front = self.front.lock().unwrap_or_else(|e| e.into_inner());
        let r = self.flush_locked(&mut front);
        let r = r.and(front.deferred.take().map_or(Ok(()), Err));
        self.release(front);
        r
    }

    /// For a `Future::get` whose value is known already: [`Inner::flush`] unless the window is
    /// adaptive and tracing is off. Whether the value is known yet depends on whether workers
    /// (and, across ranks, messages) have finished its task, so a `get` flushes known or not
    /// wherever decisions must follow from the task stream alone: a fixed window (across
    /// ranks, a rank that skipped the flush would hold tasks the others launched and fuse
    /// them differently) and the tracer (it cuts at every `get`; no trace spans one). An
    /// adaptive window's launches follow timing anyway, and skipping spares a lock.
    pub(crate) fn flush_known(&self) -> Result<()> {
        if self.adaptive.get().is_none() {
            return self.flush();
        }
        let traced = self
            .front
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tracing
            .is_some();
        if traced {
            self.flush()
        } else {
            Ok(())
        }
    }

    /// Lets go of the front lock; with an adaptive window, first publishes whether it holds
    /// tasks (an empty window disarms the window thread), and afterwards launches it if a
    /// worker went idle meanwhile and found the lock taken (it left that to the holder). A
    /// worker that went idle before the issuer's `held` store is seen by the issuer's
    /// outstanding count instead (`issue_adaptive` then arms the window thread).
    fn release(&self, front: std::sync::MutexGuard<'_, Front>) {
        let Some(a) = self.adaptive.get() else {
            return;
        };
        let held = !front.window.is_empty();
        a.held.store(held, Ordering::SeqCst);
        if !held {
            a.disarm();
        }
        drop(front);
        if a.wanted.load(Ordering::SeqCst) {
            self.idle_flush(a, false);
        }
    }

    /// Issues a task into an adaptive window: solved at once (so a bad launch fails at
    /// `submit`, as with a window of one) and held. What is held is launched when it needs
    /// values a held task makes (the issuer would block on them: what is ahead goes first),
    /// when the window is full (its fusible prefix), when a worker would go idle (`node_ran`),
    /// or, if a worker is idle now, by the window thread once no task has followed for
    /// [`window::HOLD`] (so a chain issued in one go fuses from its first task), and in any
    /// case by the window thread after [`window::STALL`] without a submit.
    ///
    /// Timed as analysis once per submit (two clock reads, the second also the hold's
    /// deadline), not once per task solved and prefix launched (runtime/DESIGN.md, `fmemo`).
    fn issue_adaptive(&self, front: &mut Front, a: &Adaptive, t: Issued) -> Result<()> {
        let t0 = Instant::now();
        // `held` before reading the outstanding count: see `Adaptive::idle`.
        a.held.store(true, Ordering::SeqCst);
        let outstanding = self.shared.outstanding.load(Ordering::SeqCst);
        let idle = outstanding < a.workers;
        // A lone task predicted to begin a prefix that makes no temporary: holding it idles the
        // worker for at most one launch saved, also when the worker is only about to idle. It
        // is launched as a window of one launches it, without being moved into the window,
        // boxed, taken out and unpended (runtime/DESIGN.md, "Task fusion", `tiny2`).
        let dry = a.running_dry(outstanding);
        if a.early && front.window.predicted_gainless(&t, dry) {
            let r = self.launch_now(front, t);
            self.add_analysis(t0.elapsed());
            return r;
        }
        front.window.push(t);
        let mut first = Ok(());
        self.solve_ahead(front, &mut first);
        let held = front.window.len();
        let r = if !front.window.tasks.is_empty() || (idle && a.hold_idle.is_zero()) {
            self.drain(front, true)
        } else if front.window.is_full() {
            self.drain(front, idle)
        } else if a.early {
            self.launch_complete(front, idle)
        } else {
            Ok(())
        };
        // Still idle: nothing was launched for the idle worker.
        let idle = idle && front.window.len() == held;
        let now = Instant::now();
        self.add_analysis(now - t0);
        if !front.window.is_empty() {
            if idle {
                a.held_while_idle();
            }
            if a.hold(now, if idle { a.hold_idle } else { window::STALL }) {
                Counters::add(&self.shared.counters.window_wakes, 1);
            }
        }
        first.and(r)
    }

    /// Launches the adaptive window's *complete* fusible prefixes (those a later task already
    /// ends; no task issued later can join them) and keeps the last, still growing one. With
    /// a worker idle, every complete prefix goes; with the workers busy, those that holding
    /// could still give a temporary stay (`Prefix::may_gain_temporary`: a store the
    /// application may yet drop the handle of), and launch when a worker would go idle.
    ///
    /// Why not hold them all while the workers are busy: a complete prefix gains nothing more
    /// by waiting, and "busy" is often one worker finishing its last node. The fusion bench's
    /// BiCGSTAB issues an iteration's 13 tasks (5 prefixes) after waiting on futures; held to
    /// the next idle worker or `get`, its SpMVs started one launch later than unfused, on the
    /// critical path of every iteration (runtime/DESIGN.md, "Task fusion").
    fn launch_complete(&self, front: &mut Front, idle: bool) -> Result<()> {
        let mut first = Ok(());
        while front.window.ready.len() > 1
            && front.window.fusible_prefix() < front.window.ready.len()
        {
            if !idle && front.window.complete_prefix_may_gain() {
                break;
            }
            self.launch_prefix_into(front, &mut first);
        }
        first
    }

    /// Launches the window's next fusible prefix; its error, if it is the first of a pass,
    /// goes to `first` (the pass goes on: the other prefixes still launch).
    fn launch_prefix_into(&self, front: &mut Front, first: &mut Result<()>) {
        if let Err(e) = self.launch_prefix(front) {
            if first.is_ok() {
                *first = Err(e);
            }
        }
    }

    /// Adds `d` to the analysis time. The window's entry points (a submit, a flush, an idle
    /// worker's launch) time themselves once, not each task solved or prefix launched: every
    /// clock read is ~26 ns here, 24 per fused CG iteration before.
    fn add_analysis(&self, d: std::time::Duration) {
        Counters::add(&self.shared.counters.analysis_ns, d.as_nanos() as u64);
    }

    /// `f`, timed as analysis (one of the window's entry points).
    fn analysed<T>(&self, f: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let r = f();
        self.add_analysis(t0.elapsed());
        r
    }

    /// A worker would go idle and the adaptive window holds tasks: launch every solved task in
    /// it (fused where allowed). Never blocks: if another thread holds the front lock, `wanted`
    /// tells it to do this when it lets go. Errors wait in `deferred` for the issuing thread.
    pub(crate) fn idle_flush(&self, a: &Adaptive, timer: bool) {
        // Before `wanted`: a holder that sees `wanted` also sees who asked.
        if timer {
            a.wanted_by_timer.store(true, Ordering::SeqCst);
        }
        a.wanted.store(true, Ordering::SeqCst);
        while a.wanted.load(Ordering::SeqCst) {
            let mut front = match self.front.try_lock() {
                Ok(f) => f,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return,
            };
            a.wanted.store(false, Ordering::SeqCst);
            let timer = a.wanted_by_timer.swap(false, Ordering::SeqCst) || timer;
            if !front.window.ready.is_empty() {
                let c = &self.shared.counters;
                Counters::add(
                    if timer {
                        &c.timer_flushes
                    } else {
                        &c.idle_flushes
                    },
                    1,
                );
                self.analysed(|| {
                    while !front.window.ready.is_empty() {
                        if let Err(e) = self.launch_prefix(&mut front) {
                            front.deferred.get_or_insert(e);
                        }
                    }
                });
            }
            let held = !front.window.is_empty();
            a.held.store(held, Ordering::SeqCst);
            if !held {
                a.disarm();
            }
        }
    }

    /// Puts a task in the window (past the tracer, if tracing is on).
    pub(crate) fn enqueue(&self, front: &mut Front, t: Issued) -> Result<()> {
        if let Some(a) = self.adaptive.get() {
            self.issue_adaptive(front, a, t)
        } else if front.window.bypass() {
            // Nothing buffered and nothing to buffer for: analyse now, without a copy of the
            // task into the window and out again.
            self.analyze_now(front, t)
        } else if front.window.push(t) {
            self.analysed(|| self.drain(front, false))
        } else if self.fusion.enabled && self.machine.ranks > 1 {
            self.analysed(|| self.launch_ended(front))
        } else {
            Ok(())
        }
    }

    /// Across ranks the fixed window solves each task as it comes and launches the prefixes a
    /// later task has ended, instead of holding them until the window fills or the program
    /// flushes: a bad launch fails at its `submit`, as on one rank, and no task issued later
    /// could join an ended prefix, so holding it changed no fusion decision. What launches
    /// when is still a function of the stream alone — the solves, the prefixes' ends and the
    /// application's handles (`complete_prefix_may_gain`: a prefix that holding may still
    /// give a temporary stays) — so ranks agree. A fixed window asked for on one rank still
    /// holds everything (its errors come at the flush, as documented); there the adaptive
    /// default launches ended prefixes when a worker would go idle.
    fn launch_ended(&self, front: &mut Front) -> Result<()> {
        let mut first = Ok(());
        loop {
            self.solve_ahead(front, &mut first);
            if front.window.tasks.is_empty() {
                break;
            }
            // The next task needs values a solved task makes: it ends every prefix ahead.
            while !front.window.ready.is_empty() {
                self.launch_prefix_into(front, &mut first);
            }
        }
        let r = self.launch_complete(front, false);
        first.and(r)
    }

    /// Launches everything issued so far: the tracer's held tasks (issued after everything in
    /// the window) go to the window or are replayed, then the window is launched.
    fn flush_locked(&self, front: &mut Front) -> Result<()> {
        let r = match front.tracing.take() {
            Some(mut tr) => {
                let r = self.release_held(front, &mut tr);
                front.window.settle_later(tr.held());
                front.tracing = Some(tr);
                r
            }
            None => Ok(()),
        };
        let d = self.drain_all(front);
        r.and(d)
    }

    /// Launches every task in the window (timed as analysis).
    pub(crate) fn drain_all(&self, front: &mut Front) -> Result<()> {
        self.analysed(|| self.drain(front, true))
    }

    /// Solves and launches one task without passing it through the window.
    fn analyze_now(&self, front: &mut Front, t: Issued) -> Result<()> {
        self.analysed(|| self.launch_now(front, t))
    }

    /// [`Inner::analyze_now`], untimed (its callers time themselves).
    fn launch_now(&self, front: &mut Front, t: Issued) -> Result<()> {
        let ready = self.solve(front, t)?;
        Counters::add(&self.shared.counters.tasks_launched, 1);
        let plan = Plan::single(ready);
        self.agree_launch(&plan)?;
        self.analyse(plan);
        Ok(())
    }

    /// Fusion passes over the window: until it is empty (`all`: a read, fence, future or
    /// drop), or, with fusion on, until it is no longer full (the rest waits for more tasks,
    /// so that the next prefix can grow). Untimed: its callers time themselves.
    fn drain(&self, front: &mut Front, all: bool) -> Result<()> {
        let mut first = Ok(());
        loop {
            self.solve_ahead(front, &mut first);
            if front.window.ready.is_empty() {
                break;
            }
            self.launch_prefix_into(front, &mut first);
            // Without fusion there is no prefix to grow: a full window is analysed whole.
            let one_pass = !all && self.fusion.enabled;
            if front.window.is_empty() || (one_pass && !front.window.is_full()) {
                break;
            }
        }
        first
    }

    /// Solves the window's tasks in issue order until one needs values that a solved, not yet
    /// launched task produces (an unbound store it reads, an image of a store written in the
    /// window) or would block the issuing thread: the fusible prefix ends before it, and it
    /// is solved after the tasks ahead of it are launched. A task that fails to solve is
    /// dropped (its future gets the error), and the first error is kept for the caller.
    /// Untimed: its callers time themselves.
    fn solve_ahead(&self, front: &mut Front, first: &mut Result<()>) {
        while let Some(t) = front.window.tasks.front() {
            if !front.window.ready.is_empty() && needs_values(t, &front.window.ready) {
                break;
            }
            let t = front.window.tasks.pop_front().expect("just seen");
            // Into the box of a task launched before, if the window kept one.
            let spare = front.window.spare_box();
            // A task that fails leaves the window here: its pending references go back.
            let r = self.solve_then(front, t, window::unpend_task, |r| window::rebox(spare, r));
            match r {
                Ok(ready) => front.window.ready.push_back(ready),
                Err(e) => {
                    if first.is_ok() {
                        *first = Err(e);
                    }
                }
            }
        }
    }

    /// Launches the longest fusible prefix of the solved tasks: one fused task, or the first
    /// task alone.
    fn launch_prefix(&self, front: &mut Front) -> Result<()> {
        let counters = &self.shared.counters;
        if let Some(a) = self.adaptive.get() {
            Counters::add(&counters.idle_held_ns, a.idle_held_ns());
        }
        let (n, shape) = self.decide(front);
        let temporaries = shape
            .as_ref()
            .is_some_and(|s| s.args.iter().any(|a| a.local));
        let mut prefix = front.window.take(n, temporaries);
        Counters::add(&counters.tasks_launched, 1);
        let plan = match shape {
            // Taken out of its box, which the window keeps (`Window::give_back`).
            None => Plan::take_single(&mut prefix[0]),
            Some(shape) => {
                Counters::add(&counters.fused_launches, 1);
                Counters::add(&counters.tasks_fused, n as u64);
                Counters::add(&counters.kernel_fused_launches, shape.kernel as u64);
                counters
                    .max_fused_prefix
                    .fetch_max(n as u64, Ordering::Relaxed);
                for a in shape.args.iter().filter(|a| a.local) {
                    let root = &prefix[a.from.0].args[a.from.1].root;
                    Counters::add(&counters.temporaries_eliminated, 1);
                    let bytes = root.bound().map_or(0, |b| b.bytes());
                    Counters::add(&counters.bytes_not_allocated, bytes);
                }
                // Fusion joins only tasks of one sharding key (fusion/constraints.rs).
                let shard = prefix[0].issued.shard.clone();
                let inst = build::instantiate(&shape, &mut prefix);
                Plan {
                    name: shape.name.clone(),
                    body: self.fused_body.clone(),
                    domain: prefix[0].domain,
                    token: inst.token,
                    args: inst.args,
                    scalars: inst.scalars,
                    results: inst.results,
                    fused: Some(shape),
                    shard,
                }
            }
        };
        let r = self.agree_launch(&plan);
        if r.is_ok() {
            self.analyse(plan);
        }
        // The tasks outlive their plan: they give their references back in place.
        prefix.iter().for_each(|t| window::unpend_task(&t.issued));
        front.window.give_back(prefix);
        r
    }

    /// How many solved tasks to fuse, and the fused task's shape (`None`: launch one task as
    /// issued). The window extends its fusible prefix as tasks are solved (each task checked
    /// once); the shape is looked up by the prefix' canonical form when the memo is on, so an
    /// isomorphic prefix reuses the fused task built before (its name, body and argument maps).
    fn decide(&self, front: &mut Front) -> (usize, Option<Arc<FusedShape>>) {
        if !self.fusion.enabled || front.window.ready.len() == 1 {
            return (1, None);
        }
        let n = front.window.fusible_prefix();
        if n == 1 {
            return (1, None);
        }
        let memo = self.fusion.memo.then_some(&mut front.fusion_memo);
        let (shape, hit) = memo::fused_shape(&mut front.window, memo);
        let c = &self.shared.counters;
        match hit {
            Some(true) => Counters::add(&c.fusion_memo_hits, 1),
            Some(false) => Counters::add(&c.fusion_memo_misses, 1),
            None => {}
        }
        (n, Some(shape))
    }

    /// Waits while more than `max_pending` point tasks are outstanding.
    fn throttle(&self) {
        let shared = &self.shared;
        if shared.outstanding.load(Ordering::Acquire) > self.max_pending {
            let low = self.max_pending / 2;
            self.wait_helping(&shared.idle, || {
                shared.outstanding.load(Ordering::Acquire) <= low
            });
        }
    }

    /// Waits until `done()` holds, running ready tasks on this thread meanwhile; sleeps on
    /// `completion` (which must be signalled when `done` may have become true; the pool signals
    /// it when it wakes this thread for a node) only while none are ready. Never call it
    /// holding the front lock: a task body runs here.
    pub(crate) fn wait_helping(&self, completion: &Completion, mut done: impl FnMut() -> bool) {
        let _span = crate::timeline::Span::new(
            crate::timeline::Ev::HelpBegin,
            crate::timeline::Ev::HelpEnd,
        );
        while !self.pool.help(&mut done) {
            self.pool.sleep_helper(completion, &mut done);
        }
        self.pool.leave();
    }

    /// Waits (on the issuing side) for an unbound store's producer to bind it. A producer
    /// that failed binds what its points left, and poisons the store: the waiting task is
    /// then issued like any reader of a poisoned store, and fails at its points. Returning
    /// the poison here instead made the issuing call fail only when the producer had not
    /// ended yet: the same program failed at `submit` or at its points by timing (found by
    /// the held-out panicking streams). Only a store still unbound after its producer ended
    /// is an error here.
    pub(crate) fn wait_bound(&self, root: &StoreRoot, task: &str) -> Result<()> {
        if root.bound().is_some() {
            return Ok(());
        }
        let producer = root.meta().producer.clone();
        let producer = producer.ok_or_else(|| RuntimeError::NeverBound {
            task: task.into(),
            store: root.id,
        })?;
        Counters::add(&self.shared.counters.blocking_waits, 1);
        producer.wait(&self.shared.completion);
        if root.bound().is_some() {
            return Ok(());
        }
        Err(root.poisoned().unwrap_or(RuntimeError::NeverBound {
            task: task.into(),
            store: root.id,
        }))
    }

    /// Solves one task (its launch domain, partitions and sub-stores); on failure its future
    /// gets the error.
    pub(crate) fn solve(&self, front: &mut Front, t: Issued) -> Result<Ready> {
        self.solve_then(front, t, |_| {}, |r| r)
    }

    /// [`Inner::solve`], the task made into `wrap(ready)` where it is built (the window
    /// boxes it: a `Ready` is kilobytes, and boxing a finished one copied it once more;
    /// `memcpy` under `solve_ahead` 4.7 k → 3.8 k instructions per fused CG iteration); on
    /// failure `failed` sees the task before it is dropped.
    #[inline(always)]
    fn solve_then<R>(
        &self,
        front: &mut Front,
        t: Issued,
        failed: impl FnOnce(&Issued),
        wrap: impl FnOnce(Ready) -> R,
    ) -> Result<R> {
        Counters::add(&self.shared.counters.tasks_solved, 1);
        let r = self.solve_inner(front, &t);
        match r {
            Ok((domain, token, args, parts)) => Ok(wrap(Ready {
                issued: t,
                domain,
                token,
                args,
                parts,
            })),
            Err(e) => {
                if let Some((_, cell)) = &t.result {
                    let _ = cell.value.set(Err(e.clone()));
                }
                failed(&t);
                Err(e)
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn solve_inner(
        &self,
        front: &mut Front,
        t: &Issued,
    ) -> Result<(Domain, u64, Args<LaunchArg>, crate::solver::Parts)> {
        for a in t
            .args
            .iter()
            .filter(|a| a.privilege != Privilege::WriteUnbound)
        {
            self.wait_bound(&a.root, &t.name)?;
        }
        // Eight inline: SpMV has five arguments.
        let sargs: SmallVec<[SolverArg; 8]> = t
            .args
            .iter()
            .map(|a| SolverArg {
                root: &a.root,
                rect: (a.privilege != Privilege::WriteUnbound).then(|| {
                    a.view
                        .rect()
                        .unwrap_or_else(|| a.root.bound().expect("waited").rect)
                }),
                writes: a.privilege.writes(),
            })
            .collect();
        let inputs = SolveInputs {
            task: &t.name,
            args: &sargs,
            constraints: &t.constraints,
            fixed: t.domain,
        };
        let mut probe = Probe::new(&inputs);
        let counters = &self.shared.counters;
        match front.memo.get(&mut probe, &inputs) {
            Some(Solved { solution, rects }) => {
                Counters::add(&counters.partitions_reused, solution.reused);
                Counters::add(&counters.solutions_replayed, 1);
                if solution.moved_keys {
                    record_keys(&front.interner, &sargs, &solution.parts);
                }
                let token = t.token(&solution.domain, &solution.parts);
                let args = launch_args(t, &sargs, rects);
                self.agree(&t.name, token, &args)?;
                Ok((solution.domain, token, args, solution.parts.clone()))
            }
            None => {
                check_shapes(&t.name, &sargs, &t.constraints)?;
                let mut solver = Solver {
                    task: &t.name,
                    machine: &self.machine,
                    interner: &mut front.interner,
                    counters,
                    completion: &self.shared.completion,
                    channel: self.shared.channel.get().map(|c| &**c),
                };
                let solution = solver.solve(&sargs, &t.constraints, t.domain)?;
                let rects = sub_stores(&front.interner, &solution);
                let args = launch_args(t, &sargs, &rects);
                check_aliasing(&t.name, &args, &solution, &front.interner)?;
                let token = t.token(&solution.domain, &solution.parts);
                self.agree(&t.name, token, &args)?;
                let (domain, parts) = (solution.domain, solution.parts.clone());
                front
                    .memo
                    .insert(probe, &inputs, Solved { solution, rects });
                Ok((domain, token, args, parts))
            }
        }
    }

    /// Across ranks with the agreement check on: every rank must have solved this task alike
    /// (token: domain, partitions, stores, views; and every point's sub-stores).
    fn agree(&self, task: &str, token: u64, args: &[LaunchArg]) -> Result<()> {
        let Some(ch) = self.shared.channel.get().filter(|c| c.agreement) else {
            return Ok(());
        };
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        token.hash(&mut h);
        for a in args {
            for r in a.rects.iter() {
                r.lo().hash(&mut h);
                r.hi().hash(&mut h);
            }
        }
        let seq = ch.solved.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        crate::replicate::agree(ch, task, seq, h.finish())
    }

    /// Across ranks with the agreement check on: every rank must launch the same task next
    /// (fused or not: window and fusion decisions too), or their transfers would never meet.
    /// A task that fails the check is not launched, on any rank; its futures get the error.
    fn agree_launch(&self, plan: &Plan) -> Result<()> {
        let Some(ch) = self.shared.channel.get().filter(|c| c.agreement) else {
            return Ok(());
        };
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        (&*plan.name, plan.token, plan.domain.len(), &plan.shard).hash(&mut h);
        for a in &plan.args {
            (a.root.id, a.privilege, a.local).hash(&mut h);
            for r in a.rects.iter() {
                r.lo().hash(&mut h);
                r.hi().hash(&mut h);
            }
        }
        let seq = ch.seq.load(std::sync::atomic::Ordering::Relaxed);
        let r = crate::replicate::agree(ch, &plan.name, seq, h.finish());
        if let Err(e) = &r {
            for (_, cell) in &plan.results {
                let _ = cell.value.set(Err(e.clone()));
            }
        }
        r
    }

    /// Launches a solved (possibly fused) task into the dependence analysis.
    pub(crate) fn analyse(&self, plan: Plan) {
        crate::tracing::replay::bump_versions(&plan);
        Counters::add(&self.shared.counters.tasks_analysed, 1);
        self.schedule(plan);
    }

    /// Builds the point (and finish) nodes, adds their dependences, and hands ready ones to the
    /// executor.
    pub(crate) fn schedule(&self, t: Plan) {
        if let Some(ch) = self.shared.channel.get() {
            return self.schedule_replicated(ch, t);
        }
        let b = self.build_nodes(t);
        let task = &b.task;
        let n = b.points.len();
        for s in &task.scalars {
            if let ScalarArg::Future(cell) = s {
                if let Some(pred) = cell.node.get() {
                    b.points.iter().for_each(|p| Node::add_edge(pred, p));
                }
            }
        }
        // Joining: long reader groups may get stand-ins, started below with the task's nodes.
        let mut preds: SmallVec<[Preds; 4]> = (0..n).map(|_| Preds::joining()).collect();
        let mut finish_preds = Preds::joining();
        // A temporary's points work on scratch: no one else can see the store. (Versions were
        // bumped when the task was launched: `note_writes`.)
        for a in task.args.iter().filter(|a| !a.local) {
            let mut meta = a.root.meta();
            let per_point = b.points.iter().zip(a.rects.iter()).zip(&mut preds);
            match a.privilege {
                Privilege::Read => {
                    per_point.for_each(|((p, r), pr)| meta.access.read(*r, p, pr));
                }
                Privilege::Write | Privilege::ReadWrite => {
                    per_point.for_each(|((p, r), pr)| meta.access.write(*r, p, pr));
                }
                Privilege::Reduce(_) | Privilege::WriteUnbound => {
                    b.finish_access(a, &mut meta, &mut finish_preds)
                }
            }
        }
        self.start(b.link_finish());
        for p in preds.iter_mut().chain([&mut finish_preds]) {
            let joins = p.take_joins();
            if !joins.is_empty() {
                self.start(joins.into_iter());
            }
        }
    }

    /// The next launched task's stream position on one rank (`Launched::position`).
    pub(crate) fn next_position(&self) -> u64 {
        self.next_position.fetch_add(1, Ordering::Relaxed)
    }

    /// A plan's launched task, `points` of whose points run here; each store it uses holds a
    /// pending reference from now on.
    pub(crate) fn launched(
        &self,
        t: Plan,
        points: usize,
        dist: Option<crate::replicate::finish::Dist>,
    ) -> Arc<Launched> {
        let domain = t.domain;
        let n = domain.len();
        let has_finish =
            Launched::needs_finish(t.args.iter().map(|a| a.privilege), !t.results.is_empty());
        let roots = Launched::hold_roots(t.args.iter().map(|a| &a.root));
        let position = match &dist {
            Some(d) => d.seq,
            None => self.next_position(),
        };
        let mut task = Launched {
            position,
            name: t.name,
            body: t.body,
            domain,
            token: t.token,
            read_groups: crate::execute::context::ReadGroups::of(&t.args),
            args: t.args,
            scalars: t.scalars,
            results: t.results,
            fused: t.fused,
            roots,
            remaining: AtomicUsize::new(points),
            // Only a finish step reads what points leave behind.
            outs: Launched::outs(n, has_finish),
            failure: Mutex::new(None),
            sub_failures: Mutex::default(),
            since: Default::default(),
            has_finish,
            dist,
        };
        task.note_rewrites();
        Arc::new(task)
    }

    /// A plan's task and its point (and finish) nodes, not yet connected to anything; each
    /// store it uses holds a pending reference from now on.
    pub(crate) fn build_nodes(&self, t: Plan) -> Built {
        let n = t.domain.len();
        // A range, not a collected list of every point: no allocation per launch.
        self.build_nodes_at(t, 0..n, None)
    }

    /// [`Inner::build_nodes`] for the points `mine` only (across ranks: this rank's shard).
    /// Across ranks a rank other than 0 gets, as its finish step, the receive of rank 0's
    /// outcome.
    pub(crate) fn build_nodes_at(
        &self,
        t: Plan,
        mine: impl ExactSizeIterator<Item = usize>,
        dist: Option<crate::replicate::finish::Dist>,
    ) -> Built {
        let task = self.launched(t, mine.len(), dist);
        task.mark_used();
        let points: NodeList = mine
            .map(|p| {
                Node::new(Work::Point {
                    task: task.clone(),
                    point: p,
                })
            })
            .collect();
        let finish = task.has_finish.then(|| match &task.dist {
            Some(d)
                if d.channel.rank != 0 && !crate::replicate::finish::folds_everywhere(&task) =>
            {
                Node::new(Work::Recv(crate::replicate::channel::Recv {
                    from: 0,
                    key: crate::replicate::channel::key(
                        d.seq,
                        crate::replicate::channel::KIND_FINISH,
                        0,
                        0,
                        0,
                    ),
                    deliver: crate::replicate::channel::Deliver::Finish { task: task.clone() },
                }))
            }
            _ => Node::new(Work::Finish { task: task.clone() }),
        });
        Built {
            task,
            points,
            finish,
        }
    }

    /// Counts `nodes` as outstanding and hands the ready ones to the executor (each node's
    /// issue guard is dropped: its in-edges must all be in place).
    pub(crate) fn start(&self, nodes: impl ExactSizeIterator<Item = Arc<Node>>) {
        self.shared
            .outstanding
            .fetch_add(nodes.len(), Ordering::AcqRel);
        for node in nodes {
            if node.release() {
                self.pool.spawn(node);
            }
        }
    }

    /// [`Inner::start`] for nodes the caller keeps (a replay's vertices, and its entry vertex
    /// if any): only the ready ones are cloned, for the executor.
    pub(crate) fn start_kept(&self, nodes: &[Arc<Node>], entry: Option<&Arc<Node>>) {
        let all = nodes.iter().chain(entry);
        self.shared
            .outstanding
            .fetch_add(nodes.len() + entry.is_some() as usize, Ordering::AcqRel);
        for node in all {
            if node.release() {
                self.pool.spawn(node.clone());
            }
        }
    }
}

/// A launched task's nodes (see `Inner::build_nodes`).
pub(crate) struct Built {
    pub task: Arc<Launched>,
    pub points: NodeList,
    pub finish: Option<Arc<Node>>,
}

impl Built {
    /// Records the finish step's access of argument `a`: it writes each distinct sub-store
    /// of a reduction (folding), and all of an unbound store, whose extent later tasks wait
    /// for (it is the store's producer).
    pub(crate) fn finish_access(
        &self,
        a: &LaunchArg,
        meta: &mut crate::store::RootMeta,
        preds: &mut Preds,
    ) {
        let f = self
            .finish
            .as_ref()
            .expect("reductions and unbound outputs have a finish step");
        if a.privilege == Privilege::WriteUnbound {
            meta.access.write(Rect::new(&[0], &[usize::MAX]), f, preds);
            meta.producer = Some(f.clone());
        } else {
            for r in distinct(&a.rects) {
                meta.access.write(r, f, preds);
            }
        }
    }

    /// Orders the finish step after the points, makes it the producer of the task's futures,
    /// and returns every node, points first.
    pub(crate) fn link_finish(self) -> impl ExactSizeIterator<Item = Arc<Node>> {
        if let Some(f) = &self.finish {
            self.points.iter().for_each(|p| Node::add_edge(p, f));
            for (_, cell) in &self.task.results {
                let _ = cell.node.set(f.clone());
            }
        }
        let mut all = self.points;
        all.extend(self.finish);
        all.into_iter()
    }
}

/// `from_share`'s ranges: one list per rank, disjoint, together exactly `0..len`.
fn check_shares(len: usize, shares: &[Vec<Range<usize>>], ranks: usize) -> Result<()> {
    let bad = |why: String| Err(RuntimeError::BadShares { len, why });
    if shares.len() != ranks {
        return bad(format!(
            "{} lists of ranges for {ranks} ranks",
            shares.len()
        ));
    }
    let mut all: Vec<&Range<usize>> = shares.iter().flatten().filter(|r| !r.is_empty()).collect();
    all.sort_by_key(|r| r.start);
    let mut next = 0;
    for r in all {
        if r.start != next || r.end > len {
            return bad(format!("{r:?} after {next} cells covered"));
        }
        next = r.end;
    }
    if next != len {
        return bad(format!("the ranges end at {next}"));
    }
    Ok(())
}

/// A sharding key names each dimension of a fixed launch domain at most once.
fn check_shard(task: &str, dims: &[usize], domain: Option<&Domain>) -> Result<()> {
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

/// The distinct rectangles of `rects`, in first-appearance order (a reduction's finish step
/// writes each sub-store once, however many points share it).
pub(crate) fn distinct(rects: &[Rect]) -> SmallVec<[Rect; 4]> {
    let mut seen: SmallVec<[Rect; 4]> = SmallVec::new();
    for r in rects {
        if !seen.contains(r) {
            seen.push(*r);
        }
    }
    seen
}

/// A task ready for the dependence analysis: one solved task, or a fused one.
pub(crate) struct Plan {
    pub name: Arc<str>,
    pub body: TaskBody,
    pub domain: Domain,
    pub token: u64,
    pub args: Args<LaunchArg>,
    pub scalars: Scalars,
    pub results: Args<(ReduceOp, Arc<crate::future::FutureCell>)>,
    pub fused: Option<Arc<FusedShape>>,
    /// The sharding key across ranks (`TaskLauncher::shard_by`).
    pub shard: Option<Args<usize>>,
}

impl Plan {
    /// [`Plan::single`] of a task left in place (its box reused): its arguments, scalars,
    /// result and sharding key are taken, its name and body shared; its issued arguments stay
    /// for [`window::unpend_task`].
    pub(crate) fn take_single(t: &mut Ready) -> Plan {
        Plan {
            name: t.issued.name.clone(),
            body: t.issued.body.clone(),
            domain: t.domain,
            token: t.token,
            args: std::mem::take(&mut t.args),
            scalars: std::mem::take(&mut t.issued.scalars),
            results: t.issued.result.take().into_iter().collect(),
            fused: None,
            shard: t.issued.shard.take(),
        }
    }

    pub(crate) fn single(mut t: Ready) -> Plan {
        Plan {
            name: t.issued.name,
            body: t.issued.body,
            domain: t.domain,
            token: t.token,
            args: t.args,
            scalars: std::mem::take(&mut t.issued.scalars),
            results: t.issued.result.take().into_iter().collect(),
            fused: None,
            shard: t.issued.shard.take(),
        }
    }
}

/// Whether solving `t` now needs values a solved, not yet launched task produces, or would
/// make the issuing thread wait: an input that is still unbound, or an image whose source a
/// solved task writes.
fn needs_values(t: &Issued, ready: &VecDeque<Box<Ready>>) -> bool {
    // Decided by the stream alone (not by whether a producer has run yet), so that every
    // rank cuts the window at the same task.
    let written_by = |root: &Arc<StoreRoot>, unbound: bool| {
        ready.iter().any(|r| {
            r.args.iter().any(|a| {
                a.privilege.writes()
                    && (!unbound || a.privilege == Privilege::WriteUnbound)
                    && Arc::ptr_eq(&a.root, root)
            })
        })
    };
    let written_here = |root: &Arc<StoreRoot>| written_by(root, false);
    // A store some solved task writes unbound is unbound now (that task has not run), so a
    // bound input needs no scan of the window: the answer is the same, found in O(1) for the
    // common case (the scan is O(window) per task).
    let unbound_input = t.args.iter().any(|a| {
        a.privilege != Privilege::WriteUnbound
            && a.root.bound().is_none()
            && written_by(&a.root, true)
    });
    let image_of_written = t.constraints.iter().any(|c| match c {
        Constraint::Image { src, .. } => written_here(&t.args[*src].root),
        _ => false,
    });
    unbound_input || image_of_written
}

/// Each argument's per-point sub-stores (empty for unbound outputs).
fn sub_stores(interner: &Interner, sol: &Solution) -> Args<Arc<[Rect]>> {
    sol.parts
        .iter()
        .map(|p| match p {
            Some(p) => {
                let part = interner.get(*p);
                (0..sol.domain.len())
                    .map(|i| part.substore(&sol.domain, i))
                    .collect()
            }
            None => Arc::from([]),
        })
        .collect()
}

/// The task's arguments with their views and per-point sub-stores.
fn launch_args(t: &Issued, sargs: &[SolverArg], rects: &[Arc<[Rect]>]) -> Args<LaunchArg> {
    t.args
        .iter()
        .zip(sargs)
        .zip(rects)
        .map(|((a, s), r)| LaunchArg {
            root: a.root.clone(),
            view: s.rect.unwrap_or_else(|| Rect::from_shape(&[0])),
            privilege: a.privilege,
            overwrite: a.overwrite,
            rects: r.clone(),
            local: false,
        })
        .collect()
}

/// `align` needs equal shapes; checked once shapes are known (unbound stores bind late).
fn check_shapes(task: &str, args: &[SolverArg], cons: &[Constraint]) -> Result<()> {
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
fn check_aliasing(
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
            if Arc::ptr_eq(&a.root, &b.root)
                && (a.privilege.writes() || b.privilege.writes())
                && overlap(&a.rects, &b.rects, false)
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

/// The built-in body of [`Runtime::fill`].
fn fill_body(ctx: &mut TaskContext<'_>) {
    fn go<T: Element>(ctx: &TaskContext<'_>) {
        let v = T::from_scalar(ctx.scalar(0)).expect("fill value checked at submit");
        ctx.write::<T>(0).fill(v);
    }
    match ctx.dtype(0) {
        DType::F64 => go::<f64>(ctx),
        DType::F32 => go::<f32>(ctx),
        DType::I64 => go::<i64>(ctx),
        DType::I32 => go::<i32>(ctx),
        DType::U64 => go::<u64>(ctx),
        DType::U32 => go::<u32>(ctx),
        DType::Range => panic!("ranges cannot be filled"),
    }
}

#[cfg(test)]
#[path = "runtime_tests.rs"]
mod tests;
