//! A sparse output that copies an operand's structure ([`crate::lower::mirror`]): its values
//! are allocated once, at the operand's positions (times the output's trailing dense levels),
//! written in place like a dense output's, and its sparse levels are the operand's, copied.

use proc_macro2::TokenStream;
use quote::quote;
use tessera_formats::LevelType;

use super::{Gen, OutTarget};
use crate::ir::{Domain, LevelRef, Nest};
use crate::lower::Mirror;

impl Gen<'_> {
    /// The output's values: one per position of the operand's last mirrored level, times the
    /// output's trailing dense levels.
    pub(super) fn mirror_init(&self, m: Mirror) -> TokenStream {
        let t = self.tensor_of(m.access);
        let mut count = quote!(1usize);
        for l in 0..m.levels {
            count = match self.k.level_type(LevelRef {
                access: m.access,
                level: l,
            }) {
                LevelType::Dense => {
                    let size = self.lvl(t, l, "size");
                    quote!(#count * #size)
                }
                _ => {
                    let crd = self.lvl(t, l, "crd");
                    quote!(#crd.len())
                }
            };
        }
        let trailing = self.trailing_sizes(m);
        let fmt = self.format_expr();
        let fill = self.fill();
        quote! {
            let out_format = #fmt;
            let out_len: usize = [#count #(, #trailing)*]
                .iter()
                .try_fold(1usize, |n, d| n.checked_mul(*d))
                .expect("output dimensions fit in memory");
            let mut out_buf: Vec<V> = vec![#fill; out_len];
            let out_vals: &mut [V] = &mut out_buf;
        }
    }

    /// The locals holding the sizes of the output's dense levels after the mirrored ones.
    fn trailing_sizes(&self, m: Mirror) -> Vec<proc_macro2::Ident> {
        let rank = self.k.output_tensor().rank();
        (m.levels..rank)
            .map(|l| self.lvl(self.k.output, l, "size"))
            .collect()
    }

    /// The position of output level `level` (at least `m.levels - 1`): the operand's position
    /// at its last mirrored level, then row-major through the output's dense levels.
    pub(super) fn mirror_pos(&self, m: Mirror, level: usize) -> TokenStream {
        let base = self.pos(LevelRef {
            access: m.access,
            level: m.levels - 1,
        });
        let out = &self.k.accesses[self.k.output_access];
        let mut p = quote!(#base);
        for l in m.levels..=level {
            let size = self.lvl(self.k.output, l, "size");
            let x = self.var(out.level_vars[l]);
            p = quote!((#p * #size + #x));
        }
        p
    }

    /// In the copy of the nests over whole validated tensors, the output's values cut to one
    /// per position of the operand's last mirrored level when that level is compressed or
    /// singleton and no dense level follows (TTV's `A(i,j)` from `B(i,j,k)`): the loop over
    /// that level has just checked its position against `crd.len()`, so the store at that
    /// position needs no check of its own (one compare and branch fewer per fibre). The
    /// values were allocated with exactly this length ([`Gen::mirror_init`]).
    pub(super) fn mirror_out_slice(&self) -> TokenStream {
        let Some(m) = self.mirror.filter(|_| self.trusted) else {
            return quote!();
        };
        let last = LevelRef {
            access: m.access,
            level: m.levels - 1,
        };
        let rank = self.k.output_tensor().rank();
        if self.k.level_type(last) == LevelType::Dense || m.levels < rank {
            return quote!();
        }
        let crd = self.lvl(self.tensor_of(m.access), last.level, "crd");
        quote!(let out_vals: &mut [V] = &mut out_vals[..#crd.len()];)
    }

    /// The output with the operand's levels (cloned) and its own dense levels after them.
    pub(super) fn mirror_finish(&self, m: Mirror) -> TokenStream {
        let tv = quote::format_ident!("t{}", self.tensor_of(m.access));
        let levels = m.levels;
        let trailing = self.trailing_sizes(m);
        quote! {
            let mut levels: Vec<Level<I>> = #tv.levels()[..#levels].to_vec();
            levels.extend([#(Level::Dense { size: #trailing, offset: 0 }),*]);
            Tensor::from_parts(out_dims.to_vec(), out_format, levels, out_buf)
                .expect("an operand's structure is a valid output structure")
        }
    }

    /// The outer loop over threads. Jobs are runs of consecutive positions of the operand's
    /// first level, cut where the output values below them reach equal shares (a binary
    /// search per cut: the map from a position to its first output value is monotone), so
    /// power-law rows balance and handing out jobs costs O(jobs log n), not a pass over every
    /// position. Each job owns the contiguous run of output values below its positions.
    pub(super) fn parallel_mirror(&self, nest: &Nest, m: Mirror) -> Option<TokenStream> {
        let lp = &nest.loops[0];
        let var = self.var(lp.var);
        let t = self.tensor_of(m.access);
        let (range, coord, bind) = match lp.domain {
            Domain::Universe => {
                let (size, off) = (self.lvl(t, 0, "size"), self.lvl(t, 0, "off"));
                (quote!((0usize, #size)), quote!(q + #off), quote!())
            }
            Domain::Single => {
                let r = lp.iterate[0];
                let crd = self.lvl(t, 0, "crd");
                let (lo, hi) = self.range(nest, r);
                (
                    quote!((#lo, #hi)),
                    quote!(#crd[q].to_usize()),
                    self.single_bind(r),
                )
            }
            _ => return None,
        };
        let mut descend = TokenStream::new();
        for l in 1..m.levels {
            descend.extend(
                match self.k.level_type(LevelRef {
                    access: m.access,
                    level: l,
                }) {
                    LevelType::Dense => {
                        let size = self.lvl(t, l, "size");
                        quote!(let s = s * #size;)
                    }
                    _ => {
                        let pos = self.lvl(t, l, "pos");
                        quote!(let s = #pos[s].to_usize();)
                    }
                },
            );
        }
        let trailing = self.trailing_sizes(m);
        let label = syn::Lifetime::new("'l0", proc_macro2::Span::call_site());
        let visit = self.visit(nest, 0, &label, OutTarget::Row);
        let body = quote! {
            for q in q0..q1 {
                let #var = #coord;
                #bind
                #label: { #visit }
            }
        };
        // With dense levels after the mirrored ones (TTM's `ssd`), over whole tensors a job
        // runs in a function of its own (`Gen::job`): its output row arrives as a `noalias`
        // argument (inside the closure it came in a tuple, and LLVM tested the output row
        // against `C`'s row for overlap before every vectorised row update: TTM's jobs 168 M
        // → 156 M instructions, as many as the sequential kernel). Without them (TTV) the
        // closure stays (the function cost TTV's jobs 1 % more) and only cuts the `pos`
        // arrays again (`Gen::pos_slices`: the closure gets each slice's length as a value of
        // its own, which LLVM cannot tie to another's).
        let job = match trailing.is_empty() {
            true => {
                let slices = self.pos_slices();
                quote!(#slices #body)
            }
            false => self.job(nest, [quote!(q0), quote!(q1)], body),
        };
        Some(quote! {
            {
                use ::rayon::prelude::*;
                let width: usize = 1usize #(* #trailing)*;
                // The first output value below first-level position `s` (`s` = n: the end).
                let first_value = |s: usize| -> usize { #descend s * width };
                let (lo, hi) = #range;
                let (base, end) = (first_value(lo), first_value(hi));
                // Enough output values per job that scheduling stays negligible.
                let n_jobs = ((end - base) / 4096).clamp(1, (hi - lo).max(1));
                let mut rest: &mut [V] = out_vals;
                let mut at = 0usize;
                let mut jobs: Vec<(usize, usize, usize, &mut [V])> = Vec::with_capacity(n_jobs);
                let mut q0 = lo;
                for k in 1..=n_jobs {
                    // The last job ends at `hi`; the others at the first position whose
                    // output values start at or after their share's end.
                    let q1 = if k == n_jobs {
                        hi
                    } else {
                        let target = base + (end - base) / n_jobs * k;
                        let (mut a, mut b) = (q0, hi);
                        while a < b {
                            let mid = a + (b - a) / 2;
                            if first_value(mid) < target { a = mid + 1 } else { b = mid }
                        }
                        a
                    };
                    if q1 == q0 {
                        continue;
                    }
                    let (s, e) = (first_value(q0), first_value(q1));
                    let (_, tail) = std::mem::take(&mut rest).split_at_mut(s - at);
                    let (mine, tail) = tail.split_at_mut(e - s);
                    jobs.push((q0, q1, s, mine));
                    (rest, at, q0) = (tail, e, q1);
                }
                // At most 8 jobs a rayon task, as in `parallel_sparse_rows`: no thread is left
                // alone with a large last task.
                jobs.into_par_iter().with_max_len(8).for_each(move |(q0, q1, out_base, out_row)| {
                    #job
                });
            }
        })
    }
}
