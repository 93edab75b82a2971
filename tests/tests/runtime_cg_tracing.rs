//! Automatic tracing of a `tensor!` CG, whose statements make fresh stores every iteration:
//! traced (with and without actors) it gives bitwise the untraced answer, and after a few
//! iterations nearly every task is launched from a replayed trace.

#[path = "common/tensor_cg.rs"]
mod tensor_cg;

use tensor_cg::{replayed, tensor_cg};
use tessera::runtime::Runtime;

fn runtime(threads: usize, tracing: bool, actors: bool) -> Runtime {
    Runtime::builder()
        .threads(threads)
        .tracing(tracing)
        .actors(actors)
        .build()
}

/// Per iteration: the digest of every tracer decision so far, and the tasks held, traced and
/// the traces replayed and abandoned in it.
type Decisions = Vec<(u64, u64, u64, u64, u64)>;

/// The traced CG with workers that sleep up to `jitter_us` µs at random before each point.
fn decisions(actors: bool, jitter_us: u32, n: usize, iterations: usize) -> (Vec<f64>, Decisions) {
    let rt = Runtime::builder()
        .threads(2)
        .tracing(true)
        .actors(actors)
        .worker_jitter(jitter_us)
        .build();
    let (x, stats) = tensor_cg(&rt, n, iterations).unwrap();
    let mut before = tessera::runtime::Stats::default();
    let per = stats.iter().map(|s| {
        let d = s.since(&before);
        before = *s;
        let counts = (
            d.tasks_held,
            d.tasks_traced,
            d.traces_replayed,
            d.traces_abandoned,
        );
        (s.trace_digest, counts.0, counts.1, counts.2, counts.3)
    });
    (x, per.collect())
}

/// Thesis §5.4.1: every decision of the tracer (what it holds, records, replays, abandons)
/// follows from the issued task stream alone, so ranks issuing the same stream decide alike.
/// Workers slowed at random must not change one of them.
#[test]
fn the_tracers_decisions_do_not_depend_on_how_fast_the_workers_are() {
    let (n, iterations) = (64, 24);
    for actors in [false, true] {
        let (x, fast) = decisions(actors, 0, n, iterations);
        let (y, slow) = decisions(actors, 300, n, iterations);
        assert_eq!(x, y, "actors {actors}");
        let first = (0..iterations).find(|&i| fast[i] != slow[i]);
        assert_eq!(first, None, "actors {actors}: {fast:?}\n{slow:?}");
        assert!(fast.iter().any(|d| d.2 > 0), "nothing replayed: {fast:?}");
    }
}

#[test]
fn a_traced_tensor_cg_equals_the_untraced_one_and_is_replayed() {
    let (n, iterations) = (64, 40);
    let (want, _) = tensor_cg(&runtime(2, false, false), n, iterations).unwrap();
    for (threads, actors) in [(1, false), (2, false), (1, true), (2, true)] {
        let rt = runtime(threads, true, actors);
        let (x, stats) = tensor_cg(&rt, n, iterations).unwrap();
        assert_eq!(x, want, "threads {threads}, actors {actors}");
        let (share, first) = replayed(&stats, 20, iterations);
        let all = rt.stats();
        // The goal: ≥ 95 % replayed after 20 iterations.
        assert!(
            share >= 0.95,
            "{share} replayed after 20 iterations: {all:?}"
        );
        assert!(first.is_some_and(|i| i < 20), "first replay {first:?}");
        // Replays ahead of the solver: every task is solved or launched from a recording.
        assert_eq!(all.tasks_solved + all.tasks_unsolved, all.tasks_issued);
        assert!(all.tasks_unsolved > 0, "{all:?}");
        let digest = all.trace_digest;
        eprintln!("threads {threads}, actors {actors}: {share} replayed, first {first:?}, decisions {digest:x}");
    }
}
