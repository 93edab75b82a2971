//! Distribution plans: their shapes against SuperTaco §4.5 / thesis Fig. 7.2, and their block
//! tasks — run by the interpreter on random formats × random schedules × 1, 2 and 4 threads —
//! against the dense reference evaluator.

#[path = "kernels_support/mod.rs"]
mod common;

use common::{catalogue, random_schedule, Case, Rng};
use proptest::prelude::*;
use tessera_compiler::check::{self, Checked};
use tessera_compiler::ir::Kernel;
use tessera_compiler::plan::{self, exec, Partition, Plan, Privilege, Role, StoreKind};
use tessera_compiler::{interp, lower, parse};
use tessera_formats::Tensor;

fn checked(src: &str) -> Checked {
    let stmt = parse::program(src, 0).unwrap_or_else(|e| panic!("{src}: {e:?}"));
    check::check(stmt, &check::Dims::new()).unwrap_or_else(|e| panic!("{src}: {e:?}"))
}

fn planned(src: &str) -> (Kernel, Plan) {
    let c = checked(src);
    let k = lower::lower(&c).unwrap_or_else(|e| panic!("{src}: {e}"));
    let p = plan::plan(&c, &k).unwrap_or_else(|d| panic!("{src}: {d:?}"));
    (k, p)
}

/// `(store, privilege, partition)` of every argument, as text.
fn shape(p: &Plan) -> Vec<(String, Privilege, String)> {
    p.args
        .iter()
        .map(|a| {
            let part = match &a.partition {
                Partition::Tiled { dims } => format!(
                    "tiled {:?}",
                    dims.iter()
                        .map(|d| d.map(|g| p.grid.vars[g].name.clone()))
                        .collect::<Vec<_>>()
                ),
                Partition::Aligned(s) => format!("align {s}"),
                Partition::Image(s) => format!("image {s}"),
                Partition::Broadcast => "broadcast".into(),
                Partition::Blocks { by } => format!("blocks {by:?}"),
                Partition::Pieces => "pieces".into(),
            };
            (a.store.to_string(), a.privilege, part)
        })
        .collect()
}

fn row(s: &str, p: Privilege, part: &str) -> (String, Privilege, String) {
    (s.to_string(), p, part.to_string())
}

#[test]
fn row_split_spmv_has_exactly_figure_7_2s_constraints() {
    let (_, p) = planned("y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 4)");
    use Privilege::*;
    assert_eq!(
        shape(&p),
        vec![
            row("y.vals", Write, "tiled [Some(\"io\")]"),
            row("A.pos1", Read, "align y.vals"),
            row("A.crd1", Read, "image A.pos1"),
            row("A.vals", Read, "image A.pos1"),
            row("x.vals", Read, "image A.crd1"),
        ]
    );
    assert_eq!((p.grid.launches(), p.grid.domain()), (1, vec![4]));
    assert_eq!(p.sharding, plan::Sharding::OwnerComputes(vec![0]));
    let text = p.to_string();
    for want in [
        "align(y.vals)",
        "image(A.pos1)",
        "image(A.crd1)",
        "launch domain [4]",
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
}

#[test]
fn csf_chains_images_level_by_level() {
    let (_, p) = planned("A(i,j) = B(i,j,k) * c(k); B: dss; split(i, io, ii, 3)");
    use Privilege::*;
    assert_eq!(
        shape(&p),
        vec![
            row("A.vals", Write, "tiled [Some(\"io\"), None]"),
            // Not the output's shape: tiled by the same block variable instead of aligned.
            row("B.pos1", Read, "tiled [Some(\"io\")]"),
            row("B.crd1", Read, "image B.pos1"),
            row("B.pos2", Read, "image B.pos1"),
            row("B.crd2", Read, "image B.pos2"),
            row("B.vals", Read, "image B.pos2"),
            row("c.vals", Read, "image B.crd2"),
        ]
    );
}

#[test]
fn an_operand_no_split_variable_reaches_is_broadcast() {
    // `x` is dense and visited by `j`, which A's dense level binds: nothing to image from.
    let (_, p) = planned("y(i) = B(i,j) * x(j); split(i, io, ii, 2)");
    let s = shape(&p);
    assert_eq!(s[1], row("B.vals", Privilege::Read, "tiled [Some(\"io\")]"));
    assert_eq!(s[2], row("x.vals", Privilege::Read, "broadcast"));
}

#[test]
fn inner_and_compressed_splits_use_tensor_blocks() {
    let (_, p) = planned("y(i) = A(i,j) * x(j); A: csr; split(j, jo, ji, 2); extend(jo)");
    let s = shape(&p);
    assert_eq!(s[0], row("y.vals", Privilege::Reduce, "broadcast"));
    assert_eq!(s[1], row("A.blocks", Privilege::Read, "blocks [0]"));
    let (_, p) = planned("y(i) = A(i,j) * x(j); A: dcsr; split(i, io, ii, 2)");
    assert_eq!(shape(&p)[1], row("A.blocks", Privilege::Read, "blocks [0]"));
}

#[test]
fn extend_reduces_and_sequential_splits_launch_in_turn() {
    let (_, p) = planned(
        "C(i,j) = A(i,k) * B(k,j); A: csr; split(i, io, ii, 2); split(k, ko, ki, 3); split(j, jo, ji, [1, 2, 3]); extend(ko)",
    );
    assert_eq!(p.args[0].privilege, Privilege::Reduce);
    assert_eq!(p.grid.domain(), vec![2, 3, 4]);
    assert_eq!(p.grid.launches(), 1);
    let (_, p) = planned(
        "C(i,j) = A(i,k) * B(k,j); A: csr; split(i, io, ii, 2); split(k, ko, ki, 3); split(j, jo, ji, [1, 2, 3]); order(ko, jo, io)",
    );
    assert_eq!(p.args[0].privilege, Privilege::ReadWrite);
    let names: Vec<&str> = p.grid.vars.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["ko", "jo", "io"]);
    assert_eq!(p.grid.vars[0].role, Role::Sequential);
    // The number of launches is the product of the sequential splits, the launch domain the
    // product of the parallel ones.
    assert_eq!((p.grid.launches(), p.grid.domain()), (3, vec![4, 2]));
    let (_, p) = planned("y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 2); map(io)");
    assert_eq!(p.sharding, plan::Sharding::Map(vec![0]));
}

