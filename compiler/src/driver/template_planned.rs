// The statement's distribution plan as block tasks on tessera-runtime (`--threads` workers),
// each point task running the generated block kernel on its sub-stores. The plan is rebuilt
// from the statement when the program starts (the compiler's one definition of it), and
// checked to come from the same kernel as the block kernel compiled in.

use crate::{kernel_block, I, STATEMENT, V};
use std::error::Error;
use tessera_compiler::plan::{self, on_runtime};
use tessera_formats::Tensor;
use tessera_runtime::Runtime;

/// `plan::kernel_fingerprint` of the kernel `kernel_block` was generated from.
const FINGERPRINT: u64 = @FINGERPRINT@;

pub fn compute(
    tensors: Vec<Tensor<V, I>>,
    out_dims: &[usize],
    threads: Option<usize>,
    stats: bool,
) -> Result<Tensor<V, I>, Box<dyn Error>> {
    let (kernel, plan) = plan::from_text(STATEMENT)?;
    if plan::kernel_fingerprint(&kernel) != FINGERPRINT {
        return Err("this program's plan no longer matches its block kernel (the compiler \
                    changed since it was built); compile the statement again"
            .into());
    }
    let threads = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let rt = Runtime::builder().threads(threads).build();
    // The loaded tensors move into the runtime's stores (no copy).
    let out = on_runtime::run_compiled_owned(
        &rt,
        &plan,
        &kernel,
        tensors,
        out_dims,
        kernel_block::kernel_block::<V, I>,
    )?;
    if stats {
        eprintln!("{}", on_runtime::stats_line(&rt));
    }
    Ok(out)
}
