//! Task fusion and kernel fusion (`cargo bench -p tessera-benches --bench fusion`).
//!
//! Four programs written task by task with the runtime API (as `cupynumeric`-style code
//! would issue them: one element-wise operation per task), each run
//! * **fused**: the runtime's default configuration, an adaptive window (held while the
//!   workers are busy, launched when one would go idle) and fusion on (element-wise tasks
//!   run as one chunked loop, dead intermediates never allocated);
//! * **unfused**: the same with fusion off (every task launched at submit, streaming whole
//!   stores);
//! * **hand**: one hand-written Rust loop doing the same arithmetic over rayon chunks (for
//!   CG also on one thread, as a user would write it for a problem of the bench's size).
//!
//! Black-Scholes is also written as 12 `tensor!(rt => ...)` statements (each compiled to an
//! element-wise task) and timed fused vs window 1 vs the hand-registered tasks fused; CG is
//! also written as 8 `tensor!` statements per iteration (its updates element-wise tasks with
//! scalar operands) and timed fused vs unfused. The CG and BiCGSTAB programs' vector updates
//! are combined by hand (`x += (ρ / pq) p` is one task, so is the direction update): fusion
//! finds little left to do there. CG is also written *naturally* (`cg natural`: one vector
//! operation per task, a new vector for every result, 9 tasks an iteration, as the thesis'
//! Figure 4.10 runs it) and timed fused vs unfused and against the combined tasks unfused.
//!
//! Programs: Black-Scholes over 5 arrays larger than the last-level cache (3 inputs, 2
//! outputs, 19 tasks; `exp` and `ln` from [`tessera_benches::vmath`], written to vectorise,
//! in the tasks and the hand loop alike, as real Black-Scholes codes use a vector math
//! library), a CG iteration (SpMV, dots with futures, axpys), a BiCGSTAB-like chain
//! (two SpMVs and the vector updates between them) and a Jacobi sweep with its residual.
//! Times are medians of interleaved repetitions (fused, unfused, hand, fused, ...); GB/s is
//! the bytes a single pass must move (inputs read once, outputs written once) over the time,
//! beside the copy-bandwidth bound measured the same way on a parallel copy.
//!
//! Options (environment): `TESSERA_BENCH_THREADS` (default: available cores),
//! `TESSERA_BENCH_REPS` (default 5), `TESSERA_BENCH_SPARSE_REPS` (repetitions of the CG and
//! BiCGSTAB runs, default 5 × `REPS`: a run of [`ITERS`] iterations takes 5–15 ms there, and
//! their medians over 5 runs moved 2× between two quiet runs of the bench; under
//! `TESSERA_BENCH_ONLY`, `REPS`), `TESSERA_BENCH_BS_N` (Black-Scholes elements, default
//! 4 Mi, 32 MiB per array, or more where the last-level cache is large: [`default_bs_n`]),
//! `TESSERA_BENCH_CG_K` (grid side of the CG and BiCGSTAB Laplacian, default 64: tasks short
//! enough that launching them is a visible part of an iteration),
//! `TESSERA_BENCH_WINDOW` (window for the fused runs: `adaptive` (the default, at most
//! `DEFAULT_WINDOW` tasks), `adaptive:N`, or a fixed window `N`), `TESSERA_BENCH_SWEEP=1`
//! (also time the default against adaptive windows of other sizes),
//! `TESSERA_BENCH_ONLY=black-scholes|cg|cg-natural|cg-tensor|bicgstab:fused|unfused|hand` (run
//! one contestant alone, for profilers and instruction counts; built with
//! `--features tessera-runtime/timeline`, `TESSERA_TIMELINE=PATH` also writes the runtime's
//! per-thread event log there, for `scripts/timeline_split.py`).

use rayon::prelude::*;
use std::time::Instant;
use tessera::plans::{PlanRunError, Stored};
use tessera::{tensor, Tensor};
use tessera_benches::{env_or, median, vmath, Table};
use tessera_runtime::{
    Chunk, DType, Future, ReduceOp, Result, Runtime, Scalar, Stats, Store, WindowPolicy,
    DEFAULT_WINDOW,
};

/// CSR matrices as stores and the row-split SpMV task, shared with the runtime's examples.
#[path = "../../runtime/examples/sparse/mod.rs"]
mod sparse;
use sparse::{Csr, HostCsr};

// ---------------------------------------------------------------- element-wise tasks

/// Registers the element-wise operations the programs are made of.
fn register(rt: &Runtime) -> Result<()> {
    // Generic over the operation (not a `fn` pointer) so that each registration's loop is
    // compiled with its arithmetic inlined, as the hand loop is.
    fn unary(
        rt: &Runtime,
        name: &str,
        f: impl Fn(f64, f64) -> f64 + Copy + Send + Sync + 'static,
    ) -> Result<()> {
        // `#[inline(always)]`: compiled into the runtime's AVX2 + FMA path where the CPU has
        // it (`tessera_runtime::simd`), as the hand loop's body is.
        rt.register_elementwise::<f64>(
            name,
            #[inline(always)]
            move |c: &mut Chunk<'_, f64>| {
                let k = if c.is_empty() { 0.0 } else { scalar(c, 0) };
                let (ins, outs) = c.split();
                for (o, x) in outs[0].iter_mut().zip(ins[0].iter()) {
                    *o = f(*x, k);
                }
            },
        )
    }
    fn binary(
        rt: &Runtime,
        name: &str,
        f: impl Fn(f64, f64) -> f64 + Copy + Send + Sync + 'static,
    ) -> Result<()> {
        rt.register_elementwise::<f64>(
            name,
            #[inline(always)]
            move |c: &mut Chunk<'_, f64>| {
                let (ins, outs) = c.split();
                for ((o, x), y) in outs[0].iter_mut().zip(ins[0].iter()).zip(ins[1].iter()) {
                    *o = f(*x, *y);
                }
            },
        )
    }
    unary(rt, "sqrt", |x, _| x.sqrt())?;
    unary(rt, "ln", |x, _| vmath::ln(x))?;
    unary(rt, "exp", |x, _| vmath::exp(x))?;
    unary(rt, "scale", |x, k| x * k)?;
    unary(rt, "cnd", |x, _| vmath::cnd(x))?;
    binary(rt, "add", |x, y| x + y)?;
    binary(rt, "sub", |x, y| x - y)?;
    binary(rt, "mul", |x, y| x * y)?;
    binary(rt, "div", |x, y| x / y)?;
    // y += (sign * num / den) * x, the step a future carries (in place: `y` is read-write).
    rt.register_elementwise::<f64>("axpy_ratio", |c: &mut Chunk<'_, f64>| {
        if c.is_empty() {
            return;
        }
        let a = scalar(c, 0) * scalar(c, 1) / scalar(c, 2);
        let (ins, outs) = c.split();
        for (y, x) in outs[0].iter_mut().zip(ins[0].iter()) {
            *y += a * x;
        }
    })?;
    // y = (num / den) * x: a step of a future scalar times a vector, as a new vector.
    rt.register_elementwise::<f64>("scale_ratio", |c: &mut Chunk<'_, f64>| {
        if c.is_empty() {
            return;
        }
        let a = scalar(c, 0) / scalar(c, 1);
        let (ins, outs) = c.split();
        for (y, x) in outs[0].iter_mut().zip(ins[0].iter()) {
            *y = a * x;
        }
    })?;
    // p = r + (num / den) * (p - w * v): the BiCGSTAB direction update (`w` 0 for CG).
    rt.register_elementwise::<f64>("direction", |c: &mut Chunk<'_, f64>| {
        if c.is_empty() {
            return;
        }
        let b = scalar(c, 0) / scalar(c, 1);
        let w = scalar(c, 2);
        let (ins, outs) = c.split();
        for ((p, r), v) in outs[0].iter_mut().zip(ins[0].iter()).zip(ins[1].iter()) {
            *p = r + b * (*p - w * v);
        }
    })?;
    rt.register_elementwise::<f64>("dot", |c: &mut Chunk<'_, f64>| {
        let (ins, _) = c.split();
        let s: f64 = ins[0].iter().zip(ins[1].iter()).map(|(x, y)| x * y).sum();
        c.add_result(s);
    })?;
    // Jacobi on the 1-d Poisson problem: x' = (b + left + right) / 2 over three views.
    rt.register_elementwise::<f64>("jacobi", |c: &mut Chunk<'_, f64>| {
        let (ins, outs) = c.split();
        let (b, l, r) = (ins[0], ins[1], ins[2]);
        for (i, o) in outs[0].iter_mut().enumerate() {
            *o = 0.5 * (b[i] + l[i] + r[i]);
        }
    })?;
    sparse::register_spmv(rt)
}

