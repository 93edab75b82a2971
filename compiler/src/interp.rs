//! Executes a [`Kernel`] at run time, loop by loop, exactly as the generated code would.
//!
//! This is the same plan as [`crate::codegen`]'s output (same loop order, merges, locates,
//! accumulator and assembly), interpreted: it lets property tests cover random formats
//! without compiling Rust for each, and lets tools run a statement without a Rust toolchain.
//! Positions are tracked per access and level as `Option<usize>`; `None` means the access has
//! no entry here (an operand absent from one side of a union), and its value is the
//! statement's fill (zero under `+`; see [`crate::semiring`]).

use tessera_formats::{Format, Index, Level, Packer, Tensor, TensorError, Value};

use crate::ast::{BinOp, Func, ReduceOp};
use crate::ir::{
    Assembly, Block, DimSource, Domain, Expr, Kernel, LevelRef, Nest, OutputKind, VarId,
};

/// Inputs that do not match what the kernel was compiled for.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InterpError {
    #[error("expected {expected} inputs ({names}), got {got}")]
    InputCount {
        expected: usize,
        got: usize,
        names: String,
    },
    #[error("input `{tensor}` has format {got}, but the kernel was compiled for {expected}")]
    Format {
        tensor: String,
        expected: String,
        got: String,
    },
    #[error("`{0}` is a Rust function of the caller's: only the generated kernel can call it")]
    UserFunction(String),
    #[error("output dimensions {got:?} do not have the output's rank {rank}")]
    OutRank { rank: usize, got: Vec<usize> },
    #[error(
        "index `{var}` has dimension {first_dim} in {first} but {dim} in {tensor} mode {mode}"
    )]
    Dim {
        var: String,
        first: String,
        first_dim: usize,
        tensor: String,
        mode: usize,
        dim: usize,
    },
    #[error("a coordinate lies outside `out_dims`: the inputs' dimensions disagree with them")]
    OutOfRange,
    #[error("block bounds {bounds:?} do not fit the index variables' dimensions {dims:?}")]
    Block {
        bounds: Vec<std::ops::Range<usize>>,
        dims: Vec<usize>,
    },
    #[error("assembling the output failed: {0}")]
    Assemble(#[from] TensorError),
}

/// Runs `k` on `inputs` (in [`Kernel::inputs`] order) and returns the output with dimensions
/// `out_dims`. Unlike a generated kernel, the interpreter checks its inputs itself: formats,
/// ranks, and one dimension per index variable across every input and `out_dims`; a
/// mismatch is an [`InterpError`], never a panic or a truncated result.
///
/// An input the kernel re-packs ([`Kernel::repacks`]) may come in its given format or in the
/// kernel's; it is transposed once before the loops.
pub fn run<V: Value, I: Index>(
    k: &Kernel,
    inputs: &[&Tensor<V, I>],
    out_dims: &[usize],
) -> Result<Tensor<V, I>, InterpError> {
    let owned = repack_inputs(k, inputs)?;
    let inputs = &repacked(inputs, &owned)[..];
    check_inputs(k, inputs, out_dims)?;
    let whole = Block::whole(&var_dims(k, inputs, out_dims));
    Ok(run_checked(k, inputs, out_dims, &whole)?.0)
}

/// `inputs` with the re-packed ones replaced.
fn repacked<'a, V: Value, I: Index>(
    inputs: &[&'a Tensor<V, I>],
    owned: &'a [Option<Tensor<V, I>>],
) -> Vec<&'a Tensor<V, I>> {
    inputs
        .iter()
        .zip(owned)
        .map(|(t, r)| r.as_ref().unwrap_or(*t))
        .collect()
}

/// The inputs the kernel re-packs, transposed into the kernel's format (`None` for the others
/// and for inputs already in it). Stored zeros are kept: under `min` a stored 0 is a value.
pub fn repack_inputs<V: Value, I: Index>(
    k: &Kernel,
    inputs: &[&Tensor<V, I>],
) -> Result<Vec<Option<Tensor<V, I>>>, InterpError> {
    let mut out: Vec<Option<Tensor<V, I>>> = inputs.iter().map(|_| None).collect();
    for r in &k.repacks {
        let Some(t) = inputs.get(r.slot) else {
            continue; // the count is checked with the other inputs
        };
        if t.format() == &r.from {
            out[r.slot] = Some(repack(t, &r.to)?);
        }
    }
    Ok(out)
}

