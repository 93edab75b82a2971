//! An adversarial differential test of scheduled plans: statements from a small grammar
//! (broadcasts, transposes, `+=`, SpGEMM, MTTKRP-like 3-d statements, sparse × dense) × random
//! formats × random schedules (splits of up to three variables into 1, the extent, more than
//! the extent or a random number of ranges, or split points past the extent; random
//! `extend`, `order`, `map`), run by the thread pool and on the runtime (1, 2 and 3 threads,
//! tracing on and off). Each run must match the reference evaluator, be bitwise the same as the
//! other runs of the same runner, and a sparse output must be a valid tensor in its format.

#[path = "kernels_support/mod.rs"]
mod common;

use common::{Case, Rng};
use tessera_compiler::check::{self, Checked};
use tessera_compiler::ir::Kernel;
use tessera_compiler::oracle::DenseArray;
use tessera_compiler::plan::{self, exec, Plan};
use tessera_compiler::{lower, parse};
use tessera_formats::Tensor;

/// Statements the catalogue of `plans.rs` lacks: broadcasts, transposed operands, `+=`,
/// outer products, reductions of every operand kind.
fn grammar() -> Vec<&'static str> {
    vec![
        "C(i,j) = x(i) * z(j)",
        "C(i,j) = A(i,j) * x(j)",
        "C(i,j) = A(j,i) + B(i,j)",
        "C(i,j) = A(i,k) * B(k,j)",
        "C(i,j) = A(i,k) * B(j,k)",
        "y(i) += A(i,j) * x(j)",
        "C(i,j) += A(i,k) * B(k,j)",
        "C(i,j) += A(i,j) * B(i,j)",
        "a += b(i) * c(i)",
        "a = A(i,j) * B(i,j)",
        "y(j) = A(i,j) * B(i,j)",
        "A(i,j) = B(i,k,l) * C(k,j) * D(l,j)",
        "A(i,j,k) = B(i,j,k) * c(k) + d(i)",
        "A(i,k,j) = B(i,j,l) * C(l,k)",
        "y(i) = A(i,j) * x(j) + A(i,j) * z(j)",
        "y(i) = max[j](A(i,j) * x(j))",
        "C(i,j) = min[k](A(i,k) + B(k,j))",
        "y(i) = or[j](A(i,j) * x(j))",
        "a = or[i,j](A(i,j) - 1)",
    ]
}

fn checked(src: &str) -> Checked {
    let stmt = parse::program(src, 0).unwrap_or_else(|e| panic!("{src}: {e:?}"));
    check::check(stmt, &check::Dims::new()).unwrap_or_else(|e| panic!("{src}: {e:?}"))
}

/// `case` with a random schedule: its source, checked statement, kernel and plan; `None`
/// where lowering refuses the statement (a schedule the kernel cannot take).
fn scheduled(case: &Case, rng: &mut Rng) -> Option<(String, Checked, Kernel, Plan)> {
    let sched = schedule(case, rng);
    let src = format!("{}; {sched}", case.source);
    let src = src.trim_end_matches("; ").to_string();
    let c = checked(&src);
    let kernel = lower::lower(&c).ok()?;
    let plan = plan::plan(&c, &kernel).unwrap_or_else(|d| panic!("{src}: {d:?}"));
    Some((src, c, kernel, plan))
}

/// The number of ranges or split points of one split of a variable of extent `dim`: the
/// edge cases (1, the extent, past the extent) as often as a random count.
fn split_kind(dim: usize, rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => "1".into(),
        1 => dim.max(1).to_string(),
        2 => (dim + 1 + rng.below(3)).to_string(),
        3 => (1 + rng.below(5)).to_string(),
        4 => (1 + rng.below(dim.max(1) * 2)).to_string(),
        _ => {
            let mut at = 0;
            let points: Vec<String> = (0..1 + rng.below(3))
                .map(|_| {
                    at += 1 + rng.below(3);
                    at.to_string()
                })
                .collect();
            format!("[{}]", points.join(", "))
        }
    }
}

