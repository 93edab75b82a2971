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
}

impl Stats {
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
        }
    }
}
