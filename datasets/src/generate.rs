//! Deterministic synthetic tensors, streamed to disk entry by entry.
//!
//! A tensor gets exactly the entries asked for (`nnz`, or `density` times the cells, rounded),
//! all at distinct coordinates unless [`Spec::duplicates`] asks for independent draws. Memory
//! stays bounded whatever the size: independent draws remember the coordinates they gave in a
//! set of at most [`BUCKET_ENTRIES`] at a time (larger tensors are drawn bucket by bucket, each
//! bucket a fixed share of the index space); sorted sampling splits the index space
//! recursively and samples leaves of at most [`LEAF_ENTRIES`] entries.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
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
    /// Uniform and powerlaw only: draw every entry independently, so coordinates may repeat
    /// (exactly `nnz` entries are written, fewer distinct ones).
    pub duplicates: bool,
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
    #[error("the tensor has 2^64 cells or more")]
    TooLarge,
    #[error("{nnz} distinct entries do not fit in {capacity} cells{what}; lower --nnz, or give --duplicates to allow repeated coordinates")]
    TooMany {
        nnz: u64,
        capacity: u64,
        what: &'static str,
    },
    #[error("--duplicates applies to --kind uniform and powerlaw without --sorted (the other kinds have distinct entries by construction)")]
    Duplicates,
    #[error("{kind}: only {got} distinct entries of the {want} asked for after {draws} draws (the distribution puts too little weight on the cells left); lower --nnz, or give --duplicates")]
    Exhausted {
        kind: &'static str,
        want: u64,
        got: u64,
        draws: u64,
    },
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

    /// Checks the specification and returns the number of entries to generate (exactly that
    /// many are generated).
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
        if self.duplicates && (self.sorted || !matches!(self.kind, Kind::Uniform | Kind::Powerlaw))
        {
            return Err(SpecError::Duplicates);
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
                let n = match (self.nnz, self.density) {
                    (Some(n), _) => n,
                    (None, Some(p)) if p > 0.0 && p <= 1.0 => (p * cells as f64).round() as u64,
                    (None, Some(p)) => return Err(SpecError::Density(p)),
                    (None, None) => return Err(SpecError::NeedCount(self.kind.name())),
                };
                // Banded entries are distinct in the first two modes.
                let (capacity, what) = match self.kind {
                    Kind::Banded => (
                        self.dims[0].saturating_mul(self.dims[1]),
                        " of the first two modes",
                    ),
                    _ => (cells as u64, ""),
                };
                if n > capacity && !self.duplicates {
                    return Err(SpecError::TooMany {
                        nnz: n,
                        capacity,
                        what,
                    });
                }
                Ok(n)
            }
        }
    }

    /// Calls `f(coordinates, value)` for every generated entry (0-based coordinates). Fails
    /// on a bad specification, or when independent draws cannot find enough distinct cells
    /// ([`SpecError::Exhausted`]).
    pub fn for_each<E: From<SpecError>>(
        &self,
        mut f: impl FnMut(&[u64], f64) -> Result<(), E>,
    ) -> Result<(), E> {
        let n = self.entries()?;
        let mut rng = SplitMix64::new(self.seed);
        let cells: u64 = self.dims.iter().product();
        match self.kind {
            // Dense enough that drawing distinct cells at random would mostly repeat: sample
            // the index space in order instead.
            Kind::Uniform if self.sorted || (!self.duplicates && n > cells / 2) => {
                sorted_uniform(&self.dims, n, &mut rng, &mut f)
            }
            Kind::Uniform | Kind::Powerlaw if self.duplicates => {
                let mut c = vec![0u64; self.dims.len()];
                for _ in 0..n {
                    self.draw(&mut rng, &mut c);
                    f(&c, value(&mut rng))?;
                }
                Ok(())
            }
            Kind::Uniform | Kind::Powerlaw => self.distinct(n, BUCKET_ENTRIES, &mut f),
            Kind::Banded => banded(&self.dims, n, &mut rng, &mut f),
            Kind::Poisson2d | Kind::Poisson3d => stencil(&self.dims, &mut f),
        }
    }

    /// Independent coordinates of the kind's distribution.
    fn draw(&self, rng: &mut SplitMix64, c: &mut [u64]) {
        for (x, &d) in c.iter_mut().zip(&self.dims) {
            *x = if self.kind == Kind::Uniform {
                rng.below(d)
            } else {
                log_uniform(rng, d)
            };
        }
    }

    /// `n` entries at distinct coordinates, in the order drawn: draws that repeat a cell are
    /// dropped. Above `bucket_entries` ([`BUCKET_ENTRIES`]) the cells are cut into buckets by a hash of their
    /// linear index, each bucket drawn in turn (with its own stream, keeping only draws that
    /// fall in it) for an equal share of `n`, so only one bucket's set is held at a time.
    fn distinct<E: From<SpecError>>(
        &self,
        n: u64,
        bucket_entries: u64,
        f: &mut impl FnMut(&[u64], f64) -> Result<(), E>,
    ) -> Result<(), E> {
        let buckets = n.div_ceil(bucket_entries).max(1);
        let mut c = vec![0u64; self.dims.len()];
        for b in 0..buckets {
            let quota = n / buckets + u64::from(b < n % buckets);
            let mut rng = match buckets {
                1 => SplitMix64::new(self.seed),
                _ => SplitMix64::new(mix(self.seed ^ mix(b + 1))),
            };
            let mut seen = HashSet::with_capacity_and_hasher(quota as usize, Mix);
            let limit = quota.saturating_mul(32 * buckets).saturating_add(1 << 20);
            let mut draws = 0u64;
            while (seen.len() as u64) < quota {
                if draws == limit {
                    return Err(SpecError::Exhausted {
                        kind: self.kind.name(),
                        want: n,
                        got: seen.len() as u64,
                        draws,
                    }
                    .into());
                }
                draws += 1;
                self.draw(&mut rng, &mut c);
                let at = c.iter().zip(&self.dims).fold(0u64, |a, (&x, &d)| a * d + x);
                if (buckets == 1 || mix(at) % buckets == b) && seen.insert(at) {
                    f(&c, value(&mut rng))?;
                }
            }
        }
        Ok(())
    }
}

