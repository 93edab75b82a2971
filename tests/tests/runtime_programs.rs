//! Iterative `tensor!(rt => ...)` programs of the kinds users write — power iteration, chains
//! of in-place updates, scalars computed by one statement and used by the next, 2-d
//! element-wise updates, and a loop whose body changes every few iterations (with a sparse
//! product now and then) — give the same stores under every runtime configuration: no
//! fusion, fixed and adaptive fusion windows, automatic tracing with and without actors, one
//! and two threads. The element-wise programs also give the values of plain `tensor!`,
//! bitwise; the others (their sums split over blocks) the values of the unfused runtime,
//! bitwise. Each program runs twice on the same runtime so that traces recorded the first
//! time are replayed the second, and sizes from 1 to past one chunk of the kernel-fused loop
//! are covered. The statistics show that each configuration did what it is named for.
#![allow(non_snake_case)]

use tessera::plans::Stored;
use tessera::runtime::{Runtime, Stats};
use tessera::{tensor, Tensor};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// What a configuration must have done by the end of the programs.
#[derive(Clone, Copy)]
struct Expect {
    fused: bool,
    traced: bool,
    actors: bool,
}

fn configs() -> Vec<(&'static str, Runtime, Expect)> {
    let b = || Runtime::builder().threads(2);
    let e = |fused, traced, actors| Expect {
        fused,
        traced,
        actors,
    };
    vec![
        (
            "window 1, no fusion",
            b().window_size(1).fusion(false).tracing(false).build(),
            e(false, false, false),
        ),
        (
            "window 16",
            b().window_size(16).tracing(false).build(),
            e(true, false, false),
        ),
        (
            "adaptive window",
            b().tracing(false).build(),
            e(true, false, false),
        ),
        (
            "tracing",
            b().tracing(true).actors(false).build(),
            e(true, true, false),
        ),
        (
            "tracing, actors",
            b().tracing(true).actors(true).build(),
            e(true, true, true),
        ),
        (
            "tracing, actors, one thread, window 8",
            Runtime::builder()
                .threads(1)
                .tracing(true)
                .actors(true)
                .window_size(8)
                .build(),
            e(true, true, true),
        ),
        (
            "tracing, actors, window 16, sampling 16",
            b().tracing(true)
                .actors(true)
                .window_size(16)
                .trace_sampling(16)
                .build(),
            e(true, true, true),
        ),
    ]
}

fn vector(n: usize, f: impl Fn(usize) -> f64) -> Tensor<f64> {
    Tensor::dense_from_vec(vec![n], (0..n).map(f).collect()).unwrap()
}

/// Three entries a row (diagonal and two scattered), duplicates dropped.
fn matrix(n: usize) -> Tensor<f64> {
    let mut seen = std::collections::HashSet::new();
    let entries: Vec<_> = (0..n)
        .flat_map(|i| {
            [
                (vec![i, i], 3.0 + (i % 7) as f64),
                (vec![i, (i * 7 + 3) % n], 0.5),
                (vec![i, (i * 13 + 1) % n], -0.25),
            ]
        })
        .filter(|(c, _)| seen.insert(c.clone()))
        .collect();
    Tensor::from_entries(vec![n, n], "csr", entries).unwrap()
}

/// Power iteration: y = A x, x = y / ‖y‖; every fourth iterate read back.
fn power(rt: &Runtime, A: &Stored<f64>, x0: &Stored<f64>, iters: usize) -> Res<Vec<Tensor<f64>>> {
    let mut x = tensor!(rt => x(i) = x0(i))?;
    let mut out = Vec::new();
    for it in 0..iters {
        let y = tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 4))?;
        let nrm = tensor!(rt => d = y(i) * y(i); split(i, io, ii, 4); extend(io))?;
        let s = tensor!(rt => s = 1 / sqrt(nrm))?;
        x = tensor!(rt => x(i) = s * y(i))?;
        if it % 4 == 3 {
            out.push(x.to_tensor(rt)?);
        }
    }
    out.push(x.to_tensor(rt)?);
    Ok(out)
}

