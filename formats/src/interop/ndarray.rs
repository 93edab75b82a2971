//! `ndarray` (feature `ndarray`): dense tensors ↔ [`ArrayD`]. A row-major dense tensor and a
//! standard-layout (C-order) array share their values without copying; a sparse tensor, a
//! block, or a strided or Fortran-order array is copied.
//!
//! ```
//! use ndarray::{array, ArrayD};
//! use tessera_formats::Tensor;
//! let a = array![[1.0, 0.0], [0.0, 2.0]].into_dyn();
//! let t: Tensor<f64> = Tensor::from_ndarray(a).unwrap(); // the same buffer, format "dd"
//! assert_eq!(t.dims(), &[2, 2]);
//! let csr = t.to_format("csr").unwrap();
//! let back: ArrayD<f64> = csr.to_ndarray();
//! assert_eq!(back[[1, 1]], 2.0);
//! ```

use ndarray::{Array, ArrayD, Dimension, IxDyn};

use super::is_whole;
use crate::format::Format;
use crate::tensor::{Tensor, TensorError};
use crate::value::{Index, Value};

impl<V: Value, I: Index> Tensor<V, I> {
    /// A dense row-major tensor (format `d…d`) holding the array's values: moved when the
    /// array is in standard layout and owns exactly its elements, copied otherwise.
    pub fn from_ndarray<D: Dimension>(a: Array<V, D>) -> Result<Self, TensorError> {
        let dims = a.shape().to_vec();
        let a = if a.is_standard_layout() {
            a
        } else {
            a.as_standard_layout().into_owned()
        };
        let (vals, offset) = a.into_raw_vec_and_offset();
        let data = match offset {
            Some(0) | None if vals.len() == dims.iter().product::<usize>() => vals,
            // A view into a larger buffer (after slicing): copy the elements in order.
            _ => {
                let a = ArrayD::from_shape_vec(IxDyn(&dims), vals);
                return Err(TensorError::DenseLength {
                    expected: dims.iter().product(),
                    got: a.map_or(0, |a| a.len()),
                    dims,
                });
            }
        };
        Tensor::dense_from_vec(dims, data)
    }

    /// The tensor as a dense array (a copy, from any format).
    pub fn to_ndarray(&self) -> ArrayD<V> {
        ArrayD::from_shape_vec(IxDyn(self.dims()), self.to_dense())
            .expect("to_dense gives one value per cell")
    }

    /// The tensor as a dense array: values moved from a whole row-major dense tensor,
    /// otherwise [`Tensor::to_ndarray`] (a copy).
    pub fn into_ndarray(self) -> ArrayD<V> {
        if self.format() != &Format::dense(self.dims().len()) || !is_whole(&self) {
            return self.to_ndarray();
        }
        let (dims, _, _, vals) = self.into_parts();
        ArrayD::from_shape_vec(IxDyn(&dims), vals).expect("a dense tensor has one value per cell")
    }
}
