//! Loops: one per IR loop, over a compressed level, a dense universe or a merge of several
//! levels, and the visit of each coordinate (locates, absence tests, the body below).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::prefetch::Walk;
use super::{mentions, Gen, OutTarget};
use crate::ir::{Assembly, Domain, Formula, LevelRef, Nest, OutputKind};
use tessera_formats::LevelType;

impl Gen<'_> {
    /// The body of loop `d - 1` (for `d == 0`, the whole nest).
    pub(super) fn body(&self, nest: &Nest, d: usize, target: OutTarget) -> TokenStream {
        let sparse = self.k.output_kind == OutputKind::Sparse;
        let mut ts = TokenStream::new();
        if d == nest.acc_depth {
            let fill = self.fill();
            ts.extend(quote!(let mut acc: V = #fill;));
            if sparse {
                ts.extend(quote!(let mut touched = false;));
            }
        }
        if d == nest.loops.len() {
            let e = self.expr(&self.step_expr(nest));
            ts.extend(self.accumulate(quote!(acc), e));
            if sparse {
                ts.extend(quote!(touched = true;));
            }
        } else {
            ts.extend(self.run_loop(nest, d, target));
        }
        if d == nest.acc_depth {
            ts.extend(self.apply_entry_factor(nest));
            ts.extend(self.write(nest, target));
        }
        if self.flushes_at(nest, d) {
            ts.extend(self.flush(target));
        }
        ts
    }

    /// Whether the body of loop `d - 1` ends by flushing the row workspace.
    pub(super) fn flushes_at(&self, nest: &Nest, d: usize) -> bool {
        matches!(nest.assembly, Assembly::Workspace { flush_depth, .. } if flush_depth == d)
            && self.mirror.is_none()
    }

    /// Whether loop `d` walks level `r` with its values zipped to its coordinates (no position
    /// bound): a last level iterated alone, unless a mirrored output is written at its
    /// positions.
    fn zipped(&self, nest: &Nest, d: usize, r: LevelRef) -> bool {
        let lp = &nest.loops[d];
        let mirrored = self
            .mirror
            .is_some_and(|m| r.access == m.access && r.level + 1 == m.levels);
        matches!(lp.domain, Domain::Single)
            && lp.iterate[0] == r
            && r.level + 1 == self.k.accesses[r.access].level_vars.len()
            && !mirrored
    }

    /// `(lo, hi)` of a compressed level's children, empty under an absent parent; for a
    /// singleton level, the parent's group of positions.
    pub(super) fn range(&self, nest: &Nest, r: LevelRef) -> (TokenStream, TokenStream) {
        if let Some(flat) = self.flat_range(r) {
            return flat;
        }
        let t = self.tensor_of(r.access);
        let parent = self.parent(r);
        if self.k.level_type(r) == LevelType::Singleton {
            let end = self.end(LevelRef {
                access: r.access,
                level: r.level - 1,
            });
            return if self.required(nest, r.access) {
                (quote!(#parent), quote!(#end))
            } else {
                (
                    quote!(if #parent != ABSENT { #parent } else { 0 }),
                    quote!(if #parent != ABSENT { #end } else { 0 }),
                )
            };
        }
        let pos = self.lvl(t, r.level, "pos");
        if r.level == 0 || self.required(nest, r.access) {
            (
                quote!(#pos[#parent].to_usize()),
                quote!(#pos[#parent + 1].to_usize()),
            )
        } else {
            (
                quote!(if #parent != ABSENT { #pos[#parent].to_usize() } else { 0 }),
                quote!(if #parent != ABSENT { #pos[#parent + 1].to_usize() } else { 0 }),
            )
        }
    }

    pub(super) fn run_loop(&self, nest: &Nest, d: usize, target: OutTarget) -> TokenStream {
        let lp = &nest.loops[d];
        let label = syn::Lifetime::new(&format!("'l{d}"), proc_macro2::Span::call_site());
        let var = self.var(lp.var);
        if let Some(ts) = self.dense_inner_loop(nest, d, target) {
            return ts;
        }
        let visit = self.visit(nest, d, &label, target);
        match &lp.domain {
            Domain::Empty => quote!(),
            Domain::Single => {
                if let Some(ts) = self.flattened(nest, d, target) {
                    return ts;
                }
                let r = lp.iterate[0];
                let crd = self.lvl(self.tensor_of(r.access), r.level, "crd");
                let p = self.pos(r);
                let (lo, hi) = self.range(nest, r);
                let narrow = self.narrow(&crd, lp.var, &format_ident!("lo"), &format_ident!("hi"));
                if self.zipped(nest, d, r) {
                    // Last level: walk coordinates and values together, as a hand-written loop would.
                    let vals = self.vals(self.tensor_of(r.access));
                    let v = self.val(r.access);
                    let walk = Walk {
                        items: quote!(#crd[lo..hi].iter().zip(&#vals[lo..hi])),
                        item: quote!((c, #v)),
                        bind: quote!(let #var = c.to_usize(); let #v: V = *#v;),
                        streams: vec![quote!(c), quote!(#v)],
                    };
                    return self.walk_level(nest, d, (lo, hi, narrow), walk, &label, &visit);
                }
                if self.non_unique(r) {
                    // One visit per coordinate, over its group of positions.
                    let e = self.end(r);
                    let group_end = self.group_end(&crd, &quote!(#p), &quote!(hi));
                    return quote! {
                        let (lo, hi) = (#lo, #hi);
                        #narrow
                        let mut #p = lo;
                        while #p < hi {
                            let #var = #crd[#p].to_usize();
                            let #e: usize = #group_end;
                            #label: { #visit }
                            #p = #e;
                        }
                    };
                }
                // A coordinate nothing below reads is not loaded (TTV's `j`, the output copying
                // the level's positions). Its checked load bounded each position by the
                // level's length, which bounds the next level's `pos[p + 1]` and a mirrored
                // output's `out[p]` too (both cut to that length): one check of the loop's end
                // does that instead.
                let (bind, narrow) = if mentions(&visit, &var) {
                    (quote!(let #var = #crd[#p].to_usize();), narrow)
                } else {
                    (quote!(), quote!(#narrow assert!(hi <= #crd.len());))
                };
                let walk = Walk {
                    items: quote!(lo..hi),
                    item: quote!(#p),
                    bind,
                    streams: Vec::new(),
                };
                self.walk_level(nest, d, (lo, hi, narrow), walk, &label, &visit)
            }
            Domain::Universe => {
                let (first, end) = self.span(lp.var);
                let end = self.located_end(nest, d, end);
                let (setup, present, advance) = self.iterators(nest, d, quote!(#var));
                quote! {
                    #setup
                    for #var in #first..#end {
                        #present
                        #label: { #visit }
                        #advance
                    }
                }
            }
            Domain::Merge(f) => {
                let n = lp.iterate.len();
                let active: Vec<TokenStream> = (0..n)
                    .map(|i| {
                        let (it, end) = (
                            format_ident!("it{}_{}", d, i),
                            format_ident!("end{}_{}", d, i),
                        );
                        quote!((#it < #end))
                    })
                    .collect();
                let cond_active = formula_tokens(f, &active);
                let mins: Vec<TokenStream> = lp
                    .iterate
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let crd = self.lvl(self.tensor_of(r.access), r.level, "crd");
                        let (it, a) = (format_ident!("it{}_{}", d, i), &active[i]);
                        quote!(if #a { #var = #var.min(#crd[#it].to_usize()); })
                    })
                    .collect();
                let (setup, present, advance) = self.iterators(nest, d, quote!(#var));
                let pr: Vec<TokenStream> = (0..n)
                    .map(|i| {
                        let p = format_ident!("pr{}_{}", d, i);
                        quote!(#p)
                    })
                    .collect();
                let cond_present = formula_tokens(f, &pr);
                quote! {
                    #setup
                    loop {
                        if !(#cond_active) { break; }
                        let mut #var = usize::MAX;
                        #(#mins)*
                        #present
                        if #cond_present {
                            #label: { #visit }
                        }
                        #advance
                    }
                }
            }
        }
    }

    /// A dense loop's end, narrowed to where every required operand's dense level it locates
    /// has the coordinate (`off + size`): past it, [`Self::visit`] would only `break` (its
    /// `x >= size` test comes before anything is written, and iterators walked beside the
    /// loop are not read after it), so those iterations are dropped and, with a `const` zero
    /// offset, LLVM folds the per-coordinate test away (SpMV's row loop: one compare, and one
    /// register, fewer per row). Dense vectors keep their own `get` (see `direct_vector`).
    pub(super) fn located_end(&self, nest: &Nest, d: usize, end: TokenStream) -> TokenStream {
        let lp = &nest.loops[d];
        let bounds: Vec<TokenStream> = lp
            .locate
            .iter()
            .filter(|r| {
                // A level located here may be indexed by an outer loop's variable (`D(k,j)`
                // under loops `j, k`): only levels indexed by this loop's variable bound it.
                self.k.level_var(**r) == lp.var
                    && r.access != self.k.output_access
                    && self.k.level_type(**r) == LevelType::Dense
                    && self.required(nest, r.access)
                    && !self.direct_vector(nest, **r)
            })
            .map(|r| {
                let t = self.tensor_of(r.access);
                let (size, off) = (self.lvl(t, r.level, "size"), self.lvl(t, r.level, "off"));
                quote!(.min(#off + #size))
            })
            .collect();
        if bounds.is_empty() {
            return end;
        }
        quote!(((#end) #(#bounds)*))
    }

    /// Whether a required operand's dense first level is located without testing the
    /// coordinate (TTM's and SpMM's `C(l,k)` at each nonzero's `l`): in the trusted copy of
    /// the nests every input is whole — offset 0, and this level's size its mode's dimension
    /// (`zero_offsets_specialised` tests that) — so under the kernel's precondition that
    /// dimensions agree the coordinate is below the size, as every coordinate of a validated
    /// tensor is below its dimension. Should the caller break the precondition, the position
    /// is still only used through checked indexing into arrays whose lengths validation tied
    /// to this size (a row of `vals` from `x * row length`, the next level's `pos[x + 1]`), so
    /// the kernel panics instead of skipping the entry, as for a dense vector (`vector_at!`)
    /// and as the hand-written `&c[x * k..][..k]` does. A deeper level, `parent * size + x`,
    /// keeps its test: there a too-large `x` would land in the next row, not past the end.
    pub(super) fn trusts_first_level(&self, nest: &Nest, r: LevelRef) -> bool {
        self.trusted
            && r.level == 0
            && self.k.level_type(r) == LevelType::Dense
            && r.access != self.k.output_access
            && self.required(nest, r.access)
            && !self.direct_vector(nest, r)
    }

    /// Pointer-walking iterators for Universe and Merge loops: their setup, the per-coordinate
    /// presence test binding each iterated level's position, and the advance past it.
    pub(super) fn iterators(
        &self,
        nest: &Nest,
        d: usize,
        coord: TokenStream,
    ) -> (TokenStream, TokenStream, TokenStream) {
        let lp = &nest.loops[d];
        let (mut setup, mut present, mut advance) =
            (TokenStream::new(), TokenStream::new(), TokenStream::new());
        for (i, r) in lp.iterate.iter().enumerate() {
            let (it, end, pr) = (
                format_ident!("it{}_{}", d, i),
                format_ident!("end{}_{}", d, i),
                format_ident!("pr{}_{}", d, i),
            );
            let crd = self.lvl(self.tensor_of(r.access), r.level, "crd");
            let p = self.pos(*r);
            let (lo, hi) = self.range(nest, *r);
            let narrow = self.narrow(&crd, lp.var, &it, &end);
            setup.extend(quote! {
                let (#it, #end): (usize, usize) = (#lo, #hi);
                #narrow
                let mut #it: usize = #it;
            });
            present.extend(quote! {
                let #pr = #it < #end && #crd[#it].to_usize() == #coord;
                let #p = if #pr { #it } else { ABSENT };
            });
            if self.non_unique(*r) {
                let e = self.end(*r);
                let group_end = self.group_end(&crd, &quote!(#it), &quote!(#end));
                present.extend(quote!(let #e: usize = if #pr { #group_end } else { #it };));
                advance.extend(quote! { if #pr { #it = #e; } });
            } else {
                advance.extend(quote! { if #pr { #it += 1; } });
            }
        }
        (setup, present, advance)
    }

    /// After binding the loop variable: locate dense levels, skip when a required operand is
    /// absent, and run the body.
    pub(super) fn visit(
        &self,
        nest: &Nest,
        d: usize,
        label: &syn::Lifetime,
        target: OutTarget,
    ) -> TokenStream {
        let lp = &nest.loops[d];
        let mut ts = TokenStream::new();
        for r in &lp.iterate {
            if self.required(nest, r.access) && !matches!(lp.domain, Domain::Single) {
                let p = self.pos(*r);
                ts.extend(quote!(if #p == ABSENT { break #label; }));
            }
        }
        for r in &lp.locate {
            let t = self.tensor_of(r.access);
            let (size, off) = (self.lvl(t, r.level, "size"), self.lvl(t, r.level, "off"));
            let x = self.var(self.k.level_var(*r));
            let p = self.pos(*r);
            let parent = self.parent(*r);
            let is_output = r.access == self.k.output_access;
            if self.k.level_type(*r) == LevelType::Singleton || self.non_unique(*r) {
                // The second mode of a diagonal on a COO level: the group of `x` in the
                // parent's (sorted) segment, found by two binary searches.
                let crd = self.lvl(t, r.level, "crd");
                let e = self.end(*r);
                let (lo, hi) = self.range(nest, *r);
                ts.extend(quote! {
                    let (lo, hi) = (#lo, #hi);
                    let s = &#crd[lo..hi];
                    let #e: usize = lo + s.partition_point(|c| c.to_usize() <= #x);
                    let #p = lo + s.partition_point(|c| c.to_usize() < #x);
                    let #p = if #p < #e { #p } else { ABSENT };
                });
                if self.required(nest, r.access) {
                    ts.extend(quote!(if #p == ABSENT { break #label; }));
                }
            } else if self.k.level_type(*r) == LevelType::Compressed {
                // The second mode of a diagonal `A(i,i)`: search the parent's segment.
                let (pos, crd) = (self.lvl(t, r.level, "pos"), self.lvl(t, r.level, "crd"));
                let found = quote! {
                    let (lo, hi) = (#pos[#parent].to_usize(), #pos[#parent + 1].to_usize());
                    match #crd[lo..hi].binary_search_by(|c| c.to_usize().cmp(&#x)) {
                        Ok(k) => lo + k,
                        Err(_) => ABSENT,
                    }
                };
                let guarded = if r.level == 0 {
                    quote!({ #found })
                } else {
                    quote!(if #parent != ABSENT { #found } else { ABSENT })
                };
                ts.extend(quote!(let #p = #guarded;));
                if self.required(nest, r.access) {
                    ts.extend(quote!(if #p == ABSENT { break #label; }));
                }
            } else if is_output {
                ts.extend(quote!(let #p = #parent * #size + (#x - #off);));
            } else if self.direct_vector(nest, *r) {
                // A dense vector: its values are its level, so one checked `get` locates it.
                let vals = self.vals(t);
                let v = self.val(r.access);
                // `vector_at!` is a checked `get` (absent: skip), or a plain index where inputs
                // are whole validated tensors (see `Gen::zero_offsets_specialised`) and in
                // block kernels, whose views cover what the block visits (`Gen::function`).
                ts.extend(quote! {
                    let x = #x.wrapping_sub(#off);
                    let Some(&#v) = vector_at!(#vals, x) else { break #label; };
                });
            } else if self.trusts_first_level(nest, *r) {
                ts.extend(quote!(let #p = #x;));
            } else if self.required(nest, r.access) {
                ts.extend(quote! {
                    let x = #x.wrapping_sub(#off);
                    if x >= #size { break #label; }
                    let #p = #parent * #size + x;
                });
            } else if r.level == 0 {
                ts.extend(quote! {
                    let x = #x.wrapping_sub(#off);
                    let #p = if x < #size { x } else { ABSENT };
                });
            } else {
                ts.extend(quote! {
                    let x = #x.wrapping_sub(#off);
                    let #p = if #parent != ABSENT && x < #size { #parent * #size + x } else { ABSENT };
                });
            }
        }
        for r in lp.iterate.iter().chain(&lp.locate) {
            let last = r.level + 1 == self.k.accesses[r.access].level_vars.len();
            if last
                && r.access != self.k.output_access
                && !self.zipped(nest, d, *r)
                && !self.direct_vector(nest, *r)
            {
                ts.extend(self.bind_value(nest, r.access));
            }
        }
        ts.extend(self.hoisted_rows(nest, d, target));
        ts.extend(self.body(nest, d + 1, target));
        ts
    }
}

/// The condition of a formula over per-iterator boolean expressions.
fn formula_tokens(f: &Formula, flags: &[TokenStream]) -> TokenStream {
    match f {
        Formula::True => quote!(true),
        Formula::False => quote!(false),
        Formula::Iter(n) => flags[*n].clone(),
        Formula::All(fs) => {
            let parts: Vec<TokenStream> = fs.iter().map(|f| formula_tokens(f, flags)).collect();
            quote!((#(#parts)&&*))
        }
        Formula::Any(fs) => {
            let parts: Vec<TokenStream> = fs.iter().map(|f| formula_tokens(f, flags)).collect();
            quote!((#(#parts)||*))
        }
    }
}
