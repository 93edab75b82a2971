//! Element-wise statements on the runtime: one element-wise task each (thesis §4.4).
//!
//! A statement is *element-wise* when element `k` of the output's values depends only on
//! element `k` of each operand's values and on scalars: a dense output, dense operands each
//! indexed by exactly the output's variables in the output's level order (so the values arrays
//! line up cell for cell) or not indexed at all (rank 0: `alpha * p(i)`), no reduction (the
//! caller's functions are allowed: every cell is visited anyway). A scalar operand is passed to the task as a future of its one value
//! ([`Runtime::value_future`], made once per [`Stored`] and reused by every statement that
//! names it), so the element-wise tasks of a CG iteration's updates fuse with each other
//! while the runtime orders them after the task computing the scalar. Such a statement does not need a
//! plan's block task: `tensor!(rt => ...)` registers its generated chunk body
//! ([`crate::codegen::emit_elementwise`]) with [`Runtime::register_elementwise`] and launches
//! one task, output written, inputs read, all aligned, over the launch domain the runtime's
//! solver picks (as for any element-wise task). A chain of such statements issued into a
//! fusion window then runs as one loop over cache-sized chunks, and intermediates the program
//! no longer holds are never allocated.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use tessera_formats::LevelType;
use tessera_runtime::{Chunk, Future, Runtime};

use super::{PlanRunError, PlanValue, Site, Stored};
use crate::ir::{Domain, Kernel, OutputKind};

/// A generated element-wise chunk body ([`crate::codegen::emit_elementwise`]).
pub type ChunkFn<V> = fn(&mut Chunk<'_, V>);

/// Whether `k` is element-wise (see the module documentation).
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
        && !k.nests.is_empty()
        && k.nests.iter().all(|n| {
            // Every loop binds an output variable (no reduction) over its whole range.
            n.acc_depth == out.len()
                && n.loops.len() == out.len()
                && n.loops.iter().all(|l| l.domain == Domain::Universe)
                && n.accesses().iter().all(|&a| {
                    let acc = &k.accesses[a];
                    k.slot(a).is_some()
                        && (acc.level_vars == *out || acc.level_vars.is_empty())
                        && all_dense(acc.tensor)
                })
        })
}

/// For each input slot of an element-wise kernel, whether it is a scalar (rank 0): passed
/// to the chunk as a scalar argument, in slot order, not as an aligned slice.
pub fn scalar_inputs(k: &Kernel) -> Vec<bool> {
    let mut scalar = vec![false; k.inputs().len()];
    for t in &k.tensors {
        if let Some(slot) = t.input_slot {
            scalar[slot] = t.format.levels().is_empty();
        }
    }
    scalar
}

/// Runs the element-wise statement `text` on stored tensors as one element-wise task whose
/// body is `body`, the statement's generated chunk body; `fingerprint` as in
/// [`super::run_text`]. Returns the output's store without waiting for the task. This is what
/// `tensor!(rt => ...)` expands to for an element-wise statement.
pub fn run_elementwise<V: PlanValue, I: super::PlanIndex>(
    rt: &Runtime,
    site: &Site,
    text: &'static str,
    fingerprint: u64,
    inputs: &[&Stored<V, I>],
    out_dims: &[usize],
    body: ChunkFn<V>,
) -> Result<Stored<V, I>, PlanRunError> {
    let facts = match site.elementwise.get() {
        Some(f) => f,
        None => {
            let f = Facts::of(&site.planned(text, fingerprint)?.0);
            site.elementwise.get_or_init(|| f)
        }
    };
    super::same_runtime(rt, text, inputs, &facts.inputs)?;
    if !facts.elementwise {
        return Err(PlanRunError::Plan(format!(
            "`{text}` is not an element-wise statement; it runs as a plan (`run_text`)"
        )));
    }
    let cells: usize = out_dims.iter().product();
    let y = rt.create(V::DTYPE, &[cells])?;
    let name = site.task_name::<V>(text, body, y.runtime_id(), rt)?;
    let scalar = &facts.scalar;
    let mut t = rt.task(&name);
    for ((input, name), &scalar) in inputs.iter().zip(&facts.inputs).zip(scalar) {
        let vals = &input.stores[input.layout.vals];
        // `bind` checked formats and dimensions; a `Stored` of a dense tensor is its values.
        let want = if scalar { 1 } else { cells };
        if input.stores.len() != 1 || vals.shape().as_deref() != Some(&[want][..]) {
            return Err(PlanRunError::Plan(format!(
                "`{text}`: the stores of `{name}` are not {want} dense values"
            )));
        }
        t = match scalar {
            true => t.future(&input.value_future(rt)?),
            false => t.read(vals),
        };
    }
    // The chunk body assigns every element of its output (`emit_elementwise`): a recycled
    // buffer's old values need no zeroing first.
    t = t.write_all(&y);
    for (input, _) in inputs.iter().zip(scalar).filter(|(_, &s)| !s) {
        t = t.align(&y, &input.stores[input.layout.vals]);
    }
    t.submit()?;
    Ok(Stored::dense_values(y, facts.format.clone(), out_dims))
}

