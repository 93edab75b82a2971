//! Building level arrays in pieces on many ranks and joining them (SuperTaco §4.4.2–§4.4.4,
//! §4.6.3–§4.6.4).
//!
//! A tensor's entries (in storage order) are cut into contiguous pieces, one per rank.
//! 1. Each rank makes a [`PartialHeader`] of its piece: entry count, first and last entry,
//!    and how many compressed-level nodes the piece opens when read on its own.
//! 2. [`combine`] pools the partial headers in rank order: where a piece's first entry shares
//!    a prefix with the previous piece's last entry, the shared nodes are not new (the edge
//!    effect). Prefix sums of the node counts give each rank its starting level counters
//!    ([`PieceStart`]) and give the tensor's level sizes.
//! 3. Each rank builds its [`Piece`] with a [`PieceBuilder`] started at those counters: the
//!    `crd`, `pos` and `vals` segments it owns, at final positions.
//! 4. The arrays of the whole tensor are the segments of all pieces concatenated in rank
//!    order, plus the tails after the last entry ([`Assembly`]).

use super::codec::{Reader, Writer};
use super::IoError;
use tessera_formats::Index;

/// Per level: `Some((size, offset))` for a dense level, `None` for a compressed one.
///
/// A COO format's levels from its non-unique level `c` down (`coo` below: `Some(c)`, see
/// [`Format::coo_start`](tessera_formats::Format::coo_start)) are `None` too, and are built
/// per entry: every entry is a node of its own at every level from `c` on (its position there
/// is its leaf number), so level `c`'s `pos` counts entries under each parent, and levels
/// below `c` (singletons) store only a `crd`, one coordinate per entry. Entries agree on at
/// most `c` leading levels ([`shared_prefix`]); the rest of the assembly is unchanged.
pub(crate) type Shape = Vec<Option<(usize, usize)>>;

/// What one rank saw of one tensor (or block) in pass one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PartialHeader {
    pub count: u64,
    pub first: Vec<usize>,
    pub last: Vec<usize>,
    /// Nodes opened per level, counting every level of the first entry as new.
    pub new_nodes: Vec<u64>,
    /// The COO levels' start, when built per entry (see [`Shape`]); not sent: pooled
    /// headers are only read by [`combine`], which is told it.
    pub coo: Option<usize>,
}

impl PartialHeader {
    pub fn new(rank: usize) -> Self {
        PartialHeader {
            count: 0,
            first: vec![0; rank],
            last: vec![0; rank],
            new_nodes: vec![0; rank],
            coo: None,
        }
    }

    /// A header whose levels from `coo` on are built per entry (see [`Shape`]).
    pub fn with_coo(rank: usize, coo: Option<usize>) -> Self {
        PartialHeader {
            coo,
            ..PartialHeader::new(rank)
        }
    }

    /// Counts one entry (level-order coordinates), which must follow the previous one.
    pub fn push(&mut self, coords: &[usize]) {
        let d = if self.count == 0 {
            self.first.copy_from_slice(coords);
            0
        } else {
            shared_prefix(&self.last, coords, self.coo)
        };
        for n in &mut self.new_nodes[d..] {
            *n += 1;
        }
        self.last.copy_from_slice(coords);
        self.count += 1;
    }

    pub fn write(&self, w: &mut Writer) {
        w.u64(self.count);
        if self.count > 0 {
            w.usizes(&self.first);
            w.usizes(&self.last);
            w.u64s(&self.new_nodes);
        }
    }

    pub fn read(r: &mut Reader, rank: usize) -> Result<Self, IoError> {
        let count = r.u64()?;
        if count == 0 {
            return Ok(PartialHeader::new(rank));
        }
        let h = PartialHeader {
            count,
            first: r.usizes()?,
            last: r.usizes()?,
            new_nodes: r.u64s()?,
            coo: None,
        };
        if h.first.len() != rank || h.last.len() != rank || h.new_nodes.len() != rank {
            return Err(r.malformed("partial header of the wrong rank"));
        }
        Ok(h)
    }
}

/// Number of leading levels on which two entries agree.
pub(crate) fn common_prefix(a: &[usize], b: &[usize]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Number of leading levels whose nodes two entries share: their common prefix, but at most
/// `coo` (the levels from `coo` on are built per entry, see [`Shape`]).
pub(crate) fn shared_prefix(a: &[usize], b: &[usize], coo: Option<usize>) -> usize {
    let d = common_prefix(a, b);
    coo.map_or(d, |c| d.min(c))
}

/// Where one rank's piece starts: the level counters before it, the node positions of the
/// last entry before it, and how many leading levels its first entry shares with that entry;
/// and where the levels built per entry start (see [`Shape`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PieceStart {
    pub counters: Vec<u64>,
    pub prev_path: Option<Vec<u64>>,
    pub shared: usize,
    pub coo: Option<usize>,
}

