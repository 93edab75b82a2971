//! Automatic tracing in the runtime's issue path, ahead of the solver: every issued task
//! passes through the [`Tracer`]; tasks a candidate may still match are held back, a release
//! sends them on to the window (solving, fusion, dependence analysis) in order, and a replay
//! instantiates the trace's recorded logical graph (`record.rs`) with the recorded solves'
//! answers (`ahead.rs`): no solver, no memo probe, no fusion and no per-argument analysis.
//!
//! Held tasks are invisible to everything behind the tracer, so whatever needs their effects
//! first hands them back (`Inner::flush_locked`): a read, a fence, a future's `get`, a drop, a
//! task producing an unbound store (never held), and a task whose image source a held task
//! writes (the image is computed from values). A trace therefore never spans either of the
//! last two. Tasks already in the window are older than every held task: a replay launches the
//! window first. Every decision follows from the issued stream alone (`Decision`): a replay
//! waits for the stores it names to be bound rather than asking whether they are.

use super::ahead::{launch_fused, numbering, Conditions, IssuedTrace, SolvedTask};
use super::fuse;
use super::record::{traceable, Cross, FinalAccess, Producer, Recording, PRE};
use super::{Action, TraceId, Tracer, TracerConfig};
use crate::analysis::Preds;
use crate::constraint::Constraint;
use crate::dtype::ReduceOp;
use crate::dtype::Scalar;
use crate::error::Result;
use crate::execute::actors::{Compiled, Run};
use crate::execute::graph::{Node, Work};
use crate::execute::launch::{LaunchArg, Launched};
use crate::fusion::temporaries::outside_dead_among;
use crate::fusion::FusedShape;
use crate::future::FutureCell;
use crate::issue::task::{Issued, IssuedArg, LaunchSpec, Registered, ScalarArg};
use crate::runtime::{Front, Inner, Plan};
use crate::stats::Counters;
use crate::store::StoreRoot;
use rustc_hash::FxHashMap as HashMap;
use std::hash::{Hash, Hasher};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

/// A store first used fewer than this many issued tasks ago is named in tokens by that
/// distance, an older one by its id (`Tracing::store_name`). Longer than a trace and the tasks
/// held around it, so that a loop's fresh stores are young wherever the loop uses them.
const YOUNG: u64 = 2 * MAX_TRACE as u64;

/// Longest trace the runtime records: tasks are held back while a candidate matches, so a
/// long trace delays its first tasks (and the buffer holds up to three times this).
pub(crate) const MAX_TRACE: usize = 16;

/// Longest trace that is a whole flush interval repeated (`intervals.rs`, branch `tbs21`): the
/// untraced window's longest fused launch, so that a loop body the window fuses in one launch
/// is not cut into pieces by tracing. Held tasks wait for the interval's end, a flush the
/// program issues anyway. Within [`YOUNG`], so a fresh store is named alike wherever such a
/// trace uses it.
const LONG_TRACE: usize = crate::runtime::DEFAULT_WINDOW;
const _: () = assert!(LONG_TRACE as u64 <= YOUNG);

/// The issuing side's tracing state.
pub(crate) struct Tracing {
    tracer: Tracer,
    /// Tasks the tracer holds back, in issue order (one per buffered token). A `Vec`, not a
    /// deque: a replay compares its tasks in place, and a deque that has wrapped would have
    /// to be rotated first (tasks are large); what a replay or release takes from the front
    /// is usually all of it.
    held: Vec<Issued>,
    recordings: HashMap<TraceId, Recording>,
    /// Tasks issued through the tracer so far (a future's producer is numbered by it).
    seq: u64,
    /// Tokens are masked with it (tests force collisions with 0).
    pub(crate) token_mask: u64,
    /// Per store seen: the issued task (`seq`) that first used it; dead stores are pruned
    /// when it has doubled since the last pruning (`prune_at`).
    /// Also kept: whether that first use only read it ([`Tracing::store_name`]).
    first_use: HashMap<u64, (FirstUse, std::sync::Weak<StoreRoot>)>,
    prune_at: usize,
    /// The last stores looked up in `first_use`, (id, first use), most recent first: a loop
    /// names the same few stores in every task, and a map probe per argument was a sixth of
    /// the token's cost. Ids are never reused, so an entry never goes stale.
    recent: [(u64, FirstUse); 4],
    /// `seq` at the last flush (read, fence, future wait) of the tracer.
    flushed_at: u64,
    /// Workers to compile replayed traces into actors for (`None`: actors off).
    actors: Option<usize>,
    /// Whether an actor replay of a verified trace runs its points without ledger borrows
    /// (`RuntimeBuilder::verified_replays`).
    pub verified: bool,
    /// The replay last instantiated as actors, while nothing has been analysed since.
    last: Option<LastReplay>,
    /// The last replays instantiated as actors, oldest first, kept so that the issuing thread
    /// ends them ([`Tracing::end_runs`]) rather than the worker that runs a run's last vertex:
    /// ending a run empties its tasks for the next replays (store reference counts the
    /// issuer's launches touch), ~2 µs per stencil run that the next step's points waited
    /// for on a worker (branch `metg11`). Let go at every flush ([`Inner::release_held`]),
    /// so ended tasks hold their stores no longer than until the next replay or flush.
    in_flight: std::collections::VecDeque<Arc<Run>>,
    /// Every decision so far, hashed in order (`Stats::trace_digest`).
    digest: u64,
    /// The trace replayed last, while the incoming tasks repeat it ([`Streak`]).
    streak: Option<Streak>,
    /// Set by a replay that went ahead (not abandoned): what a streak may follow.
    just_replayed: Option<TraceId>,
    /// Fuse inside traces (`fuse.rs`; the runtime's fusion switch).
    pub(crate) fuse: bool,
    /// A complete trace waiting for the next issue or flush to be replayed ([`Pending`]).
    pending: Option<Pending>,
    /// Held tasks of streaks compared so far, for sampling their timing
    /// ([`Tracing::streak_clock`]).
    clock_skip: u64,
}

/// A store's first use in the issued stream: the task (`seq`), and whether it only read the
/// store (its contents came from the application: `from_vec`, a fill).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct FirstUse {
    seq: u64,
    read: bool,
}

/// One in this many held tasks of a streak is timed ([`Tracing::streak_clock`]).
const CLOCK_SAMPLE: u64 = 16;

/// Replays in a row abandoned for their temporary flags alone after which a trace is recorded
/// anew ([`Tracing::flags_went_stale`]).
const RERECORD_AFTER: u8 = 2;

/// A trace complete and to be replayed, deferred (with fusion inside traces) to the next
/// issue or flush: a store the trace makes and the application drops at the end of the scope
/// that issued the trace is dropped *after* the trace's last task is issued, so a replay at
/// that task would never find a temporary. The next issue or flush comes after the drops (in
/// program order: a function of the program alone, like every decision here).
struct Pending {
    trace: TraceId,
    n: usize,
    verified: Option<Vec<Arc<StoreRoot>>>,
}

/// A replay streak: right after a replay of `trace` that left nothing held, the next tasks are
/// compared with its recording as they come (`IssuedTrace::matches_at`), field for field —
/// the verification a replay does anyway — instead of being hashed into tokens and fed to the
/// matcher; when all of them match, the trace is replayed again. At the first difference, or a
/// flush, the streak ends: its held tasks go through the tracer as if just issued (tokens,
/// history, finder, matcher), so nothing is lost and nothing is speculated. Whether a streak
/// goes on is a function of the issued stream alone (§5.4.1), like every decision here.
/// Why: the token and the matcher were ~1.3 k instructions per stencil task (callgrind), and
/// an iterative program in its steady state replays one trace after another.
struct Streak {
    trace: TraceId,
    /// The distinct stores of the tasks held so far, by first appearance (`ahead::numbering`).
    distinct: Vec<Arc<StoreRoot>>,
    /// Tasks in the trace (kept here: [`Tracing::streak_clock`] asks it of every task, and a
    /// map lookup there cost about what sampling the clock saves).
    len: usize,
}

