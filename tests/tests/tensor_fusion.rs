//! `tensor!(rt => ...)` element-wise statements are element-wise tasks: a chain of them in a
//! fusion window runs as one fused task over cache-sized chunks, its dead intermediates never
//! allocated, and gives exactly the values of the same statements run by plain `tensor!`.
//! Statements that are not element-wise (SpMV, a dot product) keep running their plans in the
//! same stream.
#![allow(non_snake_case)]

use tessera::plans::Stored;
use tessera::runtime::{Runtime, Stats};
use tessera::{tensor, Tensor};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Black-Scholes (call and put prices, rate 0.02, volatility 0.3) as 12 element-wise
/// statements, written once for plain tensors (`$name(S, K, T)`) and once on a runtime
/// (`$name(rt, S, K, T)`, with `rt =>` before every statement). The intermediates are dropped
/// when the function returns, as in any Rust code.
macro_rules! black_scholes {
    ($name:ident, $ty:ty $(, $rt:ident)?) => {
        fn $name($($rt: &Runtime,)? S: &$ty, K: &$ty, T: &$ty) -> Res<($ty, $ty)> {
            let sq = tensor!($($rt =>)? q(i) = sqrt(T(i)))?;
            let d1 = tensor!($($rt =>)? d(i) = (log(S(i) / K(i)) + 0.065 * T(i)) / (0.3 * sq(i)))?;
            let d2 = tensor!($($rt =>)? d(i) = d1(i) - 0.3 * sq(i))?;
            // The cumulative normal distribution (Abramowitz–Stegun 26.2.17) of d1 and d2.
            let k1 = tensor!($($rt =>)? k(i) = 1 / (1 + 0.2316419 * abs(d1(i))))?;
            let w1 = tensor!($($rt =>)? w(i) = 1 - 0.3989422804014327 * exp(-0.5 * d1(i) * d1(i))
                * k1(i) * (0.31938153 + k1(i) * (-0.356563782 + k1(i) * (1.781477937
                + k1(i) * (-1.821255978 + k1(i) * 1.330274429)))))?;
            let n1 = tensor!($($rt =>)? n(i) = lt(d1(i), 0) * (1 - w1(i)) + ge(d1(i), 0) * w1(i))?;
            let k2 = tensor!($($rt =>)? k(i) = 1 / (1 + 0.2316419 * abs(d2(i))))?;
            let w2 = tensor!($($rt =>)? w(i) = 1 - 0.3989422804014327 * exp(-0.5 * d2(i) * d2(i))
                * k2(i) * (0.31938153 + k2(i) * (-0.356563782 + k2(i) * (1.781477937
                + k2(i) * (-1.821255978 + k2(i) * 1.330274429)))))?;
            let n2 = tensor!($($rt =>)? n(i) = lt(d2(i), 0) * (1 - w2(i)) + ge(d2(i), 0) * w2(i))?;
            let kd = tensor!($($rt =>)? k(i) = K(i) * exp(-0.02 * T(i)))?;
            let call = tensor!($($rt =>)? c(i) = S(i) * n1(i) - kd(i) * n2(i))?;
            let put = tensor!($($rt =>)? p(i) = call(i) - S(i) + kd(i))?;
            Ok((call, put))
        }
    };
}

black_scholes!(black_scholes_plain, Tensor<f64>);
black_scholes!(black_scholes_on, Stored<f64>, rt);

/// Spot, strike and time to expiry for `n` options (deterministic, positive, both sides of
/// the money so that both branches of the distribution function run).
fn options(n: usize) -> [Tensor<f64>; 3] {
    let f = |g: &dyn Fn(usize) -> f64| {
        Tensor::dense_from_vec(vec![n], (0..n).map(g).collect()).unwrap()
    };
    [
        f(&|i| 10.0 + (i % 97) as f64),
        f(&|i| 10.0 + (i % 89) as f64 * 1.1),
        f(&|i| 0.25 + (i % 13) as f64 * 0.2),
    ]
}

fn runtime(window: usize) -> Runtime {
    Runtime::builder().threads(2).window_size(window).build()
}