/// The pooled header: per level the number of nodes (positions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Totals {
    pub positions: Vec<u64>,
}

impl Totals {
    /// Number of parent positions of level `k`.
    pub fn parents(&self, k: usize) -> u64 {
        if k == 0 {
            1
        } else {
            self.positions[k - 1]
        }
    }

    /// Length of `vals`.
    pub fn vals(&self) -> u64 {
        *self.positions.last().expect("rank > 0")
    }
}

/// Pools the partial headers of all ranks (in rank order) into each rank's start and the
/// totals. Errors when pieces overlap or are out of order (two ranks saw the same entry).
/// `coo`: where the levels built per entry start (see [`Shape`]), as the parts counted them.
pub(crate) fn combine(
    shape: &Shape,
    coo: Option<usize>,
    parts: &[PartialHeader],
) -> Result<(Vec<PieceStart>, Totals), IoError> {
    let rank = shape.len();
    let mut counters = vec![0u64; rank];
    let mut prev_last: Option<&[usize]> = None;
    let mut prev_path: Option<Vec<u64>> = None;
    let mut starts = Vec::with_capacity(parts.len());
    for part in parts {
        let shared = match prev_last {
            Some(last) if part.count > 0 => {
                if part.first.as_slice() <= last {
                    return Err(IoError::Overlap {
                        coords: part.first.clone(),
                    });
                }
                shared_prefix(last, &part.first, coo)
            }
            _ => 0,
        };
        starts.push(PieceStart {
            counters: counters.clone(),
            prev_path: prev_path.clone(),
            shared,
            coo,
        });
        if part.count == 0 {
            continue;
        }
        for k in 0..rank {
            if shape[k].is_none() {
                counters[k] += part.new_nodes[k] - u64::from(k < shared);
            }
        }
        prev_last = Some(&part.last);
        prev_path = Some(node_path(shape, &part.last, &counters));
    }
    let mut positions = Vec::with_capacity(rank);
    let mut parents = 1u64;
    for k in 0..rank {
        parents = match shape[k] {
            Some((size, _)) => parents.checked_mul(size as u64).ok_or(IoError::TooLarge)?,
            None => counters[k],
        };
        positions.push(parents);
    }
    Ok((starts, Totals { positions }))
}

/// Node positions of the most recent entry `coords`, given the counters after it.
fn node_path(shape: &Shape, coords: &[usize], counters: &[u64]) -> Vec<u64> {
    let mut parent = 0u64;
    shape
        .iter()
        .enumerate()
        .map(|(k, level)| {
            parent = match level {
                Some((size, offset)) => parent * *size as u64 + (coords[k] - offset) as u64,
                None => counters[k] - 1,
            };
            parent
        })
        .collect()
}

/// The array segments one rank contributes to a tensor: per compressed level the `pos`
/// entries from `pos_start` and the `crd` entries from `crd_start`; the `vals` from
/// `val_start` (zeros of dense levels included).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Piece<V, I> {
    pub pos_start: Vec<u64>,
    pub pos: Vec<Vec<I>>,
    pub crd_start: Vec<u64>,
    pub crd: Vec<Vec<I>>,
    pub val_start: u64,
    pub vals: Vec<V>,
}

/// Pass two: appends the entries of one piece to its segments, at final positions.
pub(crate) struct PieceBuilder<'s, V, I> {
    shape: &'s Shape,
    path: Vec<u64>,
    counters: Vec<u64>,
    next_pos: Vec<u64>,
    next_val: u64,
    last: Option<Vec<usize>>,
    shared: usize,
    coo: Option<usize>,
    piece: Piece<V, I>,
}

/// Segments hold the tensor's own index type: every position and coordinate they store is
/// at most a length or coordinate of the input, which fits it.
impl<'s, V: Copy + Default, I: Index> PieceBuilder<'s, V, I> {
    /// A builder starting at `start`; `header` (this rank's partial header of the piece)
    /// sizes the segments up front.
    pub fn with_header(shape: &'s Shape, start: &PieceStart, header: &PartialHeader) -> Self {
        let mut b = Self::new(shape, start);
        for k in 0..shape.len() {
            if shape[k].is_none() {
                b.piece.crd[k].reserve(header.new_nodes[k] as usize);
                let singleton = start.coo.is_some_and(|c| k > c);
                if k > 0 && shape[k - 1].is_none() && !singleton {
                    b.piece.pos[k].reserve(header.new_nodes[k - 1] as usize);
                }
            }
        }
        b.piece.vals.reserve(header.count as usize);
        b
    }

