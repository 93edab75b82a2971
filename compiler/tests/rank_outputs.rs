//! A plan's output across thread ranks, as a compiled `--mpi` program writes it: stored into
//! one `.tcs` file by every rank, each its own part (`PlanResult::store_file`), or gathered on
//! one rank (`PlanResult::gather_on`) — against the file and the tensor one process makes,
//! byte for byte, on random formats (dense and sparse outputs) and random schedules.

#[path = "kernels_support/mod.rs"]
mod common;

use common::{catalogue, random_schedule, Case, Rng};
use proptest::prelude::*;
use std::path::Path;
use std::sync::Arc;
use tessera_compiler::check;
use tessera_compiler::ir::Kernel;
use tessera_compiler::plan::on_runtime::{run_stored_result, PlanRunError, Stored};
use tessera_compiler::plan::{self, Plan};
use tessera_compiler::{lower, parse};
use tessera_formats::tcs::write_tensor;
use tessera_formats::Tensor;
use tessera_runtime::transport::{run_ranks, Communicator, ThreadComm};
use tessera_runtime::{Runtime, RuntimeError};

fn planned(src: &str) -> Option<(Kernel, Plan)> {
    let stmt = parse::program(src, 0).unwrap_or_else(|e| panic!("{src}: {e:?}"));
    let c = check::check(stmt, &check::Dims::new()).unwrap_or_else(|e| panic!("{src}: {e:?}"));
    let k = lower::lower(&c).ok()?;
    let p = plan::plan(&c, &k).unwrap_or_else(|d| panic!("{src}: {d:?}"));
    Some((k, p))
}

type Ins = Vec<Tensor<f64, u32>>;

/// Runs the plan on one process: the output tensor and the bytes of its `.tcs` file.
fn one_process(k: &Kernel, p: &Plan, ins: &Ins, out: &[usize], file: &Path) -> Tensor<f64, u32> {
    let refs: Vec<&Tensor<f64, u32>> = ins.iter().collect();
    let t = plan::on_runtime::run(&Runtime::new(1), p, k, &refs, out).unwrap();
    write_tensor(file, &t, None).unwrap();
    t
}

