//! Generated block kernels (`codegen::emit_block`) compute exactly what the interpreter's
//! block entry point computes, on random formats and random blocks (empty ones, blocks that
//! are not first along a split variable), and the blocks of a partition of the iteration
//! space sum to the oracle's whole result. One crate holds every instance, built once.

#[path = "kernels_support/mod.rs"]
mod common;
#[path = "kernels_support/generated.rs"]
mod generated;

use std::fmt::Write as _;
use std::ops::Range;

use common::{catalogue, semiring_catalogue, Case, Rng};
use generated::{lit, run_crate, tensor_code};
use quote::format_ident;
use tessera_compiler::ir::{Block, Kernel};
use tessera_compiler::{codegen, interp};
use tessera_formats::Tensor;

struct Instance {
    case: Case,
    kernel: Kernel,
    /// Random blocks and the interpreter's result on each.
    blocks: Vec<(Block, Vec<f64>)>,
    /// A partition of one variable's range into pieces (the others whole) whose results sum
    /// to the whole result; empty for semiring statements (they fold by their reduction).
    partition: Vec<Block>,
    value: &'static str,
    index: &'static str,
}

fn random_block(dims: &[usize], rng: &mut Rng) -> Block {
    let mut bounds = Vec::new();
    let mut first = Vec::new();
    for &d in dims {
        if rng.below(3) == 0 {
            bounds.push(0..d);
            first.push(true);
        } else {
            let lo = rng.below(d + 1);
            bounds.push(lo..lo + rng.below(d - lo + 1));
            first.push(rng.below(2) == 0);
        }
    }
    Block { bounds, first }
}

/// Variable `v` cut at two random points; the first piece is the first block along `v`.
fn partition(dims: &[usize], v: usize, rng: &mut Rng) -> Vec<Block> {
    let mut cuts = [rng.below(dims[v] + 1), rng.below(dims[v] + 1)];
    cuts.sort_unstable();
    let pieces = [0..cuts[0], cuts[0]..cuts[1], cuts[1]..dims[v]];
    pieces
        .into_iter()
        .enumerate()
        .map(|(n, piece)| {
            let mut b = Block::whole(dims);
            b.bounds[v] = piece;
            b.first[v] = n == 0;
            b
        })
        .collect()
}

fn instances() -> Vec<Instance> {
    let types = [("f64", "u32"), ("f64", "u64"), ("f32", "u32")];
    let mut out = Vec::new();
    // Semiring statements (min, max, or, ...) once each: their blocks fold with the
    // statement's own reduction, so they take the per-block and in-place checks (a tile of
    // zeros must come back holding the identity where nothing was reduced) but not the
    // partition's sum.
    let sums = catalogue().into_iter().map(|e| (e, 2, true));
    let semirings = semiring_catalogue().into_iter().map(|e| (e, 1, false));
    for (e, (expr, wanted, summed)) in sums.chain(semirings).enumerate() {
        let mut found = 0;
        for attempt in 0..40u64 {
            if found == wanted {
                break;
            }
            let mut rng = Rng(e as u64 * 7919 + attempt);
            let case = Case::random(expr, &mut rng);
            // Plans refuse statements whose kernel re-packs an operand: so do block kernels.
            let Some(kernel) = case.lower().ok().filter(|k| k.repacks.is_empty()) else {
                continue;
            };
            let inputs: Vec<Tensor<f64, u64>> = case.input_tensors();
            let refs: Vec<&Tensor<f64, u64>> = inputs.iter().collect();
            let out_dims = case.out_dims();
            let dims = interp::checked_dims(&kernel, &refs, &out_dims).unwrap();
            let blocks = (0..3)
                .map(|_| {
                    let b = random_block(&dims, &mut rng);
                    let (t, _) = interp::run_block(&kernel, &refs, &out_dims, &b).unwrap();
                    (b, t.to_dense())
                })
                .collect();
            let v = rng.below(dims.len().max(1));
            let partition = if !summed {
                Vec::new()
            } else if dims.is_empty() {
                vec![Block::whole(&dims)]
            } else {
                partition(&dims, v, &mut rng)
            };
            let (value, index) = types[out.len() % types.len()];
            out.push(Instance {
                case,
                kernel,
                blocks,
                partition,
                value,
                index,
            });
            found += 1;
        }
        assert!(found > 0, "no random formats lowered for `{expr}`");
    }
    out
}

