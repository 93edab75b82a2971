//! The rest of the kernel list beside hand-written Rust loops, at 1 and 2 threads, on a uniform
//! and a power-law input each larger than the last-level cache: SDDMM, TTV, TTM, MTTKRP on a
//! 3-order and a 4-order tensor and SpGEMM (SpMV, SpMM and a small 3-order MTTKRP are in the
//! `kernels` bench).
//!
//! Every contestant does the same work per call: allocate its output (a sparse output with its
//! own copies of the index arrays, as a library call must return) and compute into it. The
//! generated kernels come from `build.rs`, through the real compiler pipeline.
//!
//! Sizes scale with `TESSERA_BENCH_SCALE` (default 1.0); repetitions with `TESSERA_BENCH_REPS`;
//! `TESSERA_BENCH_ONLY=ttv,ttm` runs only the named kernels, `TESSERA_BENCH_SPREAD=uniform` (or
//! `power-law`) only that input spread; `TESSERA_BENCH_PROFILE=gen|hand|gen2|hand2` runs one
//! contestant `TESSERA_BENCH_PROFILE_RUNS` times instead of the races (`contest::profiled`).

use std::hint::black_box;
use std::ops::Range;

use rayon::prelude::*;
use tessera_benches::contest::{
    check_same, csr, dense, sparse_level, to_index, versus_hand, Spread,
};
use tessera_benches::{env_or, Rng, Table};
use tessera_formats::{Format, Level, Tensor};

mod generated {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}

/// Output rows handed to one parallel job of a hand-written kernel.
const ROWS_PER_JOB: usize = 256;

/// Level `l`'s `pos` and `crd` (it is compressed).
fn compressed(t: &Tensor<f64, u32>, l: usize) -> (&[u32], &[u32]) {
    match &t.levels()[l] {
        Level::Compressed { pos, crd } => (pos, crd),
        _ => unreachable!("the benches build compressed levels here"),
    }
}

fn range(pos: &[u32], p: usize) -> Range<usize> {
    pos[p] as usize..pos[p + 1] as usize
}

/// An all-compressed tensor of order `fanout.len()`: `fanout[0]` coordinates at the root, then
/// about `fanout[l]` children per position of level `l - 1`.
fn sparse_tensor(n: usize, fanout: &[usize], spread: Spread, rng: &mut Rng) -> Tensor<f64, u32> {
    let mut levels = Vec::new();
    let mut parents = 1;
    for &per in fanout {
        let (pos, crd) = sparse_level(parents, n, per, spread, rng);
        parents = crd.len();
        levels.push(Level::Compressed {
            pos: to_index(&pos),
            crd: to_index(&crd),
        });
    }
    let vals = (0..parents).map(|_| rng.value()).collect();
    let format = Format::parse(&"s".repeat(fanout.len()), fanout.len()).expect("all compressed");
    Tensor::from_parts(vec![n; fanout.len()], format, levels, vals).expect("valid tensor")
}

/// Mutable slices of `out`, one per job of `ROWS_PER_JOB` parents: parent `p` owns
/// `out[pos[p] * width..pos[p + 1] * width]`. Each job gets its parent range and slice.
fn jobs<'a>(
    pos: &[u32],
    width: usize,
    mut out: &'a mut [f64],
) -> Vec<(Range<usize>, &'a mut [f64])> {
    let parents = pos.len() - 1;
    let mut parts = Vec::new();
    for lo in (0..parents).step_by(ROWS_PER_JOB) {
        let hi = (lo + ROWS_PER_JOB).min(parents);
        let len = (pos[hi] - pos[lo]) as usize * width;
        let (mine, rest) = out.split_at_mut(len);
        parts.push((lo..hi, mine));
        out = rest;
    }
    parts
}

/// SDDMM: `A(i,j) = B(i,j) * sum_k C(i,k) * D(j,k)` for rows `rows` of B, into `out`
/// (B's values from `pos[rows.start]`).
fn hand_sddmm_rows(
    b: &Tensor<f64, u32>,
    c: &[f64],
    d: &[f64],
    k: usize,
    rows: Range<usize>,
    out: &mut [f64],
) {
    let (pos, crd) = compressed(b, 1);
    let base = pos[rows.start] as usize;
    for i in rows {
        let crow = &c[i * k..][..k];
        for p in range(pos, i) {
            let drow = &d[crd[p] as usize * k..][..k];
            let dot: f64 = crow.iter().zip(drow).map(|(x, y)| x * y).sum();
            out[p - base] = b.vals()[p] * dot;
        }
    }
}