/// `t` in format `to` (another mode order): its entries in `to`'s level order by counting
/// sorts, appended to a packer — linear, like the generated code's re-pack.
pub fn repack<V: Value, I: Index>(
    t: &Tensor<V, I>,
    to: &Format,
) -> Result<Tensor<V, I>, TensorError> {
    let order = to.mode_order();
    let level_dims: Vec<usize> = order.iter().map(|m| t.dims()[*m]).collect();
    let entries = t
        .entries()
        .map(|(c, v)| (order.iter().map(|m| c[*m]).collect(), v))
        .collect();
    let mut p = Packer::in_memory(t.dims(), to, level_dims.iter().map(|d| (*d, 0)).collect());
    for (c, v) in counting_sort(entries, &level_dims) {
        p.push(&c, v).map_err(|e| match e {
            tessera_formats::PackError::Tensor(t) => t,
            tessera_formats::PackError::Sink(never) => match never {},
        })?;
    }
    packed_tensor(t.dims(), to, p)
}

/// What a run visited: the block-cost measure that timing noise cannot fool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// `visits[n][d]`: how many coordinates loop `d` of nest `n` bound.
    pub visits: Vec<Vec<u64>>,
    /// How many times a nest's expression was evaluated.
    pub leaves: u64,
}

impl Work {
    /// Adds another run's counts.
    pub fn add(&mut self, other: &Work) {
        if self.visits.is_empty() {
            self.visits = other.visits.iter().map(|n| vec![0; n.len()]).collect();
        }
        for (a, b) in self.visits.iter_mut().zip(&other.visits) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        self.leaves += other.leaves;
    }
}

/// The block entry point: runs `k` on the part of its iteration space that `block` covers
/// (see [`Block`]) and returns that block's contribution to the output (zero elsewhere; a
/// sparse output holds only the block's entries) with what the run visited. Inputs are the
/// whole tensors; each loop is bounded by the block, so the cost is the block's.
pub fn run_block<V: Value, I: Index>(
    k: &Kernel,
    inputs: &[&Tensor<V, I>],
    out_dims: &[usize],
    block: &Block,
) -> Result<(Tensor<V, I>, Work), InterpError> {
    // Only statements without `split` are re-packed: then there is one block.
    let owned = repack_inputs(k, inputs)?;
    let inputs = &repacked(inputs, &owned)[..];
    check_inputs(k, inputs, out_dims)?;
    let dims = var_dims(k, inputs, out_dims);
    if block.bounds.len() != dims.len()
        || block.first.len() != dims.len()
        || block
            .bounds
            .iter()
            .zip(&dims)
            .any(|(b, d)| b.start > b.end || b.end > *d)
    {
        return Err(InterpError::Block {
            bounds: block.bounds.clone(),
            dims,
        });
    }
    run_checked(k, inputs, out_dims, block)
}

/// Checks `inputs` and `out_dims` against the kernel (as [`run`] does) and returns the
/// extent of every index variable, in [`Kernel::vars`] order.
pub fn checked_dims<V: Value, I: Index>(
    k: &Kernel,
    inputs: &[&Tensor<V, I>],
    out_dims: &[usize],
) -> Result<Vec<usize>, InterpError> {
    let owned = repack_inputs(k, inputs)?;
    let inputs = &repacked(inputs, &owned)[..];
    check_inputs(k, inputs, out_dims)?;
    Ok(var_dims(k, inputs, out_dims))
}

/// The extent of every index variable (inputs already checked).
fn var_dims<V: Value, I: Index>(
    k: &Kernel,
    inputs: &[&Tensor<V, I>],
    out_dims: &[usize],
) -> Vec<usize> {
    k.vars
        .iter()
        .map(|v| match v.dim {
            DimSource::Input { slot, mode } => inputs[slot].dims()[mode],
            DimSource::Output { mode } => out_dims[mode],
        })
        .collect()
}

fn run_checked<V: Value, I: Index>(
    k: &Kernel,
    inputs: &[&Tensor<V, I>],
    out_dims: &[usize],
    block: &Block,
) -> Result<(Tensor<V, I>, Work), InterpError> {
    let out_decl = k.output_tensor();
    let fill = V::from_f64(k.reduce.fill());
    let mut out_dense = match k.output_kind {
        OutputKind::Sparse => None,
        _ => Some(Tensor::<V, I>::zeros(
            out_dims.to_vec(),
            out_decl.format.clone(),
        )?),
    };
    if let Some(t) = out_dense.as_mut() {
        t.vals_mut().fill(fill);
    }
    let mut state = State::new(k, inputs, out_dims, &block.bounds);
    let mut sink = Sink::new(k, out_dims);
    for (n, nest) in k.nests.iter().enumerate().filter(|(_, n)| block.runs(n)) {
        let out_vals = out_dense.as_mut().map(|t| t.vals_mut());
        let mut run = NestRun {
            s: &mut state,
            n,
            nest,
            out: out_vals,
            sink: &mut sink,
            acc: fill,
            touched: false,
        };
        run.body(0);
    }
    if let Some(e) = sink.error.take() {
        return Err(e);
    }
    let work = std::mem::take(&mut state.work);
    let out = match out_dense {
        Some(t) => t,
        None => sink.finish(out_dims, &out_decl.format, k.reduce)?,
    };
    Ok((out, work))
}

