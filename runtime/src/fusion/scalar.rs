//! Scalar operands of element-wise tasks that live in stores.
//!
//! An element-wise task reads its arguments at the same index, so a one-element store (a dot
//! product's result, `alpha = rr / pq`) cannot be one of its arguments. It is passed as a
//! scalar instead: [`Runtime::value_future`] launches a one-point task that reads the store
//! and fills a future with its value, and the element-wise task takes that future
//! ([`TaskLauncher::future`](crate::TaskLauncher::future)). The runtime already orders a
//! task after the producer of each future it takes, and the fusion pass ends a prefix at a
//! task whose future is made inside it, so a fused chunk loop only runs once the value is
//! known. Tasks taking one future fuse with each other (a CG iteration's two updates).

use crate::dtype::{DType, Scalar};
use crate::error::{Result, RuntimeError};
use crate::future::Future;
use crate::store::Store;
use crate::{Runtime, TaskContext};

/// The name the one-point task is registered under, when the runtime is built: registered
/// on first use, an application's task of this name registered before it ran in its place
/// and its result became the "value".
pub(crate) const VALUE_TASK: &str = "tessera.value_future";

impl Runtime {
    /// A future of the one value of `store` (of any shape with one element), filled once the
    /// tasks writing it have run; the caller does not wait. Integers become
    /// [`Scalar::I64`]/[`Scalar::U64`], floats [`Scalar::F64`] (exact for `f32`), so
    /// `T::from_scalar` gives the stored value back.
    pub fn value_future(&self, store: &Store) -> Result<Future> {
        let shape = store.shape();
        if shape
            .as_ref()
            .is_none_or(|s| s.iter().product::<usize>() != 1)
            || store.dtype() == DType::Range
        {
            return Err(RuntimeError::NotOneValue {
                store: store.id(),
                shape,
            });
        }
        // One point, whatever the machine: the value is folded from that point alone. `Sum`
        // with one point is the value itself (no identity is added to it).
        self.task(VALUE_TASK)
            .read(store)
            .launch_domain(&[1])
            .submit_reduce(crate::ReduceOp::Sum)
    }
}

/// The body of [`VALUE_TASK`].
pub(crate) fn value_body(ctx: &mut TaskContext<'_>) {
    ctx.set_result(first_value(ctx))
}

/// The first element of argument 0, as a scalar.
fn first_value(ctx: &TaskContext<'_>) -> Scalar {
    match ctx.dtype(0) {
        DType::F64 => Scalar::F64(ctx.read::<f64>(0).as_slice()[0]),
        DType::F32 => Scalar::F64(ctx.read::<f32>(0).as_slice()[0] as f64),
        DType::I64 => Scalar::I64(ctx.read::<i64>(0).as_slice()[0]),
        DType::I32 => Scalar::I64(ctx.read::<i32>(0).as_slice()[0] as i64),
        DType::U64 => Scalar::U64(ctx.read::<u64>(0).as_slice()[0]),
        DType::U32 => Scalar::U64(ctx.read::<u32>(0).as_slice()[0] as u64),
        DType::Range => unreachable!("refused by value_future"),
    }
}
