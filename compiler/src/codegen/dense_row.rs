//! The innermost dense loop over rows as slices of one common length (vectorisable).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::{Gen, OutTarget};
use crate::ir::{Domain, LevelRef, Nest, OutputKind};

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
        if !self.dense_inner_applies(nest, d) {
            return None;
        }
        let lp = &nest.loops[d];
        let out_here = nest.acc_depth == nest.loops.len();
        let mut out_row = self.mirror_row(lp.var).filter(|_| out_here);
        let mut out_hoisted = out_row.is_some() && self.mirror_row_hoisted_to(nest).is_some();
        let range = self.row_range(nest);
        let mut rows = TokenStream::new();
        let mut binds = TokenStream::new();
        for r in &lp.locate {
            let is_out = r.access == self.k.output_access;
            let t = self.tensor_of(r.access);
            let (size, off) = (self.lvl(t, r.level, "size"), self.lvl(t, r.level, "off"));
            let parent = self.parent(*r);
            if is_out {
                out_hoisted = self.row_hoisted_to(nest, *r).is_some();
                out_row = Some(quote!(#parent * #size + (lo - #off)));
                continue;
            }
            let row = format_ident!("row{}", r.access);
            let v = self.val(r.access);
            if self.row_hoisted_to(nest, *r).is_some() {
                // Sliced outside to the same range; re-sliced to `n` so the loop's indexing
                // is visibly in bounds (one check here, none per element).
                rows.extend(quote!(let #row: &[V] = &#row[..n];));
            } else {
                let vals = self.vals(t);
                rows.extend(quote!(let #row: &[V] = &#vals[#parent * #size + (lo - #off)..][..n];));
            }
            binds.extend(quote!(let #v: V = #row[t];));
        }
        let var = self.var(lp.var);
        let e = self.expr(&self.step_expr(nest));
        let (write, out_slice) = match out_row {
            Some(_) if out_here && out_hoisted => {
                let slice = quote!(let orow: &mut [V] = &mut orow_hoisted[..n];);
                (self.store(nest, quote!(orow[t]), e), slice)
            }
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
                (self.store(nest, quote!(orow[t]), e), slice)
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
            #range
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

    /// Whether loop `d` is emitted by [`Self::dense_inner_loop`]: the innermost loop, dense,
    /// every level it locates the last of its access, indexed by its variable and required
    /// (or the output's), and the output, if written here, a row of it.
    fn dense_inner_applies(&self, nest: &Nest, d: usize) -> bool {
        let lp = &nest.loops[d];
        let out_here = nest.acc_depth == nest.loops.len();
        if d + 1 != nest.loops.len() || lp.domain != Domain::Universe || !lp.iterate.is_empty() {
            return false;
        }
        let rows_ok = lp.locate.iter().all(|r| {
            let is_out = r.access == self.k.output_access;
            self.k.level_var(*r) == lp.var
                && r.level + 1 == self.k.accesses[r.access].level_vars.len()
                && (is_out || self.required(nest, r.access))
        });
        let out_located = lp.locate.iter().any(|r| r.access == self.k.output_access);
        let out_ok = !out_here
            || if self.k.output_kind == OutputKind::Dense {
                out_located
            } else {
                self.mirror_row(lp.var).is_some()
            };
        rows_ok && out_ok
    }

    /// `let lo` and `let hi`: the innermost dense loop's range narrowed to where every operand
    /// row it reads has the coordinate (the same bounds wherever its rows are sliced).
    fn row_range(&self, nest: &Nest) -> TokenStream {
        let lp = nest.loops.last().expect("a dense inner loop");
        let (first, end) = self.span(lp.var);
        let (mut lo, mut hi) = (vec![first], vec![end]);
        for r in lp
            .locate
            .iter()
            .filter(|r| r.access != self.k.output_access)
        {
            let t = self.tensor_of(r.access);
            let (size, off) = (self.lvl(t, r.level, "size"), self.lvl(t, r.level, "off"));
            lo.push(quote!(#off));
            hi.push(quote!(#off + #size));
        }
        quote! {
            let lo: usize = 0usize #(.max(#lo))*;
            let hi: usize = usize::MAX #(.min(#hi))*;
        }
    }

    /// The outer loop a row of the innermost dense loop is sliced in, when that loop is not
    /// the innermost's parent: an operand row whose parent position is fixed two or more loops
    /// out (MTTKRP's `C(k,j)` under loops `k, l, m`) is then sliced once per iteration of the
    /// loop that fixes it, not once per innermost nonzero.
    fn row_hoisted_to(&self, nest: &Nest, r: LevelRef) -> Option<usize> {
        let last = nest.loops.len() - 1;
        let out_here = nest.acc_depth == nest.loops.len();
        let is_out = r.access == self.k.output_access;
        // The output's row only where the innermost loop writes it (not a mirrored output's).
        if r.level == 0
            || (is_out && (!out_here || self.mirror.is_some()))
            || !nest.loops[last].locate.contains(&r)
        {
            return None;
        }
        let parent = LevelRef {
            access: r.access,
            level: r.level - 1,
        };
        self.fixing_loop(nest, parent)
    }

    /// The loop that fixes position `r`, when it lies outside the innermost loop's parent
    /// and the innermost loop is a dense row loop: where a row under `r` is sliced.
    fn fixing_loop(&self, nest: &Nest, r: LevelRef) -> Option<usize> {
        let last = nest.loops.len() - 1;
        let d = nest
            .loops
            .iter()
            .position(|lp| lp.iterate.contains(&r) || lp.locate.contains(&r))?;
        (d + 1 < last && self.dense_inner_applies(nest, last)).then_some(d)
    }

    /// For a mirrored output with one dense level after the operand's (TTM's `A(i,j,k)` as
    /// `ssd`), the loop that fixes the operand position its rows hang from, when that loop is
    /// not the innermost's parent: the row is then sliced there (see [`Self::hoisted_rows`]).
    fn mirror_row_hoisted_to(&self, nest: &Nest) -> Option<usize> {
        let m = self.mirror?;
        let out = &self.k.accesses[self.k.output_access].level_vars;
        let last = nest.loops.len().checked_sub(1)?;
        if out.len() != m.levels + 1 || nest.acc_depth != nest.loops.len() {
            return None;
        }
        self.mirror_row(nest.loops[last].var)?;
        let base = LevelRef {
            access: m.access,
            level: m.levels - 1,
        };
        self.fixing_loop(nest, base)
    }

    /// `let orow_hoisted`: the output row from `start` over the innermost loop's range.
    fn hoisted_out_row(&self, nest: &Nest, start: TokenStream, target: OutTarget) -> TokenStream {
        let range = self.row_range(nest);
        let slice = match target {
            OutTarget::Whole => quote!(&mut out_vals[#start..][..hi - lo]),
            OutTarget::Row => quote!(&mut out_row[#start - out_base..][..hi - lo]),
            OutTarget::Partial | OutTarget::Entries => quote!(&mut buf[#start..][..hi - lo]),
        };
        quote! {
            let orow_hoisted: &mut [V] = {
                #range
                if lo < hi { #slice } else { &mut [] }
            };
        }
    }

    /// The rows hoisted to loop `d` (see [`Self::row_hoisted_to`]), sliced over the innermost
    /// loop's common range; empty where that range is.
    pub(super) fn hoisted_rows(&self, nest: &Nest, d: usize, target: OutTarget) -> TokenStream {
        let Some(lp) = nest.loops.last() else {
            return quote!();
        };
        let mut ts = TokenStream::new();
        if self.mirror_row_hoisted_to(nest) == Some(d) {
            let start = self
                .mirror_row(lp.var)
                .expect("checked by mirror_row_hoisted_to");
            ts.extend(self.hoisted_out_row(nest, start, target));
        }
        let hoisted: Vec<LevelRef> = lp
            .locate
            .iter()
            .copied()
            .filter(|r| self.row_hoisted_to(nest, *r) == Some(d))
            .collect();
        let range = self.row_range(nest);
        for r in hoisted {
            let t = self.tensor_of(r.access);
            let (size, off) = (self.lvl(t, r.level, "size"), self.lvl(t, r.level, "off"));
            let (vals, parent) = (self.vals(t), self.parent(r));
            if r.access == self.k.output_access {
                // The output row this loop's iteration writes, sliced once here rather than
                // once per innermost nonzero (MTTKRP's `A(i,j)` under loops `k, l`).
                let start = quote!(#parent * #size + (lo - #off));
                ts.extend(self.hoisted_out_row(nest, start, target));
                continue;
            }
            let row = format_ident!("row{}", r.access);
            ts.extend(quote! {
                let #row: &[V] = {
                    #range
                    if lo < hi { &#vals[#parent * #size + (lo - #off)..][..hi - lo] } else { &[] }
                };
            });
        }
        ts
    }
}
