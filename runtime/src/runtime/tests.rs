//! Crate-internal tests of the runtime's seams.

use super::*;
use crate::tracing::replay::KEEP_IDLE;

fn history(rt: &Runtime) -> Vec<u64> {
    rt.fence().unwrap();
    launched_tokens(rt)
}

/// Tokens of the traceable tasks launched so far (the tracer's history).
fn launched_tokens(rt: &Runtime) -> Vec<u64> {
    let front = rt.inner.front.lock().unwrap();
    front.tracing.as_ref().expect("tracing on").history()
}

/// Issues enough tasks reading `stores` that tokens name them by id (a store first used
/// recently is named by how long ago that was); returns how many tokens that added.
fn age(rt: &Runtime, stores: &[&Store]) -> usize {
    let _ = rt.register("age", |_| {});
    let n = 2 * crate::tracing::replay::MAX_TRACE;
    for _ in 0..n {
        let mut t = rt.task("age");
        for s in stores {
            t = t.read(s);
        }
        t.launch_domain(&[1]).submit().unwrap();
    }
    n
}

#[test]
fn repeated_tasks_hash_to_repeated_tokens() {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(1)
        .tracing(true)
        .window_size(1) // one token per issued task: nothing fused
        .build();
    rt.register("step", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[8]).unwrap();
    let b = rt.create(DType::F64, &[8]).unwrap();
    let old = age(&rt, &[&a, &b]);
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
    let h = history(&rt)[old..].to_vec();
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
    let h = history(&rt)[old..].to_vec();
    assert_ne!(h[6], h[0]);
    assert_ne!(h[7], h[0]);
}

#[test]
fn a_larger_window_defers_analysis_until_full_or_needed() {
    // Fusion off: four tasks on one store would fuse into one launch. Tracing off: it would
    // hold the tasks before the window.
    let rt = Runtime::builder()
        .threads(1)
        .window_size(4)
        .fusion(false)
        .tracing(false)
        .build();
    rt.register("nop", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[4]).unwrap();
    for _ in 0..3 {
        rt.task("nop").read_write(&a).submit().unwrap();
    }
    assert_eq!(
        rt.stats().tasks_launched,
        0,
        "three tasks wait in the window"
    );
    rt.task("nop").read_write(&a).submit().unwrap();
    assert_eq!(rt.stats().tasks_launched, 4, "the fourth fills it");
    rt.task("nop").read_write(&a).submit().unwrap();
    rt.fence().unwrap();
    assert_eq!(
        rt.stats().tasks_launched,
        5,
        "a fence analyses what is left"
    );
}

/// The tracer holds issued tasks ahead of the window: a larger window still launches the
/// tasks the tracer releases, and a fence launches everything.
#[test]
fn tracing_holds_tasks_ahead_of_the_window() {
    let rt = Runtime::builder()
        .threads(1)
        .window_size(4)
        .fusion(false)
        .tracing(true)
        .build();
    rt.register("nop", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[4]).unwrap();
    for _ in 0..5 {
        rt.task("nop").read_write(&a).submit().unwrap();
    }
    assert_eq!(
        launched_tokens(&rt).len(),
        5,
        "every issued task has a token"
    );
    rt.fence().unwrap();
    assert_eq!(
        rt.stats().tasks_launched,
        5,
        "a fence launches what is held"
    );
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
        .window_size(1) // one token per issued task: nothing fused
        .build();
    rt.register("t", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[8]).unwrap();
    let old = age(&rt, &[&a]);
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
    let h = history(&rt)[old..].to_vec();
    assert_eq!(h.len(), 8);
    let distinct: std::collections::HashSet<u64> = h[..7].iter().copied().collect();
    assert_eq!(
        distinct.len(),
        7,
        "scalar kinds, futures, results and views differ: {h:x?}"
    );
    assert_eq!(h[7], h[2], "a future hashes as a future, whichever it is");
}

/// A loop that makes a fresh store every iteration repeats its tokens: the fresh store is
/// named by how long ago it was first used, the same every iteration.
#[test]
fn fresh_stores_every_iteration_give_repeated_tokens() {
    let rt = Runtime::builder()
        .threads(1)
        .tracing(true)
        .window_size(1)
        .build();
    rt.register("step", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[8]).unwrap();
    let old = age(&rt, &[&a]);
    for _ in 0..4 {
        let tmp = rt.create(DType::F64, &[8]).unwrap();
        rt.task("step")
            .read(&a)
            .write(&tmp)
            .align(&a, &tmp)
            .submit()
            .unwrap();
        rt.task("step")
            .read(&tmp)
            .write(&a)
            .align(&a, &tmp)
            .submit()
            .unwrap();
    }
    let h = history(&rt)[old..].to_vec();
    assert_eq!(h.len(), 8);
    assert_eq!(&h[..2], &h[2..4]);
    assert_eq!(&h[..2], &h[6..]);
    assert_ne!(h[0], h[1]);
}

/// A two-thread runtime (tracing as asked, the finder sampled every `sampling` tasks) with the
/// task `inc` (`y = y / 2 + x + 1` over two aligned stores) and two stores of 8 to run it on.
fn inc_runtime(tracing: bool, sampling: usize) -> (Runtime, Store, Store) {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(1)
        .tracing(tracing)
        .trace_sampling(sampling)
        .build();
    with_inc(rt, |o, i| o * 0.5 + i + 1.0)
}

/// `rt` with a task `inc` (`y = step(y, x)` cell by cell, `x` its first argument and `y` its
/// second), and the stores `a` (0..8) and `b` (8 zeros).
fn with_inc(rt: Runtime, step: fn(f64, f64) -> f64) -> (Runtime, Store, Store) {
    rt.register("inc", move |ctx| {
        let x = ctx.read::<f64>(0);
        let mut y = ctx.write::<f64>(1);
        for (o, i) in y.as_mut_slice().iter_mut().zip(x.as_slice()) {
            *o = step(*o, *i);
        }
    })
    .unwrap();
    let a = rt.from_vec(&[8], (0..8).map(f64::from).collect()).unwrap();
    let b = rt.create(DType::F64, &[8]).unwrap();
    (rt, a, b)
}

