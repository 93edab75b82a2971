//! `sprs` (feature `sprs`): [`CsMat`] ↔ CSR/CSC tensors without copying, [`TriMat`] ↔
//! tensors through a copy (a triplet matrix is unsorted and may repeat entries).
//!
//! ```
//! use tessera_formats::Tensor;
//! let m = sprs::CsMat::new((2, 3), vec![0, 1, 2], vec![2, 0], vec![5.0, -1.0]);
//! let t: Tensor<f64, u64> = Tensor::from_sprs(m).unwrap(); // the same arrays, CSR
//! assert_eq!(t.to_dense(), [0.0, 0.0, 5.0, -1.0, 0.0, 0.0]);
//! let back = t.into_sprs().unwrap();
//! assert_eq!(back.get(0, 2), Some(&5.0));
//! ```

use sprs::{CsMat, TriMat};

use crate::tensor::{Tensor, TensorError};
use crate::value::{Index, Value};
use crate::IntoFormat;

impl<V: Value, I: Index> Tensor<V, I> {
    /// A CSR (from a CSR matrix) or CSC tensor (from a CSC matrix) holding the matrix's
    /// arrays: moved, not copied, when `I` is as wide as `usize` (`u64`); `u32` coordinates
    /// are a narrowing copy (an error if one does not fit).
    pub fn from_sprs(m: CsMat<V>) -> Result<Self, TensorError> {
        let (by_columns, shape) = (m.is_csc(), m.shape());
        Tensor::from_compressed(shape, m.into_raw_storage(), by_columns)
    }

    /// The matrix as a `sprs` matrix: a CSC tensor becomes a CSC matrix and a CSR tensor a
    /// CSR matrix, arrays moved (copied when `I` is `u32`); any other format is converted to
    /// CSR first (a copy, dropping explicit zeros).
    pub fn into_sprs(self) -> Result<CsMat<V>, TensorError> {
        let by_columns = self.format() == &crate::Format::parse("csc", 2)?;
        let (shape, (pos, crd, vals)) = self.into_compressed(by_columns)?;
        let made = match by_columns {
            true => CsMat::try_new_csc(shape, pos, crd, vals),
            false => CsMat::try_new(shape, pos, crd, vals),
        };
        Ok(made.unwrap_or_else(|e| unreachable!("a valid tensor is a valid matrix: {}", e.3)))
    }

    /// A tensor in `format` from a triplet matrix (a copy; repeated entries are summed, as
    /// `sprs` does when converting).
    pub fn from_sprs_triplets(m: &TriMat<V>, format: impl IntoFormat) -> Result<Self, TensorError> {
        let (rows, cols) = m.shape();
        let triplets = m.triplet_iter().map(|(&v, (i, j))| (i, j, v));
        Tensor::from_triplets(rows, cols, format, triplets)
    }

    /// The stored entries of a matrix as a triplet matrix (a copy).
    pub fn to_sprs_triplets(&self) -> Result<TriMat<V>, TensorError> {
        let (rows, cols, vals) = self.to_triplets()?;
        Ok(TriMat::from_triplets(
            (self.dims()[0], self.dims()[1]),
            rows,
            cols,
            vals,
        ))
    }
}
