//! Random task streams run at 1, 2 and 8 threads, with windows of 1, 4 and 16 and fusion on
//! and off, must leave every store exactly as a sequential interpretation of the same stream
//! does. Values are small integers in `f64`, so every sum is
//! exact and any reordering bug shows as a difference, not as rounding.

use proptest::prelude::*;
use tessera_runtime::{
    Chunk, DType, Future, PosRange, ReduceOp, Result, Runtime, Store, TaskLauncher, WindowPolicy,
};

const STORES: usize = 4;

#[derive(Clone, Debug)]
enum Op {
    /// `d = a * s + t`
    Axpy { d: usize, s: usize, t: usize, a: i8 },
    /// `x = k * x + c` in place
    Scale { x: usize, k: i8, c: i8 },
    /// `d[1..n-1] = s[0..n-2] + s[1..n-1] + s[2..n]` (three aliasing views of `s`)
    Stencil { d: usize, s: usize },
    /// `d[i] = s[idx[i]]` through `image(idx -> s)`
    Gather { d: usize, s: usize },
    /// `d[i] = Σ s[pos[i]]` through `image(pos -> s)`
    Segments { d: usize, s: usize },
    /// `acc[i % m] += s[i]` with every point reducing into the whole (broadcast) `acc`
    Histogram { s: usize },
    /// `x += Σ s` with the sum passed as a future
    AddSum { x: usize, s: usize },
    /// the positive elements of `s` into a new unbound store
    Filter { s: usize },
    /// `x = c`
    Fill { x: usize, c: i8 },
    /// `idx[i] = (idx[i] + k) % n`: later gathers find their image source still being written
    Shift { k: u8 },
    /// `d = a * s + t` as an element-wise task (kernel fusion)
    AxpyEw { d: usize, s: usize, t: usize, a: i8 },
    /// `x += Σ s` with an element-wise sum passed as a future
    AddSumEw { x: usize, s: usize },
    /// `x += Σ last filtered`: reads an unbound store whose producer may still be in the window
    AddFiltered { x: usize },
}

