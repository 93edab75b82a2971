//! Fusion inside replayed traces (runtime/DESIGN.md, "Fusion inside traces"): a traced loop's
//! replays launch the trace's fused tasks, eliminate its temporaries, and fall back to ordinary
//! analysis when a store that was a temporary is not one this time.

use super::fusion::{axpb, launched, register, sum_of};
use tessera_runtime::{Chunk, DType, Runtime, RuntimeError, Stats, Store};

fn runtime(tracing: bool, fusion: bool) -> Runtime {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(4)
        .tracing(tracing)
        .fusion(fusion)
        .trace_sampling(4)
        .build();
    register(&rt).unwrap();
    rt
}

const N: usize = 256;

/// A Black-Scholes-like chain, `y = ((2x + 1) * 3 - 1) * 0.5 - 2`, over two intermediates made
/// fresh and dropped at the end of the scope (the idiomatic pattern); in iteration `keep`
/// the application keeps the first intermediate, which it then reads.
fn chain(
    rt: &Runtime,
    name: &str,
    iterations: usize,
    keep: Option<usize>,
) -> (Vec<f64>, Option<Vec<f64>>, Stats) {
    let x = rt
        .from_vec(&[N], (0..N).map(|i| i as f64 * 0.25 - 7.0).collect())
        .unwrap();
    let y = rt.create(DType::F64, &[N]).unwrap();
    let mut kept = None;
    for it in 0..iterations {
        let t1 = rt.create(DType::F64, &[N]).unwrap();
        let t2 = rt.create(DType::F64, &[N]).unwrap();
        axpb(rt, name, &x, &t1, 2.0, 1.0);
        axpb(rt, name, &t1, &t2, 3.0, -1.0);
        axpb(rt, name, &t2, &y, 0.5, -2.0);
        if keep == Some(it) {
            kept = Some(t1);
        }
    }
    let out = rt.read::<f64>(&y).unwrap();
    let kept = kept.map(|k| rt.read::<f64>(&k).unwrap());
    rt.fence().unwrap();
    (out, kept, rt.stats())
}

#[test]
fn a_traced_fused_chain_eliminates_its_temporaries_on_replay() {
    for name in ["axpb", "ew_axpb"] {
        let iterations = 60;
        let (want, _, _) = chain(&runtime(false, false), name, iterations, None);
        let (got, _, st) = chain(&runtime(true, true), name, iterations, None);
        assert_eq!(
            got, want,
            "{name}: traced + fused equals sequential, bitwise"
        );
        assert!(st.traces_replayed > 0, "{name}: {st:?}");
        // Every replayed iteration's two intermediates are temporaries, never allocated.
        assert!(st.fused_launches > 0, "{name}: {st:?}");
        assert!(
            st.temporaries_eliminated >= 2 * (st.tasks_traced / 3 - 1),
            "{name}: {st:?}"
        );
        assert!(st.tasks_traced >= 3 * 30, "{name}: {st:?}");
        assert!(
            st.bytes_allocated < (8 * N * iterations) as u64,
            "{name}: the intermediates of replayed iterations are not allocated: {st:?}"
        );
        // Fused launches: fewer launched than issued.
        assert!(st.tasks_launched < 3 * iterations as u64, "{name}: {st:?}");
    }
}

#[test]
fn a_replay_whose_temporary_is_kept_this_time_falls_back() {
    for name in ["axpb", "ew_axpb"] {
        let iterations = 60;
        let keep = Some(45);
        let (want, want_kept, _) = chain(&runtime(false, false), name, iterations, keep);
        let (got, got_kept, st) = chain(&runtime(true, true), name, iterations, keep);
        let kept: Vec<f64> = (0..N)
            .map(|i| 2.0 * (i as f64 * 0.25 - 7.0) + 1.0)
            .collect();
        assert_eq!(want_kept.as_deref(), Some(&kept[..]));
        assert_eq!(
            got_kept, want_kept,
            "{name}: the kept intermediate is written: {st:?}"
        );
        assert_eq!(got, want, "{name}");
        assert!(st.traces_abandoned >= 1, "{name}: {st:?}");
        assert!(st.temporaries_eliminated > 0, "{name}: {st:?}");
    }
}

