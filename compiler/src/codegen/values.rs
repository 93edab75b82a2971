//! Operand values and the expression over them.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use super::Gen;
use crate::ast::{BinOp, Func};
use crate::ir::{AccessId, Expr, LevelRef, Nest};

impl Gen<'_> {
    /// Binds `val{a}` for an access whose last level is at position `p` (zero when absent).
    pub(super) fn bind_value(&self, nest: &Nest, a: AccessId) -> TokenStream {
        let vals = self.vals(self.tensor_of(a));
        let v = self.val(a);
        let levels = self.k.accesses[a].level_vars.len();
        if levels == 0 {
            return quote!(let #v: V = #vals[0];);
        }
        let p = self.pos(LevelRef {
            access: a,
            level: levels - 1,
        });
        if self.required(nest, a) {
            quote!(let #v: V = #vals[#p];)
        } else {
            quote!(let #v: V = if #p != ABSENT { #vals[#p] } else { V::zero() };)
        }
    }

    /// Accesses of the nest with rank 0 (their value is bound once, before the loops).
    pub(super) fn scalar_values(&self, nest: &Nest) -> TokenStream {
        let mut ts = TokenStream::new();
        for a in nest.accesses() {
            if self.k.accesses[a].level_vars.is_empty() {
                ts.extend(self.bind_value(nest, a));
            }
        }
        ts
    }

    pub(super) fn expr(e: &Expr) -> TokenStream {
        match e {
            Expr::Access(a) => {
                let v = format_ident!("val{}", a);
                quote!(#v)
            }
            // Parsed literals are finite; the fallbacks keep a non-finite constant from
            // panicking in `Literal` should one ever arrive from another front end.
            Expr::Const(c) if c.is_nan() => quote!(V::from_f64(f64::NAN)),
            Expr::Const(c) if c.is_infinite() => {
                let inf = if *c > 0.0 {
                    quote!(f64::INFINITY)
                } else {
                    quote!(f64::NEG_INFINITY)
                };
                quote!(V::from_f64(#inf))
            }
            Expr::Const(c) => {
                let lit = Literal::f64_suffixed(*c);
                quote!(V::from_f64(#lit))
            }
            Expr::Neg(x) => {
                let x = Self::expr(x);
                quote!((-#x))
            }
            Expr::Call(f, x) => {
                let x = Self::expr(x);
                match f {
                    Func::Exp => quote!(::tessera_formats::Value::exp(#x)),
                    Func::Log => quote!(::tessera_formats::Value::ln(#x)),
                    Func::Sqrt => quote!(::tessera_formats::Value::sqrt(#x)),
                    Func::Abs => quote!(::tessera_formats::Value::abs(#x)),
                }
            }
            Expr::Binary(op, l, r) => {
                let (l, r) = (Self::expr(l), Self::expr(r));
                match op {
                    BinOp::Add => quote!((#l + #r)),
                    BinOp::Sub => quote!((#l - #r)),
                    BinOp::Mul => quote!((#l * #r)),
                    BinOp::Div => quote!((#l / #r)),
                }
            }
        }
    }
}
