use tessera::Tensor;
use tessera::tensor;

// A constant that overflows f64 is a compile error at the literal, not a panic in the macro.
#[allow(non_snake_case)]
fn main() {
    let A: Tensor<f64> = Tensor::dense_from_vec(vec![1, 1], vec![1.0]).unwrap();
    let x: Tensor<f64> = Tensor::dense_from_vec(vec![1], vec![1.0]).unwrap();
    let _ = tensor!(y(i) = 1e999 * A(i,j) * x(j));
}
