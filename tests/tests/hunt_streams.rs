//! Adversarial hunt, task streams: what `runtime/tests/core/heldout_streams.rs` does not
//! generate. Element-wise chains, temporaries and reductions in `u32`, `i32` and `u64` (the
//! kernel-fused loop's other element types, their zeroing kernels, integer futures); two
//! views of *one* store in one task and in consecutive tasks (the halves of a store read and
//! written crosswise, shifted windows); element-wise tasks with two outputs, `write_all`
//! outputs and fixed launch domains of 1 to 3 points or split points (`tile`); a store
//! replaced while a view of the old one is still read; `take` and `from_vec` in the middle of
//! a traced loop; panicking integer tasks. Run at 1 to 4 threads in configurations the other
//! suites do not use (windows of 2, 3 and 7, an adaptive window of 3, no fusion memo, trace
//! sampling every task, actors at one thread), and every store, mid-stream read and future
//! must be bitwise those of the plain runtime (fusion and tracing off, window of one) on the
//! same threads and piece size.

use proptest::prelude::*;
use tessera::runtime::{
    Chunk, Cut, DType, Future, ReduceOp, Result, Runtime, Scalar, Store, WindowPolicy,
};

#[derive(Clone, Debug)]
enum Op {
    /// element-wise u32 `u[d] = u[d] * k + u[1-d]` (wrapping), in place
    U32 {
        d: usize,
        k: u8,
    },
    /// u32 temporaries: `t = u[s] ^ k; w = t + t; u[d] = w * 3 + u[d]` (t, w dropped)
    U32Temps {
        d: usize,
        s: usize,
        k: u8,
    },
    /// element-wise u32 reduction (sum, min or max) of `u[s]` into a future
    U32Reduce {
        s: usize,
        op: u8,
    },
    /// element-wise u32 `u[d] += f` with `f` the last u32 future
    U32Use {
        d: usize,
    },
    /// element-wise i32 `i = i * k - 1` (wrapping) with a fixed launch domain of `pts` points
    I32 {
        k: i8,
        pts: u8,
    },
    /// element-wise u64 `q = q ^ (q >> 3) + k`, with split points (`tile`)
    U64Tile {
        k: u8,
        cut: u8,
    },
    /// hand task `u[d] = |x[s]| * 3` as u32
    ToU32 {
        d: usize,
        s: usize,
    },
    /// hand task `x[d] = u[s] + i + q` as f64
    FromInts {
        d: usize,
        s: usize,
    },
    /// element-wise f64 with two outputs: `x[a] = x[s] + 1; x[b] = x[s] * x[a]` (a, b, s distinct)
    TwoOuts {
        s: usize,
        k: i8,
    },
    /// element-wise f64 `x[d] = x[s] * k + 1` with `write_all`
    WriteAll {
        d: usize,
        s: usize,
        k: i8,
    },
    /// the halves of one store crosswise, two tasks: `lo += k * hi; hi += lo`
    Halves {
        x: usize,
        k: i8,
    },
    /// a window of `x[s]` shifted by `sh` into `x[d]`'s same-length window, then
    /// `x[s]` rewritten in place (a shifted read before a write of the same store)
    Shifted {
        d: usize,
        s: usize,
        sh: u8,
    },
    /// `x[i]` replaced by a fresh store while a view of the old one is read into `x[d]`
    ReplaceAlias {
        i: usize,
        d: usize,
        lo: u8,
    },
    /// f64 reduction into a future, consumed by an element-wise task in the same window
    F64ReduceUse {
        s: usize,
        d: usize,
        op: u8,
    },
    /// `take` of `x[i]` (its values logged) and `from_vec` of them back
    TakeBack {
        i: usize,
    },
    /// `fill` of a u32 store
    FillU {
        d: usize,
        c: u8,
    },
    /// `rt.read` of a u32 store mid-body
    ReadU {
        s: usize,
    },
    Fence,
    /// `u[d] += v` with `v` the value of the one-element view `u[s][k]` (`value_future`)
    ValueU {
        d: usize,
        s: usize,
        k: u8,
    },
    /// `u[d] += v` with `v` a ready u64 future that follows the iteration
    ReadyU {
        d: usize,
    },
    /// the odd elements of `u[s]` into a fresh unbound u32 store
    FilterU {
        s: usize,
    },
    /// `u[d] += Σ` the last unbound store (hand reduction into a future)
    SumFiltered {
        d: usize,
    },
    /// hand task reducing `u[s]` into the broadcast 3-element u32 `acc` (bin `i % 3`)
    HistU {
        s: usize,
        op: u8,
    },
    /// `u[d][i] = u[s][idx[i]]` through `image(idx -> u[s])`, `idx` u32
    GatherU {
        d: usize,
        s: usize,
    },
    /// `idx = (idx + k) % n` (a hand task: the image source changes)
    ShiftIdx {
        k: u8,
    },
    /// a fresh store written on its first `k` cells only (a hand task over a view), then
    /// read whole by an element-wise task: `x[d] = t * 0.5 + 1` (the rest reads zeros, even
    /// where its buffer is recycled), then dropped
    PartialFresh {
        d: usize,
        s: usize,
        k: u8,
    },
    /// the same through element-wise tasks over the view only: `t[..k] = x[s][..k] * 0.5 + 1;
    /// x[d][..k] += t[..k]` (a temporary that is a view of a fresh store)
    ViewTemp {
        d: usize,
        s: usize,
        k: u8,
    },
    /// f64 temporaries with a data-dependent panic in the middle: `t = x[s] * 0.5 + 1;
    /// w = -t` (panics where `t > lim`); `x[d] += w` (t, w dropped)
    BoomTemps {
        d: usize,
        s: usize,
        lim: u8,
    },
    /// hand task `x[d] = x[s] + 1` whose second point panics when `x[s]` there holds a
    /// value above `lim`
    BoomHand {
        d: usize,
        s: usize,
        lim: u8,
    },
    /// the positive elements of `x[s]` into a fresh unbound f64 store; the producer panics
    /// (after emitting) when an element is above `lim`
    FilterF {
        s: usize,
        lim: u8,
    },
    /// `x[d] = x[d] * 0.5 + Σ` the last unbound f64 store (through a future)
    AddFilteredF {
        d: usize,
    },
    /// `Future::get` of the last future, logged, in the middle of the body
    Get,
    /// `fill` of `x[d]`
    FillF {
        d: usize,
        c: i8,
    },
    /// `x[i]` replaced by a fresh store (the old handle dropped)
    Recreate {
        i: usize,
        c: i8,
    },
    /// hand task reducing `u[s]` (min) into the view `acc[1..3]`
    HistView {
        s: usize,
    },
    /// hand task writing both halves of `x[d]` as two arguments (disjoint views of one store)
    TwoHalves {
        d: usize,
        s: usize,
    },
    /// i32 chain with a temporary and a result: `t = i * k; i = t - i`, `Σ t` as a future
    /// used by `u[0] += f`
    I32TempSum {
        k: i8,
    },
    /// element-wise over the 2-d `m` (n x 3) and its row block `m[r..r+k, :]`
    Grid {
        r: u8,
        k: u8,
        a: i8,
    },
    /// element-wise u32 `u[d] = u[s] - 1` that panics when an element of `u[s]` is 0 or
    /// above `lim` (data-dependent: same token, so it may fail inside a replay)
    BoomU {
        d: usize,
        s: usize,
        lim: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let two = 0usize..2;
    let three = 0usize..3;
    prop_oneof![
        3 => (two.clone(), 0u8..5).prop_map(|(d, k)| Op::U32 { d, k }),
        2 => (two.clone(), two.clone(), any::<u8>()).prop_map(|(d, s, k)| Op::U32Temps { d, s, k }),
        2 => (two.clone(), 0u8..3).prop_map(|(s, op)| Op::U32Reduce { s, op }),
        2 => two.clone().prop_map(|d| Op::U32Use { d }),
        1 => (-2i8..3, 0u8..4).prop_map(|(k, pts)| Op::I32 { k, pts }),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(k, cut)| Op::U64Tile { k, cut }),
        1 => (two.clone(), three.clone()).prop_map(|(d, s)| Op::ToU32 { d, s }),
        1 => (three.clone(), two.clone()).prop_map(|(d, s)| Op::FromInts { d, s }),
        2 => (three.clone(), -2i8..3).prop_map(|(s, k)| Op::TwoOuts { s, k }),
        1 => (three.clone(), three.clone(), -2i8..3).prop_map(|(d, s, k)| Op::WriteAll { d, s, k }),
        2 => (three.clone(), -2i8..3).prop_map(|(x, k)| Op::Halves { x, k }),
        2 => (three.clone(), three.clone(), 0u8..4).prop_map(|(d, s, sh)| Op::Shifted { d, s, sh }),
        1 => (three.clone(), three.clone(), any::<u8>())
            .prop_map(|(i, d, lo)| Op::ReplaceAlias { i, d, lo }),
        2 => (three.clone(), three.clone(), 0u8..3)
            .prop_map(|(s, d, op)| Op::F64ReduceUse { s, d, op }),
        1 => three.clone().prop_map(|i| Op::TakeBack { i }),
        1 => (two.clone(), any::<u8>()).prop_map(|(d, c)| Op::FillU { d, c }),
        1 => two.clone().prop_map(|s| Op::ReadU { s }),
        1 => Just(Op::Fence),
        1 => (two.clone(), two.clone(), any::<u8>()).prop_map(|(d, s, k)| Op::ValueU { d, s, k }),
        1 => two.clone().prop_map(|d| Op::ReadyU { d }),
        1 => two.clone().prop_map(|s| Op::FilterU { s }),
        1 => two.clone().prop_map(|d| Op::SumFiltered { d }),
        1 => (two.clone(), 0u8..3).prop_map(|(s, op)| Op::HistU { s, op }),
        1 => (two.clone(), two.clone()).prop_map(|(d, s)| Op::GatherU { d, s }),
        1 => (1u8..5).prop_map(|k| Op::ShiftIdx { k }),
        1 => (three.clone(), three.clone(), any::<u8>())
            .prop_map(|(d, s, k)| Op::PartialFresh { d, s, k }),
        1 => (three.clone(), three.clone(), any::<u8>())
            .prop_map(|(d, s, k)| Op::ViewTemp { d, s, k }),
        1 => (three.clone(), Just(200u8)).prop_map(|(s, lim)| Op::FilterF { s, lim }),
        1 => three.clone().prop_map(|d| Op::AddFilteredF { d }),
        1 => Just(Op::Get),
        1 => (three.clone(), -3i8..4).prop_map(|(d, c)| Op::FillF { d, c }),
        1 => (three.clone(), -3i8..4).prop_map(|(i, c)| Op::Recreate { i, c }),
        1 => two.clone().prop_map(|s| Op::HistView { s }),
        1 => (three.clone(), three.clone()).prop_map(|(d, s)| Op::TwoHalves { d, s }),
        1 => (-2i8..3).prop_map(|k| Op::I32TempSum { k }),
        2 => (any::<u8>(), any::<u8>(), -2i8..3).prop_map(|(r, k, a)| Op::Grid { r, k, a }),
    ]
}

