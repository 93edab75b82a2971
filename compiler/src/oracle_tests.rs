//! The oracle against loops written out by hand for a few statements.
use super::*;
use crate::check::{check, Dims};
use crate::parse;
use proptest::prelude::*;

fn checked(src: &str) -> Checked {
    check(parse::program(src, 0).unwrap(), &Dims::new()).unwrap()
}

fn arr(dims: Vec<usize>, seed: &[f64]) -> DenseArray {
    let len: usize = dims.iter().product();
    DenseArray::new(
        dims,
        (0..len)
            .map(|k| seed[k % seed.len()] + k as f64 * 0.25)
            .collect(),
    )
    .unwrap()
}

fn inputs(list: Vec<(&str, DenseArray)>) -> HashMap<String, DenseArray> {
    list.into_iter().map(|(n, a)| (n.to_string(), a)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn spmv_plus_vector(m in 0usize..5, n in 0usize..5, seed in prop::collection::vec(-3.0f64..3.0, 1..8)) {
        let a = arr(vec![m, n], &seed);
        let x = arr(vec![n], &[seed[0] * 0.5 - 1.0]);
        let z = arr(vec![m], &[2.0]);
        let c = checked("y(i) = A(i,j) * x(j) - z(i)");
        let y = evaluate(&c, &inputs(vec![("A", a.clone()), ("x", x.clone()), ("z", z.clone())]), None).unwrap();
        let want: Vec<f64> = (0..m)
            .map(|i| {
                let mut s = 0.0;
                for j in 0..n {
                    s += a.data[i * n + j] * x.data[j];
                }
                s - z.data[i]
            })
            .collect();
        prop_assert_eq!(y.dims, vec![m]);
        prop_assert_eq!(y.data, want);
    }

    #[test]
    fn matmul_transposed_operand(m in 1usize..4, k in 0usize..4, n in 1usize..4, seed in prop::collection::vec(-3.0f64..3.0, 1..8)) {
        let a = arr(vec![m, k], &seed);
        let b = arr(vec![n, k], &seed);
        let c = checked("C(i,j) = A(i,l) * B(j,l)");
        let got = evaluate(&c, &inputs(vec![("A", a.clone()), ("B", b.clone())]), None).unwrap();
        prop_assert_eq!(&got.dims, &vec![m, n]);
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|l| a.data[i * k + l] * b.data[j * k + l]).sum();
                prop_assert!((got.data[i * n + j] - want).abs() <= 1e-12 * (1.0 + want.abs()));
            }
        }
    }
}

#[test]
fn scalar_inner_product_and_accumulate() {
    let c = checked("a += b(i) * b(i)");
    let b = DenseArray::new(vec![3], vec![1.0, 2.0, 3.0]).unwrap();
    let init = DenseArray::new(vec![], vec![10.0]).unwrap();
    let got = evaluate(&c, &inputs(vec![("b", b)]), Some(&init)).unwrap();
    assert_eq!(got.dims, Vec::<usize>::new());
    assert_eq!(got.data, vec![24.0]);
}

#[test]
fn functions_and_constants_elementwise() {
    let c = checked("y(i) = sqrt(abs(x(i))) * 2 + exp(-x(i)) / 4 - log(w(i))");
    let x = DenseArray::new(vec![2], vec![-4.0, 9.0]).unwrap();
    let w = DenseArray::new(vec![2], vec![1.0, std::f64::consts::E]).unwrap();
    let got = evaluate(&c, &inputs(vec![("x", x), ("w", w)]), None).unwrap();
    let want = [
        2.0 * 2.0 + 4f64.exp() / 4.0,
        3.0 * 2.0 + (-9f64).exp() / 4.0 - 1.0,
    ];
    for (g, w) in got.data.iter().zip(want) {
        assert!((g - w).abs() < 1e-12, "{g} vs {w}");
    }
}

#[test]
fn each_term_is_reduced_over_its_own_variables() {
    // y(i) = Σ_j A(i,j) + z(i): z is added once, not once per j.
    let c = checked("y(i) = A(i,j) + z(i)");
    let a = DenseArray::new(vec![1, 3], vec![1.0, 2.0, 3.0]).unwrap();
    let z = DenseArray::new(vec![1], vec![100.0]).unwrap();
    let got = evaluate(&c, &inputs(vec![("A", a), ("z", z)]), None).unwrap();
    assert_eq!(got.data, vec![106.0]);
}

#[test]
fn mismatched_dimensions_are_an_error() {
    let c = checked("y(i) = A(i,j) * x(j)");
    let a = DenseArray::zeros(vec![2, 3]);
    let x = DenseArray::zeros(vec![4]);
    let err = evaluate(&c, &inputs(vec![("A", a), ("x", x)]), None).unwrap_err();
    assert_eq!(
        err,
        OracleError::Dim {
            var: "j".into(),
            first: 3,
            second: 4
        }
    );
}

/// Shortest paths of two hops by hand: absent edges are +∞ and an unreachable pair stays +∞.
#[test]
fn min_plus_by_hand() {
    let inf = f64::INFINITY;
    // 0 -> 1 (1), 1 -> 2 (2), 0 -> 2 (5); nothing leaves 2.
    let w = DenseArray::new(
        vec![3, 3],
        vec![inf, 1.0, 5.0, inf, inf, 2.0, inf, inf, inf],
    )
    .unwrap();
    let c = checked("D(i,j) = min[k](W(i,k) + W(k,j))");
    let d = evaluate(&c, &inputs(vec![("W", w)]), None).unwrap();
    assert_eq!(d.data, vec![inf, inf, 3.0, inf, inf, inf, inf, inf, inf]);
}

/// max-times with the fill −∞ annihilating `*` also for negative factors; or-and on 0/1.
#[test]
fn max_times_and_or_and_by_hand() {
    let ninf = f64::NEG_INFINITY;
    let a = DenseArray::new(vec![1, 3], vec![2.0, ninf, -1.0]).unwrap();
    let x = DenseArray::new(vec![3], vec![-3.0, -4.0, 0.5]).unwrap();
    let c = checked("y(i) = max[j](A(i,j) * x(j))");
    let y = evaluate(&c, &inputs(vec![("A", a), ("x", x)]), None).unwrap();
    // −∞ · −4 would be +∞ in IEEE; here it is absent: max(−6, −0.5) = −0.5.
    assert_eq!(y.data, vec![-0.5]);
    let g = DenseArray::new(vec![2, 2], vec![0.0, 1.0, 1.0, 0.0]).unwrap();
    let f = DenseArray::new(vec![2], vec![1.0, 0.0]).unwrap();
    let c = checked("r(j) = or[i](and(f(i), G(i,j)))");
    let r = evaluate(&c, &inputs(vec![("f", f), ("G", g)]), None).unwrap();
    assert_eq!(r.data, vec![0.0, 1.0]);
}

/// A diagonal is read with one variable for both modes.
#[test]
fn diagonal_by_hand() {
    let a = DenseArray::new(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let z = DenseArray::new(vec![2], vec![10.0, 100.0]).unwrap();
    let c = checked("y(i) = A(i,i) * z(i)");
    let y = evaluate(&c, &inputs(vec![("A", a), ("z", z)]), None).unwrap();
    assert_eq!(y.data, vec![10.0, 400.0]);
}
