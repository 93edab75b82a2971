//! Running a plan on `tessera-runtime`: the tensors become stores, the plan's partitioning
//! constraints become the runtime's (`tile` at the grid's split points, `align`, `image`,
//! `broadcast`), and each point task runs the kernel's block entry point on the sub-stores
//! the runtime hands it. Sequential block variables become a loop of dependent launches;
//! extended ones a reduction privilege the runtime folds by a summation tree.
//!
//! Store layout (one representation, chosen so that images work on it): every input store is
//! 1-d. `pos` of a compressed level holds one [`PosRange`] per parent position (the thesis'
//! ranges; made once from `formats`' offsets at upload), `crd` the coordinates at the
//! tensor's index width (`u32` by default), `vals` the values; a dense prefix of levels is
//! flattened into the positions of the store below it, so a tile of the first level is a
//! contiguous range. A dense output is one n-d store over its levels (trailing untiled levels
//! merged when there are more than the runtime's dimensions); a sparse output is emitted as
//! entries, one piece per point, assembled once at the end.
//!
//! A point hands its block kernel views of its sub-stores, without copying them: dense
//! levels with offsets, `crd` and `vals` as the runtime's windows, and `pos` (the one array
//! made per point, one entry per parent in the block) rebased to its `crd` window. Inputs the plan cuts into
//! *tensor blocks* are, on one process, passed whole and narrowed by the block kernel's
//! bounded loops; cutting them with the distributed loader is the multi-rank step.
//!
//! An element-wise statement needs no plan: it is one element-wise task of the runtime
//! (`elementwise`), so that a chain of them fuses into one loop over chunks.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use tessera_formats::{Format, Index, Level, LevelType, LevelView, Tensor, TensorView, Value};
use tessera_runtime::{
    Cut, DType, Element, PosRange, ReadView, Rect, ReduceOp, Runtime, RuntimeError, Store,
    TaskContext, MAX_DIMS,
};

use super::{Grid, Partition, Plan, Privilege, StoreKind};
use crate::interp::{self, InterpError};
use crate::ir::{Kernel, OutputKind};

mod elementwise;
mod entries;
mod output;
mod share;
pub use elementwise::{is_elementwise, run_elementwise, scalar_inputs, ChunkFn};
pub use output::PlanResult;
pub use share::{read_tcs_share, row_shares, TcsShare};

/// Why a plan could not run on the runtime.
#[derive(Debug, thiserror::Error)]
pub enum PlanRunError {
    #[error(transparent)]
    Inputs(#[from] InterpError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Bind(#[from] tessera_kernel_rt::bind::BindError),
    #[error("{0}")]
    Plan(String),
    #[error("assembling the output failed: {0}")]
    Output(#[from] tessera_formats::TensorError),
    #[error(
        "the output has {rank} levels tiled at more than {MAX_DIMS} places (level {level}); the \
         runtime's stores have at most {MAX_DIMS} dimensions"
    )]
    OutputRank { rank: usize, level: usize },
    /// An input file read in part by the ranks that is damaged or inconsistent.
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    File(#[from] tessera_formats::Error),
    /// Storing the output across ranks failed (a full disk, say).
    #[error("writing the output: {0}")]
    Store(#[from] tessera_runtime::io::IoError),
}

/// The element types a plan runs with: values and coordinates the runtime can store.
pub trait PlanValue: Value + Element {}
impl<T: Value + Element> PlanValue for T {}
pub trait PlanIndex: Index + Element {}
impl<T: Index + Element> PlanIndex for T {}

/// A generated block kernel ([`crate::codegen::emit_block`]): views of the inputs, output
/// dimensions, the block's range and first flag per index variable, and the point's tile of a
/// dense output to write in place (then it returns `None`). The tile holds zeros, or
/// anything when the kernel assigns every cell ([`Kernel::assigns_every_cell`]).
pub type BlockFn<V, I> = fn(
    &[TensorView<'_, V, I>],
    &[usize],
    &[Range<usize>],
    &[bool],
    Option<&mut [V]>,
) -> Option<Tensor<V, I>>;

/// Runs `plan` (made from `kernel`) on `rt`, each point running the interpreter's block entry
/// point, and returns the output tensor.
pub fn run<V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    plan: &Plan,
    kernel: &Kernel,
    inputs: &[&Tensor<V, I>],
    out_dims: &[usize],
) -> Result<Tensor<V, I>, PlanRunError> {
    run_with(rt, plan, kernel, inputs, out_dims, None)
}

/// As [`run`], each point running `block`, the kernel's generated block entry point (what a
/// compiled program of a distributed schedule passes). `block` must be generated from
/// `kernel`; the inputs are checked against `kernel` here, once, before any point runs.
pub fn run_compiled<V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    plan: &Plan,
    kernel: &Kernel,
    inputs: &[&Tensor<V, I>],
    out_dims: &[usize],
    block: BlockFn<V, I>,
) -> Result<Tensor<V, I>, PlanRunError> {
    run_with(rt, plan, kernel, inputs, out_dims, Some(block))
}

/// As [`run_compiled`], over tensors the caller gives up: their arrays move into the stores
/// instead of being copied (what a compiled program does with the tensors it loaded).
pub fn run_compiled_owned<V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    plan: &Plan,
    kernel: &Kernel,
    inputs: Vec<Tensor<V, I>>,
    out_dims: &[usize],
    block: BlockFn<V, I>,
) -> Result<Tensor<V, I>, PlanRunError> {
    let stored = inputs
        .into_iter()
        .map(|t| Stored::from_tensor(rt, t))
        .collect::<Result<Vec<_>, _>>()?;
    run_stored_inputs(rt, plan, kernel, &stored, out_dims, Some(block))
}

fn run_with<V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    plan: &Plan,
    kernel: &Kernel,
    inputs: &[&Tensor<V, I>],
    out_dims: &[usize],
    compiled: Option<BlockFn<V, I>>,
) -> Result<Tensor<V, I>, PlanRunError> {
    let stored = inputs
        .iter()
        .map(|t| Stored::upload(rt, t))
        .collect::<Result<Vec<_>, _>>()?;
    run_stored_inputs(rt, plan, kernel, &stored, out_dims, compiled)
}

/// Runs the plan over inputs already in stores and reads the output back (what a compiled
/// `--mpi` program does with the inputs each rank read in part, [`Stored::from_share`]);
/// `compiled` `None` runs the interpreter.
pub fn run_stored_inputs<V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    plan: &Plan,
    kernel: &Kernel,
    stored: &[Stored<V, I>],
    out_dims: &[usize],
    compiled: Option<BlockFn<V, I>>,
) -> Result<Tensor<V, I>, PlanRunError> {
    // The last read of the output: moved out of its store, not copied.
    run_stored_result(rt, plan, kernel, stored, out_dims, compiled)?.into_tensor(rt)
}

/// Runs the plan over inputs already in stores and leaves the output in the runtime, for the
/// caller to move out, gather on one rank or store piecewise across ranks ([`PlanResult`]).
pub fn run_stored_result<V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    plan: &Plan,
    kernel: &Kernel,
    stored: &[Stored<V, I>],
    out_dims: &[usize],
    compiled: Option<BlockFn<V, I>>,
) -> Result<PlanResult<V, I>, PlanRunError> {
    // `execute` checks the inputs' formats and dimensions against the kernel.
    let refs: Vec<&Stored<V, I>> = stored.iter().collect();
    let output = execute(rt, None, plan, kernel, &refs, out_dims, compiled)?;
    let starts = OutputLayout::new(kernel, out_dims, plan)?.groups;
    let levels = kernel.output_tensor().format.mode_order().len();
    let groups = (starts.iter().enumerate())
        .map(|(d, &(l, _))| l..starts.get(d + 1).map_or(levels, |s| s.0))
        .collect();
    Ok(PlanResult {
        _types: std::marker::PhantomData,
        output,
        format: kernel.output_tensor().format.clone(),
        dims: out_dims.to_vec(),
        groups,
    })
}

/// A tensor held as runtime stores, in the layout a plan's block tasks read (see the module
/// documentation): what [`run_stored`] takes and returns, so that statements in a row are one
/// task stream on the runtime and their results stay in its stores.
pub struct Stored<V, I = u32> {
    stores: Vec<Store>,
    layout: InputLayout,
    dims: Vec<usize>,
    format: Format,
    /// A rank-0 tensor's value as a future, made the first time an element-wise statement
    /// takes it as a scalar (`elementwise`); the stores never change after creation.
    value: std::sync::OnceLock<tessera_runtime::Future>,
    _types: std::marker::PhantomData<fn() -> (V, I)>,
}

impl<V: PlanValue, I: PlanIndex> Stored<V, I> {
    /// Copies a tensor into new stores of `rt` (see [`Stored::from_tensor`], which moves it).
    /// Only `crd` and `vals` are copied; each `pos` is read in place into its ranges (the
    /// tensor is not cloned whole first).
    pub fn upload(rt: &Runtime, t: &Tensor<V, I>) -> Result<Self, PlanRunError> {
        if let Some(whole) = whole_of_block(t)? {
            return Self::from_tensor(rt, whole);
        }
        if t.format().coo_start().is_some() {
            return Self::from_tensor(rt, t.clone());
        }
        let levels = t.levels().iter().map(|l| match l {
            Level::Compressed { pos, crd } => {
                Some((Cow::Borrowed(&pos[..]), Cow::Borrowed(&crd[..])))
            }
            Level::Dense { .. } | Level::Singleton { .. } => None,
        });
        let layout = prefix_layout(t);
        let uploaded = upload(rt, layout, levels, Cow::Borrowed(t.vals()))?;
        Ok(Self::new(uploaded, t))
    }

