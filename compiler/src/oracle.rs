//! The reference evaluator: the oracle every kernel is tested against.
//!
//! Dense, slow and obviously correct: for every point of the output's index space it reduces
//! each top-level term over every point of that term's reduction variables (summing, or with
//! the `min[k](...)` operator), evaluating the expression with the `f64` definitions of
//! [`crate::semiring`]. Inputs are dense arrays in which an entry the sparse tensor does not
//! store holds the statement's fill (`ReduceOp::fill`: 0, or +∞ for `min`, ...); the output
//! uses the same convention. It shares nothing with lowering or code
//! generation except the checked statement, so a bug there cannot hide here. Meant for the
//! small sizes of tests (its cost is the product of all dimensions).

use crate::ast::{Expr, ExprKind, ReduceOp};
use crate::check::Checked;
use crate::semiring;
use std::collections::HashMap;

/// A dense row-major array of `f64` (rank 0: one value, `dims` empty).
#[derive(Clone, Debug, PartialEq)]
pub struct DenseArray {
    pub dims: Vec<usize>,
    pub data: Vec<f64>,
}

impl DenseArray {
    pub fn new(dims: Vec<usize>, data: Vec<f64>) -> Result<DenseArray, OracleError> {
        let len: usize = dims.iter().product();
        if len != data.len() {
            return Err(OracleError::Length {
                dims,
                len: data.len(),
            });
        }
        Ok(DenseArray { dims, data })
    }

    pub fn zeros(dims: Vec<usize>) -> DenseArray {
        let len = dims.iter().product();
        DenseArray {
            dims,
            data: vec![0.0; len],
        }
    }

    /// The row-major position of a coordinate.
    fn offset(&self, coord: impl Iterator<Item = usize>) -> usize {
        coord.zip(&self.dims).fold(0, |acc, (c, &d)| acc * d + c)
    }
}

/// Why the oracle could not evaluate (inputs that do not fit the statement).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OracleError {
    #[error("`{0}` is a Rust function of the caller's: the oracle cannot evaluate it")]
    UserFunction(String),
    #[error("no input named `{0}`")]
    MissingInput(String),
    #[error("`{tensor}` has {found} dimensions but is used with {expected} indices")]
    Rank {
        tensor: String,
        expected: usize,
        found: usize,
    },
    #[error("index `{var}` has dimension {first} in one use and {second} in another")]
    Dim {
        var: String,
        first: usize,
        second: usize,
    },
    #[error("dense data of {len} values does not fit dimensions {dims:?}")]
    Length { dims: Vec<usize>, len: usize },
    #[error("the initial output has dimensions {found:?}, expected {expected:?}")]
    Output {
        expected: Vec<usize>,
        found: Vec<usize>,
    },
}

/// Evaluates `c` on dense inputs. `initial` is the output's previous value for `+=`
/// (zeros when absent).
pub fn evaluate(
    c: &Checked,
    inputs: &HashMap<String, DenseArray>,
    initial: Option<&DenseArray>,
) -> Result<DenseArray, OracleError> {
    if let Some((name, _)) = crate::check::first_user_call(&c.statement.assignment.rhs) {
        return Err(OracleError::UserFunction(name.name.clone()));
    }
    let dims = var_dims(c, inputs)?;
    let slot = |name: &str| {
        c.vars
            .iter()
            .position(|v| v.name == name)
            .expect("checked variable")
    };
    let lhs = &c.statement.assignment.lhs;
    let out_vars: Vec<usize> = lhs.indices.iter().map(|i| slot(&i.name)).collect();
    let r = c.reduce;
    let mut out = DenseArray::zeros(out_vars.iter().map(|&v| dims[v]).collect());
    out.data.fill(r.fill());
    if c.statement.assignment.accumulate {
        if let Some(init) = initial {
            if init.dims != out.dims {
                return Err(OracleError::Output {
                    expected: out.dims,
                    found: init.dims.clone(),
                });
            }
            out.data.copy_from_slice(&init.data);
        }
    }
    let mut point = vec![0usize; c.vars.len()];
    for_each_point(&out_vars, &dims, &mut point, &mut |point| {
        let mut value = r.fill();
        for term in &c.terms {
            let red: Vec<usize> = term.reduction.iter().map(|n| slot(n)).collect();
            let mut folded = r.fill();
            let mut p = point.to_vec();
            for_each_point(&red, &dims, &mut p, &mut |p| {
                folded = r.combine(folded, eval(&term.expr, p, c, inputs))
            });
            value = r.combine(value, if term.negated { -folded } else { folded });
        }
        let at = out.offset(out_vars.iter().map(|&v| point[v]));
        out.data[at] = r.combine(out.data[at], value);
    });
    Ok(out)
}

