//! Outputs that mirror an operand's structure (SDDMM, TTV, TTM, `A(i,j) = B(i,j) * c(j)`):
//! the output's sparse levels are exactly a required operand's, iterated by the very loops
//! that bind them, so the output can share that structure — its `pos`/`crd` are copies of
//! the operand's, and each value is written at the operand's position — instead of being
//! assembled entry by entry (TACO's "assemble by copying the pattern").

use tessera_formats::LevelType;

use crate::ast::ReduceOp;
use crate::ir::{AccessId, Domain, Kernel, LevelRef, OutputKind};

/// The operand whose structure a sparse output copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mirror {
    /// The operand access.
    pub access: AccessId,
    /// How many of the output's levels are the operand's: up to and including the output's
    /// last sparse level. The output's remaining levels are dense.
    pub levels: usize,
}

/// The operand a sparse output can mirror, when one can. The conditions make the output's
/// entries exactly the operand's positions, each written by one iteration:
/// - one loop nest under `+` (so an untouched position holds 0, the value it would have if
///   absent — the copied structure may store explicit zeros, never a wrong value);
/// - the output's levels up to its last sparse one are bound, in order, by the first
///   loops, and the levels after it are dense;
/// - a required operand has those same variables and level types on its first levels, and
///   each of those loops walks only that operand's level (a compressed level iterated alone)
///   or only locates it (a dense level, no compressed level iterated beside it).
pub fn mirror(k: &Kernel) -> Option<Mirror> {
    if k.output_kind != OutputKind::Sparse || k.reduce != ReduceOp::Sum || k.nests.len() != 1 {
        return None;
    }
    let nest = &k.nests[0];
    let out = &k.accesses[k.output_access];
    let out_types = k.output_tensor().format.levels();
    let levels = 1 + out_types.iter().rposition(|t| *t != LevelType::Dense)?;
    if nest.loops.len() < levels || (0..levels).any(|d| nest.loops[d].var != out.level_vars[d]) {
        return None;
    }
    // COO levels may repeat a coordinate: their positions are not the output's entries.
    let coo = |a: AccessId| k.tensors[k.accesses[a].tensor].format.coo_start().is_some();
    if coo(k.output_access) {
        return None;
    }
    let access = nest.required.iter().copied().find(|&a| {
        let vars = &k.accesses[a].level_vars;
        a != k.output_access
            && !coo(a)
            && vars.len() >= levels
            && vars[..levels] == out.level_vars[..levels]
            && (0..levels).all(|l| {
                k.level_type(LevelRef {
                    access: a,
                    level: l,
                }) == out_types[l]
            })
    })?;
    let walked_alone = (0..levels).all(|d| {
        let lp = &nest.loops[d];
        let r = LevelRef { access, level: d };
        match out_types[d] {
            LevelType::Dense => lp.iterate.is_empty() && lp.locate.contains(&r),
            LevelType::Compressed => matches!(lp.domain, Domain::Single) && lp.iterate == [r],
            LevelType::Singleton => false,
        }
    });
    walked_alone.then_some(Mirror { access, levels })
}

#[cfg(test)]
mod tests {
    /// Whether `src` lowers to a kernel whose output copies an operand's structure.
    fn mirrors(src: &str) -> bool {
        let stmt = crate::parse::program(src, 0).expect("parses");
        let checked = crate::check::check(stmt, &Default::default()).expect("checks");
        super::mirror(&crate::lower::lower(&checked).expect("lowers")).is_some()
    }

    #[test]
    fn outputs_with_an_operands_pattern_copy_it() {
        assert!(mirrors("A(i,j) = B(i,j) * C(i,k) * D(j,k); A: csr; B: csr"));
        assert!(mirrors("A(i,j) = B(i,j,k) * c(k); A: ss; B: csf"));
        assert!(mirrors("A(i,j,k) = B(i,j,l) * C(l,k); A: ssd; B: csf"));
        assert!(mirrors("y(i) = B(i) * c(i); y: s; B: s"));
    }

    #[test]
    fn outputs_that_can_differ_from_every_operand_do_not() {
        // Intersections and unions hold fewer or more entries than either operand.
        assert!(!mirrors("C(i,j) = A(i,j) * B(i,j); A: csr; B: csr; C: csr"));
        assert!(!mirrors("C(i,j) = A(i,j) + B(i,j); A: csr; B: csr; C: csr"));
        // A transposition, a reduction over a sparse level, and another semiring.
        assert!(!mirrors("A(i,j) = B(j,i); A: csr; B: csr"));
        assert!(!mirrors("A(i,j) = B(i,k) * C(k,j); A: csr; B: csr; C: csr"));
        assert!(!mirrors("y(i) = min[j](A(i,j) + x(j)); A: csr; y: s"));
        // Output levels that the operand stores differently.
        assert!(!mirrors("A(i,j) = B(i,j) * c(j); A: csr; B: dcsr"));
        // COO levels may store a coordinate twice.
        assert!(!mirrors("A(i,j) = B(i,j) * c(j); A: coo; B: coo"));
        assert!(!mirrors("A(i,j) = B(i,j) * c(j); A: ss; B: coo"));
    }
}
