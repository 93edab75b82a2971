//! The syntax tree of a Tessera statement, as the parser produces it.
//!
//! Every node carries the byte span of the source it came from, so that the checker,
//! lowering and the `tensor!` macro can point at the exact text an error is about.
//! This is the contract between the front end (`grammar`, `check`) and the middle end
//! (`lower`): lowering consumes a [`Statement`] that `check` has accepted.

use std::ops::Range;

/// A byte range into the source text.
pub type Span = Range<usize>;

/// A name with the span where it was written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// `T(i, j, ...)`; a scalar (rank-0) access has no indices and is written without parentheses.
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub tensor: Ident,
    pub indices: Vec<Ident>,
    pub span: Span,
}

/// Binary operators: the arithmetic ones written infix, and the element-wise functions of two
/// arguments (`min(a, b)`, `lt(a, b)`, ...), which lower exactly like them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
    Pow,
    /// Comparisons give 1 where they hold and 0 elsewhere.
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    /// Logical and/or on truth values (non-zero is true), giving 1 or 0.
    And,
    Or,
}

/// Element-wise functions of one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    Exp,
    Log,
    Sqrt,
    Abs,
    Sin,
    Cos,
    Tanh,
}

/// The operator a reduction combines its terms with (`min[k](...)`; `+` by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    #[default]
    Sum,
    Min,
    Max,
    Or,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Access(Access),
    Const(f64),
    Neg(Box<Expr>),
    Call(Func, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `min[k, l](e)`: `e` reduced with `op` over the listed variables; only the whole
    /// right-hand side may be one (the checker enforces it).
    Reduce(ReduceOp, Vec<Ident>, Box<Expr>),
    /// `f(e)` for a name that is no built-in function: in `tensor!` a Rust function of the
    /// value type in scope (`fn f(x: f64) -> f64`); elsewhere an error.
    UserCall(Ident, Box<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

/// `lhs = rhs` or `lhs += rhs`.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub lhs: Access,
    pub accumulate: bool,
    pub rhs: Expr,
    pub span: Span,
}

/// A format given to one tensor on the command line or in `tensor!`: `A:ds:1,0`, `A:csr`.
/// Resolved against the tensor's rank by `tessera_formats::Format::parse`.
#[derive(Clone, Debug, PartialEq)]
pub struct FormatSpec {
    pub tensor: Ident,
    /// The text after `NAME:`, e.g. `ds:1,0`.
    pub format: String,
    /// Where that text is.
    pub format_span: Span,
    pub span: Span,
}

/// How a split divides an index variable's range.
#[derive(Clone, Debug, PartialEq)]
pub enum SplitKind {
    /// N equal ranges.
    Ranges(usize),
    /// Explicit split points (each a start of a range after the first).
    Points(Vec<usize>),
}

/// One directive of the schedule language (SuperTaco §4.1/§4.5 plus kernel choices).
#[derive(Clone, Debug, PartialEq)]
pub enum Directive {
    /// `split(i, io, ii, 4)` / `split(i, io, ii, [10, 20])`: block variable `outer`, element variable `inner`.
    Split {
        var: Ident,
        outer: Ident,
        inner: Ident,
        kind: SplitKind,
    },
    /// `order(io, jo)`: the order of the block loops.
    Order(Vec<Ident>),
    /// `extend(ko)`: an output-extension (parallel-hoisted) reduction variable.
    Extend(Ident),
    /// `map(io, jo)`: the mapping variables that choose a block's owner.
    Map(Vec<Ident>),
    /// `parallelize(i)`: run this loop of the kernel over threads.
    Parallelize(Ident),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleItem {
    pub directive: Directive,
    pub span: Span,
}

/// A whole compilation unit: one assignment, its formats and its schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Statement {
    pub assignment: Assignment,
    pub formats: Vec<FormatSpec>,
    pub schedule: Vec<ScheduleItem>,
}