fn bits(t: &Tensor<f64>) -> Vec<u64> {
    t.vals().iter().map(|v| v.to_bits()).collect()
}

/// Runs the chain twice on a runtime with `window` and returns (call, put, the runtime's
/// stats).
fn black_scholes_with_window(
    window: usize,
    inputs: &[Tensor<f64>; 3],
) -> Res<(Tensor<f64>, Tensor<f64>, Stats)> {
    let rt = runtime(window);
    let [s, k, t] = inputs;
    let (S, K, T) = (
        Stored::upload(&rt, s)?,
        Stored::upload(&rt, k)?,
        Stored::upload(&rt, t)?,
    );
    let (call, put) = black_scholes_on(&rt, &S, &K, &T)?;
    let (call, put) = (call.to_tensor(&rt)?, put.to_tensor(&rt)?);
    // Again: the same statements are the same tasks, so the fused shape is reused.
    let (again, _put) = black_scholes_on(&rt, &S, &K, &T)?;
    assert_eq!(
        bits(&again.to_tensor(&rt)?),
        bits(&call),
        "window {window}: second run"
    );
    // The second `put` is not read: wait for its tasks too before counting points.
    rt.fence()?;
    Ok((call, put, rt.stats()))
}

#[test]
fn an_element_wise_chain_fuses_and_equals_plain_tensor_bitwise() -> Res<()> {
    let n = 200_000;
    let inputs = options(n);
    let [s, k, t] = &inputs;
    let (want_call, want_put) = black_scholes_plain(s, k, t)?;
    assert!(want_call.vals().iter().all(|v| v.is_finite()));

    let (call, put, fused) = black_scholes_with_window(32, &inputs)?;
    assert_eq!(bits(&call), bits(&want_call), "window 32: call prices");
    assert_eq!(bits(&put), bits(&want_put), "window 32: put prices");
    // Twice 12 statements; each chain is one fused task, the second a memo hit.
    assert!(fused.fused_launches >= 2, "{fused:?}");
    assert!(fused.tasks_launched + 20 <= fused.tasks_issued, "{fused:?}");
    assert!(fused.fusion_memo_hits >= 1, "{fused:?}");
    // The 10 intermediates of each chain are dropped before the window is flushed: none is
    // allocated.
    assert_eq!(fused.temporaries_eliminated, 20, "{fused:?}");
    assert!(fused.bytes_not_allocated >= 20 * 8 * n as u64, "{fused:?}");

    let (call, put, unfused) = black_scholes_with_window(1, &inputs)?;
    assert_eq!(bits(&call), bits(&want_call), "window 1: call prices");
    assert_eq!(bits(&put), bits(&want_put), "window 1: put prices");
    assert_eq!(unfused.fused_launches, 0, "{unfused:?}");
    assert_eq!(unfused.tasks_launched, unfused.tasks_issued, "{unfused:?}");
    // Each statement is an element-wise task over the domain the solver sizes (one piece per
    // processor), not the single block task an unsplit statement's plan has.
    assert!(
        unfused.points_run >= 2 * 24,
        "statements run as element-wise tasks over both processors: {unfused:?}"
    );
    Ok(())
}

/// y = A x (a plan), then element-wise statements over y and x, then a dot product (a plan):
/// the element-wise tasks fuse between the plans' tasks and every value matches plain
/// `tensor!`.
fn mixed_plain(A: &Tensor<f64>, x: &Tensor<f64>) -> Res<(Tensor<f64>, Tensor<f64>)> {
    let y = tensor!(y(i) = A(i,j) * x(j); A: csr)?;
    let t = tensor!(t(i) = y(i) * y(i))?;
    let u = tensor!(u(i) = t(i) + x(i))?;
    let z = tensor!(z(i) = sqrt(u(i)))?;
    let d = tensor!(d = z(i) * x(i))?;
    Ok((z, d))
}