/// Whatever iteration the application keeps an intermediate in, the one its trace happens to
/// be recorded in included, the replays after it are not abandoned for good: a recording
/// whose temporary flags no longer hold is made anew (`Tracing::flags_went_stale`). Before,
/// keeping the intermediate of the recorded iteration abandoned every later replay.
#[test]
fn a_trace_recorded_while_a_temporary_was_kept_is_recorded_anew() {
    let iterations = 60;
    let (want, _, _) = chain(&runtime(false, false), "ew_axpb", iterations, None);
    let kept: Vec<f64> = (0..N)
        .map(|i| 2.0 * (i as f64 * 0.25 - 7.0) + 1.0)
        .collect();
    for keep in 0..24 {
        let (got, got_kept, st) = chain(&runtime(true, true), "ew_axpb", iterations, Some(keep));
        assert_eq!(got, want, "kept in iteration {keep}");
        assert_eq!(
            got_kept.as_deref(),
            Some(&kept[..]),
            "kept in iteration {keep}"
        );
        assert!(
            st.traces_abandoned <= 3,
            "kept in iteration {keep}: {} replays abandoned: {st:?}",
            st.traces_abandoned
        );
    }
}

/// A CG-like loop: `q` is made fresh from `p`, its sum becomes a future `a` (through a
/// one-element store), `x += a p` and `r += a q` read it, and the application drops `q`
/// before it reads `r`'s sum, every iteration. The tracer holds the updates (a trace found
/// from the future on) while the window, holding `q`'s producer and its sum, is launched
/// before the trace is: `q` is no temporary of that prefix, since a held task still reads it
/// (it was made one, and `r += a q` read zeros: CG with `tensor!` statements ran 115
/// iterations instead of 31 with TESSERA_TRACING=1).
fn cg_like(tracing: bool, actors: bool) -> (Vec<u64>, Vec<u64>, Stats) {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(4)
        .window_size(16)
        .tracing(tracing)
        .actors(actors)
        .build();
    register(&rt).unwrap();
    // out = y + a x, `a` a future.
    rt.register_elementwise::<f64>("ew_axpy_into", |c: &mut Chunk<'_, f64>| {
        let a: f64 = c.scalar_value(0);
        let (ins, outs) = c.split();
        for ((o, x), y) in outs[0].iter_mut().zip(ins[0].iter()).zip(ins[1].iter()) {
            *o = y + a * x;
        }
    })
    .unwrap();
    let n = 64;
    let p = rt
        .from_vec(&[n], (0..n).map(|i| (i % 7) as f64 - 2.5).collect())
        .unwrap();
    let mut x = rt.from_vec(&[n], vec![0.0; n]).unwrap();
    let mut r = rt.from_vec(&[n], vec![1.0; n]).unwrap();
    let mut sums = Vec::new();
    for it in 0..40 {
        let q = rt.create(DType::F64, &[n]).unwrap();
        axpb(&rt, "ew_axpb", &p, &q, 0.001 * (1 + it % 3) as f64, 0.5);
        let a = rt.value_future(&sum_of(&rt, &q)).unwrap();
        for (src, dst) in [(&p, &mut x), (&q, &mut r)] {
            let out = rt.create(DType::F64, &[n]).unwrap();
            rt.task("ew_axpy_into")
                .read(src)
                .read(dst)
                .write(&out)
                .future(&a)
                .align(src, dst)
                .align(src, &out)
                .submit()
                .unwrap();
            *dst = out;
        }
        let rr = sum_of(&rt, &r);
        drop(q);
        sums.push(rt.read::<f64>(&rr).unwrap()[0].to_bits());
    }
    let bits = rt.read::<f64>(&x).unwrap().into_iter().map(f64::to_bits);
    (bits.collect(), sums, launched(&rt))
}