fn op() -> impl Strategy<Value = Op> {
    let st = 0..STORES;
    let sm = -2i8..=2;
    prop_oneof![
        (st.clone(), st.clone(), st.clone(), sm.clone()).prop_map(|(d, s, t, a)| Op::Axpy {
            d,
            s,
            t,
            a
        }),
        (st.clone(), sm.clone(), sm.clone()).prop_map(|(x, k, c)| Op::Scale { x, k, c }),
        (st.clone(), st.clone()).prop_map(|(d, s)| Op::Stencil { d, s }),
        (st.clone(), st.clone()).prop_map(|(d, s)| Op::Gather { d, s }),
        (st.clone(), st.clone()).prop_map(|(d, s)| Op::Segments { d, s }),
        st.clone().prop_map(|s| Op::Histogram { s }),
        (st.clone(), st.clone()).prop_map(|(x, s)| Op::AddSum { x, s }),
        st.clone().prop_map(|s| Op::Filter { s }),
        (st, sm).prop_map(|(x, c)| Op::Fill { x, c }),
        (1u8..5).prop_map(|k| Op::Shift { k }),
        (0..STORES, 0..STORES, 0..STORES, -2i8..=2).prop_map(|(d, s, t, a)| Op::AxpyEw {
            d,
            s,
            t,
            a
        }),
        (0..STORES, 0..STORES).prop_map(|(x, s)| Op::AddSumEw { x, s }),
        (0..STORES).prop_map(|x| Op::AddFiltered { x }),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    n: usize,
    init: Vec<Vec<f64>>,
    idx: Vec<u64>,
    pos: Vec<PosRange>,
    ops: Vec<Op>,
    min_piece: usize,
    fixed: Option<usize>,
    /// Tasks buffered between issue and analysis.
    window: usize,
    /// Times the whole op list is issued: repeats find the solve memo (same stores, views and
    /// key partitions), which must give the same answers as solving again.
    repeat: usize,
}

/// Rows of random length (some empty, some long) that tile a prefix of `[0, n)`.
fn segments(n: usize, lens: &[usize]) -> Vec<PosRange> {
    let mut at = 0u64;
    lens.iter()
        .take(n)
        .map(|&l| {
            let hi = (at + l as u64).min(n as u64);
            let r = PosRange::new(at, hi);
            at = hi;
            r
        })
        .collect()
}

fn case() -> impl Strategy<Value = Case> {
    (3usize..40).prop_flat_map(|n| {
        (
            proptest::collection::vec(proptest::collection::vec(-3i8..=3, n), STORES),
            proptest::collection::vec(0..n as u64, n),
            proptest::collection::vec(prop_oneof![Just(0usize), 0usize..3, 5usize..12], n),
            proptest::collection::vec(op(), 1..14),
            1usize..8,
            proptest::option::of(1usize..6),
            prop_oneof![Just(1usize), Just(4), Just(16), 2usize..6],
            1usize..4,
        )
            .prop_map(
                move |(init, idx, lens, ops, min_piece, fixed, window, repeat)| Case {
                    n,
                    init: init
                        .into_iter()
                        .map(|v| v.into_iter().map(f64::from).collect())
                        .collect(),
                    idx,
                    pos: segments(n, &lens),
                    ops,
                    min_piece,
                    fixed,
                    window,
                    repeat,
                },
            )
    })
}

const M: usize = 3; // histogram bins

fn repeated(c: &Case) -> impl Iterator<Item = &Op> {
    (0..c.repeat).flat_map(|_| &c.ops)
}

/// The stream run by plain loops: the reference.
/// Final stores, histogram, filtered (unbound) outputs, and future values.
type Outcome = (Vec<Vec<f64>>, Vec<f64>, Vec<Vec<f64>>, Vec<f64>);

/// Largest magnitude [`sequential`] lets a value reach: a sum of fewer than 64 such integers
/// stays within 2^53, so it is exact in any order and any split into pieces.
const EXACT: f64 = (1u64 << 47) as f64;

/// The stream interpreted in program order, or `None` when some value grew past [`EXACT`]
/// (a few `AddSum`s multiply values by ~n each): past exact integers the runtime's sums, in
/// its pieces' order, may differ from these in the last bits, so they are no reference.
fn sequential(c: &Case) -> Option<Outcome> {
    let n = c.n;
    let mut x = c.init.clone();
    let mut acc = vec![0.0; M];
    let mut filtered = vec![];
    let mut sums = vec![];
    let mut idx = c.idx.clone();
    for op in repeated(c) {
        match *op {
            Op::Axpy { d, s, t, a } => {
                if d != s && d != t {
                    x[d] = (0..n).map(|i| a as f64 * x[s][i] + x[t][i]).collect();
                }
            }
            Op::Scale { x: i, k, c } => x[i].iter_mut().for_each(|v| *v = k as f64 * *v + c as f64),
            Op::Stencil { d, s } => {
                if d != s {
                    for i in 1..n - 1 {
                        x[d][i] = x[s][i - 1] + x[s][i] + x[s][i + 1];
                    }
                }
            }
            Op::Gather { d, s } => {
                if d != s {
                    x[d] = idx.iter().map(|&j| x[s][j as usize]).collect();
                }
            }
            Op::Segments { d, s } => {
                if d != s {
                    for (i, r) in c.pos.iter().enumerate() {
                        x[d][i] = (r.lo..r.hi).map(|k| x[s][k as usize]).sum();
                    }
                }
            }
            Op::Histogram { s } => (0..n).for_each(|i| acc[i % M] += x[s][i]),
            Op::AddSum { x: i, s } => {
                let sum: f64 = x[s].iter().sum();
                sums.push(sum);
                x[i].iter_mut().for_each(|v| *v += sum);
            }
            Op::Filter { s } => filtered.push(x[s].iter().copied().filter(|&v| v > 0.0).collect()),
            Op::Fill { x: i, c } => x[i].iter_mut().for_each(|v| *v = c as f64),
            Op::Shift { k } => idx.iter_mut().for_each(|j| *j = (*j + k as u64) % n as u64),
            Op::AxpyEw { d, s, t, a } => {
                if d != s && d != t {
                    x[d] = (0..n).map(|i| a as f64 * x[s][i] + x[t][i]).collect();
                }
            }
            Op::AddSumEw { x: i, s } => {
                let dot: f64 = x[s].iter().sum();
                sums.push(dot);
                x[i].iter_mut().for_each(|v| *v += dot);
            }
            Op::AddFiltered { x: i } => {
                if let Some(f) = filtered.last() {
                    let f: &Vec<f64> = f;
                    let sum: f64 = f.iter().sum();
                    x[i].iter_mut().for_each(|v| *v += sum);
                }
            }
        }
        let values = x.iter().flatten().chain(&acc).chain(&sums);
        if values.copied().any(|v| v.abs() > EXACT) {
            return None;
        }
    }
    Some((x, acc, filtered, sums))
}

fn register(rt: &Runtime) -> Result<()> {
    rt.register("axpy", |ctx| {
        let a = ctx.scalar(0).as_f64();
        let (s, t) = (ctx.read::<f64>(1), ctx.read::<f64>(2));
        let mut d = ctx.write::<f64>(0);
        for i in d.range() {
            d.set_at(i, a * s.at(i) + t.at(i));
        }
    })?;
    rt.register("scale", |ctx| {
        let (k, c) = (ctx.scalar(0).as_f64(), ctx.scalar(1).as_f64());
        let mut x = ctx.write::<f64>(0);
        x.as_mut_slice().iter_mut().for_each(|v| *v = k * *v + c);
    })?;
    rt.register("stencil", |ctx| {
        let mut d = ctx.write::<f64>(0);
        let (l, c, r) = (ctx.read::<f64>(1), ctx.read::<f64>(2), ctx.read::<f64>(3));
        for i in d.range() {
            d.set_at(i, l.at(i) + c.at(i) + r.at(i));
        }
    })?;
    rt.register("gather", |ctx| {
        let mut d = ctx.write::<f64>(0);
        let (idx, s) = (ctx.read::<u64>(1), ctx.read::<f64>(2));
        for i in d.range() {
            d.set_at(i, s.at(idx.at(i) as usize));
        }
    })?;
    rt.register("segments", |ctx| {
        let mut d = ctx.write::<f64>(0);
        let (pos, s) = (ctx.read::<PosRange>(1), ctx.read::<f64>(2));
        for i in d.range() {
            let r = pos.at(i);
            d.set_at(i, (r.lo..r.hi).map(|k| s.at(k as usize)).sum());
        }
    })?;
    rt.register("histogram", |ctx| {
        let s = ctx.read::<f64>(0);
        let mut acc = ctx.reduce::<f64>(1);
        for i in s.range() {
            acc.reduce_at(i % M, s.at(i));
        }
    })?;
    rt.register("sum", |ctx| {
        ctx.set_result(ctx.read::<f64>(0).as_slice().iter().sum::<f64>())
    })?;
    rt.register("add_future", |ctx| {
        let v = ctx.scalar(0).as_f64();
        ctx.write::<f64>(0)
            .as_mut_slice()
            .iter_mut()
            .for_each(|x| *x += v);
    })?;
    rt.register("shift", |ctx| {
        let (k, n) = (ctx.scalar(0).as_u64(), ctx.scalar(1).as_u64());
        ctx.write::<u64>(0)
            .as_mut_slice()
            .iter_mut()
            .for_each(|j| *j = (*j + k) % n);
    })?;
    rt.register_elementwise::<f64>("axpy_ew", |c: &mut Chunk<'_, f64>| {
        let a = c.scalar(0).as_f64();
        let (ins, outs) = c.split();
        for ((d, s), t) in outs[0].iter_mut().zip(ins[0].iter()).zip(ins[1].iter()) {
            *d = a * s + t;
        }
    })?;
    rt.register_elementwise::<f64>("sum_ew", |c: &mut Chunk<'_, f64>| {
        let (ins, _) = c.split();
        let s: f64 = ins[0].iter().sum();
        c.add_result(s);
    })?;
    rt.register("filter", |ctx| {
        let s = ctx.read::<f64>(0);
        ctx.emit(
            1,
            s.as_slice()
                .iter()
                .copied()
                .filter(|&v| v > 0.0)
                .collect::<Vec<f64>>(),
        );
    })
}

