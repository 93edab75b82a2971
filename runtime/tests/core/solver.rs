//! The constraint solver seen through the public API: partition reuse (statistics), images over
//! skewed and empty rows (sub-store bounds seen by task bodies), and constraint errors.

use crate::sparse::{self, Csr, HostCsr};
use std::sync::{Arc, Mutex};
use tessera_runtime::{DType, PosRange, Rect, Runtime, RuntimeError, Store};

fn rt(threads: usize) -> Runtime {
    Runtime::builder()
        .threads(threads)
        .min_piece_size(1)
        .build()
}

#[test]
fn element_wise_tasks_after_spmv_reuse_its_partition() {
    let rt = rt(4);
    sparse::register_spmv(&rt).unwrap();
    rt.register("double", |ctx| {
        let y = ctx.read::<f64>(0);
        let mut z = ctx.write::<f64>(1);
        for i in y.range() {
            z.set_at(i, 2.0 * y.at(i));
        }
    })
    .unwrap();
    let host = HostCsr::laplacian_2d(6);
    let a = Csr::upload(&rt, &host).unwrap();
    let x = rt
        .from_vec(&[36], (0..36).map(|i| i as f64).collect())
        .unwrap();
    let y = sparse::spmv(&rt, &a, &x).unwrap();
    let before = rt.stats();
    let z = rt.create(DType::F64, &[36]).unwrap();
    rt.task("double")
        .read(&y)
        .write(&z)
        .align(&y, &z)
        .submit()
        .unwrap();
    let after = rt.stats().since(&before);
    assert_eq!(
        after.partitions_reused, 1,
        "the aligned class reuses y's key partition"
    );
    assert_eq!(
        after.partitions_created, 0,
        "no new partition for z: same tiling as y"
    );
    // And the answer is right.
    let want: Vec<f64> = host
        .spmv(&(0..36).map(|i| i as f64).collect::<Vec<_>>())
        .iter()
        .map(|v| 2.0 * v)
        .collect();
    assert_eq!(rt.read::<f64>(&z).unwrap(), want);
    // A second SpMV with the same matrix finds every partition, images included.
    let before = rt.stats();
    sparse::spmv(&rt, &a, &x).unwrap();
    assert_eq!(rt.stats().since(&before).partitions_created, 0);
}

/// Runs a gather over `image(pos -> crd)` and returns each point's (pos rows, crd bounds).
fn image_bounds(rows: &[Vec<usize>], cols: usize, threads: usize) -> Vec<(Rect, Rect)> {
    let rt = rt(threads);
    let seen = Arc::new(Mutex::new(vec![]));
    let s = seen.clone();
    rt.register("rows", move |ctx| {
        let (pos, crd) = (ctx.read::<PosRange>(1), ctx.read::<u64>(2));
        // Touch every element the rows point at: out-of-bounds would fail the task.
        let mut y = ctx.write::<f64>(0);
        for i in pos.range() {
            let r = pos.at(i);
            y.set_at(i, (r.lo..r.hi).map(|k| crd.at(k as usize) as f64).sum());
        }
        s.lock()
            .unwrap()
            .push((ctx.linear_point(), ctx.rect(1), ctx.rect(2)));
    })
    .unwrap();
    let m = HostCsr::from_rows(cols, rows);
    let a = Csr::upload(&rt, &m).unwrap();
    let y = rt.create(DType::F64, &[m.rows]).unwrap();
    rt.task("rows")
        .write(&y)
        .read(&a.pos)
        .read(&a.crd)
        .align(&y, &a.pos)
        .image(&a.pos, &a.crd)
        .submit()
        .unwrap();
    let got = rt.read::<f64>(&y).unwrap();
    let want: Vec<f64> = m
        .pos
        .iter()
        .map(|r| (r.lo..r.hi).map(|k| m.crd[k as usize] as f64).sum())
        .collect();
    assert_eq!(got, want);
    let mut v = seen.lock().unwrap().clone();
    v.sort_by_key(|(p, _, _)| *p);
    v.into_iter().map(|(_, a, b)| (a, b)).collect()
}

