//! Distribution plans: a checked, scheduled statement lowered to block tasks (SuperTaco §4.5,
//! Legate thesis Fig. 7.2, ARCHITECTURE §5 "Plans").
//!
//! A [`Plan`] is the one place where the distribution decisions live:
//! - the block grid ([`grid`]): the split variables in `order(...)` order, each cut into
//!   equal ranges or at split points, each parallel (free), extended or sequential;
//! - the block task's arguments ([`stores`]): every tensor as stores, each with a privilege
//!   and a partitioning constraint — output tiles aligned with the grid, unsplit operands
//!   broadcast, compressed levels through images, other splits through tensor blocks;
//! - the reductions: extended variables fold partial outputs by a summation tree — with the
//!   statement's reduction, `+` or `min`, `max`, `or` ([`crate::interp::combine`]) — (in
//!   [`exec`] and, through the reduction privilege, in the runtime), sequential ones make a
//!   loop of dependent launches (terms without the hoisted variable
//!   are computed once, in the first block — see [`crate::ir::Block`]);
//! - the sharding key: the `map` variables, or the output tile's variables (owner computes).
//!
//! The kernel inside each block task is the ordinary kernel run on a [`crate::ir::Block`].
//! [`on_runtime`] runs a plan as block tasks on `tessera-runtime`; [`exec`] runs the same
//! blocks on a plain thread pool (the reference the runtime path is tested against).

pub mod exec;
pub mod grid;
pub mod on_runtime;
pub mod stores;

mod display;

use crate::ast::{Directive, Span};
use crate::check::Checked;
use crate::diagnostics::Diagnostic;
use crate::ir::Kernel;
pub use grid::{BlockVar, Grid, Role};
pub use stores::{Arg, Partition, Privilege, StoreKind, StoreRef};

/// A statement as block tasks.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The statement as written.
    pub source: String,
    pub grid: Grid,
    /// The block task's arguments: the output's stores, then each input's.
    pub args: Vec<Arg>,
    pub sharding: Sharding,
    /// How blocks that share output cells combine: the statement's reduction.
    pub reduce: crate::ast::ReduceOp,
}

/// The most blocks a plan's grid may have (every launch is a task per block).
pub const MAX_BLOCKS: usize = 1 << 20;

/// Which rank owns a point task (SuperTaco §4.5.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sharding {
    /// `map(...)`: the point's indices along these grid variables pick its owner.
    Map(Vec<usize>),
    /// Owner computes: the point's output tile (its parallel variables) picks its owner.
    OwnerComputes(Vec<usize>),
}

impl Plan {
    /// True when the schedule distributes the statement at all (`split` makes blocks).
    pub fn is_distributed(&self) -> bool {
        !self.grid.vars.is_empty()
    }

    /// The launch dimensions that pick a point's rank across ranks (the runtime's
    /// `shard_by`): the `map` variables' positions in the launch domain, in `map` order.
    /// `None` for owner computes (the runtime's block sharding of the whole domain) and when no `map` variable is a launch dimension (a
    /// sequential variable's blocks are launches of their own, run by every rank's points).
    pub fn shard_dims(&self) -> Option<Vec<usize>> {
        let Sharding::Map(vars) = &self.sharding else {
            return None;
        };
        let domain = self.grid.domain_vars();
        let dims: Vec<usize> = vars
            .iter()
            .filter_map(|g| domain.iter().position(|d| d == g))
            .collect();
        (!dims.is_empty()).then_some(dims)
    }
}

/// The kernel and plan of a statement written as one text (`expr; A: csr; split(...)`, the
/// form `tensor!` takes). A compiled program of a distributed schedule rebuilds its plan with
/// this when it starts (well under a millisecond), so that the plan has one definition — the
/// compiler's — rather than a serialized copy; errors are rendered diagnostics.
pub fn from_text(text: &str) -> Result<(Kernel, Plan), String> {
    let mut sources = crate::diagnostics::SourceMap::new();
    let base = sources.add("statement", text);
    let render = |d: &Diagnostic| sources.render(d, false);
    let stmt = crate::parse::program(text, base).map_err(|d| render(&d))?;
    // `tensor!` statements may call the caller's functions; the kernel names them and the
    // caller's generated entry point passes them (a CLI statement was checked without them).
    let checked = crate::check::check_tensor_macro(stmt, &crate::check::Dims::new())
        .map_err(|d| render(&d))?;
    let kernel = crate::lower::lower(&checked)
        .map_err(|e| render(&crate::diagnostics::lower_diagnostic(&e)))?;
    let plan = plan(&checked, &kernel).map_err(|d| render(&d))?;
    Ok((kernel, plan))
}