fn op_or_boom() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => op(),
        1 => (0usize..2, 0usize..2, 2u8..60).prop_map(|(d, s, lim)| Op::BoomU { d, s, lim }),
        1 => (0usize..3, 0usize..3, 0u8..12).prop_map(|(d, s, lim)| Op::BoomTemps { d, s, lim }),
        1 => (0usize..3, 0usize..3, 0u8..12).prop_map(|(d, s, lim)| Op::BoomHand { d, s, lim }),
        1 => (0usize..3, 0u8..12).prop_map(|(s, lim)| Op::FilterF { s, lim }),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    n: usize,
    min_piece: usize,
    threads: usize,
    a: Vec<Op>,
    b: Vec<Op>,
    iterations: usize,
    /// Iteration `i` runs `b` when `(i / period) % 2 == 1`.
    period: usize,
    /// From this iteration on, views, split points and launch domains move with the
    /// iteration (the same tasks over other sub-stores: a replay must notice).
    drift_from: Option<usize>,
}

fn case_of<S: Strategy<Value = Op> + 'static>(op: fn() -> S) -> impl Strategy<Value = Case> {
    (
        prop_oneof![4 => 2usize..14, 1 => 4094usize..4099, 1 => Just(8195usize)],
        prop_oneof![Just(1usize), Just(2), Just(5), Just(1024)],
        1usize..5,
        proptest::collection::vec(op(), 1..8),
        proptest::collection::vec(op(), 0..6),
        prop_oneof![3 => 3usize..10, 1 => 20usize..40],
        (1usize..4, proptest::option::of(1usize..6)),
    )
        .prop_map(
            |(n, min_piece, threads, a, b, iterations, (period, drift_from))| Case {
                n,
                min_piece,
                threads,
                a,
                b,
                iterations,
                period,
                drift_from,
            },
        )
}

