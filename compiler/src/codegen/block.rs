//! Block kernels: the entry point a distribution plan's point task calls (SuperTaco §4.5.3).
//!
//! The same loops as the plain kernel, but every loop is bounded by the block it is given —
//! dense loops run over the block's range of their variable, compressed levels are narrowed
//! to it by two binary searches on their (sorted) coordinates — so P blocks cost what one
//! unsplit run costs, not P times it. The result is the block's contribution to the output,
//! as [`crate::interp::run_block`] returns it, except that a dense output holds only the
//! block's range of its first level (a `Dense` level with an offset). A block kernel is sequential: the
//! plan's point tasks are the parallelism.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};
use tessera_formats::gather::Prefetch;

use super::{nested_fn_attributes, sanitize, wide_call, Gen, OutTarget};
use crate::ir::{Kernel, Nest, OutputKind};

/// The block kernel as one function item: `pub fn kernel_block<V: Value, I: Index>(inputs:
/// &[TensorView<V, I>], out_dims: &[usize], bounds: &[Range<usize>], first: &[bool], out:
/// Option<&mut [V]>) -> Option<Tensor<V, I>>`, with `bounds` and `first` per index variable as
/// in [`crate::ir::Block`]. The inputs are views, so that a point task hands over windows of
/// its stores without copying them (a whole tensor is `t.view()`). A dense output is written
/// into `out` when given (the point's tile of the output store: exactly the block's values,
/// row-major) and then `None` is returned; otherwise, and for sparse outputs, the block's
/// output is returned as a tensor. The tile holds zeros, or anything at all when
/// [`Kernel::assigns_every_cell`] holds: then the kernel writes every cell of it.
pub fn emit_block(k: &Kernel) -> TokenStream {
    emit_block_named(k, &format_ident!("kernel_block"))
}

fn block_gen(k: &Kernel) -> Gen<'_> {
    Gen {
        k,
        block: true,
        mirror: None,
        trusted: false,
        prefetch: Prefetch::Plain,
        flat: None,
    }
}

/// The block kernel under another function name.
pub fn emit_block_named(k: &Kernel, name: &Ident) -> TokenStream {
    let g = block_gen(k);
    let params =
        quote!(bounds: &[::core::ops::Range<usize>], first: &[bool], out: Option<&mut [V]>,);
    g.function(name, params, g.block_prelude())
}