fn block_code(b: &Block) -> String {
    let bounds: Vec<String> = b
        .bounds
        .iter()
        .map(|r: &Range<usize>| format!("{r:?}"))
        .collect();
    format!("(vec![{}], vec!{:?})", bounds.join(", "), b.first)
}

fn floats(xs: &[f64]) -> String {
    let xs: Vec<String> = xs.iter().map(|x| lit(*x)).collect();
    format!("vec![{}]", xs.join(", "))
}

fn main_rs(instances: &[Instance]) -> String {
    let mut s = String::from(
        "use tessera_formats::{Format, Level, Tensor, TensorView, Value};\n\n\
         fn close(got: &[f64], want: &[f64]) -> bool {\n\
         got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-4 * (1.0 + w.abs()))\n}\n\n\
         /// A dense output written into a given tile equals the one the kernel returns,\n\
         /// bitwise, and the kernel then returns nothing. The tile holds zeros (a new store's),\n\
         /// or garbage (a recycled buffer's) where the kernel assigns every cell.\n\
         fn in_place_agrees<V: Value, I: tessera_formats::Index>(garbage: bool, run: impl Fn(Option<&mut [V]>) -> Option<Tensor<V, I>>) -> bool {\n\
         let t = run(None).expect(\"no tile given\");\n\
         if !t.levels().iter().all(|l| matches!(l, Level::Dense { .. })) { return true; }\n\
         let held = if garbage { V::from_f64(-7.25e9) } else { V::zero() };\n\
         let mut tile = vec![held; t.vals().len()];\n\
         run(Some(&mut tile)).is_none() && tile.iter().zip(t.vals()).all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits())\n}\n\n\
         fn main() {\n    let mut failures = 0usize;\n",
    );
    for (n, inst) in instances.iter().enumerate() {
        let (v, i) = (inst.value, inst.index);
        let what = inst.case.describe().replace('\n', " ").replace('"', "'");
        let what = what.replace('{', "{{").replace('}', "}}");
        let inputs: Vec<String> = inst
            .case
            .input_tensors::<u64>()
            .iter()
            .map(|t| tensor_code(t, v, i))
            .collect();
        let random: Vec<String> = inst
            .blocks
            .iter()
            .map(|(b, want)| {
                let bounds: Vec<String> = b.bounds.iter().map(|r| format!("{r:?}")).collect();
                format!(
                    "(vec![{}], vec!{:?}, {})",
                    bounds.join(", "),
                    b.first,
                    floats(want)
                )
            })
            .collect();
        let pieces: Vec<String> = inst.partition.iter().map(block_code).collect();
        let _ = writeln!(
            s,
            "    {{ // {what}\n\
             \x20       let inputs: Vec<Tensor<{v}, {i}>> = vec![{inputs}];\n\
             \x20       let views: Vec<TensorView<{v}, {i}>> = inputs.iter().map(|t| t.view()).collect();\n\
             \x20       let out_dims = {out_dims:?};\n\
             \x20       let run = |bounds: &[std::ops::Range<usize>], first: &[bool]| -> Vec<f64> {{\n\
             \x20           kernels::k{n}::<{v}, {i}>(&views, &out_dims, bounds, first, None).expect(\"no tile given\").to_dense().iter().map(|x| x.to_f64()).collect()\n\
             \x20       }};\n\
             \x20       for (bounds, first, want) in [{random}] {{\n\
             \x20           let got = run(&bounds, &first);\n\
             \x20           if !close(&got, &want) {{ failures += 1; eprintln!(\"case {n} block {{bounds:?}} {{first:?}} FAILED: {what}\\n got {{got:?}}\\n want {{want:?}}\"); }}\n\
             \x20           if !in_place_agrees({garbage}, |out| kernels::k{n}::<{v}, {i}>(&views, &out_dims, &bounds, &first, out)) {{ failures += 1; eprintln!(\"case {n} block {{bounds:?}} {{first:?}} FAILED in place: {what}\"); }}\n\
             \x20       }}\n\
             \x20       let pieces: Vec<(Vec<std::ops::Range<usize>>, Vec<bool>)> = vec![{pieces}];\n\
             \x20       if !pieces.is_empty() {{\n\
             \x20       let mut sum: Vec<f64> = Vec::new();\n\
             \x20       for (bounds, first) in pieces {{\n\
             \x20           let got = run(&bounds, &first);\n\
             \x20           if sum.is_empty() {{ sum = got; }} else {{ for (s, g) in sum.iter_mut().zip(&got) {{ *s += *g; }} }}\n\
             \x20       }}\n\
             \x20       let want = {whole};\n\
             \x20       if !close(&sum, &want) {{ failures += 1; eprintln!(\"case {n} partition FAILED: {what}\\n got {{sum:?}}\\n want {{want:?}}\"); }}\n\
             \x20       }}\n\
             \x20   }}",
            inputs = inputs.join(", "),
            out_dims = inst.case.out_dims(),
            random = random.join(", "),
            pieces = pieces.join(", "),
            whole = floats(&inst.case.oracle()),
            garbage = inst.kernel.assigns_every_cell(),
        );
    }
    let _ = writeln!(
        s,
        "    println!(\"checked {} block kernels, {{failures}} failed\");\n    if failures > 0 {{ std::process::exit(1); }}\n}}",
        instances.len()
    );
    s
}