fn check_inputs<V: Value, I: Index>(
    k: &Kernel,
    inputs: &[&Tensor<V, I>],
    out_dims: &[usize],
) -> Result<(), InterpError> {
    if let Some(f) = k.user_functions.first() {
        return Err(InterpError::UserFunction(f.clone()));
    }
    let shapes: Vec<(&Format, &[usize])> = inputs.iter().map(|t| (t.format(), t.dims())).collect();
    check_shapes(k, &shapes, out_dims)
}

/// [`checked_dims`] for inputs given by format and dimensions only (tensors held elsewhere,
/// as a plan's runtime stores). Unlike it, a kernel calling the caller's functions passes:
/// a generated block kernel, given them, runs it (the interpreter refuses it when it runs).
pub fn checked_dims_of(
    k: &Kernel,
    inputs: &[(&Format, &[usize])],
    out_dims: &[usize],
) -> Result<Vec<usize>, InterpError> {
    check_shapes(k, inputs, out_dims)?;
    Ok(k.vars
        .iter()
        .map(|v| match v.dim {
            DimSource::Input { slot, mode } => inputs[slot].1[mode],
            DimSource::Output { mode } => out_dims[mode],
        })
        .collect())
}

fn check_shapes(
    k: &Kernel,
    inputs: &[(&Format, &[usize])],
    out_dims: &[usize],
) -> Result<(), InterpError> {
    let names = k.inputs();
    if names.len() != inputs.len() {
        return Err(InterpError::InputCount {
            expected: names.len(),
            got: inputs.len(),
            names: names.join(", "),
        });
    }
    for t in &k.tensors {
        if let Some(slot) = t.input_slot {
            let (got, dims) = inputs[slot];
            if *got != t.format || dims.len() != t.rank() {
                return Err(InterpError::Format {
                    tensor: t.name.clone(),
                    expected: t.format.to_string(),
                    got: got.to_string(),
                });
            }
        }
    }
    if out_dims.len() != k.output_tensor().rank() {
        return Err(InterpError::OutRank {
            rank: k.output_tensor().rank(),
            got: out_dims.to_vec(),
        });
    }
    // One extent per index variable, agreed by every use (inputs and `out_dims`).
    let mut dims: Vec<Option<(usize, String)>> = vec![None; k.vars.len()];
    for acc in &k.accesses {
        let decl = &k.tensors[acc.tensor];
        let tensor_dims = match decl.input_slot {
            Some(slot) => inputs[slot].1,
            None => out_dims,
        };
        for (level, &m) in decl.format.mode_order().iter().enumerate() {
            let v = acc.level_vars[level];
            let got = tensor_dims[m];
            match &dims[v] {
                Some((d, first)) if *d != got => {
                    return Err(InterpError::Dim {
                        var: k.vars[v].name.clone(),
                        first: first.clone(),
                        first_dim: *d,
                        tensor: decl.name.clone(),
                        mode: m,
                        dim: got,
                    })
                }
                Some(_) => {}
                None => dims[v] = Some((got, format!("{} mode {m}", decl.name))),
            }
        }
    }
    Ok(())
}

/// Per-access level arrays, borrowed once.
enum LevelData<'a, I> {
    Dense { size: usize, offset: usize },
    Compressed { pos: &'a [I], crd: &'a [I] },
    Singleton { crd: &'a [I] },
}

struct State<'a, V, I> {
    k: &'a Kernel,
    levels: Vec<Vec<LevelData<'a, I>>>,
    vals: Vec<&'a [V]>,
    /// Per index variable, the coordinates the block covers.
    bounds: Vec<std::ops::Range<usize>>,
    /// Per index variable, true when the block narrows it (compressed levels are searched).
    narrowed: Vec<bool>,
    work: Work,
    coord: Vec<usize>,
    /// The output's extent per level (for `Scatter`'s range check).
    out_level_dims: Vec<usize>,
    /// `pos[a][l]`: position of access `a` at level `l` under the current loop bindings.
    pos: Vec<Vec<Option<usize>>>,
    /// `ends[a][l]`: for a non-unique level (one above a singleton level), the end of the
    /// group of positions sharing the coordinate at `pos[a][l]`: the singleton level below
    /// iterates `pos[a][l]..ends[a][l]`.
    ends: Vec<Vec<usize>>,
    /// `non_unique[a][l]`: level `l` of access `a` is non-unique (its iteration groups equal
    /// coordinates).
    non_unique: Vec<Vec<bool>>,
}