#[test]
fn a_sparse_output_is_emitted_in_pieces() {
    let (_, p) = planned("C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; C: csr; split(i, io, ii, 2)");
    let s = shape(&p);
    assert_eq!(s[0], row("C.coords", Privilege::WriteUnbound, "pieces"));
    assert_eq!(s[1], row("C.vals", Privilege::WriteUnbound, "pieces"));
    assert!(!p
        .args
        .iter()
        .any(|a| a.store.tensor == "C" && a.store.kind == StoreKind::Crd(1)));
}

#[test]
fn a_nested_split_is_refused_with_the_directive_span() {
    let src = "y(i) = A(i,j) * x(j); split(i, io, ii, 2); split(ii, iio, iii, 2)";
    let c = checked(src);
    let k = lower::lower(&c).unwrap();
    let d = plan::plan(&c, &k).unwrap_err();
    let span = &d.span;
    assert_eq!(&src[span.start..span.end], "split(ii, iio, iii, 2)");
    assert!(d.message.contains("made by a split"), "{}", d.message);
    assert!(
        d.hint.as_deref().unwrap_or("").contains("once"),
        "{:?}",
        d.hint
    );
}

/// A distributed statement whose operands' mode orders agree with no loop order runs as the
/// unsplit one does: the input is re-packed once (given in its own format, or already in the
/// re-packed one), then partitioned.
#[test]
fn conflicting_mode_orders_under_a_split_are_re_packed_once() {
    let src = "C(i,j) = A(i,j) + B(i,j); A: csr; B: csc; C: csr; split(i, io, ii, 3)";
    let (kernel, plan) = planned(src);
    assert_eq!(kernel.repacks.len(), 1, "{kernel}");
    let case = Case::fixed(
        "C(i,j) = A(i,j) + B(i,j)",
        &[("A", "csr"), ("B", "csc"), ("C", "csr")],
        &[("i", 7), ("j", 5)],
        11,
    );
    let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
    let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
    let want = case.oracle();
    let rt = tessera_runtime::Runtime::new(2);
    let given = plan::on_runtime::run(&rt, &plan, &kernel, &refs, &case.out_dims()).unwrap();
    common::assert_close(&given.to_dense(), &want, src);
    let b = interp::repack(refs[1], &kernel.repacks[0].to).unwrap();
    let re_packed = plan::on_runtime::run(&rt, &plan, &kernel, &[refs[0], &b], &case.out_dims());
    common::assert_close(&re_packed.unwrap().to_dense(), &want, src);
    let pooled = exec::run_interp(&plan, &kernel, &refs, &case.out_dims(), 2).unwrap();
    common::assert_close(&pooled.output.to_dense(), &want, src);
}

/// How a test runs a plan's block tasks: on `threads` threads, returning the output.
type Runner = fn(&Plan, &Kernel, &[&Tensor<f64, u32>], &[usize], usize) -> Tensor<f64, u32>;

fn by_thread_pool(
    p: &Plan,
    k: &Kernel,
    ins: &[&Tensor<f64, u32>],
    out: &[usize],
    threads: usize,
) -> Tensor<f64, u32> {
    exec::run_interp(p, k, ins, out, threads)
        .unwrap_or_else(|e| panic!("{e}"))
        .output
}

