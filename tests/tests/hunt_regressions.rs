//! Regressions found by the adversarial hunt (`hunt_streams.rs`, `hunt_programs.rs`), each
//! the minimal program that showed the bug, run in the configurations that disagreed.

use tessera::runtime::{Chunk, DType, ReduceOp, Runtime, Store};

fn runtime(window: usize, fusion: bool, tracing: bool) -> Runtime {
    Runtime::builder()
        .threads(2)
        .window_size(window)
        .fusion(fusion)
        .tracing(tracing)
        .actors(tracing)
        .trace_sampling(1)
        .build()
}

/// Registers `inc` (element-wise u32 `y = x + 1`), `hist` (a hand task summing each point's
/// first element of `x` into the broadcast `acc`) and `total` (element-wise u64 sum of `x` as a result).
fn register(rt: &Runtime) {
    rt.register_elementwise::<u32>("inc", |c: &mut Chunk<'_, u32>| {
        let (ins, outs) = c.split();
        for (y, x) in outs[0].iter_mut().zip(ins[0].iter()) {
            *y = x.wrapping_add(1);
        }
    })
    .unwrap();
    rt.register("hist", |ctx| {
        let x = ctx.read::<u32>(0);
        let mut acc = ctx.reduce::<u32>(1);
        // One element a point: the points' partial sums overflow only when folded.
        if let Some(i) = x.range().next() {
            acc.reduce_at(0, x.at(i));
        }
    })
    .unwrap();
    rt.register_elementwise::<u64>("total", |c: &mut Chunk<'_, u64>| {
        let (ins, _) = c.split();
        let s = ins[0].iter().fold(0u64, |a, b| a.wrapping_add(*b));
        c.add_result(s);
    })
    .unwrap();
}

/// What folds that overflow in the finish step leave: `y` (written by a task fused with the
/// overflowing one, or not), `acc` and the future (`None`: an error), and `y`, `acc` and the future
/// again after a fence.
fn fold_failure_outcome(rt: &Runtime) -> Vec<Option<Vec<u64>>> {
    register(rt);
    let n = 8;
    // Two points' values of x (and of big, summed) overflow when the finish step folds them
    // (and wrap).
    let x = rt.from_vec(&[n], vec![u32::MAX / 2 + 1; n]).unwrap();
    let y = rt.create(DType::U32, &[n]).unwrap();
    let acc = rt.from_vec(&[1], vec![1u32]).unwrap();
    let big = rt.from_vec(&[n], vec![u64::MAX / 6; n]).unwrap();
    let z = rt.create(DType::U32, &[n]).unwrap();
    let inc = |out: &Store| {
        rt.task("inc")
            .read(&x)
            .write(out)
            .align(&x, out)
            .launch_domain(&[2])
            .submit()
            .unwrap()
    };
    inc(&y);
    rt.task("hist")
        .read(&x)
        .reduce(&acc, ReduceOp::Sum)
        .broadcast(&acc, &[0])
        .launch_domain(&[2])
        .submit()
        .unwrap();
    inc(&z);
    let f = rt
        .task("total")
        .read(&big)
        .launch_domain(&[2])
        .submit_reduce(ReduceOp::Sum)
        .unwrap();
    let u = |s: &Store| {
        rt.read::<u32>(s)
            .ok()
            .map(|v| v.into_iter().map(u64::from).collect())
    };
    let mut out = vec![
        u(&y),
        u(&z),
        u(&acc),
        f.get().ok().map(|v| vec![v.as_u64()]),
    ];
    rt.fence().unwrap();
    out.extend([u(&y), u(&z), u(&acc)]);
    out
}

