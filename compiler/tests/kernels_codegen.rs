//! The generated Rust is right: one crate holding `codegen::emit` output for the whole
//! catalogue over several random formats (u32/u64 coordinates, f32/f64 values, some
//! `parallelize`d), built ONCE with cargo (offline, against this workspace's Cargo.lock and
//! tessera-formats) and run against the oracle's results embedded in it.

#[path = "kernels_support/mod.rs"]
mod common;
#[path = "kernels_support/generated.rs"]
mod generated;

use std::fmt::Write as _;

use common::{catalogue, Case, Rng};
use generated::{lit, run_crate, tensor_code};
use proc_macro2::Ident;
use quote::format_ident;
use tessera_compiler::codegen;
use tessera_compiler::ir::Assembly;
use tessera_formats::Tensor;

/// Block-view inputs and the oracle's result on them.
type Blocks = (Vec<Tensor<f64, u64>>, Vec<f64>);

/// One kernel instance to check in the generated crate.
struct Instance {
    case: Case,
    /// Block-view inputs (dense first levels with offsets) and the oracle's result on them;
    /// `None` for whole tensors.
    blocks: Option<Blocks>,
    kernel_fn: Ident,
    value: &'static str,
    index: &'static str,
    threads: usize,
}

fn instances() -> Vec<Instance> {
    let mut out = Vec::new();
    let types = [
        ("f64", "u32"),
        ("f64", "u64"),
        ("f32", "u32"),
        ("f32", "u64"),
    ];
    let semirings = common::semiring_catalogue();
    let all = catalogue().into_iter().chain(semirings.iter().copied());
    for (e, expr) in all.enumerate() {
        let semiring = semirings.contains(&expr);
        let mut found = 0;
        for attempt in 0..60u64 {
            if found == 3 {
                break;
            }
            let mut rng = Rng(e as u64 * 1000 + attempt);
            // A third of the instances run their outer loop over two threads.
            let parallel = found == 2 && !expr.starts_with("a ");
            let src = if parallel {
                let first = expr
                    .split('(')
                    .nth(1)
                    .and_then(|s| s.split([',', ')']).next())
                    .unwrap();
                format!("{expr}; parallelize({first})")
            } else {
                expr.to_string()
            };
            // Half the parallel instances keep a dense output (row-parallel paths), half any format.
            let case = Case::random_opts(&src, &mut rng, parallel && attempt % 2 == 0);
            let Ok(_) = case.lower() else { continue };
            let n = out.len();
            let (value, index) = types[n % types.len()];
            // Every third instance runs on block views of its inputs.
            let blocks = (n % 3 == 1 && !semiring).then(|| block_views(&case, &mut rng));
            out.push(Instance {
                case,
                blocks,
                kernel_fn: format_ident!("k{}", n),
                value,
                index,
                threads: if parallel { 2 } else { 1 },
            });
            found += 1;
        }
        assert!(found > 0, "no random formats lowered for `{expr}`");
    }
    mirrored_instances(&mut out);
    // COO operands in each role of the merge lattice (a parallelized loop over a non-unique
    // level runs sequentially).
    for (seed, (expr, formats)) in common::coo_catalogue().into_iter().enumerate() {
        let case = Case::fixed(expr, formats, &[], seed as u64);
        let n = out.len();
        out.push(Instance {
            case,
            blocks: None,
            kernel_fn: format_ident!("k{}", n),
            value: "f64",
            index: "u32",
            threads: if expr.contains("parallelize") { 2 } else { 1 },
        });
    }
    out
}

/// Block views of the case's inputs and the oracle's result on them.
fn block_views(case: &Case, rng: &mut Rng) -> Blocks {
    let (tensors, data) = common::block_inputs::<u64>(case, rng);
    let want = common::oracle_on(case, &data);
    (tensors, want)
}

