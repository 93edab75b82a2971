//! Writing results: the accumulator into a dense slot, a sparse entry or the workspace.

use proc_macro2::{Ident, TokenStream};
use quote::quote;

use super::{Gen, OutTarget};
use crate::ast::ReduceOp;
use crate::ir::{Assembly, LevelRef, Nest, OutputKind};

impl Gen<'_> {
    /// Whether this nest writes each cell of a fresh dense (or mirrored) output at most once:
    /// the only nest, summing, and the loops outside the accumulator bind exactly the output's
    /// variables (each coordinate is visited once per loop, so each cell once). Then the write
    /// can be a store, `slot = acc + 0`, instead of `slot += acc` on a slot holding the fill
    /// `0`: the same value bit for bit (`+ 0` turns `-0.0` into `+0.0`, as adding to the zeroed
    /// slot did) without loading the slot — which for a freshly `calloc`ed output is a read
    /// fault on the zero page and then a write fault per page, and a load per output cell.
    pub(super) fn written_once(&self, nest: &Nest) -> bool {
        let out = &self.k.accesses[self.k.output_access].level_vars;
        let outer = &nest.loops[..nest.acc_depth.min(nest.loops.len())];
        self.k.nests.len() == 1
            && self.k.reduce == ReduceOp::Sum
            && (self.k.output_kind == OutputKind::Dense || self.mirror.is_some())
            && nest.acc_depth == out.len()
            && outer.len() == out.len()
            && outer.iter().all(|lp| out.contains(&lp.var))
    }

    /// `slot = x` where [`Self::written_once`], else `slot ⊕= x`.
    pub(super) fn store(&self, nest: &Nest, slot: TokenStream, x: TokenStream) -> TokenStream {
        if self.written_once(nest) {
            let fill = self.fill();
            quote!(#slot = (#x) + #fill;)
        } else {
            self.accumulate(slot, x)
        }
    }

    /// Stores the accumulator where [`Self::written_once`]: a bare `slot = acc` when nothing
    /// scaled it after the sum. It started at `+0` and was only added to, and a sum that starts
    /// at `+0` is never `-0.0` (`x + y` is `-0.0` only when both are), so `acc + 0` would be
    /// `acc` bit for bit; an entry factor (`f * acc`) can make `-0.0`, so that keeps the `+ 0`.
    fn store_acc(&self, nest: &Nest, slot: TokenStream) -> TokenStream {
        if self.written_once(nest) && self.split_product(nest).is_none() {
            quote!(#slot = acc;)
        } else {
            self.store(nest, slot, quote!(acc))
        }
    }

    pub(super) fn out_slot(&self, p: TokenStream, target: OutTarget) -> TokenStream {
        match target {
            OutTarget::Whole => quote!(out_vals[#p]),
            OutTarget::Row => quote!(out_row[#p - out_base]),
            OutTarget::Partial | OutTarget::Entries => quote!(buf[#p]),
        }
    }

    /// Writes the accumulator into the output (see [`Assembly`]).
    pub(super) fn write(&self, nest: &Nest, target: OutTarget) -> TokenStream {
        let out = &self.k.accesses[self.k.output_access];
        match self.k.output_kind {
            OutputKind::Scalar => {
                let slot = self.out_slot(quote!(0usize), target);
                self.accumulate(slot, quote!(acc))
            }
            OutputKind::Dense => {
                let p = self.pos(LevelRef {
                    access: self.k.output_access,
                    level: out.level_vars.len() - 1,
                });
                let slot = self.out_slot(quote!(#p), target);
                self.store_acc(nest, slot)
            }
            OutputKind::Sparse if self.mirror.is_some() => {
                let m = self.mirror.unwrap();
                let p = self.mirror_pos(m, out.level_vars.len() - 1);
                let slot = self.out_slot(p, target);
                self.store_acc(nest, slot)
            }
            OutputKind::Sparse => {
                let coords: Vec<Ident> = out.level_vars.iter().map(|v| self.var(*v)).collect();
                let inner = match nest.assembly {
                    Assembly::InOrder if target == OutTarget::Entries && self.appends_rows() => {
                        self.append_local(quote!([#(#coords),*]), quote!(acc))
                    }
                    Assembly::InOrder if target == OutTarget::Entries => {
                        quote!(local.push(([#(#coords),*], acc));)
                    }
                    Assembly::InOrder if self.appends_rows() => {
                        self.append(quote!([#(#coords),*]), quote!(acc))
                    }
                    Assembly::InOrder => quote! {
                        packer.push(&[#(#coords),*], acc).expect("loop order yields sorted unique entries");
                    },
                    Assembly::Scatter if target == OutTarget::Entries => {
                        quote!(local.push(([#(#coords),*], acc));)
                    }
                    Assembly::Scatter => quote!(scatter.push(([#(#coords),*], acc));),
                    Assembly::Workspace { var, .. } => {
                        let w = self.var(var);
                        let add = self.accumulate(quote!(ws[#w]), quote!(acc));
                        quote! {
                            if !ws_mark[#w] { ws_mark[#w] = true; ws_list.push(#w); }
                            #add
                        }
                    }
                    Assembly::Collect | Assembly::None if target == OutTarget::Entries => {
                        quote!(local.push(([#(#coords),*], acc));)
                    }
                    Assembly::Collect | Assembly::None => {
                        let order = self.k.output_tensor().format.mode_order();
                        let mut by_mode = vec![quote!(); order.len()];
                        for (l, m) in order.iter().enumerate() {
                            let c = &coords[l];
                            by_mode[*m] = quote!(#c);
                        }
                        quote!(entries.push((vec![#(#by_mode),*], acc));)
                    }
                };
                quote!(if touched { #inner })
            }
        }
    }

    /// Emits the workspace's entries in coordinate order and clears it.
    pub(super) fn flush(&self, target: OutTarget) -> TokenStream {
        let out = &self.k.accesses[self.k.output_access].level_vars;
        let prefix: Vec<Ident> = out[..out.len() - 1].iter().map(|v| self.var(*v)).collect();
        let emit = if target == OutTarget::Entries && self.appends_rows() {
            self.append_local(quote!([#(#prefix,)* c]), quote!(ws[c]))
        } else if target == OutTarget::Entries {
            quote!(local.push(([#(#prefix,)* c], ws[c]));)
        } else if self.appends_rows() {
            self.append(quote!([#(#prefix,)* c]), quote!(ws[c]))
        } else {
            quote!(packer.push(&[#(#prefix,)* c], ws[c]).expect("workspace flushes sorted unique entries");)
        };
        let fill = self.fill();
        quote! {
            ws_list.sort_unstable();
            for &c in ws_list.iter() {
                #emit
                ws[c] = #fill;
                ws_mark[c] = false;
            }
            ws_list.clear();
        }
    }
}