/// Fixes the launch domain when the case asks for one.
fn fix<'a>(c: &Case, t: TaskLauncher<'a>) -> TaskLauncher<'a> {
    match c.fixed {
        Some(d) => t.launch_domain(&[d]),
        None => t,
    }
}

/// The stream issued to a runtime with `threads` workers, a window (fixed or adaptive), fusing
/// or not, tracing or not (looking for repeats every 4 tasks, so that short streams replay).
fn parallel(
    case: &Case,
    threads: usize,
    window: WindowPolicy,
    fusion: bool,
    tracing: bool,
) -> Result<Outcome> {
    let b = Runtime::builder();
    let b = match window {
        WindowPolicy::Fixed(n) => b.window_size(n),
        WindowPolicy::Adaptive { max } => b.adaptive_window(max),
    };
    let rt = b
        .threads(threads)
        .min_piece_size(case.min_piece)
        .fusion(fusion)
        .tracing(tracing)
        .trace_sampling(4)
        .build();
    run_stream(case, &rt)
}

/// The stream issued to `rt`; every rank of a replicated runtime issues it alike.
fn run_stream(case: &Case, rt: &Runtime) -> Result<Outcome> {
    register(rt)?;
    let n = case.n;
    let x: Vec<Store> = case
        .init
        .iter()
        .map(|v| rt.from_vec(&[n], v.clone()))
        .collect::<Result<_>>()?;
    let idx = rt.from_vec(&[n], case.idx.clone())?;
    let pos = rt.from_vec(&[n], case.pos.clone())?;
    let acc = rt.create(DType::F64, &[M])?;
    let mut filtered = vec![];
    let mut sums: Vec<Future> = vec![];
    for op in repeated(case) {
        match *op {
            Op::Axpy { d, s, t, a } if d != s && d != t => fix(
                case,
                rt.task("axpy")
                    .write(&x[d])
                    .read(&x[s])
                    .read(&x[t])
                    .scalar(a as f64)
                    .align(&x[d], &x[s])
                    .align(&x[d], &x[t]),
            )
            .submit()?,
            Op::Scale { x: i, k, c } => fix(
                case,
                rt.task("scale")
                    .read_write(&x[i])
                    .scalar(k as f64)
                    .scalar(c as f64),
            )
            .submit()?,
            Op::Stencil { d, s } if d != s => {
                let out = x[d].slice(0, 1..n - 1)?;
                let (l, m, r) = (
                    x[s].slice(0, 0..n - 2)?,
                    x[s].slice(0, 1..n - 1)?,
                    x[s].slice(0, 2..n)?,
                );
                fix(
                    case,
                    rt.task("stencil")
                        .write(&out)
                        .read(&l)
                        .read(&m)
                        .read(&r)
                        .align(&out, &l)
                        .align(&out, &m)
                        .align(&out, &r),
                )
                .submit()?
            }
            Op::Gather { d, s } if d != s => fix(
                case,
                rt.task("gather")
                    .write(&x[d])
                    .read(&idx)
                    .read(&x[s])
                    .align(&x[d], &idx)
                    .image(&idx, &x[s]),
            )
            .submit()?,
            Op::Segments { d, s } if d != s => fix(
                case,
                rt.task("segments")
                    .write(&x[d])
                    .read(&pos)
                    .read(&x[s])
                    .align(&x[d], &pos)
                    .image(&pos, &x[s]),
            )
            .submit()?,
            Op::Histogram { s } => fix(
                case,
                rt.task("histogram")
                    .read(&x[s])
                    .reduce(&acc, ReduceOp::Sum)
                    .broadcast(&acc, &[0]),
            )
            .submit()?,
            Op::AddSum { x: i, s } => {
                let f = fix(case, rt.task("sum").read(&x[s])).submit_reduce(ReduceOp::Sum)?;
                fix(case, rt.task("add_future").read_write(&x[i]).future(&f)).submit()?;
                sums.push(f);
            }
            Op::Filter { s } => {
                let out = rt.create_unbound(DType::F64);
                fix(case, rt.task("filter").read(&x[s]).write_unbound(&out)).submit()?;
                filtered.push(out);
            }
            Op::Fill { x: i, c } => rt.fill(&x[i], c as f64)?,
            Op::Shift { k } => fix(
                case,
                rt.task("shift")
                    .read_write(&idx)
                    .scalar(k as u64)
                    .scalar(n as u64),
            )
            .submit()?,
            Op::AxpyEw { d, s, t, a } if d != s && d != t => fix(
                case,
                rt.task("axpy_ew")
                    .read(&x[s])
                    .read(&x[t])
                    .write(&x[d])
                    .scalar(a as f64)
                    .align(&x[d], &x[s])
                    .align(&x[d], &x[t]),
            )
            .submit()?,
            Op::AddSumEw { x: i, s } => {
                let f = fix(case, rt.task("sum_ew").read(&x[s])).submit_reduce(ReduceOp::Sum)?;
                fix(case, rt.task("add_future").read_write(&x[i]).future(&f)).submit()?;
                sums.push(f);
            }
            Op::AddFiltered { x: i } => {
                if let Some(f) = filtered.last() {
                    let s = rt.task("sum").read(f).submit_reduce(ReduceOp::Sum)?;
                    fix(case, rt.task("add_future").read_write(&x[i]).future(&s)).submit()?;
                }
            }
            _ => {}
        }
    }
    let xs = x.iter().map(|s| rt.read::<f64>(s)).collect::<Result<_>>()?;
    let fs = filtered
        .iter()
        .map(|s| rt.read::<f64>(s))
        .collect::<Result<_>>()?;
    let ss = sums
        .iter()
        .map(|f| f.get().map(|v| v.as_f64()))
        .collect::<Result<_>>()?;
    Ok((xs, rt.read::<f64>(&acc)?, fs, ss))
}