/// One decision of the tracer, as [`Tracing::decide`] folds it into `Stats::trace_digest`.
/// Every one must follow from the issued task stream alone (thesis §5.4.1): never from
/// whether a worker has run something yet.
#[derive(Hash, Debug)]
enum Decision {
    /// An issued task held back (a candidate may still match).
    Held,
    /// An issued task not held: it produces an unbound store.
    Untraceable,
    /// Held tasks handed back before a task whose image source one of them writes.
    ReleasedForImage,
    /// Held tasks handed to ordinary analysis.
    Released(usize),
    /// A trace's first occurrence solved and recorded.
    Recorded(TraceId, usize),
    /// A recorded trace replayed: as actors linked to the replay before, or not.
    Replayed(TraceId, usize, bool),
    /// A recorded trace not replayed: the tasks or conditions differ (analysed as usual).
    Abandoned(TraceId, usize),
    /// A store the trace reads has a failed producer: analysed as usual (the error is its).
    Failed(TraceId, usize),
}

/// What a replay linked to the one before it needs of that one.
///
/// Linking uses recorded edges computed as if the stores' access state were exactly one
/// writer of each whole store ([`PRE`]) followed by the previous trace's final accesses.
/// That holds, for the stores the previous trace uses, after a replay behind an entry vertex
/// (`exact`); a trace using another store is not linked (`Cross::closed`). After a linked replay the state
/// also holds accesses of earlier replays that the last ones did not supersede
/// (`AccessState::set`); a next replay of the *same* trace over the *same* stores in the same
/// roles is still ordered after them (each of its accesses has a counterpart in the last
/// replay, which was ordered after them), another is not, so it takes an entry vertex.
struct LastReplay {
    trace: TraceId,
    exact: bool,
    /// Its tasks and nodes.
    run: Arc<Run>,
    /// The vertex standing for everything before the first of the linked replays.
    pre: Arc<Node>,
    /// The replay's stores, numbered by first appearance (`ahead::numbering`).
    roots: Vec<Arc<StoreRoot>>,
}

/// Replays the issuing thread keeps in flight to end them itself ([`Tracing::end_runs`]):
/// more than the back-pressure lets the issuer run ahead (the stencil: 256 nodes, ~9 runs of
/// 28), so that the oldest has usually ended when it is looked at.
const IN_FLIGHT: usize = 16;

/// Fences in a row a recording may go unused before it is let go
/// ([`Tracing::let_go_of_unused_recordings`]): a program alternating up to this many traced
/// phases between fences replays each from its recording. What stays is bounded by the
/// traces recorded within the last `KEEP_IDLE` fence intervals.
pub(crate) const KEEP_IDLE: u8 = 8;

impl Tracing {
    pub(crate) fn new(sample_unit: usize, actors: Option<usize>) -> Tracing {
        Tracing {
            tracer: Tracer::new(TracerConfig {
                sample_unit,
                max_len: MAX_TRACE,
                long_len: LONG_TRACE,
                one_pointer: true,
                skip_replayed: true,
                ..TracerConfig::default()
            }),
            held: Vec::new(),
            recordings: HashMap::default(),
            seq: 0,
            token_mask: u64::MAX,
            first_use: HashMap::default(),
            prune_at: 64,
            recent: [(
                u64::MAX,
                FirstUse {
                    seq: 0,
                    read: false,
                },
            ); 4],
            flushed_at: 0,
            actors,
            last: None,
            in_flight: Default::default(),
            digest: 0,
            streak: None,
            just_replayed: None,
            fuse: false,
            verified: false,
            pending: None,
            clock_skip: 0,
        }
    }

    /// Keeps `run` (just instantiated) among the runs in flight, and ends those in flight
    /// that every vertex has run: the oldest first, while nothing but this list holds them
    /// (a node's work holds its run until the node has run). Past [`IN_FLIGHT`] runs the
    /// oldest is let go, ended or not (a worker then ends it, as without this list).
    fn end_runs(&mut self, run: Option<&Arc<Run>>) {
        if let Some(run) = run {
            self.in_flight.push_back(run.clone());
        }
        while let Some(oldest) = self.in_flight.front() {
            if Arc::strong_count(oldest) > 1 && self.in_flight.len() <= IN_FLIGHT {
                break;
            }
            // Ended here when this was the last reference (`Run`'s `Drop`).
            self.in_flight.pop_front();
        }
    }

    /// After a fence (every task has run): lets go of the last replay, kept so that the next
    /// replay could be linked to it ([`LastReplay`]), and of the runs in flight. They hold
    /// their tasks, and so the stores those name: a traced loop's last replay kept the
    /// stores the application dropped after the loop alive for as long as nothing else was
    /// issued. After a fence a link orders nothing an entry vertex does not.
    /// Also the recordings idle for [`KEEP_IDLE`] fences
    /// ([`Tracing::let_go_of_unused_recordings`]), and the spare nodes and tasks
    /// (`actors::Compiled`) of the compiled traces not replayed since the last fence: a cache
    /// for the next replays, which every recording kept for good, ~24 KiB a finished trace of
    /// 4-point tasks (a program running 1000 traced loops over stores of their own kept
    /// 27.7 MiB more resident with actors, 3.5 MiB without the spares). A replay after an idle
    /// interval allocates them anew. The spares are emptied tasks: they hold no store.
    pub(crate) fn let_go_of_replays(&mut self) {
        self.last = None;
        self.in_flight.clear();
        self.let_go_of_unused_recordings();
        let idle = self.recordings.values().filter(|r| r.idle > 0);
        for c in idle.filter_map(|r| r.actors.as_ref()) {
            c.let_go_of_spares();
        }
    }

    /// Lets go of the recordings neither made nor replayed before any of the last
    /// [`KEEP_IDLE`] fences, but those a streak or a pending replay names, with what other
    /// recordings worked out for following them (`Recording::cross`). A long-running program
    /// whose traced loops each run over stores of their own (named by id once old: a new trace
    /// per loop) kept every recording for good; letting go at the first idle fence instead
    /// made a program whose phases alternate between fences (a time step, a fence, an output
    /// step, a fence) record every phase anew each time. Decided by the stream alone (fences,
    /// replays); a trace let go is recorded again at its next occurrence, as the first time.
    fn let_go_of_unused_recordings(&mut self) {
        let named = [
            self.streak.as_ref().map(|s| s.trace),
            self.pending.as_ref().map(|p| p.trace),
            self.just_replayed,
        ];
        let before = self.recordings.len();
        self.recordings.retain(|id, r| {
            r.idle = if std::mem::take(&mut r.used) || named.contains(&Some(*id)) {
                0
            } else {
                r.idle + 1
            };
            r.idle < KEEP_IDLE
        });
        if self.recordings.len() < before {
            self.forget_crosses();
        }
    }

    /// Drops what recordings worked out for following a trace no longer recorded
    /// (`Recording::cross`): a recording made anew of that trace may launch differently.
    fn forget_crosses(&mut self) {
        let kept: rustc_hash::FxHashSet<TraceId> = self.recordings.keys().copied().collect();
        for r in self.recordings.values_mut() {
            r.cross.retain(|(trace, _), _| kept.contains(trace));
        }
    }

    /// How many traces are recorded.
    #[cfg(test)]
    pub(crate) fn recorded(&self) -> usize {
        self.recordings.len()
    }

    /// Forgets store `id`'s first use (its weak reference kept `Runtime::take` from moving
    /// the buffer out). Only for a store no task can name again: its first use would only be
    /// pruned later, and `recent` may keep it (ids are never reused).
    pub(crate) fn forget_store(&mut self, id: u64) {
        self.first_use.remove(&id);
    }

    /// What issuing `t` changes in the naming of later tokens, without its token: the count
    /// of issued tasks, its stores' first uses and its future's producer number (a task held
    /// in a streak; [`Tracing::token`] does the same and hashes).
    fn note_issued(&mut self, t: &Issued) {
        self.seq += 1;
        let mut last: Option<&Arc<StoreRoot>> = None;
        for a in &t.args {
            // The same store again (several views of one store): its first use is noted.
            if !last.is_some_and(|l| Arc::ptr_eq(l, &a.root)) {
                self.store_name(&a.root, || reads_only(&t.args, &a.root));
            }
            last = Some(&a.root);
        }
        if let Some((_, cell)) = &t.result {
            let _ = cell.launched_as.set(self.seq);
        }
    }

