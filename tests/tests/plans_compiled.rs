//! Scheduled `tensor!(rt => ...)` statements (their generated block kernels, written in place
//! or through a tile) against the oracle on random inputs whose extents are below, at and
//! above the split counts, zero-sized included: reductions split across blocks (extended and
//! sequential), `+=`, sparse outputs assembled from blocks, transposed and 3-d operands.
//! Every result is also bitwise the same at 1, 2 and 3 threads.
#![allow(non_snake_case)]

use tessera::plans::{PlanRunError, Stored};
use tessera::runtime::Runtime;
use tessera::{tensor, Format, Tensor};
use tessera_tests::{assert_close, dense, oracle, random_tensor, Rng};

fn fmt(s: &str, rank: usize) -> Format {
    Format::parse(s, rank).unwrap()
}

/// A scheduled statement's result on a runtime of `threads` threads.
type Statement = fn(&Runtime, &[Tensor<f64>]) -> Result<Tensor<f64>, PlanRunError>;

fn up(rt: &Runtime, t: &Tensor<f64>) -> Result<Stored<f64>, PlanRunError> {
    Stored::upload(rt, t)
}

/// Stored coordinates strictly increasing in storage order: sorted, no duplicates.
fn assert_valid(t: &Tensor<f64>, what: &str) {
    let order = t.format().mode_order().to_vec();
    let stored: Vec<Vec<usize>> = t
        .entries()
        .map(|(c, _)| order.iter().map(|&m| c[m]).collect())
        .collect();
    for w in stored.windows(2) {
        assert!(
            w[0] < w[1],
            "{what}: entries out of order or repeated: {w:?}"
        );
    }
}

