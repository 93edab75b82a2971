//! Shared helpers for the end-to-end tests: random sparse tensors and the oracle on them.

use std::collections::HashMap;
use tessera::{Format, Tensor};
use tessera_compiler::check::{self, Checked, Dims};
use tessera_compiler::oracle::{self, DenseArray};
use tessera_compiler::parse;

/// A small deterministic generator (xorshift), so tests need no extra dependency to make data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A random tensor of the given dims and format: each coordinate holds a value in [-2, 2)
/// with probability `density`.
pub fn random_tensor(rng: &mut Rng, dims: &[usize], format: &Format, density: f64) -> Tensor<f64> {
    let mut entries = Vec::new();
    let total: usize = dims.iter().product();
    for k in 0..total {
        if rng.unit() < density {
            let mut coord = vec![0; dims.len()];
            let mut rest = k;
            for m in (0..dims.len()).rev() {
                coord[m] = rest % dims[m];
                rest /= dims[m];
            }
            entries.push((coord, rng.unit() * 4.0 - 2.0));
        }
    }
    Tensor::from_entries(dims.to_vec(), format.clone(), entries).expect("valid random tensor")
}

/// A tensor as the oracle's dense array.
pub fn dense(t: &Tensor<f64>) -> DenseArray {
    DenseArray::new(t.dims().to_vec(), t.to_dense()).expect("to_dense has the right length")
}

/// Parses and checks a statement in the `tensor!` form (panics on error: test input).
pub fn checked(statement: &str) -> Checked {
    let stmt =
        parse::program(statement, 0).unwrap_or_else(|d| panic!("{statement}: {}", d.plain()));
    check::check(stmt, &Dims::new()).unwrap_or_else(|d| panic!("{statement}: {}", d.plain()))
}

/// The oracle's result for a statement on named tensors.
pub fn oracle(statement: &str, inputs: &[(&str, &Tensor<f64>)]) -> DenseArray {
    let c = checked(statement);
    let map: HashMap<String, DenseArray> = inputs
        .iter()
        .map(|(n, t)| (n.to_string(), dense(t)))
        .collect();
    let init = if c.statement.assignment.accumulate {
        map.get(&c.output().name).cloned()
    } else {
        None
    };
    oracle::evaluate(&c, &map, init.as_ref()).expect("oracle evaluates")
}

/// Asserts two dense arrays are equal up to floating-point reassociation.
pub fn assert_close(got: &DenseArray, want: &DenseArray, what: &str) {
    assert_eq!(got.dims, want.dims, "{what}: dimensions");
    for (k, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        let tol = 1e-9 * (1.0 + w.abs());
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {k}: got {g}, want {w}"
        );
    }
}
