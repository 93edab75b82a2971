//! `tensor!` against the oracle on random inputs: shapes with empty rows, empty tensors and
//! single elements, several formats and mode orders per statement.
#![allow(non_snake_case)]

use proptest::prelude::*;
use tessera::tensor;
use tessera::BindError;
use tessera::{Format, Tensor};
use tessera_tests::{assert_close, dense, oracle, random_tensor, Rng};

fn fmt(s: &str, rank: usize) -> Format {
    Format::parse(s, rank).unwrap()
}

/// Shapes and densities: small, with zero-sized modes and all-empty or all-full tensors.
fn dims_and_density(rank: usize) -> impl Strategy<Value = (Vec<usize>, f64, u64)> {
    (
        prop::collection::vec(0usize..5, rank),
        prop_oneof![Just(0.0), Just(1.0), 0.0f64..1.0],
        any::<u64>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn spmv_csr_and_csc((d, density, seed) in dims_and_density(2)) {
        let mut rng = Rng::new(seed);
        let A = random_tensor(&mut rng, &d, &fmt("csr", 2), density);
        let x = random_tensor(&mut rng, &d[1..], &Format::dense(1), 0.8);
        let y = tensor!(y(i) = A(i,j) * x(j); A: csr).unwrap();
        let want = oracle("y(i) = A(i,j) * x(j)", &[("A", &A), ("x", &x)]);
        assert_close(&dense(&y), &want, "csr spmv");
        // The transposed product with A stored by columns.
        let A = random_tensor(&mut rng, &d, &fmt("csc", 2), density);
        let x = random_tensor(&mut rng, &d[..1], &Format::dense(1), 0.8);
        let y = tensor!(y(j) = A(i,j) * x(i); A: csc).unwrap();
        assert_close(&dense(&y), &oracle("y(j) = A(i,j) * x(i)", &[("A", &A), ("x", &x)]), "csc transposed");
    }

    #[test]
    fn spmv_plus_vector_parallel((d, density, seed) in dims_and_density(2)) {
        let mut rng = Rng::new(seed);
        let A = random_tensor(&mut rng, &d, &fmt("csr", 2), density);
        let x = random_tensor(&mut rng, &d[1..], &Format::dense(1), 1.0);
        let z = random_tensor(&mut rng, &d[..1], &Format::dense(1), 1.0);
        let y = tensor!(y(i) = A(i,j) * x(j) + z(i); A: csr; parallelize(i)).unwrap();
        let want = oracle("y(i) = A(i,j) * x(j) + z(i)", &[("A", &A), ("x", &x), ("z", &z)]);
        assert_close(&dense(&y), &want, "y = Ax + z");
    }

    #[test]
    fn spgemm_csr_to_csr((d, density, seed) in dims_and_density(3)) {
        let mut rng = Rng::new(seed);
        let A = random_tensor(&mut rng, &[d[0], d[1]], &fmt("csr", 2), density);
        let B = random_tensor(&mut rng, &[d[1], d[2]], &fmt("csr", 2), density);
        let C = tensor!(C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; C: csr).unwrap();
        prop_assert_eq!(C.format(), &fmt("csr", 2));
        assert_close(&dense(&C), &oracle("C(i,j) = A(i,k) * B(k,j)", &[("A", &A), ("B", &B)]), "spgemm");
        // In parallel jobs, appended in order: the sequential kernel's tensor exactly.
        let P = tensor!(C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; C: csr; parallelize(i)).unwrap();
        prop_assert_eq!(P.levels(), C.levels());
        prop_assert_eq!(P.vals(), C.vals());
        // The same tensor twice, with different index variables.
        let S = random_tensor(&mut rng, &[d[0], d[0]], &fmt("csr", 2), density);
        let SS = tensor!(C(i,j) = S(i,k) * S(k,j); S: csr; C: csr).unwrap();
        assert_close(&dense(&SS), &oracle("C(i,j) = S(i,k) * S(k,j)", &[("S", &S)]), "square");
    }

    #[test]
    fn sddmm_and_sparse_add((d, density, seed) in dims_and_density(3)) {
        let mut rng = Rng::new(seed);
        let B = random_tensor(&mut rng, &[d[0], d[1]], &fmt("csr", 2), density);
        let C = random_tensor(&mut rng, &[d[0], d[2]], &Format::dense(2), 1.0);
        let D = random_tensor(&mut rng, &[d[2], d[1]], &Format::dense(2), 1.0);
        let A = tensor!(A(i,j) = B(i,j) * C(i,k) * D(k,j); B: csr; A: csr).unwrap();
        let want = oracle("A(i,j) = B(i,j) * C(i,k) * D(k,j)", &[("B", &B), ("C", &C), ("D", &D)]);
        assert_close(&dense(&A), &want, "sddmm");
        let E = random_tensor(&mut rng, &[d[0], d[1]], &fmt("dcsr", 2), 1.0 - density);
        let S = tensor!(S(i,j) = B(i,j) - E(i,j); B: csr; E: dcsr; S: dcsr).unwrap();
        assert_close(&dense(&S), &oracle("S(i,j) = B(i,j) - E(i,j)", &[("B", &B), ("E", &E)]), "sparse sub");
    }

    #[test]
    fn tensor_kernels_rank3((d, density, seed) in dims_and_density(4)) {
        let mut rng = Rng::new(seed);
        let B = random_tensor(&mut rng, &d[..3], &fmt("sss", 3), density);
        let c = random_tensor(&mut rng, &d[2..3], &Format::dense(1), 1.0);
        let A = tensor!(A(i,j) = B(i,j,k) * c(k); B: sss).unwrap();
        assert_close(&dense(&A), &oracle("A(i,j) = B(i,j,k) * c(k)", &[("B", &B), ("c", &c)]), "ttv");
        let a = tensor!(a = B(i,j,k) * B(i,j,k); B: sss).unwrap();
        assert_close(&dense(&a), &oracle("a = B(i,j,k) * B(i,j,k)", &[("B", &B)]), "norm");
        // MTTKRP: A(i,j) = B(i,k,l) * C(k,j) * D(l,j)
        let C = random_tensor(&mut rng, &[d[1], d[3]], &Format::dense(2), 1.0);
        let D = random_tensor(&mut rng, &[d[2], d[3]], &Format::dense(2), 1.0);
        let M = tensor!(M(i,j) = B(i,k,l) * C(k,j) * D(l,j); B: sss).unwrap();
        let want = oracle("M(i,j) = B(i,k,l) * C(k,j) * D(l,j)", &[("B", &B), ("C", &C), ("D", &D)]);
        assert_close(&dense(&M), &want, "mttkrp");
    }

    #[test]
    fn sparse_rank3_outputs_and_higher_ranks((d, density, seed) in dims_and_density(4)) {
        let mut rng = Rng::new(seed);
        // TTM into a sparse rank-3 output.
        let B = random_tensor(&mut rng, &d[..3], &fmt("sss", 3), density);
        let C = random_tensor(&mut rng, &[d[3], d[2]], &Format::dense(2), 1.0);
        let A = tensor!(A(i,j,k) = B(i,j,l) * C(k,l); B: sss; A: sss).unwrap();
        prop_assert_eq!(A.format(), &fmt("sss", 3));
        assert_close(&dense(&A), &oracle("A(i,j,k) = B(i,j,l) * C(k,l)", &[("B", &B), ("C", &C)]), "ttm");
        // Sparse element-wise product of rank-3 tensors with different level formats and sparsity.
        let E = random_tensor(&mut rng, &d[..3], &fmt("dss", 3), 1.0 - density);
        let P = tensor!(P(i,j,k) = B(i,j,k) * E(i,j,k); B: sss; E: dss; P: sss).unwrap();
        assert_close(&dense(&P), &oracle("P(i,j,k) = B(i,j,k) * E(i,j,k)", &[("B", &B), ("E", &E)]), "mul3");
        // 4th-order MTTKRP: A(i,j) = B(i,k,l,m) * C(k,j) * D(l,j) * F(m,j).
        let B4 = random_tensor(&mut rng, &[d[0], d[1], d[2], d[1]], &fmt("ssss", 4), density);
        let C = random_tensor(&mut rng, &[d[1], d[3]], &Format::dense(2), 1.0);
        let D = random_tensor(&mut rng, &[d[2], d[3]], &Format::dense(2), 1.0);
        let F = random_tensor(&mut rng, &[d[1], d[3]], &Format::dense(2), 1.0);
        let B = &B4;
        let M = tensor!(M(i,j) = B(i,k,l,m) * C(k,j) * D(l,j) * F(m,j); B: ssss).unwrap();
        let want = oracle(
            "M(i,j) = B(i,k,l,m) * C(k,j) * D(l,j) * F(m,j)",
            &[("B", &B4), ("C", &C), ("D", &D), ("F", &F)],
        );
        assert_close(&dense(&M), &want, "mttkrp4");
        // Rank 5: a sum of a sparse and a dense tensor, reduced over two modes.
        let d5 = [d[0], d[1], d[2].min(2), d[3].min(2), 2];
        let S = random_tensor(&mut rng, &d5, &fmt("dsdss", 5), density);
        let T = random_tensor(&mut rng, &d5, &Format::dense(5), 1.0);
        let R = tensor!(R(i,j,k) = S(i,j,k,l,m) + T(i,j,k,l,m); S: dsdss).unwrap();
        let want = oracle("R(i,j,k) = S(i,j,k,l,m) + T(i,j,k,l,m)", &[("S", &S), ("T", &T)]);
        assert_close(&dense(&R), &want, "rank5");
    }
}

#[test]
fn elementwise_math_and_accumulate() {
    let mut rng = Rng::new(7);
    let x = random_tensor(&mut rng, &[6], &Format::dense(1), 1.0);
    let w = random_tensor(&mut rng, &[6], &Format::dense(1), 1.0);
    let y = tensor!(y(i) = sqrt(abs(x(i))) * 2 - exp(-w(i)) / 4 + log(abs(w(i)) + 1)).unwrap();
    let want = oracle(
        "y(i) = sqrt(abs(x(i))) * 2 - exp(-w(i)) / 4 + log(abs(w(i)) + 1)",
        &[("x", &x), ("w", &w)],
    );
    assert_close(&dense(&y), &want, "math");
    let mut y = y;
    let before = dense(&y);
    y = tensor!(y(i) += x(i) * w(i)).unwrap();
    let want = oracle(
        "y(i) += x(i) * w(i)",
        &[
            ("x", &x),
            ("w", &w),
            (
                "y",
                &Tensor::dense_from_vec(vec![6], before.data.clone()).unwrap(),
            ),
        ],
    );
    assert_close(&dense(&y), &want, "accumulate");
}

#[test]
fn references_and_f32_u64_tensors() {
    let mut rng = Rng::new(11);
    let A64 = random_tensor(&mut rng, &[5, 4], &fmt("csr", 2), 0.5);
    let x64 = random_tensor(&mut rng, &[4], &Format::dense(1), 1.0);
    let want = oracle("y(i) = A(i,j) * x(j)", &[("A", &A64), ("x", &x64)]);
    // Same entries as f32 values with 64-bit coordinates, passed by reference.
    let A: Tensor<f32, u64> = Tensor::from_entries(
        vec![5, 4],
        fmt("csr", 2),
        A64.entries().map(|(c, v)| (c, v as f32)),
    )
    .unwrap();
    let x: Tensor<f32, u64> =
        Tensor::dense_from_vec(vec![4], x64.to_dense().iter().map(|&v| v as f32).collect())
            .unwrap();
    let (A, x) = (&A, &x);
    let y = tensor!(y(i) = A(i,j) * x(j); A: csr).unwrap();
    for (g, w) in y.to_dense().iter().zip(&want.data) {
        assert!(
            (f64::from(*g) - w).abs() < 1e-4 * (1.0 + w.abs()),
            "{g} vs {w}"
        );
    }
}

/// Counting in i64: paths of length two with counts whose sums pass 2^53 (where f64 rounds)
/// and the triangles of a graph, both exact against brute force in i128.
#[test]
fn i64_counting_tensors_are_exact() {
    let mut rng = Rng::new(17);
    let n = 9;
    // Multiplicities near 2^28: a product is near 2^56, beyond f64's exact integers, and a
    // sum of nine fits in i64.
    let mut entries = |density: f64| -> Vec<(Vec<usize>, i64)> {
        (0..n * n)
            .filter(|_| rng.unit() < density)
            .map(|k| (vec![k / n, k % n], (1 << 28) + (k as i64 * 7919) % 4096))
            .collect()
    };
    let A: Tensor<i64> = Tensor::from_entries(vec![n, n], fmt("csr", 2), entries(0.5)).unwrap();
    let B: Tensor<i64> = Tensor::from_entries(vec![n, n], fmt("csr", 2), entries(0.5)).unwrap();
    let P = tensor!(P(i,k) = A(i,j) * B(j,k); A: csr; B: csr; P: csr).unwrap();
    let (a, b) = (A.to_dense(), B.to_dense());
    let mut beyond_f64 = false;
    for (at, &got) in P.to_dense().iter().enumerate() {
        let (i, k) = (at / n, at % n);
        let want: i128 = (0..n)
            .map(|j| i128::from(a[i * n + j]) * i128::from(b[j * n + k]))
            .sum();
        assert_eq!(i128::from(got), want, "P({i},{k})");
        beyond_f64 |= want > 1 << 53;
    }
    assert!(
        beyond_f64,
        "some count must pass 2^53, or this proves nothing about i64"
    );

    // Triangles i < j < k of an undirected graph: the strictly lower triangle L of its
    // adjacency counts each once as L(j,i) L(k,j) L(k,i).
    let edges: Vec<(Vec<usize>, i64)> = (0..n * n)
        .filter(|&k| k / n > k % n && rng.unit() < 0.6)
        .map(|k| (vec![k / n, k % n], 1))
        .collect();
    let L: Tensor<i64> = Tensor::from_entries(vec![n, n], fmt("csr", 2), edges).unwrap();
    let t = tensor!(t = L(k,j) * L(j,i) * L(k,i); L: csr).unwrap();
    let l = L.to_dense();
    let edge = |x: usize, y: usize| l[x * n + y] != 0;
    let mut want = 0;
    for i in 0..n {
        for j in i + 1..n {
            for k in j + 1..n {
                want += i64::from(edge(j, i) && edge(k, j) && edge(k, i));
            }
        }
    }
    assert!(want > 0);
    assert_eq!(t.to_dense(), vec![want]);
}

#[test]
fn run_time_checks_name_tensor_mode_and_dims() {
    let mut rng = Rng::new(3);
    let A = random_tensor(&mut rng, &[3, 4], &fmt("csr", 2), 0.5);
    let x = random_tensor(&mut rng, &[5], &Format::dense(1), 1.0);
    let err = tensor!(y(i) = A(i,j) * x(j); A: csr).unwrap_err();
    assert_eq!(
        err,
        BindError::Dim {
            var: "j".into(),
            tensor: "x".into(),
            mode: 0,
            dim: 5,
            first_tensor: "A".into(),
            first_mode: 1,
            first_dim: 4
        }
    );
    // A stored by columns where the kernel was compiled for rows.
    let A = random_tensor(&mut rng, &[3, 5], &fmt("csc", 2), 0.5);
    let err = tensor!(y(i) = A(i,j) * x(j); A: csr).unwrap_err();
    assert!(
        matches!(&err, BindError::Format { tensor, .. } if tensor == "A"),
        "{err}"
    );
}

/// A 3-order tensor whose `(i, j)` fibres number `rows × (1..=40)`, lengths skewed (every
/// 37th row is 20 times wider) and every fifth row empty, in `format`.
fn skewed_3_order(rows: usize, format: &str) -> Tensor<f64> {
    let mut entries = Vec::new();
    for i in (0..rows).filter(|i| i % 5 != 3) {
        let fibres = if i % 37 == 0 { 40 } else { 1 + i % 3 };
        for j in 0..fibres {
            for k in (0..30).filter(|k| (i + j + k) % 7 < 2) {
                entries.push((vec![i, j, k], (i * 131 + j * 17 + k) as f64 * 0.25 - 3.0));
            }
        }
    }
    Tensor::from_entries(vec![rows, 40, 30], format, entries).unwrap()
}

/// Parallel kernels whose sparse output copies an operand's structure cut their jobs by a
/// binary search over the operand's first level (output values in equal shares, 4096 or
/// more per job): with ~20 k output values over skewed rows there are several jobs, and
/// each fibre is summed in the same order as sequentially, so the results are equal bitwise.
#[test]
fn parallel_mirrored_outputs_equal_sequential() {
    let mut rng = Rng::new(5);
    let c = random_tensor(&mut rng, &[30], &Format::dense(1), 1.0);
    // Compressed first level (positions of `i`).
    let B = skewed_3_order(6000, "sss");
    let seq = tensor!(A(i,j) = B(i,j,k) * c(k); B: sss; A: ss).unwrap();
    let par = tensor!(A(i,j) = B(i,j,k) * c(k); B: sss; A: ss; parallelize(i)).unwrap();
    assert!(
        seq.vals().len() > 3 * 4096,
        "enough output values for several jobs"
    );
    assert_eq!(par, seq, "TTV over a compressed first level");
    // Dense first level (every `i` a job candidate).
    let B = skewed_3_order(6000, "dss");
    let seq = tensor!(A(i,j) = B(i,j,k) * c(k); B: dss; A: ds).unwrap();
    let par = tensor!(A(i,j) = B(i,j,k) * c(k); B: dss; A: ds; parallelize(i)).unwrap();
    assert_eq!(par, seq, "TTV over a dense first level");
}

/// Parallel kernels with a dense output indexed by a compressed first level hand out runs of
/// positions (the rows between their first coordinates, empty rows included) as jobs: with
/// thousands of sparse rows there are several jobs, and each row is computed as sequentially.
#[test]
fn parallel_sparse_rows_equal_sequential() {
    let mut rng = Rng::new(6);
    // 2400 rows of 4 values: jobs of 1024 positions.
    let B = skewed_3_order(3000, "sss");
    let C = random_tensor(&mut rng, &[40, 4], &Format::dense(2), 1.0);
    let D = random_tensor(&mut rng, &[30, 4], &Format::dense(2), 1.0);
    let seq = tensor!(A(i,r) = B(i,j,k) * C(j,r) * D(k,r); B: sss).unwrap();
    let par = tensor!(A(i,r) = B(i,j,k) * C(j,r) * D(k,r); B: sss; parallelize(i)).unwrap();
    assert_eq!(par, seq, "MTTKRP over a compressed first level");
}

/// A dense output cell written once is stored, not added to the zeroed output: the stored sum
/// must still be `+0.0` where every product is `-0.0` (as `0.0 + (-0.0)` is), sequential and
/// parallel, and where an entry factor scales a zero sum by a negative number (`-1 * +0.0`
/// is `-0.0`, which adding into the zeroed cell made `+0.0`).
#[test]
fn stored_sums_keep_the_sign_of_zero_of_adding_into_zeros() {
    let entries = (0..6).map(|k| (vec![k / 2, k % 3], -0.0f64));
    let A: Tensor<f64, u32> = Tensor::from_entries(vec![3, 3], fmt("csr", 2), entries).unwrap();
    let x: Tensor<f64, u32> = Tensor::dense_from_vec(vec![3], vec![1.0, 2.0, 3.0]).unwrap();
    let b: Tensor<f64, u32> = Tensor::dense_from_vec(vec![3], vec![-1.0, -2.0, 5.0]).unwrap();
    let (A, x, b) = (&A, &x, &b);
    let sequential = tensor!(y(i) = A(i,j) * x(j); A: csr).unwrap();
    let parallel = tensor!(y(i) = A(i,j) * x(j); A: csr; parallelize(i)).unwrap();
    let scaled = tensor!(y(i) = b(i) * A(i,j) * x(j); A: csr).unwrap();
    for y in [&sequential, &parallel, &scaled] {
        let bits: Vec<u64> = y.vals().iter().map(|v| v.to_bits()).collect();
        assert_eq!(bits, vec![0u64; 3], "{:?}", y.vals());
    }
}

/// Parallel SpGEMM over many jobs (256 rows each, rayon tasks of up to 8): rows appended in
/// order, bitwise the sequential kernel's output.
#[test]
fn parallel_spgemm_over_many_jobs_is_the_sequential_one() {
    let mut rng = Rng::new(11);
    let A = random_tensor(&mut rng, &[5000, 400], &fmt("csr", 2), 0.01);
    let B = random_tensor(&mut rng, &[400, 300], &fmt("csr", 2), 0.02);
    let C = tensor!(C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; C: csr).unwrap();
    let P = tensor!(C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; C: csr; parallelize(i)).unwrap();
    assert!(C.vals().len() > 10_000, "{} entries", C.vals().len());
    assert_eq!(P.levels(), C.levels());
    assert_eq!(P.vals(), C.vals());
}
