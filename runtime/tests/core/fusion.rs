//! Task fusion: solving ahead in the window, the four constraints on hand-built windows,
//! temporaries (Definition 4), the memo, and element-wise kernels fused into one loop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_runtime::{
    Chunk, DType, ReduceOp, Result, Runtime, RuntimeError, Stats, Store, TaskLauncher,
};

pub(crate) fn rt(window: usize, fusion: bool) -> Runtime {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(4)
        .window_size(window)
        .fusion(fusion)
        .build();
    register(&rt).unwrap();
    rt
}

pub(crate) fn register(rt: &Runtime) -> Result<()> {
    // y = a * x + b, by hand and element-wise.
    rt.register("axpb", |ctx| {
        let (a, b) = (ctx.scalar(0).as_f64(), ctx.scalar(1).as_f64());
        let x = ctx.read::<f64>(0);
        let mut y = ctx.write::<f64>(1);
        for i in y.range() {
            y.set_at(i, a * x.at(i) + b);
        }
    })?;
    rt.register_elementwise::<f64>("ew_axpb", |c: &mut Chunk<'_, f64>| {
        let (a, b) = (c.scalar(0).as_f64(), c.scalar(1).as_f64());
        let (ins, outs) = c.split();
        for (y, x) in outs[0].iter_mut().zip(ins[0].iter()) {
            *y = a * x + b;
        }
    })?;
    rt.register_elementwise::<f64>("ew_mul", |c: &mut Chunk<'_, f64>| {
        let (ins, outs) = c.split();
        for ((z, x), y) in outs[0].iter_mut().zip(ins[0].iter()).zip(ins[1].iter()) {
            *z = x * y;
        }
    })?;
    // y += a * x, `a` a scalar or future of the element type.
    rt.register_elementwise::<f64>("ew_axpy", |c: &mut Chunk<'_, f64>| {
        let a: f64 = c.scalar_value(0);
        let (ins, outs) = c.split();
        for (y, x) in outs[0].iter_mut().zip(ins[0].iter()) {
            *y += a * x;
        }
    })?;
    rt.register_elementwise::<f64>("ew_dot", |c: &mut Chunk<'_, f64>| {
        let (ins, _) = c.split();
        let s: f64 = ins[0].iter().zip(ins[1].iter()).map(|(x, y)| x * y).sum();
        c.add_result(s);
    })?;
    rt.register("sum_into", |ctx| {
        let x = ctx.read::<f64>(0);
        let mut acc = ctx.reduce::<f64>(1);
        for i in x.range() {
            acc.reduce_at(0, x.at(i));
        }
    })?;
    rt.register("positives", |ctx| {
        let x = ctx.read::<f64>(0);
        ctx.emit(
            1,
            x.as_slice()
                .iter()
                .copied()
                .filter(|&v| v > 0.0)
                .collect::<Vec<f64>>(),
        );
    })?;
    rt.register("total", |ctx| {
        ctx.set_result(ctx.read::<f64>(0).as_slice().iter().sum::<f64>())
    })
}

/// The launcher of `y = a·x + b` (task `name`), `x` and `y` aligned.
fn axpb_task<'rt>(
    rt: &'rt Runtime,
    name: &str,
    (x, y): (&Store, &Store),
    (a, b): (f64, f64),
) -> TaskLauncher<'rt> {
    rt.task(name)
        .read(x)
        .write(y)
        .scalar(a)
        .scalar(b)
        .align(x, y)
}

pub(crate) fn axpb(rt: &Runtime, name: &str, x: &Store, y: &Store, a: f64, b: f64) {
    axpb_task(rt, name, (x, y), (a, b)).submit().unwrap();
}

/// [`axpb`] over a launch domain of `points` points (a different domain ends a prefix).
fn axpb_over(
    rt: &Runtime,
    name: &str,
    (x, y): (&Store, &Store),
    (a, b): (f64, f64),
    points: usize,
) {
    axpb_task(rt, name, (x, y), (a, b))
        .launch_domain(&[points])
        .submit()
        .unwrap();
}

fn input(rt: &Runtime, n: usize) -> Store {
    rt.from_vec(&[n], (0..n).map(|i| i as f64 - 3.0).collect())
        .unwrap()
}

/// `out = a * b` cell by cell (`ew_mul`), aligned.
pub(crate) fn mul(rt: &Runtime, a: &Store, b: &Store, out: &Store) {
    rt.task("ew_mul")
        .read(a)
        .read(b)
        .write(out)
        .align(a, b)
        .align(a, out)
        .submit()
        .unwrap();
}

pub(crate) fn launched(rt: &Runtime) -> Stats {
    rt.fence().unwrap();
    rt.stats()
}

#[test]
fn an_unbound_store_read_inside_the_window_is_not_never_bound() {
    // Regression: the reader used to fail with `NeverBound` at issue while its producer still
    // waited in a window larger than one.
    for window in [1, 4, 16] {
        let rt = rt(window, true);
        let x = input(&rt, 16);
        let pos = rt.create_unbound(DType::F64);
        rt.task("positives")
            .read(&x)
            .write_unbound(&pos)
            .submit()
            .unwrap();
        let t = rt
            .task("total")
            .read(&pos)
            .submit_reduce(ReduceOp::Sum)
            .unwrap();
        assert_eq!(t.get().unwrap().as_f64(), (1..=12).sum::<i32>() as f64);
    }
}

#[test]
fn an_aligned_chain_fuses_into_one_task() {
    let rt = rt(8, true);
    let x = input(&rt, 64);
    let (y, z) = (
        rt.create(DType::F64, &[64]).unwrap(),
        rt.create(DType::F64, &[64]).unwrap(),
    );
    axpb(&rt, "axpb", &x, &y, 2.0, 1.0);
    axpb(&rt, "axpb", &y, &z, 3.0, -1.0);
    axpb(&rt, "axpb", &z, &y, 1.0, 1.0);
    let s = launched(&rt);
    assert_eq!(
        (s.tasks_issued, s.tasks_launched, s.fused_launches),
        (3, 1, 1)
    );
    let want: Vec<f64> = (0..64)
        .map(|i| 3.0 * (2.0 * (i as f64 - 3.0) + 1.0))
        .collect();
    assert_eq!(rt.read::<f64>(&y).unwrap(), want);
}

/// The window keeps the boxes of launched tasks for the next tasks solved (emptied): a store
/// the application drops after its tasks ran, launched alone or fused, is freed then, not
/// when a box happens to be reused.
#[test]
fn stores_of_launched_tasks_are_freed_when_the_application_drops_them() {
    let rt = rt(8, true);
    let x = input(&rt, 64);
    let base = launched(&rt).bytes_resident;
    {
        let (y, z, w) = (
            rt.create(DType::F64, &[64]).unwrap(),
            rt.create(DType::F64, &[64]).unwrap(),
            rt.create(DType::F64, &[64]).unwrap(),
        );
        // [y = 2x + 1, z = 3y - 1] fused; w over another launch domain, alone.
        axpb(&rt, "axpb", &x, &y, 2.0, 1.0);
        axpb(&rt, "axpb", &y, &z, 3.0, -1.0);
        axpb_over(&rt, "axpb", (&z, &w), (1.0, 0.0), 3);
        let s = launched(&rt);
        assert_eq!((s.tasks_launched, s.fused_launches), (2, 1), "{s:?}");
        assert_eq!(s.bytes_resident, base + 3 * 64 * 8);
        assert_eq!(
            rt.read::<f64>(&w).unwrap()[4],
            3.0 * (2.0 * 1.0 + 1.0) - 1.0
        );
    }
    assert_eq!(launched(&rt).bytes_resident, base, "y, z and w are freed");
}

#[test]
fn different_launch_domains_end_the_prefix() {
    let rt = rt(8, true);
    let x = input(&rt, 64);
    let y = rt.create(DType::F64, &[64]).unwrap();
    let z = rt.create(DType::F64, &[64]).unwrap();
    let go = |a: &Store, b: &Store, d: usize| {
        rt.task("axpb")
            .read(a)
            .write(b)
            .scalar(1.0)
            .scalar(1.0)
            .align(a, b)
            .launch_domain(&[d])
            .submit()
            .unwrap()
    };
    go(&x, &y, 4);
    go(&y, &z, 2);
    let s = launched(&rt);
    assert_eq!((s.tasks_launched, s.fused_launches), (2, 0));
    assert_eq!(rt.read::<f64>(&z).unwrap()[10], 7.0 + 2.0);
}

