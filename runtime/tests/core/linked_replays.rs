//! Linked actor replays (from stop 59's review of the replay path) where the stores change
//! roles between iterations (the same bodies over permuted stores, so consecutive replays are
//! of different traces over the same stores in other orders), stores dropped and made anew
//! between phases, and host reads, fences and future waits at any task of a body, not only
//! between iterations. Every body checks its accesses in the race detector of `tracing_races`
//! (independent of the ledger, which verified replays skip); values are compared bitwise with
//! the untraced run.

use crate::tracing_races::{
    actors, fresh_store, race_checked, random_body, seeds, submit_step, Step,
};
use tessera_runtime::{DType, Future, ReduceOp, Result, Runtime, Store};

const PERMS: [[usize; 3]; 6] = [
    [0, 1, 2],
    [1, 0, 2],
    [0, 2, 1],
    [2, 1, 0],
    [1, 2, 0],
    [2, 0, 1],
];

/// Phases of one of three bodies repeated, each iteration over the stores permuted by one of
/// `k` permutations in turn (k = 1-3); host reads, fences and waits at random tasks; stores
/// replaced by new ones between phases. Every value read is returned.
fn program(seed: u64, rt: &Runtime) -> Result<Vec<f64>> {
    let mut next = crate::tracing::below(seed);
    let bodies: Vec<(Vec<Step>, bool)> = (0..3).map(|_| random_body(&mut next, 4)).collect();
    let mut stores: Vec<Store> = (0..3)
        .map(|i| rt.from_vec(&[8], (0..8).map(|j| (i * 8 + j) as f64).collect()))
        .collect::<Result<_>>()?;
    let mut futures: Vec<Future> = Vec::new();
    let ready = Future::ready(0.5);
    let mut seen = Vec::new();
    let mut made = 100.0;
    // Each store's tag in the detector: a replaced store gets a new one (tag 3 is the fresh).
    let mut tags: Vec<u64> = vec![0, 1, 2];
    for _ in 0..6 {
        let (steps, fresh) = &bodies[next(3) as usize];
        let k = 1 + next(3) as usize;
        let perms: Vec<[usize; 3]> = (0..k).map(|_| PERMS[next(6) as usize]).collect();
        // Host interactions inside the body: at which task, and what.
        let host = next(3) == 0;
        for it in 0..4 + next(18) as usize {
            let perm = perms[it % k];
            let t = fresh_store(rt, *fresh)?;
            for s in steps {
                submit_step(rt, s, &mut futures, &ready, |store| {
                    if store == 3 {
                        (t.as_ref().expect("fresh"), 3)
                    } else {
                        (&stores[perm[store]], tags[perm[store]])
                    }
                })?;
                if host {
                    match next(30) {
                        0 => seen.extend(rt.read::<f64>(&stores[next(3) as usize])?),
                        1 => rt.fence()?,
                        2 => {
                            if let Some(f) = futures.last() {
                                seen.push(f.get()?.as_f64());
                            }
                        }
                        _ => {}
                    }
                }
            }
            match next(24) {
                0 => seen.extend(rt.read::<f64>(&stores[next(3) as usize])?),
                1 => rt.fence()?,
                _ => {}
            }
        }
        // A store replaced by a new one (the old one dropped: its memory may be reused).
        if next(3) == 0 {
            let i = next(3) as usize;
            made += 8.0;
            tags[i] = 4 + made as u64;
            stores[i] = rt.from_vec(&[8], (0..8).map(|j| made + j as f64).collect())?;
        }
    }
    for f in futures {
        seen.push(f.get()?.as_f64());
    }
    for s in &stores {
        seen.extend(rt.read::<f64>(s)?);
    }
    Ok(seen)
}

#[test]
fn permuted_stores_and_host_waits_inside_bodies_keep_linked_replays_race_free() {
    let seeds = seeds("TESSERA_REVIEW_SEEDS", (1..=12).collect());
    let (replays, linked) = race_checked(&seeds, program, &[true]);
    eprintln!("{replays} replays, {linked} linked");
    assert!(replays > 50, "{replays} replays, {linked} linked");
}