/// Element-wise updates that read values an earlier statement of the same round replaced
/// (`a` from the old `x`, then `x += ...`), temporaries dropped at once or kept for a read,
/// and a statement run only in some rounds. Written once for plain tensors and once on a
/// runtime.
macro_rules! updates {
    ($name:ident, $ty:ty, $read:expr $(, $rt:ident)?) => {
        fn $name($($rt: &Runtime,)? x0: &$ty, y0: &$ty, rounds: usize) -> Res<Vec<Tensor<f64>>> {
            let mut x = tensor!($($rt =>)? x(i) = x0(i))?;
            let mut y = tensor!($($rt =>)? y(i) = y0(i))?;
            let mut out = Vec::new();
            for r in 0..rounds {
                let a = tensor!($($rt =>)? a(i) = x(i) * 2 + y(i))?;
                x = tensor!($($rt =>)? x(i) += 0.5 * y(i))?;
                let b = tensor!($($rt =>)? b(i) = a(i) * x(i))?;
                y = tensor!($($rt =>)? y(i) += b(i) * 1e-3)?;
                let c = tensor!($($rt =>)? c(i) = max(a(i), y(i)) - min(b(i), x(i)))?;
                if r % 3 == 1 {
                    let z = tensor!($($rt =>)? z(i) = c(i) / (1 + abs(c(i))))?;
                    x = tensor!($($rt =>)? t(i) = z(i) + x(i) * 0.25)?;
                }
                if r + 1 == rounds || r % 5 == 0 {
                    out.push($read(&a $(, $rt)?)?);
                    out.push($read(&c $(, $rt)?)?);
                }
            }
            out.push($read(&x $(, $rt)?)?);
            out.push($read(&y $(, $rt)?)?);
            Ok(out)
        }
    };
}

/// 2-d element-wise updates with `+=`, `tanh` and `pow`.
macro_rules! grid {
    ($name:ident, $ty:ty, $read:expr $(, $rt:ident)?) => {
        fn $name($($rt: &Runtime,)? X0: &$ty, G: &$ty, rounds: usize) -> Res<Vec<Tensor<f64>>> {
            let mut X = tensor!($($rt =>)? X(i,j) = X0(i,j))?;
            let mut out = Vec::new();
            for _ in 0..rounds {
                X = tensor!($($rt =>)? X(i,j) += 0.25 * G(i,j))?;
                let H = tensor!($($rt =>)?
                    H(i,j) = tanh(X(i,j)) * G(i,j) + pow(abs(X(i,j)), 0.5))?;
                X = tensor!($($rt =>)? T(i,j) = H(i,j) - 0.1 * X(i,j))?;
                out.push($read(&H $(, $rt)?)?);
            }
            out.push($read(&X $(, $rt)?)?);
            Ok(out)
        }
    };
}

fn plain(t: &Tensor<f64>) -> Res<Tensor<f64>> {
    Ok(t.clone())
}

fn stored(t: &Stored<f64>, rt: &Runtime) -> Res<Tensor<f64>> {
    Ok(t.to_tensor(rt)?)
}

updates!(updates_plain, Tensor<f64>, plain);
updates!(updates_on, Stored<f64>, stored, rt);
grid!(grid_plain, Tensor<f64>, plain);
grid!(grid_on, Stored<f64>, stored, rt);

/// A dot product, a scalar made from it, and element-wise statements using both.
fn scalars(
    rt: &Runtime,
    x0: &Stored<f64>,
    y: &Stored<f64>,
    rounds: usize,
) -> Res<Vec<Tensor<f64>>> {
    let mut x = tensor!(rt => x(i) = x0(i))?;
    let mut out = Vec::new();
    for r in 0..rounds {
        let d = tensor!(rt => d = x(i) * y(i); split(i, io, ii, 4); extend(io))?;
        let e = tensor!(rt => e = d * d + 1)?;
        let z = tensor!(rt => z(i) = x(i) / e + d * 1e-9)?;
        let w = tensor!(rt => w(i) = z(i) / (1 + abs(z(i))))?;
        x = tensor!(rt => t(i) = w(i) * 0.5 + x(i))?;
        if r % 4 == 0 {
            out.push(d.to_tensor(rt)?);
        }
    }
    out.push(x.to_tensor(rt)?);
    Ok(out)
}

