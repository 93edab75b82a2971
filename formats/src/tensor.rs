//! In-memory tensors: level arrays in a [`Format`], built from coordinates or from parts.

use crate::format::{Format, FormatError, IntoFormat, LevelType};
use crate::pack::{PackError, PackedArrays, Packer};
use crate::value::{Index, Value};
use crate::view::{validate_levels, LevelView, TensorView};

/// Why a tensor could not be built, or why its level arrays are inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    #[error("the format has rank {format} but the dimensions {dims:?} have rank {got}", got = dims.len())]
    RankMismatch { format: usize, dims: Vec<usize> },
    #[error("entry {entry} has {got} coordinates, expected {expected}")]
    EntryRank {
        entry: usize,
        expected: usize,
        got: usize,
    },
    #[error(
        "entry {entry}: coordinate {coord} at level {level} is out of range (must be < {bound})"
    )]
    CoordOutOfRange {
        entry: usize,
        level: usize,
        coord: usize,
        bound: usize,
    },
    #[error("entry {entry}: coordinate {coord} at dense level {level} is outside [{offset}, {offset}+{size})")]
    OutsideDenseRange {
        entry: usize,
        level: usize,
        coord: usize,
        offset: usize,
        size: usize,
    },
    #[error("entry {entry} repeats the coordinates of the entry before it")]
    Duplicate { entry: usize },
    #[error("entry {entry} is not in increasing storage order")]
    NotSorted { entry: usize },
    #[error("value {value} does not fit in {bits}-bit coordinates; use 64-bit coordinates")]
    IndexOverflow { value: u64, bits: u32 },
    #[error("the tensor is too large to address (size overflows)")]
    TooLarge,
    #[error("mode {mode} has dimension {dim}, more than a tensor may have (2^63 - 1): is a coordinate wrong?")]
    DimensionTooLarge { mode: usize, dim: u64 },
    #[error("the tensor needs {bytes} bytes of memory, more than this machine can give; store it with compressed levels (e.g. `s` instead of `d`) or use a smaller tensor")]
    OutOfMemory { bytes: u128 },
    #[error("dense data has {got} values but the dimensions {dims:?} need {expected}")]
    DenseLength {
        dims: Vec<usize>,
        expected: usize,
        got: usize,
    },
    #[error("{level_count} levels given for a rank-{rank} format")]
    LevelCount { level_count: usize, rank: usize },
    #[error("level {level} is {got:?} but the format says {expected:?}")]
    LevelType {
        level: usize,
        expected: LevelType,
        got: LevelType,
    },
    #[error("dense level {level}: range [{offset}, {offset}+{size}) exceeds dimension {dim}")]
    DenseRange {
        level: usize,
        offset: usize,
        size: usize,
        dim: usize,
    },
    #[error("level {level}: pos has {got} entries, expected {expected} (parents + 1)")]
    PosLength {
        level: usize,
        expected: usize,
        got: usize,
    },
    #[error("level {level}: pos[0] is {got}, expected 0")]
    PosStart { level: usize, got: usize },
    #[error("level {level}: pos is not monotone at index {at} ({prev} > {next})")]
    PosNotMonotone {
        level: usize,
        at: usize,
        prev: usize,
        next: usize,
    },
    #[error("level {level}: crd has {got} entries but pos ends at {expected}")]
    CrdLength {
        level: usize,
        expected: usize,
        got: usize,
    },
    #[error("level {level}: crd[{at}] = {coord} is out of range (must be < {bound})")]
    CrdOutOfRange {
        level: usize,
        at: usize,
        coord: usize,
        bound: usize,
    },
    #[error("level {level}: crd is not strictly increasing within a segment at index {at}")]
    CrdNotIncreasing { level: usize, at: usize },
    #[error("vals has {got} entries, expected {expected}")]
    ValsLength { expected: usize, got: usize },
    #[error(transparent)]
    Format(#[from] FormatError),
}

