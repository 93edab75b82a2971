//! Building level arrays from entries that arrive sorted in storage (level) order.
//!
//! Every array is appended to strictly sequentially, so the same [`Packer`] fills in-memory
//! vectors ([`Tensor::from_entries`](crate::Tensor::from_entries)), counts level sizes without
//! storing anything (pass one of a streaming conversion, with [`CountSink`]), and streams arrays
//! into a file at precomputed offsets (pass two).

use crate::format::{Format, LevelType};
use crate::tensor::TensorError;
use crate::value::{Index, Value};

/// Somewhere a level array is appended to, one element at a time.
pub trait Sink<T> {
    /// Error a sink may raise (I/O for file sinks; never for vectors).
    type Error;
    /// Appends `n` copies of `x`.
    fn push_n(&mut self, x: T, n: usize) -> Result<(), Self::Error>;
    /// Appends one element.
    fn push(&mut self, x: T) -> Result<(), Self::Error> {
        self.push_n(x, 1)
    }
}

impl<T: Copy> Sink<T> for Vec<T> {
    type Error = std::convert::Infallible;
    fn push_n(&mut self, x: T, n: usize) -> Result<(), Self::Error> {
        self.resize(self.len() + n, x);
        Ok(())
    }
    fn push(&mut self, x: T) -> Result<(), Self::Error> {
        Vec::push(self, x);
        Ok(())
    }
}

/// A sink that stores nothing and only counts (pass one of a conversion).
#[derive(Clone, Copy, Debug, Default)]
pub struct CountSink(pub usize);

impl<T> Sink<T> for CountSink {
    type Error = std::convert::Infallible;
    fn push_n(&mut self, _x: T, n: usize) -> Result<(), Self::Error> {
        self.0 += n;
        Ok(())
    }
}

/// Why packing failed: the input broke an invariant, or a sink failed.
#[derive(Debug)]
pub enum PackError<E> {
    Tensor(TensorError),
    Sink(E),
}

impl<E> From<TensorError> for PackError<E> {
    fn from(e: TensorError) -> Self {
        PackError::Tensor(e)
    }
}

/// The arrays of one compressed or singleton level while it is being built (a singleton
/// level never appends to `pos`).
struct CompressedState<S> {
    singleton: bool,
    pos: Option<S>,
    crd: S,
    pos_len: usize,
    crd_len: usize,
}

/// A finished packer's arrays per level: `None` for a dense level, else its `pos` (`None`
/// for a singleton level) and its `crd`.
pub type PackedArrays<S> = Vec<Option<(Option<S>, S)>>;

/// Final number of positions per level and the arrays' lengths, from [`Packer::finish`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedSizes {
    /// Number of positions (nodes) at each level.
    pub positions: Vec<usize>,
    /// Length of the `vals` array (= positions of the last level; 1 for a scalar).
    pub vals: usize,
}

/// Appends sorted, duplicate-free entries (coordinates in level order) to level arrays.
pub struct Packer<V, I, S, VS> {
    types: Vec<LevelType>,
    /// Dense levels: (size, offset).
    dense: Vec<(usize, usize)>,
    /// Exclusive upper bound of coordinates per level (the dimension of its mode).
    bounds: Vec<usize>,
    compressed: Vec<Option<CompressedState<S>>>,
    /// The non-unique level that starts a run of singletons: from it down, every entry gets
    /// new positions, even where its coordinates equal the previous entry's.
    coo_start: usize,
    vals: VS,
    vals_len: usize,
    prev: Vec<usize>,
    node: Vec<usize>,
    started: bool,
    count: usize,
    _marker: std::marker::PhantomData<(V, I)>,
}