fn rop(op: u8) -> ReduceOp {
    [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max][op as usize % 3]
}

fn register(rt: &Runtime) -> Result<()> {
    rt.register_elementwise::<u32>("u_chain", |c: &mut Chunk<'_, u32>| {
        let k = c.scalar(0).as_u64() as u32;
        let (ins, outs) = c.split();
        for (d, s) in outs[0].iter_mut().zip(ins[0].iter()) {
            *d = d.wrapping_mul(k).wrapping_add(*s);
        }
    })?;
    rt.register_elementwise::<u32>("u_xor", |c: &mut Chunk<'_, u32>| {
        let k = c.scalar(0).as_u64() as u32;
        let (ins, outs) = c.split();
        for (d, s) in outs[0].iter_mut().zip(ins[0].iter()) {
            *d = *s ^ k;
        }
    })?;
    rt.register_elementwise::<u32>("u_add", |c: &mut Chunk<'_, u32>| {
        let (ins, outs) = c.split();
        for ((d, a), b) in outs[0].iter_mut().zip(ins[0].iter()).zip(ins[1].iter()) {
            *d = a.wrapping_add(*b);
        }
    })?;
    rt.register_elementwise::<u32>("u_mad", |c: &mut Chunk<'_, u32>| {
        let (ins, outs) = c.split();
        for (d, w) in outs[0].iter_mut().zip(ins[0].iter()) {
            *d = w.wrapping_mul(3).wrapping_add(*d);
        }
    })?;
    for op in 0..3u8 {
        let o = rop(op);
        rt.register_elementwise::<u32>(&format!("u_red{op}"), move |c: &mut Chunk<'_, u32>| {
            let (ins, _) = c.split();
            let mut acc: Option<Scalar> = None;
            for &v in ins[0].iter() {
                let v = Scalar::U64(v as u64);
                acc = Some(acc.map_or(v, |a| Scalar::combine(o, a, v)));
            }
            if let Some(a) = acc {
                c.add_result(a);
            }
        })?;
        rt.register_elementwise::<f64>(&format!("f_red{op}"), move |c: &mut Chunk<'_, f64>| {
            let (ins, _) = c.split();
            let mut acc: Option<Scalar> = None;
            for &v in ins[0].iter() {
                let v = Scalar::F64(v);
                acc = Some(acc.map_or(v, |a| Scalar::combine(o, a, v)));
            }
            if let Some(a) = acc {
                c.add_result(a);
            }
        })?;
    }
    rt.register_elementwise::<u32>("u_use", |c: &mut Chunk<'_, u32>| {
        let f = c.scalar(0).as_u64() as u32;
        let (_, outs) = c.split();
        for d in outs[0].iter_mut() {
            *d = d.wrapping_add(f);
        }
    })?;
    rt.register_elementwise::<i32>("i_chain", |c: &mut Chunk<'_, i32>| {
        let k = c.scalar(0).as_i64() as i32;
        let (_, outs) = c.split();
        for d in outs[0].iter_mut() {
            *d = d.wrapping_mul(k).wrapping_sub(1);
        }
    })?;
    rt.register_elementwise::<u64>("q_mix", |c: &mut Chunk<'_, u64>| {
        let k = c.scalar(0).as_u64();
        let (_, outs) = c.split();
        for d in outs[0].iter_mut() {
            *d = (*d ^ (*d >> 3)).wrapping_add(k);
        }
    })?;
    rt.register("to_u32", |ctx| {
        let s = ctx.read::<f64>(1);
        let mut d = ctx.write::<u32>(0);
        for i in d.range() {
            d.set_at(i, (s.at(i).abs() * 3.0) as u32);
        }
    })?;
    rt.register("from_ints", |ctx| {
        let (u, i, q) = (ctx.read::<u32>(1), ctx.read::<i32>(2), ctx.read::<u64>(3));
        let mut d = ctx.write::<f64>(0);
        for k in d.range() {
            let v = u.at(k) as f64 * 1e-3 + i.at(k) as f64 * 1e-2 + (q.at(k) % 1000) as f64;
            d.set_at(k, v);
        }
    })?;
    rt.register_elementwise::<f64>("f_two", |c: &mut Chunk<'_, f64>| {
        let k = c.scalar(0).as_f64();
        let (ins, outs) = c.split();
        let (a, b) = outs.split_at_mut(1);
        for ((s, a), b) in ins[0].iter().zip(a[0].iter_mut()).zip(b[0].iter_mut()) {
            *a = s + k;
            *b = s * *a;
        }
    })?;
    rt.register_elementwise::<f64>("f_axpb", |c: &mut Chunk<'_, f64>| {
        let k = c.scalar(0).as_f64();
        let (ins, outs) = c.split();
        for (d, s) in outs[0].iter_mut().zip(ins[0].iter()) {
            *d = s * k + 1.0;
        }
    })?;
    rt.register_elementwise::<f64>("f_addk", |c: &mut Chunk<'_, f64>| {
        let k = c.scalar(0).as_f64();
        let (ins, outs) = c.split();
        for (d, s) in outs[0].iter_mut().zip(ins[0].iter()) {
            *d += k * s;
        }
    })?;
    rt.register_elementwise::<f64>("f_halve", |c: &mut Chunk<'_, f64>| {
        let (_, outs) = c.split();
        for d in outs[0].iter_mut() {
            *d = *d * 0.5 - 0.25;
        }
    })?;
    rt.register_elementwise::<f64>("f_usef", |c: &mut Chunk<'_, f64>| {
        let f = c.scalar(0).as_f64();
        let (_, outs) = c.split();
        for d in outs[0].iter_mut() {
            *d = *d * 0.5 + f;
        }
    })?;
    rt.register("u_filter", |ctx| {
        let s = ctx.read::<u32>(0);
        let odd: Vec<u32> = s
            .as_slice()
            .iter()
            .copied()
            .filter(|v| v % 2 == 1)
            .collect();
        ctx.emit(1, odd);
    })?;
    rt.register("u_sum", |ctx| {
        let s = ctx.read::<u32>(0);
        ctx.set_result(s.as_slice().iter().map(|&v| v as u64).sum::<u64>())
    })?;
    rt.register("u_hist", |ctx| {
        let s = ctx.read::<u32>(0);
        let mut acc = ctx.reduce::<u32>(1);
        for i in s.range() {
            acc.reduce_at(i % 3, s.at(i));
        }
    })?;
    rt.register("u_gather", |ctx| {
        let mut d = ctx.write::<u32>(0);
        let (idx, s) = (ctx.read::<u32>(1), ctx.read::<u32>(2));
        for i in d.range() {
            d.set_at(i, s.at(idx.at(i) as usize));
        }
    })?;
    rt.register("u_shift", |ctx| {
        let (k, n) = (ctx.scalar(0).as_u64() as u32, ctx.scalar(1).as_u64() as u32);
        ctx.write::<u32>(0)
            .as_mut_slice()
            .iter_mut()
            .for_each(|j| *j = (*j + k) % n);
    })?;
    rt.register("f_copy_view", |ctx| {
        let s = ctx.read::<f64>(1);
        let mut d = ctx.write::<f64>(0);
        for i in d.range() {
            d.set_at(i, s.at(i) - 0.75);
        }
    })?;
    rt.register_elementwise::<f64>("f_neg_boom", |c: &mut Chunk<'_, f64>| {
        let lim = c.scalar(0).as_f64();
        let (ins, outs) = c.split();
        for (d, s) in outs[0].iter_mut().zip(ins[0].iter()) {
            assert!(*s <= lim, "f boom: {s} > {lim}");
            *d = -s;
        }
    })?;
    rt.register("f_hand_boom", |ctx| {
        let lim = ctx.scalar(0).as_f64();
        let s = ctx.read::<f64>(1);
        let mut d = ctx.write::<f64>(0);
        for i in d.range() {
            assert!(ctx.linear_point() != 1 || s.at(i) <= lim, "hand boom");
            d.set_at(i, s.at(i) + 1.0);
        }
    })?;
    rt.register("f_filter", |ctx| {
        let lim = ctx.scalar(0).as_f64();
        let s = ctx.read::<f64>(0);
        let pos: Vec<f64> = s.as_slice().iter().copied().filter(|&v| v > 0.0).collect();
        let over = pos.iter().any(|&v| v > lim);
        ctx.emit(1, pos);
        assert!(!over, "filter boom");
    })?;
    rt.register("f_sum", |ctx| {
        ctx.set_result(ctx.read::<f64>(0).as_slice().iter().sum::<f64>())
    })?;
    rt.register("u_hist_min", |ctx| {
        let s = ctx.read::<u32>(0);
        let mut acc = ctx.reduce::<u32>(1);
        for i in s.range() {
            acc.reduce_at(i % 2, s.at(i));
        }
    })?;
    rt.register("f_halves", |ctx| {
        let s = ctx.read::<f64>(2);
        let mut lo = ctx.write::<f64>(0);
        for i in lo.range() {
            lo.set_at(i, s.at(i) * 2.0);
        }
        let mut hi = ctx.write::<f64>(1);
        for i in hi.range() {
            hi.set_at(i, -s.at(i));
        }
    })?;
    rt.register_elementwise::<i32>("i_mul", |c: &mut Chunk<'_, i32>| {
        let k = c.scalar(0).as_i64() as i32;
        let (ins, outs) = c.split();
        for (d, s) in outs[0].iter_mut().zip(ins[0].iter()) {
            *d = s.wrapping_mul(k);
        }
    })?;
    rt.register_elementwise::<i32>("i_sub", |c: &mut Chunk<'_, i32>| {
        let (ins, outs) = c.split();
        for (d, s) in outs[0].iter_mut().zip(ins[0].iter()) {
            *d = s.wrapping_sub(*d);
        }
    })?;
    rt.register_elementwise::<i32>("i_sum", |c: &mut Chunk<'_, i32>| {
        let (ins, _) = c.split();
        let v = ins[0].iter().fold(0i64, |a, &b| a.wrapping_add(b as i64));
        c.add_result(v);
    })?;
    rt.register_elementwise::<u32>("u_add_i", |c: &mut Chunk<'_, u32>| {
        let f = c.scalar(0).as_i64() as u32;
        let (_, outs) = c.split();
        for d in outs[0].iter_mut() {
            *d = d.wrapping_add(f);
        }
    })?;
    rt.register_elementwise::<u32>("u_boom", |c: &mut Chunk<'_, u32>| {
        let lim = c.scalar(0).as_u64() as u32;
        let (ins, outs) = c.split();
        for (d, s) in outs[0].iter_mut().zip(ins[0].iter()) {
            assert!(*s != 0 && *s <= lim, "boom: {s}");
            *d = s - 1;
        }
    })
}