    /// Moves a tensor's arrays into new stores of `rt`: its `crd` and `vals` become stores
    /// without a copy; each compressed level's `pos` becomes its ranges (one per parent).
    pub fn from_tensor(rt: &Runtime, t: Tensor<V, I>) -> Result<Self, PlanRunError> {
        let t = match whole_of_block(&t)? {
            Some(whole) => whole,
            None => t,
        };
        // Singleton (COO) levels are stored in their unique form (`sq` as `ss`): the same
        // entries in the same order, so every point re-levels its block (see `Body::run`).
        let unique = match t.format().coo_start() {
            Some(_) => Some(t.view().relevel(&t.format().unique())?),
            None => None,
        };
        let (dims, format) = (t.dims().to_vec(), t.format().clone());
        let t = unique.unwrap_or(t);
        let layout = prefix_layout(&t);
        let (_, _, levels, vals) = t.into_parts();
        let levels = levels.into_iter().map(|l| match l {
            Level::Compressed { pos, crd } => Some((Cow::Owned(pos), Cow::Owned(crd))),
            Level::Dense { .. } => None,
            Level::Singleton { .. } => unreachable!("stored in the unique form"),
        });
        let uploaded = upload(rt, layout, levels, Cow::Owned(vals))?;
        Ok(Stored {
            stores: uploaded.0,
            layout: uploaded.1,
            dims,
            format,
            value: Default::default(),
            _types: std::marker::PhantomData,
        })
    }

    /// The stored form of `t` (its dimensions and format) over `uploaded` stores.
    fn new((stores, layout): (Vec<Store>, InputLayout), t: &Tensor<V, I>) -> Self {
        Stored {
            stores,
            layout,
            dims: t.dims().to_vec(),
            format: t.format().clone(),
            value: Default::default(),
            _types: std::marker::PhantomData,
        }
    }

    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    pub fn format(&self) -> &Format {
        &self.format
    }

    /// The dense tensor of `format` and dimensions `dims` whose values (in level order) are
    /// the 1-d store `vals`: exactly the layout `upload` gives a dense tensor (its values as
    /// one store, the prefix of every level).
    fn dense_values(vals: Store, format: Format, dims: &[usize]) -> Self {
        let sizes: Vec<usize> = format.mode_order().iter().map(|&m| dims[m]).collect();
        Stored {
            stores: vec![vals],
            layout: InputLayout {
                levels: vec![None; sizes.len()],
                vals: 0,
                prefix: sizes.len(),
                prefix_inner: sizes.iter().skip(1).product(),
            },
            dims: dims.to_vec(),
            format,
            value: Default::default(),
            _types: std::marker::PhantomData,
        }
    }

    /// Reads the stores back into a tensor (waits for the tasks that write them); the stores
    /// stay, so this copies (see [`Stored::into_tensor`]).
    pub fn to_tensor(&self, rt: &Runtime) -> Result<Tensor<V, I>, PlanRunError> {
        let copy = Stored {
            stores: self.stores.clone(),
            layout: self.layout.clone(),
            dims: self.dims.clone(),
            format: self.format.clone(),
            value: Default::default(),
            _types: std::marker::PhantomData,
        };
        // `self` still holds every store: `take` copies.
        copy.into_tensor(rt)
    }

    /// Reads the stores back into a tensor, giving them up: a store nothing else holds is
    /// moved out of the runtime ([`Runtime::take`]) instead of copied.
    pub fn into_tensor(self, rt: &Runtime) -> Result<Tensor<V, I>, PlanRunError> {
        let order = self.format.mode_order();
        let mut stores: Vec<Option<Store>> = self.stores.into_iter().map(Some).collect();
        let mut levels = Vec::new();
        for (l, at) in self.layout.levels.iter().enumerate() {
            levels.push(match at {
                None => Level::Dense {
                    size: self.dims[order[l]],
                    offset: 0,
                },
                Some((pos, crd)) => {
                    let ranges = take::<PosRange>(rt, &mut stores[*pos])?;
                    let mut offsets = Vec::with_capacity(ranges.len() + 1);
                    offsets.push(I::from_usize(ranges.first().map_or(0, |r| r.lo as usize)));
                    offsets.extend(ranges.iter().map(|r| I::from_usize(r.hi as usize)));
                    Level::Compressed {
                        pos: offsets,
                        crd: take::<I>(rt, &mut stores[*crd])?,
                    }
                }
            });
        }
        let vals = take::<V>(rt, &mut stores[self.layout.vals])?;
        let t = Tensor::from_parts(self.dims.clone(), self.format.unique(), levels, vals)?;
        Ok(in_format(t, &self.format)?)
    }
}

/// The elements of the store in `slot`, given up ([`Runtime::take`]).
fn take<T: Element>(rt: &Runtime, slot: &mut Option<Store>) -> Result<Vec<T>, PlanRunError> {
    let store = slot.take().expect("each store of a layout is read once");
    Ok(rt.take::<T>(store)?)
}

/// Runs `plan` on tensors held in `rt`'s stores and returns the output as stores, without
/// waiting for it: a dense output of one store dimension (vectors, scalars, matrices tiled by
/// rows) stays the store the block tasks write; any other output is assembled (a sparse one
/// from its pieces) and stored again. `block` as in [`run_compiled`], or the interpreter.
pub fn run_stored<V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    plan: &Plan,
    kernel: &Kernel,
    inputs: &[&Stored<V, I>],
    out_dims: &[usize],
    block: Option<BlockFn<V, I>>,
) -> Result<Stored<V, I>, PlanRunError> {
    run_stored_at(rt, None, plan, kernel, inputs, out_dims, block)
}

/// [`run_stored`] from a call site ([`Site`], made for this `plan` and `kernel`).
fn run_stored_at<V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    site: Option<&Site>,
    plan: &Plan,
    kernel: &Kernel,
    inputs: &[&Stored<V, I>],
    out_dims: &[usize],
    block: Option<BlockFn<V, I>>,
) -> Result<Stored<V, I>, PlanRunError> {
    let format = kernel.output_tensor().format.clone();
    let t = match execute(rt, site, plan, kernel, inputs, out_dims, block)? {
        // One store dimension: the layout `upload` gives a dense tensor.
        Output::Dense(y, value) if y.shape().is_some_and(|s| s.len() == 1) => {
            let stored = Stored::dense_values(y, format, out_dims);
            if let Some(f) = value {
                let _ = stored.value.set(f);
            }
            return Ok(stored);
        }
        Output::Dense(y, _) => dense_tensor(&format, out_dims, rt.take::<V>(y)?)?,
        Output::Entries(e) => e.into_tensor(rt)?,
    };
    Stored::from_tensor(rt, t)
}

/// Runs the statement `text` (a `tensor!` statement with a distribution schedule) on stored
/// tensors, each point running `block`, the statement's generated block kernel. The plan is
/// made from `text` on first use and kept for the process (keyed by the text) and by the
/// call site's `site`; `fingerprint` ([`super::kernel_fingerprint`] of the kernel `block`
/// was generated from) must match it.
/// This is what `tensor!(rt => ...)` expands to for a statement that is not element-wise
/// ([`run_elementwise`] for one that is).
pub fn run_text<V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    site: &Site,
    text: &'static str,
    fingerprint: u64,
    inputs: &[&Stored<V, I>],
    out_dims: &[usize],
    block: BlockFn<V, I>,
) -> Result<Stored<V, I>, PlanRunError> {
    let planned = site.planned(text, fingerprint)?;
    let (kernel, plan) = &**planned;
    same_runtime(rt, text, inputs, &kernel.inputs())?;
    run_stored_at(rt, Some(site), plan, kernel, inputs, out_dims, Some(block))
}

/// Every operand's stores belong to `rt` (a [`Stored`] lives on the runtime it was uploaded to
/// or computed on); else an error naming the first operand that does not, and what to do. The
/// runtime's own refusal names only a store number, or a scalar argument by position.
fn same_runtime<V: PlanValue, I: PlanIndex, S: AsRef<str>>(
    rt: &Runtime,
    text: &str,
    inputs: &[&Stored<V, I>],
    names: &[S],
) -> Result<(), PlanRunError> {
    let foreign = |t: &&&Stored<V, I>| t.stores.iter().any(|s| s.runtime_id() != rt.id());
    match inputs.iter().zip(names).find(|(t, _)| foreign(t)) {
        None => Ok(()),
        Some((_, name)) => Err(PlanRunError::Plan(format!(
            "`{text}`: operand `{}` belongs to another runtime; read it there with \
             `to_tensor` and `Stored::upload` it to this one",
            name.as_ref()
        ))),
    }
}

