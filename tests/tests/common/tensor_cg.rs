//! CG written with `tensor!` statements, for automatic tracing's test (tests/tests/
//! runtime_cg_tracing.rs) and the `runtime` bench (by `#[path]`). Every statement makes fresh
//! stores each iteration and ‖r‖² is read back every iteration, as in tests/tests/runtime_cg.rs.
#![allow(non_snake_case, dead_code)]

use tessera::plans::{PlanRunError, Stored};
use tessera::runtime::{Runtime, Stats};
use tessera::{tensor, Tensor};

/// The 1-d Laplacian (2 on the diagonal, -1 beside it) of order `n`, in CSR.
pub fn tridiagonal(n: usize) -> Tensor<f64> {
    let entries = (0..n).flat_map(|i| {
        let left = (i > 0).then(|| (vec![i, i - 1], -1.0));
        let right = (i + 1 < n).then(|| (vec![i, i + 1], -1.0));
        [left, Some((vec![i, i], 2.0)), right].into_iter().flatten()
    });
    Tensor::from_entries(vec![n, n], "csr", entries.collect::<Vec<_>>()).expect("a valid matrix")
}

/// The vectors of CG between iterations, held in the runtime's stores: every step is a
/// `tensor!` statement with a row split, and every statement makes fresh stores.
pub struct Cg {
    pub x: Stored<f64>,
    pub r: Stored<f64>,
    pub p: Stored<f64>,
    /// ‖r‖².
    pub rr: Stored<f64>,
}

impl Cg {
    /// x = 0 and r = p = b.
    pub fn start(rt: &Runtime, b: &[f64]) -> Result<Cg, PlanRunError> {
        let n = b.len();
        let vector = |v: Vec<f64>| Stored::upload(rt, &Tensor::dense_from_vec(vec![n], v).unwrap());
        let (x, r, p) = (
            vector(vec![0.0; n])?,
            vector(b.to_vec())?,
            vector(b.to_vec())?,
        );
        let rr = tensor!(rt => d = r(i) * r(i); split(i, io, ii, 4); extend(io))?;
        Ok(Cg { x, r, p, rr })
    }

    /// The first half of an iteration: x += αp and r -= αq (q = Ap, α = ‖r‖² / p·q); returns
    /// the new ‖r‖² (the stopping test reads it before [`Cg::direction`]).
    pub fn update(&mut self, rt: &Runtime, A: &Stored<f64>) -> Result<Stored<f64>, PlanRunError> {
        let Cg { x, r, p, rr } = self;
        let q = tensor!(rt => q(i) = A(i,j) * p(j); A: csr; split(i, io, ii, 4))?;
        let pq = tensor!(rt => d = p(i) * q(i); split(i, io, ii, 4); extend(io))?;
        let alpha = tensor!(rt => alpha = rr / pq)?;
        *x = tensor!(rt => x(i) += alpha * p(i); split(i, io, ii, 4))?;
        *r = tensor!(rt => r(i) += -(alpha * q(i)); split(i, io, ii, 4))?;
        tensor!(rt => d = r(i) * r(i); split(i, io, ii, 4); extend(io))
    }

    /// The second half: p = r + βp with β = `rr_new` / ‖r‖², and ‖r‖² becomes `rr_new`.
    pub fn direction(&mut self, rt: &Runtime, rr_new: Stored<f64>) -> Result<(), PlanRunError> {
        let Cg { r, p, rr, .. } = self;
        let beta = tensor!(rt => beta = rr_new / rr)?;
        *p = tensor!(rt => s(i) = r(i) + beta * p(i); split(i, io, ii, 4))?;
        self.rr = rr_new;
        Ok(())
    }
}

/// `iterations` CG steps on the `n`×`n` [`tridiagonal`] matrix from x = 0 (a fixed count: the
/// same task stream whatever the residual). Returns x and the runtime's statistics after each
/// iteration (each ends with a read, so its tasks are all launched by then).
pub fn tensor_cg(
    rt: &Runtime,
    n: usize,
    iterations: usize,
) -> Result<(Vec<f64>, Vec<Stats>), PlanRunError> {
    let A = Stored::upload(rt, &tridiagonal(n))?;
    let b: Vec<f64> = (0..n).map(|i| 1.0 + (i % 3) as f64).collect();
    let mut cg = Cg::start(rt, &b)?;
    let mut stats = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let rr_new = cg.update(rt, &A)?;
        rr_new.to_tensor(rt)?;
        cg.direction(rt, rr_new)?;
        stats.push(rt.stats());
    }
    Ok((cg.x.to_tensor(rt)?.vals().to_vec(), stats))
}

/// Of the tasks issued in iterations `from..to` (0-based), the share launched from a replayed
/// trace; and the first iteration (0-based) with a replayed task.
pub fn replayed(stats: &[Stats], from: usize, to: usize) -> (f64, Option<usize>) {
    let at = |i: usize| {
        stats[i].since(&if i == 0 {
            Stats::default()
        } else {
            stats[i - 1]
        })
    };
    let (issued, traced) = (from..to)
        .map(at)
        .fold((0, 0), |(i, t), s| (i + s.tasks_issued, t + s.tasks_traced));
    let first = (0..stats.len()).find(|&i| at(i).tasks_traced > 0);
    (traced as f64 / issued.max(1) as f64, first)
}