/// The image a point must get: exactly the positions its rows own.
fn expected_image(rows: &[Vec<usize>], pos_rect: &Rect) -> (usize, usize) {
    let start = |i: usize| rows[..i].iter().map(|r| r.len()).sum::<usize>();
    let (lo, hi) = (pos_rect.lo()[0], pos_rect.hi()[0]);
    if (lo..hi).all(|i| rows[i].is_empty()) {
        (0, 0)
    } else {
        let first = (lo..hi).find(|&i| !rows[i].is_empty()).unwrap();
        let last = (lo..hi).rev().find(|&i| !rows[i].is_empty()).unwrap();
        (start(first), start(last) + rows[last].len())
    }
}

#[test]
fn images_follow_skewed_and_empty_rows() {
    // One heavy row, runs of empty rows, an empty tail.
    let mut rows: Vec<Vec<usize>> = vec![vec![]; 16];
    rows[2] = (0..40).collect();
    rows[3] = vec![1];
    rows[9] = vec![0, 5, 7];
    for threads in [1, 4] {
        let b = image_bounds(&rows, 40, threads);
        assert_eq!(b.len(), threads);
        for (pos_rect, crd_rect) in &b {
            let (lo, hi) = expected_image(&rows, pos_rect);
            assert_eq!(
                (crd_rect.lo()[0], crd_rect.hi()[0]),
                (lo, hi),
                "rows {pos_rect:?}"
            );
        }
    }
}

#[test]
fn an_all_empty_matrix_gives_empty_images() {
    let rows: Vec<Vec<usize>> = vec![vec![]; 8];
    for (_, crd) in image_bounds(&rows, 4, 4) {
        assert!(crd.is_empty());
    }
}

#[test]
fn constraint_errors_name_the_task_and_store() {
    let rt = rt(2);
    rt.register("noop", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[4]).unwrap();
    let b = rt.create(DType::F64, &[5]).unwrap();
    let c = rt.create(DType::F64, &[4]).unwrap();
    let e = rt
        .task("noop")
        .read(&a)
        .write(&b)
        .align(&a, &b)
        .submit()
        .unwrap_err();
    assert!(
        matches!(e, RuntimeError::AlignShapes { ref task, .. } if task == "noop"),
        "{e}"
    );
    let e = rt.task("noop").read(&a).align(&a, &c).submit().unwrap_err();
    assert_eq!(
        e,
        RuntimeError::NotAnArgument {
            task: "noop".into(),
            constraint: "align",
            store: c.id()
        }
    );
    let e = rt
        .task("noop")
        .read(&a)
        .read(&b)
        .image(&a, &b)
        .submit()
        .unwrap_err();
    assert!(matches!(e, RuntimeError::ImageSource { .. }), "{e}");
    let e = rt
        .task("noop")
        .read(&a)
        .broadcast(&a, &[1])
        .submit()
        .unwrap_err();
    assert!(
        matches!(e, RuntimeError::BroadcastDim { dim: 1, .. }),
        "{e}"
    );
    let e = rt.task("nope").read(&a).submit().unwrap_err();
    assert_eq!(e, RuntimeError::UnknownTask("nope".into()));
    let idx = rt.from_vec(&[2], vec![0u64, 9]).unwrap();
    let e = rt
        .task("noop")
        .read(&idx)
        .read(&a)
        .image(&idx, &a)
        .submit()
        .unwrap_err();
    assert!(
        matches!(
            e,
            RuntimeError::ImageOutOfBounds {
                value: 9,
                extent: 4,
                ..
            }
        ),
        "{e}"
    );
}