fn scalar(c: &Chunk<'_, f64>, i: usize) -> f64 {
    match c.scalar(i) {
        Scalar::F64(x) => x,
        s => s.as_f64(),
    }
}

/// `y = op(x, k)`, a new store. Its output is `write_all`: an element-wise body assigns every
/// element of its `write` output (`Chunk::split`), so the runtime need not zero `y`'s cells
/// first where its buffer is a recycled one (bs22).
fn un(rt: &Runtime, op: &str, x: &Store, k: f64) -> Store {
    let n = x.shape().expect("bound")[0];
    let y = rt.create(DType::F64, &[n]).expect("store");
    rt.task(op)
        .read(x)
        .write_all(&y)
        .scalar(k)
        .align(x, &y)
        .submit()
        .expect("submit");
    y
}

/// `z = op(x, y)`, a new store, `write_all` as in [`un`].
fn bin(rt: &Runtime, op: &str, x: &Store, y: &Store) -> Store {
    let n = x.shape().expect("bound")[0];
    let z = rt.create(DType::F64, &[n]).expect("store");
    rt.task(op)
        .read(x)
        .read(y)
        .write_all(&z)
        .align(x, y)
        .align(x, &z)
        .submit()
        .expect("submit");
    z
}

// ---------------------------------------------------------------- Black-Scholes

const RATE: f64 = 0.02;
const VOL: f64 = 0.30;

/// Issues Black-Scholes as 19 element-wise tasks; every intermediate's handle is dropped when
/// this function returns, as in any Rust code.
fn black_scholes_tasks(rt: &Runtime, s: &Store, k: &Store, t: &Store) -> (Store, Store) {
    let sqrt_t = un(rt, "sqrt", t, 0.0);
    let ratio = bin(rt, "div", s, k);
    let log = un(rt, "ln", &ratio, 0.0);
    let drift = un(rt, "scale", t, RATE + 0.5 * VOL * VOL);
    let num = bin(rt, "add", &log, &drift);
    let vol_t = un(rt, "scale", &sqrt_t, VOL);
    let d1 = bin(rt, "div", &num, &vol_t);
    let d2 = bin(rt, "sub", &d1, &vol_t);
    let n1 = un(rt, "cnd", &d1, 0.0);
    let n2 = un(rt, "cnd", &d2, 0.0);
    let rt_ = un(rt, "scale", t, -RATE);
    let disc = un(rt, "exp", &rt_, 0.0);
    let k_disc = bin(rt, "mul", k, &disc);
    let a = bin(rt, "mul", s, &n1);
    let b = bin(rt, "mul", &k_disc, &n2);
    let call = bin(rt, "sub", &a, &b);
    let call_minus_s = bin(rt, "sub", &call, s);
    let put = bin(rt, "add", &call_minus_s, &k_disc);
    (call, put)
}

/// The same arithmetic as one loop.
fn black_scholes_hand(s: &[f64], k: &[f64], t: &[f64], call: &mut [f64], put: &mut [f64]) {
    const CH: usize = 4096;
    // Zipped chunks, not indices: no bounds checks, so the body vectorises as the tasks' do.
    call.par_chunks_mut(CH)
        .zip(put.par_chunks_mut(CH))
        .zip(s.par_chunks(CH).zip(k.par_chunks(CH)).zip(t.par_chunks(CH)))
        .for_each(|((call, put), ((s, k), t))| {
            // The tasks' path: AVX2 + FMA where the CPU has them (`tessera_runtime::simd`).
            tessera_runtime::simd::wide(
                #[inline(always)]
                || {
                    let ins = s.iter().zip(k).zip(t);
                    for ((c, p), ((&s, &k), &t)) in call.iter_mut().zip(put.iter_mut()).zip(ins) {
                        let vol_t = t.sqrt() * VOL;
                        let d1 = (vmath::ln(s / k) + t * (RATE + 0.5 * VOL * VOL)) / vol_t;
                        let d2 = d1 - vol_t;
                        let k_disc = k * vmath::exp(t * -RATE);
                        let c_ = s * vmath::cnd(d1) - k_disc * vmath::cnd(d2);
                        *c = c_;
                        *p = c_ - s + k_disc;
                    }
                },
            )
        });
}

// ---------------------------------------------------------------- Black-Scholes as `tensor!`

/// Black-Scholes as 12 `tensor!(rt => ...)` statements: the compiler emits each as an
/// element-wise task with a generated chunk body, so the chain fuses like the hand-registered
/// tasks above. Same formula and constants; the distribution function is three statements
/// (its branch as `lt`/`ge` masks), so the rounding differs from the hand loop's in the last bits.
/// Its `exp` and `log` are the compiler's (libm calls), not [`vmath`]'s: the figure "tensor!
/// vs hand-registered tasks" compares generated code with libm against vectorised math.
#[allow(non_snake_case)]
fn black_scholes_statements(
    rt: &Runtime,
    S: &Stored<f64>,
    K: &Stored<f64>,
    T: &Stored<f64>,
) -> std::result::Result<(Stored<f64>, Stored<f64>), PlanRunError> {
    let sq = tensor!(rt => q(i) = sqrt(T(i)))?;
    let d1 = tensor!(rt => d(i) = (log(S(i) / K(i)) + 0.065 * T(i)) / (0.3 * sq(i)))?;
    let d2 = tensor!(rt => d(i) = d1(i) - 0.3 * sq(i))?;
    let k1 = tensor!(rt => k(i) = 1 / (1 + 0.2316419 * abs(d1(i))))?;
    let w1 = tensor!(rt => w(i) = 1 - 0.3989422804014327 * exp(-0.5 * d1(i) * d1(i))
        * k1(i) * (0.31938153 + k1(i) * (-0.356563782 + k1(i) * (1.781477937
        + k1(i) * (-1.821255978 + k1(i) * 1.330274429)))))?;
    let n1 = tensor!(rt => n(i) = lt(d1(i), 0) * (1 - w1(i)) + ge(d1(i), 0) * w1(i))?;
    let k2 = tensor!(rt => k(i) = 1 / (1 + 0.2316419 * abs(d2(i))))?;
    let w2 = tensor!(rt => w(i) = 1 - 0.3989422804014327 * exp(-0.5 * d2(i) * d2(i))
        * k2(i) * (0.31938153 + k2(i) * (-0.356563782 + k2(i) * (1.781477937
        + k2(i) * (-1.821255978 + k2(i) * 1.330274429)))))?;
    let n2 = tensor!(rt => n(i) = lt(d2(i), 0) * (1 - w2(i)) + ge(d2(i), 0) * w2(i))?;
    let kd = tensor!(rt => k(i) = K(i) * exp(-0.02 * T(i)))?;
    let call = tensor!(rt => c(i) = S(i) * n1(i) - kd(i) * n2(i))?;
    let put = tensor!(rt => p(i) = call(i) - S(i) + kd(i))?;
    Ok((call, put))
}

/// Times for the `tensor!` chain: fused (window `window`), window 1 (no fusion), and the
/// hand-registered tasks fused on the same runtime; interleaved.
struct Statements {
    fused: f64,
    window1: f64,
    hand_registered: f64,
    stats_fused: Stats,
}