/// A loop whose replay streak is abandoned once (the application keeps `t1`, a temporary of
/// the recorded trace, in iteration `keep`): `t1` feeds `t2`, two hand tasks end the prefix,
/// and `y += t2` reads `t2` last. Returns `y`, `a` and `b`.
fn streak_abandoned(traced: bool, window: usize, keep: usize) -> Vec<Vec<f64>> {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(4)
        .tracing(traced)
        .fusion(traced)
        .window_size(if traced { window } else { 1 })
        .trace_sampling(4)
        .build();
    register(&rt).unwrap();
    let n = 16;
    let x = rt
        .from_vec(&[n], (0..n).map(|i| i as f64).collect())
        .unwrap();
    let fresh = || rt.create(DType::F64, &[n]).unwrap();
    let (a, b, y) = (fresh(), fresh(), fresh());
    let mut kept = None;
    for it in 0..30 {
        let (t1, t2) = (fresh(), fresh());
        axpb(&rt, "ew_axpb", &x, &t1, 2.0, 1.0);
        axpb(&rt, "ew_axpb", &t1, &t2, 3.0, 0.0);
        axpb(&rt, "axpb", &x, &a, 1.0, 0.5);
        axpb(&rt, "axpb", &x, &b, -1.0, 0.0);
        rt.task("ew_axpy")
            .read(&t2)
            .read_write(&y)
            .scalar(1.0)
            .align(&t2, &y)
            .submit()
            .unwrap();
        if it == keep {
            kept = Some(t1);
        }
    }
    drop(kept);
    [y, a, b].map(|s| rt.read::<f64>(&s).unwrap()).to_vec()
}

/// Found by an adversarial hunt: a completed replay streak whose replay is abandoned hands
/// its tasks to the window one by one, and the streak had not noted their stores as later
/// (`Window::note_streak_task` notes nothing while the window is empty). A prefix the window
/// decided before the last of them arrived made `t2` a temporary although `y += t2`, still
/// being handed on, reads it: one iteration added zeros.
#[test]
fn an_abandoned_streak_s_tasks_keep_what_they_read_from_becoming_temporaries() {
    for keep in [10, 20, 25, 29] {
        let want = streak_abandoned(false, 1, keep);
        assert_eq!(want[0][3], 30.0 * 3.0 * (2.0 * 3.0 + 1.0));
        for window in [2, 3, 4, 8] {
            let got = streak_abandoned(true, window, keep);
            assert_eq!(got, want, "kept at {keep}, window {window}");
        }
    }
}

#[test]
fn a_store_a_held_task_reads_is_no_temporary_of_the_window() {
    let (want_x, want_sums, _) = cg_like(false, false);
    for actors in [false, true] {
        let (x, sums, st) = cg_like(true, actors);
        let first = sums.iter().zip(&want_sums).position(|(a, b)| a != b);
        assert_eq!(first, None, "actors {actors}: first differing sum: {st:?}");
        assert_eq!(x, want_x, "actors {actors}");
        assert!(st.traces_replayed > 0, "actors {actors}: {st:?}");
        assert!(st.fused_launches > 0, "actors {actors}: {st:?}");
    }
}

/// Slots of the random loop bodies below: each holds a store handle, or none once dropped.
const SLOTS: usize = 4;

/// One statement of a random loop body over [`SLOTS`] slots. Values are integers in `[0, 7)`
/// (every update is taken modulo 7), so every sum is exact in any order: the reference is the
/// sequential interpretation, bitwise, however many times the body repeats.
#[derive(Clone, Debug)]
enum Step {
    /// `d = (a·s + t) mod 7`, element-wise: into a new store that replaces the slot's handle
    /// (the old one is dropped right after the submit, as CG's `*dst = out`), or in place.
    Axpy {
        d: usize,
        s: usize,
        t: usize,
        a: i8,
        fresh: bool,
    },
    /// `d = (d + Σ s) mod 7`, the sum passed as a future: a folded result, or the value of a
    /// one-element store (`value_future`, as CG's `alpha`); into a new store or in place.
    AddSum {
        d: usize,
        s: usize,
        from_store: bool,
        fresh: bool,
    },
    /// The slot's handle dropped (mid-body: tasks issued before may still read it).
    Drop { d: usize },
    /// The slot read back (a flush, as CG's residual check).
    Read { s: usize },
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    let sl = 0..SLOTS;
    prop_oneof![
        4 => (sl.clone(), sl.clone(), sl.clone(), -2i8..=2, proptest::bool::weighted(0.7))
            .prop_map(|(d, s, t, a, fresh)| Step::Axpy { d, s, t, a, fresh }),
        3 => (sl.clone(), sl.clone(), any::<bool>(), proptest::bool::weighted(0.6))
            .prop_map(|(d, s, from_store, fresh)| Step::AddSum { d, s, from_store, fresh }),
        1 => sl.clone().prop_map(|d| Step::Drop { d }),
        1 => sl.prop_map(|s| Step::Read { s }),
    ]
}

