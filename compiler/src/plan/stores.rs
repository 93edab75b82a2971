//! Tensors as runtime stores and the block task's arguments: privileges and partitioning
//! constraints (Legate thesis §7.2, Fig. 7.2; SuperTaco §4.2 tensor blocks).
//!
//! A tensor is a group of stores: per compressed level `l`, `pos{l}` (one range per parent
//! position) and `crd{l}` (one coordinate per position), and `vals`. Dense levels have no
//! store of their own: they are dimensions of the store below them (`vals` of an all-dense
//! tensor is an n-d array; `pos{l}` under dense levels is an array over those levels).
//!
//! How each input reaches a block task:
//! - no split variable indexes it: `broadcast`, or — when it is dense and its first mode is
//!   visited through a compressed level of a partitioned operand — the image of that level's
//!   `crd` (`x` in SpMV: `image(A.crd1 → x)`);
//! - only its first level's variable is split and that level is dense: the first store is
//!   tiled along the block variable (or aligned with the output's tile when the shapes agree)
//!   and every deeper compressed level is reached through images, `pos → crd`, `pos → pos`
//!   of the next level, and the last `pos → vals` (Fig. 7.2 and its chain for CSF);
//! - anything else (a split of a compressed or inner level): SuperTaco's tensor blocks — the
//!   distributed loader cuts the tensor into blocks with dense offsets, stored concatenated
//!   with a directory aligned with the grid.
//!
//! A singleton (COO) level is stored as in the tensor's unique form (`sq` as `ss`, the same
//! entries in the same order; see `Stored::upload`): it has a `pos{l}` and a `crd{l}` like a
//! compressed level, `pos{l}` imaged from the parent's positions, and each point re-levels
//! its block into the COO format before the kernel runs. So a COO operand gets exactly the
//! plan of its unique form, images and tensor blocks alike.

use std::fmt;

use tessera_formats::LevelType;

use super::grid::{Grid, Role};
use crate::ir::{Domain, Kernel, OutputKind, TensorId};

/// One store of a tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreRef {
    pub tensor: String,
    pub kind: StoreKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// The values (n-d over the tensor's leading dense levels when it has no compressed level).
    Vals,
    /// `pos` of compressed level `l`.
    Pos(usize),
    /// `crd` of compressed level `l`.
    Crd(usize),
    /// The directory of a tensor cut into blocks, shaped like the block variables that cut it.
    Blocks,
    /// A sparse output's entries (coordinates), emitted piece by piece.
    Coords,
}

impl fmt::Display for StoreRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            StoreKind::Vals => write!(f, "{}.vals", self.tensor),
            StoreKind::Pos(l) => write!(f, "{}.pos{l}", self.tensor),
            StoreKind::Crd(l) => write!(f, "{}.crd{l}", self.tensor),
            StoreKind::Blocks => write!(f, "{}.blocks", self.tensor),
            StoreKind::Coords => write!(f, "{}.coords", self.tensor),
        }
    }
}

/// How a block task accesses an argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privilege {
    Read,
    /// Each point writes its tile.
    Write,
    /// Launches fold into the output in turn with the statement's reduction (sequential
    /// hoisting).
    ReadWrite,
    /// Points that share a tile fold their partial outputs with the statement's reduction
    /// (`+`, or `min`, `max`, `or`) (output extension).
    Reduce,
    /// A sparse output: each point emits a piece of entries; the pieces, in point order,
    /// are assembled into the output's levels.
    WriteUnbound,
    /// A sparse output that extended or hoisted blocks all contribute to: the pieces are
    /// merged by coordinate, values folded with the statement's reduction in point order.
    ReduceUnbound,
}

/// The partitioning constraint that decides an argument's sub-store at each point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Partition {
    /// Store dimension `d` is cut along grid variable `dims[d]` (`None`: not cut).
    Tiled { dims: Vec<Option<usize>> },
    /// The same partition as another argument (same shape).
    Aligned(StoreRef),
    /// Every point sees the whole store.
    Broadcast,
    /// What the source's sub-store points at: ranges for `pos`, coordinates for `crd`.
    Image(StoreRef),
    /// The tensor's blocks, cut by these grid variables (directory aligned with the grid).
    Blocks { by: Vec<usize> },
    /// An unbound output store: each point emits a piece, concatenated in point order.
    Pieces,
}