/// Reads and futures in order: values as bits, or the error's text (which must be the same
/// in every configuration too).
type Outcome = Vec<std::result::Result<Vec<u64>, String>>;

fn text(e: tessera::runtime::RuntimeError) -> String {
    e.to_string()
}

struct Cfg {
    window: WindowPolicy,
    fusion: bool,
    memo: bool,
    tracing: bool,
    actors: bool,
    sampling: usize,
    /// Threads, when not the case's (actors at one thread).
    threads: Option<usize>,
    /// Replays whose points borrow from the ledger (`verified_replays(false)`).
    unverified: bool,
    /// Back-pressure (`max_pending`) with workers slowed at random.
    pending: Option<usize>,
}

fn plain() -> Cfg {
    Cfg {
        window: WindowPolicy::Fixed(1),
        fusion: false,
        memo: true,
        tracing: false,
        actors: false,
        sampling: 4,
        threads: None,
        unverified: false,
        pending: None,
    }
}

fn configs() -> Vec<(&'static str, Cfg)> {
    let fixed = WindowPolicy::Fixed;
    let c = |window, fusion, tracing, actors| Cfg {
        window,
        fusion,
        memo: true,
        tracing,
        actors,
        sampling: 4,
        threads: None,
        unverified: false,
        pending: None,
    };
    vec![
        ("fused w2", c(fixed(2), true, false, false)),
        (
            "fused w7 no memo",
            Cfg {
                memo: false,
                ..c(fixed(7), true, false, false)
            },
        ),
        (
            "fused adaptive 3",
            c(WindowPolicy::Adaptive { max: 3 }, true, false, false),
        ),
        (
            "traced sampling 1",
            Cfg {
                sampling: 1,
                ..c(fixed(1), false, true, false)
            },
        ),
        (
            "traced actors sampling 2",
            Cfg {
                sampling: 2,
                ..c(fixed(1), false, true, true)
            },
        ),
        ("traced fused w3 actors", c(fixed(3), true, true, true)),
        (
            "traced fused w7",
            Cfg {
                sampling: 1,
                ..c(fixed(7), true, true, false)
            },
        ),
        (
            "traced fused adaptive 3 actors",
            c(WindowPolicy::Adaptive { max: 3 }, true, true, true),
        ),
        (
            "traced fused w5 actors unverified",
            Cfg {
                unverified: true,
                ..c(fixed(5), true, true, true)
            },
        ),
        (
            "traced fused w4 actors, back-pressure, jitter",
            Cfg {
                pending: Some(3),
                sampling: 2,
                ..c(fixed(4), true, true, true)
            },
        ),
    ]
}