/// A random schedule over `case`: up to three split variables of any kind, random `extend`s,
/// a random `order` of some or all block variables and a random `map`.
fn schedule(case: &Case, rng: &mut Rng) -> String {
    let mut vars: Vec<&check::VarInfo> = case.checked.vars.iter().collect();
    for n in (1..vars.len()).rev() {
        vars.swap(n, rng.below(n + 1));
    }
    let splits = rng.below(4).min(vars.len());
    let (mut items, mut outers) = (Vec::new(), Vec::new());
    for v in &vars[..splits] {
        let kind = split_kind(case.dims[&v.name], rng);
        let outer = format!("{}o", v.name);
        items.push(format!("split({}, {outer}, {}i, {kind})", v.name, v.name));
        if !v.free && rng.below(2) == 0 {
            items.push(format!("extend({outer})"));
        }
        outers.push(outer);
    }
    for n in (1..outers.len()).rev() {
        outers.swap(n, rng.below(n + 1));
    }
    if !outers.is_empty() && rng.below(2) == 0 {
        let some = 1 + rng.below(outers.len());
        items.push(format!("order({})", outers[..some].join(", ")));
    }
    if !outers.is_empty() && rng.below(3) == 0 {
        items.push(format!("map({})", outers[rng.below(outers.len())]));
    }
    items.join("; ")
}

/// `expr` with random formats and larger extents (up to 24 for three variables): grids of
/// many blocks, summation trees of many partials.
fn big_case(expr: &str, rng: &mut Rng) -> Case {
    let plain = Case::fixed(expr, &[], &[], 0);
    let formats: Vec<(String, String)> = plain
        .checked
        .tensors
        .iter()
        .filter(|t| t.rank > 0)
        .map(|t| {
            (
                t.name.clone(),
                common::random_format(t.rank, rng).to_string(),
            )
        })
        .collect();
    let max = [0, 40, 30, 16, 7, 5][plain.checked.vars.len().min(5)];
    let dims: Vec<(String, usize)> = (plain.checked.vars.iter())
        .map(|v| (v.name.clone(), rng.below(max + 1)))
        .collect();
    let formats: Vec<(&str, &str)> = formats
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let dims: Vec<(&str, usize)> = dims.iter().map(|(a, d)| (a.as_str(), *d)).collect();
    Case::fixed(expr, &formats, &dims, rng.next())
}

/// One random instance: the case, the scheduled statement, its kernel and plan, the inputs
/// (with the output's previous value last for `+=`) and the reference result.
struct Instance {
    src: String,
    case: Case,
    kernel: Kernel,
    plan: Plan,
    inputs: Vec<Tensor<f64, u32>>,
    want: Vec<f64>,
}

fn instance(expr: &str, seed: u64, big: bool) -> Option<Instance> {
    let mut rng = Rng(seed);
    let case = if big {
        big_case(expr, &mut rng)
    } else {
        Case::random(expr, &mut rng)
    };
    let (src, c, kernel, plan) = scheduled(&case, &mut rng)?;
    let mut inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
    let mut initial = None;
    if c.statement.assignment.accumulate {
        let dims = case.out_dims();
        let len: usize = dims.iter().product();
        let init: Vec<f64> = (0..len).map(|n| [0.0, 1.5, -2.0][n % 3]).collect();
        let init = DenseArray::new(dims.clone(), init).unwrap();
        let fmt = case.format_of(&case.output_name());
        inputs.push(Tensor::from_entries(dims, fmt, common::dense_entries(&init)).unwrap());
        initial = Some(init);
    }
    let want = tessera_compiler::oracle::evaluate(&case.checked, &case.data, initial.as_ref())
        .unwrap()
        .data;
    Some(Instance {
        src,
        case,
        kernel,
        plan,
        inputs,
        want,
    })
}

/// A sparse output's stored coordinates are strictly increasing in its storage order (sorted,
/// no duplicates), and it has the format the statement asked for.
fn assert_valid(out: &Tensor<f64, u32>, inst: &Instance, what: &str) {
    let fmt = inst.case.format_of(&inst.case.output_name());
    assert_eq!(out.format(), &fmt, "{what}");
    assert_eq!(out.dims(), &inst.case.out_dims()[..], "{what}");
    let order = fmt.mode_order().to_vec();
    let stored: Vec<Vec<usize>> = out
        .entries()
        .map(|(c, _)| order.iter().map(|&m| c[m]).collect())
        .collect();
    for w in stored.windows(2) {
        assert!(
            w[0] < w[1],
            "entries out of order or repeated: {w:?}\n{what}"
        );
    }
}

/// Runs `inst` through `run` at each thread count: close to the reference, bitwise the same
/// at every count, a valid tensor. Returns the first run's dense result.
fn check_runs(
    inst: &Instance,
    label: &str,
    threads: &[usize],
    run: &dyn Fn(usize) -> Tensor<f64, u32>,
) -> Vec<f64> {
    let what = format!(
        "{} with dims {:?} ({label})\n{}",
        inst.src, inst.case.dims, inst.plan
    );
    let mut first: Option<Vec<f64>> = None;
    for &t in threads {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(t)))
            .unwrap_or_else(|_| panic!("panicked at {t} threads: {what}"));
        assert_valid(&out, inst, &what);
        let got = common::densify(&out, inst.case.fill());
        match &first {
            None => {
                common::assert_close(&got, &inst.want, &what);
                first = Some(got);
            }
            Some(f) => assert!(
                f.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{t} threads differ: {f:?} vs {got:?}\n{what}"
            ),
        }
    }
    first.unwrap()
}