/// A constraint names a view, and a view given as several arguments is one operand to it:
/// every occurrence gets the partition (before, only the first did, and the others were cut
/// as if unconstrained: a broadcast view read as a tile, an image destination read as the tile
/// its other occurrence had).
#[test]
fn a_constraint_on_a_view_given_twice_partitions_both() {
    let rt = rt(2);
    // Each point writes the length of its sub-store of argument 1 into its cells of y.
    rt.register("len_of_second", |ctx| {
        let n = ctx.read::<f64>(1).as_slice().len() as f64;
        ctx.write::<f64>(2).as_mut_slice().fill(n);
    })
    .unwrap();
    let x = rt.create(DType::F64, &[8]).unwrap();
    let (y, y2) = (
        rt.create(DType::F64, &[8]).unwrap(),
        rt.create(DType::F64, &[8]).unwrap(),
    );
    rt.task("len_of_second")
        .read(&x)
        .read(&x)
        .write(&y)
        .broadcast(&x, &[0])
        .launch_domain(&[4])
        .submit()
        .unwrap();
    assert_eq!(rt.read::<f64>(&y).unwrap(), vec![8.0; 8]);
    // Each point writes 1 where its sub-stores of arguments 1 and 2 are the same cells.
    rt.register("same_parts", |ctx| {
        let same = ctx.read::<f64>(1).range() == ctx.read::<f64>(2).range();
        ctx.write::<f64>(3)
            .as_mut_slice()
            .fill(f64::from(u8::from(same)));
    })
    .unwrap();
    rt.task("same_parts")
        .read(&y)
        .read(&x)
        .read(&x)
        .write(&y2)
        .align(&x, &y2)
        .launch_domain(&[4])
        .submit()
        .unwrap();
    assert_eq!(rt.read::<f64>(&y2).unwrap(), vec![1.0; 8]);
    // x's parts are the images of idx's halves: [0, 2] and [5, 6].
    let idx = rt.from_vec(&[4], vec![0i64, 2, 5, 6]).unwrap();
    let z = rt.create(DType::F64, &[4]).unwrap();
    rt.task("same_parts")
        .read(&idx)
        .read(&x)
        .read(&x)
        .write(&z)
        .image(&idx, &x)
        .align(&idx, &z)
        .launch_domain(&[2])
        .submit()
        .unwrap();
    assert_eq!(rt.read::<f64>(&z).unwrap(), vec![1.0; 4]);
}

#[test]
fn racing_arguments_are_refused() {
    let rt = rt(2);
    rt.register("noop", |_| {}).unwrap();
    let x = rt.create(DType::F64, &[10]).unwrap();
    let (l, r) = (x.slice(0, 0..6).unwrap(), x.slice(0, 4..10).unwrap());
    let e = rt
        .task("noop")
        .write(&l)
        .read(&r)
        .align(&l, &r)
        .submit()
        .unwrap_err();
    assert!(matches!(e, RuntimeError::AliasedArguments { .. }), "{e}");
    // Disjoint views of one store may be written and read by one task.
    let (a, b) = (x.slice(0, 0..5).unwrap(), x.slice(0, 5..10).unwrap());
    rt.task("noop")
        .write(&a)
        .read(&b)
        .align(&a, &b)
        .submit()
        .unwrap();
    // A replicated store written by several points would race.
    let e = rt
        .task("noop")
        .write(&x)
        .broadcast(&x, &[0])
        .launch_domain(&[3])
        .submit()
        .unwrap_err();
    assert!(matches!(e, RuntimeError::OverlappingWrites { .. }), "{e}");
}

#[test]
fn launch_domain_follows_machine_and_minimum_piece() {
    let seen = Arc::new(Mutex::new(0usize));
    let rt = Runtime::builder().threads(4).min_piece_size(10).build();
    let s = seen.clone();
    rt.register("count", move |ctx| *s.lock().unwrap() = ctx.domain()[0])
        .unwrap();
    let tiny = rt.create(DType::F64, &[15]).unwrap();
    rt.task("count").read(&tiny).submit().unwrap();
    rt.fence().unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        2,
        "15 elements with pieces of at least 10"
    );
    let big = rt.create(DType::F64, &[1000]).unwrap();
    rt.task("count").read(&big).submit().unwrap();
    rt.fence().unwrap();
    assert_eq!(*seen.lock().unwrap(), 4, "one piece per thread");
    rt.task("count")
        .read(&big)
        .launch_domain(&[7])
        .submit()
        .unwrap();
    rt.fence().unwrap();
    assert_eq!(*seen.lock().unwrap(), 7, "a fixed launch domain wins");
}

