//! `tensor!(rt => ...)`: statements with a distribution schedule run as block tasks on one
//! runtime, over tensors held in its stores, one task stream. Conjugate gradient written with
//! such statements converges to the answer of a sequential CG (the algorithm of the runtime's
//! `cg` example) on the 2-d Laplacian, at 1 and 2 threads and with the runtime's fusion window
//! on, with the same iteration count.
#![allow(non_snake_case)]

#[path = "common/tensor_cg.rs"]
mod tensor_cg;

use tensor_cg::Cg;
use tessera::plans::{PlanRunError, Stored};
use tessera::runtime::Runtime;
use tessera::{tensor, Tensor};

/// The 5-point Laplacian on a `k`×`k` grid (symmetric positive definite), in CSR.
fn laplacian(k: usize) -> Tensor<f64> {
    let n = k * k;
    let mut entries = Vec::new();
    for r in 0..k {
        for c in 0..k {
            let i = r * k + c;
            entries.push((vec![i, i], 4.0));
            if r > 0 {
                entries.push((vec![i, i - k], -1.0));
            }
            if r + 1 < k {
                entries.push((vec![i, i + k], -1.0));
            }
            if c > 0 {
                entries.push((vec![i, i - 1], -1.0));
            }
            if c + 1 < k {
                entries.push((vec![i, i + 1], -1.0));
            }
        }
    }
    Tensor::from_entries(vec![n, n], "csr", entries).unwrap()
}

fn rhs(n: usize) -> Vec<f64> {
    (0..n).map(|i| 1.0 + (i % 5) as f64).collect()
}

/// CG from x = 0 until ‖r‖² ≤ tol² ‖b‖², on the runtime: every step is a `tensor!` statement
/// with a row split; only ‖r‖² comes back to the host, once per iteration.
fn cg_on_runtime(
    rt: &Runtime,
    a: &Tensor<f64>,
    b: &[f64],
    tol: f64,
) -> Result<(Vec<f64>, usize), PlanRunError> {
    let n = b.len();
    let A = Stored::upload(rt, a)?;
    let mut cg = Cg::start(rt, b)?;
    let stop = tol * tol * b.iter().map(|v| v * v).sum::<f64>();
    for iter in 0..10 * n {
        let rr_new = cg.update(rt, &A)?;
        if rr_new.to_tensor(rt)?.vals()[0] <= stop {
            return Ok((cg.x.to_tensor(rt)?.vals().to_vec(), iter + 1));
        }
        cg.direction(rt, rr_new)?;
    }
    Ok((cg.x.to_tensor(rt)?.vals().to_vec(), 10 * n))
}

/// The same iteration, sequentially on the host.
fn cg_sequential(a: &Tensor<f64>, b: &[f64], tol: f64) -> (Vec<f64>, usize) {
    let spmv = |v: &[f64]| {
        let mut y = vec![0.0; b.len()];
        for (c, val) in a.entries() {
            y[c[0]] += val * v[c[1]];
        }
        y
    };
    let dot = |u: &[f64], v: &[f64]| u.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
    let n = b.len();
    let (mut x, mut r, mut p) = (vec![0.0; n], b.to_vec(), b.to_vec());
    let mut rr = dot(&r, &r);
    let stop = tol * tol * dot(b, b);
    for iter in 0..10 * n {
        let q = spmv(&p);
        let alpha = rr / dot(&p, &q);
        for i in 0..n {
            x[i] += alpha * p[i];
            r[i] -= alpha * q[i];
        }
        let rr_new = dot(&r, &r);
        if rr_new <= stop {
            return (x, iter + 1);
        }
        let beta = rr_new / rr;
        for i in 0..n {
            p[i] = r[i] + beta * p[i];
        }
        rr = rr_new;
    }
    (x, 10 * n)
}

#[test]
fn cg_with_tensor_statements_on_the_runtime_converges_to_the_sequential_answer() {
    let k = 12;
    let a = laplacian(k);
    let b = rhs(k * k);
    let (want, want_iters) = cg_sequential(&a, &b, 1e-10);
    // Window 16: the statements' block tasks go through the runtime's fusion pass too.
    for (threads, window) in [(1, 1), (2, 1), (2, 16)] {
        let rt = Runtime::builder()
            .threads(threads)
            .window_size(window)
            .build();
        let (x, iters) = cg_on_runtime(&rt, &a, &b, 1e-10).unwrap();
        let diff = x
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(
            diff < 1e-8,
            "{threads} threads, window {window}: max |x - x_seq| = {diff:e}"
        );
        assert!(
            iters.abs_diff(want_iters) <= 1,
            "{threads} threads: {iters} iterations, sequential {want_iters}"
        );
        // Eight statements per iteration (the last one stops after six), one before.
        let stats = rt.stats();
        let issued = stats.tasks_issued;
        // With a window, consecutive statements' block tasks fuse (311 issued, 193 launched
        // when this was written).
        assert!(
            window == 1 || stats.tasks_launched < issued,
            "window {window}: {stats:?}"
        );
        // A statement run again over tensors of the same shapes is the same task, so the
        // fusion memo recognises the iterations (75 of 78 fused prefixes when written).
        assert!(
            window == 1 || stats.fusion_memo_hits > stats.fusion_memo_misses,
            "window {window}: {stats:?}"
        );
        assert!(
            issued >= 8 * iters as u64 - 1,
            "every statement is a task on the runtime: {issued} for {iters} iterations"
        );
    }
}

