//! What the `ranks` and `mpi_ranks` benches time on every rank: the runtime's stencil and CG
//! (as written and with the convergence test one iteration late), each checked against the
//! sequential loop, with the process's CPU time over the timed part.

use super::sparse::{self, cg, stencil, Csr, HostCsr};
use std::time::Instant;
use tessera_runtime::{Result, Runtime, Stats};

/// What one rank measured: seconds for the timed part, its runtime's statistics, and CPU
/// seconds of the whole process (every rank) over the timed part.
pub type Measured = (f64, Stats, f64);

/// CPU seconds of this process: with [`cpu_since`], the work every rank did, however the
/// machine's other load delays it (wall-clock time is not that, on a shared 2-core VM).
/// From `getrusage`, in microseconds: `/proc/self/stat` counts ticks of 10 ms, too coarse for
/// the 1-2 ms per iteration that ranks add or save.
pub fn cpu_now() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    secs(u.user_time()) + secs(u.system_time())
}

pub fn cpu_since(start: f64) -> f64 {
    cpu_now() - start
}

/// Seconds per step of the runtime's stencil (`n` cells, `steps` steps), checked.
pub fn stencil_runtime(rt: &Runtime, n: usize, steps: usize) -> Result<Measured> {
    stencil::register(rt)?;
    let mut cur = rt.from_vec(&[n + 2], stencil::initial(n))?;
    let mut next = rt.from_vec(&[n + 2], stencil::initial(n))?;
    stencil::step(rt, &cur, &next, n, None)?; // the first step moves no halo yet
    std::mem::swap(&mut cur, &mut next);
    // Every rank starts the clock together: a read of one cell is a collective (a read of
    // all of `cur` would give every rank every cell, and the next step would need no halo).
    rt.read::<f64>(&cur.slice(0, 0..1)?)?;
    // The read waits only for cell 0's writers: without the fence a send of the first step's
    // cells may be counted in the window or not, by timing (1.000 or 1.013 at 2 ranks).
    rt.fence()?;
    let before = rt.stats();
    let (t, cpu) = (Instant::now(), cpu_now());
    for _ in 1..steps {
        stencil::step(rt, &cur, &next, n, None)?;
        std::mem::swap(&mut cur, &mut next);
    }
    rt.fence()?;
    let secs = t.elapsed().as_secs_f64() / (steps - 1) as f64;
    let cpu = cpu_since(cpu) / (steps - 1) as f64;
    let stats = rt.stats().since(&before);
    assert_eq!(
        rt.read::<f64>(&cur)?,
        stencil::sequential(n, steps),
        "stencil"
    );
    Ok((secs, stats, cpu))
}

/// Seconds per CG iteration on the 2-d Laplacian (a fixed number of iterations).
pub fn cg_runtime(rt: &Runtime, a: &HostCsr, b: &[f64], iters: usize) -> Result<Measured> {
    cg::register(rt)?; // with the SpMV task
    let m = Csr::upload(rt, a)?;
    cg::solve(rt, &m, b, 0.0, 1)?; // warm-up: images and partitions
    let before = rt.stats();
    let (t, cpu) = (Instant::now(), cpu_now());
    let (_, done) = cg::solve(rt, &m, b, 0.0, iters)?;
    let secs = t.elapsed().as_secs_f64() / done.max(1) as f64;
    let cpu = cpu_since(cpu) / done.max(1) as f64;
    Ok((secs, rt.stats().since(&before), cpu))
}