/// One argument of the block task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arg {
    pub store: StoreRef,
    pub privilege: Privilege,
    pub partition: Partition,
}

/// The arguments of the block task: the output's stores first, then each input's.
pub(super) fn arguments(k: &Kernel, grid: &Grid) -> Vec<Arg> {
    let mut args = output_args(k, grid);
    let tiled: Vec<bool> = (0..k.tensors.len())
        .map(|t| tiled_by_first_level(k, grid, t))
        .collect();
    for (t, decl) in k.tensors.iter().enumerate() {
        if decl.input_slot.is_none() {
            continue;
        }
        let split = split_vars(k, grid, t);
        if split.is_empty() {
            args.extend(unsplit_input(k, t, &tiled));
        } else if tiled[t] {
            args.extend(tiled_input(k, t, split[0], &args));
        } else {
            args.push(Arg {
                store: store(k, t, StoreKind::Blocks),
                privilege: Privilege::Read,
                partition: Partition::Blocks { by: split },
            });
        }
    }
    args
}

fn store(k: &Kernel, t: TensorId, kind: StoreKind) -> StoreRef {
    StoreRef {
        tensor: k.tensors[t].name.clone(),
        kind,
    }
}

/// The variable of a tensor's first level (same in every use only when the tensor is used
/// once; a tensor used twice with different variables is never tiled by its first level).
fn first_level_var(k: &Kernel, t: TensorId) -> Option<usize> {
    let mut vars = k
        .accesses
        .iter()
        .filter(|a| a.tensor == t)
        .map(|a| a.level_vars.first().copied());
    let first = vars.next()??;
    vars.all(|v| v == Some(first)).then_some(first)
}

/// Grid positions of the block variables whose statement variable indexes tensor `t`.
fn split_vars(k: &Kernel, grid: &Grid, t: TensorId) -> Vec<usize> {
    (0..grid.vars.len())
        .filter(|&g| {
            k.accesses
                .iter()
                .any(|a| a.tensor == t && a.level_vars.contains(&grid.vars[g].var_id))
        })
        .collect()
}

/// True when only tensor `t`'s first level's variable is split, that level is dense and the
/// rest is a chain images can follow.
fn tiled_by_first_level(k: &Kernel, grid: &Grid, t: TensorId) -> bool {
    let levels = k.tensors[t].format.levels();
    let split = split_vars(k, grid, t);
    let first = first_level_var(k, t);
    k.tensors[t].input_slot.is_some()
        && !split.is_empty()
        && levels.first() == Some(&LevelType::Dense)
        && chainable(levels)
        && split.iter().all(|&g| Some(grid.vars[g].var_id) == first)
}

/// Dense levels first, then only compressed (or singleton) ones: the shape images can follow.
fn chainable(levels: &[LevelType]) -> bool {
    let dense = levels
        .iter()
        .take_while(|l| **l == LevelType::Dense)
        .count();
    levels[dense..].iter().all(|l| l.is_sparse())
}

/// The stores of a tensor whose levels are dense then compressed, outermost first: the store
/// that holds the dense levels (`pos` of the first compressed level, or `vals`), then per
/// compressed level its `crd` and the next level's `pos` (or `vals`).
fn chain(k: &Kernel, t: TensorId) -> Vec<(StoreRef, Option<StoreRef>)> {
    let levels = k.tensors[t].format.levels();
    let compressed: Vec<usize> = (0..levels.len())
        .filter(|&l| levels[l].is_sparse())
        .collect();
    let Some(&first) = compressed.first() else {
        return vec![(store(k, t, StoreKind::Vals), None)];
    };
    let mut out = vec![(store(k, t, StoreKind::Pos(first)), None)];
    for (n, &l) in compressed.iter().enumerate() {
        let src = store(k, t, StoreKind::Pos(l));
        out.push((store(k, t, StoreKind::Crd(l)), Some(src.clone())));
        let next = match compressed.get(n + 1) {
            Some(&m) => StoreKind::Pos(m),
            None => StoreKind::Vals,
        };
        out.push((store(k, t, next), Some(src)));
    }
    out
}