    /// Whether a replay streak is on: the next issued task is compared with the trace's.
    /// Whether a complete `trace` waits for the next issue or flush ([`Pending`]): with
    /// fusion on, when it is not recorded yet or may make temporaries (a function of the
    /// recording: a trace without such stores, the stencil's, is replayed at once).
    fn defers(&self, trace: TraceId) -> bool {
        self.fuse
            && self
                .recordings
                .get(&trace)
                .is_none_or(|r| r.cuts.iter().any(|c| !c.temps.is_empty()))
    }

    /// Whether to time this launcher's compare in a streak (`Inner::streak_spec`), and by how
    /// much to scale what it measures into `Stats::tracing_ns`. Two clock reads per stencil task
    /// were ~0.12 k instructions (callgrind) and 2.3 % of wall samples (`perf record`); so a
    /// task that only compares and is held is timed one in [`CLOCK_SAMPLE`] (by a count of
    /// such tasks) and counts that many times, and a task that may complete the trace (and
    /// replay it: the expensive, rarer case) is always timed. The statistic stays the time in
    /// the tracing path, an estimate for the held tasks of a streak. Timing decides nothing:
    /// the count need not agree across ranks.
    fn streak_clock(&mut self, s: &Streak) -> Option<(Instant, u64)> {
        let last = self.held.len() + 1 >= s.len;
        if last {
            return Some((Instant::now(), 1));
        }
        self.clock_skip = self.clock_skip.wrapping_add(1);
        self.clock_skip
            .is_multiple_of(CLOCK_SAMPLE)
            .then(|| (Instant::now(), CLOCK_SAMPLE))
    }

    pub(crate) fn in_streak(&self) -> bool {
        self.streak.is_some()
    }

    /// Whether solving a task with `constraints` over `args` needs a held task's effects: an
    /// image whose source a held task writes.
    fn must_release_for_parts(&self, constraints: &[Constraint], args: &[IssuedArg]) -> bool {
        !self.held.is_empty()
            && constraints.iter().any(|c| match c {
                Constraint::Image { src, .. } => {
                    let root = &args[*src].root;
                    self.held.iter().any(|h| {
                        h.args
                            .iter()
                            .any(|a| a.privilege.writes() && Arc::ptr_eq(&a.root, root))
                    })
                }
                _ => false,
            })
    }

    /// Folds `d` into the decisions so far and publishes them (`Stats::trace_digest`).
    fn decide(&mut self, d: Decision, counters: &Counters) {
        let mut h = rustc_hash::FxHasher::default();
        (self.digest, &d).hash(&mut h);
        self.digest = h.finish();
        counters
            .trace_digest
            .store(self.digest, std::sync::atomic::Ordering::Relaxed);
    }

    /// The tracer's history of tokens, oldest first.
    #[cfg(test)]
    pub(crate) fn history(&self) -> Vec<u64> {
        self.tracer.history().collect()
    }

    /// After a replay of `trace` found its tasks as recorded but not its temporary flags
    /// (Definition 4 depends on the application's handles, `fuse::temporaries_hold`): whether
    /// the recording is dropped, to be made again from these tasks. So it is the
    /// [`RERECORD_AFTER`]-th such replay in a row: a recording made when the application
    /// happened to keep a temporary would otherwise abandon every later replay, while flags
    /// that alternate (a store kept every other iteration) are not recorded anew each time.
    /// What other recordings worked out for a replay following one of `trace`
    /// (`Recording::cross`) goes with it: the new recording's launches may differ.
    fn flags_went_stale(&mut self, trace: TraceId) -> bool {
        let Some(rec) = self.recordings.get_mut(&trace) else {
            return false;
        };
        rec.flag_misses += 1;
        if rec.flag_misses < RERECORD_AFTER {
            return false;
        }
        self.recordings.remove(&trace);
        self.forget_crosses();
        true
    }

    /// The recorded edges and accesses of `trace` replayed right after `before`, its stores
    /// `same` as there ([`same_stores`]) (made once per pattern).
    fn cross(&mut self, before: TraceId, trace: TraceId, same: Vec<u32>) -> Arc<Cross> {
        let key = (before, same);
        if let Some(c) = self.recordings[&trace].cross.get(&key) {
            return c.clone();
        }
        let c = self.recordings[&trace].cross_after(&self.recordings[&before], &key.1);
        let c = Arc::new(c);
        let rec = self.recordings.get_mut(&trace).expect("replayed");
        rec.cross.insert(key, c.clone());
        c
    }

    /// Whether solving `t` needs a held task's effects: an image whose source it writes.
    fn must_release_for(&self, t: &Issued) -> bool {
        self.must_release_for_parts(&t.constraints, &t.args)
    }

    /// How a token names a store: a store first used less than [`YOUNG`] issued tasks ago by
    /// that distance (`true`), an older one by its id. A loop that makes fresh stores every
    /// iteration uses each at the same distance from its first use every iteration, so its
    /// tokens repeat (replays verify the stores' pattern: `ahead::IssuedTrace`); a store the
    /// loop reuses is named by its id once old. `args`: the issuing task's arguments.
    ///
    /// A store whose first use only read it and came before the last flush is named by its id
    /// however young (branch `tbs21`): a loop's input made before the loop (Black-Scholes'
    /// `from_vec` inputs) then has one name in every iteration after the first, where by
    /// distance it had a new one each time until `YOUNG` tasks had passed, so a loop body
    /// flushed every iteration did not repeat within the finder's first window. A store the
    /// loop makes (written first), or reads first within one flush interval, is named as
    /// before. `read`: whether the issuing task only reads `root` (asked at its first use).
    fn store_name(&mut self, root: &Arc<StoreRoot>, read: impl FnOnce() -> bool) -> (bool, u64) {
        let first = match self.recent.iter().find(|&&(id, _)| id == root.id) {
            Some(&(_, first)) => first,
            None => {
                let first = self.note_first_use(root, read);
                self.recent.rotate_right(1);
                self.recent[0] = (root.id, first);
                first
            }
        };
        if first.read && first.seq <= self.flushed_at {
            return (false, root.id);
        }
        match self.seq - first.seq {
            d if d < YOUNG => (true, d),
            _ => (false, root.id),
        }
    }

    /// `root`'s first use, noted now if this (`read`: only reading it) is it.
    fn note_first_use(&mut self, root: &Arc<StoreRoot>, read: impl FnOnce() -> bool) -> FirstUse {
        if self.first_use.len() >= self.prune_at {
            self.first_use.retain(|_, (_, w)| w.strong_count() > 0);
            self.prune_at = (2 * self.first_use.len()).max(64);
        }
        let seq = self.seq;
        self.first_use
            .entry(root.id)
            .or_insert_with(|| {
                let read = read();
                (FirstUse { seq, read }, Arc::downgrade(root))
            })
            .0
    }

    /// The task's token as the tracer sees it: what the solver and the analysis depend on
    /// (name, scalars, stores with views and privileges, constraints, fixed domain, result
    /// operator) and, for each future argument, how many tasks ago its producer was issued (a
    /// loop passes a new future every iteration, made the same distance back). Numbers the
    /// task's own future.
    fn token(&mut self, t: &Issued) -> u64 {
        self.seq += 1;
        let mut h = rustc_hash::FxHasher::default();
        t.name.hash(&mut h);
        // A kind tag first: FxHasher mixes every integer width alike (`U64(1)` ≠ `I64(1)`).
        for s in &t.scalars {
            match s {
                ScalarArg::Value(Scalar::F64(x)) => (0u8, x.to_bits()).hash(&mut h),
                ScalarArg::Value(Scalar::I64(x)) => (1u8, *x as u64).hash(&mut h),
                ScalarArg::Value(Scalar::U64(x)) => (2u8, *x).hash(&mut h),
                ScalarArg::Future(cell) => {
                    (3u8, cell.launched_as.get().map(|&at| self.seq - at)).hash(&mut h)
                }
            }
        }
        for a in &t.args {
            let (young, name) = self.store_name(&a.root, || reads_only(&t.args, &a.root));
            (young, name).hash(&mut h);
            match &a.view.rect() {
                None => h.write_usize(usize::MAX),
                Some(r) => r.lo().iter().chain(r.hi()).for_each(|&x| h.write_usize(x)),
            }
            a.privilege.hash(&mut h);
        }
        t.constraints.hash(&mut h);
        t.domain.hash(&mut h);
        t.shard.hash(&mut h);
        t.result.as_ref().map(|(op, _)| *op).hash(&mut h);
        if let Some((_, cell)) = &t.result {
            let _ = cell.launched_as.set(self.seq);
        }
        h.finish() & self.token_mask
    }
}

