//! Conversions between [`Tensor`] and the matrix and array types of other crates, one module
//! per crate, each behind the cargo feature of that name (`sprs`, `nalgebra`, `faer`,
//! `ndarray`).
//!
//! A conversion moves the arrays without copying them when the layouts agree: a CSR or CSC
//! tensor and a compressed sparse matrix of the same orientation, a row-major dense tensor and
//! a standard-layout array, coordinates of the same width (Tessera's `u64` and the `usize`
//! the other crates use are the same on 64-bit machines; `u32` coordinates are widened, a
//! copy). Incoming arrays are validated (`O(nnz)` reads, no copy). Where the layouts do not
//! agree (another format, a COO matrix, a strided array) the conversion copies, and says so
//! in its documentation.

#[cfg(feature = "faer")]
mod faer;
#[cfg(feature = "nalgebra")]
mod nalgebra;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(feature = "sprs")]
mod sprs;

use crate::format::Format;
use crate::tensor::{Level, Tensor, TensorError};
use crate::value::{Index, Value};

/// Coordinates as the `usize` the other crates use: the same allocation when `I` is as wide
/// as `usize` (`u64` on 64-bit machines), else a copy.
pub(crate) fn to_usize<I: Index>(v: Vec<I>) -> Vec<usize> {
    match bytemuck::allocation::try_cast_vec::<I, usize>(v) {
        Ok(same) => same,
        Err((_, v)) => v.into_iter().map(I::to_usize).collect(),
    }
}

/// `usize` coordinates as `I`: the same allocation when `I` is as wide as `usize`, else a
/// copy; an error when a value does not fit.
pub(crate) fn from_usize<I: Index>(v: Vec<usize>) -> Result<Vec<I>, TensorError> {
    let v = match bytemuck::allocation::try_cast_vec::<usize, I>(v) {
        Ok(same) => return Ok(same),
        Err((_, v)) => v,
    };
    v.into_iter()
        .map(|x| {
            I::try_from_usize(x).ok_or(TensorError::IndexOverflow {
                value: x as u64,
                bits: I::BITS,
            })
        })
        .collect()
}

/// Three arrays of a matrix: a compressed one's outer positions, inner coordinates and
/// values, or a triplet list's rows, columns and values.
pub(crate) type Arrays<V> = (Vec<usize>, Vec<usize>, Vec<V>);

/// `csr` (rows outer) or `csc` (columns outer).
fn matrix_format(by_columns: bool) -> Format {
    let name = if by_columns { "csc" } else { "csr" };
    Format::parse(name, 2).expect("a named matrix format")
}

impl<V: Value, I: Index> Tensor<V, I> {
    /// A CSR (`by_columns` false) or CSC matrix from its arrays, validated, not copied when
    /// `J` and `I` have the same width.
    pub(crate) fn from_compressed(
        (rows, cols): (usize, usize),
        (pos, crd, vals): Arrays<V>,
        by_columns: bool,
    ) -> Result<Self, TensorError> {
        let outer = if by_columns { cols } else { rows };
        let levels = vec![
            Level::Dense {
                size: outer,
                offset: 0,
            },
            Level::Compressed {
                pos: from_usize(pos)?,
                crd: from_usize(crd)?,
            },
        ];
        Tensor::from_parts(vec![rows, cols], matrix_format(by_columns), levels, vals)
    }

    /// The matrix's CSR (`by_columns` false) or CSC arrays: moved out when the tensor is
    /// stored that way, else converted first (a copy, dropping explicit zeros).
    pub(crate) fn into_compressed(
        self,
        by_columns: bool,
    ) -> Result<((usize, usize), Arrays<V>), TensorError> {
        let format = matrix_format(by_columns);
        let t = if self.format() == &format && is_whole(&self) {
            self
        } else {
            self.to_format(format)?
        };
        let (dims, _, mut levels, vals) = t.into_parts();
        let Some(Level::Compressed { pos, crd }) = levels.pop() else {
            unreachable!("csr and csc end in a compressed level")
        };
        Ok(((dims[0], dims[1]), (to_usize(pos), to_usize(crd), vals)))
    }

    /// A matrix from `(row, column, value)` triplets in any order, duplicates summed (a copy).
    pub(crate) fn from_triplets(
        rows: usize,
        cols: usize,
        format: impl crate::IntoFormat,
        triplets: impl IntoIterator<Item = (usize, usize, V)>,
    ) -> Result<Self, TensorError> {
        let entries = triplets.into_iter().map(|(i, j, v)| (vec![i, j], v));
        Tensor::from_entries(vec![rows, cols], format, entries)
    }

    /// The stored entries of a matrix as `(rows, columns, values)` arrays, in storage order.
    pub(crate) fn to_triplets(&self) -> Result<Arrays<V>, TensorError> {
        if self.dims().len() != 2 {
            return Err(TensorError::RankMismatch {
                format: 2,
                dims: self.dims().to_vec(),
            });
        }
        let mut out = (Vec::new(), Vec::new(), Vec::new());
        for (c, v) in self.entries() {
            out.0.push(c[0]);
            out.1.push(c[1]);
            out.2.push(v);
        }
        Ok(out)
    }
}

/// True when every dense level covers its whole mode (a tensor, not a block of one).
pub(crate) fn is_whole<V: Value, I: Index>(t: &Tensor<V, I>) -> bool {
    t.levels()
        .iter()
        .zip(t.format().mode_order())
        .all(|(l, &m)| match l {
            Level::Dense { size, offset } => *offset == 0 && *size == t.dims()[m],
            Level::Compressed { .. } | Level::Singleton { .. } => true,
        })
}

#[cfg(test)]
mod tests;
