//! The kernel IR: concrete index notation made explicit as loop nests.
//!
//! A [`Kernel`] is what [`crate::lower`] produces from a checked statement and what both
//! back ends consume: [`crate::interp`] executes it, [`crate::codegen`] turns it into Rust.
//! Keeping one IR for both is what lets property tests on the interpreter vouch for the
//! generated code's *plan*; the codegen test then checks the translation itself.
//!
//! Shape (TACO's method, ARCHITECTURE §5):
//! - the right-hand side is split into [`Nest`]s, one per group of additive terms that share
//!   their reduction variables (so `y(i) = A(i,j)*x(j) + z(i)` is `y += z` then `y += A·x`);
//! - each nest has a loop order compatible with every operand's mode order; at each loop,
//!   compressed levels indexed by its variable are *iterated* (co-iterated by a merge
//!   [`Formula`]: `*` intersects, `+`/`-` unite) and dense levels are *located*;
//! - the output is a scalar, a dense tensor accumulated in place, or a sparse tensor
//!   assembled from coordinate-ordered entries (directly in loop order, through a dense
//!   workspace, or sorted as a fallback — see [`Assembly`]).
//!
//! Invariants (checked by [`Kernel::verify`]): every level of every access is resolved by
//! exactly one loop, after its parent level; iterated levels are compressed and indexed by
//! their loop's variable; located ones are indexed by a bound variable (dense, or compressed
//! and searched); every formula only names iterators of its own loop.

use std::fmt;

use tessera_formats::{Format, LevelType};

use crate::ast::{BinOp, Func, ReduceOp, Span};

/// Index of a tensor in [`Kernel::tensors`].
pub type TensorId = usize;
/// Index of an index variable in [`Kernel::vars`].
pub type VarId = usize;
/// Index of an access in [`Kernel::accesses`].
pub type AccessId = usize;

/// A tensor named by the statement.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDecl {
    pub name: String,
    pub span: Span,
    pub format: Format,
    /// Position in the kernel's `inputs` argument; `None` for the output.
    pub input_slot: Option<usize>,
}

impl TensorDecl {
    pub fn rank(&self) -> usize {
        self.format.rank()
    }
}

/// Where a loop variable's extent comes from at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DimSource {
    /// `inputs[slot].dims()[mode]`.
    Input { slot: usize, mode: usize },
    /// `out_dims[mode]`.
    Output { mode: usize },
}

/// An index variable.
#[derive(Clone, Debug, PartialEq)]
pub struct VarDecl {
    pub name: String,
    pub span: Span,
    /// Free (appears in the output) or reduction.
    pub free: bool,
    pub dim: DimSource,
}

/// One use of a tensor in the statement, with the variable that indexes each *level*
/// (`level_vars[k]` is the variable of mode `format.mode_order()[k]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub tensor: TensorId,
    pub level_vars: Vec<VarId>,
    pub span: Span,
}

/// A scalar expression over accesses, evaluated once all loop variables are bound.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Access(AccessId),
    Const(f64),
    Neg(Box<Expr>),
    Call(Func, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// The `k`th of [`Kernel::user_functions`] applied to a value.
    UserCall(usize, Box<Expr>),
}

impl Expr {
    /// Every access in the expression, left to right.
    pub fn accesses(&self) -> Vec<AccessId> {
        let mut out = Vec::new();
        self.collect_accesses(&mut out);
        out
    }

    fn collect_accesses(&self, out: &mut Vec<AccessId>) {
        match self {
            Expr::Access(a) => out.push(*a),
            Expr::Const(_) => {}
            Expr::Neg(e) | Expr::Call(_, e) | Expr::UserCall(_, e) => e.collect_accesses(out),
            Expr::Binary(_, l, r) => {
                l.collect_accesses(out);
                r.collect_accesses(out);
            }
        }
    }
}

/// A level of an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelRef {
    pub access: AccessId,
    pub level: usize,
}

/// When the coordinates of a loop are visited, given its iterated levels.
///
/// A formula is monotone (only `All`/`Any` of iterator presence), so once the iterators that
/// are not exhausted can no longer satisfy it, no later coordinate can: the merge stops there.
#[derive(Clone, Debug, PartialEq)]
pub enum Formula {
    /// Every coordinate in the variable's range.
    True,
    /// No coordinate (the term is zero here).
    False,
    /// Where the `n`th iterated level of the loop has the coordinate.
    Iter(usize),
    /// Intersection (multiplication).
    All(Vec<Formula>),
    /// Union (addition, subtraction).
    Any(Vec<Formula>),
}

