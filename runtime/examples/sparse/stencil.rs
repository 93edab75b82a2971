//! The 1-d three-point stencil of the `stencil` example, shared with the MPI runtime test.

use tessera_runtime::{Result, Runtime, Store};

/// `out[i] = (l[i] + c[i] + r[i]) / 3` over this point's sub-store.
pub fn register(rt: &Runtime) -> Result<()> {
    rt.register("stencil3", |ctx| {
        let mut out = ctx.write::<f64>(0);
        let (l, c, r) = (ctx.read::<f64>(1), ctx.read::<f64>(2), ctx.read::<f64>(3));
        // Aligned views: the four slices cover the same cells, so one zipped pass (no
        // per-cell bounds checks, what a hand-written loop does).
        let (l, c, r) = (l.as_slice(), c.as_slice(), r.as_slice());
        for (((o, l), c), r) in out.as_mut_slice().iter_mut().zip(l).zip(c).zip(r) {
            *o = (l + c + r) / 3.0;
        }
    })
}

/// One step: `next[1..n+1]` from the aliasing views `cur[0..n]`, `cur[1..n+1]`, `cur[2..n+2]`,
/// over `points` point tasks (`None`: the solver's choice).
pub fn step(
    rt: &Runtime,
    cur: &Store,
    next: &Store,
    n: usize,
    points: Option<usize>,
) -> Result<()> {
    let out = next.slice(0, 1..n + 1)?;
    let (l, c, r) = (
        cur.slice(0, 0..n)?,
        cur.slice(0, 1..n + 1)?,
        cur.slice(0, 2..n + 2)?,
    );
    let t = rt
        .task("stencil3")
        .write(&out)
        .read(&l)
        .read(&c)
        .read(&r)
        .align(&out, &l)
        .align(&out, &c)
        .align(&out, &r);
    match points {
        Some(p) => t.launch_domain(&[p]).submit(),
        None => t.submit(),
    }
}

pub fn initial(n: usize) -> Vec<f64> {
    (0..n + 2)
        .map(|i| {
            if i == 0 || i == n + 1 {
                1.0
            } else {
                ((i * 7) % 11) as f64
            }
        })
        .collect()
}

/// `steps` steps over `n` interior cells; the final values (every rank reads them).
pub fn run(rt: &Runtime, n: usize, steps: usize) -> Result<Vec<f64>> {
    let mut cur = rt.from_vec(&[n + 2], initial(n))?;
    let mut next = rt.from_vec(&[n + 2], initial(n))?;
    for _ in 0..steps {
        step(rt, &cur, &next, n, None)?;
        std::mem::swap(&mut cur, &mut next);
    }
    rt.read::<f64>(&cur)
}

/// The same steps as plain loops: the reference.
pub fn sequential(n: usize, steps: usize) -> Vec<f64> {
    let mut cur = initial(n);
    let mut next = cur.clone();
    for _ in 0..steps {
        for i in 1..=n {
            next[i] = (cur[i - 1] + cur[i] + cur[i + 1]) / 3.0;
        }
        std::mem::swap(&mut cur, &mut next);
    }
    cur
}

/// The `runtime` bench's stencil (Task Bench's `stencil_1d`) over a store of `width + 2`
/// cells: the four views a step uses, made once — `[1, width + 1)` written, `[0, width)`,
/// `[1, width + 1)` and `[2, width + 2)` read.
pub fn bench_views(s: &Store, width: usize) -> Result<[Store; 4]> {
    Ok([
        s.slice(0, 1..width + 1)?,
        s.slice(0, 0..width)?,
        s.slice(0, 1..width + 1)?,
        s.slice(0, 2..width + 2)?,
    ])
}

/// One step of the bench's stencil: task `name` over `width` points writes `next[0]` from
/// `cur[1..4]` (aligned), with `iters` as its scalar.
pub fn bench_step(
    rt: &Runtime,
    name: &str,
    cur: &[Store; 4],
    next: &[Store; 4],
    width: usize,
    iters: u64,
) -> Result<()> {
    rt.task(name)
        .write(&next[0])
        .read(&cur[1])
        .read(&cur[2])
        .read(&cur[3])
        .align(&next[0], &cur[1])
        .align(&next[0], &cur[2])
        .align(&next[0], &cur[3])
        .launch_domain(&[width])
        .scalar(iters)
        .submit()
}
