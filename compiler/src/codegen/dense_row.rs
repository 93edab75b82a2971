//! The innermost dense loop over rows as slices of one common length (vectorisable).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::{Gen, OutTarget};
use crate::ir::{Domain, Nest, OutputKind};

impl Gen<'_> {
    /// The innermost loop when it is a dense loop over rows: every level it locates is the last
    /// level of its access and indexed by the loop's variable. Then each operand's row (and the
    /// output's) is a contiguous slice, the range is narrowed to where every operand's block
    /// has the coordinate, and the loop indexes slices of one common length — so bounds checks
    /// vanish and the loop can vectorise like a hand-written `zip`. `None` when not applicable.
    pub(super) fn dense_inner_loop(
        &self,
        nest: &Nest,
        d: usize,
        target: OutTarget,
    ) -> Option<TokenStream> {
        let lp = &nest.loops[d];
        let out_here = nest.acc_depth == nest.loops.len();
        if d + 1 != nest.loops.len() || lp.domain != Domain::Universe || !lp.iterate.is_empty() {
            return None;
        }
        let mut out_row = self.mirror_row(lp.var).filter(|_| out_here);
        if out_here && self.k.output_kind != OutputKind::Dense && out_row.is_none() {
            return None;
        }
        let (first, end) = self.span(lp.var);
        let (mut lo, mut hi) = (vec![first], vec![end]);
        let mut rows = TokenStream::new();
        let mut binds = TokenStream::new();
        for r in &lp.locate {
            let acc = &self.k.accesses[r.access];
            let is_out = r.access == self.k.output_access;
            if self.k.level_var(*r) != lp.var
                || r.level + 1 != acc.level_vars.len()
                || !(is_out || self.required(nest, r.access))
            {
                return None;
            }
            let t = acc.tensor;
            let (size, off) = (self.lvl(t, r.level, "size"), self.lvl(t, r.level, "off"));
            let parent = self.parent(*r);
            if is_out {
                out_row = Some(quote!(#parent * #size + (lo - #off)));
                continue;
            }
            lo.push(quote!(#off));
            hi.push(quote!(#off + #size));
            let vals = self.vals(t);
            let row = format_ident!("row{}", r.access);
            let v = self.val(r.access);
            rows.extend(quote!(let #row: &[V] = &#vals[#parent * #size + (lo - #off)..][..n];));
            binds.extend(quote!(let #v: V = #row[t];));
        }
        if out_here && out_row.is_none() {
            return None;
        }
        let var = self.var(lp.var);
        let e = self.expr(&nest.expr);
        let (write, out_slice) = match out_row {
            Some(start) if out_here => {
                let slice = match target {
                    OutTarget::Whole => quote!(let orow: &mut [V] = &mut out_vals[#start..][..n];),
                    OutTarget::Row => {
                        quote!(let orow: &mut [V] = &mut out_row[#start - out_base..][..n];)
                    }
                    OutTarget::Partial | OutTarget::Entries => {
                        quote!(let orow: &mut [V] = &mut buf[#start..][..n];)
                    }
                };
                (self.accumulate(quote!(orow[t]), e), slice)
            }
            _ => {
                let touched = if self.k.output_kind == OutputKind::Sparse {
                    quote!(touched = true;)
                } else {
                    quote!()
                };
                let acc = self.accumulate(quote!(acc), e);
                (quote!(#acc #touched), quote!())
            }
        };
        Some(quote! {
            let lo: usize = 0usize #(.max(#lo))*;
            let hi: usize = usize::MAX #(.min(#hi))*;
            if lo < hi {
                let n = hi - lo;
                #rows
                #out_slice
                for t in 0..n {
                    let #var = lo + t;
                    #binds
                    #write
                }
            }
        })
    }

    /// Under a mirrored output whose last level is dense and bound by `var`: where the row of
    /// output values this loop writes starts (`lo` is the loop's first coordinate).
    fn mirror_row(&self, var: crate::ir::VarId) -> Option<TokenStream> {
        let m = self.mirror?;
        let out = &self.k.accesses[self.k.output_access].level_vars;
        let last = out.len() - 1;
        if out[last] != var || last < m.levels {
            return None;
        }
        let parent = self.mirror_pos(m, last - 1);
        let size = self.lvl(self.k.output, last, "size");
        Some(quote!(#parent * #size + lo))
    }
}
