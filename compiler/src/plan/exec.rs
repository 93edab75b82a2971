//! Running a plan's block tasks with the interpreter: every point of every launch runs the
//! kernel on its [`Block`](crate::ir::Block), and the partial outputs are combined exactly as
//! the plan says — tiles placed, extended partials folded by a summation tree, sequential
//! launches added in order. The combination order is fixed by the grid, never by which
//! thread finished first, so the result is bitwise the same at every thread count.

use rayon::prelude::*;
use tessera_formats::{Index, Tensor, Value};

use super::{Plan, Role};
use crate::interp::{self, InterpError, Work};
use crate::ir::{Kernel, OutputKind};

/// An output tile's index and the partial outputs of its extended blocks, in grid order.
type Tile<V, I> = (Vec<usize>, Vec<Tensor<V, I>>);

/// A plan's result with what it cost.
#[derive(Debug)]
pub struct Run<V: Value, I: Index> {
    pub output: Tensor<V, I>,
    /// Summed over every block of every launch.
    pub work: Work,
    pub launches: usize,
    pub points: usize,
}

/// Runs `plan` (made from `kernel`) on `threads` threads.
pub fn run_interp<V, I>(
    plan: &Plan,
    kernel: &Kernel,
    inputs: &[&Tensor<V, I>],
    out_dims: &[usize],
    threads: usize,
) -> Result<Run<V, I>, InterpError>
where
    V: Value + Send + Sync,
    I: Index + Send + Sync,
{
    let dims = interp::checked_dims(kernel, inputs, out_dims)?;
    let grid = &plan.grid;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
        .expect("a thread pool of a few threads can be built");
    let mut work = Work::default();
    let mut output: Option<Tensor<V, I>> = None;
    for launch in 0..grid.launches() {
        let partials: Vec<(Tensor<V, I>, Work)> = pool.install(|| {
            (0..grid.points())
                .into_par_iter()
                .map(|p| {
                    let block = grid.block(kernel, &dims, &grid.index(launch, p));
                    interp::run_block(kernel, inputs, out_dims, &block)
                })
                .collect::<Result<_, _>>()
        })?;
        // Partial outputs grouped by output tile (the parallel variables' block indices).
        let mut tiles: Vec<Tile<V, I>> = Vec::new();
        for (p, (t, w)) in partials.into_iter().enumerate() {
            work.add(&w);
            let idx = grid.index(launch, p);
            let tile: Vec<usize> = (0..grid.vars.len())
                .filter(|&g| grid.vars[g].role == Role::Parallel)
                .map(|g| idx[g])
                .collect();
            match tiles.iter_mut().find(|(k, _)| *k == tile) {
                Some((_, list)) => list.push(t),
                None => tiles.push((tile, vec![t])),
            }
        }
        for (_, extended) in tiles {
            let folded = summation_tree(kernel, extended)?;
            output = Some(match output {
                None => folded,
                Some(acc) => add(kernel, acc, folded)?,
            });
        }
    }
    let output = match output {
        Some(t) => t,
        // No launch at all (a split into zero blocks cannot be written); the plain kernel.
        None => interp::run(kernel, inputs, out_dims)?,
    };
    Ok(Run {
        output,
        work,
        launches: grid.launches(),
        points: grid.points(),
    })
}

/// Folds partial outputs pairwise, neighbours first (`((a+b)+(c+d))+e`): a fixed shape for a
/// given number of partials, and depth log₂ of it (SuperTaco §4.5.4).
pub fn summation_tree<V: Value, I: Index>(
    kernel: &Kernel,
    mut level: Vec<Tensor<V, I>>,
) -> Result<Tensor<V, I>, InterpError> {
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len().div_ceil(2));
        let mut it = level.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => add(kernel, a, b)?,
                None => a,
            });
        }
        level = next;
    }
    Ok(level.pop().expect("at least one partial output"))
}

/// `a ⊕ b` for two outputs of the same kernel, `⊕` its reduction.
fn add<V: Value, I: Index>(
    kernel: &Kernel,
    mut a: Tensor<V, I>,
    b: Tensor<V, I>,
) -> Result<Tensor<V, I>, InterpError> {
    if kernel.output_kind != OutputKind::Sparse {
        interp::combine_into(kernel.reduce, a.vals_mut(), b.vals());
        return Ok(a);
    }
    // Entries of `a` then of `b`: duplicates are folded in that order.
    let (dims, format) = (a.dims().to_vec(), a.format().clone());
    let entries: Vec<(Vec<usize>, V)> = a.entries().chain(b.entries()).collect();
    Ok(interp::from_entries(kernel.reduce, dims, format, entries)?)
}
