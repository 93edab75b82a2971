//! Lowered kernels, run by the interpreter, against the dense reference evaluator (oracle):
//! the catalogue of issue 3 × random formats × random mode orders × random shapes and
//! densities (empty tensors, empty rows, single entries included).

#[path = "kernels_support/mod.rs"]
mod common;

use common::{catalogue, Case, Rng};
use proptest::prelude::*;
use tessera_compiler::interp;
use tessera_compiler::lower::LowerError;
use tessera_formats::{Format, Level, Tensor};

/// Runs one random instance of `expr`; returns false when lowering rejected the random
/// formats (no compatible loop order), after checking that rejection's message and hint.
fn check_random<I: tessera_formats::Index>(expr: &str, seed: u64) -> bool {
    let mut rng = Rng(seed);
    let case = Case::random(expr, &mut rng);
    let kernel = match case.lower() {
        Ok(k) => k,
        Err(LowerError::NoLoopOrder { hint, .. }) => {
            assert!(
                hint.contains("store ") || hint.contains("no single operand"),
                "{hint}"
            );
            return false;
        }
        Err(e) => panic!("{}: {e}", case.describe()),
    };
    let inputs: Vec<Tensor<f64, I>> = case.input_tensors();
    let refs: Vec<&Tensor<f64, I>> = inputs.iter().collect();
    let got = interp::run(&kernel, &refs, &case.out_dims())
        .unwrap_or_else(|e| panic!("{}: {e}\n{kernel}", case.describe()));
    assert_eq!(
        got.format(),
        &case.format_of(&case.output_name()),
        "output format"
    );
    common::assert_close(
        &got.to_dense(),
        &case.oracle(),
        &format!("{}\n{kernel}", case.describe()),
    );
    true
}

/// As [`check_random`], with inputs that are block views (dense first levels with offsets).
fn check_random_blocks(expr: &str, seed: u64) {
    let mut rng = Rng(seed);
    let case = Case::random(expr, &mut rng);
    let Ok(kernel) = case.lower() else { return };
    let (inputs, data) = common::block_inputs::<u32>(&case, &mut rng);
    let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
    let got = interp::run(&kernel, &refs, &case.out_dims())
        .unwrap_or_else(|e| panic!("{}: {e}\n{kernel}", case.describe()));
    let what = format!("blocks of {}\n{kernel}", case.describe());
    common::assert_close(&got.to_dense(), &common::oracle_on(&case, &data), &what);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn catalogue_matches_oracle_u32(pick in 0..catalogue().len(), seed in any::<u64>()) {
        check_random::<u32>(catalogue()[pick], seed);
    }

    #[test]
    fn catalogue_on_block_views_matches_oracle(pick in 0..catalogue().len(), seed in any::<u64>()) {
        check_random_blocks(catalogue()[pick], seed);
    }

    #[test]
    fn catalogue_matches_oracle_u64(pick in 0..catalogue().len(), seed in any::<u64>()) {
        check_random::<u64>(catalogue()[pick], seed);
    }
}

/// Every catalogue entry lowers and matches the oracle for some random formats (so no entry
/// is silently skipped because every random format is rejected).
#[test]
fn every_catalogue_entry_runs() {
    for expr in catalogue() {
        let ran = (0..64u64)
            .filter(|s| check_random::<u32>(expr, s * 7919 + 1))
            .count();
        assert!(ran > 0, "`{expr}` never lowered");
    }
}

/// f32 values go through the same kernels.
#[test]
fn f32_values() {
    let case = Case::fixed(
        "y(i) = A(i,j) * x(j)",
        &[("A", "ds")],
        &[("i", 5), ("j", 4)],
        3,
    );
    let k = case.lower().unwrap();
    let inputs: Vec<Tensor<f32, u32>> = case.input_tensors_as::<f32, u32>();
    let refs: Vec<&Tensor<f32, u32>> = inputs.iter().collect();
    let got = interp::run(&k, &refs, &case.out_dims()).unwrap();
    let got: Vec<f64> = got.to_dense().iter().map(|v| *v as f64).collect();
    common::assert_close(&got, &case.oracle(), "f32 spmv");
}

