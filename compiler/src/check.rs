//! The checker: turns a parsed [`Statement`] into a [`Checked`] one, or a [`Diagnostic`].
//!
//! It decides which index variables are free (they index the output) and which are reduced,
//! gives every tensor one rank and one format, agrees one dimension per index variable across
//! all its uses (when dimensions are known: from input files in the CLI; the `tensor!` macro
//! knows them only at run time and calls [`crate::bind`] then), and validates the schedule.
//!
//! # Reduction semantics
//! The right-hand side is split into top-level terms at `+` and `-` (through unary minus).
//! Each term is summed over its own reduction variables — those it uses that the output does
//! not. So `y(i) = A(i,j)*x(j) + z(i)` is `y(i) = (Σ_j A(i,j)*x(j)) + z(i)`, as in TACO.
//! Inside a term (products, quotients, functions) the sum is over the whole term:
//! `y(i) = exp(A(i,j))` is `y(i) = Σ_j exp(A(i,j))`.
//!
//! A reduction with another operator, `min[k](e)` (`max`, `or`), must be the whole
//! right-hand side and name exactly the variables it reduces (those of `e` that the output
//! does not have): it is one term, combined with its operator (see [`crate::semiring`]).

use crate::ast::*;
use crate::diagnostics::Diagnostic;
use std::collections::HashMap;
use tessera_formats::Format;

mod schedule;

/// A statement the checker accepted: the contract between the front end and lowering.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    /// The statement as parsed.
    pub statement: Statement,
    /// Every tensor of the statement: the output first, then the inputs in order of first
    /// use on the right-hand side (a tensor used twice appears once).
    pub tensors: Vec<TensorInfo>,
    /// Every index variable: the output's in its index order, then the reduction variables
    /// in order of first use.
    pub vars: Vec<VarInfo>,
    /// The top-level terms of the right-hand side (see the module docs).
    pub terms: Vec<Term>,
    /// The validated schedule.
    pub schedule: Schedule,
    /// The operator the terms are reduced with (`+` unless the right-hand side is `min[k](...)`).
    pub reduce: ReduceOp,
}

/// One tensor of a statement.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub rank: usize,
    /// From `-f NAME:FMT` / `NAME: fmt`; dense in identity mode order when not given.
    pub format: Format,
    pub is_output: bool,
    /// The dimensions, when known at check time.
    pub dims: Option<Vec<usize>>,
    /// Where it is first used.
    pub span: Span,
}

/// One index variable of a statement.
#[derive(Clone, Debug, PartialEq)]
pub struct VarInfo {
    pub name: String,
    /// Its dimension, when known at check time.
    pub dim: Option<usize>,
    /// True when the variable indexes the output; false for a reduction variable.
    pub free: bool,
    /// Where it is first used.
    pub span: Span,
}

/// A top-level term of the right-hand side, summed over `reduction`.
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    /// True when the term is subtracted.
    pub negated: bool,
    pub expr: Expr,
    /// Names of the reduction variables the term uses, in order of first use.
    pub reduction: Vec<String>,
}

/// The schedule, validated: every name refers to a real variable.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedule {
    pub splits: Vec<Split>,
    /// The order of the block loops (outer variables of splits), if given.
    pub order: Option<Vec<String>>,
    /// Output-extension (parallel-hoisted) reduction block variables.
    pub extend: Vec<String>,
    /// Mapping variables (block variables that choose a block's owner).
    pub map: Vec<String>,
    /// The kernel loop to run over threads: a free statement variable (`parallelize(io)` of
    /// a split `i` names `i`).
    pub parallelize: Option<String>,
}

/// `split(var, outer, inner, kind)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    pub var: String,
    pub outer: String,
    pub inner: String,
    pub kind: SplitKind,
}

impl Checked {
    pub fn output(&self) -> &TensorInfo {
        &self.tensors[0]
    }

