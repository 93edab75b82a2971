//! The `tensor!` facade misused at run time: each input that once panicked, hung or gave a
//! wrong value, now an error that names the tensor.
#![allow(non_snake_case)]

use tessera::plans::{PlanRunError, Stored};
use tessera::runtime::Runtime;
use tessera::{tensor, BindError, Tensor};

/// A sparse vector of dimension `n` with one entry.
fn long_sparse(n: usize, at: usize) -> Tensor<f64, u64> {
    Tensor::from_entries(vec![n], "s", [(vec![at], 1.0)]).unwrap()
}

/// The dense outer product of two long sparse vectors has 2^80 cells: the kernel's
/// allocation overflowed and panicked ("output dimensions fit in memory").
#[test]
fn a_dense_output_too_large_to_allocate_is_an_error_naming_it() {
    let (a, b) = (long_sparse(1 << 40, 1), long_sparse(1 << 40, 2));
    let err = tensor!(C(i,j) = a(i) * b(j); a: s; b: s).unwrap_err();
    assert_eq!(
        err,
        BindError::TooLarge {
            tensor: "C".into(),
            dims: vec![1 << 40, 1 << 40]
        }
    );
    assert!(
        err.to_string()
            .contains("`C` a compressed format, e.g. `ss`"),
        "{err}"
    );
    // Stored compressed, the same product is one entry.
    let C = tensor!(C(i,j) = a(i) * b(j); a: s; b: s; C: ss).unwrap();
    assert_eq!((C.nnz(), C.entries().next()), (1, Some((vec![1, 2], 1.0))));
}

/// One dense level of 2^62 values: the allocation's byte count overflows (it panicked with
/// "capacity overflow").
#[test]
fn a_dense_vector_longer_than_memory_is_an_error() {
    let a = long_sparse(1 << 62, 3);
    let err = tensor!(y(i) = a(i) * 2; a: s).unwrap_err();
    assert!(
        matches!(&err, BindError::TooLarge { tensor, .. } if tensor == "y"),
        "{err}"
    );
    let y = tensor!(y(i) = a(i) * 2; a: s; y: s).unwrap();
    assert_eq!(y.entries().collect::<Vec<_>>(), vec![(vec![3], 2.0)]);
}

/// On the runtime the plan's output layout multiplied the dimensions unchecked ("attempt to
/// multiply with overflow").
#[test]
fn a_dense_output_too_large_on_the_runtime_is_an_error() {
    let rt = Runtime::new(2);
    let a = Stored::upload(&rt, &long_sparse(1 << 40, 1)).unwrap();
    let Err(err) = tensor!(rt => C(i,j) = a(i) * a(j); a: s; split(i, io, ii, 4)) else {
        panic!("a dense output of 2^80 cells was accepted");
    };
    assert!(
        matches!(&err, PlanRunError::Bind(BindError::TooLarge { tensor, .. }) if tensor == "C"),
        "{err}"
    );
}

/// `docs/language.md` lists `.5` among the constants; Rust splits it into `.` and `5`, and the
/// macro refused it ("unexpected character `.`").
#[test]
fn a_constant_written_without_its_leading_zero_is_a_number() {
    let x: Tensor<f64> = Tensor::dense_from_vec(vec![2], vec![1.0, -4.0]).unwrap();
    let y = tensor!(y(i) = x(i) * .5 + .25e1).unwrap();
    assert_eq!(y.vals(), &[3.0, 0.5]);
}

/// What the error of `tests/ui/read_in_two_mode_orders.rs` says to do: the transposed use
/// reads a second tensor holding the same values by columns.
#[test]
fn a_tensor_read_in_both_mode_orders_works_as_the_error_advises() {
    let A: Tensor<f64> =
        Tensor::from_entries(vec![2, 2], "csr", [(vec![0, 1], 1.0), (vec![1, 1], 2.0)]).unwrap();
    let At = A.to_format("csc").unwrap();
    let C = tensor!(C(i,j) = A(i,j) + At(j,i); A: csr; At: csc).unwrap();
    assert_eq!(C.to_dense(), vec![0.0, 1.0, 1.0, 4.0]);
}

/// A function generic over the tensors it runs on the runtime needs `Stored`'s bounds, which
/// the facade did not export (only `tessera::__private` had them).
fn doubled<V: tessera::plans::PlanValue, I: tessera::plans::PlanIndex>(
    rt: &Runtime,
    x: &Stored<V, I>,
) -> Result<Stored<V, I>, PlanRunError> {
    tensor!(rt => y(i) = x(i) + x(i))
}

#[test]
fn a_generic_function_over_stored_tensors_names_its_bounds_from_the_facade() {
    let rt = Runtime::new(2);
    let x = Tensor::<f64>::dense_from_vec(vec![2], vec![1.5, -2.0]).unwrap();
    let y = doubled(&rt, &Stored::upload(&rt, &x).unwrap()).unwrap();
    assert_eq!(y.to_tensor(&rt).unwrap().vals(), &[3.0, -4.0]);
    // The same call site over f32 values with 64-bit coordinates.
    let x = Tensor::<f32, u64>::dense_from_vec(vec![2], vec![0.25, 4.0]).unwrap();
    let y = doubled(&rt, &Stored::upload(&rt, &x).unwrap()).unwrap();
    assert_eq!(y.to_tensor(&rt).unwrap().vals(), &[0.5, 8.0]);
}

