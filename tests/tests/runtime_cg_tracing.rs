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
        assert!(
            share >= 0.95,
            "{share} replayed after 20 iterations: {all:?}"
        );
        assert!(first.is_some_and(|i| i < 20), "first replay {first:?}");
        // Replays ahead of the solver: every task is solved or launched from a recording.
        assert_eq!(all.tasks_solved + all.tasks_unsolved, all.tasks_issued);
        assert!(all.tasks_unsolved > all.tasks_issued / 2, "{all:?}");
        eprintln!("threads {threads}, actors {actors}: {share} replayed, first {first:?}");
    }
}