    /// The input tensors (everything but the output), in order of first use.
    pub fn inputs(&self) -> &[TensorInfo] {
        &self.tensors[1..]
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    pub fn var(&self, name: &str) -> Option<&VarInfo> {
        self.vars.iter().find(|v| v.name == name)
    }

    /// The index-variable names of every use of tensor `name`, left-hand side first.
    pub fn uses(&self, name: &str) -> Vec<&Access> {
        let mut out = Vec::new();
        let a = &self.statement.assignment;
        if a.lhs.tensor.name == name {
            out.push(&a.lhs);
        }
        visit_accesses(&a.rhs, &mut |acc| {
            if acc.tensor.name == name {
                out.push(acc);
            }
        });
        out
    }
}

/// Calls `f` on every tensor access of `e`, left to right.
pub fn visit_accesses<'a>(e: &'a Expr, f: &mut impl FnMut(&'a Access)) {
    match &e.kind {
        ExprKind::Access(a) => f(a),
        ExprKind::Const(_) => {}
        ExprKind::Neg(x) | ExprKind::Call(_, x) | ExprKind::UserCall(_, x) => visit_accesses(x, f),
        ExprKind::Binary(_, a, b) => {
            visit_accesses(a, f);
            visit_accesses(b, f);
        }
        ExprKind::Reduce(_, _, x) => visit_accesses(x, f),
    }
}

/// Known dimensions of tensors, by name (may be empty).
pub type Dims = HashMap<String, Vec<usize>>;

/// Checks a statement; `dims` gives the dimensions of the tensors that are known now.
pub fn check(statement: Statement, dims: &Dims) -> Result<Checked, Diagnostic> {
    if let Some((name, arg)) = first_user_call(&statement.assignment.rhs) {
        return Err(crate::parse::unknown_function(name, arg.span.clone()));
    }
    check_tensor_macro(statement, dims)
}

/// As [`check`], also accepting calls of other functions (`f(x(i))`), which `tensor!` turns
/// into calls of the Rust functions of those names in scope.
pub fn check_tensor_macro(statement: Statement, dims: &Dims) -> Result<Checked, Diagnostic> {
    let a = &statement.assignment;
    let mut accesses = vec![&a.lhs];
    visit_accesses(&a.rhs, &mut |acc| accesses.push(acc));

    let ranks = check_ranks(&accesses)?;
    check_output(a)?;
    let vars = index_vars(a, &accesses)?;
    let reduce = check_reduction(a, &vars)?;
    let terms = match &a.rhs.kind {
        ExprKind::Reduce(_, _, body) => vec![term(body, false, &vars)],
        _ => split_terms(&a.rhs, false, &vars),
    };
    let formats = check_formats(&statement.formats, &ranks)?;
    let var_dims = agree_dims(&accesses, dims)?;

    let tensors = ranks
        .iter()
        .map(|(name, rank, span)| TensorInfo {
            name: name.clone(),
            rank: *rank,
            format: formats
                .get(name.as_str())
                .cloned()
                .unwrap_or_else(|| Format::dense(*rank)),
            is_output: *name == a.lhs.tensor.name,
            dims: dims.get(name).cloned(),
            span: span.clone(),
        })
        .collect();
    let vars: Vec<VarInfo> = vars
        .into_iter()
        .map(|(name, free, span)| VarInfo {
            dim: var_dims.get(&name).map(|d| d.0),
            name,
            free,
            span,
        })
        .collect();
    let schedule = schedule::check_schedule(&statement.schedule, &vars)?;
    Ok(Checked {
        statement,
        tensors,
        vars,
        terms,
        schedule,
        reduce,
    })
}

/// The reduction operator, after checking that a `min[k](...)` form is the whole right-hand
/// side, is not accumulated with `+=`, and names exactly the variables it reduces.
fn check_reduction(a: &Assignment, vars: &[(String, bool, Span)]) -> Result<ReduceOp, Diagnostic> {
    let mut nested = None;
    find_nested_reduce(&a.rhs, true, &mut nested);
    if let Some(span) = nested {
        return Err(Diagnostic::new(
            "a `min[..]`/`max[..]`/`or[..]` reduction must be the whole right-hand side",
            span,
        )
        .label("inside another expression")
        .hint(
            "write it as `y(i) = min[j](...)`; to combine two values element-wise use `min(a, b)`",
        ));
    }
    let ExprKind::Reduce(op, named, body) = &a.rhs.kind else {
        return Ok(ReduceOp::Sum);
    };
    if a.accumulate {
        return Err(Diagnostic::new(
            format!(
                "`+=` adds to the output, which a `{}` reduction does not do",
                op.name()
            ),
            a.rhs.span.clone(),
        )
        .label(format!("a `{}` reduction", op.name()))
        .related(a.lhs.span.clone(), "accumulated here")
        .hint("write `=`"));
    }
    let free = |n: &str| vars.iter().any(|(v, f, _)| v == n && *f);
    let mut used: Vec<&Ident> = Vec::new();
    visit_accesses(body, &mut |acc| {
        for i in &acc.indices {
            if !free(&i.name) && !used.iter().any(|u| u.name == i.name) {
                used.push(i);
            }
        }
    });
    for (k, n) in named.iter().enumerate() {
        if let Some(first) = named[..k].iter().find(|m| m.name == n.name) {
            return Err(
                Diagnostic::new(format!("`{}` is named twice", n.name), n.span.clone())
                    .label("again here")
                    .related(first.span.clone(), "first here"),
            );
        }
        if free(&n.name) {
            return Err(Diagnostic::new(
                format!("`{}` indexes the output, so it cannot be reduced", n.name),
                n.span.clone(),
            )
            .label("an output index")
            .related(a.lhs.span.clone(), "the output"));
        }
        if !used.iter().any(|u| u.name == n.name) {
            return Err(Diagnostic::new(
                format!("`{}` is not used inside the reduction", n.name),
                n.span.clone(),
            )
            .label("not used")
            .hint("name only the index variables the reduced expression uses"));
        }
    }
    if let Some(u) = used
        .iter()
        .find(|u| !named.iter().any(|n| n.name == u.name))
    {
        let mut all: Vec<&str> = named.iter().map(|n| n.name.as_str()).collect();
        all.push(&u.name);
        return Err(Diagnostic::new(
            format!(
                "`{}` is reduced (it does not index the output) but not named in `{}[...]`",
                u.name,
                op.name()
            ),
            u.span.clone(),
        )
        .label("reduced here")
        .hint(format!("write `{}[{}](...)`", op.name(), all.join(","))));
    }
    Ok(*op)
}

/// The first call of a function that is not built in, with its argument.
pub fn first_user_call(e: &Expr) -> Option<(&Ident, &Expr)> {
    match &e.kind {
        ExprKind::UserCall(name, x) => Some((name, x)),
        ExprKind::Access(_) | ExprKind::Const(_) => None,
        ExprKind::Neg(x) | ExprKind::Call(_, x) | ExprKind::Reduce(_, _, x) => first_user_call(x),
        ExprKind::Binary(_, a, b) => first_user_call(a).or_else(|| first_user_call(b)),
    }
}

/// The span of a reduction that is not the root of the right-hand side.
fn find_nested_reduce(e: &Expr, root: bool, found: &mut Option<Span>) {
    if found.is_some() {
        return;
    }
    match &e.kind {
        ExprKind::Reduce(_, _, body) => {
            if !root {
                *found = Some(e.span.clone());
            }
            find_nested_reduce(body, false, found);
        }
        ExprKind::Access(_) | ExprKind::Const(_) => {}
        ExprKind::Neg(x) | ExprKind::Call(_, x) | ExprKind::UserCall(_, x) => {
            find_nested_reduce(x, false, found)
        }
        ExprKind::Binary(_, a, b) => {
            find_nested_reduce(a, false, found);
            find_nested_reduce(b, false, found);
        }
    }
}

/// One rank per tensor; tensors in order (output, then first use). Rejects a repeated index
/// in the output (`A(i,i) = ...`); on the right-hand side `A(i,i)` is the diagonal.
fn check_ranks(accesses: &[&Access]) -> Result<Vec<(String, usize, Span)>, Diagnostic> {
    let mut out: Vec<(String, usize, Span)> = Vec::new();
    for (n_acc, acc) in accesses.iter().enumerate() {
        let n = acc.indices.len();
        for (k, i) in acc.indices.iter().enumerate() {
            if n_acc > 0 {
                break;
            }
            if let Some(first) = acc.indices[..k].iter().find(|j| j.name == i.name) {
                return Err(Diagnostic::new(
                    format!(
                        "index variable `{}` appears twice in one access of `{}`",
                        i.name, acc.tensor.name
                    ),
                    i.span.clone(),
                )
                .label("repeated here")
                .related(first.span.clone(), "first here")
                .hint("the output needs a distinct variable per mode; a diagonal is read, not written: `x(i) = A(i,i)`"));
            }
        }
        match out.iter().find(|(name, _, _)| *name == acc.tensor.name) {
            Some((_, rank, span)) if *rank != n => {
                return Err(Diagnostic::new(
                    format!(
                        "`{}` is used with {n} indices here but {rank} before",
                        acc.tensor.name
                    ),
                    acc.span.clone(),
                )
                .label(format!("{n} indices"))
                .related(span.clone(), format!("{rank} indices"))
                .hint("a tensor has one rank: use it with the same number of indices everywhere"))
            }
            Some(_) => {}
            None => out.push((acc.tensor.name.clone(), n, acc.span.clone())),
        }
    }
    Ok(out)
}

/// The output must not be read on the right-hand side (use `+=`).
fn check_output(a: &Assignment) -> Result<(), Diagnostic> {
    let mut err = None;
    visit_accesses(&a.rhs, &mut |acc| {
        if err.is_none() && acc.tensor.name == a.lhs.tensor.name {
            err = Some(
                Diagnostic::new(
                    format!(
                        "the output `{}` also appears on the right-hand side",
                        acc.tensor.name
                    ),
                    acc.span.clone(),
                )
                .label("read here")
                .related(a.lhs.span.clone(), "written here")
                .hint(format!(
                    "to add to the existing values of `{}`, write `{} += ...`",
                    acc.tensor.name,
                    a.lhs.span_text_hint()
                )),
            );
        }
    });
    err.map_or(Ok(()), Err)
}

trait LhsHint {
    fn span_text_hint(&self) -> String;
}

impl LhsHint for Access {
    fn span_text_hint(&self) -> String {
        if self.indices.is_empty() {
            self.tensor.name.clone()
        } else {
            let idx: Vec<&str> = self.indices.iter().map(|i| i.name.as_str()).collect();
            format!("{}({})", self.tensor.name, idx.join(","))
        }
    }
}

/// Free variables (the output's, in order) then reduction variables (in order of first use).
fn index_vars(
    a: &Assignment,
    accesses: &[&Access],
) -> Result<Vec<(String, bool, Span)>, Diagnostic> {
    let tensor_names: Vec<&str> = accesses.iter().map(|a| a.tensor.name.as_str()).collect();
    let mut vars: Vec<(String, bool, Span)> = Vec::new();
    for acc in accesses {
        for i in &acc.indices {
            if tensor_names.contains(&i.name.as_str()) {
                return Err(Diagnostic::new(
                    format!(
                        "`{}` is used both as an index variable and as a tensor",
                        i.name
                    ),
                    i.span.clone(),
                )
                .label("index variable")
                .hint("rename the tensor or the index variable"));
            }
            if !vars.iter().any(|(n, _, _)| *n == i.name) {
                let free = a.lhs.indices.iter().any(|l| l.name == i.name);
                vars.push((i.name.clone(), free, i.span.clone()));
            }
        }
    }
    // Every output index needs a use on the right-hand side: that is where its range comes from.
    for i in &a.lhs.indices {
        let mut used = false;
        visit_accesses(&a.rhs, &mut |acc| {
            used |= acc.indices.iter().any(|j| j.name == i.name)
        });
        if !used {
            return Err(Diagnostic::new(
                format!(
                    "output index `{}` does not appear on the right-hand side",
                    i.name
                ),
                i.span.clone(),
            )
            .label("its range is unknown")
            .hint(format!(
                "every index of the output must index some input, e.g. `x({})`",
                i.name
            )));
        }
    }
    Ok(vars)
}

/// Splits the right-hand side at top-level `+`/`-` and finds each term's reduction variables.
fn split_terms(e: &Expr, negated: bool, vars: &[(String, bool, Span)]) -> Vec<Term> {
    match &e.kind {
        ExprKind::Binary(op @ (BinOp::Add | BinOp::Sub), a, b) => {
            let mut out = split_terms(a, negated, vars);
            out.extend(split_terms(b, negated ^ (*op == BinOp::Sub), vars));
            out
        }
        ExprKind::Neg(x) => split_terms(x, !negated, vars),
        ExprKind::Reduce(_, _, body) => split_terms(body, negated, vars),
        _ => vec![term(e, negated, vars)],
    }
}

/// One term, summed (or reduced) over the variables it uses that the output does not have.
fn term(e: &Expr, negated: bool, vars: &[(String, bool, Span)]) -> Term {
    let mut reduction: Vec<String> = Vec::new();
    visit_accesses(e, &mut |acc| {
        for i in &acc.indices {
            let free = vars.iter().any(|(n, f, _)| *n == i.name && *f);
            if !free && !reduction.contains(&i.name) {
                reduction.push(i.name.clone());
            }
        }
    });
    Term {
        negated,
        expr: e.clone(),
        reduction,
    }
}

/// Resolves every `-f` against the rank of the tensor it names.
fn check_formats(
    specs: &[FormatSpec],
    ranks: &[(String, usize, Span)],
) -> Result<HashMap<String, Format>, Diagnostic> {
    let mut out: HashMap<String, Format> = HashMap::new();
    let mut seen: HashMap<&str, &Span> = HashMap::new();
    for spec in specs {
        let name = spec.tensor.name.as_str();
        let Some((_, rank, _)) = ranks.iter().find(|(n, _, _)| n == name) else {
            let known: Vec<&str> = ranks.iter().map(|(n, _, _)| n.as_str()).collect();
            return Err(Diagnostic::new(
                format!("a format is given for `{name}`, which is not a tensor of the statement"),
                spec.tensor.span.clone(),
            )
            .label("unknown tensor")
            .hint(format!("the tensors are: {}", known.join(", "))));
        };
        if let Some(first) = seen.insert(name, &spec.span) {
            return Err(Diagnostic::new(
                format!("two formats are given for `{name}`"),
                spec.span.clone(),
            )
            .label("second format")
            .related(first.clone(), "first format"));
        }
        let text_span = spec.format_span.clone();
        let format = Format::parse(&spec.format, *rank).map_err(|e| {
            Diagnostic::new(format!("bad format for `{name}`: {e}"), text_span)
                .label(format!("`{name}` has rank {rank}"))
                .hint("formats are `d`/`s`/`q` per level, optionally `:mode,order` (e.g. `ds:1,0`, COO `sq`), or dense, csr, csc, dcsr, csf, coo")
        })?;
        out.insert(name.to_string(), format);
    }
    Ok(out)
}

/// Agrees one dimension per index variable across all uses whose tensor dimensions are known.
/// Returns, per variable, its dimension and the access that fixed it.
fn agree_dims<'a>(
    accesses: &[&'a Access],
    dims: &Dims,
) -> Result<HashMap<String, (usize, &'a Access, usize)>, Diagnostic> {
    let mut out: HashMap<String, (usize, &Access, usize)> = HashMap::new();
    for acc in accesses {
        let Some(d) = dims.get(&acc.tensor.name) else {
            continue;
        };
        if d.len() != acc.indices.len() {
            return Err(Diagnostic::new(
                format!(
                    "`{}` has {} modes, but is used with {} indices",
                    acc.tensor.name,
                    d.len(),
                    acc.indices.len()
                ),
                acc.span.clone(),
            )
            .label(format!("dimensions {d:?}"))
            .hint("use one index per mode of the tensor"));
        }
        for (mode, (i, &n)) in acc.indices.iter().zip(d).enumerate() {
            match out.get(&i.name) {
                Some((m, first, first_mode)) if *m != n => {
                    return Err(Diagnostic::new(
                        format!(
                            "dimension mismatch for index `{}`: {} in mode {} of `{}` but {} in mode {} of `{}`",
                            i.name, n, mode, acc.tensor.name, m, first_mode, first.tensor.name
                        ),
                        i.span.clone(),
                    )
                    .label(format!("{n} here"))
                    .related(first.indices[*first_mode].span.clone(), format!("{m} here"))
                    .hint("every use of an index variable must range over the same dimension"))
                }
                Some(_) => {}
                None => {
                    out.insert(i.name.clone(), (n, acc, mode));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
