//! The window between issuing a task and analysing it.
//!
//! Issued tasks wait here until the window is full, someone needs a result (a read, a
//! fence, a future, dropping the runtime) or, with the adaptive policy (the default), a worker
//! would go idle. The fusion pass solves them ahead in issue order
//! (`ready`: partitions known, not yet launched) and launches the longest fusible prefix as
//! one task; the rest stays for the next pass.

use crate::fusion::Ready;
use crate::runtime::Inner;
use crate::task::Issued;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Weak;

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

/// How many tasks the window holds before a fusion pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowPolicy {
    /// Exactly `n` tasks (or until a read, fence, future or drop): the same decisions on every
    /// run and every rank.
    Fixed(usize),
    /// Up to `max` tasks while the workers are busy; as soon as a worker would go idle (or the
    /// issuer would block) whatever the window holds is launched. A task never waits for the
    /// window to fill, so code that synchronises with running bodies behaves as with a window
    /// of one; the window grows only while the machine has work anyway.
    Adaptive {
        /// The most tasks held (a full window launches its fusible prefix).
        max: usize,
    },
}

impl WindowPolicy {
    /// The most tasks the window holds.
    pub(crate) fn capacity(self) -> usize {
        match self {
            WindowPolicy::Fixed(n) | WindowPolicy::Adaptive { max: n } => n.max(1),
        }
    }
}

/// What a thread that runs point tasks needs to know about an adaptive window without taking
/// the front lock: whether it holds tasks, and who to ask for a flush.
pub(crate) struct Adaptive {
    /// The runtime whose window this is (weak: the workers do not keep it alive).
    pub inner: Weak<Inner>,
    /// Worker threads: fewer outstanding nodes than this means a worker has nothing to run.
    pub workers: usize,
    /// The window holds tasks. Written under the front lock, read by workers.
    pub held: AtomicBool,
    /// A thread found a worker idle but could not take the front lock: whoever holds it
    /// launches the window after letting go of it.
    pub wanted: AtomicBool,
}

impl Adaptive {
    /// True when a node just run leaves `left` outstanding and the window should be launched:
    /// it holds tasks and some worker has nothing to run. Sequentially consistent with the
    /// issuer, which sets `held` before it reads the outstanding count (so one of the two sees
    /// the other and no task is left in the window with every worker idle).
    pub(crate) fn idle(&self, left: usize) -> bool {
        left < self.workers && self.held.load(Ordering::SeqCst)
    }
}