/// A loop body repeated `reps` times over stores of `n` elements (`init` per slot), solved
/// in pieces of at least `min_piece`.
#[derive(Clone, Debug)]
struct Body {
    n: usize,
    init: Vec<Vec<f64>>,
    steps: Vec<Step>,
    reps: usize,
    min_piece: usize,
}

fn body() -> impl proptest::strategy::Strategy<Value = Body> {
    use proptest::prelude::*;
    (3usize..40).prop_flat_map(|n| {
        (
            proptest::collection::vec(proptest::collection::vec(0u8..7, n), SLOTS),
            proptest::collection::vec(step(), 2..12),
            6usize..10,
            1usize..8,
        )
            .prop_map(move |(init, steps, reps, min_piece)| Body {
                n,
                init: init
                    .into_iter()
                    .map(|v| v.into_iter().map(f64::from).collect())
                    .collect(),
                steps,
                reps,
                min_piece,
            })
    })
}

/// What a body leaves: the slots still held at the end, every `Read`, every future's value.
type Left = (Vec<Option<Vec<u64>>>, Vec<Vec<u64>>, Vec<u64>);

/// `v` modulo 7 in `[0, 7)`, and never `-0`: a sum of negative zeros is `-0` summed in Rust
/// (`Sum` starts from `-0`) but `+0` folded by the runtime (from the identity `+0`), a
/// difference of the reference, not of the runtime.
fn mod7(v: f64) -> f64 {
    v.rem_euclid(7.0) + 0.0
}

fn to_bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The body interpreted by plain loops: the reference.
fn interpret(b: &Body) -> Left {
    let m = mod7;
    let mut slot: Vec<Option<Vec<f64>>> = b.init.iter().cloned().map(Some).collect();
    let (mut reads, mut futures) = (vec![], vec![]);
    for step in (0..b.reps).flat_map(|_| &b.steps) {
        match *step {
            Step::Axpy { d, s, t, a, fresh } => {
                let (Some(x), Some(y)) = (&slot[s], &slot[t]) else {
                    continue;
                };
                if !fresh && (slot[d].is_none() || d == s || d == t) {
                    continue;
                }
                let out = x.iter().zip(y).map(|(x, y)| m(a as f64 * x + y)).collect();
                slot[d] = Some(out);
            }
            Step::AddSum { d, s, fresh, .. } => {
                let (Some(x), Some(y)) = (&slot[s], &slot[d]) else {
                    continue;
                };
                if !fresh && d == s {
                    continue;
                }
                let sum: f64 = x.iter().sum();
                futures.push(sum.to_bits());
                slot[d] = Some(y.iter().map(|y| m(y + sum)).collect());
            }
            Step::Drop { d } => slot[d] = None,
            Step::Read { s } => {
                if let Some(x) = &slot[s] {
                    reads.push(to_bits(x));
                }
            }
        }
    }
    let slots = slot.iter().map(|s| s.as_deref().map(to_bits)).collect();
    (slots, reads, futures)
}

