//! Generated kernels beside hand-written Rust loops and `sprs`, at 1 and 2 threads; SpMV also
//! beside the memory-bandwidth bound (bytes it must move ÷ copy bandwidth measured here).
//!
//! The kernels come from the compiler itself: `build.rs` runs parse → check → lower → codegen
//! on each statement and this program `include!`s the Rust it wrote. Every contestant does the
//! same work per call: allocate a zeroed output and compute into it.
//!
//! Sizes scale with `TESSERA_BENCH_SCALE` (default 1.0; 0.05 for a quick run); repetitions
//! with `TESSERA_BENCH_REPS` (default 9; raise it on a loaded machine), each figure the median
//! of interleaved rounds; `TESSERA_BENCH_ONLY=spmv,spmm,mttkrp` runs only the named kernels,
//! `TESSERA_BENCH_SPREAD=power-law` (or `uniform`, `banded`) only that input spread.
//!
//! `TESSERA_BENCH_PROFILE=gen|hand|gen2|hand2` runs one contestant of SpMV and MTTKRP
//! `TESSERA_BENCH_PROFILE_RUNS` times instead of the races (see `contest::profiled`);
//! `TESSERA_BENCH_INDEX=u32|u64` builds SpMV with that coordinate width only.

use std::hint::black_box;

use ndarray::{ArrayView2, ArrayViewMut2};
use rayon::prelude::*;
use sprs::CsMatI;
use tessera_benches::contest::{
    check_same, csr, dense, profiled, race, reps, sparse_level, to_index, versus_hand, Spread,
};
use tessera_benches::{best_of, Rng, Table};
use tessera_formats::{Format, Index, Level, Tensor};

mod generated {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}

fn hand_spmv<I: Index>(pos: &[I], crd: &[I], vals: &[f64], x: &[f64], rows: usize) -> Vec<f64> {
    let mut y = vec![0.0; rows];
    for (i, yi) in y.iter_mut().enumerate() {
        let (lo, hi) = (pos[i].to_usize(), pos[i + 1].to_usize());
        let mut s = 0.0;
        for (c, v) in crd[lo..hi].iter().zip(&vals[lo..hi]) {
            s += v * x[c.to_usize()];
        }
        *yi = s;
    }
    y
}

fn hand_spmv_par<I: Index>(pos: &[I], crd: &[I], vals: &[f64], x: &[f64], rows: usize) -> Vec<f64> {
    let mut y = vec![0.0; rows];
    y.par_iter_mut().enumerate().for_each(|(i, yi)| {
        let (lo, hi) = (pos[i].to_usize(), pos[i + 1].to_usize());
        let mut s = 0.0;
        for (c, v) in crd[lo..hi].iter().zip(&vals[lo..hi]) {
            s += v * x[c.to_usize()];
        }
        *yi = s;
    });
    y
}

/// Copy bandwidth in bytes/s (read + write counted) over a buffer far larger than caches.
fn copy_bandwidth(bytes: usize) -> f64 {
    let n = bytes / 8;
    let src: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut dst = vec![0.0f64; n];
    let (t, _) = best_of(reps(), || {
        dst.copy_from_slice(black_box(&src));
        black_box(dst[n / 2])
    });
    2.0 * (n * 8) as f64 / t
}

