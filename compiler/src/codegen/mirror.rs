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

    /// The outer loop over threads: each job is one position of the operand's first level and
    /// owns the contiguous run of output values below it (handed out by one sequential pass).
    pub(super) fn parallel_mirror(&self, nest: &Nest, m: Mirror) -> Option<TokenStream> {
        let lp = &nest.loops[0];
        let var = self.var(lp.var);
        let t = self.tensor_of(m.access);
        let (jobs, bind) = match lp.domain {
            Domain::Universe => {
                let (size, off) = (self.lvl(t, 0, "size"), self.lvl(t, 0, "off"));
                (quote!((0..#size).map(|q| (q + #off, q))), quote!())
            }
            Domain::Single => {
                let r = lp.iterate[0];
                let crd = self.lvl(t, 0, "crd");
                let (lo, hi) = self.range(nest, r);
                let jobs = quote!(((#lo)..(#hi)).map(|q| (#crd[q].to_usize(), q)));
                (jobs, self.single_bind(r))
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
                        quote!(let (s, e) = (s * #size, e * #size);)
                    }
                    _ => {
                        let pos = self.lvl(t, l, "pos");
                        quote!(let (s, e) = (#pos[s].to_usize(), #pos[e].to_usize());)
                    }
                },
            );
        }
        let trailing = self.trailing_sizes(m);
        let label = syn::Lifetime::new("'l0", proc_macro2::Span::call_site());
        let visit = self.visit(nest, 0, &label, OutTarget::Row);
        Some(quote! {
            {
                use ::rayon::prelude::*;
                let width: usize = 1usize #(* #trailing)*;
                let mut rest: &mut [V] = out_vals;
                let mut at = 0usize;
                let mut jobs: Vec<(usize, usize, usize, &mut [V])> = Vec::new();
                for (#var, q) in #jobs {
                    let (s, e) = (q, q + 1);
                    #descend
                    let (s, e) = (s * width, e * width);
                    let (_, tail) = std::mem::take(&mut rest).split_at_mut(s - at);
                    let (mine, tail) = tail.split_at_mut(e - s);
                    jobs.push((#var, q, s, mine));
                    (rest, at) = (tail, e);
                }
                // Enough output values per task that scheduling stays negligible.
                let grain = (4096 * jobs.len() / out_len.max(1)).max(1);
                jobs.into_par_iter().with_min_len(grain).for_each(move |(#var, q, out_base, out_row)| {
                    #bind
                    #label: { #visit }
                });
            }
        })
    }
}