/// The configurations again at one thread (actors with a single processor).
fn one_thread_configs() -> Vec<(&'static str, Cfg)> {
    let fixed = WindowPolicy::Fixed;
    vec![
        (
            "1 thread traced fused w7 actors",
            Cfg {
                threads: Some(1),
                sampling: 1,
                ..plain_with(fixed(7), true, true, true)
            },
        ),
        (
            "1 thread traced actors",
            Cfg {
                threads: Some(1),
                ..plain_with(fixed(1), false, true, true)
            },
        ),
    ]
}

fn plain_with(window: WindowPolicy, fusion: bool, tracing: bool, actors: bool) -> Cfg {
    Cfg {
        window,
        fusion,
        tracing,
        actors,
        ..plain()
    }
}

fn build(c: &Case, cfg: &Cfg) -> Runtime {
    let b = Runtime::builder();
    let b = match cfg.window {
        WindowPolicy::Fixed(n) => b.window_size(n),
        WindowPolicy::Adaptive { max } => b.adaptive_window(max),
    };
    let b = b
        .threads(cfg.threads.unwrap_or(c.threads))
        .min_piece_size(c.min_piece)
        .fusion(cfg.fusion)
        .fusion_memo(cfg.memo)
        .tracing(cfg.tracing)
        .actors(cfg.actors)
        .trace_sampling(cfg.sampling)
        .verified_replays(!cfg.unverified);
    match cfg.pending {
        Some(p) => b.max_pending(p).worker_jitter(30).build(),
        None => b.build(),
    }
}

fn f64_bits(v: Vec<f64>) -> Vec<u64> {
    v.into_iter().map(f64::to_bits).collect()
}

fn u32_bits(v: Vec<u32>) -> Vec<u64> {
    v.into_iter().map(u64::from).collect()
}

/// The stores a run works on.
struct State {
    x: Vec<Store>,
    u: Vec<Store>,
    i: Store,
    q: Store,
    futures: Vec<Future>,
    filtered: Vec<Store>,
    filtered_f: Vec<Store>,
    m: Store,
    m2: Store,
    acc: Store,
    idx: Store,
    log: Outcome,
}

fn state(rt: &Runtime, n: usize) -> Result<State> {
    let x = (0..3)
        .map(|k| {
            rt.from_vec(
                &[n],
                (0..n)
                    .map(|i| ((i * 5 + k * 3) % 13) as f64 - 6.0)
                    .collect(),
            )
        })
        .collect::<Result<_>>()?;
    let u = (0..2)
        .map(|k| rt.from_vec(&[n], (0..n).map(|i| ((i * 3 + k) % 7 + 1) as u32).collect()))
        .collect::<Result<_>>()?;
    let i = rt.from_vec(&[n], (0..n).map(|i| (i % 9) as i32 - 4).collect())?;
    let q = rt.from_vec(&[n], (0..n).map(|i| (i as u64) << 20 | 5).collect())?;
    Ok(State {
        x,
        u,
        i,
        q,
        futures: vec![],
        filtered: vec![],
        filtered_f: vec![],
        m: rt.from_vec(&[n, 3], (0..3 * n).map(|i| (i % 7) as f64 - 3.0).collect())?,
        m2: rt.from_vec(&[n, 3], (0..3 * n).map(|i| (i % 5) as f64).collect())?,
        acc: rt.from_vec(&[3], vec![7u32, 1, 100])?,
        idx: rt.from_vec(&[n], (0..n).map(|i| ((i * 7 + 2) % n) as u32).collect())?,
        log: vec![],
    })
}

