// The kernel on rayon's pool (`--threads` workers for a parallelized loop).

use crate::{kernel, I, V};
use std::error::Error;
use tessera_formats::Tensor;

pub fn compute(
    tensors: Vec<Tensor<V, I>>,
    out_dims: &[usize],
    threads: Option<usize>,
    stats: bool,
) -> Result<Tensor<V, I>, Box<dyn Error>> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        b = b.num_threads(n);
    }
    let pool = b.build()?;
    if stats {
        eprintln!(
            "note: `--stats` reports the task runtime, which only programs of a distributed \
             schedule (`split`) use; this one runs the plain kernel"
        );
    }
    let refs: Vec<&Tensor<V, I>> = tensors.iter().collect();
    Ok(pool.install(|| kernel::kernel::<V, I>(&refs, out_dims)))
}