fn mixed_on(rt: &Runtime, A: &Stored<f64>, x: &Stored<f64>) -> Res<(Stored<f64>, Stored<f64>)> {
    let y = tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 4))?;
    let t = tensor!(rt => t(i) = y(i) * y(i))?;
    let u = tensor!(rt => u(i) = t(i) + x(i))?;
    let z = tensor!(rt => z(i) = sqrt(u(i)))?;
    let d = tensor!(rt => d = z(i) * x(i); split(i, io, ii, 4); extend(io))?;
    Ok((z, d))
}

#[test]
fn element_wise_statements_between_plans_give_the_plain_values() -> Res<()> {
    let n = 20_000;
    let entries = (0..n).flat_map(|i| {
        [
            (vec![i, i], 2.0 + (i % 7) as f64),
            (vec![i, (i * 31 + 5) % n], -0.5),
        ]
    });
    let a = Tensor::from_entries(vec![n, n], "csr", entries.collect::<Vec<_>>())?;
    let x = Tensor::dense_from_vec(vec![n], (0..n).map(|i| (i % 11) as f64 * 0.25).collect())?;
    let (want_z, want_d) = mixed_plain(&a, &x)?;
    for window in [1, 32] {
        let rt = runtime(window);
        let (A, X) = (Stored::upload(&rt, &a)?, Stored::upload(&rt, &x)?);
        let (z, d) = mixed_on(&rt, &A, &X)?;
        assert_eq!(bits(&z.to_tensor(&rt)?), bits(&want_z), "window {window}");
        // The dot product sums in blocks: equal up to rounding.
        let (got, want) = (d.to_tensor(&rt)?.vals()[0], want_d.vals()[0]);
        assert!(
            (got - want).abs() <= 1e-12 * want.abs(),
            "window {window}: {got} vs {want}"
        );
        let stats = rt.stats();
        if window > 1 {
            assert!(stats.fused_launches > 0, "{stats:?}");
            assert!(stats.tasks_launched < stats.tasks_issued, "{stats:?}");
        }
    }
    Ok(())
}

/// `+=`, a matrix (two dense levels) and repeated operands are element-wise too.
#[test]
fn matrices_accumulation_and_repeated_operands() -> Res<()> {
    let (m, n) = (300, 200);
    let vals = |k: usize| {
        (0..m * n)
            .map(move |i| ((i * k) % 17) as f64 - 8.0)
            .collect()
    };
    let a = Tensor::dense_from_vec(vec![m, n], vals(3))?;
    let b = Tensor::dense_from_vec(vec![m, n], vals(5))?;
    let plain = {
        let c = tensor!(c(i, j) = a(i, j) * a(i, j) - b(i, j))?;
        tensor!(c(i, j) += max(a(i, j), b(i, j)) / 3)?
    };
    for window in [1, 8] {
        let rt = runtime(window);
        let (a, b) = (Stored::upload(&rt, &a)?, Stored::upload(&rt, &b)?);
        let c = tensor!(rt => c(i,j) = a(i,j) * a(i,j) - b(i,j))?;
        let c = tensor!(rt => c(i,j) += max(a(i,j), b(i,j)) / 3)?;
        let got = c.to_tensor(&rt)?;
        assert_eq!(got.dims(), &[m, n]);
        assert_eq!(bits(&got), bits(&plain), "window {window}");
    }
    Ok(())
}

/// Empty and one-element vectors, one tensor passed as two operands, `f32` and `i64` values.
#[test]
fn empty_vectors_aliased_operands_and_f32() -> Res<()> {
    for n in [0, 1, 3000] {
        let a: Tensor<f32> =
            Tensor::dense_from_vec(vec![n], (0..n).map(|i| i as f32 * 0.5 - 7.0).collect())?;
        let b = &a;
        let want = tensor!(t(i) = a(i) * b(i) + abs(a(i)))?;
        for window in [1, 4] {
            let rt = runtime(window);
            let a = Stored::upload(&rt, &a)?;
            let b = &a;
            let t = tensor!(rt => t(i) = a(i) * b(i) + abs(a(i)))?;
            let got = t.to_tensor(&rt)?;
            assert_eq!(got.dims(), &[n]);
            assert_eq!(got.vals(), want.vals(), "n {n}, window {window}");
        }
    }
    let c: Tensor<i64> = Tensor::dense_from_vec(vec![5], vec![-3, 0, 7, i64::MAX / 4, 9])?;
    let want = tensor!(t(i) = c(i) * 3 - abs(c(i)))?;
    let rt = runtime(4);
    let c = Stored::upload(&rt, &c)?;
    let t = tensor!(rt => t(i) = c(i) * 3 - abs(c(i)))?;
    assert_eq!(t.to_tensor(&rt)?.vals(), want.vals());
    Ok(())
}