fn bench_spmv<I: Index + sprs::SpIndex>(table: &mut Table, scale: f64, bw: f64, spread: Spread) {
    let bits = I::BITS;
    let rows = ((1usize << 21) as f64 * scale) as usize;
    let cols = rows;
    let mut rng = Rng(42);
    let (pos, crd) = sparse_level(rows, cols, 16, spread, &mut rng);
    let vals: Vec<f64> = (0..crd.len()).map(|_| rng.value()).collect();
    let a = csr::<I>(rows, cols, &pos, &crd, &vals);
    let xt = dense(vec![cols], &mut rng);
    let x_i: Tensor<f64, I> = Tensor::dense_from_vec(vec![cols], xt.vals().to_vec()).unwrap();
    // The hand-written loops read the very arrays the generated kernel reads (A's levels and
    // values, x's values), not copies of them: a copy lies elsewhere in memory (heap or
    // mapping, another page offset, other physical pages), so a row could differ by where
    // each contestant's inputs happen to lie rather than by its code. (Power-law u32, 1t,
    // cachegrind: both contestants execute the same instructions and miss the simulated
    // caches equally per call; see `TESSERA_BENCH_PROFILE`.)
    let Level::Compressed { pos: ip, crd: ic } = &a.levels()[1] else {
        unreachable!("csr")
    };
    let (ip, ic, vals, x): (&[I], &[I], &[f64], &[f64]) = (ip, ic, a.vals(), x_i.vals());
    let gen = generated::spmv::<f64, I>(&[&a, &x_i], &[rows]);
    check_same("spmv", gen.vals(), &hand_spmv(ip, ic, vals, x, rows));
    let gen1 = || drop(black_box(generated::spmv::<f64, I>(&[&a, &x_i], &[rows])));
    let gen2 = || {
        drop(black_box(generated::spmv_par::<f64, I>(
            &[&a, &x_i],
            &[rows],
        )))
    };
    let hand1 = || drop(black_box(hand_spmv(ip, ic, vals, x, rows)));
    let hand2 = || drop(black_box(hand_spmv_par(ip, ic, vals, x, rows)));
    if profiled([&gen1, &hand1], [&gen2, &hand2]) {
        return;
    }
    let sp: CsMatI<f64, I, I> = CsMatI::new((rows, cols), ip.to_vec(), ic.to_vec(), vals.to_vec());
    let gen_par = generated::spmv_par::<f64, I>(&[&a, &x_i], &[rows]);
    check_same("spmv_par", gen_par.vals(), gen.vals());
    let a_coo = a.to_format("sq").expect("COO of the same matrix");
    let gen_coo = generated::spmv_coo::<f64, I>(&[&a_coo, &x_i], &[rows]);
    check_same("spmv_coo", gen_coo.vals(), gen.vals());

    // Bytes SpMV must move: the matrix once, x once (at best), y written once.
    let bytes = crd.len() * (8 + (bits as usize / 8))
        + (rows + 1) * (bits as usize / 8)
        + cols * 8
        + rows * 8;
    for threads in [1, 2] {
        // sprs's SpMV is sequential: it runs on one thread in both rows.
        let sprs1 = || {
            let mut y = vec![0.0; rows];
            sprs::prod::mul_acc_mat_vec_csr(sp.view(), x, &mut y[..]);
            drop(black_box(y));
        };
        let (g, h): (&(dyn Fn() + Sync), &(dyn Fn() + Sync)) = if threads == 1 {
            (&gen1, &hand1)
        } else {
            (&gen2, &hand2)
        };
        let [t_gen, t_hand, t_sprs] = race([(threads, g), (threads, h), (1, &sprs1)]);
        let name = format!("spmv csr u{bits} {} {threads}t", spread.name());
        if threads == 1 {
            // COO walks a row index per entry (and groups each row's run) instead of `pos`.
            let coo = || {
                drop(black_box(generated::spmv_coo::<f64, I>(
                    &[&a_coo, &x_i],
                    &[rows],
                )))
            };
            let [t_coo, t_csr] = race([(1, &coo), (1, &gen1)]);
            table.row(
                &format!("spmv coo u{bits} 1t vs csr"),
                "ms",
                t_coo * 1e3,
                "csr",
                t_csr * 1e3,
                false,
            );
        }
        table.row(
            &format!("{name} vs hand-written"),
            "ms",
            t_gen * 1e3,
            "hand-written",
            t_hand * 1e3,
            false,
        );
        table.row(
            &format!("{name} vs sprs (1t)"),
            "ms",
            t_gen * 1e3,
            "sprs",
            t_sprs * 1e3,
            false,
        );
        table.row(
            &format!("{name} bandwidth"),
            "GB/s",
            bytes as f64 / t_gen / 1e9,
            "copy bw",
            bw / 1e9,
            true,
        );
    }
}

fn hand_spmm(pos: &[u32], crd: &[u32], vals: &[f64], b: &[f64], rows: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; rows * k];
    for (i, crow) in c.chunks_mut(k).enumerate() {
        for q in pos[i] as usize..pos[i + 1] as usize {
            let (v, brow) = (vals[q], &b[crd[q] as usize * k..][..k]);
            for (cx, bx) in crow.iter_mut().zip(brow) {
                *cx += v * bx;
            }
        }
    }
    c
}

fn hand_spmm_par(
    pos: &[u32],
    crd: &[u32],
    vals: &[f64],
    b: &[f64],
    rows: usize,
    k: usize,
) -> Vec<f64> {
    let mut c = vec![0.0; rows * k];
    c.par_chunks_mut(k).enumerate().for_each(|(i, crow)| {
        for q in pos[i] as usize..pos[i + 1] as usize {
            let (v, brow) = (vals[q], &b[crd[q] as usize * k..][..k]);
            for (cx, bx) in crow.iter_mut().zip(brow) {
                *cx += v * bx;
            }
        }
    });
    c
}

