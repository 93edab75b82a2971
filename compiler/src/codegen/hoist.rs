//! Factors of a product hoisted out of a reduction: `A(i,j) = B(i,j) * C(i,k) * D(j,k)` sums
//! `C * D` over `k` and multiplies by `B` once per output entry, as a hand-written SDDMM (and
//! TACO) does, instead of once per step of `k`. Only under `+`, over which `*` distributes;
//! the result may differ from the unhoisted one in the last bits of rounding.

use proc_macro2::TokenStream;
use quote::quote;

use super::Gen;
use crate::ast::{BinOp, ReduceOp};
use crate::ir::{Expr, Nest};

impl Gen<'_> {
    /// The expression evaluated at each step of the innermost loop.
    pub(super) fn step_expr(&self, nest: &Nest) -> Expr {
        self.split_product(nest)
            .map_or_else(|| nest.expr.clone(), |(step, _)| step)
    }

    /// `let acc = factor * acc;` for the hoisted factors, before the accumulator is written.
    pub(super) fn apply_entry_factor(&self, nest: &Nest) -> TokenStream {
        match self.split_product(nest) {
            Some((_, entry)) => {
                let f = self.expr(&entry);
                quote!(let acc: V = #f * acc;)
            }
            None => quote!(),
        }
    }

    /// The product's factors split into (varying with a reduction variable, fixed for the
    /// whole reduction), each multiplied out; `None` unless both are non-empty.
    pub(super) fn split_product(&self, nest: &Nest) -> Option<(Expr, Expr)> {
        if self.k.reduce != ReduceOp::Sum || nest.acc_depth >= nest.loops.len() {
            return None;
        }
        let outer: Vec<usize> = nest.loops[..nest.acc_depth].iter().map(|l| l.var).collect();
        let fixed = |e: &Expr| {
            e.accesses().iter().all(|a| {
                self.k.accesses[*a]
                    .level_vars
                    .iter()
                    .all(|v| outer.contains(v))
            })
        };
        let mut factors = Vec::new();
        flatten_product(&nest.expr, &mut factors);
        let (entry, step): (Vec<Expr>, Vec<Expr>) = factors.into_iter().partition(|e| fixed(e));
        Some((multiply(step)?, multiply(entry)?))
    }
}

fn flatten_product(e: &Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::Binary(BinOp::Mul, l, r) => {
            flatten_product(l, out);
            flatten_product(r, out);
        }
        _ => out.push(e.clone()),
    }
}

fn multiply(factors: Vec<Expr>) -> Option<Expr> {
    factors
        .into_iter()
        .reduce(|l, r| Expr::Binary(BinOp::Mul, Box::new(l), Box::new(r)))
}
