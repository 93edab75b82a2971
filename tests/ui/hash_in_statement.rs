use tessera::Tensor;
use tessera::tensor;

// `#` starts a comment in the statement language, and the macro's tokens are one line: the
// rest of the statement (here `* 2` and the format of `A`) was silently dropped.
#[allow(non_snake_case)]
fn main() {
    let A: Tensor<f64> = Tensor::dense_from_vec(vec![1, 1], vec![1.0]).unwrap();
    let x: Tensor<f64> = Tensor::dense_from_vec(vec![1], vec![1.0]).unwrap();
    let _ = tensor!(y(i) = A(i,j) * x(j) # * 2
        ; A: csr);
    // A raw identifier holds one too.
    let _ = tensor!(y(i) = A(i,j) * r#x(j));
}