/// Issues a loop whose iterations differ in what the analysis depends on (which store is
/// written, and through which view), on a runtime whose tracer sees every token as equal.
fn colliding_stream(tracing: bool, mask: u64) -> (Vec<f64>, Vec<f64>, Stats) {
    let (rt, a, b) = inc_runtime(tracing, 4);
    if let Some(tr) = rt.inner.front.lock().unwrap().tracing.as_mut() {
        tr.token_mask = mask;
    }
    for i in 0..120u32 {
        let (x, y) = if i % 3 == 0 { (&a, &b) } else { (&b, &a) };
        let (x, y) = if i % 5 == 0 {
            (x.slice(0, 0..4).unwrap(), y.slice(0, 4..8).unwrap())
        } else {
            (x.clone(), y.clone())
        };
        rt.task("inc")
            .read(&x)
            .write(&y)
            .align(&x, &y)
            .launch_domain(&[1 + (i % 2) as usize])
            .submit()
            .unwrap();
    }
    let out = (rt.read::<f64>(&a).unwrap(), rt.read::<f64>(&b).unwrap());
    (out.0, out.1, rt.stats())
}

#[test]
fn a_forced_token_collision_is_caught_by_verification() {
    let (a, b, _) = colliding_stream(false, u64::MAX);
    // Every token 0: the finder sees one long repeat, and replays are attempted over tasks
    // that differ from the recording.
    let (a2, b2, st) = colliding_stream(true, 0);
    assert_eq!((a2, b2), (a, b));
    assert!(st.traces_abandoned > 0, "{st:?}");
    assert!(st.traces_recorded > 0, "{st:?}");
}

/// A runtime whose graph holds no task after it ran (no tracing recordings).
fn plain(threads: usize) -> Runtime {
    Runtime::builder()
        .threads(threads)
        .min_piece_size(1)
        .tracing(false)
        .build()
}

/// A store of `v` (of `shape`) doubled in place by `times` tasks (not waited for), and the
/// address of `v`'s allocation.
fn doubled(rt: &Runtime, shape: &[usize], v: Vec<u64>, times: usize) -> (Store, *const u64) {
    let registered = rt.register("double", |ctx| {
        let mut w = ctx.write::<u64>(0);
        w.as_mut_slice().iter_mut().for_each(|x| *x *= 2);
    });
    assert!(matches!(
        registered,
        Ok(()) | Err(RuntimeError::DuplicateTask(_))
    ));
    let ptr = v.as_ptr();
    let s = rt.from_vec(shape, v).unwrap();
    for _ in 0..times {
        rt.task("double").read_write(&s).submit().unwrap();
    }
    (s, ptr)
}

#[test]
fn take_moves_the_buffer_out_when_the_last_handle_is_given_and_nothing_is_pending() {
    let rt = plain(2);
    // Untouched by tasks: the upload's own allocation comes back.
    let (s, ptr) = doubled(&rt, &[1000], (0..1000).collect(), 0);
    let back = rt.take::<u64>(s).unwrap();
    assert_eq!(back.as_ptr(), ptr, "moved, not copied");
    assert_eq!(back, (0..1000).collect::<Vec<u64>>());
    // Written by tasks still in flight when `take` is called: it waits, then moves.
    let (s, ptr) = doubled(&rt, &[40, 25], back, 3);
    let out = rt.take::<u64>(s).unwrap();
    assert_eq!(out.as_ptr(), ptr, "moved after the writers finished");
    assert_eq!(out, (0..1000).map(|x| 8 * x).collect::<Vec<u64>>());
    // Never allocated: zeros.
    let z = rt.create(DType::F32, &[3, 2]).unwrap();
    assert_eq!(rt.take::<f32>(z).unwrap(), vec![0.0; 6]);
}

#[test]
fn take_copies_when_another_handle_or_a_partial_view_remains() {
    let rt = plain(2);
    let (s, ptr) = doubled(&rt, &[64], (0..64).collect(), 1);
    // A clone is alive: copied, and the clone still sees the values.
    let other = s.clone();
    let got = rt.take::<u64>(s).unwrap();
    assert_ne!(got.as_ptr(), ptr);
    assert_eq!(got, (0..64).map(|x| 2 * x).collect::<Vec<u64>>());
    assert_eq!(rt.read::<u64>(&other).unwrap(), got);
    // A view of part of the store: its elements, copied; the store is intact.
    let part = other.slice(0, 10..20).unwrap();
    assert_eq!(rt.take::<u64>(part).unwrap(), got[10..20]);
    assert_eq!(rt.read::<u64>(&other).unwrap(), got);
    // Wrong element type: an error, nothing moved.
    let again = other.clone();
    assert!(matches!(
        rt.take::<f64>(again),
        Err(RuntimeError::DTypeMismatch { .. })
    ));
    assert_eq!(rt.take::<u64>(other).unwrap(), got);
}

#[test]
fn from_offsets_builds_the_ranges_and_records_whether_they_are_monotone() {
    let rt = plain(1);
    let s = rt.from_offsets([0, 2, 2, 5]).unwrap();
    let want = [(0, 2), (2, 2), (2, 5)].map(|(a, b)| PosRange::new(a, b));
    assert_eq!(rt.read::<PosRange>(&s).unwrap(), want);
    let rect = s.rect().unwrap();
    assert_eq!(s.root.meta().monotone, Some((0, rect, true)));
    // A falling offset: recorded as not monotone, so images scan.
    let s = rt.from_offsets([0, 3, 1, 4]).unwrap();
    assert!(matches!(s.root.meta().monotone, Some((_, _, false))));
    // No offsets, or one: no ranges.
    for offsets in [vec![], vec![7]] {
        let s = rt.from_offsets(offsets).unwrap();
        assert_eq!(s.shape(), Some(vec![0]));
    }
}

/// A submitted launcher's spec is reused by the next `task` (`Inner::spare_spec`): nothing of
/// the last launch (constraints, launch domain, sharding key, scalars, arguments, the task)
/// may leak into the next one.
#[test]
fn a_reused_launch_spec_starts_empty() {
    let rt = plain(2);
    rt.register("first", |_| {}).unwrap();
    rt.register("second", |ctx| {
        assert_eq!(
            ctx.domain(),
            vec![1],
            "the solver's domain, not the last launch's"
        );
        let mut out = ctx.write::<f64>(0);
        for i in out.range() {
            out.set_at(i, 7.0);
        }
    })
    .unwrap();
    let (x, y) = (
        rt.create(DType::F64, &[6]).unwrap(),
        rt.create(DType::F64, &[6]).unwrap(),
    );
    let z = rt.create(DType::F64, &[1]).unwrap();
    let before = rt.stats();
    rt.task("first")
        .read(&x)
        .write(&y)
        .align(&x, &y)
        .launch_domain(&[3])
        .shard_by(&[0])
        .scalar(1.0)
        .submit()
        .unwrap();
    assert!(
        rt.inner.spare_spec.lock().unwrap().is_some(),
        "a submitted spec is kept"
    );
    // A leaked `align` names stores this task does not pass (an error); a leaked domain
    // would run three points over a one-element store.
    rt.task("second").write(&z).submit().unwrap();
    rt.fence().unwrap();
    assert_eq!(rt.read::<f64>(&z).unwrap(), vec![7.0]);
    assert_eq!(rt.stats().since(&before).points_run, 3 + 1);
    // An unknown name is still reported, not replaced by the last task's.
    assert!(rt.task("nope").write(&z).submit().is_err());
}

