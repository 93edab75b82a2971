//! Reductions with another operator than `+` beside hand-written loops, and the automatic
//! re-pack of an operand whose mode order agrees with no loop order (transpose cost beside
//! kernel cost).
//!
//! - min-plus SpMV `y(i) = min[j](A(i,j) + x(j))` (a Bellman-Ford relaxation) and max-times
//!   SpMV `y(i) = max[j](A(i,j) * x(j))`, A in CSR, beside the obvious loop over CSR;
//! - min-plus SpMM `C(i,k) = min[j](A(i,j) + B(j,k))`, B and C dense, beside the loop;
//! - `C(i,j) = A(i,j) + B(i,j)` with A CSR, B CSC and C CSR: the kernel re-packs one operand once
//!   (B, into CSR: of two equally cheap candidates, the one that keeps C in its level order);
//!   beside the same sum given both in CSR (no transpose), and the transpose of B alone.
//!
//! - `A(i,j) = B(j,i)`, both CSR: the output assembled by counting sorts, beside collecting
//!   the entries and sorting them (`Tensor::from_entries`, what the kernel did before).
//!
//! Each figure is the median of `TESSERA_BENCH_REPS` (default 9) rounds that interleave the
//! contestants. Sizes scale with `TESSERA_BENCH_SCALE` (default 1.0).

use std::hint::black_box;
use std::time::Instant;

use tessera_benches::{env_or, Rng, Table};
use tessera_formats::{Level, Tensor};

#[allow(dead_code)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}

/// A random n×n CSR matrix with about `per` entries per row, positive weights (shortest
/// paths; max-times over probabilities).
fn random_csr(n: usize, per: usize, rng: &mut Rng) -> Tensor<f64, u32> {
    tessera_benches::random_csr(n, per, rng, |r| r.value() + 0.51)
}

fn csr_arrays(t: &Tensor<f64, u32>) -> (&[u32], &[u32], &[f64]) {
    match &t.levels()[1] {
        Level::Compressed { pos, crd } => (pos, crd, t.vals()),
        _ => unreachable!("csr"),
    }
}

fn dense(dims: Vec<usize>, rng: &mut Rng) -> Tensor<f64, u32> {
    let n = dims.iter().product();
    Tensor::dense_from_vec(dims, (0..n).map(|_| rng.value() + 0.51).collect()).unwrap()
}

