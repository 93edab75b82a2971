//! What the held-out `tensor!` program suites share: a program's shape (a loop whose body
//! switches between two op lists), its vectors, and the comparison — the program run twice on
//! every configured runtime (traces recorded the first time replay the second) must give
//! bitwise what it gave on the plain runtime.

use proptest::prelude::*;
use std::ops::Range;
use tessera::runtime::Runtime;
use tessera::Tensor;

/// A loop of `iterations` over `n`-element tensors on `threads` threads whose body is `a`,
/// or `b` during every other run of `period` iterations (when `b` has ops).
#[derive(Clone, Debug)]
pub struct Program<Op> {
    pub n: usize,
    pub threads: usize,
    pub a: Vec<Op>,
    pub b: Vec<Op>,
    pub iterations: usize,
    pub period: usize,
}

impl<Op> Program<Op> {
    /// The body of iteration `it`.
    pub fn body(&self, it: usize) -> &[Op] {
        if (it / self.period) % 2 == 1 && !self.b.is_empty() {
            &self.b
        } else {
            &self.a
        }
    }
}

/// Programs of the ops `op()` makes: lengths from `n`, thread counts from `threads`, bodies of `a` and `b`
/// ops, iteration counts and periods from their ranges.
pub fn programs<Op: Clone + std::fmt::Debug, S: Strategy<Value = Op>>(
    op: impl Fn() -> S,
    n: impl Strategy<Value = usize>,
    threads: Range<usize>,
    (a, b): (Range<usize>, Range<usize>),
    iterations: Range<usize>,
    period: Range<usize>,
) -> impl Strategy<Value = Program<Op>> {
    (
        n,
        threads,
        proptest::collection::vec(op(), a),
        proptest::collection::vec(op(), b),
        iterations,
        period,
    )
        .prop_map(|(n, threads, a, b, iterations, period)| Program {
            n,
            threads,
            a,
            b,
            iterations,
            period,
        })
}

/// A dense vector of `f(i)` for `i` in `0..n`.
pub fn vector(n: usize, f: impl Fn(usize) -> f64) -> Tensor<f64> {
    Tensor::dense_from_vec(vec![n], (0..n).map(f).collect()).unwrap()
}

/// `t`'s values as bits (results compare bitwise).
pub fn bits(t: &Tensor<f64>) -> Vec<u64> {
    t.vals().iter().map(|v| v.to_bits()).collect()
}

/// Runs `run` twice on each of `configs` and fails, naming the configuration, the round and
/// the first result that differs, unless every run gives `want`.
pub fn same_on_every_runtime<T: PartialEq, E: std::fmt::Display>(
    configs: impl IntoIterator<Item = (&'static str, Runtime)>,
    want: &[T],
    run: impl Fn(&Runtime) -> Result<Vec<T>, E>,
) -> Result<(), TestCaseError> {
    for (name, rt) in configs {
        for round in 0..2 {
            let got = run(&rt).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
            prop_assert!(
                got == want,
                "{} (round {}): {:?}",
                name,
                round,
                got.iter()
                    .zip(want)
                    .position(|(g, w)| g != w)
                    .map(|k| format!("result {k} differs"))
            );
        }
    }
    Ok(())
}