#[test]
fn a_write_then_a_read_through_another_partition_ends_the_prefix() {
    let rt = rt(8, true);
    let x = input(&rt, 64);
    let y = rt.create(DType::F64, &[64]).unwrap();
    let acc = rt.create(DType::F64, &[1]).unwrap();
    axpb(&rt, "axpb", &x, &y, 1.0, 0.0);
    // Every point reads the whole of `y` (broadcast): not the tiles it was written through.
    rt.task("sum_into")
        .read(&y)
        .reduce(&acc, ReduceOp::Sum)
        .broadcast(&y, &[0])
        .broadcast(&acc, &[0])
        .launch_domain(&[2])
        .submit()
        .unwrap();
    let s = launched(&rt);
    assert_eq!((s.tasks_launched, s.fused_launches), (2, 0), "{s:?}");
    let total: f64 = (0..64).map(|i| i as f64 - 3.0).sum();
    assert_eq!(
        rt.read::<f64>(&acc).unwrap(),
        vec![2.0 * total],
        "each point read all of y"
    );
}

#[test]
fn a_read_then_a_write_through_another_partition_ends_the_prefix() {
    let rt = rt(8, true);
    let x = input(&rt, 64);
    let y = rt.create(DType::F64, &[64]).unwrap();
    // Reads `x` through the left half of its views, then a task writes all of `x`.
    let left = x.slice(0, 0..32).unwrap();
    let half = rt.create(DType::F64, &[32]).unwrap();
    axpb(&rt, "axpb", &left, &half, 1.0, 0.0);
    axpb(&rt, "axpb", &y, &x, 0.0, 5.0);
    let s = launched(&rt);
    assert_eq!(s.fused_launches, 0, "{s:?}");
    assert_eq!(
        rt.read::<f64>(&half).unwrap()[0],
        -3.0,
        "read before the write"
    );
    assert_eq!(rt.read::<f64>(&x).unwrap(), vec![5.0; 64]);
}

#[test]
fn reductions_with_one_operator_fuse_and_a_read_after_a_reduction_does_not() {
    let rt = rt(8, true);
    let x = input(&rt, 64);
    let acc = rt.create(DType::F64, &[1]).unwrap();
    let sum = |r: &Runtime| {
        r.task("sum_into")
            .read(&x)
            .reduce(&acc, ReduceOp::Sum)
            .broadcast(&acc, &[0])
            .submit()
            .unwrap()
    };
    sum(&rt);
    sum(&rt);
    let s = launched(&rt);
    assert_eq!((s.tasks_launched, s.fused_launches), (1, 1), "{s:?}");
    let total: f64 = (0..64).map(|i| i as f64 - 3.0).sum();
    assert_eq!(rt.read::<f64>(&acc).unwrap(), vec![2.0 * total]);
    let before = rt.stats();
    sum(&rt);
    let t = rt
        .task("total")
        .read(&acc)
        .launch_domain(&[1])
        .submit_reduce(ReduceOp::Sum)
        .unwrap();
    assert_eq!(t.get().unwrap().as_f64(), 3.0 * total);
    let s = launched(&rt).since(&before);
    assert_eq!((s.tasks_launched, s.fused_launches), (2, 0), "{s:?}");
}

/// One step of the idiomatic pattern: the temporary's handle is dropped at the end of the
/// scope, after its tasks are issued and before the window is flushed.
fn two_step(rt: &Runtime, x: &Store, y: &Store, name: &str) {
    let t = rt.create(DType::F64, &[x.shape().unwrap()[0]]).unwrap();
    axpb(rt, name, x, &t, 2.0, 0.0);
    axpb(rt, name, &t, y, 1.0, 1.0);
}

#[test]
fn a_dead_intermediate_is_never_allocated() {
    for name in ["axpb", "ew_axpb"] {
        let n = 4096;
        let rt = rt(8, true);
        let x = input(&rt, n);
        let y = rt.create(DType::F64, &[n]).unwrap();
        let before = rt.stats();
        two_step(&rt, &x, &y, name);
        let s = launched(&rt).since(&before);
        assert_eq!(s.temporaries_eliminated, 1, "{name}: {s:?}");
        assert_eq!(s.bytes_not_allocated, 8 * n as u64);
        assert_eq!(
            s.bytes_allocated,
            8 * n as u64,
            "{name}: only `y` is allocated"
        );
        let want: Vec<f64> = (0..n).map(|i| 2.0 * (i as f64 - 3.0) + 1.0).collect();
        assert_eq!(rt.read::<f64>(&y).unwrap(), want);
    }
}

#[test]
fn each_negative_case_of_definition_4_keeps_the_store() {
    let n = 64;
    let check = |what: &str, f: &dyn Fn(&Runtime, &Store, &Store) -> Option<Store>| {
        let rt = rt(8, true);
        let x = input(&rt, n);
        let y = rt.create(DType::F64, &[n]).unwrap();
        let kept = f(&rt, &x, &y);
        let s = launched(&rt);
        assert_eq!(s.temporaries_eliminated, 0, "{what}: {s:?}");
        if let Some(t) = kept {
            assert!(t.is_allocated(), "{what}");
            assert_eq!(rt.read::<f64>(&t).unwrap()[3], 0.0 * 2.0, "{what}");
        }
    };
    check("an application handle is alive", &|rt, x, y| {
        let t = rt.create(DType::F64, &[n]).unwrap();
        axpb(rt, "axpb", x, &t, 2.0, 0.0);
        axpb(rt, "axpb", &t, y, 1.0, 1.0);
        Some(t)
    });
    check("a later task reads it", &|rt, x, y| {
        let t = rt.create(DType::F64, &[n]).unwrap();
        axpb(rt, "axpb", x, &t, 2.0, 0.0);
        axpb(rt, "axpb", &t, y, 1.0, 1.0);
        // A reduction over it ends the prefix (partition `None`) and still needs it.
        let acc = rt.create(DType::F64, &[1]).unwrap();
        rt.task("sum_into")
            .read(&t)
            .reduce(&acc, ReduceOp::Sum)
            .broadcast(&t, &[0])
            .submit()
            .unwrap();
        None
    });
    check("it holds data the prefix did not write", &|rt, x, y| {
        let t = input(rt, n);
        axpb(rt, "axpb", x, &t, 2.0, 0.0);
        axpb(rt, "axpb", &t, y, 1.0, 1.0);
        None
    });
    check("a launched task wrote it before", &|rt, x, y| {
        let t = rt.create(DType::F64, &[n]).unwrap();
        rt.fill(&t, 1.0).unwrap();
        rt.fence().unwrap();
        axpb(rt, "axpb", x, &t, 2.0, 0.0);
        axpb(rt, "axpb", &t, y, 1.0, 1.0);
        None
    });
    check("it is only reduced", &|rt, x, _| {
        let t = rt.create(DType::F64, &[1]).unwrap();
        for _ in 0..2 {
            rt.task("sum_into")
                .read(x)
                .reduce(&t, ReduceOp::Sum)
                .broadcast(&t, &[0])
                .submit()
                .unwrap();
        }
        None
    });
}

/// The thesis' Figure 4.6: four tasks over three stores, issued twice over other stores.
fn figure_4_6(rt: &Runtime, s: &[Store; 3], broadcast_third: bool) {
    let step = |a: &Store, b: &Store, k: f64| axpb(rt, "axpb", a, b, k, 1.0);
    step(&s[0], &s[1], 1.0);
    step(&s[1], &s[0], 2.0);
    if broadcast_third {
        rt.task("axpb")
            .read(&s[0])
            .write(&s[2])
            .scalar(3.0)
            .scalar(1.0)
            .broadcast(&s[0], &[0])
            .submit()
            .unwrap();
    } else {
        step(&s[0], &s[2], 3.0);
    }
    step(&s[2], &s[0], 4.0);
    rt.fence().unwrap();
}