/// One level of a tensor's storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Level<I> {
    /// Coordinates `offset..offset+size` are all present. Under parent position `p`, coordinate
    /// `i` has child position `p * size + (i - offset)` (SuperTaco's dense offset lets a block
    /// skip the indices before it).
    Dense { size: usize, offset: usize },
    /// The children of parent position `p` are positions `pos[p]..pos[p+1]`, whose
    /// coordinates are `crd[pos[p]..pos[p+1]]` in increasing order.
    Compressed { pos: Vec<I>, crd: Vec<I> },
    /// Position `p` has one child, position `p` of this level, whose coordinate is `crd[p]`
    /// (TACO's singleton level; `crd` has one entry per parent position).
    Singleton { crd: Vec<I> },
}

impl<I: Index> Level<I> {
    /// The levels of a finished [`Packer`] over `dims` in `format` (dense levels cover their
    /// whole mode, from offset 0).
    pub fn from_packed(
        dims: &[usize],
        format: &Format,
        arrays: PackedArrays<Vec<I>>,
    ) -> Vec<Level<I>> {
        let dense: Vec<(usize, usize)> =
            format.mode_order().iter().map(|&m| (dims[m], 0)).collect();
        Self::from_packed_dense(&dense, arrays)
    }

    /// As [`Level::from_packed`], with dense level `k` of (size, offset) `dense[k]`.
    fn from_packed_dense(dense: &[(usize, usize)], arrays: PackedArrays<Vec<I>>) -> Vec<Level<I>> {
        arrays
            .into_iter()
            .zip(dense)
            .map(|(a, &(size, offset))| match a {
                Some((Some(pos), crd)) => Level::Compressed { pos, crd },
                Some((None, crd)) => Level::Singleton { crd },
                None => Level::Dense { size, offset },
            })
            .collect()
    }

    /// The level's type.
    pub fn level_type(&self) -> LevelType {
        match self {
            Level::Dense { .. } => LevelType::Dense,
            Level::Compressed { .. } => LevelType::Compressed,
            Level::Singleton { .. } => LevelType::Singleton,
        }
    }

    /// A borrowed view of this level (dense window = the whole level).
    pub fn view(&self) -> LevelView<'_, I> {
        match self {
            Level::Dense { size, offset } => LevelView::dense(*size, *offset),
            Level::Compressed { pos, crd } => LevelView::Compressed { pos, crd },
            Level::Singleton { crd } => LevelView::Singleton { crd },
        }
    }
}

/// A tensor stored as level arrays: `dims` are the mode-space extents, `format` the level
/// types and mode order, `levels[k]` the storage of level `k`, `vals` the stored values.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor<V: Value, I: Index = u32> {
    dims: Vec<usize>,
    format: Format,
    levels: Vec<Level<I>>,
    vals: Vec<V>,
}

impl<V: Value, I: Index> Tensor<V, I> {
    /// Builds a tensor from entries with mode-space coordinates in any order; duplicates are
    /// summed. Coordinates outside `dims` are an error. `format` is a [`Format`] or a TACO
    /// format string (`"csr"`, `"ds:1,0"`, `"sss"`).
    pub fn from_entries(
        dims: Vec<usize>,
        format: impl IntoFormat,
        entries: impl IntoIterator<Item = (Vec<usize>, V)>,
    ) -> Result<Self, TensorError> {
        let format = format.into_format(dims.len())?;
        let mut coo = Coo::new::<I>(&dims, &format)?;
        for (c, v) in entries {
            coo.push(&c, v)?;
        }
        coo.into_tensor(dims, format)
    }

    /// As [`Tensor::from_entries`] (duplicates summed), with every stored position that no
    /// entry gives — the padding of dense levels below a compressed one — set to `fill`
    /// instead of zero: the value of a missing entry under a `min` or `max` reduction.
    pub fn from_entries_padded(
        dims: Vec<usize>,
        format: impl IntoFormat,
        entries: Vec<(Vec<usize>, V)>,
        fill: V,
    ) -> Result<Self, TensorError> {
        let written: std::collections::HashSet<Vec<usize>> =
            entries.iter().map(|e| e.0.clone()).collect();
        let mut t = Self::from_entries(dims, format, entries)?;
        let padding: Vec<usize> = t
            .entries()
            .enumerate()
            .filter(|(_, (c, _))| !written.contains(c))
            .map(|(k, _)| k)
            .collect();
        for k in padding {
            t.vals[k] = fill;
        }
        Ok(t)
    }