fn bench_spmm(table: &mut Table, scale: f64, spread: Spread) {
    let rows = ((1usize << 17) as f64 * scale) as usize;
    let (cols, k) = (rows, 32);
    let mut rng = Rng(7);
    let (pos, crd) = sparse_level(rows, cols, 8, spread, &mut rng);
    let vals: Vec<f64> = (0..crd.len()).map(|_| rng.value()).collect();
    let a = csr::<u32>(rows, cols, &pos, &crd, &vals);
    let bt = dense(vec![cols, k], &mut rng);
    let b = bt.vals().to_vec();
    let (ip, ic): (Vec<u32>, Vec<u32>) = (to_index(&pos), to_index(&crd));
    let sp: CsMatI<f64, u32, u32> = CsMatI::new((rows, cols), ip.clone(), ic.clone(), vals.clone());
    let gen = generated::spmm::<f64, u32>(&[&a, &bt], &[rows, k]);
    check_same("spmm", gen.vals(), &hand_spmm(&ip, &ic, &vals, &b, rows, k));
    check_same(
        "spmm_par",
        generated::spmm_par::<f64, u32>(&[&a, &bt], &[rows, k]).vals(),
        gen.vals(),
    );
    for threads in [1, 2] {
        let gen1 = || {
            drop(black_box(generated::spmm::<f64, u32>(
                &[&a, &bt],
                &[rows, k],
            )))
        };
        let gen2 = || {
            drop(black_box(generated::spmm_par::<f64, u32>(
                &[&a, &bt],
                &[rows, k],
            )))
        };
        let hand1 = || drop(black_box(hand_spmm(&ip, &ic, &vals, &b, rows, k)));
        let hand2 = || drop(black_box(hand_spmm_par(&ip, &ic, &vals, &b, rows, k)));
        let sprs1 = || {
            let mut c = vec![0.0; rows * k];
            let bv = ArrayView2::from_shape((cols, k), &b[..]).unwrap();
            let cv = ArrayViewMut2::from_shape((rows, k), &mut c[..]).unwrap();
            sprs::prod::csr_mulacc_dense_rowmaj(sp.view(), bv, cv);
            drop(black_box(c));
        };
        let (g, h): (&(dyn Fn() + Sync), &(dyn Fn() + Sync)) = if threads == 1 {
            (&gen1, &hand1)
        } else {
            (&gen2, &hand2)
        };
        let [t_gen, t_hand, t_sprs] = race([(threads, g), (threads, h), (1, &sprs1)]);
        let name = format!("spmm csr {} x dense[{k}] {threads}t", spread.name());
        table.row(
            &format!("{name} vs hand-written"),
            "ms",
            t_gen * 1e3,
            "hand-written",
            t_hand * 1e3,
            false,
        );
        table.row(
            &format!("{name} vs sprs (1t)"),
            "ms",
            t_gen * 1e3,
            "sprs",
            t_sprs * 1e3,
            false,
        );
    }
}

/// A CSF order-3 tensor: (pos, crd) per level and values.
struct Csf {
    levels: Vec<(Vec<u32>, Vec<u32>)>,
    vals: Vec<f64>,
}

fn hand_mttkrp_rows(
    t: &Csf,
    c: &[f64],
    d: &[f64],
    r: usize,
    out: &mut [f64],
    i0: usize,
    is: std::ops::Range<usize>,
) {
    let (l0, l1, l2) = (&t.levels[0], &t.levels[1], &t.levels[2]);
    for p0 in is {
        let i = l0.1[p0] as usize;
        let arow = &mut out[(i - i0) * r..][..r];
        for p1 in l1.0[p0] as usize..l1.0[p0 + 1] as usize {
            let crow = &c[l1.1[p1] as usize * r..][..r];
            for p2 in l2.0[p1] as usize..l2.0[p1 + 1] as usize {
                let v = t.vals[p2];
                let drow = &d[l2.1[p2] as usize * r..][..r];
                for ((a, cx), dx) in arow.iter_mut().zip(crow).zip(drow) {
                    *a += v * cx * dx;
                }
            }
        }
    }
}