fn bench_black_scholes_statements(
    threads: usize,
    window: WindowPolicy,
    n: usize,
    reps: usize,
) -> Statements {
    let host = [
        (0..n).map(|i| 80.0 + (i % 41) as f64).collect::<Vec<f64>>(),
        (0..n).map(|i| 90.0 + (i % 23) as f64).collect(),
        (0..n).map(|i| 0.25 + (i % 7) as f64 * 0.25).collect(),
    ];
    let rts = fused_and_unfused(threads, window);
    let stored: Vec<[Stored<f64>; 3]> = rts
        .iter()
        .map(|rt| {
            host.each_ref().map(|v| {
                let t = Tensor::dense_from_vec(vec![n], v.clone()).expect("tensor");
                Stored::upload(rt, &t).expect("upload")
            })
        })
        .collect();
    // The hand-registered tasks on a runtime of their own (the same configuration as rts[0]).
    let tasks_rt = runtime(threads, window, true, true);
    let stores = host
        .each_ref()
        .map(|v| tasks_rt.from_vec(&[n], v.clone()).expect("store"));
    let run = |i: usize| {
        let (rt, [s, k, t]) = (&rts[i], &stored[i]);
        let t0 = Instant::now();
        let out = black_scholes_statements(rt, s, k, t).expect("statements");
        rt.fence().expect("fence");
        let el = t0.elapsed().as_secs_f64();
        std::hint::black_box(out);
        el
    };
    let before = rts[0].stats();
    let (fused, window1, hand_registered) = interleave(
        reps,
        || run(0),
        || run(1),
        || {
            let t0 = Instant::now();
            let out = black_scholes_tasks(&tasks_rt, &stores[0], &stores[1], &stores[2]);
            tasks_rt.fence().expect("fence");
            let el = t0.elapsed().as_secs_f64();
            std::hint::black_box(out);
            el
        },
    );
    let stats = rts[0].stats().since(&before);
    // Fused and unfused statements agree bitwise; both agree with the hand-registered tasks
    // up to `vmath::cnd`'s distance from the formula evaluated with libm's `exp` (at most
    // 1.3e-9, bs22), which the call price multiplies by `S` and `K e^-rT` (each below 125
    // here): 3.3e-7 (measured 5.2e-8; 1e-9 before bs22, when `cnd` was the formula to
    // rounding). A wrong constant or operator in the generated code is off by far more.
    let read = |i: usize| {
        let [s, k, t] = &stored[i];
        let (c, p) = black_scholes_statements(&rts[i], s, k, t).expect("statements");
        (
            c.to_tensor(&rts[i]).expect("read"),
            p.to_tensor(&rts[i]).expect("read"),
        )
    };
    let ((c0, p0), (c1, p1)) = (read(0), read(1));
    assert!(
        c0.vals() == c1.vals() && p0.vals() == p1.vals(),
        "fused statements differ"
    );
    let (c, _) = black_scholes_tasks(&tasks_rt, &stores[0], &stores[1], &stores[2]);
    let c = tasks_rt.read::<f64>(&c).expect("read");
    let worst = c
        .iter()
        .zip(c0.vals())
        .map(|(a, b)| (a - b).abs() / a.abs().max(1.0))
        .fold(0.0, f64::max);
    assert!(
        worst < 3.3e-7,
        "tensor! Black-Scholes differs from the tasks by {worst:e}"
    );
    // Per fused run (each rep and the warm-up).
    let runs = (reps + 1) as u64;
    Statements {
        fused,
        window1,
        hand_registered,
        stats_fused: Stats {
            tasks_issued: stats.tasks_issued / runs,
            tasks_launched: stats.tasks_launched / runs,
            temporaries_eliminated: stats.temporaries_eliminated / runs,
            ..stats
        },
    }
}

// ---------------------------------------------------------------- sparse (CG, BiCGSTAB)

/// `y = A x` on the host, rows split over rayon (the hand loops' SpMV).
fn host_spmv(a: &HostCsr, x: &[f64], y: &mut [f64]) {
    // Zipped as the runtime's SpMV body is (`register_spmv`), the same order of additions.
    y.par_iter_mut().enumerate().for_each(|(i, yi)| {
        let (lo, hi) = (a.pos[i].lo as usize, a.pos[i].hi as usize);
        let mut sum = 0.0;
        for (v, &j) in a.vals[lo..hi].iter().zip(&a.crd[lo..hi]) {
            sum += v * x[j as usize];
        }
        *yi = sum;
    });
}

fn spmv(rt: &Runtime, a: &Csr, x: &Store) -> Store {
    sparse::spmv(rt, a, x).expect("submit")
}

fn dot(rt: &Runtime, x: &Store, y: &Store) -> Future {
    rt.task("dot")
        .read(x)
        .read(y)
        .align(x, y)
        .submit_reduce(ReduceOp::Sum)
        .expect("submit")
}

fn axpy_ratio(rt: &Runtime, sign: f64, num: &Future, den: &Future, x: &Store, y: &Store) {
    rt.task("axpy_ratio")
        .read(x)
        .read_write(y)
        .scalar(sign)
        .future(num)
        .future(den)
        .align(x, y)
        .submit()
        .expect("submit");
}

/// `(num / den) * x`, a new store (`write_all`, as in [`un`]).
fn scale_ratio(rt: &Runtime, x: &Store, num: &Future, den: &Future) -> Store {
    let n = x.shape().expect("bound")[0];
    let y = rt.create(DType::F64, &[n]).expect("store");
    rt.task("scale_ratio")
        .read(x)
        .write_all(&y)
        .future(num)
        .future(den)
        .align(x, &y)
        .submit()
        .expect("submit");
    y
}

/// One CG iteration as it is naturally written, one vector operation per task and a new vector
/// for each result (`x = x + α p` as a scaling and an add, as NumPy or cuPyNumeric code is):
/// the thesis' CG (Table 4.1: 12.1 tasks an iteration unfused, 4.1 fused), against
/// [`cg_iteration`]'s tasks combined by hand. Same arithmetic as [`cg_hand`], rounded alike
/// (`α p` is `(rs / pq) · p` in both).
fn cg_natural_iteration(rt: &Runtime, a: &Csr, s: &mut Cg) {
    let q = spmv(rt, a, &s.p);
    let pq = dot(rt, &s.p, &q);
    let alpha_p = scale_ratio(rt, &s.p, &s.rs, &pq);
    s.x = bin(rt, "add", &s.x, &alpha_p);
    let alpha_q = scale_ratio(rt, &q, &s.rs, &pq);
    s.r = bin(rt, "sub", &s.r, &alpha_q);
    let rs_new = dot(rt, &s.r, &s.r);
    let beta_p = scale_ratio(rt, &s.p, &rs_new, &s.rs);
    s.p = bin(rt, "add", &s.r, &beta_p);
    s.rs = rs_new;
}

/// The CG state: iterate, residual, direction and `r·r`.
struct Cg {
    x: Store,
    r: Store,
    p: Store,
    rs: Future,
}

/// One CG iteration: `q = A p; α = rs / p·q; x += α p; r -= α q; rs' = r·r; p = r + rs'/rs p`.
fn cg_iteration(rt: &Runtime, a: &Csr, s: &mut Cg) {
    let q = spmv(rt, a, &s.p);
    let pq = dot(rt, &s.p, &q);
    axpy_ratio(rt, 1.0, &s.rs, &pq, &s.p, &s.x);
    axpy_ratio(rt, -1.0, &s.rs, &pq, &q, &s.r);
    let rs_new = dot(rt, &s.r, &s.r);
    rt.task("direction")
        .read(&s.r)
        .read(&s.r)
        .read_write(&s.p)
        .future(&rs_new)
        .future(&s.rs)
        .scalar(0.0)
        .align(&s.r, &s.p)
        .submit()
        .expect("submit");
    s.rs = rs_new;
}

/// Seconds per iteration of [`ITERS`] hand-loop CG iterations from `x = 0`, and the last `r·r`.
fn cg_hand_run(host: &HostCsr, b: &[f64]) -> (f64, f64) {
    let n = b.len();
    let (mut x, mut r, mut p, mut q) = (vec![0.0; n], b.to_vec(), b.to_vec(), vec![0.0; n]);
    let mut rs: f64 = b.iter().map(|v| v * v).sum();
    in_pool(|| {
        let t0 = Instant::now();
        for _ in 0..ITERS {
            cg_hand(host, &mut x, &mut r, &mut p, &mut q, &mut rs);
        }
        (t0.elapsed().as_secs_f64() / ITERS as f64, rs)
    })
}

/// Seconds per iteration of [`ITERS`] iterations of [`cg_hand_serial`] from `x = 0`.
fn cg_hand_serial_run(host: &HostCsr, b: &[f64]) -> f64 {
    let n = b.len();
    let (mut x, mut r, mut p, mut q) = (vec![0.0; n], b.to_vec(), b.to_vec(), vec![0.0; n]);
    let mut rs: f64 = b.iter().map(|v| v * v).sum();
    let t0 = Instant::now();
    for _ in 0..ITERS {
        cg_hand_serial(host, &mut x, &mut r, &mut p, &mut q, &mut rs);
    }
    std::hint::black_box(rs);
    t0.elapsed().as_secs_f64() / ITERS as f64
}

/// [`cg_hand`] on one thread, as a user would write it for a problem this small: no fork or
/// join at all (the dots sum in another order than the parallel loops').
fn cg_hand_serial(
    a: &HostCsr,
    x: &mut [f64],
    r: &mut [f64],
    p: &mut [f64],
    q: &mut [f64],
    rs: &mut f64,
) {
    for (i, qi) in q.iter_mut().enumerate() {
        let (lo, hi) = (a.pos[i].lo as usize, a.pos[i].hi as usize);
        let row = a.vals[lo..hi].iter().zip(&a.crd[lo..hi]);
        *qi = row.map(|(v, &j)| v * p[j as usize]).sum();
    }
    let pq: f64 = p.iter().zip(q.iter()).map(|(a, b)| a * b).sum();
    let alpha = *rs / pq;
    let mut rs_new = 0.0;
    for (((x, r), p), q) in x.iter_mut().zip(r.iter_mut()).zip(p.iter()).zip(q.iter()) {
        *x += alpha * p;
        *r -= alpha * q;
        rs_new += *r * *r;
    }
    let beta = rs_new / *rs;
    for (p, r) in p.iter_mut().zip(r.iter()) {
        *p = r + beta * *p;
    }
    *rs = rs_new;
}

