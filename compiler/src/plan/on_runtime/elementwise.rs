//! Element-wise statements on the runtime: one element-wise task each (thesis §4.4).
//!
//! A statement is *element-wise* when element `k` of the output's values depends only on
//! element `k` of each operand's values: a dense output, dense operands each indexed by
//! exactly the output's variables in the output's level order (so the values arrays line up
//! cell for cell), no reduction, no caller's function. Such a statement does not need a
//! plan's block task: `tensor!(rt => ...)` registers its generated chunk body
//! ([`crate::codegen::emit_elementwise`]) with [`Runtime::register_elementwise`] and launches
//! one task, output written, inputs read, all aligned, over the launch domain the runtime's
//! solver picks (as for any element-wise task). A chain of such statements issued into a
//! fusion window then runs as one loop over cache-sized chunks, and intermediates the program
//! no longer holds are never allocated.

use tessera_formats::LevelType;
use tessera_runtime::{Chunk, Runtime};

use super::{planned, PlanRunError, PlanValue, Stored};
use crate::ir::{Domain, Kernel, OutputKind};

/// A generated element-wise chunk body ([`crate::codegen::emit_elementwise`]).
pub type ChunkFn<V> = fn(&mut Chunk<'_, V>);

/// Whether `k` is element-wise (see the module documentation). Rank-0 operands (scalars) are
/// not: their one value is not aligned with the output's cells.
pub fn is_elementwise(k: &Kernel) -> bool {
    let out = &k.accesses[k.output_access].level_vars;
    let all_dense = |t: usize| {
        k.tensors[t]
            .format
            .levels()
            .iter()
            .all(|l| *l == LevelType::Dense)
    };
    k.output_kind == OutputKind::Dense
        && !out.is_empty()
        && all_dense(k.output)
        && k.repacks.is_empty()
        && k.user_functions.is_empty()
        && !k.nests.is_empty()
        && k.nests.iter().all(|n| {
            // Every loop binds an output variable (no reduction) over its whole range.
            n.acc_depth == out.len()
                && n.loops.len() == out.len()
                && n.loops.iter().all(|l| l.domain == Domain::Universe)
                && n.accesses().iter().all(|&a| {
                    let acc = &k.accesses[a];
                    k.slot(a).is_some() && acc.level_vars == *out && all_dense(acc.tensor)
                })
        })
}

/// Runs the element-wise statement `text` on stored tensors as one element-wise task whose
/// body is `body`, the statement's generated chunk body; `fingerprint` as in
/// [`super::run_text`]. Returns the output's store without waiting for the task. This is what
/// `tensor!(rt => ...)` expands to for an element-wise statement.
pub fn run_elementwise<V: PlanValue, I: super::PlanIndex>(
    rt: &Runtime,
    text: &'static str,
    fingerprint: u64,
    inputs: &[&Stored<V, I>],
    out_dims: &[usize],
    body: ChunkFn<V>,
) -> Result<Stored<V, I>, PlanRunError> {
    let planned = planned(text, fingerprint)?;
    let kernel = &planned.0;
    if !is_elementwise(kernel) {
        return Err(PlanRunError::Plan(format!(
            "`{text}` is not an element-wise statement; it runs as a plan (`run_text`)"
        )));
    }
    let cells: usize = out_dims.iter().product();
    let name = task_name::<V>(text, body);
    register(rt, &name, body)?;
    let mut t = rt.task(&name);
    for (input, name) in inputs.iter().zip(kernel.inputs()) {
        let vals = &input.stores[input.layout.vals];
        // `bind` checked formats and dimensions; a `Stored` of a dense tensor is its values.
        if input.stores.len() != 1 || vals.shape().as_deref() != Some(&[cells][..]) {
            return Err(PlanRunError::Plan(format!(
                "`{text}`: the stores of `{name}` are not {cells} dense values"
            )));
        }
        t = t.read(vals);
    }
    let y = rt.create(V::DTYPE, &[cells])?;
    t = t.write(&y);
    for input in inputs {
        t = t.align(&y, &input.stores[input.layout.vals]);
    }
    t.submit()?;
    let format = kernel.output_tensor().format.clone();
    Ok(Stored::dense_values(y, format, out_dims))
}
/// The task's name: the statement, its value type and its body. The same statement is the
/// same task on every run (whatever the shapes: the body works on any chunk), which the
/// fusion memo and tracing recognise; one task is registered per statement, not per run.
fn task_name<V: PlanValue>(text: &str, body: ChunkFn<V>) -> String {
    format!(
        "elementwise {text} <{}> @{:x}",
        std::any::type_name::<V>(),
        body as usize
    )
}

fn register<V: PlanValue>(rt: &Runtime, name: &str, body: ChunkFn<V>) -> Result<(), PlanRunError> {
    match rt.register_elementwise::<V>(name, body) {
        // Run before on `rt`: the same body under the same name.
        Ok(()) | Err(tessera_runtime::RuntimeError::DuplicateTask(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::is_elementwise;

    fn elementwise(text: &str) -> bool {
        let (kernel, _) = crate::plan::from_text(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        is_elementwise(&kernel)
    }

    #[test]
    fn element_wise_statements_are_recognised() {
        for text in [
            "y(i) = a(i) * b(i) + 1",
            "y(i) = sqrt(abs(a(i))) - lt(a(i), 0)",
            "y(i) += a(i) * a(i)",
            "C(i,j) = A(i,j) / B(i,j); split(i, io, ii, 4)",
            // Column-major throughout: the cells still line up.
            "C(i,j) = max(A(i,j), B(i,j)); A: dd:1,0; B: dd:1,0; C: dd:1,0",
        ] {
            assert!(elementwise(text), "{text}");
        }
    }

    #[test]
    fn other_statements_are_not() {
        for text in [
            // A reduction, a scalar operand, a sparse operand, a broadcast vector, a
            // transposed access, a sparse output, a scalar output.
            "y(i) = A(i,j) * x(j); A: csr",
            "y(i) = alpha * x(i)",
            "y(i) = a(i) * b(i); a: s",
            "C(i,j) = A(i,j) * x(j)",
            "C(i,j) = A(j,i)",
            "C(i,j) = A(i,j) * B(i,j); A: csr; C: csr",
            "d = a(i) * b(i)",
        ] {
            assert!(!elementwise(text), "{text}");
        }
    }
}