/// Scalar operands (rank-0 tensors, uploaded or computed on the runtime) in element-wise
/// statements: bitwise the plain `tensor!` values for `f64`, `f32` and `i64`; in a window the
/// two statements run as one chunk loop and the intermediate is never allocated.
#[test]
fn scalar_operands_give_the_plain_values_and_kernel_fuse() -> Res<()> {
    let n = 5000;
    let x = Tensor::dense_from_vec(
        vec![n],
        (0..n).map(|i| (i % 13) as f64 * 0.3 - 1.0).collect(),
    )?;
    let alpha = Tensor::dense_from_vec(vec![], vec![1.5f64])?;
    let want = {
        let beta = tensor!(beta = alpha * alpha - 0.25)?;
        let y = tensor!(y(i) = alpha * x(i) + beta)?;
        tensor!(z(i) = y(i) / (beta - x(i) * alpha))?
    };
    for window in [1, 8] {
        let rt = runtime(window);
        let (x, alpha) = (Stored::upload(&rt, &x)?, Stored::upload(&rt, &alpha)?);
        let beta = tensor!(rt => beta = alpha * alpha - 0.25)?;
        let z = {
            let y = tensor!(rt => y(i) = alpha * x(i) + beta)?;
            tensor!(rt => z(i) = y(i) / (beta - x(i) * alpha))?
        };
        assert_eq!(bits(&z.to_tensor(&rt)?), bits(&want), "window {window}");
        let stats = rt.stats();
        if window > 1 {
            assert_eq!(stats.kernel_fused_launches, 1, "{stats:?}");
            assert_eq!(stats.temporaries_eliminated, 1, "{stats:?}");
        }
    }
    let (xf, af) = (
        Tensor::<f32>::dense_from_vec(vec![7], (0..7).map(|i| i as f32 * 0.1 - 0.3).collect())?,
        Tensor::dense_from_vec(vec![], vec![0.1f32])?,
    );
    let want = tensor!(y(i) = af * xf(i) - af)?;
    let (xi, ai) = (
        Tensor::<i64>::dense_from_vec(vec![4], vec![-3i64, 0, 7, i64::MAX / 8])?,
        Tensor::dense_from_vec(vec![], vec![-3i64])?,
    );
    let want_i = tensor!(y(i) = ai * xi(i) + ai)?;
    let rt = runtime(4);
    let (xf, af) = (Stored::upload(&rt, &xf)?, Stored::upload(&rt, &af)?);
    let got = tensor!(rt => y(i) = af * xf(i) - af)?.to_tensor(&rt)?;
    assert_eq!(got.vals(), want.vals(), "f32");
    let (xi, ai) = (Stored::upload(&rt, &xi)?, Stored::upload(&rt, &ai)?);
    let got = tensor!(rt => y(i) = ai * xi(i) + ai)?.to_tensor(&rt)?;
    assert_eq!(got.vals(), want_i.vals(), "i64");
    Ok(())
}