impl<'a, V: Value, I: Index> State<'a, V, I> {
    fn new(
        k: &'a Kernel,
        inputs: &[&'a Tensor<V, I>],
        out_dims: &[usize],
        bounds: &[std::ops::Range<usize>],
    ) -> Self {
        let mut levels = Vec::new();
        let mut vals: Vec<&'a [V]> = Vec::new();
        for acc in &k.accesses {
            let decl = &k.tensors[acc.tensor];
            match decl.input_slot {
                Some(slot) => {
                    let t = inputs[slot];
                    levels.push(t.levels().iter().map(level_data).collect());
                    vals.push(t.vals());
                }
                None => {
                    // The output: dense levels over `out_dims` (sparse outputs are never located).
                    let order = decl.format.mode_order();
                    levels.push(
                        order
                            .iter()
                            .map(|m| LevelData::Dense {
                                size: out_dims[*m],
                                offset: 0,
                            })
                            .collect(),
                    );
                    vals.push(&[]);
                }
            }
        }
        let dims = var_dims(k, inputs, out_dims);
        let narrowed = bounds
            .iter()
            .zip(&dims)
            .map(|(b, d)| *b != (0..*d))
            .collect();
        let pos = k
            .accesses
            .iter()
            .map(|a| vec![None; a.level_vars.len()])
            .collect();
        let ends = k
            .accesses
            .iter()
            .map(|a| vec![0; a.level_vars.len()])
            .collect();
        let non_unique = k
            .accesses
            .iter()
            .map(|a| {
                let f = &k.tensors[a.tensor].format;
                (0..a.level_vars.len())
                    .map(|l| f.is_non_unique(l))
                    .collect()
            })
            .collect();
        State {
            k,
            levels,
            vals,
            bounds: bounds.to_vec(),
            narrowed,
            work: Work {
                visits: k.nests.iter().map(|n| vec![0; n.loops.len()]).collect(),
                leaves: 0,
            },
            coord: vec![0; k.vars.len()],
            out_level_dims: k
                .output_tensor()
                .format
                .mode_order()
                .iter()
                .map(|m| out_dims[*m])
                .collect(),
            pos,
            ends,
            non_unique,
        }
    }

    /// The positions `lo..hi` of level `r`'s children of the parent's position: `pos` of a
    /// compressed level, the parent's group of a singleton level (empty under an absent
    /// parent).
    fn segment(&self, r: LevelRef) -> (&'a [I], usize, usize) {
        let parent = self.parent(r);
        match self.levels[r.access][r.level] {
            LevelData::Compressed { pos, crd } => match parent {
                Some(p) => (crd, pos[p].to_usize(), pos[p + 1].to_usize()),
                None => (crd, 0, 0),
            },
            LevelData::Singleton { crd } => match parent {
                Some(p) => (crd, p, self.ends[r.access][r.level - 1]),
                None => (crd, 0, 0),
            },
            LevelData::Dense { .. } => unreachable!("verified: iterated levels are sparse"),
        }
    }

    /// The end of the group of positions from `p` (below `hi`) with `p`'s coordinate: `p + 1`
    /// for a unique level.
    fn group_end(&self, r: LevelRef, crd: &[I], p: usize, hi: usize) -> usize {
        if !self.non_unique[r.access][r.level] {
            return p + 1;
        }
        let c = crd[p];
        p + 1 + crd[p + 1..hi].iter().take_while(|x| **x == c).count()
    }

    /// Position of the parent of level `r.level` (the root is position 0).
    fn parent(&self, r: LevelRef) -> Option<usize> {
        if r.level == 0 {
            Some(0)
        } else {
            self.pos[r.access][r.level - 1]
        }
    }

    /// The value of an access under the current bindings (zero when absent).
    fn value(&self, a: usize) -> V {
        let p = match self.pos[a].last() {
            Some(p) => *p,
            None => Some(0),
        };
        p.and_then(|p| self.vals[a].get(p).copied())
            .unwrap_or_else(|| V::from_f64(self.k.reduce.fill()))
    }

    fn eval(&self, e: &Expr) -> V {
        match e {
            // `check_inputs` refuses kernels that call a user's function.
            Expr::UserCall(..) => V::from_f64(f64::NAN),
            Expr::Access(a) => self.value(*a),
            Expr::Const(c) => V::from_f64(*c),
            Expr::Neg(x) => -self.eval(x),
            Expr::Call(f, x) => {
                let x = self.eval(x);
                match f {
                    Func::Exp => x.exp(),
                    Func::Log => x.ln(),
                    Func::Sqrt => x.sqrt(),
                    Func::Abs => x.abs(),
                    // Computed in f64 and rounded, as the generated code does.
                    Func::Sin | Func::Cos | Func::Tanh => {
                        V::from_f64(crate::semiring::unary(*f, x.to_f64()))
                    }
                }
            }
            Expr::Binary(op, l, r) => {
                let (l, r) = (self.eval(l), self.eval(r));
                let red = self.k.reduce;
                match op {
                    BinOp::Add => l + r,
                    BinOp::Sub => l - r,
                    BinOp::Mul if red.guards(BinOp::Mul) => {
                        let fill = V::from_f64(red.fill());
                        if l == fill || r == fill {
                            fill
                        } else {
                            l * r
                        }
                    }
                    BinOp::Mul => l * r,
                    BinOp::Div => l / r,
                    // In the value type, as the generated code does: i64 beyond 2^53 does
                    // not survive a trip through f64.
                    BinOp::Min => combine(ReduceOp::Min, l, r),
                    BinOp::Max => combine(ReduceOp::Max, l, r),
                    // Computed in f64 and rounded, as the generated code does.
                    BinOp::Pow => V::from_f64(l.to_f64().powf(r.to_f64())),
                    _ => truth(
                        crate::semiring::logical(*op, l, r, V::zero())
                            .expect("the other operators compare"),
                    ),
                }
            }
        }
    }
}

/// 1 for true, 0 for false: what comparisons and logic give.
fn truth<V: Value>(b: bool) -> V {
    if b {
        V::from_f64(1.0)
    } else {
        V::zero()
    }
}

/// `a ⊕ x` for the kernel's reduction, in the value type.
pub fn combine<V: Value>(r: ReduceOp, a: V, x: V) -> V {
    match r {
        ReduceOp::Sum => a + x,
        ReduceOp::Min => {
            if x < a {
                x
            } else {
                a
            }
        }
        ReduceOp::Max => {
            if x > a {
                x
            } else {
                a
            }
        }
        ReduceOp::Or => truth(a != V::zero() || x != V::zero()),
    }
}

fn level_data<I: Index>(l: &Level<I>) -> LevelData<'_, I> {
    match l {
        Level::Dense { size, offset } => LevelData::Dense {
            size: *size,
            offset: *offset,
        },
        Level::Compressed { pos, crd } => LevelData::Compressed { pos, crd },
        Level::Singleton { crd } => LevelData::Singleton { crd },
    }
}