/// A ping-pong loop over two stores (two tasks per iteration); at iteration `diverge` (if
/// any) its second task writes half of the store through a slice instead. Returns the
/// stores, the statistics and the tracer's history length (tracing on).
fn streak_stream(tracing: bool, diverge: Option<u32>) -> (Vec<f64>, Vec<f64>, Stats, usize) {
    let (rt, a, b) = inc_runtime(tracing, 8);
    for i in 0..200u32 {
        let step = |x: &Store, y: &Store| {
            rt.task("inc")
                .read(x)
                .write(y)
                .align(x, y)
                .submit()
                .unwrap()
        };
        step(&a, &b);
        if diverge == Some(i) {
            step(&b.slice(0, 0..4).unwrap(), &a.slice(0, 4..8).unwrap());
        } else {
            step(&b, &a);
        }
    }
    let out = (rt.read::<f64>(&a).unwrap(), rt.read::<f64>(&b).unwrap());
    let history = if tracing { history(&rt).len() } else { 0 };
    (out.0, out.1, rt.stats(), history)
}

#[test]
fn a_repeated_trace_is_compared_as_it_comes_and_a_difference_ends_the_streak() {
    // Once a trace of the loop is replayed, the next iterations are compared with its
    // recording task by task (a streak): they never reach the tracer, whose history stops
    // growing (without streaks it holds every one of the 400 tokens).
    let want = streak_stream(false, None);
    let (a, b, st, history) = streak_stream(true, None);
    assert_eq!((&a, &b), (&want.0, &want.1));
    assert!(st.traces_replayed > 20, "{st:?}");
    assert!(history < 200, "{history} tokens in the history");
    // A task that differs from the recording mid-streak (another view: another partition) is
    // caught by the comparison and analysed; the streak's held tasks go through the tracer,
    // and later iterations are replayed again.
    for at in [100, 150, 199] {
        let want = streak_stream(false, Some(at));
        let (a, b, st, history) = streak_stream(true, Some(at));
        assert_eq!((&a, &b), (&want.0, &want.1), "diverging at {at}");
        assert!(history > 2, "{history}");
        assert!(st.traces_replayed > 20, "{st:?}");
    }
}

/// The launcher's spec resolved and validated as `Runtime::issue` does, into the issued task
/// (`None` where `issue` reports an error).
fn resolved_spec(rt: &Runtime, l: TaskLauncher<'_>, op: Option<ReduceOp>) -> Option<Issued> {
    let mut spec = l.spec;
    let reg = spec.task.clone().ok()?;
    let constraints = resolve_constraints(&reg.name, &spec.args, &spec.constraints).ok()?;
    let domain = match &spec.domain {
        Some(d) => Some(Domain::new(d)?),
        None => None,
    };
    if let Some(dims) = &spec.shard {
        check_shard(&reg.name, dims, domain.as_ref()).ok()?;
    }
    let cell = Future::pending(Arc::downgrade(&rt.inner)).cell;
    Some(Issued::from_spec(
        reg,
        &mut spec,
        constraints,
        domain,
        op.map(|op| (op, cell)),
    ))
}

/// A launcher as data: the task, its arguments (store index, privilege), a future or a value
/// as its scalar, constraints (over store indices), launch domain, sharding and result.
#[derive(Clone)]
struct SpecCase {
    name: &'static str,
    args: Vec<(usize, Privilege)>,
    future: bool,
    cons: Vec<Con>,
    domain: Option<Vec<usize>>,
    shard: bool,
    op: Option<ReduceOp>,
}

#[derive(Clone)]
enum Con {
    Align(usize, usize),
    Broadcast(usize, Vec<usize>),
    Tile(usize, crate::Cut),
    Image(usize, usize),
}

impl SpecCase {
    fn launcher<'r>(&self, rt: &'r Runtime, stores: &[Store], f: &Future) -> TaskLauncher<'r> {
        let mut l = rt.task(self.name);
        for &(k, p) in &self.args {
            l = match p {
                Privilege::Read => l.read(&stores[k]),
                Privilege::Write => l.write(&stores[k]),
                _ => l.read_write(&stores[k]),
            };
        }
        l = if self.future {
            l.future(f)
        } else {
            l.scalar(1.0)
        };
        for c in &self.cons {
            l = match c {
                Con::Align(x, y) => l.align(&stores[*x], &stores[*y]),
                Con::Broadcast(x, dims) => l.broadcast(&stores[*x], dims),
                Con::Tile(x, cut) => l.tile(&stores[*x], std::slice::from_ref(cut)),
                Con::Image(x, y) => l.image(&stores[*x], &stores[*y]),
            };
        }
        if let Some(d) = &self.domain {
            l = l.launch_domain(d);
        }
        if self.shard {
            l = l.shard_by(&[0]);
        }
        l
    }
}