/// A copy of `t`'s structure with new values (a sparse output with the pattern of an input).
fn with_vals(t: &Tensor<f64, u32>, vals: Vec<f64>) -> Tensor<f64, u32> {
    Tensor::from_parts(
        t.dims().to_vec(),
        t.format().clone(),
        t.levels().to_vec(),
        vals,
    )
    .expect("same structure")
}

fn bench_sddmm(table: &mut Table, scale: f64, spread: Spread) {
    let n = ((1usize << 17) as f64 * scale) as usize;
    let k = 32;
    let mut rng = Rng(11);
    let (pos, crd) = sparse_level(n, n, 8, spread, &mut rng);
    let vals: Vec<f64> = (0..crd.len()).map(|_| rng.value()).collect();
    let b = csr::<u32>(n, n, &pos, &crd, &vals);
    let (ct, dt) = (dense(vec![n, k], &mut rng), dense(vec![n, k], &mut rng));
    let (c, d) = (ct.vals(), dt.vals());
    let nnz = crd.len();
    let hand = || {
        let mut out = vec![0.0; nnz];
        hand_sddmm_rows(&b, c, d, k, 0..n, &mut out);
        with_vals(&b, out)
    };
    let hand_par = || {
        let mut out = vec![0.0; nnz];
        let (pos, _) = compressed(&b, 1);
        jobs(pos, 1, &mut out)
            .into_par_iter()
            .for_each(|(rows, slice)| hand_sddmm_rows(&b, c, d, k, rows, slice));
        with_vals(&b, out)
    };
    let gen = || generated::sddmm::<f64, u32>(&[&b, &ct, &dt], &[n, n]);
    let gen_par = || generated::sddmm_par::<f64, u32>(&[&b, &ct, &dt], &[n, n]);
    check_same("sddmm", gen().vals(), hand().vals());
    check_same("sddmm_par", gen_par().vals(), hand_par().vals());
    race_pair(
        table,
        &format!("sddmm csr {} nnz {nnz} k{k}", spread.name()),
        [&gen, &hand],
        [&gen_par, &hand_par],
    );
}

/// Races the four calls (each dropping its result) through [`versus_hand`].
fn race_pair<T: Send>(
    table: &mut Table,
    name: &str,
    sequential: [&(dyn Fn() -> T + Sync); 2],
    parallel: [&(dyn Fn() -> T + Sync); 2],
) {
    let [g1, h1] = sequential.map(|f| move || drop(black_box(f())));
    let [g2, h2] = parallel.map(|f| move || drop(black_box(f())));
    versus_hand(table, name, [&g1, &h1], [&g2, &h2]);
}

/// TTV: `A(i,j) = sum_k B(i,j,k) * c(k)`, one value per level-1 position, into `out`.
fn hand_ttv_fibres(b: &Tensor<f64, u32>, c: &[f64], fibres: Range<usize>, out: &mut [f64]) {
    let (pos, crd) = compressed(b, 2);
    for (p1, o) in fibres.zip(out) {
        let r = range(pos, p1);
        *o = crd[r.clone()]
            .iter()
            .zip(&b.vals()[r])
            .map(|(k, v)| v * c[*k as usize])
            .sum();
    }
}

/// The first two levels of a 3-order CSF as a DCSR matrix with the given values.
fn first_two_levels(b: &Tensor<f64, u32>, vals: Vec<f64>) -> Tensor<f64, u32> {
    let levels = b.levels()[..2].to_vec();
    let format = Format::parse("ss", 2).expect("DCSR");
    Tensor::from_parts(b.dims()[..2].to_vec(), format, levels, vals).expect("valid DCSR")
}

