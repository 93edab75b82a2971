//! Held-out `tensor!(rt => ...)` programs (adversarial review): loops generated from a small
//! op language — element-wise chains with temporaries dropped at once or kept, in-place `+=`,
//! scalars made by dot products and used by the next statements, CSR SpMV, handles rebound
//! and swapped, reads in the middle — whose body changes every few iterations. Every
//! configuration (fixed and adaptive fusion windows, tracing with and without actors) must
//! give bitwise the stores of the unfused, untraced runtime on the same threads, at one and
//! two threads, at lengths around the kernel-fused loop's chunk.
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
    /// `x = x * 0.75 + y`
    Axpy,
    /// `y += 0.5 * x`
    AddIn,
    /// `s = x·y`, then `z = z / (1 + abs(s)) + x * s * 1e-6`
    Dot,
    /// `q = A x`, `y = q * 1e-3 + y`
    Spmv,
    /// `a = x * 0.9 + y * 0.1; b = a * a; x = b / (1 + b) + a` (a, b temporaries)
    Temps,
    /// `k = x - y` kept until the end of the iteration and read back
    KeepRead,
    /// `z = max(x, y) - min(y, z)`
    MaxMin,
    /// swap the handles of `x` and `y`
    Swap,
    /// `x` rebound to a fresh upload of constant values
    Fresh,
    /// `A` rebound to a fresh upload of a matrix of the same shape and another pattern
    /// (the SpMV's image sources change under a replayed trace)
    FreshMatrix,
    /// `s = sum x` via a reduction, then `y = y * s` (with `s` kept across iterations)
    SumScale,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Axpy),
        2 => Just(Op::AddIn),
        2 => Just(Op::Dot),
        1 => Just(Op::Spmv),
        2 => Just(Op::Temps),
        1 => Just(Op::KeepRead),
        1 => Just(Op::MaxMin),
        1 => Just(Op::Swap),
        1 => Just(Op::Fresh),
        1 => Just(Op::SumScale),
        1 => Just(Op::FreshMatrix),
    ]
}

type Program = held_out::Program<Op>;

fn program() -> impl Strategy<Value = Program> {
    programs(
        op,
        prop_oneof![3 => 1usize..20, 1 => 4090usize..4100, 1 => Just(8193usize)],
        1usize..3,
        (1..6, 0..6),
        3usize..9,
        1usize..4,
    )
}

fn matrix(n: usize, k: usize) -> Tensor<f64> {
    let mut seen = std::collections::HashSet::new();
    let entries: Vec<_> = (0..n)
        .flat_map(|i| {
            // Row i has 1 to 3 entries, depending on `k`.
            [
                (vec![i, i], 2.0 + ((i + k) % 5) as f64),
                (vec![i, (i * (7 + k) + 3) % n], 0.5),
                (
                    vec![i, (i * 3 + k) % n],
                    if (i + k).is_multiple_of(3) {
                        -0.25
                    } else {
                        0.0
                    },
                ),
            ]
        })
        .filter(|(_, v)| *v != 0.0)
        .filter(|(c, _)| seen.insert(c.clone()))
        .collect();
    Tensor::from_entries(vec![n, n], "csr", entries).unwrap()
}

fn run(p: &Program, rt: &Runtime) -> Res<Vec<Vec<u64>>> {
    let n = p.n;
    let up = |t: &Tensor<f64>| Stored::upload(rt, t);
    let mut x = up(&vector(n, |i| 1.0 + (i % 13) as f64 * 0.1))?;
    let mut y = up(&vector(n, |i| 0.5 - (i % 7) as f64 * 0.2))?;
    let mut z = up(&vector(n, |i| (i % 3) as f64))?;
    let mut A = up(&matrix(n, 0))?;
    let mut fresh = 0;
    let mut s_kept: Option<Stored<f64>> = None;
    let mut out = Vec::new();
    for it in 0..p.iterations {
        let body = p.body(it);
        let mut kept = Vec::new();
        for op in body {
            match op {
                Op::Axpy => x = tensor!(rt => t(i) = x(i) * 0.75 + y(i))?,
                Op::AddIn => y = tensor!(rt => y(i) += 0.5 * x(i))?,
                Op::Dot => {
                    let s = tensor!(rt => s = x(i) * y(i); split(i, io, ii, 4); extend(io))?;
                    z = tensor!(rt => t(i) = z(i) / (1 + abs(s)) + x(i) * s * 0.000001)?;
                }
                Op::Spmv => {
                    let q = tensor!(rt => q(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 4))?;
                    y = tensor!(rt => t(i) = q(i) * 0.001 + y(i))?;
                }
                Op::Temps => {
                    let a = tensor!(rt => a(i) = x(i) * 0.9 + y(i) * 0.1)?;
                    let b = tensor!(rt => b(i) = a(i) * a(i))?;
                    x = tensor!(rt => t(i) = b(i) / (1 + b(i)) + a(i))?;
                }
                Op::KeepRead => {
                    let k = tensor!(rt => k(i) = x(i) - y(i))?;
                    kept.push(k);
                }
                Op::MaxMin => z = tensor!(rt => t(i) = max(x(i), y(i)) - min(y(i), z(i)))?,
                Op::Swap => std::mem::swap(&mut x, &mut y),
                Op::Fresh => x = up(&vector(n, |i| (i % 5) as f64 * 0.25 - 0.5))?,
                Op::FreshMatrix => {
                    fresh += 1;
                    A = up(&matrix(n, fresh % 3))?;
                }
                Op::SumScale => {
                    let s = tensor!(rt => s = x(i); split(i, io, ii, 4); extend(io))?;
                    y = match &s_kept {
                        Some(old) => tensor!(rt => t(i) = y(i) / (1 + abs(s) + abs(old)))?,
                        None => tensor!(rt => t(i) = y(i) / (1 + abs(s)))?,
                    };
                    s_kept = Some(s);
                }
            }
        }
        for k in kept {
            out.push(bits(&k.to_tensor(rt)?));
        }
    }
    for t in [&x, &y, &z] {
        out.push(bits(&t.to_tensor(rt)?));
    }
    if let Some(s) = &s_kept {
        out.push(bits(&s.to_tensor(rt)?));
    }
    Ok(out)
}