/// Whether a task with `args` only reads `root` (no argument over it writes).
fn reads_only(args: &[IssuedArg], root: &Arc<StoreRoot>) -> bool {
    !args
        .iter()
        .any(|a| Arc::ptr_eq(&a.root, root) && a.privilege.writes())
}

/// Counts a launch's writes in its stores' versions (fusion's temporaries and the solve
/// memo's images test them), held or not.
pub(crate) fn bump_versions(plan: &Plan) {
    bump_args(&plan.args);
}

fn bump_args(args: &[LaunchArg]) {
    for a in args.iter().filter(|a| !a.local && a.privilege.writes()) {
        a.root.meta().version += 1;
    }
}

/// [`bump_versions`] for a held task replayed from its recording (no argument is local).
fn bump_issued_versions(t: &Issued) {
    for a in t.args.iter().filter(|a| a.privilege.writes()) {
        a.root.meta().version += 1;
    }
}

/// A recorded first occurrence and its solved tasks, or: the tasks solved before the one that
/// failed, those after it, and its error.
type RecordOutcome =
    std::result::Result<(Recording, Vec<Plan>), Box<(Vec<Plan>, Vec<Issued>, crate::RuntimeError)>>;

/// Which of the last replay's stores (`before`, by number: first appearance,
/// `ahead::numbering`) each of this replay's stores (`now`, numbered alike) is; a store the
/// last replay did not use gets a number past its stores. And whether they are the same stores
/// in the same order.
fn same_stores(before: &[Arc<StoreRoot>], now: &[Arc<StoreRoot>]) -> (Vec<u32>, bool) {
    let mut fresh = before.len() as u32;
    let same: Vec<u32> = now
        .iter()
        .map(|r| match before.iter().position(|b| Arc::ptr_eq(b, r)) {
            Some(k) => k as u32,
            None => {
                fresh += 1;
                fresh - 1
            }
        })
        .collect();
    let identity =
        same.len() == before.len() && same.iter().enumerate().all(|(k, &s)| s == k as u32);
    (same, identity)
}

/// What a replay replays ([`Inner::record_or_verify`]): a trace recorded just now, as its
/// solved plans, or held tasks verified against the recording, with their distinct stores
/// (`ahead::numbering`).
enum Replayable {
    Recorded(Vec<Plan>),
    Verified(Vec<Arc<StoreRoot>>),
}

/// Keeps the first error of several steps.
fn keep_first(first: &mut Result<()>, r: Result<()>) {
    if first.is_ok() {
        *first = r;
    }
}

impl Tracing {
    /// The tasks held back, in issue order.
    pub(crate) fn held(&self) -> &[Issued] {
        &self.held
    }
}

impl Inner {
    /// Issues a task through the tracer (tracing on): held while a candidate trace matches,
    /// else on to the window with what is released before it.
    pub(crate) fn trace_issue(&self, front: &mut Front, t: Issued) -> Result<()> {
        let Some(mut tr) = front.tracing.take() else {
            return self.enqueue(front, t);
        };
        let t0 = Instant::now();
        let counters = &self.shared.counters;
        // Until the tracer hands it on, the window cannot see `t` (nor what it holds).
        front.window.note_later(&t);
        let mut first = self.run_pending(front, &mut tr, Some(&t));
        let t = match tr.streak.take() {
            None => t,
            Some(s) => {
                // Compared extents must not depend on whether a producer has run yet (as in a
                // replay); an image over a held task's output ends the streak too.
                // (`wait_bound` out of line only for a store not bound yet: rare, and the call
                // per argument showed.)
                let bound = t
                    .args
                    .iter()
                    .filter(|a| a.root.bound().is_none())
                    .try_for_each(|a| self.wait_bound(&a.root, &t.name));
                let held = bound.is_ok() && !tr.must_release_for(&t);
                if held {
                    // Pushed first, compared where it is held (tasks are large: no move back
                    // and forth on the common path).
                    tr.held.push(t);
                    if let Some(r) = self.streak_issue(front, &mut tr, s) {
                        front.window.settle_later(&tr.held);
                        front.tracing = Some(tr);
                        Counters::add(&counters.tracing_ns, t0.elapsed().as_nanos() as u64);
                        // A streak `run_pending` began: its error comes first, as elsewhere.
                        keep_first(&mut first, r);
                        return first;
                    }
                    let t = tr.held.pop().expect("pushed above");
                    keep_first(&mut first, self.end_streak(front, &mut tr));
                    t
                } else {
                    keep_first(&mut first, self.end_streak(front, &mut tr));
                    t
                }
            }
        };
        if tr.must_release_for(&t) {
            tr.decide(Decision::ReleasedForImage, counters);
            keep_first(&mut first, self.release_held(front, &mut tr));
        }
        // What was handed on above (an ended streak's tasks, or all held ones) may have
        // completed a trace whose replay began a streak (`follow`: nothing held, nothing
        // buffered). `t` goes through the matcher below, so that streak is not begun: held and
        // matched by the tracer, `t` would be a task the streak's compare does not count
        // (`streak_issue` compares the held list from the trace's first task), and ending the
        // streak would feed its token to the matcher a second time, one token more than held
        // tasks (a later replay then took more tasks than were held: an index panic, found
        // by `repeated_bodies_dropping_handles_under_tracing_and_a_window_match_sequential`).
        tr.streak = None;
        let token = tr.token(&t);
        if !traceable(&t) {
            tr.decide(Decision::Untraceable, counters);
            keep_first(&mut first, self.release_held(front, &mut tr));
            // Access states change outside a replay: the next replay cannot link to the last.
            tr.last = None;
            keep_first(&mut first, self.enqueue(front, t));
        } else {
            tr.decide(Decision::Held, counters);
            Counters::add(&counters.tasks_held, 1);
            tr.held.push(t);
            keep_first(&mut first, self.feed(front, &mut tr, token));
        }
        front.window.settle_later(&tr.held);
        front.tracing = Some(tr);
        Counters::add(
            &self.shared.counters.tracing_ns,
            t0.elapsed().as_nanos() as u64,
        );
        first
    }

