//! How the partial outputs of blocks that share output cells combine — extended blocks,
//! sequential launches, the pieces of a sparse output: with the statement's reduction, so a
//! `min[k](...)` split over `k` folds its blocks with `min` exactly as the unsplit kernel
//! folds its terms. Used alike by the thread-pool executor ([`super::exec`]) and on the
//! runtime ([`super::on_runtime`]).

use tessera_formats::{Format, Index, Tensor, Value};

use crate::ast::ReduceOp;
use crate::ir::Kernel;

/// `a ⊕ b`. Sums stay in the value type (`f32` sums round as `f32`); `min`, `max` and `or`
/// pick or test one of their operands, which the round trip through `f64` keeps exact.
pub fn fold<V: Value>(op: ReduceOp, a: V, b: V) -> V {
    match op {
        ReduceOp::Sum => a + b,
        _ => V::from_f64(op.combine(a.to_f64(), b.to_f64())),
    }
}

/// `dst[i] ⊕= src[i]` for every cell.
pub fn fold_into<V: Value>(op: ReduceOp, dst: &mut [V], src: &[V]) {
    match op {
        ReduceOp::Sum => dst.iter_mut().zip(src).for_each(|(d, s)| *d += *s),
        _ => dst
            .iter_mut()
            .zip(src)
            .for_each(|(d, s)| *d = fold(op, *d, *s)),
    }
}

/// The output of `kernel` from entries in any order, duplicates folded in the order given
/// with its reduction; positions no entry gives (dense levels below a compressed one) hold
/// the reduction's identity, as the unsplit kernel leaves them.
pub fn from_entries<V: Value, I: Index>(
    kernel: &Kernel,
    dims: Vec<usize>,
    format: Format,
    mut entries: Vec<(Vec<usize>, V)>,
) -> Result<Tensor<V, I>, tessera_formats::TensorError> {
    let op = kernel.reduce;
    if op == ReduceOp::Sum {
        return Tensor::from_entries(dims, format, entries);
    }
    // Stable: equal coordinates keep their order, so the fold order is the one given.
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut merged: Vec<(Vec<usize>, V)> = Vec::with_capacity(entries.len());
    for (c, v) in entries {
        match merged.last_mut() {
            Some(last) if last.0 == c => last.1 = fold(op, last.1, v),
            _ => merged.push((c, v)),
        }
    }
    Tensor::from_entries_padded(dims, format, merged, V::from_f64(op.fill()))
}
