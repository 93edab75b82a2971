use tessera::Tensor;
use tessera::tensor;

// `0.5` in `i64` was truncated to 0: the statement gave zeros. A type error at the constant,
// as `tessera run --type i64` refuses it; integer constants stay fine.
fn main() {
    let x: Tensor<i64> = Tensor::dense_from_vec(vec![2], vec![4, 6]).unwrap();
    let _ = tensor!(y(i) = x(i) * 0.5);
    let _ = tensor!(y(i) = x(i) * 2 + 1e3);
}
