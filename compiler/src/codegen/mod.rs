//! Rust code generation: one generic function per [`Kernel`], emitted with `quote`.
//!
//! The generated code follows the plan of the IR exactly as [`crate::interp`] executes it —
//! same loops, merges, locates, accumulator and assembly — but specialised: every level's
//! arrays are bound once to local slices, positions are plain `usize` locals, operands whose
//! absence zeroes the whole term skip the iteration instead of carrying a flag, and the other
//! ones use the sentinel `ABSENT` (an operand missing from one side of a union reads as zero).
//!
//! The function is safe Rust: all indexing is bounds-checked, so a tensor that breaks the
//! precondition panics instead of reading out of bounds. What validation (done once, when a
//! `Tensor` is built) already rules out is not re-tested as data: with whole tensors at
//! offset 0 a dense vector is indexed at located coordinates rather than probed with a
//! skipping `get` (`vector_at!`, see `zero_offsets_specialised`), which leaves one
//! never-taken bounds check per gather, as in a hand-written `x[c]`; so is a block kernel's
//! view of a dense vector, which the plan makes cover the block (`Gen::function`). A dense output cell that
//! the nest writes once is stored, not added to (`written_once`), and the output row of an
//! innermost dense loop is sliced where its parent is fixed (`hoisted_rows`). A dense loop
//! stops where a dense operand level it locates ends (`located_end`), and the zero-offset
//! nests of a dense-output kernel, sequential or one parallel job, run in a function of their
//! own (`noalias` slices, registers of their own).
//!
//! `parallelize(v)` runs the outermost loop over rayon's pool (generated code then refers to
//! `::rayon`, so the crate that includes it must depend on rayon): row chunks of a dense
//! output when `v` indexes its first level (by coordinate, also when the outer loop walks a
//! compressed level), otherwise per-thread partial outputs summed at the end; a sparse output
//! gets one ordered entry list per outer coordinate (with per-thread workspaces), appended in
//! order. Outer loops that merge several compressed levels, and a workspace spanning the
//! whole nest, run sequentially.

mod appended;
mod block;
mod dense_row;
mod elementwise;
mod flatten;
mod frame;
mod hoist;
mod loops;
mod mirror;
mod output;
mod parallel;
mod prefetch;
mod signature;
mod values;

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};
use tessera_formats::gather::Prefetch;
use tessera_formats::LevelType;

pub use block::{emit_block, emit_block_named};
pub use elementwise::{emit_elementwise, emit_elementwise_named, is_elementwise};
pub use signature::signature_source;

use crate::ir::{AccessId, Kernel, LevelRef, Nest};

/// The kernel as one function item:
/// `pub fn kernel<V: Value, I: Index>(inputs: &[&Tensor<V, I>], out_dims: &[usize]) -> Tensor<V, I>`.
pub fn emit(k: &Kernel) -> TokenStream {
    emit_named(k, &format_ident!("kernel"))
}

/// The kernel under another function name (several kernels in one module).
pub fn emit_named(k: &Kernel, name: &Ident) -> TokenStream {
    let g = Gen {
        k,
        block: false,
        mirror: crate::lower::mirror(k),
        trusted: false,
        prefetch: Prefetch::Plain,
        flat: None,
    };
    g.function(name, quote!(), quote!())
}

/// The index variables over whose whole extent the kernel allocates an array, with where
/// their extents come from: a workspace's variable (`vec![fill; extent]`), every output level
/// of a scattered output and every mode of a re-packed input (a counting sort's counts, one
/// per coordinate). `tensor!` refuses extents no allocation can hold before calling the
/// kernel, which would panic with "capacity overflow".
pub fn dense_extents(k: &Kernel) -> Vec<(String, crate::ir::DimSource)> {
    let mut vars: Vec<usize> = Vec::new();
    for n in &k.nests {
        match n.assembly {
            crate::ir::Assembly::Workspace { var, .. } => vars.push(var),
            crate::ir::Assembly::Scatter => {
                vars.extend(&k.accesses[k.output_access].level_vars);
            }
            _ => {}
        }
    }
    for r in &k.repacks {
        let uses = k
            .accesses
            .iter()
            .filter(|a| k.tensors[a.tensor].input_slot == Some(r.slot));
        vars.extend(uses.flat_map(|a| a.level_vars.iter().copied()));
    }
    vars.sort_unstable();
    vars.dedup();
    vars.into_iter()
        .map(|v| (k.vars[v].name.clone(), k.vars[v].dim))
        .collect()
}