fn bench_ttv(table: &mut Table, scale: f64, spread: Spread) {
    let n = ((1usize << 16) as f64 * scale.sqrt()) as usize;
    let mut rng = Rng(12);
    let b = sparse_tensor(n, &[n / 2, 16, 16], spread, &mut rng);
    let ct = dense(vec![n], &mut rng);
    let c = ct.vals();
    let fibres = compressed(&b, 1).1.len();
    let hand = || {
        let mut out = vec![0.0; fibres];
        hand_ttv_fibres(&b, c, 0..fibres, &mut out);
        first_two_levels(&b, out)
    };
    let hand_par = || {
        let mut out = vec![0.0; fibres];
        out.par_chunks_mut(ROWS_PER_JOB * 16)
            .enumerate()
            .for_each(|(job, slice)| {
                let lo = job * ROWS_PER_JOB * 16;
                hand_ttv_fibres(&b, c, lo..lo + slice.len(), slice)
            });
        first_two_levels(&b, out)
    };
    let gen = || generated::ttv::<f64, u32>(&[&b, &ct], &[n, n]);
    let gen_par = || generated::ttv_par::<f64, u32>(&[&b, &ct], &[n, n]);
    check_same("ttv", gen().vals(), hand().vals());
    check_same("ttv_par", gen_par().vals(), hand_par().vals());
    let name = format!("ttv csf {} nnz {}", spread.name(), b.vals().len());
    race_pair(table, &name, [&gen, &hand], [&gen_par, &hand_par]);
}

/// TTM: `A(i,j,k) = sum_l B(i,j,l) * C(l,k)`: a dense row of `k` values per level-1 position.
fn hand_ttm_fibres(
    b: &Tensor<f64, u32>,
    c: &[f64],
    k: usize,
    fibres: Range<usize>,
    out: &mut [f64],
) {
    let (pos, crd) = compressed(b, 2);
    for (p1, orow) in fibres.zip(out.chunks_mut(k)) {
        for p2 in range(pos, p1) {
            let (v, crow) = (b.vals()[p2], &c[crd[p2] as usize * k..][..k]);
            for (o, x) in orow.iter_mut().zip(crow) {
                *o += v * x;
            }
        }
    }
}

/// The first two levels of a 3-order CSF with a dense third level of `k` (`ssd`).
fn sparse_sparse_dense(b: &Tensor<f64, u32>, k: usize, vals: Vec<f64>) -> Tensor<f64, u32> {
    let mut levels = b.levels()[..2].to_vec();
    levels.push(Level::Dense { size: k, offset: 0 });
    let format = Format::parse("ssd", 3).expect("ssd");
    let dims = vec![b.dims()[0], b.dims()[1], k];
    Tensor::from_parts(dims, format, levels, vals).expect("valid ssd")
}

fn bench_ttm(table: &mut Table, scale: f64, spread: Spread) {
    let n = ((1usize << 16) as f64 * scale.sqrt()) as usize;
    let k = 16;
    let mut rng = Rng(13);
    let b = sparse_tensor(n, &[n / 2, 8, 8], spread, &mut rng);
    let ct = dense(vec![n, k], &mut rng);
    let c = ct.vals();
    let fibres = compressed(&b, 1).1.len();
    let hand = || {
        let mut out = vec![0.0; fibres * k];
        hand_ttm_fibres(&b, c, k, 0..fibres, &mut out);
        sparse_sparse_dense(&b, k, out)
    };
    let hand_par = || {
        let mut out = vec![0.0; fibres * k];
        let per_job = ROWS_PER_JOB * 8;
        out.par_chunks_mut(per_job * k)
            .enumerate()
            .for_each(|(job, slice)| {
                let lo = job * per_job;
                hand_ttm_fibres(&b, c, k, lo..lo + slice.len() / k, slice)
            });
        sparse_sparse_dense(&b, k, out)
    };
    let gen = || generated::ttm::<f64, u32>(&[&b, &ct], &[n, n, k]);
    let gen_par = || generated::ttm_par::<f64, u32>(&[&b, &ct], &[n, n, k]);
    check_same("ttm", gen().vals(), hand().vals());
    check_same("ttm_par", gen_par().vals(), hand_par().vals());
    let name = format!("ttm csf {} nnz {} k{k}", spread.name(), b.vals().len());
    race_pair(table, &name, [&gen, &hand], [&gen_par, &hand_par]);
}

/// The jobs of a parallel hand-written MTTKRP: `ROWS_PER_JOB` root positions each, owning the
/// output rows (of `r` values, `n` in all) from its first root's row to the next job's.
fn root_jobs<'a>(
    roots: &[u32],
    n: usize,
    r: usize,
    mut rest: &'a mut [f64],
) -> Vec<(Range<usize>, usize, &'a mut [f64])> {
    let mut parts = Vec::new();
    let mut row0 = 0;
    for lo in (0..roots.len()).step_by(ROWS_PER_JOB) {
        let hi = (lo + ROWS_PER_JOB).min(roots.len());
        let end = if hi == roots.len() {
            n
        } else {
            roots[hi] as usize
        };
        let (mine, tail) = std::mem::take(&mut rest).split_at_mut((end - row0) * r);
        parts.push((lo..hi, row0, mine));
        (rest, row0) = (tail, end);
    }
    parts
}

