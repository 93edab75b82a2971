//! The outermost loop over rayon's pool (`parallelize`).

use proc_macro2::TokenStream;
use quote::quote;

use super::{Gen, OutTarget};
use crate::ir::{Assembly, Domain, LevelRef, Nest, OutputKind};

impl Gen<'_> {
    /// The nest with its outermost loop over threads, when the schedule asks and the loop and
    /// output allow it; `None` to run it sequentially.
    pub(super) fn parallel_nest(&self, nest: &Nest) -> Option<TokenStream> {
        let v = self.k.parallel?;
        let lp = nest.loops.first()?;
        if lp.var != v || nest.acc_depth == 0 {
            return None;
        }
        // A non-unique (COO) level's positions are not one job per coordinate: two jobs could
        // own one output row. Such a loop runs sequentially.
        if lp.iterate.iter().any(|r| self.non_unique(*r)) {
            return None;
        }
        if let Some(m) = self.mirror {
            return self.parallel_mirror(nest, m);
        }
        if self.k.output_kind == OutputKind::Sparse {
            return self.parallel_sparse(nest);
        }
        let var = self.var(v);
        let label = syn::Lifetime::new("'l0", proc_macro2::Span::call_site());
        let out = &self.k.accesses[self.k.output_access];
        let chunked = matches!(lp.domain, Domain::Universe)
            && lp.iterate.is_empty()
            && self.k.output_kind == OutputKind::Dense
            && out.level_vars.first() == Some(&v);
        if chunked {
            let visit = self.visit(nest, 0, &label, OutTarget::Row);
            let dim = self.dim(v);
            // The job's rows `lo..hi`, narrowed as a sequential loop's (`located_end`), write
            // into the job's slice `out_row`, which starts at cell `out_base`.
            let end = self.located_end(nest, 0, quote!(hi));
            let job = self.job(
                nest,
                [quote!(lo), quote!(hi)],
                quote! {
                    for #var in lo..#end {
                        #label: { #visit }
                    }
                },
            );
            return Some(quote! {
                if #dim > 0 && !out_vals.is_empty() {
                    use ::rayon::prelude::*;
                    let row = out_vals.len() / #dim;
                    // Enough rows per job that scheduling stays negligible beside the work.
                    // A job's rows run in a plain loop inside one call, where the slices and
                    // extents stay in registers; one closure call per row (rayon's
                    // `for_each` over rows) cost SpMV a quarter more instructions.
                    let grain = (4096 / row.max(1)).max(1);
                    out_vals.par_chunks_mut(grain * row).enumerate().for_each(move |(job, rows)| {
                        let lo = job * grain;
                        let (hi, out_base) = (lo + rows.len() / row, lo * row);
                        let out_row: &mut [V] = rows;
                        #job
                    });
                }
            });
        }
        let rows_by_coord = matches!(lp.domain, Domain::Single)
            && self.k.output_kind == OutputKind::Dense
            && out.level_vars.first() == Some(&v);
        if rows_by_coord {
            return Some(self.parallel_sparse_rows(nest));
        }
        let visit = self.visit(nest, 0, &label, OutTarget::Partial);
        let (items, bind_pos) = self.parallel_items(nest)?;
        // Partial outputs start at the reduction's identity and are combined with it.
        let fill = self.fill();
        let fold = self.accumulate(quote!(*x), quote!(*y));
        Some(quote! {
            {
                use ::rayon::prelude::*;
                let len = out_vals.len();
                let partial = #items
                    .fold(
                        || vec![#fill; len],
                        |mut buf, (#var, q)| {
                            #bind_pos
                            #label: { #visit }
                            buf
                        },
                    )
                    .reduce(
                        || vec![#fill; len],
                        |mut a, b| {
                            for (x, y) in a.iter_mut().zip(&b) { #fold }
                            a
                        },
                    );
                for (x, y) in out_vals.iter_mut().zip(&partial) { #fold }
            }
        })
    }

    /// A sparse output with its outer loop over threads: each job (one outer coordinate)
    /// lists its entries in order — through a per-thread workspace when the assembly uses
    /// one — and the lists are appended in job order, so the output is assembled exactly as
    /// the sequential loop would assemble it.
    pub(super) fn parallel_sparse(&self, nest: &Nest) -> Option<TokenStream> {
        let lp = &nest.loops[0];
        if let Assembly::Workspace { flush_depth: 0, .. } = nest.assembly {
            return None; // one workspace for the whole nest: nothing to split
        }
        if self.appends_rows() {
            return self.parallel_appended(nest);
        }
        let var = self.var(lp.var);
        let (items, bind_pos) = self.parallel_items(nest)?;
        let label = syn::Lifetime::new("'l0", proc_macro2::Span::call_site());
        let visit = self.visit(nest, 0, &label, OutTarget::Entries);
        let rank = self.k.output_tensor().rank();
        let ws = self.workspace_len();
        let fill = self.fill();
        let sink = if nest.assembly == Assembly::Collect {
            let order: Vec<usize> = self.k.output_tensor().format.mode_order().to_vec();
            quote! {
                let mut by_mode = vec![0usize; #rank];
                for (l, m) in [#(#order),*].iter().enumerate() { by_mode[*m] = c[l]; }
                entries.push((by_mode, v));
            }
        } else if nest.assembly == Assembly::Scatter {
            quote!(scatter.push((c, v));)
        } else {
            quote!(packer.push(&c, v).expect("jobs append in loop order");)
        };
        Some(quote! {
            {
                use ::rayon::prelude::*;
                let parts: Vec<Vec<([usize; #rank], V)>> = #items
                    .map_init(
                        || (vec![#fill; #ws], vec![false; #ws], Vec::<usize>::new()),
                        |(ws, ws_mark, ws_list), (#var, q)| {
                            let mut local: Vec<([usize; #rank], V)> = Vec::new();
                            #bind_pos
                            #label: { #visit }
                            local
                        },
                    )
                    .collect();
                for (c, v) in parts.into_iter().flatten() {
                    #sink
                }
            }
        })
    }

    /// The parallel iterator of `(coordinate, position)` jobs over the outer loop, and what
    /// binds a job's position inside it; `None` when the loop cannot be split into jobs.
    pub(super) fn parallel_items(&self, nest: &Nest) -> Option<(TokenStream, TokenStream)> {
        let lp = &nest.loops[0];
        let var = self.var(lp.var);
        match lp.domain {
            Domain::Universe if lp.iterate.is_empty() => {
                let dim = self.dim(lp.var);
                let items = quote!((0..#dim).into_par_iter().map(|#var| (#var, 0usize)));
                Some((items, quote!()))
            }
            Domain::Single => {
                let r = lp.iterate[0];
                let crd = self.lvl(self.tensor_of(r.access), r.level, "crd");
                let (lo, hi) = self.range(nest, r);
                let items = quote!(((#lo)..(#hi)).into_par_iter().map(|q| (#crd[q].to_usize(), q)));
                Some((items, self.single_bind(r)))
            }
            _ => None,
        }
    }

    /// Inside a parallel job over position `q` of the outer compressed level: its position
    /// and, when it is the access's last level, its value.
    pub(super) fn single_bind(&self, r: LevelRef) -> TokenStream {
        let p = self.pos(r);
        if r.level + 1 == self.k.accesses[r.access].level_vars.len() {
            let vals = self.vals(self.tensor_of(r.access));
            let v = self.val(r.access);
            quote!(let #p = q; let #v: V = #vals[q];)
        } else {
            quote!(let #p = q;)
        }
    }

    /// One parallel job's work over a dense output: `body`, which reads the frame, the job's
    /// slice `out_row` of the output from cell `out_base`, and the two ends of its `range`
    /// (bound by the caller under these names). In the zero-offset copy of the
    /// nests it is a function of its own, called from the job's closure: its slices arrive as
    /// arguments, which Rust marks `noalias`, so LLVM knows the output row a dense inner loop
    /// adds into overlaps no input row (no overlap test per row), and the job's loops get the
    /// registers to themselves instead of reloading captured slices from the closure. The
    /// other copy reads offsets bound by `let`, which a nested function cannot see, and keeps
    /// `body` inline.
    pub(super) fn job(
        &self,
        nest: &Nest,
        range: [TokenStream; 2],
        body: TokenStream,
    ) -> TokenStream {
        if !self.trusted {
            return body;
        }
        let (mut names, mut types): (Vec<TokenStream>, Vec<TokenStream>) = self
            .frame_params()
            .into_iter()
            .filter(|(name, _)| *name != "out_vals")
            .map(|(name, ty)| (quote!(#name), ty))
            .unzip();
        names.extend([quote!(out_row), quote!(out_base)]);
        types.extend([quote!(&mut [V]), quote!(usize)]);
        for end in range {
            names.push(end);
            types.push(quote!(usize));
        }
        let scalars = self.scalar_values(nest);
        let slices = self.pos_slices();
        let nested = super::nested_fn_attributes();
        let call = super::wide_call(quote!(one_job::<V, I>(#(#names),*)));
        quote! {
            #nested
            fn one_job<V: ::tessera_formats::Value, I: ::tessera_formats::Index>(
                #(#names: #types),*
            ) {
                #slices
                #scalars
                #body
            }
            #call
        }
    }

    /// The outer loop walks a compressed level whose coordinates index the dense output's
    /// first level: the coordinates under one parent are sorted and distinct, so a run of
    /// consecutive positions `q0..q1` owns the output rows from `crd[q0]` up to `crd[q1]`
    /// (the next run's first row). Jobs are such runs of `grain` positions, each a plain loop
    /// in one closure call; handing them out costs O(jobs), not a pass over every row.
    pub(super) fn parallel_sparse_rows(&self, nest: &Nest) -> TokenStream {
        let lp = &nest.loops[0];
        let r = lp.iterate[0];
        let var = self.var(lp.var);
        let dim = self.dim(lp.var);
        let crd = self.lvl(self.tensor_of(r.access), r.level, "crd");
        let (lo, hi) = self.range(nest, r);
        let label = syn::Lifetime::new("'l0", proc_macro2::Span::call_site());
        let bind = self.single_bind(r);
        let visit = self.visit(nest, 0, &label, OutTarget::Row);
        let job = self.job(
            nest,
            [quote!(q0), quote!(q1)],
            quote! {
                for q in q0..q1 {
                    let #var = #crd[q].to_usize();
                    #bind
                    #label: { #visit }
                }
            },
        );
        quote! {
            if #dim > 0 && !out_vals.is_empty() {
                use ::rayon::prelude::*;
                let row = out_vals.len() / #dim;
                let (lo, hi) = (#lo, #hi);
                let grain = (4096 / row.max(1)).max(1);
                let first_row = |q: usize| if q < hi { #crd[q].to_usize() } else { #dim };
                let mut jobs: Vec<(usize, usize, usize, &mut [V])> =
                    Vec::with_capacity((hi - lo).div_ceil(grain));
                let mut rest: &mut [V] = out_vals;
                let mut at = 0usize;
                let mut q0 = lo;
                while q0 < hi {
                    let q1 = (q0 + grain).min(hi);
                    let (r0, r1) = (first_row(q0), first_row(q1));
                    let (_, tail) = std::mem::take(&mut rest).split_at_mut((r0 - at) * row);
                    let (mine, tail) = tail.split_at_mut((r1 - r0) * row);
                    jobs.push((q0, q1, r0 * row, mine));
                    (rest, at, q0) = (tail, r1, q1);
                }
                // `move`: the closure holds copies of the slices and extents it reads, so LLVM
                // knows stores to `out_row` cannot change them (captured by reference, they
                // were reloaded after every store and the inner loops ran ~1.6x slower). At most
                // 8 jobs a rayon task, so that no thread is left alone with a large last task
                // (TTV power-law at 2 threads 0.98 -> 1.01-1.05x the hand loop).
                jobs.into_par_iter().with_max_len(8).for_each(move |(q0, q1, out_base, out_row)| {
                    #job
                });
            }
        }
    }
}