/// Applies `op` at iteration `it`; `dr` moves its views, cuts and launch domains (0: fixed).
fn apply(rt: &Runtime, s: &mut State, op: &Op, n: usize, it: usize, dr: usize) -> Result<()> {
    let (x, u) = (&mut s.x, &s.u);
    match *op {
        Op::U32 { d, k } => rt
            .task("u_chain")
            .read(&u[1 - d])
            .read_write(&u[d])
            .scalar(k as u64)
            .align(&u[0], &u[1])
            .submit()?,
        Op::U32Temps { d, s: src, k } => {
            let t = rt.create(DType::U32, &[n])?;
            let w = rt.create(DType::U32, &[n])?;
            rt.task("u_xor")
                .read(&u[src])
                .write(&t)
                .scalar(k as u64)
                .align(&t, &u[src])
                .submit()?;
            rt.task("u_add")
                .read(&t)
                .read(&t)
                .write(&w)
                .align(&t, &w)
                .submit()?;
            rt.task("u_mad")
                .read(&w)
                .read_write(&u[d])
                .align(&w, &u[d])
                .submit()?;
        }
        Op::U32Reduce { s: src, op } => {
            let name = ["u_red0", "u_red1", "u_red2"][op as usize % 3];
            s.futures
                .push(rt.task(name).read(&u[src]).submit_reduce(rop(op))?);
        }
        Op::U32Use { d } => {
            if let Some(f) = s.futures.last() {
                rt.task("u_use").read_write(&u[d]).future(f).submit()?;
            }
        }
        Op::I32 { k, pts } => {
            let t = rt.task("i_chain").read_write(&s.i).scalar(k as i64);
            let t = match (pts as usize + dr) % 4 {
                0 => t,
                p => t.launch_domain(&[p]),
            };
            t.submit()?
        }
        Op::U64Tile { k, cut } => {
            let c = (cut as usize + dr) % (n + 1);
            rt.task("q_mix")
                .read_write(&s.q)
                .scalar(k as u64)
                .launch_domain(&[2])
                .tile(&s.q, &[Cut::At(0, vec![c])])
                .submit()?
        }
        Op::ToU32 { d, s: src } => rt
            .task("to_u32")
            .write(&u[d])
            .read(&x[src])
            .align(&u[d], &x[src])
            .submit()?,
        Op::FromInts { d, s: src } => rt
            .task("from_ints")
            .write(&x[d])
            .read(&u[src])
            .read(&s.i)
            .read(&s.q)
            .align(&x[d], &u[src])
            .align(&x[d], &s.i)
            .align(&x[d], &s.q)
            .submit()?,
        Op::TwoOuts { s: src, k } => {
            let (a, b) = ((src + 1) % 3, (src + 2) % 3);
            rt.task("f_two")
                .read(&x[src])
                .write(&x[a])
                .write(&x[b])
                .scalar(k as f64)
                .align(&x[src], &x[a])
                .align(&x[src], &x[b])
                .submit()?
        }
        Op::WriteAll { d, s: src, k } if d != src => rt
            .task("f_axpb")
            .read(&x[src])
            .write_all(&x[d])
            .scalar(k as f64)
            .align(&x[src], &x[d])
            .submit()?,
        Op::Halves { x: i, k } => {
            let h = (n / 2).saturating_sub(dr % 2).max(1);
            let (lo, hi) = (x[i].slice(0, 0..h)?, x[i].slice(0, h..2 * h)?);
            rt.task("f_addk")
                .read(&hi)
                .read_write(&lo)
                .scalar(k as f64)
                .align(&lo, &hi)
                .submit()?;
            rt.task("f_addk")
                .read(&lo)
                .read_write(&hi)
                .scalar(1.0)
                .align(&lo, &hi)
                .submit()?;
        }
        Op::Shifted { d, s: src, sh } => {
            let sh = (sh as usize + dr) % n;
            let m = n - sh;
            let (dv, sv) = (x[d].slice(0, 0..m)?, x[src].slice(0, sh..n)?);
            if d == src && sh == 0 {
                rt.task("f_halve").read_write(&dv).submit()?;
            } else if d == src {
                // overlapping views of one store in one task: refused everywhere; a
                // shifted read into another store and then the rewrite instead
                let o = (d + 1) % 3;
                let ov = x[o].slice(0, 0..m)?;
                rt.task("f_axpb")
                    .read(&sv)
                    .write(&ov)
                    .scalar(0.5)
                    .align(&sv, &ov)
                    .submit()?;
            } else {
                rt.task("f_addk")
                    .read(&sv)
                    .read_write(&dv)
                    .scalar(0.25)
                    .align(&sv, &dv)
                    .submit()?;
            }
            rt.task("f_halve").read_write(&x[src]).submit()?;
        }
        Op::ReplaceAlias { i, d, lo } if i != d => {
            let lo = (lo as usize + dr) % n;
            let old = x[i].slice(0, lo..n)?;
            x[i] = rt.from_vec(&[n], vec![it as f64 - 2.5; n])?;
            let dv = x[d].slice(0, 0..n - lo)?;
            rt.task("f_addk")
                .read(&old)
                .read_write(&dv)
                .scalar(2.0)
                .align(&old, &dv)
                .submit()?;
            drop(old);
            rt.task("f_halve").read_write(&x[i]).submit()?;
        }
        Op::F64ReduceUse { s: src, d, op } => {
            let name = ["f_red0", "f_red1", "f_red2"][op as usize % 3];
            let f = rt.task(name).read(&x[src]).submit_reduce(rop(op))?;
            rt.task("f_usef").read_write(&x[d]).future(&f).submit()?;
            s.futures.push(f);
        }
        Op::TakeBack { i } => {
            let old = std::mem::replace(&mut x[i], rt.create(DType::F64, &[1])?);
            match rt.take::<f64>(old) {
                Ok(v) => {
                    s.log.push(Ok(f64_bits(v.clone())));
                    x[i] = rt.from_vec(&[n], v)?;
                }
                Err(e) => {
                    s.log.push(Err(text(e)));
                    x[i] = rt.from_vec(&[n], vec![1.5; n])?;
                }
            }
        }
        Op::FillU { d, c } => rt.fill(&u[d], c as u64)?,
        Op::ReadU { s: src } => {
            let v = rt.read::<u32>(&u[src]).map_err(text).map(u32_bits);
            s.log.push(v);
        }
        Op::Fence => rt.fence()?,
        Op::ValueU { d, s: src, k } => {
            let k = (k as usize + dr) % n;
            let v = rt.value_future(&u[src].slice(0, k..k + 1)?)?;
            rt.task("u_use").read_write(&u[d]).future(&v).submit()?;
        }
        Op::ReadyU { d } => {
            let v = Future::ready(it as u64 * 3 + 1);
            rt.task("u_use").read_write(&u[d]).future(&v).submit()?;
        }
        Op::FilterU { s: src } => {
            let out = rt.create_unbound(DType::U32);
            rt.task("u_filter")
                .read(&u[src])
                .write_unbound(&out)
                .submit()?;
            s.filtered.push(out);
        }
        Op::SumFiltered { d } => {
            if let Some(f) = s.filtered.last() {
                let v = rt.task("u_sum").read(f).submit_reduce(ReduceOp::Sum)?;
                rt.task("u_use").read_write(&u[d]).future(&v).submit()?;
                s.futures.push(v);
            }
        }
        Op::HistU { s: src, op } => rt
            .task("u_hist")
            .read(&u[src])
            .reduce(&s.acc, rop(op))
            .broadcast(&s.acc, &[0])
            .submit()?,
        Op::GatherU { d, s: src } if d != src => rt
            .task("u_gather")
            .write(&u[d])
            .read(&s.idx)
            .read(&u[src])
            .align(&u[d], &s.idx)
            .image(&s.idx, &u[src])
            .submit()?,
        Op::ShiftIdx { k } => rt
            .task("u_shift")
            .read_write(&s.idx)
            .scalar(k as u64)
            .scalar(n as u64)
            .submit()?,
        Op::PartialFresh { d, s: src, k } if d != src => {
            let k = 1 + (k as usize + dr) % n;
            let t = rt.create(DType::F64, &[n])?;
            let (tv, sv) = (t.slice(0, 0..k)?, x[src].slice(0, 0..k)?);
            rt.task("f_copy_view")
                .write(&tv)
                .read(&sv)
                .align(&tv, &sv)
                .submit()?;
            drop(tv);
            rt.task("f_axpb")
                .read(&t)
                .write(&x[d])
                .scalar(0.5)
                .align(&t, &x[d])
                .submit()?;
        }
        Op::ViewTemp { d, s: src, k } if d != src => {
            let k = 1 + (k as usize + dr) % n;
            let t = rt.create(DType::F64, &[n])?;
            let (tv, sv, dv) = (
                t.slice(0, 0..k)?,
                x[src].slice(0, 0..k)?,
                x[d].slice(0, 0..k)?,
            );
            drop(t);
            rt.task("f_axpb")
                .read(&sv)
                .write(&tv)
                .scalar(0.5)
                .align(&tv, &sv)
                .submit()?;
            rt.task("f_addk")
                .read(&tv)
                .read_write(&dv)
                .scalar(1.0)
                .align(&tv, &dv)
                .submit()?;
        }
        Op::BoomTemps { d, s: src, lim } if d != src => {
            let t = rt.create(DType::F64, &[n])?;
            let w = rt.create(DType::F64, &[n])?;
            rt.task("f_axpb")
                .read(&x[src])
                .write(&t)
                .scalar(0.5)
                .align(&t, &x[src])
                .submit()?;
            rt.task("f_neg_boom")
                .read(&t)
                .write(&w)
                .scalar(lim as f64)
                .align(&t, &w)
                .submit()?;
            rt.task("f_addk")
                .read(&w)
                .read_write(&x[d])
                .scalar(1.0)
                .align(&w, &x[d])
                .submit()?;
        }
        Op::BoomHand { d, s: src, lim } if d != src => rt
            .task("f_hand_boom")
            .write(&x[d])
            .read(&x[src])
            .scalar(lim as f64)
            .align(&x[d], &x[src])
            .submit()?,
        Op::FilterF { s: src, lim } => {
            let out = rt.create_unbound(DType::F64);
            rt.task("f_filter")
                .read(&x[src])
                .write_unbound(&out)
                .scalar(lim as f64 + 5.0)
                .submit()?;
            s.filtered_f.push(out);
        }
        Op::AddFilteredF { d } => {
            if let Some(f) = s.filtered_f.last() {
                let v = rt.task("f_sum").read(f).submit_reduce(ReduceOp::Sum)?;
                rt.task("f_usef").read_write(&x[d]).future(&v).submit()?;
                s.futures.push(v);
            }
        }
        Op::Get => {
            if let Some(f) = s.futures.last() {
                let v = f.get().map_err(text).map(|v| vec![v.as_f64().to_bits()]);
                s.log.push(v);
            }
        }
        Op::FillF { d, c } => rt.fill(&x[d], (c as f64) + dr as f64)?,
        Op::Recreate { i, c } => x[i] = rt.from_vec(&[n], vec![c as f64 * 0.5; n])?,
        Op::HistView { s: src } => {
            let v = s.acc.slice(0, 1..3)?;
            rt.task("u_hist_min")
                .read(&u[src])
                .reduce(&v, ReduceOp::Min)
                .broadcast(&v, &[0])
                .submit()?
        }
        Op::TwoHalves { d, s: src } if d != src => {
            let h = n / 2;
            let (lo, hi) = (x[d].slice(0, 0..h)?, x[d].slice(0, h..2 * h)?);
            let slo = x[src].slice(0, 0..h)?;
            rt.task("f_halves")
                .write(&lo)
                .write(&hi)
                .read(&slo)
                .align(&lo, &hi)
                .align(&lo, &slo)
                .submit()?;
        }
        Op::I32TempSum { k } => {
            let t = rt.create(DType::I32, &[n])?;
            rt.task("i_mul")
                .read(&s.i)
                .write(&t)
                .scalar((k + 1) as i64)
                .align(&t, &s.i)
                .submit()?;
            rt.task("i_sub")
                .read(&t)
                .read_write(&s.i)
                .align(&t, &s.i)
                .submit()?;
            let f = rt.task("i_sum").read(&t).submit_reduce(ReduceOp::Sum)?;
            rt.task("u_add_i").read_write(&u[0]).future(&f).submit()?;
            s.futures.push(f);
        }
        Op::Grid { r, k, a } => {
            let k = 1 + (k as usize + dr) % n;
            let r = (r as usize + dr) % (n - k + 1);
            let blk = s.m.slice(0, r..r + k)?;
            let other = s.m2.slice(0, 0..k)?;
            rt.task("f_addk")
                .read(&other)
                .read_write(&blk)
                .scalar(a as f64)
                .align(&other, &blk)
                .submit()?;
            rt.task("f_axpb")
                .read(&s.m)
                .write(&s.m2)
                .scalar(0.5)
                .align(&s.m, &s.m2)
                .submit()?;
        }
        Op::BoomU { d, s: src, lim } if d != src => rt
            .task("u_boom")
            .read(&u[src])
            .write(&u[d])
            .scalar(lim as u64)
            .align(&u[0], &u[1])
            .submit()?,
        _ => {}
    }
    Ok(())
}