/// Runs the plan on `ranks` thread ranks and hands each rank's result to `then`.
fn on_ranks<T: Send>(
    ranks: usize,
    (k, p): (&Kernel, &Plan),
    ins: &Ins,
    out: &[usize],
    then: impl Fn(
            &Runtime,
            &ThreadComm,
            tessera_compiler::plan::on_runtime::PlanResult<f64, u32>,
        ) -> Result<T, PlanRunError>
        + Sync,
) -> Vec<T> {
    let fail = |e: PlanRunError| RuntimeError::Transport(e.to_string());
    run_ranks(ranks, |comm: &ThreadComm| {
        let rt = Runtime::builder()
            .threads(1)
            .communicator(Arc::new(comm.clone()))
            .try_build()?;
        let stored = (ins.iter().map(|t| Stored::upload(&rt, t)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(fail)?;
        let result = run_stored_result(&rt, p, k, &stored, out, None).map_err(fail)?;
        then(&rt, comm, result).map_err(fail)
    })
    .into_iter()
    .map(|r| r.unwrap_or_else(|e| panic!("{ranks} ranks: {e}")))
    .collect()
}

/// Stores the output from every rank into `file`; returns (values this rank stored, all).
fn stored_by_ranks(
    ranks: usize,
    kp: (&Kernel, &Plan),
    ins: &Ins,
    out: &[usize],
    file: &Path,
) -> Vec<(u64, u64)> {
    on_ranks(ranks, kp, ins, out, |rt, comm, result| {
        result.store_file(rt, comm as &(dyn Communicator + Send + Sync), file)
    })
}

fn bits(t: &Tensor<f64, u32>) -> Vec<u64> {
    t.vals().iter().map(|v| v.to_bits()).collect()
}

/// One random case of `expr`: the file every rank stores equals one process's byte for byte
/// (a COO output too) at 2 and 3 ranks, the ranks' stored values add up to
/// the output's, and the output gathered on the last rank is one process's tensor (nothing on
/// the others).
fn check_case(expr: &str, seed: u64) {
    let mut rng = Rng(seed);
    let case = Case::random(expr, &mut rng);
    let schedule = random_schedule(&case.checked, &mut rng);
    let src = format!("{}; {schedule}", case.source);
    let src = src.trim_end_matches("; ");
    let Some((k, p)) = planned(src) else { return };
    let (ins, out) = (case.input_tensors(), case.out_dims());
    let dir = tempfile::tempdir().unwrap();
    let want_file = dir.path().join("one.tcs");
    let want = one_process(&k, &p, &ins, &out, &want_file);
    let want_bytes = std::fs::read(&want_file).unwrap();
    for ranks in [2, 3] {
        let file = dir.path().join(format!("{ranks}.tcs"));
        let stored = stored_by_ranks(ranks, (&k, &p), &ins, &out, &file);
        let what = format!("{src} with dims {:?}, {ranks} ranks", case.dims);
        assert!(
            std::fs::read(&file).unwrap() == want_bytes,
            "{what}: the files differ"
        );
        let total = stored[0].1;
        assert_eq!(
            stored.iter().map(|s| s.0).sum::<u64>(),
            total,
            "{src}: {stored:?}"
        );
        let root = ranks - 1;
        let gathered = on_ranks(ranks, (&k, &p), &ins, &out, |rt, comm, result| {
            Ok((comm.rank(), result.gather_on(rt, root)?))
        });
        for (rank, t) in gathered {
            match t {
                Some(t) if rank == root => {
                    assert_eq!(t.levels(), want.levels(), "{src}: gathered on {rank}");
                    assert_eq!(bits(&t), bits(&want), "{src}: gathered on {rank}");
                }
                None if rank != root => {}
                other => panic!("{src}: rank {rank} of {ranks} got {}", other.is_some()),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn outputs_stored_or_gathered_across_ranks_are_one_process_s(
        pick in 0..catalogue().len(),
        seed in any::<u64>(),
    ) {
        check_case(catalogue()[pick], seed);
    }
}

/// A sparse product whose blocks share output cells (`k` split and extended: two points of
/// different ranks add into the same rows), stored by 2 and 4 ranks (CSR, DCSR and COO
/// outputs): one process's file, and
/// no rank stores (or holds, before storing) all of it — the sparse output is not gathered.
#[test]
fn a_sparse_output_with_shared_cells_is_stored_in_shares() {
    let n = 40;
    let entries = |seed: usize| {
        (0..n * n)
            .filter(move |e| (e * 7 + seed) % 11 < 3)
            .map(move |e| (vec![e / n, e % n], ((e + seed) % 13) as f64 * 0.37 - 2.0))
    };
    let a = Tensor::<f64, u32>::from_entries(vec![n, n], "csr", entries(1)).unwrap();
    let b = Tensor::<f64, u32>::from_entries(vec![n, n], "csr", entries(5)).unwrap();
    let ins = vec![a, b];
    for (formats, schedule) in [
        (
            "C: csr",
            "split(i, io, ii, 4); split(k, ko, ki, 3); extend(ko)",
        ),
        (
            "C: dcsr",
            "split(i, io, ii, 2); split(k, ko, ki, 2); extend(ko)",
        ),
        ("C: csr", "split(i, io, ii, 5)"),
        // COO: the non-unique level's `pos` counts entries, cut between ranks inside rows.
        (
            "C: coo",
            "split(i, io, ii, 4); split(k, ko, ki, 3); extend(ko)",
        ),
        ("C: coo", "split(i, io, ii, 5)"),
    ] {
        let src = format!("C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; {formats}; {schedule}");
        let (k, p) = planned(&src).expect("plans");
        let dir = tempfile::tempdir().unwrap();
        let want_file = dir.path().join("one.tcs");
        one_process(&k, &p, &ins, &[n, n], &want_file);
        for ranks in [2, 4] {
            let file = dir.path().join(format!("{ranks}.tcs"));
            let stored = stored_by_ranks(ranks, (&k, &p), &ins, &[n, n], &file);
            assert!(
                std::fs::read(&file).unwrap() == std::fs::read(&want_file).unwrap(),
                "{src}, {ranks} ranks: the stored file differs"
            );
            let total = stored[0].1;
            assert!(total > 100, "{src}: {total} values");
            assert_eq!(stored.iter().map(|s| s.0).sum::<u64>(), total);
            assert!(stored.iter().all(|s| s.0 < total), "{src}: {stored:?}");
        }
    }
}

/// Entries fold in the one-process order (launch by launch, point by point), whichever ranks
/// made them: `k` split sequentially (two launches) and `l` extended (points on both ranks),
/// so an output cell gets four partial sums, 1e16, 1, -1e16, 1 in that order (1 when added
/// in order; added rank by rank, 2). The stored file is one process's, byte for byte.
#[test]
fn entries_fold_in_launch_then_point_order_at_any_rank_count() {
    let mut b = Vec::new();
    for e in 0..16 {
        let (i, j, k, l) = (e >> 3, (e >> 2) & 1, (e >> 1) & 1, e & 1);
        let v = [[1e16, 1.0], [-1e16, 1.0]][k][l];
        b.push((vec![i, j, k, l], v));
    }
    let b = Tensor::<f64, u32>::from_entries(vec![2; 4], "dddd", b).unwrap();
    let c = Tensor::<f64, u32>::dense_from_vec(vec![2, 2], vec![1.0; 4]).unwrap();
    let ins = vec![b, c];
    let src = "A(i,j) = B(i,j,k,l) * C(k,l); A: csr; B: dddd; C: dd; \
               split(k, ko, ki, 2); split(l, lo, li, 2); extend(lo)";
    let (k, p) = planned(src).expect("plans");
    let dir = tempfile::tempdir().unwrap();
    let want_file = dir.path().join("one.tcs");
    let want = one_process(&k, &p, &ins, &[2, 2], &want_file);
    assert_eq!(want.vals(), [1.0; 4], "{src}");
    let file = dir.path().join("2.tcs");
    stored_by_ranks(2, (&k, &p), &ins, &[2, 2], &file);
    assert!(
        std::fs::read(&file).unwrap() == std::fs::read(&want_file).unwrap(),
        "{src}: the stored file differs"
    );
}
