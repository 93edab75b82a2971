//! CG written by hand on `threads` std threads, each owning a block of rows, as an MPI
//! program would be: the ceiling for the runtime's CG across ranks on this machine.
//!
//! The same arithmetic as `cg::solve` on the same `HostCsr` (u64 `crd`, `PosRange` rows) and
//! one pass per task as the runtime runs them (SpMV, `p·Ap`, the two axpys, `r·r`, the `p`
//! update: no loop fused by hand, so the memory traffic is the runtime's). Each thread keeps
//! `p` for the columns its rows reach and, after each `p` update, receives only those its
//! neighbours own (the halo, through one slot per pair of threads); the two dot products
//! are partial sums folded in thread order after a barrier. Three barriers per iteration.

use super::sparse::HostCsr;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Instant;
use tessera_runtime::transport::{Communicator, TransportError};

/// What the threads share: the barrier, one partial sum per thread for each dot product,
/// and per (sender, receiver) the halo values the receiver needs from the sender's rows.
struct Shared {
    barrier: Barrier,
    pap: Vec<AtomicU64>,
    rs: Vec<AtomicU64>,
    halo: Vec<Vec<Mutex<Vec<f64>>>>,
}

/// The rows of thread `t` of `threads`: blocks of consecutive rows, as the runtime shards.
fn rows_of(n: usize, t: usize, threads: usize) -> Range<usize> {
    n * t / threads..n * (t + 1) / threads
}

/// The columns the rows `rows` read, with the rows themselves (the thread's `p` covers both).
fn columns_of(a: &HostCsr, rows: &Range<usize>) -> Range<usize> {
    let (lo, hi) = (
        a.pos[rows.start].lo as usize,
        a.pos[rows.end - 1].hi as usize,
    );
    let crd = &a.crd[lo..hi];
    let min = crd.iter().copied().min().map_or(rows.start, |c| c as usize);
    let max = crd
        .iter()
        .copied()
        .max()
        .map_or(rows.end, |c| c as usize + 1);
    min.min(rows.start)..max.max(rows.end)
}

/// The common part of `a` and `b`, inside `a` (empty at `a.start` if none).
fn intersect(a: &Range<usize>, b: &Range<usize>) -> Range<usize> {
    let (lo, hi) = (a.start.max(b.start), a.end.min(b.end));
    if lo < hi {
        lo..hi
    } else {
        a.start..a.start
    }
}

fn dot(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

/// Publishes `v` as thread `t`'s partial sum, waits for every thread's, and folds them in
/// thread order (every thread gets the same bits).
fn all_reduce(sh: &Shared, slots: &[AtomicU64], t: usize, v: f64) -> f64 {
    slots[t].store(v.to_bits(), Ordering::Relaxed);
    sh.barrier.wait(); // the barrier orders the stores before the loads
    slots
        .iter()
        .map(|s| f64::from_bits(s.load(Ordering::Relaxed)))
        .sum()
}

/// One thread's CG over its rows; returns its block of `x`.
fn thread_cg(a: &HostCsr, b: &[f64], iters: usize, sh: &Shared, t: usize) -> Vec<f64> {
    let threads = sh.pap.len();
    let all: Vec<Range<usize>> = (0..threads).map(|u| rows_of(a.rows, u, threads)).collect();
    let mine = all[t].clone();
    let cols = columns_of(a, &mine);
    let own = mine.start - cols.start..mine.end - cols.start; // my rows within `p`
    let crd_lo = a.pos[mine.start].lo as usize;
    let (pos, crd) = (&a.pos[mine.clone()], &a.crd[crd_lo..]);
    let vals = &a.vals[crd_lo..];
    let mut x = vec![0.0; mine.len()];
    let mut r = b[mine.clone()].to_vec();
    let mut p = vec![0.0; cols.len()];
    p[own.clone()].copy_from_slice(&r);
    let mut ap = vec![0.0; mine.len()];
    // What each thread reads of my rows (computed once: a pass over its `crd`).
    let sends: Vec<Range<usize>> = (0..threads)
        .map(|u| intersect(&mine, &columns_of(a, &all[u])))
        .collect();
    let exchange = |p: &mut [f64]| {
        for u in (0..threads).filter(|&u| u != t) {
            let sent = &sends[u];
            let mut slot = sh.halo[t][u].lock().unwrap();
            slot.clear();
            slot.extend_from_slice(&p[sent.start - cols.start..sent.end - cols.start]);
        }
        sh.barrier.wait();
        for u in (0..threads).filter(|&u| u != t) {
            let got = intersect(&cols, &all[u]);
            let slot = sh.halo[u][t].lock().unwrap();
            p[got.start - cols.start..got.end - cols.start].copy_from_slice(&slot);
        }
    };
    exchange(&mut p);
    let mut rs = all_reduce(sh, &sh.rs, t, dot(&r, &r));
    for _ in 0..iters {
        for (yi, row) in ap.iter_mut().zip(pos) {
            let mut sum = 0.0;
            for k in row.lo as usize - crd_lo..row.hi as usize - crd_lo {
                sum += vals[k] * p[crd[k] as usize - cols.start];
            }
            *yi = sum;
        }
        let pap = all_reduce(sh, &sh.pap, t, dot(&p[own.clone()], &ap));
        let alpha = rs / pap;
        for (xi, pi) in x.iter_mut().zip(&p[own.clone()]) {
            *xi += alpha * pi;
        }
        for (ri, qi) in r.iter_mut().zip(&ap) {
            *ri += -alpha * qi;
        }
        let rs_new = all_reduce(sh, &sh.rs, t, dot(&r, &r));
        let beta = rs_new / rs;
        for (pi, ri) in p[own.clone()].iter_mut().zip(&r) {
            *pi = ri + beta * *pi;
        }
        exchange(&mut p);
        rs = rs_new;
    }
    x
}

/// `iters` CG iterations from `x = 0` on `threads` threads, started as the runtime's ranks
/// are (`super::launch`: bound to cores unless `TESSERA_BENCH_BIND=0`): seconds per
/// iteration (the slowest thread's, from a common start), process CPU seconds per
/// iteration, and `x`.
pub fn solve(a: &HostCsr, b: &[f64], threads: usize, iters: usize) -> (f64, f64, Vec<f64>) {
    let sh = Shared {
        barrier: Barrier::new(threads),
        pap: (0..threads).map(|_| AtomicU64::new(0)).collect(),
        rs: (0..threads).map(|_| AtomicU64::new(0)).collect(),
        halo: (0..threads)
            .map(|_| (0..threads).map(|_| Mutex::new(vec![])).collect())
            .collect(),
    };
    let got: Vec<(f64, f64, Vec<f64>)> = super::launch(threads, |c| {
        sh.barrier.wait(); // start together
        let (start, cpu) = (Instant::now(), super::cpu_now());
        let x = thread_cg(a, b, iters, &sh, c.rank());
        sh.barrier.wait();
        Ok::<_, TransportError>((start.elapsed().as_secs_f64(), super::cpu_since(cpu), x))
    })
    .into_iter()
    .map(|r| r.expect("a hand-written CG thread"))
    .collect();
    let secs = got.iter().map(|g| g.0).fold(0.0, f64::max);
    let cpu = got.iter().map(|g| g.1).fold(0.0, f64::max);
    let per = iters.max(1) as f64;
    let x = got.into_iter().flat_map(|g| g.2).collect();
    (secs / per, cpu / per, x)
}
