//! Deterministic synthetic tensors, streamed to disk entry by entry so that multi-gigabyte
//! outputs need no more memory than the writer's buffer (and, for `.tcs`, the conversion's
//! budget).

use std::path::Path;

use tessera_formats::{ConvertOptions, FileKind, MtxWriter, Progress, TnsWriter};

use crate::rng::SplitMix64;

/// Which kind of tensor to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Coordinates uniform over the whole index space.
    Uniform,
    /// Coordinates log-uniform per mode: slice sizes follow a Zipf (exponent 1) law, as in
    /// real graphs and tensors with hub rows.
    Powerlaw,
    /// A band around the diagonal of a matrix (or of the first two modes).
    Banded,
    /// The 5-point Laplacian of an `n x m` grid: an `nm x nm` matrix.
    Poisson2d,
    /// The 7-point Laplacian of an `n x m x l` grid: an `nml x nml` matrix.
    Poisson3d,
}

/// What to generate.
#[derive(Clone, Debug)]
pub struct Spec {
    pub dims: Vec<u64>,
    /// Number of entries (or the density times the number of cells).
    pub nnz: Option<u64>,
    pub density: Option<f64>,
    pub kind: Kind,
    pub seed: u64,
    /// Uniform only: emit entries in sorted (row-major) order, by sampling the index space in
    /// order instead of drawing coordinates independently.
    pub sorted: bool,
}

/// Why a specification cannot be generated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("--dims must have at least one mode and no zero dimension")]
    Dims,
    #[error("give --nnz or --density for kind {0}")]
    NeedCount(&'static str),
    #[error("--nnz and --density do not apply to {0}: its nonzeros follow from the grid")]
    NoCount(&'static str),
    #[error("--density must be in (0, 1], got {0}")]
    Density(f64),
    #[error("{kind} needs {expected} dimensions (the grid), got {got}")]
    GridRank {
        kind: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("banded needs at least 2 modes")]
    BandRank,
    #[error(
        "--sorted is only available for --kind uniform (other kinds are sorted or not by nature)"
    )]
    Sorted,
    #[error("the tensor has more than 2^64 cells")]
    TooLarge,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Uniform => "uniform",
            Kind::Powerlaw => "powerlaw",
            Kind::Banded => "banded",
            Kind::Poisson2d => "poisson2d",
            Kind::Poisson3d => "poisson3d",
        }
    }
}

impl Spec {
    /// The dimensions of the generated tensor (the matrix size for the Poisson kinds).
    pub fn tensor_dims(&self) -> Result<Vec<u64>, SpecError> {
        match self.kind {
            Kind::Poisson2d | Kind::Poisson3d => {
                let n = self
                    .dims
                    .iter()
                    .try_fold(1u64, |a, &d| a.checked_mul(d))
                    .ok_or(SpecError::TooLarge)?;
                Ok(vec![n, n])
            }
            _ => Ok(self.dims.clone()),
        }
    }

    /// Checks the specification and returns the number of entries to generate (exact for the
    /// stencils and the independent kinds, expected for sorted sampling).
    pub fn entries(&self) -> Result<u64, SpecError> {
        if self.dims.is_empty() || self.dims.contains(&0) {
            return Err(SpecError::Dims);
        }
        let cells = self
            .dims
            .iter()
            .try_fold(1u128, |a, &d| a.checked_mul(d as u128))
            .ok_or(SpecError::TooLarge)?;
        if cells > u64::MAX as u128 {
            return Err(SpecError::TooLarge);
        }
        if self.sorted && self.kind != Kind::Uniform {
            return Err(SpecError::Sorted);
        }
        match self.kind {
            Kind::Poisson2d | Kind::Poisson3d => {
                let expected = if self.kind == Kind::Poisson2d { 2 } else { 3 };
                if self.dims.len() != expected {
                    return Err(SpecError::GridRank {
                        kind: self.kind.name(),
                        expected,
                        got: self.dims.len(),
                    });
                }
                if self.nnz.is_some() || self.density.is_some() {
                    return Err(SpecError::NoCount(self.kind.name()));
                }
                // Each cell has itself plus one neighbour per direction that stays inside.
                let cells = cells as u64;
                Ok(cells
                    + self
                        .dims
                        .iter()
                        .map(|&d| 2 * (d - 1) * (cells / d))
                        .sum::<u64>())
            }
            _ => {
                if self.kind == Kind::Banded && self.dims.len() < 2 {
                    return Err(SpecError::BandRank);
                }
                match (self.nnz, self.density) {
                    (Some(n), _) => Ok(n),
                    (None, Some(p)) if p > 0.0 && p <= 1.0 => Ok((p * cells as f64).round() as u64),
                    (None, Some(p)) => Err(SpecError::Density(p)),
                    (None, None) => Err(SpecError::NeedCount(self.kind.name())),
                }
            }
        }
    }

