//! SpMV on a generated matrix of a few GB across ranks (issue 12's benchmark): every rank
//! generates only its block of rows of a banded matrix (`BAND` nonzeros a row, values 1) and
//! makes the stores from that share (`Runtime::from_share`), as a program reading its share of
//! a file does, so no rank ever holds the whole matrix; `x` is read through the image of each
//! rank's columns (the band's halo crosses ranks). Checked on a sample of rows: `y(i)` is the
//! sum of `x` over row `i`'s band.

use super::sparse::{self, Csr};
use super::Measured;
use std::ops::Range;
use std::time::Instant;
use tessera_runtime::{DType, PosRange, Result, Runtime};

/// Nonzeros a row (fewer in the first and last rows, where the band is cut).
const BAND: usize = 16;

/// A banded `rows × rows` matrix.
#[derive(Clone, Copy)]
pub struct Big {
    pub rows: usize,
}

impl Big {
    /// The matrix whose stores (`pos`, `crd`, `vals`, `x`, `y`) take about `gb` GB.
    pub fn of_gb(gb: f64) -> Big {
        // Per row: BAND × (crd u64 + vals f64), a `pos` range, and one x and one y.
        let per_row = BAND * 16 + 16 + 16;
        Big {
            rows: ((gb * 1e9) as usize / per_row).max(BAND),
        }
    }

    /// Bytes of the matrix's arrays.
    pub fn bytes(&self) -> f64 {
        (self.rows * (BAND * 16 + 16)) as f64
    }

    fn cols(&self, i: usize) -> Range<usize> {
        let lo = i.saturating_sub(BAND / 2);
        lo..(lo + BAND).min(self.rows)
    }

    fn x(j: usize) -> f64 {
        (j % 7) as f64
    }

    /// Each rank's block of rows.
    fn row_shares(&self, ranks: usize) -> Vec<Range<usize>> {
        (0..ranks)
            .map(|r| r * self.rows / ranks..(r + 1) * self.rows / ranks)
            .collect()
    }
}

/// Seconds per multiply of `reps` multiplies into one `y` (each after the one before), this
/// rank's statistics and CPU seconds per multiply; `y` checked on a sample of rows.
pub fn run(rt: &Runtime, big: Big, reps: usize) -> Result<Measured> {
    let (me, ranks) = (rt.rank(), rt.ranks());
    let rows = big.row_shares(ranks);
    // Nonzero ranges follow the rows: one pass over the row lengths, the same on every rank.
    let mut starts = vec![0];
    for r in &rows {
        starts.push(starts.last().unwrap() + (r.clone()).map(|i| big.cols(i).len()).sum::<usize>());
    }
    let nnz = *starts.last().unwrap();
    let nz: Vec<Range<usize>> = (0..ranks).map(|r| starts[r]..starts[r + 1]).collect();
    let as_lists = |v: &[Range<usize>]| v.iter().map(|r| vec![r.clone()]).collect::<Vec<_>>();
    // This rank's rows only.
    let mine = rows[me].clone();
    let mut at = starts[me] as u64;
    let (mut pos, mut crd) = (Vec::with_capacity(mine.len()), Vec::new());
    for i in mine.clone() {
        let cols = big.cols(i);
        pos.push(PosRange::new(at, at + cols.len() as u64));
        at += cols.len() as u64;
        crd.extend(cols.map(|c| c as u64));
    }
    let vals = vec![1.0f64; crd.len()];
    let x: Vec<f64> = mine.clone().map(Big::x).collect();
    let m = Csr {
        rows: big.rows,
        pos: rt.from_share(big.rows, &as_lists(&rows), pos)?,
        crd: rt.from_share(nnz, &as_lists(&nz), crd)?,
        vals: rt.from_share(nnz, &as_lists(&nz), vals)?,
    };
    let x = rt.from_share(big.rows, &as_lists(&rows), x)?;
    sparse::register_spmv(rt)?;
    let y = rt.create(DType::F64, &[big.rows])?;
    sparse::spmv_into(rt, &m, &x, &y)?; // warm-up: images and partitions
    rt.fence()?;
    let before = rt.stats();
    let (t, cpu) = (Instant::now(), super::cpu_now());
    for _ in 0..reps {
        sparse::spmv_into(rt, &m, &x, &y)?;
    }
    rt.fence()?;
    let secs = t.elapsed().as_secs_f64() / reps as f64;
    let cpu = super::cpu_since(cpu) / reps as f64;
    let stats = rt.stats().since(&before);
    // A sample of rows (each rank's first, middle and last), read as one collective each.
    for r in &rows {
        for i in [r.start, (r.start + r.end) / 2, r.end.saturating_sub(1)] {
            if i < r.end {
                let got = rt.read::<f64>(&y.slice(0, i..i + 1)?)?[0];
                let want: f64 = big.cols(i).map(Big::x).sum();
                assert_eq!(got, want, "big SpMV row {i}");
            }
        }
    }
    Ok((secs, stats, cpu))
}