/// Regression (found by `hunt_integer_and_view_streams_match_the_plain_runtime`: a u32
/// reduction into a broadcast store, fused after an element-wise chain): a panic in a fused
/// task's finish step (an integer fold that overflowed, which panicked in a debug build)
/// failed the whole fused task and poisoned every store it wrote whole, so `y`, which a
/// sub-task fused with the failing fold wrote correctly, could not be read; unfused only the
/// folding task failed. The fix fails the fold's sub-task alone (`fold_panicked`); since then
/// integer folds wrap in every build (stop 61), so the folds here no longer panic, and fused
/// must give the same wrapped values as unfused.
#[test]
fn a_fold_that_overflows_in_a_fused_finish_step_gives_what_unfused_gives() {
    let want = fold_failure_outcome(&runtime(1, false, false));
    assert_eq!(want[0], Some(vec![(u32::MAX / 2 + 2) as u64; 8]));
    // 1 + 2 * 2^31 and 8 * (2^64 - 1) / 6, both wrapped.
    assert_eq!(want[2], Some(vec![1]), "the fold into acc wraps");
    let total = (0..8).fold(0u64, |a, _| a.wrapping_add(u64::MAX / 6));
    assert_eq!(want[3], Some(vec![total]), "the result's fold wraps");
    for (window, tracing) in [(2, false), (4, false), (16, false), (4, true), (16, true)] {
        let rt = runtime(window, true, tracing);
        let got = fold_failure_outcome(&rt);
        assert_eq!(got, want, "window {window}, tracing {tracing}");
        assert!(
            rt.stats().fused_launches > 0,
            "window {window}: nothing fused"
        );
    }
}

/// The errors a program sees when a sub-task has both a poisoned input and a failed future:
/// `s` written by a failing task, a sum of `s` (its future fails), then `s += sum` fused with
/// an independent task, then the reads of `s` and `w` and the future's error.
fn poisoned_input_and_failed_future(rt: &Runtime) -> Vec<Result<Vec<f64>, String>> {
    rt.register_elementwise::<f64>("boom", |_c: &mut Chunk<'_, f64>| panic!("boom"))
        .unwrap();
    rt.register_elementwise::<f64>("sum", |c: &mut Chunk<'_, f64>| {
        let (ins, _) = c.split();
        let s: f64 = ins[0].iter().sum();
        c.add_result(s);
    })
    .unwrap();
    rt.register_elementwise::<f64>("add", |c: &mut Chunk<'_, f64>| {
        let f = c.scalar(0).as_f64();
        let (_, outs) = c.split();
        outs[0].iter_mut().for_each(|x| *x += f);
    })
    .unwrap();
    let n = 8;
    let s = rt.from_vec(&[n], vec![1.0; n]).unwrap();
    let w = rt.from_vec(&[n], vec![2.0; n]).unwrap();
    rt.task("boom").write(&s).submit().unwrap();
    let f = rt
        .task("sum")
        .read(&s)
        .submit_reduce(ReduceOp::Sum)
        .unwrap();
    rt.task("add").read_write(&s).future(&f).submit().unwrap();
    rt.task("add")
        .read_write(&w)
        .future(&tessera::runtime::Future::ready(1.0))
        .submit()
        .unwrap();
    let text = |r: tessera::runtime::Result<Vec<f64>>| r.map_err(|e| e.to_string());
    vec![
        text(rt.read::<f64>(&s)),
        text(rt.read::<f64>(&w)),
        text(f.get().map(|v| vec![v.as_f64()])),
    ]
}

/// Regression (found by `hunt_panicking_integer_streams_match_the_plain_runtime` once it
/// compared errors' texts): a point looks at its poisoned inputs before its failed futures,
/// but a fused sub-task looked at its futures first, so the same failure read as "future
/// argument 0 failed: ..." fused and "input store#N was not computed: ..." unfused.
#[test]
fn a_fused_sub_task_reports_a_poisoned_input_before_a_failed_future() {
    let want = poisoned_input_and_failed_future(&runtime(1, false, false));
    assert!(
        want[0]
            .as_ref()
            .is_err_and(|e| e.contains("was not computed")),
        "{want:?}"
    );
    assert_eq!(want[1], Ok(vec![3.0; 8]));
    for window in [2, 4, 16] {
        let rt = runtime(window, true, false);
        assert_eq!(
            poisoned_input_and_failed_future(&rt),
            want,
            "window {window}"
        );
        assert!(
            rt.stats().fused_launches > 0,
            "window {window}: nothing fused"
        );
    }
}

