//! Merge formulas: at one loop, which coordinates must be visited.
//!
//! This is TACO's merge lattice in its boolean form, over the statement's *fill* (the value
//! of an absent entry: the reduction's identity, see [`crate::semiring`]). An access
//! iterated at the loop is present only where its level has the coordinate; everything else
//! (dense levels, operands the loop does not index) is present everywhere. A formula says
//! where the expression may differ from the fill; elsewhere the coordinate contributes the
//! reduction's identity and is skipped. An operator the fill annihilates intersects (`*`
//! under `+`, `+` and `*` under `min`/`max`, `and` under `or`); one that maps two fills to
//! the fill unites (`+` under `+`, `min` under `min`); one that maps a fill and a constant to
//! the fill keeps its operand's sparsity (`x / 2`, `pow(x, 2)`); a function keeps its
//! operand's sparsity when it maps the fill to itself (`abs`, `sqrt`, `sin`, `tanh` under
//! `+`); anything else fills the whole range (`exp`, `cos`, `0/0`).

use crate::ast::{BinOp, ReduceOp};
use crate::ir::{Domain, Expr, Formula, LevelRef};
use crate::semiring;

/// The formula of `e` at a loop that iterates `iterate`, under reduction `r`.
pub fn formula(e: &Expr, iterate: &[LevelRef], r: ReduceOp) -> Formula {
    let fill = r.fill();
    let keeps = |x: f64| x == fill;
    match e {
        Expr::Access(a) => match iterate.iter().position(|l| l.access == *a) {
            Some(n) => Formula::Iter(n),
            None => Formula::True,
        },
        Expr::Const(c) => {
            if keeps(*c) {
                Formula::False
            } else {
                Formula::True
            }
        }
        Expr::Neg(x) if keeps(-fill) => formula(x, iterate, r),
        Expr::Call(f, x) if keeps(semiring::unary(*f, fill)) => formula(x, iterate, r),
        // A user's function may map the fill to anything.
        Expr::Neg(_) | Expr::Call(..) | Expr::UserCall(..) => Formula::True,
        Expr::Binary(op, a, b) => binary(*op, a, b, iterate, r),
    }
}

fn binary(op: BinOp, a: &Expr, b: &Expr, iterate: &[LevelRef], r: ReduceOp) -> Formula {
    let fill = r.fill();
    if r.annihilates(op) {
        return all(formula(a, iterate, r), formula(b, iterate, r));
    }
    // A constant operand: the other one decides, if a fill there gives the fill.
    match (a, b) {
        (_, Expr::Const(c)) if r.apply(op, fill, *c) == fill => return formula(a, iterate, r),
        (Expr::Const(c), _) if r.apply(op, *c, fill) == fill => return formula(b, iterate, r),
        (_, Expr::Const(_)) | (Expr::Const(_), _) => return Formula::True,
        _ => {}
    }
    if r.apply(op, fill, fill) == fill {
        any(formula(a, iterate, r), formula(b, iterate, r))
    } else {
        Formula::True
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
