//! Merge formulas: at one loop, which coordinates must be visited.
//!
//! This is TACO's merge lattice in its boolean form. An access iterated at the loop is
//! present only where its level has the coordinate; everything else (dense levels, operands
//! the loop does not index) is present everywhere. Multiplication intersects, addition and
//! subtraction unite; functions that map zero to zero (`abs`, `sqrt`, negation) keep their
//! operand's sparsity, the others (`exp`, `log`) and a non-zero constant fill the whole range.
//! A quotient keeps its numerator's sparsity only when its denominator is a non-zero
//! constant (otherwise `0/0` would be skipped where the reference gives NaN).

use crate::ast::{BinOp, Func};
use crate::ir::{Domain, Expr, Formula, LevelRef};

/// The formula of `e` at a loop that iterates `iterate`.
pub fn formula(e: &Expr, iterate: &[LevelRef]) -> Formula {
    match e {
        Expr::Access(a) => match iterate.iter().position(|r| r.access == *a) {
            Some(n) => Formula::Iter(n),
            None => Formula::True,
        },
        Expr::Const(c) => {
            if *c == 0.0 {
                Formula::False
            } else {
                Formula::True
            }
        }
        Expr::Neg(x) | Expr::Call(Func::Abs | Func::Sqrt, x) => formula(x, iterate),
        Expr::Call(Func::Exp | Func::Log, _) => Formula::True,
        Expr::Binary(BinOp::Mul, l, r) => all(formula(l, iterate), formula(r, iterate)),
        Expr::Binary(BinOp::Add | BinOp::Sub, l, r) => {
            any(formula(l, iterate), formula(r, iterate))
        }
        // Only a non-zero constant denominator keeps the numerator's zeros: with a tensor
        // denominator, 0/0 is NaN (as in the reference), so every coordinate is visited.
        Expr::Binary(BinOp::Div, l, r) => match **r {
            Expr::Const(c) if c != 0.0 => formula(l, iterate),
            _ => Formula::True,
        },
    }
}

fn all(a: Formula, b: Formula) -> Formula {
    match (a, b) {
        (Formula::False, _) | (_, Formula::False) => Formula::False,
        (Formula::True, x) | (x, Formula::True) => x,
        (Formula::All(mut xs), Formula::All(ys)) => {
            xs.extend(ys);
            Formula::All(xs)
        }
        (Formula::All(mut xs), y) | (y, Formula::All(mut xs)) => {
            xs.push(y);
            Formula::All(xs)
        }
        (x, y) => Formula::All(vec![x, y]),
    }
}

fn any(a: Formula, b: Formula) -> Formula {
    match (a, b) {
        (Formula::True, _) | (_, Formula::True) => Formula::True,
        (Formula::False, x) | (x, Formula::False) => x,
        (Formula::Any(mut xs), Formula::Any(ys)) => {
            xs.extend(ys);
            Formula::Any(xs)
        }
        (Formula::Any(mut xs), y) | (y, Formula::Any(mut xs)) => {
            xs.push(y);
            Formula::Any(xs)
        }
        (x, y) => Formula::Any(vec![x, y]),
    }
}

/// The loop's domain from its formula.
pub fn domain(f: Formula, n_iterate: usize) -> Domain {
    match f {
        Formula::False => Domain::Empty,
        Formula::True => Domain::Universe,
        Formula::Iter(0) if n_iterate == 1 => Domain::Single,
        f => Domain::Merge(f),
    }
}
