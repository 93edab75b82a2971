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
//! Execution does not call the runtime, the window or the tracer: where a worker must tell
//! the window that a node has run (the adaptive window launches what it holds when a worker
//! is about to go idle), it calls the hook the runtime installed in [`Shared`]
//! (`Shared::on_node_ran`). It does call into `fusion` (a fused task's point runs through
//! `fusion::run`, its sub-tasks' failures through `fusion::failure`) and uses `issue::task`'s
//! argument types, as task bodies see them.

pub(crate) mod actors;
pub(crate) mod context;
pub(crate) mod executor;
pub(crate) mod graph;
pub(crate) mod launch;
mod shared;

pub(crate) use shared::{OnNodeRan, RunningNode, Shared};