#[test]
fn isomorphic_windows_hit_the_memo_and_a_different_partition_misses() {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(4)
        .window_size(4)
        .build();
    register(&rt).unwrap();
    let stores = || -> [Store; 3] { std::array::from_fn(|_| input(&rt, 64)) };
    let (a, b) = (stores(), stores());
    figure_4_6(&rt, &a, false);
    let first = rt.stats();
    assert_eq!((first.fusion_memo_misses, first.fusion_memo_hits), (1, 0));
    figure_4_6(&rt, &b, false);
    let s = rt.stats().since(&first);
    assert_eq!(
        (s.fusion_memo_misses, s.fusion_memo_hits),
        (0, 1),
        "renamed stores: {s:?}"
    );
    assert_eq!(
        rt.read::<f64>(&a[0]).unwrap(),
        rt.read::<f64>(&b[0]).unwrap()
    );
    let before = rt.stats();
    let c = stores();
    figure_4_6(&rt, &c, true);
    let s = rt.stats().since(&before);
    assert_eq!(s.fusion_memo_hits, 0, "one partition differs: {s:?}");
    assert!(s.fusion_memo_misses >= 1);
}

#[test]
fn a_window_that_differs_only_in_a_temporary_flag_misses_the_memo() {
    // The same two tasks twice over other stores: first the intermediate is dropped (a
    // temporary), then the application keeps it. The stores, partitions and privileges are
    // isomorphic; only the temporary flag tells them apart. A hit would reuse a shape whose
    // intermediate is task-local scratch and leave the kept store unwritten.
    let n = 64;
    let rt = rt(8, true);
    let x = input(&rt, n);
    let (y, z) = (
        rt.create(DType::F64, &[n]).unwrap(),
        rt.create(DType::F64, &[n]).unwrap(),
    );
    two_step(&rt, &x, &y, "axpb");
    let first = launched(&rt);
    assert_eq!((first.fusion_memo_misses, first.fusion_memo_hits), (1, 0));
    assert_eq!(first.temporaries_eliminated, 1);
    let t = rt.create(DType::F64, &[n]).unwrap();
    axpb(&rt, "axpb", &x, &t, 2.0, 0.0);
    axpb(&rt, "axpb", &t, &z, 1.0, 1.0);
    let s = launched(&rt).since(&first);
    assert_eq!(
        (
            s.fusion_memo_misses,
            s.fusion_memo_hits,
            s.temporaries_eliminated
        ),
        (1, 0, 0),
        "the kept intermediate: {s:?}"
    );
    let want: Vec<f64> = (0..n).map(|i| 2.0 * (i as f64 - 3.0)).collect();
    assert_eq!(rt.read::<f64>(&t).unwrap(), want);
    assert_eq!(rt.read::<f64>(&z).unwrap(), rt.read::<f64>(&y).unwrap());
}

#[test]
fn kernel_fused_results_equal_unfused_ones() {
    // Long enough for several chunks per point, odd so the last chunk is short.
    let n = 3 * 2048 * 2 + 17;
    let run = |fusion: bool| {
        let rt = rt(16, fusion);
        let x = input(&rt, n);
        let y = rt
            .from_vec(&[n], (0..n).map(|i| (i % 7) as f64 * 0.25).collect())
            .unwrap();
        let out = rt.create(DType::F64, &[n]).unwrap();
        let dot = {
            let t = rt.create(DType::F64, &[n]).unwrap();
            let u = rt.create(DType::F64, &[n]).unwrap();
            axpb(&rt, "ew_axpb", &x, &t, 0.5, 0.1);
            mul(&rt, &t, &y, &u);
            axpb(&rt, "ew_axpb", &u, &out, 3.0, -0.3);
            rt.task("ew_dot")
                .read(&out)
                .read(&y)
                .align(&out, &y)
                .submit_reduce(ReduceOp::Sum)
                .unwrap()
        };
        let d = dot.get().unwrap().as_f64();
        (rt.read::<f64>(&out).unwrap(), d.to_bits(), launched(&rt))
    };
    let (fused, unfused) = (run(true), run(false));
    assert_eq!(fused.0, unfused.0);
    assert_eq!(
        fused.1, unfused.1,
        "the dot folds chunk by chunk either way"
    );
    assert_eq!(
        (fused.2.tasks_launched, fused.2.temporaries_eliminated),
        (1, 2),
        "{:?}",
        fused.2
    );
    assert_eq!(unfused.2.tasks_launched, 4);
}

/// A temporary whose first use in a kernel-fused task reads it (`t += x` on a fresh `t`) sees
/// zeros in every chunk, as the store it replaces would: the chunk scratch that stands for
/// it must not carry the previous chunk's (or the previous point's) values.
#[test]
fn a_temporary_read_before_written_starts_at_zero_in_every_chunk() {
    // Several chunks per point, the last one short.
    let n = 3 * 2048 * 2 + 17;
    let run = |fusion: bool| {
        let rt = rt(16, fusion);
        let x = input(&rt, n);
        let out = rt.create(DType::F64, &[n]).unwrap();
        // Four launches of two points each over at most three threads (two workers and the
        // caller, which helps while it waits): some thread runs a second point with the
        // scratch buffers its first one left.
        for _ in 0..4 {
            let t = rt.create(DType::F64, &[n]).unwrap();
            rt.task("ew_axpy")
                .read(&x)
                .read_write(&t)
                .scalar(2.0)
                .align(&x, &t)
                .submit()
                .unwrap();
            axpb(&rt, "ew_axpb", &t, &out, 1.0, 0.5);
            drop(t);
            rt.fence().unwrap();
        }
        (rt.read::<f64>(&out).unwrap(), launched(&rt))
    };
    let (fused, unfused) = (run(true), run(false));
    let want: Vec<f64> = (0..n).map(|i| 2.0 * (i as f64 - 3.0) + 0.5).collect();
    for (what, got) in [("unfused", &unfused.0), ("fused", &fused.0)] {
        let bad = (0..n).find(|&i| got[i] != want[i]);
        assert_eq!(bad, None, "{what}: first wrong element (of {n})");
    }
    assert_eq!(
        (
            fused.1.temporaries_eliminated,
            fused.1.kernel_fused_launches
        ),
        (4, 4),
        "{:?}",
        fused.1
    );
}

