//! Conjugate gradients from SpMV, dot and axpy tasks. The step sizes are futures: the `axpy`
//! tasks take `rs / pAp` as future arguments, so the issuing thread only blocks to test
//! convergence.

use super::{spmv, Csr, HostCsr};
use tessera_runtime::{DType, Future, ReduceOp, Result, Runtime, Store};

pub fn register(rt: &Runtime) -> Result<()> {
    super::register_spmv(rt)?;
    // Partial dot product of this point's pieces.
    rt.register("dot", |ctx| {
        let (x, y) = (ctx.read::<f64>(0), ctx.read::<f64>(1));
        let s: f64 = x
            .as_slice()
            .iter()
            .zip(y.as_slice())
            .map(|(a, b)| a * b)
            .sum();
        ctx.set_result(s);
    })?;
    // y += sign * (num / den) * x
    rt.register("axpy_ratio", |ctx| {
        let a = ctx.scalar(0).as_f64() * ctx.scalar(1).as_f64() / ctx.scalar(2).as_f64();
        let x = ctx.read::<f64>(0);
        let mut y = ctx.write::<f64>(1);
        for (yi, xi) in y.as_mut_slice().iter_mut().zip(x.as_slice()) {
            *yi += a * xi;
        }
    })?;
    // p = r + (num / den) * p
    rt.register("xpay_ratio", |ctx| {
        let b = ctx.scalar(0).as_f64() / ctx.scalar(1).as_f64();
        let r = ctx.read::<f64>(0);
        let mut p = ctx.write::<f64>(1);
        for (pi, ri) in p.as_mut_slice().iter_mut().zip(r.as_slice()) {
            *pi = ri + b * *pi;
        }
    })?;
    rt.register("copy", |ctx| {
        let x = ctx.read::<f64>(0);
        ctx.write::<f64>(1)
            .as_mut_slice()
            .copy_from_slice(x.as_slice());
    })
}

/// `x · y` as a future.
pub fn dot(rt: &Runtime, x: &Store, y: &Store) -> Result<Future> {
    rt.task("dot")
        .read(x)
        .read(y)
        .align(x, y)
        .submit_reduce(ReduceOp::Sum)
}

/// `y += sign * (num / den) * x`.
pub fn axpy_ratio(
    rt: &Runtime,
    sign: f64,
    num: &Future,
    den: &Future,
    x: &Store,
    y: &Store,
) -> Result<()> {
    rt.task("axpy_ratio")
        .read(x)
        .read_write(y)
        .scalar(sign)
        .future(num)
        .future(den)
        .align(x, y)
        .submit()
}

/// The rest of a CG iteration once `ap = A p` is issued: the step `rs / p·ap` moves `x`
/// along `p` and `r` along `ap`, then `p = r + (rs_new / rs) p`. Returns `rs_new = r · r`.
pub fn update(
    rt: &Runtime,
    rs: &Future,
    p: &Store,
    ap: &Store,
    x: &Store,
    r: &Store,
) -> Result<Future> {
    let pap = dot(rt, p, ap)?;
    axpy_ratio(rt, 1.0, rs, &pap, p, x)?;
    axpy_ratio(rt, -1.0, rs, &pap, ap, r)?;
    let rs_new = dot(rt, r, r)?;
    rt.task("xpay_ratio")
        .read(r)
        .read_write(p)
        .future(&rs_new)
        .future(rs)
        .align(r, p)
        .submit()?;
    Ok(rs_new)
}

/// Solves `A x = b` from `x = 0`; returns `x` and the iterations taken.
pub fn solve(
    rt: &Runtime,
    a: &Csr,
    b: &[f64],
    tol: f64,
    max_iter: usize,
) -> Result<(Vec<f64>, usize)> {
    let n = b.len();
    let x = rt.create(DType::F64, &[n])?;
    let r = rt.from_vec(&[n], b.to_vec())?;
    let p = rt.create(DType::F64, &[n])?;
    rt.task("copy").read(&r).write(&p).align(&r, &p).submit()?;
    let mut rs = dot(rt, &r, &r)?;
    let mut iters = 0;
    while iters < max_iter && rs.get()?.as_f64().sqrt() > tol {
        let ap = spmv(rt, a, &p)?;
        rs = update(rt, &rs, &p, &ap, &x, &r)?;
        iters += 1;
    }
    Ok((rt.read::<f64>(&x)?, iters))
}

/// The same algorithm on plain vectors: the reference.
pub fn solve_sequential(a: &HostCsr, b: &[f64], tol: f64, max_iter: usize) -> (Vec<f64>, usize) {
    let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f64>();
    let n = b.len();
    let mut x = vec![0.0; n];
    let mut r = b.to_vec();
    let mut p = r.clone();
    let mut rs = dot(&r, &r);
    let mut iters = 0;
    while iters < max_iter && rs.sqrt() > tol {
        let ap = a.spmv(&p);
        let alpha = rs / dot(&p, &ap);
        for i in 0..n {
            x[i] += alpha * p[i];
            r[i] -= alpha * ap[i];
        }
        let rs_new = dot(&r, &r);
        for i in 0..n {
            p[i] = r[i] + rs_new / rs * p[i];
        }
        rs = rs_new;
        iters += 1;
    }
    (x, iters)
}
