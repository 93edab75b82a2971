//! Adversarial tests of linked actor replays (review41): a replayed point must never run at the
//! same time as a conflicting access issued before or after it, whatever is linked to what.
//!
//! Two kinds of test. Targeted ones hold one replayed read open (a body spinning up to 100 ms
//! for a flag) that a conflicting task issued later sets: if the later task may start while
//! the read runs, it does, and the read sees the flag (the correct order never hangs: the read
//! just gives up waiting). And a random one: every body checks in its accesses (store tag,
//! cells, whether it writes) in a shared table on entry, fails the run if a conflicting access
//! is checked in at that moment, spins a little and checks out — a race detector that does
//! not depend on the ledger (which verified replays skip), over random programs of repeated
//! bodies (links between replays of one trace, of different traces, over fresh stores, entry
//! vertices after chains, host reads in between), compared bitwise with the untraced run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_runtime::{DType, Future, ReduceOp, Result, Runtime, Stats, Store};

fn actors(threads: usize, verified: bool) -> Runtime {
    Runtime::builder()
        .threads(threads)
        .tracing(true)
        .actors(true)
        .verified_replays(verified)
        .trace_sampling(8)
        .build()
}

/// Spins until `flag` is set or 100 ms pass; true if it was set.
fn saw(flag: &AtomicUsize) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        if flag.load(Ordering::SeqCst) != 0 {
            return true;
        }
        std::hint::spin_loop();
    }
    false
}

/// What each iteration of [`slow_read_then_writer`] does around its read of `s`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Body {
    /// A reduction into all of `s`, then the read: the reduction's finish step is the
    /// writer covering the reads of earlier replays (`AccessState::set`).
    Reduce,
    /// A write of all of `s`, then a read of its first half.
    WriteThenReadHalf,
    /// A fresh store written, then read with `s` (and dropped): no two replays use the same
    /// stores, so a replay is linked only right after one behind an entry vertex.
    Fresh,
    /// The loop of `bump` and the read, then a second loop whose every iteration writes `s`:
    /// the first writer after the chain is analysed or a replay's (entry vertex).
    SecondLoop,
}

struct Flags {
    peeks: AtomicUsize,
    wrote: AtomicUsize,
    early: AtomicUsize,
}