/// A `write_all` output of a kernel-fused chain is not zeroed before the chunk loop (its
/// first sub-task assigns every element): seen through a body that breaks the promise, whose
/// output keeps the values of the dropped store whose buffer the pool recycled for it, where a
/// plain `write` reads zeros. The chain's other results are exactly what the bodies wrote.
/// (Fails with `fusion/run.rs` `borrow` taking `Ledger::borrow` for every argument: the
/// promise-breaking output reads zeros there.)
#[test]
fn a_write_all_output_of_a_fused_chain_is_not_zeroed_first() {
    // Several chunks per point, the last one short; above the pool's small-buffer bound.
    let n = 3 * 4096 + 17;
    let run = |write_all: bool| {
        let rt = rt(16, true);
        // Breaks `write_all`'s promise on purpose: assigns nothing.
        rt.register_elementwise::<f64>("ew_none", |_: &mut Chunk<'_, f64>| {})
            .unwrap();
        let x = input(&rt, n);
        // A store of 7s, dropped: the pool keeps its buffer for the next store of its size.
        let sevens = rt.create(DType::F64, &[n]).unwrap();
        axpb(&rt, "ew_axpb", &x, &sevens, 0.0, 7.0);
        rt.read::<f64>(&sevens).unwrap();
        drop(sevens);
        let kept = rt.create(DType::F64, &[n]).unwrap();
        let out = rt.create(DType::F64, &[n]).unwrap();
        let t = rt.task("ew_none").read(&x);
        let t = if write_all {
            t.write_all(&kept)
        } else {
            t.write(&kept)
        };
        t.align(&x, &kept).submit().unwrap();
        // Reads what the first sub-task left, in the same chunk loop.
        axpb(&rt, "ew_axpb", &kept, &out, 2.0, 0.5);
        let stats = launched(&rt);
        assert_eq!(stats.kernel_fused_launches, 1, "{stats:?}");
        (
            rt.read::<f64>(&kept).unwrap(),
            rt.read::<f64>(&out).unwrap(),
        )
    };
    for (write_all, old) in [(true, 7.0), (false, 0.0)] {
        let (kept, out) = run(write_all);
        let bad = kept.iter().position(|&v| v != old);
        assert_eq!(bad, None, "write_all {write_all}: kept");
        let bad = out.iter().position(|&v| v != 2.0 * old + 0.5);
        assert_eq!(bad, None, "write_all {write_all}: out");
    }
}

/// Where a random element-wise chain's coefficient comes from.
#[derive(Clone, Debug)]
enum Coef {
    /// A scalar value.
    Value(f64),
    /// A future of a one-element store that a task in the stream writes (the sum of vector
    /// `i`), by `Runtime::value_future`.
    StoreOf(usize),
    /// A future of an element-wise dot (`v[i]·v[i]`) issued in the stream.
    Dot(usize),
}

/// One step of a random element-wise chain over `VECTORS` vectors.
#[derive(Clone, Debug)]
enum Op {
    /// `v[dst] += coef * v[src]` (element-wise, read-write).
    Axpy(Coef, usize, usize),
    /// `v[dst] = coef * v[src] + 0.5` into a new store (the old one becomes garbage, or a
    /// temporary when nothing read it yet).
    Scale(Coef, usize, usize),
}

const VECTORS: usize = 3;

fn coef() -> impl proptest::strategy::Strategy<Value = Coef> {
    use proptest::prelude::*;
    prop_oneof![
        (-2.0f64..2.0).prop_map(Coef::Value),
        (0..VECTORS).prop_map(Coef::StoreOf),
        (0..VECTORS).prop_map(Coef::Dot),
    ]
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let v = || 0..VECTORS;
    prop_oneof![
        (coef(), v(), v()).prop_map(|(c, s, d)| Op::Axpy(c, s, d)),
        (coef(), v(), v()).prop_map(|(c, s, d)| Op::Scale(c, s, d)),
    ]
}

/// A one-element store that a `sum_into` task fills with the sum of `x`.
pub(crate) fn sum_of(rt: &Runtime, x: &Store) -> Store {
    let acc = rt.create(DType::F64, &[1]).unwrap();
    rt.task("sum_into")
        .read(x)
        .reduce(&acc, ReduceOp::Sum)
        .broadcast(&acc, &[0])
        .submit()
        .unwrap();
    acc
}

/// `t` with coefficient `c` as its next scalar (issuing what makes it first).
fn with_coef<'r>(
    rt: &'r Runtime,
    t: tessera_runtime::TaskLauncher<'r>,
    c: &Coef,
    v: &[Store],
    dots: &mut Vec<tessera_runtime::Future>,
) -> tessera_runtime::TaskLauncher<'r> {
    match c {
        Coef::Value(a) => t.scalar(*a),
        Coef::StoreOf(i) => t.future(&rt.value_future(&sum_of(rt, &v[*i])).unwrap()),
        Coef::Dot(i) => {
            let d = rt
                .task("ew_dot")
                .read(&v[*i])
                .read(&v[*i])
                .align(&v[*i], &v[*i])
                .submit_reduce(ReduceOp::Sum)
                .unwrap();
            dots.push(d.clone());
            t.future(&d)
        }
    }
}

/// Runs `ops` on a runtime with window `window` and fusion on or off: every vector at the end
/// and every dot's bits, with the runtime's statistics.
fn run_chain(
    window: usize,
    fusion: bool,
    n: usize,
    ops: &[Op],
) -> (Vec<Vec<u64>>, Vec<u64>, Stats) {
    let rt = rt(window, fusion);
    let mut v: Vec<Store> = (0..VECTORS)
        .map(|k| {
            rt.from_vec(
                &[n],
                (0..n)
                    .map(|i| ((i * 7 + k) % 11) as f64 * 0.125 - 0.5)
                    .collect(),
            )
            .unwrap()
        })
        .collect();
    let mut dots = vec![];
    for op in ops {
        match op {
            Op::Axpy(c, src, dst) if src != dst => {
                let t = rt.task("ew_axpy").read(&v[*src]).read_write(&v[*dst]);
                let t = with_coef(&rt, t, c, &v, &mut dots);
                t.align(&v[*src], &v[*dst]).submit().unwrap();
            }
            Op::Axpy(..) => {}
            Op::Scale(c, src, dst) => {
                let y = rt.create(DType::F64, &[n]).unwrap();
                let t = rt.task("ew_axpb").read(&v[*src]).write(&y);
                let t = with_coef(&rt, t, c, &v, &mut dots).scalar(0.5);
                t.align(&v[*src], &y).submit().unwrap();
                v[*dst] = y;
            }
        }
    }
    let bits = |xs: Vec<f64>| xs.into_iter().map(f64::to_bits).collect::<Vec<_>>();
    let vs = v.iter().map(|x| bits(rt.read::<f64>(x).unwrap())).collect();
    let ds = dots
        .iter()
        .map(|d| d.get().unwrap().as_f64().to_bits())
        .collect();
    (vs, ds, launched(&rt))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// Element-wise chains whose coefficients are values, futures of one-element stores and
    /// futures of dots: kernel-fused (windows 4 and 16) equals unfused and window 1, bitwise.
    #[test]
    fn kernel_fused_chains_with_scalars_and_futures_equal_unfused(
        n in proptest::prop_oneof![1usize..40, 2000usize..4200],
        ops in proptest::collection::vec(op(), 1..12),
    ) {
        let (want_v, want_d, _) = run_chain(1, false, n, &ops);
        for (window, fusion) in [(4, true), (16, true), (16, false)] {
            let (v, d, s) = run_chain(window, fusion, n, &ops);
            proptest::prop_assert!(v == want_v, "window {window}, fusion {fusion}: vectors differ");
            proptest::prop_assert_eq!(&d, &want_d, "window {}, fusion {}: dots differ", window, fusion);
            proptest::prop_assert!(fusion || s.fused_launches == 0);
        }
    }
}

/// A CG-like update: two element-wise tasks taking one future of a one-element store (made
/// by `value_future` after the task writing it) fuse into one kernel-fused launch, and equal
/// the unfused result bitwise.
#[test]
fn updates_sharing_a_stored_scalar_kernel_fuse() {
    let n = 3000;
    let run = |fusion: bool| {
        let rt = rt(16, fusion);
        let (p, q) = (input(&rt, n), input(&rt, n));
        let (x, r) = (input(&rt, n), input(&rt, n));
        let a = rt.value_future(&sum_of(&rt, &q)).unwrap();
        for (src, dst) in [(&p, &x), (&q, &r)] {
            rt.task("ew_axpy")
                .read(src)
                .read_write(dst)
                .future(&a)
                .align(src, dst)
                .submit()
                .unwrap();
        }
        let out = (rt.read::<f64>(&x).unwrap(), rt.read::<f64>(&r).unwrap());
        (out, a.get().unwrap().as_f64(), launched(&rt))
    };
    let (fused, unfused) = (run(true), run(false));
    assert_eq!(fused.0, unfused.0);
    let sum: f64 = (0..n).map(|i| i as f64 - 3.0).sum();
    assert_eq!(fused.1, sum, "the future holds the store's value");
    assert_eq!(fused.0 .0[5], 2.0 + sum * 2.0);
    let s = fused.2;
    assert_eq!((s.tasks_issued, s.tasks_launched), (4, 3), "{s:?}");
    assert_eq!(s.kernel_fused_launches, 1, "{s:?}");
    assert_eq!(unfused.2.kernel_fused_launches, 0);
}

