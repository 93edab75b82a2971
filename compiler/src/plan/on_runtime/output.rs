//! A plan's output as the runtime holds it, before anything reads it, and the ways out of the
//! runtime: moved out whole on one process ([`PlanResult::into_tensor`]), gathered on one
//! rank only ([`PlanResult::gather_on`]), or written into a `.tcs` file by every rank, each
//! its own part, through the distributed storer ([`PlanResult::store_file`], issue 12 item 7):
//! across ranks no rank then holds the whole output.

use super::{dense_tensor, Output, PlanIndex, PlanRunError, PlanValue};
use std::path::Path;
use tessera_formats::{Format, Level, Tensor};
use tessera_runtime::io::{store_file, NoProgress};
use tessera_runtime::transport::Communicator;
use tessera_runtime::{Rect, Runtime};

/// What a plan's launches left in the runtime, with the output's format and dimensions.
pub struct PlanResult<V: PlanValue, I: PlanIndex> {
    pub(super) output: Output<V, I>,
    pub(super) format: Format,
    pub(super) dims: Vec<usize>,
}

impl<V: PlanValue, I: PlanIndex> PlanResult<V, I> {
    /// The whole output, on every rank. On one process a dense output's store is moved out
    /// (no copy); across ranks every rank gathers it.
    pub fn into_tensor(self, rt: &Runtime) -> Result<Tensor<V, I>, PlanRunError> {
        match self.output {
            Output::Dense(y) => dense_tensor(&self.format, &self.dims, rt.take::<V>(y)?),
            Output::Tensor(t) => Ok(t),
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
            Output::Dense(y) => match rt.read_on::<V>(&y, root)? {
                Some(vals) => Ok(Some(dense_tensor(&self.format, &self.dims, vals)?)),
                None => Ok(None),
            },
            Output::Tensor(t) => Ok((rt.rank() == root).then_some(t)),
        }
    }

    /// Writes the output into the `.tcs` file `path`, every rank its own part: of a dense
    /// output, the tiles it holds the latest value of ([`Runtime::read_own`]), each a block
    /// whose dense levels cover only the tile; an assembled (sparse) output, which every rank
    /// holds whole, from rank 0. The file is what writing the whole output gives, byte for
    /// byte. Returns the values this rank stored and the output's. Collective; a failure on
    /// any rank is an error on every rank, and leaves no file.
    pub fn store_file(
        self,
        rt: &Runtime,
        comm: &(dyn Communicator + Send + Sync),
        path: &Path,
    ) -> Result<(u64, u64), PlanRunError> {
        let blocks = match self.output {
            Output::Dense(y) => {
                rt.read_own::<V>(&y)
                    .map_err(PlanRunError::from)
                    .and_then(|parts| {
                        parts
                            .into_iter()
                            .map(|(rect, vals)| dense_block(&self.format, &self.dims, &rect, vals))
                            .collect::<Result<Vec<_>, _>>()
                    })
            }
            Output::Tensor(t) => Ok(if rt.rank() == 0 { vec![t] } else { vec![] }),
        };
        // A rank that failed above still takes part, so that no rank waits for it.
        comm.check(blocks.as_ref().map(|_| ()).map_err(|e| e.to_string()))
            .map_err(|e| PlanRunError::Input(e.to_string()))?;
        let blocks = blocks?;
        let views: Vec<_> = blocks.iter().map(Tensor::view).collect();
        let mine = blocks.iter().map(|b| b.vals().len() as u64).sum();
        let summary = store_file(comm, &views, path, &NoProgress)?;
        Ok((mine, summary.values))
    }
}

/// The tile `rect` (in level order, as the dense output's store is laid out) of a dense output
/// as a block of the whole tensor: every level dense over the tile's range only.
fn dense_block<V: PlanValue, I: PlanIndex>(
    format: &Format,
    dims: &[usize],
    rect: &Rect,
    vals: Vec<V>,
) -> Result<Tensor<V, I>, PlanRunError> {
    let levels = (0..format.mode_order().len())
        .map(|k| Level::Dense {
            size: rect.hi()[k] - rect.lo()[k],
            offset: rect.lo()[k],
        })
        .collect();
    Ok(Tensor::from_parts(
        dims.to_vec(),
        format.clone(),
        levels,
        vals,
    )?)
}