#[test]
fn block_kernels_match_the_interpreter_and_partitions_sum_to_the_oracle() {
    let instances = instances();
    let mut kernels = String::new();
    for (n, inst) in instances.iter().enumerate() {
        let name = format_ident!("k{}", n);
        kernels.push_str(&codegen::pretty(&codegen::emit_block_named(
            &inst.kernel,
            &name,
        )));
        kernels.push('\n');
    }
    // The garbage tiles check some kernels (row-split SpMV over a dense row level is one).
    let assigning = instances
        .iter()
        .filter(|i| i.kernel.assigns_every_cell())
        .count();
    assert!(assigning > 0, "no instance assigns its whole tile");
    let stdout = run_crate("tessera-block-check", &kernels, &main_rs(&instances));
    assert!(
        stdout.contains(&format!(
            "checked {} block kernels, 0 failed",
            instances.len()
        )),
        "{stdout}"
    );
}

/// The windows a plan's point task hands SpMV's block kernel — `A`'s rows from an offset
/// (`pos` rebased), `x` whole (offset 0) or as the image of the rows' coordinates (an
/// offset) — give the block's rows of `A x`. With `x` whole the kernel runs the copy of its
/// nests whose vector offset is `const` 0 while the row offset is an argument (not 0 here),
/// which no whole-tensor instance above reaches.
#[test]
fn spmv_block_kernel_over_windows_with_and_without_a_vector_offset() {
    // A 6 × 8 CSR matrix; rows 2..5 hold columns 3..=6 only, so their image of `x` is 3..7.
    let (pos, crd): (Vec<u32>, Vec<u32>) = (
        vec![0, 2, 3, 5, 7, 8, 10],
        vec![0, 7, 1, 3, 6, 4, 5, 6, 2, 7],
    );
    let vals: Vec<f64> = (1..=10).map(f64::from).collect();
    let x: Vec<f64> = (0..8).map(|j| 0.5 + f64::from(j)).collect();
    let (lo, hi) = (2usize, 5usize);
    let (plo, phi) = (pos[lo] as usize, pos[hi] as usize);
    let want: Vec<String> = (lo..hi)
        .map(|i| {
            let row = pos[i] as usize..pos[i + 1] as usize;
            lit(row.map(|p| vals[p] * x[crd[p] as usize]).sum())
        })
        .collect();
    let rebased: Vec<u32> = pos[lo..=hi].iter().map(|p| p - pos[lo]).collect();
    let kernel = Case::fixed("y(i) = A(i,j) * x(j)", &[("A", "csr")], &[], 0)
        .lower()
        .unwrap();
    let kernels = codegen::pretty(&codegen::emit_block_named(&kernel, &format_ident!("spmv")));
    let main = format!(
        "use tessera_formats::{{Format, LevelView, TensorView}};\n\
         fn main() {{\n\
         \x20   let (a_dims, x_dims) = (vec![6usize, 8], vec![8usize]);\n\
         \x20   let (csr, d) = (Format::parse(\"csr\", 2).unwrap(), Format::parse(\"d\", 1).unwrap());\n\
         \x20   let (pos, crd, vals): (Vec<u32>, Vec<u32>, Vec<f64>) = (vec!{rebased:?}, vec!{crd:?}, vec!{vals:?});\n\
         \x20   let x: Vec<f64> = vec!{x:?};\n\
         \x20   let a = TensorView::new(&a_dims, &csr, vec![LevelView::dense({size}, {lo}), LevelView::Compressed {{ pos: &pos, crd: &crd }}], &vals).unwrap();\n\
         \x20   let whole = TensorView::new(&x_dims, &d, vec![LevelView::dense(8, 0)], &x).unwrap();\n\
         \x20   let image = TensorView::new(&x_dims, &d, vec![LevelView::dense(4, 3)], &x[3..7]).unwrap();\n\
         \x20   let want: Vec<f64> = vec![{want}];\n\
         \x20   for (name, x) in [(\"whole x\", whole), (\"image of x\", image)] {{\n\
         \x20       let mut tile = vec![0.0f64; {size}];\n\
         \x20       let none = kernels::spmv::<f64, u32>(&[a.clone(), x], &[6], &[{lo}..{hi}, 0..8], &[false, true], Some(&mut tile));\n\
         \x20       assert!(none.is_none());\n\
         \x20       println!(\"{{name}}: {{}}\", if tile == want {{ \"ok\" }} else {{ \"WRONG\" }});\n\
         \x20   }}\n\
         }}\n",
        crd = &crd[plo..phi],
        vals = &vals[plo..phi],
        size = hi - lo,
        want = want.join(", "),
    );
    let stdout = run_crate("tessera-block-windows", &kernels, &main);
    assert_eq!(stdout.trim(), "whole x: ok\nimage of x: ok", "{stdout}");
}