/// A hand-written MTTKRP over every root of `roots`, sequential and in parallel over
/// [`root_jobs`]: `rows(roots, row0, out)` writes the `r`-wide output rows of `roots` into
/// `out`, which starts at row `row0`.
fn hand_by_roots<'a, K>(
    roots: &'a [u32],
    n: usize,
    r: usize,
    rows: &'a K,
) -> (
    impl Fn() -> Vec<f64> + Sync + 'a,
    impl Fn() -> Vec<f64> + Sync + 'a,
)
where
    K: Fn(Range<usize>, usize, &mut [f64]) + Sync,
{
    let sequential = move || {
        let mut out = vec![0.0; n * r];
        rows(0..roots.len(), 0, &mut out);
        out
    };
    let parallel = move || {
        let mut out = vec![0.0; n * r];
        root_jobs(roots, n, r, &mut out)
            .into_par_iter()
            .for_each(|(q, row0, slice)| rows(q, row0, slice));
        out
    };
    (sequential, parallel)
}

/// MTTKRP on a 3-order CSF tensor: `A(i,j) = sum B(i,k,l) * C(k,j) * D(l,j)` for the root
/// positions `roots`, into the output rows starting at row `row0`.
fn hand_mttkrp3_roots(
    b: &Tensor<f64, u32>,
    f: [&[f64]; 2],
    r: usize,
    roots: Range<usize>,
    row0: usize,
    out: &mut [f64],
) {
    let ((_, c0), (p1, c1), (p2, c2)) = (compressed(b, 0), compressed(b, 1), compressed(b, 2));
    for q0 in roots {
        let arow = &mut out[(c0[q0] as usize - row0) * r..][..r];
        for q1 in range(p1, q0) {
            let crow = &f[0][c1[q1] as usize * r..][..r];
            for q2 in range(p2, q1) {
                let (v, drow) = (b.vals()[q2], &f[1][c2[q2] as usize * r..][..r]);
                for ((a, x), y) in arow.iter_mut().zip(crow).zip(drow) {
                    *a += v * x * y;
                }
            }
        }
    }
}

/// 3-order MTTKRP at the size of issue 16's measurement (2 M nonzeros, rank 16), with factor
/// matrices of 32 MiB each: together past the last-level cache, as the tensor is.
fn bench_mttkrp3(table: &mut Table, scale: f64, spread: Spread) {
    let n = ((1usize << 18) as f64 * scale.sqrt()) as usize;
    let r = 16;
    let mut rng = Rng(15);
    let b = sparse_tensor(n, &[n / 8, 8, 8], spread, &mut rng);
    let ts: Vec<Tensor<f64, u32>> = (0..2).map(|_| dense(vec![n, r], &mut rng)).collect();
    let f = [ts[0].vals(), ts[1].vals()];
    let rows =
        |q: Range<usize>, row0: usize, out: &mut [f64]| hand_mttkrp3_roots(&b, f, r, q, row0, out);
    let (hand, hand_par) = hand_by_roots(compressed(&b, 0).1, n, r, &rows);
    let inputs = [&b, &ts[0], &ts[1]];
    let gen = || generated::mttkrp::<f64, u32>(&inputs, &[n, r]);
    let gen_par = || generated::mttkrp_par::<f64, u32>(&inputs, &[n, r]);
    check_same("mttkrp", gen().vals(), &hand());
    check_same("mttkrp_par", gen_par().vals(), &hand_par());
    let (g1, g2) = (|| drop(black_box(gen())), || drop(black_box(gen_par())));
    let (h1, h2) = (|| drop(black_box(hand())), || drop(black_box(hand_par())));
    let name = format!(
        "mttkrp 3-order sss {} nnz {} r{r}",
        spread.name(),
        b.vals().len()
    );
    versus_hand(table, &name, [&g1, &h1], [&g2, &h2]);
}

