//! What the operators mean: one definition of every element-wise operator and of every
//! reduction, shared by the oracle (which evaluates it densely), the interpreter, and the
//! merge lattices (which ask it what an absent operand does).
//!
//! # Absent entries
//! An entry a sparse operand does not store reads as the *fill* of the statement: the
//! identity of its reduction (0 for `+` and `or`, +∞ for `min`, −∞ for `max`); an output
//! entry that is not stored means the same value, and a dense output starts from it. Under a
//! reduction the fill *annihilates* the semiring's multiplication — for min-plus `∞ + x = ∞`,
//! for max-times `−∞ · x = −∞` (defined so for every `x`, where IEEE would give `+∞` for a
//! negative `x`), for or-and `0 ∧ x = 0` — so a product iterates the intersection of its
//! operands, as `*` does under `+`. Values are assumed finite where an annihilation is taken
//! numerically (`∞ + x` for `min`, `0 · x` for `+`), as TACO assumes for `0 · x`.

use crate::ast::{BinOp, Func, ReduceOp};

impl ReduceOp {
    /// The identity of the reduction: the value of an absent entry.
    pub fn fill(self) -> f64 {
        match self {
            ReduceOp::Sum | ReduceOp::Or => 0.0,
            ReduceOp::Min => f64::INFINITY,
            ReduceOp::Max => f64::NEG_INFINITY,
        }
    }

    /// Combines an accumulated value with one more.
    pub fn combine(self, acc: f64, x: f64) -> f64 {
        match self {
            ReduceOp::Sum => acc + x,
            ReduceOp::Min => binary(BinOp::Min, acc, x),
            ReduceOp::Max => binary(BinOp::Max, acc, x),
            ReduceOp::Or => binary(BinOp::Or, acc, x),
        }
    }

    /// The name it is written with.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Or => "or",
        }
    }

    /// True when the fill annihilates `op` (an absent operand makes the result absent), so
    /// that `op` intersects its operands' sparsity.
    pub fn annihilates(self, op: BinOp) -> bool {
        matches!(
            (self, op),
            (ReduceOp::Sum | ReduceOp::Or, BinOp::Mul | BinOp::And)
                | (ReduceOp::Min | ReduceOp::Max, BinOp::Add | BinOp::Mul)
        )
    }

    /// True when `op` must test for the fill explicitly to annihilate it (IEEE arithmetic
    /// does not: `−∞ · −2 = +∞`).
    pub fn guards(self, op: BinOp) -> bool {
        matches!((self, op), (ReduceOp::Min | ReduceOp::Max, BinOp::Mul))
    }

    /// `op` applied under this reduction (with the guard where [`ReduceOp::guards`] says).
    pub fn apply(self, op: BinOp, a: f64, b: f64) -> f64 {
        let fill = self.fill();
        if self.guards(op) && (a == fill || b == fill) {
            fill
        } else {
            binary(op, a, b)
        }
    }
}

fn truth(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// A binary operator on values (no reduction context).
pub fn binary(op: BinOp, a: f64, b: f64) -> f64 {
    match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        BinOp::Div => a / b,
        BinOp::Min => {
            if b < a {
                b
            } else {
                a
            }
        }
        BinOp::Max => {
            if b > a {
                b
            } else {
                a
            }
        }
        BinOp::Pow => a.powf(b),
        _ => truth(logical(op, a, b, 0.0).expect("the other operators compare")),
    }
}

/// A comparison or logic operator on values of any ordered type (the interpreter's value
/// type too: i64 beyond 2^53 does not survive f64), or `None` for arithmetic ones.
pub fn logical<T: PartialOrd>(op: BinOp, a: T, b: T, zero: T) -> Option<bool> {
    Some(match op {
        BinOp::Lt => a < b,
        BinOp::Le => a <= b,
        BinOp::Gt => a > b,
        BinOp::Ge => a >= b,
        BinOp::Eq => a == b,
        BinOp::Ne => a != b,
        BinOp::And => a != zero && b != zero,
        BinOp::Or => a != zero || b != zero,
        BinOp::Add
        | BinOp::Sub
        | BinOp::Mul
        | BinOp::Div
        | BinOp::Min
        | BinOp::Max
        | BinOp::Pow => return None,
    })
}

/// A function of one value.
pub fn unary(f: Func, x: f64) -> f64 {
    match f {
        // The generated code's functions (`Value::exp`, `Value::ln`), not libm's.
        Func::Exp => tessera_formats::math::exp(x),
        Func::Log => tessera_formats::math::ln(x),
        Func::Sqrt => x.sqrt(),
        Func::Abs => x.abs(),
        Func::Sin => x.sin(),
        Func::Cos => x.cos(),
        Func::Tanh => x.tanh(),
    }
}

/// The symbol or function name of a binary operator, for messages and the statement's text.
pub fn binop_name(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Min => "min",
        BinOp::Max => "max",
        BinOp::Pow => "pow",
        BinOp::Lt => "lt",
        BinOp::Le => "le",
        BinOp::Gt => "gt",
        BinOp::Ge => "ge",
        BinOp::Eq => "eq",
        BinOp::Ne => "ne",
        BinOp::And => "and",
        BinOp::Or => "or",
    }
}

/// True for the operators written infix (`+ - * /`).
pub fn is_infix(op: BinOp) -> bool {
    matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_are_identities_of_their_reduction() {
        for r in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Or] {
            for x in [-2.0, 0.0, 1.0, 3.5] {
                let want = if r == ReduceOp::Or {
                    truth(x != 0.0)
                } else {
                    x
                };
                assert_eq!(r.combine(r.fill(), x), want, "{r:?} {x}");
            }
        }
    }

    #[test]
    fn annihilating_operators_absorb_the_fill_for_finite_values() {
        for r in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Or] {
            for op in [BinOp::Add, BinOp::Mul, BinOp::And] {
                if !r.annihilates(op) {
                    continue;
                }
                for x in [-2.0, 0.0, 1.0, 3.5] {
                    assert_eq!(r.apply(op, r.fill(), x), r.fill(), "{r:?} {op:?} {x}");
                    assert_eq!(r.apply(op, x, r.fill()), r.fill(), "{r:?} {op:?} {x}");
                }
            }
        }
    }
}