/// Distinct entries held in memory at a time by independent draws (a set of linear indices).
pub const BUCKET_ENTRIES: u64 = 1 << 22;

/// Entries sampled at once, in a set, by sorted sampling.
pub const LEAF_ENTRIES: u64 = 1 << 16;

/// SplitMix64's finaliser: a bijection of `u64` that spreads nearby values apart.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hashes linear indices with [`mix`] (cheap, and stable across runs and machines).
#[derive(Clone, Copy, Default)]
struct Mix;

impl BuildHasher for Mix {
    type Hasher = MixHasher;
    fn build_hasher(&self) -> MixHasher {
        MixHasher(0)
    }
}

struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        mix(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 ^= x;
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

/// Exactly `n` distinct cells of the row-major index space, uniformly, in increasing order:
/// a range's count is split between its halves by a (normal approximation of the)
/// hypergeometric draw, clamped to what each half can hold, down to leaves of at most
/// [`LEAF_ENTRIES`] entries sampled with Floyd's algorithm (or ranges taken whole).
fn sorted_uniform<E>(
    dims: &[u64],
    n: u64,
    rng: &mut SplitMix64,
    f: &mut impl FnMut(&[u64], f64) -> Result<(), E>,
) -> Result<(), E> {
    let cells: u64 = dims.iter().product();
    let mut c = vec![0u64; dims.len()];
    let mut emit = |at: u64, rng: &mut SplitMix64| {
        let mut rest = at;
        for (x, &d) in c.iter_mut().zip(dims).rev() {
            *x = rest % d;
            rest /= d;
        }
        f(&c, value(rng))
    };
    // Ranges (start, length, count) still to sample, the leftmost on top.
    let mut todo = vec![(0u64, cells, n)];
    let mut leaf = Vec::new();
    while let Some((lo, len, k)) = todo.pop() {
        if k == len {
            for at in lo..lo + len {
                emit(at, rng)?;
            }
        } else if k <= LEAF_ENTRIES {
            floyd(len, k, rng, &mut leaf);
            for &at in &leaf {
                emit(lo + at, rng)?;
            }
        } else {
            let half = len / 2;
            let left = split_count(len, half, k, rng);
            todo.push((lo + half, len - half, k - left));
            todo.push((lo, half, left));
        }
    }
    Ok(())
}

/// How many of `k` distinct cells drawn from `len` fall in the first `half`: hypergeometric,
/// approximated by a normal draw and clamped so that both sides can hold their share.
fn split_count(len: u64, half: u64, k: u64, rng: &mut SplitMix64) -> u64 {
    let (n, p, kf) = (len as f64, half as f64 / len as f64, k as f64);
    let var = kf * p * (1.0 - p) * (n - kf) / (n - 1.0).max(1.0);
    // Box-Muller: a standard normal from two uniforms.
    let z = (-2.0 * (1.0 - rng.unit()).ln()).sqrt() * (std::f64::consts::TAU * rng.unit()).cos();
    let x = (kf * p + var.max(0.0).sqrt() * z).round().max(0.0) as u64;
    x.clamp(k.saturating_sub(len - half), k.min(half))
}

/// `k` distinct values of `0..len`, sorted, into `out` (Floyd's algorithm: `k` draws).
fn floyd(len: u64, k: u64, rng: &mut SplitMix64, out: &mut Vec<u64>) {
    let mut set = HashSet::with_capacity_and_hasher(k as usize, Mix);
    for j in len - k..len {
        let t = rng.below(j + 1);
        if !set.insert(t) {
            set.insert(j);
        }
    }
    out.clear();
    out.extend(set);
    out.sort_unstable();
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
            spec.for_each(|c, v| -> anyhow::Result<()> {
                n += 1;
                if n.is_multiple_of(65536) {
                    entries_bar(n);
                    stop_if_interrupted()?;
                }
                Ok(w.write_entry(c[0], c[1], v)?)
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
    spec.for_each(|c, v| -> anyhow::Result<()> {
        n += 1;
        if n.is_multiple_of(65536) {
            entries_bar(n);
            stop_if_interrupted()?;
        }
        Ok(w.write_entry(c, v)?)
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