/// MTTKRP on a 4-order tensor: `A(i,j) = sum B(i,k,l,m) * C(k,j) * D(l,j) * E(m,j)` for the
/// root positions `roots`, into the output rows starting at row `row0`.
fn hand_mttkrp4_roots(
    b: &Tensor<f64, u32>,
    f: [&[f64]; 3],
    r: usize,
    roots: Range<usize>,
    row0: usize,
    out: &mut [f64],
) {
    let ((_, c0), (p1, c1), (p2, c2), (p3, c3)) = (
        compressed(b, 0),
        compressed(b, 1),
        compressed(b, 2),
        compressed(b, 3),
    );
    for q0 in roots {
        let arow = &mut out[(c0[q0] as usize - row0) * r..][..r];
        for q1 in range(p1, q0) {
            let crow = &f[0][c1[q1] as usize * r..][..r];
            for q2 in range(p2, q1) {
                let drow = &f[1][c2[q2] as usize * r..][..r];
                for q3 in range(p3, q2) {
                    let (v, erow) = (b.vals()[q3], &f[2][c3[q3] as usize * r..][..r]);
                    for (((a, x), y), z) in arow.iter_mut().zip(crow).zip(drow).zip(erow) {
                        *a += v * x * y * z;
                    }
                }
            }
        }
    }
}

fn bench_mttkrp4(table: &mut Table, scale: f64, spread: Spread) {
    let n = ((1usize << 13) as f64 * scale.sqrt()) as usize;
    let r = 16;
    let mut rng = Rng(14);
    let b = sparse_tensor(n, &[n / 2, 6, 6, 6], spread, &mut rng);
    let ts: Vec<Tensor<f64, u32>> = (0..3).map(|_| dense(vec![n, r], &mut rng)).collect();
    let f = [ts[0].vals(), ts[1].vals(), ts[2].vals()];
    let rows =
        |q: Range<usize>, row0: usize, out: &mut [f64]| hand_mttkrp4_roots(&b, f, r, q, row0, out);
    let (hand, hand_par) = hand_by_roots(compressed(&b, 0).1, n, r, &rows);
    let inputs = [&b, &ts[0], &ts[1], &ts[2]];
    let gen = || {
        generated::mttkrp4::<f64, u32>(&inputs, &[n, r])
            .vals()
            .to_vec()
    };
    let gen_par = || {
        generated::mttkrp4_par::<f64, u32>(&inputs, &[n, r])
            .vals()
            .to_vec()
    };
    check_same("mttkrp4", &gen(), &hand());
    check_same("mttkrp4_par", &gen_par(), &hand_par());
    // The generated calls are raced without the copy `gen` makes for the check.
    let g1 = || drop(black_box(generated::mttkrp4::<f64, u32>(&inputs, &[n, r])));
    let g2 = || {
        drop(black_box(generated::mttkrp4_par::<f64, u32>(
            &inputs,
            &[n, r],
        )))
    };
    let (h1, h2) = (|| drop(black_box(hand())), || drop(black_box(hand_par())));
    let name = format!(
        "mttkrp 4-order ssss {} nnz {} r{r}",
        spread.name(),
        b.vals().len()
    );
    versus_hand(table, &name, [&g1, &h1], [&g2, &h2]);
}

/// Gustavson's SpGEMM for rows `rows` of `b`: a dense accumulator with a list of the columns
/// it touched, sorted per row. Returns the rows' lengths, coordinates and values.
fn hand_spgemm_rows(
    b: &Tensor<f64, u32>,
    c: &Tensor<f64, u32>,
    rows: Range<usize>,
) -> (Vec<u32>, Vec<u32>, Vec<f64>) {
    let ((bp, bc), (cp, cc)) = (compressed(b, 1), compressed(c, 1));
    let cols = c.dims()[1];
    let (mut acc, mut seen) = (vec![0.0; cols], vec![false; cols]);
    let (mut lens, mut crd, mut vals) = (Vec::new(), Vec::new(), Vec::new());
    let mut touched: Vec<u32> = Vec::new();
    for i in rows {
        for p in range(bp, i) {
            let (k, bv) = (bc[p] as usize, b.vals()[p]);
            for q in range(cp, k) {
                let j = cc[q] as usize;
                if !seen[j] {
                    seen[j] = true;
                    touched.push(cc[q]);
                }
                acc[j] += bv * c.vals()[q];
            }
        }
        touched.sort_unstable();
        lens.push(touched.len() as u32);
        for &j in &touched {
            let j = j as usize;
            crd.push(j as u32);
            vals.push(std::mem::take(&mut acc[j]));
            seen[j] = false;
        }
        touched.clear();
    }
    (lens, crd, vals)
}