/// A replay streak compares the launcher's spec with the recording before its constraints are
/// resolved (`IssuedTrace::spec_matches_at`). It must answer exactly as resolving the spec and
/// comparing the issued task (`IssuedTrace::matches_at`, the oracle) does: over a recorded task
/// naming one store twice (constraints resolve to the *first* argument naming a view) with all
/// four kinds of constraint and a fixed domain, and launchers that differ from it in one thing
/// each (operands, dimensions, cuts, order, views, domain, sharding, result, future scalars).
#[test]
fn a_streak_compares_a_launcher_as_resolving_it_would() {
    let rt = plain(2);
    rt.register("t", |_| {}).unwrap();
    rt.register("u", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[8]).unwrap();
    let half = a.slice(0, 0..4).unwrap();
    let stores = [
        a,
        rt.create(DType::F64, &[8]).unwrap(),
        rt.create(DType::F64, &[4, 2]).unwrap(),
        rt.from_vec(&[8], (0..8i64).collect::<Vec<_>>()).unwrap(),
        half,
    ];
    let f = Future::ready(1.0);
    let (r, w) = (Privilege::Read, Privilege::Write);
    let base = SpecCase {
        name: "t",
        args: vec![(0, r), (0, r), (1, w), (2, r), (3, r)],
        future: false,
        cons: vec![
            Con::Align(0, 1),
            Con::Broadcast(2, vec![1]),
            Con::Tile(1, crate::Cut::Equal(0)),
            Con::Image(3, 0),
        ],
        domain: Some(vec![2]),
        shard: false,
        op: None,
    };
    let rec = resolved_spec(&rt, base.launcher(&rt, &stores, &f), None).expect("valid");
    let trace = crate::tracing::ahead::IssuedTrace::new(std::slice::from_ref(&rec));
    type Change = fn(&mut SpecCase);
    let changes: [Change; 23] = [
        |_| {},
        |s| s.op = Some(ReduceOp::Sum),
        |s| s.domain = Some(vec![3]),
        |s| s.domain = None,
        |s| s.shard = true,
        |s| s.name = "u",
        |s| s.future = true,
        |s| s.cons[0] = Con::Align(1, 0),
        |s| s.cons[0] = Con::Align(0, 3),
        |s| s.cons[0] = Con::Align(4, 1),
        |s| s.cons[1] = Con::Broadcast(2, vec![0]),
        |s| s.cons[1] = Con::Broadcast(2, vec![0, 1]),
        |s| s.cons[1] = Con::Broadcast(2, vec![2]),
        |s| s.cons[1] = Con::Broadcast(1, vec![0]),
        |s| s.cons[2] = Con::Tile(1, crate::Cut::At(0, vec![3])),
        |s| s.cons[2] = Con::Tile(0, crate::Cut::Equal(0)),
        |s| s.cons[3] = Con::Image(3, 1),
        |s| s.cons[3] = Con::Image(0, 3),
        |s| s.cons.swap(2, 3),
        |s| drop(s.cons.pop()),
        |s| s.cons.push(Con::Image(3, 0)),
        |s| s.args[1].1 = Privilege::Write,
        |s| s.args[1].0 = 4,
    ];
    let mut same = 0;
    for (k, change) in changes.iter().enumerate() {
        let mut case = base.clone();
        change(&mut case);
        let issued = resolved_spec(&rt, case.launcher(&rt, &stores, &f), case.op);
        let oracle =
            issued.is_some_and(|t| trace.matches_at(0, std::slice::from_ref(&t), &mut Vec::new()));
        let l = case.launcher(&rt, &stores, &f);
        let name = l.spec.task.as_ref().expect("registered").name.clone();
        let got = trace.spec_matches_at(0, &name, &l.spec, case.op, &[], &mut Vec::new());
        assert_eq!(got, oracle, "change {k}");
        same += usize::from(got);
    }
    assert_eq!(same, 1, "only the recorded launcher matches");
}

/// A streak's compare of views (`task::same_view`, cheaper than `Rect`'s `==`) still tells
/// apart views of one store that differ in one corner only: a launcher whose argument, or whose
/// constraint alone, names a view with another upper or another lower bound is not the
/// recorded task, by the launcher's compare and by the issued task's (`matches_at`).
#[test]
fn a_streak_tells_apart_views_that_differ_in_one_corner() {
    let rt = plain(2);
    rt.register("t", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[8]).unwrap();
    let stores = [
        a.slice(0, 1..4).unwrap(),
        a.slice(0, 1..5).unwrap(),
        a.slice(0, 0..4).unwrap(),
        rt.create(DType::F64, &[3]).unwrap(),
    ];
    let f = Future::ready(1.0);
    let (r, w) = (Privilege::Read, Privilege::Write);
    let base = SpecCase {
        name: "t",
        args: vec![(0, r), (3, w)],
        future: false,
        cons: vec![Con::Align(0, 3)],
        domain: None,
        shard: false,
        op: None,
    };
    let rec = resolved_spec(&rt, base.launcher(&rt, &stores, &f), None).expect("valid");
    let trace = crate::tracing::ahead::IssuedTrace::new(std::slice::from_ref(&rec));
    type Change = fn(&mut SpecCase);
    let changes: [Change; 5] = [
        |_| {},
        // The argument and its constraint: another upper, another lower bound.
        |s| (s.args[0].0, s.cons[0]) = (1, Con::Align(1, 3)),
        |s| (s.args[0].0, s.cons[0]) = (2, Con::Align(2, 3)),
        // The constraint alone (it names no argument then).
        |s| s.cons[0] = Con::Align(1, 3),
        |s| s.cons[0] = Con::Align(2, 3),
    ];
    for (k, change) in changes.iter().enumerate() {
        let mut case = base.clone();
        change(&mut case);
        let want = k == 0;
        let issued = resolved_spec(&rt, case.launcher(&rt, &stores, &f), None);
        let by_task =
            issued.is_some_and(|t| trace.matches_at(0, std::slice::from_ref(&t), &mut Vec::new()));
        let l = case.launcher(&rt, &stores, &f);
        let name = l.spec.task.as_ref().expect("registered").name.clone();
        let by_spec = trace.spec_matches_at(0, &name, &l.spec, None, &[], &mut Vec::new());
        assert_eq!((by_spec, by_task), (want, want), "change {k}");
    }
}

/// Views are named by value, not by handle: a constraint naming a view made by another
/// `slice` call with the same bounds names the argument, one with another corner (or the whole
/// store against a whole-extent view) does not — as when views were compared as `Rect`s,
/// now that they are interned keys (`ViewKey`).
#[test]
fn a_constraint_names_a_view_by_its_bounds_not_its_handle() {
    let rt = plain(2);
    rt.register("t", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[8]).unwrap();
    let b = rt.create(DType::F64, &[3]).unwrap();
    let submit =
        |arg: &Store, named: &Store| rt.task("t").read(arg).write(&b).align(named, &b).submit();
    let v = a.slice(0, 1..4).unwrap();
    assert!(submit(&v, &a.slice(0, 1..4).unwrap()).is_ok());
    // A view of a view, with the same bounds in the root's coordinates.
    let w = a.slice(0, 0..5).unwrap().slice(0, 1..4).unwrap();
    assert!(submit(&v, &w).is_ok());
    for other in [a.slice(0, 2..5).unwrap(), a.slice(0, 1..5).unwrap()] {
        let err = submit(&v, &other).unwrap_err();
        assert!(matches!(err, RuntimeError::NotAnArgument { .. }), "{err:?}");
    }
    let whole = rt.create(DType::F64, &[3]).unwrap();
    let full = whole.slice(0, 0..3).unwrap();
    let err = rt
        .task("t")
        .read(&whole)
        .write(&b)
        .align(&full, &b)
        .submit()
        .unwrap_err();
    assert!(matches!(err, RuntimeError::NotAnArgument { .. }), "{err:?}");
    rt.fence().unwrap();
}

