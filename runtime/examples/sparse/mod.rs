//! CSR matrices as groups of stores (thesis §7.2) and the row-split SpMV task of Figure 7.2.
//! Shared by the `spmv` and `cg` examples and the runtime's tests.

#![allow(dead_code)]

pub mod cg;
pub mod stencil;
pub mod tiled_sum;

use std::process::ExitCode;
use tessera_runtime::{DType, PosRange, Result, Runtime, Store};

/// The `main` the examples share: positional numbers from the command line, each defaulting
/// to `defaults`; the exit status says whether `run` found the right answer.
pub fn example_main(defaults: &[usize], run: impl FnOnce(&[usize]) -> Result<bool>) -> ExitCode {
    let given: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let args: Vec<usize> = (0..defaults.len())
        .map(|i| given.get(i).copied().unwrap_or(defaults[i]))
        .collect();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A CSR matrix on the host.
#[derive(Clone, Debug)]
pub struct HostCsr {
    pub rows: usize,
    pub cols: usize,
    pub pos: Vec<PosRange>,
    pub crd: Vec<u64>,
    pub vals: Vec<f64>,
}

impl HostCsr {
    /// `y = A x`, sequentially (the reference).
    pub fn spmv(&self, x: &[f64]) -> Vec<f64> {
        self.pos
            .iter()
            .map(|r| {
                (r.lo..r.hi)
                    .map(|k| self.vals[k as usize] * x[self.crd[k as usize] as usize])
                    .sum()
            })
            .collect()
    }

    /// The `n × n` tridiagonal pattern (row `i` has columns `i - 1..=i + 1`), values as
    /// [`HostCsr::from_rows`] gives them.
    pub fn tridiagonal(n: usize) -> HostCsr {
        let rows: Vec<Vec<usize>> = (0..n)
            .map(|i: usize| (i.saturating_sub(1)..(i + 2).min(n)).collect())
            .collect();
        HostCsr::from_rows(n, &rows)
    }

    /// The 2-d five-point Laplacian on a `k × k` grid (symmetric positive definite).
    pub fn laplacian_2d(k: usize) -> HostCsr {
        let n = k * k;
        let (mut pos, mut crd, mut vals) = (Vec::with_capacity(n), vec![], vec![]);
        for i in 0..k {
            for j in 0..k {
                let lo = crd.len() as u64;
                let mut put = |c: usize, v: f64| {
                    crd.push(c as u64);
                    vals.push(v);
                };
                if i > 0 {
                    put((i - 1) * k + j, -1.0);
                }
                if j > 0 {
                    put(i * k + j - 1, -1.0);
                }
                put(i * k + j, 4.0);
                if j + 1 < k {
                    put(i * k + j + 1, -1.0);
                }
                if i + 1 < k {
                    put((i + 1) * k + j, -1.0);
                }
                pos.push(PosRange::new(lo, crd.len() as u64));
            }
        }
        HostCsr {
            rows: n,
            cols: n,
            pos,
            crd,
            vals,
        }
    }

    /// A matrix from per-row column lists (values `1 + (r + c) % 7`).
    pub fn from_rows(cols: usize, rows: &[Vec<usize>]) -> HostCsr {
        let (mut pos, mut crd, mut vals) = (vec![], vec![], vec![]);
        for (r, cs) in rows.iter().enumerate() {
            let lo = crd.len() as u64;
            for &c in cs {
                crd.push(c as u64);
                vals.push(1.0 + ((r + c) % 7) as f64);
            }
            pos.push(PosRange::new(lo, crd.len() as u64));
        }
        HostCsr {
            rows: rows.len(),
            cols,
            pos,
            crd,
            vals,
        }
    }
}

/// A CSR matrix as three stores.
pub struct Csr {
    pub rows: usize,
    pub pos: Store,
    pub crd: Store,
    pub vals: Store,
}

impl Csr {
    pub fn upload(rt: &Runtime, m: &HostCsr) -> Result<Csr> {
        Ok(Csr {
            rows: m.rows,
            pos: rt.from_vec(&[m.rows], m.pos.clone())?,
            crd: rt.from_vec(&[m.crd.len()], m.crd.clone())?,
            vals: rt.from_vec(&[m.vals.len()], m.vals.clone())?,
        })
    }
}

pub const SPMV: &str = "spmv_csr_rows";

/// Registers the row-split SpMV body: `y[i] = Σ vals[k] · x[crd[k]]` over `k ∈ pos[i]`.
pub fn register_spmv(rt: &Runtime) -> Result<()> {
    rt.register(SPMV, |ctx| {
        let mut y = ctx.write::<f64>(0);
        let pos = ctx.read::<PosRange>(1);
        let crd = ctx.read::<u64>(2);
        let vals = ctx.read::<f64>(3);
        let x = ctx.read::<f64>(4);
        // Slices of the sub-stores; each starts at its sub-store's first index.
        let (crd_lo, x_lo) = (crd.range().start, x.range().start);
        let (crd_s, vals_s, x_s) = (crd.as_slice(), vals.as_slice(), x.as_slice());
        // Rows through slices too: `pos` and `y` are aligned (the same rows), and a slice walk
        // costs a fraction of `at`/`set_at`'s checked n-d indexing per row.
        // A row's coordinates and values zipped: one bounds check a nonzero (the gathered
        // `x`), not three (callgrind, the fusion bench's CG: this body 108.5 M -> 95.3 M
        // instructions).
        for (yi, r) in y.as_mut_slice().iter_mut().zip(pos.as_slice()) {
            let (lo, hi) = (r.lo as usize - crd_lo, r.hi as usize - crd_lo);
            let mut sum = 0.0;
            for (v, &j) in vals_s[lo..hi].iter().zip(&crd_s[lo..hi]) {
                sum += v * x_s[j as usize - x_lo];
            }
            *yi = sum;
        }
    })
}

/// Issues `y = A x` with the constraints of thesis Figure 7.2 and returns `y`.
pub fn spmv(rt: &Runtime, a: &Csr, x: &Store) -> Result<Store> {
    let y = rt.create(DType::F64, &[a.rows])?;
    spmv_into(rt, a, x, &y)?;
    Ok(y)
}

/// Issues `y = A x` into an existing `y` (a store reused across iterations).
pub fn spmv_into(rt: &Runtime, a: &Csr, x: &Store, y: &Store) -> Result<()> {
    // Every row of a point's `y` is assigned (`*yi = sum`), so its old values need no zeroing.
    rt.task(SPMV)
        .write_all(y)
        .read(&a.pos)
        .read(&a.crd)
        .read(&a.vals)
        .read(x)
        .align(y, &a.pos)
        .image(&a.pos, &a.crd)
        .image(&a.pos, &a.vals)
        .image(&a.crd, x)
        .submit()
}
