//! Integration tests of the runtime core (one test binary).

#[path = "../../examples/sparse/mod.rs"]
mod sparse;

mod api;
mod cg;
mod fusion;
mod matrices;
mod ranks;
mod solver;
mod streams;
mod tiles;
mod tracing;