/// The updates `x += alpha p`, `r += -(alpha q)` and `p = r + beta p` have a scalar operand
/// and still are element-wise tasks (the scalar is a future of its one-element store): in a
/// fusion window the two that take `alpha` run as one chunk loop every iteration, and the
/// answer is bitwise the unfused one's (and window one's), in as many iterations.
#[test]
fn cg_updates_with_scalar_operands_kernel_fuse_and_equal_unfused_bitwise() {
    let k = 10;
    let (a, b) = (laplacian(k), rhs(k * k));
    let run = |window: usize, fusion: bool| {
        let rt = Runtime::builder()
            .threads(2)
            .window_size(window)
            .fusion(fusion)
            .build();
        let (x, iters) = cg_on_runtime(&rt, &a, &b, 1e-10).unwrap();
        let bits: Vec<u64> = x.iter().map(|v| v.to_bits()).collect();
        (bits, iters, rt.stats())
    };
    let (want, want_iters, plain) = run(1, false);
    assert_eq!(plain.kernel_fused_launches, 0);
    for (window, fusion) in [(16, false), (16, true)] {
        let (x, iters, stats) = run(window, fusion);
        assert_eq!(iters, want_iters, "window {window}, fusion {fusion}");
        assert!(
            x == want,
            "window {window}, fusion {fusion}: x differs bitwise"
        );
        if fusion {
            assert!(
                stats.kernel_fused_launches >= iters as u64,
                "the alpha updates fuse every iteration: {stats:?}"
            );
        }
    }
}

/// A statement on the runtime checks its tensors' formats when it runs, like `tensor!`.
#[test]
fn a_stored_tensor_of_another_format_is_a_bind_error() {
    let rt = Runtime::new(1);
    let a: Tensor<f64> = Tensor::from_entries(vec![2, 2], "dcsr", [(vec![0, 1], 2.0)]).unwrap();
    let A = Stored::upload(&rt, &a).unwrap();
    let x = Stored::upload(
        &rt,
        &Tensor::dense_from_vec(vec![2], vec![1.0, 3.0]).unwrap(),
    )
    .unwrap();
    let err = tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 2))
        .err()
        .expect("A is dcsr, not csr");
    let msg = err.to_string();
    assert!(
        msg.contains("`A`") && msg.contains("ss") && msg.contains("ds"),
        "{msg}"
    );
}

/// The same `tensor!` CG across 2 and 3 thread ranks (control replication: every rank issues
/// every statement and runs its shard of the block tasks) gives every rank one rank's answer,
/// bitwise, in as many iterations; the agreement check compares every task's analysis across ranks.
#[test]
fn cg_with_tensor_statements_across_ranks_equals_one_rank() {
    use std::sync::{mpsc, Arc};
    use tessera::runtime::transport::{run_ranks, ThreadComm};
    let k = 8;
    let (a, b) = (laplacian(k), rhs(k * k));
    let one = Runtime::builder().threads(2).build();
    let (want, want_iters) = cg_on_runtime(&one, &a, &b, 1e-10).unwrap();
    for ranks in [2, 3] {
        let (a, b) = (a.clone(), b.clone());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let out = run_ranks(ranks, |comm: &ThreadComm| {
                let rt = Runtime::builder()
                    .threads(1)
                    .communicator(Arc::new(comm.clone()))
                    .agreement_check(true)
                    .try_build()
                    .map_err(|e| RankError(e.to_string()))?;
                cg_on_runtime(&rt, &a, &b, 1e-10).map_err(|e| RankError(e.to_string()))
            });
            let _ = tx.send(out.into_iter().map(|r| r.map_err(|e| e.0)));
        });
        let results = rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("the ranks ended within two minutes (no hang)");
        for (rank, got) in results.enumerate() {
            let (x, iters) = got.unwrap_or_else(|e| panic!("{ranks} ranks, rank {rank}: {e}"));
            assert_eq!(iters, want_iters, "{ranks} ranks, rank {rank}");
            // The plan fixes the blocks, and reductions fold in block order at any rank count.
            assert!(
                x.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{ranks} ranks, rank {rank}: x differs from one rank's bitwise"
            );
        }
    }
}

/// A rank's failure, as `run_ranks` wants it (a transport error converts into it).
#[derive(Debug)]
struct RankError(String);

impl std::fmt::Display for RankError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<tessera::runtime::transport::TransportError> for RankError {
    fn from(e: tessera::runtime::transport::TransportError) -> Self {
        RankError(e.to_string())
    }
}