/// Where the entries of a sparse output go.
struct Sink<V, I> {
    /// In-order assembly (entries arrive sorted in level order, each once).
    packer: Option<Packer<V, I, Vec<I>, Vec<V>>>,
    /// Entries in mode order, in any order (the `Collect` fallback).
    entries: Vec<(Vec<usize>, V)>,
    /// Entries in level-order coordinates, in loop order, each once (`Scatter`).
    scatter: Vec<(Vec<usize>, V)>,
    /// The dense workspace over the output's last level, with the coordinates it holds.
    ws: Vec<V>,
    ws_mark: Vec<bool>,
    ws_list: Vec<usize>,
    /// The first assembly failure (inputs that broke the precondition, e.g. coordinates
    /// beyond `out_dims`): reported by `run` instead of a panic.
    error: Option<InterpError>,
}

impl<V: Value, I: Index> Sink<V, I> {
    fn new(k: &Kernel, out_dims: &[usize]) -> Self {
        let fmt = &k.output_tensor().format;
        let fill = V::from_f64(k.reduce.fill());
        let in_order = k.nests.iter().all(|n| {
            matches!(
                n.assembly,
                Assembly::InOrder | Assembly::Workspace { .. } | Assembly::Scatter
            )
        });
        let packer = (k.output_kind == OutputKind::Sparse && in_order).then(|| {
            let dense = fmt.mode_order().iter().map(|m| (out_dims[*m], 0)).collect();
            Packer::in_memory(out_dims, fmt, dense)
        });
        let ws_len = k
            .nests
            .iter()
            .find_map(|n| match n.assembly {
                Assembly::Workspace { var, .. } => {
                    let out = &k.accesses[k.output_access].level_vars;
                    let level = out.iter().position(|v| *v == var).unwrap_or(0);
                    Some(out_dims[fmt.mode_order()[level]])
                }
                _ => None,
            })
            .unwrap_or(0);
        Sink {
            packer,
            entries: Vec::new(),
            scatter: Vec::new(),
            ws: vec![fill; ws_len],
            ws_mark: vec![false; ws_len],
            ws_list: Vec::new(),
            error: None,
        }
    }