/// Seconds per iteration of the same CG with the convergence test one iteration late: the
/// issuing thread waits for `r·r` of the iteration before (which the current one already
/// needed) after issuing the current one, so it issues iteration k + 1 while iteration k's dot
/// products are exchanged instead of draining the pipeline at every test. The same tasks and
/// arithmetic as `cg::solve` (at most one iteration more than a converged solve needs); checked
/// against the sequential CG.
pub fn cg_lagged_runtime(rt: &Runtime, a: &HostCsr, b: &[f64], iters: usize) -> Result<Measured> {
    cg::register(rt)?;
    let m = Csr::upload(rt, a)?;
    cg::solve(rt, &m, b, 0.0, 1)?; // warm-up: images and partitions
    let before = rt.stats();
    let (t, cpu) = (Instant::now(), cpu_now());
    let x = rt.create(tessera_runtime::DType::F64, &[b.len()])?;
    let r = rt.from_vec(&[b.len()], b.to_vec())?;
    let p = rt.create(tessera_runtime::DType::F64, &[b.len()])?;
    rt.task("copy").read(&r).write(&p).align(&r, &p).submit()?;
    let mut rs = cg::dot(rt, &r, &r)?;
    for _ in 0..iters {
        let tested = rs.clone();
        let ap = sparse::spmv(rt, &m, &p)?;
        rs = cg::update(rt, &rs, &p, &ap, &x, &r)?;
        tested.get()?; // tol 0: never converged, as in `cg_runtime`
    }
    let x = rt.read::<f64>(&x)?;
    let secs = t.elapsed().as_secs_f64() / iters as f64;
    let cpu = cpu_since(cpu) / iters as f64;
    let stats = rt.stats().since(&before);
    let (want, _) = cg::solve_sequential(a, b, 0.0, iters);
    // Relative to the solution's size: the tasks sum in another order than the loop.
    let (diff, size) = max_diff(&x, &want);
    assert!(
        diff <= 1e-10 * size,
        "lagged CG differs from the sequential CG by {diff} (of {size})"
    );
    Ok((secs, stats, cpu))
}

/// The largest difference between `x` and `want`, and the largest magnitude in `want`.
pub fn max_diff(x: &[f64], want: &[f64]) -> (f64, f64) {
    let size = want.iter().map(|v| v.abs()).fold(0.0, f64::max);
    let diff = x
        .iter()
        .zip(want)
        .map(|(u, v)| (u - v).abs())
        .fold(0.0, f64::max);
    (diff, size)
}

/// One rank's block of the hand-written stencils (thread ranks in `ranks`, MPI in
/// `mpi_ranks`): the interior cells `lo..hi` with one halo cell on each side, which the
/// caller's exchange fills before each [`HandBlock::step`].
pub struct HandBlock {
    pub lo: usize,
    pub hi: usize,
    pub cur: Vec<f64>,
    next: Vec<f64>,
}

impl HandBlock {
    /// Rank `rank` of `size`'s block of the stencil over `n` interior cells.
    pub fn new(n: usize, rank: usize, size: usize) -> Self {
        let (lo, hi) = (1 + n * rank / size, 1 + n * (rank + 1) / size);
        let cur = stencil::initial(n)[lo - 1..hi + 1].to_vec();
        let next = cur.clone();
        HandBlock { lo, hi, cur, next }
    }

    /// Interior cells: `cur[1..=m]`; `cur[0]` and `cur[m + 1]` are the halo.
    pub fn m(&self) -> usize {
        self.hi - self.lo
    }

    /// One step, the runtime's task body as a loop.
    pub fn step(&mut self) {
        let m = self.m();
        for (o, w) in self.next[1..=m].iter_mut().zip(self.cur.windows(3)) {
            *o = (w[0] + w[1] + w[2]) / 3.0;
        }
        // The global boundary cells stay fixed, as in the runtime's stencil.
        (self.next[0], self.next[m + 1]) = (self.cur[0], self.cur[m + 1]);
        std::mem::swap(&mut self.cur, &mut self.next);
    }

    /// Panics unless the block holds the sequential loop's cells after `steps` steps.
    pub fn check(&self, n: usize, steps: usize, rank: usize) {
        let want = stencil::sequential(n, steps);
        let m = self.m();
        assert_eq!(
            &self.cur[1..=m],
            &want[self.lo..self.hi],
            "hand-written stencil, rank {rank}"
        );
    }
}

/// The rank counts `TESSERA_BENCH_RANKS` lists (comma-separated), else `default`'s.
pub fn ranks_from_env(default: &str) -> Vec<usize> {
    std::env::var("TESSERA_BENCH_RANKS")
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|r| {
            r.trim()
                .parse()
                .expect("TESSERA_BENCH_RANKS: a list of rank counts")
        })
        .collect()
}