/// Iterations of a body that reads `s` (one read, `back` iterations from the last, held open
/// up to 100 ms for the flag), then a writer of all of `s` that sets the flag. Returns whether
/// the writer ran while that read still ran, the sums each read saw and the stats.
fn slow_read_then_writer(
    body: Body,
    back: usize,
    threads: usize,
    verified: bool,
) -> (bool, Vec<f64>, Vec<f64>, Stats) {
    let rt = actors(threads, verified);
    let iterations = 48;
    let slow = iterations - 1 - back;
    let flags = Arc::new(Flags {
        peeks: AtomicUsize::new(0),
        wrote: AtomicUsize::new(0),
        early: AtomicUsize::new(0),
    });
    // `peek` reads one store, `peek2` two (the fresh store too).
    for (name, args) in [("peek", 1), ("peek2", 2)] {
        let f = flags.clone();
        rt.register(name, move |ctx| {
            if f.peeks.fetch_add(1, Ordering::SeqCst) == slow && saw(&f.wrote) {
                f.early.store(1, Ordering::SeqCst);
            }
            let sum: f64 = (0..args)
                .map(|a| ctx.read::<f64>(a).as_slice().iter().sum::<f64>())
                .sum();
            ctx.set_result(sum);
        })
        .unwrap();
    }
    let f = flags.clone();
    rt.register("overwrite", move |ctx| {
        f.wrote.store(1, Ordering::SeqCst);
        ctx.write::<f64>(0).as_mut_slice().fill(7.0);
    })
    .unwrap();
    rt.register("bump", |ctx| {
        for x in ctx.write::<f64>(0).as_mut_slice() {
            *x += 1.0;
        }
    })
    .unwrap();
    rt.register("fill", |ctx| {
        let v = ctx.scalar(0).as_f64();
        ctx.write::<f64>(0).as_mut_slice().fill(v);
    })
    .unwrap();
    rt.register("add_one", |ctx| ctx.reduce::<f64>(0).as_mut_slice().fill(1.0))
        .unwrap();
    let ws = rt.create(DType::F64, &[8]).unwrap();
    let s = rt.from_vec(&[8], vec![1.0; 8]).unwrap();
    let overwrite = |rt: &Runtime| {
        rt.task("overwrite")
            .write(&s)
            .launch_domain(&[1])
            .submit()
            .unwrap()
    };
    let peek = |rt: &Runtime, extra: Option<&Store>, view: &Store| -> Future {
        let t = match extra {
            None => rt.task("peek").read(view),
            Some(e) => rt.task("peek2").read(view).read(e),
        };
        t.launch_domain(&[1]).submit_reduce(ReduceOp::Sum).unwrap()
    };
    let mut sums = Vec::new();
    let mut want = Vec::new();
    let mut cell = 1.0;
    for _ in 0..iterations {
        match body {
            Body::Reduce => {
                rt.task("add_one")
                    .reduce(&s, ReduceOp::Sum)
                    .launch_domain(&[2])
                    .submit()
                    .unwrap();
                cell += 1.0;
                sums.push(peek(&rt, None, &s));
                want.push(8.0 * cell);
            }
            Body::WriteThenReadHalf => {
                rt.task("fill")
                    .write(&s)
                    .scalar(1.0)
                    .launch_domain(&[2])
                    .submit()
                    .unwrap();
                sums.push(peek(&rt, None, &s.slice(0, 0..4).unwrap()));
                want.push(4.0);
            }
            Body::Fresh => {
                let t = rt.create(DType::F64, &[8]).unwrap();
                rt.task("fill")
                    .write(&t)
                    .scalar(2.0)
                    .launch_domain(&[2])
                    .submit()
                    .unwrap();
                sums.push(peek(&rt, Some(&t), &s));
                want.push(8.0 + 16.0);
            }
            Body::SecondLoop => {
                rt.task("bump")
                    .read_write(&ws)
                    .launch_domain(&[2])
                    .submit()
                    .unwrap();
                sums.push(peek(&rt, None, &s));
                want.push(8.0);
            }
        }
    }
    if body == Body::SecondLoop {
        for _ in 0..20 {
            overwrite(&rt);
            rt.task("bump")
                .read_write(&ws)
                .launch_domain(&[2])
                .submit()
                .unwrap();
        }
    } else {
        overwrite(&rt);
    }
    assert_eq!(rt.read::<f64>(&s).unwrap(), [7.0; 8]);
    let got = sums.iter().map(|f| f.get().unwrap().as_f64()).collect();
    let st = rt.stats();
    (flags.early.load(Ordering::SeqCst) != 0, got, want, st)
}

fn check_slow_read(body: Body, backs: std::ops::RangeInclusive<usize>) {
    for back in backs {
        for threads in [2, 3] {
            for verified in [false, true] {
                let (early, got, want, st) = slow_read_then_writer(body, back, threads, verified);
                let at = format!(
                    "{body:?}, back {back}, threads {threads}, verified {verified}: {st:?}"
                );
                assert_eq!(got, want, "{at}");
                assert!(!early, "the writer ran during a replayed read: {at}");
                assert!(st.actor_replays >= 8, "{at}");
            }
        }
    }
}

#[test]
fn a_reduction_s_finish_step_covering_earlier_replays_reads_still_waits_for_them() {
    check_slow_read(Body::Reduce, 2..=5);
}

#[test]
fn a_whole_write_covering_earlier_replays_half_reads_still_waits_for_them() {
    check_slow_read(Body::WriteThenReadHalf, 2..=5);
}

#[test]
fn replays_over_fresh_stores_linked_only_after_an_entry_keep_every_read() {
    check_slow_read(Body::Fresh, 1..=4);
}

#[test]
fn the_first_writer_after_a_chain_of_replays_waits_for_its_reads() {
    check_slow_read(Body::SecondLoop, 1..=5);
}
