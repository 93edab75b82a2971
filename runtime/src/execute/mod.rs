//! Execution: the bottom layer, below the window, the solver, the analysis and the tracer
//! (ARCHITECTURE §6, "Execution"). What comes down to it is a launched task with its
//! sub-stores decided (`launch::Launched`) and the nodes of its points with their
//! dependences counted (`graph`); what goes back up is each point's effects, through the
//! stores' cells and the futures, and [`Shared`]'s counters and signals.
//!
//! - `graph`: point-task nodes, in-edge counters and completion signals.
//! - `executor`: the worker threads, the shared ready queue and the actors' mailboxes.
//! - `launch`: a launched task and the running of one of its points (`run_node`).
//! - `context`: what a task body sees of its point (`TaskContext`, the views).
//! - `actors`: a replayed trace compiled into per-worker actors (thesis ch. 6, Algorithm 4).
//!
//! Nothing here calls up into the layers above: where a worker must tell the window that it
//! is about to go idle (the adaptive window launches what it holds then), it calls the hook
//! the runtime installed in [`Shared`] (`Shared::on_idle`).

pub(crate) mod actors;
pub(crate) mod context;
pub(crate) mod executor;
pub(crate) mod graph;
pub(crate) mod launch;
mod shared;

pub(crate) use shared::{OnIdle, Shared};
