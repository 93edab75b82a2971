//! Round trips of every conversion on random matrices of every format (and random dense
//! tensors for ndarray), checking values, dimensions and, where the layouts agree, that the
//! arrays were moved rather than copied.
#![allow(unused_imports)]

use super::*;
use crate::tensor::tests::{format_of, tensor_case};
use proptest::prelude::*;

/// Random matrices (any format, explicit zeros possible in dense levels).
fn matrix() -> impl Strategy<Value = Tensor<f64, u64>> {
    tensor_case()
        .prop_filter("matrices", |c| c.0.len() == 2)
        .prop_map(|(dims, format, entries)| Tensor::from_entries(dims, format, entries).unwrap())
}

/// The same values, dimensions and format.
fn same_matrix(a: &Tensor<f64, u64>, b: &Tensor<f64, u64>) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.dims(), b.dims());
    prop_assert_eq!(a.to_dense(), b.to_dense());
    Ok(())
}

fn vals_ptr(t: &Tensor<f64, u64>) -> *const f64 {
    t.vals().as_ptr()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[cfg(feature = "sprs")]
    #[test]
    fn sprs_round_trips(t in matrix()) {
        let csr = t.to_format("csr").unwrap();
        let moved = csr.clone();
        let ptr = vals_ptr(&moved);
        let m = moved.into_sprs().unwrap();
        prop_assert!(m.is_csr());
        prop_assert_eq!(m.data().as_ptr(), ptr, "moved, not copied");
        let back: Tensor<f64, u64> = Tensor::from_sprs(m).unwrap();
        prop_assert_eq!(vals_ptr(&back), ptr);
        prop_assert_eq!(&back, &csr);
        let csc: Tensor<f64, u64> = Tensor::from_sprs(t.clone().into_sprs().unwrap().to_csc()).unwrap();
        same_matrix(&csc, &t)?;
        let narrow: Tensor<f64, u32> = Tensor::from_sprs(t.clone().into_sprs().unwrap()).unwrap();
        prop_assert_eq!(narrow.to_dense(), t.to_dense());
        let tri = t.to_sprs_triplets().unwrap();
        same_matrix(&Tensor::from_sprs_triplets(&tri, "dcsr").unwrap(), &t)?;
    }

    #[cfg(feature = "nalgebra")]
    #[test]
    fn nalgebra_round_trips(t in matrix()) {
        for by_columns in [false, true] {
            let own = t.to_format(if by_columns { "csc" } else { "csr" }).unwrap();
            let moved = own.clone();
            let ptr = vals_ptr(&moved);
            let back: Tensor<f64, u64> = if by_columns {
                let m = moved.into_nalgebra_csc().unwrap();
                prop_assert_eq!(m.values().as_ptr(), ptr, "moved, not copied");
                Tensor::from_nalgebra_csc(m).unwrap()
            } else {
                let m = moved.into_nalgebra_csr().unwrap();
                prop_assert_eq!(m.values().as_ptr(), ptr, "moved, not copied");
                Tensor::from_nalgebra_csr(m).unwrap()
            };
            prop_assert_eq!(vals_ptr(&back), ptr);
            prop_assert_eq!(&back, &own);
        }
        let coo = t.to_nalgebra_coo().unwrap();
        prop_assert_eq!(coo.nnz(), t.nnz());
        same_matrix(&Tensor::from_nalgebra_coo(&coo, "ds:1,0").unwrap(), &t)?;
        // Any format converts (a copy).
        same_matrix(&Tensor::from_nalgebra_csr(t.clone().into_nalgebra_csr().unwrap()).unwrap(), &t)?;
    }

    #[cfg(feature = "faer")]
    #[test]
    fn faer_round_trips(t in matrix()) {
        let csc = t.to_format("csc").unwrap();
        let moved = csc.clone();
        let ptr = vals_ptr(&moved);
        let m = moved.into_faer().unwrap();
        prop_assert_eq!(m.val().as_ptr(), ptr, "moved, not copied");
        let back: Tensor<f64, u64> = Tensor::from_faer(m).unwrap();
        prop_assert_eq!(vals_ptr(&back), ptr);
        prop_assert_eq!(&back, &csc);
        same_matrix(&Tensor::from_faer(t.clone().into_faer().unwrap()).unwrap(), &t)?;
    }

    #[cfg(feature = "ndarray")]
    #[test]
    fn ndarray_round_trips((dims, format, entries) in tensor_case()) {
        let t: Tensor<f64, u64> = Tensor::from_entries(dims.clone(), format, entries).unwrap();
        let a = t.to_ndarray();
        prop_assert_eq!(a.shape(), &dims[..]);
        let dense: Tensor<f64, u64> = Tensor::from_ndarray(a).unwrap();
        prop_assert_eq!(dense.format(), &Format::dense(dims.len()));
        prop_assert_eq!(dense.to_dense(), t.to_dense());
        let ptr = vals_ptr(&dense);
        let a = dense.into_ndarray();
        prop_assert_eq!(a.as_ptr(), ptr, "moved, not copied");
        if dims.len() >= 2 {
            // A transposed (Fortran-order) array is copied into row-major order.
            let t2: Tensor<f64, u64> = Tensor::from_ndarray(a.clone().reversed_axes()).unwrap();
            let want = a.reversed_axes().as_standard_layout().iter().copied().collect::<Vec<_>>();
            prop_assert_eq!(t2.vals(), &want[..]);
        }
    }
}

#[cfg(any(feature = "sprs", feature = "nalgebra"))]
#[test]
fn conversions_of_tensors_that_are_not_matrices_are_errors() {
    let t: Tensor<f64> =
        Tensor::from_entries(vec![2, 2, 2], "sss", [(vec![1, 0, 1], 1.0)]).unwrap();
    #[cfg(feature = "sprs")]
    assert!(matches!(
        t.clone().into_sprs(),
        Err(TensorError::RankMismatch { .. })
    ));
    #[cfg(feature = "nalgebra")]
    assert!(matches!(
        t.to_nalgebra_coo(),
        Err(TensorError::RankMismatch { .. })
    ));
}