fn on_the_runtime(
    p: &Plan,
    k: &Kernel,
    ins: &[&Tensor<f64, u32>],
    out: &[usize],
    threads: usize,
) -> Tensor<f64, u32> {
    let rt = tessera_runtime::Runtime::new(threads);
    plan::on_runtime::run(&rt, p, k, ins, out).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs one random case of `expr` with a random schedule at 1, 2 and 4 threads through `run`:
/// the oracle's answer, and bitwise the same at every thread count. Returns false when the
/// random formats had no loop order.
/// A random case of `expr` with a random schedule: the case, the statement, its kernel and
/// its plan (an input whose mode order agrees with no loop order re-packed); `None` when
/// lowering refuses the random formats.
fn random_planned(expr: &str, rng: &mut Rng) -> Option<(Case, String, Kernel, Plan)> {
    let case = Case::random(expr, rng);
    let schedule = random_schedule(&case.checked, rng);
    let src = format!("{}; {schedule}", case.source);
    let src = src.trim_end_matches("; ").to_string();
    let c = checked(&src);
    let kernel = lower::lower(&c).ok()?;
    let plan = plan::plan(&c, &kernel).unwrap_or_else(|d| panic!("{src}: {d:?}"));
    Some((case, src, kernel, plan))
}

fn check_planned(expr: &str, seed: u64, run: Runner) -> bool {
    let Some((case, src, kernel, plan)) = random_planned(expr, &mut Rng(seed)) else {
        return false;
    };
    let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
    let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
    let what = format!("{src} with dims {:?}\n{plan}", case.dims);
    let mut first: Option<Vec<f64>> = None;
    for threads in [1, 2, 4] {
        let out =
            std::panic::catch_unwind(|| run(&plan, &kernel, &refs, &case.out_dims(), threads))
                .unwrap_or_else(|_| panic!("{what}"));
        assert_eq!(out.format(), &case.format_of(&case.output_name()));
        // Absent entries read as the reduction's identity (+∞ under `min`).
        let got = common::densify(&out, case.fill());
        match &first {
            None => {
                common::assert_close(&got, &case.oracle(), &what);
                first = Some(got);
            }
            Some(f) => assert!(
                f.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{threads} threads differ: {f:?} vs {got:?}\n{what}"
            ),
        }
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn planned_catalogue_matches_oracle(pick in 0..catalogue().len(), seed in any::<u64>()) {
        check_planned(catalogue()[pick], seed, by_thread_pool);
    }

    /// Block tasks cost what their blocks cost: summed over every block, each nest evaluates
    /// its expression exactly as often as one unsplit run, and every loop at or inside the
    /// innermost split loop of its nest visits exactly the coordinates the unsplit loop visits
    /// (loops outside it run once per block of the variables inside: SuperTaco's blocks
    /// keep their outer dense levels whole too).
    #[test]
    fn blocks_together_cost_one_unsplit_run(pick in 0..catalogue().len(), seed in any::<u64>()) {
        let Some((case, src, kernel, plan)) = random_planned(catalogue()[pick], &mut Rng(seed)) else {
            return Ok(());
        };
        let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
        let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
        let dims = interp::checked_dims(&kernel, &refs, &case.out_dims()).unwrap();
        let whole = tessera_compiler::ir::Block::whole(&dims);
        let (_, one) = interp::run_block(&kernel, &refs, &case.out_dims(), &whole).unwrap();
        let run = exec::run_interp(&plan, &kernel, &refs, &case.out_dims(), 1).unwrap();
        prop_assert_eq!(run.work.leaves, one.leaves, "{}", src);
        let split = |v: usize| plan.grid.vars.iter().any(|b| b.var_id == v);
        for (n, nest) in kernel.nests.iter().enumerate() {
            let inner = nest.loops.iter().rposition(|l| split(l.var)).unwrap_or(0);
            prop_assert_eq!(&run.work.visits[n][inner..], &one.visits[n][inner..], "{} nest {}", src, n);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// `min`, `max` and `or` statements split like `+` ones: extended blocks, sequential
    /// launches and sparse pieces fold with the statement's reduction.
    #[test]
    fn planned_semirings_match_oracle(pick in 0..common::semiring_catalogue().len(), seed in any::<u64>()) {
        check_planned(common::semiring_catalogue()[pick], seed, by_thread_pool);
    }

    #[test]
    fn planned_semirings_on_the_runtime_match_oracle(pick in 0..common::semiring_catalogue().len(), seed in any::<u64>()) {
        check_planned(common::semiring_catalogue()[pick], seed, on_the_runtime);
    }
}

/// Every semiring statement runs on the runtime with its reduction variable extended and
/// with it hoisted sequentially (the two ways blocks share output cells).
#[test]
fn every_semiring_entry_runs_planned_with_shared_cells() {
    // Statements with a reduction variable (`min[k](...)`); element-wise ones have none.
    let reducing = common::semiring_catalogue()
        .into_iter()
        .filter(|e| e.contains('['));
    for (n, expr) in reducing.enumerate() {
        for how in ["extend", "sequential"] {
            let ran = (0..64u64)
                .filter(|s| check_semiring_split(expr, *s * 7919 + n as u64, how))
                .count();
            assert!(ran > 0, "{expr} ({how}): no random instance lowered");
        }
    }
}

/// One random case of a semiring `expr` with its first reduction variable split in three,
/// extended or not (sequential), on the runtime at 1, 2 and 4 threads against the oracle.
fn check_semiring_split(expr: &str, seed: u64, how: &str) -> bool {
    let mut rng = Rng(seed);
    let case = Case::random(expr, &mut rng);
    let Some(v) = case.checked.vars.iter().find(|v| !v.free) else {
        return false;
    };
    let mut schedule = format!("split({0}, {0}o, {0}i, 3)", v.name);
    if how == "extend" {
        schedule += &format!("; extend({}o)", v.name);
    }
    let src = format!("{}; {schedule}", case.source);
    let c = checked(&src);
    let Some(kernel) = lower::lower(&c).ok() else {
        return false;
    };
    let plan = plan::plan(&c, &kernel).unwrap_or_else(|d| panic!("{src}: {d:?}"));
    let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
    let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
    for threads in [1, 2, 4] {
        let out = on_the_runtime(&plan, &kernel, &refs, &case.out_dims(), threads);
        let what = format!(
            "{src} at {threads} threads with dims {:?}\n{plan}",
            case.dims
        );
        common::assert_close(&common::densify(&out, case.fill()), &case.oracle(), &what);
    }
    true
}

/// Every catalogue entry runs planned for some random schedule (none is silently skipped).
#[test]
fn every_catalogue_entry_runs_planned() {
    for (n, expr) in catalogue().iter().enumerate() {
        let ran = (0..64u64)
            .filter(|s| check_planned(expr, *s * 7919 + n as u64, by_thread_pool))
            .count();
        assert!(ran > 0, "{expr}: no random instance lowered");
    }
}

/// A row split of SpMV over many more ranges than rows (empty blocks) still matches.
#[test]
fn more_ranges_than_rows_give_empty_blocks() {
    let case = Case::fixed(
        "y(i) = A(i,j) * x(j)",
        &[("A", "csr")],
        &[("i", 3), ("j", 5)],
        7,
    );
    let src = format!("{}; split(i, io, ii, 8)", case.source);
    let c = checked(&src);
    let kernel = lower::lower(&c).unwrap();
    let plan = plan::plan(&c, &kernel).unwrap();
    let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
    let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
    let run = exec::run_interp(&plan, &kernel, &refs, &case.out_dims(), 2).unwrap();
    assert_eq!(run.points, 8);
    common::assert_close(&run.output.to_dense(), &case.oracle(), &src);
}

/// The kernel catalogue and statements that stress plans: an operand read by two nests at
/// different coordinates.
fn plan_catalogue() -> Vec<&'static str> {
    let mut c = catalogue();
    c.extend([
        "y(i) = A(i,j) * x(j) + B(i,j,k) * x(j)",
        "y(i) = A(i,j) * x(j) + B(i,j) * x(j) + z(i)",
    ]);
    c
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn planned_catalogue_on_the_runtime_matches_oracle(pick in 0..plan_catalogue().len(), seed in any::<u64>()) {
        check_planned(plan_catalogue()[pick], seed, on_the_runtime);
    }
}

/// Row-split SpMV on the runtime, split points included, against the plain kernel; and the
/// runtime saw one task and the Fig. 7.2 partitions.
#[test]
fn row_split_spmv_runs_as_block_tasks_on_the_runtime() {
    for (schedule, nonempty) in [
        ("split(i, io, ii, 4)", 4),
        ("split(i, io, ii, [3, 9, 20])", 3),
        ("split(i, io, ii, 1)", 1),
    ] {
        let case = Case::fixed(
            "y(i) = A(i,j) * x(j)",
            &[("A", "csr")],
            &[("i", 17), ("j", 9)],
            3,
        );
        let src = format!("{}; {schedule}", case.source);
        let (kernel, plan) = planned(&src);
        let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
        let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
        let rt = tessera_runtime::Runtime::new(2);
        let out = plan::on_runtime::run(&rt, &plan, &kernel, &refs, &case.out_dims()).unwrap();
        let plain = interp::run(&kernel, &refs, &case.out_dims()).unwrap();
        assert_eq!(out.vals(), plain.vals(), "{src}");
        // One task; a point per block (a block whose tiles are all empty may be skipped).
        let s = rt.stats();
        assert_eq!(s.tasks_issued, 1, "{src}");
        let points = s.points_run as usize;
        assert!(
            (nonempty..=plan.grid.points()).contains(&points),
            "{src}: {points} points"
        );
    }
}

/// Runs of one plan on one runtime (its registered task reused for equal shapes, another for
/// other shapes), issued without waiting so that they are in flight together, each give the
/// plain kernel's answer: the broadcast input cached per launch is told apart by run.
#[test]
fn runs_of_one_plan_in_flight_together_each_give_their_answer() {
    let src = "y(i) = A(i,j) * x(j) + B(i,j,k) * x(j); A: csr; split(i, io, ii, 3)";
    let (kernel, plan) = planned(src);
    let rt = tessera_runtime::Runtime::new(2);
    let mut runs = Vec::new();
    for (m, n) in [(5, 4), (5, 4), (7, 3)] {
        let entries = (0..m * n)
            .filter(|k| k % 3 != 1)
            .map(|k| (vec![k / n, k % n], k as f64));
        let a: Tensor<f64, u32> = Tensor::from_entries(vec![m, n], "csr", entries).unwrap();
        let x: Tensor<f64, u32> =
            Tensor::dense_from_vec(vec![n], (0..n).map(|j| j as f64 - 1.5).collect()).unwrap();
        let b: Tensor<f64, u32> =
            Tensor::dense_from_vec(vec![m, n, 2], (0..m * n * 2).map(|v| v as f64).collect())
                .unwrap();
        let a = plan::on_runtime::Stored::upload(&rt, &a).unwrap();
        let x = plan::on_runtime::Stored::upload(&rt, &x).unwrap();
        let b = plan::on_runtime::Stored::upload(&rt, &b).unwrap();
        let y =
            plan::on_runtime::run_stored(&rt, &plan, &kernel, &[&a, &x, &b], &[m], None).unwrap();
        runs.push((a, x, b, y, m));
    }
    for (a, x, b, y, m) in &runs {
        let (a, x, b) = (
            a.to_tensor(&rt).unwrap(),
            x.to_tensor(&rt).unwrap(),
            b.to_tensor(&rt).unwrap(),
        );
        let want = interp::run(&kernel, &[&a, &x, &b], &[*m]).unwrap();
        assert_eq!(y.to_tensor(&rt).unwrap().vals(), want.vals(), "{m} rows");
    }
    assert_eq!(rt.stats().tasks_issued, 3);
}

/// A plan run again over stored tensors keeps each point's rebased `pos` pieces: a run over
/// another tensor of the same shapes, whose blocks read the same ranges of `pos` and `crd`
/// but whose rows hold their entries differently, must not get the first tensor's pieces,
/// and the first tensor run again still gives its answer (compiled-in block kernels and the
/// interpreter use the same pieces: the interpreter here).
#[test]
fn runs_over_tensors_of_the_same_shapes_each_get_their_own_rebased_pos() {
    let (kernel, plan) = planned("y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 3)");
    let rt = tessera_runtime::Runtime::new(2);
    // Rows in pairs (one block each): the pair's two entries in its first row, or its second.
    let matrix = |second: bool| -> Tensor<f64, u32> {
        let entries = (0..6).map(|k| {
            let row = 2 * (k / 2) + usize::from(second);
            (vec![row, k % 5], k as f64 + 1.0)
        });
        Tensor::from_entries(vec![6, 5], "csr", entries).unwrap()
    };
    let x: Tensor<f64, u32> =
        Tensor::dense_from_vec(vec![5], vec![1.0, -2.0, 3.0, 0.5, 4.0]).unwrap();
    let sx = plan::on_runtime::Stored::upload(&rt, &x).unwrap();
    let tensors = [matrix(false), matrix(true)];
    let stored: Vec<_> = tensors
        .iter()
        .map(|a| plan::on_runtime::Stored::upload(&rt, a).unwrap())
        .collect();
    for which in [0, 1, 0, 1, 1, 0] {
        let want = interp::run(&kernel, &[&tensors[which], &x], &[6]).unwrap();
        let inputs = [&stored[which], &sx];
        let y = plan::on_runtime::run_stored(&rt, &plan, &kernel, &inputs, &[6], None).unwrap();
        assert_eq!(
            y.to_tensor(&rt).unwrap().vals(),
            want.vals(),
            "tensor {which}"
        );
    }
}

/// Runs of one plan over tensors of the same shapes on runtimes made one after the other,
/// in both element types on each, each give their own answer: what a run keeps for the next (its
/// task's shape, kept for the process; its points' rebased `pos`, kept per runtime and keyed
/// by store ids, which each runtime numbers from 0) is not handed to a run it does not fit.
#[test]
fn runs_on_two_runtimes_and_value_types_keep_apart_what_they_reuse() {
    let (kernel, plan) = planned("y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 3)");
    // Rows in pairs (one block each): the pair's entries in its first row, or its second.
    fn matrix<V: tessera_formats::Value>(second: bool) -> Tensor<V, u32> {
        let entries = (0..6).map(|k| {
            let row = 2 * (k / 2) + usize::from(second);
            (vec![row, k % 5], V::from_f64(k as f64 + 1.0))
        });
        Tensor::from_entries(vec![6, 5], "csr", entries).unwrap()
    }
    fn run<V: tessera_compiler::plan::on_runtime::PlanValue>(
        rt: &tessera_runtime::Runtime,
        kernel: &Kernel,
        plan: &Plan,
        second: bool,
    ) -> (Vec<V>, Vec<V>) {
        let a = matrix::<V>(second);
        let xs = [1.0, -2.0, 3.0, 0.5, 4.0].map(V::from_f64).to_vec();
        let x: Tensor<V, u32> = Tensor::dense_from_vec(vec![5], xs).unwrap();
        let stored = [
            plan::on_runtime::Stored::upload(rt, &a).unwrap(),
            plan::on_runtime::Stored::upload(rt, &x).unwrap(),
        ];
        let inputs = [&stored[0], &stored[1]];
        let y = plan::on_runtime::run_stored(rt, plan, kernel, &inputs, &[6], None).unwrap();
        let want = interp::run(kernel, &[&a, &x], &[6]).unwrap();
        (
            y.to_tensor(rt).unwrap().vals().to_vec(),
            want.vals().to_vec(),
        )
    }
    // Runtimes made one after the other: each numbers its stores from 0, so the second's
    // `A` has the first's store ids, and its blocks read the same ranges of them.
    for second in [false, true, false] {
        let rt = tessera_runtime::Runtime::new(2);
        let (got, want) = run::<f64>(&rt, &kernel, &plan, second);
        assert_eq!(got, want, "f64 on a new runtime, second rows: {second}");
    }
    // Both value types on one runtime.
    let rt = tessera_runtime::Runtime::new(2);
    for second in [false, true] {
        let (got, want) = run::<f64>(&rt, &kernel, &plan, second);
        assert_eq!(got, want, "f64, second rows: {second}");
        let (got, want) = run::<f32>(&rt, &kernel, &plan, second);
        assert_eq!(got, want, "f32, second rows: {second}");
    }
}

/// A dense vector that one nest reads at an operand's coordinates and another at every
/// coordinate is broadcast, not imaged (an image would drop the second nest's reads).
#[test]
fn a_vector_read_by_another_nest_at_every_coordinate_is_not_imaged() {
    let src = "y(i) = A(i,j) * x(j) + B(i,j,k) * x(j); A: csr; split(i, io, ii, 2)";
    let (kernel, plan) = planned(src);
    let x = shape(&plan).into_iter().find(|r| r.0 == "x.vals").unwrap();
    assert_eq!(x.2, "broadcast", "{plan}");
    let a: Tensor<f64, u32> =
        Tensor::from_entries(vec![2, 4], "csr", vec![(vec![0, 0], 1.0)]).unwrap();
    let x: Tensor<f64, u32> = Tensor::dense_from_vec(vec![4], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let b: Tensor<f64, u32> = Tensor::dense_from_vec(vec![2, 4, 1], vec![1.0; 8]).unwrap();
    let refs = [&a, &x, &b];
    let rt = tessera_runtime::Runtime::new(2);
    let out = plan::on_runtime::run(&rt, &plan, &kernel, &refs, &[2]).unwrap();
    assert_eq!(out.vals(), &[11.0, 10.0]);
}

#[test]
fn a_grid_of_too_many_blocks_is_refused_at_its_split() {
    let src = "y(i) = A(i,j) * x(j); split(i, io, ii, 4096); split(j, jo, ji, 4096); extend(jo)";
    let c = checked(src);
    let k = lower::lower(&c).unwrap();
    let d = plan::plan(&c, &k).unwrap_err();
    assert_eq!(&src[d.span.start..d.span.end], "split(j, jo, ji, 4096)");
    assert!(d.message.contains("blocks"), "{}", d.message);
    let huge = "y(i) = A(i,j) * x(j); split(i, io, ii, 100000000000000)";
    let c = checked(huge);
    assert!(plan::plan(&c, &lower::lower(&c).unwrap()).is_err());
}

#[test]
fn reversed_block_bounds_are_an_error_not_a_panic() {
    let (kernel, _) = planned("y(i) = A(i,j) * x(j); A: csr");
    let a: Tensor<f64, u32> =
        Tensor::from_entries(vec![1, 4], "csr", (0..4).map(|j| (vec![0, j], 1.0))).unwrap();
    let x: Tensor<f64, u32> = Tensor::dense_from_vec(vec![4], vec![1.0; 4]).unwrap();
    #[allow(clippy::reversed_empty_ranges)] // the point of the test
    let block = tessera_compiler::ir::Block {
        bounds: vec![0..1, 3..1],
        first: vec![true, true],
    };
    let err = interp::run_block(&kernel, &[&a, &x], &[1], &block).unwrap_err();
    assert!(matches!(err, interp::InterpError::Block { .. }), "{err}");
}

/// A COO operand is planned as its unique form (`dsq` as `dss`: a singleton level's `pos`
/// is an image of its parent's positions), and its blocks, re-levelled into COO at each
/// point, give the plain kernel's answer on the runtime.
#[test]
fn coo_operands_plan_as_their_unique_form_and_run_on_the_runtime() {
    let coo = shape(&planned("A(i,j) = B(i,j,k) * c(k); B: dsq; split(i, io, ii, 3)").1);
    let unique = shape(&planned("A(i,j) = B(i,j,k) * c(k); B: dss; split(i, io, ii, 3)").1);
    assert_eq!(coo, unique);
    for (expr, formats) in [
        ("A(i,j) = B(i,j,k) * c(k)", [("B", "dsq"), ("A", "ds")]),
        ("y(i) = A(i,j) * x(j)", [("A", "sq"), ("y", "d")]),
        ("C(i,j) = A(i,j) + B(i,j)", [("A", "sq"), ("C", "sq")]),
    ] {
        for schedule in ["split(i, io, ii, 3)", "split(j, jo, ji, 2)"] {
            let case = Case::fixed(expr, &formats, &[], 7);
            let src = format!("{}; {schedule}", case.source);
            let (kernel, plan) = planned(&src);
            let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
            let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
            let rt = tessera_runtime::Runtime::new(2);
            let out = plan::on_runtime::run(&rt, &plan, &kernel, &refs, &case.out_dims())
                .unwrap_or_else(|e| panic!("{src}: {e}"));
            assert_eq!(out.format(), &case.format_of(&case.output_name()), "{src}");
            common::assert_close(&out.to_dense(), &case.oracle(), &src);
        }
    }
}

/// A host tensor copied into stores (`Stored::upload`: `crd` and `vals` copied, `pos` read
/// in place into ranges) comes back equal, array for array, for CSR, DCSR and COO.
#[test]
fn uploaded_host_tensors_round_trip_exactly() {
    let rt = tessera_runtime::Runtime::new(2);
    let (m, n) = (70, 40);
    let entries = (0..m * n)
        .filter(|k| k % 3 != 1)
        .map(|k| (vec![k / n, k % n], k as f64 * 0.5 - 7.0));
    let entries: Vec<(Vec<usize>, f64)> = entries.collect();
    for format in ["csr", "dcsr", "coo"] {
        let t: Tensor<f64, u32> =
            Tensor::from_entries(vec![m, n], format, entries.iter().cloned()).unwrap();
        let back = plan::on_runtime::Stored::upload(&rt, &t)
            .unwrap()
            .into_tensor(&rt)
            .unwrap();
        assert_eq!(back.levels(), t.levels(), "{format}");
        assert_eq!(back.vals(), t.vals(), "{format}");
    }
}

/// `map(...)` is the sharding key across thread ranks: each rank runs the points whose `map`
/// variables its block of their values holds (counted by `points_run`), and every rank's
/// output equals one rank's, bit for bit (the extended blocks fold in one order).
#[test]
fn map_picks_the_rank_of_each_point_across_ranks() {
    use std::sync::Arc;
    use tessera_runtime::transport::{run_ranks, Communicator, ThreadComm};
    let case = Case::fixed(
        "y(i) = A(i,j) * x(j)",
        &[("A", "csr")],
        &[("i", 12), ("j", 8)],
        5,
    );
    let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
    let refs: Vec<&Tensor<f64, u32>> = inputs.iter().collect();
    let base = "split(i, io, ii, 3); split(j, jo, ji, 2); extend(jo); order(io, jo)";
    // Launch domain (io, jo) = 3 × 2, point p = (p / 2, p % 2); the owner by each schedule.
    type Owner = fn(usize, usize) -> usize;
    let cases: [(&str, Owner); 3] = [
        ("", |p, r| p * r / 6),
        ("; map(io)", |p, r| (p / 2) * r / 3),
        ("; map(jo)", |p, r| (p % 2) * r / 2),
    ];
    for (map, owner) in cases {
        let src = format!("{}; {base}{map}", case.source);
        let (kernel, plan) = planned(&src);
        let one = tessera_runtime::Runtime::new(1);
        let want = plan::on_runtime::run(&one, &plan, &kernel, &refs, &case.out_dims()).unwrap();
        for ranks in [2, 4] {
            let got = run_ranks(ranks, |comm: &ThreadComm| {
                let rt = tessera_runtime::Runtime::builder()
                    .threads(1)
                    .communicator(Arc::new(comm.clone()))
                    .try_build()?;
                let out = plan::on_runtime::run(&rt, &plan, &kernel, &refs, &case.out_dims())
                    .map_err(|e| tessera_runtime::RuntimeError::Transport(e.to_string()))?;
                Ok::<_, tessera_runtime::RuntimeError>((comm.rank(), rt.stats().points_run, out))
            });
            for r in got {
                let (rank, points, out) = r.unwrap_or_else(|e| panic!("{src}: {e}"));
                let mine = (0..6).filter(|&p| owner(p, ranks) == rank).count() as u64;
                assert_eq!(points, mine, "{src}: rank {rank} of {ranks}");
                assert_eq!(out.vals(), want.vals(), "{src}: rank {rank} of {ranks}");
            }
        }
    }
}

/// A compiled `--mpi` program's loading, across thread ranks: each rank reads `pos` whole and
/// only the `crd`/`vals` of its rows (bytes read counted exactly), the product equals one
/// rank's bit for bit, and a damaged array is an error on every rank (the ranks' checksums of
/// their ranges combine into the header's).
#[test]
fn each_rank_reads_only_its_rows_of_a_tcs_input() {
    use std::sync::Arc;
    use tessera_runtime::transport::{run_ranks, Communicator, ThreadComm};
    use tessera_runtime::RuntimeError as RtErr;
    let (m, n) = (203usize, 150usize);
    let entries = (0..m * n)
        .filter(|k| (k * 7919) % 13 < 2 + (k / n) % 3)
        .map(|k| (vec![k / n, k % n], (k % 29) as f64 - 14.5));
    let a: Tensor<f64, u32> = Tensor::from_entries(vec![m, n], "csr", entries).unwrap();
    let x: Tensor<f64, u32> =
        Tensor::dense_from_vec(vec![n], (0..n).map(|j| j as f64 * 0.25 - 3.0).collect()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("A.tcs");
    tessera_formats::tcs::write_tensor(&path, &a, None).unwrap();
    let src = "y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 4); map(io)";
    let (kernel, plan) = planned(src);
    let want = plan::on_runtime::run(
        &tessera_runtime::Runtime::new(1),
        &plan,
        &kernel,
        &[&a, &x],
        &[m],
    )
    .unwrap();
    let pos_bytes = (m + 1) * 4;
    let run = |path: std::path::PathBuf, ranks: usize| {
        let (plan, kernel, x) = (plan.clone(), kernel.clone(), x.clone());
        run_ranks(ranks, move |comm: &ThreadComm| {
            let fail = |e: plan::on_runtime::PlanRunError| RtErr::Transport(e.to_string());
            let format = a_format();
            let share =
                plan::on_runtime::read_tcs_share::<f64, u32>(&path, &format, &plan, "A", comm)
                    .map_err(fail)?
                    .expect("a csr file of the program's types is read in part");
            let read = share.bytes_read();
            let rt = tessera_runtime::Runtime::builder()
                .threads(1)
                .communicator(Arc::new(comm.clone()))
                .try_build()?;
            let a = plan::on_runtime::Stored::from_share(&rt, share).map_err(fail)?;
            let x = plan::on_runtime::Stored::upload(&rt, &x).map_err(fail)?;
            let y = plan::on_runtime::run_stored_inputs(&rt, &plan, &kernel, &[a, x], &[m], None)
                .map_err(fail)?;
            Ok::<_, RtErr>((comm.rank(), read, y))
        })
    };
    for ranks in [2, 4] {
        for r in run(path.clone(), ranks) {
            let (rank, (read, total), y) = r.unwrap_or_else(|e| panic!("{ranks} ranks: {e}"));
            assert_eq!(y.vals(), want.vals(), "rank {rank} of {ranks}");
            // The rank's rows: blocks of io (4 of ⌈203 / 4⌉ = 51 rows) by block sharding.
            let rows = plan::on_runtime::row_shares(&plan, "A", m, ranks).unwrap()[rank].clone();
            if ranks == 2 {
                let want = [0..102, 102..203][rank].clone();
                assert_eq!(rows.len(), 1, "rank {rank}: {rows:?}");
                assert_eq!(rows[0], want, "rank {rank}");
            }
            let nnz: usize = rows
                .iter()
                .flat_map(|r| r.clone())
                .map(|i| a.entries().filter(|(c, _)| c[0] == i).count())
                .sum();
            assert_eq!(
                read,
                (pos_bytes + nnz * 12) as u64,
                "rank {rank} of {ranks}"
            );
            assert!(read < total, "rank {rank} of {ranks}: {read} of {total}");
        }
    }
    // One byte of `vals` changed: every rank reports the damaged array.
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 9;
    bytes[at] ^= 0x40;
    let bad = dir.path().join("bad.tcs");
    std::fs::write(&bad, bytes).unwrap();
    for r in run(bad, 2) {
        let e = r.expect_err("a damaged file is an error").to_string();
        assert!(
            e.contains("fails its checksum") && e.contains("vals"),
            "{e}"
        );
    }
}

fn a_format() -> tessera_formats::Format {
    tessera_formats::Format::parse("csr", 2).unwrap()
}

/// The largest offset of `x`'s view any point of [`spmv_recording_x`] was handed.
static X_OFFSET_SEEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A block kernel of `y(i) = A(i,j) * x(j); A: csr` that records the offset of `x`'s view
/// (into [`X_OFFSET_SEEN`]) and computes its rows of `A x` by hand, into the tile when given
/// one, else as a tensor holding the block's rows (as a generated kernel does).
fn spmv_recording_x(
    inputs: &[tessera_formats::TensorView<'_, f64, u32>],
    out_dims: &[usize],
    bounds: &[std::ops::Range<usize>],
    _first: &[bool],
    tile: Option<&mut [f64]>,
) -> Option<Tensor<f64, u32>> {
    use tessera_formats::{Level, LevelView};
    let (a, x) = (&inputs[0], &inputs[1]);
    let LevelView::Dense { offset: x_off, .. } = x.levels()[0] else {
        panic!("x is dense")
    };
    X_OFFSET_SEEN.fetch_max(x_off, std::sync::atomic::Ordering::SeqCst);
    let LevelView::Dense {
        offset: row_off, ..
    } = a.levels()[0]
    else {
        panic!("A's rows are dense")
    };
    let LevelView::Compressed { pos, crd } = a.levels()[1] else {
        panic!("A's columns are compressed")
    };
    let rows = bounds[0].start.min(out_dims[0])..bounds[0].end.min(out_dims[0]);
    let vals: Vec<f64> = rows
        .clone()
        .map(|i| {
            let p = i - row_off;
            (pos[p] as usize..pos[p + 1] as usize)
                .map(|k| a.vals()[k] * x.vals()[crd[k] as usize - x_off])
                .sum()
        })
        .collect();
    if let Some(tile) = tile {
        tile.copy_from_slice(&vals);
        return None;
    }
    let level = Level::Dense {
        size: rows.len(),
        offset: rows.start,
    };
    let format = tessera_formats::Format::parse("d", 1).unwrap();
    Some(Tensor::from_parts(out_dims.to_vec(), format, vec![level], vals).unwrap())
}

/// On one rank, Fig. 7.2's image of `x` is read whole: every point's view of `x` starts at
/// coordinate 0 (so a generated block kernel runs its copy without `x`'s offset), though no
/// block's columns start at 0 here, and the answer is the unsplit kernel's.
#[test]
fn on_one_rank_the_imaged_vector_is_seen_whole() {
    let src = "y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 3)";
    let (kernel, plan) = planned(src);
    // Every row's columns are 2 and up: each block's image of `x` starts past 0.
    let entries = (0..9).flat_map(|i| [(vec![i, 2 + i % 4], 1.0 + i as f64), (vec![i, 7], 2.0)]);
    let a: Tensor<f64, u32> = Tensor::from_entries(vec![9, 8], "csr", entries).unwrap();
    let x: Tensor<f64, u32> =
        Tensor::dense_from_vec(vec![8], (0..8).map(|j| j as f64 - 2.5).collect()).unwrap();
    let rt = tessera_runtime::Runtime::new(2);
    let block: plan::on_runtime::BlockFn<f64, u32> = spmv_recording_x;
    let y = plan::on_runtime::run_compiled(&rt, &plan, &kernel, &[&a, &x], &[9], block).unwrap();
    let want = interp::run(&kernel, &[&a, &x], &[9]).unwrap();
    assert_eq!(y.vals(), want.vals());
    assert_eq!(X_OFFSET_SEEN.load(std::sync::atomic::Ordering::SeqCst), 0);
}
