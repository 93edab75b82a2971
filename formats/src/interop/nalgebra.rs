//! `nalgebra-sparse` (feature `nalgebra`): [`CsrMatrix`] ↔ CSR and [`CscMatrix`] ↔ CSC
//! tensors without copying; [`CooMatrix`] ↔ tensors through a copy (COO is unsorted and may
//! repeat entries).
//!
//! ```
//! use nalgebra_sparse::CsrMatrix;
//! use tessera_formats::Tensor;
//! let m = CsrMatrix::try_from_csr_data(2, 3, vec![0, 1, 2], vec![2, 0], vec![5.0, -1.0]).unwrap();
//! let t: Tensor<f64, u64> = Tensor::from_nalgebra_csr(m).unwrap(); // the same arrays
//! assert_eq!(t.to_dense(), [0.0, 0.0, 5.0, -1.0, 0.0, 0.0]);
//! let csc = t.into_nalgebra_csc().unwrap(); // converted: the tensor was CSR
//! assert_eq!(csc.col_offsets(), &[0, 1, 1, 2]);
//! ```

use nalgebra_sparse::{CooMatrix, CscMatrix, CsrMatrix};

use crate::tensor::{Tensor, TensorError};
use crate::value::{Index, Value};
use crate::IntoFormat;

impl<V: Value, I: Index> Tensor<V, I> {
    /// A CSR tensor holding the matrix's arrays: moved, not copied, when `I` is as wide as
    /// `usize` (`u64`); `u32` coordinates are a narrowing copy.
    pub fn from_nalgebra_csr(m: CsrMatrix<V>) -> Result<Self, TensorError> {
        Tensor::from_compressed((m.nrows(), m.ncols()), m.disassemble(), false)
    }

    /// A CSC tensor holding the matrix's arrays (moved when `I` is `u64`).
    pub fn from_nalgebra_csc(m: CscMatrix<V>) -> Result<Self, TensorError> {
        Tensor::from_compressed((m.nrows(), m.ncols()), m.disassemble(), true)
    }

    /// A tensor in `format` from a COO matrix (a copy; repeated entries are summed).
    pub fn from_nalgebra_coo(
        m: &CooMatrix<V>,
        format: impl IntoFormat,
    ) -> Result<Self, TensorError> {
        let triplets = m.triplet_iter().map(|(i, j, &v)| (i, j, v));
        Tensor::from_triplets(m.nrows(), m.ncols(), format, triplets)
    }

    /// The matrix as a `CsrMatrix`: arrays moved from a CSR tensor with `u64` coordinates,
    /// otherwise converted (a copy; another format also drops explicit zeros).
    pub fn into_nalgebra_csr(self) -> Result<CsrMatrix<V>, TensorError> {
        let ((rows, cols), (pos, crd, vals)) = self.into_compressed(false)?;
        let made = CsrMatrix::try_from_csr_data(rows, cols, pos, crd, vals);
        Ok(made.unwrap_or_else(|e| unreachable!("a valid tensor is a valid matrix: {e}")))
    }

    /// The matrix as a `CscMatrix` (arrays moved from a CSC tensor with `u64` coordinates).
    pub fn into_nalgebra_csc(self) -> Result<CscMatrix<V>, TensorError> {
        let ((rows, cols), (pos, crd, vals)) = self.into_compressed(true)?;
        let made = CscMatrix::try_from_csc_data(rows, cols, pos, crd, vals);
        Ok(made.unwrap_or_else(|e| unreachable!("a valid tensor is a valid matrix: {e}")))
    }

    /// The stored entries of a matrix as a COO matrix (a copy).
    pub fn to_nalgebra_coo(&self) -> Result<CooMatrix<V>, TensorError> {
        let (rows, cols, vals) = self.to_triplets()?;
        let made = CooMatrix::try_from_triplets(self.dims()[0], self.dims()[1], rows, cols, vals);
        Ok(made.unwrap_or_else(|e| unreachable!("stored entries are in range: {e}")))
    }
}
