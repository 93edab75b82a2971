use tessera::Tensor;
use tessera::tensor;

#[allow(non_snake_case)]
fn main() {
    let A: Tensor<f64> = Tensor::dense_from_vec(vec![1, 1], vec![1.0]).unwrap();
    let x: Tensor<f64> = Tensor::dense_from_vec(vec![1], vec![1.0]).unwrap();
    let _ = tensor!(y(i) = A(i,j) * x(j); A: csr; parallelize(j));
}