    pub fn new(shape: &'s Shape, start: &PieceStart) -> Self {
        let rank = shape.len();
        let (path, next_pos, next_val) = match &start.prev_path {
            Some(p) => {
                let next_pos = (0..rank)
                    .map(|k| if k == 0 { 1 } else { p[k - 1] + 1 })
                    .collect();
                (p.clone(), next_pos, p[rank - 1] + 1)
            }
            None => (vec![0; rank], vec![0; rank], 0),
        };
        let piece = Piece {
            pos_start: next_pos.clone(),
            pos: vec![Vec::new(); rank],
            crd_start: start.counters.clone(),
            crd: vec![Vec::new(); rank],
            val_start: next_val,
            vals: Vec::new(),
        };
        PieceBuilder {
            shape,
            path,
            counters: start.counters.clone(),
            next_pos,
            next_val,
            last: None,
            shared: start.shared,
            coo: start.coo,
            piece,
        }
    }

    /// Appends one entry (level-order coordinates, strictly after the previous one).
    #[allow(clippy::needless_range_loop)] // k indexes six per-level arrays in step
    pub fn push(&mut self, coords: &[usize], v: V) {
        let d = match &self.last {
            None => self.shared,
            Some(last) => shared_prefix(last, coords, self.coo),
        };
        // Every per-level array cut to the rank once, so that indexing them by `k < rank`
        // needs no further bounds checks (this is the hot loop of splitting and loading).
        let rank = self.shape.len();
        let (shape, coords) = (&self.shape[..rank], &coords[..rank]);
        let (path, counters) = (&mut self.path[..rank], &mut self.counters[..rank]);
        let next_pos = &mut self.next_pos[..rank];
        let (pos, crd) = (&mut self.piece.pos[..rank], &mut self.piece.crd[..rank]);
        for k in d..rank {
            let parent = if k == 0 { 0 } else { path[k - 1] };
            path[k] = match shape[k] {
                Some((size, offset)) => parent * size as u64 + (coords[k] - offset) as u64,
                // A singleton level: one child per parent, no `pos`.
                None if self.coo.is_some_and(|c| k > c) => {
                    crd[k].push(I::from_usize(coords[k]));
                    counters[k] += 1;
                    counters[k] - 1
                }
                None => {
                    // pos[q] for every parent q up to this node's parent: the nodes before it.
                    while next_pos[k] <= parent {
                        pos[k].push(I::from_usize(counters[k] as usize));
                        next_pos[k] += 1;
                    }
                    crd[k].push(I::from_usize(coords[k]));
                    counters[k] += 1;
                    counters[k] - 1
                }
            };
        }
        let leaf = *self.path.last().expect("rank > 0");
        while self.next_val < leaf {
            self.piece.vals.push(V::default());
            self.next_val += 1;
        }
        self.piece.vals.push(v);
        self.next_val += 1;
        match &mut self.last {
            Some(last) => last.copy_from_slice(coords),
            None => self.last = Some(coords.to_vec()),
        }
    }

    pub fn finish(self) -> Piece<V, I> {
        self.piece
    }

    /// Elements the segments hold now (all arrays together).
    pub fn buffered(&self) -> usize {
        let p = &self.piece;
        p.vals.len() + p.pos.iter().chain(&p.crd).map(Vec::len).sum::<usize>()
    }

    /// Takes the segments built so far and goes on with empty ones that start where these
    /// end, so that a caller can write them out and keep the builder's memory bounded.
    /// `spare` (a piece taken before, written out) lends its buffers, so that their capacity
    /// is reused instead of grown again.
    pub fn take(&mut self, mut spare: Piece<V, I>) -> Piece<V, I> {
        let p = &self.piece;
        let after = |starts: &[u64], parts: &[Vec<I>]| -> Vec<u64> {
            starts
                .iter()
                .zip(parts)
                .map(|(s, a)| s + a.len() as u64)
                .collect()
        };
        let rank = p.pos.len();
        spare.pos.resize_with(rank, Vec::new);
        spare.crd.resize_with(rank, Vec::new);
        spare
            .pos
            .iter_mut()
            .chain(&mut spare.crd)
            .for_each(Vec::clear);
        spare.vals.clear();
        let rest = Piece {
            pos_start: after(&p.pos_start, &p.pos),
            crd_start: after(&p.crd_start, &p.crd),
            val_start: p.val_start + p.vals.len() as u64,
            ..spare
        };
        std::mem::replace(&mut self.piece, rest)
    }
}

