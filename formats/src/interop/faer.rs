//! `faer` (feature `faer`): [`SparseColMat`] ↔ CSC tensors without copying. A matrix with
//! unsorted or uncompressed columns (which faer allows) is sorted into a copy.
//!
//! ```
//! use faer::sparse::{SparseColMat, SymbolicSparseColMat};
//! use tessera_formats::Tensor;
//! let s = SymbolicSparseColMat::new_checked(2, 3, vec![0usize, 1, 1, 2], None, vec![1, 0]);
//! let m = SparseColMat::new(s, vec![-1.0, 5.0]);
//! let t: Tensor<f64, u64> = Tensor::from_faer(m).unwrap(); // the same arrays, CSC
//! assert_eq!(t.to_dense(), [0.0, 0.0, 5.0, -1.0, 0.0, 0.0]);
//! let back = t.into_faer().unwrap();
//! assert_eq!(back.val(), &[-1.0, 5.0]);
//! ```

use faer::sparse::{SparseColMat, SymbolicSparseColMat};

use crate::tensor::{Tensor, TensorError};
use crate::value::{Index, Value};

impl<V: Value, I: Index> Tensor<V, I> {
    /// A CSC tensor holding the matrix's arrays: moved, not copied, when `I` is as wide as
    /// `usize` (`u64`) and the columns are compressed and sorted; otherwise a copy (repeated
    /// row indices are summed).
    pub fn from_faer(m: SparseColMat<usize, V>) -> Result<Self, TensorError> {
        let (rows, cols) = (m.nrows(), m.ncols());
        if m.symbolic().col_nnz().is_some() || !sorted_columns(&m) {
            let triplets = m.triplet_iter().map(|t| (t.row, t.col, *t.val));
            return Tensor::from_triplets(rows, cols, "csc", triplets);
        }
        let (symbolic, vals) = m.into_parts();
        let (_, _, pos, _, crd) = symbolic.into_parts();
        Tensor::from_compressed((rows, cols), (pos, crd, vals), true)
    }

    /// The matrix as a faer `SparseColMat`: arrays moved from a CSC tensor with `u64`
    /// coordinates, otherwise converted (a copy; another format also drops explicit zeros).
    pub fn into_faer(self) -> Result<SparseColMat<usize, V>, TensorError> {
        let ((rows, cols), (pos, crd, vals)) = self.into_compressed(true)?;
        let symbolic = SymbolicSparseColMat::new_checked(rows, cols, pos, None, crd);
        Ok(SparseColMat::new(symbolic, vals))
    }
}

/// True when every column's row indices are strictly increasing.
fn sorted_columns<V>(m: &SparseColMat<usize, V>) -> bool {
    let s = m.symbolic();
    let (pos, crd) = (s.col_ptr(), s.row_idx());
    pos.windows(2)
        .all(|w| crd[w[0]..w[1]].windows(2).all(|p| p[0] < p[1]))
}