impl Gen<'_> {
    pub(super) fn bound(&self, v: usize, what: &str) -> Ident {
        format_ident!("b{}_{}", what, sanitize(&self.k.vars[v].name, v))
    }

    /// The first and past-the-end coordinate a loop over variable `v` visits.
    pub(super) fn span(&self, v: usize) -> (TokenStream, TokenStream) {
        if self.block {
            let (lo, hi) = (self.bound(v, "lo"), self.bound(v, "hi"));
            (quote!(#lo), quote!(#hi))
        } else {
            let dim = self.dim(v);
            (quote!(0usize), quote!(#dim))
        }
    }

    /// Binds each variable's block range (clipped to its extent, so a malformed block is
    /// empty instead of out of bounds) and whether the block narrows it.
    pub(super) fn block_prelude(&self) -> TokenStream {
        let n = self.k.vars.len();
        let mut ts = quote! {
            assert!(
                bounds.len() == #n && first.len() == #n,
                "a block of this kernel has one range and one flag per index variable"
            );
            let in_place: bool = out.is_some();
        };
        for v in 0..n {
            let (lo, hi, nar) = (
                self.bound(v, "lo"),
                self.bound(v, "hi"),
                self.bound(v, "nar"),
            );
            let dim = self.dim(v);
            ts.extend(quote! {
                let #hi: usize = bounds[#v].end.min(#dim);
                let #lo: usize = bounds[#v].start.min(#hi);
                let #nar: bool = #lo > 0 || #hi < #dim;
            });
        }
        // A dense output holds only the block's range of its first level's variable: that
        // level becomes `Dense { size: hi - lo, offset: lo }`, so a block allocates and zeroes
        // its own rows, not the whole output.
        if self.k.output_kind == OutputKind::Dense {
            let v = self.k.accesses[self.k.output_access].level_vars[0];
            let t = self.k.output;
            let (size, off) = (self.lvl(t, 0, "size"), self.lvl(t, 0, "off"));
            let (lo, hi) = (self.bound(v, "lo"), self.bound(v, "hi"));
            ts.extend(quote!(let (#size, #off): (usize, usize) = (#hi - #lo, #lo);));
        }
        ts
    }

    /// A dense output's values: the caller's tile or a new buffer. A tile that the kernel
    /// assigns whole ([`Self::assigns_tile`]) is used as it is, whatever it holds, once the
    /// run-time part of that proof holds (else it is filled first: a malformed block or
    /// window must not leave a cell unwritten). Any other tile holds zeros (a new store's),
    /// filled again only with a reduction identity that is not 0 (`min`, `max`). Not filling
    /// a tile saves a pass over the output per run (SpMV: 0.8M of a planned run's 14M
    /// instructions).
    pub(super) fn block_output(&self) -> TokenStream {
        let fill = self.fill();
        let refill = match (self.assigns_tile(), self.k.reduce.fill() == 0.0) {
            (Some(covered), _) => quote!(if !(#covered) { tile.fill(#fill); }),
            (None, true) => quote!(),
            (None, false) => quote!(tile.fill(#fill);),
        };
        quote! {
            let mut out_buf: Vec<V> = Vec::new();
            let out_vals: &mut [V] = match out {
                Some(tile) => {
                    assert!(tile.len() == out_len, "the output tile holds exactly the block's values");
                    #refill
                    tile
                }
                None => {
                    out_buf = vec![#fill; out_len];
                    &mut out_buf
                }
            };
        }
    }

    /// When the nests store every cell of a dense output's block tile (see
    /// [`Kernel::assigns_every_cell`]), the condition, tested when the kernel runs, under
    /// which they do: the nest runs in this block (first along every split variable it does
    /// not loop over), the output's deeper variables are not narrowed (the tile holds them
    /// whole), and each dense level a loop over an output variable locates, whose absence
    /// would end that iteration (or whose end bounds the loop, `located_end`, `row_range`),
    /// holds the block's whole range of its variable. `None` when the kernel does not assign.
    pub(super) fn assigns_tile(&self) -> Option<TokenStream> {
        let k = self.k;
        if !k.assigns_every_cell() {
            return None;
        }
        let nest = &k.nests[0];
        let mut covered = vec![];
        for lp in &nest.loops[..nest.acc_depth] {
            for r in &lp.locate {
                if r.access == k.output_access || !self.required(nest, r.access) {
                    continue;
                }
                let t = self.tensor_of(r.access);
                let (size, off) = (self.lvl(t, r.level, "size"), self.lvl(t, r.level, "off"));
                let v = k.level_var(*r);
                let (lo, hi) = (self.bound(v, "lo"), self.bound(v, "hi"));
                covered.push(quote!((#lo >= #hi || (#off <= #lo && #hi <= #off + #size))));
            }
        }
        let unlooped = (0..k.vars.len()).filter(|v| nest.loops.iter().all(|l| l.var != *v));
        covered.extend(unlooped.map(|v| quote!(first[#v])));
        let out = &k.accesses[k.output_access].level_vars;
        let deeper = out.iter().skip(1).map(|&v| self.bound(v, "nar"));
        covered.extend(deeper.map(|nar| quote!(!#nar)));
        Some(quote!(true #(&& #covered)*))
    }

    /// A block kernel's result: `None` when a dense output was written into the caller's
    /// tile, else the output tensor `finish` assembles.
    pub(super) fn block_finish(&self, finish: TokenStream) -> TokenStream {
        match self.k.output_kind {
            OutputKind::Sparse => quote!(Some({ #finish })),
            OutputKind::Scalar | OutputKind::Dense => quote! {
                if in_place { None } else { Some({ #finish }) }
            },
        }
    }

    /// In a block kernel, narrows the children range `lo..hi` of a compressed level whose
    /// coordinates are variable `v` to the block's range of `v`: coordinates are sorted under
    /// one parent, so two binary searches (only when the block narrows `v`).
    pub(super) fn narrow(&self, crd: &Ident, v: usize, lo: &Ident, hi: &Ident) -> TokenStream {
        if !self.block {
            return quote!();
        }
        let (blo, bhi, nar) = (
            self.bound(v, "lo"),
            self.bound(v, "hi"),
            self.bound(v, "nar"),
        );
        quote! {
            let (#lo, #hi) = if #nar {
                let s = &#crd[#lo..#hi];
                (
                    #lo + s.partition_point(|c| c.to_usize() < #blo),
                    #lo + s.partition_point(|c| c.to_usize() < #bhi),
                )
            } else {
                (#lo, #hi)
            };
        }
    }

    /// A nest in a block kernel: run sequentially, and only in the blocks that are first along
    /// every split variable it does not loop over (see [`crate::ir::Block::runs`]).
    pub(super) fn block_nest(&self, nest: &Nest) -> TokenStream {
        let unlooped: Vec<usize> = (0..self.k.vars.len())
            .filter(|v| nest.loops.iter().all(|l| l.var != *v))
            .collect();
        let scalars = self.scalar_values(nest);
        let body = self.body(nest, 0, OutTarget::Whole);
        quote! {
            if true #(&& first[#unlooped])* {
                #scalars
                #body
            }
        }
    }

    /// A block kernel's nests (dense or scalar output) as two functions of their own, one
    /// with the offsets read per nonzero `const` 0 and one taking every offset: as for
    /// sequential kernels (`nests_in_own_function`), slices arrive as `noalias` arguments and
    /// each copy gets the registers to itself (inline in the kernel, the row loop kept its
    /// slices on the stack: SpMV 51 instructions per row against the parallel kernel's 37).
    ///
    /// Only the *inner* offsets decide which copy runs (see [`Gen::outer_offset`]): a plan's
    /// row window almost never starts at 0, but its row offset is subtracted once per row,
    /// while a dense vector's (`x[crd - off]`) is subtracted once per nonzero. So a block
    /// whose vector view starts at coordinate 0 runs the copy without that subtraction
    /// whatever its rows; before, any row offset sent it to the slow copy.
    pub(super) fn block_nests_in_functions(
        &self,
        offsets: &[Ident],
        nests: TokenStream,
    ) -> TokenStream {
        let (outer, inner): (Vec<Ident>, Vec<Ident>) =
            offsets.iter().cloned().partition(|o| self.outer_offset(o));
        let mut params = self.frame_params();
        params.push((format_ident!("first"), quote!(&[bool])));
        for v in 0..self.k.vars.len() {
            params.push((self.bound(v, "lo"), quote!(usize)));
            params.push((self.bound(v, "hi"), quote!(usize)));
            params.push((self.bound(v, "nar"), quote!(bool)));
        }
        let (names, types): (Vec<Ident>, Vec<TokenStream>) = params.into_iter().unzip();
        let rows = self.pos_slices();
        let nested = nested_fn_attributes();
        let zero = wide_call(quote!(zero_offsets::<V, I>(#(#outer,)* #(#names),*)));
        let any = wide_call(quote!(any_offsets::<V, I>(#(#offsets,)* #(#names),*)));
        quote! {
            #nested
            fn zero_offsets<V: ::tessera_formats::Value, I: ::tessera_formats::Index>(
                #(#outer: usize,)* #(#names: #types),*
            ) {
                #(const #inner: usize = 0;)*
                #rows
                #nests
            }
            #nested
            fn any_offsets<V: ::tessera_formats::Value, I: ::tessera_formats::Index>(
                #(#offsets: usize,)* #(#names: #types),*
            ) {
                #rows
                #nests
            }
            if true #(&& #inner == 0)* {
                #zero
            } else {
                #any
            }
        }
    }

    /// Whether input offset `off` (a `t{t}_l{l}_off` local) is subtracted only once per
    /// iteration of the outermost loop: a first level whose every access is indexed by the
    /// variable of every nest's outermost loop (SpMV's and SpMM's rows of `A`).
    fn outer_offset(&self, off: &Ident) -> bool {
        let k = self.k;
        (0..k.tensors.len()).any(|t| {
            *off == self.lvl(t, 0, "off")
                && k.accesses.iter().filter(|a| a.tensor == t).all(|a| {
                    k.nests
                        .iter()
                        .all(|n| n.loops.first().map(|l| l.var) == a.level_vars.first().copied())
                })
        })
    }
}