/// What an element-wise call site needs of its kernel on every run, worked out once.
pub(super) struct Facts {
    elementwise: bool,
    /// Per input slot: whether it is a scalar ([`scalar_inputs`]).
    scalar: Vec<bool>,
    /// The input slots' names.
    inputs: Vec<String>,
    /// The output's format.
    format: tessera_formats::Format,
}

impl Facts {
    fn of(kernel: &Kernel) -> Facts {
        Facts {
            elementwise: is_elementwise(kernel),
            scalar: scalar_inputs(kernel),
            inputs: kernel.inputs().iter().map(|n| n.to_string()).collect(),
            format: kernel.output_tensor().format.clone(),
        }
    }
}

impl Site {
    /// The task name of the site's statement `text` with chunk body `body` ([`task_name`]),
    /// kept per body (a generic function's call site has one per value type), registered on
    /// `rt` (whose id is `runtime`) unless it is known to be.
    fn task_name<V: PlanValue>(
        &self,
        text: &'static str,
        body: ChunkFn<V>,
        runtime: u64,
        rt: &Runtime,
    ) -> Result<Arc<str>, PlanRunError> {
        let key = (body as usize, std::any::TypeId::of::<V>());
        let (name, registered) = {
            let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
            match names.iter().find(|n| (n.body, n.value) == key) {
                Some(n) => (n.name.clone(), n.registered.clone()),
                None => {
                    let n = Named {
                        body: key.0,
                        value: key.1,
                        name: task_name::<V>(text, body),
                        registered: Default::default(),
                    };
                    let got = (n.name.clone(), n.registered.clone());
                    names.push(n);
                    got
                }
            }
        };
        if !registered.contains(runtime) {
            register(rt, &name, body)?;
            registered.insert(runtime);
        }
        Ok(name)
    }
}

/// An element-wise task name a [`Site`] keeps: for the chunk body at `body` over values of
/// type `value`, and the runtimes it is registered on.
pub(super) struct Named {
    body: usize,
    value: std::any::TypeId,
    name: Arc<str>,
    registered: Arc<super::RegisteredOn>,
}
impl<V: PlanValue, I: super::PlanIndex> Stored<V, I> {
    /// The one value of this rank-0 tensor as a future ([`Runtime::value_future`]), made on
    /// first use: every statement naming the scalar takes the same future, so they fuse.
    fn value_future(&self, rt: &Runtime) -> Result<Future, PlanRunError> {
        if let Some(f) = self.value.get() {
            return Ok(f.clone());
        }
        let f = rt.value_future(&self.stores[self.layout.vals])?;
        Ok(self.value.get_or_init(|| f).clone())
    }
}

/// The task's name: the statement, its value type and its body. The same statement is the
/// same task on every run (whatever the shapes: the body works on any chunk), which the
/// fusion memo and tracing recognise; one task is registered per statement, not per run.
/// Formatted once per statement and cached: a `tensor!` CG iteration runs three such
/// statements, and formatting the name each time cost ~1.8 k instructions per call.
fn task_name<V: PlanValue>(text: &'static str, body: ChunkFn<V>) -> Arc<str> {
    type Key = (usize, usize, std::any::TypeId, usize);
    static NAMES: OnceLock<Mutex<HashMap<Key, Arc<str>>>> = OnceLock::new();
    // `text` is the statement's literal and `body` its generated fn: both fixed per call site.
    let key = (
        text.as_ptr() as usize,
        text.len(),
        std::any::TypeId::of::<V>(),
        body as usize,
    );
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    names
        .entry(key)
        .or_insert_with(|| {
            format!(
                "elementwise {text} <{}> @{:x}",
                std::any::type_name::<V>(),
                body as usize
            )
            .into()
        })
        .clone()
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
            // Scalar operands (CG's updates): passed as scalar arguments.
            "y(i) = alpha * x(i)",
            "s(i) = r(i) + beta * p(i)",
            "C(i,j) = A(i,j) / (c + B(i,j)); split(i, io, ii, 4)",
            "C(i,j) = A(i,j) / B(i,j); split(i, io, ii, 4)",
            // Column-major throughout: the cells still line up.
            "C(i,j) = max(A(i,j), B(i,j)); A: dd:1,0; B: dd:1,0; C: dd:1,0",
        ] {
            assert!(elementwise(text), "{text}");
        }
    }

    #[test]
    fn scalar_inputs_are_the_rank_0_slots() {
        let (kernel, _) = crate::plan::from_text("y(i) = a * x(i) + z(i) / b").unwrap();
        let want: Vec<bool> = kernel
            .inputs()
            .iter()
            .map(|t| *t == "a" || *t == "b")
            .collect();
        assert_eq!(super::scalar_inputs(&kernel), want);
        assert_eq!(want.iter().filter(|s| **s).count(), 2);
    }

    #[test]
    fn other_statements_are_not() {
        for text in [
            // A reduction, a sparse operand, a broadcast vector, a transposed access, a
            // sparse output, a scalar output (also of scalars).
            "y(i) = A(i,j) * x(j); A: csr",
            "y(i) = a(i) * b(i); a: s",
            "C(i,j) = A(i,j) * x(j)",
            "C(i,j) = A(j,i)",
            "C(i,j) = A(i,j) * B(i,j); A: csr; C: csr",
            "d = a(i) * b(i)",
            "d = a / b",
        ] {
            assert!(!elementwise(text), "{text}");
        }
    }
}