impl Formula {
    /// Evaluates the formula with `present[n]` telling whether iterator `n` has the coordinate.
    pub fn eval(&self, present: &[bool]) -> bool {
        match self {
            Formula::True => true,
            Formula::False => false,
            Formula::Iter(n) => present[*n],
            Formula::All(fs) => fs.iter().all(|f| f.eval(present)),
            Formula::Any(fs) => fs.iter().any(|f| f.eval(present)),
        }
    }
}

/// How a loop enumerates its variable's coordinates.
#[derive(Clone, Debug, PartialEq)]
pub enum Domain {
    /// The loop body is zero everywhere: the loop is skipped.
    Empty,
    /// `0..dim`; iterated levels (if any) are walked alongside with a pointer each.
    Universe,
    /// The coordinates of the single iterated level, directly (`for p in pos[q]..pos[q+1]`).
    Single,
    /// A k-way merge of the iterated levels, visiting coordinates where the formula holds.
    Merge(Formula),
}

/// One loop of a nest.
#[derive(Clone, Debug, PartialEq)]
pub struct Loop {
    pub var: VarId,
    /// Compressed levels whose variable is this loop's (their parents are already resolved).
    pub iterate: Vec<LevelRef>,
    /// Levels resolved once this loop binds its variable, in dependency order (a level may be
    /// indexed by an outer variable and become locatable only now, when its parent is). Dense
    /// levels are located by offset; a compressed level here is one whose variable was bound
    /// before its parent was resolved — the second mode of a diagonal `A(i,i)` — and is
    /// located by binary search in its segment.
    pub locate: Vec<LevelRef>,
    pub domain: Domain,
}

/// A loop nest that accumulates one group of additive terms into the output.
#[derive(Clone, Debug, PartialEq)]
pub struct Nest {
    pub expr: Expr,
    pub loops: Vec<Loop>,
    /// Loops `acc_depth..` bind only reduction variables: the nest sums them into a scalar
    /// accumulator and writes the output once per iteration of loop `acc_depth - 1`.
    pub acc_depth: usize,
    /// Accesses whose absence makes the whole term zero (factors of the top-level product):
    /// when one is absent the current iteration is skipped, instead of evaluated as zero.
    pub required: Vec<AccessId>,
    /// The output's assembly strategy for this nest.
    pub assembly: Assembly,
}

impl Nest {
    /// Accesses of this nest, excluding the output.
    pub fn accesses(&self) -> Vec<AccessId> {
        self.expr.accesses()
    }
}

/// How a sparse output receives its entries. Every strategy produces entries in a
/// `Vec<(coordinates, value)>` that `Tensor::from_entries` assembles (`pos`/`crd`, then
/// values); they differ in whether the entries already come out sorted.
#[derive(Clone, Debug, PartialEq)]
pub enum Assembly {
    /// Not a sparse output.
    None,
    /// The first loops bind the output's levels in level order and the rest are reductions:
    /// entries come out in storage order, each once.
    InOrder,
    /// The first `flush_depth` loops bind all but the last output level in level order;
    /// the last level's variable is bound deeper. Values accumulate in a dense workspace over
    /// that variable, flushed in coordinate order after each iteration of loop
    /// `flush_depth - 1` (Gustavson's row workspace for SpGEMM).
    Workspace { flush_depth: usize, var: VarId },
    /// The first loops bind every output level's variable, in another order (`A(i,j) =
    /// B(j,i)`), and the rest are reductions: each entry comes out once, in loop order. They
    /// are put in level order by one stable counting sort per level (linear in the entries
    /// plus the level's dimension, TACO's transposition) and appended as `InOrder` ones.
    Scatter,
    /// Entries are produced in any order (possibly repeated) and sorted and summed at the end.
    /// Also the strategy of a `min`/`max` output with a dense level below a compressed one
    /// (`sd`): after assembly, the positions no entry was written to are set to the fill
    /// (assembly pads them with 0).
    Collect,
}

/// What the kernel returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputKind {
    /// A rank-0 tensor with one value.
    Scalar,
    /// All levels dense: zero-initialised and accumulated in place.
    Dense,
    /// At least one compressed level: assembled from entries.
    Sparse,
}

/// An input the kernel transposes once before its loops: given in `from`, iterated in `to`
/// (the kernel's [`TensorDecl::format`]). The kernel accepts the input in either format.
#[derive(Clone, Debug, PartialEq)]
pub struct Repack {
    pub slot: usize,
    pub name: String,
    pub from: Format,
    pub to: Format,
}

