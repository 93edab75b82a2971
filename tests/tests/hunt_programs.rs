//! Adversarial hunt, `tensor!(rt => ...)` programs: what `heldout_programs.rs` does not
//! generate. Sparse operands in CSC, DCSR and COO (tensor blocks, not images), sparse
//! *outputs* (a CSR result of one statement read by the next), 2-d dense results (element-wise
//! and a sparse-plus-dense union), a reduction split on the reduced variable (a loop of
//! dependent launches folding into the output), dense matrix-vector products, dot products
//! used by the next statement, and a loop whose body changes every few iterations, at 1 to 4
//! threads. Every configuration (fixed windows of 3 and 7, an adaptive window, tracing with and
//! without actors, tracing without fusion) must give bitwise the stores of the unfused,
//! untraced runtime on the same threads, twice on one runtime (the second run replays).
#![allow(non_snake_case)]

#[path = "common/held_out.rs"]
mod held_out;

use held_out::{bits, programs, same_on_every_runtime, vector};
use proptest::prelude::*;
use tessera::plans::Stored;
use tessera::runtime::Runtime;
use tessera::{tensor, Tensor};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Clone, Copy, Debug)]
enum Op {
    /// `q = Ac x` (CSC, split rows), `y = q * 1e-3 + y`
    Csc,
    /// `q = Ad x` (DCSR), `z = q * 1e-3 - z`
    Dcsr,
    /// `q = Ao y` (COO), `x = q * 1e-3 + x`
    Coo,
    /// `C = A .* x(j)` (CSR output), then `y = C z * 1e-3 + y`
    SparseOut,
    /// `M = M * 0.5 + N` (2-d, element-wise)
    Dense2d,
    /// `N = A + M` (CSR plus dense, 2-d dense output)
    Union,
    /// `q = M x` (dense), `z = q * 1e-2 + z`
    DenseMv,
    /// `y = A x + z` split on `j` (dependent launches folding into `y`)
    SplitJ,
    /// `s = x·z`, `x = x / (1 + |s|)`
    Dot,
    /// `x = x * 0.5 + y` (element-wise)
    Axpy,
    /// swap `x` and `z`
    Swap,
    /// `x` rebound to a fresh upload
    Fresh,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Csc),
        2 => Just(Op::Dcsr),
        2 => Just(Op::Coo),
        2 => Just(Op::SparseOut),
        1 => Just(Op::Dense2d),
        1 => Just(Op::Union),
        1 => Just(Op::DenseMv),
        2 => Just(Op::SplitJ),
        2 => Just(Op::Dot),
        2 => Just(Op::Axpy),
        1 => Just(Op::Swap),
        1 => Just(Op::Fresh),
    ]
}

type Program = held_out::Program<Op>;

fn program() -> impl Strategy<Value = Program> {
    programs(
        op,
        prop_oneof![4 => 1usize..12, 1 => 60usize..70],
        1usize..5,
        (1..5, 0..4),
        3usize..7,
        1usize..3,
    )
}

/// An `n x n` matrix in `format` with 1 to 3 entries a row.
fn matrix(n: usize, k: usize, format: &str) -> Tensor<f64> {
    let mut seen = std::collections::HashSet::new();
    let entries: Vec<_> = (0..n)
        .flat_map(|i| {
            [
                (vec![i, (i + k) % n], 1.5 + (i % 4) as f64),
                (vec![i, (i * 5 + 2 + k) % n], -0.5),
                (vec![(i * 3 + k) % n, i], 0.25),
            ]
        })
        .filter(|(c, _)| seen.insert(c.clone()))
        .collect();
    Tensor::from_entries(vec![n, n], format, entries).unwrap()
}

fn dense2(n: usize, f: impl Fn(usize) -> f64) -> Tensor<f64> {
    Tensor::dense_from_vec(vec![n, n], (0..n * n).map(f).collect()).unwrap()
}