/// The stream on `ranks` thread ranks (two processors each, the case's window, fusion on):
/// every rank's outcome.
fn on_ranks(case: &Case, ranks: usize) -> Vec<Result<Outcome>> {
    tessera_runtime::transport::run_ranks(ranks, |comm| {
        let rt = Runtime::builder()
            .threads(2)
            .min_piece_size(case.min_piece)
            .window_size(case.window)
            .communicator(std::sync::Arc::new(comm.clone()))
            .agreement_check(true)
            .try_build()?;
        run_stream(case, &rt)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_streams_on_ranks_match_sequential_interpretation(c in case()) {
        let Some(want) = sequential(&c) else {
            return Err(TestCaseError::reject("values past exact integers"));
        };
        for ranks in 1..=4 {
            for (rank, got) in on_ranks(&c, ranks).into_iter().enumerate() {
                let got = got.map_err(|e| TestCaseError::fail(format!("rank {rank}/{ranks}: {e}")))?;
                prop_assert_eq!(&got, &want, "rank {} of {}", rank, ranks);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_streams_match_sequential_interpretation(c in case()) {
        let Some(want) = sequential(&c) else {
            return Err(TestCaseError::reject("values past exact integers"));
        };
        let (fixed, adaptive) = (WindowPolicy::Fixed, |max| WindowPolicy::Adaptive { max });
        let configs = [
            (1, fixed(1), false, false),
            (2, fixed(1), false, true),
            (1, fixed(1), false, true),
            (2, fixed(c.window), true, true),
            // Fusion inside replayed traces only (released tasks run as issued).
            (2, fixed(1), true, true),
            (8, fixed(4), true, false),
            (2, fixed(16), true, true),
            (2, fixed(16), false, false),
            // Adaptive windows: what is fused depends on timing, the stores must not.
            (2, adaptive(16), true, false),
            (3, adaptive(4), true, true),
            (8, adaptive(32), true, false),
        ];
        for (threads, window, fusion, tracing) in configs {
            let got = parallel(&c, threads, window, fusion, tracing)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(
                &got, &want, "threads = {}, window = {:?}, fusion = {}, tracing = {}",
                threads, window, fusion, tracing
            );
        }
    }
}

/// An outcome as bits: NaN equals NaN, and -0 differs from 0.
type Bits = (Vec<Vec<u64>>, Vec<u64>, Vec<Vec<u64>>, Vec<u64>);

fn bits(o: &Outcome) -> Bits {
    let v = |x: &Vec<f64>| x.iter().map(|f| f.to_bits()).collect::<Vec<u64>>();
    (
        o.0.iter().map(v).collect(),
        v(&o.1),
        o.2.iter().map(v).collect(),
        v(&o.3),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The stream repeated six times, so that traces are recorded and replayed, with fusion
    /// inside the replays (runtime/DESIGN.md, "Fusion inside traces"): the window of one runs
    /// released tasks as issued, a window of 4 fuses them too. Six repetitions take the values
    /// past exact integers, so the reference is the runtime with fusion and tracing off on as
    /// many threads (equal to the sequential interpretation where that is exact, above),
    /// bitwise.
    #[test]
    fn repeated_streams_traced_and_fused_match_the_plain_runtime(c in case()) {
        let c = Case { repeat: 6, ..c };
        let plain = |threads, window, fusion, tracing| {
            parallel(&c, threads, window, fusion, tracing)
                .map(|o| bits(&o))
                .map_err(|e| TestCaseError::fail(e.to_string()))
        };
        let fixed = WindowPolicy::Fixed;
        for (threads, window) in [(2, fixed(1)), (1, fixed(1)), (2, fixed(4))] {
            // The same threads: the solver's pieces, and so the order of sums, depend on them.
            let want = plain(threads, fixed(1), false, false)?;
            let got = plain(threads, window, true, true)?;
            prop_assert_eq!(&got, &want, "threads = {}, window = {:?}", threads, window);
        }
    }
}