/// SpMV on a row block of a CSR matrix (dense level with an offset, SuperTaco §4.2) gives
/// the block's rows of the full product and zeros elsewhere.
#[test]
fn spmv_on_row_blocks() {
    for seed in 0..40u64 {
        let mut rng = Rng(seed + 100);
        let (m, n) = (rng.below(7) + 1, rng.below(6) + 1);
        let case = Case::fixed(
            "y(i) = A(i,j) * x(j)",
            &[("A", "ds")],
            &[("i", m), ("j", n)],
            seed,
        );
        let k = case.lower().unwrap();
        let full: Vec<Tensor<f64, u32>> = case.input_tensors();
        let lo = rng.below(m + 1);
        let hi = lo + rng.below(m - lo + 1);
        let (dims, format, levels, vals) = full[0].clone().into_parts();
        let (pos, crd) = match &levels[1] {
            Level::Compressed { pos, crd } => (pos.clone(), crd.clone()),
            _ => unreachable!("ds"),
        };
        let (plo, phi) = (pos[lo] as usize, pos[hi] as usize);
        let block_pos: Vec<u32> = pos[lo..=hi].iter().map(|p| p - pos[lo]).collect();
        let block = Tensor::from_parts(
            dims,
            format,
            vec![
                Level::Dense {
                    size: hi - lo,
                    offset: lo,
                },
                Level::Compressed {
                    pos: block_pos,
                    crd: crd[plo..phi].to_vec(),
                },
            ],
            vals[plo..phi].to_vec(),
        )
        .unwrap();
        let got = interp::run(&k, &[&block, &full[1]], &[m])
            .unwrap()
            .to_dense();
        let want = case.oracle();
        let want: Vec<f64> = (0..m)
            .map(|i| if (lo..hi).contains(&i) { want[i] } else { 0.0 })
            .collect();
        common::assert_close(&got, &want, &format!("rows {lo}..{hi} of {m}x{n}"));
    }
}