/// Stores for a gather `y[i] = x[idx[i]]` (6 elements) and a task that writes `5, 4, …, 0`
/// into `idx` once the returned gate is opened (bounded, so a regression fails instead of
/// hanging): `idx` stays "being written" for as long as a test needs.
fn reverse_later(rt: &Runtime) -> (Arc<std::sync::atomic::AtomicBool>, Store, Store, Store) {
    let gate = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let g = gate.clone();
    rt.register("slow_reverse", move |ctx| {
        let t0 = std::time::Instant::now();
        while !g.load(std::sync::atomic::Ordering::Acquire) && t0.elapsed().as_secs() < 5 {
            std::thread::yield_now();
        }
        let mut idx = ctx.write::<u64>(0);
        let n = idx.as_slice().len() as u64;
        for (i, j) in idx.as_mut_slice().iter_mut().enumerate() {
            *j = n - 1 - i as u64;
        }
    })
    .unwrap();
    let idx = rt.from_vec(&[6], vec![0u64; 6]).unwrap();
    let x = rt
        .from_vec(&[6], (0..6).map(|v| v as f64).collect())
        .unwrap();
    let y = rt.create(DType::F64, &[6]).unwrap();
    rt.task("slow_reverse")
        .read_write(&idx)
        .launch_domain(&[1])
        .submit()
        .unwrap();
    (gate, idx, x, y)
}

#[test]
fn repeated_tasks_replay_their_solution() {
    let rt = rt(2);
    rt.register("smooth", |ctx| {
        let (l, c, r) = (ctx.read::<f64>(1), ctx.read::<f64>(2), ctx.read::<f64>(3));
        let mut out = ctx.write::<f64>(0);
        for i in out.range() {
            out.set_at(i, l.at(i) + 2.0 * c.at(i) + r.at(i));
        }
    })
    .unwrap();
    let n = 10;
    let init: Vec<f64> = (0..n).map(|i| (i * i % 7) as f64).collect();
    let a = rt.from_vec(&[n], init.clone()).unwrap();
    let b = rt.from_vec(&[n], init.clone()).unwrap();
    let views = |s: &tessera_runtime::Store| {
        [0..n - 2, 1..n - 1, 2..n, 1..n - 1].map(|r| s.slice(0, r).unwrap())
    };
    let (va, vb) = (views(&a), views(&b));
    let steps = 40;
    let before = rt.stats();
    for step in 0..steps {
        let (cur, next) = if step % 2 == 0 {
            (&va, &vb)
        } else {
            (&vb, &va)
        };
        rt.task("smooth")
            .write(&next[3])
            .read(&cur[0])
            .read(&cur[1])
            .read(&cur[2])
            .align(&next[3], &cur[0])
            .align(&next[3], &cur[1])
            .align(&next[3], &cur[2])
            .submit()
            .unwrap();
    }
    let s = rt.stats().since(&before);
    // Key partitions settle within a few steps; from then on every solve is a replay.
    assert!(
        s.solutions_replayed >= steps - 6,
        "{} of {steps} solutions replayed",
        s.solutions_replayed
    );
    let (mut x, mut y) = (init.clone(), init);
    for _ in 0..steps {
        for i in 1..n - 1 {
            y[i] = x[i - 1] + 2.0 * x[i] + x[i + 1];
        }
        std::mem::swap(&mut x, &mut y);
    }
    assert_eq!(rt.read::<f64>(&a).unwrap(), x);
}