#[test]
fn only_a_one_element_store_becomes_a_future() {
    let rt = rt(1, true);
    let x = input(&rt, 3);
    match rt.value_future(&x) {
        Err(RuntimeError::NotOneValue { store, shape }) => {
            assert_eq!((store, shape), (x.id(), Some(vec![3])));
        }
        other => panic!("{:?}", other.map(|f| f.get())),
    }
    let i = rt.from_vec(&[1, 1], vec![-7i32]).unwrap();
    let f = rt.value_future(&i).unwrap();
    assert_eq!(f.get().unwrap(), tessera_runtime::Scalar::I64(-7));
    let g = rt.from_vec(&[1], vec![0.1f32]).unwrap();
    let v = rt.value_future(&g).unwrap().get().unwrap();
    assert_eq!(
        <f32 as tessera_runtime::Element>::from_scalar(v),
        Some(0.1f32)
    );
}

// The adaptive window (the default): tasks wait only while every worker is busy, or for a
// moment while the workers idle in case more tasks follow.

/// What the `hold` and `signal` bodies share with the test.
#[derive(Default)]
struct Flags {
    /// `hold` runs until this opens.
    gate: AtomicBool,
    /// `hold` has started.
    started: AtomicBool,
    /// `signal` has run.
    seen: AtomicBool,
}

/// Opens the gate when dropped: declared after the runtime, it is dropped first, so a failing
/// assertion ends the test instead of leaving `hold` spinning in the runtime's final fence.
struct Opener(Arc<Flags>);

impl Drop for Opener {
    fn drop(&mut self) {
        self.0.gate.store(true, Ordering::Release);
    }
}

/// A runtime with the default window on `threads` threads (`threads - 1` workers), with `hold` and `signal`
/// registered besides the usual tasks. Tracing is off whatever `TESSERA_TRACING` says: with it
/// on, the default window is a fixed one.
fn held_runtime(threads: usize) -> (Runtime, Arc<Flags>) {
    held_runtime_with(
        Runtime::builder()
            .tracing(false)
            .threads(threads)
            .min_piece_size(4),
    )
}

/// [`held_runtime`] from `builder`.
fn held_runtime_with(builder: tessera_runtime::RuntimeBuilder) -> (Runtime, Arc<Flags>) {
    let rt = builder.build();
    register(&rt).unwrap();
    let flags = Arc::new(Flags::default());
    let f = flags.clone();
    rt.register("hold", move |ctx| {
        f.started.store(true, Ordering::Release);
        while !f.gate.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        ctx.write::<f64>(0).fill(1.0);
    })
    .unwrap();
    let f = flags.clone();
    rt.register("signal", move |ctx| {
        ctx.write::<f64>(0).fill(2.0);
        f.seen.store(true, Ordering::Release);
    })
    .unwrap();
    (rt, flags)
}

/// Waits (up to 10 s, then fails) until `done()`, without calling the runtime.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "waited 10 s for {what}"
        );
        std::thread::yield_now();
    }
}

/// Occupies the only worker with `hold` on a fresh store and waits until it runs (issued
/// while the workers idle, the window thread launches it).
fn occupy(rt: &Runtime, flags: &Flags) -> Store {
    let h = submit_hold(rt);
    wait_for("`hold` to start", || flags.started.load(Ordering::Acquire));
    h
}

/// Issues `hold` (one point) on a fresh store.
fn submit_hold(rt: &Runtime) -> Store {
    let h = rt.create(DType::F64, &[4]).unwrap();
    rt.task("hold")
        .write(&h)
        .launch_domain(&[1])
        .submit()
        .unwrap();
    h
}

/// Closes the gate and [`occupy`]s the worker again.
fn reoccupy(rt: &Runtime, flags: &Flags) -> Store {
    flags.gate.store(false, Ordering::Release);
    flags.started.store(false, Ordering::Release);
    occupy(rt, flags)
}

fn signal(rt: &Runtime) -> Store {
    let b = rt.create(DType::F64, &[4]).unwrap();
    rt.task("signal")
        .write(&b)
        .launch_domain(&[1])
        .submit()
        .unwrap();
    b
}

#[test]
fn a_task_issued_while_the_workers_idle_starts_without_another_call() {
    let (rt, flags) = held_runtime(2);
    let _open = Opener(flags.clone());
    let b = signal(&rt);
    // Counted as pending while the window holds it, as a launched task would be.
    assert_eq!(
        b.pending_refs() + usize::from(flags.seen.load(Ordering::Acquire)),
        1
    );
    // Held for a moment in case more tasks follow; then the window thread launches it.
    wait_for("`signal` to run", || flags.seen.load(Ordering::Acquire));
    assert_eq!(rt.read::<f64>(&b).unwrap(), vec![2.0; 4]);
    assert_eq!(b.pending_refs(), 0);
}

#[test]
fn a_task_held_behind_a_busy_worker_starts_when_the_worker_goes_idle() {
    let (rt, flags) = held_runtime(2);
    let _open = Opener(flags.clone());
    let _h = occupy(&rt, &flags);
    let b = signal(&rt);
    // The worker is busy: the window holds `signal`.
    assert!(!flags.seen.load(Ordering::Acquire));
    assert_eq!(rt.stats().tasks_launched, 1);
    assert_eq!(b.pending_refs(), 1);
    // The caller waits for `signal`'s body without calling the runtime again: only the worker
    // finishing `hold` and finding nothing to run launches it (a fixed window would hang).
    flags.gate.store(true, Ordering::Release);
    wait_for("`signal` to run", || flags.seen.load(Ordering::Acquire));
    assert!(
        rt.stats().idle_flushes >= 1,
        "launched by the worker, not the window thread"
    );
    assert_eq!(rt.read::<f64>(&b).unwrap(), vec![2.0; 4]);
}

#[test]
fn a_task_held_while_an_idle_worker_looks_busy_still_starts() {
    // Two workers: `hold` occupies one and a task that needs `hold`'s store waits for it, so
    // two nodes are outstanding and the other worker, idle, never reports itself. `signal`,
    // held behind them, is launched by the window thread once no submit has come for a while.
    let (rt, flags) = held_runtime(3);
    let _open = Opener(flags.clone());
    rt.register("after", |ctx| ctx.write::<f64>(0).fill(3.0))
        .unwrap();
    let h = occupy(&rt, &flags);
    rt.task("after")
        .write(&h)
        .launch_domain(&[1])
        .submit()
        .unwrap();
    wait_for("`after` to be launched", || rt.stats().tasks_launched == 2);
    let b = signal(&rt);
    wait_for("`signal` to run", || flags.seen.load(Ordering::Acquire));
    assert!(rt.stats().timer_flushes >= 3, "{:?}", rt.stats());
    flags.gate.store(true, Ordering::Release);
    assert_eq!(rt.read::<f64>(&b).unwrap(), vec![2.0; 4]);
    assert_eq!(rt.read::<f64>(&h).unwrap(), vec![3.0; 4]);
}

#[test]
fn tasks_issued_while_the_workers_are_busy_fuse_under_the_default_window() {
    let n = 64;
    let chain = |rt: &Runtime| {
        let x = input(rt, n);
        let (t, u, out) = (
            rt.create(DType::F64, &[n]).unwrap(),
            rt.create(DType::F64, &[n]).unwrap(),
            rt.create(DType::F64, &[n]).unwrap(),
        );
        axpb(rt, "ew_axpb", &x, &t, 0.5, 0.1);
        mul(rt, &t, &x, &u);
        axpb(rt, "ew_axpb", &u, &out, 3.0, -0.3);
        out
    };
    let want = {
        let rt = rt(1, false);
        let out = chain(&rt);
        rt.read::<f64>(&out).unwrap()
    };
    let (rt, flags) = held_runtime(2);
    let _open = Opener(flags.clone());
    let h = occupy(&rt, &flags);
    let out = chain(&rt);
    // Nothing of the chain has been launched: it waits behind `hold`.
    assert_eq!(rt.stats().tasks_launched, 1);
    flags.gate.store(true, Ordering::Release);
    assert_eq!(
        rt.read::<f64>(&out).unwrap(),
        want,
        "bitwise equal to unfused"
    );
    let s = launched(&rt);
    assert_eq!(
        (s.tasks_issued, s.tasks_launched, s.fused_launches),
        (4, 2, 1)
    );
    assert_eq!(s.temporaries_eliminated, 2, "t and u died in the chain");
    assert_eq!(rt.read::<f64>(&h).unwrap(), vec![1.0; 4]);
}