/// A lowered statement.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// Inputs first, in argument order, then the output.
    pub tensors: Vec<TensorDecl>,
    pub output: TensorId,
    pub vars: Vec<VarDecl>,
    pub accesses: Vec<Access>,
    /// The output's access (its level variables).
    pub output_access: AccessId,
    pub output_kind: OutputKind,
    pub nests: Vec<Nest>,
    /// `parallelize(v)`: the outermost loop of every nest runs over threads.
    pub parallel: Option<VarId>,
    /// Inputs re-packed into another mode order before the loops, because the mode orders of
    /// the operands as given agree with no loop order (see [`Repack`]).
    pub repacks: Vec<Repack>,
    /// Rust functions of the caller's called in the statement (`tensor!` only), by name; the
    /// generated kernel takes them as a slice of `&dyn Fn(V) -> V` in this order.
    pub user_functions: Vec<String>,
    /// The operator every nest reduces with; its identity is the value of absent entries,
    /// the accumulators' start and a dense output's initial value (see [`crate::semiring`]).
    pub reduce: ReduceOp,
    /// The statement as written, for documentation of the generated code.
    pub source: String,
}

impl Kernel {
    /// Tensor names in the order the kernel takes them as `inputs`.
    pub fn inputs(&self) -> Vec<&str> {
        self.tensors
            .iter()
            .filter(|t| t.input_slot.is_some())
            .map(|t| t.name.as_str())
            .collect()
    }

    /// The output tensor.
    pub fn output_tensor(&self) -> &TensorDecl {
        &self.tensors[self.output]
    }

    /// The level type of one level of an access.
    pub fn level_type(&self, r: LevelRef) -> LevelType {
        self.tensors[self.accesses[r.access].tensor].format.levels()[r.level]
    }

    /// The variable indexing one level of an access.
    pub fn level_var(&self, r: LevelRef) -> VarId {
        self.accesses[r.access].level_vars[r.level]
    }

    /// Whether the block kernel of this kernel stores every cell of a dense output's tile, so
    /// that the tile need not hold zeros first (a plan then launches the output with
    /// `write_all`, which skips zeroing a recycled buffer): one summing nest whose loops
    /// outside the accumulator bind exactly the output's variables (each cell is then stored
    /// once, not added to: `codegen`'s `written_once`), each a dense loop that no operand's
    /// absence cuts short (no required compressed level walked or searched there). So every
    /// cell of the block is visited and assigned, an empty row of row-split SpMV included
    /// (its sum, 0). That the operands' windows hold the block's whole range, where those
    /// loops locate dense levels, the generated kernel tests when it runs (and where they do
    /// not, it fills the tile itself).
    pub fn assigns_every_cell(&self) -> bool {
        let [nest] = &self.nests[..] else {
            return false;
        };
        let out = &self.accesses[self.output_access].level_vars;
        let outer = &nest.loops[..nest.acc_depth.min(nest.loops.len())];
        let cut_short = |r: &LevelRef| {
            nest.required.contains(&r.access)
                && r.access != self.output_access
                && self.level_type(*r) != LevelType::Dense
        };
        self.output_kind == OutputKind::Dense
            && self.reduce == ReduceOp::Sum
            && nest.acc_depth == out.len()
            && outer.len() == out.len()
            && outer.iter().all(|lp| {
                out.contains(&lp.var)
                    && lp.domain == Domain::Universe
                    && !lp.iterate.iter().any(|r| nest.required.contains(&r.access))
                    && !lp.locate.iter().any(cut_short)
            })
    }

    /// The input slot of an access's tensor (`None` for the output).
    pub fn slot(&self, a: AccessId) -> Option<usize> {
        self.tensors[self.accesses[a].tensor].input_slot
    }