impl<V, I, S, VS, E> Packer<V, I, S, VS>
where
    V: Value,
    I: Index,
    S: Sink<I, Error = E>,
    VS: Sink<V, Error = E>,
{
    /// A packer for `format` over mode-space `dims`; dense level `k` covers `dense[k]` =
    /// (size, offset) (ignored for other levels). `sinks` yields (pos, crd) per compressed
    /// level and (`None`, crd) per singleton level.
    pub fn new(
        dims: &[usize],
        format: &Format,
        dense: Vec<(usize, usize)>,
        mut sinks: impl FnMut(usize) -> (Option<S>, S),
        vals: VS,
    ) -> Self {
        let rank = format.rank();
        let types = format.levels().to_vec();
        let compressed = (0..rank)
            .map(|k| match types[k] {
                LevelType::Compressed | LevelType::Singleton => {
                    let (pos, crd) = sinks(k);
                    Some(CompressedState {
                        singleton: types[k] == LevelType::Singleton,
                        pos,
                        crd,
                        pos_len: 0,
                        crd_len: 0,
                    })
                }
                LevelType::Dense => None,
            })
            .collect();
        let bounds = format.mode_order().iter().map(|&m| dims[m]).collect();
        Packer {
            types,
            dense,
            bounds,
            compressed,
            coo_start: format.coo_start().unwrap_or(rank),
            vals,
            vals_len: 0,
            prev: vec![0; rank],
            node: vec![0; rank],
            started: false,
            count: 0,
            _marker: std::marker::PhantomData,
        }
    }

    /// Number of entries pushed so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Appends one entry; `coords[k]` is its coordinate at level `k`. Entries must arrive in
    /// strictly increasing lexicographic order.
    pub fn push(&mut self, coords: &[usize], v: V) -> Result<(), PackError<E>> {
        let rank = self.types.len();
        let first_new = if self.started {
            match coords.iter().zip(&self.prev).position(|(a, b)| a != b) {
                None => return Err(TensorError::Duplicate { entry: self.count }.into()),
                Some(k) if coords[k] < self.prev[k] => {
                    return Err(TensorError::NotSorted { entry: self.count }.into())
                }
                Some(k) => k.min(self.coo_start),
            }
        } else {
            0
        };
        for (k, &c) in coords.iter().enumerate().skip(first_new) {
            if c >= self.bounds[k] {
                return Err(TensorError::CoordOutOfRange {
                    entry: self.count,
                    level: k,
                    coord: c,
                    bound: self.bounds[k],
                }
                .into());
            }
            let parent = if k == 0 { 0 } else { self.node[k - 1] };
            self.node[k] = match &mut self.compressed[k] {
                None => {
                    let (size, offset) = self.dense[k];
                    if c < offset || c - offset >= size {
                        return Err(TensorError::OutsideDenseRange {
                            entry: self.count,
                            level: k,
                            coord: c,
                            offset,
                            size,
                        }
                        .into());
                    }
                    parent
                        .checked_mul(size)
                        .and_then(|b| b.checked_add(c - offset))
                        .ok_or(TensorError::TooLarge)?
                }
                Some(st) if st.singleton => {
                    st.crd.push(index::<I>(c)?).map_err(PackError::Sink)?;
                    st.crd_len += 1;
                    parent
                }
                Some(st) => {
                    if st.pos_len <= parent {
                        // Parents before this one are complete: record where this one starts.
                        let start = index::<I>(st.crd_len)?;
                        pos_sink(&mut st.pos)
                            .push_n(start, parent + 1 - st.pos_len)
                            .map_err(PackError::Sink)?;
                        st.pos_len = parent + 1;
                    }
                    st.crd.push(index::<I>(c)?).map_err(PackError::Sink)?;
                    st.crd_len += 1;
                    st.crd_len - 1
                }
            };
        }
        let leaf = if rank == 0 { 0 } else { self.node[rank - 1] };
        // Dense trailing levels leave gaps of explicit zeros between stored entries.
        self.vals
            .push_n(V::zero(), leaf - self.vals_len)
            .map_err(PackError::Sink)?;
        self.vals.push(v).map_err(PackError::Sink)?;
        self.vals_len = leaf + 1;
        self.prev.copy_from_slice(coords);
        self.started = true;
        self.count += 1;
        Ok(())
    }

    /// Completes every array (trailing `pos` entries, trailing zeros of dense levels) and
    /// returns the sinks with the final sizes: per level `None` when dense, else its `pos`
    /// (`None` for a singleton level) and `crd`.
    #[allow(clippy::type_complexity)]
    pub fn finish(mut self) -> Result<(PackedArrays<S>, VS, PackedSizes), PackError<E>> {
        let mut parents = 1usize;
        let mut positions = Vec::with_capacity(self.types.len());
        for k in 0..self.types.len() {
            parents = match &mut self.compressed[k] {
                None => parents
                    .checked_mul(self.dense[k].0)
                    .ok_or(TensorError::TooLarge)?,
                Some(st) if st.singleton => parents,
                Some(st) => {
                    let end = index::<I>(st.crd_len)?;
                    pos_sink(&mut st.pos)
                        .push_n(end, parents + 1 - st.pos_len)
                        .map_err(PackError::Sink)?;
                    st.pos_len = parents + 1;
                    st.crd_len
                }
            };
            positions.push(parents);
        }
        self.vals
            .push_n(V::zero(), parents - self.vals_len)
            .map_err(PackError::Sink)?;
        let levels = self
            .compressed
            .into_iter()
            .map(|c| c.map(|st| (st.pos, st.crd)))
            .collect();
        Ok((
            levels,
            self.vals,
            PackedSizes {
                positions,
                vals: parents,
            },
        ))
    }
}

impl<V: Value, I: Index> Packer<V, I, Vec<I>, Vec<V>> {
    /// A packer into vectors (see [`Packer::new`]); [`Level::from_packed`](crate::Level::from_packed)
    /// turns its finished arrays into levels.
    pub fn in_memory(dims: &[usize], format: &Format, dense: Vec<(usize, usize)>) -> Self {
        let compressed: Vec<bool> = format
            .levels()
            .iter()
            .map(|l| *l == LevelType::Compressed)
            .collect();
        Packer::new(
            dims,
            format,
            dense,
            |k| (compressed[k].then(Vec::new), Vec::new()),
            Vec::new(),
        )
    }
}

/// The `pos` sink of a compressed level (only singleton levels have none).
fn pos_sink<S>(pos: &mut Option<S>) -> &mut S {
    pos.as_mut()
        .expect("the caller gives a pos sink for every compressed level")
}

fn index<I: Index>(x: usize) -> Result<I, TensorError> {
    I::try_from_usize(x).ok_or(TensorError::IndexOverflow {
        value: x as u64,
        bits: I::BITS,
    })
}