/// A ping-pong loop of tiled tasks whose body writes which point it is into its tile; at
/// iteration `diverge` (if any) the second task cuts its stores at 3 instead of in halves —
/// the same arguments, views and domain, another constraint.
fn tiled_stream(tracing: bool, diverge: Option<u32>) -> (Vec<f64>, Vec<f64>, Stats) {
    let (rt, a, b) = inc_runtime(tracing, 8);
    rt.register("mark", |ctx| {
        let x = ctx.read::<f64>(0);
        let mut y = ctx.write::<f64>(1);
        let p = ctx.linear_point() as f64;
        // Exact in `f64` over the loop: a wrong tile shows in the last bits too.
        for (o, i) in y.as_mut_slice().iter_mut().zip(x.as_slice()) {
            *o = i + 1.0 + 10.0 * p;
        }
    })
    .unwrap();
    let halves = [crate::Cut::Equal(0)];
    let at3 = [crate::Cut::At(0, vec![3])];
    for i in 0..100u32 {
        let step = |x: &Store, y: &Store, cuts: &[crate::Cut]| {
            rt.task("mark")
                .read(x)
                .write(y)
                .tile(x, cuts)
                .tile(y, cuts)
                .launch_domain(&[2])
                .submit()
                .unwrap()
        };
        step(&a, &b, &halves);
        step(&b, &a, if diverge == Some(i) { &at3 } else { &halves });
    }
    let out = (rt.read::<f64>(&a).unwrap(), rt.read::<f64>(&b).unwrap());
    (out.0, out.1, rt.stats())
}

/// Mid-streak, a launcher that differs from the recording only in a constraint (its tiling)
/// is caught by the streak's compare of the launcher, analysed as usual, and the loop is
/// replayed again afterwards; the stores are bitwise those of the untraced run.
#[test]
fn a_launcher_that_differs_only_in_a_constraint_ends_the_streak() {
    for at in [60, 99] {
        let want = tiled_stream(false, Some(at));
        let (a, b, st) = tiled_stream(true, Some(at));
        assert_eq!((&a, &b), (&want.0, &want.1), "diverging at {at}");
        assert!(st.traces_replayed > 20, "{st:?}");
        assert!(st.tasks_solved > 0, "{st:?}");
    }
    // Undiverged, the tiles differ from the diverged run: the test can see a wrong tiling.
    assert_ne!(tiled_stream(false, None).0, tiled_stream(false, Some(99)).0);
}

/// A loop replayed as actors whose tasks' `Launched` come back from ended replays
/// (`Launched::empty`, `SolvedTask::launch`): one iteration's body panics (its output is
/// poisoned; the next iteration's whole write clears it) and every task folds a result.
/// Returns the stores, the futures' values and the statistics.
fn recycled_stream(tracing: bool) -> (Vec<f64>, Vec<f64>, Vec<Result<f64>>, Stats) {
    // A window of one and no fusion: one task's failure, unfused, is what is compared here.
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(1)
        .tracing(tracing)
        // Explicit, so that `TESSERA_ACTORS=0` cannot turn off what is tested.
        .actors(true)
        .trace_sampling(8)
        .window_size(1)
        // Replays fuse inside traces otherwise: what is checked here is one unfused task's
        // failure.
        .fusion(false)
        .build();
    let (rt, a, b) = with_inc(rt, |o, i| o * 0.5 + i);
    let c = rt.create(DType::F64, &[8]).unwrap();
    let n = rt.from_vec(&[1], vec![-1.0]).unwrap();
    rt.register("tick", |ctx| {
        let mut n = ctx.write::<f64>(0);
        n.set_at(0, n.at(0) + 1.0);
    })
    .unwrap();
    rt.register("inc_or_fail", |ctx| {
        let k = ctx.read::<f64>(0).at(0);
        assert!(k != 60.0, "iteration 60 fails");
        let mut y = ctx.write::<f64>(1);
        for i in y.range() {
            y.set_at(i, k + i as f64);
        }
        ctx.set_result(k);
    })
    .unwrap();
    rt.register("total", |ctx| {
        let x = ctx.read::<f64>(0);
        ctx.set_result(x.as_slice().iter().sum::<f64>());
    })
    .unwrap();
    let mut sums = Vec::new();
    for _ in 0..100 {
        // The iteration comes from a store, not a scalar: a scalar's value is in the token,
        // and a task whose token never repeats is never traced.
        rt.task("tick").read_write(&n).submit().unwrap();
        let f = rt
            .task("inc_or_fail")
            .read(&n)
            .write(&c)
            .broadcast(&n, &[0]);
        sums.push(f.submit_reduce(ReduceOp::Sum).unwrap());
        sums.push(
            rt.task("total")
                .read(&b)
                .submit_reduce(ReduceOp::Sum)
                .unwrap(),
        );
        rt.task("inc")
            .read(&b)
            .write(&a)
            .align(&a, &b)
            .submit()
            .unwrap();
        rt.task("inc")
            .read(&a)
            .write(&b)
            .align(&a, &b)
            .submit()
            .unwrap();
    }
    let sums = sums.iter().map(|f| f.get().map(|s| s.as_f64())).collect();
    rt.fence().unwrap();
    // Every task ended (`Launched::end` gives its stores' pending references back).
    for s in [&a, &b, &c, &n] {
        assert_eq!(s.pending_refs(), 0);
    }
    let out = (rt.read::<f64>(&a).unwrap(), rt.read::<f64>(&c).unwrap());
    (out.0, out.1, sums, rt.stats())
}