/// The body issued to a runtime of two threads with a fusion window of 16, fusion on, tracing
/// on (sampling every 4 tasks, so short bodies replay) and actors as asked.
fn issue_body(b: &Body, actors: bool) -> tessera_runtime::Result<(Left, Stats)> {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(b.min_piece)
        .window_size(16)
        .fusion(true)
        .tracing(true)
        .actors(actors)
        .trace_sampling(4)
        .build();
    register(&rt)?;
    rt.register_elementwise::<f64>("ew_axpy_mod7", |c: &mut Chunk<'_, f64>| {
        let a = c.scalar(0).as_f64();
        let (ins, outs) = c.split();
        for ((o, x), y) in outs[0].iter_mut().zip(ins[0].iter()).zip(ins[1].iter()) {
            *o = mod7(a * x + y);
        }
    })?;
    // In place (`out` read-write) or into `out` from `y`: out = (y + a) mod 7, `a` a future.
    rt.register_elementwise::<f64>("ew_add_mod7", |c: &mut Chunk<'_, f64>| {
        let a: f64 = c.scalar_value(0);
        let (ins, outs) = c.split();
        match ins.first() {
            Some(y) => outs[0]
                .iter_mut()
                .zip(y.iter())
                .for_each(|(o, y)| *o = mod7(y + a)),
            None => outs[0].iter_mut().for_each(|o| *o = mod7(*o + a)),
        }
    })?;
    let n = b.n;
    let mut slot: Vec<Option<Store>> = b
        .init
        .iter()
        .map(|v| rt.from_vec(&[n], v.clone()).map(Some))
        .collect::<tessera_runtime::Result<_>>()?;
    let (mut reads, mut futures) = (vec![], vec![]);
    for step in (0..b.reps).flat_map(|_| &b.steps) {
        match *step {
            Step::Axpy { d, s, t, a, fresh } => {
                let (Some(x), Some(y)) = (&slot[s], &slot[t]) else {
                    continue;
                };
                let out = match (fresh, &slot[d]) {
                    (true, _) => rt.create(DType::F64, &[n])?,
                    (false, Some(o)) if d != s && d != t => o.clone(),
                    (false, _) => continue,
                };
                rt.task("ew_axpy_mod7")
                    .read(x)
                    .read(y)
                    .write(&out)
                    .scalar(a as f64)
                    .align(x, y)
                    .align(x, &out)
                    .submit()?;
                // The slot's old store, if replaced, is dropped here.
                slot[d] = Some(out);
            }
            Step::AddSum {
                d,
                s,
                from_store,
                fresh,
            } => {
                let (Some(x), Some(y)) = (&slot[s], &slot[d]) else {
                    continue;
                };
                if !fresh && d == s {
                    continue;
                }
                let sum = match from_store {
                    true => rt.value_future(&sum_of(&rt, x))?,
                    false => rt
                        .task("total")
                        .read(x)
                        .submit_reduce(tessera_runtime::ReduceOp::Sum)?,
                };
                let t = rt.task("ew_add_mod7");
                let out = match fresh {
                    true => {
                        let out = rt.create(DType::F64, &[n])?;
                        t.read(y).write(&out).future(&sum).align(y, &out).submit()?;
                        out
                    }
                    false => {
                        t.read_write(y).future(&sum).submit()?;
                        y.clone()
                    }
                };
                futures.push(sum);
                slot[d] = Some(out);
            }
            Step::Drop { d } => slot[d] = None,
            Step::Read { s } => {
                if let Some(x) = &slot[s] {
                    reads.push(to_bits(&rt.read::<f64>(x)?));
                }
            }
        }
    }
    let slots = slot
        .iter()
        .map(|s| {
            s.as_ref()
                .map(|s| rt.read::<f64>(s).map(|v| to_bits(&v)))
                .transpose()
        })
        .collect::<tessera_runtime::Result<_>>()?;
    let futures = futures
        .iter()
        .map(|f| f.get().map(|v| v.as_f64().to_bits()))
        .collect::<tessera_runtime::Result<_>>()?;
    Ok(((slots, reads, futures), launched(&rt)))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Random loop bodies that make fresh stores, drop handles mid-body (replacing a slot's
    /// store or dropping it) and read some back, repeated so that traces are recorded and
    /// replayed, run traced at a fusion window of 16 with and without actors: every store,
    /// read and future bitwise equal to the sequential interpretation. The bug class of
    /// `Window::later`: a store the application dropped while the tracer held a task reading
    /// it was made a temporary of a window prefix, and the held task read zeros.
    #[test]
    fn repeated_bodies_dropping_handles_under_tracing_and_a_window_match_sequential(
        b in body()
    ) {
        let want = interpret(&b);
        for actors in [false, true] {
            let (got, st) = issue_body(&b, actors)
                .map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
            proptest::prop_assert_eq!(&got, &want, "actors {}: {:?}", actors, st);
        }
    }
}

/// The property test's case that found it: a streak ends (`total` differs from the trace's
/// next task), its held tasks, fed to the matcher, complete and replay another trace, which
/// begins a new streak, and the differing task was then held by the matcher under that
/// streak. The next task ended the streak and fed that task's token again; a later replay
/// took two held tasks where one was held (index out of range in `Inner::replay`).
#[test]
fn a_task_issued_as_an_ended_streak_replays_goes_through_the_matcher_once() {
    let sum = |d, s, from_store| Step::AddSum {
        d,
        s,
        from_store,
        fresh: true,
    };
    let axpy = |d, s, fresh| Step::Axpy {
        d,
        s,
        t: s,
        a: 0,
        fresh,
    };
    let b = Body {
        n: 4,
        init: vec![vec![0.0; 4]; SLOTS],
        steps: vec![
            sum(1, 3, true),
            sum(2, 0, true),
            axpy(0, 1, true),
            sum(1, 0, true),
            sum(0, 0, false),
            axpy(1, 0, false),
            axpy(0, 0, true),
        ],
        reps: 6,
        min_piece: 1,
    };
    let want = interpret(&b);
    for actors in [false, true] {
        let (got, st) = issue_body(&b, actors).unwrap();
        assert_eq!(got, want, "actors {actors}: {st:?}");
        assert!(st.traces_replayed > 0, "actors {actors}: {st:?}");
    }
}