fn refs(inst: &Instance) -> Vec<&Tensor<f64, u32>> {
    inst.inputs.iter().collect()
}

/// Thread pool and runtime (tracing on and off, each plan run twice on one runtime so that a
/// trace can replay) on one random instance; false when the formats did not lower.
fn check_instance(expr: &str, seed: u64, big: bool) -> bool {
    let Some(inst) = instance(expr, seed, big) else {
        return false;
    };
    let out_dims = inst.case.out_dims();
    check_runs(&inst, "thread pool", &[1, 3], &|t| {
        exec::run_interp(&inst.plan, &inst.kernel, &refs(&inst), &out_dims, t)
            .unwrap_or_else(|e| panic!("{e}"))
            .output
    });
    for tracing in [false, true] {
        let label = format!("runtime, tracing {tracing}");
        check_runs(&inst, &label, &[1, 2, 3], &|t| {
            let rt = tessera_runtime::Runtime::builder()
                .threads(t)
                .tracing(tracing)
                .build();
            let run = || {
                plan::on_runtime::run(&rt, &inst.plan, &inst.kernel, &refs(&inst), &out_dims)
                    .unwrap_or_else(|e| panic!("{e}"))
            };
            let once = run();
            let again = run();
            let bits =
                |t: &Tensor<f64, u32>| t.to_dense().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&once), bits(&again), "a second run differs");
            again
        });
    }
    check_integers(&inst);
    check_f32(&inst);
    if std::env::var("PLANS_REVIEW_RANKS").is_ok() {
        check_ranks(&inst);
    }
    true
}

/// A `+` statement over `i64` values and `u64` coordinates on the runtime: the inputs are
/// small integers, so every summation order gives the reference's result exactly.
fn check_integers(inst: &Instance) {
    let c = &inst.case.checked;
    // Element-wise functions and `/` leave the integers (`exp(x)` over i64 truncates).
    let expr = inst.src.split(';').next().unwrap_or_default();
    let functions = [
        "exp(", "abs(", "sqrt(", "log(", "sin(", "cos(", "tanh(", "pow(", "/",
    ];
    let comparisons = [
        "lt(", "le(", "gt(", "ge(", "eq(", "ne(", "and(", "or(", "min(", "max(",
    ];
    let integral = !functions
        .iter()
        .chain(&comparisons)
        .any(|f| expr.contains(f));
    if !integral
        || c.reduce != tessera_compiler::ast::ReduceOp::Sum
        || c.statement.assignment.accumulate
    {
        return;
    }
    let inputs: Vec<Tensor<i64, u64>> = inst.case.input_tensors_as::<i64, u64>();
    let refs: Vec<&Tensor<i64, u64>> = inputs.iter().collect();
    let rt = tessera_runtime::Runtime::new(2);
    let out = plan::on_runtime::run(&rt, &inst.plan, &inst.kernel, &refs, &inst.case.out_dims())
        .unwrap_or_else(|e| panic!("i64: {}: {e}", inst.src));
    let got: Vec<f64> = out.to_dense().iter().map(|&v| v as f64).collect();
    assert_eq!(
        got, inst.want,
        "i64: {} with dims {:?}",
        inst.src, inst.case.dims
    );
}

/// `f32` values on the runtime: bitwise the same at 1 and 3 threads (the fold order is the
/// grid's, whatever the value type), and close to the reference.
fn check_f32(inst: &Instance) {
    let mut inputs: Vec<Tensor<f32, u32>> = inst.case.input_tensors_as::<f32, u32>();
    if inst.inputs.len() > inputs.len() {
        // `+=`: the previous output, last.
        let old = inst.inputs.last().expect("the previous output");
        let entries = old.entries().map(|(c, v)| (c, v as f32));
        let old = Tensor::from_entries(old.dims().to_vec(), old.format().clone(), entries);
        inputs.push(old.unwrap());
    }
    let refs: Vec<&Tensor<f32, u32>> = inputs.iter().collect();
    let run = |threads| {
        let rt = tessera_runtime::Runtime::new(threads);
        let out =
            plan::on_runtime::run(&rt, &inst.plan, &inst.kernel, &refs, &inst.case.out_dims());
        let out = out.unwrap_or_else(|e| panic!("f32: {}: {e}", inst.src));
        common::densify(&out, inst.case.fill())
    };
    let (one, three) = (run(1), run(3));
    let what = format!("f32: {} with dims {:?}", inst.src, inst.case.dims);
    assert!(
        one.iter()
            .zip(&three)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "{what}: 1 and 3 threads differ: {one:?} vs {three:?}"
    );
    for (g, w) in one.iter().zip(&inst.want) {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-3 * (1.0 + w.abs());
        assert!(ok, "{what}: got {g}, want {w}");
    }
}

