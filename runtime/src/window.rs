//! The window between issuing a task and analysing it.
//!
//! Issued tasks wait here until the window is full or someone needs a result (a read, a
//! fence, a future, dropping the runtime). The fusion pass solves them ahead in issue order
//! (`ready`: partitions known, not yet launched) and launches the longest fusible prefix as
//! one task; the rest stays for the next pass.

use crate::fusion::Ready;
use crate::task::Issued;
use std::collections::VecDeque;

pub(crate) struct Window {
    /// Solved tasks, in issue order; all of them were issued before every task in `tasks`.
    pub ready: Vec<Ready>,
    /// Issued tasks not solved yet, in issue order.
    pub tasks: VecDeque<Issued>,
    capacity: usize,
}

impl Window {
    pub(crate) fn new(capacity: usize) -> Window {
        Window {
            ready: Vec::new(),
            tasks: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ready.len() + self.tasks.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the window holds as many tasks as it may: time for a fusion pass.
    pub(crate) fn is_full(&self) -> bool {
        self.len() >= self.capacity
    }

    /// Adds a task; true when the window is full and should be analysed.
    pub(crate) fn push(&mut self, t: Issued) -> bool {
        self.tasks.push_back(t);
        self.is_full()
    }

    /// True when a task issued now would be analysed at once (a window of one, empty): the
    /// caller may analyse it without passing it through.
    pub(crate) fn bypass(&self) -> bool {
        self.capacity == 1 && self.is_empty()
    }
}