/// Registers `inc` (reads argument 0, writes argument 1 as it plus one; panics at point
/// `scalar 0 - 1000` when scalar 0 is at least 1000), `sum` (result: the sum of what it
/// reads) and `set` (writes scalar 0 everywhere).
fn register_failing(rt: &Runtime) -> Result<()> {
    rt.register("inc", |ctx| {
        let flag = ctx.scalar(0).as_u64();
        if flag >= 1000 && ctx.point()[0] as u64 == flag - 1000 {
            panic!("boom");
        }
        let x: Vec<f64> = ctx.read::<f64>(0).as_slice().to_vec();
        let mut y = ctx.write::<f64>(1);
        for (o, i) in y.as_mut_slice().iter_mut().zip(&x) {
            *o = i + 1.0;
        }
    })?;
    rt.register("sum", |ctx| {
        ctx.set_result(ctx.read::<f64>(0).as_slice().iter().sum::<f64>())
    })?;
    rt.register("set", |ctx| {
        let c = ctx.scalar(0).as_f64();
        ctx.write::<f64>(0).as_mut_slice().fill(c);
    })?;
    Ok(())
}

/// What a value read or waited for was: its value, or that it failed.
fn outcome<T: std::fmt::Debug>(r: Result<T>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(_) => "failed".into(),
    }
}

/// A ping-pong loop over halves and wholes of two stores whose `inc` panics at one point of
/// chosen iterations (the recorded trace's scalars differ from the failing replay's only in
/// value, which no replay compares), a future of each step read back, and every so often a
/// whole rewrite that makes the store good again.
fn failing_program(rt: &Runtime, fail_at: &[usize], reset_every: usize) -> Result<Vec<String>> {
    register_failing(rt)?;
    let a = rt.from_vec(&[8], (0..8).map(f64::from).collect())?;
    let b = rt.create(DType::F64, &[8])?;
    let mut out = Vec::new();
    let mut futures = Vec::new();
    for s in 0..120 {
        let (x, y) = if s % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let flag = fail_at
            .iter()
            .position(|&f| f == s)
            .map_or(0u64, |k| 1000 + (k % 2) as u64);
        rt.task("inc")
            .scalar(flag)
            .read(x)
            .write(y)
            .align(x, y)
            .launch_domain(&[2])
            .submit()?;
        let half = y.slice(0, 4..8)?;
        futures.push(
            rt.task("sum")
                .read(&half)
                .launch_domain(&[1])
                .submit_reduce(ReduceOp::Sum)?,
        );
        if s % reset_every == reset_every - 1 {
            rt.task("set")
                .scalar(s as f64)
                .write(x)
                .launch_domain(&[2])
                .submit()?;
        }
        if s % 37 == 36 {
            out.push(outcome(rt.read::<f64>(&a)));
        }
    }
    for f in futures {
        out.push(outcome(f.get()));
    }
    out.push(outcome(rt.read::<f64>(&a)));
    out.push(outcome(rt.read::<f64>(&b)));
    Ok(out)
}

#[test]
fn panics_in_linked_replays_fail_and_heal_as_without_tracing() {
    for (fail_at, reset) in [
        (vec![60usize, 61], 10usize),
        (vec![64, 90, 91, 100], 6),
        (vec![50, 52, 54], 4),
    ] {
        let want =
            failing_program(&Runtime::builder().threads(2).build(), &fail_at, reset).unwrap();
        assert!(want.iter().any(|o| o == "failed"), "{want:?}");
        for threads in 1..=3 {
            for verified in [false, true] {
                for fusion in [false, true] {
                    let rt = Runtime::builder()
                        .threads(threads)
                        .tracing(true)
                        .actors(true)
                        .fusion(fusion)
                        .verified_replays(verified)
                        .trace_sampling(8)
                        .build();
                    let got = failing_program(&rt, &fail_at, reset).unwrap();
                    let st = rt.stats();
                    let at = format!("fail at {fail_at:?}, threads {threads}, verified {verified}, fusion {fusion}");
                    assert!(st.actor_linked_replays > 3, "{at}: {st:?}");
                    assert_eq!(got, want, "{at}: {st:?}");
                }
            }
        }
    }
}