/// The median time in ms of each contestant over `reps` interleaved rounds.
fn race<const N: usize>(reps: usize, contestants: [&dyn Fn(); N]) -> [f64; N] {
    let mut times: [Vec<f64>; N] = std::array::from_fn(|_| Vec::with_capacity(reps));
    for _ in 0..reps {
        for (c, t) in contestants.iter().zip(times.iter_mut()) {
            let start = Instant::now();
            c();
            t.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.map(|mut t| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    })
}

/// The hand-written min-plus (or max-times) SpMV over CSR arrays.
fn hand_mv(
    (pos, crd, vals): (&[u32], &[u32], &[f64]),
    x: &[f64],
    fill: f64,
    step: impl Fn(f64, f64, f64) -> f64,
) -> Vec<f64> {
    let mut y = vec![fill; pos.len() - 1];
    for (i, yi) in y.iter_mut().enumerate() {
        let mut acc = fill;
        for p in pos[i] as usize..pos[i + 1] as usize {
            acc = step(acc, vals[p], x[crd[p] as usize]);
        }
        *yi = acc;
    }
    y
}

fn main() {
    let scale: f64 = env_or("TESSERA_BENCH_SCALE", 1.0);
    let reps: usize = env_or("TESSERA_BENCH_REPS", 9);
    let n = ((200_000.0 * scale) as usize).max(100);
    let per = 16;
    let mut rng = Rng(17);
    let a = random_csr(n, per, &mut rng);
    let x = dense(vec![n], &mut rng);
    let mut table = Table::new(&format!(
        "semirings: n = {n}, ~{per} entries per row, medians of {reps} interleaved rounds"
    ));

    // min-plus and max-times SpMV.
    let arrays = csr_arrays(&a);
    let min_step = |acc: f64, a: f64, x: f64| {
        let v = a + x;
        if v < acc {
            v
        } else {
            acc
        }
    };
    let max_step = |acc: f64, a: f64, x: f64| {
        let v = a * x;
        if v > acc {
            v
        } else {
            acc
        }
    };
    let want = hand_mv(arrays, x.vals(), f64::INFINITY, min_step);
    let got = generated::minplus_mv::<f64, u32>(&[&a, &x], &[n]);
    assert_eq!(got.vals(), &want[..], "min-plus SpMV differs from the loop");
    let [t_min, h_min, t_max, h_max] = race(
        reps,
        [
            &|| {
                black_box(generated::minplus_mv::<f64, u32>(&[&a, &x], &[n]));
            },
            &|| {
                black_box(hand_mv(arrays, x.vals(), f64::INFINITY, min_step));
            },
            &|| {
                black_box(generated::maxtimes_mv::<f64, u32>(&[&a, &x], &[n]));
            },
            &|| {
                black_box(hand_mv(arrays, x.vals(), f64::NEG_INFINITY, max_step));
            },
        ],
    );
    table.row("min-plus SpMV", "ms", t_min, "hand loop", h_min, false);
    table.row("max-times SpMV", "ms", t_max, "hand loop", h_max, false);

    // min-plus SpMM with a dense right-hand side of k columns.
    let k = 8;
    let m = n / 8;
    let am = random_csr(m, per, &mut rng);
    let b = dense(vec![m, k], &mut rng);
    let (pos, crd, vals) = csr_arrays(&am);
    let hand_mm = || {
        let bv = b.vals();
        let mut c = vec![f64::INFINITY; m * k];
        for i in 0..m {
            let row = &mut c[i * k..(i + 1) * k];
            for p in pos[i] as usize..pos[i + 1] as usize {
                let (aij, j) = (vals[p], crd[p] as usize);
                // A select, not a conditional store, so that the loop vectorises.
                for (cik, bjk) in row.iter_mut().zip(&bv[j * k..(j + 1) * k]) {
                    let v = aij + bjk;
                    *cik = if v < *cik { v } else { *cik };
                }
            }
        }
        c
    };
    let got = generated::minplus_mm::<f64, u32>(&[&am, &b], &[m, k]);
    assert_eq!(
        got.vals(),
        &hand_mm()[..],
        "min-plus SpMM differs from the loop"
    );
    let [t_mm, h_mm] = race(
        reps,
        [
            &|| {
                black_box(generated::minplus_mm::<f64, u32>(&[&am, &b], &[m, k]));
            },
            &|| {
                black_box(hand_mm());
            },
        ],
    );
    table.row(
        &format!("min-plus SpMM ({k} columns)"),
        "ms",
        t_mm,
        "hand loop",
        h_mm,
        false,
    );

    // An operand re-packed automatically: A CSR + B CSC.
    let nt = n / 4;
    let at = random_csr(nt, per, &mut rng);
    let bt_csr = random_csr(nt, per, &mut rng);
    let bt_csc = bt_csr.to_format("csc").unwrap();
    let dims = [nt, nt];
    let with = generated::add_csr_csc::<f64, u32>(&[&at, &bt_csc], &dims);
    let without = generated::add_csr_csr::<f64, u32>(&[&at, &bt_csr], &dims);
    assert_eq!(with.vals(), without.vals(), "the re-packed kernel differs");
    let [t_repack, t_kernel, t_transpose] = race(
        reps,
        [
            &|| {
                black_box(generated::add_csr_csc::<f64, u32>(&[&at, &bt_csc], &dims));
            },
            &|| {
                black_box(generated::add_csr_csr::<f64, u32>(&[&at, &bt_csr], &dims));
            },
            &|| {
                black_box(
                    Tensor::<f64, u32>::from_entries(dims.to_vec(), "csr", bt_csc.entries())
                        .unwrap(),
                );
            },
        ],
    );
    table.row(
        "A(csr) + B(csc), B re-packed",
        "ms",
        t_repack,
        "both csr",
        t_kernel,
        false,
    );
    table.figure("B transposed by Tensor::from_entries (ms)", t_transpose);

    // A transpose into a sparse output: counting sorts beside collect-and-sort.
    let tr = generated::transpose_csr::<f64, u32>(&[&bt_csr], &dims);
    let sorted = Tensor::<f64, u32>::from_entries(
        dims.to_vec(),
        "csr",
        bt_csr.entries().map(|(c, v)| (vec![c[1], c[0]], v)),
    )
    .unwrap();
    assert_eq!(tr, sorted, "the scattered transpose differs");
    let [t_tr, t_sort] = race(
        reps,
        [
            &|| {
                black_box(generated::transpose_csr::<f64, u32>(&[&bt_csr], &dims));
            },
            &|| {
                black_box(
                    Tensor::<f64, u32>::from_entries(
                        dims.to_vec(),
                        "csr",
                        bt_csr.entries().map(|(c, v)| (vec![c[1], c[0]], v)),
                    )
                    .unwrap(),
                );
            },
        ],
    );
    table.row(
        "A(i,j) = B(j,i) into CSR",
        "ms",
        t_tr,
        "collect+sort",
        t_sort,
        false,
    );
    table.figure(
        "re-pack of B (re-packed - both csr, ms)",
        t_repack - t_kernel,
    );
    table.print();
}