/// Two iterations of `t = x * 0.5 + 1; w = boom(t); y += w` (`t`, `w` dropped, `boom`
/// panics): the error reading `y` gives, and `x`.
fn failing_chain_twice(rt: &Runtime) -> Vec<Result<Vec<f64>, String>> {
    rt.register_elementwise::<f64>("axpb", |c: &mut Chunk<'_, f64>| {
        let (ins, outs) = c.split();
        for (d, s) in outs[0].iter_mut().zip(ins[0].iter()) {
            *d = s * 0.5 + 1.0;
        }
    })
    .unwrap();
    rt.register_elementwise::<f64>("boom", |_c: &mut Chunk<'_, f64>| panic!("boom"))
        .unwrap();
    rt.register_elementwise::<f64>("add_in", |c: &mut Chunk<'_, f64>| {
        let (ins, outs) = c.split();
        for (d, s) in outs[0].iter_mut().zip(ins[0].iter()) {
            *d += s;
        }
    })
    .unwrap();
    let n = 8;
    let x = rt.from_vec(&[n], vec![1.0; n]).unwrap();
    let y = rt.from_vec(&[n], vec![2.0; n]).unwrap();
    for _ in 0..2 {
        let t = rt.create(DType::F64, &[n]).unwrap();
        let w = rt.create(DType::F64, &[n]).unwrap();
        rt.task("axpb")
            .read(&x)
            .write(&t)
            .align(&x, &t)
            .submit()
            .unwrap();
        rt.task("boom")
            .read(&t)
            .write(&w)
            .align(&t, &w)
            .submit()
            .unwrap();
        rt.task("add_in")
            .read(&w)
            .read_write(&y)
            .align(&w, &y)
            .submit()
            .unwrap();
    }
    let text = |r: tessera::runtime::Result<Vec<f64>>| r.map_err(|e| e.to_string());
    vec![text(rt.read::<f64>(&y)), text(rt.read::<f64>(&x))]
}

/// Regression (found by `hunt_panicking_integer_streams_match_the_plain_runtime`, its
/// `BoomTemps`): a fused point settles its sub-tasks' inputs before any runs, so in the
/// second iteration `y += w` failed at once for `y` (poisoned by the first iteration) and
/// kept that error when `boom`, earlier in the same fused task, then failed; unfused, `boom`
/// fails first and `y += w` fails for `w`, its first argument: the errors' texts differed
/// ("input store#1 was not computed: ..." against "... store#N ...: boom"). Now a panic
/// settles the point's sub-tasks afresh from their own panics, in issue order.
#[test]
fn a_fused_sub_task_failed_early_reports_the_input_an_earlier_panic_poisoned() {
    let want = failing_chain_twice(&runtime(1, false, false));
    assert!(
        want[0].as_ref().is_err_and(|e| e.ends_with("boom")),
        "{want:?}"
    );
    for (window, tracing) in [(3, false), (4, false), (16, false), (3, true)] {
        let rt = runtime(window, true, tracing);
        assert_eq!(
            failing_chain_twice(&rt),
            want,
            "window {window}, tracing {tracing}"
        );
        assert!(
            rt.stats().fused_launches > 0,
            "window {window}: nothing fused"
        );
    }
}

/// `x` fails (a panicking writer), then two reductions of `x` into `acc` and, between them,
/// a failing rewrite of `x` from `y`: both reductions fail, for different errors. Returns
/// what reading `acc` and a partly rewritten `z` give.
fn two_failed_writers_of_one_store(rt: &Runtime) -> Vec<Result<Vec<f64>, String>> {
    rt.register("fail_w", |ctx| {
        let v = ctx.scalar(0).as_f64();
        assert!(v < 0.0, "fail_w {v}");
        ctx.write::<f64>(0).fill(v);
    })
    .unwrap();
    rt.register("sum_into", |ctx| {
        let x = ctx.read::<f64>(0);
        let mut acc = ctx.reduce::<f64>(1);
        for i in x.range() {
            acc.reduce_at(0, x.at(i));
        }
    })
    .unwrap();
    let n = 4;
    let x = rt.from_vec(&[n], vec![1.0; n]).unwrap();
    let acc = rt.from_vec(&[1], vec![0.0]).unwrap();
    let z = rt.from_vec(&[n], vec![5.0; n]).unwrap();
    let half = z.slice(0, 0..2).unwrap();
    let fail = |s: &Store, v: f64| {
        let t = rt.task("fail_w").write(s).scalar(v);
        t.launch_domain(&[1]).submit().unwrap()
    };
    let sum = || {
        rt.task("sum_into")
            .read(&x)
            .reduce(&acc, ReduceOp::Sum)
            .broadcast(&acc, &[0])
            .launch_domain(&[1])
            .submit()
            .unwrap()
    };
    fail(&x, 1.0);
    sum();
    fail(&x, 2.0);
    sum();
    // Two failing partial writes of `z`: the first one's error is what a reader sees.
    fail(&half, 3.0);
    fail(&half, 4.0);
    let text = |r: tessera::runtime::Result<Vec<f64>>| r.map_err(|e| e.to_string());
    vec![text(rt.read::<f64>(&acc)), text(rt.read::<f64>(&z))]
}