impl<V: bytemuck::Pod, I: Index> Piece<V, I> {
    /// Bytes [`Piece::write`] appends.
    pub fn encoded_len(&self) -> usize {
        let arrays: usize = self
            .pos
            .iter()
            .chain(&self.crd)
            .map(|a| 8 + a.len() * std::mem::size_of::<I>())
            .sum();
        8 + 8 * self.pos_start.len()
            + 8
            + 8 * self.crd_start.len()
            + 8
            + arrays
            + 8
            + self.vals.len() * std::mem::size_of::<V>()
    }

    pub fn write(&self, w: &mut Writer) {
        w.u64s(&self.pos_start);
        w.u64s(&self.crd_start);
        w.u64(self.val_start);
        for k in 0..self.pos.len() {
            w.pods(&self.pos[k]);
            w.pods(&self.crd[k]);
        }
        w.pods(&self.vals);
    }

    pub fn read(r: &mut Reader, rank: usize) -> Result<Self, IoError> {
        let pos_start = r.u64s()?;
        let crd_start = r.u64s()?;
        let val_start = r.u64()?;
        if pos_start.len() != rank || crd_start.len() != rank {
            return Err(r.malformed("piece of the wrong rank"));
        }
        let mut pos = Vec::with_capacity(rank);
        let mut crd = Vec::with_capacity(rank);
        for _ in 0..rank {
            pos.push(r.pods()?);
            crd.push(r.pods()?);
        }
        Ok(Piece {
            pos_start,
            pos,
            crd_start,
            crd,
            val_start,
            vals: r.pods()?,
        })
    }
}

/// Appends `more` to `v`, moving it instead of copying when `v` is empty (the usual case of
/// a block that one rank's piece holds whole).
fn append_vec<T>(v: &mut Vec<T>, mut more: Vec<T>) {
    if v.is_empty() {
        std::mem::swap(v, &mut more);
    } else {
        v.append(&mut more);
    }
}

/// The arrays of a whole tensor, joined from pieces in rank order.
pub(crate) struct Assembly<V, I> {
    pub pos: Vec<Vec<I>>,
    pub crd: Vec<Vec<I>>,
    pub vals: Vec<V>,
}

impl<V: Copy + Default, I: Index> Assembly<V, I> {
    pub fn new(rank: usize) -> Self {
        Assembly {
            pos: vec![Vec::new(); rank],
            crd: vec![Vec::new(); rank],
            vals: Vec::new(),
        }
    }

    /// Appends the next piece; its segments must start where the arrays end.
    pub fn append(&mut self, piece: Piece<V, I>) -> Result<(), IoError> {
        let gap = |what: &str, k: usize, at: u64, len: usize| {
            IoError::Internal(format!(
                "{what} of level {k}: piece starts at {at} but the array holds {len}"
            ))
        };
        for (k, (pos, crd)) in piece.pos.into_iter().zip(piece.crd).enumerate() {
            if !pos.is_empty() && piece.pos_start[k] != self.pos[k].len() as u64 {
                return Err(gap("pos", k, piece.pos_start[k], self.pos[k].len()));
            }
            if !crd.is_empty() && piece.crd_start[k] != self.crd[k].len() as u64 {
                return Err(gap("crd", k, piece.crd_start[k], self.crd[k].len()));
            }
            append_vec(&mut self.pos[k], pos);
            append_vec(&mut self.crd[k], crd);
        }
        if !piece.vals.is_empty() && piece.val_start != self.vals.len() as u64 {
            return Err(gap("vals", 0, piece.val_start, self.vals.len()));
        }
        append_vec(&mut self.vals, piece.vals);
        Ok(())
    }

    /// Appends the tails after the last entry: `pos` up to its sentinel, zeros of trailing
    /// dense positions in `vals`.
    pub fn finish(mut self, shape: &Shape, totals: &Totals) -> Result<Self, IoError> {
        for (k, level) in shape.iter().enumerate() {
            if level.is_none() {
                let len = totals.parents(k) + 1;
                let len = usize::try_from(len).map_err(|_| IoError::TooLarge)?;
                let last = I::try_from_usize(totals.positions[k] as usize).ok_or(
                    IoError::IndexOverflow {
                        value: totals.positions[k],
                        bits: I::BITS,
                    },
                )?;
                self.pos[k].resize(len, last);
                if self.crd[k].len() as u64 != totals.positions[k] {
                    return Err(IoError::Internal(format!(
                        "level {k}: {} crd entries assembled, header says {}",
                        self.crd[k].len(),
                        totals.positions[k]
                    )));
                }
            }
        }
        let vals = usize::try_from(totals.vals()).map_err(|_| IoError::TooLarge)?;
        if self.vals.len() > vals {
            return Err(IoError::Internal(format!(
                "{} values assembled, header says {vals}",
                self.vals.len()
            )));
        }
        self.vals.resize(vals, V::default());
        Ok(self)
    }
}