fn run(p: &Program, rt: &Runtime) -> Res<Vec<Vec<u64>>> {
    let n = p.n;
    let up = |t: &Tensor<f64>| Stored::upload(rt, t);
    let mut x = up(&vector(n, |i| 1.0 + (i % 13) as f64 * 0.1))?;
    let mut y = up(&vector(n, |i| 0.5 - (i % 7) as f64 * 0.2))?;
    let mut z = up(&vector(n, |i| (i % 3) as f64 - 0.5))?;
    let A = up(&matrix(n, 0, "csr"))?;
    let Ac = up(&matrix(n, 1, "csc"))?;
    let Ad = up(&matrix(n, 2, "dcsr"))?;
    let Ao = up(&matrix(n, 3, "coo"))?;
    let mut M = up(&dense2(n, |i| (i % 5) as f64 * 0.5))?;
    let mut N = up(&dense2(n, |i| 1.0 - (i % 3) as f64))?;
    let mut out = Vec::new();
    for it in 0..p.iterations {
        let body = p.body(it);
        for op in body {
            match op {
                Op::Csc => {
                    let q = tensor!(rt => q(i) = Ac(i,j) * x(j); Ac: csc; split(i, io, ii, 3))?;
                    y = tensor!(rt => t(i) = q(i) * 0.001 + y(i))?;
                }
                Op::Dcsr => {
                    let q = tensor!(rt => q(i) = Ad(i,j) * x(j); Ad: dcsr; split(i, io, ii, 2))?;
                    z = tensor!(rt => t(i) = q(i) * 0.001 - z(i))?;
                }
                Op::Coo => {
                    let q = tensor!(rt => q(i) = Ao(i,j) * y(j); Ao: coo; split(i, io, ii, 4))?;
                    x = tensor!(rt => t(i) = q(i) * 0.001 + x(i))?;
                }
                Op::SparseOut => {
                    let C =
                        tensor!(rt => C(i,j) = A(i,j) * x(j); A: csr; C: csr; split(i, io, ii, 4))?;
                    let q = tensor!(rt => q(i) = C(i,j) * z(j); C: csr; split(i, io, ii, 2))?;
                    y = tensor!(rt => t(i) = q(i) * 0.001 + y(i))?;
                }
                Op::Dense2d => M = tensor!(rt => T(i,j) = M(i,j) * 0.5 + N(i,j))?,
                Op::Union => {
                    N = tensor!(rt => T(i,j) = A(i,j) + M(i,j) * 0.25; A: csr; split(i, io, ii, 2))?
                }
                Op::DenseMv => {
                    let q = tensor!(rt => q(i) = M(i,j) * x(j); split(i, io, ii, 3))?;
                    z = tensor!(rt => t(i) = q(i) * 0.01 + z(i))?;
                }
                Op::SplitJ => {
                    y = tensor!(rt => t(i) = A(i,j) * x(j) + z(i) * 0.5; A: csr; split(j, jo, ji, 2))?
                }
                Op::Dot => {
                    let s = tensor!(rt => s = x(i) * z(i); split(i, io, ii, 3); extend(io))?;
                    x = tensor!(rt => t(i) = x(i) / (1 + abs(s)))?;
                }
                Op::Axpy => x = tensor!(rt => t(i) = x(i) * 0.5 + y(i))?,
                Op::Swap => std::mem::swap(&mut x, &mut z),
                Op::Fresh => x = up(&vector(n, |i| (i + it) as f64 * 0.125))?,
            }
        }
    }
    for t in [&x, &y, &z, &M, &N] {
        out.push(bits(&t.to_tensor(rt)?));
    }
    Ok(out)
}

fn check(p: &Program) -> Result<(), TestCaseError> {
    let b = || Runtime::builder().threads(p.threads);
    let plain = b().window_size(1).fusion(false).tracing(false).build();
    let want = run(p, &plain).map_err(|e| TestCaseError::fail(format!("plain: {e}")))?;
    let configs = [
        ("window 3", b().window_size(3).tracing(false).build()),
        ("window 7", b().window_size(7).tracing(false).build()),
        ("adaptive", b().tracing(false).build()),
        ("adaptive, tracing, actors", b().tracing(true).build()),
        (
            "tracing, sampling 1",
            b().tracing(true).actors(false).trace_sampling(1).build(),
        ),
        (
            "tracing, actors, window 7",
            b().tracing(true)
                .actors(true)
                .window_size(7)
                .trace_sampling(2)
                .build(),
        ),
        (
            "tracing, actors, no fusion",
            b().tracing(true)
                .actors(true)
                .fusion(false)
                .trace_sampling(2)
                .build(),
        ),
    ];
    // Twice on the same runtime: traces recorded the first time replay the second.
    same_on_every_runtime(configs, &want, |rt| run(p, rt))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn hunt_sparse_tensor_programs_match_the_unfused_runtime(p in program()) {
        check(&p)?;
    }
}

/// Every op in one loop body: fused launches and replayed traces happen, and the stores are
/// the plain runtime's.
#[test]
fn every_op_in_one_traced_loop_fuses_replays_and_matches() {
    let p = Program {
        n: 9,
        threads: 3,
        a: vec![
            Op::Csc,
            Op::Dcsr,
            Op::Coo,
            Op::SparseOut,
            Op::Dense2d,
            Op::Union,
            Op::DenseMv,
            Op::SplitJ,
            Op::Dot,
            Op::Axpy,
        ],
        b: vec![],
        iterations: 6,
        period: 1,
    };
    let b = || Runtime::builder().threads(p.threads);
    let plain = b().window_size(1).fusion(false).tracing(false).build();
    let want = run(&p, &plain).unwrap();
    let rt = b()
        .tracing(true)
        .actors(true)
        .window_size(7)
        .trace_sampling(2)
        .build();
    assert_eq!(run(&p, &rt).unwrap(), want);
    let st = rt.stats();
    eprintln!("{st:?}");
    assert!(st.fused_launches > 0 && st.traces_replayed > 0, "{st:?}");
}