fn run(c: &Case, cfg: &Cfg) -> Result<Outcome> {
    let rt = build(c, cfg);
    register(&rt)?;
    let mut s = state(&rt, c.n)?;
    for it in 0..c.iterations {
        let body = if (it / c.period) % 2 == 1 && !c.b.is_empty() {
            &c.b
        } else {
            &c.a
        };
        for op in body {
            let dr = c.drift_from.filter(|&f| it >= f).map_or(0, |_| it);
            apply(&rt, &mut s, op, c.n, it, dr)?;
        }
    }
    let mut log = std::mem::take(&mut s.log);
    for x in &s.x {
        log.push(rt.read::<f64>(x).map_err(text).map(f64_bits));
    }
    for u in &s.u {
        log.push(rt.read::<u32>(u).map_err(text).map(u32_bits));
    }
    log.push(
        rt.read::<i32>(&s.i)
            .map_err(text)
            .map(|v| v.into_iter().map(|v| v as u32 as u64).collect()),
    );
    log.push(rt.read::<u64>(&s.q).map_err(text));
    log.push(rt.read::<u32>(&s.acc).map_err(text).map(u32_bits));
    log.push(rt.read::<u32>(&s.idx).map_err(text).map(u32_bits));
    for f in &s.filtered {
        log.push(rt.read::<u32>(f).map_err(text).map(u32_bits));
    }
    log.push(rt.read::<f64>(&s.m).map_err(text).map(f64_bits));
    log.push(rt.read::<f64>(&s.m2).map_err(text).map(f64_bits));
    for f in &s.filtered_f {
        log.push(rt.read::<f64>(f).map_err(text).map(f64_bits));
    }
    for f in &s.futures {
        log.push(f.get().map_err(text).map(|v| match v {
            Scalar::F64(v) => vec![0, v.to_bits()],
            Scalar::I64(v) => vec![1, v as u64],
            Scalar::U64(v) => vec![2, v],
        }));
    }
    Ok(log)
}