/// Sparse outputs that copy an operand's structure (`lower::mirror`), sequential and over two
/// threads, some on block views (dense first levels with offsets, copied into the output).
fn mirrored_instances(out: &mut Vec<Instance>) {
    let cases: [(&str, &[(&str, &str)]); 7] = [
        (
            "A(i,j) = B(i,j) * C(i,k) * D(j,k)",
            &[("A", "csr"), ("B", "csr")],
        ),
        (
            "A(i,j) = B(i,j) * C(i,k) * D(j,k)",
            &[("A", "ss"), ("B", "ss")],
        ),
        ("A(i,j) = B(i,j,k) * c(k)", &[("A", "ss"), ("B", "sss")]),
        (
            "A(i,j,k) = B(i,j,l) * C(l,k)",
            &[("A", "ssd"), ("B", "sss")],
        ),
        (
            "A(i,j,k) = B(i,j,l) * C(l,k)",
            &[("A", "dsd"), ("B", "dss")],
        ),
        // `k` bound above the reduction over `l`: the dense level is written element-wise.
        (
            "A(i,j,k) = B(i,j,l) * C(k,l)",
            &[("A", "ssd"), ("B", "sss")],
        ),
        ("A(i,j) = 2 * B(i,j) * c(j)", &[("A", "csc"), ("B", "csc")]),
    ];
    for (e, (expr, formats)) in cases.into_iter().enumerate() {
        for threads in [1, 2] {
            let first = if formats.iter().any(|f| f.1 == "csc") {
                "j"
            } else {
                "i"
            };
            let src = if threads == 2 {
                format!("{expr}; parallelize({first})")
            } else {
                expr.to_string()
            };
            let mut rng = Rng(7000 + e as u64 * 2 + threads as u64);
            let dims = [("i", 5), ("j", 6), ("k", 3), ("l", 4)];
            let case = Case::fixed(&src, formats, &dims, rng.next());
            let kernel = case.lower().unwrap_or_else(|err| panic!("{src}: {err}"));
            assert!(
                tessera_compiler::lower::mirror(&kernel).is_some(),
                "`{src}` with {formats:?} should copy its operand's structure"
            );
            let n = out.len();
            let blocks = (e % 2 == 1).then(|| block_views(&case, &mut rng));
            out.push(Instance {
                case,
                blocks,
                kernel_fn: format_ident!("k{}", n),
                value: "f64",
                index: ["u32", "u64"][n % 2],
                threads,
            });
        }
    }
}

/// The `main` that builds each instance's inputs, runs its kernel and compares with the oracle.
fn main_rs(instances: &[Instance]) -> String {
    let mut s = String::from("use tessera_formats::{Format, Level, Tensor, Value};\n\n");
    s.push_str(
        "fn close(got: &[f64], want: &[f64]) -> bool {\n\
         got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g.is_nan() && w.is_nan()) || g == w || (w.is_finite() && (g - w).abs() <= 1e-4 * (1.0 + w.abs())))\n}\n\n",
    );
    s.push_str(
        "fn dense_of<V: Value, I: tessera_formats::Index>(t: &Tensor<V, I>, fill: f64) -> Vec<f64> {\n\
         let mut out = vec![fill; t.dims().iter().product()];\n\
         for (c, v) in t.entries() { let at = c.iter().zip(t.dims()).fold(0, |a, (c, d)| a * d + c); out[at] = v.to_f64(); }\n\
         out\n}\n\n",
    );
    s.push_str("fn main() {\n    let mut failures = 0usize;\n");
    for (n, inst) in instances.iter().enumerate() {
        let (v, i) = (inst.value, inst.index);
        let c = &inst.case;
        let _ = writeln!(s, "    {{ // {}", c.describe().replace('\n', " "));
        let mut names = Vec::new();
        for (slot, t) in c.checked.inputs().iter().enumerate() {
            if let Some((blocks, _)) = &inst.blocks {
                let var = format!("in_{}", t.name);
                let _ = writeln!(
                    s,
                    "        let {var} = {};",
                    tensor_code(&blocks[slot], v, i)
                );
                names.push(format!("&{var}"));
                continue;
            }
            if c.fill() != 0.0 {
                // Dense levels must hold the fill where nothing is stored: rebuild exactly.
                let var = format!("in_{}", t.name);
                let tensor = &c.input_tensors::<u64>()[slot];
                let _ = writeln!(s, "        let {var} = {};", tensor_code(tensor, v, i));
                names.push(format!("&{var}"));
                continue;
            }
            let d = &c.data[&t.name];
            let entries: Vec<String> = common::dense_entries::<f64>(d)
                .into_iter()
                .map(|(co, x)| format!("({co:?}.to_vec(), <{v}>::from_f64({}))", lit(x)))
                .collect();
            let var = format!("in_{}", t.name);
            let _ = writeln!(
                s,
                "        let {var} = Tensor::<{v}, {i}>::from_entries(vec!{:?}, Format::parse({:?}, {}).unwrap(), vec![{}]).unwrap();",
                d.dims,
                t.format.to_string(),
                t.rank,
                entries.join(", ")
            );
            names.push(format!("&{var}"));
        }
        let want = match &inst.blocks {
            Some((_, want)) => want.clone(),
            None => c.oracle(),
        };
        let want: Vec<String> = want.into_iter().map(lit).collect();
        let _ = writeln!(
            s,
            "        let pool = rayon::ThreadPoolBuilder::new().num_threads({}).build().unwrap();\n\
             \x20       let out = pool.install(|| kernels::{}::<{v}, {i}>(&[{}], &{:?}));\n\
             \x20       let got: Vec<f64> = dense_of(&out, {});\n\
             \x20       if out.format() != &Format::parse({:?}, {}).unwrap() || !close(&got, &[{}]) {{\n\
             \x20           failures += 1;\n\
             \x20           eprintln!(\"case {n} FAILED: {}\\n got {{got:?}}\");\n\
             \x20       }}\n    }}",
            inst.threads,
            inst.kernel_fn,
            names.join(", "),
            c.out_dims(),
            lit(c.fill()),
            c.format_of(&c.output_name()).to_string(),
            c.format_of(&c.output_name()).rank(),
            want.join(", "),
            c.describe().replace('"', "'").replace('{', "{{").replace('}', "}}"),
        );
    }
    let _ = writeln!(
        s,
        "    println!(\"checked {} kernels, {{failures}} failed\");",
        instances.len()
    );
    s.push_str("    if failures > 0 { std::process::exit(1); }\n}\n");
    s
}