    /// In a replay streak, the launcher's `spec` compared with the trace's next task before
    /// it becomes an [`Issued`] (`IssuedTrace::spec_matches_at`: its user constraints against
    /// the recorded resolved ones): on a match, the task is held with the recording's
    /// constraints and domain — what resolving them would give — and the streak goes on as in
    /// [`Inner::trace_issue`]. Its arguments and scalars are moved out of the spec. On any
    /// difference (or a store whose producer failed, or an image over a held task's output)
    /// nothing is changed and the task and result come back: the ordinary path validates,
    /// resolves and compares it again, and ends the streak.
    #[allow(clippy::type_complexity)]
    pub(crate) fn streak_spec(
        &self,
        front: &mut Front,
        spec: &mut LaunchSpec,
        reg: Registered,
        result: Option<(ReduceOp, Arc<FutureCell>)>,
    ) -> std::result::Result<Result<()>, (Registered, Option<(ReduceOp, Arc<FutureCell>)>)> {
        let Some(mut tr) = front.tracing.take() else {
            return Err((reg, result));
        };
        let Some(mut s) = tr.streak.take() else {
            front.tracing = Some(tr);
            return Err((reg, result));
        };
        let clock = tr.streak_clock(&s);
        // Compared extents must not depend on whether a producer has run yet (as in
        // `trace_issue`).
        let bound = spec
            .args
            .iter()
            .filter(|a| a.root.bound().is_none())
            .try_for_each(|a| self.wait_bound(&a.root, &reg.name));
        let k = tr.held.len();
        let before = s.distinct.len();
        let issued = &tr.recordings[&s.trace].issued;
        let op = result.as_ref().map(|(op, _)| *op);
        let same = bound.is_ok()
            && issued.spec_matches_at(k, &reg.name, spec, op, &tr.held, &mut s.distinct);
        // What the launcher resolves to: looked up once, and only for a task the trace has.
        let resolved = same
            .then(|| issued.resolved(k))
            .filter(|(recorded, _)| !tr.must_release_for_parts(recorded, &spec.args));
        let Some((recorded, domain)) = resolved else {
            s.distinct.truncate(before);
            tr.streak = Some(s);
            front.tracing = Some(tr);
            return Err((reg, result));
        };
        // Pushed one by one: `collect` went through `SmallVec::extend`'s general path (~136
        // instructions per stencil task against about half).
        let mut constraints = crate::issue::task::Args::new();
        for c in recorded {
            constraints.push(c.clone());
        }
        let t = Issued::from_spec(reg, spec, constraints, domain, result);
        front.window.note_streak_task(&t);
        tr.held.push(t);
        let r = self.streak_held(front, &mut tr, s);
        front.window.settle_later(&tr.held);
        front.tracing = Some(tr);
        if let Some((t0, scale)) = clock {
            Counters::add(
                &self.shared.counters.tracing_ns,
                scale * t0.elapsed().as_nanos() as u64,
            );
        }
        Ok(r)
    }

    /// The token of the last held task to the tracer, and its actions applied.
    fn feed(&self, front: &mut Front, tr: &mut Tracing, token: u64) -> Result<()> {
        let counters = &self.shared.counters;
        let before = *tr.tracer.finder_cost();
        let actions = tr.tracer.issue(token);
        let after = tr.tracer.finder_cost();
        Counters::add(&counters.finder_ns, after.ns - before.ns);
        Counters::add(&counters.finder_runs, after.runs - before.runs);
        self.act(front, tr, actions)
    }

    /// The last held task in a streak ([`Streak`]): kept held if it is the trace's next
    /// task (and the trace replayed when it is the last); `None` if it differs (the caller
    /// takes it back and ends the streak).
    fn streak_issue(
        &self,
        front: &mut Front,
        tr: &mut Tracing,
        mut s: Streak,
    ) -> Option<Result<()>> {
        let k = tr.held.len() - 1;
        let issued = &tr.recordings[&s.trace].issued;
        if !issued.matches_at(k, &tr.held, &mut s.distinct) {
            return None;
        }
        Some(self.streak_held(front, tr, s))
    }

    /// The last held task, compared equal to the streak's trace's next task: noted as issued,
    /// and the trace replayed if it was the last.
    fn streak_held(&self, front: &mut Front, tr: &mut Tracing, s: Streak) -> Result<()> {
        let counters = &self.shared.counters;
        let k = tr.held.len() - 1;
        let n = tr.recordings[&s.trace].issued.len();
        let held = std::mem::take(&mut tr.held);
        tr.note_issued(&held[k]);
        tr.held = held;
        tr.decide(Decision::Held, counters);
        Counters::add(&counters.tasks_held, 1);
        if k + 1 < n {
            tr.streak = Some(s);
            return Ok(());
        }
        let p = Pending {
            trace: s.trace,
            n,
            verified: Some(s.distinct),
        };
        if tr.defers(s.trace) {
            tr.pending = Some(p);
            return Ok(());
        }
        self.replay_now(front, tr, p, None)
    }

    /// Replays `p` (what the window holds was issued before it: launched first) and starts a
    /// streak after it. `next`: a task issued after it, not held yet.
    fn replay_now(
        &self,
        front: &mut Front,
        tr: &mut Tracing,
        p: Pending,
        next: Option<&Issued>,
    ) -> Result<()> {
        let mut first = self.drain_all(front);
        keep_first(
            &mut first,
            self.replay(front, tr, p.trace, p.n, p.verified, next),
        );
        Self::follow(tr);
        first
    }

    /// Replays the deferred trace, if any ([`Pending`]); `next` as in [`Inner::replay_now`].
    fn run_pending(
        &self,
        front: &mut Front,
        tr: &mut Tracing,
        next: Option<&Issued>,
    ) -> Result<()> {
        match tr.pending.take() {
            Some(p) => self.replay_now(front, tr, p, next),
            None => Ok(()),
        }
    }

    /// Ends a streak: its held tasks go through the tracer, in order, as if just issued.
    fn end_streak(&self, front: &mut Front, tr: &mut Tracing) -> Result<()> {
        // Their issue was noted (`note_issued`): counted again by `token`, to the same values.
        tr.seq -= tr.held.len() as u64;
        // The streak noted its tasks only with tasks in the window (`note_streak_task`).
        front.window.note_held(&tr.held);
        let held = std::mem::take(&mut tr.held);
        let tokens: Vec<u64> = held.iter().map(|t| tr.token(t)).collect();
        tr.held = held;
        let mut first = Ok(());
        for token in tokens {
            keep_first(&mut first, self.feed(front, tr, token));
        }
        first
    }

    /// Starts a streak after a replay that left nothing held.
    fn follow(tr: &mut Tracing) {
        if let Some(trace) = tr.just_replayed.take() {
            if tr.held.is_empty() && tr.tracer.replayer().buffered() == 0 {
                let len = tr.recordings.get(&trace).map_or(0, |r| r.issued.len());
                tr.streak = Some(Streak {
                    trace,
                    distinct: Vec::with_capacity(8),
                    len,
                });
            }
        }
    }

    /// Hands every held task on (a replay of complete matches, the rest to the window).
    pub(crate) fn release_held(&self, front: &mut Front, tr: &mut Tracing) -> Result<()> {
        // Runs in flight are let go (those that ended, ended here): nothing waits for the
        // next replay to empty their tasks.
        tr.in_flight.clear();
        let mut first = self.run_pending(front, tr, None);
        keep_first(
            &mut first,
            match tr.streak.take() {
                Some(_) => self.end_streak(front, tr),
                None => Ok(()),
            },
        );
        let actions = tr.tracer.flush();
        tr.flushed_at = tr.seq;
        keep_first(&mut first, self.act(front, tr, actions));
        // A flush launches everything: the last replay is not deferred past it.
        keep_first(&mut first, self.run_pending(front, tr, None));
        first
    }

    fn act(&self, front: &mut Front, tr: &mut Tracing, actions: Vec<Action>) -> Result<()> {
        let mut first = self.run_pending(front, tr, None);
        tr.just_replayed = None;
        let last = actions.len();
        for (k, a) in actions.into_iter().enumerate() {
            match a {
                // The last action's replay waits for the next issue or flush ([`Pending`]).
                Action::Replay { trace, tokens } if k + 1 == last && tr.defers(trace) => {
                    tr.pending = Some(Pending {
                        trace,
                        n: tokens.len(),
                        verified: None,
                    });
                }
                Action::Release(tokens) => {
                    tr.just_replayed = None;
                    tr.decide(Decision::Released(tokens.len()), &self.shared.counters);
                    let tasks: Vec<Issued> = tr.held.drain(..tokens.len()).collect();
                    keep_first(&mut first, self.analyse_all(front, tr, tasks));
                }
                Action::Replay { trace, tokens } => {
                    // What the window holds was issued before the trace: it goes first.
                    keep_first(&mut first, self.drain_all(front));
                    keep_first(
                        &mut first,
                        self.replay(front, tr, trace, tokens.len(), None, None),
                    );
                }
            }
        }
        Self::follow(tr);
        first
    }

    /// Ordinary analysis of `tasks`, one by one through the window.
    fn analyse_all(&self, front: &mut Front, tr: &mut Tracing, tasks: Vec<Issued>) -> Result<()> {
        tr.last = None;
        // What stays held was issued after `tasks`: the window must see it as later. So are
        // the tasks of `tasks` not enqueued yet, for a prefix the window decides while taking
        // the ones before: a streak held them unnoted (`Window::note_streak_task`), and its
        // replay may still be abandoned.
        front.window.note_held(&tr.held);
        front.window.note_held(&tasks);
        let mut first = Ok(());
        for t in tasks {
            // In the window from here on, where the window sees what it names.
            front.window.forget_later(&t);
            keep_first(&mut first, self.enqueue(front, t));
        }
        first
    }