/// Dense levels below a compressed one hold their values per stored entry: `C: sd` with
/// 2^62 columns panicked with "capacity overflow" at the first row.
#[test]
fn dense_levels_below_a_compressed_one_too_large_are_an_error() {
    let (a, b) = (long_sparse(4, 1), long_sparse(1 << 62, 2));
    let err = tensor!(C(i,j) = a(i) * b(j); a: s; b: s; C: sd).unwrap_err();
    assert!(
        matches!(&err, BindError::TooLarge { tensor, .. } if tensor == "C"),
        "{err}"
    );
}

/// A `macro_rules!` fragment is one operand in Rust; the macro flattened it, so
/// `$e * 2` with `$e` = `a(i) + b(i)` computed `a(i) + b(i) * 2` (21 instead of 22).
macro_rules! doubled_sum {
    ($e:expr) => {
        tensor!(y(i) = $e * 2)
    };
}
macro_rules! negated {
    ($e:expr) => {
        tensor!(y(i) = -$e)
    };
}
/// A name passed as a fragment still names the tensor.
macro_rules! halved {
    ($t:expr) => {
        tensor!(y(i) = $t(i) / 2)
    };
}

#[test]
fn a_macro_rules_expression_fragment_keeps_its_grouping() {
    let a: Tensor<f64> = Tensor::dense_from_vec(vec![2], vec![1.0, 2.0]).unwrap();
    let b: Tensor<f64> = Tensor::dense_from_vec(vec![2], vec![10.0, 20.0]).unwrap();
    assert_eq!(doubled_sum!(a(i) + b(i)).unwrap().vals(), &[22.0, 44.0]);
    assert_eq!(negated!(a(i) - b(i)).unwrap().vals(), &[9.0, 18.0]);
    assert_eq!(halved!(b).unwrap().vals(), &[5.0, 10.0]);
}

/// An operand of another runtime is an error naming it and quoting the statement as written
/// (it was quoted with a space between every two tokens: `y ( i ) = A ( i , j ) ...`).
#[test]
fn an_operand_of_another_runtime_is_named_in_the_statement_as_written() {
    let (rt, other) = (Runtime::new(2), Runtime::new(1));
    let a = Tensor::<f64>::from_entries(vec![2, 2], "csr", [(vec![0, 1], 2.0)]).unwrap();
    let A = Stored::upload(&rt, &a).unwrap();
    let x = Tensor::<f64>::dense_from_vec(vec![2], vec![1.0, 3.0]).unwrap();
    let x = Stored::upload(&other, &x).unwrap();
    let y = Stored::upload(
        &rt,
        &Tensor::<f64>::dense_from_vec(vec![2], vec![0.0; 2]).unwrap(),
    );
    let y = y.unwrap();
    let Err(err) = tensor!(rt => y(i) += A(i,j) * x(j) * -.5; A: csr; split(i, io, ii, 4)) else {
        panic!("an operand of another runtime was accepted");
    };
    assert_eq!(
        err.to_string(),
        "`y(i) += A(i, j) * x(j) * -.5; A: csr; split(i, io, ii, 4)`: operand `x` belongs to \
         another runtime; read it there with `to_tensor` and `Stored::upload` it to this one"
    );
}

/// SpGEMM keeps a dense workspace over the output's columns, and a transposition counts
/// coordinates per row: over 2^62 columns both panicked with "capacity overflow". Now an
/// error naming the index; a statement that keeps no such array still runs over them.
#[test]
fn an_index_too_long_for_the_kernel_s_dense_array_is_an_error_naming_it() {
    let n = 1usize << 62;
    let A: Tensor<f64, u64> = Tensor::from_entries(vec![3, 3], "csr", [(vec![0, 1], 2.0)]).unwrap();
    let B: Tensor<f64, u64> = Tensor::from_entries(vec![3, n], "csr", [(vec![1, 5], 3.0)]).unwrap();
    let err = tensor!(C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; C: csr).unwrap_err();
    assert_eq!(
        err,
        BindError::Extent {
            var: "j".into(),
            dim: n
        }
    );
    assert!(
        err.to_string().starts_with("index `j` ranges over"),
        "{err}"
    );
    let T: Tensor<f64, u64> =
        Tensor::from_entries(vec![n, 3], "dcsr", [(vec![5, 1], 3.0)]).unwrap();
    let err = tensor!(C(j,i) = T(i,j); T: dcsr; C: dcsr).unwrap_err();
    assert!(
        matches!(err, BindError::Extent { dim, .. } if dim == n),
        "{err}"
    );
    let C = tensor!(C(i,j) = B(i,j) + B(i,j); B: csr; C: csr).unwrap();
    assert_eq!(C.entries().collect::<Vec<_>>(), vec![(vec![1, 5], 6.0)]);
    // Small dimensions are untouched by the check.
    let B: Tensor<f64, u64> = Tensor::from_entries(vec![3, 7], "csr", [(vec![1, 5], 3.0)]).unwrap();
    let C = tensor!(C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; C: csr).unwrap();
    assert_eq!(C.entries().collect::<Vec<_>>(), vec![(vec![0, 5], 6.0)]);
}