/// The dimension of every index variable (in `c.vars` order), agreed across all uses.
fn var_dims(c: &Checked, inputs: &HashMap<String, DenseArray>) -> Result<Vec<usize>, OracleError> {
    let mut dims: Vec<Option<usize>> = vec![None; c.vars.len()];
    for t in c.inputs() {
        let arr = inputs
            .get(&t.name)
            .ok_or_else(|| OracleError::MissingInput(t.name.clone()))?;
        for access in c.uses(&t.name) {
            if arr.dims.len() != access.indices.len() {
                return Err(OracleError::Rank {
                    tensor: t.name.clone(),
                    expected: access.indices.len(),
                    found: arr.dims.len(),
                });
            }
            for (i, &n) in access.indices.iter().zip(&arr.dims) {
                let v = c
                    .vars
                    .iter()
                    .position(|v| v.name == i.name)
                    .expect("checked variable");
                match dims[v] {
                    Some(m) if m != n => {
                        return Err(OracleError::Dim {
                            var: i.name.clone(),
                            first: m,
                            second: n,
                        })
                    }
                    _ => dims[v] = Some(n),
                }
            }
        }
    }
    // The checker guarantees every variable indexes some input.
    Ok(dims.into_iter().map(|d| d.unwrap_or(0)).collect())
}

/// Calls `f` for every assignment of the variables `vars` (other slots of `point` fixed).
fn for_each_point(
    vars: &[usize],
    dims: &[usize],
    point: &mut [usize],
    f: &mut impl FnMut(&[usize]),
) {
    match vars.split_first() {
        None => f(point),
        Some((&v, rest)) => {
            for x in 0..dims[v] {
                point[v] = x;
                for_each_point(rest, dims, point, f);
            }
        }
    }
}

fn eval(e: &Expr, point: &[usize], c: &Checked, inputs: &HashMap<String, DenseArray>) -> f64 {
    let r: ReduceOp = c.reduce;
    match &e.kind {
        ExprKind::Const(x) => *x,
        ExprKind::Access(a) => {
            let arr = &inputs[&a.tensor.name];
            let coord = a.indices.iter().map(|i| {
                point[c
                    .vars
                    .iter()
                    .position(|v| v.name == i.name)
                    .expect("checked variable")]
            });
            arr.data[arr.offset(coord)]
        }
        ExprKind::Neg(x) => -eval(x, point, c, inputs),
        ExprKind::Call(f, x) => semiring::unary(*f, eval(x, point, c, inputs)),
        ExprKind::Binary(op, a, b) => {
            r.apply(*op, eval(a, point, c, inputs), eval(b, point, c, inputs))
        }
        // The checker allows a reduction only as the whole right-hand side, whose body the
        // terms hold; evaluated here it is that body.
        ExprKind::Reduce(_, _, x) => eval(x, point, c, inputs),
        // `evaluate` refuses statements that call a user's function.
        ExprKind::UserCall(..) => f64::NAN,
    }
}

#[cfg(test)]
#[path = "oracle_tests.rs"]
mod tests;
