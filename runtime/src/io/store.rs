//! Distributed storing of blocks into one tensor (SuperTaco §4.6).
//!
//! Every rank holds some blocks (views, e.g. of mapped block files) of one tensor:
//! 1. **Coordinate-space balancing** (§4.6.1): the blocks' bounds give a box of coordinates
//!    (in level order); cutting its row-major enumeration into `N` equal runs gives `N-1` cut
//!    points, and each rank binary-searches, in each of its blocks, the first leaf at or after
//!    every cut. Piece `j` of every block goes to rank `j` (all-to-all), as sections of the
//!    block's arrays.
//! 2. **Tournament tree** (§4.6.2): each rank merges the sections it received into the
//!    entries of its coordinate run, in storage order.
//! 3. **Header assembly** (§4.6.3): a first merge pass gathers a partial header; pooled over
//!    ranks it gives the tensor's level sizes and each rank's level counters.
//! 4. **Piece assembly** (§4.6.4): a second merge pass builds the rank's piece of the output
//!    arrays at final positions ([`Merged`]), which is then gathered on one rank
//!    ([`store_to_root`]) or written into a file at computed offsets.

use super::assemble::{
    combine, Assembly, PartialHeader, Piece, PieceBuilder, PieceStart, Shape, Totals,
};
use super::codec::{Reader, Writer};
use super::load::to_tensor;
use super::section::Section;
use super::tournament::Tournament;
use super::walk::{coord, leaf_path_in, Tree, ViewTree, Walker};
use super::{IoError, Progress};
use crate::transport::Communicator;
use tessera_formats::{Format, Index, LevelView, Tensor, TensorView, Value};

/// This rank's piece of the stored tensor, with what every rank knows of the whole.
pub struct Merged<V, I> {
    pub(crate) dims: Vec<usize>,
    pub(crate) format: Format,
    pub(crate) shape: Shape,
    pub(crate) totals: Totals,
    pub(crate) piece: Piece<V, I>,
}

impl<V, I> Merged<V, I> {
    /// Mode-space dimensions of the stored tensor.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Its format.
    pub fn format(&self) -> &Format {
        &self.format
    }

    /// Number of values of the whole stored tensor.
    pub fn total_vals(&self) -> u64 {
        self.totals.vals()
    }
}