#[test]
fn generated_kernels_match_the_oracle() {
    let instances = instances();
    let mut kernels = String::new();
    let (mut repacked, mut scattered) = (0, 0);
    for inst in &instances {
        let k = inst.case.lower().unwrap();
        repacked += usize::from(!k.repacks.is_empty());
        scattered += usize::from(k.nests.iter().any(|n| n.assembly == Assembly::Scatter));
        kernels.push_str(&codegen::pretty(&codegen::emit_named(&k, &inst.kernel_fn)));
        kernels.push('\n');
    }
    // The generated re-pack and scatter assembly are among what runs.
    assert!(
        repacked > 0 && scattered > 0,
        "{repacked} re-packed, {scattered} scattered"
    );
    let stdout = run_crate("tessera-codegen-check", &kernels, &main_rs(&instances));
    assert!(
        stdout.contains(&format!("checked {} kernels, 0 failed", instances.len())),
        "{stdout}"
    );
}

/// `emit` produces exactly one public function named `kernel`, generic over value and index.
#[test]
fn emit_is_one_generic_function() {
    let case = Case::fixed("y(i) = A(i,j) * x(j)", &[("A", "csr")], &[], 0);
    let tokens = codegen::emit(&case.lower().unwrap());
    let file: syn::File = syn::parse2(tokens.clone()).unwrap();
    assert_eq!(file.items.len(), 1);
    let syn::Item::Fn(f) = &file.items[0] else {
        panic!("not a function")
    };
    assert_eq!(f.sig.ident, "kernel");
    assert_eq!(f.sig.generics.params.len(), 2);
    let text = codegen::pretty(&tokens);
    assert!(
        text.contains("pub fn kernel<V: ::tessera_formats::Value, I: ::tessera_formats::Index>"),
        "{text}"
    );
    assert!(!text.contains("unsafe"), "{text}");
}

