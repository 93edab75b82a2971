use tessera::Tensor;
use tessera::tensor;

// A `min` reduction's missing entries are +∞, `i64::MAX` in `i64`: relaxing from an
// unreached node (`d(i) = i64::MAX`) overflowed, a panic in debug builds and a negative
// distance in release. A type error at the reduction, as `tessera run --type i64` refuses it.
#[allow(non_snake_case)]
fn main() {
    let W: Tensor<i64> = Tensor::from_entries(vec![2, 2], "csr", [(vec![0, 1], 1)]).unwrap();
    let d: Tensor<i64> = Tensor::dense_from_vec(vec![2], vec![0, i64::MAX]).unwrap();
    let _ = tensor!(e(j) = min[i](d(i) + W(i,j)); W: csr);
}
