//! A sparse output whose levels are all dense but the last (CSR, a sparse vector, `dds`),
//! produced in order (`InOrder`, or a row workspace flushed row by row): its entries are
//! appended straight to `crd` and `vals`, each row's end recorded in `pos`, instead of going
//! through the general `Packer`, whose per-entry checks cost as much as SpGEMM's arithmetic.

use proc_macro2::TokenStream;
use quote::quote;
use tessera_formats::LevelType;

use super::{Gen, OutTarget};
use crate::ir::{Assembly, Nest, OutputKind};

impl Gen<'_> {
    /// Whether the output is assembled by appending rows (see the module comment).
    pub(super) fn appends_rows(&self) -> bool {
        let levels = self.k.output_tensor().format.levels();
        let in_order = self
            .k
            .nests
            .iter()
            .all(|n| matches!(n.assembly, Assembly::InOrder | Assembly::Workspace { .. }));
        self.k.output_kind == OutputKind::Sparse
            && self.mirror.is_none()
            && in_order
            && levels.last() == Some(&LevelType::Compressed)
            && levels[..levels.len() - 1]
                .iter()
                .all(|l| *l == LevelType::Dense)
    }

    /// The output's dense-level sizes (every level but the last).
    fn row_sizes(&self) -> Vec<proc_macro2::Ident> {
        let rank = self.k.output_tensor().rank();
        (0..rank - 1)
            .map(|l| self.lvl(self.k.output, l, "size"))
            .collect()
    }

    /// The output's `pos` (one slot per row, plus one), `crd` and `vals`.
    pub(super) fn appended_init(&self) -> TokenStream {
        let sizes = self.row_sizes();
        quote! {
            let out_rows: usize = [#(#sizes),*]
                .iter()
                .try_fold(1usize, |n, d| n.checked_mul(*d))
                .expect("output dimensions fit in memory");
            let mut out_pos: Vec<I> = vec![I::from_usize(0); out_rows + 1];
            let mut out_crd: Vec<I> = Vec::new();
            let mut out_vals: Vec<V> = Vec::new();
        }
    }

    /// Appends the entry at output coordinates `coords` (level order) with value `v`; entries
    /// come in level order, each once.
    pub(super) fn append(&self, coords: TokenStream, v: TokenStream) -> TokenStream {
        let record = quote!(out_pos[row + 1] = I::from_usize(end););
        self.push_entry(coords, v, quote!(out_crd), quote!(out_vals), record)
    }

    /// Pushes the entry's last coordinate and value onto `crd` and `vals`, then runs
    /// `record` with `row` (the entry's flat row) and `end` (`crd`'s new length) bound.
    fn push_entry(
        &self,
        coords: TokenStream,
        v: TokenStream,
        crd: TokenStream,
        vals: TokenStream,
        record: TokenStream,
    ) -> TokenStream {
        let rank = self.k.output_tensor().rank();
        let last = rank - 1;
        let row = self.row_of(quote!(at));
        quote! {{
            let (at, v): ([usize; #rank], V) = (#coords, #v);
            #crd.push(I::from_usize(at[#last]));
            #vals.push(v);
            let (row, end) = (#row, #crd.len());
            #record
        }}
    }

    /// Rows nothing was appended to end where the row before them ends; then the tensor.
    pub(super) fn appended_finish(&self) -> TokenStream {
        let sizes = self.row_sizes();
        quote! {
            // `from_usize` truncates in release builds: no entry count may exceed the width.
            assert!(
                I::try_from_usize(out_crd.len()).is_some(),
                "the output's {} entries do not fit its coordinate type: use 64-bit coordinates",
                out_crd.len()
            );
            for r in 1..out_pos.len() {
                if out_pos[r].to_usize() < out_pos[r - 1].to_usize() {
                    out_pos[r] = out_pos[r - 1];
                }
            }
            let mut levels: Vec<Level<I>> = vec![#(Level::Dense { size: #sizes, offset: 0 }),*];
            levels.push(Level::Compressed { pos: out_pos, crd: out_crd });
            Tensor::from_parts(out_dims.to_vec(), out_format, levels, out_vals)
                .expect("rows appended in order are a valid output")
        }
    }

    /// Inside a parallel job: appends the entry to the job's own `crd`/`vals` (`local.1`,
    /// `local.2`) and records where its row ends in them (`local.0`).
    pub(super) fn append_local(&self, coords: TokenStream, v: TokenStream) -> TokenStream {
        let record = quote! {
            match local.0.last_mut() {
                Some(last) if last.0 == row => last.1 = end,
                _ => local.0.push((row, end)),
            }
        };
        self.push_entry(coords, v, quote!(local.1), quote!(local.2), record)
    }

    /// The flat row index of output coordinates `at` (its dense levels, row-major).
    fn row_of(&self, at: TokenStream) -> TokenStream {
        let mut row = quote!(0usize);
        for (l, size) in self.row_sizes().iter().enumerate() {
            row = quote!((#row * #size + #at[#l]));
        }
        row
    }

    /// The outer loop over threads in jobs of consecutive outer coordinates: each job fills
    /// its own `crd`/`vals` (through a per-thread workspace when the nest uses one), and the
    /// jobs' arrays are concatenated in order, each row's end recorded in `pos` — so the
    /// output is the sequential loop's, assembled at memory-copy speed.
    pub(super) fn parallel_appended(&self, nest: &Nest) -> Option<TokenStream> {
        let var = self.var(nest.loops[0].var);
        let (items, bind_pos) = self.parallel_items(nest)?;
        let label = syn::Lifetime::new("'l0", proc_macro2::Span::call_site());
        let visit = self.visit(nest, 0, &label, OutTarget::Entries);
        let (ws, fill) = (self.workspace_len(), self.fill());
        Some(quote! {
            {
                use ::rayon::prelude::*;
                let items: Vec<(usize, usize)> = #items.collect();
                // Outer coordinates per job: enough that a job's arrays amortise their growth.
                const JOB: usize = 256;
                let parts: Vec<(Vec<(usize, usize)>, Vec<I>, Vec<V>)> = items
                    .par_chunks(JOB)
                    // At most 8 jobs a rayon task (each takes a workspace): rayon's adaptive
                    // split left a few large tasks, and the thread that drew the last one ran
                    // on alone (SpGEMM at 2 threads 0.85-0.93x the hand loop; with this and
                    // the reserve below 0.94-1.13x).
                    .with_max_len(8)
                    .map_init(
                        || (vec![#fill; #ws], vec![false; #ws], Vec::<usize>::new()),
                        |(ws, ws_mark, ws_list), job| {
                            let mut local = (Vec::<(usize, usize)>::new(), Vec::<I>::new(), Vec::<V>::new());
                            for &(#var, q) in job {
                                #bind_pos
                                #label: { #visit }
                            }
                            local
                        },
                    )
                    .collect();
                // One allocation for the whole output (growing by doubling copied it twice).
                let total: usize = parts.iter().map(|p| p.1.len()).sum();
                out_crd.reserve(total);
                out_vals.reserve(total);
                for (rows, crd, vals) in parts {
                    let base = out_crd.len();
                    out_crd.extend(crd);
                    out_vals.extend(vals);
                    for (row, end) in rows {
                        out_pos[row + 1] = I::from_usize(base + end);
                    }
                }
            }
        })
    }
}
