//! Crate-internal tests of the runtime's seams.

use super::*;

fn history(rt: &Runtime) -> Vec<u64> {
    rt.fence().unwrap();
    launched_tokens(rt)
}

/// Tokens of the traceable tasks launched so far (the tracer's history).
fn launched_tokens(rt: &Runtime) -> Vec<u64> {
    let front = rt.inner.front.lock().unwrap();
    front.tracing.as_ref().expect("tracing on").history()
}

#[test]
fn repeated_tasks_hash_to_repeated_tokens() {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(1)
        .tracing(true)
        .build();
    rt.register("step", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[8]).unwrap();
    let b = rt.create(DType::F64, &[8]).unwrap();
    for _ in 0..3 {
        rt.task("step")
            .read(&a)
            .write(&b)
            .align(&a, &b)
            .scalar(1.0)
            .submit()
            .unwrap();
        rt.task("step")
            .read(&b)
            .write(&a)
            .align(&a, &b)
            .scalar(1.0)
            .submit()
            .unwrap();
    }
    let h = history(&rt);
    assert_eq!(h.len(), 6);
    assert_eq!(h[0], h[2]);
    assert_eq!(h[1], h[3]);
    assert_ne!(
        h[0], h[1],
        "different stores or privileges give different tokens"
    );
    // A different scalar or launch domain changes the token.
    rt.task("step")
        .read(&a)
        .write(&b)
        .align(&a, &b)
        .scalar(2.0)
        .submit()
        .unwrap();
    rt.task("step")
        .read(&a)
        .write(&b)
        .align(&a, &b)
        .scalar(1.0)
        .launch_domain(&[3])
        .submit()
        .unwrap();
    let h = history(&rt);
    assert_ne!(h[6], h[0]);
    assert_ne!(h[7], h[0]);
}

#[test]
fn a_larger_window_defers_analysis_until_full_or_needed() {
    // Fusion off: four tasks on one store would fuse into one launch.
    let rt = Runtime::builder()
        .threads(1)
        .window_size(4)
        .fusion(false)
        .tracing(true)
        .build();
    rt.register("nop", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[4]).unwrap();
    for _ in 0..3 {
        rt.task("nop").read_write(&a).submit().unwrap();
    }
    assert_eq!(
        launched_tokens(&rt).len(),
        0,
        "three tasks wait in the window"
    );
    rt.task("nop").read_write(&a).submit().unwrap();
    assert_eq!(launched_tokens(&rt).len(), 4, "the fourth fills it");
    rt.task("nop").read_write(&a).submit().unwrap();
    assert_eq!(history(&rt).len(), 5, "a fence analyses what is left");
}

#[test]
fn stores_are_freed_once_handles_and_tasks_are_gone() {
    let rt = Runtime::new(2);
    rt.register("inc", |ctx| {
        ctx.write::<f64>(0)
            .as_mut_slice()
            .iter_mut()
            .for_each(|v| *v += 1.0)
    })
    .unwrap();
    let s = rt.create(DType::F64, &[100]).unwrap();
    rt.task("inc").read_write(&s).submit().unwrap();
    rt.task("inc").read_write(&s).submit().unwrap();
    let weak = Arc::downgrade(&s.root);
    drop(s);
    rt.fence().unwrap();
    assert!(
        weak.upgrade().is_none(),
        "finished tasks must not keep the store alive"
    );
}

#[test]
fn handles_can_be_shared_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Runtime>();
    send_sync::<Store>();
    send_sync::<crate::Future>();
}

#[test]
fn tokens_tell_apart_what_the_analysis_tells_apart() {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(1)
        .tracing(true)
        .build();
    rt.register("t", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[8]).unwrap();
    let one = || rt.task("t").read_write(&a).launch_domain(&[1]);
    one().scalar(1u64).submit().unwrap();
    one().scalar(1i64).submit().unwrap();
    one().future(&Future::ready(1u64)).submit().unwrap();
    one().scalar(1u64).submit_reduce(ReduceOp::Sum).unwrap();
    one().scalar(1u64).submit_reduce(ReduceOp::Max).unwrap();
    // Two views of one store, each launched whole (no partition tells them apart).
    let view = |lo, hi| a.slice(0, lo..hi).unwrap();
    rt.task("t")
        .read_write(&view(0, 4))
        .launch_domain(&[1])
        .submit()
        .unwrap();
    rt.task("t")
        .read_write(&view(4, 8))
        .launch_domain(&[1])
        .submit()
        .unwrap();
    // The same task again, with another future: a candidate for the same trace entry.
    one().future(&Future::ready(2u64)).submit().unwrap();
    let h = history(&rt);
    assert_eq!(h.len(), 8);
    let distinct: std::collections::HashSet<u64> = h[..7].iter().copied().collect();
    assert_eq!(
        distinct.len(),
        7,
        "scalar kinds, futures, results and views differ: {h:x?}"
    );
    assert_eq!(h[7], h[2], "a future hashes as a future, whichever it is");
}