/// Runs `f` on a thread of rayon's pool, so that its parallel loops fork and join inside the
/// pool. Called from outside it, every parallel loop is injected into the pool and the caller
/// sleeps until it is done: a wake-up and a context switch per loop, five or six per CG
/// iteration, which made the hand loops of CG and BiCGSTAB (tens of µs per iteration) slower
/// than the runtime and as unsteady as the wake-ups (0.071 ms against unfused 0.038 ms per CG
/// iteration at load 7).
fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| f())
}

/// The same iteration by hand (rayon), with the same reduction order per element.
fn cg_hand(a: &HostCsr, x: &mut [f64], r: &mut [f64], p: &mut [f64], q: &mut [f64], rs: &mut f64) {
    host_spmv(a, p, q);
    let pq: f64 = p.par_iter().zip(q.par_iter()).map(|(a, b)| a * b).sum();
    let alpha = *rs / pq;
    let rs_new: f64 = x
        .par_iter_mut()
        .zip(r.par_iter_mut())
        .zip(p.par_iter())
        .zip(q.par_iter())
        .map(|(((x, r), p), q)| {
            *x += alpha * p;
            *r -= alpha * q;
            *r * *r
        })
        .sum();
    let beta = rs_new / *rs;
    p.par_iter_mut()
        .zip(r.par_iter())
        .for_each(|(p, r)| *p = r + beta * *p);
    *rs = rs_new;
}

/// A BiCGSTAB-like chain: `v = A p; α = ρ / r0·v; s = r − α v; t = A s; ω = t·s / t·t;
/// x += α p + ω s; r = s − ω t; ρ' = r0·r; p = r + (ρ'/ρ)(p − ω v)` with the step sizes as
/// futures, resolved once per iteration (ω is needed as a value in the direction update).
struct Bicg {
    x: Store,
    r: Store,
    r0: Store,
    p: Store,
    rho: Future,
}

fn bicgstab_iteration(rt: &Runtime, a: &Csr, st: &mut Bicg) -> Result<()> {
    let v = spmv(rt, a, &st.p);
    let r0v = dot(rt, &st.r0, &v);
    let s = rt.create(DType::F64, &[v.shape().expect("bound")[0]])?;
    rt.task("scale")
        .read(&st.r)
        .write(&s)
        .scalar(1.0)
        .align(&st.r, &s)
        .submit()?;
    axpy_ratio(rt, -1.0, &st.rho, &r0v, &v, &s);
    let t = spmv(rt, a, &s);
    let ts = dot(rt, &t, &s);
    let tt = dot(rt, &t, &t);
    axpy_ratio(rt, 1.0, &st.rho, &r0v, &st.p, &st.x);
    axpy_ratio(rt, 1.0, &ts, &tt, &s, &st.x);
    // r = s − ω t
    rt.task("scale")
        .read(&s)
        .write(&st.r)
        .scalar(1.0)
        .align(&s, &st.r)
        .submit()?;
    axpy_ratio(rt, -1.0, &ts, &tt, &t, &st.r);
    let rho_new = dot(rt, &st.r0, &st.r);
    let omega = ts.get()?.as_f64() / tt.get()?.as_f64();
    // β = (ρ'/ρ)(α/ω): folded as ρ'·α / (ρ·ω), with α = ρ / r0·v.
    let beta_num =
        Future::ready(rho_new.get()?.as_f64() * st.rho.get()?.as_f64() / r0v.get()?.as_f64());
    let beta_den = Future::ready(st.rho.get()?.as_f64() * omega);
    rt.task("direction")
        .read(&st.r)
        .read(&v)
        .read_write(&st.p)
        .future(&beta_num)
        .future(&beta_den)
        .scalar(omega)
        .align(&st.r, &st.p)
        .align(&v, &st.p)
        .submit()?;
    st.rho = rho_new;
    Ok(())
}

/// Seconds per iteration of [`ITERS`] hand-loop BiCGSTAB iterations from `x = 0` (the
/// arithmetic of [`bicgstab_iteration`], rayon, the SpMV of the CG hand loop).
fn bicgstab_hand_run(a: &HostCsr, b: &[f64]) -> f64 {
    let n = b.len();
    let (mut x, mut r, r0, mut p) = (vec![0.0; n], b.to_vec(), b.to_vec(), b.to_vec());
    let (mut v, mut s, mut t) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    let dot =
        |x: &[f64], y: &[f64]| -> f64 { x.par_iter().zip(y.par_iter()).map(|(a, b)| a * b).sum() };
    let mut rho = dot(&r0, &r);
    in_pool(|| {
        let t0 = Instant::now();
        for _ in 0..ITERS {
            host_spmv(a, &p, &mut v);
            let alpha = rho / dot(&r0, &v);
            s.par_iter_mut()
                .zip(r.par_iter())
                .zip(v.par_iter())
                .for_each(|((s, r), v)| *s = r - alpha * v);
            host_spmv(a, &s, &mut t);
            let omega = dot(&t, &s) / dot(&t, &t);
            x.par_iter_mut()
                .zip(p.par_iter())
                .zip(s.par_iter())
                .for_each(|((x, p), s)| *x += alpha * p + omega * s);
            let rho_new: f64 = r
                .par_iter_mut()
                .zip(s.par_iter())
                .zip(t.par_iter())
                .zip(r0.par_iter())
                .map(|(((r, s), t), r0)| {
                    *r = s - omega * t;
                    r0 * *r
                })
                .sum();
            let beta = (rho_new / rho) * (alpha / omega);
            p.par_iter_mut()
                .zip(r.par_iter())
                .zip(v.par_iter())
                .for_each(|((p, r), v)| *p = r + beta * (*p - omega * v));
            rho = rho_new;
        }
        std::hint::black_box((&x, rho));
        t0.elapsed().as_secs_f64() / ITERS as f64
    })
}

// ---------------------------------------------------------------- CG as `tensor!`

/// One CG iteration as `tensor!(rt => ...)` statements (`tests/tests/runtime_cg.rs` without
/// the convergence test): the SpMV and dots are plans' block tasks, the step sizes rank-0
/// statements, and the three updates element-wise tasks whose scalar operands are futures of
/// the step sizes' stores, so `x += alpha p` and `r -= alpha q` kernel-fuse.
#[allow(non_snake_case)]
struct CgStatements {
    A: Stored<f64>,
    x: Stored<f64>,
    r: Stored<f64>,
    p: Stored<f64>,
    rr: Stored<f64>,
}

#[allow(non_snake_case)]
fn cg_statements_iteration(
    rt: &Runtime,
    st: CgStatements,
) -> std::result::Result<CgStatements, PlanRunError> {
    let CgStatements { A, x, r, p, rr } = st;
    let q = tensor!(rt => q(i) = A(i,j) * p(j); A: csr; split(i, io, ii, 4))?;
    let pq = tensor!(rt => d = p(i) * q(i); split(i, io, ii, 4); extend(io))?;
    let alpha = tensor!(rt => alpha = rr / pq)?;
    let x = tensor!(rt => x(i) += alpha * p(i); split(i, io, ii, 4))?;
    let r = tensor!(rt => r(i) += -(alpha * q(i)); split(i, io, ii, 4))?;
    let rr_new = tensor!(rt => d = r(i) * r(i); split(i, io, ii, 4); extend(io))?;
    let beta = tensor!(rt => beta = rr_new / rr)?;
    let p = tensor!(rt => s(i) = r(i) + beta * p(i); split(i, io, ii, 4))?;
    Ok(CgStatements {
        A,
        x,
        r,
        p,
        rr: rr_new,
    })
}

/// Times per iteration of the `tensor!` CG, fused (`window`) and unfused (fusion off), with
/// the hand loop of [`bench_cg`] as the third figure; interleaved.
fn bench_cg_statements(threads: usize, window: WindowPolicy, k: usize, reps: usize) -> Measured {
    let host = HostCsr::laplacian_2d(k);
    let n = k * k;
    let entries: Vec<(Vec<usize>, f64)> = (0..n)
        .flat_map(|i| {
            let r = host.pos[i];
            (r.lo as usize..r.hi as usize).map(move |e| (i, e))
        })
        .map(|(i, e)| (vec![i, host.crd[e] as usize], host.vals[e]))
        .collect();
    let a = Tensor::from_entries(vec![n, n], "csr", entries).expect("laplacian");
    let b = cg_rhs(n);
    let rts = fused_and_unfused(threads, window);
    let vector = |rt: &Runtime, v: Vec<f64>| {
        Stored::upload(rt, &Tensor::dense_from_vec(vec![n], v).expect("vector")).expect("upload")
    };
    let run = |i: usize| -> f64 {
        let rt = &rts[i];
        let r = vector(rt, b.clone());
        let rr = tensor!(rt => d = r(i) * r(i); split(i, io, ii, 4); extend(io)).expect("rr");
        let mut st = CgStatements {
            A: Stored::upload(rt, &a).expect("upload"),
            x: vector(rt, vec![0.0; n]),
            p: vector(rt, b.clone()),
            r,
            rr,
        };
        rt.fence().expect("fence");
        let t0 = Instant::now();
        for _ in 0..ITERS {
            st = cg_statements_iteration(rt, st).expect("iteration");
        }
        let v = st.rr.to_tensor(rt).expect("rr").vals()[0];
        rt.fence().expect("fence");
        std::hint::black_box(v);
        t0.elapsed().as_secs_f64() / ITERS as f64
    };
    let before = rts.each_ref().map(|rt| rt.stats());
    let times = interleave(reps, || run(0), || run(1), || cg_hand_run(&host, &b).0);
    per_iteration(&rts, &before, times, reps)
}

