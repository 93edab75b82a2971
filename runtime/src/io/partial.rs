//! Reading only this rank's piece of a `.tcs` file (SuperTaco §4.4): each rank reads the
//! header, probes single elements of `pos` for its load-balancing binary search, and then
//! reads exactly the parts of `pos`, `crd` and `vals` its piece of leaves covers, a chunk at a
//! time ([`walk_chunks`]). No rank maps or reads the whole file, so a rank's memory is a
//! chunk, not the tensor.
//!
//! The parts read are checked before they are walked ([`Section::check`]). Array checksums
//! cover whole arrays and cannot be checked on a part, nor can a part show a `pos` that falls
//! between two parts: before walking, the ranks check every checksum and the level
//! invariants together, each a share (`files::verify_shared`, `files::check_levels`).

use super::held::Held;
use super::load::Meta;
use super::section::Section;
use super::sink::array_numbers;
use super::walk::{leaf_path_in, Tree, Walker};
use super::{IoError, Progress};
use std::cell::RefCell;
use std::fs::File;
use std::marker::PhantomData;
use std::path::Path;
use tessera_formats::tcs::{read_array_range, TcsHeader};
use tessera_formats::{Index, LevelType, Value};

/// An open `.tcs` file whose arrays are read element by element (for binary searches).
/// A failed read is remembered and reported by [`FileProbe::take_error`]; the probe answers
/// 0 meanwhile, which keeps any search finite.
pub(crate) struct FileProbe<'a, V, I> {
    file: &'a File,
    path: &'a Path,
    header: &'a TcsHeader,
    /// Per level: the array numbers of its `pos` and `crd`.
    arrays: Vec<Option<(usize, usize)>>,
    vals: usize,
    dense: Vec<Option<(usize, usize)>>,
    error: RefCell<Option<IoError>>,
    _types: PhantomData<(V, I)>,
}

impl<'a, V: Value, I: Index> FileProbe<'a, V, I> {
    pub fn new(
        file: &'a File,
        path: &'a Path,
        header: &'a TcsHeader,
        meta: &Meta,
    ) -> Result<Self, IoError> {
        // Files with singleton levels never get here (see `open_probe`): every compressed
        // level has a `pos`.
        let (arrays, vals) = array_numbers(header, &meta.dense)
            .and_then(|(arrays, vals)| {
                let arrays = arrays
                    .into_iter()
                    .map(|a| match a {
                        None => Some(None),
                        Some((pos, crd)) => Some(Some((pos?, crd))),
                    })
                    .collect::<Option<Vec<_>>>()?;
                Some((arrays, vals))
            })
            .ok_or_else(|| IoError::File(format!("{}: header lacks an array", path.display())))?;
        Ok(FileProbe {
            file,
            path,
            header,
            arrays,
            vals,
            dense: meta.dense.clone(),
            error: RefCell::new(None),
            _types: PhantomData,
        })
    }

    fn read<T: bytemuck::Pod>(
        &self,
        array: usize,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<T>, IoError> {
        read_array_range::<T>(
            self.file,
            self.path,
            self.header,
            array,
            range.start as u64..range.end as u64,
        )
        .map_err(|e| IoError::File(e.to_string()))
    }

    fn one<T: bytemuck::Pod>(&self, array: usize, i: usize) -> T {
        match self.read::<T>(array, i..i + 1) {
            Ok(v) => v[0],
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e);
                T::zeroed()
            }
        }
    }

    /// The first failed read, if any.
    pub fn take_error(&self) -> Option<IoError> {
        self.error.borrow_mut().take()
    }

    fn array(&self, k: usize) -> (usize, usize) {
        self.arrays[k].expect("a compressed level has pos and crd")
    }

    /// Reads the section of leaves `[start, end)` (non-empty) and checks it.
    pub fn section(&self, meta: &Meta, start: usize, end: usize) -> Result<Section<V, I>, IoError> {
        let corrupt = |what: String| IoError::File(format!("{}: {what}", self.path.display()));
        let a = leaf_path_in(self, start, &meta.bounds);
        let z = leaf_path_in(self, end - 1, &meta.bounds);
        if let Some(e) = self.take_error() {
            return Err(e);
        }
        let rank = meta.dense.len();
        let mut s = Section {
            first: a.clone(),
            start,
            end,
            dense: meta.dense.clone(),
            pos_base: vec![0; rank],
            crd_base: vec![0; rank],
            pos: vec![Vec::new(); rank],
            crd: vec![Vec::new(); rank],
            vals: Vec::new(),
        };
        for k in 0..rank {
            if meta.dense[k].is_some() {
                continue;
            }
            let (pa, pz) = if k == 0 { (0, 0) } else { (a[k - 1], z[k - 1]) };
            if pa > pz || a[k] > z[k] {
                return Err(corrupt(format!("pos of level {k} is not monotone")));
            }
            let (pos, crd) = self.array(k);
            s.pos_base[k] = pa;
            s.crd_base[k] = a[k];
            s.pos[k] = self.read(pos, pa..pz + 2)?;
            s.crd[k] = self.read(crd, a[k]..z[k] + 1)?;
        }
        s.vals = self.read(self.vals, start..end)?;
        // A block's coordinates lie in its split range (a whole tensor's: `0..dim`).
        let bound: Vec<std::ops::Range<usize>> = meta
            .format
            .mode_order()
            .iter()
            .map(|&m| {
                let mode = &self.header.modes[m];
                mode.split_lo as usize..mode.split_hi as usize
            })
            .collect();
        s.check(&bound).map_err(corrupt)?;
        Ok(s)
    }
}

