use tessera::plans::Stored;
use tessera::runtime::Runtime;
use tessera::tensor;

#[allow(non_snake_case, dead_code)]
fn spmv(rt: &Runtime, A: &Stored<f64>, x: &Stored<f64>) {
    let _ = tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 2); split(ii, a, b, 2));
}

fn main() {}
