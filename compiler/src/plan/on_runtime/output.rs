//! A plan's output as the runtime holds it, before anything reads it, and the ways out of the
//! runtime: moved out whole on one process ([`PlanResult::into_tensor`]), gathered on one
//! rank only ([`PlanResult::gather_on`]), or written into a `.tcs` file by every rank, each
//! its own part, through the distributed storer ([`PlanResult::store_file`], issue 12 item 7):
//! across ranks no rank then holds the whole output, dense or sparse.

use super::{dense_tensor, Output, PlanIndex, PlanRunError, PlanValue};
use std::ops::Range;
use std::path::Path;
use tessera_formats::tcs::write_tensor;
use tessera_formats::{Format, Level, Tensor};
use tessera_runtime::io::{store_file_cut, NoProgress};
use tessera_runtime::transport::Communicator;
use tessera_runtime::{Rect, Runtime};

/// What a plan's launches left in the runtime, with the output's format and dimensions.
pub struct PlanResult<V: PlanValue, I: PlanIndex> {
    pub(super) _types: std::marker::PhantomData<(V, I)>,
    pub(super) output: Output,
    pub(super) format: Format,
    pub(super) dims: Vec<usize>,
    /// Of a dense output: per store dimension, the output's levels it holds (consecutive
    /// levels merged into one dimension, row-major: `OutputLayout`).
    pub(super) groups: Vec<Range<usize>>,
}

impl<V: PlanValue, I: PlanIndex> PlanResult<V, I> {
    /// The whole output, on every rank. On one process a dense output's store is moved out
    /// (no copy); across ranks every rank gathers it.
    pub fn into_tensor(self, rt: &Runtime) -> Result<Tensor<V, I>, PlanRunError> {
        match self.output {
            Output::Dense(y, _) => dense_tensor(&self.format, &self.dims, rt.take::<V>(y)?),
            Output::Entries(e) => e.into_tensor(rt),
        }
    }

    /// The whole output on rank `root` only (`None` on the others): a dense output is
    /// gathered there alone. Collective.
    pub fn gather_on(
        self,
        rt: &Runtime,
        root: usize,
    ) -> Result<Option<Tensor<V, I>>, PlanRunError> {
        match self.output {
            Output::Dense(y, _) => match rt.read_on::<V>(&y, root)? {
                Some(vals) => Ok(Some(dense_tensor(&self.format, &self.dims, vals)?)),
                None => Ok(None),
            },
            Output::Entries(e) => e.gather_on(rt, root),
        }
    }