    /// Replays `trace` over the first `n` held tasks (recording it first if new); analyses
    /// them as usual if they differ from the recording in anything the solver or the analysis
    /// depends on, or the stores' key partitions or image sources are not as the recording
    /// found them. A replay compares the tasks where they are held and moves each once, into
    /// its launch (tasks are large: a recorded solve is applied without a `Plan` in between
    /// when actors run the trace).
    /// `verified`: the tasks were compared with the recording as they came (a streak), with
    /// their distinct stores. `next`: a task issued after them and not held yet (it may name
    /// a store the trace would make a temporary).
    fn replay(
        &self,
        front: &mut Front,
        tr: &mut Tracing,
        trace: TraceId,
        n: usize,
        verified: Option<Vec<Arc<StoreRoot>>>,
        next: Option<&Issued>,
    ) -> Result<()> {
        let _span = crate::timeline::Span::new(
            crate::timeline::Ev::ReplayBegin,
            crate::timeline::Ev::ReplayEnd,
        );
        let counters = &self.shared.counters;
        tr.just_replayed = None;
        let replayable = match self.record_or_verify(front, tr, trace, n, verified, next) {
            ControlFlow::Continue(r) => r,
            ControlFlow::Break(analysed) => return analysed,
        };
        Counters::add(
            &counters.tasks_launched,
            tr.recordings[&trace].cuts.len() as u64,
        );
        Counters::add(&counters.traces_replayed, 1);
        Counters::add(&counters.tasks_traced, n as u64);
        let Some(workers) = tr.actors else {
            self.replay_through_plans(tr, trace, n, replayable);
            return Ok(());
        };
        let (tasks, roots) = self.launch_replayed(tr, trace, n, replayable);
        // Linked to the replay just before where the recorded crossing edges (`record::Cross`)
        // cover what lies between them: consecutive replays then overlap, no barrier between.
        let link = tr.last.take().and_then(|l| {
            let (same, again) = same_stores(&l.roots, &roots);
            let again = again && l.trace == trace;
            let cross = (l.exact || again).then(|| tr.cross(l.trace, trace, same))?;
            cross.closed.then_some((cross, again, l))
        });
        tr.decide(Decision::Replayed(trace, n, link.is_some()), counters);
        let verified = tr.verified;
        let rec = tr.recordings.get_mut(&trace).expect("recorded above");
        tr.last = self.instantiate_actors(rec, workers, trace, link, tasks, verified);
        if let Some(l) = tr.last.as_mut() {
            l.roots = roots;
        }
        let run = tr.last.as_ref().map(|l| l.run.clone());
        tr.end_runs(run.as_ref());
        tr.just_replayed = Some(trace);
        Ok(())
    }

    /// What [`Inner::replay`] replays: the first occurrence of `trace`, solved and recorded
    /// now, or the held tasks verified against the recording (key partitions and versions
    /// then updated as their solves would have). `Break` where they were analysed as usual
    /// instead (a producer failed, a solve failed, or they differ from the recording), with
    /// the outcome of that.
    fn record_or_verify(
        &self,
        front: &mut Front,
        tr: &mut Tracing,
        trace: TraceId,
        n: usize,
        verified: Option<Vec<Arc<StoreRoot>>>,
        next: Option<&Issued>,
    ) -> ControlFlow<Result<()>, Replayable> {
        let counters = &self.shared.counters;
        // Whether a store is bound yet depends on whether its producer has run: wait for every
        // store the tasks name (their producers were launched before them: a task producing
        // an unbound store is never held), so that what follows (the recorded or compared
        // extents and key partitions) is the same in every run. A streak waited as each task
        // came.
        let bound = match verified {
            Some(_) => Ok(()),
            None => tr.held[..n].iter().try_for_each(|t| {
                t.args
                    .iter()
                    .try_for_each(|a| self.wait_bound(&a.root, &t.name))
            }),
        };
        if bound.is_err() {
            // A failed producer: solving reports its error on the task reading its store.
            tr.decide(Decision::Failed(trace, n), counters);
            let tasks: Vec<Issued> = tr.held.drain(..n).collect();
            return ControlFlow::Break(self.analyse_all(front, tr, tasks));
        }
        let Some(rec) = tr.recordings.get(&trace) else {
            return self.record_now(front, tr, trace, n, next);
        };
        let (held, later) = tr.held.split_at(n);
        let later = later.iter().chain(next);
        let same = verified
            .or_else(|| rec.issued.matches(held))
            .filter(|_| rec.conditions.hold(held));
        let matched = same.is_some();
        let flags = matched && fuse::temporaries_hold(&rec.cuts, held, later);
        let Some(roots) = same.filter(|_| flags) else {
            if matched && tr.flags_went_stale(trace) {
                return self.record_now(front, tr, trace, n, next);
            }
            tr.decide(Decision::Abandoned(trace, n), counters);
            Counters::add(&counters.traces_abandoned, 1);
            let tasks: Vec<Issued> = tr.held.drain(..n).collect();
            return ControlFlow::Break(self.analyse_all(front, tr, tasks));
        };
        let rec = tr.recordings.get_mut(&trace).expect("looked up above");
        rec.flag_misses = 0;
        rec.used = true;
        let held = &tr.held[..n];
        rec.conditions.apply(held);
        held.iter().for_each(bump_issued_versions);
        Counters::add(&counters.tasks_unsolved, n as u64);
        ControlFlow::Continue(Replayable::Verified(roots))
    }

    /// [`Inner::record_or_verify`] for a trace recorded now: its first occurrence, or one
    /// whose recording's temporary flags went stale ([`Tracing::flags_went_stale`]).
    fn record_now(
        &self,
        front: &mut Front,
        tr: &mut Tracing,
        trace: TraceId,
        n: usize,
        next: Option<&Issued>,
    ) -> ControlFlow<Result<()>, Replayable> {
        let counters = &self.shared.counters;
        match self.record(front, tr, n, next) {
            Ok((rec, plans)) => {
                tr.decide(Decision::Recorded(trace, n), counters);
                Counters::add(&counters.traces_recorded, 1);
                tr.recordings.insert(trace, rec);
                ControlFlow::Continue(Replayable::Recorded(plans))
            }
            Err(failed) => {
                tr.decide(Decision::Failed(trace, n), counters);
                let (plans, rest, e) = *failed;
                // Analysed as usual, without the failing task.
                tr.last = None;
                plans.into_iter().for_each(|p| self.analyse(p));
                let r = self.analyse_all(front, tr, rest);
                ControlFlow::Break(Err::<(), _>(e).and(r))
            }
        }
    }

    /// A replay without actors: the recorded solves as plans, launched through the thread
    /// pool's nodes with the recorded graph (`instantiate`).
    fn replay_through_plans(&self, tr: &mut Tracing, trace: TraceId, n: usize, r: Replayable) {
        let plans: Vec<Plan> = match r {
            Replayable::Recorded(plans) => plans,
            Replayable::Verified(_) => {
                let rec = &tr.recordings[&trace];
                let plans = tr.held.drain(..n).zip(&rec.solved).map(|(t, s)| s.plan(t));
                fuse::launches(&rec.cuts, plans.collect(), &self.fused_body)
            }
        };
        plans
            .iter()
            .for_each(|p| self.count_fused(p.fused.as_ref(), &p.args));
        let rec = &tr.recordings[&trace];
        debug_assert!(rec.matches(&plans), "a replay launches the recorded tasks");
        self.instantiate(rec, plans);
        tr.decide(Decision::Replayed(trace, n, false), &self.shared.counters);
        tr.just_replayed = Some(trace);
    }