/// A fingerprint of a kernel's IR (FNV-1a of its debug form): a compiled program checks that
/// the plan it rebuilds at start comes from the same kernel as the block entry point it was
/// built with.
pub fn kernel_fingerprint(kernel: &Kernel) -> u64 {
    fnv(format!("{kernel:?}").as_bytes())
}

/// FNV-1a, 64 bits: the hash of plans' fingerprints and task names.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Builds the plan of a checked statement lowered to `kernel`. The checker has validated the
/// names; what a plan cannot express yet is refused here with the directive's span.
pub fn plan(c: &Checked, kernel: &Kernel) -> Result<Plan, Diagnostic> {
    let grid = build_grid(c, kernel)?;
    let args = stores::arguments(kernel, &grid);
    let by_name = |n: &String| grid.vars.iter().position(|b| &b.name == n);
    let sharding = if c.schedule.map.is_empty() {
        Sharding::OwnerComputes(
            (0..grid.vars.len())
                .filter(|&g| grid.vars[g].role == Role::Parallel)
                .collect(),
        )
    } else {
        Sharding::Map(c.schedule.map.iter().filter_map(by_name).collect())
    };
    Ok(Plan {
        source: kernel.source.clone(),
        grid,
        args,
        sharding,
        reduce: kernel.reduce,
    })
}

/// The block variables of the schedule's splits, in `order(...)` order (named ones first,
/// then the rest in the order of their splits).
fn build_grid(c: &Checked, kernel: &Kernel) -> Result<Grid, Diagnostic> {
    let mut vars = Vec::new();
    for split in &c.schedule.splits {
        let span = directive_span(
            c,
            |d| matches!(d, Directive::Split { outer, .. } if outer.name == split.outer),
        );
        let Some(var_id) = kernel.vars.iter().position(|v| v.name == split.var) else {
            return Err(Diagnostic::new(
                format!(
                    "`{}` is itself made by a split; a plan splits each statement variable once",
                    split.var
                ),
                span,
            )
            .label("nested split")
            .hint(format!(
                "split `{}`'s statement variable once into as many ranges as you need",
                split.var
            )));
        };
        let role = if kernel.vars[var_id].free {
            Role::Parallel
        } else if c.schedule.extend.contains(&split.outer) {
            Role::Extend
        } else {
            Role::Sequential
        };
        vars.push(BlockVar {
            name: split.outer.clone(),
            var: split.var.clone(),
            var_id,
            inner: split.inner.clone(),
            kind: split.kind.clone(),
            role,
            span,
        });
    }
    let mut blocks: usize = 1;
    for b in &vars {
        match blocks.checked_mul(b.count()).filter(|&n| n <= MAX_BLOCKS) {
            Some(n) => blocks = n,
            None => {
                return Err(Diagnostic::new(
                    format!("the splits make more than {MAX_BLOCKS} blocks in all"),
                    b.span.clone(),
                )
                .label("too many blocks")
                .hint("use fewer ranges: a block per processor or a few per processor is the usual grain (ranges past a dimension are empty anyway)"));
            }
        }
    }
    if let Some(order) = &c.schedule.order {
        let rank = |b: &BlockVar| {
            order
                .iter()
                .position(|n| *n == b.name)
                .unwrap_or(usize::MAX)
        };
        vars.sort_by_key(rank); // stable: unnamed block variables keep their split order
    }
    Ok(Grid { vars })
}

/// The span of the first schedule directive matching `is`, or the statement's.
fn directive_span(c: &Checked, is: impl Fn(&Directive) -> bool) -> Span {
    c.statement
        .schedule
        .iter()
        .find(|item| is(&item.directive))
        .map(|item| item.span.clone())
        .unwrap_or_else(|| c.statement.assignment.span.clone())
}
