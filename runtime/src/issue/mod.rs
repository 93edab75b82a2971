//! Issue: a launcher (`TaskLauncher`, what the application builds) validated and made an
//! `Issued` task, the unit the tracer and the window take (ARCHITECTURE §6, module map).
//! The tracer's tokens, which name issued tasks for repeat finding, are the tracer's
//! (`Tracing::token`: they depend on its history); `Issued::token` (`task.rs`) is the solved
//! task's, kept in recordings and checked across ranks.

pub(crate) mod task;
pub(crate) mod validate;