#[test]
fn a_bad_launch_held_in_the_adaptive_window_fails_at_submit() {
    let (rt, flags) = held_runtime(2);
    let _open = Opener(flags.clone());
    let _h = occupy(&rt, &flags);
    let (x, y) = (input(&rt, 8), rt.create(DType::F64, &[9]).unwrap());
    let err = rt
        .task("axpb")
        .read(&x)
        .write(&y)
        .scalar(1.0)
        .scalar(0.0)
        .align(&x, &y)
        .submit()
        .unwrap_err();
    assert!(matches!(err, RuntimeError::AlignShapes { .. }), "{err}");
    assert_eq!(
        (x.pending_refs(), y.pending_refs()),
        (0, 0),
        "the failed task let go"
    );
    flags.gate.store(true, Ordering::Release);
    rt.fence().unwrap();
}

/// With every worker idle, a submit that ends the window's fusible prefix launches that prefix
/// at once: no later task can join it, and holding it (here for as long as the window thread
/// would wait, ten seconds) would only keep the worker idle. The prefix still growing stays
/// held. (The fusion bench's BiCGSTAB idled for the whole issue of each iteration before.)
#[test]
fn a_complete_prefix_is_launched_at_once_for_an_idle_worker() {
    let rt = long_hold_runtime();
    let x = input(&rt, 16);
    let (y, z) = (
        rt.create(DType::F64, &[16]).unwrap(),
        rt.create(DType::F64, &[16]).unwrap(),
    );
    let step = |x: &Store, y: &Store, points: usize| {
        axpb_over(&rt, "axpb", (x, y), (2.0, 1.0), points);
    };
    step(&x, &y, 2);
    assert_eq!(
        rt.stats().tasks_launched,
        0,
        "one task: its prefix may still grow"
    );
    // Another launch domain: the first prefix is complete. (The worker, done with it, may
    // launch the second as it goes idle: an idle flush, counted apart. Held instead, the
    // first would wait for the window thread's ten seconds and nothing would be launched.)
    step(&y, &z, 4);
    let s = rt.stats();
    assert_eq!(
        s.tasks_launched,
        1 + s.idle_flushes,
        "the complete prefix, launched at submit"
    );
    let want: Vec<f64> = (0..16)
        .map(|i| 2.0 * (2.0 * (i as f64 - 3.0) + 1.0) + 1.0)
        .collect();
    assert_eq!(rt.read::<f64>(&z).unwrap(), want);
}

/// Two processors, tracing off, a window hold of 10 s: a held task waits for the test.
fn long_hold_builder() -> tessera_runtime::RuntimeBuilder {
    Runtime::builder()
        .tracing(false)
        .threads(2)
        .min_piece_size(4)
        .window_hold(Duration::from_secs(10))
}

/// An adaptive runtime (2 threads) whose window thread would hold a task issued while the
/// worker idles for ten seconds: whatever launches sooner was decided at submit.
fn long_hold_runtime() -> Runtime {
    let rt = long_hold_builder().adaptive_window(16).build();
    register(&rt).unwrap();
    rt
}

/// A submit into the adaptive window is analysis time where it solves the task (and launches
/// what it may), not only at the flush that launches the task later: the window times each of
/// its entry points once (a submit, a flush, an idle worker's launch), where it used to time
/// every task solved and every prefix launched, two clock reads each (runtime/DESIGN.md,
/// `fmemo`).
#[test]
fn a_task_held_by_the_adaptive_window_counts_its_solve_as_analysis_time() {
    let rt = long_hold_runtime();
    let x = input(&rt, 16);
    let y = rt.create(DType::F64, &[16]).unwrap();
    let before = rt.stats();
    axpb_over(&rt, "axpb", (&x, &y), (2.0, 1.0), 2);
    let s = rt.stats().since(&before);
    assert_eq!(
        (s.tasks_solved, s.tasks_launched),
        (1, 0),
        "solved and held"
    );
    assert!(s.analysis_ns > 0, "the submit's solve is analysis time");
    let want: Vec<f64> = (0..16).map(|i| 2.0 * (i as f64 - 3.0) + 1.0).collect();
    assert_eq!(rt.read::<f64>(&y).unwrap(), want);
}

/// A task issued while the worker idles is held so that a chain may join it, unless the last
/// prefix it began made no temporary (it was ended by the very next task, or what joined it
/// left no store dead): then it is launched at submit (the fusion bench's BiCGSTAB held its
/// direction update, which an SpMV through an image always follows, for a window-thread
/// wake-up and one more submit per iteration, and its SpMV for the issue of the two tasks
/// that fused with it, while unfused it started at once). A task whose last prefix made a
/// temporary is still held.
#[test]
fn a_task_whose_last_prefix_made_no_temporary_is_launched_at_once_for_an_idle_worker() {
    let rt = long_hold_runtime();
    let x = input(&rt, 16);
    let (y, z) = (
        rt.create(DType::F64, &[16]).unwrap(),
        rt.create(DType::F64, &[16]).unwrap(),
    );
    // `axpb` then a task on another launch domain: `axpb`'s prefix ends with it.
    let round = |name: &str| {
        axpb_over(&rt, name, (&x, &y), (2.0, 1.0), 2);
        let held = rt.stats().tasks_launched;
        axpb_over(&rt, "ew_axpb", (&y, &z), (3.0, 0.0), 4);
        rt.fence().unwrap();
        held
    };
    let before = rt.stats().tasks_launched;
    assert_eq!(round("axpb"), before, "no history: held for a chain");
    let before = rt.stats().tasks_launched;
    assert_eq!(
        round("axpb"),
        before + 1,
        "ended its prefix alone last time: launched at submit"
    );
    // `ew_axpb`'s prefixes above were launched by the fence (never complete): no prediction.
    // Two `ew_axpb` fuse, ended by `axpb` on another domain; `u` dies in the prefix unless
    // `keep`.
    let v = rt.create(DType::F64, &[16]).unwrap();
    let chain = |keep: bool| {
        let u = rt.create(DType::F64, &[16]).unwrap();
        axpb(&rt, "ew_axpb", &x, &u, 1.0, 1.0);
        let held = rt.stats().tasks_launched;
        axpb(&rt, "ew_axpb", &u, &v, 1.0, 1.0);
        let kept = keep.then_some(u);
        axpb_over(&rt, "axpb", (&v, &z), (1.0, 0.0), 4);
        rt.fence().unwrap();
        drop(kept);
        held
    };
    let temporaries = rt.stats().temporaries_eliminated;
    chain(false);
    assert_eq!(rt.stats().temporaries_eliminated, temporaries + 1);
    let before = rt.stats().tasks_launched;
    assert_eq!(
        chain(false),
        before,
        "its last prefix made a temporary: held"
    );
    chain(true);
    let before = rt.stats().tasks_launched;
    assert_eq!(
        chain(true),
        before + 1,
        "its last prefix grew but made no temporary: launched at submit"
    );
    // Launched at submit, the task never ends a complete prefix again; the window holds it
    // anyway once in a while (`RECHECK`), so when the chain makes a temporary again it is
    // fused again within a few rounds, not run unfused for good.
    let temporaries = rt.stats().temporaries_eliminated;
    let refused = (1..=40).find(|_| {
        chain(false);
        rt.stats().temporaries_eliminated > temporaries
    });
    assert!(
        refused.is_some(),
        "a stale prediction kept the chain unfused"
    );
    let want: Vec<f64> = (0..16).map(|i| (i as f64 - 3.0) + 2.0).collect();
    assert_eq!(rt.read::<f64>(&z).unwrap(), want);
    assert_eq!(rt.read::<f64>(&y).unwrap()[0], -5.0);
}