/// What one `tensor!(rt => ...)` call site works out on its first run and keeps: the macro
/// holds one in a `static` per expansion and passes it with the statement's text. Every run
/// of a statement in a loop (a solver's iteration) otherwise looked up its plan by hashing
/// its text, compared the whole kernel and plan to find its [`Shape`], checked the inputs'
/// dimensions against the kernel again, and (element-wise) re-derived which inputs are
/// scalars and its task's name: about 5 k instructions a statement on the issuing thread.
///
/// Sound because everything kept is a function of what is fixed per call site (its text,
/// so its kernel and plan) and of what is compared on every run: a shape is taken only for
/// inputs of the same dimensions, formats and layouts, output dimensions, element types and
/// block kernel (a generic function's call site runs with several), a task name only for
/// the same chunk body.
pub struct Site {
    planned: OnceLock<Arc<(Kernel, Plan)>>,
    elementwise: OnceLock<elementwise::Facts>,
    /// Element-wise task names, by the chunk body's address and value type.
    names: Mutex<Vec<elementwise::Named>>,
    /// The latest [`SHAPES_KEPT`] shapes the statement ran with.
    shapes: Mutex<Vec<Arc<Shape>>>,
}

impl Default for Site {
    fn default() -> Self {
        Site::new()
    }
}

impl Site {
    pub const fn new() -> Site {
        Site {
            planned: OnceLock::new(),
            elementwise: OnceLock::new(),
            names: Mutex::new(Vec::new()),
            shapes: Mutex::new(Vec::new()),
        }
    }

    /// The kernel and plan of the site's statement `text` ([`planned`], once).
    fn planned(
        &self,
        text: &'static str,
        fingerprint: u64,
    ) -> Result<&Arc<(Kernel, Plan)>, PlanRunError> {
        if let Some(p) = self.planned.get() {
            return Ok(p);
        }
        let p = planned(text, fingerprint)?;
        Ok(self.planned.get_or_init(|| p))
    }

    /// The kept shape of a run over `inputs` (after re-packing) with `out_dims`, if any.
    fn shape<V: PlanValue, I: PlanIndex>(
        &self,
        inputs: &[&Stored<V, I>],
        out_dims: &[usize],
        compiled: Option<BlockFn<V, I>>,
    ) -> Option<Arc<Shape>> {
        let compiled_at = compiled.map(|f| f as usize);
        let shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        shapes
            .iter()
            .find(|s| {
                s.compiled == compiled_at
                    && s.value_type == std::any::type_name::<V>()
                    && s.index_type == std::any::type_name::<I>()
                    && s.out_dims == out_dims
                    && s.in_dims.iter().eq(inputs.iter().map(|t| &t.dims))
                    && s.formats.iter().eq(inputs.iter().map(|t| &t.format))
                    && s.layouts.iter().eq(inputs.iter().map(|t| &t.layout))
            })
            .cloned()
    }

    fn keep(&self, shape: Arc<Shape>) {
        let mut shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        keep_latest(&mut shapes, shape, SHAPES_KEPT);
    }
}

/// The kernel and plan of the statement `text`, made on first use and kept for the process
/// (keyed by the text); `fingerprint` ([`super::kernel_fingerprint`] of the kernel the
/// caller's code was generated from) must match the kernel made here.
fn planned(text: &'static str, fingerprint: u64) -> Result<Arc<(Kernel, Plan)>, PlanRunError> {
    // With the kernel's fingerprint, computed once: it formats the whole kernel, and a
    // statement in a loop comes here every iteration.
    type Plans = std::collections::HashMap<&'static str, (Arc<(Kernel, Plan)>, u64)>;
    static PLANS: std::sync::OnceLock<std::sync::Mutex<Plans>> = std::sync::OnceLock::new();
    let (planned, made_from) = {
        let mut plans = PLANS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match plans.get(text) {
            Some((p, f)) => (p.clone(), *f),
            None => {
                let p = Arc::new(super::from_text(text).map_err(PlanRunError::Plan)?);
                let f = super::kernel_fingerprint(&p.0);
                plans.insert(text, (p.clone(), f));
                (p, f)
            }
        }
    };
    if made_from != fingerprint {
        return Err(PlanRunError::Plan(format!(
            "`{text}`: the plan made at run time does not come from the kernel compiled in \
             (tessera-compiler differs between build and run); rebuild the program"
        )));
    }
    Ok(planned)
}

/// What a plan's launches produced: a dense output's store (and for a rank-0 one written by
/// one point, a future of its value: [`Shape::value_result`]), or a sparse output's entries.
enum Output {
    Dense(Store, Option<tessera_runtime::Future>),
    Entries(entries::Entries),
}

/// The dense output tensor over the values of its store (in level order, as a dense tensor
/// holds them: no copy).
fn dense_tensor<V: PlanValue, I: PlanIndex>(
    format: &Format,
    out_dims: &[usize],
    vals: Vec<V>,
) -> Result<Tensor<V, I>, PlanRunError> {
    let format = format.clone();
    let levels = format
        .mode_order()
        .iter()
        .map(|m| Level::Dense {
            size: out_dims[*m],
            offset: 0,
        })
        .collect();
    Ok(Tensor::from_parts(out_dims.to_vec(), format, levels, vals)?)
}

/// Issues the plan's launches over stored inputs (from a call site: `site`, made for this
/// plan and kernel).
fn execute<V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    site: Option<&Site>,
    plan: &Plan,
    kernel: &Kernel,
    inputs: &[&Stored<V, I>],
    out_dims: &[usize],
    compiled: Option<BlockFn<V, I>>,
) -> Result<Output, PlanRunError> {
    // Only generated code has the caller's functions: refuse here, not in every point task.
    if let (None, Some(f)) = (compiled, kernel.user_functions.first()) {
        return Err(InterpError::UserFunction(f.clone()).into());
    }
    let repacked = repack_inputs(rt, kernel, inputs)?;
    let inputs: Vec<&Stored<V, I>> = (inputs.iter().zip(&repacked))
        .map(|(given, re)| re.as_ref().unwrap_or(given))
        .collect();
    let grid = &plan.grid;
    let stores = distinct_views(inputs.iter().map(|t| t.stores.clone()).collect())?;
    // A call site's run over inputs of the shapes of one before: their dimensions were
    // checked then (the same dimensions, formats and kernel agree again).
    let kept = site.and_then(|s| s.shape(&inputs, out_dims, compiled));
    let shape = match kept {
        Some(shape) => shape,
        None => {
            let shapes: Vec<(&Format, &[usize])> =
                inputs.iter().map(|t| (&t.format, &t.dims[..])).collect();
            let dims = interp::checked_dims_of(kernel, &shapes, out_dims)?;
            let out = OutputLayout::new(kernel, out_dims, plan)?;
            let shape = Shape::of(plan, kernel, &inputs, dims, out_dims, out, compiled);
            if let Some(site) = site {
                site.keep(shape.clone());
            }
            shape
        }
    };
    // `runtime`: the id of `rt` (from a store it made), when known.
    let register = |runtime: Option<u64>| -> Result<(), PlanRunError> {
        if runtime.is_some_and(|id| shape.registered.contains(id)) {
            return Ok(());
        }
        let body = Arc::new(Body {
            shape: shape.clone(),
            rebased: RebasedCache::default(),
        });
        match rt.register(&shape.name, move |ctx| body.run::<V, I>(ctx, compiled)) {
            // The same plan over tensors of the same shapes ran on `rt` before: its task (an
            // equal body) is reused, so the runtime sees the statement as one task each time.
            Ok(()) | Err(RuntimeError::DuplicateTask(_)) => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(id) = runtime {
            shape.registered.insert(id);
        }
        Ok(())
    };
    let out = &shape.out;
    let run = Run {
        name: &shape.name,
        plan,
        body: &shape,
        inputs: &stores,
    };
    if out.dense {
        let y = rt.create(V::DTYPE, &out.shape)?;
        register(Some(y.runtime_id()))?;
        // Blocks fold into the output with the reduction: it starts at its identity (a new
        // store holds zeros, the identity of `+` and `or`).
        let fill = kernel.reduce.fill();
        if fill != 0.0 && plan.args[0].privilege != Privilege::Write {
            rt.fill(&y, fill)?;
        }
        let mut value = None;
        for launch in 0..grid.launches() {
            value = launch_task(rt, &run, std::slice::from_ref(&y), launch)?;
        }
        return Ok(Output::Dense(y, value));
    }
    register(None)?;
    // A sparse output stays as its launches' entries until it is read or stored: across
    // ranks each rank then handles only its own (`entries`).
    let mut pieces = Vec::new();
    for launch in 0..grid.launches() {
        let coords = rt.create_unbound(DType::U64);
        let vals = rt.create_unbound(V::DTYPE);
        let outs = [coords.clone(), vals.clone()];
        launch_task(rt, &run, &outs, launch)?;
        pieces.push((coords, vals));
    }
    Ok(Output::Entries(entries::Entries {
        pieces,
        reduce: kernel.reduce,
        dims: out_dims.to_vec(),
        format: kernel.output_tensor().format.clone(),
    }))
}

/// The inputs' stores, each store that an earlier input also holds replaced by a view of its
/// whole extent. An operand given twice (`y(i) += A(i,j) * w(j)` with `w = &y`) is read
/// through two partitions, a tile of the old `y` and the image of `A`'s columns for `w`; the
/// launch's constraints name arguments by their view, so with one view both named the first
/// argument, and `w`'s points got the tile and indexed past it. A view of the whole extent is
/// a view of its own (`ViewKey`), so each occurrence is partitioned as its own operand.
fn distinct_views(mut stores: Vec<Vec<Store>>) -> Result<Vec<Vec<Store>>, RuntimeError> {
    let mut seen = Vec::new();
    for input in &mut stores {
        for s in input.iter_mut() {
            // A rank-0 store has no dimension to view and is never partitioned.
            let extent = s.shape().and_then(|shape| shape.first().copied());
            if let (true, Some(extent)) = (seen.contains(&s.id()), extent) {
                *s = s.slice(0, 0..extent)?;
            }
        }
        seen.extend(input.iter().map(Store::id));
    }
    Ok(stores)
}

/// The inputs the kernel re-packs ([`Kernel::repacks`]: their mode order agrees with no loop
/// order) given in their original format, re-packed once into the format the kernel and its
/// plan were made for, before anything is partitioned; `None` for the others (an input
/// already given in the re-packed format included).
fn repack_inputs<V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    kernel: &Kernel,
    inputs: &[&Stored<V, I>],
) -> Result<Vec<Option<Stored<V, I>>>, PlanRunError> {
    let mut out: Vec<Option<Stored<V, I>>> = inputs.iter().map(|_| None).collect();
    for r in &kernel.repacks {
        let Some(given) = inputs.get(r.slot) else {
            continue; // the input count is checked (and reported) by `execute`
        };
        // Given in the re-packed format (or a wrong one, which `execute` reports): as it is.
        if given.format != r.from {
            continue;
        }
        let t = interp::repack(&given.to_tensor(rt)?, &r.to)?;
        out[r.slot] = Some(Stored::from_tensor(rt, t)?);
    }
    Ok(out)
}