/// The plan across 2 and 3 thread ranks: every rank's whole output is the one-process
/// output, bit for bit.
fn check_ranks(inst: &Instance) {
    use std::sync::Arc;
    use tessera_runtime::transport::{run_ranks, ThreadComm};
    let out_dims = inst.case.out_dims();
    let one = tessera_runtime::Runtime::new(1);
    let want = plan::on_runtime::run(&one, &inst.plan, &inst.kernel, &refs(inst), &out_dims)
        .unwrap()
        .to_dense();
    for ranks in [2, 3] {
        let got = run_ranks(ranks, |comm: &ThreadComm| {
            let rt = tessera_runtime::Runtime::builder()
                .threads(1)
                .communicator(Arc::new(comm.clone()))
                .try_build()?;
            plan::on_runtime::run(&rt, &inst.plan, &inst.kernel, &refs(inst), &out_dims)
                .map_err(|e| tessera_runtime::RuntimeError::Transport(e.to_string()))
        });
        for (rank, out) in got.into_iter().enumerate() {
            let what = format!(
                "{} rank {rank} of {ranks}, dims {:?}\n{}",
                inst.src, inst.case.dims, inst.plan
            );
            let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_valid(&out, inst, &what);
            let out = out.to_dense();
            assert!(
                out.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{what}: {out:?} vs one process {want:?}"
            );
        }
    }
}

#[test]
fn random_statements_formats_and_schedules_match_the_reference() {
    let seeds: u64 = std::env::var("PLANS_REVIEW_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let big = std::env::var("PLANS_REVIEW_BIG").is_ok();
    let only = std::env::var("PLANS_REVIEW_ONLY").unwrap_or_default();
    let mut exprs = grammar();
    if std::env::var("PLANS_REVIEW_ALL").is_ok() {
        exprs.extend(common::catalogue());
        exprs.extend(common::semiring_catalogue());
    }
    for (n, expr) in exprs.iter().enumerate() {
        if !expr.contains(only.as_str()) {
            continue;
        }
        let ran = (0..seeds)
            .filter(|s| check_instance(expr, s * 7919 + n as u64 * 104_729, big))
            .count();
        assert!(ran > 0, "{expr}: no random instance lowered");
    }
}

/// Inputs that are blocks (a first dense level holding only a window of its coordinates, with
/// an offset: what a `.tcs` block file holds) run planned as the whole tensors they stand for.
#[test]
fn block_inputs_run_planned_as_the_tensors_they_stand_for() {
    let mut ran = 0;
    for seed in 0..40u64 {
        for expr in [
            "y(i) = A(i,j) * x(j)",
            "C(i,j) = A(i,k) * B(k,j)",
            "C(i,j) = A(i,j) + B(i,j)",
        ] {
            let mut rng = Rng(seed);
            let case = Case::random_opts(expr, &mut rng, true);
            let (blocks, data) = common::block_inputs::<u32>(&case, &mut rng);
            let want = common::oracle_on(&case, &data);
            let Some((src, _, kernel, plan)) = scheduled(&case, &mut rng) else {
                continue;
            };
            let refs: Vec<&Tensor<f64, u32>> = blocks.iter().collect();
            let what = format!("{src} with dims {:?}\n{plan}", case.dims);
            let pooled = exec::run_interp(&plan, &kernel, &refs, &case.out_dims(), 2)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            common::assert_close(&pooled.output.to_dense(), &want, &format!("pool: {what}"));
            let rt = tessera_runtime::Runtime::new(2);
            let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                plan::on_runtime::run(&rt, &plan, &kernel, &refs, &case.out_dims())
            }))
            .unwrap_or_else(|_| panic!("runtime panicked: {what}"));
            match got {
                Ok(t) => common::assert_close(&t.to_dense(), &want, &format!("runtime: {what}")),
                Err(e) => panic!("runtime: {what}: {e}"),
            }
            ran += 1;
        }
    }
    assert!(ran > 20, "only {ran} block cases lowered");
}

