//! Counters a user or a benchmark can read: tasks issued, partitions created and reused,
//! analysis time.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub(crate) struct Counters {
    pub tasks_issued: AtomicU64,
    pub points_run: AtomicU64,
    pub partitions_created: AtomicU64,
    pub partitions_reused: AtomicU64,
    pub solutions_replayed: AtomicU64,
    pub analysis_ns: AtomicU64,
    pub blocking_waits: AtomicU64,
    pub nodes_helped: AtomicU64,
    pub tasks_launched: AtomicU64,
    pub fused_launches: AtomicU64,
    pub tasks_fused: AtomicU64,
    pub max_fused_prefix: AtomicU64,
    pub temporaries_eliminated: AtomicU64,
    pub bytes_not_allocated: AtomicU64,
    pub fusion_memo_hits: AtomicU64,
    pub fusion_memo_misses: AtomicU64,
    pub kernel_fused_launches: AtomicU64,
    // Adaptive window (branch `window`).
    pub idle_flushes: AtomicU64,
    pub timer_flushes: AtomicU64,
    pub idle_held_ns: AtomicU64,
    pub window_wakes: AtomicU64,
    pub tasks_traced: AtomicU64,
    pub tasks_analysed: AtomicU64,
    pub traces_recorded: AtomicU64,
    pub traces_replayed: AtomicU64,
    pub traces_abandoned: AtomicU64,
    pub finder_runs: AtomicU64,
    pub finder_ns: AtomicU64,
    pub tracing_ns: AtomicU64,
    pub actor_replays: AtomicU64,
    pub actor_linked_replays: AtomicU64,
    pub verified_replays: AtomicU64,
    pub tasks_solved: AtomicU64,
    pub tasks_unsolved: AtomicU64,
    // Determinism of tracing (branch `determ`).
    pub tasks_held: AtomicU64,
    pub trace_digest: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub messages_sent: AtomicU64,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            tasks_issued: g(&self.tasks_issued),
            points_run: g(&self.points_run),
            partitions_created: g(&self.partitions_created),
            partitions_reused: g(&self.partitions_reused),
            solutions_replayed: g(&self.solutions_replayed),
            analysis_ns: g(&self.analysis_ns),
            blocking_waits: g(&self.blocking_waits),
            nodes_helped: g(&self.nodes_helped),
            tasks_launched: g(&self.tasks_launched),
            fused_launches: g(&self.fused_launches),
            tasks_fused: g(&self.tasks_fused),
            max_fused_prefix: g(&self.max_fused_prefix),
            temporaries_eliminated: g(&self.temporaries_eliminated),
            bytes_not_allocated: g(&self.bytes_not_allocated),
            bytes_allocated: 0,
            fusion_memo_hits: g(&self.fusion_memo_hits),
            fusion_memo_misses: g(&self.fusion_memo_misses),
            kernel_fused_launches: g(&self.kernel_fused_launches),
            idle_flushes: g(&self.idle_flushes),
            idle_held_ns: g(&self.idle_held_ns),
            window_wakes: g(&self.window_wakes),
            timer_flushes: g(&self.timer_flushes),
            tasks_traced: g(&self.tasks_traced),
            tasks_analysed: g(&self.tasks_analysed),
            traces_recorded: g(&self.traces_recorded),
            traces_replayed: g(&self.traces_replayed),
            traces_abandoned: g(&self.traces_abandoned),
            finder_runs: g(&self.finder_runs),
            finder_ns: g(&self.finder_ns),
            tracing_ns: g(&self.tracing_ns),
            actor_replays: g(&self.actor_replays),
            actor_linked_replays: g(&self.actor_linked_replays),
            verified_replays: g(&self.verified_replays),
            tasks_solved: g(&self.tasks_solved),
            tasks_unsolved: g(&self.tasks_unsolved),
            tasks_held: g(&self.tasks_held),
            trace_digest: g(&self.trace_digest),
            bytes_sent: g(&self.bytes_sent),
            messages_sent: g(&self.messages_sent),
            bytes_resident: 0,
        }
    }
}

