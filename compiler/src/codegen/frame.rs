//! The function's frame: inputs bound to local slices and extents, the output allocated
//! before the nests and assembled into a `Tensor` after them.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use tessera_formats::LevelType;

use super::Gen;
use crate::ir::{Assembly, DimSource, OutputKind};

impl Gen<'_> {
    /// Binds every input's values and level arrays, and every variable's extent.
    pub(super) fn prelude(&self) -> TokenStream {
        let mut out = TokenStream::new();
        for (t, decl) in self.k.tensors.iter().enumerate() {
            let Some(slot) = decl.input_slot else {
                continue;
            };
            let vals = self.vals(t);
            let tv = format_ident!("t{}", t);
            let name = &decl.name;
            // A block kernel's inputs are views (windows of a plan's stores, no copy).
            let input_ty = self.input_type();
            out.extend(quote!(let #tv: &#input_ty = &inputs[#slot];));
            if self.k.repacks.iter().any(|r| r.slot == slot) {
                // Its mode order agrees with no loop order: transposed once, here (unless the
                // caller already passes it in the kernel's format).
                let (f, rank) = (decl.format.to_string(), decl.rank());
                let owned = format_ident!("t{}_repacked", t);
                let order = decl.format.mode_order();
                let sort = counting_sort(quote!(scatter), quote!(level_dims));
                let finish = packed(quote!(#tv.dims()), quote!(to_format));
                // Entries in the new level order by counting sorts (linear), then packed.
                out.extend(quote! {
                    let to_format = ::tessera_formats::Format::parse(#f, #rank)
                        .expect("the re-pack format was valid at compile time");
                    let #owned: Option<Tensor<V, I>> = (#tv.format() != &to_format).then(|| {
                        let order: [usize; #rank] = [#(#order),*];
                        let level_dims: Vec<usize> = order.iter().map(|m| #tv.dims()[*m]).collect();
                        let mut scatter: Vec<([usize; #rank], V)> =
                            #tv.entries().map(|(c, v)| (order.map(|m| c[m]), v)).collect();
                        #sort
                        let mut packer = ::tessera_formats::Packer::<V, I, Vec<I>, Vec<V>>::in_memory(
                            #tv.dims(),
                            &to_format,
                            level_dims.iter().map(|d| (*d, 0)).collect(),
                        );
                        for (c, v) in &scatter {
                            packer.push(c, *v).expect("sorted entries append in order");
                        }
                        #finish
                    });
                });
                out.extend(match self.block {
                    true => quote! {
                        let #owned = #owned.as_ref().map(|t| t.view());
                        let #tv: &#input_ty = #owned.as_ref().unwrap_or(#tv);
                    },
                    false => quote!(let #tv: &#input_ty = #owned.as_ref().unwrap_or(#tv);),
                });
            }
            out.extend(quote!(let #vals: &[V] = #tv.vals();));
            for (l, lt) in decl.format.levels().iter().enumerate() {
                let msg = format!("input `{name}` level {l} is not {lt:?} as compiled");
                match lt {
                    LevelType::Dense => {
                        let (size, off) = (self.lvl(t, l, "size"), self.lvl(t, l, "off"));
                        let pat = match self.block {
                            true => quote!(LevelView::Dense { size, offset, .. }),
                            false => quote!(Level::Dense { size, offset }),
                        };
                        out.extend(quote! {
                            let (#size, #off) = match &#tv.levels()[#l] {
                                #pat => (*size, *offset),
                                _ => panic!(#msg),
                            };
                        });
                    }
                    LevelType::Compressed => {
                        let (pos, crd) = (self.lvl(t, l, "pos"), self.lvl(t, l, "crd"));
                        let (pat, arrays) = match self.block {
                            true => (
                                quote!(LevelView::Compressed { pos, crd }),
                                quote!((*pos, *crd)),
                            ),
                            false => (
                                quote!(Level::Compressed { pos, crd }),
                                quote!((pos.as_slice(), crd.as_slice())),
                            ),
                        };
                        out.extend(quote! {
                            let (#pos, #crd): (&[I], &[I]) = match &#tv.levels()[#l] {
                                #pat => #arrays,
                                _ => panic!(#msg),
                            };
                        });
                    }
                    LevelType::Singleton => {
                        let crd = self.lvl(t, l, "crd");
                        let (pat, array) = match self.block {
                            true => (quote!(LevelView::Singleton { crd }), quote!(*crd)),
                            false => (quote!(Level::Singleton { crd }), quote!(crd.as_slice())),
                        };
                        out.extend(quote! {
                            let #crd: &[I] = match &#tv.levels()[#l] {
                                #pat => #array,
                                _ => panic!(#msg),
                            };
                        });
                    }
                }
            }
        }
        for (v, decl) in self.k.vars.iter().enumerate() {
            let dim = self.dim(v);
            let src = match decl.dim {
                DimSource::Input { slot, mode } => quote!(inputs[#slot].dims()[#mode]),
                DimSource::Output { mode } => quote!(out_dims[#mode]),
            };
            out.extend(quote!(let #dim: usize = #src;));
        }
        // The output's dense levels: size from `out_dims`, offset 0 — a `const` outside block
        // kernels (whose first level may start later), so that `p - off` folds away also
        // inside parallel closures and nested functions, which a `let` zero reaches only as a
        // captured or passed value (a subtraction and a register per row of SpMV).
        let decl = self.k.output_tensor();
        let t = self.k.output;
        for (l, m) in decl.format.mode_order().iter().enumerate() {
            let (size, off) = (self.lvl(t, l, "size"), self.lvl(t, l, "off"));
            out.extend(match self.block {
                true => quote! { let #size: usize = out_dims[#m]; let #off: usize = 0; },
                false => quote! { let #size: usize = out_dims[#m]; const #off: usize = 0; },
            });
        }
        out.extend(self.gather_flags());
        out
    }

    /// What the nests read from the frame, as `(local, type)`: every input's values and
    /// level arrays and sizes, every variable's extent, the dense output's level sizes and
    /// values, and the caller's functions. Dense-level offsets are left out: the function
    /// these become the parameters of ([`Gen::zero_offsets_specialised`]) has them all 0.
    pub(super) fn frame_params(&self) -> Vec<(proc_macro2::Ident, TokenStream)> {
        let mut params = Vec::new();
        for (t, decl) in self.k.tensors.iter().enumerate() {
            if decl.input_slot.is_none() {
                continue;
            }
            params.push((self.vals(t), quote!(&[V])));
            for (l, lt) in decl.format.levels().iter().enumerate() {
                match lt {
                    LevelType::Dense => params.push((self.lvl(t, l, "size"), quote!(usize))),
                    LevelType::Compressed => {
                        params.push((self.lvl(t, l, "pos"), quote!(&[I])));
                        params.push((self.lvl(t, l, "crd"), quote!(&[I])));
                    }
                    LevelType::Singleton => params.push((self.lvl(t, l, "crd"), quote!(&[I]))),
                }
            }
        }
        for v in 0..self.k.vars.len() {
            params.push((self.dim(v), quote!(usize)));
        }
        let (sizes, offs) = self.output_levels();
        for (size, off) in sizes.into_iter().zip(offs) {
            params.push((size, quote!(usize)));
            // Outside block kernels the output's offsets are `const` items, seen everywhere.
            if self.block {
                params.push((off, quote!(usize)));
            }
        }
        params.extend(self.gather_params());
        params.push((format_ident!("out_vals"), quote!(&mut [V])));
        if !self.k.user_functions.is_empty() {
            params.push((
                format_ident!("user_fns"),
                quote!(&[&(dyn Fn(V) -> V + Sync)]),
            ));
        }
        params
    }

    /// The type of one input: a tensor, or in a block kernel a view of one.
    pub(super) fn input_type(&self) -> TokenStream {
        match self.block {
            true => quote!(::tessera_formats::TensorView<'_, V, I>),
            false => quote!(Tensor<V, I>),
        }
    }

    pub(super) fn format_expr(&self) -> TokenStream {
        let f = self.k.output_tensor().format.to_string();
        let rank = self.k.output_tensor().rank();
        // Parsed once per kernel (a plan calls a block kernel once per block per run), then
        // cloned: a clone is two small copies, a parse ~1 k instructions.
        quote! {{
            static OUT_FORMAT: ::std::sync::OnceLock<::tessera_formats::Format> =
                ::std::sync::OnceLock::new();
            OUT_FORMAT
                .get_or_init(|| {
                    ::tessera_formats::Format::parse(#f, #rank)
                        .expect("the output format was valid at compile time")
                })
                .clone()
        }}
    }

    pub(super) fn output_init(&self) -> TokenStream {
        let fmt = self.format_expr();
        let fill = self.fill();
        match self.k.output_kind {
            // `vec![zero; n]` rather than `Tensor::zeros`: for floats it is a zeroed allocation
            // (calloc), so the pages are zeroed lazily by whichever thread first writes them
            // instead of in one sequential pass before a parallel loop.
            OutputKind::Scalar | OutputKind::Dense => {
                let (sizes, _) = self.output_levels();
                let alloc = match self.block {
                    true => self.block_output(),
                    false => quote! {
                        let mut out_buf: Vec<V> = vec![#fill; out_len];
                        let out_vals: &mut [V] = &mut out_buf;
                    },
                };
                quote! {
                // The output's levels (a block kernel's first level is the block's rows).
                let out_len: usize = [#(#sizes),*]
                    .iter()
                    .try_fold(1usize, |n, d| n.checked_mul(*d))
                    .expect("output dimensions fit in memory");
                #alloc
                }
            }
            OutputKind::Sparse if self.mirror.is_some() => self.mirror_init(self.mirror.unwrap()),
            OutputKind::Sparse => {
                let rank = self.k.output_tensor().rank();
                let fmt_val = quote!(let out_format = #fmt;);
                let ws = self.workspace_len();
                let workspace = quote! {
                    let mut ws: Vec<V> = vec![#fill; #ws];
                    let mut ws_mark: Vec<bool> = vec![false; #ws];
                    let mut ws_list: Vec<usize> = Vec::new();
                };
                if self.appends_rows() {
                    let init = self.appended_init();
                    return quote!(#fmt_val #init #workspace);
                }
                quote! {
                    #fmt_val
                    let mut packer = ::tessera_formats::Packer::<V, I, Vec<I>, Vec<V>>::in_memory(
                        out_dims,
                        &out_format,
                        out_format.mode_order().iter().map(|m| (out_dims[*m], 0)).collect(),
                    );
                    let mut entries: Vec<(Vec<usize>, V)> = Vec::new();
                    let mut scatter: Vec<([usize; #rank], V)> = Vec::new();
                    #workspace
                }
            }
        }
    }

    /// The locals holding each output level's size and offset (the offset is 0 but in a
    /// block kernel's first level).
    fn output_levels(&self) -> (Vec<proc_macro2::Ident>, Vec<proc_macro2::Ident>) {
        let t = self.k.output;
        (0..self.k.output_tensor().rank())
            .map(|l| (self.lvl(t, l, "size"), self.lvl(t, l, "off")))
            .unzip()
    }

    /// The extent of the workspace variable (0 when no nest uses one).
    pub(super) fn workspace_len(&self) -> TokenStream {
        for n in &self.k.nests {
            if let Assembly::Workspace { var, .. } = n.assembly {
                let dim = self.dim(var);
                return quote!(#dim);
            }
        }
        quote!(0usize)
    }

    pub(super) fn output_finish(&self) -> TokenStream {
        match self.k.output_kind {
            OutputKind::Scalar | OutputKind::Dense => {
                let (sizes, offs) = self.output_levels();
                // Parsed here, not with the buffer: a block kernel that wrote its tile in
                // place never gets here, and a plan calls one per block per run.
                let fmt = self.format_expr();
                quote! {
                    let out_format = #fmt;
                    let levels: Vec<Level<I>> = vec![#(Level::Dense { size: #sizes, offset: #offs }),*];
                    Tensor::from_parts(out_dims.to_vec(), out_format, levels, out_buf)
                        .expect("a dense output of out_dims is valid")
                }
            }
            OutputKind::Sparse if self.mirror.is_some() => self.mirror_finish(self.mirror.unwrap()),
            OutputKind::Sparse if self.appends_rows() => self.appended_finish(),
            OutputKind::Sparse => {
                let collect = self.k.nests.iter().any(|n| n.assembly == Assembly::Collect);
                if collect {
                    // `from_entries` sums duplicates; other reductions combine them first.
                    let merge = if self.k.reduce == crate::ast::ReduceOp::Sum {
                        quote!()
                    } else {
                        let c = self.combine(quote!(last.1), quote!(v));
                        quote! {
                            entries.sort_by(|a, b| a.0.cmp(&b.0));
                            let mut merged: Vec<(Vec<usize>, V)> = Vec::with_capacity(entries.len());
                            for (c, v) in entries {
                                match merged.last_mut() {
                                    Some(last) if last.0 == c => last.1 = #c,
                                    _ => merged.push((c, v)),
                                }
                            }
                            let entries = merged;
                        }
                    };
                    let padded = self.k.reduce.fill() != 0.0
                        && crate::lower::padded_levels(&self.k.output_tensor().format);
                    if padded {
                        // Dense levels below a compressed one are padded with 0 by assembly:
                        // where nothing was written, the value is the fill.
                        let fill = self.fill();
                        return quote! {
                            #merge
                            Tensor::from_entries_padded(out_dims.to_vec(), out_format, entries, #fill)
                                .expect("entries lie inside out_dims")
                        };
                    }
                    quote! {
                        #merge
                        Tensor::from_entries(out_dims.to_vec(), out_format, entries)
                            .expect("entries lie inside out_dims")
                    }
                } else {
                    let scatter = if self.k.nests.iter().any(|n| n.assembly == Assembly::Scatter) {
                        // Entries in loop order, each once: into level order (linear).
                        let sort = counting_sort(quote!(scatter), quote!(level_dims));
                        quote! {
                            let level_dims: Vec<usize> =
                                out_format.mode_order().iter().map(|m| out_dims[*m]).collect();
                            #sort
                            for (c, v) in &scatter {
                                packer.push(c, *v).expect("sorted entries append in order");
                            }
                        }
                    } else {
                        quote!()
                    };
                    let finish = packed(quote!(out_dims), quote!(out_format));
                    quote! {
                        #scatter
                        #finish
                    }
                }
            }
        }
    }
}

/// Sorts `entries` (a `Vec<([usize; R], V)>` in scope) into level order by one stable
/// counting sort per level, last level first (LSD radix: linear, no comparisons);
/// `level_dims` is each level's extent.
fn counting_sort(entries: TokenStream, level_dims: TokenStream) -> TokenStream {
    quote! {
        for l in (0..#level_dims.len()).rev() {
            let mut start = vec![0usize; #level_dims[l] + 1];
            for (c, _) in &#entries {
                start[c[l] + 1] += 1;
            }
            for k in 1..start.len() {
                start[k] += start[k - 1];
            }
            let mut sorted = #entries.clone();
            for e in &#entries {
                let at = &mut start[e.0[l]];
                sorted[*at] = *e;
                *at += 1;
            }
            #entries = sorted;
        }
    }
}

/// The tensor of a finished `packer` in scope, with dimensions `dims` and format `format`.
fn packed(dims: TokenStream, format: TokenStream) -> TokenStream {
    quote! {
        let (arrays, vals, _) = packer.finish().expect("assembly appends in order");
        let levels: Vec<Level<I>> = Level::from_packed(&#dims, &#format, arrays);
        Tensor::from_parts(#dims.to_vec(), #format, levels, vals)
            .expect("assembled levels are valid")
    }
}