    /// The same tensor stored in another format (in memory). Explicitly stored zeros are
    /// dropped, also when the format is the same: a dense tensor converted to CSR keeps only
    /// its nonzeros (the target's dense levels hold zeros anyway).
    pub fn to_format(&self, format: impl IntoFormat) -> Result<Self, TensorError> {
        let format = format.into_format(self.dims.len())?;
        let mut coo = Coo::new::<I>(&self.dims, &format)?;
        for (c, v) in self.entries() {
            if v != V::zero() {
                coo.push(&c, v)?;
            }
        }
        coo.into_tensor(self.dims.clone(), format)
    }

    /// A dense row-major tensor (all levels dense, identity mode order) holding `data`.
    pub fn dense_from_vec(dims: Vec<usize>, data: Vec<V>) -> Result<Self, TensorError> {
        let expected = checked_product(&dims)?;
        if data.len() != expected {
            return Err(TensorError::DenseLength {
                dims,
                expected,
                got: data.len(),
            });
        }
        let levels = dims
            .iter()
            .map(|&size| Level::Dense { size, offset: 0 })
            .collect();
        let format = Format::dense(dims.len());
        Ok(Tensor {
            dims,
            format,
            levels,
            vals: data,
        })
    }

    /// A tensor with no stored nonzeros (dense levels hold explicit zeros).
    pub fn zeros(dims: Vec<usize>, format: impl IntoFormat) -> Result<Self, TensorError> {
        let format = format.into_format(dims.len())?;
        check_rank(&dims, &format)?;
        check_dims_fit::<I>(&dims)?;
        let packer = Self::packer(&dims, &format)?;
        Self::from_packer(dims, format, packer)
    }

    /// Assembles a tensor from level arrays after validating them: level types match the
    /// format, dense ranges fit the dimensions, `pos` monotone and of the right length,
    /// `crd` in range and increasing within each segment, `vals` of the right length.
    pub fn from_parts(
        dims: Vec<usize>,
        format: Format,
        levels: Vec<Level<I>>,
        vals: Vec<V>,
    ) -> Result<Self, TensorError> {
        check_rank(&dims, &format)?;
        let views: Vec<LevelView<'_, I>> = levels.iter().map(Level::view).collect();
        validate_levels(&dims, &format, &views, vals.len())?;
        Ok(Tensor {
            dims,
            format,
            levels,
            vals,
        })
    }

    /// Assembles a tensor from level arrays that were validated already, with the checks of
    /// [`Tensor::from_parts`] (a `.tcs` reader checks the same things before calling this).
    pub(crate) fn from_validated(
        dims: Vec<usize>,
        format: Format,
        levels: Vec<Level<I>>,
        vals: Vec<V>,
    ) -> Self {
        debug_assert!(
            validate_levels(
                &dims,
                &format,
                &levels.iter().map(Level::view).collect::<Vec<_>>(),
                vals.len()
            )
            .is_ok(),
            "levels passed to from_validated must be valid"
        );
        Tensor {
            dims,
            format,
            levels,
            vals,
        }
    }

    /// Mode-space extents.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Storage format.
    pub fn format(&self) -> &Format {
        &self.format
    }

    /// Level storage, outermost first.
    pub fn levels(&self) -> &[Level<I>] {
        &self.levels
    }

    /// Stored values in storage order.
    pub fn vals(&self) -> &[V] {
        &self.vals
    }

    /// Stored values, mutable (the sparsity structure stays fixed).
    pub fn vals_mut(&mut self) -> &mut [V] {
        &mut self.vals
    }

    /// Number of stored values (explicit zeros of dense levels included).
    pub fn nnz(&self) -> usize {
        self.vals.len()
    }

    /// Splits the tensor into its parts (dims, format, levels, vals).
    pub fn into_parts(self) -> (Vec<usize>, Format, Vec<Level<I>>, Vec<V>) {
        (self.dims, self.format, self.levels, self.vals)
    }