/// The runtime's reduction operator for the statement's. `or` folds as `max`: every block's
/// output under `or` is 0 or 1 (the kernel combines each term with `or`), and on those two
/// values `or` and `max` agree; the output store starts at 0, which `max` keeps.
fn runtime_op(op: crate::ast::ReduceOp) -> ReduceOp {
    match op {
        crate::ast::ReduceOp::Sum => ReduceOp::Sum,
        crate::ast::ReduceOp::Min => ReduceOp::Min,
        crate::ast::ReduceOp::Max | crate::ast::ReduceOp::Or => ReduceOp::Max,
    }
}

/// The runtime's statistics as `--stats` prints them after a plan ran.
pub fn stats_line(rt: &Runtime) -> String {
    let s = rt.stats();
    format!(
        "runtime: {} tasks issued, {} point tasks run, partitions {} created / {} reused, \
         {} solutions replayed, analysis {:.1} µs per task",
        s.tasks_issued,
        s.points_run,
        s.partitions_created,
        s.partitions_reused,
        s.solutions_replayed,
        s.analysis_us_per_task()
    )
}

/// The task's name: the statement, and a hash of everything its registered body depends on
/// (the plan, the tensors' shapes and formats, the element types and the block kernel). A
/// statement run again over tensors of the same shapes is then the same task, which the
/// runtime's memos (and tracing) can recognise; tasks are never unregistered, so one is
/// registered per statement and shape, not per run.
fn task_name<V: PlanValue, I: PlanIndex>(
    plan: &Plan,
    body: &Shape,
    compiled: Option<BlockFn<V, I>>,
) -> String {
    let formats: Vec<String> = body.formats.iter().map(|f| f.to_string()).collect();
    let key = format!(
        "{:016x}|{:?}|{:?}|{:?}|{formats:?}|{}|{}|{:?}",
        plan_hash(plan),
        body.dims,
        body.out_dims,
        body.in_dims,
        std::any::type_name::<V>(),
        std::any::type_name::<I>(),
        compiled.map(|f| f as usize),
    );
    format!("plan {} #{:016x}", plan.source, super::fnv(key.as_bytes()))
}

/// A hash of everything in `plan` (its `Debug` text). Formatting a whole plan costs about
/// 100 k instructions, so it is done once per [`Shape`], which is kept across runs.
fn plan_hash(plan: &Plan) -> u64 {
    super::fnv(format!("{plan:?}").as_bytes())
}

/// One run of a plan: what each of its launches needs.
struct Run<'a> {
    name: &'a str,
    plan: &'a Plan,
    body: &'a Shape,
    inputs: &'a [Vec<Store>],
}

/// Issues one launch of the block task: outputs first, then every input's stores, with the
/// plan's constraints. A rank-0 output written by one point is also returned as a future of
/// its value (on one rank: [`Shape::value_result`]).
fn launch_task(
    rt: &Runtime,
    run: &Run,
    outs: &[Store],
    launch: usize,
) -> Result<Option<tessera_runtime::Future>, PlanRunError> {
    let (plan, body, inputs) = (run.plan, run.body, run.inputs);
    let grid = &plan.grid;
    let views = launch_views(body, inputs, launch)?;
    let parts = body.launch_parts();
    let mut t = rt
        .task(run.name)
        .scalar(launch as u64)
        .launch_domain(&parts.domain);
    // The ids of the inputs' `pos` stores, in input and level order: the key of each point's
    // rebased pieces (`RebasedCache`).
    for (layout, stores) in body.layouts.iter().zip(&views) {
        for &(pos, _) in layout.levels.iter().flatten() {
            t = t.scalar(stores[pos].id());
        }
    }
    if let Some(dims) = &parts.shard_dims {
        // `map(...)`: across ranks these launch dimensions pick each point's rank.
        t = t.shard_by(dims);
    }
    let out_arg = &plan.args[0];
    for s in outs {
        t = match out_arg.privilege {
            // A compiled kernel that accumulates into its tile in place needs it zeroed.
            Privilege::Write if body.writes_all => t.write_all(s),
            Privilege::Write => t.write(s),
            Privilege::ReadWrite => t.read_write(s),
            Privilege::Reduce => t.reduce(s, runtime_op(plan.reduce)),
            Privilege::Read | Privilege::WriteUnbound | Privilege::ReduceUnbound => {
                t.write_unbound(s)
            }
        };
    }
    if body.out.dense {
        t = match &parts.out_cuts {
            Some(cuts) => t.tile(&outs[0], cuts),
            None => t.broadcast(&outs[0], &(0..body.out.shape.len()).collect::<Vec<_>>()),
        };
    }
    // The store (or this launch's view of it) a plan argument names.
    let find = |tensor: &str, kind: StoreKind| -> Option<&Store> {
        let slot = input_slot(&body.kernel, tensor);
        let idx = body.layouts[slot].index_of(kind)?;
        Some(&views[slot][idx])
    };
    for stores in &views {
        for s in stores {
            t = t.read(s);
        }
    }
    for (a, arg) in plan.args.iter().enumerate().skip(outs.len()) {
        let tensor = &arg.store.tensor;
        let slot = input_slot(&body.kernel, tensor);
        let store = |kind: StoreKind| find(tensor, kind).expect("the plan's stores were uploaded");
        t = match &arg.partition {
            // On one process a tensor cut into blocks is read whole by every point; the block
            // kernel's bounded loops visit only its block.
            Partition::Blocks { .. } => views[slot].iter().fold(t, |t, s| t.broadcast(s, &[0])),
            Partition::Broadcast => t.broadcast(store(arg.store.kind), &[0]),
            // Tiled by a sequential variable: this launch reads its range, whole.
            Partition::Tiled { dims } if sequential(grid, dims[0]) => {
                t.broadcast(store(arg.store.kind), &[0])
            }
            Partition::Tiled { .. } => {
                let cut = parts.in_cuts[a]
                    .as_ref()
                    .expect("made for every tiled input");
                t.tile(store(arg.store.kind), std::slice::from_ref(cut))
            }
            Partition::Aligned(_) => t.align(&outs[0], store(arg.store.kind)),
            Partition::Image(src) if whole_on_one_rank(rt, src.kind, arg.store.kind) => {
                t.broadcast(store(arg.store.kind), &[0])
            }
            Partition::Image(src) => {
                let from = find(&src.tensor, src.kind).expect("image sources were uploaded");
                t.image(from, store(arg.store.kind))
            }
            Partition::Pieces => t,
        };
    }
    if body.value_result && rt.ranks() == 1 {
        // The point sets its one value as the task's result (`Body::run`); `Sum` over one
        // point is that value itself. An element-wise statement taking this tensor as a
        // scalar then takes this future, not one more task reading the store.
        return Ok(Some(t.submit_reduce(ReduceOp::Sum)?));
    }
    t.submit()?;
    Ok(None)
}

/// Whether an image of `source` into `target` is read whole instead: a dense vector imaged
/// through a `crd` store (Fig. 7.2's `x`) on a runtime of one rank. There the image moves no
/// data (a point's view is a window of the one buffer), and read whole the vector's view
/// starts at coordinate 0, so the block kernel runs its copy without `x`'s offset: the image
/// of a row block starts at its least column, almost never 0, and that copy subtracts it
/// once per nonzero (5 of the bench's 8 blocks did). The cost is coarser dependences on the
/// vector (each point waits for every writer of it, not only of its image), and, when a task
/// writing the vector failed, a point sees every poisoned cell of it, not only those its
/// image reaches: on one rank such a statement fails where across ranks it computes from the
/// good cells it reads (stop 59's hunt, `poisoned_tiles_outside_an_image_agree_across_ranks`
/// on branch `hunt-e`). Across ranks the image stays: it is what a rank receives.
fn whole_on_one_rank(rt: &Runtime, source: StoreKind, target: StoreKind) -> bool {
    rt.ranks() == 1 && matches!((source, target), (StoreKind::Crd(_), StoreKind::Vals))
}