    /// Calls `f(coordinates, value)` for every generated entry (0-based coordinates).
    pub fn for_each<E>(&self, mut f: impl FnMut(&[u64], f64) -> Result<(), E>) -> Result<(), E> {
        let n = self.entries().expect("checked by the caller");
        let mut rng = SplitMix64::new(self.seed);
        let mut c = vec![0u64; self.dims.len()];
        match self.kind {
            Kind::Uniform if self.sorted => sorted_uniform(&self.dims, n, &mut rng, &mut f),
            Kind::Uniform | Kind::Powerlaw => {
                for _ in 0..n {
                    for (x, &d) in c.iter_mut().zip(&self.dims) {
                        *x = if self.kind == Kind::Uniform {
                            rng.below(d)
                        } else {
                            log_uniform(&mut rng, d)
                        };
                    }
                    f(&c, value(&mut rng))?;
                }
                Ok(())
            }
            Kind::Banded => banded(&self.dims, n, &mut rng, &mut f),
            Kind::Poisson2d | Kind::Poisson3d => stencil(&self.dims, &mut f),
        }
    }
}

/// A value in (0, 1] with three decimals, as compact in text as real data sets tend to be.
fn value(rng: &mut SplitMix64) -> f64 {
    (rng.below(1000) + 1) as f64 / 1000.0
}

/// `floor(d^u) - 1` for uniform u: P(i) ∝ 1/(i+1).
fn log_uniform(rng: &mut SplitMix64, d: u64) -> u64 {
    let x = ((d as f64 + 1.0).powf(rng.unit())).floor() as u64;
    x.saturating_sub(1).min(d - 1)
}

/// Bernoulli sampling of the row-major index space with geometric skips: each cell is kept
/// with probability n/cells, in increasing order.
fn sorted_uniform<E>(
    dims: &[u64],
    n: u64,
    rng: &mut SplitMix64,
    f: &mut impl FnMut(&[u64], f64) -> Result<(), E>,
) -> Result<(), E> {
    let cells: u64 = dims.iter().product();
    let p = (n as f64 / cells as f64).min(1.0);
    let mut c = vec![0u64; dims.len()];
    let mut at: u64 = 0;
    let log_q = (1.0 - p).ln();
    loop {
        if p < 1.0 {
            // Number of cells skipped before the next kept one: geometric with parameter p.
            let skip = ((1.0 - rng.unit()).ln() / log_q).floor();
            if !skip.is_finite() || skip >= (cells - at) as f64 {
                return Ok(());
            }
            at += skip as u64;
        }
        if at >= cells {
            return Ok(());
        }
        let mut rest = at;
        for (x, &d) in c.iter_mut().zip(dims).rev() {
            *x = rest % d;
            rest /= d;
        }
        f(&c, value(rng))?;
        at += 1;
    }
}

/// `ceil(n / rows)` consecutive columns around the diagonal of each row (scaled to the second
/// mode's size) until `n` entries are out (fewer if the band covers every column); other modes
/// uniform. Row-major order in the first two modes.
fn banded<E>(
    dims: &[u64],
    n: u64,
    rng: &mut SplitMix64,
    f: &mut impl FnMut(&[u64], f64) -> Result<(), E>,
) -> Result<(), E> {
    let (rows, cols) = (dims[0], dims[1]);
    let per_row = n.div_ceil(rows).clamp(1, cols);
    let half = per_row / 2;
    let mut c = vec![0u64; dims.len()];
    let mut emitted = 0;
    for i in 0..rows {
        let centre = (i as u128 * cols as u128 / rows as u128) as u64;
        // Shift the window inward at the edges so every row gets `per_row` entries.
        let lo = centre.saturating_sub(half).min(cols - per_row);
        let hi = (lo + per_row).min(cols);
        for j in lo..hi {
            if emitted == n {
                return Ok(());
            }
            c[0] = i;
            c[1] = j;
            for (x, &d) in c.iter_mut().zip(dims).skip(2) {
                *x = rng.below(d);
            }
            f(&c, value(rng))?;
            emitted += 1;
        }
    }
    Ok(())
}