/// TTM with a mirrored sparse output (`ssd`, written in place like a dense one) gets what
/// dense outputs get: its zero-offset nests in a function of their own, whose `noalias`
/// slices spare LLVM the overlap test of the output row and `C`'s row before every
/// vectorised row update, and `C`'s rows located at each nonzero's `l` without a test (the
/// matrix is whole there, and its row slice is checked anyway).
#[test]
fn mirrored_output_nests_run_in_their_own_function_and_trust_whole_rows() {
    let case = Case::fixed(
        "A(i,j,k) = B(i,j,l) * C(l,k)",
        &[("B", "csf"), ("A", "ssd")],
        &[],
        0,
    );
    let text = codegen::pretty(&codegen::emit(&case.lower().unwrap()));
    let (_, trusted) = text
        .split_once("fn zero_offsets<")
        .unwrap_or_else(|| panic!("no nested zero-offset function:\n{text}"));
    // The nested function, then its call, then the copy for any offsets.
    let (trusted, any) = trusted
        .split_once("zero_offsets::<")
        .expect("the nested function is called");
    // `C` is input 1 (tensor 1): its first level's size is tested only where offsets vary.
    assert!(!trusted.contains("x >= t1_l0_size"), "{text}");
    assert!(any.contains("x >= t1_l0_size"), "{text}");
    // The trusted copy runs only when `C`'s rows span their dimension.
    assert!(
        text.contains("t1_l0_size == inputs[1usize].dims()[0usize]"),
        "{text}"
    );
}

/// TTV over whole CSF tensors: the copy of the nests over whole validated tensors cuts the
/// fibre level's `pos` and the mirrored output's values to the length of the level above
/// (`crd.len()`), sequential and inside the parallel jobs' closure (which gets each slice's
/// length as a value of its own), so that the check of the fibre's `crd` position also
/// covers `pos[p]`, `pos[p + 1]` and the output store, as validation guarantees it does.
#[test]
fn csf_fibres_index_pos_and_the_mirrored_output_within_the_parent_crd() {
    let cut_pos = "let t0_l2_pos: &[I] = &t0_l2_pos[..=t0_l1_crd.len()];";
    let cut_out = "let out_vals: &mut [V] = &mut out_vals[..t0_l1_crd.len()];";
    for (schedule, out_cut) in [("", true), ("; parallelize(i)", false)] {
        let expr = format!("A(i,j) = B(i,j,k) * c(k){schedule}");
        let case = Case::fixed(&expr, &[("B", "csf"), ("A", "ss")], &[], 0);
        let text = codegen::pretty(&codegen::emit(&case.lower().unwrap()));
        let jobs = text.split_once("for_each(move").map(|(_, j)| j);
        let trusted = match jobs {
            Some(closure) => closure,
            None => text.split_once("fn zero_offsets<").expect("own function").1,
        };
        assert!(trusted.contains(cut_pos), "{schedule:?}\n{text}");
        assert_eq!(trusted.contains(cut_out), out_cut, "{schedule:?}\n{text}");
    }
}

/// Parallel TTM (a mirrored `ssd` output): over whole tensors each job runs in a function
/// of its own that takes its output row as an argument (`noalias`, so LLVM does not test
/// it against `C`'s row for overlap before every vectorised row update); TTV's jobs (no
/// dense output level after the mirrored ones) stay in the closure.
#[test]
fn mirrored_jobs_with_dense_output_rows_run_in_a_function_of_their_own() {
    for (expr, formats, own) in [
        (
            "A(i,j,k) = B(i,j,l) * C(l,k)",
            [("B", "csf"), ("A", "ssd")],
            true,
        ),
        (
            "A(i,j) = B(i,j,k) * c(k)",
            [("B", "csf"), ("A", "ss")],
            false,
        ),
    ] {
        let expr = format!("{expr}; parallelize(i)");
        let case = Case::fixed(&expr, &formats, &[], 0);
        let text = codegen::pretty(&codegen::emit(&case.lower().unwrap()));
        let (_, trusted) = text.split_once("for_each(move").expect("parallel jobs");
        let job = trusted.split_once("fn one_job<").map(|(_, f)| f);
        let takes_row =
            job.is_some_and(|f| f.split_once(") {").unwrap().0.contains("out_row: &mut [V]"));
        assert_eq!(takes_row, own, "{expr}\n{text}");
    }
}