/// The input slot of the kernel's input `tensor` (with `+=`, the output's old value is an
/// input of the output's name).
fn input_slot(kernel: &Kernel, tensor: &str) -> usize {
    kernel
        .tensors
        .iter()
        .find_map(|d| d.input_slot.filter(|_| d.name == tensor))
        .expect("plan arguments name the kernel's inputs")
}

fn sequential(grid: &Grid, g: Option<usize>) -> bool {
    g.is_some_and(|g| grid.vars[g].role == super::Role::Sequential)
}

/// The input stores one launch reads: the first store of an input tiled by a sequential
/// block variable is replaced by its view of this launch's range (images then follow from
/// the view).
fn launch_views(
    body: &Shape,
    inputs: &[Vec<Store>],
    launch: usize,
) -> Result<Vec<Vec<Store>>, RuntimeError> {
    let mut views: Vec<Vec<Store>> = inputs.to_vec();
    for (slot, layout) in body.layouts.iter().enumerate() {
        if let Some(r) = body.launch_range(slot, launch) {
            let first = layout.first();
            views[slot][first] = inputs[slot][first].slice(0, r)?;
        }
    }
    Ok(views)
}

/// The grid variable tiling each input's first store, when it is a sequential one.
fn sequential_tiles(plan: &Plan, kernel: &Kernel, slots: usize) -> Vec<Option<usize>> {
    let mut out = vec![None; slots];
    for arg in &plan.args {
        if let (Partition::Tiled { dims }, Privilege::Read) = (&arg.partition, arg.privilege) {
            if sequential(&plan.grid, dims[0]) {
                out[input_slot(kernel, &arg.store.tensor)] = dims[0];
            }
        }
    }
    out
}

/// The runtime cut of a store dimension that follows grid variable `g` over a dimension of
/// extent `dim`, each coordinate standing for `scale` cells (a flattened dense prefix).
fn grid_cut(grid: &Grid, g: usize, dim: usize, scale: usize) -> Cut {
    let bv = &grid.vars[g];
    let launch_dim = grid
        .domain_vars()
        .iter()
        .position(|&d| d == g)
        .expect("tiled variables are launch dimensions");
    let points = (1..bv.count())
        .map(|b| bv.range(b, dim).start * scale)
        .collect();
    Cut::At(launch_dim, points)
}

/// How a dense output is stored: its levels in groups, each group one store dimension. A
/// group starts at level 0 and at every tiled level and takes in the untiled levels after
/// it, so that a tile of its first level is a contiguous range of the merged dimension.
#[derive(Clone, Debug)]
struct OutputLayout {
    dense: bool,
    shape: Vec<usize>,
    /// Per store dimension: its first level and the cells per coordinate of that level.
    groups: Vec<(usize, usize)>,
}

impl OutputLayout {
    fn new(kernel: &Kernel, out_dims: &[usize], plan: &Plan) -> Result<Self, PlanRunError> {
        if kernel.output_kind == OutputKind::Sparse {
            return Ok(OutputLayout {
                dense: false,
                shape: vec![],
                groups: vec![],
            });
        }
        let order = kernel.output_tensor().format.mode_order();
        let sizes: Vec<usize> = order.iter().map(|&m| out_dims[m]).collect();
        if sizes.is_empty() {
            return Ok(OutputLayout {
                dense: true,
                shape: vec![1],
                groups: vec![(0, 1)],
            });
        }
        let tiled = |l: usize| match &plan.args[0].partition {
            Partition::Tiled { dims } => dims[l].is_some(),
            _ => false,
        };
        let starts: Vec<usize> = (0..sizes.len()).filter(|&l| l == 0 || tiled(l)).collect();
        if starts.len() > MAX_DIMS {
            return Err(PlanRunError::OutputRank {
                rank: sizes.len(),
                level: starts[MAX_DIMS],
            });
        }
        let mut shape = Vec::new();
        let mut groups = Vec::new();
        // Refused here too (plans run without `bind` from the command line): a product
        // that overflows would panic, or in release wrap to a store of the wrong size.
        let too_large = || tessera_kernel_rt::bind::BindError::TooLarge {
            tensor: kernel.output_tensor().name.clone(),
            dims: out_dims.to_vec(),
        };
        for (n, &l) in starts.iter().enumerate() {
            let end = starts.get(n + 1).copied().unwrap_or(sizes.len());
            let product = |levels: &[usize]| -> Option<usize> {
                levels.iter().try_fold(1usize, |p, &d| p.checked_mul(d))
            };
            let inner = product(&sizes[l + 1..end]).ok_or_else(too_large)?;
            shape.push(sizes[l].checked_mul(inner).ok_or_else(too_large)?);
            groups.push((l, inner));
        }
        Ok(OutputLayout {
            dense: true,
            shape,
            groups,
        })
    }

    /// The output store's cuts: a group whose first level a parallel grid variable tiles is
    /// cut at the grid's ranges, scaled by the group's inner cells.
    fn cuts(&self, tiled: &[Option<usize>], grid: &Grid, dims: &[usize]) -> Vec<Cut> {
        self.groups
            .iter()
            .map(|&(l, inner)| match tiled.get(l).copied().flatten() {
                Some(g) => grid_cut(grid, g, dims[grid.vars[g].var_id], inner),
                None => Cut::Whole,
            })
            .collect()
    }
}

/// Where an input's stores are, in the order `upload` made them.
#[derive(Clone, Debug, PartialEq)]
struct InputLayout {
    /// Per level: for compressed levels, the indices of its `pos` and `crd` stores.
    levels: Vec<Option<(usize, usize)>>,
    vals: usize,
    /// Leading dense levels.
    prefix: usize,
    /// Cells per coordinate of the first level in the store below the dense prefix.
    prefix_inner: usize,
}

impl InputLayout {
    fn index_of(&self, kind: StoreKind) -> Option<usize> {
        match kind {
            StoreKind::Vals => Some(self.vals),
            StoreKind::Pos(l) => self.levels.get(l).copied().flatten().map(|p| p.0),
            StoreKind::Crd(l) => self.levels.get(l).copied().flatten().map(|p| p.1),
            StoreKind::Blocks | StoreKind::Coords => None,
        }
    }

    /// The store that holds the dense prefix's positions (`pos` of the first compressed
    /// level, or `vals`).
    fn first(&self) -> usize {
        self.levels
            .iter()
            .flatten()
            .next()
            .map_or(self.vals, |p| p.0)
    }
}

/// A block — a tensor with a dense level holding only the window `offset..offset+size` of
/// its mode, as a `.tcs` block file gives — as the whole tensor it stands for (zeros outside
/// the window); `None` for a whole tensor, which is stored as it is. A plan's stores index
/// every dense level from coordinate 0 over its whole mode (tiles, images and windows are cut
/// by coordinate), so a block stored as it is ran with its window shifted to coordinate 0: a
/// wrong answer, or a slice past the store.
fn whole_of_block<V: Value, I: Index>(
    t: &Tensor<V, I>,
) -> Result<Option<Tensor<V, I>>, tessera_formats::TensorError> {
    let order = t.format().mode_order();
    let windowed = t.levels().iter().zip(order).any(|(l, &m)| {
        matches!(l, Level::Dense { size, offset } if *offset != 0 || *size != t.dims()[m])
    });
    if !windowed {
        return Ok(None);
    }
    Tensor::from_entries(t.dims().to_vec(), t.format().clone(), t.entries()).map(Some)
}

/// `t`, stored in `format`'s unique form (see [`Stored::from_tensor`]), in `format`.
fn in_format<V: Value, I: Index>(
    t: Tensor<V, I>,
    format: &Format,
) -> Result<Tensor<V, I>, tessera_formats::TensorError> {
    if t.format() == format {
        return Ok(t);
    }
    t.view().relevel(format)
}

/// Puts a tensor's arrays into 1-d stores: per compressed level `pos` (ranges) and `crd`,
/// then `vals`. Owned arrays move in; borrowed ones are copied, except `pos`, which only
/// ever is read (into ranges).
type LevelArrays<'a, I> = Option<(Cow<'a, [I]>, Cow<'a, [I]>)>;

fn upload<'a, V: PlanValue, I: PlanIndex>(
    rt: &Runtime,
    (prefix, prefix_inner): (usize, usize),
    levels: impl Iterator<Item = LevelArrays<'a, I>>,
    vals: Cow<'_, [V]>,
) -> Result<(Vec<Store>, InputLayout), RuntimeError> {
    let mut stores = Vec::new();
    let mut at = Vec::new();
    for l in levels {
        let Some((pos, crd)) = l else {
            at.push(None);
            continue;
        };
        at.push(Some((stores.len(), stores.len() + 1)));
        // Ranges built and found monotone in one pass: images need no scan of `pos`.
        stores.push(rt.from_offsets(pos.iter().map(|p| p.to_usize() as u64))?);
        let crd = crd.into_owned();
        stores.push(rt.from_vec(&[crd.len()], crd)?);
    }
    let vals_at = stores.len();
    let vals = vals.into_owned();
    stores.push(rt.from_vec(&[vals.len()], vals)?);
    Ok((
        stores,
        InputLayout {
            levels: at,
            vals: vals_at,
            prefix,
            prefix_inner,
        },
    ))
}