/// Two threads issue their own traced ping-pong loops (own stores) into one runtime while a
/// third fences over and over: fences land between any two tasks of either loop, and a
/// fence's `let_go_of_replays` may drop the last replay another thread just made (the next
/// replay is then entered through an entry vertex). Each loop's values equal its run alone,
/// untraced.
#[test]
fn fences_from_another_thread_between_replays_of_two_issuing_threads() {
    fn lp(rt: &Runtime, seed: f64, steps: usize) -> Result<Vec<f64>> {
        let a = rt.from_vec(&[16], (0..16).map(|i| seed + f64::from(i)).collect())?;
        let b = rt.create(DType::F64, &[16])?;
        for s in 0..steps {
            let (x, y) = if s % 2 == 0 { (&a, &b) } else { (&b, &a) };
            rt.task("inc")
                .scalar(0u64)
                .read(x)
                .write(y)
                .align(x, y)
                .launch_domain(&[2])
                .submit()?;
            let h = y.slice(0, 4..12)?;
            rt.task("set2")
                .read(&h)
                .write(&y.slice(0, 0..4)?)
                .launch_domain(&[1])
                .submit()?;
        }
        rt.read::<f64>(&a)
    }
    fn reg(rt: &Runtime) {
        register_failing(rt).unwrap();
        rt.register("set2", |ctx| {
            let s: f64 = ctx.read::<f64>(0).as_slice().iter().sum();
            ctx.write::<f64>(1).as_mut_slice().fill(s * 0.125);
        })
        .unwrap();
    }
    let plain = Runtime::builder().threads(1).build();
    reg(&plain);
    let want: Vec<Vec<f64>> = (0..2)
        .map(|k| lp(&plain, 10.0 * f64::from(k), 1500).unwrap())
        .collect();
    for threads in 1..=3 {
        for verified in [false, true] {
            let rt = actors(threads, verified);
            reg(&rt);
            let done = std::sync::atomic::AtomicBool::new(false);
            let got: Vec<Vec<f64>> = std::thread::scope(|sc| {
                let fencer = sc.spawn(|| {
                    let mut n = 0;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        rt.fence().unwrap();
                        n += 1;
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    }
                    n
                });
                let hs: Vec<_> = (0..2)
                    .map(|k| {
                        let rt = &rt;
                        sc.spawn(move || lp(rt, 10.0 * f64::from(k), 1500).unwrap())
                    })
                    .collect();
                let got = hs.into_iter().map(|h| h.join().unwrap()).collect();
                done.store(true, std::sync::atomic::Ordering::Relaxed);
                let n = fencer.join().unwrap();
                assert!(n > 0, "{n} fences");
                got
            });
            let st = rt.stats();
            assert_eq!(got, want, "threads {threads}, verified {verified}: {st:?}");
            eprintln!(
                "threads {threads} verified {verified}: replayed {} linked {} abandoned {}",
                st.traces_replayed, st.actor_linked_replays, st.traces_abandoned
            );
        }
    }
}

/// One store as two arguments of one task (read one view, write another), overlapping across
/// points or not, in traced loops with linked replays: values as untraced.
#[test]
fn a_store_read_and_written_through_two_views_of_one_task_replays_as_untraced() {
    fn prog(rt: &Runtime, overlap: bool) -> Result<Vec<f64>> {
        rt.register("shift", |ctx| {
            let x: Vec<f64> = ctx.read::<f64>(0).as_slice().to_vec();
            let mut y = ctx.write::<f64>(1);
            for (o, i) in y.as_mut_slice().iter_mut().zip(&x) {
                *o = 0.5 * i + 1.0;
            }
        })?;
        let a = rt.from_vec(&[12], (0..12).map(f64::from).collect())?;
        let b = rt.from_vec(&[12], (0..12).map(|i| f64::from(i) * 2.0).collect())?;
        let (r, w) = if overlap {
            (2..8, 4..10)
        } else {
            (0..6, 6..12)
        };
        for s in 0..80 {
            let z = if s % 3 == 0 { &a } else { &b };
            let (x, y) = (z.slice(0, r.clone())?, z.slice(0, w.clone())?);
            rt.task("shift")
                .read(&x)
                .write(&y)
                .align(&x, &y)
                .launch_domain(&[2])
                .submit()?;
        }
        let mut out = rt.read::<f64>(&a)?;
        out.extend(rt.read::<f64>(&b)?);
        Ok(out)
    }
    for overlap in [false, true] {
        let want = prog(&Runtime::builder().threads(1).build(), overlap);
        for threads in 1..=3 {
            for verified in [false, true] {
                let rt = Runtime::builder()
                    .threads(threads)
                    .tracing(true)
                    .actors(true)
                    .verified_replays(verified)
                    .trace_sampling(4)
                    .build();
                let got = prog(&rt, overlap);
                let st = rt.stats();
                let at = format!("overlap {overlap}, threads {threads}, verified {verified}");
                match (&want, &got) {
                    (Ok(w), Ok(g)) => assert_eq!(g, w, "{at}: {st:?}"),
                    _ => assert_eq!(got.is_err(), want.is_err(), "{at}: {got:?} {want:?}"),
                }
                // Overlapping views are refused either way; disjoint ones replay, linked.
                assert!(overlap || st.actor_linked_replays > 5, "{at}: {st:?}");
            }
        }
    }
}