    fn fail(&mut self, e: InterpError) {
        self.error.get_or_insert(e);
    }

    /// Appends one entry (level-order coordinates) to the in-order assembly.
    fn push(&mut self, coords: &[usize], v: V) {
        let Some(packer) = self.packer.as_mut() else {
            return self.fail(InterpError::OutOfRange);
        };
        if let Err(e) = packer.push(coords, v) {
            let e = match e {
                tessera_formats::PackError::Tensor(t) => t,
                tessera_formats::PackError::Sink(never) => match never {},
            };
            self.fail(e.into());
        }
    }

    fn finish(
        mut self,
        out_dims: &[usize],
        fmt: &Format,
        r: ReduceOp,
    ) -> Result<Tensor<V, I>, InterpError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if !self.scatter.is_empty() {
            let dims: Vec<usize> = fmt.mode_order().iter().map(|m| out_dims[*m]).collect();
            for (c, v) in counting_sort(std::mem::take(&mut self.scatter), &dims) {
                self.push(&c, v);
            }
            if let Some(e) = self.error.take() {
                return Err(e);
            }
        }
        match self.packer {
            Some(p) => Ok(packed_tensor(out_dims, fmt, p)?),
            None => Ok(from_entries(
                r,
                out_dims.to_vec(),
                fmt.clone(),
                self.entries,
            )?),
        }
    }
}

/// `dst[i] = combine(r, dst[i], src[i])` for every cell: how the partial outputs of blocks
/// that share output cells fold (extended blocks, sequential launches).
pub fn combine_into<V: Value>(r: ReduceOp, dst: &mut [V], src: &[V]) {
    dst.iter_mut()
        .zip(src)
        .for_each(|(d, s)| *d = combine(r, *d, *s));
}

/// The output in `fmt` of entries in any order: duplicates combined with `r` in the order
/// given, and positions no entry gives (dense levels below a compressed one) holding `r`'s
/// identity.
pub fn from_entries<V: Value, I: Index>(
    r: ReduceOp,
    dims: Vec<usize>,
    fmt: Format,
    entries: Vec<(Vec<usize>, V)>,
) -> Result<Tensor<V, I>, TensorError> {
    let entries = combine_duplicates(r, entries);
    if r.fill() != 0.0 && crate::lower::padded_levels(&fmt) {
        let fill = V::from_f64(r.fill());
        return Tensor::from_entries_padded(dims, fmt, entries, fill);
    }
    Tensor::from_entries(dims, fmt, entries)
}