/// The dense prefix of a tensor's levels: (how many, product of their sizes below the first).
fn prefix_layout<V: Value, I: Index>(t: &Tensor<V, I>) -> (usize, usize) {
    let kinds = t.format().levels();
    let prefix = kinds.iter().take_while(|l| **l == LevelType::Dense).count();
    let prefix_inner = t.levels()[1.min(prefix)..prefix]
        .iter()
        .map(|l| match l {
            Level::Dense { size, .. } => *size,
            Level::Compressed { .. } | Level::Singleton { .. } => 1,
        })
        .product();
    (prefix, prefix_inner)
}

/// What every run of one plan over inputs of the same shapes, formats and element types
/// shares: the task's name and all its points need but their rebased pieces. Made on the
/// first such run and kept for the process (a few per statement), so that a statement run
/// again (a solver's SpMV) neither clones its kernel nor formats its name: that per-run work
/// (about 30 k instructions) ran before any point, while the workers idled.
struct Shape {
    /// The task's name ([`task_name`]).
    name: String,
    /// What the shape was made for, compared whole on every lookup (no hash decides a hit).
    plan: Plan,
    value_type: &'static str,
    index_type: &'static str,
    /// The block kernel's address (`None`: the interpreter).
    compiled: Option<usize>,
    kernel: Kernel,
    grid: Grid,
    dims: Vec<usize>,
    out_dims: Vec<usize>,
    formats: Vec<Format>,
    in_dims: Vec<Vec<usize>>,
    layouts: Vec<InputLayout>,
    /// Per input, the sequential grid variable that tiles its first store, if any.
    seq_tiled: Vec<Option<usize>>,
    /// Per input, the format its stores hold (COO inputs in their unique form).
    stored_formats: Vec<Format>,
    out: OutputLayout,
    /// The output's privilege in the plan.
    privilege: Privilege,
    /// What every launch passes the runtime besides its stores, made on first use.
    launch: OnceLock<LaunchParts>,
    /// The runtimes the shape's task is registered on (its body: one per runtime).
    registered: RegisteredOn,
    /// A rank-0 dense output written (not folded) by the one point of one launch: the point
    /// also sets the value it writes as the task's result, which one rank launches with
    /// `submit_reduce` (`launch_task`), so the statement's `Stored` holds a future of its
    /// value from the start (CG's step sizes `alpha = rr / pq`, then scalars of element-wise
    /// statements, needed one `value_future` task each).
    value_result: bool,
    /// A written dense output whose every point writes every cell of its tile: launched
    /// with `write_all`, so a recycled buffer is not zeroed first. The interpreter's tile
    /// and a compiled kernel's own buffer are copied whole into the tile (`write_tile`); a
    /// kernel writing the tile in place must assign it whole ([`Kernel::assigns_every_cell`]).
    writes_all: bool,
}

/// The latest few runtimes (by id, [`Store::runtime_id`]: never reused in a process) a task
/// is known to be registered on, so that a statement run again on one neither builds its
/// body anew nor takes the registry's write lock to be told it is there (~1.5 k
/// instructions a run). A runtime not listed (never seen, or pushed out) is asked again,
/// which is only slower.
#[derive(Default)]
struct RegisteredOn(Mutex<Vec<u64>>);

/// Runtimes a [`RegisteredOn`] lists.
const REGISTERED_KEPT: usize = 4;

impl RegisteredOn {
    fn contains(&self, runtime: u64) -> bool {
        let ids = self.0.lock().unwrap_or_else(|e| e.into_inner());
        ids.contains(&runtime)
    }

    fn insert(&self, runtime: u64) {
        let mut ids = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !ids.contains(&runtime) {
            keep_latest(&mut ids, runtime, REGISTERED_KEPT);
        }
    }
}

/// Appends `item` to `list`, dropping the oldest first when `list` holds `most` already: the
/// bounded caches of this module (shapes per statement and per call site, runtimes a task
/// is registered on) keep their latest entries.
fn keep_latest<T>(list: &mut Vec<T>, item: T, most: usize) {
    if list.len() >= most {
        list.remove(0);
    }
    list.push(item);
}

/// See [`Shape::launch_parts`].
struct LaunchParts {
    domain: Vec<usize>,
    shard_dims: Option<Vec<usize>>,
    /// A dense output tiled by the grid: its cuts (else it is broadcast).
    out_cuts: Option<Vec<Cut>>,
    /// Per plan argument: the cut of an input tiled by a parallel grid variable.
    in_cuts: Vec<Option<Cut>>,
}

/// The most shapes kept per statement: a statement run over ever new shapes (a property
/// test) keeps its latest few.
const SHAPES_KEPT: usize = 8;

impl Shape {
    /// The shape of a run of `plan` (made from `kernel`) over `inputs`, whose index variables'
    /// extents are `dims`: the one kept from an equal run before, or made now and kept.
    fn of<V: PlanValue, I: PlanIndex>(
        plan: &Plan,
        kernel: &Kernel,
        inputs: &[&Stored<V, I>],
        dims: Vec<usize>,
        out_dims: &[usize],
        out: OutputLayout,
        compiled: Option<BlockFn<V, I>>,
    ) -> Arc<Shape> {
        type Kept = std::collections::HashMap<String, Vec<Arc<Shape>>>;
        static KEPT: std::sync::OnceLock<std::sync::Mutex<Kept>> = std::sync::OnceLock::new();
        let kept = KEPT.get_or_init(Default::default);
        let lock = || kept.lock().unwrap_or_else(|e| e.into_inner());
        let compiled_at = compiled.map(|f| f as usize);
        let same = |s: &Shape| {
            s.compiled == compiled_at
                && s.value_type == std::any::type_name::<V>()
                && s.index_type == std::any::type_name::<I>()
                && s.dims == dims
                && s.out_dims == out_dims
                && s.in_dims.iter().eq(inputs.iter().map(|t| &t.dims))
                && s.formats.iter().eq(inputs.iter().map(|t| &t.format))
                && s.plan == *plan
                && s.kernel == *kernel
        };
        if let Some(s) = lock()
            .get(&plan.source)
            .and_then(|v| v.iter().find(|s| same(s)))
        {
            return s.clone();
        }
        let writes_all = plan.args[0].privilege == Privilege::Write
            && out.dense
            && (compiled.is_none() || kernel.assigns_every_cell());
        let mut shape = Shape {
            name: String::new(),
            plan: plan.clone(),
            value_type: std::any::type_name::<V>(),
            index_type: std::any::type_name::<I>(),
            compiled: compiled_at,
            kernel: kernel.clone(),
            grid: plan.grid.clone(),
            dims,
            out_dims: out_dims.to_vec(),
            formats: inputs.iter().map(|t| t.format.clone()).collect(),
            in_dims: inputs.iter().map(|t| t.dims.clone()).collect(),
            seq_tiled: sequential_tiles(plan, kernel, inputs.len()),
            stored_formats: inputs.iter().map(|t| t.format.unique()).collect(),
            layouts: inputs.iter().map(|t| t.layout.clone()).collect(),
            out,
            privilege: plan.args[0].privilege,
            launch: OnceLock::new(),
            registered: RegisteredOn::default(),
            value_result: out_dims.is_empty()
                && plan.args[0].privilege == Privilege::Write
                && plan.grid.launches() == 1
                && plan.grid.domain().iter().product::<usize>() == 1,
            writes_all,
        };
        shape.name = task_name(plan, &shape, compiled);
        let shape = Arc::new(shape);
        let mut kept = lock();
        let list = kept.entry(plan.source.clone()).or_default();
        keep_latest(list, shape.clone(), SHAPES_KEPT);
        shape
    }

    /// The launch domain, output cuts and input cuts of every launch of the shape's plan:
    /// functions of the plan and the dimensions alone, made once (they cost ~1 k
    /// instructions a launch, on the issuing thread).
    fn launch_parts(&self) -> &LaunchParts {
        self.launch.get_or_init(|| {
            let (plan, grid) = (&self.plan, &self.grid);
            let out_cuts = match &plan.args[0].partition {
                Partition::Tiled { dims } if self.out.dense => {
                    Some(self.out.cuts(dims, grid, &self.dims))
                }
                _ => None,
            };
            // Output arguments (the first, or two) are tiled above, never here.
            let in_cuts = (plan.args.iter().enumerate())
                .map(|(a, arg)| match &arg.partition {
                    Partition::Tiled { dims } if a > 0 && !sequential(grid, dims[0]) => {
                        // Inputs are tiled by their first level (`launch_task` relies on it).
                        let g = dims[0]?;
                        let slot = input_slot(&self.kernel, &arg.store.tensor);
                        let scale = self.layouts[slot].prefix_inner;
                        Some(grid_cut(grid, g, self.dims[grid.vars[g].var_id], scale))
                    }
                    _ => None,
                })
                .collect();
            LaunchParts {
                domain: grid.domain(),
                shard_dims: plan.shard_dims(),
                out_cuts,
                in_cuts,
            }
        })
    }