#[test]
fn replays_renewing_ended_tasks_fail_fold_and_poison_as_new_ones() {
    let (a, b, sums, _) = recycled_stream(false);
    let (a2, b2, sums2, st) = recycled_stream(true);
    assert!(st.actor_replays > 20, "{st:?}");
    assert_eq!((a2, b2), (a, b));
    let show = |s: &[Result<f64>]| {
        format!(
            "{:?}",
            s.iter().map(|r| r.as_ref().ok()).collect::<Vec<_>>()
        )
    };
    assert_eq!(show(&sums2), show(&sums));
    // The failure is the failing iteration's own, not carried by the tasks renewed from it.
    let failed: Vec<usize> = (0..sums.len()).filter(|&k| sums[k].is_err()).collect();
    assert_eq!(failed, [2 * 60], "{}", show(&sums));
}

/// A failed task poisons its outputs before any of its points releases a dependent: every
/// point of a consumer depends on one failed point, so none may run its body, whatever the
/// timing. (Found with `inc` reading a failed `b`: a consumer point that ran before the
/// failing task's last point saw no poison and computed from `b`'s stale values.)
fn consumer_points_run_after_failed_points(tracing: bool, actors: bool, threads: usize) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // Both switches explicit: `TESSERA_TRACING` / `TESSERA_ACTORS` only set defaults.
    let rt = Runtime::builder()
        .threads(threads)
        .min_piece_size(1)
        .tracing(tracing)
        .actors(actors)
        .trace_sampling(8)
        .window_size(1) // one unfused task's failure is what is checked here
        .fusion(false) // nor inside replayed traces
        .build();
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    rt.register("fail", |_| panic!("every point fails"))
        .unwrap();
    rt.register("consume", move |ctx| {
        counted.fetch_add(1, Ordering::Relaxed);
        let x = ctx.read::<f64>(0);
        let mut y = ctx.write::<f64>(1);
        for (o, i) in y.as_mut_slice().iter_mut().zip(x.as_slice()) {
            *o = *i;
        }
    })
    .unwrap();
    rt.register("rewrite", |_| {}).unwrap();
    let a = rt.create(DType::F64, &[8]).unwrap();
    let b = rt.create(DType::F64, &[8]).unwrap();
    for _ in 0..60 {
        rt.task("fail").write(&b).submit().unwrap();
        let consume = rt.task("consume").read(&b).write(&a).align(&a, &b);
        consume.submit().unwrap();
        // Whole writes clear both poisons for the next round.
        let rewrite = rt.task("rewrite").write(&a).write(&b).align(&a, &b);
        rewrite.submit().unwrap();
    }
    rt.task("fail").write(&b).submit().unwrap();
    let consume = rt.task("consume").read(&b).write(&a).align(&a, &b);
    consume.submit().unwrap();
    let err = rt.read::<f64>(&a).unwrap_err().to_string();
    assert!(err.contains("was not computed"), "{err}");
    // Traced, the rounds were replayed (what differs from the untraced run), as actors when
    // asked.
    let st = rt.stats();
    assert_eq!(st.traces_replayed > 0, tracing, "{st:?}");
    assert_eq!(st.actor_replays > 0, tracing && actors, "{st:?}");
    ran.load(Ordering::Relaxed)
}

#[test]
fn consumers_of_a_failed_task_fail_at_every_point_traced_or_not() {
    for (tracing, actors) in [(false, false), (true, false), (true, true)] {
        for threads in [1, 2] {
            for _ in 0..5 {
                let ran = consumer_points_run_after_failed_points(tracing, actors, threads);
                assert_eq!(
                    ran, 0,
                    "tracing {tracing}, actors {actors}, threads {threads}"
                );
            }
        }
    }
}

/// A failed task's end can come after a later task that rewrote the whole store has ended:
/// the later task's points depend on the failed task's points, not on its finish step, which
/// here waits for an earlier reader of the store the failed task reduces into (held at a
/// gate). The failure must not poison what the later task wrote. (Under actors every finish
/// step goes to one worker, and `replays_renewing_ended_tasks_fail_fold_and_poison_as_new_
/// ones` once found its store poisoned at the final read: the failing iteration's finish
/// step ran after the last iteration's rewrite had ended.)
#[test]
fn a_failed_task_ending_after_a_later_whole_write_does_not_poison_it() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    // One worker (taken by the gated reader) and the issuing thread, which runs the rest
    // while it waits.
    let rt = Runtime::builder()
        .threads(2)
        .tracing(false)
        .window_size(1)
        .fusion(false)
        .build();
    let (gate, started) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (g, s) = (gate.clone(), started.clone());
    rt.register("gated_read", move |ctx| {
        s.store(true, Ordering::Release);
        // Bounded, so that a failing assertion below cannot leave the runtime's drop waiting.
        let t0 = Instant::now();
        while !g.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(20) {
            std::thread::yield_now();
        }
        let _ = ctx.read::<f64>(0);
    })
    .unwrap();
    rt.register("fail_reducing", |_| panic!("fails")).unwrap();
    rt.register("rewrite", |ctx| ctx.write::<f64>(0).fill(3.0))
        .unwrap();
    let r = rt.create(DType::F64, &[1]).unwrap();
    let c = rt.create(DType::F64, &[8]).unwrap();
    rt.task("gated_read")
        .read(&r)
        .launch_domain(&[1])
        .submit()
        .unwrap();
    let t0 = Instant::now();
    while !started.load(Ordering::Acquire) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the reader never ran"
        );
        std::thread::yield_now();
    }
    // Its finish step (the fold into `r`) waits for the gated reader; its points do not.
    rt.task("fail_reducing")
        .write(&c)
        .reduce(&r, ReduceOp::Sum)
        .broadcast(&r, &[0])
        .submit()
        .unwrap();
    rt.task("rewrite").write(&c).submit().unwrap();
    // Waits for `rewrite` only: it has ended, the failed task has not.
    assert_eq!(rt.read::<f64>(&c).unwrap(), vec![3.0; 8]);
    gate.store(true, Ordering::Release);
    let _ = rt.fence();
    assert_eq!(rt.read::<f64>(&c).unwrap(), vec![3.0; 8]);
    // The failure is still reported where it is due: the store it reduced into.
    let err = rt.read::<f64>(&r).unwrap_err().to_string();
    assert!(err.contains("fails"), "{err}");
}