/// A loop whose body changes: an extra update every 7th iteration, a sparse product every
/// 11th, reads every 5th (so recorded traces stop matching mid-way and tracing falls back).
fn changing(
    rt: &Runtime,
    (x0, y0): (&Stored<f64>, &Stored<f64>),
    A: &Stored<f64>,
    rounds: usize,
) -> Res<Vec<Tensor<f64>>> {
    let mut x = tensor!(rt => x(i) = x0(i))?;
    let mut y = tensor!(rt => y(i) = y0(i))?;
    let mut out = Vec::new();
    for it in 0..rounds {
        let a = tensor!(rt => a(i) = x(i) * 0.9 + y(i) * 0.1)?;
        if it % 7 == 3 {
            y = tensor!(rt => y(i) += 0.01 * a(i))?;
        }
        if it % 11 == 5 {
            let q = tensor!(rt => q(i) = A(i,j) * a(j); A: csr; split(i, io, ii, 4))?;
            y = tensor!(rt => t(i) = q(i) * 1e-3 + y(i))?;
        }
        x = a;
        if it % 5 == 4 {
            out.push(x.to_tensor(rt)?);
        }
    }
    out.push(y.to_tensor(rt)?);
    Ok(out)
}

fn same(what: &str, got: &[Tensor<f64>], want: &[Tensor<f64>]) {
    assert_eq!(got.len(), want.len(), "{what}: results");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.dims(), w.dims(), "{what}: result {k}");
        if let Some(at) =
            (0..g.vals().len()).find(|&i| g.vals()[i].to_bits() != w.vals()[i].to_bits())
        {
            panic!(
                "{what}: result {k} differs at {at}: {} against {}",
                g.vals()[at],
                w.vals()[at]
            );
        }
    }
}

fn check_stats(cfg: &str, st: &Stats, expect: Expect) {
    assert_eq!(st.fused_launches > 0, expect.fused, "{cfg}: fusion: {st:?}");
    assert_eq!(
        st.traces_replayed > 0,
        expect.traced,
        "{cfg}: tracing: {st:?}"
    );
    assert_eq!(st.actor_replays > 0, expect.actors, "{cfg}: actors: {st:?}");
}

#[test]
fn iterative_programs_give_the_same_stores_in_every_configuration() -> Res<()> {
    for n in [1usize, 7, 4099, 10_001] {
        let xt = vector(n, |i| 1.0 + (i % 13) as f64 * 0.1);
        let yt = vector(n, |i| 0.5 - (i % 7) as f64 * 0.2);
        let At = matrix(n);
        let (m, w) = (
            (n as f64).sqrt() as usize + 1,
            (n as f64).sqrt() as usize + 3,
        );
        let grid_of = |f: &dyn Fn(usize) -> f64| {
            Tensor::dense_from_vec(vec![m, w], (0..m * w).map(f).collect()).unwrap()
        };
        let Xt = grid_of(&|i| (i % 17) as f64 * 0.1 - 0.5);
        let Gt = grid_of(&|i| (i % 5) as f64 * 0.3);
        let want_updates = updates_plain(&xt, &yt, 12)?;
        let want_grid = grid_plain(&Xt, &Gt, 6)?;
        let mut unfused: Option<Vec<Vec<Tensor<f64>>>> = None;
        for (cfg, rt, expect) in configs() {
            let what = |p: &str| format!("n {n}, {cfg}: {p}");
            let up = |t: &Tensor<f64>| Stored::upload(&rt, t);
            let (x, y, A, X, G) = (up(&xt)?, up(&yt)?, up(&At)?, up(&Xt)?, up(&Gt)?);
            for _ in 0..2 {
                same(
                    &what("updates"),
                    &updates_on(&rt, &x, &y, 12)?,
                    &want_updates,
                );
                same(&what("grid"), &grid_on(&rt, &X, &G, 6)?, &want_grid);
            }
            // Twice each, so that the traces recorded the first time replay.
            let mut runs = Vec::new();
            for _ in 0..2 {
                runs.push(power(&rt, &A, &x, 24)?);
                runs.push(scalars(&rt, &x, &y, 20)?);
                runs.push(changing(&rt, (&x, &y), &A, 60)?);
            }
            same(
                &what("inputs"),
                &[x.to_tensor(&rt)?, y.to_tensor(&rt)?],
                &[xt.clone(), yt.clone()],
            );
            match &unfused {
                None => unfused = Some(runs),
                Some(want) => {
                    for (k, (got, want)) in runs.iter().zip(want).enumerate() {
                        same(&what(&format!("program {k}")), got, want);
                    }
                }
            }
            rt.fence()?;
            check_stats(cfg, &rt.stats(), expect);
        }
    }
    Ok(())
}
