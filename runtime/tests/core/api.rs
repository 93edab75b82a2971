//! Stores, futures, reductions, unbound outputs, failures and reference counts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::Duration;
use tessera_runtime::{DType, Future, PosRange, ReduceOp, Runtime, RuntimeError, Scalar, Store};

#[test]
fn stores_of_every_type_round_trip_and_fill() {
    let rt = Runtime::new(2);
    let f = rt
        .from_vec(&[2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
        .unwrap();
    assert_eq!(
        rt.read::<f32>(&f).unwrap(),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    let r = rt
        .from_vec(&[2], vec![PosRange::new(0, 2), PosRange::new(2, 5)])
        .unwrap();
    assert_eq!(rt.read::<PosRange>(&r).unwrap()[1], PosRange::new(2, 5));
    for dtype in [DType::F64, DType::F32, DType::I64, DType::I32, DType::U64] {
        let s = rt.create(dtype, &[3, 4]).unwrap();
        rt.fill(&s, 7u64).unwrap();
        let got: Vec<f64> = match dtype {
            DType::F64 => rt.read::<f64>(&s).unwrap(),
            DType::F32 => rt
                .read::<f32>(&s)
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect(),
            DType::I64 => rt
                .read::<i64>(&s)
                .unwrap()
                .into_iter()
                .map(|v| v as f64)
                .collect(),
            DType::I32 => rt
                .read::<i32>(&s)
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect(),
            _ => rt
                .read::<u64>(&s)
                .unwrap()
                .into_iter()
                .map(|v| v as f64)
                .collect(),
        };
        assert_eq!(got, vec![7.0; 12], "{dtype:?}");
    }
    let u = rt.create(DType::U64, &[2]).unwrap();
    assert!(matches!(
        rt.fill(&u, -1i64),
        Err(RuntimeError::FillValue { .. })
    ));
    assert!(matches!(
        rt.read::<f64>(&u),
        Err(RuntimeError::DTypeMismatch { .. })
    ));
    assert!(matches!(
        rt.from_vec(&[3], vec![1.0]),
        Err(RuntimeError::HostDataLength {
            expected: 3,
            got: 1,
            ..
        })
    ));
    assert!(matches!(
        rt.create(DType::F64, &[1, 1, 1, 1, 1]),
        Err(RuntimeError::TooManyDims { .. })
    ));
    assert!(matches!(
        rt.create(DType::F64, &[usize::MAX, 2]),
        Err(RuntimeError::ShapeTooLarge { .. })
    ));
    assert!(matches!(
        rt.create(DType::F64, &[1 << 40, 1 << 30]),
        Err(RuntimeError::ShapeTooLarge { .. })
    ));
}

#[test]
fn slices_of_a_matrix_read_and_fill_only_their_rectangle() {
    let rt = Runtime::new(3);
    let m = rt
        .from_vec(&[4, 5], (0..20).map(|v| v as i64).collect())
        .unwrap();
    let band = m.slice(0, 1..3).unwrap().slice(1, 2..5).unwrap();
    assert_eq!(band.shape(), Some(vec![2, 3]));
    assert_eq!(rt.read::<i64>(&band).unwrap(), vec![7, 8, 9, 12, 13, 14]);
    rt.fill(&band, -1i64).unwrap();
    let all = rt.read::<i64>(&m).unwrap();
    for (i, v) in all.iter().enumerate() {
        let (r, c) = (i / 5, i % 5);
        let inside = (1..3).contains(&r) && (2..5).contains(&c);
        assert_eq!(*v, if inside { -1 } else { i as i64 });
    }
    assert!(matches!(
        m.slice(1, 3..7),
        Err(RuntimeError::BadSlice { dim: 1, .. })
    ));
}

#[test]
fn a_2d_launch_domain_tiles_both_dimensions() {
    let rt = Runtime::new(4);
    rt.register("mark", |ctx| {
        let p = ctx.point().to_vec();
        let mut w = ctx.write::<i64>(0);
        w.fill((p[0] * 10 + p[1]) as i64);
    })
    .unwrap();
    let m = rt.create(DType::I64, &[4, 6]).unwrap();
    rt.task("mark")
        .write(&m)
        .launch_domain(&[2, 3])
        .submit()
        .unwrap();
    let got = rt.read::<i64>(&m).unwrap();
    for (i, v) in got.iter().enumerate() {
        let (r, c) = (i / 6, i % 6);
        assert_eq!(*v, ((r / 2) * 10 + c / 2) as i64);
    }
}

#[test]
fn futures_feed_later_tasks_without_blocking_the_caller() {
    let rt = Runtime::new(2);
    let gate = Arc::new(Barrier::new(2));
    let g = gate.clone();
    rt.register("slow_sum", move |ctx| {
        g.wait(); // held until the caller has issued everything below
        ctx.set_result(ctx.read::<f64>(0).as_slice().iter().sum::<f64>());
    })
    .unwrap();
    rt.register("add", |ctx| {
        let v = ctx.scalar(0).as_f64();
        ctx.write::<f64>(0)
            .as_mut_slice()
            .iter_mut()
            .for_each(|x| *x += v);
    })
    .unwrap();
    let x = rt.from_vec(&[4], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let y = rt.create(DType::F64, &[4]).unwrap();
    let s = rt
        .task("slow_sum")
        .read(&x)
        .launch_domain(&[1])
        .submit_reduce(ReduceOp::Sum)
        .unwrap();
    rt.task("add").read_write(&y).future(&s).submit().unwrap();
    assert!(
        s.try_get().is_none(),
        "the sum cannot be known: its task waits on the gate"
    );
    gate.wait();
    assert_eq!(rt.read::<f64>(&y).unwrap(), vec![10.0; 4]);
    assert_eq!(s.get().unwrap(), Scalar::F64(10.0));
    let ready = Future::ready(2.0);
    rt.task("add")
        .read_write(&y)
        .future(&ready)
        .submit()
        .unwrap();
    assert_eq!(rt.read::<f64>(&y).unwrap(), vec![12.0; 4]);
}

/// Values whose floating-point sum depends on the order they are added in.
fn awkward(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            if i % 3 == 0 {
                1e16
            } else if i % 3 == 1 {
                1.0
            } else {
                -1e16 + 0.5
            }
        })
        .collect()
}

#[test]
fn reductions_into_one_substore_fold_in_point_order() {
    let n = 60;
    let x = awkward(n);
    // Point p sums its tile; folds go in point order 0, 1, 2, ... onto the store's value.
    let pieces = 6;
    let tile = n / pieces;
    let want = (0..pieces).fold(0.0, |acc, p| {
        acc + x[p * tile..(p + 1) * tile].iter().fold(0.0, |a, v| a + v)
    });
    for threads in [1, 2, 8] {
        let rt = Runtime::builder().threads(threads).build();
        rt.register("total", |ctx| {
            let s = ctx.read::<f64>(0);
            let mut acc = ctx.reduce::<f64>(1);
            for i in s.range() {
                acc.reduce_at(0, s.at(i));
            }
        })
        .unwrap();
        let xs = rt.from_vec(&[n], x.clone()).unwrap();
        let acc = rt.create(DType::F64, &[1]).unwrap();
        rt.task("total")
            .read(&xs)
            .reduce(&acc, ReduceOp::Sum)
            .broadcast(&acc, &[0])
            .launch_domain(&[pieces])
            .submit()
            .unwrap();
        assert_eq!(
            rt.read::<f64>(&acc).unwrap()[0].to_bits(),
            want.to_bits(),
            "threads {threads}"
        );
    }
}

#[test]
fn min_max_prod_reductions_and_results() {
    let rt = Runtime::new(3);
    rt.register("ext", |ctx| {
        let s = ctx.read::<i64>(0);
        let (mut lo, mut hi) = (ctx.reduce::<i64>(1), ctx.reduce::<i64>(2));
        for i in s.range() {
            lo.reduce_at(0, s.at(i));
            hi.reduce_at(0, s.at(i));
        }
        drop((lo, hi));
        ctx.set_result(
            s.as_slice()
                .iter()
                .map(|&v| v.abs().max(1))
                .product::<i64>(),
        );
    })
    .unwrap();
    let v: Vec<i64> = vec![3, -7, 2, 9, -1, 4];
    let s = rt.from_vec(&[6], v.clone()).unwrap();
    let lo = rt.from_vec(&[1], vec![0i64]).unwrap();
    let hi = rt.from_vec(&[1], vec![0i64]).unwrap();
    let prod = rt
        .task("ext")
        .read(&s)
        .reduce(&lo, ReduceOp::Min)
        .reduce(&hi, ReduceOp::Max)
        .broadcast(&lo, &[0])
        .broadcast(&hi, &[0])
        .launch_domain(&[3])
        .submit_reduce(ReduceOp::Prod)
        .unwrap();
    assert_eq!(
        rt.read::<i64>(&lo).unwrap(),
        vec![-7],
        "min folds onto the old value 0"
    );
    assert_eq!(rt.read::<i64>(&hi).unwrap(), vec![9]);
    assert_eq!(prod.get().unwrap(), Scalar::I64(3 * 7 * 2 * 9 * 4));
    let r = rt.from_vec(&[1], vec![PosRange::new(0, 1)]).unwrap();
    assert!(matches!(
        rt.task("ext").read(&s).reduce(&r, ReduceOp::Sum).submit(),
        Err(RuntimeError::UnsupportedReduction { .. })
    ));
}

#[test]
fn unbound_outputs_concatenate_pieces_in_point_order() {
    let rt = Runtime::builder().threads(4).min_piece_size(1).build();
    rt.register("evens", |ctx| {
        let s = ctx.read::<u64>(0);
        ctx.emit(
            1,
            s.as_slice()
                .iter()
                .copied()
                .filter(|v| v % 2 == 0)
                .collect::<Vec<u64>>(),
        );
    })
    .unwrap();
    rt.register("inc", |ctx| {
        ctx.write::<u64>(0)
            .as_mut_slice()
            .iter_mut()
            .for_each(|v| *v += 1)
    })
    .unwrap();
    let s = rt.from_vec(&[20], (0..20u64).rev().collect()).unwrap();
    let out = rt.create_unbound(DType::U64);
    assert_eq!(out.shape(), None);
    rt.task("evens")
        .read(&s)
        .write_unbound(&out)
        .submit()
        .unwrap();
    // A later task on the unbound store is issued before anyone reads it.
    rt.task("inc").read_write(&out).submit().unwrap();
    let want: Vec<u64> = (0..20u64)
        .rev()
        .filter(|v| v % 2 == 0)
        .map(|v| v + 1)
        .collect();
    assert_eq!(rt.read::<u64>(&out).unwrap(), want);
    assert_eq!(out.shape(), Some(vec![10]));
    let e = rt
        .task("evens")
        .read(&s)
        .write_unbound(&out)
        .submit()
        .unwrap_err();
    assert!(matches!(e, RuntimeError::UnboundMisuse { .. }), "{e}");
    let fresh = rt.create_unbound(DType::U64);
    for t in [
        rt.task("evens")
            .read(&s)
            .write_unbound(&fresh)
            .image(&s, &fresh),
        rt.task("evens")
            .read(&s)
            .write_unbound(&fresh)
            .broadcast(&fresh, &[0]),
        rt.task("evens")
            .read(&s)
            .write_unbound(&fresh)
            .align(&s, &fresh),
    ] {
        let e = t.submit().unwrap_err();
        assert!(matches!(e, RuntimeError::UnboundMisuse { .. }), "{e}");
    }
    let never = rt.create_unbound(DType::U64);
    assert!(matches!(
        rt.read::<u64>(&never),
        Err(RuntimeError::NeverBound { .. })
    ));
}

#[test]
fn a_failing_task_poisons_what_it_writes_and_its_future() {
    let rt = Runtime::new(2);
    rt.register("oob", |ctx| {
        let mut w = ctx.write::<f64>(0);
        let end = w.range().end;
        w.set_at(end, 1.0); // one past this point's sub-store
    })
    .unwrap();
    rt.register("wrong_priv", |ctx| {
        ctx.write::<f64>(0);
    })
    .unwrap();
    let x = rt.create(DType::F64, &[8]).unwrap();
    rt.task("oob")
        .write(&x)
        .launch_domain(&[2])
        .submit()
        .unwrap();
    match rt.read::<f64>(&x) {
        Err(RuntimeError::TaskFailed { task, message, .. }) => {
            assert_eq!(task, "oob");
            assert!(
                message.contains("outside this point's sub-store"),
                "{message}"
            );
        }
        other => panic!("expected a task failure, got {other:?}"),
    }
    let y = rt.create(DType::F64, &[8]).unwrap();
    let f = rt
        .task("wrong_priv")
        .read(&y)
        .submit_reduce(ReduceOp::Sum)
        .unwrap();
    match f.get() {
        Err(RuntimeError::TaskFailed { message, .. }) => {
            assert!(message.contains("does not allow writing"), "{message}")
        }
        other => panic!("expected a task failure, got {other:?}"),
    }
    // The runtime keeps working after failures.
    rt.fill(&y, 3.0).unwrap();
    assert_eq!(rt.read::<f64>(&y).unwrap(), vec![3.0; 8]);
    // A task reading the failed task's output fails too, instead of computing from garbage.
    rt.register("copy", |ctx| {
        let x = ctx.read::<f64>(0);
        ctx.write::<f64>(1)
            .as_mut_slice()
            .copy_from_slice(x.as_slice());
    })
    .unwrap();
    rt.task("copy")
        .read(&x)
        .write(&y)
        .align(&x, &y)
        .submit()
        .unwrap();
    match rt.read::<f64>(&y) {
        Err(RuntimeError::TaskFailed { task, message, .. }) => {
            assert_eq!(task, "copy");
            assert!(message.contains("was not computed"), "{message}");
        }
        other => panic!("expected the failure to propagate, got {other:?}"),
    }
    // Rewriting the whole store makes it readable again.
    rt.fill(&x, 1.0).unwrap();
    assert_eq!(rt.read::<f64>(&x).unwrap(), vec![1.0; 8]);
}

/// A failed reduction poisons the cells its points reduce into, not the whole store: a reader
/// of other cells does not wait for the reduction's finish step, so with a store-wide poison
/// it failed or not depending on whether the finish had run (after a fence, always).
#[test]
fn a_failed_reduction_poisons_only_the_cells_reduced_into() {
    for threads in [1, 2, 3] {
        let rt = Runtime::new(threads);
        rt.register("add_one", |ctx| {
            assert!(ctx.linear_point() != 1, "point 1 refuses");
            let mut acc = ctx.reduce::<f64>(0);
            for i in acc.range() {
                acc.reduce_at(i, 1.0);
            }
        })
        .unwrap();
        let s = rt
            .from_vec(&[20], (0..20).map(f64::from).collect())
            .unwrap();
        let (reduced, other) = (s.slice(0, 0..10).unwrap(), s.slice(0, 10..20).unwrap());
        rt.task("add_one")
            .reduce(&reduced, ReduceOp::Sum)
            .launch_domain(&[2])
            .submit()
            .unwrap();
        rt.fence().unwrap();
        let e = rt.read::<f64>(&reduced).unwrap_err();
        assert!(e.to_string().contains("point 1 refuses"), "{e}");
        let want: Vec<f64> = (10..20).map(f64::from).collect();
        assert_eq!(rt.read::<f64>(&other).unwrap(), want, "threads {threads}");
    }
}

/// A task that writes part of a store depends only on the points of an earlier whole write it
/// overlaps, so it can fail before that earlier task ends; the earlier task's successful end
/// must not wipe the later failure (it did: poison was cleared by any whole write ending).
#[test]
fn a_later_failure_survives_an_earlier_whole_write_ending() {
    let rt = Runtime::new(3);
    rt.register("slow_fill", |ctx| {
        if ctx.linear_point() == 1 {
            std::thread::sleep(Duration::from_millis(150));
        }
        ctx.write::<f64>(0).as_mut_slice().fill(1.0);
    })
    .unwrap();
    rt.register("fail_part", |_| panic!("the part refuses"))
        .unwrap();
    let x = rt.create(DType::F64, &[8]).unwrap();
    rt.task("slow_fill")
        .write(&x)
        .launch_domain(&[2])
        .submit()
        .unwrap();
    // Overlaps point 0's half only: it runs while point 1 still sleeps.
    rt.task("fail_part")
        .write(&x.slice(0, 0..2).unwrap())
        .submit()
        .unwrap();
    match rt.read::<f64>(&x) {
        Err(RuntimeError::TaskFailed { task, .. }) => assert_eq!(task, "fail_part"),
        other => panic!("expected the later failure, got {other:?}"),
    }
    // A whole rewrite issued after the failure still clears it.
    rt.fill(&x, 2.0).unwrap();
    assert_eq!(rt.read::<f64>(&x).unwrap(), vec![2.0; 8]);
}

#[test]
fn reference_counts_split_application_and_pending_tasks() {
    let rt = Runtime::new(2);
    let release = Arc::new(AtomicBool::new(false));
    let r = release.clone();
    rt.register("hold", move |ctx| {
        while !r.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        ctx.write::<f64>(0).fill(5.0);
    })
    .unwrap();
    let x = rt.create(DType::F64, &[4]).unwrap();
    assert_eq!((x.app_refs(), x.pending_refs()), (1, 0));
    let view = x.slice(0, 1..3).unwrap();
    assert_eq!(x.app_refs(), 2);
    drop(view);
    rt.task("hold")
        .write(&x)
        .launch_domain(&[1])
        .submit()
        .unwrap();
    assert_eq!((x.app_refs(), x.pending_refs()), (1, 1));
    let keep = x.clone();
    drop(x); // the application lets go of one handle while the task is still pending
    assert_eq!((keep.app_refs(), keep.pending_refs()), (1, 1));
    release.store(true, Ordering::Release);
    assert_eq!(rt.read::<f64>(&keep).unwrap(), vec![5.0; 4]);
    rt.fence().unwrap();
    assert_eq!(keep.pending_refs(), 0);
}

#[test]
fn names_are_registered_once() {
    let rt = Runtime::new(1);
    rt.register("t", |_| {}).unwrap();
    assert_eq!(
        rt.register("t", |_| {}),
        Err(RuntimeError::DuplicateTask("t".into()))
    );
    let other = Runtime::new(1);
    let s = other.create(DType::F64, &[1]).unwrap();
    assert!(matches!(
        rt.task("t").read(&s).submit(),
        Err(RuntimeError::ForeignStore { .. })
    ));
}

/// Another runtime's future is refused at submit, whatever that runtime's window and whether
/// its producer has run: it used to be accepted, and the task ran before the value existed
/// (an internal error) or waited on another pool's node (a hang), depending on timing. A
/// ready value and the result of a runtime that is gone (its value known) are taken.
#[test]
fn another_runtimes_future_is_refused_at_submit() {
    for (threads, window) in [(1, 1), (2, 1), (2, 8), (3, 8)] {
        let make = || {
            let rt = Runtime::builder()
                .threads(threads)
                .window_size(window)
                .build();
            rt.register("total", |ctx| {
                ctx.set_result(ctx.read::<f64>(0).as_slice().iter().sum::<f64>())
            })
            .unwrap();
            rt.register("add", |ctx| {
                let a = ctx.scalar(1).as_f64();
                let x = ctx.read::<f64>(0).as_slice().to_vec();
                let mut y = ctx.write::<f64>(1);
                for (y, x) in y.as_mut_slice().iter_mut().zip(x) {
                    *y = x + a;
                }
            })
            .unwrap();
            rt
        };
        let (a, b) = (make(), make());
        let total = |rt: &Runtime| {
            let x = rt.from_vec(&[4], vec![1.0f64, 2.0, 3.0, 4.0]).unwrap();
            rt.task("total")
                .read(&x)
                .submit_reduce(ReduceOp::Sum)
                .unwrap()
        };
        let add = |f: &Future| {
            let x = b.from_vec(&[4], vec![0.0f64; 4]).unwrap();
            let y = b.create(DType::F64, &[4]).unwrap();
            b.task("add")
                .read(&x)
                .write(&y)
                .scalar(0.5)
                .future(f)
                .align(&x, &y)
                .submit()
                .map(|()| b.read::<f64>(&y).unwrap())
        };
        let foreign = total(&a);
        let err = add(&foreign).unwrap_err();
        assert_eq!(
            err,
            RuntimeError::ForeignFuture {
                task: "add".into(),
                index: 1
            },
            "threads {threads}, window {window}"
        );
        assert!(err.to_string().contains("Future::get"), "{err}");
        // Also once its value is known: the answer must not depend on timing.
        assert_eq!(foreign.get().unwrap().as_f64(), 10.0);
        assert!(matches!(
            add(&foreign),
            Err(RuntimeError::ForeignFuture { .. })
        ));
        // Its own runtime's future, a ready value, a gone runtime's result: taken.
        assert_eq!(add(&total(&b)).unwrap(), vec![10.0; 4]);
        assert_eq!(add(&Future::ready(2.0)).unwrap(), vec![2.0; 4]);
        drop(a);
        assert_eq!(add(&foreign).unwrap(), vec![10.0; 4]);
    }
}

#[test]
fn statistics_count_tasks_points_and_analysis_time() {
    // A window of one: the five tasks are counted as launched, not fused into one.
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(1)
        .window_size(1)
        .build();
    rt.register("nop", |_| {}).unwrap();
    let x = rt.create(DType::F64, &[8]).unwrap();
    for _ in 0..5 {
        rt.task("nop").read_write(&x).submit().unwrap();
    }
    rt.fence().unwrap();
    let s = rt.stats();
    assert_eq!(s.tasks_issued, 5);
    assert_eq!(s.points_run, 10);
    assert_eq!(s.partitions_created, 1);
    assert_eq!(s.partitions_reused, 4);
    assert!(s.analysis_ns > 0);
}

/// Registers `name`: a task whose points meet — each waits (up to 10 s) until every one of
/// `points` has started — then record the thread they ran on and whether they met, then run
/// `then`. Under `threads(n)` a runtime has `n - 1` workers, so `n` points meet only if the
/// application's thread runs one of them while it waits.
fn register_meeting(
    rt: &Runtime,
    name: &str,
    points: usize,
    then: fn(),
) -> Arc<Mutex<Vec<(ThreadId, bool)>>> {
    let arrived = Arc::new((Mutex::new(0usize), Condvar::new()));
    let log = Arc::new(Mutex::new(vec![]));
    let l = log.clone();
    rt.register(name, move |_| {
        let (count, cv) = &*arrived;
        let mut n = count.lock().unwrap();
        *n += 1;
        cv.notify_all();
        let (n, wait) = cv
            .wait_timeout_while(n, Duration::from_secs(10), |n| *n < points)
            .unwrap();
        drop(n);
        l.lock()
            .unwrap()
            .push((std::thread::current().id(), !wait.timed_out()));
        then();
    })
    .unwrap();
    log
}

#[test]
fn the_issuing_thread_runs_points_while_it_waits() {
    for threads in [1, 2, 3] {
        // `threads(1)` still has one worker: two points can meet there too.
        let points = threads.max(2);
        let rt = Runtime::new(threads);
        let log = register_meeting(&rt, "meet", points, || {});
        let x = rt.create(DType::F64, &[points]).unwrap();
        let before = rt.stats();
        rt.task("meet")
            .write(&x)
            .launch_domain(&[points])
            .submit()
            .unwrap();
        rt.fence().unwrap();
        let log = log.lock().unwrap();
        assert_eq!(log.len(), points);
        assert!(
            log.iter().all(|&(_, met)| met),
            "{threads} threads: the points never all ran at once: {log:?}"
        );
        assert!(
            log.iter().any(|&(t, _)| t == std::thread::current().id()),
            "{threads} threads: no point ran on the application's thread"
        );
        assert!(rt.stats().since(&before).nodes_helped >= 1);
    }
}

/// The issuing thread, asleep in `fence`, is the only thread that can run a node queued
/// while the worker is busy: the pool must wake it for that node (a push wakes one sleeper,
/// and here the only sleeper is the issuer). `first` runs on the worker, which then keeps
/// `waits` (its first successor) and queues `sets`; `waits` runs until `sets` has run, for up
/// to 10 s.
#[test]
fn a_node_queued_while_only_the_issuer_sleeps_runs_on_it() {
    for threads in [1, 2, 3] {
        let rt = Runtime::builder()
            .threads(threads)
            .window_size(1)
            .fusion(false)
            .build();
        let set = Arc::new((Mutex::new(false), Condvar::new()));
        let started = Arc::new(AtomicBool::new(false));
        let st = started.clone();
        rt.register("first", move |_| {
            st.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(50));
        })
        .unwrap();
        let s = set.clone();
        rt.register("sets", move |_| {
            *s.0.lock().unwrap() = true;
            s.1.notify_all();
        })
        .unwrap();
        let met = Arc::new(AtomicBool::new(false));
        let (s, m) = (set.clone(), met.clone());
        rt.register("waits", move |_| {
            let g = s.0.lock().unwrap();
            let (g, _) =
                s.1.wait_timeout_while(g, Duration::from_secs(10), |set| !*set)
                    .unwrap();
            m.store(*g, Ordering::SeqCst);
        })
        .unwrap();
        let x = rt.create(DType::F64, &[1]).unwrap();
        let (y, z) = (
            rt.create(DType::F64, &[1]).unwrap(),
            rt.create(DType::F64, &[1]).unwrap(),
        );
        let one = |name: &str, w: &tessera_runtime::Store| {
            rt.task(name)
                .read(&x)
                .write(w)
                .launch_domain(&[1])
                .submit()
                .unwrap()
        };
        rt.task("first")
            .write(&x)
            .launch_domain(&[1])
            .submit()
            .unwrap();
        // On a worker (this thread runs nodes only inside a wait).
        let t = std::time::Instant::now();
        while !started.load(Ordering::SeqCst) {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "`first` never started"
            );
            std::thread::yield_now();
        }
        one("waits", &y);
        one("sets", &z);
        rt.fence().unwrap();
        assert!(
            met.load(Ordering::SeqCst),
            "{threads} threads: `sets` did not run while `waits` held the worker"
        );
    }
}

