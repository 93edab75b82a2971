//! Random streams over 2-d stores: tiles over 2-d launch domains, reductions of tiles into a
//! replicated vector, fills of non-contiguous 2-d views. Compared with plain loops.

use proptest::prelude::*;
use tessera_runtime::{DType, ReduceOp, Result, Runtime};

#[derive(Clone, Debug)]
enum Op {
    /// `b = a + b` over a fixed 2-d launch domain
    Add { grid: (usize, usize) },
    /// `v += row sums of a`, every point folding into the whole `v`
    RowSums { grid: (usize, usize) },
    /// `a[r0..r1, c0..c1] = k`
    FillBlock {
        r: (usize, usize),
        c: (usize, usize),
        k: i8,
    },
    /// `a = k * a` over whole rows (`broadcast(a, [1])`: a 2-d key partition must not be reused)
    Scale { k: i8 },
    /// swap the roles of `a` and `b`
    Swap,
}

fn op(rows: usize, cols: usize) -> impl Strategy<Value = Op> {
    let grid = (1usize..4, 1usize..4);
    let span = |n: usize| (0..=n, 0..=n).prop_map(|(x, y)| (x.min(y), x.max(y)));
    prop_oneof![
        grid.clone().prop_map(|grid| Op::Add { grid }),
        grid.prop_map(|grid| Op::RowSums { grid }),
        (span(rows), span(cols), -3i8..=3).prop_map(|(r, c, k)| Op::FillBlock { r, c, k }),
        (-2i8..=2).prop_map(|k| Op::Scale { k }),
        Just(Op::Swap),
    ]
}

fn case() -> impl Strategy<Value = (usize, usize, Vec<i64>, Vec<Op>, usize)> {
    (1usize..9, 1usize..9).prop_flat_map(|(r, c)| {
        (
            Just(r),
            Just(c),
            proptest::collection::vec(-4i64..=4, r * c),
            proptest::collection::vec(op(r, c), 1..10),
            1usize..5,
        )
    })
}

fn sequential(
    rows: usize,
    cols: usize,
    init: &[i64],
    ops: &[Op],
) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let (mut a, mut b, mut v) = (
        init.to_vec(),
        init.iter().map(|x| x * 2).collect::<Vec<_>>(),
        vec![0; rows],
    );
    for op in ops {
        match *op {
            Op::Add { .. } => b.iter_mut().zip(&a).for_each(|(y, x)| *y += x),
            Op::RowSums { .. } => {
                (0..rows).for_each(|i| v[i] += a[i * cols..(i + 1) * cols].iter().sum::<i64>())
            }
            Op::FillBlock { r, c, k } => {
                for i in r.0..r.1 {
                    for j in c.0..c.1 {
                        a[i * cols + j] = k as i64;
                    }
                }
            }
            Op::Scale { k } => a.iter_mut().for_each(|x| *x *= k as i64),
            Op::Swap => std::mem::swap(&mut a, &mut b),
        }
    }
    (a, b, v)
}

fn register(rt: &Runtime) -> Result<()> {
    rt.register("add2", |ctx| {
        let a = ctx.read::<i64>(0);
        let mut b = ctx.write::<i64>(1);
        let r = b.rect();
        for i in r.lo()[0]..r.hi()[0] {
            for j in r.lo()[1]..r.hi()[1] {
                b.set(&[i, j], b.get(&[i, j]) + a.get(&[i, j]));
            }
        }
    })?;
    rt.register("rowsums", |ctx| {
        let a = ctx.read::<i64>(0);
        let mut v = ctx.reduce::<i64>(1);
        let r = a.rect();
        for i in r.lo()[0]..r.hi()[0] {
            for j in r.lo()[1]..r.hi()[1] {
                v.reduce_at(i, a.get(&[i, j]));
            }
        }
    })?;
    rt.register("scale2", |ctx| {
        let k = ctx.scalar(0).as_i64();
        let mut a = ctx.write::<i64>(0);
        a.as_mut_slice().iter_mut().for_each(|x| *x *= k);
    })
}

fn parallel(
    rows: usize,
    cols: usize,
    init: &[i64],
    ops: &[Op],
    threads: usize,
) -> Result<(Vec<i64>, Vec<i64>, Vec<i64>)> {
    let rt = Runtime::builder()
        .threads(threads)
        .min_piece_size(1)
        .build();
    register(&rt)?;
    let mut a = rt.from_vec(&[rows, cols], init.to_vec())?;
    let mut b = rt.from_vec(&[rows, cols], init.iter().map(|x| x * 2).collect())?;
    let v = rt.create(DType::I64, &[rows])?;
    for op in ops {
        match *op {
            Op::Add { grid } => rt
                .task("add2")
                .read(&a)
                .read_write(&b)
                .align(&a, &b)
                .launch_domain(&[grid.0, grid.1])
                .submit()?,
            Op::RowSums { grid } => rt
                .task("rowsums")
                .read(&a)
                .reduce(&v, ReduceOp::Sum)
                .broadcast(&v, &[0])
                .launch_domain(&[grid.0, grid.1])
                .submit()?,
            Op::FillBlock { r, c, k } => {
                rt.fill(&a.slice(0, r.0..r.1)?.slice(1, c.0..c.1)?, k as i64)?
            }
            Op::Scale { k } => rt
                .task("scale2")
                .read_write(&a)
                .scalar(k as i64)
                .broadcast(&a, &[1])
                .submit()?,
            Op::Swap => std::mem::swap(&mut a, &mut b),
        }
    }
    Ok((rt.read(&a)?, rt.read(&b)?, rt.read(&v)?))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn matrix_streams_match_sequential_loops((rows, cols, init, ops, threads) in case()) {
        let want = sequential(rows, cols, &init, &ops);
        let got = parallel(rows, cols, &init, &ops, threads).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(got, want);
    }
}
