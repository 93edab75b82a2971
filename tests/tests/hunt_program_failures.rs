//! Adversarial hunt, `tensor!(rt => ...)` programs whose own functions panic on some values
//! (so inside fused element-wise chains, block tasks and replayed traces): every statement's
//! outcome, every read (`to_tensor`) and every error's text must be the unfused, untraced
//! runtime's, in every configuration, at 1 to 4 threads.
#![allow(non_snake_case)]

use proptest::prelude::*;
use tessera::plans::Stored;
use tessera::runtime::Runtime;
use tessera::{tensor, Tensor};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Panics on values of magnitude `LIMIT` or more.
fn guard(v: f64) -> f64 {
    assert!(v.abs() < 40.0, "guard: {v}");
    v
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// `x = guard(x) * 1.5 + y` (element-wise: fused with its neighbours)
    Grow,
    /// `y = guard(x) * 0.5 - y`
    Mix,
    /// `q = guard(A x)` (block tasks), `z = q + z`
    Spmv,
    /// `s = x·y`, `z = z / (1 + |s|)`
    Dot,
    /// `t = x * 0.5; y = t + guard(t)` (a temporary)
    Temp,
    /// `y` read back in the middle
    Read,
    /// `x` rebound to a fresh small upload (a program that goes on after a failure)
    Reset,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Grow),
        2 => Just(Op::Mix),
        1 => Just(Op::Spmv),
        1 => Just(Op::Dot),
        2 => Just(Op::Temp),
        1 => Just(Op::Read),
        1 => Just(Op::Reset),
    ]
}

#[derive(Clone, Debug)]
struct Program {
    n: usize,
    threads: usize,
    body: Vec<Op>,
    iterations: usize,
}

fn program() -> impl Strategy<Value = Program> {
    (
        1usize..10,
        1usize..5,
        proptest::collection::vec(op(), 1..6),
        2usize..9,
    )
        .prop_map(|(n, threads, body, iterations)| Program {
            n,
            threads,
            body,
            iterations,
        })
}

fn vector(n: usize, f: impl Fn(usize) -> f64) -> Tensor<f64> {
    Tensor::dense_from_vec(vec![n], (0..n).map(f).collect()).unwrap()
}

fn matrix(n: usize) -> Tensor<f64> {
    let entries = (0..n).map(|i| (vec![i, (i * 3 + 1) % n], 2.0 + i as f64));
    Tensor::from_entries(vec![n, n], "csr", entries).unwrap()
}

/// Values as bits, or the error's text.
type Outcome = Vec<Result<Vec<u64>, String>>;

fn read(rt: &Runtime, t: &Stored<f64>) -> Result<Vec<u64>, String> {
    let t = t.to_tensor(rt).map_err(|e| e.to_string())?;
    Ok(t.vals().iter().map(|v| v.to_bits()).collect())
}

/// Runs `p`; a statement that fails ends the program (its error is the last entry).
fn run(p: &Program, rt: &Runtime) -> Outcome {
    let mut out = Outcome::new();
    if let Err(e) = body(p, rt, &mut out) {
        out.push(Err(format!("statement: {e}")));
    }
    out
}

fn body(p: &Program, rt: &Runtime, out: &mut Outcome) -> Res<()> {
    let n = p.n;
    let up = |t: &Tensor<f64>| Stored::upload(rt, t);
    let mut x = up(&vector(n, |i| 1.0 + i as f64))?;
    let mut y = up(&vector(n, |i| 0.5 - i as f64 * 0.25))?;
    let mut z = up(&vector(n, |i| (i % 3) as f64))?;
    let A = up(&matrix(n))?;
    for it in 0..p.iterations {
        for op in &p.body {
            match op {
                Op::Grow => x = tensor!(rt => t(i) = guard(x(i)) * 1.5 + y(i))?,
                Op::Mix => y = tensor!(rt => t(i) = guard(x(i)) * 0.5 - y(i))?,
                Op::Spmv => {
                    let q =
                        tensor!(rt => q(i) = guard(A(i,j) * x(j)); A: csr; split(i, io, ii, 2))?;
                    z = tensor!(rt => t(i) = q(i) + z(i))?;
                }
                Op::Dot => {
                    let s = tensor!(rt => s = x(i) * y(i); split(i, io, ii, 2); extend(io))?;
                    z = tensor!(rt => t(i) = z(i) / (1 + abs(s)))?;
                }
                Op::Temp => {
                    let t = tensor!(rt => t(i) = x(i) * 0.5)?;
                    y = tensor!(rt => u(i) = t(i) + guard(t(i)))?;
                }
                Op::Read => out.push(read(rt, &y)),
                Op::Reset => x = up(&vector(n, |i| (i + it) as f64 * 0.25))?,
            }
        }
    }
    for t in [&x, &y, &z] {
        out.push(read(rt, t));
    }
    Ok(())
}

fn check(p: &Program) -> Result<(), TestCaseError> {
    let b = || Runtime::builder().threads(p.threads);
    // Twice on each runtime (the second run replays what the first recorded); errors name
    // stores by id, which the second run's are past, so round by round.
    let plain = b().window_size(1).fusion(false).tracing(false).build();
    let wants = [run(p, &plain), run(p, &plain)];
    let configs = [
        ("window 4", b().window_size(4).tracing(false).build()),
        ("adaptive", b().tracing(false).build()),
        (
            "tracing",
            b().tracing(true).actors(false).trace_sampling(2).build(),
        ),
        (
            "tracing, actors, window 5",
            b().tracing(true).window_size(5).trace_sampling(2).build(),
        ),
        ("adaptive, tracing, actors", b().tracing(true).build()),
    ];
    for (name, rt) in configs {
        for (round, want) in wants.iter().enumerate() {
            let got = run(p, &rt);
            let first = (0..got.len().max(want.len())).find(|&k| got.get(k) != want.get(k));
            prop_assert!(
                first.is_none(),
                "{} (round {}): entry {:?}: got {:?} want {:?}",
                name,
                round,
                first,
                first.and_then(|k| got.get(k)),
                first.and_then(|k| want.get(k)),
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn hunt_programs_with_panicking_functions_match_the_unfused_runtime(p in program()) {
        check(&p)?;
    }
}