    /// The cells of input `slot`'s first store that launch `launch` reads, when a sequential
    /// block variable tiles it.
    fn launch_range(&self, slot: usize, launch: usize) -> Option<std::ops::Range<usize>> {
        let g = self.seq_tiled[slot]?;
        let bv = &self.grid.vars[g];
        let r = bv.range(self.grid.index(launch, 0)[g], self.dims[bv.var_id]);
        let scale = self.layouts[slot].prefix_inner;
        Some(r.start * scale..r.end * scale)
    }
}

/// What every point of a plan's task registered on one runtime shares: the run's shape and
/// the points' rebased `pos` pieces (per runtime: they are keyed by its store ids).
struct Body {
    shape: Arc<Shape>,
    /// Each point's rebased `pos` pieces, kept across runs (see [`RebasedCache`]).
    rebased: RebasedCache,
}

impl std::ops::Deref for Body {
    type Target = Shape;

    fn deref(&self) -> &Shape {
        &self.shape
    }
}

impl Body {
    fn run<V: PlanValue, I: PlanIndex>(&self, ctx: &TaskContext, compiled: Option<BlockFn<V, I>>) {
        let launch = ctx.scalar(0).as_u64() as usize;
        let point = ctx.linear_point();
        let idx = self.grid.index(launch, point);
        let block = self.grid.block(&self.kernel, &self.dims, &idx);
        let n_out = if self.out.dense { 1 } else { 2 };
        let mut arg = n_out;
        // Scalar 0 is the launch; then the ids of the inputs' `pos` stores (`launch_task`).
        let mut pos_ids = (1..).map(|i| ctx.scalar(i).as_u64());
        let mut windows: Vec<Window<V, I>> = Vec::with_capacity(self.layouts.len());
        for (slot, layout) in self.layouts.iter().enumerate() {
            let origin = self.launch_range(slot, launch).map_or(0, |r| r.start);
            let at = Piece {
                slot,
                launch,
                point,
            };
            windows.push(self.window(ctx, at, arg, origin, &mut pos_ids));
            arg += layout.vals + 1;
        }
        let views: Vec<TensorView<V, I>> = windows
            .iter()
            .enumerate()
            .map(|(slot, w)| w.view(&self.in_dims[slot], &self.stored_formats[slot]))
            .collect();
        // COO inputs are stored in their unique form: re-levelled here (a copy, COO only).
        let relevelled: Vec<Option<Tensor<V, I>>> = views
            .iter()
            .zip(&self.formats)
            .map(|(v, f)| {
                (v.format() != f).then(|| {
                    v.relevel(f)
                        .unwrap_or_else(|e| panic!("block of a COO input: {e}"))
                })
            })
            .collect();
        let views: Vec<TensorView<V, I>> = views
            .into_iter()
            .zip(&relevelled)
            .map(|(v, r)| r.as_ref().map_or(v, |t| t.view()))
            .collect();
        let result = match compiled {
            // A written dense tile that is exactly the block's values: the kernel writes it
            // in place (no buffer of its own, no copy).
            Some(f) if self.in_place(ctx, &block) => {
                let mut tile = ctx.write::<V>(0);
                let none = f(
                    &views,
                    &self.out_dims,
                    &block.bounds,
                    &block.first,
                    Some(tile.as_mut_slice()),
                );
                if self.value_result {
                    ctx.set_result(scalar_of(tile.as_mut_slice()[0]));
                }
                debug_assert!(
                    none.is_none(),
                    "a block kernel given its tile returns nothing"
                );
                return;
            }
            Some(f) => f(&views, &self.out_dims, &block.bounds, &block.first, None)
                .expect("a block kernel given no tile returns its output"),
            None => {
                // The interpreter takes tensors: the views copied (`--interpret` and the
                // property tests only).
                let owned: Vec<Tensor<V, I>> = views.iter().map(owned).collect();
                let refs: Vec<&Tensor<V, I>> = owned.iter().collect();
                interp::run_block(&self.kernel, &refs, &self.out_dims, &block)
                    .unwrap_or_else(|e| panic!("block {idx:?}: {e}"))
                    .0
            }
        };
        if self.out.dense {
            self.write_tile(ctx, &result);
            if self.value_result {
                // Rank 0: the one value, which `write_tile` wrote.
                ctx.set_result(scalar_of(result.vals()[0]));
            }
        } else {
            let mut coords = Vec::new();
            let mut vals = Vec::new();
            for (c, v) in result.entries() {
                coords.extend(c.iter().map(|&c| c as u64));
                vals.push(v);
            }
            ctx.emit(0, coords);
            ctx.emit(1, vals);
        }
    }

    /// The input in slot `slot` as this point's windows of the sub-stores of arguments
    /// `first_arg..` (no copy of `crd` or `vals`): dense levels of the prefix with the offset
    /// of the first store's range (its view starts at cell `origin`), `pos` rebased to the
    /// start of its `crd` sub-range (the one array made here, one entry per parent in the
    /// block, and kept for the next run: [`RebasedCache`]). `pos_ids` yields the ids of the
    /// input's `pos` stores, one per compressed level.
    fn window<'a, V: PlanValue, I: PlanIndex>(
        &self,
        ctx: &TaskContext<'a>,
        at: Piece,
        first_arg: usize,
        origin: usize,
        pos_ids: &mut impl Iterator<Item = u64>,
    ) -> Window<'a, V, I> {
        let slot = at.slot;
        let layout = &self.layouts[slot];
        let dims = &self.in_dims[slot];
        let first = ctx.rect(first_arg + layout.first());
        let (lo, hi) = (origin + first.lo()[0], origin + first.hi()[0]);
        let mut levels = Vec::with_capacity(layout.levels.len());
        for (l, &m) in self.formats[slot].mode_order().iter().enumerate() {
            if l < layout.prefix {
                let (size, offset) = match (l, layout.prefix_inner) {
                    // A prefix with no cells (an inner extent of 0) holds nothing to offset.
                    (0, 0) => (dims[m], 0),
                    (0, inner) => ((hi - lo) / inner, lo / inner),
                    _ => (dims[m], 0),
                };
                levels.push(WindowLevel::Dense { size, offset });
                continue;
            }
            levels.push(match layout.levels[l] {
                None => WindowLevel::Dense {
                    size: dims[m],
                    offset: 0,
                },
                Some((p, c)) => {
                    let crd = ctx.read::<I>(first_arg + c);
                    let pos = ctx.read::<PosRange>(first_arg + p);
                    let id = pos_ids
                        .next()
                        .expect("launch_task passes every pos store's id");
                    let key = RebasedKey {
                        store: id,
                        pos: pos.range(),
                        crd: crd.range(),
                    };
                    WindowLevel::Compressed {
                        pos: self
                            .rebased
                            .get_or_make(at, l, key, || rebased(pos.as_slice(), &crd)),
                        crd,
                    }
                }
            });
        }
        Window {
            levels,
            vals: ctx.read::<V>(first_arg + layout.vals),
        }
    }

    /// The flat index in the output store of a cell (store coordinates).
    fn flat(&self, p: &[usize]) -> usize {
        let shape = &self.out.shape;
        p.iter().zip(shape).fold(0, |acc, (c, n)| acc * n + c)
    }

    /// Whether this point's tile of the output is written (not added to or folded) and is
    /// one contiguous run of exactly the cells a compiled block kernel's dense output holds
    /// (its first level's block range, whole below it): then the kernel writes the tile. A
    /// written output is a new store (zeros: `execute` fills it only for other privileges)
    /// whose tiles each point writes once, so the tile holds zeros, as [`BlockFn`] asks,
    /// unless it is launched with `write_all` (`Shape::writes_all`: the kernel assigns the
    /// whole tile, whatever it holds).
    fn in_place(&self, ctx: &TaskContext, block: &crate::ir::Block) -> bool {
        if !self.out.dense || self.privilege != Privilege::Write {
            return false;
        }
        let rect = ctx.rect(0);
        let whole_rows = (1..rect.dim()).all(|d| rect.extent(d) == self.out.shape[d]);
        if !whole_rows || rect.is_empty() {
            return false;
        }
        // The kernel's output: the block's range of its first level's variable (clipped as
        // the kernel clips it), times the cells below one coordinate of that level.
        let order = self.kernel.output_tensor().format.mode_order();
        let row: usize = order.iter().skip(1).map(|&m| self.out_dims[m]).product();
        let access = &self.kernel.accesses[self.kernel.output_access];
        let (lo, hi) = match access.level_vars.first() {
            Some(&v) => {
                let hi = block.bounds[v].end.min(self.dims[v]);
                (block.bounds[v].start.min(hi), hi)
            }
            None => (0, 1),
        };
        self.flat(rect.lo()) == lo * row && rect.volume() == (hi - lo) * row
    }

    /// Writes (or adds, or folds) the block's output tile into the output store.
    fn write_tile<V: PlanValue, I: PlanIndex>(&self, ctx: &TaskContext, result: &Tensor<V, I>) {
        let vals = result.vals();
        let shape = &self.out.shape;
        let rect = ctx.rect(0);
        // A compiled block kernel's output holds only its rows of the first level (`offset`
        // rows before it); the interpreter's holds them all (offset 0).
        let skip = match result.levels().first() {
            Some(Level::Dense { size, offset }) if *size > 0 => offset * (vals.len() / size),
            _ => 0,
        };
        let flat = |p: &[usize]| self.flat(p) - skip;
        // A tile of whole rows (the usual row split, or every row) is one contiguous run of
        // the block's values: written, added or folded as slices, not cell by cell.
        let whole_rows = (1..rect.dim()).all(|d| rect.extent(d) == shape[d]);
        let run = (whole_rows && !rect.is_empty()).then(|| {
            let start = flat(rect.lo());
            &vals[start..start + rect.volume()]
        });
        // Blocks that share cells fold with the statement's reduction (`+` unless `min`, ...);
        // a reduction buffer starts at the identity of the runtime's operator, so a tile is
        // folded into it with that operator's meaning (`or` as `max`, see `runtime_op`).
        let op = self.kernel.reduce;
        let add = |dst: &mut [V], src: &[V]| interp::combine_into(op, dst, src);
        let reduce_op = match op {
            crate::ast::ReduceOp::Or => crate::ast::ReduceOp::Max,
            other => other,
        };
        // What the plan's output privilege says to do with the block's tile. (An empty tile
        // has no cells.)
        match (self.privilege, run) {
            (Privilege::Reduce, Some(src)) => {
                interp::combine_into(reduce_op, ctx.reduce::<V>(0).as_mut_slice(), src)
            }
            (Privilege::Reduce, None) => {
                let mut r = ctx.reduce::<V>(0);
                for_each_cell(&rect, |p| r.reduce(p, vals[flat(p)]));
            }
            (Privilege::ReadWrite, Some(src)) => add(ctx.write::<V>(0).as_mut_slice(), src),
            (Privilege::ReadWrite, None) => {
                let mut w = ctx.write::<V>(0);
                for_each_cell(&rect, |p| {
                    let v = interp::combine(op, w.get(p), vals[flat(p)]);
                    w.set(p, v)
                });
            }
            (_, Some(src)) => ctx.write::<V>(0).as_mut_slice().copy_from_slice(src),
            (_, None) => {
                let mut w = ctx.write::<V>(0);
                for_each_cell(&rect, |p| w.set(p, vals[flat(p)]));
            }
        }
    }
}