/// An input tiled by its first level: Fig. 7.2 (`pos` tiled or aligned with the output, then
/// images down the chain).
fn tiled_input(k: &Kernel, t: TensorId, g: usize, so_far: &[Arg]) -> Vec<Arg> {
    // Stores are 1-d: the dense prefix is flattened, so a tile of the first level is one
    // contiguous range of the store below it. With a prefix of one level that store has the
    // output's shape when the output is a vector: then it is aligned with it (Fig. 7.2).
    let levels = k.tensors[t].format.levels();
    let one_level_prefix = levels.get(1) != Some(&LevelType::Dense);
    let dims = vec![Some(g)];
    let partition_of_first = match so_far.first() {
        Some(out)
            if one_level_prefix && out.partition == (Partition::Tiled { dims: dims.clone() }) =>
        {
            Partition::Aligned(out.store.clone())
        }
        _ => Partition::Tiled { dims },
    };
    chain(k, t)
        .into_iter()
        .enumerate()
        .map(|(n, (s, src))| Arg {
            store: s,
            privilege: Privilege::Read,
            partition: match src {
                Some(src) => Partition::Image(src),
                None if n == 0 => partition_of_first.clone(),
                None => Partition::Broadcast,
            },
        })
        .collect()
}

/// An input no split variable indexes: broadcast, or — a dense vector — imaged through the
/// coordinates of a tiled operand's compressed level that visits it (Fig. 7.2's `x`).
fn unsplit_input(k: &Kernel, t: TensorId, tiled: &[bool]) -> Vec<Arg> {
    let vector = k.tensors[t].format.levels() == [LevelType::Dense];
    let source = first_level_var(k, t)
        .filter(|_| vector)
        .and_then(|v| crd_source(k, t, v, tiled))
        .map(|(src, level)| store(k, src, StoreKind::Crd(level)));
    chain(k, t)
        .into_iter()
        .map(|(s, _)| Arg {
            store: s,
            privilege: Privilege::Read,
            partition: match &source {
                Some(src) => Partition::Image(src.clone()),
                None => Partition::Broadcast,
            },
        })
        .collect()
}

/// The `crd` store of a compressed level of another, tiled input that every nest reading
/// tensor `t` iterates to bind `v`: then `t` is read only at that level's coordinates. If one
/// nest binds `v` any other way (a term visiting all of `v`), `t` must be seen whole.
fn crd_source(k: &Kernel, t: TensorId, v: usize, tiled: &[bool]) -> Option<(TensorId, usize)> {
    let mut source = None;
    for nest in &k.nests {
        if !nest.accesses().iter().any(|&a| k.accesses[a].tensor == t) {
            continue;
        }
        let lp = nest.loops.iter().find(|l| l.var == v)?;
        if !matches!(lp.domain, Domain::Single) {
            return None;
        }
        let r = lp.iterate[0];
        let here = (k.accesses[r.access].tensor, r.level);
        if here.0 == t || !tiled[here.0] || source.is_some_and(|s| s != here) {
            return None;
        }
        source = Some(here);
    }
    source
}

/// The output's stores: a dense (or scalar) output is one `vals` store tiled along the free
/// block variables; a sparse output is emitted as entries, one piece per point.
fn output_args(k: &Kernel, grid: &Grid) -> Vec<Arg> {
    let out = &k.accesses[k.output_access];
    let has = |r: Role| grid.vars.iter().any(|b| b.role == r);
    let dense = k.output_kind != OutputKind::Sparse;
    let privilege = match (dense, has(Role::Extend), has(Role::Sequential)) {
        (true, true, _) => Privilege::Reduce,
        (true, false, true) => Privilege::ReadWrite,
        (true, false, false) => Privilege::Write,
        (false, false, false) => Privilege::WriteUnbound,
        (false, _, _) => Privilege::ReduceUnbound,
    };
    if dense {
        let dims: Vec<Option<usize>> = out
            .level_vars
            .iter()
            .map(|v| {
                grid.vars
                    .iter()
                    .position(|b| b.var_id == *v && b.role == Role::Parallel)
            })
            .collect();
        let partition = if dims.iter().any(Option::is_some) {
            Partition::Tiled { dims }
        } else {
            Partition::Broadcast
        };
        return vec![Arg {
            store: store(k, k.output, StoreKind::Vals),
            privilege,
            partition,
        }];
    }
    [StoreKind::Coords, StoreKind::Vals]
        .into_iter()
        .map(|kind| Arg {
            store: store(k, k.output, kind),
            privilege,
            partition: Partition::Pieces,
        })
        .collect()
}