/// In a block kernel only the offsets subtracted per nonzero choose the copy of the nests
/// without offsets: SpMV's `x[crd - off]` (tensor 1), not `A`'s row offset (tensor 0),
/// which a plan's row windows almost always have and which the row loop subtracts once per
/// row. That copy takes the row offset as an argument.
#[test]
fn block_kernels_choose_the_zero_offset_copy_by_the_vector_offset_alone() {
    let kernel = Case::fixed("y(i) = A(i,j) * x(j)", &[("A", "csr")], &[], 0)
        .lower()
        .unwrap();
    let text = codegen::pretty(&codegen::emit_block(&kernel));
    assert!(text.contains("if true && t1_l0_off == 0 {"), "{text}");
    let (_, zero) = text
        .split_once("fn zero_offsets<")
        .unwrap_or_else(|| panic!("no zero-offset copy:\n{text}"));
    let (params, body) = zero.split_once(") {").unwrap();
    assert!(params.contains("t0_l0_off: usize"), "{text}");
    assert!(!params.contains("t1_l0_off"), "{text}");
    assert!(body.contains("const t1_l0_off: usize = 0;"), "{text}");
    assert!(!body.contains("const t0_l0_off"), "{text}");
}

/// Row-split SpMV's block kernel assigns every cell of its tile, so a plan hands it a tile
/// that is not zeroed (`write_all`: a recycled buffer's old values): rows without a nonzero
/// come back 0, not what the tile held. Where `A`'s window does not hold every row of the
/// block (a row before its offset), the kernel fills the tile first: that row is 0 too.
#[test]
fn spmv_block_kernel_assigns_a_garbage_tile_whole_empty_rows_included() {
    // A 6 × 4 CSR matrix whose rows 1, 3 and 4 are empty.
    let (pos, crd): (Vec<u32>, Vec<u32>) = (vec![0, 2, 2, 3, 3, 3, 5], vec![0, 3, 1, 2, 3]);
    let vals: Vec<f64> = vec![1.0, 2.0, 3.0, 4.0, 5.0];
    let x: Vec<f64> = vec![0.5, 1.5, 2.5, 3.5];
    let kernel = Case::fixed("y(i) = A(i,j) * x(j)", &[("A", "csr")], &[], 0)
        .lower()
        .unwrap();
    assert!(kernel.assigns_every_cell());
    let kernels = codegen::pretty(&codegen::emit_block_named(&kernel, &format_ident!("spmv")));
    // `A` whole (rows 0..6), then its window of rows 1..6 (offset 1, `pos` rebased) for the
    // block of rows 0..6: row 0 lies before the window.
    let main = format!(
        "use tessera_formats::{{Format, LevelView, TensorView}};\n\
         fn main() {{\n\
         \x20   let (a_dims, x_dims) = (vec![6usize, 4], vec![4usize]);\n\
         \x20   let (csr, d) = (Format::parse(\"csr\", 2).unwrap(), Format::parse(\"d\", 1).unwrap());\n\
         \x20   let (pos, crd, vals): (Vec<u32>, Vec<u32>, Vec<f64>) = (vec!{pos:?}, vec!{crd:?}, vec!{vals:?});\n\
         \x20   let rebased: Vec<u32> = pos[1..].iter().map(|p| p - pos[1]).collect();\n\
         \x20   let x: Vec<f64> = vec!{x:?};\n\
         \x20   let whole = TensorView::new(&a_dims, &csr, vec![LevelView::dense(6, 0), LevelView::Compressed {{ pos: &pos, crd: &crd }}], &vals).unwrap();\n\
         \x20   let window = TensorView::new(&a_dims, &csr, vec![LevelView::dense(5, 1), LevelView::Compressed {{ pos: &rebased, crd: &crd[2..] }}], &vals[2..]).unwrap();\n\
         \x20   let xv = TensorView::new(&x_dims, &d, vec![LevelView::dense(4, 0)], &x).unwrap();\n\
         \x20   for (name, a, want) in [(\"whole A\", whole, [7.5, 0.0, 4.5, 0.0, 0.0, 27.5]), (\"window of A\", window, [0.0, 0.0, 4.5, 0.0, 0.0, 27.5])] {{\n\
         \x20       let mut tile = vec![-7.25e9f64; 6];\n\
         \x20       let none = kernels::spmv::<f64, u32>(&[a, xv.clone()], &[6], &[0..6, 0..4], &[true, true], Some(&mut tile));\n\
         \x20       assert!(none.is_none());\n\
         \x20       println!(\"{{name}}: {{:?}}\", if tile == want {{ Ok(()) }} else {{ Err(tile) }});\n\
         \x20   }}\n\
         }}\n",
    );
    let stdout = run_crate("tessera-block-garbage", &kernels, &main);
    assert_eq!(
        stdout.trim(),
        "whole A: Ok(())\nwindow of A: Ok(())",
        "{stdout}"
    );
}

/// Which kernels take an unzeroed tile: those whose loops over the output's variables are
/// dense and store each cell once. SpMM adds into a row once per nonzero of `A`'s row, DCSR
/// SpMV skips the rows its compressed row level lacks, and `min` folds into its cell.
#[test]
fn only_kernels_that_store_each_cell_of_a_dense_tile_once_assign_it() {
    let assigns = |expr: &str, formats: &[(&str, &str)]| {
        let kernel = Case::fixed(expr, formats, &[], 0).lower().unwrap();
        kernel.assigns_every_cell()
    };
    assert!(assigns("y(i) = A(i,j) * x(j)", &[("A", "csr")]));
    assert!(!assigns("y(i) = A(i,j) * x(j)", &[("A", "dcsr")]));
    assert!(!assigns("C(i,k) = A(i,j) * B(j,k)", &[("A", "csr")]));
    assert!(!assigns("y(i) = min[j](A(i,j) + x(j))", &[("A", "csr")]));
}