/// One input as a point sees it: its windows of the input's stores, held (and so borrowed)
/// for the block kernel's call.
struct Window<'a, V, I> {
    levels: Vec<WindowLevel<'a, I>>,
    vals: ReadView<'a, V>,
}

// A few per point (one per level of each input): not worth boxing the larger variant.
#[allow(clippy::large_enum_variant)]
enum WindowLevel<'a, I> {
    Dense {
        size: usize,
        offset: usize,
    },
    /// `pos` rebased to the window of `crd`.
    Compressed {
        pos: Arc<[I]>,
        crd: ReadView<'a, I>,
    },
}

impl<V: PlanValue, I: PlanIndex> Window<'_, V, I> {
    /// The window as a tensor view in `format` (the stored, unique form).
    fn view<'s>(&'s self, dims: &'s [usize], format: &'s Format) -> TensorView<'s, V, I> {
        let levels = self
            .levels
            .iter()
            .map(|l| match l {
                WindowLevel::Dense { size, offset } => LevelView::dense(*size, *offset),
                WindowLevel::Compressed { pos, crd } => LevelView::Compressed {
                    pos,
                    crd: crd.as_slice(),
                },
            })
            .collect();
        // Valid by construction: windows of a validated tensor's arrays, cut where its `pos`
        // says (the runtime's images), with `pos` rebased to the window. No pass over them.
        TensorView::new_unchecked(dims, format, levels, self.vals.as_slice())
    }
}

/// Which point's piece of which input: where a rebased `pos` is kept between runs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Piece {
    slot: usize,
    launch: usize,
    point: usize,
}

/// What a rebased `pos` piece is made from: the `pos` store (by id) and the ranges of it and
/// of `crd` the point reads (positions in the whole stores).
#[derive(Clone, PartialEq, Eq)]
struct RebasedKey {
    store: u64,
    pos: Range<usize>,
    crd: Range<usize>,
}

/// Each point's rebased `pos` pieces, one per (point, input, level), kept from one run of a
/// plan to the next: a statement run again over the same stored tensor (an iterative
/// solver's SpMV) finds its pieces made, instead of making one array per point each run.
/// The piece is remade when the key changes (another tensor of the same shapes: the body,
/// and so this cache, is shared by every run of the statement over tensors of those
/// shapes). Sound because a `pos` store never changes after it is made (`from_offsets`;
/// a plan only reads its inputs) and store ids are not reused within a runtime; a piece is
/// kept while its point's key stays, at most one per point, input and level.
#[derive(Default)]
struct RebasedCache {
    #[allow(clippy::type_complexity)]
    pieces: std::sync::Mutex<
        std::collections::HashMap<
            (Piece, usize),
            (RebasedKey, Arc<dyn std::any::Any + Send + Sync>),
        >,
    >,
}

impl RebasedCache {
    /// The piece of `at`'s level `level` for `key`, made by `make` unless kept.
    fn get_or_make<I: PlanIndex>(
        &self,
        at: Piece,
        level: usize,
        key: RebasedKey,
        make: impl FnOnce() -> Vec<I>,
    ) -> Arc<[I]> {
        let lock = || self.pieces.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, piece)) = lock().get(&(at, level)) {
            if *k == key {
                if let Ok(piece) = piece.clone().downcast::<Arc<[I]>>() {
                    return (*piece).clone();
                }
            }
        }
        // Made outside the lock: the other points make theirs meanwhile.
        let piece: Arc<[I]> = make().into();
        lock().insert((at, level), (key, Arc::new(piece.clone())));
        piece
    }
}

/// The global ranges `pos` of a point's window of a compressed level as offsets into its
/// window `crd` of the level's coordinates. An empty image may sit anywhere: then every range
/// is empty and rebases to 0.
fn rebased<I: PlanIndex>(pos: &[PosRange], crd: &ReadView<I>) -> Vec<I> {
    let base = match crd.as_slice().is_empty() {
        true => pos.first().map_or(0, |r| r.lo),
        false => crd.range().start as u64,
    };
    let mut offsets = Vec::with_capacity(pos.len() + 1);
    offsets.push(I::from_usize(
        pos.first().map_or(0, |r| (r.lo - base) as usize),
    ));
    offsets.extend(pos.iter().map(|r| I::from_usize((r.hi - base) as usize)));
    offsets
}

/// A tensor holding a copy of `v`'s arrays (for the interpreter, which takes tensors).
fn owned<V: Value, I: Index>(v: &TensorView<V, I>) -> Tensor<V, I> {
    let levels = v
        .levels()
        .iter()
        .map(|l| match *l {
            LevelView::Dense { size, offset, .. } => Level::Dense { size, offset },
            LevelView::Compressed { pos, crd } => Level::Compressed {
                pos: pos.to_vec(),
                crd: crd.to_vec(),
            },
            LevelView::Singleton { crd } => Level::Singleton { crd: crd.to_vec() },
        })
        .collect();
    Tensor::from_parts(
        v.dims().to_vec(),
        v.format().clone(),
        levels,
        v.vals().to_vec(),
    )
    .unwrap_or_else(|e| panic!("a block of a valid tensor: {e}"))
}

/// `v` as the runtime's scalar, as `Runtime::value_future` makes it (floats as `F64`, exact
/// for `f32`; signed integers as `I64`, unsigned as `U64`), so `V::from_scalar` gives `v`.
fn scalar_of<V: PlanValue>(v: V) -> tessera_runtime::Scalar {
    use tessera_runtime::Scalar;
    let any = &v as &dyn std::any::Any;
    if let Some(x) = any.downcast_ref::<f64>() {
        Scalar::F64(*x)
    } else if let Some(x) = any.downcast_ref::<f32>() {
        Scalar::F64(*x as f64)
    } else if let Some(x) = any.downcast_ref::<i64>() {
        Scalar::I64(*x)
    } else if let Some(x) = any.downcast_ref::<i32>() {
        Scalar::I64(*x as i64)
    } else if let Some(x) = any.downcast_ref::<u64>() {
        Scalar::U64(*x)
    } else if let Some(x) = any.downcast_ref::<u32>() {
        Scalar::U64(*x as u64)
    } else {
        unreachable!("plan values are numbers")
    }
}

/// Calls `f` on every cell of `r`, row-major.
fn for_each_cell(r: &Rect, mut f: impl FnMut(&[usize])) {
    let n = r.dim();
    if (0..n).any(|d| r.lo()[d] >= r.hi()[d]) {
        return;
    }
    let mut p = [0; MAX_DIMS];
    p[..n].copy_from_slice(r.lo());
    loop {
        f(&p[..n]);
        let mut d = n;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            p[d] += 1;
            if p[d] < r.hi()[d] {
                break;
            }
            p[d] = r.lo()[d];
        }
    }
}