    /// A replay as actors: the launched tasks and their distinct stores. A first occurrence
    /// launches its solved plans; a verified replay moves each held task once into its
    /// launch, reusing an ended replay's where the recording keeps spares.
    fn launch_replayed(
        &self,
        tr: &mut Tracing,
        trace: TraceId,
        n: usize,
        r: Replayable,
    ) -> (Vec<Arc<Launched>>, Vec<Arc<StoreRoot>>) {
        let roots = match r {
            Replayable::Recorded(plans) => {
                plans
                    .iter()
                    .for_each(|p| self.count_fused(p.fused.as_ref(), &p.args));
                let launch = |p: Plan| {
                    let points = p.domain.len();
                    self.launched(p, points, None)
                };
                let tasks: Vec<_> = plans.into_iter().map(launch).collect();
                let all = tasks.iter().flat_map(|t| t.args.iter().map(|a| &a.root));
                let roots = numbering(all).1.into_iter().cloned().collect();
                return (tasks, roots);
            }
            Replayable::Verified(roots) => roots,
        };
        let rec = &tr.recordings[&trace];
        if !fuse::fuses(&rec.cuts) {
            let mut spare = match &rec.actors {
                Some(compiled) => compiled.take_spare_tasks(n),
                None => Vec::new(),
            };
            // Each held task gives its launch what it keeps (`SolvedTask::launch`), and is
            // dropped below.
            let launch =
                |(t, s): (&mut Issued, &SolvedTask)| s.launch(t, self.next_position(), spare.pop());
            let tasks = tr.held[..n]
                .iter_mut()
                .zip(&rec.solved)
                .map(launch)
                .collect();
            tr.held.drain(..n);
            return (tasks, roots);
        }
        // Read where held, as above; a fused launch is made new (not renewed).
        let mut spare = match &rec.actors {
            Some(compiled) => compiled.take_spare_tasks(rec.cuts.len()),
            None => Vec::new(),
        };
        let mut tasks = Vec::with_capacity(rec.cuts.len());
        let mut start = 0;
        for c in &rec.cuts {
            let at = start..start + c.len;
            let (held, solved) = (&mut tr.held[at.clone()], &rec.solved[at]);
            let position = self.next_position();
            tasks.push(match &c.shape {
                None => solved[0].launch(&mut held[0], position, spare.pop()),
                Some(shape) => launch_fused(
                    shape,
                    &self.fused_body,
                    (held, solved),
                    position,
                    spare.pop(),
                ),
            });
            start += c.len;
        }
        tr.held.drain(..n);
        for t in &tasks {
            self.count_fused(t.fused.as_ref(), &t.args);
        }
        (tasks, roots)
    }

    /// Solves a trace's first occurrence task by task (each solve sees the key partitions the
    /// one before left) and records it. On a failing solve: the tasks solved before it, those
    /// after it, and the error.
    /// The tasks are the first `n` held; `next` as in [`Inner::replay`]. With fusion on, the
    /// solved tasks go through the trace's fusion pass (`fuse.rs`).
    fn record(
        &self,
        front: &mut Front,
        tr: &mut Tracing,
        n: usize,
        next: Option<&Issued>,
    ) -> RecordOutcome {
        let tasks: Vec<Issued> = tr.held.drain(..n).collect();
        let conditions = Conditions::before(&tasks);
        let sigs = IssuedTrace::new(&tasks);
        // Whether each store's live state allows a temporary, before the solves below bump
        // versions (a replay checks the same before it bumps them).
        let dead: Vec<(*const StoreRoot, bool)> = if tr.fuse {
            let later = || tr.held.iter().chain(next);
            let all = tasks.iter().flat_map(|t| t.args.iter().map(|a| &a.root));
            let roots = numbering(all).1;
            let dead = |r: &&Arc<StoreRoot>| (Arc::as_ptr(r), outside_dead_among(r, later()));
            roots.iter().map(dead).collect()
        } else {
            Vec::new()
        };
        let mut ready = Vec::with_capacity(tasks.len());
        let mut rest = tasks.into_iter();
        while let Some(t) = rest.next() {
            // A task that fails to solve is dropped (its future has the error).
            match self.solve(front, t) {
                Ok(r) => {
                    bump_args(&r.args);
                    ready.push(r);
                }
                Err(e) => {
                    let plans = ready.into_iter().map(Plan::single).collect();
                    return Err(Box::new((plans, rest.collect(), e)));
                }
            }
        }
        let dead = |r: &Arc<StoreRoot>| dead.iter().any(|&(p, d)| d && p == Arc::as_ptr(r));
        let (cuts, plans) = fuse::cut(ready, tr.fuse, dead);
        Ok(Recording::new(
            plans,
            cuts,
            &self.fused_body,
            sigs,
            conditions,
        ))
    }