#[test]
fn a_body_panicking_on_the_issuing_thread_fails_its_task_not_the_caller() {
    let rt = Runtime::new(2);
    let log = register_meeting(&rt, "meet_then_fail", 2, || panic!("boom"));
    let x = rt.create(DType::F64, &[2]).unwrap();
    rt.task("meet_then_fail")
        .write(&x)
        .launch_domain(&[2])
        .submit()
        .unwrap();
    // The panic on this thread is the task's failure: `fence` returns normally.
    rt.fence().unwrap();
    assert!(log
        .lock()
        .unwrap()
        .iter()
        .any(|&(t, met)| met && t == std::thread::current().id()));
    match rt.read::<f64>(&x) {
        Err(RuntimeError::TaskFailed { task, message, .. }) => {
            assert_eq!(task, "meet_then_fail");
            assert_eq!(message, "boom");
        }
        other => panic!("expected a task failure, got {other:?}"),
    }
    rt.fill(&x, 2.0).unwrap();
    assert_eq!(rt.read::<f64>(&x).unwrap(), vec![2.0; 2]);
}

/// A point's read views of one store share one borrow, taken when the point starts and
/// released when the point ends (branch ledger15): the views see the right cells, a later task
/// writes the same cells, and a point that writes one part of a store while it reads two
/// others (disjoint: overlapping arguments one of which writes are refused at submit) still
/// works. Fails if the point's borrow is never released (`std::mem::forget(b)` in
/// `Held::take` instead of keeping it: the later write finds the cells in use).
#[test]
fn a_point_s_read_views_of_one_store_share_a_borrow_released_when_it_ends() {
    for threads in [1, 2] {
        let rt = Runtime::new(threads);
        rt.register("read_two", |ctx| {
            let s = {
                let (a, b) = (ctx.read::<f64>(1), ctx.read::<f64>(2));
                a.as_slice().iter().sum::<f64>() * 10.0 + b.as_slice().iter().sum::<f64>()
            };
            ctx.write::<f64>(0).fill(s);
        })
        .unwrap();
        rt.register("set", |ctx| {
            ctx.write::<f64>(0).fill(ctx.scalar(0).as_f64())
        })
        .unwrap();
        let x = rt.from_vec(&[5], vec![1.0f64, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let part = |r: std::ops::Range<usize>| x.slice(0, r).unwrap();
        let y = rt.create(DType::F64, &[2]).unwrap();
        rt.task("read_two")
            .write(&y)
            .read(&part(0..2))
            .read(&part(2..4))
            .submit()
            .unwrap();
        assert_eq!(rt.read::<f64>(&y).unwrap(), vec![37.0, 37.0]);
        rt.task("set")
            .write(&part(0..4))
            .scalar(9.0)
            .submit()
            .unwrap();
        assert_eq!(rt.read::<f64>(&x).unwrap(), vec![9.0, 9.0, 9.0, 9.0, 5.0]);
        // The point writes x[4..5] and reads x[0..2] and x[2..4].
        rt.task("read_two")
            .write(&part(4..5))
            .read(&part(0..2))
            .read(&part(2..4))
            .submit()
            .unwrap();
        assert_eq!(rt.read::<f64>(&x).unwrap(), vec![9.0, 9.0, 9.0, 9.0, 198.0]);
    }
}

/// `at` / `set_at` on 1-d views take an inline path (branch metg21): on a slice (a view whose
/// origin is not 0) split over points, each point reads and writes exactly its own cells, and
/// an index one below its range, or a 1-d index into a 2-d store, fails the task, as before.
#[test]
fn one_d_element_access_on_a_sliced_view_stays_in_its_point() {
    let rt = Runtime::new(2);
    rt.register("double_at", |ctx| {
        let r = ctx.read::<f64>(0);
        let mut w = ctx.write::<f64>(1);
        for i in w.range() {
            w.set_at(i, 2.0 * r.at(i));
        }
    })
    .unwrap();
    rt.register("below", |ctx| {
        let r = ctx.read::<f64>(0);
        let start = r.range().start;
        if start > 0 {
            std::hint::black_box(r.at(start - 1));
        }
    })
    .unwrap();
    rt.register("flat_in_2d", |ctx| {
        std::hint::black_box(ctx.read::<f64>(0).at(0));
    })
    .unwrap();
    let src = rt
        .from_vec(&[12], (0..12).map(f64::from).collect())
        .unwrap();
    let dst = rt.create(DType::F64, &[12]).unwrap();
    rt.task("double_at")
        .read(&src.slice(0, 3..11).unwrap())
        .write(&dst.slice(0, 2..10).unwrap())
        .launch_domain(&[4])
        .submit()
        .unwrap();
    let want: Vec<f64> = (0..12)
        .map(|i| {
            if (2..10).contains(&i) {
                2.0 * (i + 1) as f64
            } else {
                0.0
            }
        })
        .collect();
    assert_eq!(rt.read::<f64>(&dst).unwrap(), want);
    let failure = |name: &str, s: &Store| {
        let f = rt
            .task(name)
            .read(s)
            .launch_domain(&[2])
            .submit_reduce(ReduceOp::Sum);
        match f.unwrap().get() {
            Err(RuntimeError::TaskFailed { message, .. }) => message,
            other => panic!("expected {name} to fail, got {other:?}"),
        }
    };
    let below = failure("below", &src.slice(0, 3..11).unwrap());
    assert!(below.contains("outside this point's sub-store"), "{below}");
    let m = rt.create(DType::F64, &[4, 3]).unwrap();
    let flat = failure("flat_in_2d", &m);
    assert!(flat.contains("outside this point's sub-store"), "{flat}");
}

/// For a task of 6 points whose failing points fail out of order: points 1 and 4 refuse
/// (panic), point 1 after 200 ms, so that point 4's failure always lands first. Returns the
/// point.
pub(crate) fn refuse_points_1_and_4(ctx: &tessera_runtime::TaskContext) -> usize {
    let p = ctx.linear_point();
    if p == 1 {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(p != 1 && p != 4, "point {p} refuses");
    p
}

/// A failed reduction whose points reduce into the same
/// cells (a broadcast accumulator). Reading the store must give the error the task reports
/// (its lowest failed point's, `launch::keep_earliest`), not whichever point failed first in
/// time: `LaunchArg::poison_reduced` poisons each sub-store with the kept error, but
/// `Poison::insert` drops it as a duplicate of the failed point's own poisoning of the same
/// cells at the same position (before 7abe501 the finish step's whole-store poisoning, `None`
/// cells, sorted first and won). Found by stop 59's review.
#[test]
fn reading_a_failed_reduction_gives_its_lowest_point_s_error() {
    for threads in [2, 3] {
        let rt = Runtime::new(threads);
        rt.register("slow_fragile_add", |ctx| {
            refuse_points_1_and_4(ctx);
            ctx.reduce::<f64>(0).reduce_at(0, 1.0);
            ctx.set_result(1.0);
        })
        .unwrap();
        let y = rt.create(DType::F64, &[1]).unwrap();
        let f = rt
            .task("slow_fragile_add")
            .reduce(&y, ReduceOp::Sum)
            .broadcast(&y, &[0])
            .launch_domain(&[6])
            .submit_reduce(ReduceOp::Sum)
            .unwrap();
        let from_future = f.get().unwrap_err().to_string();
        let from_read = rt.read::<f64>(&y).unwrap_err().to_string();
        assert!(
            from_future.contains("point 1 refuses"),
            "future: {from_future}"
        );
        assert_eq!(from_read, from_future, "threads {threads}: reading y");
    }
}

/// The same for an unbound output that two points fail to emit (each
/// failed point poisons it whole, at the same position: the first to fail in time is kept).
#[test]
fn reading_a_failed_unbound_output_gives_its_lowest_point_s_error() {
    for threads in [2, 3] {
        let rt = Runtime::new(threads);
        rt.register("slow_fragile_emit", |ctx| {
            let p = refuse_points_1_and_4(ctx);
            ctx.emit(0, vec![p as f64]);
            ctx.set_result(1.0);
        })
        .unwrap();
        let u = rt.create_unbound(DType::F64);
        let f = rt
            .task("slow_fragile_emit")
            .write_unbound(&u)
            .launch_domain(&[6])
            .submit_reduce(ReduceOp::Sum)
            .unwrap();
        let from_future = f.get().unwrap_err().to_string();
        let from_read = rt.read::<f64>(&u).unwrap_err().to_string();
        assert!(
            from_future.contains("point 1 refuses"),
            "future: {from_future}"
        );
        assert_eq!(from_read, from_future, "threads {threads}: reading u");
    }
}

/// A task of more than 64 arguments (a fused task of a window's worth of statements has as
/// many) reads each of them. A point's view of argument `at` tested bit `at` of a 64-bit
/// mask of covered reads (`Held::covered`): from argument 64 on the shift overflowed, which
/// panicked in debug builds (the point failed with "attempt to shift right with overflow").
#[test]
fn a_task_reads_past_its_64th_argument() {
    for (fusion, window) in [(false, 1), (true, 32)] {
        let rt = Runtime::builder()
            .threads(2)
            .fusion(fusion)
            .window_size(window)
            .build();
        rt.register("sum_all", |ctx| {
            let s: f64 = (1..71).map(|a| ctx.read::<f64>(a).as_slice()[0]).sum();
            ctx.write::<f64>(0).fill(s);
        })
        .unwrap();
        rt.register("sum3", |ctx| {
            let s: f64 = (1..4).map(|a| ctx.read::<f64>(a).as_slice()[0]).sum();
            ctx.write::<f64>(0).fill(s);
        })
        .unwrap();
        let xs: Vec<_> = (0..70)
            .map(|i| rt.from_vec(&[1], vec![i as f64]).unwrap())
            .collect();
        // One task of 71 arguments.
        let y = rt.create(DType::F64, &[1]).unwrap();
        let t = xs
            .iter()
            .fold(rt.task("sum_all").write(&y), |t, x| t.read(x));
        t.launch_domain(&[1]).submit().unwrap();
        // 20 tasks of 4 arguments each, which a window of 32 fuses into one of 80.
        let ys: Vec<_> = (0..20)
            .map(|k| {
                let y = rt.create(DType::F64, &[1]).unwrap();
                let t = (0..3).fold(rt.task("sum3").write(&y), |t, j| t.read(&xs[3 * k + j]));
                t.launch_domain(&[1]).submit().unwrap();
                y
            })
            .collect();
        assert_eq!(
            rt.read::<f64>(&y).unwrap(),
            vec![(0..70).sum::<usize>() as f64]
        );
        for (k, y) in ys.iter().enumerate() {
            let want = (3 * k..3 * k + 3).sum::<usize>() as f64;
            assert_eq!(
                rt.read::<f64>(y).unwrap(),
                vec![want],
                "fusion {fusion}, task {k}"
            );
        }
    }
}

/// A launch domain whose point count overflows (or passes the 2^32 - 1 points a replay
/// numbers) is refused at submit: `[usize::MAX, 2]` used to panic in the solver, on the
/// application's thread, with a layout error.
#[test]
fn a_launch_domain_too_large_to_count_is_refused_at_submit() {
    let rt = Runtime::new(1);
    rt.register("t", |_| {}).unwrap();
    let x = rt.create(DType::F64, &[4]).unwrap();
    for domain in [vec![usize::MAX, 2], vec![1 << 32]] {
        assert_eq!(
            rt.task("t").read(&x).launch_domain(&domain).submit(),
            Err(RuntimeError::BadLaunchDomain {
                task: "t".into(),
                domain
            })
        );
    }
    assert_eq!(rt.read::<f64>(&x).unwrap(), vec![0.0; 4]);
}

/// `fence` from a task body fails with `InsideTask` on every window and with tracing: it
/// used to wait for every issued task, the calling one included, for good.
#[test]
fn fence_from_a_task_body_fails_instead_of_waiting_for_itself() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for b in [
            Runtime::builder().threads(1),
            Runtime::builder().threads(2).window_size(4),
            Runtime::builder().threads(2).tracing(true),
        ] {
            let rt = Arc::new(b.build());
            let me = Arc::downgrade(&rt);
            let got = Arc::new(Mutex::new(Vec::new()));
            let g = got.clone();
            rt.register("fence", move |_| {
                let rt = me.upgrade().expect("the test holds the runtime");
                g.lock().unwrap().push(rt.fence());
            })
            .unwrap();
            let x = rt.create(DType::F64, &[4]).unwrap();
            for _ in 0..3 {
                rt.task("fence").read_write(&x).submit().unwrap();
            }
            rt.fence().unwrap();
            let got = std::mem::take(&mut *got.lock().unwrap());
            assert!(!got.is_empty());
            for e in got {
                assert_eq!(e, Err(RuntimeError::InsideTask { call: "fence" }));
            }
        }
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("a fence inside a task body waited for its own task");
}

/// `range` of a 0-d store's view fails the task with a message saying why (it failed with
/// an index out of bounds inside the runtime's view code).
#[test]
fn range_of_a_0d_view_fails_its_task_naming_why() {
    let rt = Runtime::new(1);
    rt.register("range", |ctx| {
        let _ = ctx.read::<f64>(0).range();
    })
    .unwrap();
    let (x, y) = (
        rt.create(DType::F64, &[]).unwrap(),
        rt.create(DType::F64, &[]).unwrap(),
    );
    rt.task("range").read(&x).write(&y).submit().unwrap();
    match rt.read::<f64>(&y) {
        Err(RuntimeError::TaskFailed { message, .. }) => {
            assert!(message.contains("0-d store"), "{message}")
        }
        other => panic!("expected the task to fail, got {other:?}"),
    }
}

/// A store `create` takes but this machine cannot hold fails the task that first touches it
/// and the read of it with `OutOfMemory`: its first access aborted the process.
#[test]
fn a_store_too_large_for_memory_fails_its_first_access_not_the_process() {
    let rt = Runtime::new(1);
    // 2^45 elements of 8 bytes: 256 TiB, past any address space the kernel lends.
    let huge = rt.create(DType::F64, &[1 << 45]).unwrap();
    let part = huge.slice(0, 0..4).unwrap();
    rt.fill(&part, 1.0).unwrap();
    for read in [rt.read::<f64>(&part), rt.read::<f64>(&huge)] {
        match read {
            Err(RuntimeError::TaskFailed { message, .. }) => {
                assert!(message.contains("cannot be allocated"), "{message}")
            }
            other => panic!("expected the fill to fail, got {other:?}"),
        }
    }
    let untouched = rt.create(DType::F64, &[1 << 45]).unwrap();
    assert_eq!(
        rt.read::<f64>(&untouched),
        Err(RuntimeError::OutOfMemory {
            store: untouched.id(),
            bytes: 1 << 48
        })
    );
}

/// The runtime's own tasks are registered when it is built, so an application task cannot
/// take their names: `value_future`'s task was registered at its first call, and a task of
/// that name registered before ran in its place (its result became the "value").
#[test]
fn the_runtime_s_own_task_names_are_taken_from_the_start() {
    let rt = Runtime::new(1);
    for name in ["tessera.fill", "tessera.value_future"] {
        assert_eq!(
            rt.register(name, |ctx| ctx.set_result(-1.0)),
            Err(RuntimeError::DuplicateTask(name.into()))
        );
    }
    let one = rt.from_vec(&[1, 1], vec![7.5f64]).unwrap();
    assert_eq!(rt.value_future(&one).unwrap().get(), Ok(Scalar::F64(7.5)));
}

/// An unbound store given twice to one task (as `write_unbound` both times, or also as a
/// write) is refused as aliased: it was taken, and the second argument's pieces were dropped.
#[test]
fn an_unbound_output_given_twice_is_refused_as_aliased() {
    let rt = Runtime::builder().threads(2).window_size(1).build();
    rt.register("emit", |ctx| {
        ctx.emit::<f64>(0, vec![1.0]);
        ctx.emit::<f64>(1, vec![2.0]);
    })
    .unwrap();
    let u = rt.create_unbound(DType::F64);
    assert_eq!(
        rt.task("emit").write_unbound(&u).write_unbound(&u).submit(),
        Err(RuntimeError::AliasedArguments {
            task: "emit".into(),
            a: 0,
            b: 1,
            store: u.id()
        })
    );
    let v = rt.create_unbound(DType::F64);
    let w = rt.create_unbound(DType::F64);
    rt.task("emit")
        .write_unbound(&v)
        .write_unbound(&w)
        .submit()
        .unwrap();
    assert_eq!(rt.read::<f64>(&v).unwrap(), vec![1.0]);
    assert_eq!(rt.read::<f64>(&w).unwrap(), vec![2.0]);
}

/// A task whose analysis fails only when the window is flushed (an image of a store a task
/// in the window writes) does not keep `fence` (nor the runtime's drop, which fences) from
/// waiting for the tasks before it: `fence` returned the error while they still ran.
#[test]
fn a_failure_found_at_flush_still_lets_the_tasks_before_it_finish() {
    for drop_it in [false, true] {
        let rt = Runtime::builder().threads(2).window_size(8).build();
        rt.register("slow_sum", |ctx| {
            std::thread::sleep(Duration::from_millis(50));
            ctx.set_result(ctx.read::<f64>(0).as_slice().iter().sum::<f64>())
        })
        .unwrap();
        rt.register("id", |_| {}).unwrap();
        let x = rt.from_vec(&[4], vec![1.0f64; 4]).unwrap();
        let idx = rt.create(DType::U64, &[2]).unwrap();
        rt.fill(&idx, 100u64).unwrap();
        // Queued behind the fill on the one worker: running when the image fails.
        let f = rt
            .task("slow_sum")
            .read(&x)
            .launch_domain(&[2])
            .submit_reduce(ReduceOp::Sum)
            .unwrap();
        // Solved only once the fill has run: the image reaches past `x`.
        rt.task("id")
            .read(&idx)
            .read(&x)
            .image(&idx, &x)
            .submit()
            .unwrap();
        if drop_it {
            drop(rt);
        } else {
            assert!(matches!(
                rt.fence(),
                Err(RuntimeError::ImageOutOfBounds { .. })
            ));
        }
        assert_eq!(
            f.try_get(),
            Some(Ok(Scalar::F64(4.0))),
            "dropped: {drop_it}"
        );
    }
}
