//! CG built from tasks converges to the sequential CG's answer, at several thread counts.

use crate::sparse::{cg, Csr, HostCsr};
use tessera_runtime::Runtime;

#[test]
fn cg_matches_sequential_cg() {
    let host = HostCsr::laplacian_2d(12);
    let b: Vec<f64> = (0..host.rows)
        .map(|i| ((i * 37) % 11) as f64 - 5.0)
        .collect();
    let (x_seq, it_seq) = cg::solve_sequential(&host, &b, 1e-10, 1000);
    for threads in [1, 3] {
        let rt = Runtime::builder()
            .threads(threads)
            .min_piece_size(16)
            .build();
        cg::register(&rt).unwrap();
        let a = Csr::upload(&rt, &host).unwrap();
        let (x, it) = cg::solve(&rt, &a, &b, 1e-10, 1000).unwrap();
        // Dot products fold per-piece partial sums, so rounding differs from the sequential sum
        // order; the iterates agree to far below the tolerance.
        assert!(
            (it as i64 - it_seq as i64).abs() <= 1,
            "iterations {it} vs {it_seq}"
        );
        let diff = x
            .iter()
            .zip(&x_seq)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(diff < 1e-8, "max |x - x_seq| = {diff}");
        let res: f64 = host
            .spmv(&x)
            .iter()
            .zip(&b)
            .map(|(ax, bi)| (ax - bi).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!(res < 1e-8, "residual {res}");
    }
}

#[test]
fn cg_is_deterministic_for_a_configuration() {
    let host = HostCsr::laplacian_2d(9);
    let b: Vec<f64> = (0..host.rows).map(|i| (i % 4) as f64).collect();
    let run = |threads| {
        let rt = Runtime::builder()
            .threads(threads)
            .min_piece_size(8)
            .build();
        cg::register(&rt).unwrap();
        let a = Csr::upload(&rt, &host).unwrap();
        cg::solve(&rt, &a, &b, 1e-12, 500).unwrap()
    };
    // Same pieces (the launch domain is sized by processors: 4 here) give bit-identical
    // results however the points are scheduled.
    let first = run(4);
    for _ in 0..3 {
        assert_eq!(run(4), first);
    }
}
