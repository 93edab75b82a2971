//! What the kernel benches share: random sparse structures (uniform, banded, power-law), the
//! tensors built from them, and a race that times contestants interleaved on shared pools.

use tessera_formats::{Format, Index, Level, Tensor};

use crate::{best_of, env_or, median, Rng, Table};

/// Repetitions per contestant (`TESSERA_BENCH_REPS`, default 9): the median is reported.
pub fn reps() -> usize {
    env_or("TESSERA_BENCH_REPS", 9)
}

/// How children are drawn for each parent of a sparse level.
#[derive(Clone, Copy)]
pub enum Spread {
    /// Uniformly over the whole dimension.
    Uniform,
    /// Within this width of the parent's diagonal position (matrices from meshes).
    Banded(usize),
    /// Power-law: parent degrees fall off as a Zipf law (a few parents hold many children, in
    /// shuffled positions) and children crowd towards low coordinates (hub columns), as in
    /// graphs and recommender data.
    PowerLaw,
}

impl Spread {
    /// A word for table rows.
    pub fn name(self) -> &'static str {
        match self {
            Spread::Uniform => "uniform",
            Spread::Banded(_) => "banded",
            Spread::PowerLaw => "power-law",
        }
    }
}

/// Sorted, distinct children (about `per` per parent on average) out of `0..n` for each of
/// `parents`: a compressed level's `pos` and `crd`.
pub fn sparse_level(
    parents: usize,
    n: usize,
    per: usize,
    spread: Spread,
    rng: &mut Rng,
) -> (Vec<usize>, Vec<usize>) {
    let degrees = degrees(parents, per, spread, rng);
    let mut pos = Vec::with_capacity(parents + 1);
    let mut crd = Vec::with_capacity(parents * per);
    pos.push(0);
    let mut row = Vec::with_capacity(per);
    for (p, &degree) in degrees.iter().enumerate() {
        row.clear();
        row.extend((0..degree).map(|_| child(p, parents, n, spread, rng)));
        row.sort_unstable();
        row.dedup();
        crd.extend_from_slice(&row);
        pos.push(crd.len());
    }
    (pos, crd)
}

/// Children per parent: `per` each, or Zipf-distributed with mean about `per` and shuffled.
fn degrees(parents: usize, per: usize, spread: Spread, rng: &mut Rng) -> Vec<usize> {
    let Spread::PowerLaw = spread else {
        return vec![per; parents];
    };
    // Degree of the parent ranked r is proportional to (r + 1)^-0.7, scaled to mean `per`.
    let weight = |r: usize| ((r + 1) as f64).powf(-0.7);
    let total: f64 = (0..parents).map(weight).sum();
    let scale = (parents * per) as f64 / total.max(1e-300);
    let mut d: Vec<usize> = (0..parents)
        .map(|r| ((weight(r) * scale).round() as usize).max(1))
        .collect();
    for i in (1..d.len()).rev() {
        d.swap(i, rng.below(i + 1));
    }
    d
}

fn child(p: usize, parents: usize, n: usize, spread: Spread, rng: &mut Rng) -> usize {
    match spread {
        Spread::Uniform => rng.below(n),
        Spread::Banded(band) => {
            let band = band.clamp(1, n);
            let centre = (p * n).checked_div(parents).unwrap_or(0);
            centre.saturating_sub(band / 2).min(n - band) + rng.below(band)
        }
        Spread::PowerLaw => {
            let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
            ((u * u * u * n as f64) as usize).min(n - 1)
        }
    }
}

pub fn to_index<I: Index>(v: &[usize]) -> Vec<I> {
    v.iter().map(|x| I::from_usize(*x)).collect()
}

/// A CSR matrix as a Tessera tensor.
pub fn csr<I: Index>(
    rows: usize,
    cols: usize,
    pos: &[usize],
    crd: &[usize],
    vals: &[f64],
) -> Tensor<f64, I> {
    let levels = vec![
        Level::Dense {
            size: rows,
            offset: 0,
        },
        Level::Compressed {
            pos: to_index(pos),
            crd: to_index(crd),
        },
    ];
    let format = Format::parse("csr", 2).expect("a known format");
    Tensor::from_parts(vec![rows, cols], format, levels, vals.to_vec()).expect("valid CSR")
}