/// Whether `ts` names `id` anywhere, inside groups and macro arguments included: how the
/// loops tell that nothing below reads a coordinate or a position (`flatten`, `loops`).
fn mentions(ts: &TokenStream, id: &Ident) -> bool {
    ts.clone().into_iter().any(|t| match t {
        proc_macro2::TokenTree::Ident(i) => i == *id,
        proc_macro2::TokenTree::Group(g) => mentions(&g.stream(), id),
        _ => false,
    })
}

/// The generated code as formatted Rust source (for `tessera emit`).
pub fn pretty(tokens: &TokenStream) -> String {
    match syn::parse2::<syn::File>(tokens.clone()) {
        Ok(file) => prettyplease::unparse(&file),
        // Not reachable for our own output; fall back to the raw tokens rather than fail.
        Err(_) => tokens.to_string(),
    }
}

fn doc_comment(k: &Kernel) -> TokenStream {
    let names = k.inputs().join(", ");
    let formats: Vec<String> = k
        .tensors
        .iter()
        .map(|t| format!("{}: {}", t.name, t.format))
        .collect();
    let lines = [
        format!(" Generated by tessera-compiler for `{}`.", k.source),
        String::new(),
        format!(
            " `inputs` are, in order: {names}; formats {}.",
            formats.join(", ")
        ),
        " Precondition (the caller validates it): every input has the format and rank it was"
            .into(),
        " compiled for, and dimensions agree between operands and with `out_dims`; otherwise"
            .into(),
        " the kernel panics (it never reads out of bounds).".into(),
    ];
    let mut lines: Vec<String> = lines.to_vec();
    if k.parallel.is_some() {
        lines.push(" Runs its outermost loop over threads with `::rayon`.".into());
    }
    for r in &k.repacks {
        lines.push(format!(
            " Re-packs `{}` from {} to {} once before the loops (its mode order agrees with no loop order).",
            r.name, r.from, r.to
        ));
    }
    quote! { #(#[doc = #lines])* }
}

/// The generator: one kernel, and helpers that name its generated locals.
struct Gen<'k> {
    k: &'k Kernel,
    /// A block kernel ([`emit_block_named`]): every loop bounded by the block, sequential.
    block: bool,
    /// The operand whose structure the sparse output copies (never in a block kernel, whose
    /// output holds only its block's entries).
    mirror: Option<crate::lower::Mirror>,
    /// Emitting the zero-offset copy of the nests over whole validated tensors (never in a
    /// block kernel): a parallel job over a dense output runs in a function of its own (see
    /// [`Gen::job`]), which sees the `const` zero offsets, and a located dense first level is
    /// indexed without a test (see [`Gen::trusts_first_level`]).
    trusted: bool,
    /// Which copy of a gathering nest is being emitted (see `prefetch`; `Plain` also outside
    /// a copy, the nest still to be split); the nest picks a copy once per call, so the plain
    /// copy is exactly the loop without hints.
    prefetch: Prefetch,
    /// Emitting the loops below a flattened level (see `flatten`): the next level's range is
    /// that of the whole range the flattened loop would have walked.
    flat: Option<LevelRef>,
}