/// A gathering nest runs in copies picked per call by `gather::combine`: one walking its
/// gathers ahead, one streaming its last level's coordinates and values ahead, and the plain
/// one for every other case; a copy that would be the same as the plain one is not emitted.
/// A sparse vector times a dense one whose only gathering loop is the outer loop a parallel
/// kernel hands out over threads (not walked ahead, and its values not walked in a loop over
/// the level) has one copy; SDDMM, whose loop walks positions rather than coordinates and
/// values together, has no streaming copy; a DCSR matrix scaled by a vector at its rows'
/// coordinates gathers only in the outer loop, which is not walked ahead, but streams its
/// rows. Each arm holds exactly its own hints.
#[test]
fn a_nest_is_emitted_in_copies_only_where_they_differ() {
    // Expression, formats, and whether it has a look-ahead and a streaming arm.
    type Copies<'a> = (&'a str, &'a [(&'a str, &'a str)], (bool, bool));
    let cases: [Copies; 6] = [
        ("y(i) = a(i) * x(i)", &[("a", "s")], (true, true)),
        (
            "y(i) = a(i) * x(i); parallelize(i)",
            &[("a", "s")],
            (false, false),
        ),
        (
            "y(i) = A(i,j) * x(j); parallelize(i)",
            &[("A", "csr")],
            (true, true),
        ),
        (
            "A(i,j) = B(i,j,k) * c(k)",
            &[("B", "csf"), ("A", "ss")],
            (true, true),
        ),
        (
            "Z(i,j) = A(i,j) * S(i,k) * R(j,k)",
            &[("A", "csr"), ("Z", "csr")],
            (true, false),
        ),
        (
            "y(i) = B(i,j) * x(i); parallelize(i)",
            &[("B", "dcsr")],
            (false, true),
        ),
    ];
    for (expr, formats, (ahead, stream)) in cases {
        let case = Case::fixed(expr, formats, &[], 0);
        let text = codegen::pretty(&codegen::emit(&case.lower().unwrap()));
        let arm = |name: &str| text.split_once(&format!("gather::Prefetch::{name} =>"));
        assert_eq!(
            (arm("Ahead").is_some(), arm("Stream").is_some()),
            (ahead, stream),
            "{expr}:\n{text}"
        );
        assert_eq!(text.contains("gather::combine("), ahead || stream, "{expr}");
        // The text from each arm to the next holds that arm's hints only.
        let hints = |body: &str| {
            (
                body.contains("prefetch_past("),
                body.contains("prefetch_stream("),
            )
        };
        let until_next = |rest: &str| {
            let end = ["gather::Prefetch::Stream =>", "_ =>"]
                .iter()
                .filter_map(|m| rest.find(m))
                .min()
                .unwrap_or(rest.len());
            rest[..end].to_string()
        };
        if let Some((_, rest)) = arm("Ahead") {
            assert_eq!(hints(&until_next(rest)), (true, false), "{expr}");
        }
        if let Some((_, rest)) = arm("Stream") {
            let body = &rest[..rest.find("_ =>").unwrap_or(rest.len())];
            assert_eq!(hints(body), (false, true), "{expr}");
        }
        if ahead || stream {
            let plain = text.rsplit_once("_ =>").unwrap().1;
            assert_eq!(hints(plain), (false, false), "{expr}");
        }
    }
}

/// A compressed level whose coordinate nothing below reads, and whose loop does nothing but
/// walk the next level, is not looped over: the next level's positions under the whole range
/// are walked at once (TTV into `B`'s own first two levels, a sum over a DCSR matrix), and the
/// unread coordinate is not loaded. Where the coordinate indexes a dense output (`A: dd`), or
/// the level's position is where the output is written (TTV's `j` loop), the loop stays. The
/// generated crate above checks the flattened kernels against the oracle.
#[test]
fn a_level_whose_coordinate_nothing_reads_is_walked_as_one_range() {
    for (expr, formats, flat) in [
        (
            "A(i,j) = B(i,j,k) * c(k)",
            &[("B", "csf"), ("A", "ss")][..],
            true,
        ),
        ("a = min[i,j](A(i,j))", &[("A", "dcsr")][..], true),
        ("a = B(i,j,k) * c(k)", &[("B", "csf")][..], true),
        (
            "A(i,j) = B(i,j,k) * c(k)",
            &[("B", "csf"), ("A", "dd")][..],
            false,
        ),
        ("y(i) = A(i,j) * x(j)", &[("A", "dcsr")][..], false),
    ] {
        let case = Case::fixed(expr, formats, &[], 0);
        let text = codegen::pretty(&codegen::emit(&case.lower().unwrap()));
        assert_eq!(text.contains("flat_lo"), flat, "{expr}:\n{text}");
        assert_eq!(text.contains("for p0_0 in"), !flat, "{expr}:\n{text}");
        if formats == [("B", "csf"), ("A", "ss")] {
            assert!(!text.contains("t0_l1_crd[p0_1]"), "{expr}:\n{text}");
        }
    }
}