/// A snapshot of the runtime's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Index tasks submitted.
    pub tasks_issued: u64,
    /// Point tasks executed.
    pub points_run: u64,
    /// Partitions made for the first time (tilings and images).
    pub partitions_created: u64,
    /// Equivalence classes that reused a store's key partition.
    pub partitions_reused: u64,
    /// Tasks whose constraint solution was replayed from an earlier, identical solve (same
    /// stores, views, constraints and key partitions) instead of solved again.
    pub solutions_replayed: u64,
    /// Total time spent solving constraints and analysing dependences, in nanoseconds.
    pub analysis_ns: u64,
    /// Times the issuing thread had to wait for data (image sources, unbound extents).
    pub blocking_waits: u64,
    /// Point tasks and finish steps run by threads waiting on the runtime (the application's
    /// thread in back-pressure, fences, read-back and futures) instead of by workers.
    pub nodes_helped: u64,
    /// Index tasks handed to the dependence analysis: a fused task counts once, so
    /// `tasks_issued - tasks_launched` tasks were saved by fusion.
    pub tasks_launched: u64,
    /// Launched tasks that fuse two or more issued ones.
    pub fused_launches: u64,
    /// Issued tasks that ran inside a fused task (the sum of fused prefix lengths).
    pub tasks_fused: u64,
    /// The longest fused prefix so far.
    pub max_fused_prefix: u64,
    /// Stores that fusion turned into task-local scratch (Definition 4 temporaries).
    pub temporaries_eliminated: u64,
    /// Bytes those temporaries would have taken as stores: never allocated.
    pub bytes_not_allocated: u64,
    /// Bytes of store elements allocated (stores are allocated at their first access).
    pub bytes_allocated: u64,
    /// Fusion decisions reused for a window isomorphic to an earlier one.
    pub fusion_memo_hits: u64,
    /// Fusion decisions computed and remembered.
    pub fusion_memo_misses: u64,
    /// Fused launches made only of element-wise tasks: their points run one loop over
    /// cache-sized chunks (kernel fusion) where the sub-stores line up.
    pub kernel_fused_launches: u64,
    /// Adaptive window: times a worker about to go idle (or the issuer, for a worker that
    /// found the front lock taken) launched what the window held.
    pub idle_flushes: u64,
    /// Adaptive window: times the window thread launched what the window held (after a pause
    /// in submits).
    pub timer_flushes: u64,
    /// Adaptive window: nanoseconds from an issue that found a worker idle and held its task
    /// anyway (for the next submit, [`RuntimeBuilder::window_hold`]) to the next launch, summed:
    /// the time workers idled because of the window.
    ///
    /// [`RuntimeBuilder::window_hold`]: crate::RuntimeBuilder::window_hold
    pub idle_held_ns: u64,
    /// Adaptive window: times the issuing thread woke the window thread to time a hold (a
    /// futex call and a context switch each; it sleeps through deadlines it would meet anyway).
    pub window_wakes: u64,
    /// Launched tasks whose dependences came from a replayed trace (automatic tracing).
    pub tasks_traced: u64,
    /// Launched tasks that went through ordinary dependence analysis.
    pub tasks_analysed: u64,
    /// Traces recorded (the first replay of a candidate records it).
    pub traces_recorded: u64,
    /// Replays of a recorded trace (the recording one included).
    pub traces_replayed: u64,
    /// Replays refused because a task differed from the recording (analysed as usual).
    pub traces_abandoned: u64,
    /// Runs of the repeat finder, and the time they took, in nanoseconds.
    pub finder_runs: u64,
    pub finder_ns: u64,
    /// Time in the tracing path (tokens, finder, matcher, recording, replay), nanoseconds.
    /// The tasks a replay streak compares and holds without completing the trace are timed
    /// one in 16 and counted 16 times (an estimate: two clock reads per such task showed in
    /// wall-time profiles); everything else is timed exactly.
    pub tracing_ns: u64,
    /// Replays run as actors (`RuntimeBuilder::actors`), and of them those linked to the
    /// replay before by recorded edges (no entry vertex: the two overlap).
    pub actor_replays: u64,
    pub actor_linked_replays: u64,
    /// Actor replays whose points viewed their stores without ledger borrows: the trace's
    /// graph (and its link to the replay before) was verified to order every conflicting
    /// access (`RuntimeBuilder::verified_replays`).
    pub verified_replays: u64,
    /// Issued tasks solved (by the solver or its memo), and issued tasks launched from a
    /// recorded trace with no solve at all (replay ahead of the solver). Every issued task
    /// that launched is one or the other.
    pub tasks_solved: u64,
    pub tasks_unsolved: u64,
    /// Issued tasks the tracer held back (a candidate trace still matched), whatever became
    /// of them.
    pub tasks_held: u64,
    /// A hash of every decision the tracer made so far, in order (held or not, each release
    /// and replay with its outcome): two runs of one program decide alike exactly when their
    /// digests agree at each point, whatever the workers' timing (a level: `since` keeps the
    /// later value).
    pub trace_digest: u64,
    /// Across ranks: bytes of store elements this rank sent to others (transfers before
    /// points and gathers for `read` and image sources; headers not counted).
    pub bytes_sent: u64,
    /// Across ranks: messages this rank's tasks sent (transfers, points' leftovers for the
    /// finish step, finish outcomes; not the collectives).
    pub messages_sent: u64,
    /// Bytes of memory the elements of this runtime's live stores occupy now (a level, not
    /// a counter: `since` keeps the later value). Across ranks stores are allocated page by
    /// page as written, so this is the rank's share: the pages of the pieces its points
    /// wrote or received (`mincore`). Buffers of dropped stores the runtime keeps for reuse
    /// are not counted (up to a sixteenth of the memory the process may use, shared among
    /// ranks, at least 128 MiB; the process' RSS includes them).
    pub bytes_resident: u64,
}