/// Regression (found by `hunt_panicking_integer_streams_match_the_plain_runtime` with
/// windows of 4: two failing u32 histograms into one store fused into one task): a reader
/// of cells several failed tasks wrote (reduced into, or wrote partly) sees the earliest
/// failure since the last whole rewrite; a fused task recorded the *last* failed sub-task's
/// error for them (and a later sub-task reading them saw the last one too), so `acc` and
/// `z` gave another error's text fused.
#[test]
fn several_failed_writers_of_one_store_fused_report_the_first() {
    let want = two_failed_writers_of_one_store(&runtime(1, false, false));
    assert!(
        want[0].as_ref().is_err_and(|e| e.contains("fail_w 1")),
        "{want:?}"
    );
    assert!(
        want[1].as_ref().is_err_and(|e| e.contains("fail_w 3")),
        "{want:?}"
    );
    for (window, tracing) in [(4, false), (8, false), (8, true)] {
        let rt = runtime(window, true, tracing);
        let got = two_failed_writers_of_one_store(&rt);
        assert_eq!(got, want, "window {window}, tracing {tracing}");
        assert!(
            rt.stats().fused_launches > 0,
            "window {window}: nothing fused"
        );
    }
}

/// Two reductions into one store failing at different points (the first at point 1, the
/// second at point 0), and the error reading the store gives.
fn reductions_failing_at_different_points(rt: &Runtime) -> Result<Vec<f64>, String> {
    rt.register("sum_fail_at", |ctx| {
        let at = ctx.scalar(0).as_u64() as usize;
        assert!(ctx.linear_point() != at, "sum fails at {at}");
        let x = ctx.read::<f64>(0);
        let mut acc = ctx.reduce::<f64>(1);
        for i in x.range() {
            acc.reduce_at(0, x.at(i));
        }
    })
    .unwrap();
    let x = rt.from_vec(&[4], vec![1.0; 4]).unwrap();
    let acc = rt.from_vec(&[1], vec![0.0]).unwrap();
    for at in [1u64, 0] {
        rt.task("sum_fail_at")
            .read(&x)
            .reduce(&acc, ReduceOp::Sum)
            .broadcast(&acc, &[0])
            .scalar(at)
            .launch_domain(&[2])
            .submit()
            .unwrap();
    }
    rt.read::<f64>(&acc).map_err(|e| e.to_string())
}

/// Regression (a review of the fix above): fused, each failed point poisoned the cells it
/// reduces into with the first sub-task that failed *at that point*, so the second
/// reduction's point-0 failure came before the first's point-1 failure in the store (same
/// position and cells: the lowest point wins); unfused, the first reduction's failure is the
/// earlier one. Now a fused task poisons reduced stores at its finish step only, with the
/// first failed reduction's error.
#[test]
fn reductions_failing_at_different_points_fused_report_the_first_reduction() {
    let want = reductions_failing_at_different_points(&runtime(1, false, false));
    assert!(
        want.as_ref().is_err_and(|e| e.contains("sum fails at 1")),
        "{want:?}"
    );
    for window in [2, 4] {
        let rt = runtime(window, true, false);
        assert_eq!(
            reductions_failing_at_different_points(&rt),
            want,
            "window {window}"
        );
        assert!(
            rt.stats().fused_launches > 0,
            "window {window}: nothing fused"
        );
    }
}
