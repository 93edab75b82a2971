//! The window between issuing a task and analysing it.
//!
//! Issued tasks wait here until the window is full or someone needs a result. With the default
//! size of one, analysis follows issue immediately. This is the seam for task fusion: a fusion
//! pass sees the whole window and may replace a prefix of it with one fused task before
//! analysis.

use crate::task::Issued;
use std::collections::VecDeque;

pub(crate) struct Window {
    tasks: VecDeque<Issued>,
    capacity: usize,
}

impl Window {
    pub(crate) fn new(capacity: usize) -> Window {
        Window {
            tasks: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Adds a task; true when the window is full and should be analysed.
    pub(crate) fn push(&mut self, t: Issued) -> bool {
        self.tasks.push_back(t);
        self.tasks.len() >= self.capacity
    }

    /// True when a task issued now would be analysed at once (a window of one, empty): the
    /// caller may analyse it without passing it through.
    pub(crate) fn bypass(&self) -> bool {
        self.capacity == 1 && self.tasks.is_empty()
    }

    /// The oldest task, in issue order.
    pub(crate) fn pop(&mut self) -> Option<Issued> {
        self.tasks.pop_front()
    }
}
