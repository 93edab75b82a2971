//! Generated kernels run through `tessera_formats::simd::wide`: compiled for AVX-512, AVX2 +
//! FMA or the plain baseline, whichever the CPU has; and their gathers from vectors larger
//! than level 1 prefetch (`tessera_formats::gather`), in copies of the gather loop that stream
//! their own arrays ahead or walk the gathers ahead. Neither may change a bit. The path is
//! decided once per process (from the CPU and `TESSERA_SIMD`), and so is whether prefetching
//! is off, forced to one copy or left to each call's data (`TESSERA_PREFETCH`), so these tests
//! run themselves again as child processes, one per setting, and compare the children's bits
//! (and check that, left to the data, an SpMV whose gathers lie far apart in a vector larger
//! than the cache takes the look-ahead copy, and one into a cached vector the streaming copy).
#![allow(non_snake_case)]

use std::process::Command;
use tessera::formats::{gather, gather::Prefetch, simd};
use tessera::plans::Stored;
use tessera::runtime::Runtime;
use tessera::{tensor, Format, Tensor};
use tessera_tests::{random_tensor, Rng};

/// Set in the child processes: compute and print, do not spawn.
const CHILD: &str = "TESSERA_SIMD_PATHS_CHILD";

/// FNV-1a over the bits of every value, in order.
fn digest(ts: &[Tensor<f64>]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for t in ts {
        for v in t.to_dense() {
            for b in v.to_bits().to_le_bytes() {
                h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
    h
}

/// Kernels whose inner loops vectorise (rows of 32 and 16 dense values, element-wise math
/// with `exp` and `log`), sequential and parallel, on fixed random inputs.
fn kernels() -> Vec<Tensor<f64>> {
    let mut rng = Rng::new(42);
    let fmt = |s: &str, r: usize| Format::parse(s, r).unwrap();
    let A = random_tensor(&mut rng, &[300, 200], &fmt("csr", 2), 0.05);
    let B = random_tensor(&mut rng, &[200, 32], &Format::dense(2), 1.0);
    let x = random_tensor(&mut rng, &[200], &Format::dense(1), 1.0);
    let T = random_tensor(&mut rng, &[40, 30, 20], &fmt("sss", 3), 0.05);
    let C = random_tensor(&mut rng, &[30, 16], &Format::dense(2), 1.0);
    let D = random_tensor(&mut rng, &[20, 16], &Format::dense(2), 1.0);
    let w = random_tensor(&mut rng, &[1000], &Format::dense(1), 1.0);
    vec![
        tensor!(Y(i,j) = A(i,k) * B(k,j); A: csr).unwrap(),
        tensor!(Y(i,j) = A(i,k) * B(k,j); A: csr; parallelize(i)).unwrap(),
        tensor!(y(i) = A(i,j) * x(j); A: csr; parallelize(i)).unwrap(),
        tensor!(M(i,j) = T(i,k,l) * C(k,j) * D(l,j); T: sss).unwrap(),
        tensor!(M(i,j) = T(i,k,l) * C(k,j) * D(l,j); T: sss; parallelize(i)).unwrap(),
        tensor!(z(i) = exp(w(i) * 3) - log(abs(w(i)) + 0.5) * sqrt(abs(w(i)))).unwrap(),
    ]
}

/// Kernels that gather from dense tensors at a sparse level's coordinates: vectors (CSR SpMV
/// sequential and parallel, COO SpMV, TTV, a row-split SpMV run as block tasks on a runtime,
/// with views of the vector at nonzero offsets) and matrix rows (SpMM sequential and
/// parallel, SDDMM, whose loop walks positions, MTTKRP). Under `TESSERA_PREFETCH=always`
/// every one runs its look-ahead loop, under `stream` its streaming one where it has one (not
/// SDDMM, whose loop walks positions), on inputs far smaller than the caches.
fn gathers() -> Vec<Tensor<f64>> {
    let mut rng = Rng::new(7);
    let fmt = |s: &str, r: usize| Format::parse(s, r).unwrap();
    let A = random_tensor(&mut rng, &[400, 3000], &fmt("csr", 2), 0.02);
    let x = random_tensor(&mut rng, &[3000], &Format::dense(1), 1.0);
    let C = A.to_format("coo").unwrap();
    let B = random_tensor(&mut rng, &[30, 40, 500], &fmt("sss", 3), 0.05);
    let c = random_tensor(&mut rng, &[500], &Format::dense(1), 1.0);
    let R = random_tensor(&mut rng, &[3000, 24], &Format::dense(2), 1.0);
    let S = random_tensor(&mut rng, &[400, 24], &Format::dense(2), 1.0);
    let D = random_tensor(&mut rng, &[40, 16], &Format::dense(2), 1.0);
    let E = random_tensor(&mut rng, &[500, 16], &Format::dense(2), 1.0);
    let rt = Runtime::builder().threads(2).build();
    let planned = (|| {
        let (A, x) = (Stored::upload(&rt, &A)?, Stored::upload(&rt, &x)?);
        let y = tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 3))?;
        y.to_tensor(&rt)
    })()
    .unwrap();
    vec![
        tensor!(y(i) = A(i,j) * x(j); A: csr).unwrap(),
        tensor!(y(i) = A(i,j) * x(j); A: csr; parallelize(i)).unwrap(),
        tensor!(y(i) = C(i,j) * x(j); C: coo).unwrap(),
        tensor!(M(i,j) = B(i,j,k) * c(k); B: sss).unwrap(),
        planned,
        tensor!(Y(i,j) = A(i,k) * R(k,j); A: csr).unwrap(),
        tensor!(Y(i,j) = A(i,k) * R(k,j); A: csr; parallelize(i)).unwrap(),
        tensor!(Z(i,j) = A(i,j) * S(i,k) * R(j,k); A: csr; Z: csr).unwrap(),
        tensor!(M(i,j) = B(i,k,l) * D(k,j) * E(l,j); B: sss).unwrap(),
    ]
}

/// Columns of the far SpMV's vector: at least 48 MiB of values, and twice a third of this
/// machine's last-level cache (a Xeon of this project's machines has 260 MiB), so that
/// `gather::decide` picks the look-ahead loops when the data decides.
fn far_columns() -> usize {
    let third = tessera::formats::caches::last_level() / 3;
    (6 << 20).max(2 * third / std::mem::size_of::<f64>())
}

/// Columns of the cached SpMV's vector: 512 KiB of values, past any level 1 and within a
/// third of any last-level cache from 1.5 MiB, so that the data picks the streaming loops.
const CACHED_COLUMNS: usize = 1 << 16;

/// A CSR matrix of 64 rows whose `per_row` nonzeros a row lie far apart in a vector of
/// `columns` values (and from the next rows': the gathers `gather::AHEAD` positions apart
/// lie more than 32 KiB apart, for both sizes used), that vector, and which copy of SpMV's
/// gather loop the data picks for them ([`tessera::formats::gather::decide`], as the kernel
/// asks).
fn spmv_over(columns: usize, per_row: usize) -> (Tensor<f64>, Tensor<f64>, Prefetch) {
    let rows = 64usize;
    let entries: Vec<(Vec<usize>, f64)> = (0..rows)
        .flat_map(|i| {
            (0..per_row).map(move |k| {
                let j = (k * (columns / per_row) + i * 7919) % columns;
                (vec![i, j], 1.0 + (i * per_row + k) as f64 * 1e-3)
            })
        })
        .collect();
    let A = Tensor::from_entries(vec![rows, columns], "csr", entries).unwrap();
    let x = (0..columns)
        .map(|j| (j % 1013) as f64 * 0.01 - 5.0)
        .collect();
    let x = Tensor::dense_from_vec(vec![columns], x).unwrap();
    let copy = match &A.levels()[1] {
        tessera::Level::Compressed { crd, .. } => {
            gather::decide(crd, columns, std::mem::size_of::<f64>())
        }
        _ => unreachable!("CSR"),
    };
    (A, x, copy)
}

/// The `PATH` line of the child process running test `test` with `var` set to `setting` (or
/// removed): the path it reports and the digest of its bits.
fn child(test: &str, var: &str, setting: Option<&str>) -> (String, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture"]);
    cmd.env(CHILD, "1").env_remove(var);
    if let Some(s) = setting {
        cmd.env(var, s);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {var}={setting:?} failed: {text}"
    );
    let line = text.lines().find(|l| l.starts_with("PATH ")).unwrap();
    let mut words = line.split(' ');
    let path = words.nth(1).unwrap().to_string();
    (path, words.nth(1).unwrap().to_string())
}

#[test]
fn every_simd_path_gives_the_same_bits() {
    if std::env::var_os(CHILD).is_some() {
        println!(
            "PATH {} BITS {:016x}",
            simd::avx512_available() as u8 + simd::wide_available() as u8,
            digest(&kernels())
        );
        return;
    }
    let run = |setting| {
        child(
            "every_simd_path_gives_the_same_bits",
            "TESSERA_SIMD",
            setting,
        )
    };
    let plain = run(Some("0"));
    let avx2 = run(Some("avx2"));
    let widest = run(None);
    assert_eq!(plain.0, "0", "TESSERA_SIMD=0 takes the plain path");
    // Each child took the path it was asked for, where the CPU has it (this process's own
    // path is the CPU's widest unless TESSERA_SIMD narrows it).
    if std::env::var_os("TESSERA_SIMD").is_none() {
        let widest_here = simd::avx512_available() as u8 + simd::wide_available() as u8;
        assert_eq!(avx2.0, (simd::wide_available() as u8).to_string());
        assert_eq!(widest.0, widest_here.to_string());
    }
    assert_eq!(plain.1, avx2.1, "AVX2 + FMA changed a bit");
    assert_eq!(plain.1, widest.1, "the widest path changed a bit");
}

#[test]
fn prefetching_gathers_gives_the_same_bits() {
    if std::env::var_os(CHILD).is_some() {
        let setting = std::env::var("TESSERA_PREFETCH").unwrap_or_default();
        let mut out = gathers();
        let mut copies = Vec::new();
        for (columns, per_row) in [(far_columns(), 64), (CACHED_COLUMNS, 4)] {
            let (A, x, copy) = spmv_over(columns, per_row);
            out.push(tensor!(y(i) = A(i,j) * x(j); A: csr).unwrap());
            out.push(tensor!(y(i) = A(i,j) * x(j); A: csr; parallelize(i)).unwrap());
            copies.push(format!("{copy:?}"));
        }
        let path = format!("{setting}:{}", copies.join(","));
        println!("PATH {path} BITS {:016x}", digest(&out));
        return;
    }
    let run = |setting| {
        child(
            "prefetching_gathers_gives_the_same_bits",
            "TESSERA_PREFETCH",
            setting,
        )
    };
    let never = run(Some("0"));
    let always = run(Some("always"));
    let stream = run(Some("stream"));
    let decided = run(None);
    // The data decided for the far-apart SpMV and the cached one (and only the settings
    // overrule it).
    assert_eq!(
        [&never.0, &always.0, &stream.0, &decided.0].map(String::as_str),
        [
            "0:Plain,Plain",
            "always:Ahead,Ahead",
            "stream:Stream,Stream",
            ":Ahead,Stream"
        ]
    );
    assert_eq!(never.1, always.1, "the look-ahead loops changed a bit");
    assert_eq!(never.1, stream.1, "the streaming loops changed a bit");
    assert_eq!(
        never.1, decided.1,
        "the loops chosen by the data changed a bit"
    );
}