/// The 5- or 7-point Laplacian on the grid `dims`, row-major over grid cells (so rows of the
/// matrix come in order, columns increasing within a row).
fn stencil<E>(grid: &[u64], f: &mut impl FnMut(&[u64], f64) -> Result<(), E>) -> Result<(), E> {
    let cells: u64 = grid.iter().product();
    // Stride of each grid direction in the linear cell index (row-major).
    let mut strides = vec![1u64; grid.len()];
    for k in (0..grid.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * grid[k + 1];
    }
    let diag = 2.0 * grid.len() as f64;
    let mut point = vec![0u64; grid.len()];
    let mut row = Vec::with_capacity(2 * grid.len() + 1);
    for cell in 0..cells {
        let mut rest = cell;
        for k in (0..grid.len()).rev() {
            point[k] = rest % grid[k];
            rest /= grid[k];
        }
        row.clear();
        row.push((cell, diag));
        for k in 0..grid.len() {
            if point[k] > 0 {
                row.push((cell - strides[k], -1.0));
            }
            if point[k] + 1 < grid[k] {
                row.push((cell + strides[k], -1.0));
            }
        }
        row.sort_unstable_by_key(|e| e.0);
        for &(col, v) in &row {
            f(&[cell, col], v)?;
        }
    }
    Ok(())
}

/// Writes the generated tensor to `out` (`.tns`, `.mtx` or `.tcs`, by extension); `.tcs` goes
/// through a temporary `.tns` and the streaming conversion with `convert` options.
pub fn generate(
    spec: &Spec,
    out: &Path,
    convert: &ConvertOptions,
    progress: &dyn Progress,
    entries_bar: &dyn Fn(u64),
) -> anyhow::Result<u64> {
    let total = spec.entries()?;
    let dims = spec.tensor_dims()?;
    match FileKind::of(out)? {
        FileKind::Tns => write_tns(spec, &dims, out, entries_bar),
        FileKind::Mtx => {
            anyhow::ensure!(
                dims.len() == 2,
                "{}: a .mtx file holds a matrix, but --dims gives rank {}",
                out.display(),
                dims.len()
            );
            let mut w = MtxWriter::create(out, dims[0], dims[1], None)?;
            let mut n = 0u64;
            spec.for_each(|c, v| {
                n += 1;
                if n.is_multiple_of(65536) {
                    entries_bar(n);
                    stop_if_interrupted()?;
                }
                w.write_entry(c[0], c[1], v)
            })?;
            w.finish()?;
            let _ = total;
            Ok(n)
        }
        FileKind::Tcs => {
            let dir = out
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let temp = tempfile::Builder::new()
                .prefix(".tessera-generate.")
                .suffix(".tns")
                .tempfile_in(dir)?;
            let n = write_tns(spec, &dims, temp.path(), entries_bar)?;
            tessera_formats::convert(temp.path(), out, convert, progress)?;
            Ok(n)
        }
    }
}

fn write_tns(
    spec: &Spec,
    dims: &[u64],
    out: &Path,
    entries_bar: &dyn Fn(u64),
) -> anyhow::Result<u64> {
    let mut w = TnsWriter::create(out)?;
    let shape: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    w.write_comment(&format!(
        "generated by tessera-data: kind {}, seed {}",
        spec.kind.name(),
        spec.seed
    ))?;
    w.write_comment(&format!("dims {}", shape.join(" ")))?;
    let mut n = 0u64;
    spec.for_each(|c, v| {
        n += 1;
        if n.is_multiple_of(65536) {
            entries_bar(n);
            stop_if_interrupted()?;
        }
        w.write_entry(c, v)
    })?;
    w.finish()?;
    Ok(n)
}

fn stop_if_interrupted() -> Result<(), tessera_formats::Error> {
    if crate::progress::interrupted() {
        return Err(tessera_formats::Error::Cancelled);
    }
    Ok(())
}

#[cfg(test)]
#[path = "generate_tests.rs"]
mod tests;