impl<V: Value, I: Index> Tree for FileProbe<'_, V, I> {
    type V = V;
    fn rank(&self) -> usize {
        self.dense.len()
    }
    fn dense(&self, k: usize) -> Option<(usize, usize)> {
        self.dense[k]
    }
    fn pos(&self, k: usize, q: usize) -> usize {
        self.one::<I>(self.array(k).0, q).to_usize()
    }
    fn crd(&self, k: usize, i: usize) -> usize {
        self.one::<I>(self.array(k).1, i).to_usize()
    }
}

impl Meta {
    /// What loading needs, from a checked `.tcs` header.
    pub(crate) fn of_header<V: Value>(header: &TcsHeader) -> Result<Meta, IoError> {
        let mut dense = Vec::new();
        let mut bounds = Vec::new();
        let mut parents: usize = 1;
        for l in &header.levels {
            match l.level_type {
                LevelType::Dense => {
                    dense.push(Some((l.size as usize, l.offset as usize)));
                    bounds.push((0, 0));
                    parents = parents
                        .checked_mul(l.size as usize)
                        .ok_or(IoError::TooLarge)?;
                }
                LevelType::Compressed => {
                    dense.push(None);
                    bounds.push((0, parents.saturating_sub(1)));
                    parents = l.size as usize;
                }
                LevelType::Singleton => return Err(super::coo::file_error(&header.format())),
            }
        }
        Ok(Meta {
            dims: header.dims(),
            format: header.format(),
            dense,
            bounds,
            leaves: header.nnz as usize,
            bytes: header.arrays.iter().map(|a| a.len).sum(),
            index_bytes: u64::from(header.index_bits / 8),
            value_bytes: std::mem::size_of::<V>() as u64,
        })
    }
}

/// Leaves a rank reads from a file at once while it walks its piece: 256 Ki, about 6 MiB for
/// a rank-3 tensor with 32-bit coordinates and f64 values. Each chunk costs two position
/// searches of a few dozen single-element reads, so chunks this large make them negligible.
/// Unit tests use a handful, so that their small tensors cross many chunk boundaries.
pub(crate) const CHUNK_LEAVES: usize = if cfg!(test) { 5 } else { 1 << 18 };

/// Opens `header`'s arrays for reading parts of them, checking what loading needs (a tensor,
/// not a scalar, of the grid's dimensions).
pub(crate) fn open_probe<'a, V: Value, I: Index>(
    file: &'a File,
    path: &'a Path,
    header: &'a TcsHeader,
    dims: &[usize],
) -> Result<(FileProbe<'a, V, I>, Meta), IoError> {
    match header.dims() {
        d if d.is_empty() => Err(IoError::Scalar),
        d if d != dims => Err(IoError::GridDims {
            tensor: d,
            grid: dims.to_vec(),
        }),
        _ => {
            let meta = Meta::of_header::<V>(header)?;
            Ok((FileProbe::new(file, path, header, &meta)?, meta))
        }
    }
}

/// Walks leaves `[start, end)` of the file chunk by chunk ([`CHUNK_LEAVES`]): reads and checks
/// each chunk's section and hands `f` a walker over it. Memory stays one chunk, whatever the
/// piece; the entries reach `f` in storage order, as one walk would give them.
pub(crate) fn walk_chunks<V: Value, I: Index>(
    probe: &FileProbe<'_, V, I>,
    meta: &Meta,
    (start, end): (usize, usize),
    progress: &dyn Progress,
    mut f: impl FnMut(&mut Walker<'_, Section<V, I>>),
) -> Result<(), IoError> {
    let mut a = start;
    while a < end {
        if progress.cancelled() {
            return Err(IoError::Cancelled);
        }
        let b = end.min(a.saturating_add(CHUNK_LEAVES));
        let section = probe.section(meta, a, b)?;
        let _held = Held::new(section.bytes());
        let first = section.first.clone();
        f(&mut Walker::new(&section, a, b, first));
        a = b;
    }
    Ok(())
}