// ---------------------------------------------------------------- Jacobi

/// One Jacobi sweep over the interior `[1, n-1)` of `x` into `y`, then `res = Σ (y − x)²` over
/// the interior: three tasks.
fn jacobi_sweep(rt: &Runtime, b: &Store, x: &Store, y: &Store, n: usize) -> Future {
    let view = |s: &Store, lo: usize| s.slice(0, lo..lo + n - 2).expect("view");
    let (bi, l, c, r, out) = (view(b, 1), view(x, 0), view(x, 1), view(x, 2), view(y, 1));
    rt.task("jacobi")
        .read(&bi)
        .read(&l)
        .read(&r)
        .write(&out)
        .align(&bi, &l)
        .align(&bi, &r)
        .align(&bi, &out)
        .submit()
        .expect("submit");
    let d = bin(rt, "sub", &out, &c);
    dot(rt, &d, &d)
}

/// The sweep and its residual as one loop over rayon chunks (zipped slices: no bounds
/// checks), the same arithmetic per element as the tasks.
fn jacobi_hand(b: &[f64], x: &[f64], y: &mut [f64]) -> f64 {
    const CH: usize = 4096;
    let n = x.len();
    let ins = b[1..n - 1]
        .par_chunks(CH)
        .zip(x[..n - 2].par_chunks(CH))
        .zip(x[1..n - 1].par_chunks(CH))
        .zip(x[2..].par_chunks(CH));
    y[1..n - 1]
        .par_chunks_mut(CH)
        .zip(ins)
        .map(|(o, (((b, l), c), r))| {
            let mut s = 0.0;
            for ((((o, b), l), c), r) in o.iter_mut().zip(b).zip(l).zip(c).zip(r) {
                *o = 0.5 * (b + l + r);
                s += (*o - c) * (*o - c);
            }
            s
        })
        .sum()
}

// ---------------------------------------------------------------- measurement

/// Set while `main` measures the traced variants (every runtime made meanwhile traces).
static TRACED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `TESSERA_BENCH_TRACING=1` traces every contestant (for `TESSERA_BENCH_ONLY`).
fn runtime(threads: usize, window: WindowPolicy, fusion: bool, memo: bool) -> Runtime {
    let traced = TRACED.load(std::sync::atomic::Ordering::Relaxed)
        || env_or("TESSERA_BENCH_TRACING", 0u32) != 0;
    runtime_traced(threads, window, fusion, memo, traced)
}

/// [`runtime`] with automatic tracing on or off. Traced, the window is the runtime's default
/// under tracing (the adaptive window, behind the tracer: released tasks are fused there,
/// replayed traces by the trace's own pass), so `window` is ignored.
fn runtime_traced(
    threads: usize,
    window: WindowPolicy,
    fusion: bool,
    memo: bool,
    tracing: bool,
) -> Runtime {
    let b = Runtime::builder().tracing(tracing);
    let b = match window {
        _ if tracing => b,
        WindowPolicy::Fixed(n) => b.window_size(n),
        WindowPolicy::Adaptive { max } => b.adaptive_window(max),
    };
    // `TESSERA_BENCH_HOLD_US`: how long the adaptive window holds a task issued while a worker
    // is idle (default 100; 0: launched at submit), for the window's A/B.
    let hold = std::time::Duration::from_micros(env_or("TESSERA_BENCH_HOLD_US", 100u64));
    let rt = b
        .threads(threads)
        .fusion(fusion)
        .fusion_memo(memo)
        .window_hold(hold)
        // `TESSERA_BENCH_EARLY=0|1`: whether a submit finding a worker idle launches the
        // window's complete fusible prefixes at once (default 1).
        .window_early_prefix(env_or("TESSERA_BENCH_EARLY", 1u32) != 0)
        .build();
    register(&rt).expect("register");
    rt
}