/// A trace complete for the first time waits, with fusion on, for the next issue (`Pending`),
/// which launches the window first: a task there that fails to solve makes that replay's
/// `run_pending` fail, while the replay itself goes ahead and begins a streak. Issues rounds
/// of: a task writing a fresh index store, an image over it with a value out of bounds (it
/// waits in the window, unsolved, until the write is launched, and then fails), and `reps`
/// times two tasks that repeat. Returns, for the submit during which the first trace was
/// recorded: its round, which task it was (`"set"` or `"repeat"`), and its result.
fn pending_replay_after_a_failed_solve(
    reps: usize,
) -> (usize, &'static str, Result<(), RuntimeError>) {
    const ROUNDS: usize = 40;
    // A fixed window: what it holds waits for it to fill (or a flush), not for timing.
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(4)
        .tracing(true)
        .fusion(true)
        .trace_sampling(4)
        .window_size(16)
        .build();
    register(&rt).unwrap();
    rt.register("noop", |_| {}).unwrap();
    // idx = [0, v]: an index store the image reads.
    rt.register("set_index", |ctx| {
        let v = ctx.scalar(0).as_u64();
        let mut out = ctx.write::<u64>(0);
        for i in out.range() {
            out.set_at(i, if i == 0 { 0 } else { v });
        }
    })
    .unwrap();
    let a = rt.create(DType::F64, &[4]).unwrap();
    let x = rt.from_vec(&[N], vec![1.0; N]).unwrap();
    let y = rt.create(DType::F64, &[N]).unwrap();
    let z = rt.create(DType::F64, &[N]).unwrap();
    let idx: Vec<Store> = (0..ROUNDS)
        .map(|_| rt.create(DType::U64, &[2]).unwrap())
        .collect();
    rt.fence().unwrap();
    let axpb = |from: &Store, to: &Store| {
        rt.task("axpb")
            .read(from)
            .write(to)
            .scalar(2.0)
            .scalar(1.0)
            .align(from, to)
            .submit()
    };
    let recorded = |before: u64| before == 0 && rt.stats().traces_recorded == 1;
    for (k, ix) in idx.iter().enumerate() {
        // Scalars give the first two another token every round: never part of a trace,
        // released to the window. Errors of earlier rounds surface where the window fills.
        let before = rt.stats().traces_recorded;
        let r = rt
            .task("set_index")
            .write(ix)
            .scalar(100 + k as u64)
            .submit();
        if recorded(before) {
            return (k, "set", r);
        }
        let _ = rt
            .task("noop")
            .read(ix)
            .read(&a)
            .image(ix, &a)
            .scalar(k as u64)
            .submit();
        for _ in 0..reps {
            let before = rt.stats().traces_recorded;
            let r = axpb(&x, &y);
            if recorded(before) {
                return (k, "repeat", r);
            }
            let _ = axpb(&y, &z);
        }
    }
    panic!("no trace recorded in {ROUNDS} rounds");
}

/// The replay's streak is ended by the next task (the next round's first, not the trace's
/// first): ending it must not overwrite `run_pending`'s error (`keep_first` in `trace_issue`,
/// 41db333).
#[test]
fn a_pending_replay_s_error_is_reported_by_the_submit_that_ends_its_streak() {
    let (k, at, r) = pending_replay_after_a_failed_solve(1);
    assert_eq!(at, "set", "round {k}: the trace is the two repeating tasks");
    let e = r.expect_err("the window's failed solve is this submit's error");
    assert!(
        matches!(e, RuntimeError::ImageOutOfBounds { value, .. } if value < 100 + k as u64),
        "round {k}: {e}"
    );
}