#[test]
fn an_image_waits_for_its_source_and_is_exact_whatever_the_timing() {
    // An image used to be coarsened to the whole destination when its source was still being
    // written: whether a worker had finished decided the partition (ranks could disagree).
    // Now it waits for the source's writers, so the partition depends on the stream alone.
    let rt = rt(2);
    let seen = Arc::new(Mutex::new(vec![]));
    let s = seen.clone();
    rt.register("gather", move |ctx| {
        let mut d = ctx.write::<f64>(0);
        let (idx, x) = (ctx.read::<u64>(1), ctx.read::<f64>(2));
        for i in d.range() {
            d.set_at(i, x.at(idx.at(i) as usize));
        }
        s.lock().unwrap().push((ctx.linear_point(), ctx.rect(2)));
    })
    .unwrap();
    let (gate, idx, x, y) = reverse_later(&rt);
    let opener = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            gate.store(true, std::sync::atomic::Ordering::Release);
        })
    };
    let before = rt.stats();
    rt.task("gather")
        .write(&y)
        .read(&idx)
        .read(&x)
        .align(&y, &idx)
        .image(&idx, &x)
        .launch_domain(&[2])
        .submit()
        .unwrap();
    assert_eq!(
        rt.stats().since(&before).blocking_waits,
        1,
        "the image waited for idx"
    );
    opener.join().unwrap();
    rt.fence().unwrap();
    let mut got = seen.lock().unwrap().clone();
    got.sort_by_key(|(p, _)| *p);
    assert_eq!(
        got,
        vec![(0, Rect::new(&[3], &[6])), (1, Rect::new(&[0], &[3]))],
        "point 0 reads idx 5,4,3 and point 1 reads 2,1,0"
    );
    assert_eq!(
        rt.read::<f64>(&y).unwrap(),
        vec![5.0, 4.0, 3.0, 2.0, 1.0, 0.0]
    );
}

#[test]
fn the_analysis_waits_without_running_bodies_on_the_issuing_thread() {
    // The analysis holds the issuing lock while it waits for an image source; a body run there
    // that called into the runtime (a captured future's `get`, say) would deadlock for good. So
    // while `submit` waits for `idx`, the ready `noop` is left to the worker.
    let rt = rt(2);
    rt.register("noop", |_| {}).unwrap();
    rt.register("scatter", |ctx| {
        let (idx, v) = (ctx.read::<u64>(0), ctx.read::<f64>(1));
        let mut y = ctx.write::<f64>(2);
        for i in idx.range() {
            y.set_at(idx.at(i) as usize, v.at(i));
        }
    })
    .unwrap();
    let (gate, idx, x, y) = reverse_later(&rt);
    let other = rt.create(DType::F64, &[1]).unwrap();
    rt.task("noop").write(&other).submit().unwrap();
    let opener = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            gate.store(true, std::sync::atomic::Ordering::Release);
        })
    };
    let before = rt.stats();
    rt.task("scatter")
        .read(&idx)
        .read(&x)
        .write(&y)
        .align(&idx, &x)
        .image(&idx, &y)
        .submit()
        .unwrap();
    let during = rt.stats().since(&before);
    opener.join().unwrap();
    assert_eq!(during.blocking_waits, 1, "the image waited for idx");
    assert_eq!(during.nodes_helped, 0, "a body ran under the issuing lock");
    assert_eq!(
        rt.read::<f64>(&y).unwrap(),
        vec![5.0, 4.0, 3.0, 2.0, 1.0, 0.0]
    );
}

#[test]
fn tasks_on_stores_made_anew_every_iteration_replay_their_solutions() {
    // `let y = spmv(a, x)` in a loop makes a fresh `y` every iteration. Keyed on store ids, the
    // SpMV and every task reading `y` were solved again each time; renamed (an argument that is
    // no image's source or destination by its first appearance and its key partitions), they
    // replay from the second iteration on.
    let rt = rt(2);
    sparse::register_spmv(&rt).unwrap();
    rt.register("add_into", |ctx| {
        let y = ctx.read::<f64>(0);
        let mut acc = ctx.write::<f64>(1);
        for i in y.range() {
            acc.set_at(i, acc.at(i) + y.at(i));
        }
    })
    .unwrap();
    let host = HostCsr::laplacian_2d(8);
    let a = Csr::upload(&rt, &host).unwrap();
    let xs: Vec<f64> = (0..64).map(|i| (i % 5) as f64).collect();
    let x = rt.from_vec(&[64], xs.clone()).unwrap();
    let acc = rt.from_vec(&[64], vec![0.0; 64]).unwrap();
    let steps = 20;
    let before = rt.stats();
    for _ in 0..steps {
        let y = sparse::spmv(&rt, &a, &x).unwrap();
        rt.task("add_into")
            .read(&y)
            .read_write(&acc)
            .align(&y, &acc)
            .submit()
            .unwrap();
    }
    let s = rt.stats().since(&before);
    assert!(
        s.solutions_replayed >= 2 * steps - 4,
        "{} of {} solutions replayed",
        s.solutions_replayed,
        2 * steps
    );
    let want: Vec<f64> = host.spmv(&xs).iter().map(|v| v * steps as f64).collect();
    assert_eq!(rt.read::<f64>(&acc).unwrap(), want);
}