/// Parallel copy bandwidth (bytes read + written per second) on `n` doubles.
fn copy_bandwidth(n: usize, reps: usize) -> f64 {
    let src = vec![1.0f64; n];
    let mut dst = vec![0.0f64; n];
    let mut times = vec![];
    for _ in 0..reps {
        let t0 = Instant::now();
        dst.par_chunks_mut(1 << 16)
            .zip(src.par_chunks(1 << 16))
            .for_each(|(d, s)| d.copy_from_slice(s));
        times.push(t0.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    (16 * n) as f64 / median(times)
}

struct Measured {
    fused: f64,
    unfused: f64,
    hand: f64,
    stats_fused: Stats,
    stats_unfused: Stats,
}

/// `TESSERA_BENCH_ONLY=PROGRAM:CONTESTANT` (`black-scholes`, `cg`, `cg-natural`, `cg-tensor`
/// or `bicgstab`; `fused`, `unfused` or `hand`): run that one alone, `REPS + 1` times, for a
/// profiler or an instruction count (`valgrind --tool=cachegrind`; two values of
/// `TESSERA_BENCH_REPS` give the count per run).
fn only() -> Option<(String, String)> {
    let s = std::env::var("TESSERA_BENCH_ONLY").ok()?;
    let bad = || panic!("TESSERA_BENCH_ONLY={s}: expected PROGRAM:fused|unfused|hand");
    let (program, who) = s.split_once(':').unwrap_or_else(bad);
    let programs = ["black-scholes", "cg", "cg-natural", "cg-tensor", "bicgstab"];
    if !programs.contains(&program) || !["fused", "unfused", "hand"].contains(&who) {
        bad();
    }
    Some((program.to_string(), who.to_string()))
}

/// Repetitions of the CG and BiCGSTAB runs: `TESSERA_BENCH_SPARSE_REPS`, else 5 × `reps`
/// (`reps` itself under `TESSERA_BENCH_ONLY`, whose instruction counts difference two values
/// of `TESSERA_BENCH_REPS`).
fn sparse_reps(reps: usize) -> usize {
    if only().is_some() {
        return reps;
    }
    env_or("TESSERA_BENCH_SPARSE_REPS", 5 * reps).max(1)
}

/// Black-Scholes' (and Jacobi's) elements by default: 4 Mi, or more, a power of two, so that
/// its 5 arrays take at least twice the last-level cache, as the benchmark means them to be
/// larger than it (a Xeon this project ran on has 260 MiB, which held 5 arrays of 32 MiB:
/// the unfused passes ran from the cache, not from memory).
fn default_bs_n() -> usize {
    let llc = tessera_formats::caches::last_level();
    (4usize << 20).max((2 * llc / (5 * 8)).next_power_of_two())
}

fn main() {
    let threads = env_or(
        "TESSERA_BENCH_THREADS",
        std::thread::available_parallelism().map_or(2, |n| n.get()),
    );
    let reps = env_or("TESSERA_BENCH_REPS", 5usize).max(1);
    let sreps = sparse_reps(reps);
    let bs_n = env_or("TESSERA_BENCH_BS_N", default_bs_n());
    let cg_k = env_or("TESSERA_BENCH_CG_K", 64usize);
    let window = window_policy(&std::env::var("TESSERA_BENCH_WINDOW").unwrap_or_default());
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .ok();
    eprintln!(
        "{threads} threads, window {window:?}, {reps} interleaved repetitions ({sreps} for CG and BiCGSTAB), Black-Scholes over {bs_n} elements ({} MiB per array)",
        (bs_n * 8) >> 20
    );
    let mut table = Table::new(&format!(
        "Task and kernel fusion ({threads} threads, window {window:?}; medians of {reps}, of {sreps} for CG and BiCGSTAB)"
    ));
    if let Some((program, who)) = only() {
        let m = match &*program {
            "black-scholes" => bench_black_scholes(threads, window, bs_n, reps),
            "cg" => bench_cg(threads, window, cg_k, sreps),
            "cg-natural" => bench_cg_natural(threads, window, cg_k, sreps),
            "cg-tensor" => bench_cg_statements(threads, window, cg_k, sreps),
            _ => bench_bicgstab(threads, window, cg_k, sreps),
        };
        let (t, s) = match &*who {
            "fused" => (m.fused, Some(m.stats_fused)),
            "unfused" => (m.unfused, Some(m.stats_unfused)),
            _ => (m.hand, None),
        };
        println!(
            "{program} {who}: {:.4} ms per run or iteration, {s:?}",
            t * 1e3
        );
        // Built with `--features tessera-runtime/timeline`: the per-thread event log of the
        // runs (`scripts/timeline_split.py`).
        if let Some(path) = std::env::var_os("TESSERA_TIMELINE") {
            if !tessera_runtime::timeline::dump(std::path::Path::new(&path)).expect("dump") {
                eprintln!("TESSERA_TIMELINE: built without the `timeline` feature");
            }
        }
        return;
    }
    let copy_bw = copy_bandwidth(bs_n, reps);

    let bs = bench_black_scholes(threads, window, bs_n, reps);
    let bs_bytes = (5 * 8 * bs_n) as f64;
    table.row(
        "black-scholes fused vs unfused",
        "ms",
        bs.fused * 1e3,
        "unfused",
        bs.unfused * 1e3,
        false,
    );
    table.row(
        "black-scholes fused vs hand loop",
        "ms",
        bs.fused * 1e3,
        "hand loop",
        bs.hand * 1e3,
        false,
    );
    table.row(
        "black-scholes fused GB/s vs copy bound",
        "GB/s",
        bs_bytes / bs.fused / 1e9,
        "copy",
        copy_bw / 1e9,
        true,
    );
    table.row(
        "black-scholes unfused GB/s vs copy bound",
        "GB/s",
        bs_bytes / bs.unfused / 1e9,
        "copy",
        copy_bw / 1e9,
        true,
    );
    table.row(
        "black-scholes hand GB/s vs copy bound",
        "GB/s",
        bs_bytes / bs.hand / 1e9,
        "copy",
        copy_bw / 1e9,
        true,
    );
    let st = bench_black_scholes_statements(threads, window, bs_n, reps);
    table.row(
        "black-scholes tensor! fused vs window 1",
        "ms",
        st.fused * 1e3,
        "window 1",
        st.window1 * 1e3,
        false,
    );
    table.row(
        "black-scholes tensor! fused vs hand-registered tasks",
        "ms",
        st.fused * 1e3,
        "tasks",
        st.hand_registered * 1e3,
        false,
    );
    report_tasks(&mut table, "black-scholes", &bs);

    let cg = bench_cg(threads, window, cg_k, sreps);
    table.row(
        "cg iteration fused vs unfused",
        "ms",
        cg.fused * 1e3,
        "unfused",
        cg.unfused * 1e3,
        false,
    );
    // The ceiling: what a program with no runtime at all gains over the unfused runtime.
    table.row(
        "cg iteration hand loop vs unfused",
        "ms",
        cg.hand * 1e3,
        "unfused",
        cg.unfused * 1e3,
        false,
    );
    table.row(
        "cg iteration fused vs hand loop",
        "ms",
        cg.fused * 1e3,
        "hand loop",
        cg.hand * 1e3,
        false,
    );
    // What a user would write for a problem this small: one thread, no runtime, no joins.
    let host = HostCsr::laplacian_2d(cg_k);
    let b = cg_rhs(host.pos.len());
    let serial = median((0..sreps).map(|_| cg_hand_serial_run(&host, &b)).collect());
    table.row(
        "cg iteration fused vs hand loop on one thread",
        "ms",
        cg.fused * 1e3,
        "one thread",
        serial * 1e3,
        false,
    );
    report_tasks(&mut table, "cg", &cg);

    // The thesis' comparison (Figure 4.10): CG as naturally written, fused, against itself
    // unfused and against the tasks above, which combine its vector updates by hand.
    let cgn = bench_cg_natural(threads, window, cg_k, sreps);
    table.row(
        "cg natural iteration fused vs unfused",
        "ms",
        cgn.fused * 1e3,
        "unfused",
        cgn.unfused * 1e3,
        false,
    );
    table.row(
        "cg natural fused vs combined tasks unfused",
        "ms",
        cgn.fused * 1e3,
        "combined",
        cg.unfused * 1e3,
        false,
    );
    report_tasks(&mut table, "cg natural", &cgn);

    let cgs = bench_cg_statements(threads, window, cg_k, sreps);
    table.row(
        "cg tensor! iteration fused vs unfused",
        "ms",
        cgs.fused * 1e3,
        "unfused",
        cgs.unfused * 1e3,
        false,
    );
    table.row(
        "cg tensor! iteration fused vs hand loop",
        "ms",
        cgs.fused * 1e3,
        "hand loop",
        cgs.hand * 1e3,
        false,
    );
    report_tasks(&mut table, "cg tensor!", &cgs);

    let bi = bench_bicgstab(threads, window, cg_k, sreps);
    table.row(
        "bicgstab-like fused vs unfused",
        "ms",
        bi.fused * 1e3,
        "unfused",
        bi.unfused * 1e3,
        false,
    );
    table.row(
        "bicgstab-like hand loop vs unfused",
        "ms",
        bi.hand * 1e3,
        "unfused",
        bi.unfused * 1e3,
        false,
    );
    report_tasks(&mut table, "bicgstab", &bi);

    let ja = bench_jacobi(threads, window, bs_n, reps);
    let ja_bytes = (3 * 8 * bs_n) as f64;
    table.row(
        "jacobi sweep fused vs unfused",
        "ms",
        ja.fused * 1e3,
        "unfused",
        ja.unfused * 1e3,
        false,
    );
    table.row(
        "jacobi sweep fused vs hand loop",
        "ms",
        ja.fused * 1e3,
        "hand loop",
        ja.hand * 1e3,
        false,
    );
    table.row(
        "jacobi fused GB/s vs copy bound",
        "GB/s",
        ja_bytes / ja.fused / 1e9,
        "copy",
        copy_bw / 1e9,
        true,
    );
    report_tasks(&mut table, "jacobi", &ja);

    let (memo_us, no_memo_us) = analysis_cost(threads, window, reps);
    table.row(
        "analysis per issued task, memo on vs off",
        "us",
        memo_us,
        "memo off",
        no_memo_us,
        false,
    );

    table.figure("black_scholes_speedup_vs_unfused", bs.unfused / bs.fused);
    table.figure("black_scholes_time_vs_hand", bs.fused / bs.hand);
    table.figure(
        "black_scholes_statements_speedup_vs_window1",
        st.window1 / st.fused,
    );
    table.figure(
        "black_scholes_statements_time_vs_tasks",
        st.fused / st.hand_registered,
    );
    table.figure("black_scholes_statements_time_vs_hand", st.fused / bs.hand);
    table.figure(
        "black_scholes_statements tasks launched per run",
        st.stats_fused.tasks_launched as f64,
    );
    table.figure(
        "black_scholes_statements temporaries per run",
        st.stats_fused.temporaries_eliminated as f64,
    );
    if std::env::var("TESSERA_BENCH_SWEEP").is_ok_and(|v| v == "1") {
        sweep(&mut table, threads, bs_n, cg_k, reps, sreps);
    }
    table.figure("cg_speedup_vs_unfused", cg.unfused / cg.fused);
    table.figure("cg_hand_vs_unfused", cg.unfused / cg.hand);
    table.figure("cg_natural_speedup_vs_unfused", cgn.unfused / cgn.fused);
    table.figure(
        "cg_natural_fused_vs_combined_unfused",
        cg.unfused / cgn.fused,
    );
    table.figure("cg_statements_speedup_vs_unfused", cgs.unfused / cgs.fused);
    table.figure(
        "cg_statements kernel-fused launches per iteration",
        cgs.stats_fused.kernel_fused_launches as f64 / ((sreps + 1) * ITERS) as f64,
    );
    table.figure("bicgstab_speedup_vs_unfused", bi.unfused / bi.fused);
    table.figure("bicgstab_hand_vs_unfused", bi.unfused / bi.hand);
    table.figure("jacobi_speedup_vs_unfused", ja.unfused / ja.fused);
    traced(
        &mut table,
        threads,
        window,
        (bs_n, cg_k, reps, sreps),
        [&bs, &cg, &bi],
    );
    table.print();
}

/// Black-Scholes, CG and BiCGSTAB again with automatic tracing on (runtimes made afresh: the
/// window is tracing's default, the adaptive one, and replayed traces are fused by the trace's own pass),
/// fused+traced against unfused+traced and against `untraced` (the runs above: [bs, cg, bi])
/// unfused. Skipped when `TESSERA_BENCH_TRACING=1` already traced the runs above.
fn traced(
    table: &mut Table,
    threads: usize,
    window: WindowPolicy,
    (bs_n, cg_k, reps, sreps): (usize, usize, usize, usize),
    untraced: [&Measured; 3],
) {
    if env_or("TESSERA_BENCH_TRACING", 0u32) != 0 {
        return;
    }
    TRACED.store(true, std::sync::atomic::Ordering::Relaxed);
    let bs = bench_black_scholes(threads, window, bs_n, reps);
    let cg = bench_cg(threads, window, cg_k, sreps);
    let bi = bench_bicgstab(threads, window, cg_k, sreps);
    TRACED.store(false, std::sync::atomic::Ordering::Relaxed);
    for ((name, key, unit), (m, u)) in [
        ("black-scholes", "black_scholes", "ms"),
        ("cg iteration", "cg", "ms"),
        ("bicgstab-like", "bicgstab", "ms"),
    ]
    .into_iter()
    .zip([(&bs, untraced[0]), (&cg, untraced[1]), (&bi, untraced[2])])
    {
        table.row(
            &format!("{name} fused+traced vs unfused+traced"),
            unit,
            m.fused * 1e3,
            "unfused+traced",
            m.unfused * 1e3,
            false,
        );
        table.row(
            &format!("{name} fused+traced vs unfused untraced"),
            unit,
            m.fused * 1e3,
            "unfused untraced",
            u.unfused * 1e3,
            false,
        );
        table.figure(
            &format!("{key}_traced_speedup_vs_unfused_traced"),
            m.unfused / m.fused,
        );
        table.figure(
            &format!("{key}_traced_speedup_vs_unfused_untraced"),
            u.unfused / m.fused,
        );
        let f = &m.stats_fused;
        table.figure(
            &format!("{key}_traced tasks launched per issued"),
            f.tasks_launched as f64 / f.tasks_issued.max(1) as f64,
        );
        table.figure(
            &format!("{key}_traced share replayed"),
            f.tasks_traced as f64 / f.tasks_issued.max(1) as f64,
        );
    }
}

fn report_tasks(table: &mut Table, name: &str, m: &Measured) {
    let (f, u) = (&m.stats_fused, &m.stats_unfused);
    table.figure(&format!("{name} tasks issued"), f.tasks_issued as f64);
    table.figure(
        &format!("{name} tasks launched fused"),
        f.tasks_launched as f64,
    );
    table.figure(
        &format!("{name} tasks launched unfused"),
        u.tasks_launched as f64,
    );
    table.figure(&format!("{name} mean fused prefix"), f.mean_fused_prefix());
    table.figure(
        &format!("{name} temporaries eliminated"),
        f.temporaries_eliminated as f64,
    );
    table.figure(
        &format!("{name} MiB not allocated"),
        f.bytes_not_allocated as f64 / (1 << 20) as f64,
    );
    table.figure(&format!("{name} memo hits"), f.fusion_memo_hits as f64);
    table.figure(
        &format!("{name} idle-worker launches (all runs)"),
        f.idle_flushes as f64,
    );
    table.figure(
        &format!("{name} window-thread launches (all runs)"),
        f.timer_flushes as f64,
    );
    // Time from a submit that found a worker idle and held its task to the next launch.
    table.figure(
        &format!("{name} ms held while a worker idled (all runs)"),
        f.idle_held_ns as f64 / 1e6,
    );
}

/// Times `fused`, `unfused` and `hand` interleaved, `reps` times each, after one warm-up.
/// Under `TESSERA_BENCH_ONLY` only the named contestant runs (the others' times are NaN).
fn interleave(
    reps: usize,
    mut fused: impl FnMut() -> f64,
    mut unfused: impl FnMut() -> f64,
    mut hand: impl FnMut() -> f64,
) -> (f64, f64, f64) {
    if let Some((_, who)) = only() {
        let mut t = vec![];
        for _ in 0..=reps {
            t.push(match &*who {
                "fused" => fused(),
                "unfused" => unfused(),
                _ => hand(),
            });
        }
        let (t, nan) = (median(t), f64::NAN);
        return match &*who {
            "fused" => (t, nan, nan),
            "unfused" => (nan, t, nan),
            _ => (nan, nan, t),
        };
    }
    fused();
    unfused();
    hand();
    let (mut a, mut b, mut c) = (vec![], vec![], vec![]);
    for _ in 0..reps {
        a.push(fused());
        b.push(unfused());
        c.push(hand());
    }
    (median(a), median(b), median(c))
}

fn bench_black_scholes(threads: usize, window: WindowPolicy, n: usize, reps: usize) -> Measured {
    let s_host: Vec<f64> = (0..n).map(|i| 80.0 + (i % 41) as f64).collect();
    let k_host: Vec<f64> = (0..n).map(|i| 90.0 + (i % 23) as f64).collect();
    let t_host: Vec<f64> = (0..n).map(|i| 0.25 + (i % 7) as f64 * 0.25).collect();
    let rts = fused_and_unfused(threads, window);
    let inputs: Vec<[Store; 3]> = rts
        .iter()
        .map(|rt| [&s_host, &k_host, &t_host].map(|v| rt.from_vec(&[n], v.clone()).expect("store")))
        .collect();
    let run = |i: usize| {
        let (rt, [s, k, t]) = (&rts[i], &inputs[i]);
        let t0 = Instant::now();
        let (call, put) = black_scholes_tasks(rt, s, k, t);
        rt.fence().expect("fence");
        let el = t0.elapsed().as_secs_f64();
        std::hint::black_box((call, put));
        el
    };
    // The hand loop keeps its outputs from run to run, as the runtime keeps its stores'
    // buffers (its pool hands a dropped store's buffer to the next store of that size). New
    // outputs every run cost it their page faults: 64 MiB took ~30 ms more per run on this VM
    // (free page reporting makes every fresh page a host fault), twice the arithmetic.
    let (mut call, mut put) = (vec![0.0; n], vec![0.0; n]);
    let before = rts.each_ref().map(|rt| rt.stats());
    let times = interleave(
        reps,
        || run(0),
        || run(1),
        || {
            let t0 = Instant::now();
            black_scholes_hand(&s_host, &k_host, &t_host, &mut call, &mut put);
            t0.elapsed().as_secs_f64()
        },
    );
    let after = rts.each_ref().map(|rt| rt.stats());
    // The fused answer is the hand loop's (same operations, same order per element).
    if only().is_some() {
        return measured(&before, &after, (reps + 1) as u64, times);
    }
    let (c, p) = black_scholes_tasks(&rts[0], &inputs[0][0], &inputs[0][1], &inputs[0][2]);
    let (c, p) = (
        rts[0].read::<f64>(&c).expect("read"),
        rts[0].read::<f64>(&p).expect("read"),
    );
    assert!(
        c == call && p == put,
        "fused Black-Scholes differs from the hand loop"
    );
    measured(&before, &after, (reps + 1) as u64, times)
}

/// A fused runtime with window `window`, and the unfused baseline: the default runtime with
/// fusion off (which launches each task at submit: holding it would only delay it).
fn fused_and_unfused(threads: usize, window: WindowPolicy) -> [Runtime; 2] {
    [
        runtime(threads, window, true, true),
        runtime(threads, DEFAULT, false, true),
    ]
}

/// The runtime's default window.
const DEFAULT: WindowPolicy = WindowPolicy::Adaptive {
    max: DEFAULT_WINDOW,
};

/// `TESSERA_BENCH_WINDOW`: empty or `adaptive` (the default), `adaptive:N`, or `N` (fixed).
fn window_policy(s: &str) -> WindowPolicy {
    let bad = || panic!("TESSERA_BENCH_WINDOW={s}: expected `adaptive`, `adaptive:N` or `N`");
    match s.trim() {
        "" | "adaptive" => DEFAULT,
        s => match s.strip_prefix("adaptive:") {
            Some(n) => WindowPolicy::Adaptive {
                max: n.parse().unwrap_or_else(|_| bad()),
            },
            None => WindowPolicy::Fixed(s.parse().unwrap_or_else(|_| bad())),
        },
    }
}

/// Black-Scholes and CG fused under adaptive windows of several sizes and fixed windows, each
/// beside the unfused default: the evidence for [`DEFAULT_WINDOW`].
fn sweep(table: &mut Table, threads: usize, bs_n: usize, cg_k: usize, reps: usize, sreps: usize) {
    let windows = [
        WindowPolicy::Adaptive { max: 8 },
        WindowPolicy::Adaptive { max: 16 },
        WindowPolicy::Adaptive { max: 32 },
        WindowPolicy::Adaptive { max: 64 },
        WindowPolicy::Fixed(8),
        WindowPolicy::Fixed(32),
    ];
    for w in windows {
        let name = match w {
            WindowPolicy::Adaptive { max } => format!("adaptive {max}"),
            WindowPolicy::Fixed(n) => format!("fixed {n}"),
        };
        let bs = bench_black_scholes(threads, w, bs_n, reps);
        table.row(
            &format!("sweep: black-scholes {name} vs unfused"),
            "ms",
            bs.fused * 1e3,
            "unfused",
            bs.unfused * 1e3,
            false,
        );
        let cg = bench_cg(threads, w, cg_k, sreps);
        table.row(
            &format!("sweep: cg iteration {name} vs unfused"),
            "ms",
            cg.fused * 1e3,
            "unfused",
            cg.unfused * 1e3,
            false,
        );
        table.figure(
            &format!("sweep {name}: cg launched per iteration"),
            cg.stats_fused.tasks_launched as f64,
        );
    }
}

/// The Laplacian on a `k × k` grid, a right-hand side, and the matrix on both runtimes.
struct Problem {
    host: HostCsr,
    n: usize,
    b: Vec<f64>,
    rts: [Runtime; 2],
    mats: Vec<Csr>,
}

fn problem(threads: usize, window: WindowPolicy, k: usize) -> Problem {
    let host = HostCsr::laplacian_2d(k);
    let n = k * k;
    let rts = fused_and_unfused(threads, window);
    let mats = rts
        .iter()
        .map(|rt| Csr::upload(rt, &host).expect("upload"))
        .collect();
    Problem {
        host,
        n,
        b: cg_rhs(n),
        rts,
        mats,
    }
}

/// The right-hand side of the CG and BiCGSTAB runs, `n` entries.
fn cg_rhs(n: usize) -> Vec<f64> {
    (0..n).map(|i| 1.0 + (i % 5) as f64).collect()
}

/// Iterations per timed CG, BiCGSTAB or Jacobi run (enough that filling the window at the
/// start is a small part of it).
const ITERS: usize = 100;

fn bench_cg(threads: usize, window: WindowPolicy, k: usize, reps: usize) -> Measured {
    bench_cg_with(threads, window, k, reps, cg_iteration)
}

fn bench_cg_natural(threads: usize, window: WindowPolicy, k: usize, reps: usize) -> Measured {
    bench_cg_with(threads, window, k, reps, cg_natural_iteration)
}

fn bench_cg_with(
    threads: usize,
    window: WindowPolicy,
    k: usize,
    reps: usize,
    iteration: fn(&Runtime, &Csr, &mut Cg),
) -> Measured {
    let Problem {
        host,
        n,
        b,
        rts,
        mats,
    } = problem(threads, window, k);
    // `ITERS` iterations from `x = 0` on runtime `i`: seconds per iteration and the last `r·r`.
    let run = |i: usize| {
        let rt = &rts[i];
        let r = rt.from_vec(&[n], b.clone()).expect("store");
        let p = rt.from_vec(&[n], b.clone()).expect("store");
        let x = rt.create(DType::F64, &[n]).expect("store");
        let rs = dot(rt, &r, &r);
        rt.fence().expect("fence");
        let mut st = Cg { x, r, p, rs };
        let t0 = Instant::now();
        for _ in 0..ITERS {
            iteration(rt, &mats[i], &mut st);
        }
        let v = st.rs.get().expect("rs").as_f64();
        rt.fence().expect("fence");
        (t0.elapsed().as_secs_f64() / ITERS as f64, v)
    };
    let before = rts.each_ref().map(|rt| rt.stats());
    let times = interleave(reps, || run(0).0, || run(1).0, || cg_hand_run(&host, &b).0);
    let m = per_iteration(&rts, &before, times, reps);
    if only().is_none() {
        // Fusion must not change a bit; the hand loop sums its dots in another order.
        let ((_, fused), (_, unfused)) = (run(0), run(1));
        assert_eq!(
            fused.to_bits(),
            unfused.to_bits(),
            "fused CG differs from unfused"
        );
        let (_, hand) = cg_hand_run(&host, &b);
        assert!(
            (fused - hand).abs() <= 1e-9 * hand.abs(),
            "CG's r·r after {ITERS} iterations: {fused} on the runtime, {hand} by the hand loop"
        );
    }
    m
}

/// The figures of one program: times, and the fused and unfused runtimes' counters per unit
/// (a run, or an iteration) between `before` and `after`.
fn measured(
    before: &[Stats; 2],
    after: &[Stats; 2],
    units: u64,
    (fused, unfused, hand): (f64, f64, f64),
) -> Measured {
    let per = |i: usize| {
        let s = after[i].since(&before[i]);
        Stats {
            tasks_issued: s.tasks_issued / units,
            tasks_launched: s.tasks_launched / units,
            tasks_traced: s.tasks_traced / units,
            temporaries_eliminated: s.temporaries_eliminated / units,
            bytes_not_allocated: s.bytes_not_allocated / units,
            ..s
        }
    };
    Measured {
        fused,
        unfused,
        hand,
        stats_fused: per(0),
        stats_unfused: per(1),
    }
}

/// [`measured`] per iteration of runs of [`ITERS`] iterations.
fn per_iteration(
    rts: &[Runtime; 2],
    before: &[Stats; 2],
    times: (f64, f64, f64),
    reps: usize,
) -> Measured {
    let after = rts.each_ref().map(|rt| rt.stats());
    measured(before, &after, ((reps + 1) * ITERS) as u64, times)
}

fn bench_bicgstab(threads: usize, window: WindowPolicy, k: usize, reps: usize) -> Measured {
    let Problem {
        host,
        n,
        b,
        rts,
        mats,
    } = problem(threads, window, k);
    let run = |i: usize| {
        let rt = &rts[i];
        let store = |v: &[f64]| rt.from_vec(&[n], v.to_vec()).expect("store");
        let (r, r0, p) = (store(&b), store(&b), store(&b));
        let x = rt.create(DType::F64, &[n]).expect("store");
        let rho = dot(rt, &r0, &r);
        rt.fence().expect("fence");
        let mut st = Bicg { x, r, r0, p, rho };
        let t0 = Instant::now();
        for _ in 0..ITERS {
            bicgstab_iteration(rt, &mats[i], &mut st).expect("iteration");
        }
        rt.fence().expect("fence");
        t0.elapsed().as_secs_f64() / ITERS as f64
    };
    let before = rts.each_ref().map(|rt| rt.stats());
    let times = interleave(reps, || run(0), || run(1), || bicgstab_hand_run(&host, &b));
    per_iteration(&rts, &before, times, reps)
}

fn bench_jacobi(threads: usize, window: WindowPolicy, n: usize, reps: usize) -> Measured {
    let b_host: Vec<f64> = (0..n).map(|i| (i % 3) as f64).collect();
    let rts = fused_and_unfused(threads, window);
    let run = |i: usize| {
        let rt = &rts[i];
        let b = rt.from_vec(&[n], b_host.clone()).expect("store");
        let x = rt.from_vec(&[n], vec![0.0; n]).expect("store");
        let y = rt.from_vec(&[n], vec![0.0; n]).expect("store");
        rt.fence().expect("fence");
        let t0 = Instant::now();
        let mut res = Future::ready(0.0);
        for it in 0..ITERS {
            let (from, to) = if it % 2 == 0 { (&x, &y) } else { (&y, &x) };
            res = jacobi_sweep(rt, &b, from, to, n);
        }
        std::hint::black_box(res.get().expect("residual"));
        rt.fence().expect("fence");
        t0.elapsed().as_secs_f64() / ITERS as f64
    };
    let (mut x, mut y) = (vec![0.0; n], vec![0.0; n]);
    let before = rts.each_ref().map(|rt| rt.stats());
    let times = interleave(
        reps,
        || run(0),
        || run(1),
        || {
            in_pool(|| {
                let t0 = Instant::now();
                let mut res = 0.0;
                for _ in 0..ITERS {
                    res = jacobi_hand(&b_host, &x, &mut y);
                    std::mem::swap(&mut x, &mut y);
                }
                std::hint::black_box(res);
                t0.elapsed().as_secs_f64() / ITERS as f64
            })
        },
    );
    per_iteration(&rts, &before, times, reps)
}

/// Analysis µs per issued task for small Black-Scholes windows issued again and again, with
/// the fusion memo on and off.
fn analysis_cost(threads: usize, window: WindowPolicy, reps: usize) -> (f64, f64) {
    let cost = |memo: bool| {
        let rt = runtime(threads, window, true, memo);
        let n = 4096;
        let v = |x: f64| rt.from_vec(&[n], vec![x; n]).expect("store");
        let (s, k, t) = (v(100.0), v(95.0), v(1.0));
        let mut per = vec![];
        for _ in 0..reps {
            let before = rt.stats();
            for _ in 0..50 {
                let out = black_scholes_tasks(&rt, &s, &k, &t);
                rt.fence().expect("fence");
                drop(out);
            }
            per.push(rt.stats().since(&before).analysis_us_per_task());
        }
        median(per)
    };
    (cost(true), cost(false))
}