/// The points of a launch view a fresh store at once, and all but one wait for the one that
/// allocates it (spinning first: `StoreRoot::allocate`). Each fresh store here gets the buffer
/// of the one dropped before it, full of 9.0s: every point must still see zeros.
#[test]
fn points_viewing_a_fresh_store_at_once_all_see_it_zeroed() {
    let rt = Runtime::builder()
        .threads(3)
        .min_piece_size(1)
        .tracing(false)
        .build();
    rt.register("fill", |ctx| {
        let mut w = ctx.write::<f64>(0);
        let cells = w.as_mut_slice();
        assert!(cells.iter().all(|&v| v == 0.0), "a fresh store reads zeros");
        cells.fill(9.0);
    })
    .unwrap();
    let before = rt.stats();
    for _ in 0..200 {
        let s = rt.create(DType::F64, &[4096]).unwrap();
        rt.task("fill")
            .read_write(&s)
            .launch_domain(&[4])
            .submit()
            .unwrap();
        assert_eq!(rt.read::<f64>(&s).unwrap(), vec![9.0; 4096]);
    }
    let st = rt.stats().since(&before);
    assert_eq!(st.points_run, 800, "{st:?}");
}

/// Review 59c: with every token equal (`token_mask` 0), one trace id stands for bodies over
/// the same stores in other roles (written here, read there; whole or half views), so replays
/// of one recording follow each other over permuted stores: linked through `cross` with a
/// non-identity store map right after a replay behind an entry vertex, never chained. Bodies
/// spin a little (a different time per call) so that a missing edge shows: with ledger
/// borrows a conflicting overlap panics the body ("in use"), and values are compared with the
/// untraced run, with and without verified replays, at 1-3 threads.
#[test]
fn replays_of_one_recording_over_stores_in_other_roles_match_the_untraced_run() {
    fn stream(rt: &Runtime, seed: u64, mask: Option<u64>) -> Vec<Vec<f64>> {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = calls.clone();
        rt.register("mix", move |ctx| {
            let n = c.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as u64;
            let spin =
                std::time::Duration::from_micros((n.wrapping_mul(2_654_435_761) >> 5) % 5 * 40);
            let start = std::time::Instant::now();
            let x: Vec<f64> = ctx.read::<f64>(0).as_slice().to_vec();
            while start.elapsed() < spin {
                std::hint::spin_loop();
            }
            let mut y = ctx.write::<f64>(1);
            for (o, i) in y.as_mut_slice().iter_mut().zip(&x) {
                *o = *o * 0.5 + i + 1.0;
            }
        })
        .unwrap();
        if let (Some(mask), Some(tr)) = (mask, rt.inner.front.lock().unwrap().tracing.as_mut()) {
            tr.token_mask = mask;
        }
        let stores: Vec<Store> = (0..3)
            .map(|k| {
                rt.from_vec(&[8], (0..8).map(|j| f64::from(8 * k + j)).collect())
                    .unwrap()
            })
            .collect();
        let mut s = seed;
        let mut next = move |m: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % m
        };
        // A body of 1-3 tasks over store slots 0-2; each iteration maps slots to stores by
        // one of a few permutations, in turn.
        const PERMS: [[usize; 3]; 6] = [
            [0, 1, 2],
            [1, 0, 2],
            [0, 2, 1],
            [2, 1, 0],
            [1, 2, 0],
            [2, 0, 1],
        ];
        let mut out = Vec::new();
        for _ in 0..4 {
            let body: Vec<(usize, usize, bool)> = (0..1 + next(3))
                .map(|_| {
                    let x = next(3) as usize;
                    (x, (x + 1 + next(2) as usize) % 3, next(4) == 0)
                })
                .collect();
            let perms: Vec<[usize; 3]> =
                (0..1 + next(3)).map(|_| PERMS[next(6) as usize]).collect();
            for it in 0..30 {
                let p = perms[it % perms.len()];
                for &(x, y, half) in &body {
                    let (x, y) = (&stores[p[x]], &stores[p[y]]);
                    let (x, y) = if half {
                        (x.slice(0, 0..4).unwrap(), y.slice(0, 4..8).unwrap())
                    } else {
                        (x.clone(), y.clone())
                    };
                    rt.task("mix")
                        .read(&x)
                        .write(&y)
                        .align(&x, &y)
                        .launch_domain(&[2])
                        .submit()
                        .unwrap();
                }
            }
            out.push(rt.read::<f64>(&stores[next(3) as usize]).unwrap());
        }
        for st in &stores {
            out.push(rt.read::<f64>(st).unwrap());
        }
        out
    }
    let mut linked = 0;
    let seeds: Vec<u64> = match std::env::var("TESSERA_REVIEW_SEEDS") {
        Ok(s) => {
            let (a, b) = s.split_once("..").expect("a..b");
            (a.parse().unwrap()..b.parse().unwrap()).collect()
        }
        Err(_) => (1..=12).collect(),
    };
    for seed in seeds {
        let want = stream(
            &Runtime::builder().threads(2).tracing(false).build(),
            seed,
            None,
        );
        for threads in 1..=3 {
            for verified in [false, true] {
                let rt = Runtime::builder()
                    .threads(threads)
                    .min_piece_size(1)
                    .tracing(true)
                    .actors(true)
                    .verified_replays(verified)
                    .trace_sampling(4)
                    .build();
                let got = stream(&rt, seed, Some(0));
                let st = rt.stats();
                assert_eq!(
                    got, want,
                    "seed {seed}, threads {threads}, verified {verified}: {st:?}"
                );
                linked += st.actor_linked_replays;
            }
        }
    }
    assert!(linked > 20, "{linked} linked replays");
}

/// Review 59c: `take` of a traced program's store moves the buffer out, as without tracing.
/// It always copied: the tracer's first-use map keeps a weak reference to every store it saw
/// (`Tracing::store_name`), and `Arc::get_mut`, `take`'s test that no other handle exists,
/// counts weak references too (fails without `Tracing::forget_store`, also after a fence).
/// Without a fence the last replay may still hold the store (then it copies, correctly).
#[test]
fn take_moves_a_traced_store_s_buffer_out() {
    for (tracing, fence) in [(false, false), (true, true)] {
        let rt = Runtime::builder()
            .threads(2)
            .tracing(tracing)
            .actors(true)
            .trace_sampling(8)
            .build();
        rt.register("triple", |ctx| {
            let mut w = ctx.write::<u64>(0);
            w.as_mut_slice()
                .iter_mut()
                .for_each(|x| *x = x.wrapping_mul(3));
        })
        .unwrap();
        let v: Vec<u64> = (0..1000).collect();
        let ptr = v.as_ptr();
        let s = rt.from_vec(&[1000], v).unwrap();
        for _ in 0..200 {
            rt.task("triple")
                .read_write(&s)
                .launch_domain(&[2])
                .submit()
                .unwrap();
        }
        assert!(!tracing || rt.stats().actor_replays > 5, "{:?}", rt.stats());
        if fence {
            rt.fence().unwrap();
        }
        let out = rt.take::<u64>(s).unwrap();
        let want: Vec<u64> = (0..1000u64)
            .map(|x| x.wrapping_mul(3u64.wrapping_pow(200)))
            .collect();
        assert_eq!(out, want);
        assert_eq!(out.as_ptr(), ptr, "tracing {tracing}: moved, not copied");
    }
}

