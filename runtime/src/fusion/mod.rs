//! Task fusion (thesis ch. 4 §4.2–§4.4): the pass between the window and the dependence
//! analysis.
//!
//! Tasks in the window are solved ahead, in issue order ([`Ready`]: launch domain and each
//! argument's partition known, nothing scheduled). The pass takes the longest prefix of the
//! solved tasks that the four fusion constraints allow ([`constraints`]), decides which of
//! its stores are temporaries ([`temporaries`], Definition 4), looks the decision up by a
//! canonical renaming of the window ([`memo`]), builds one task from the prefix ([`build`]),
//! and runs its points by calling the sub-task bodies in order or, when every sub-task is
//! element-wise, one loop over cache-sized chunks ([`kernel`], [`run`]).

pub(crate) mod build;
pub(crate) mod constraints;
pub(crate) mod failure;
pub(crate) mod kernel;
pub(crate) mod memo;
pub(crate) mod run;
pub(crate) mod scalar;
pub(crate) mod scratch;
pub(crate) mod temporaries;

pub(crate) use build::{FusedShape, SubShape};

use crate::execute::launch::LaunchArg;
use crate::issue::task::{Args, Issued};
use crate::partition::Domain;

/// A task solved ahead in the window: its launch domain and each argument's partition and
/// sub-stores are known; it has not been given to the dependence analysis.
pub(crate) struct Ready {
    pub issued: Issued,
    pub domain: Domain,
    pub token: u64,
    pub args: Args<LaunchArg>,
    /// Each argument's partition (`None` for unbound outputs).
    pub parts: crate::solver::Parts,
}

impl Ready {
    /// Empties a launched task for its box to be reused ([`crate::window::Window::give_back`]):
    /// drops every store, future, scalar and constraint it holds now, not when the box is next
    /// filled. What stays is its name and body (the registration's, which outlive any task);
    /// only the box's allocation is reused ([`crate::window::rebox`] replaces the whole value).
    pub(crate) fn hollow(&mut self) {
        let t = &mut self.issued;
        t.args.clear();
        t.constraints.clear();
        t.scalars.clear();
        t.result = None;
        t.shard = None;
        t.kernel = None;
        self.args.clear();
        self.parts.clear();
    }
}

/// What the pass does with a window: fuse, and how.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FusionConfig {
    /// Fuse at all (off: every task is launched alone, as issued).
    pub enabled: bool,
    /// Reuse fusion decisions for windows isomorphic to one seen before.
    pub memo: bool,
}
