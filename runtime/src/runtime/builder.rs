//! The runtime's builder: its settings, their defaults and environment switches, and
//! `try_build`, which wires the layers (pool, window, tracer, transport) into a [`Runtime`].

use super::{fill_body, Front, Inner, Runtime};
use crate::error::{Result, RuntimeError};
use crate::execute::executor::ThreadPool;
use crate::execute::Shared;
use crate::fusion::memo::FusionMemo;
use crate::fusion::FusionConfig;
use crate::machine::Machine;
use crate::partition::Interner;
use crate::replicate::channel::Channel;
use crate::solve_memo::SolveMemo;
use crate::store::Memory;
use crate::tracing::replay::Tracing;
use crate::transport::Communicator;
use crate::window::{Adaptive, Window, WindowPolicy};
use crate::{window, TaskContext};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Each runtime's id (`StoreRoot::runtime`: a store passed to another runtime is refused).
static NEXT_RUNTIME: AtomicU64 = AtomicU64::new(1);

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
    ///
    /// Across ranks (with a [`communicator`](Self::communicator) of more than one rank)
    /// tracing is not done yet, whatever this says: a replay builds the nodes of every point,
    /// and making it build only this rank's points and their transfers is not done. Every
    /// task is analysed as untraced, with the same results; `Stats::tasks_traced` stays 0.
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
            let _ = rt.inner.shared.on_node_ran.set(a.clone());
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
        let value = crate::fusion::scalar::VALUE_TASK;
        rt.register(value, crate::fusion::scalar::value_body)
            .expect("fresh registry");
        Ok(rt)
    }
}
