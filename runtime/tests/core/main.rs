//! Integration tests of the runtime core (one test binary).

#[path = "../../examples/sparse/mod.rs"]
mod sparse;

mod api;
mod cg;
mod fusion;
mod fusion_tracing;
mod heldout_streams;
mod linked_replays;
mod matrices;
mod ranks;
mod solver;
mod streams;
mod temporaries;
mod tiles;
mod tracing;
mod tracing_races;

/// Every cell of `r`, row-major.
pub(crate) fn cells(r: &tessera_runtime::Rect) -> Vec<Vec<usize>> {
    let mut out = vec![vec![]];
    for d in 0..r.dim() {
        out = out
            .into_iter()
            .flat_map(|p| (r.lo()[d]..r.hi()[d]).map(move |c| [p.clone(), vec![c]].concat()))
            .collect();
    }
    out
}
