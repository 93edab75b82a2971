//! Choosing a loop order compatible with every operand's mode order.
//!
//! A compressed level can only be iterated (never searched), and only once its parent level
//! is resolved, so an access whose format has compressed levels asks that the variables of
//! its levels `0..=last compressed` be bound in level order. Those requests form a graph on
//! the index variables; a loop order is a topological order of it. Among the orders that
//! remain, we prefer (in this order) variables that some compressed operand iterates — so
//! sparse structure drives the outer loops — then free variables before reductions, then the
//! output's level order, then first appearance. A sparse output's level order is asked for
//! too when it can be honoured (so that it is assembled in order); when it cannot, assembly
//! uses a workspace or sorting instead.

use std::collections::BTreeSet;

use crate::ir::{Access, TensorDecl, VarId};

/// Precedence edges `before → after` that one access asks for.
pub fn access_edges(access: &Access, tensor: &TensorDecl) -> Vec<(VarId, VarId)> {
    let levels = tensor.format.levels();
    let Some(last) = levels.iter().rposition(|l| l.is_sparse()) else {
        return Vec::new();
    };
    access.level_vars[..=last]
        .windows(2)
        .map(|w| (w[0], w[1]))
        .collect()
}

/// Edges asked for by an output stored in a sparse format: all its levels, in order.
pub fn output_edges(access: &Access) -> Vec<(VarId, VarId)> {
    access.level_vars.windows(2).map(|w| (w[0], w[1])).collect()
}

/// How to rank variables that are free to go next.
pub struct Preference {
    /// Variables that some operand iterates through a compressed level.
    pub sparse: BTreeSet<VarId>,
    pub free: BTreeSet<VarId>,
    /// Lower rank first: output level order, then first appearance.
    pub rank: Vec<usize>,
}

/// A topological order of `vars` under `edges` by `pref`, or `None` if the edges have a cycle.
pub fn topo_order(
    vars: &[VarId],
    edges: &[(VarId, VarId)],
    pref: &Preference,
) -> Option<Vec<VarId>> {
    let mut placed: Vec<VarId> = Vec::with_capacity(vars.len());
    while placed.len() < vars.len() {
        let ready = vars.iter().copied().filter(|v| {
            !placed.contains(v)
                && edges
                    .iter()
                    .all(|&(a, b)| b != *v || a == b || placed.contains(&a) || !vars.contains(&a))
        });
        let next = ready.min_by_key(|v| {
            (
                !pref.sparse.contains(v),
                !pref.free.contains(v),
                pref.rank[*v],
            )
        })?;
        placed.push(next);
    }
    Some(placed)
}