#[test]
fn an_spmv_over_a_vector_made_anew_every_iteration_replays_its_solution() {
    // CG written naturally makes `p` anew every iteration, and the SpMV reads it through an
    // image of the matrix' coordinates. The image's destination is renamed in the solve memo
    // (its partition is a function of the source and the destination's bounds), so the SpMV
    // replays from the second iteration on; keyed on the destination's store it was solved
    // again every iteration. Every product must still read its own `x`.
    let rt = rt(2);
    sparse::register_spmv(&rt).unwrap();
    let host = HostCsr::laplacian_2d(8);
    let a = Csr::upload(&rt, &host).unwrap();
    let steps = 12;
    let before = rt.stats();
    for step in 0..steps {
        let xs: Vec<f64> = (0..64).map(|i| ((i + step) % 7) as f64).collect();
        let x = rt.from_vec(&[64], xs.clone()).unwrap();
        let y = sparse::spmv(&rt, &a, &x).unwrap();
        assert_eq!(rt.read::<f64>(&y).unwrap(), host.spmv(&xs), "step {step}");
    }
    let s = rt.stats().since(&before);
    assert!(
        s.solutions_replayed >= steps as u64 - 2,
        "{} of {steps} SpMV solutions replayed",
        s.solutions_replayed
    );
}

#[test]
fn a_renamed_store_replays_only_under_the_same_key_partitions() {
    // Two fresh stores, written through 4 and through 2 pieces (their key partitions), then
    // read by a task that lets the solver choose: it follows each store's key partition. The
    // second read must not replay the first one's solve although the stores are renamed alike.
    let rt = rt(2);
    rt.register("fill", |ctx| {
        let mut y = ctx.write::<f64>(0);
        for i in y.range() {
            y.set_at(i, i as f64);
        }
    })
    .unwrap();
    let seen = Arc::new(Mutex::new(vec![]));
    let s = seen.clone();
    rt.register("look", move |ctx| {
        s.lock().unwrap().push(ctx.rect(0));
    })
    .unwrap();
    let mut points = vec![];
    for pieces in [4, 2, 4, 2] {
        let y = rt.create(DType::F64, &[16]).unwrap();
        rt.task("fill")
            .write(&y)
            .launch_domain(&[pieces])
            .submit()
            .unwrap();
        rt.task("look").read(&y).submit().unwrap();
        rt.fence().unwrap();
        points.push(std::mem::take(&mut *seen.lock().unwrap()).len());
    }
    assert_eq!(points, vec![4, 2, 4, 2], "points of each `look`");
}

#[test]
fn an_image_source_made_anew_is_never_renamed() {
    // Fresh index stores of equal shape and state but different values: the image of `x` each
    // one gives is its own (an image's source and destination keep their store in the solve
    // memo), so every gather reads the right cells of `x`.
    let rt = rt(2);
    rt.register("gather", |ctx| {
        let mut d = ctx.write::<f64>(0);
        let (idx, x) = (ctx.read::<u64>(1), ctx.read::<f64>(2));
        for i in d.range() {
            d.set_at(i, x.at(idx.at(i) as usize));
        }
    })
    .unwrap();
    let x = rt
        .from_vec(&[8], (0..8).map(|v| 10.0 + v as f64).collect())
        .unwrap();
    let reverse: Vec<u64> = (0..8).rev().collect();
    let same: Vec<u64> = (0..8).collect();
    for order in [&reverse, &same, &reverse, &same] {
        let idx = rt.from_vec(&[8], order.clone()).unwrap();
        let y = rt.create(DType::F64, &[8]).unwrap();
        rt.task("gather")
            .write(&y)
            .read(&idx)
            .read(&x)
            .align(&y, &idx)
            .image(&idx, &x)
            .launch_domain(&[2])
            .submit()
            .unwrap();
        let want: Vec<f64> = order.iter().map(|&i| 10.0 + i as f64).collect();
        assert_eq!(rt.read::<f64>(&y).unwrap(), want);
    }
}
