//! A `tensor!(rt => ...)` row-split SpMV writes its output with `write_all` (its block kernel
//! assigns every cell of its tile), so across ranks a store made in a recycled mapping is not
//! zeroed first: the kernel must leave nothing of the dropped store's values behind, in rows
//! without a nonzero included.
#![allow(non_snake_case)]

use std::sync::Arc;

use tessera::plans::{PlanRunError, Stored};
use tessera::runtime::transport::{run_ranks, ThreadComm, TransportError};
use tessera::runtime::Runtime;
use tessera::{tensor, Tensor};

/// Rows of the output: 96 KiB of `f64`, so that across ranks its store is a mapping (64 KiB
/// and up), which the runtime keeps when the store is dropped and reuses for the next one.
const N: usize = 12_000;

/// An `N` × 8 CSR matrix with one entry `1 + i % 5` at column `i % 8` in each row `i` that
/// `keep` keeps; the other rows are empty.
fn matrix(keep: impl Fn(usize) -> bool) -> Tensor<f64> {
    let entries = (0..N)
        .filter(|&i| keep(i))
        .map(|i| (vec![i, i % 8], 1.0 + (i % 5) as f64));
    Tensor::from_entries(vec![N, 8], "csr", entries.collect::<Vec<_>>()).unwrap()
}

/// `A x` twice on `rt`: first with every row full (its output, read back whole, fills the
/// rank's pages of the mapping with values), dropped; then with two rows in three empty, in a
/// store of the same size.
fn second_product(
    rt: &Runtime,
    full: &Tensor<f64>,
    sparse: &Tensor<f64>,
) -> Result<Vec<f64>, PlanRunError> {
    let x = Stored::upload(rt, &Tensor::dense_from_vec(vec![8], vec![1.0; 8]).unwrap())?;
    let A = Stored::upload(rt, full)?;
    let y = tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 4))?;
    let first = y.to_tensor(rt)?;
    assert!(first.vals().iter().all(|&v| v >= 1.0), "every row is full");
    drop((y, A));
    let A = Stored::upload(rt, sparse)?;
    let y = tensor!(rt => y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 4))?;
    Ok(y.to_tensor(rt)?.vals().to_vec())
}

struct RankError(String);

impl std::fmt::Display for RankError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<TransportError> for RankError {
    fn from(e: TransportError) -> Self {
        RankError(e.to_string())
    }
}

#[test]
fn a_row_split_product_in_a_recycled_store_holds_only_its_own_values() {
    let full = matrix(|_| true);
    let sparse = matrix(|i| i % 3 == 0);
    let want: Vec<f64> = (0..N)
        .map(|i| {
            if i % 3 == 0 {
                1.0 + (i % 5) as f64
            } else {
                0.0
            }
        })
        .collect();
    let one = Runtime::new(1);
    assert_eq!(
        second_product(&one, &full, &sparse).unwrap(),
        want,
        "one rank"
    );
    let got = run_ranks(2, |comm: &ThreadComm| {
        let rt = Runtime::builder()
            .threads(1)
            .communicator(Arc::new(comm.clone()))
            .try_build()
            .map_err(|e| RankError(e.to_string()))?;
        second_product(&rt, &full, &sparse).map_err(|e| RankError(e.to_string()))
    });
    for (rank, y) in got.into_iter().enumerate() {
        let y = y.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        let wrong = (0..N).filter(|&i| y[i] != want[i]).count();
        assert_eq!(
            wrong,
            0,
            "rank {rank}: {wrong} rows differ, e.g. {:?}",
            (0..N)
                .find(|&i| y[i] != want[i])
                .map(|i| (i, y[i], want[i]))
        );
    }
}