/// One statement: its text for the oracle, its operands' names and formats (rank from the
/// format), the index variable of each operand mode, and the scheduled run.
struct Case {
    text: &'static str,
    operands: &'static [(&'static str, &'static str, &'static [char])],
    out_format: &'static str,
    run: Statement,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            text: "y(i) = A(i,j) * x(j)",
            operands: &[("A", "csr", &['i', 'j']), ("x", "d", &['j'])],
            out_format: "d",
            run: |rt, t| {
                let (A, x) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 3))?.to_tensor(rt)
            },
        },
        Case {
            text: "y(i) = A(i,j) * x(j)",
            operands: &[("A", "csr", &['i', 'j']), ("x", "d", &['j'])],
            out_format: "d",
            run: |rt, t| {
                let (A, x) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(j, jo, ji, 3); extend(jo))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "y(i) = A(i,j) * x(j)",
            operands: &[("A", "csr", &['i', 'j']), ("x", "d", &['j'])],
            out_format: "d",
            run: |rt, t| {
                let (A, x) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 2); split(j, jo, ji, [2, 5]))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "y(j) = A(i,j) * x(i)",
            operands: &[("A", "csr", &['i', 'j']), ("x", "d", &['i'])],
            out_format: "d",
            run: |rt, t| {
                let (A, x) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => y(j) = A(i,j) * x(i); A: csr; split(j, jo, ji, 3); split(i, io, ii, 2); extend(io))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "C(i,j) = A(i,k) * B(k,j)",
            operands: &[("A", "csr", &['i', 'k']), ("B", "csr", &['k', 'j'])],
            out_format: "csr",
            run: |rt, t| {
                let (A, B) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; C: csr; split(i, io, ii, 4))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "C(i,j) = A(i,k) * B(k,j)",
            operands: &[("A", "csr", &['i', 'k']), ("B", "csr", &['k', 'j'])],
            out_format: "csr",
            run: |rt, t| {
                let (A, B) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; C: csr; split(k, ko, ki, 3); extend(ko))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "C(i,j) = A(i,j) + B(i,j)",
            operands: &[("A", "csr", &['i', 'j']), ("B", "csc", &['i', 'j'])],
            out_format: "dcsr",
            run: |rt, t| {
                let (A, B) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => C(i,j) = A(i,j) + B(i,j); A: csr; B: csc; C: dcsr; split(i, io, ii, 2); split(j, jo, ji, 3))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "C(i,j) = A(i,k) * B(k,j)",
            operands: &[("A", "dd", &['i', 'k']), ("B", "dd", &['k', 'j'])],
            out_format: "csc",
            run: |rt, t| {
                let (A, B) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => C(i,j) = A(i,k) * B(k,j); C: csc; split(j, jo, ji, 5))?.to_tensor(rt)
            },
        },
        Case {
            text: "C(i,j) = x(i) * z(j)",
            operands: &[("x", "d", &['i']), ("z", "d", &['j'])],
            out_format: "dd",
            run: |rt, t| {
                let (x, z) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => C(i,j) = x(i) * z(j); split(i, io, ii, 2); split(j, jo, ji, 3))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "C(i,j) = A(j,i) + B(i,j)",
            operands: &[("A", "csr", &['j', 'i']), ("B", "dd", &['i', 'j'])],
            out_format: "dd",
            run: |rt, t| {
                let (A, B) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => C(i,j) = A(j,i) + B(i,j); A: csr; split(j, jo, ji, 3))?.to_tensor(rt)
            },
        },
        Case {
            text: "A(i,j) = B(i,k,l) * C(k,j) * D(l,j)",
            operands: &[
                ("B", "sss", &['i', 'k', 'l']),
                ("C", "dd", &['k', 'j']),
                ("D", "dd", &['l', 'j']),
            ],
            out_format: "dd",
            run: |rt, t| {
                let (B, C, D) = (up(rt, &t[0])?, up(rt, &t[1])?, up(rt, &t[2])?);
                tensor!(rt => A(i,j) = B(i,k,l) * C(k,j) * D(l,j); B: sss; split(i, io, ii, 2); split(l, lo, li, 2); extend(lo))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "A(i,j,k) = B(i,j,k) * c(k) + d(i)",
            operands: &[
                ("B", "dss", &['i', 'j', 'k']),
                ("c", "d", &['k']),
                ("d", "d", &['i']),
            ],
            out_format: "ddd:0,2,1",
            run: |rt, t| {
                let (B, c, d) = (up(rt, &t[0])?, up(rt, &t[1])?, up(rt, &t[2])?);
                tensor!(rt => A(i,j,k) = B(i,j,k) * c(k) + d(i); B: dss; A: ddd:0,2,1; split(k, ko, ki, 2); split(i, io, ii, 3))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "y(i) += A(i,j) * x(j)",
            operands: &[
                ("A", "csr", &['i', 'j']),
                ("x", "d", &['j']),
                ("y", "d", &['i']),
            ],
            out_format: "d",
            run: |rt, t| {
                let (A, x, y) = (up(rt, &t[0])?, up(rt, &t[1])?, up(rt, &t[2])?);
                tensor!(rt => y(i) += A(i,j) * x(j); A: csr; split(j, jo, ji, 2); extend(jo))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "y(i) += A(i,j) * x(j)",
            operands: &[
                ("A", "csr", &['i', 'j']),
                ("x", "d", &['j']),
                ("y", "d", &['i']),
            ],
            out_format: "d",
            run: |rt, t| {
                let (A, x, y) = (up(rt, &t[0])?, up(rt, &t[1])?, up(rt, &t[2])?);
                tensor!(rt => y(i) += A(i,j) * x(j); A: csr; split(i, io, ii, 3); split(j, jo, ji, 2))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "a = b(i) * c(i)",
            operands: &[("b", "s", &['i']), ("c", "d", &['i'])],
            out_format: "",
            run: |rt, t| {
                let (b, c) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => a = b(i) * c(i); b: s; split(i, io, ii, 5); extend(io))?.to_tensor(rt)
            },
        },
        Case {
            text: "y(i) = A(i,j) * x(j)",
            operands: &[("A", "dd", &['i', 'j']), ("x", "d", &['j'])],
            out_format: "d",
            run: |rt, t| {
                let (A, x) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => y(i) = A(i,j) * x(j); split(i, io, ii, 3); parallelize(i))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "y(i) = A(i,j) * x(j)",
            operands: &[("A", "csr", &['i', 'j']), ("x", "d", &['j'])],
            out_format: "d",
            run: |rt, t| {
                let (A, x) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 2); split(j, jo, ji, 2); extend(jo); parallelize(i))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "C(i,j) = A(i,k) * B(k,j)",
            operands: &[("A", "csr", &['i', 'k']), ("B", "csr", &['k', 'j'])],
            out_format: "csr",
            run: |rt, t| {
                let (A, B) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; C: csr; split(i, io, ii, 3); parallelize(i))?
                    .to_tensor(rt)
            },
        },
        Case {
            text: "C(i,j) = A(i,k) * B(k,j)",
            operands: &[("A", "csr", &['i', 'k']), ("B", "dd", &['k', 'j'])],
            out_format: "dd",
            run: |rt, t| {
                let (A, B) = (up(rt, &t[0])?, up(rt, &t[1])?);
                tensor!(rt => C(i,j) = A(i,k) * B(k,j); A: csr; split(j, jo, ji, 2); split(i, io, ii, 2); parallelize(i))?
                    .to_tensor(rt)
            },
        },
        // A sparse output of a split statement, as a stored input of the next split statement.
        Case {
            text: "y(i) = A(i,k) * B(k,j) * x(j)",
            operands: &[
                ("A", "csr", &['i', 'k']),
                ("B", "csr", &['k', 'j']),
                ("x", "d", &['j']),
            ],
            out_format: "d",
            run: |rt, t| {
                let (A, B, x) = (up(rt, &t[0])?, up(rt, &t[1])?, up(rt, &t[2])?);
                let C = tensor!(rt => C(i,j) = A(i,k) * B(k,j); A: csr; B: csr; C: csr; split(k, ko, ki, 2); extend(ko))?;
                tensor!(rt => y(i) = C(i,j) * x(j); C: csr; split(i, io, ii, 3))?.to_tensor(rt)
            },
        },
        // A dense output in column-major order, as the stored input of the next statement.
        Case {
            text: "y(i) = A(i,k) * B(k,j) * x(j)",
            operands: &[
                ("A", "csr", &['i', 'k']),
                ("B", "dd", &['k', 'j']),
                ("x", "d", &['j']),
            ],
            out_format: "d",
            run: |rt, t| {
                let (A, B, x) = (up(rt, &t[0])?, up(rt, &t[1])?, up(rt, &t[2])?);
                let C = tensor!(rt => C(i,j) = A(i,k) * B(k,j); A: csr; C: dd:1,0; split(j, jo, ji, 3); split(i, io, ii, 2))?;
                tensor!(rt => y(i) = C(i,j) * x(j); C: dd:1,0; split(j, jo, ji, 2); extend(jo))?
                    .to_tensor(rt)
            },
        },
    ]
}