/// Regression: a block input (a dense level holding the window `offset..offset+size` of its
/// mode) was stored as it is, and the plan's tiles cut its store by coordinate from 0: rows
/// 2..4 of `A` ran as rows 0..2 (a wrong answer), and a block of no rows was sliced past its
/// store (an error naming only a store number). It now runs as the whole tensor it stands for.
#[test]
fn a_block_input_is_not_shifted_to_coordinate_zero() {
    let src = "y(i) = A(i,j) * x(j); split(i, io, ii, 2)";
    let (c, x) = (
        checked(src),
        Tensor::<f64, u32>::dense_from_vec(vec![2], vec![1.0, 10.0]),
    );
    let kernel = lower::lower(&c).unwrap();
    let plan = plan::plan(&c, &kernel).unwrap();
    let x = x.unwrap();
    // A is 4 × 2 with rows 2 and 3 stored: [[0, 0], [0, 0], [1, 2], [3, 4]].
    let dense = tessera_formats::Level::Dense { size: 2, offset: 2 };
    let col = tessera_formats::Level::Dense { size: 2, offset: 0 };
    let format = tessera_formats::Format::dense(2);
    let a = Tensor::from_parts(
        vec![4, 2],
        format,
        vec![dense, col],
        vec![1.0, 2.0, 3.0, 4.0],
    );
    let a = a.unwrap();
    let empty = tessera_formats::Level::Dense { size: 0, offset: 0 };
    let col = tessera_formats::Level::Dense { size: 2, offset: 0 };
    let none = Tensor::from_parts(
        vec![4, 2],
        tessera_formats::Format::dense(2),
        vec![empty, col],
        vec![],
    );
    let none = none.unwrap();
    for threads in [1, 2] {
        let rt = tessera_runtime::Runtime::new(threads);
        let y = plan::on_runtime::run(&rt, &plan, &kernel, &[&a, &x], &[4]).unwrap();
        assert_eq!(y.to_dense(), [0.0, 0.0, 21.0, 43.0]);
        let y = plan::on_runtime::run(&rt, &plan, &kernel, &[&none, &x], &[4]).unwrap();
        assert_eq!(y.to_dense(), [0.0; 4]);
    }
}

/// One tensor read twice at different coordinates (`A(i,k) * A(k,j)`, a transpose of itself):
/// one input whose accesses are partitioned differently. Square extents (every variable
/// the same), random formats and schedules.
#[test]
fn a_tensor_read_twice_with_different_partitions_matches_the_reference() {
    let mut ran = 0;
    for seed in 0..48u64 {
        for expr in [
            "C(i,j) = A(i,k) * A(k,j)",
            "y(i) = A(i,j) * A(j,i)",
            "C(i,j) = A(i,j) + A(j,i)",
            "y(i) = A(i,j) * x(j) + A(j,i) * x(j)",
        ] {
            let mut rng = Rng(seed);
            let n = rng.below(7);
            let plain = Case::fixed(expr, &[], &[], 0);
            let formats: Vec<(String, String)> = (plain.checked.tensors.iter())
                .filter(|t| t.rank > 0)
                .map(|t| {
                    (
                        t.name.clone(),
                        common::random_format(t.rank, &mut rng).to_string(),
                    )
                })
                .collect();
            let formats: Vec<(&str, &str)> = formats
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            let dims: Vec<(&str, usize)> = ["i", "j", "k"].iter().map(|v| (*v, n)).collect();
            let case = Case::fixed(expr, &formats, &dims, rng.next());
            let Some((src, _, kernel, plan)) = scheduled(&case, &mut rng) else {
                continue;
            };
            let inputs: Vec<Tensor<f64, u32>> = case.input_tensors();
            let inst = Instance {
                src,
                want: case.oracle(),
                case,
                kernel,
                plan,
                inputs,
            };
            let out_dims = inst.case.out_dims();
            check_runs(&inst, "thread pool", &[1, 3], &|t| {
                exec::run_interp(&inst.plan, &inst.kernel, &refs(&inst), &out_dims, t)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .output
            });
            check_runs(&inst, "runtime", &[1, 2, 3], &|t| {
                let rt = tessera_runtime::Runtime::new(t);
                plan::on_runtime::run(&rt, &inst.plan, &inst.kernel, &refs(&inst), &out_dims)
                    .unwrap_or_else(|e| panic!("{e}"))
            });
            ran += 1;
        }
    }
    assert!(ran > 40, "only {ran} cases lowered");
}