fn check(p: &Program) -> Result<(), TestCaseError> {
    let b = || Runtime::builder().threads(p.threads);
    let plain = b().window_size(1).fusion(false).tracing(false).build();
    let want = run(p, &plain).map_err(|e| TestCaseError::fail(format!("plain: {e}")))?;
    let configs = [
        ("window 16", b().window_size(16).tracing(false).build()),
        ("adaptive", b().tracing(false).build()),
        (
            "tracing",
            b().tracing(true).actors(false).trace_sampling(4).build(),
        ),
        (
            "tracing, actors, window 16",
            b().tracing(true)
                .actors(true)
                .window_size(16)
                .trace_sampling(4)
                .build(),
        ),
        (
            "tracing, actors, no fusion",
            b().tracing(true)
                .actors(true)
                .fusion(false)
                .trace_sampling(4)
                .build(),
        ),
    ];
    // Twice on the same runtime: traces recorded the first time replay the second.
    same_on_every_runtime(configs, &want, |rt| run(p, rt))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn heldout_tensor_programs_match_the_unfused_runtime(p in program()) {
        check(&p)?;
    }
}

/// An `f32` program: scalars from dot products (a rank-0 `f32` store read back exactly by
/// `value_future`) used by element-wise chains, in place `+=`, temporaries; on 1 and 2
/// threads, at lengths around the chunk, every configuration against the unfused runtime.
fn program_f32(rt: &Runtime, n: usize, rounds: usize) -> Res<Vec<Vec<u32>>> {
    let v = |f: &dyn Fn(usize) -> f32| {
        Tensor::<f32>::dense_from_vec(vec![n], (0..n).map(f).collect()).unwrap()
    };
    let mut x = Stored::upload(rt, &v(&|i| 1.0 + (i % 11) as f32 * 0.125))?;
    let mut y = Stored::upload(rt, &v(&|i| 0.5 - (i % 5) as f32 * 0.25))?;
    let mut out = Vec::new();
    for r in 0..rounds {
        let d = tensor!(rt => d = x(i) * y(i); split(i, io, ii, 4); extend(io))?;
        let a = tensor!(rt => a(i) = x(i) / (1 + abs(d)) + y(i) * 0.5)?;
        y = tensor!(rt => y(i) += a(i) * 0.25)?;
        if r % 3 != 2 {
            x = tensor!(rt => t(i) = a(i) * a(i) / (1 + a(i) * a(i)) - d * 0.001)?;
        }
        if r % 4 == 1 {
            out.push(
                d.to_tensor(rt)?
                    .vals()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect(),
            );
        }
    }
    for t in [&x, &y] {
        out.push(
            t.to_tensor(rt)?
                .vals()
                .iter()
                .map(|v| v.to_bits())
                .collect(),
        );
    }
    Ok(out)
}

#[test]
fn heldout_f32_program_matches_the_unfused_runtime() -> Res<()> {
    for threads in [1, 2] {
        for n in [1usize, 5, 4095, 4097] {
            let b = || Runtime::builder().threads(threads);
            let plain = b().window_size(1).fusion(false).tracing(false).build();
            let want = program_f32(&plain, n, 9)?;
            for (name, rt) in [
                ("window 16", b().window_size(16).tracing(false).build()),
                (
                    "tracing, actors",
                    b().tracing(true).actors(true).trace_sampling(4).build(),
                ),
                (
                    "tracing, no actors, window 4",
                    b().tracing(true)
                        .actors(false)
                        .window_size(4)
                        .trace_sampling(4)
                        .build(),
                ),
            ] {
                for round in 0..2 {
                    assert!(
                        program_f32(&rt, n, 9)? == want,
                        "threads {threads}, n {n}, {name}, round {round}"
                    );
                }
            }
        }
    }
    Ok(())
}