/// Where a nest writes its dense or scalar output.
#[derive(Clone, Copy, PartialEq)]
enum OutTarget {
    /// `out_vals[p]`.
    Whole,
    /// `out_row[p - out_base]` (a row chunk owned by one thread).
    Row,
    /// `buf[p]` (a thread's partial output).
    Partial,
    /// Sparse output: `local.push((level coordinates, value))`, one list per parallel job.
    Entries,
}

impl Gen<'_> {
    fn tensor_of(&self, a: AccessId) -> usize {
        self.k.accesses[a].tensor
    }

    fn vals(&self, t: usize) -> Ident {
        format_ident!("t{}_vals", t)
    }

    fn lvl(&self, t: usize, l: usize, what: &str) -> Ident {
        format_ident!("t{}_l{}_{}", t, l, what)
    }

    fn pos(&self, r: LevelRef) -> Ident {
        format_ident!("p{}_{}", r.access, r.level)
    }

    /// The end of the group of positions at a non-unique level's current coordinate (see
    /// [`Gen::group_end`]): a singleton level below iterates `pos..end`.
    fn end(&self, r: LevelRef) -> Ident {
        format_ident!("e{}_{}", r.access, r.level)
    }

    /// True when level `r` may repeat a coordinate under one parent (a singleton level
    /// follows it): its iteration visits each coordinate once, over the group of positions
    /// that share it.
    fn non_unique(&self, r: LevelRef) -> bool {
        self.k.tensors[self.tensor_of(r.access)]
            .format
            .is_non_unique(r.level)
    }

    /// The end of the group of positions from `p` (before `hi`) whose coordinates equal
    /// `crd[p]`: COO stores its entries sorted, so equal coordinates are adjacent.
    fn group_end(&self, crd: &Ident, p: &TokenStream, hi: &TokenStream) -> TokenStream {
        quote! {{
            let c = #crd[#p];
            let mut e = #p + 1;
            while e < #hi && #crd[e] == c {
                e += 1;
            }
            e
        }}
    }

    fn var(&self, v: usize) -> Ident {
        format_ident!("{}", sanitize(&self.k.vars[v].name, v))
    }

    fn dim(&self, v: usize) -> Ident {
        format_ident!("dim_{}", sanitize(&self.k.vars[v].name, v))
    }

    /// The position of the parent of a level (a literal 0 at the root).
    fn parent(&self, r: LevelRef) -> TokenStream {
        if r.level == 0 {
            quote!(0usize)
        } else {
            let p = self.pos(LevelRef {
                access: r.access,
                level: r.level - 1,
            });
            quote!(#p)
        }
    }

    /// A required rank-1 dense operand located at this level: `vals.len() == size` for a
    /// valid tensor, so `vals.get(i - offset)` both range-checks and loads.
    fn direct_vector(&self, nest: &Nest, r: LevelRef) -> bool {
        r.level == 0
            && self.k.level_type(r) == LevelType::Dense
            && self.k.accesses[r.access].level_vars.len() == 1
            && r.access != self.k.output_access
            && self.required(nest, r.access)
    }

    fn required(&self, nest: &Nest, a: AccessId) -> bool {
        nest.required.contains(&a)
    }

    /// The local holding an access's value once its last level is resolved.
    fn val(&self, a: AccessId) -> Ident {
        format_ident!("val{}", a)
    }

    /// The kernel as a function item; `params` and `setup` are what a block kernel adds.
    fn function(&self, name: &Ident, params: TokenStream, setup: TokenStream) -> TokenStream {
        let doc = doc_comment(self.k);
        // A dense vector's value at a coordinate. In a plain kernel `None` outside the vector
        // (a window of one may not hold every coordinate; see `zero_offsets_specialised` for
        // where whole tensors redefine it). In a block kernel the plan hands each point a view
        // of the vector that covers every coordinate the block visits — the image of the
        // block's coordinates (Fig. 7.2), the tile of a split variable its loop is bounded by,
        // or the whole vector — so it is indexed: a coordinate outside would be a broken plan,
        // and panicking (the point task fails) beats silently dropping the entry. The skipping
        // `get` also made LLVM unroll the gather loop at run time, ~15 instructions per row.
        let vector_at = match self.block {
            true => quote!(Some(&$vals[$x])),
            false => quote!($vals.get($x)),
        };
        let vector_at = quote! {
            #[allow(unused_macros)]
            macro_rules! vector_at {
                ($vals:expr, $x:expr) => { #vector_at };
            }
        };
        let prelude = self.prelude();
        let out_init = self.output_init();
        let nests: Vec<TokenStream> = self.k.nests.iter().map(|n| self.nest(n)).collect();
        let trusted = Gen {
            trusted: !self.block,
            ..*self
        };
        let zero: Vec<TokenStream> = self.k.nests.iter().map(|n| trusted.nest(n)).collect();
        let nests = self.zero_offsets_specialised(quote!(#(#zero)*), quote!(#(#nests)*));
        let finish = match self.block {
            true => self.block_finish(self.output_finish()),
            false => self.output_finish(),
        };
        // The caller's functions named in a `tensor!` statement, in `user_functions` order.
        let user = if self.k.user_functions.is_empty() {
            quote!()
        } else {
            quote!(user_fns: &[&(dyn Fn(V) -> V + Sync)],)
        };
        let (inputs, output) = match self.block {
            true => (
                quote!(&[::tessera_formats::TensorView<'_, V, I>]),
                quote!(Option<::tessera_formats::Tensor<V, I>>),
            ),
            false => (
                quote!(&[&::tessera_formats::Tensor<V, I>]),
                quote!(::tessera_formats::Tensor<V, I>),
            ),
        };
        quote! {
            #doc
            #[allow(unused_variables, unused_mut, unused_assignments, unused_labels, unused_parens, unused_imports, dead_code,
                unreachable_code, non_snake_case, non_upper_case_globals, clippy::all)]
            pub fn #name<V: ::tessera_formats::Value, I: ::tessera_formats::Index>(
                inputs: #inputs,
                out_dims: &[usize],
                #user
                #params
            ) -> #output {
                use ::tessera_formats::{Index as _, Level, LevelView, Tensor, Value as _};
                const ABSENT: usize = usize::MAX;
                #vector_at
                #prelude
                #setup
                #out_init
                #nests
                #finish
            }
        }
    }

    /// The nests twice: once for the common case where every input's dense levels start at
    /// offset 0 (whole tensors, not windows), with the offsets shadowed by `const` zeros so
    /// that every `x - off` folds away in the inner loops — also inside a parallel loop's
    /// closure, which a `let` zero reaches only as a captured value (the closure is compiled
    /// apart from its caller: SpMV's rows tested their dense level against a loaded bound
    /// and subtracted a loaded offset per nonzero) — and once for any offsets.
    fn zero_offsets_specialised(&self, zero: TokenStream, nests: TokenStream) -> TokenStream {
        let offsets: Vec<Ident> = self
            .k
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, decl)| decl.input_slot.is_some())
            .flat_map(|(t, decl)| {
                let levels = decl.format.levels().iter().enumerate();
                levels
                    .filter(|(_, lt)| **lt == LevelType::Dense)
                    .map(move |(l, _)| self.lvl(t, l, "off"))
            })
            .collect();
        if offsets.is_empty() {
            return zero;
        }
        // Whole tensors (not a block kernel's windows) are validated when built: every
        // coordinate is below its mode's dimension, and a dense vector with offset 0 and size
        // its dimension holds exactly its dimension's values. So, when the caller keeps the precondition that
        // dimensions agree, a located coordinate is always inside the vector: an index
        // (whose never-failing bounds check panics, rather than skipping the entry, if the
        // precondition is broken) replaces the `get` whose absent branch split the gather
        // loop in two, as a hand-written `x[c]` is compiled.
        // Dense first levels that span their whole dimension (a window with offset 0 may
        // not): dense vectors, and the rows of a dense or CSR-like matrix (see
        // `trusts_first_level`).
        let whole: Vec<TokenStream> = self
            .k
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, d)| d.format.levels().first() == Some(&LevelType::Dense))
            .filter_map(|(t, d)| {
                let (size, slot) = (self.lvl(t, 0, "size"), d.input_slot?);
                let mode = d.format.mode_order()[0];
                Some(quote!(&& #size == inputs[#slot].dims()[#mode]))
            })
            .collect();
        let (trusted, whole) = match self.block {
            true => (quote!(), vec![]),
            false => (
                quote! {
                    #[allow(unused_macros)]
                    macro_rules! vector_at {
                        ($vals:expr, $x:expr) => { Some(&$vals[$x]) };
                    }
                },
                whole,
            ),
        };
        let condition = quote!(#(#offsets == 0)&&* #(#whole)*);
        let whole_gen = Gen {
            trusted: !self.block,
            ..*self
        };
        let (slices, out_slice) = (whole_gen.pos_slices(), whole_gen.mirror_out_slice());
        if self.block && self.dense_output() {
            return self.block_nests_in_functions(&offsets, nests);
        }
        if !self.nests_in_own_function() {
            return quote! {
                if #condition {
                    #(const #offsets: usize = 0;)*
                    #trusted
                    #slices
                    #zero
                } else {
                    #nests
                }
            };
        }
        // The common case in a function of its own. Its slices arrive as arguments, which
        // Rust marks as not aliasing (`noalias`): LLVM then knows that the output row a dense
        // inner loop adds into overlaps no input row and drops the per-row overlap test it
        // otherwise emits, and this one copy of the nests gets the registers to itself
        // (together, about 7 % of SpMM's instructions). Called through `wide_call`, which
        // keeps it out of line (it was `inline(never)` before): inlined into the kernel, and
        // the kernel into its caller, the nests shared the registers with both again (SpMV
        // reloaded `x`'s pointer from the stack once per nonzero, and three slices once per
        // row).
        let (names, types): (Vec<Ident>, Vec<TokenStream>) =
            self.frame_params().into_iter().unzip();
        let call = wide_call(quote!(zero_offsets::<V, I>(#(#names),*)));
        let nested = nested_fn_attributes();
        quote! {
            if #condition {
                #nested
                fn zero_offsets<V: ::tessera_formats::Value, I: ::tessera_formats::Index>(
                    #(#names: #types),*
                ) {
                    #(const #offsets: usize = 0;)*
                    #trusted
                    #slices
                    #out_slice
                    #zero
                }
                #call
            } else {
                #nests
            }
        }
    }

    /// Whether the zero-offset nests become a function of their own: sequential kernels with a
    /// dense (or scalar) output, or a sparse one that copies an operand's structure (written
    /// in place like a dense one), whose nests read nothing but the frame's slices and
    /// extents. (TTM's `ssd` output row, added into beside a row of `C`, had LLVM test the two
    /// rows for overlap before every vectorised row update.)
    fn nests_in_own_function(&self) -> bool {
        !self.block && self.k.parallel.is_none() && (self.dense_output() || self.mirror.is_some())
    }

    fn dense_output(&self) -> bool {
        matches!(
            self.k.output_kind,
            crate::ir::OutputKind::Dense | crate::ir::OutputKind::Scalar
        )
    }

    /// Every input's compressed `pos` arrays cut to the length a valid tensor gives them, so
    /// that a bounds check the loop above has just passed also covers the level's `pos[p]`
    /// and `pos[p + 1]`, and LLVM drops both (the cut is `..=n`, which cannot wrap as
    /// `..n + 1` could; a shorter array panics here rather than in the loop):
    /// - in a block kernel, under a dense first level (CSR-like), `..=size`: the row loop has
    ///   checked the row against the size. SpMV block kernel, 100 k rows: 12.07 M → 11.33 M
    ///   instructions per run together with the plain store of `written_once`. (In the plain
    ///   kernels' copy over whole tensors the same cut made SpGEMM's sequential kernel 4 %
    ///   more instructions, and SpMV's there is as the hand-written loop's already.)
    /// - in the copy of the nests over whole validated tensors (`trusted`), also under a
    ///   compressed or singleton level, `..=crd.len()` of that level: the loop over the parent
    ///   level has just read `crd[p]` (or sliced `crd` up to it). TTV: two compares and
    ///   branches fewer per fibre. Not in a block kernel, whose windows of a deeper `pos`
    ///   need only cover the positions its block visits.
    fn pos_slices(&self) -> TokenStream {
        let mut ts = quote!();
        for (t, d) in self.k.tensors.iter().enumerate() {
            if d.input_slot.is_none() {
                continue;
            }
            let levels = d.format.levels();
            for l in 1..levels.len() {
                if levels[l] != LevelType::Compressed {
                    continue;
                }
                let pos = self.lvl(t, l, "pos");
                let end = match levels[l - 1] {
                    LevelType::Dense if l == 1 && self.block => {
                        let size = self.lvl(t, 0, "size");
                        quote!(#size)
                    }
                    LevelType::Compressed | LevelType::Singleton if self.trusted => {
                        let crd = self.lvl(t, l - 1, "crd");
                        quote!(#crd.len())
                    }
                    _ => continue,
                };
                ts.extend(quote!(let #pos: &[I] = &#pos[..=#end];));
            }
        }
        ts
    }

    fn nest(&self, nest: &Nest) -> TokenStream {
        match self.prefetch_choice(nest) {
            Some(choice) => choice,
            None => self.plain_nest(nest),
        }
    }

    /// A nest as one copy (see [`Gen::prefetch_choice`] for the three a gathering nest has).
    fn plain_nest(&self, nest: &Nest) -> TokenStream {
        if self.block {
            return self.block_nest(nest);
        }
        if let Some(par) = self.parallel_nest(nest) {
            let scalars = self.scalar_values(nest);
            return quote! { { #scalars #par } };
        }
        let scalars = self.scalar_values(nest);
        let body = self.body(nest, 0, OutTarget::Whole);
        quote! { { #scalars #body } }
    }
}
/// The attributes of a function the kernel nests inside itself (the zero-offset nests, a
/// parallel job), which the kernel calls through [`wide_call`]; lints that generated code
/// trips are allowed.
fn nested_fn_attributes() -> TokenStream {
    quote! {
        #[allow(unused_variables, unused_mut, unused_assignments, unused_labels,
            unused_parens, unused_macros, clippy::all, clippy::too_many_arguments)]
        #[inline(always)]
    }
}

/// `call` (of a nested function) compiled for the widest vector instructions the CPU has:
/// inlined into `tessera_formats::simd::wide`'s AVX-512, AVX2 + FMA or plain function, each
/// out of line. So its loops still get a function and the registers to themselves, and its
/// slices stay `noalias` (LLVM keeps an inlined function's `noalias` arguments as scoped
/// metadata), as when the nested function itself was `inline(never)`; and SpMM's rows of 32
/// and MTTKRP's of 16 run four or eight `f64` wide where the CPU can (with `-C
/// target-cpu=native` on this project's Zen 4 VM: SpMM 98 -> 71 ms, MTTKRP 7.4 -> 4.4 ms). The
/// values do not change: Rust never contracts or reorders floating-point operations, so every
/// path gives the same bits (`TESSERA_SIMD=0` forces the plain one).
fn wide_call(call: TokenStream) -> TokenStream {
    quote!(::tessera_formats::simd::wide(#[inline(always)] || #call);)
}

/// A variable name usable as a Rust identifier that cannot clash with generated locals.
fn sanitize(name: &str, v: usize) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("v{v}_{clean}")
}