/// Concatenates row blocks from [`hand_spgemm_rows`] into a CSR matrix.
fn csr_from_blocks(
    rows: usize,
    cols: usize,
    blocks: Vec<(Vec<u32>, Vec<u32>, Vec<f64>)>,
) -> Tensor<f64, u32> {
    let mut pos = vec![0u32];
    let (mut crd, mut vals) = (Vec::new(), Vec::new());
    for (lens, c, v) in blocks {
        for l in lens {
            pos.push(pos.last().expect("starts with 0") + l);
        }
        crd.extend(c);
        vals.extend(v);
    }
    let levels = vec![
        Level::Dense {
            size: rows,
            offset: 0,
        },
        Level::Compressed { pos, crd },
    ];
    let format = Format::parse("csr", 2).expect("csr");
    Tensor::from_parts(vec![rows, cols], format, levels, vals).expect("valid CSR")
}

fn bench_spgemm(table: &mut Table, scale: f64, spread: Spread) {
    let n = ((1usize << 17) as f64 * scale) as usize;
    let mut rng = Rng(15);
    let matrix = |rng: &mut Rng| {
        let (pos, crd) = sparse_level(n, n, 8, spread, rng);
        let vals: Vec<f64> = (0..crd.len()).map(|_| rng.value()).collect();
        csr::<u32>(n, n, &pos, &crd, &vals)
    };
    let (b, c) = (matrix(&mut rng), matrix(&mut rng));
    let hand = || csr_from_blocks(n, n, vec![hand_spgemm_rows(&b, &c, 0..n)]);
    let hand_par = || {
        let starts: Vec<usize> = (0..n).step_by(ROWS_PER_JOB).collect();
        let blocks = starts
            .into_par_iter()
            .map(|lo| hand_spgemm_rows(&b, &c, lo..(lo + ROWS_PER_JOB).min(n)))
            .collect();
        csr_from_blocks(n, n, blocks)
    };
    let gen = || generated::spgemm::<f64, u32>(&[&b, &c], &[n, n]);
    let gen_par = || generated::spgemm_par::<f64, u32>(&[&b, &c], &[n, n]);
    let expect = hand();
    for (what, got) in [
        ("spgemm", gen()),
        ("spgemm_par", gen_par()),
        ("hand_par", hand_par()),
    ] {
        assert_eq!(got.levels(), expect.levels(), "{what}: structure differs");
        check_same(what, got.vals(), expect.vals());
    }
    let name = format!(
        "spgemm csr {} nnz {}->{}",
        spread.name(),
        b.vals().len(),
        expect.vals().len()
    );
    race_pair(table, &name, [&gen, &hand], [&gen_par, &hand_par]);
}

fn main() {
    let scale: f64 = env_or("TESSERA_BENCH_SCALE", 1.0);
    let mut table = Table::new(&format!(
        "Generated tensor kernels vs hand-written Rust (scale {scale}, median of {} interleaved; ratio > 1: Tessera faster)",
        tessera_benches::contest::reps()
    ));
    type Bench = fn(&mut Table, f64, Spread);
    let kernels: [(&str, Bench); 6] = [
        ("sddmm", bench_sddmm),
        ("ttv", bench_ttv),
        ("ttm", bench_ttm),
        ("mttkrp3", bench_mttkrp3),
        ("mttkrp", bench_mttkrp4),
        ("spgemm", bench_spgemm),
    ];
    // `TESSERA_BENCH_ONLY=ttv,ttm` runs only those kernels (all when unset).
    let only = std::env::var("TESSERA_BENCH_ONLY").unwrap_or_default();
    let wanted = |name: &str| only.is_empty() || only.split(',').any(|w| w.trim() == name);
    // `TESSERA_BENCH_SPREAD=uniform` (or `power-law`) runs only that input spread.
    let spread_only = std::env::var("TESSERA_BENCH_SPREAD").unwrap_or_default();
    for spread in [Spread::Uniform, Spread::PowerLaw] {
        if !spread_only.is_empty() && spread_only != spread.name() {
            continue;
        }
        for (name, bench) in kernels {
            if wanted(name) {
                bench(&mut table, scale, spread);
            }
        }
    }
    table.figure(
        "peak rss MiB",
        tessera_benches::peak_rss_bytes() as f64 / (1 << 20) as f64,
    );
    table.print();
}