/// ... and also while the worker runs its last nodes (at most two per worker outstanding):
/// issuing the rest of the chain takes longer than such nodes, and a task held until its
/// worker ran dry waits for the next submit's flush and the worker's wake-up (the fusion
/// bench's BiCGSTAB issued its SpMV while the worker ran the direction update launched just
/// before it, and the SpMV started ~15 µs after the update ended). With more outstanding, it
/// is held for a chain as before.
#[test]
fn a_task_whose_last_prefix_made_no_temporary_is_launched_at_once_while_the_worker_runs_dry() {
    let (rt, flags) = held_runtime_with(long_hold_builder());
    let _open = Opener(flags.clone());
    let x = input(&rt, 16);
    let (y, w, z) = (
        rt.create(DType::F64, &[16]).unwrap(),
        rt.create(DType::F64, &[16]).unwrap(),
        rt.create(DType::F64, &[16]).unwrap(),
    );
    // Each task ends the prefix of the one before (another launch domain): `hold` and `axpb`
    // are remembered as beginning prefixes that made no temporary. The fence between them
    // makes the worker idle when `axpb`'s prefix ends whatever the machine's load (a complete
    // prefix behind a busy worker is held, and then not remembered).
    flags.gate.store(true, Ordering::Release);
    let _hold = submit_hold(&rt);
    axpb_over(&rt, "axpb", (&x, &y), (2.0, 1.0), 2);
    rt.fence().unwrap();
    axpb_over(&rt, "axpb", (&x, &y), (2.0, 1.0), 2);
    axpb_over(&rt, "ew_axpb", (&y, &z), (3.0, 0.0), 4);
    rt.fence().unwrap();
    // `hold`, issued to the idle worker, is launched at submit and occupies it: one node
    // outstanding, no worker idle.
    let _h = reoccupy(&rt, &flags);
    let before = rt.stats().tasks_launched;
    axpb_over(&rt, "axpb", (&x, &y), (2.0, 1.0), 2);
    assert_eq!(
        rt.stats().tasks_launched,
        before + 1,
        "one node outstanding: launched at submit"
    );
    // Now three nodes are outstanding (`hold` and `axpb`'s two points, which wait for the
    // worker): the next `axpb` is held.
    axpb_over(&rt, "axpb", (&x, &w), (1.0, 0.0), 2);
    assert_eq!(
        rt.stats().tasks_launched,
        before + 1,
        "three nodes outstanding: held"
    );
    flags.gate.store(true, Ordering::Release);
    let want: Vec<f64> = (0..16).map(|i| i as f64 - 3.0).collect();
    assert_eq!(rt.read::<f64>(&w).unwrap(), want);
    assert_eq!(rt.read::<f64>(&y).unwrap()[3], 1.0);
}

/// The stream of the two tests below, on `rt`: `t = 2x + 1`, `u = 3t` (one prefix), then a
/// task on another launch domain that reads `u` (and `t` when `t_read_later`), writing `z`.
fn prefix_then_other_domain(rt: &Runtime, x: &Store, t_read_later: bool) -> (Store, Store) {
    let (t, u, z) = (
        rt.create(DType::F64, &[16]).unwrap(),
        rt.create(DType::F64, &[16]).unwrap(),
        rt.create(DType::F64, &[16]).unwrap(),
    );
    axpb(rt, "ew_axpb", x, &t, 2.0, 1.0);
    axpb(rt, "ew_axpb", &t, &u, 3.0, 0.0);
    let last = if t_read_later { &t } else { &u };
    rt.task("ew_mul")
        .read(&u)
        .read(last)
        .write(&z)
        .align(&u, last)
        .align(&u, &z)
        .launch_domain(&[4])
        .submit()
        .unwrap();
    (t, z)
}

fn expected(t_read_later: bool) -> Vec<f64> {
    (0..16)
        .map(|i| {
            let t = 2.0 * (i as f64 - 3.0) + 1.0;
            let u = 3.0 * t;
            u * if t_read_later { t } else { u }
        })
        .collect()
}

/// Behind a busy worker, a complete prefix (a later task ended it) is launched at submit when
/// holding it could not make a temporary: here `t` is read after the prefix, so it never is.
/// (Held to the worker's next idle moment, the fusion bench's BiCGSTAB started each SpMV a
/// launch late.)
#[test]
fn a_complete_prefix_behind_a_busy_worker_is_launched_when_holding_gains_nothing() {
    let (rt, flags) = held_runtime(2);
    let _open = Opener(flags.clone());
    let _h = occupy(&rt, &flags);
    let x = input(&rt, 16);
    let (t, z) = prefix_then_other_domain(&rt, &x, true);
    let s = rt.stats();
    assert_eq!(
        (s.tasks_launched, s.fused_launches),
        (2, 1),
        "`hold`, then the complete prefix fused; the task after it is held"
    );
    drop(t);
    flags.gate.store(true, Ordering::Release);
    assert_eq!(rt.read::<f64>(&z).unwrap(), expected(true));
    assert_eq!(rt.stats().temporaries_eliminated, 0);
}

/// ... but a complete prefix that writes a fresh store the application still holds and no
/// later task names stays held while the worker is busy: the loop body may drop the handle
/// before the worker goes idle, and then the store is never allocated.
#[test]
fn a_complete_prefix_that_may_yet_make_a_temporary_stays_held_behind_a_busy_worker() {
    let (rt, flags) = held_runtime(2);
    let _open = Opener(flags.clone());
    let _h = occupy(&rt, &flags);
    let x = input(&rt, 16);
    let (t, z) = prefix_then_other_domain(&rt, &x, false);
    assert_eq!(rt.stats().tasks_launched, 1, "only `hold`");
    drop(t);
    flags.gate.store(true, Ordering::Release);
    assert_eq!(rt.read::<f64>(&z).unwrap(), expected(false));
    let s = rt.stats();
    assert_eq!(s.temporaries_eliminated, 1, "t, dropped while held: {s:?}");
    assert_eq!(s.fused_launches, 1);
}

/// ... unless the last complete prefix of its canonical form made no temporary: then holding
/// it is predicted to gain nothing, and it is launched when it is complete (the fusion bench's
/// BiCGSTAB: [SpMV t, t·s, t·t, x update] could make `t` a temporary until the task two
/// submits later named it, and the worker idled meanwhile).
#[test]
fn a_complete_prefix_whose_form_made_no_temporary_last_time_is_launched_behind_a_busy_worker() {
    let (rt, flags) = held_runtime_with(long_hold_builder());
    let _open = Opener(flags.clone());
    let x = input(&rt, 16);
    // With the worker idle, each complete prefix is launched when the task after it is
    // issued: `hold` alone (ended by an element-wise task, launched by the fence, which
    // remembers nothing), then [t = 2x + 1, u = 3t] with `t` still held by the application
    // (no temporary): both remembered. The fence makes the worker idle for the second
    // whatever the machine's load (otherwise `hold` may still be running when the chain's end
    // is issued, and a busy worker's complete prefix is held, not remembered).
    flags.gate.store(true, Ordering::Release);
    let h = submit_hold(&rt);
    let scratch = rt.create(DType::F64, &[16]).unwrap();
    axpb(&rt, "ew_axpb", &x, &scratch, 1.0, 0.0);
    rt.fence().unwrap();
    let (t, z) = prefix_then_other_domain(&rt, &x, false);
    assert_eq!(rt.read::<f64>(&z).unwrap(), expected(false));
    assert_eq!(rt.stats().fused_launches, 1);
    drop((t, h));
    // `hold` occupies the worker, `signal` waits behind it (so that `ew_axpb`, which began a
    // prefix that made no temporary, is not alone in the window and launched at submit:
    // `a_task_whose_last_prefix_made_no_temporary_is_launched_at_once_while_the_worker_runs_dry`),
    // then the first stream again on fresh stores: its prefix could still make `t` a
    // temporary, but its form made none last time, so it is launched when complete.
    let _h = reoccupy(&rt, &flags);
    let s = rt.stats();
    let _b = signal(&rt);
    let (t, z) = prefix_then_other_domain(&rt, &x, false);
    let after = rt.stats();
    assert_eq!(
        (after.tasks_launched, after.fused_launches),
        (s.tasks_launched + 2, s.fused_launches + 1),
        "`signal` (its prefix ended), then the complete prefix, predicted to make no \
         temporary, fused at submit"
    );
    // A miss costs the temporary: `t`, dropped after the launch, was allocated.
    drop(t);
    flags.gate.store(true, Ordering::Release);
    assert_eq!(rt.read::<f64>(&z).unwrap(), expected(false));
    assert_eq!(rt.stats().temporaries_eliminated, 0);
}

