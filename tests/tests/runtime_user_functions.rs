//! `tensor!(rt => ...)` statements may call the caller's own functions, as plain `tensor!`
//! does: an element-wise statement (one element-wise task) and a plan's block kernels both
//! call them on the runtime's threads, with the values plain `tensor!` gives. The same
//! statement text calling different functions (another scope) is a different task. (A local
//! closure variable is refused at compile time: `tests/ui/runtime_capturing_function.rs`.)
#![allow(non_snake_case)]

use tessera::plans::Stored;
use tessera::runtime::Runtime;
use tessera::{tensor, Tensor};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn relu(x: f64) -> f64 {
    x.max(0.0)
}

fn dense(n: usize, f: impl Fn(usize) -> f64) -> Tensor<f64> {
    Tensor::dense_from_vec(vec![n], (0..n).map(f).collect()).unwrap()
}

/// A `rows × cols` CSR matrix with a few entries per row, of both signs.
fn matrix(rows: usize, cols: usize) -> Tensor<f64> {
    let entries = (0..rows).flat_map(|i| {
        (0..3).map(move |k| {
            let j = (i * 7 + k * 13) % cols;
            (vec![i, j], ((i + 2 * k) % 5) as f64 - 2.0)
        })
    });
    Tensor::from_entries(vec![rows, cols], "csr", entries).unwrap()
}

fn runtime() -> Runtime {
    Runtime::builder().threads(2).build()
}

#[test]
fn an_elementwise_statement_calls_the_callers_function() -> Res<()> {
    let (x, b) = (
        dense(3000, |i| i as f64 - 1500.5),
        dense(3000, |i| (i % 7) as f64),
    );
    let want = tensor!(y(i) = relu(x(i) + b(i)))?;
    let rt = runtime();
    let (xs, bs) = (Stored::upload(&rt, &x)?, Stored::upload(&rt, &b)?);
    // An item declared in the function is as good as one at module level.
    fn halve(v: f64) -> f64 {
        v / 2.0
    }
    let y = tensor!(rt => y(i) = relu(xs(i) + bs(i)))?;
    let z = tensor!(rt => z(i) = halve(y(i)) - relu(-bs(i)))?;
    assert_eq!(y.to_tensor(&rt)?.vals(), want.vals());
    let halved: Vec<f64> = want.vals().iter().map(|v| v / 2.0).collect();
    assert_eq!(z.to_tensor(&rt)?.vals(), &halved[..]);
    Ok(())
}

#[test]
fn a_planned_statement_calls_the_callers_function_in_every_block() -> Res<()> {
    let (A, x) = (matrix(500, 400), dense(400, |j| (j % 11) as f64 - 5.0));
    let want = tensor!(y(i) = relu(A(i,j) * x(j)); A: csr)?;
    let rt = runtime();
    let (As, xs) = (Stored::upload(&rt, &A)?, Stored::upload(&rt, &x)?);
    let y = tensor!(rt => y(i) = relu(As(i,j) * xs(j)); As: csr; split(i, io, ii, 4))?;
    let got = y.to_tensor(&rt)?;
    assert_eq!(got.vals(), want.vals());
    // The function mattered: without it some rows come out negative.
    let plain = tensor!(y(i) = A(i,j) * x(j); A: csr)?;
    assert_ne!(got.vals(), plain.vals());
    Ok(())
}

mod other {
    /// Not `super::relu`: the same statement text below calls this one.
    pub fn relu(x: f64) -> f64 {
        -x
    }
}

#[test]
fn the_same_text_with_another_function_is_another_task() -> Res<()> {
    let rt = runtime();
    let x = Stored::upload(&rt, &dense(100, |i| i as f64 - 50.0))?;
    let mine = tensor!(rt => y(i) = relu(x(i)))?;
    let theirs = {
        use other::relu;
        tensor!(rt => y(i) = relu(x(i)))?
    };
    // And a plan's block task (a sum over row blocks).
    let mine_sum = tensor!(rt => s = relu(x(i)); split(i, io, ii, 2); extend(io))?;
    let their_sum = {
        use other::relu;
        tensor!(rt => s = relu(x(i)); split(i, io, ii, 2); extend(io))?
    };
    assert_eq!(mine_sum.to_tensor(&rt)?.vals(), &[1225.0]);
    assert_eq!(their_sum.to_tensor(&rt)?.vals(), &[50.0]);
    let (mine, theirs) = (mine.to_tensor(&rt)?, theirs.to_tensor(&rt)?);
    assert!(mine.vals().iter().all(|&v| v >= 0.0));
    let negated: Vec<f64> = (0..100).map(|i| 50.0 - i as f64).collect();
    assert_eq!(theirs.vals(), &negated[..]);
    Ok(())
}
