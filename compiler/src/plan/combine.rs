//! How the partial outputs of blocks that share output cells combine — extended blocks,
//! sequential launches, the pieces of a sparse output: with the statement's reduction, so a
//! `min[k](...)` split over `k` folds its blocks with `min` exactly as the unsplit kernel
//! folds its terms (the interpreter's [`interp::combine`]). Used alike by the thread-pool
//! executor ([`super::exec`]) and on the runtime ([`super::on_runtime`]).

use tessera_formats::{Format, Index, Tensor, Value};

use crate::ast::ReduceOp;
use crate::interp;
use crate::ir::Kernel;

/// `dst[i] ⊕= src[i]` for every cell.
pub fn fold_into<V: Value>(op: ReduceOp, dst: &mut [V], src: &[V]) {
    dst.iter_mut()
        .zip(src)
        .for_each(|(d, s)| *d = interp::combine(op, *d, *s));
}

/// The output of `kernel` from entries in any order, duplicates folded in the order given
/// with its reduction; positions no entry gives (dense levels below a compressed one) hold
/// the reduction's identity, as the unsplit kernel leaves them.
pub fn from_entries<V: Value, I: Index>(
    kernel: &Kernel,
    dims: Vec<usize>,
    format: Format,
    entries: Vec<(Vec<usize>, V)>,
) -> Result<Tensor<V, I>, tessera_formats::TensorError> {
    interp::from_entries(kernel.reduce, dims, format, entries)
}