/// The loop orders TACO would pick for the classic kernels, and the assembly strategies.
#[test]
fn classic_plans() {
    let order = |expr: &str, formats: &[(&str, &str)]| {
        let k = Case::fixed(expr, formats, &[], 0).lower().unwrap();
        k.nests
            .iter()
            .map(|n| {
                n.loops
                    .iter()
                    .map(|l| k.vars[l.var].name.clone())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect::<Vec<_>>()
            .join(" ; ")
    };
    assert_eq!(order("y(i) = A(i,j) * x(j)", &[("A", "csr")]), "i,j");
    assert_eq!(order("y(j) = A(i,j) * x(i)", &[("A", "csr")]), "i,j");
    assert_eq!(order("y(j) = A(i,j) * x(i)", &[("A", "csc")]), "j,i");
    assert_eq!(
        order("y(i) = A(i,j) * x(j) + z(i)", &[("A", "csr")]),
        "i,j ; i"
    );
    assert_eq!(
        order(
            "C(i,j) = A(i,k) * B(k,j)",
            &[("A", "csr"), ("B", "csr"), ("C", "csr")]
        ),
        "i,k,j"
    );
    assert_eq!(
        order("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", &[("B", "sss")]),
        "i,k,l,j"
    );
    assert_eq!(
        order("A(i,j,k) = B(i,j,l) * C(k,l)", &[("B", "sss")]),
        "i,j,l,k"
    );
    let k = Case::fixed(
        "C(i,j) = A(i,k) * B(k,j)",
        &[("A", "csr"), ("B", "csr"), ("C", "csr")],
        &[],
        0,
    )
    .lower()
    .unwrap();
    assert!(matches!(
        k.nests[0].assembly,
        tessera_compiler::ir::Assembly::Workspace { flush_depth: 1, .. }
    ));
    let k = Case::fixed(
        "C(i,j) = A(i,j) + B(i,j)",
        &[("A", "csr"), ("B", "csr"), ("C", "csr")],
        &[],
        0,
    )
    .lower()
    .unwrap();
    assert_eq!(k.nests[0].assembly, tessera_compiler::ir::Assembly::InOrder);
    // Co-iteration: addition unites the two rows, multiplication intersects them.
    use tessera_compiler::ir::{Domain, Formula};
    assert_eq!(
        k.nests[0].loops[1].domain,
        Domain::Merge(Formula::Any(vec![Formula::Iter(0), Formula::Iter(1)]))
    );
    let k = Case::fixed(
        "C(i,j) = A(i,j) * B(i,j)",
        &[("A", "csr"), ("B", "csr")],
        &[],
        0,
    )
    .lower()
    .unwrap();
    assert_eq!(
        k.nests[0].loops[1].domain,
        Domain::Merge(Formula::All(vec![Formula::Iter(0), Formula::Iter(1)]))
    );
    // exp(0) = 1: a sparse operand under exp does not restrict the loop.
    let k = Case::fixed("y(i) = exp(x(i))", &[("x", "s")], &[], 0)
        .lower()
        .unwrap();
    assert_eq!(k.nests[0].loops[0].domain, Domain::Universe);
}

/// Conflicting mode orders re-pack the cheapest operand once, and say so, with or without a
/// distribution schedule.
#[test]
fn impossible_order_repacks_or_names_the_fix() {
    let case = Case::fixed(
        "C(i,j) = A(i,j) + B(i,j)",
        &[("A", "csr"), ("B", "csc")],
        &[],
        0,
    );
    let k = case.lower().unwrap();
    assert_eq!(k.repacks.len(), 1, "{k}");
    assert!(k.to_string().contains("repack "), "{k}");
    let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
    let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
    let got = interp::run(&k, &refs, &case.out_dims()).unwrap();
    common::assert_close(&got.to_dense(), &case.oracle(), &k.to_string());
    // A vector and a matrix conflict: the vector is the cheaper one to re-pack.
    let k = Case::fixed(
        "y(i) = A(i,j) * B(j,i) * x(i)",
        &[("A", "ds"), ("B", "ds")],
        &[],
        0,
    )
    .lower()
    .unwrap();
    assert_eq!(k.repacks.len(), 1, "{k}");

    // Under a distribution schedule too (the plan partitions the re-packed form).
    let k = Case::fixed(
        "C(i,j) = A(i,j) + B(i,j); split(i, io, ii, 2)",
        &[("A", "csr"), ("B", "csc")],
        &[],
        0,
    )
    .lower()
    .unwrap();
    assert_eq!(k.repacks.len(), 1, "{k}");
}

/// `parallelize` must name the outermost free loop.
#[test]
fn parallelize_checks_the_loop() {
    let ok = Case::fixed(
        "y(i) = A(i,j) * x(j); parallelize(i)",
        &[("A", "csr")],
        &[],
        0,
    )
    .lower();
    assert_eq!(ok.unwrap().parallel, Some(0));
    let bad = Case::fixed(
        "y(j) = A(i,j) * x(i); parallelize(j)",
        &[("A", "csr")],
        &[],
        0,
    )
    .lower()
    .unwrap_err();
    assert!(
        bad.to_string()
            .contains("not the outermost loop (loop order: i, j)"),
        "{bad}"
    );
}

/// Formats the property test draws cover every level type at every level of a rank-3
/// tensor where it is legal (no singleton at level 0), COO tails `sqq` and `?sq` included.
#[test]
fn random_formats_cover_level_types() {
    let mut rng = Rng(5);
    let mut seen = [[false; 3]; 3];
    let mut coo = std::collections::BTreeSet::new();
    for _ in 0..300 {
        let f = common::random_format(3, &mut rng);
        for (k, l) in f.levels().iter().enumerate() {
            seen[k][*l as usize] = true;
        }
        coo.extend(f.coo_start());
    }
    assert_eq!(seen, [[true, true, false], [true; 3], [true; 3]]);
    assert_eq!(coo.into_iter().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(
        Format::parse("ds", 2).unwrap(),
        common::format_from_text("ds", 2)
    );
}

/// `+=`: the kernel takes the output's previous value as its last input (named like the
/// output) and adds to it, in any output format.
#[test]
fn accumulate_adds_to_the_previous_output() {
    let mut ran = 0;
    for seed in 0..60u64 {
        for expr in [
            "y(i) += A(i,j) * x(j)",
            "C(i,j) += A(i,j) * B(i,j)",
            "a += b(i) * c(i)",
        ] {
            let mut rng = Rng(seed);
            let case = Case::random(expr, &mut rng);
            let Ok(kernel) = case.lower() else { continue };
            let out = case.output_name();
            assert_eq!(
                kernel.inputs().last(),
                Some(&out.as_str()),
                "{}",
                case.describe()
            );
            let out_dims = case.out_dims();
            let len: usize = out_dims.iter().product();
            let init: Vec<f64> = (0..len)
                .map(|n| if n % 3 == 0 { 0.0 } else { n as f64 })
                .collect();
            let init = tessera_compiler::oracle::DenseArray::new(out_dims.clone(), init).unwrap();
            let mut inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
            let fmt = case.format_of(&out);
            inputs.push(
                Tensor::from_entries(out_dims.clone(), fmt, common::dense_entries(&init)).unwrap(),
            );
            let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
            let got = interp::run(&kernel, &refs, &out_dims).unwrap();
            let want =
                tessera_compiler::oracle::evaluate(&case.checked, &case.data, Some(&init)).unwrap();
            common::assert_close(
                &got.to_dense(),
                &want.data,
                &format!("{}\n{kernel}", case.describe()),
            );
            ran += 1;
        }
    }
    assert!(ran > 60, "only {ran} accumulate cases lowered");
}

/// Inputs that break the precondition (dimensions that disagree with `out_dims`) give an
/// error from the interpreter, not a panic or a silently wrong tensor.
#[test]
fn disagreeing_dimensions_are_an_error() {
    for (expr, formats) in [
        ("y(i) = A(i,j) * x(j)", &[("A", "ds"), ("y", "d")]),
        ("y(i) = A(i,j) * x(j)", &[("A", "ss"), ("y", "s")]),
        ("C(i,j) = A(i,k) * B(k,j)", &[("A", "ds"), ("C", "ds")]),
    ] {
        let case = Case::fixed(expr, formats, &[("i", 5)], 1);
        let k = case.lower().unwrap();
        let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
        let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
        let mut small = case.out_dims();
        small[0] = 2;
        assert!(interp::run(&k, &refs, &case.out_dims()).is_ok());
        let err = interp::run(&k, &refs, &small).unwrap_err().to_string();
        assert!(err.starts_with("index `i` has dimension"), "{expr}: {err}");
        assert!(err.contains(" 5 ") && err.contains(" 2 "), "{expr}: {err}");
    }
}

/// The IR verifier rejects plans that break its invariants (so lowering bugs surface as an
/// internal error, not as wrong results).
#[test]
fn verifier_rejects_broken_plans() {
    let k = Case::fixed("y(i) = A(i,j) * x(j)", &[("A", "csr")], &[], 0)
        .lower()
        .unwrap();
    assert_eq!(k.verify(), Ok(()));
    // Iterate A's compressed level before its parent is resolved.
    let mut bad = k.clone();
    let it = bad.nests[0].loops[1].iterate.remove(0);
    bad.nests[0].loops[0].iterate.push(it);
    assert!(bad.verify().is_err());
    // Forget to locate x.
    let mut bad = k.clone();
    bad.nests[0].loops[1].locate.clear();
    assert!(bad.verify().unwrap_err().contains("not fully resolved"));
    // Accumulate over the free variable.
    let mut bad = k;
    bad.nests[0].acc_depth = 0;
    assert!(bad.verify().unwrap_err().contains("free variable"));
}

/// Runs one random instance of a semiring-catalogue statement through the interpreter and
/// compares it, with absent entries read as the reduction's identity, against the oracle.
fn check_semiring<I: tessera_formats::Index>(expr: &str, seed: u64) -> bool {
    let mut rng = Rng(seed);
    let case = Case::random(expr, &mut rng);
    let kernel = match case.lower() {
        Ok(k) => k,
        Err(LowerError::NoLoopOrder { .. }) => return false,
        Err(e) => panic!("{}: {e}", case.describe()),
    };
    let inputs: Vec<Tensor<f64, I>> = case.input_tensors();
    let refs: Vec<&Tensor<f64, I>> = inputs.iter().collect();
    let got = interp::run(&kernel, &refs, &case.out_dims())
        .unwrap_or_else(|e| panic!("{}: {e}\n{kernel}", case.describe()));
    common::assert_close(
        &common::densify(&got, case.fill()),
        &case.oracle(),
        &format!("{}\n{kernel}", case.describe()),
    );
    true
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn semirings_match_oracle(pick in 0..common::semiring_catalogue().len(), seed in any::<u64>()) {
        check_semiring::<u32>(common::semiring_catalogue()[pick], seed);
    }
}

/// Every semiring-catalogue entry runs for some random formats.
#[test]
fn every_semiring_entry_runs() {
    for expr in common::semiring_catalogue() {
        let ran = (0..64u64)
            .filter(|s| check_semiring::<u64>(expr, s * 7919 + 3))
            .count();
        assert!(ran > 0, "`{expr}` never lowered");
    }
}

/// A sparse output with a dense level below a compressed one pads that level: under `min`
/// the padding must be +∞ (absent), not 0 — in every output format.
#[test]
fn min_plus_into_padded_sparse_output() {
    for (seed, out) in (0..24u64).flat_map(|s| ["sd", "sd:1,0", "ds", "ss"].map(|f| (s, f))) {
        let case = Case::fixed(
            "C(i,j) = min[k](A(i,k) + B(k,j))",
            &[("A", "ds"), ("B", "ss"), ("C", out)],
            &[("i", 4), ("j", 5), ("k", 3)],
            seed,
        );
        let k = case.lower().unwrap();
        let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
        let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
        let got = interp::run(&k, &refs, &case.out_dims()).unwrap();
        common::assert_close(
            &common::densify(&got, f64::INFINITY),
            &case.oracle(),
            &format!("{}\n{k}", case.describe()),
        );
    }
}

/// `A(i,j) = B(j,i)` into CSR: entries come out once, column by column, and are put in row
/// order by counting sorts (`Scatter`), not collected and comparison-sorted.
#[test]
fn transpose_into_a_sparse_output_scatters() {
    for seed in 0..16u64 {
        let case = Case::fixed(
            "A(i,j) = B(j,i)",
            &[("A", "csr"), ("B", "csr")],
            &[("i", 5), ("j", 7)],
            seed,
        );
        let k = case.lower().unwrap();
        assert_eq!(k.nests[0].assembly, tessera_compiler::ir::Assembly::Scatter);
        let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
        let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
        let got = interp::run(&k, &refs, &case.out_dims()).unwrap();
        assert_eq!(got.format(), &case.format_of("A"));
        common::assert_close(&got.to_dense(), &case.oracle(), &case.describe());
    }
}

/// COO operands in every role the lattice has ([`common::coo_catalogue`]): non-unique levels
/// group equal coordinates, so each result equals the oracle's.
#[test]
fn coo_operands_match_the_oracle() {
    for (expr, formats) in common::coo_catalogue() {
        for seed in 0..12u64 {
            let case = Case::fixed(expr, formats, &[], seed);
            let kernel = case
                .lower()
                .unwrap_or_else(|e| panic!("{}: {e}", case.describe()));
            let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
            let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
            let got = interp::run(&kernel, &refs, &case.out_dims())
                .unwrap_or_else(|e| panic!("{}: {e}\n{kernel}", case.describe()));
            assert_eq!(got.format(), &case.format_of(&case.output_name()));
            common::assert_close(
                &got.to_dense(),
                &case.oracle(),
                &format!("{}\n{kernel}", case.describe()),
            );
        }
    }
}
