// Every tensor of one `tensor!` statement has the same value type: an f64 vector beside an
// f32 matrix is a type error at the vector, not a conversion.
use tessera::tensor;
use tessera::Tensor;

#[allow(non_snake_case)]
fn main() {
    let A: Tensor<f32> = Tensor::dense_from_vec(vec![1, 1], vec![1.0]).unwrap();
    let x: Tensor<f64> = Tensor::dense_from_vec(vec![1], vec![1.0]).unwrap();
    let _ = tensor!(y(i) = A(i,j) * x(j));
}