/// A `tensor!(rt => ...)` call site keeps what it worked out on its first run (its plan, the
/// shapes it ran with: `plans::Site`). Run again over tensors of other dimensions, in any
/// order and on two runtimes in turn (each registers the statement's task once), it gives
/// each run the plain `tensor!` values of its own inputs.
#[test]
fn a_call_site_run_over_changing_shapes_gives_each_its_own_values() -> Res<()> {
    fn spmv(rt: &Runtime, A: &Stored<f64>, x: &Stored<f64>) -> Res<Stored<f64>> {
        Ok(tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 4))?)
    }
    fn gemv(rt: &Runtime, B: &Stored<f64>, x: &Stored<f64>) -> Res<Stored<f64>> {
        Ok(tensor!(rt => y(i) = B(i,j) * x(j); split(i, io, ii, 4))?)
    }
    fn scaled(rt: &Runtime, y: &Stored<f64>) -> Res<Stored<f64>> {
        Ok(tensor!(rt => z(i) = 2 * y(i) - 1)?)
    }
    let rts = [runtime(4), runtime(1)];
    // (7, 5) then (7, 9): the same output dimensions over other input dimensions.
    let runs = [(7, 5), (7, 9), (12, 9), (7, 5), (3, 11), (12, 9), (7, 5)];
    for (k, (m, n)) in runs.into_iter().enumerate() {
        let rt = &rts[k % 2];
        let entries: Vec<(Vec<usize>, f64)> = (0..m)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter(|(i, j)| (i * 3 + j * 5) % 4 != 0)
            .map(|(i, j)| (vec![i, j], (i * n + j) as f64 * 0.25 - 3.0))
            .collect();
        let A = Tensor::from_entries(vec![m, n], "csr", entries)?;
        let x = Tensor::dense_from_vec(vec![n], (0..n).map(|j| 1.0 + j as f64).collect())?;
        let want = tensor!(y(i) = A(i,j) * x(j); A: csr)?;
        let (As, xs) = (Stored::upload(rt, &A)?, Stored::upload(rt, &x)?);
        let y = spmv(rt, &As, &xs)?;
        let got = y.to_tensor(rt)?;
        assert_eq!(got.dims(), &[m], "{m}×{n}");
        assert_eq!(got.vals(), want.vals(), "{m}×{n}");
        let z = scaled(rt, &y)?.to_tensor(rt)?;
        assert_eq!(z.vals(), tensor!(z(i) = 2 * want(i) - 1)?.vals(), "{m}×{n}");
        // A dense matrix: its loops run to the dimensions the shape holds.
        let B = A.to_format("dd")?;
        let want = tensor!(y(i) = B(i, j) * x(j))?;
        let got = gemv(rt, &Stored::upload(rt, &B)?, &xs)?.to_tensor(rt)?;
        assert_eq!(got.vals(), want.vals(), "dense {m}×{n}");
    }
    Ok(())
}

/// A rank-0 statement whose one point writes its value (`b = a * a + a`) hands that value to
/// the statements taking it as a scalar as a future of its own task: no second task reads
/// the store for them (`value_future`), and the values are the plain ones for `f64`, `f32`
/// and `i64`, on the runtime's one-point task whether the block kernel writes its tile in
/// place or not.
#[test]
fn a_computed_scalar_is_a_future_of_its_own_task() -> Res<()> {
    macro_rules! check {
        ($t:ty, $a:expr, $xs:expr) => {{
            let x = Tensor::<$t>::dense_from_vec(vec![4], $xs)?;
            let a = Tensor::<$t>::dense_from_vec(vec![], vec![$a])?;
            let want = {
                let b = tensor!(b = a * a + a)?;
                tensor!(y(i) = b * x(i) - b)?
            };
            for window in [1, 4] {
                let rt = runtime(window);
                let (x, a) = (Stored::upload(&rt, &x)?, Stored::upload(&rt, &a)?);
                let before = rt.stats().tasks_issued;
                let b = tensor!(rt => b = a * a + a)?;
                let y = tensor!(rt => y(i) = b * x(i) - b)?;
                assert_eq!(y.to_tensor(&rt)?.vals(), want.vals(), "{}", stringify!($t));
                let issued = rt.stats().tasks_issued - before;
                assert_eq!(issued, 2, "b's task and y's, no value task: {}", stringify!($t));
            }
        }};
    }
    check!(f64, 1.25, vec![0.5, -2.0, 3.0, 1e-3]);
    check!(f32, -0.75, vec![0.5, -2.0, 3.0, 1e-3]);
    check!(i64, -3, vec![4, -2, 0, i64::MAX / 64]);
    Ok(())
}

