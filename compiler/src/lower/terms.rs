//! Splitting the right-hand side into nests: one per group of additive terms that share
//! their reduction variables.
//!
//! Semantics (the checker's, as in TACO): the right-hand side is split at its top-level `+`
//! and `-`; each term is summed over the reduction variables it uses, at the term's root. So
//! `y(i) = A(i,j)*x(j) + z(i)` is `Σ_j (A·x) + z` and `y(i) = exp(A(i,j))` is `Σ_j exp(A)`.
//! Terms with the same reduction variables form one nest (keeping `A + B` a single
//! co-iterating loop, since `Σ_R t1 + Σ_R t2 = Σ_R (t1 + t2)`); others become separate
//! nests, each accumulating into the output.

use std::collections::BTreeSet;

use crate::ast::{BinOp, ReduceOp};
use crate::ir::{Access, Expr, VarId};

/// A group of terms summed by one nest, and its reduction variables.
pub struct TermGroup {
    pub expr: Expr,
    pub reductions: BTreeSet<VarId>,
}

/// Splits `rhs` at its top-level `+`/`-` (and negations of them) into signed terms.
fn split_terms(rhs: &Expr, negate: bool, out: &mut Vec<Expr>) {
    match rhs {
        Expr::Binary(op @ (BinOp::Add | BinOp::Sub), l, r) => {
            split_terms(l, negate, out);
            split_terms(r, negate ^ (*op == BinOp::Sub), out);
        }
        Expr::Neg(e) => split_terms(e, !negate, out),
        e if negate => out.push(Expr::Neg(Box::new(e.clone()))),
        e => out.push(e.clone()),
    }
}

/// Variables used by an expression.
pub fn vars_of(e: &Expr, accesses: &[Access]) -> BTreeSet<VarId> {
    e.accesses()
        .iter()
        .flat_map(|a| accesses[*a].level_vars.iter().copied())
        .collect()
}

/// Groups the terms of `rhs` by reduction variables, in order of first appearance.
pub fn group_terms(rhs: &Expr, accesses: &[Access], free: &BTreeSet<VarId>) -> Vec<TermGroup> {
    let mut terms = Vec::new();
    split_terms(rhs, false, &mut terms);
    let mut groups: Vec<TermGroup> = Vec::new();
    for term in terms {
        let reductions: BTreeSet<VarId> =
            vars_of(&term, accesses).difference(free).copied().collect();
        match groups.iter_mut().find(|g| g.reductions == reductions) {
            Some(g) => {
                let prev = std::mem::replace(&mut g.expr, Expr::Const(0.0));
                g.expr = Expr::Binary(BinOp::Add, Box::new(prev), Box::new(term));
            }
            None => groups.push(TermGroup {
                expr: term,
                reductions,
            }),
        }
    }
    groups
}

/// Accesses whose absence makes `e` the fill of reduction `r` (so an iteration where one is
/// absent contributes nothing and is skipped): the operands of the operators the fill
/// annihilates (the factors of a product under `+`, the summands under `min`), and the
/// operand that decides an operation with a constant that keeps the fill (`x / 2`).
pub fn required_factors(e: &Expr, r: ReduceOp, out: &mut Vec<usize>) {
    let fill = r.fill();
    match e {
        Expr::Access(a) => out.push(*a),
        Expr::Neg(x) if -fill == fill => required_factors(x, r, out),
        Expr::Binary(op, a, b) if r.annihilates(*op) => {
            required_factors(a, r, out);
            required_factors(b, r, out);
        }
        // `0/x` is zero only for a non-zero constant `x` (0/0 is NaN).
        Expr::Binary(op, a, b) => match (&**a, &**b) {
            (_, Expr::Const(c)) if r.apply(*op, fill, *c) == fill => required_factors(a, r, out),
            (Expr::Const(c), _) if r.apply(*op, *c, fill) == fill => required_factors(b, r, out),
            _ => {}
        },
        _ => {}
    }
}