/// Random operands for `case` with index extents `dims` (by variable letter).
fn operands(case: &Case, dims: &[(char, usize)], rng: &mut Rng) -> Vec<Tensor<f64>> {
    let extent = |v: &char| dims.iter().find(|(n, _)| n == v).map_or(0, |d| d.1);
    case.operands
        .iter()
        .map(|(_, f, vars)| {
            let shape: Vec<usize> = vars.iter().map(extent).collect();
            let density = [0.0, 0.3, 1.0][(rng.next_u64() % 3) as usize];
            random_tensor(rng, &shape, &fmt(f, vars.len()), density)
        })
        .collect()
}

#[test]
fn scheduled_tensor_statements_match_the_oracle_at_every_thread_count() {
    // 1, 2 and 3 threads with tracing off, then 2 and 3 with it on (each statement runs four
    // times in a row on each runtime; whether the tracer replays them is its own business,
    // the results must not depend on it).
    let runtimes: Vec<Runtime> = [(1, false), (2, false), (3, false), (2, true), (3, true)]
        .iter()
        .map(|&(t, tracing)| Runtime::builder().threads(t).tracing(tracing).build())
        .collect();
    for (n, case) in cases().iter().enumerate() {
        for seed in 0..40u64 {
            let mut rng = Rng::new(seed * 31 + n as u64);
            // Extents 0..=7: below, at and above every split count.
            let dims: Vec<(char, usize)> = ['i', 'j', 'k', 'l']
                .iter()
                .map(|&v| (v, (rng.next_u64() % 8) as usize))
                .collect();
            let ins = operands(case, &dims, &mut rng);
            let named: Vec<(&str, &Tensor<f64>)> =
                case.operands.iter().map(|o| o.0).zip(&ins).collect();
            let want = oracle(case.text, &named);
            let what = format!("{} with dims {dims:?}", case.text);
            let mut first: Option<Vec<f64>> = None;
            for rt in &runtimes {
                let got = (case.run)(rt, &ins).unwrap_or_else(|e| panic!("{what}: {e}"));
                // Again on the same runtime: the same task sequence, which tracing replays.
                let bits =
                    |t: &Tensor<f64>| t.to_dense().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                for _ in 0..3 {
                    let again = (case.run)(rt, &ins).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(bits(&got), bits(&again), "{what}: a run again differs");
                }
                let out_format = match case.out_format {
                    "" => Format::dense(0),
                    f => fmt(f, want.dims.len()),
                };
                assert_eq!(got.format(), &out_format, "{what}");
                assert_valid(&got, &what);
                let d = dense(&got);
                assert_close(&d, &want, &what);
                match &first {
                    None => first = Some(d.data),
                    Some(f) => assert!(
                        f.iter()
                            .zip(&d.data)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{what}: thread counts differ: {f:?} vs {:?}",
                        d.data
                    ),
                }
            }
        }
    }
}

/// A `parallelize`d loop inside block tasks, with blocks of more rows than one parallel job
/// takes (4096 rows of one column): every job's rows are the block's, not the whole output's.
#[test]
fn a_parallel_loop_inside_blocks_covers_each_block_once() {
    let rt = Runtime::new(2);
    for rows in [4095, 9000, 12_289] {
        let vals: Vec<f64> = (0..rows * 2).map(|n| (n % 7) as f64 - 3.0).collect();
        let a = Tensor::dense_from_vec(vec![rows, 2], vals).unwrap();
        let x = Tensor::dense_from_vec(vec![2], vec![1.0, 0.5]).unwrap();
        let want = oracle("y(i) = A(i,j) * x(j)", &[("A", &a), ("x", &x)]);
        let (A, x) = (up(&rt, &a).unwrap(), up(&rt, &x).unwrap());
        let run = || -> Result<Tensor<f64>, PlanRunError> {
            tensor!(rt => y(i) = A(i,j) * x(j); split(i, io, ii, 3); parallelize(i))?.to_tensor(&rt)
        };
        assert_close(&dense(&run().unwrap()), &want, &format!("{rows} rows"));
        let sparse = Tensor::from_entries(vec![rows, 2], "csr", a.entries().collect::<Vec<_>>());
        let A = up(&rt, &sparse.unwrap()).unwrap();
        let run = || -> Result<Tensor<f64>, PlanRunError> {
            tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 3); parallelize(i))?
                .to_tensor(&rt)
        };
        assert_close(&dense(&run().unwrap()), &want, &format!("csr, {rows} rows"));
    }
}
