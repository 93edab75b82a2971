//! Issue: a launcher (`TaskLauncher`, what the application builds) validated and made an
//! `Issued` task, the unit the tracer and the window take (ARCHITECTURE §6, module map).
//! Tokens, which name issued tasks for the tracer, are the tracer's (`tracing::replay`): they
//! depend on its history.

pub(crate) mod task;
pub(crate) mod validate;
