use tessera::Tensor;
use tessera::tensor;

// `A` read as `A(i,j)` and as `A(j,i)`: no one format of `A` serves both uses. The hint said
// to store `A` with mode order 0,1 (`A: ds:0,1`), which is what `csr` already is.
#[allow(non_snake_case)]
fn main() {
    let A: Tensor<f64> = Tensor::from_entries(vec![2, 2], "csr", [(vec![0, 1], 1.0)]).unwrap();
    let _ = tensor!(C(i,j) = A(i,j) + A(j,i); A: csr);
}