/// A scalar result (`s = x(i) * x(i)`, a future) of one runtime used in a statement on
/// another is refused with an error that names the cause, under every window and thread
/// count: it used to run before the value existed (an internal error) or hang, by timing.
#[test]
fn a_scalar_result_of_another_runtime_is_refused() {
    let vector = |n: usize, f: fn(usize) -> f64| -> Tensor<f64> {
        Tensor::dense_from_vec(vec![n], (0..n).map(f).collect()).unwrap()
    };
    for (threads, window) in [(1, 1), (2, 1), (2, 8)] {
        let runtime = || {
            Runtime::builder()
                .threads(threads)
                .window_size(window)
                .build()
        };
        let (ra, rb) = (runtime(), runtime());
        let x = Stored::upload(&ra, &vector(8, |i| i as f64)).unwrap();
        let z = Stored::upload(&rb, &vector(8, |_| 1.0)).unwrap();
        let s = tensor!(ra => s = x(i) * x(i)).unwrap();
        let Err(err) = tensor!(rb => y(i) = s * z(i)) else {
            panic!("threads {threads}, window {window}: another runtime's scalar was taken");
        };
        let err = err.to_string();
        assert!(
            err.contains("operand `s` belongs to another runtime") && err.contains("to_tensor"),
            "threads {threads}, window {window}: {err}"
        );
        // A planned statement (a dot) names the operand too.
        let Err(err) = tensor!(rb => d = z(i) * x(i)) else {
            panic!("threads {threads}, window {window}: another runtime's vector was taken");
        };
        let err = err.to_string();
        assert!(
            err.contains("operand `x` belongs to another runtime"),
            "threads {threads}, window {window}: {err}"
        );
        // On its own runtime the same statement runs: 140 = Σ i² for i < 8.
        let z = Stored::upload(&ra, &vector(8, |_| 1.0)).unwrap();
        let y = tensor!(ra => y(i) = s * z(i)).unwrap();
        assert_eq!(y.to_tensor(&ra).unwrap().vals(), &[140.0; 8]);
    }
}

/// `y(i) += A(i,j) * w(j)` with `w` the very stored tensor `y` (a reference): the statement
/// reads one store through two partitions, a tile for the old `y` and the image of `A`'s
/// columns for `w`. Split over blocks, each point's `w` was given the tile (both arguments
/// named one view), and the kernel indexed past it. The values must be plain `tensor!`'s.
#[test]
fn an_operand_that_is_the_accumulated_output_reads_all_it_needs() {
    let n = 64;
    // Each row reads columns far outside its own block: i, (i + 17) % n, (i * 7 + 3) % n.
    let mut entries: Vec<(Vec<usize>, f64)> = Vec::new();
    for i in 0..n {
        let mut cols = vec![i, (i + 17) % n, (i * 7 + 3) % n];
        cols.sort();
        cols.dedup();
        for (k, j) in cols.into_iter().enumerate() {
            entries.push((vec![i, j], 1.0 + k as f64 * 0.5 + i as f64 * 0.01));
        }
    }
    let a_host: Tensor<f64> = Tensor::from_entries(vec![n, n], "csr", entries).unwrap();
    let x_host: Tensor<f64> =
        Tensor::dense_from_vec(vec![n], (0..n).map(|i| i as f64 * 0.25).collect()).unwrap();
    // Plain `tensor!` with `y` and `w` distinct tensors of the same values.
    let want = {
        let A = &a_host;
        let (y, w) = (x_host.clone(), &x_host);
        tensor!(y(i) += A(i,j) * w(j); A: csr).unwrap()
    };
    for threads in [1, 2] {
        let rt = Runtime::builder().threads(threads).fusion(false).build();
        let A = Stored::upload(&rt, &a_host).unwrap();
        let y = Stored::upload(&rt, &x_host).unwrap();
        let w = &y;
        let split = tensor!(rt => y(i) += A(i,j) * w(j); A: csr; split(i, io, ii, 4)).unwrap();
        let whole = tensor!(rt => y(i) += A(i,j) * w(j); A: csr).unwrap();
        for (what, got) in [("split", split), ("whole", whole)] {
            let got = got.to_tensor(&rt).unwrap();
            assert_eq!(got.vals(), want.vals(), "{what}, threads {threads}");
        }
    }
}