/// A long-running program whose traced loops each run over stores of their own (a request
/// loop: every loop's stores are old, so named by id, so each loop is a new trace) keeps a
/// bounded number of recordings: a fence lets go of those neither made nor replayed before
/// any of the last `KEEP_IDLE` fences (it kept every one for good, ~7 KiB each, with actors
/// ~28 KiB). A loop whose trace is replayed between fences keeps it; the values are those of
/// the untraced runtime.
#[test]
fn a_fence_lets_go_of_recordings_idle_for_several_fences() {
    let run = |tracing: bool, actors: bool| {
        let (rt, _, _) = traced_inc(tracing, actors);
        let mut out = vec![];
        let mut most = 0;
        for request in 0..40 {
            let a = rt.from_vec(&[8], vec![request as f64; 8]).unwrap();
            let b = rt.create(DType::F64, &[8]).unwrap();
            // Fences inside a loop too: its trace is replayed in every interval.
            for s in 0..120 {
                let (x, y) = if s % 2 == 0 { (&a, &b) } else { (&b, &a) };
                inc(&rt, x, y);
                if s % 40 == 39 {
                    rt.fence().unwrap();
                }
            }
            out.push(rt.read::<f64>(&a).unwrap());
            rt.fence().unwrap();
            most = most.max(recorded(&rt));
        }
        (out, most, rt.stats())
    };
    let (want, _, _) = run(false, false);
    // Four fences a loop: a loop's recordings stay through the next `KEEP_IDLE / 4` loops.
    let loops_kept = usize::from(KEEP_IDLE) / 4 + 1;
    for actors in [false, true] {
        let (got, most, st) = run(true, actors);
        assert_eq!(got, want, "actors {actors}");
        assert!(st.traces_recorded >= 40, "a trace per loop: {st:?}");
        assert!(st.traced_share() > 0.5, "{st:?}");
        assert!(
            most <= 2 * loops_kept,
            "actors {actors}: {most} recordings kept at a fence"
        );
    }
}

/// Traced phases that alternate between fences (a time step, a fence, an output step, a
/// fence) are replayed from their recordings, not recorded anew in every interval (letting go
/// of a recording at its first idle fence recorded each phase every time: 62 recordings in 30
/// rounds of two phases). Values as untraced.
#[test]
fn phases_alternating_between_fences_keep_their_recordings() {
    let run = |tracing: bool, actors: bool| {
        let (rt, a, b) = traced_inc(tracing, actors);
        let c = rt.from_vec(&[8], vec![2.0; 8]).unwrap();
        let d = rt.create(DType::F64, &[8]).unwrap();
        let phases = [(&a, &b), (&c, &d)];
        for _ in 0..30 {
            for (p, q) in phases {
                for s in 0..60 {
                    let (x, y) = if s % 2 == 0 { (p, q) } else { (q, p) };
                    inc(&rt, x, y);
                }
                rt.fence().unwrap();
            }
        }
        let out = [&a, &c].map(|s| rt.read::<f64>(s).unwrap());
        (out, rt.stats())
    };
    let (want, _) = run(false, false);
    for actors in [false, true] {
        let (got, st) = run(true, actors);
        assert_eq!(got, want, "actors {actors}");
        assert!(st.traced_share() > 0.9, "actors {actors}: {st:?}");
        assert!(
            st.traces_recorded <= 8,
            "actors {actors}: every phase recorded anew: {st:?}"
        );
    }
}

/// [`with_inc`] on a 2-thread runtime sampling its stream for repeats every 8 tasks.
fn traced_inc(tracing: bool, actors: bool) -> (Runtime, Store, Store) {
    let rt = Runtime::builder()
        .threads(2)
        .min_piece_size(1)
        .tracing(tracing)
        .actors(actors)
        .trace_sampling(8)
        .build();
    with_inc(rt, |o, i| o * 0.5 + i + 1.0)
}

/// `inc` from `x` into `y`, aligned.
fn inc(rt: &Runtime, x: &Store, y: &Store) {
    rt.task("inc")
        .read(x)
        .write(y)
        .align(x, y)
        .submit()
        .unwrap();
}

/// How many traces `rt` keeps recorded.
fn recorded(rt: &Runtime) -> usize {
    let front = rt.inner.front.lock().unwrap();
    front.tracing.as_ref().map_or(0, |tr| tr.recorded())
}

/// Integer reductions wrap on overflow, in a store and in a future, as release builds always
/// did: debug builds panicked in the fold instead, failing the task there alone (hunt review,
/// stop 61). The suite runs in debug, so this fails without wrapping folds.
#[test]
fn integer_reductions_that_overflow_wrap_in_every_build() {
    let rt = plain(2);
    rt.register("add_max", |ctx| {
        ctx.reduce::<u32>(0).reduce_at(0, u32::MAX);
        ctx.set_result(u64::MAX);
    })
    .unwrap();
    let r = rt.from_vec(&[1], vec![5u32]).unwrap();
    let total = rt
        .task("add_max")
        .reduce(&r, ReduceOp::Sum)
        .broadcast(&r, &[0])
        .launch_domain(&[3])
        .submit_reduce(ReduceOp::Sum)
        .unwrap();
    // 5 + 3 (2^32 - 1) = 5 - 3 (mod 2^32); 3 (2^64 - 1) = -3 (mod 2^64).
    assert_eq!(rt.read::<u32>(&r).unwrap(), vec![2]);
    assert_eq!(total.get().unwrap(), Scalar::U64(u64::MAX - 2));
    assert_eq!(i32::combine(ReduceOp::Prod, i32::MIN, -1), i32::MIN);
    assert_eq!(
        f64::combine(ReduceOp::Sum, f64::MAX, f64::MAX),
        f64::INFINITY
    );
}