    /// Checks the invariants listed in the module documentation; a failure is a bug in
    /// lowering, reported with the nest and loop it concerns.
    pub fn verify(&self) -> Result<(), String> {
        for (n, nest) in self.nests.iter().enumerate() {
            let mut resolved: Vec<usize> = vec![0; self.accesses.len()];
            let mut bound = vec![false; self.vars.len()];
            for (d, lp) in nest.loops.iter().enumerate() {
                let here =
                    |msg: &str| format!("nest {n}, loop {d} ({}): {msg}", self.vars[lp.var].name);
                bound[lp.var] = true;
                for r in &lp.iterate {
                    if !self.level_type(*r).is_sparse() || self.level_var(*r) != lp.var {
                        return Err(here(
                            "iterated level is not a sparse level of this variable",
                        ));
                    }
                    if resolved[r.access] != r.level {
                        return Err(here("iterated level's parent is not resolved"));
                    }
                    resolved[r.access] += 1;
                }
                for r in &lp.locate {
                    if !bound[self.level_var(*r)] {
                        return Err(here("located level's variable is unbound"));
                    }
                    if resolved[r.access] != r.level {
                        return Err(here("located level's parent is not resolved"));
                    }
                    resolved[r.access] += 1;
                }
                let n_iter = lp.iterate.len();
                let ok = match &lp.domain {
                    Domain::Single => n_iter == 1,
                    Domain::Merge(f) => formula_in_range(f, n_iter),
                    Domain::Empty | Domain::Universe => true,
                };
                if !ok {
                    return Err(here("domain does not match the iterated levels"));
                }
            }
            let mut used = nest.accesses();
            if self.output_kind == OutputKind::Dense {
                used.push(self.output_access);
            }
            for a in used {
                if resolved[a] != self.accesses[a].level_vars.len() {
                    return Err(format!("nest {n}: access {a} is not fully resolved"));
                }
            }
            if nest.loops[nest.acc_depth.min(nest.loops.len())..]
                .iter()
                .any(|l| self.vars[l.var].free)
            {
                return Err(format!(
                    "nest {n}: a free variable is inside the accumulator loops"
                ));
            }
        }
        Ok(())
    }
}

fn formula_in_range(f: &Formula, n: usize) -> bool {
    match f {
        Formula::True | Formula::False => true,
        Formula::Iter(i) => *i < n,
        Formula::All(fs) | Formula::Any(fs) => fs.iter().all(|f| formula_in_range(f, n)),
    }
}

/// A readable dump of the loop structure (for `tessera emit --ir` and test failures).
impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "kernel {}", self.source)?;
        for r in &self.repacks {
            writeln!(
                f,
                "repack {} from {} to {} (once, before the loops: its mode order agrees with no loop order)",
                r.name, r.from, r.to
            )?;
        }
        if self.reduce != ReduceOp::Sum {
            writeln!(
                f,
                "reduce with {} (absent entries are {})",
                self.reduce.name(),
                self.reduce.fill()
            )?;
        }
        for (n, nest) in self.nests.iter().enumerate() {
            writeln!(f, "nest {n} ({:?}):", nest.assembly)?;
            for (d, lp) in nest.loops.iter().enumerate() {
                let pad = "  ".repeat(d + 1);
                let lv = |r: &LevelRef| {
                    format!(
                        "{}#{}",
                        self.tensors[self.accesses[r.access].tensor].name, r.level
                    )
                };
                let it: Vec<String> = lp.iterate.iter().map(lv).collect();
                let lo: Vec<String> = lp.locate.iter().map(lv).collect();
                writeln!(
                    f,
                    "{pad}for {} {:?} iterate [{}] locate [{}]{}",
                    self.vars[lp.var].name,
                    lp.domain,
                    it.join(", "),
                    lo.join(", "),
                    if d == nest.acc_depth {
                        "  <- accumulate"
                    } else {
                        ""
                    }
                )?;
            }
        }
        Ok(())
    }
}

/// The part of a kernel's iteration space one block task computes (SuperTaco §4.5.2): a
/// coordinate range per index variable, and which nests run in it.
///
/// A block kernel visits only coordinates inside `bounds`: dense loops run over the range,
/// compressed levels are narrowed to it by binary search, so P blocks together visit what one
/// unsplit run visits (plus a search per visited segment). (The interpreter still allocates a
/// whole-size dense output per block and the caller keeps the block's tile: O(P·|output|)
/// more, to be removed with output offsets.) A nest that does not loop over a
/// split variable (a term without the hoisted reduction variable, like `z(i)` in
/// `y(i) = A(i,j)*x(j) + z(i)` split on `j`) must be counted once, not once per block of that
/// variable: it runs only in the block whose index along that variable is the first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Per index variable ([`Kernel::vars`] order), the coordinates this block covers.
    pub bounds: Vec<std::ops::Range<usize>>,
    /// Per index variable, true when the variable is not split or this is its first block.
    pub first: Vec<bool>,
}

impl Block {
    /// The whole iteration space (the plain kernel).
    pub fn whole(dims: &[usize]) -> Block {
        Block {
            bounds: dims.iter().map(|&d| 0..d).collect(),
            first: vec![true; dims.len()],
        }
    }

    /// True when nest `n` of `k` contributes in this block.
    pub fn runs(&self, nest: &Nest) -> bool {
        self.first
            .iter()
            .enumerate()
            .all(|(v, &first)| first || nest.loops.iter().any(|l| l.var == v))
    }
}
