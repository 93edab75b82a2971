//! Automatic tracing, the parts that find traces (thesis ch. 5 §5.3): which repeated task
//! sequences to record, and where they start in the incoming stream.
//!
//! ```text
//!  token per issued task ─► history ─► at ruler sample points (RulerSampler, §5.3.4)
//!                                       └► find_repeats (Algorithm 3, §5.3.2) ─► candidates
//!  token per issued task ─────────────────► Replayer (trie, §5.3.3) ◄────────────┘
//!                                            └► Release(tokens) to analysis | Replay(trace, tokens)
//! ```
//!
//! * [`find_repeats`] / [`Finder`]: non-overlapping repeated sub-strings of the history,
//!   longest first, exactly as the reference implementation the thesis cites.
//! * [`RulerSampler`]: after which issued task the finder runs, and over how much history.
//!   Deterministic in the count of issued tasks alone, so every rank decides the same at the
//!   same task (§5.4.1) without the thesis' agreement protocol: the finder runs synchronously.
//! * [`Replayer`]: candidates in a trie, matched against the stream without speculation
//!   (§5.4.2), scored by length × decayed appearances.
//! * [`FinderCost`]: what finding cost, for the runtime's statistics.
//! * [`Tracer`]: the three together, one call per launched task's token.
//! * `replay` (crate-private): the runtime's issue path through the tracer, ahead of the
//!   solver (held tasks, releases, replays); `record`: a trace's recorded tasks and logical
//!   dependence graph; `ahead`: the tasks as issued, the recorded solves and the key
//!   partitions they start from and leave (what lets a replay skip the solver).
//!
//! A token is a 64-bit hash of what an issued task does (`Tracing::token`: stores named by id,
//! or by how recently they were first used, and where its futures come from): equal tokens
//! make two tasks *candidates* for the same trace entry,
//! never proof that they are equal. A replay compares the recorded fields of each task it
//! replaces and falls back to ordinary analysis on any difference. A replayed trace runs
//! as per-worker actors (`execute::actors`, crate-private; runtime/DESIGN.md, "Tracing in the
//! launch path").

pub(crate) mod ahead;
mod finder;
mod fuse;
mod intervals;
mod record;
pub(crate) mod replay;
mod ruler;
mod suffix;
mod tracer;
mod trie;
mod verify;

pub use finder::{find_repeats, Finder};
pub use ruler::RulerSampler;
pub use tracer::{Tracer, TracerConfig};
pub use trie::{Action, Replayer, ScoreParams, TraceId, TraceInfo};

/// What the repeat finder has cost: a counter the runtime's statistics can carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FinderCost {
    /// Runs of the finder.
    pub runs: u64,
    /// Tokens analysed, summed over runs (the n of each O(n log n) run).
    pub tokens: u64,
    /// Candidate occurrences generated, summed over runs.
    pub candidates: u64,
    /// Groups of repeats returned, summed over runs.
    pub groups: u64,
    /// Time spent in the finder, in nanoseconds.
    pub ns: u64,
}

impl FinderCost {
    pub(crate) fn record(&mut self, tokens: usize, candidates: usize, groups: usize, ns: u128) {
        self.runs += 1;
        self.tokens += tokens as u64;
        self.candidates += candidates as u64;
        self.groups += groups as u64;
        self.ns = self
            .ns
            .saturating_add(u64::try_from(ns).unwrap_or(u64::MAX));
    }

    /// Mean finder time per issued task, in nanoseconds (`issued` tasks in the same period).
    pub fn ns_per_task(&self, issued: u64) -> f64 {
        if issued == 0 {
            0.0
        } else {
            self.ns as f64 / issued as f64
        }
    }
}

/// A xorshift generator from `seed` for the tracing tests: each call gives a number below its
/// argument.
#[cfg(test)]
pub(crate) fn below(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |m| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    }
}