/// The window thread times holds. It used to be woken every time a deadline was set with none
/// pending, though it was already asleep until an earlier one it would meet anyway: a futex
/// call on the issuing thread and a context switch per window emptied and refilled (twice an
/// iteration on the fusion bench's BiCGSTAB). Now only a deadline it would miss wakes it.
#[test]
fn the_window_thread_is_woken_only_for_a_deadline_it_would_miss() {
    let (rt, flags) = held_runtime(2);
    let _open = Opener(flags.clone());
    let _h = occupy(&rt, &flags);
    let x = input(&rt, 16);
    let t0 = Instant::now();
    let woken = rt.stats().window_wakes;
    for i in 0..20 {
        // Held behind the busy worker (the stall deadline is set), then launched by the read
        // (the window empties and the deadline is cleared), run by this thread.
        let y = rt.create(DType::F64, &[16]).unwrap();
        axpb(&rt, "axpb", &x, &y, 1.0, i as f64);
        assert_eq!(rt.read::<f64>(&y).unwrap()[3], i as f64);
    }
    let wakes = rt.stats().window_wakes - woken;
    // Asleep until the first stall deadline, it meets every later one; it may go back to an
    // untimed sleep each time a deadline passes with the window empty.
    let bound = 1 + t0.elapsed().as_millis() as u64 / 50 + 1;
    assert!(
        wakes <= bound,
        "{wakes} wake-ups over 20 holds (at most {bound})"
    );
}

/// [`rt`] with a task `fail_write` whose body panics: it poisons the store it writes.
fn rt_with_fail_write(window: usize, fusion: bool) -> Runtime {
    let rt = rt(window, fusion);
    rt.register("fail_write", |ctx| {
        let _ = ctx.write::<f64>(0);
        panic!("x is not written");
    })
    .unwrap();
    rt
}

/// A store poisoned by a failed task, then rewritten whole and read inside one fused task: the
/// rewrite clears the poison for the sub-task after it, as unfused (the fused task used to
/// check its merged read-write argument as an input and fail as a whole). Through the bodies
/// and through the chunk loop. One point per task: over several, a reader's point may follow
/// an early point of the rewrite before the rewrite's end clears the poison, unfused too
/// (`heldout_streams::a_whole_rewrite_clears_the_poison_for_every_reader_point`).
#[test]
fn a_fused_rewrite_of_a_poisoned_store_clears_it_for_the_sub_task_reading_it() {
    for name in ["axpb", "ew_axpb"] {
        let run = |window: usize, fusion: bool| {
            let rt = rt_with_fail_write(window, fusion);
            let n = 64;
            let src = input(&rt, n);
            let (x, y) = (
                rt.create(DType::F64, &[n]).unwrap(),
                rt.create(DType::F64, &[n]).unwrap(),
            );
            rt.task("fail_write").write(&x).submit().unwrap();
            assert!(rt.read::<f64>(&x).is_err(), "x is poisoned");
            axpb_over(&rt, name, (&src, &x), (2.0, 1.0), 1);
            axpb_over(&rt, name, (&x, &y), (1.0, 5.0), 1);
            let _ = rt.fence();
            let fused = rt.stats().fused_launches;
            (rt.read::<f64>(&x).ok(), rt.read::<f64>(&y).ok(), fused)
        };
        let (want_x, want_y, _) = run(1, false);
        assert!(want_x.is_some() && want_y.is_some(), "{name}: unfused");
        let (x, y, fused) = run(4, true);
        assert!(fused > 0, "{name}: the rewrite and the read fuse");
        assert_eq!((x, y), (want_x, want_y), "{name}");
    }
}

/// A failed sub-task's writes, then a partial write of the same cells and a read of them in
/// one fused task: the partial write does not make the store trustworthy (unfused it does not
/// clear the poison either), so the reader fails as unfused. (Review of the sub-task
/// failures: a partial write used to take the store out of the failed cells.)
#[test]
fn a_partial_write_after_a_failed_sub_task_does_not_unpoison_it_for_a_reader() {
    let run = |window: usize, fusion: bool| {
        let rt = rt_with_fail_write(window, fusion);
        let n = 64;
        let src = input(&rt, n / 2);
        let x = rt.create(DType::F64, &[n]).unwrap();
        let half = x.slice(0, 0..n / 2).unwrap();
        let y = rt.create(DType::F64, &[n / 2]).unwrap();
        rt.task("fail_write")
            .write(&half)
            .launch_domain(&[1])
            .submit()
            .unwrap();
        axpb_over(&rt, "axpb", (&src, &half), (1.0, 0.0), 1);
        axpb_over(&rt, "axpb", (&half, &y), (1.0, 0.0), 1);
        let _ = rt.fence();
        let fused = rt.stats().fused_launches;
        (
            rt.read::<f64>(&x).is_ok(),
            rt.read::<f64>(&y).is_ok(),
            fused,
        )
    };
    let (x, y, _) = run(1, false);
    assert_eq!((x, y), (false, false), "unfused");
    let (fx, fy, fused) = run(4, true);
    assert!(fused > 0, "the three tasks fuse");
    assert_eq!((fx, fy), (x, y));
}

/// An earlier task's failing point poisons a store only after a fused sub-task reading other
/// cells of it has run (no dependence between them): the sub-task keeps its outcome when
/// another sub-task fails, as unfused, where a task never fails after its points succeeded.
/// (Review of the sub-task failures: the settling at the task's end looked at inputs again.)
#[test]
fn a_sub_task_that_ran_is_not_failed_after_the_fact_by_an_input_poisoned_since() {
    let run = |window: usize, fusion: bool| {
        let rt = Runtime::builder()
            .threads(3)
            .window_size(window)
            .fusion(fusion)
            .build();
        let open = Arc::new(AtomicBool::new(false));
        let o = open.clone();
        rt.register("gated_fail", move |ctx| {
            if ctx.linear_point() == 1 {
                let start = Instant::now();
                while !o.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(5) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                panic!("second half fails late");
            }
            ctx.write::<f64>(0).fill(1.0);
        })
        .unwrap();
        rt.register("boom", |ctx| {
            let _ = ctx.write::<f64>(0);
            panic!("boom");
        })
        .unwrap();
        let o = open.clone();
        rt.register("copy_open", move |ctx| {
            let x = ctx.read::<f64>(0);
            let mut y = ctx.write::<f64>(1);
            for i in y.range() {
                y.set_at(i, x.at(i));
            }
            o.store(true, Ordering::SeqCst);
        })
        .unwrap();
        rt.register("sleep_fill", |ctx| {
            std::thread::sleep(Duration::from_millis(300));
            ctx.write::<f64>(0).fill(2.0);
        })
        .unwrap();
        let n = 64;
        let x = rt.create(DType::F64, &[n]).unwrap();
        let half = x.slice(0, 0..n / 2).unwrap();
        let [z, y, w] = [0; 3].map(|_| rt.create(DType::F64, &[n / 2]).unwrap());
        rt.task("gated_fail")
            .write(&x)
            .launch_domain(&[2])
            .submit()
            .unwrap();
        rt.task("boom")
            .write(&z)
            .launch_domain(&[1])
            .submit()
            .unwrap();
        rt.task("copy_open")
            .read(&half)
            .write(&y)
            .launch_domain(&[1])
            .submit()
            .unwrap();
        rt.task("sleep_fill")
            .write(&w)
            .launch_domain(&[1])
            .submit()
            .unwrap();
        let _ = rt.fence();
        let fused = rt.stats().fused_launches;
        let ok = |s: &Store| rt.read::<f64>(s).is_ok();
        ((ok(&z), ok(&y), ok(&w)), fused)
    };
    let (want, _) = run(1, false);
    assert_eq!(want, (false, true, true), "unfused");
    let (got, fused) = run(8, true);
    assert!(fused > 0, "boom, copy and fill fuse");
    assert_eq!(got, want);
}
