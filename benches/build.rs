//! Generates the kernels the `kernels` and `plans` benches time: each statement goes through the real
//! compiler pipeline (parse → check → lower → codegen) and the Rust it emits is written to
//! `$OUT_DIR/kernels.rs`, which the bench `include!`s. A failure names the statement.

use std::fmt::Write as _;

/// (function name, `tensor!`-form statement).
const KERNELS: &[(&str, &str)] = &[
    ("spmv", "y(i) = A(i,j) * x(j); A: csr"),
    ("spmv_par", "y(i) = A(i,j) * x(j); A: csr; parallelize(i)"),
    // COO (a non-unique row level over a singleton column level) beside CSR.
    ("spmv_coo", "y(i) = A(i,j) * x(j); A: sq"),
    ("spmm", "C(i,k) = A(i,j) * B(j,k); A: csr"),
    (
        "spmm_par",
        "C(i,k) = A(i,j) * B(j,k); A: csr; parallelize(i)",
    ),
    ("mttkrp", "A(i,j) = B(i,k,l) * C(k,j) * D(l,j); B: csf"),
    (
        "mttkrp_par",
        "A(i,j) = B(i,k,l) * C(k,j) * D(l,j); B: csf; parallelize(i)",
    ),
    // The `tensor_kernels` bench: the rest of the kernel list.
    ("sddmm", "A(i,j) = B(i,j) * C(i,k) * D(j,k); B: csr; A: csr"),
    (
        "sddmm_par",
        "A(i,j) = B(i,j) * C(i,k) * D(j,k); B: csr; A: csr; parallelize(i)",
    ),
    ("ttv", "A(i,j) = B(i,j,k) * c(k); B: csf; A: ss"),
    (
        "ttv_par",
        "A(i,j) = B(i,j,k) * c(k); B: csf; A: ss; parallelize(i)",
    ),
    ("ttm", "A(i,j,k) = B(i,j,l) * C(l,k); B: csf; A: ssd"),
    (
        "ttm_par",
        "A(i,j,k) = B(i,j,l) * C(l,k); B: csf; A: ssd; parallelize(i)",
    ),
    (
        "mttkrp4",
        "A(i,j) = B(i,k,l,m) * C(k,j) * D(l,j) * E(m,j); B: ssss",
    ),
    (
        "mttkrp4_par",
        "A(i,j) = B(i,k,l,m) * C(k,j) * D(l,j) * E(m,j); B: ssss; parallelize(i)",
    ),
    ("spgemm", "A(i,j) = B(i,k) * C(k,j); A: csr; B: csr; C: csr"),
    (
        "spgemm_par",
        "A(i,j) = B(i,k) * C(k,j); A: csr; B: csr; C: csr; parallelize(i)",
    ),
    // The `semirings` bench: other reductions, and an operand re-packed automatically.
    ("minplus_mv", "y(i) = min[j](A(i,j) + x(j)); A: csr"),
    ("maxtimes_mv", "y(i) = max[j](A(i,j) * x(j)); A: csr"),
    ("minplus_mm", "C(i,k) = min[j](A(i,j) + B(j,k)); A: csr"),
    (
        "add_csr_csc",
        "C(i,j) = A(i,j) + B(i,j); A: csr; B: csc; C: csr",
    ),
    (
        "add_csr_csr",
        "C(i,j) = A(i,j) + B(i,j); A: csr; B: csr; C: csr",
    ),
    ("transpose_csr", "A(i,j) = B(j,i); A: csr; B: csr"),
];

/// (function name, statement) of the block kernels (`codegen::emit_block`) the `plans` bench
/// runs as its plans' point tasks.
const BLOCK_KERNELS: &[(&str, &str)] = &[
    ("spmv_block", "y(i) = A(i,j) * x(j); A: csr"),
    ("spmm_block", "C(i,k) = A(i,j) * B(j,k); A: csr"),
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for dir in ["src", "build.rs"] {
        println!("cargo:rerun-if-changed=../compiler/{dir}");
    }
    let mut out = String::new();
    let block = KERNELS.iter().map(|k| (k, false));
    for ((name, src), block) in block.chain(BLOCK_KERNELS.iter().map(|k| (k, true))) {
        let stmt = tessera_compiler::parse::program(src, 0)
            .unwrap_or_else(|e| panic!("`{src}`: {}", e.message));
        let checked = tessera_compiler::check::check(stmt, &Default::default())
            .unwrap_or_else(|e| panic!("`{src}`: {}", e.message));
        let kernel =
            tessera_compiler::lower::lower(&checked).unwrap_or_else(|e| panic!("`{src}`: {e}"));
        let ident = quote::format_ident!("{}", name);
        let tokens = if block {
            tessera_compiler::codegen::emit_block_named(&kernel, &ident)
        } else {
            tessera_compiler::codegen::emit_named(&kernel, &ident)
        };
        let _ = writeln!(out, "{}", tessera_compiler::codegen::pretty(&tokens));
    }
    let path = std::path::Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("kernels.rs");
    std::fs::write(&path, out).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