    /// The fusion statistics of a replayed launch (as the window counts its own).
    fn count_fused(&self, fused: Option<&Arc<FusedShape>>, args: &[LaunchArg]) {
        let Some(shape) = fused else {
            return;
        };
        let c = &self.shared.counters;
        Counters::add(&c.fused_launches, 1);
        Counters::add(&c.tasks_fused, shape.subs.len() as u64);
        Counters::add(&c.kernel_fused_launches, shape.kernel as u64);
        c.max_fused_prefix.fetch_max(
            shape.subs.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        for a in args.iter().filter(|a| a.local) {
            Counters::add(&c.temporaries_eliminated, 1);
            Counters::add(
                &c.bytes_not_allocated,
                a.root.bound().map_or(0, |b| b.bytes()),
            );
        }
    }

    /// The recorded graph as actors (`actors.rs`) over `tasks`: linked to `last` (a
    /// replay of the same trace with nothing analysed since) by the recorded cross edges, or
    /// else behind an entry vertex as in [`Inner::instantiate`].
    fn instantiate_actors(
        &self,
        rec: &mut Recording,
        workers: usize,
        trace: TraceId,
        link: Option<(Arc<Cross>, bool, LastReplay)>,
        tasks: Vec<Arc<Launched>>,
        verified: bool,
    ) -> Option<LastReplay> {
        let counters = &self.shared.counters;
        Counters::add(&counters.actor_replays, 1);
        let compiled = rec
            .actors
            .get_or_insert_with(|| {
                let points: Vec<usize> = tasks.iter().map(|t| t.domain.len()).collect();
                let finish: Vec<bool> = tasks.iter().map(|t| t.has_finish).collect();
                debug_assert_eq!(
                    points.iter().sum::<usize>() + finish.iter().filter(|&&f| f).count(),
                    rec.graph.vertices,
                    "the recorded graph has a vertex per point and finish step"
                );
                Arc::new(Compiled::new(&rec.graph.edges, &points, &finish, workers))
            })
            .clone();
        // The points take no ledger borrows when the recorded graph, and the link to the
        // replay before if there is one, order every conflicting access (`verify.rs`).
        let trusted =
            verified && rec.trusted && link.as_ref().is_none_or(|(cross, ..)| cross.trusted);
        if trusted {
            Counters::add(&counters.verified_replays, 1);
        }
        let run = Run::new(&compiled, tasks, trusted);
        let (tasks, nodes) = (run.tasks(), run.nodes());
        let mut first = 0;
        for (i, t) in tasks.iter().enumerate() {
            let points = &nodes[first..first + t.domain.len()];
            for (s, p) in t.scalars.iter().zip(rec.producers(i)) {
                if let (ScalarArg::Future(cell), Producer::External) = (s, p) {
                    if let Some(pred) = cell.node.get() {
                        points.iter().for_each(|p| Node::add_edge(pred, p));
                    }
                }
            }
            first += t.domain.len();
            if t.has_finish {
                for (_, cell) in &t.results {
                    let _ = cell.node.set(nodes[first].clone());
                }
                first += 1;
            }
        }
        let (pre, entry, exact) = match link {
            Some((cross, again, last)) => {
                Counters::add(&counters.actor_linked_replays, 1);
                let last_nodes = last.run.nodes();
                let n = last_nodes.len() as u32;
                let vertex = |u: u32| match u {
                    PRE => &last.pre,
                    u if u < n => &last_nodes[u as usize],
                    u => &nodes[(u - n) as usize],
                };
                for &(u, v) in &cross.edges {
                    Node::add_edge(vertex(u), &nodes[v as usize]);
                }
                for st in &cross.stores {
                    let of = if st.before { last.run.tasks() } else { tasks };
                    let v = |&(r, u): &(_, u32)| (r, vertex(u));
                    of[st.at.0].args[st.at.1].root.meta().access.set(
                        &last.pre,
                        st.writers.iter().map(v),
                        st.readers.iter().map(v),
                    );
                }
                // Linked to another trace (or stores), the state is no longer one a next link
                // assumes.
                (again.then_some(last.pre), None, false)
            }
            None => {
                let entry = Node::new(Work::Boundary);
                let root = |st: &FinalAccess| tasks[st.at.0].args[st.at.1].root.clone();
                self.enter(&rec.graph, &entry, nodes, root);
                (Some(entry.clone()), Some(entry), true)
            }
        };
        self.start_kept(nodes, entry.as_ref());
        pre.map(|pre| LastReplay {
            trace,
            exact,
            run,
            pre,
            roots: Vec::new(),
        })
    }

    /// The entry vertex after every pending access to the trace's stores and before its
    /// sources; each store's access state set to the trace's postcondition.
    fn enter(
        &self,
        g: &super::record::Graph,
        entry: &Arc<Node>,
        nodes: &[Arc<Node>],
        root: impl Fn(&FinalAccess) -> Arc<crate::store::StoreRoot>,
    ) {
        let mut preds = Preds::default();
        for st in &g.stores {
            let root = root(st);
            let whole = root.bound().expect("traced stores are bound").rect;
            let v = |&(r, i): &(_, u32)| (r, &nodes[i as usize]);
            root.meta().access.replace(
                whole,
                entry,
                &mut preds,
                st.writers.iter().map(v),
                st.readers.iter().map(v),
            );
        }
        for &s in &g.sources {
            Node::add_edge(entry, &nodes[s as usize]);
        }
    }

    /// The recorded graph over `plans`' nodes: the entry vertex after every pending access
    /// to the trace's stores, the recorded edges, futures made before the trace, and each
    /// store's access state set to the trace's postcondition.
    fn instantiate(&self, rec: &Recording, plans: Vec<Plan>) {
        let g = &rec.graph;
        let built: Vec<_> = plans.into_iter().map(|p| self.build_nodes(p)).collect();
        let mut nodes: Vec<Arc<Node>> = Vec::with_capacity(g.vertices + 1);
        for b in &built {
            nodes.extend(b.points.iter().cloned());
            nodes.extend(b.finish.iter().cloned());
        }
        debug_assert_eq!(nodes.len(), g.vertices);
        let entry = Node::new(Work::Boundary);
        self.enter(g, &entry, &nodes, |st| {
            built[st.at.0].task.args[st.at.1].root.clone()
        });
        for (i, b) in built.iter().enumerate() {
            for (s, p) in b.task.scalars.iter().zip(rec.producers(i)) {
                if let (ScalarArg::Future(cell), Producer::External) = (s, p) {
                    if let Some(pred) = cell.node.get() {
                        b.points.iter().for_each(|p| Node::add_edge(pred, p));
                    }
                }
            }
        }
        for &(a, b) in &g.edges {
            Node::add_edge(&nodes[a as usize], &nodes[b as usize]);
        }
        for b in &built {
            if let Some(f) = &b.finish {
                for (_, cell) in &b.task.results {
                    let _ = cell.node.set(f.clone());
                }
            }
        }
        nodes.push(entry);
        self.start(nodes.into_iter());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(id: u64) -> Arc<StoreRoot> {
        StoreRoot::for_test(id)
    }

    /// The small cache in front of `first_use` answers as the map does, with more stores in
    /// use than it holds (entries evicted and looked up again) and stores growing old.
    #[test]
    fn store_names_do_not_depend_on_what_the_cache_holds() {
        let mut tr = Tracing::new(64, None);
        let roots: Vec<_> = (0..7).map(root).collect();
        let mut first: HashMap<u64, u64> = HashMap::default();
        let mut young = 0;
        for step in 0..4 * YOUNG {
            tr.seq += 1;
            // An irregular order over 7 stores: runs of one store, and all of them in turn.
            let r = &roots[((step * step / 3 + step / 5) % 7) as usize];
            let f = *first.entry(r.id).or_insert(tr.seq);
            let want = match tr.seq - f {
                d if d < YOUNG => (true, d),
                _ => (false, r.id),
            };
            young += usize::from(want.0 && want.1 > 0);
            assert_eq!(
                tr.store_name(r, || false),
                want,
                "step {step}, store {}",
                r.id
            );
        }
        assert!(young > 0, "the stream names young stores by distance too");
    }

    /// A store first used by a read before the last flush (a loop's input made before the
    /// loop) is named by its id however young; one first written, or first read after the
    /// last flush, by its distance while young. Mutation-checked: without the rule (naming by
    /// distance only) the input's names after the flush differ.
    #[test]
    fn a_store_read_first_before_the_last_flush_is_named_by_its_id() {
        let mut tr = Tracing::new(64, None);
        let (input, made, late) = (root(1), root(2), root(3));
        tr.seq = 1;
        assert_eq!(tr.store_name(&input, || true), (true, 0));
        assert_eq!(tr.store_name(&made, || false), (true, 0));
        tr.seq = 3;
        assert_eq!(tr.store_name(&input, || true), (true, 2), "no flush yet");
        tr.flushed_at = 3;
        for seq in [4, 9] {
            tr.seq = seq;
            assert_eq!(tr.store_name(&input, || true), (false, 1));
            assert_eq!(tr.store_name(&made, || false), (true, seq - 1));
        }
        // First read after the last flush: by distance.
        assert_eq!(tr.store_name(&late, || true), (true, 0));
        tr.seq = 12;
        assert_eq!(tr.store_name(&late, || true), (true, 3));
    }

    /// The issuing thread ends the runs in flight that every vertex has run (oldest first,
    /// as soon as nothing else holds them), keeps the others, and never keeps more than
    /// `IN_FLIGHT`; a flush lets them all go.
    #[test]
    fn the_issuer_ends_runs_whose_vertices_all_ran_and_keeps_at_most_in_flight() {
        let c = Arc::new(Compiled::new(&[(0, 1)], &[1, 1], &[false, false], 1));
        let mut tr = Tracing::new(64, Some(1));
        // What running a vertex does to its run's reference: the work is taken and dropped.
        let run_all = |r: &Arc<Run>| r.nodes().iter().for_each(|n| drop(n.take_work()));
        let (a, b) = (Run::new(&c, vec![], false), Run::new(&c, vec![], false));
        tr.end_runs(Some(&a));
        tr.end_runs(Some(&b));
        // Run `b` ends first: `a` is older and still running, so nothing ends yet.
        run_all(&b);
        let (weak_a, weak_b) = (Arc::downgrade(&a), Arc::downgrade(&b));
        drop((a, b));
        let c2 = Run::new(&c, vec![], false);
        tr.end_runs(Some(&c2));
        assert_eq!(tr.in_flight.len(), 3);
        assert!(
            weak_b.upgrade().is_some(),
            "ended, but behind a run still in flight"
        );
        // `a` ends: the next look ends both, here, and leaves the running one.
        run_all(&weak_a.upgrade().expect("in flight"));
        tr.end_runs(None);
        assert!(weak_a.upgrade().is_none() && weak_b.upgrade().is_none());
        assert_eq!(tr.in_flight.len(), 1);
        assert_eq!(
            c.spare_runs(),
            2,
            "their nodes went back to the compiled trace"
        );
        // Never more than IN_FLIGHT, ended or not (the oldest is let go: a worker ends it).
        let runs: Vec<_> = (0..2 * IN_FLIGHT)
            .map(|_| Run::new(&c, vec![], false))
            .collect();
        for r in &runs {
            tr.end_runs(Some(r));
            assert!(tr.in_flight.len() <= IN_FLIGHT);
        }
        assert!(Arc::ptr_eq(
            tr.in_flight.back().expect("kept"),
            &runs[2 * IN_FLIGHT - 1]
        ));
        tr.in_flight.clear();
        assert!(runs
            .iter()
            .chain([&c2])
            .all(|r| Arc::strong_count(r) == 1 + r.nodes().len()));
    }
}