/// A dense tensor of random values.
pub fn dense(dims: Vec<usize>, rng: &mut Rng) -> Tensor<f64, u32> {
    let n = dims.iter().product();
    Tensor::dense_from_vec(dims, (0..n).map(|_| rng.value()).collect()).expect("valid dense")
}

/// A contestant: the threads it runs on and one call.
pub type Contestant<'a> = (usize, &'a (dyn Fn() + Sync));

/// Median time of each contestant over `reps()` rounds (after one untimed round). Rounds interleave the contestants, so that
/// load from other processes on a shared machine falls on all of them alike. Contestants with
/// the same thread count share one pool: with a pool each, the idle workers of the pool that
/// just finished still spin for the cores while the next contestant starts on its own.
pub fn race<const N: usize>(contestants: [Contestant<'_>; N]) -> [f64; N] {
    let mut pools: Vec<(usize, rayon::ThreadPool)> = Vec::new();
    for (t, _) in &contestants {
        if !pools.iter().any(|(u, _)| u == t) {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(*t).build();
            pools.push((*t, pool.expect("a thread pool")));
        }
    }
    let pool_of = |t: usize| &pools.iter().find(|(u, _)| *u == t).expect("made above").1;
    let mut times: [Vec<f64>; N] = std::array::from_fn(|_| Vec::with_capacity(reps()));
    // One untimed round first: page faults of first-touched inputs and pool start-up fall on
    // no contestant.
    for round in 0..=reps() {
        for (n, (threads, f)) in contestants.iter().enumerate() {
            let t = pool_of(*threads).install(|| best_of(1, f).0);
            if round > 0 {
                times[n].push(t);
            }
        }
    }
    times.map(median)
}

/// Panics unless the two results agree to rounding (summation orders may differ).
pub fn check_same(what: &str, a: &[f64], b: &[f64]) {
    let ok = a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-9 * (1.0 + y.abs()));
    assert!(ok, "{what}: results differ");
}

/// For instruction and cache profiles (`valgrind --tool=cachegrind`; per call = the
/// difference of two counts ÷ the difference of their runs): with `TESSERA_BENCH_PROFILE` set
/// to `gen`, `hand` (1 thread), `gen2` or `hand2` (2 threads), runs that one of the generated
/// kernel and the hand-written loop `TESSERA_BENCH_PROFILE_RUNS` times (default 1) instead of
/// racing them, and returns true. False (nothing run) when the variable is unset.
pub fn profiled(sequential: [&(dyn Fn() + Sync); 2], parallel: [&(dyn Fn() + Sync); 2]) -> bool {
    let Ok(who) = std::env::var("TESSERA_BENCH_PROFILE") else {
        return false;
    };
    let (threads, f) = match who.as_str() {
        "gen" => (1, sequential[0]),
        "hand" => (1, sequential[1]),
        "gen2" => (2, parallel[0]),
        "hand2" => (2, parallel[1]),
        _ => panic!("TESSERA_BENCH_PROFILE is gen, hand, gen2 or hand2, not `{who}`"),
    };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
    let pool = pool.expect("a thread pool");
    for _ in 0..env_or("TESSERA_BENCH_PROFILE_RUNS", 1usize) {
        pool.install(f);
    }
    true
}

/// Races the generated kernel against the hand-written loop at 1 thread (sequential
/// versions) and 2 threads (parallel versions), one table row each (or runs one of them for a
/// profile: [`profiled`]).
pub fn versus_hand(
    table: &mut Table,
    name: &str,
    sequential: [&(dyn Fn() + Sync); 2],
    parallel: [&(dyn Fn() + Sync); 2],
) {
    if profiled(sequential, parallel) {
        return;
    }
    for (threads, [gen, hand]) in [(1, sequential), (2, parallel)] {
        let [t_gen, t_hand] = race([(threads, gen), (threads, hand)]);
        table.row(
            &format!("{name} {threads}t vs hand-written"),
            "ms",
            t_gen * 1e3,
            "hand-written",
            t_hand * 1e3,
            false,
        );
    }
}