/// The replay's streak holds the next task (the trace's first again): the streak's result
/// must not replace `run_pending`'s error either (it did: the submit returned `Ok`).
#[test]
fn a_pending_replay_s_error_is_reported_by_the_submit_its_streak_holds() {
    let (k, at, r) = pending_replay_after_a_failed_solve(3);
    assert_eq!(
        at, "repeat",
        "round {k}: the trace is the two repeating tasks, once"
    );
    let e = r.expect_err("the window's failed solve is this submit's error");
    assert!(
        matches!(e, RuntimeError::ImageOutOfBounds { value, .. } if value < 100 + k as u64),
        "round {k}: {e}"
    );
}

/// Tasks in [`long_chain`]: more than a trace holds (`MAX_TRACE` = 16), as Black-Scholes'
/// 19, so the tracer never replays the chain and every task is released to the window.
const LONG: usize = 20;

/// `LONG` element-wise tasks `t_{k+1} = a_k t_k + b_k` from `x` to `y`, each with its own
/// scalars (no two tokens of an iteration alike, so no trace is found inside the chain), over
/// fresh intermediates dropped at the end of the iteration, then a read of `y` (the flush),
/// `iterations` times. Values: exact binary fractions, every step in range.
fn long_chain(rt: &Runtime, iterations: usize) -> (Vec<Vec<u64>>, Stats) {
    let x = rt
        .from_vec(&[N], (0..N).map(|i| i as f64 * 0.25 - 7.0).collect())
        .unwrap();
    let y = rt.create(DType::F64, &[N]).unwrap();
    let mut reads = Vec::new();
    for it in 0..iterations {
        {
            let mut prev: Option<Store> = None;
            for k in 0..LONG {
                let src = prev.as_ref().unwrap_or(&x);
                let dst = if k + 1 == LONG {
                    y.clone()
                } else {
                    rt.create(DType::F64, &[N]).unwrap()
                };
                let a = 0.5 + (k % 4) as f64 / 8.0;
                let b = k as f64 / 4.0 - 1.0 + it as f64 / 16.0;
                axpb(rt, "ew_axpb", src, &dst, a, b);
                prev = Some(dst);
            }
        }
        let v = rt.read::<f64>(&y).unwrap();
        reads.push(v.into_iter().map(f64::to_bits).collect());
    }
    (reads, launched(rt))
}

/// With tracing on and no window asked for, a chain the tracer releases (longer than a trace)
/// is fused by the window as it is untraced: the default window behind the tracer is the
/// adaptive one, not a fixed window of one task (runtime/DESIGN.md, branch `tfuse`).
#[test]
fn a_chain_longer_than_a_trace_fuses_with_tracing_on_by_default() {
    let iterations = 12;
    let (want, _) = long_chain(&runtime(false, false), iterations);
    // The default window, its hold for the next submit made long: under load a 100 µs hold
    // can lapse between two submits, which only splits a chain (values are the same).
    let (got, st) = long_chain(&chain_runtime(true, 4), iterations);
    let first = got.iter().zip(&want).position(|(a, b)| a != b);
    assert_eq!(first, None, "first differing iteration: {st:?}");
    let issued = (LONG * iterations) as u64;
    assert!(st.tasks_issued >= issued, "{st:?}");
    // Each iteration's chain is launched as a few fused tasks, its intermediates never made.
    assert!(st.tasks_launched * 4 <= st.tasks_issued, "{st:?}");
    assert!(
        st.temporaries_eliminated >= ((LONG - 2) * iterations) as u64,
        "{st:?}"
    );
    assert!(
        st.bytes_allocated < (8 * N * LONG * iterations / 4) as u64,
        "the intermediates are not allocated: {st:?}"
    );
}

/// Tasks in [`periodic_chain`]'s chain: Black-Scholes' 18, longer than the 16-task traces of
/// main b893fb4 (runtime/DESIGN.md, `tbs20`).
const PERIOD: usize = 18;