    /// A zero-copy view of the whole tensor.
    pub fn view(&self) -> TensorView<'_, V, I> {
        let levels = self.levels.iter().map(Level::view).collect();
        TensorView::new_unchecked(&self.dims, &self.format, levels, &self.vals)
    }

    /// Every stored entry as (mode-space coordinates, value), in storage order.
    pub fn entries(&self) -> impl Iterator<Item = (Vec<usize>, V)> + '_ {
        crate::view::Entries::new(self.view())
    }

    /// The tensor as a row-major dense array over `dims` (for tests and oracles; the caller
    /// must know the dense size fits in memory).
    pub fn to_dense(&self) -> Vec<V> {
        self.view().to_dense()
    }

    /// A packer whose arrays already hold the memory the leading dense levels are sure to
    /// fill (all their positions are materialised), reserved fallibly: a dense tensor too
    /// large for this machine is an error here rather than an abort half-way through.
    fn packer(
        dims: &[usize],
        format: &Format,
    ) -> Result<Packer<V, I, Vec<I>, Vec<V>>, TensorError> {
        let order = format.mode_order();
        let first_compressed = format.levels().iter().position(|t| t.is_sparse());
        let prefix: Vec<usize> = order[..first_compressed.unwrap_or(order.len())]
            .iter()
            .map(|&m| dims[m])
            .collect();
        let positions = checked_product(&prefix)?;
        let mut vals = Vec::new();
        let mut first_pos = Vec::new();
        match first_compressed {
            None => reserve(&mut vals, positions)?,
            Some(_) => reserve(&mut first_pos, positions.saturating_add(1))?,
        }
        let mut first_pos = Some(first_pos);
        let dense = order.iter().map(|&m| (dims[m], 0)).collect();
        Ok(Packer::new(
            dims,
            format,
            dense,
            |k| {
                let pos = match first_compressed {
                    Some(f) if f == k => first_pos.take().unwrap_or_default(),
                    _ => Vec::new(),
                };
                let pos = (format.levels()[k] == LevelType::Compressed).then_some(pos);
                (pos, Vec::new())
            },
            vals,
        ))
    }

    fn from_packer(
        dims: Vec<usize>,
        format: Format,
        packer: Packer<V, I, Vec<I>, Vec<V>>,
    ) -> Result<Self, TensorError> {
        let (arrays, vals, _) = packer.finish().map_err(unwrap_pack)?;
        let levels = Level::from_packed(&dims, &format, arrays);
        Ok(Tensor {
            dims,
            format,
            levels,
            vals,
        })
    }
}

impl<V: Value, I: Index> TensorView<'_, V, I> {
    /// The same stored entries in the same storage order, in `format`, which differs from
    /// this tensor's only in its sparse levels (`q` for `s` or back: COO ↔ its unique form,
    /// `sq` ↔ `ss`). Linear (no sort), keeps explicitly stored zeros, and keeps each dense
    /// level's size and offset (a block stays a block). The view must show whole dense levels.
    pub fn relevel(&self, format: &Format) -> Result<Tensor<V, I>, TensorError> {
        let mut dense = Vec::with_capacity(self.levels().len());
        for (k, level) in self.levels().iter().enumerate() {
            let want = format.levels().get(k).copied();
            let same_kind = want.is_some_and(|w| w.is_sparse() == level.level_type().is_sparse());
            if !same_kind || format.mode_order() != self.format().mode_order() {
                return Err(TensorError::LevelType {
                    level: k,
                    expected: level.level_type(),
                    got: want.unwrap_or(level.level_type()),
                });
            }
            dense.push(match *level {
                LevelView::Dense {
                    size,
                    offset,
                    lo,
                    hi,
                } if lo == offset && hi == offset + size => (size, offset),
                LevelView::Dense { lo, hi, .. } => {
                    return Err(TensorError::OutsideDenseRange {
                        entry: 0,
                        level: k,
                        coord: lo,
                        offset: lo,
                        size: hi - lo,
                    })
                }
                _ => (0, 0),
            });
        }
        let mut packer = Packer::in_memory(self.dims(), format, dense.clone());
        self.try_for_each_level_entry(|c, v| packer.push(c, v))
            .map_err(unwrap_pack)?;
        let (arrays, vals, _) = packer.finish().map_err(unwrap_pack)?;
        let levels = Level::from_packed_dense(&dense, arrays);
        Tensor::from_parts(self.dims().to_vec(), format.clone(), levels, vals)
    }
}