/// Steps 1–4: merges the blocks held by all ranks; returns this rank's piece. Collective.
pub fn merge_blocks<C, V, I>(
    comm: &C,
    blocks: &[TensorView<'_, V, I>],
    progress: &dyn Progress,
) -> Result<Merged<V, I>, IoError>
where
    C: Communicator + ?Sized,
    V: Value,
    I: Index,
{
    let (layout, incoming) = send_sections(comm, blocks, None, progress)?;
    merge_received(comm, layout, incoming, progress)
}

/// Step 1: pools the blocks' layout and sends every rank its sections of the local blocks;
/// returns the layout and what the other ranks sent this one. The ranks' runs are cut at
/// `cuts` (`size - 1` level-order coordinates, the same on every rank) when given, else into
/// equal runs of the blocks' coordinate box ([`Layout::cuts`]).
pub(crate) fn send_sections<C, V, I>(
    comm: &C,
    blocks: &[TensorView<'_, V, I>],
    cuts: Option<&[Vec<usize>]>,
    progress: &dyn Progress,
) -> Result<(Layout, Vec<Vec<u8>>), IoError>
where
    C: Communicator + ?Sized,
    V: Value,
    I: Index,
{
    let n = comm.size();
    // COO blocks travel in their unique form; the layout keeps their format (see `coo`).
    let uniques = blocks
        .iter()
        .map(super::coo::unique)
        .collect::<Result<Vec<_>, _>>();
    comm.check(uniques.as_ref().map(|_| ()).map_err(|e| e.to_string()))?;
    let uniques = uniques?;
    let views: Vec<TensorView<'_, V, I>> = blocks
        .iter()
        .zip(&uniques)
        .map(|(b, u)| u.as_ref().map_or_else(|| b.clone(), Tensor::view))
        .collect();
    let formats: Vec<&Format> = blocks.iter().map(|b| b.format()).collect();
    let blocks = &views[..];
    let described = describe(blocks, &formats);
    let all = comm.all_gather(&described.0)?;
    let layout = Layout::pool(&all)?;
    let cuts = match cuts {
        None => layout.cuts(n),
        Some(c) if c.len() + 1 == n && c.iter().all(|c| c.len() == layout.shape.len()) => {
            c.to_vec()
        }
        Some(c) => {
            return Err(IoError::File(format!(
                "{} cuts of {} coordinates given for {n} ranks and {} levels",
                c.len(),
                c.first().map_or(0, Vec::len),
                layout.shape.len()
            )))
        }
    };

    // 1. Cut every local block at the cuts; piece j goes to rank j.
    progress.start("merge: balance", blocks.len() as u64);
    let mut outgoing: Vec<Writer> = (0..n).map(|_| Writer::default()).collect();
    for view in blocks {
        let tree = ViewTree(view);
        let bounds = parent_bounds(view);
        let leaves = view.vals().len();
        let mut cut_at: Vec<usize> = cuts
            .iter()
            .map(|c| first_leaf_at(&tree, &bounds, leaves, c))
            .collect();
        cut_at.insert(0, 0);
        cut_at.push(leaves);
        for j in 0..n {
            if cut_at[j] < cut_at[j + 1] {
                write_section(&mut outgoing[j], &tree, &bounds, cut_at[j], cut_at[j + 1]);
            }
        }
        progress.advance(1);
    }
    let incoming = comm.all_to_all(outgoing.into_iter().map(|w| w.0).collect())?;
    Ok((layout, incoming))
}

/// Steps 2–4 on the sections every rank sent this one (the blocks themselves are no longer
/// needed: a caller may unmap them before this).
pub(crate) fn merge_received<C, V, I>(
    comm: &C,
    layout: Layout,
    incoming: Vec<Vec<u8>>,
    progress: &dyn Progress,
) -> Result<Merged<V, I>, IoError>
where
    C: Communicator + ?Sized,
    V: Value,
    I: Index,
{
    let sections = read_sections::<V, I>(layout.shape.len(), incoming)?;
    // Built in the unique form (`to_tensor` re-levels a COO result).
    let (mut merge, header, start, totals) =
        merge_header(comm, &layout, &sections, None, progress)?;

    // 4. Pass two: this rank's piece at final positions.
    let leaves = leaves_of(&sections);
    progress.start("merge: pieces", leaves);
    merge.reset();
    let mut builder = PieceBuilder::with_header(&layout.shape, &start, &header);
    while merge.next_with(|c, v| builder.push(c, v)) {}
    progress.advance(leaves);
    Ok(Merged {
        piece: builder.finish(),
        dims: layout.dims,
        format: layout.format,
        shape: layout.shape,
        totals,
    })
}

/// The sections every rank sent this one (step 1's messages, in rank order), of a tensor of
/// `rank` levels.
pub(crate) fn read_sections<V: Value, I: Index>(
    rank: usize,
    incoming: Vec<Vec<u8>>,
) -> Result<Vec<Section<V, I>>, IoError> {
    let mut sections = Vec::new();
    for (from, msg) in incoming.into_iter().enumerate() {
        let mut r = Reader::new(&msg, from);
        while !r.is_empty() {
            sections.push(Section::<V, I>::read(&mut r, rank)?);
        }
    }
    Ok(sections)
}

/// Leaves in sections.
pub(crate) fn leaves_of<V, I>(sections: &[Section<V, I>]) -> u64 {
    sections.iter().map(|s| (s.end - s.start) as u64).sum()
}

/// Steps 2–3 on this rank's sections: pass one of the tournament merge gathers the partial
/// header (overlapping blocks are an error, agreed on by every rank), pooled over the ranks.
/// `coo`: where the levels built per entry start (see [`Shape`]; `None`: the unique form).
/// Returns the merge (exhausted: reset it for pass two), this rank's partial header and
/// start, and the stored tensor's totals. Collective.
#[allow(clippy::type_complexity)]
pub(crate) fn merge_header<'s, C, V, I>(
    comm: &C,
    layout: &Layout,
    sections: &'s [Section<V, I>],
    coo: Option<usize>,
    progress: &dyn Progress,
) -> Result<
    (
        Tournament<'s, Section<V, I>>,
        PartialHeader,
        PieceStart,
        Totals,
    ),
    IoError,
>
where
    C: Communicator + ?Sized,
    V: Value,
    I: Index,
{
    let rank = layout.shape.len();
    let walkers = sections
        .iter()
        .map(|s| Walker::new(s, s.start, s.end, s.first.clone()))
        .collect();
    let mut merge = Tournament::new(walkers);
    let leaves = leaves_of(sections);
    progress.start("merge: header", leaves);
    let mut header = PartialHeader::with_coo(rank, coo);
    let mut overlap = None;
    while merge.next_with(|c, _| {
        if header.count > 0 && c <= header.last.as_slice() && overlap.is_none() {
            overlap = Some(c.to_vec());
        }
        header.push(c);
    }) {}
    progress.advance(leaves);
    let local = match overlap {
        Some(coords) => Err(IoError::Overlap { coords }.to_string()),
        None => Ok(()),
    };
    comm.check(local)?;
    let mut w = Writer::default();
    header.write(&mut w);
    let parts = comm
        .all_gather(&w.0)?
        .iter()
        .enumerate()
        .map(|(from, m)| PartialHeader::read(&mut Reader::new(m, from), rank))
        .collect::<Result<Vec<_>, _>>()?;
    let (starts, totals) = combine(&layout.shape, coo, &parts)?;
    let start = starts
        .into_iter()
        .nth(comm.rank())
        .ok_or_else(|| IoError::Internal("no start for this rank".into()))?;
    Ok((merge, header, start, totals))
}

/// Merges the blocks and gathers the whole tensor on rank 0 (`None` elsewhere). For tests
/// and tensors that fit one rank's memory; files are written piecewise instead.
pub fn store_to_root<C, V, I>(
    comm: &C,
    blocks: &[TensorView<'_, V, I>],
    progress: &dyn Progress,
) -> Result<Option<Tensor<V, I>>, IoError>
where
    C: Communicator + ?Sized,
    V: Value,
    I: Index,
{
    let merged = merge_blocks(comm, blocks, progress)?;
    let mut outgoing = vec![Vec::new(); comm.size()];
    let mut w = Writer::default();
    merged.piece.write(&mut w);
    outgoing[0] = w.0;
    let incoming = comm.all_to_all(outgoing)?;
    if comm.rank() != 0 {
        return Ok(None);
    }
    let rank = merged.shape.len();
    let mut asm = Assembly::new(rank);
    for (from, msg) in incoming.iter().enumerate() {
        asm.append(Piece::read(&mut Reader::new(msg, from), rank)?)?;
    }
    let asm = asm.finish(&merged.shape, &merged.totals)?;
    Ok(Some(to_tensor(
        &merged.dims,
        &merged.format,
        &merged.shape,
        asm,
    )?))
}

/// What a rank tells the others about its blocks: dims, format, per level its coordinate
/// bounds (dense range, or for a compressed level the smallest/largest coordinate known).
fn describe<V: Value, I: Index>(blocks: &[TensorView<'_, V, I>], formats: &[&Format]) -> Writer {
    let mut w = Writer::default();
    for (view, format) in blocks.iter().zip(formats) {
        describe_tree(&mut w, view.dims(), format, &ViewTree(view));
    }
    w
}

/// Appends one block's description (see [`describe`]) to `w`; `format` is the block's own
/// (a COO block is walked in its unique form, `tree`).
pub(crate) fn describe_tree<T: Tree>(w: &mut Writer, dims: &[usize], format: &Format, tree: &T) {
    w.usizes(dims);
    w.bytes(format.to_string().as_bytes());
    for k in 0..tree.rank() {
        let dim = dims[format.mode_order()[k]];
        let (kind, lo, hi) = match tree.dense(k) {
            Some((size, offset)) => (0, offset, offset + size),
            // Level 0 is sorted: its ends bound it. Deeper levels: the whole dimension.
            None if k == 0 => match tree.pos(0, 1) {
                0 => (1, 0, 0),
                n => (1, tree.crd(0, 0), tree.crd(0, n - 1) + 1),
            },
            None => (1, 0, dim),
        };
        w.usizes(&[kind, lo, hi]);
    }
}

/// The stored tensor's dims, format and level shape, and its coordinate box per level.
pub(crate) struct Layout {
    pub dims: Vec<usize>,
    pub format: Format,
    pub shape: Shape,
    /// Per level `[lo, hi)` of the coordinates present.
    bounds: Vec<(usize, usize)>,
}

impl Layout {
    pub(crate) fn pool(all: &[Vec<u8>]) -> Result<Layout, IoError> {
        let mut first: Option<(Vec<usize>, String)> = None;
        let mut levels: Vec<(usize, usize, usize)> = Vec::new();
        let mut dense_seen: Vec<bool> = Vec::new();
        for (from, msg) in all.iter().enumerate() {
            let mut r = Reader::new(msg, from);
            while !r.is_empty() {
                let dims = r.usizes()?;
                let format = String::from_utf8_lossy(r.bytes()?).into_owned();
                match &first {
                    None => {
                        levels = vec![(0, usize::MAX, 0); dims.len()];
                        dense_seen = vec![false; dims.len()];
                        first = Some((dims.clone(), format.clone()));
                    }
                    Some((d, f)) if *d != dims || *f != format => {
                        return Err(IoError::Mismatch(format!("a block on rank {from} has dimensions {dims:?} and format {format}, another {d:?} and {f}")));
                    }
                    Some(_) => {}
                }
                for k in 0..dims.len() {
                    let l = r.usizes()?;
                    let [kind, lo, hi] = l[..] else {
                        return Err(r.malformed("level bounds"));
                    };
                    // Empty ranges (an empty block) do not widen the box.
                    if lo < hi {
                        levels[k] = (kind, levels[k].1.min(lo), levels[k].2.max(hi));
                        dense_seen[k] |= kind == 0;
                    } else {
                        levels[k].0 = kind;
                    }
                }
            }
        }
        let Some((dims, format_text)) = first else {
            return Err(IoError::Mismatch("no rank holds a block to store".into()));
        };
        if dims.is_empty() {
            return Err(IoError::Scalar);
        }
        let format = Format::parse(&format_text, dims.len())
            .map_err(|e| IoError::Mismatch(e.to_string()))?;
        let bounds: Vec<(usize, usize)> = levels
            .iter()
            .map(|&(_, lo, hi)| if lo < hi { (lo, hi) } else { (0, 0) })
            .collect();
        let shape = format
            .levels()
            .iter()
            .enumerate()
            .map(|(k, t)| match t {
                tessera_formats::LevelType::Dense => Some((bounds[k].1 - bounds[k].0, bounds[k].0)),
                tessera_formats::LevelType::Compressed | tessera_formats::LevelType::Singleton => {
                    None
                }
            })
            .collect();
        Ok(Layout {
            dims,
            format,
            shape,
            bounds,
        })
    }

    /// `n - 1` cut points (level-order coordinates) that split the coordinate box into `n`
    /// runs of equal length in row-major order. Levels past the point where the box's size
    /// overflows `u128` do not take part (their cut coordinate is the box's low end).
    pub(crate) fn cuts(&self, n: usize) -> Vec<Vec<usize>> {
        let mut sizes = Vec::new();
        let mut total: u128 = 1;
        for &(lo, hi) in &self.bounds {
            let z = (hi - lo).max(1) as u128;
            match total.checked_mul(z) {
                Some(t) => {
                    total = t;
                    sizes.push(z);
                }
                None => break,
            }
        }
        (1..n)
            .map(|j| {
                let mut key = total * j as u128 / n as u128;
                let mut c: Vec<usize> = self.bounds.iter().map(|b| b.0).collect();
                for k in (0..sizes.len()).rev() {
                    c[k] += (key % sizes[k]) as usize;
                    key /= sizes[k];
                }
                c
            })
            .collect()
    }
}

fn parent_bounds<V: Value, I: Index>(view: &TensorView<'_, V, I>) -> Vec<(usize, usize)> {
    view.levels()
        .iter()
        .map(|level| match level {
            LevelView::Compressed { pos, .. } => (0, pos.len().saturating_sub(2)),
            LevelView::Dense { .. } => (0, 0),
            LevelView::Singleton { .. } => {
                unreachable!("COO views are re-levelled at the public entry points (see `coo`)")
            }
        })
        .collect()
}

/// The first leaf whose level-order coordinates are at least `cut` (binary search).
pub(crate) fn first_leaf_at<T: Tree>(
    tree: &T,
    bounds: &[(usize, usize)],
    leaves: usize,
    cut: &[usize],
) -> usize {
    let coords_of = |p: usize| -> Vec<usize> {
        let path = leaf_path_in(tree, p, bounds);
        path.iter()
            .enumerate()
            .map(|(k, &q)| coord(tree, k, q))
            .collect()
    };
    let (mut lo, mut hi) = (0, leaves);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if coords_of(mid).as_slice() < cut {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Sends leaves `[start, end)` of a block as sections of its arrays: per compressed level
/// the `pos` entries of the parents the range touches and the `crd` entries it covers.
fn write_section<V: Value, I: Index>(
    w: &mut Writer,
    tree: &ViewTree<'_, '_, V, I>,
    bounds: &[(usize, usize)],
    start: usize,
    end: usize,
) {
    let a = leaf_path_in(tree, start, bounds);
    let z = leaf_path_in(tree, end - 1, bounds);
    w.usizes(&a);
    w.u64(start as u64);
    w.u64(end as u64);
    for (k, level) in tree.0.levels().iter().enumerate() {
        match *level {
            LevelView::Dense { size, offset, .. } => w.usizes(&[0, size, offset]),
            LevelView::Compressed { pos, crd } => {
                let (pa, pz) = if k == 0 { (0, 0) } else { (a[k - 1], z[k - 1]) };
                w.usizes(&[1, pa, a[k]]);
                w.pods(&pos[pa..=pz + 1]);
                w.pods(&crd[a[k]..=z[k]]);
            }
            LevelView::Singleton { .. } => {
                unreachable!("COO views are re-levelled at the public entry points (see `coo`)")
            }
        }
    }
    w.pods(&tree.0.vals()[start..end]);
}

impl<V: Value, I: Index> Section<V, I> {
    fn read(r: &mut Reader<'_>, rank: usize) -> Result<Self, IoError> {
        let first = r.usizes()?;
        let (start, end) = (r.u64()? as usize, r.u64()? as usize);
        let mut s = Section {
            first,
            start,
            end,
            dense: Vec::new(),
            pos_base: Vec::new(),
            crd_base: Vec::new(),
            pos: Vec::new(),
            crd: Vec::new(),
            vals: Vec::new(),
        };
        for _ in 0..rank {
            let l = r.usizes()?;
            let [kind, x, y] = l[..] else {
                return Err(r.malformed("section level"));
            };
            if kind == 0 {
                s.dense.push(Some((x, y)));
                s.pos_base.push(0);
                s.crd_base.push(0);
                s.pos.push(Vec::new());
                s.crd.push(Vec::new());
            } else {
                s.dense.push(None);
                s.pos_base.push(x);
                s.crd_base.push(y);
                s.pos.push(r.pods()?);
                s.crd.push(r.pods()?);
            }
        }
        s.vals = r.pods()?;
        if s.first.len() != rank || s.vals.len() != end.saturating_sub(start) {
            return Err(r.malformed("section sizes"));
        }
        Ok(s)
    }
}
