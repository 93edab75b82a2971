//! Futures: scalar results of tasks that later tasks take as arguments without the caller
//! blocking.

use crate::dtype::Scalar;
use crate::error::{Result, RuntimeError};
use crate::execute::graph::Node;
use crate::runtime::Inner;
use std::sync::{Arc, OnceLock, Weak};

pub(crate) struct FutureCell {
    pub value: OnceLock<std::result::Result<Scalar, RuntimeError>>,
    /// The node that sets the value (absent for ready futures).
    pub node: OnceLock<Arc<Node>>,
    pub rt: Weak<Inner>,
    /// Launch number of the producing task (tracing's tokens hash how far back it was).
    pub launched_as: OnceLock<u64>,
}

/// A scalar a task will produce.
#[derive(Clone)]
pub struct Future {
    pub(crate) cell: Arc<FutureCell>,
}

impl Future {
    pub(crate) fn pending(rt: Weak<Inner>) -> Future {
        Future {
            cell: Arc::new(FutureCell {
                value: OnceLock::new(),
                node: OnceLock::new(),
                rt,
                launched_as: OnceLock::new(),
            }),
        }
    }

    /// A future that already holds `v`.
    pub fn ready(v: impl Into<Scalar>) -> Future {
        let cell = FutureCell {
            value: OnceLock::new(),
            node: OnceLock::new(),
            rt: Weak::new(),
            launched_as: OnceLock::new(),
        };
        let _ = cell.value.set(Ok(v.into()));
        Future {
            cell: Arc::new(cell),
        }
    }

    /// The value if it is known, without blocking.
    pub fn try_get(&self) -> Option<Result<Scalar>> {
        self.cell.value.get().cloned()
    }

    /// Blocks until the value is known (issuing any tasks still in the window first).
    pub fn get(&self) -> Result<Scalar> {
        if let Some(v) = self.try_get() {
            if let Some(rt) = self.cell.rt.upgrade() {
                rt.flush_known()?;
            }
            return v;
        }
        if let Some(rt) = self.cell.rt.upgrade() {
            rt.flush()?;
            // The node that sets the value signals when it completes; no other node's
            // completion need wake this wait (without one known, every completion does).
            let node = self.cell.node.get();
            let _any = match node {
                Some(n) => {
                    n.watch();
                    None
                }
                None => Some(rt.shared.completion.watch_any()),
            };
            rt.wait_helping(&rt.shared.completion, || self.cell.value.get().is_some());
        }
        self.try_get()
            .expect("a future's task sets it before the runtime shuts down")
    }
}

impl std::fmt::Debug for Future {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Future({:?})", self.try_get())
    }
}