/// Entries gathered for packing: coordinates permuted into level order and flattened
/// (entry `e` is `coords[e*rank..][..rank]`), checked against the dimensions as they come.
pub(crate) struct Coo<V> {
    dims: Vec<usize>,
    order: Vec<usize>,
    coords: Vec<usize>,
    vals: Vec<V>,
}

impl<V: Value> Coo<V> {
    pub(crate) fn new<I: Index>(dims: &[usize], format: &Format) -> Result<Self, TensorError> {
        check_rank(dims, format)?;
        check_dims_fit::<I>(dims)?;
        Ok(Coo {
            dims: dims.to_vec(),
            order: format.mode_order().to_vec(),
            coords: Vec::new(),
            vals: Vec::new(),
        })
    }

    /// Adds an entry with mode-space coordinates `c`.
    pub(crate) fn push(&mut self, c: &[usize], v: V) -> Result<(), TensorError> {
        let entry = self.vals.len();
        if c.len() != self.dims.len() {
            return Err(TensorError::EntryRank {
                entry,
                expected: self.dims.len(),
                got: c.len(),
            });
        }
        for (level, &m) in self.order.iter().enumerate() {
            if c[m] >= self.dims[m] {
                return Err(TensorError::CoordOutOfRange {
                    entry,
                    level,
                    coord: c[m],
                    bound: self.dims[m],
                });
            }
            self.coords.push(c[m]);
        }
        self.vals.push(v);
        Ok(())
    }

    /// Sorts the entries into storage order, sums duplicates and packs them.
    pub(crate) fn into_tensor<I: Index>(
        self,
        dims: Vec<usize>,
        format: Format,
    ) -> Result<Tensor<V, I>, TensorError> {
        check_dims_fit::<I>(&dims)?;
        let rank = self.order.len();
        let key = |e: usize| &self.coords[e * rank..(e + 1) * rank];
        let mut perm: Vec<usize> = (0..self.vals.len()).collect();
        perm.sort_by(|&a, &b| key(a).cmp(key(b)));
        let mut packer = Tensor::<V, I>::packer(&dims, &format)?;
        let mut i = 0;
        while i < perm.len() {
            let mut sum = self.vals[perm[i]];
            let mut j = i + 1;
            while j < perm.len() && key(perm[j]) == key(perm[i]) {
                sum += self.vals[perm[j]];
                j += 1;
            }
            packer.push(key(perm[i]), sum).map_err(unwrap_pack)?;
            i = j;
        }
        Tensor::from_packer(dims, format, packer)
    }
}

fn unwrap_pack(e: PackError<std::convert::Infallible>) -> TensorError {
    match e {
        PackError::Tensor(t) => t,
        PackError::Sink(never) => match never {},
    }
}

fn check_rank(dims: &[usize], format: &Format) -> Result<(), TensorError> {
    if dims.len() != format.rank() {
        return Err(TensorError::RankMismatch {
            format: format.rank(),
            dims: dims.to_vec(),
        });
    }
    Ok(())
}

/// Every coordinate (< dim) must be representable in the coordinate type.
pub(crate) fn check_dims_fit<I: Index>(dims: &[usize]) -> Result<(), TensorError> {
    for &d in dims {
        if d > 0 && (d - 1) as u64 > I::MAX_U64 {
            return Err(TensorError::IndexOverflow {
                value: (d - 1) as u64,
                bits: I::BITS,
            });
        }
    }
    Ok(())
}

/// Reserves room for `n` more elements, or says how many bytes could not be had.
fn reserve<T>(v: &mut Vec<T>, n: usize) -> Result<(), TensorError> {
    v.try_reserve_exact(n)
        .map_err(|_| TensorError::OutOfMemory {
            bytes: (n as u128) * std::mem::size_of::<T>() as u128,
        })
}

pub(crate) fn checked_product(dims: &[usize]) -> Result<usize, TensorError> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or(TensorError::TooLarge)
}

#[cfg(test)]
#[path = "tensor_tests.rs"]
pub(crate) mod tests;