/// Entries with equal coordinates combined with `r` (`from_entries` sums duplicates, which is
/// right only for `+`): the `Collect` assembly of a `min[k](...)` output.
pub fn combine_duplicates<V: Value>(
    r: ReduceOp,
    mut entries: Vec<(Vec<usize>, V)>,
) -> Vec<(Vec<usize>, V)> {
    if r == ReduceOp::Sum {
        return entries;
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: Vec<(Vec<usize>, V)> = Vec::with_capacity(entries.len());
    for (c, v) in entries {
        match out.last_mut() {
            Some(last) if last.0 == c => last.1 = combine(r, last.1, v),
            _ => out.push((c, v)),
        }
    }
    out
}

/// Entries with level-order coordinates, stably sorted into level order by one counting sort
/// per level, last level first (LSD radix): linear, where a comparison sort is not.
fn counting_sort<V: Copy>(
    mut entries: Vec<(Vec<usize>, V)>,
    dims: &[usize],
) -> Vec<(Vec<usize>, V)> {
    for l in (0..dims.len()).rev() {
        let mut start = vec![0usize; dims[l] + 1];
        for (c, _) in &entries {
            start[c[l] + 1] += 1;
        }
        for k in 1..start.len() {
            start[k] += start[k - 1];
        }
        let mut slots: Vec<Option<(Vec<usize>, V)>> = vec![None; entries.len()];
        for e in entries {
            let at = &mut start[e.0[l]];
            slots[*at] = Some(e);
            *at += 1;
        }
        entries = slots.into_iter().flatten().collect();
    }
    entries
}

/// Turns a finished packer into a validated tensor.
fn packed_tensor<V: Value, I: Index>(
    out_dims: &[usize],
    fmt: &Format,
    p: Packer<V, I, Vec<I>, Vec<V>>,
) -> Result<Tensor<V, I>, TensorError> {
    let (arrays, vals, _) = p.finish().map_err(|e| match e {
        tessera_formats::PackError::Tensor(t) => t,
        tessera_formats::PackError::Sink(never) => match never {},
    })?;
    let levels = Level::from_packed(out_dims, fmt, arrays);
    Tensor::from_parts(out_dims.to_vec(), fmt.clone(), levels, vals)
}

/// One nest's execution.
struct NestRun<'s, 'a, V, I> {
    s: &'s mut State<'a, V, I>,
    /// The nest's index in the kernel.
    n: usize,
    nest: &'s Nest,
    out: Option<&'s mut [V]>,
    sink: &'s mut Sink<V, I>,
    acc: V,
    touched: bool,
}

impl<V: Value, I: Index> NestRun<'_, '_, V, I> {
    /// The body of loop `d - 1` (for `d == 0`, the whole nest).
    fn body(&mut self, d: usize) {
        let nest = self.nest;
        let red = self.s.k.reduce;
        if d == nest.acc_depth {
            self.acc = V::from_f64(red.fill());
            self.touched = false;
        }
        if d == nest.loops.len() {
            self.s.work.leaves += 1;
            self.acc = combine(red, self.acc, self.s.eval(&nest.expr));
            self.touched = true;
        } else {
            self.run_loop(d);
        }
        if d == nest.acc_depth {
            self.write();
        }
        if let Assembly::Workspace { flush_depth, .. } = nest.assembly {
            if d == flush_depth {
                self.flush();
            }
        }
    }

    fn run_loop(&mut self, d: usize) {
        let lp = &self.nest.loops[d];
        // Each iterator: (level ref, crd, current pointer, end).
        let mut its: Vec<Iter<'_, I>> = Vec::with_capacity(lp.iterate.len());
        for r in &lp.iterate {
            let (crd, mut lo, mut hi) = self.s.segment(*r);
            if self.s.narrowed[lp.var] {
                // Coordinates are sorted within a segment: keep those inside the block.
                let b = &self.s.bounds[lp.var];
                let seg = &crd[lo..hi];
                let first = seg.partition_point(|c| c.to_usize() < b.start);
                hi = lo + seg.partition_point(|c| c.to_usize() < b.end);
                lo += first;
            }
            its.push((*r, crd, lo, hi));
        }
        let mut present = vec![false; its.len()];
        match &lp.domain {
            Domain::Empty => {}
            Domain::Single => {
                let (r, crd, lo, hi) = its[0];
                let mut q = lo;
                while q < hi {
                    let e = self.s.group_end(r, crd, q, hi);
                    self.s.pos[r.access][r.level] = Some(q);
                    self.s.ends[r.access][r.level] = e;
                    self.visit(d, lp.var, crd[q].to_usize());
                    q = e;
                }
            }
            Domain::Universe => {
                for c in self.s.bounds[lp.var].clone() {
                    self.bind_present(&its, c, &mut present);
                    self.visit(d, lp.var, c);
                    self.advance(&mut its, &present);
                }
            }
            Domain::Merge(f) => loop {
                let active: Vec<bool> = its.iter().map(|(_, _, p, end)| p < end).collect();
                if !f.eval(&active) {
                    break;
                }
                let c = its
                    .iter()
                    .filter(|(_, _, p, end)| p < end)
                    .map(|(_, crd, p, _)| crd[*p].to_usize())
                    .min()
                    .expect("an active iterator exists when the formula holds");
                self.bind_present(&its, c, &mut present);
                if f.eval(&present) {
                    self.visit(d, lp.var, c);
                }
                self.advance(&mut its, &present);
            },
        }
    }

    /// Marks which iterators are at coordinate `c` and binds their positions (and group
    /// ends) for the body.
    fn bind_present(&mut self, its: &[Iter<'_, I>], c: usize, present: &mut [bool]) {
        for (n, (r, crd, p, end)) in its.iter().enumerate() {
            present[n] = *p < *end && crd[*p].to_usize() == c;
            self.s.pos[r.access][r.level] = present[n].then_some(*p);
            if present[n] {
                self.s.ends[r.access][r.level] = self.s.group_end(*r, crd, *p, *end);
            }
        }
    }

    /// Moves past the current coordinate (its whole group) every iterator that had it.
    fn advance(&self, its: &mut [Iter<'_, I>], present: &[bool]) {
        for (n, it) in its.iter_mut().enumerate() {
            if present[n] {
                it.2 = self.s.ends[it.0.access][it.0.level];
            }
        }
    }

    /// Binds the loop variable to `c`, locates dense levels, and runs the body unless a
    /// required operand is absent.
    fn visit(&mut self, d: usize, var: VarId, c: usize) {
        let lp = &self.nest.loops[d];
        self.s.coord[var] = c;
        self.s.work.visits[self.n][d] += 1;
        for r in &lp.locate {
            let x = self.s.coord[self.s.k.level_var(*r)];
            let p = match self.s.levels[r.access][r.level] {
                LevelData::Dense { size, offset } => self.s.parent(*r).and_then(|p| {
                    let i = x.checked_sub(offset).filter(|i| *i < size)?;
                    Some(p * size + i)
                }),
                // The second mode of a diagonal: search the parent's segment (sorted; a
                // non-unique level's group of `x` is where it starts and ends).
                LevelData::Compressed { .. } | LevelData::Singleton { .. } => {
                    let (crd, lo, hi) = self.s.segment(*r);
                    let seg = &crd[lo..hi];
                    let (first, end) = (
                        lo + seg.partition_point(|c| c.to_usize() < x),
                        lo + seg.partition_point(|c| c.to_usize() <= x),
                    );
                    self.s.ends[r.access][r.level] = end;
                    (first < end).then_some(first)
                }
            };
            self.s.pos[r.access][r.level] = p;
        }
        let missing = lp.iterate.iter().chain(&lp.locate).any(|r| {
            self.nest.required.contains(&r.access) && self.s.pos[r.access][r.level].is_none()
        });
        if !missing {
            self.body(d + 1);
        }
    }

    /// Writes the accumulator into the output (see [`Assembly`]).
    fn write(&mut self) {
        let k = self.s.k;
        let out = &k.accesses[k.output_access];
        match k.output_kind {
            OutputKind::Scalar => {
                if let Some(vals) = self.out.as_deref_mut() {
                    vals[0] = combine(k.reduce, vals[0], self.acc);
                }
            }
            OutputKind::Dense => {
                if let (Some(vals), Some(Some(p))) =
                    (self.out.as_deref_mut(), self.s.pos[k.output_access].last())
                {
                    match vals.get_mut(*p) {
                        Some(x) => *x = combine(k.reduce, *x, self.acc),
                        None => self.sink.fail(InterpError::OutOfRange),
                    }
                }
            }
            OutputKind::Sparse if self.touched => match self.nest.assembly {
                Assembly::InOrder => {
                    let coords: Vec<usize> =
                        out.level_vars.iter().map(|v| self.s.coord[*v]).collect();
                    self.sink.push(&coords, self.acc);
                }
                Assembly::Scatter => {
                    let coords: Vec<usize> =
                        out.level_vars.iter().map(|v| self.s.coord[*v]).collect();
                    if coords
                        .iter()
                        .zip(&self.s.out_level_dims)
                        .any(|(c, d)| c >= d)
                    {
                        self.sink.fail(InterpError::OutOfRange);
                        return;
                    }
                    self.sink.scatter.push((coords, self.acc));
                }
                Assembly::Workspace { var, .. } => {
                    let c = self.s.coord[var];
                    if c >= self.sink.ws.len() {
                        self.sink.fail(InterpError::OutOfRange);
                        return;
                    }
                    if !self.sink.ws_mark[c] {
                        self.sink.ws_mark[c] = true;
                        self.sink.ws_list.push(c);
                    }
                    self.sink.ws[c] = combine(k.reduce, self.sink.ws[c], self.acc);
                }
                Assembly::Collect | Assembly::None => {
                    let decl = &k.tensors[out.tensor];
                    let mut coords = vec![0; out.level_vars.len()];
                    for (l, m) in decl.format.mode_order().iter().enumerate() {
                        coords[*m] = self.s.coord[out.level_vars[l]];
                    }
                    self.sink.entries.push((coords, self.acc));
                }
            },
            OutputKind::Sparse => {}
        }
    }

    /// Emits the workspace's entries in coordinate order and clears it.
    fn flush(&mut self) {
        let k = self.s.k;
        let out = &k.accesses[k.output_access].level_vars;
        let mut coords: Vec<usize> = out.iter().map(|v| self.s.coord[*v]).collect();
        let last = coords.len() - 1;
        let sink = &mut *self.sink;
        let mut list = std::mem::take(&mut sink.ws_list);
        list.sort_unstable();
        for &c in &list {
            coords[last] = c;
            let v = std::mem::replace(&mut sink.ws[c], V::from_f64(k.reduce.fill()));
            sink.push(&coords, v);
            sink.ws_mark[c] = false;
        }
        list.clear();
        sink.ws_list = list;
    }
}

/// A loop's iterator over one level: the level, its `crd`, the current position and the
/// end of its segment.
type Iter<'a, I> = (LevelRef, &'a [I], usize, usize);