/// [`PERIOD`] element-wise tasks `t_{k+1} = a_k t_k + b_k` from `x` to a fresh `y`, the same
/// every iteration (the Black-Scholes bench's stream: one chain per run, then a flush), over
/// fresh intermediates dropped at the end of the chain; `y` is read (the flush), `iterations`
/// times. Each iteration's read values, as bits.
fn periodic_chain(rt: &Runtime, iterations: usize) -> (Vec<Vec<u64>>, Stats) {
    let x = rt
        .from_vec(&[N], (0..N).map(|i| i as f64 * 0.25 - 7.0).collect())
        .unwrap();
    let mut reads = Vec::new();
    for _ in 0..iterations {
        let y = rt.create(DType::F64, &[N]).unwrap();
        {
            let mut prev: Option<Store> = None;
            for k in 0..PERIOD {
                let src = prev.as_ref().unwrap_or(&x);
                let dst = if k + 1 == PERIOD {
                    y.clone()
                } else {
                    rt.create(DType::F64, &[N]).unwrap()
                };
                axpb(
                    rt,
                    "ew_axpb",
                    src,
                    &dst,
                    0.5 + (k % 4) as f64 / 8.0,
                    k as f64 / 4.0 - 1.0,
                );
                prev = Some(dst);
            }
        }
        let v = rt.read::<f64>(&y).unwrap();
        reads.push(v.into_iter().map(f64::to_bits).collect());
    }
    (reads, launched(rt))
}

/// A runtime for [`periodic_chain`]: two threads, tracing on or off, the finder run every
/// `sampling` tasks (64 is the default). A long window hold: under load a lapse between two
/// submits would split an untraced chain.
fn chain_runtime(tracing: bool, sampling: usize) -> Runtime {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(4)
        .tracing(tracing)
        .trace_sampling(sampling)
        .window_hold(std::time::Duration::from_secs(10))
        .build();
    register(&rt).unwrap();
    rt
}

/// A chain repeated whole between flushes is traced whole: the trace's own fusion pass makes
/// it one launch with every intermediate a temporary, as the untraced window does. Before
/// `tbs20` the 18-task period exceeded the longest trace, so the finder found a piece of it
/// (cut at the flush), and replaying the piece split the chain: more launches, intermediates
/// crossing the cut made and written through memory.
#[test]
fn a_repeated_chain_longer_than_sixteen_tasks_is_traced_whole() {
    let iterations = 12;
    let (want, plain) = periodic_chain(&chain_runtime(false, 4), iterations);
    let (got, st) = periodic_chain(&chain_runtime(true, 4), iterations);
    let first = got.iter().zip(&want).position(|(a, b)| a != b);
    assert_eq!(first, None, "first differing iteration: {st:?}");
    // Untraced: one fused launch and PERIOD - 1 temporaries per iteration.
    assert_eq!(
        plain.temporaries_eliminated,
        ((PERIOD - 1) * iterations) as u64,
        "{plain:?}"
    );
    assert!(st.traces_replayed >= (iterations - 4) as u64, "{st:?}");
    assert_eq!(
        st.tasks_traced,
        PERIOD as u64 * st.traces_replayed,
        "every trace is the whole chain: {st:?}"
    );
    assert!(
        st.tasks_launched <= plain.tasks_launched,
        "{st:?} vs {plain:?}"
    );
    assert_eq!(
        st.temporaries_eliminated, plain.temporaries_eliminated,
        "{st:?} vs {plain:?}"
    );
    assert!(
        st.bytes_allocated <= plain.bytes_allocated,
        "{st:?} vs {plain:?}"
    );
}

/// The fusion bench's Black-Scholes stream: six iterations of the 18-task chain at the default
/// `trace_sampling` (64), so the finder runs once, over the first 64 tasks. Its input `x`
/// (`from_vec`, read first, before the first flush) is named by its id from the second
/// iteration on, so iterations 2 and 3 repeat whole inside that one window, and the last two
/// iterations are traced whole (branch `tbs21`). Mutation-checked: with `x` named by its
/// distance from first use (the read-first rule off, or `flushed_at` never set), iterations 2
/// and 3 differ in the window and nothing is traced.
#[test]
fn a_loop_input_is_named_alike_in_every_iteration_after_the_first_flush() {
    let iterations = 6;
    let (want, plain) = periodic_chain(&chain_runtime(false, 64), iterations);
    let (got, st) = periodic_chain(&chain_runtime(true, 64), iterations);
    assert_eq!(got, want);
    assert_eq!(st.traces_replayed, 2, "the last two iterations: {st:?}");
    assert_eq!(st.tasks_traced, 2 * PERIOD as u64, "{st:?}");
    assert_eq!(
        st.temporaries_eliminated, plain.temporaries_eliminated,
        "{st:?} vs {plain:?}"
    );
    assert!(
        st.bytes_allocated <= plain.bytes_allocated,
        "{st:?} vs {plain:?}"
    );
}
