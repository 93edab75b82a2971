//! Operand values and the expression over them.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use super::Gen;
use crate::ast::{BinOp, Func, ReduceOp};
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
            let fill = self.fill();
            quote!(let #v: V = if #p != ABSENT { #vals[#p] } else { #fill };)
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

    /// The value of an absent entry: the identity of the kernel's reduction.
    pub(super) fn fill(&self) -> TokenStream {
        Self::constant(self.k.reduce.fill())
    }

    /// `slot ⊕= x` for the kernel's reduction (`+=` under `+`).
    pub(super) fn accumulate(&self, slot: TokenStream, x: TokenStream) -> TokenStream {
        if self.k.reduce == ReduceOp::Sum {
            return quote!(#slot += #x;);
        }
        let c = self.combine(quote!(*s), quote!(x));
        // The slot is borrowed before `x` is bound: a slot written `*x` (the parallel fold's
        // `for (x, y) in ...`) must not name the value.
        quote!({ let s = &mut #slot; let x: V = #x; *s = #c; })
    }

    /// `a ⊕ x` for the kernel's reduction, as an expression (operands evaluated once).
    pub(super) fn combine(&self, a: TokenStream, x: TokenStream) -> TokenStream {
        match self.k.reduce {
            ReduceOp::Sum => quote!((#a + #x)),
            ReduceOp::Min => quote!({ let (a, x): (V, V) = (#a, #x); if x < a { x } else { a } }),
            ReduceOp::Max => quote!({ let (a, x): (V, V) = (#a, #x); if x > a { x } else { a } }),
            ReduceOp::Or => quote!({
                let (a, x): (V, V) = (#a, #x);
                if a != V::zero() || x != V::zero() { V::from_f64(1.0) } else { V::zero() }
            }),
        }
    }

    fn constant(c: f64) -> TokenStream {
        // Parsed literals are finite; fills are not (+∞ for `min`), and NaN keeps a
        // non-finite constant from panicking in `Literal` should one ever arrive.
        if c.is_nan() {
            quote!(V::from_f64(f64::NAN))
        } else if c == f64::INFINITY {
            quote!(V::from_f64(f64::INFINITY))
        } else if c == f64::NEG_INFINITY {
            quote!(V::from_f64(f64::NEG_INFINITY))
        } else if c == 0.0 && c.is_sign_positive() {
            quote!(V::zero())
        } else {
            let lit = Literal::f64_suffixed(c);
            quote!(V::from_f64(#lit))
        }
    }

    pub(super) fn expr(&self, e: &Expr) -> TokenStream {
        let to_f64 = |x: &TokenStream| quote!(::tessera_formats::Value::to_f64(#x));
        let truth = |cond: TokenStream| quote!((if #cond { V::from_f64(1.0) } else { V::zero() }));
        match e {
            Expr::Access(a) => {
                let v = format_ident!("val{}", a);
                quote!(#v)
            }
            Expr::Const(c) => Self::constant(*c),
            Expr::UserCall(k, x) => {
                let x = self.expr(x);
                quote!((user_fns[#k])(#x))
            }
            Expr::Neg(x) => {
                let x = self.expr(x);
                quote!((-#x))
            }
            Expr::Call(f, x) => {
                let x = self.expr(x);
                match f {
                    Func::Exp => quote!(::tessera_formats::Value::exp(#x)),
                    Func::Log => quote!(::tessera_formats::Value::ln(#x)),
                    Func::Sqrt => quote!(::tessera_formats::Value::sqrt(#x)),
                    Func::Abs => quote!(::tessera_formats::Value::abs(#x)),
                    // In f64, rounded back (as the interpreter does).
                    Func::Sin | Func::Cos | Func::Tanh => {
                        let x = to_f64(&x);
                        let m = format_ident!("{}", format!("{f:?}").to_lowercase());
                        quote!(V::from_f64(#x.#m()))
                    }
                }
            }
            Expr::Binary(op, l, r) => {
                let (l, r) = (self.expr(l), self.expr(r));
                match op {
                    BinOp::Add => quote!((#l + #r)),
                    BinOp::Sub => quote!((#l - #r)),
                    BinOp::Mul if self.k.reduce.guards(BinOp::Mul) => {
                        // The fill annihilates the product (−∞ · −2 is −∞ under `max`).
                        let fill = self.fill();
                        // A fill factor makes IEEE give the fill itself (fine), the opposite
                        // infinity or NaN: only those two take the test, off the hot path.
                        let beyond = Self::constant(-self.k.reduce.fill());
                        let ok = if self.k.reduce.fill() < 0.0 {
                            quote!(p < #beyond)
                        } else {
                            quote!(p > #beyond)
                        };
                        quote!({
                            let (a, b): (V, V) = (#l, #r);
                            let p = a * b;
                            if #ok {
                                p
                            } else {
                                let fill: V = #fill;
                                if a == fill || b == fill { fill } else { p }
                            }
                        })
                    }
                    BinOp::Mul => quote!((#l * #r)),
                    BinOp::Div => quote!((#l / #r)),
                    BinOp::Min => {
                        quote!({ let (a, b): (V, V) = (#l, #r); if b < a { b } else { a } })
                    }
                    BinOp::Max => {
                        quote!({ let (a, b): (V, V) = (#l, #r); if b > a { b } else { a } })
                    }
                    BinOp::Pow => {
                        let (l, r) = (to_f64(&l), to_f64(&r));
                        quote!(V::from_f64(#l.powf(#r)))
                    }
                    BinOp::Lt => truth(quote!(#l < #r)),
                    BinOp::Le => truth(quote!(#l <= #r)),
                    BinOp::Gt => truth(quote!(#l > #r)),
                    BinOp::Ge => truth(quote!(#l >= #r)),
                    BinOp::Eq => truth(quote!(#l == #r)),
                    BinOp::Ne => truth(quote!(#l != #r)),
                    BinOp::And => truth(quote!((#l != V::zero()) & (#r != V::zero()))),
                    BinOp::Or => truth(quote!((#l != V::zero()) | (#r != V::zero()))),
                }
            }
        }
    }
}
