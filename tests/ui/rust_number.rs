use tessera::Tensor;
use tessera::tensor;

// Rust numbers the statement language does not read: the error said "unexpected `f32`" and
// advised multiplying with `*`.
fn main() {
    let x: Tensor<f32> = Tensor::dense_from_vec(vec![1], vec![1.0]).unwrap();
    let _ = tensor!(y(i) = x(i) * 2.0f32);
    let _ = tensor!(y(i) = x(i) * 1_000);
    let _ = tensor!(y(i) = x(i) * 0x10);
}
