//! The block grid: the outer variables of the schedule's splits, in `order(...)` order, each
//! cut into equal ranges or at split points, and what each one does (SuperTaco §4.5.1).

use std::ops::Range;

use crate::ast::{Span, SplitKind};
use crate::ir::{Block, Kernel, VarId};

/// What a block variable's blocks are to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// It comes from a free variable: its blocks own disjoint tiles of the output and run in
    /// parallel (a dimension of the launch domain).
    Parallel,
    /// An output-extended reduction variable (`extend`): its blocks run in parallel, each
    /// producing a partial output, folded in a fixed order (SuperTaco §4.5.4).
    Extend,
    /// A reduction variable that is not extended: hoisted out as a sequential loop of
    /// dependent launches, each adding its part into the output.
    Sequential,
}

/// One block variable: the outer variable of a split.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockVar {
    /// The block variable's name (`io`).
    pub name: String,
    /// The split statement variable (`i`) and its id in the kernel.
    pub var: String,
    pub var_id: VarId,
    /// The inner variable's name (`ii`).
    pub inner: String,
    pub kind: SplitKind,
    pub role: Role,
    /// The `split` directive.
    pub span: Span,
}

impl BlockVar {
    /// How many blocks the variable has (independent of the dimension: more ranges than
    /// coordinates give empty blocks).
    pub fn count(&self) -> usize {
        match &self.kind {
            SplitKind::Ranges(n) => *n,
            SplitKind::Points(p) => p.len() + 1,
        }
    }

    /// The coordinates of block `b` of a dimension of extent `dim`. Equal ranges are tiles of
    /// `ceil(dim / n)` (the runtime's tiling), clipped to the dimension; split points beyond the
    /// dimension give empty blocks.
    pub fn range(&self, b: usize, dim: usize) -> Range<usize> {
        match &self.kind {
            SplitKind::Ranges(n) => {
                let tile = dim.div_ceil((*n).max(1));
                (b * tile).min(dim)..((b + 1) * tile).min(dim)
            }
            SplitKind::Points(p) => {
                let lo = if b == 0 { 0 } else { p[b - 1] };
                let hi = p.get(b).copied().unwrap_or(dim);
                lo.min(dim)..hi.min(dim)
            }
        }
    }
}

/// The block variables in loop order, outermost first.
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    pub vars: Vec<BlockVar>,
}

impl Grid {
    /// Grid positions of the variables that form the launch domain (parallel and extended),
    /// in grid order.
    pub fn domain_vars(&self) -> Vec<usize> {
        self.positions(|r| r != Role::Sequential)
    }

    /// Grid positions of the sequentially hoisted variables, outermost first.
    pub fn sequential_vars(&self) -> Vec<usize> {
        self.positions(|r| r == Role::Sequential)
    }

    fn positions(&self, keep: impl Fn(Role) -> bool) -> Vec<usize> {
        (0..self.vars.len())
            .filter(|&g| keep(self.vars[g].role))
            .collect()
    }

    /// The launch domain's extents (one per domain variable; `[1]` when there is none).
    pub fn domain(&self) -> Vec<usize> {
        let d: Vec<usize> = self
            .domain_vars()
            .iter()
            .map(|&g| self.vars[g].count())
            .collect();
        if d.is_empty() {
            vec![1]
        } else {
            d
        }
    }

    /// The number of launches: the product of the sequential variables' block counts.
    pub fn launches(&self) -> usize {
        self.sequential_vars()
            .iter()
            .map(|&g| self.vars[g].count())
            .product()
    }

    /// The number of point tasks in one launch.
    pub fn points(&self) -> usize {
        self.domain().iter().product()
    }

    /// The full grid index (one block index per grid variable) of point `point` of launch
    /// `launch`, both linear in row-major order.
    pub fn index(&self, launch: usize, point: usize) -> Vec<usize> {
        let mut idx = vec![0; self.vars.len()];
        let mut fill = |vars: Vec<usize>, mut linear: usize| {
            for &g in vars.iter().rev() {
                let n = self.vars[g].count();
                idx[g] = linear % n;
                linear /= n;
            }
        };
        fill(self.sequential_vars(), launch);
        fill(self.domain_vars(), point);
        idx
    }

    /// The block of `kernel` at grid index `idx`, given every index variable's extent.
    pub fn block(&self, kernel: &Kernel, dims: &[usize], idx: &[usize]) -> Block {
        let mut block = Block::whole(dims);
        debug_assert_eq!(kernel.vars.len(), dims.len());
        for (g, bv) in self.vars.iter().enumerate() {
            block.bounds[bv.var_id] = bv.range(idx[g], dims[bv.var_id]);
            block.first[bv.var_id] = idx[g] == 0;
        }
        block
    }
}