fn check(c: &Case) -> std::result::Result<(), TestCaseError> {
    let want = match run(c, &plain()) {
        Ok(w) => w,
        Err(e) => return Err(TestCaseError::reject(format!("plain run fails: {e}"))),
    };
    let mut all = configs();
    if c.threads > 1 {
        all.extend(one_thread_configs());
    }
    for (name, cfg) in all {
        // The one-thread configurations compare with the plain runtime at one thread.
        let want = if cfg.threads.is_some() {
            run(
                c,
                &Cfg {
                    threads: cfg.threads,
                    ..plain()
                },
            )
            .map_err(|e| TestCaseError::fail(format!("plain 1 thread: {e}")))?
        } else {
            want.clone()
        };
        let got = run(c, &cfg).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
        let diff: Vec<usize> = (0..got.len().max(want.len()))
            .filter(|&i| got.get(i) != want.get(i))
            .collect();
        prop_assert!(
            diff.is_empty(),
            "{}: entries {:?} differ of {}; first: got {:?} want {:?}",
            name,
            diff,
            want.len(),
            got.get(diff[0])
                .map(|o| o.as_ref().map(|v| v[..v.len().min(8)].to_vec())),
            want.get(diff[0])
                .map(|o| o.as_ref().map(|v| v[..v.len().min(8)].to_vec())),
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn hunt_integer_and_view_streams_match_the_plain_runtime(c in case_of(op)) {
        check(&c)?;
    }

    #[test]
    fn hunt_panicking_integer_streams_match_the_plain_runtime(c in case_of(op_or_boom)) {
        check(&c)?;
    }
}