impl Stats {
    /// Mean number of issued tasks per fused task.
    pub fn mean_fused_prefix(&self) -> f64 {
        if self.fused_launches == 0 {
            0.0
        } else {
            self.tasks_fused as f64 / self.fused_launches as f64
        }
    }

    /// Share of launched tasks whose dependences were replayed from a trace (0 to 1).
    pub fn traced_share(&self) -> f64 {
        let all = self.tasks_traced + self.tasks_analysed;
        if all == 0 {
            0.0
        } else {
            self.tasks_traced as f64 / all as f64
        }
    }

    /// Mean repeat-finder time per launched task, in nanoseconds.
    pub fn finder_ns_per_task(&self) -> f64 {
        let all = self.tasks_traced + self.tasks_analysed;
        if all == 0 {
            0.0
        } else {
            self.finder_ns as f64 / all as f64
        }
    }

    /// Mean analysis time per issued task, in microseconds.
    pub fn analysis_us_per_task(&self) -> f64 {
        if self.tasks_issued == 0 {
            0.0
        } else {
            self.analysis_ns as f64 / 1e3 / self.tasks_issued as f64
        }
    }

    /// The counters accumulated since `earlier`.
    pub fn since(&self, earlier: &Stats) -> Stats {
        Stats {
            tasks_issued: self.tasks_issued - earlier.tasks_issued,
            points_run: self.points_run - earlier.points_run,
            partitions_created: self.partitions_created - earlier.partitions_created,
            partitions_reused: self.partitions_reused - earlier.partitions_reused,
            solutions_replayed: self.solutions_replayed - earlier.solutions_replayed,
            analysis_ns: self.analysis_ns - earlier.analysis_ns,
            blocking_waits: self.blocking_waits - earlier.blocking_waits,
            nodes_helped: self.nodes_helped - earlier.nodes_helped,
            tasks_launched: self.tasks_launched - earlier.tasks_launched,
            fused_launches: self.fused_launches - earlier.fused_launches,
            tasks_fused: self.tasks_fused - earlier.tasks_fused,
            max_fused_prefix: self.max_fused_prefix,
            temporaries_eliminated: self.temporaries_eliminated - earlier.temporaries_eliminated,
            bytes_not_allocated: self.bytes_not_allocated - earlier.bytes_not_allocated,
            bytes_allocated: self.bytes_allocated - earlier.bytes_allocated,
            fusion_memo_hits: self.fusion_memo_hits - earlier.fusion_memo_hits,
            fusion_memo_misses: self.fusion_memo_misses - earlier.fusion_memo_misses,
            kernel_fused_launches: self.kernel_fused_launches - earlier.kernel_fused_launches,
            idle_flushes: self.idle_flushes - earlier.idle_flushes,
            idle_held_ns: self.idle_held_ns - earlier.idle_held_ns,
            window_wakes: self.window_wakes - earlier.window_wakes,
            timer_flushes: self.timer_flushes - earlier.timer_flushes,
            tasks_traced: self.tasks_traced - earlier.tasks_traced,
            tasks_analysed: self.tasks_analysed - earlier.tasks_analysed,
            traces_recorded: self.traces_recorded - earlier.traces_recorded,
            traces_replayed: self.traces_replayed - earlier.traces_replayed,
            traces_abandoned: self.traces_abandoned - earlier.traces_abandoned,
            finder_runs: self.finder_runs - earlier.finder_runs,
            finder_ns: self.finder_ns - earlier.finder_ns,
            tracing_ns: self.tracing_ns - earlier.tracing_ns,
            actor_replays: self.actor_replays - earlier.actor_replays,
            actor_linked_replays: self.actor_linked_replays - earlier.actor_linked_replays,
            verified_replays: self.verified_replays - earlier.verified_replays,
            tasks_solved: self.tasks_solved - earlier.tasks_solved,
            tasks_unsolved: self.tasks_unsolved - earlier.tasks_unsolved,
            tasks_held: self.tasks_held - earlier.tasks_held,
            trace_digest: self.trace_digest,
            bytes_sent: self.bytes_sent - earlier.bytes_sent,
            messages_sent: self.messages_sent - earlier.messages_sent,
            bytes_resident: self.bytes_resident,
        }
    }
}