fn bench_mttkrp(table: &mut Table, scale: f64) {
    let n = ((1usize << 14) as f64 * scale.sqrt()) as usize;
    let r = 16;
    let mut rng = Rng(9);
    // Level 0: a random subset of rows; levels 1 and 2: ~8 children each.
    let (pos0, crd0) = sparse_level(1, n, n / 2, Spread::Uniform, &mut rng);
    let (pos1, crd1) = sparse_level(crd0.len(), n, 8, Spread::Uniform, &mut rng);
    let (pos2, crd2) = sparse_level(crd1.len(), n, 8, Spread::Uniform, &mut rng);
    let vals: Vec<f64> = (0..crd2.len()).map(|_| rng.value()).collect();
    let csf = Csf {
        levels: vec![
            (to_index(&pos0), to_index(&crd0)),
            (to_index(&pos1), to_index(&crd1)),
            (to_index(&pos2), to_index(&crd2)),
        ],
        vals: vals.clone(),
    };
    let levels = csf
        .levels
        .iter()
        .map(|(p, c)| Level::Compressed {
            pos: p.clone(),
            crd: c.clone(),
        })
        .collect();
    let b: Tensor<f64, u32> = Tensor::from_parts(
        vec![n, n, n],
        Format::parse("sss", 3).unwrap(),
        levels,
        vals,
    )
    .unwrap();
    let ct = dense(vec![n, r], &mut rng);
    let dt = dense(vec![n, r], &mut rng);
    let (c, d) = (ct.vals().to_vec(), dt.vals().to_vec());
    let hand = || {
        let mut out = vec![0.0; n * r];
        hand_mttkrp_rows(&csf, &c, &d, r, &mut out, 0, 0..crd0.len());
        out
    };
    // Parallel hand-written: each thread owns the output rows of its level-0 entries.
    let hand_par = || {
        let mut out = vec![0.0; n * r];
        let mut parts: Vec<(usize, &mut [f64])> = Vec::new();
        let mut rest: &mut [f64] = &mut out;
        let mut start = 0;
        for (p0, &i) in crd0.iter().enumerate() {
            let (_, tail) = rest.split_at_mut((i - start) * r);
            let (row, tail) = tail.split_at_mut(r);
            parts.push((p0, row));
            rest = tail;
            start = i + 1;
        }
        parts.into_par_iter().for_each(|(p0, row)| {
            let i = crd0[p0];
            hand_mttkrp_rows(&csf, &c, &d, r, row, i, p0..p0 + 1);
        });
        out
    };
    let gen = generated::mttkrp::<f64, u32>(&[&b, &ct, &dt], &[n, r]);
    check_same("mttkrp", gen.vals(), &hand());
    check_same(
        "mttkrp_par",
        generated::mttkrp_par::<f64, u32>(&[&b, &ct, &dt], &[n, r]).vals(),
        gen.vals(),
    );
    let gen1 = || {
        drop(black_box(generated::mttkrp::<f64, u32>(
            &[&b, &ct, &dt],
            &[n, r],
        )))
    };
    let gen2 = || {
        drop(black_box(generated::mttkrp_par::<f64, u32>(
            &[&b, &ct, &dt],
            &[n, r],
        )))
    };
    let (hand1, hand2) = (|| drop(black_box(hand())), || drop(black_box(hand_par())));
    let name = format!("mttkrp csf {n}^3 nnz {} r{r}", crd2.len());
    versus_hand(table, &name, [&gen1, &hand1], [&gen2, &hand2]);
}

fn main() {
    let scale: f64 = std::env::var("TESSERA_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let mut table = Table::new(&format!(
        "Generated kernels vs hand-written Rust and sprs (scale {scale}, median of {} interleaved; ratio > 1: Tessera faster)",
        reps()
    ));
    let profiling = std::env::var("TESSERA_BENCH_PROFILE").is_ok();
    // A profile skips the bandwidth pass (it times nothing).
    let bw = match profiling {
        true => 1.0,
        false => copy_bandwidth(((512usize << 20) as f64 * scale.max(0.25)) as usize),
    };
    // Uniform: columns anywhere; banded: each row's 16 columns lie within 4096 of the diagonal (a mesh); power-law: a
    // graph's skewed rows and hub columns.
    // `TESSERA_BENCH_ONLY=spmv,mttkrp` runs only the named kernels (all when unset).
    let only = std::env::var("TESSERA_BENCH_ONLY").unwrap_or_default();
    let wanted = |name: &str| only.is_empty() || only.split(',').any(|w| w.trim() == name);
    let spread_only = std::env::var("TESSERA_BENCH_SPREAD").unwrap_or_default();
    let spread_wanted = |s: Spread| spread_only.is_empty() || spread_only == s.name();
    let index_only = std::env::var("TESSERA_BENCH_INDEX").unwrap_or_default();
    let index_wanted = |bits: &str| index_only.is_empty() || index_only == bits;
    for spread in [Spread::Uniform, Spread::Banded(4096), Spread::PowerLaw] {
        if wanted("spmv") && spread_wanted(spread) {
            if index_wanted("u32") {
                bench_spmv::<u32>(&mut table, scale, bw, spread);
            }
            if index_wanted("u64") {
                bench_spmv::<u64>(&mut table, scale, bw, spread);
            }
        }
    }
    for spread in [Spread::Uniform, Spread::PowerLaw] {
        if wanted("spmm") && spread_wanted(spread) {
            bench_spmm(&mut table, scale, spread);
        }
    }
    if wanted("mttkrp") {
        bench_mttkrp(&mut table, scale);
    }
    if !profiling {
        table.figure("copy bandwidth GB/s", bw / 1e9);
    }
    table.figure(
        "peak rss MiB",
        tessera_benches::peak_rss_bytes() as f64 / (1 << 20) as f64,
    );
    table.print();
}