    /// Writes the output into the `.tcs` file `path`, every rank its own part: of a dense
    /// output, the tiles it holds the latest value of ([`Runtime::read_own`]), each a block
    /// whose dense levels cover only the tile; of a sparse output, the entries in its range of
    /// the first level, received from the ranks whose points made them (`Entries::own_block`).
    /// The file is what writing the whole output gives, byte for byte. Returns the values this
    /// rank stored and the output's. Collective; a failure on any rank is an error on every
    /// rank, and leaves no file.
    pub fn store_file(
        self,
        rt: &Runtime,
        comm: &(dyn Communicator + Send + Sync),
        path: &Path,
    ) -> Result<(u64, u64), PlanRunError> {
        if self.format.mode_order().is_empty() || self.dims.contains(&0) {
            // A scalar has no modes to cut into blocks, an empty output no values: rank 0
            // writes the file.
            let root = rt.rank() == 0;
            let values = self.dims.iter().product::<usize>() as u64;
            let written = match self.gather_on(rt, 0) {
                Ok(Some(t)) => write_tensor(path, &t, None).map_err(PlanRunError::from),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            agree(comm, &written)?;
            written?;
            return Ok((u64::from(root) * values, values));
        }
        // A dense output's tiles are cut into equal runs of the file by the storer; a sparse
        // output's blocks were balanced by their entries, and the file is cut between them.
        let (blocks, cuts) = match self.output {
            Output::Dense(y, _) => {
                let blocks = rt
                    .read_own::<V>(&y)
                    .map_err(PlanRunError::from)
                    .and_then(|parts| {
                        let sizes: Vec<usize> = (self.format.mode_order().iter())
                            .map(|&m| self.dims[m])
                            .collect();
                        let mut blocks: Vec<Tensor<V, I>> = Vec::new();
                        for (rect, vals) in parts {
                            for (boxes, vals) in level_blocks(&self.groups, &sizes, &rect, &vals) {
                                blocks.push(dense_block(&self.format, &self.dims, &boxes, vals)?);
                            }
                        }
                        Ok(blocks)
                    });
                (blocks, None)
            }
            Output::Entries(e) => match e.own_block::<V, I>(rt, comm) {
                Ok((block, cuts)) => (Ok(block.into_iter().collect()), Some(cuts)),
                Err(e) => (Err(e), None),
            },
        };
        // A rank that failed above still takes part, so that no rank waits for it.
        agree(comm, &blocks)?;
        let blocks = blocks?;
        let views: Vec<_> = blocks.iter().map(Tensor::view).collect();
        let mine = blocks.iter().map(|b| b.vals().len() as u64).sum();
        let summary = store_file_cut(comm, &views, cuts.as_deref(), path, &NoProgress)?;
        Ok((mine, summary.values))
    }
}

/// Shares this rank's outcome: an error on any rank is an error on every rank.
pub(super) fn agree<T>(
    comm: &(dyn Communicator + Send + Sync),
    local: &Result<T, PlanRunError>,
) -> Result<(), PlanRunError> {
    comm.check(local.as_ref().map(|_| ()).map_err(|e| e.to_string()))
        .map_err(|e| PlanRunError::Store(e.into()))
}

/// A block of a dense output: every level dense over its range in `boxes` only (per level,
/// in level order), holding `vals` in row-major level order.
fn dense_block<V: PlanValue, I: PlanIndex>(
    format: &Format,
    dims: &[usize],
    boxes: &[Range<usize>],
    vals: Vec<V>,
) -> Result<Tensor<V, I>, PlanRunError> {
    let levels = (boxes.iter())
        .map(|r| Level::Dense {
            size: r.len(),
            offset: r.start,
        })
        .collect();
    Ok(Tensor::from_parts(
        dims.to_vec(),
        format.clone(),
        levels,
        vals,
    )?)
}

/// The part `rect` of a dense output's store (its elements `vals`, row-major) as boxes of the
/// output's levels, each with its elements in row-major level order. A store dimension that
/// holds several levels (`groups`) is their row-major merge, so a range of it is a box only
/// when it is whole rows of the inner levels; otherwise it is cut into boxes
/// ([`flat_boxes`]). The boxes of all dimensions combine as a product.
fn level_blocks<V: Copy>(
    groups: &[Range<usize>],
    sizes: &[usize],
    rect: &Rect,
    vals: &[V],
) -> Vec<(Vec<Range<usize>>, Vec<V>)> {
    let per_dim: Vec<Vec<Vec<Range<usize>>>> = (groups.iter().enumerate())
        .map(|(d, g)| flat_boxes(rect.lo()[d], rect.hi()[d], &sizes[g.clone()]))
        .collect();
    if per_dim.iter().any(Vec::is_empty) {
        return vec![];
    }
    // Row-major strides of the rectangle, to find a cell's element in `vals`.
    let mut stride = vec![1; groups.len()];
    for d in (0..groups.len().saturating_sub(1)).rev() {
        stride[d] = stride[d + 1] * (rect.hi()[d + 1] - rect.lo()[d + 1]);
    }
    let mut out = Vec::new();
    let mut pick = vec![0; per_dim.len()];
    loop {
        let boxes: Vec<Range<usize>> = (per_dim.iter().zip(&pick))
            .flat_map(|(b, &i)| b[i].iter().cloned())
            .collect();
        let mut got = Vec::with_capacity(boxes.iter().map(Range::len).product());
        let mut cell: Vec<usize> = boxes.iter().map(|r| r.start).collect();
        loop {
            // Each store dimension's coordinate is its levels' coordinates, merged.
            let at: usize = (groups.iter().enumerate())
                .map(|(d, g)| {
                    let flat = g.clone().fold(0, |f, l| f * sizes[l] + cell[l]);
                    (flat - rect.lo()[d]) * stride[d]
                })
                .sum();
            got.push(vals[at]);
            if !odometer(&mut cell, |l| boxes[l].clone()) {
                break;
            }
        }
        out.push((boxes, got));
        if !odometer(&mut pick, |d| 0..per_dim[d].len()) {
            return out;
        }
    }
}

/// Steps `digits` to the next value in row-major order, each digit `l` within `range(l)`
/// (non-empty); false (and back to the first value) after the last.
fn odometer(digits: &mut [usize], range: impl Fn(usize) -> Range<usize>) -> bool {
    for l in (0..digits.len()).rev() {
        digits[l] += 1;
        if digits[l] < range(l).end {
            return true;
        }
        digits[l] = range(l).start;
    }
    false
}

/// The flat range `lo..hi` of levels of `sizes`, merged row-major, as boxes (one range per
/// level): a partial first row, the whole rows, a partial last row, each cut further the same
/// way inside. No levels (a scalar's dimension): one empty box if the range holds its cell.
fn flat_boxes(lo: usize, hi: usize, sizes: &[usize]) -> Vec<Vec<Range<usize>>> {
    if lo >= hi {
        return vec![];
    }
    let Some((&first, rest)) = sizes.split_first() else {
        return vec![vec![]];
    };
    let inner: usize = rest.iter().product();
    let whole = || rest.iter().map(|&n| 0..n);
    let row = |c: usize, a: usize, b: usize| -> Vec<Vec<Range<usize>>> {
        (flat_boxes(a, b, rest).into_iter())
            .map(|b| std::iter::once(c..c + 1).chain(b).collect())
            .collect()
    };
    debug_assert!(hi <= first * inner);
    let (c0, c1) = (lo / inner, (hi - 1) / inner);
    if c0 == c1 {
        return row(c0, lo % inner, (hi - 1) % inner + 1);
    }
    let mut out = Vec::new();
    let mut from = c0;
    if !lo.is_multiple_of(inner) {
        out.extend(row(c0, lo % inner, inner));
        from += 1;
    }
    let to = if hi.is_multiple_of(inner) { c1 + 1 } else { c1 };
    if from < to {
        out.push(std::iter::once(from..to).chain(whole()).collect());
    }
    if !hi.is_multiple_of(inner) {
        out.extend(row(c1, 0, hi % inner));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cell of a flat range lies in exactly one box, and no cell outside it does.
    #[test]
    fn flat_ranges_cut_into_boxes_that_cover_exactly_their_cells() {
        for sizes in [vec![7], vec![3, 4], vec![2, 3, 5], vec![4, 1, 3], vec![]] {
            let n: usize = sizes.iter().product();
            for lo in 0..=n {
                for hi in lo..=n {
                    let mut seen = vec![0; n];
                    for b in flat_boxes(lo, hi, &sizes) {
                        assert_eq!(b.len(), sizes.len());
                        let mut cells = vec![0usize];
                        for (r, &s) in b.iter().zip(&sizes) {
                            assert!(!r.is_empty() && r.end <= s, "{sizes:?} {lo}..{hi}: {b:?}");
                            cells = (cells.iter())
                                .flat_map(|c| r.clone().map(move |x| c * s + x))
                                .collect();
                        }
                        cells.iter().for_each(|&c| seen[c] += 1);
                    }
                    let want: Vec<i32> = (0..n).map(|c| i32::from((lo..hi).contains(&c))).collect();
                    assert_eq!(seen, want, "{sizes:?} {lo}..{hi}");
                }
            }
        }
    }

    /// A store rectangle over merged levels comes back as level boxes holding its elements:
    /// a 2-d store whose first dimension merges levels (4, 3) and second is level 2 (size 5).
    #[test]
    fn a_store_rectangle_becomes_level_blocks_with_its_elements() {
        let sizes = [4, 3, 5];
        let groups = [0..2, 2..3];
        let rect = Rect::new(&[2, 1], &[8, 4]);
        // The element of store cell (a, b) is a * 10 + b.
        let vals: Vec<usize> = (2..8)
            .flat_map(|a| (1..4).map(move |b| a * 10 + b))
            .collect();
        let blocks = level_blocks(&groups, &sizes, &rect, &vals);
        let mut seen = 0;
        for (boxes, got) in blocks {
            let mut want = Vec::new();
            for i in boxes[0].clone() {
                for j in boxes[1].clone() {
                    for k in boxes[2].clone() {
                        want.push((i * 3 + j) * 10 + k);
                    }
                }
            }
            assert_eq!(got, want, "{boxes:?}");
            seen += got.len();
        }
        assert_eq!(seen, vals.len());
    }
}
