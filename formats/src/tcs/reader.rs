//! Reading `.tcs` files: read into memory with positioned reads and validated in full before
//! any slice is handed out, and partial reads of one array's element range for distributed
//! loading.
//!
//! Why not a memory map: a map shows whatever the file holds *now*. If another process
//! truncates the file while it is mapped, touching a page past the new end raises SIGBUS (a
//! crash no error handling can turn into a message), and if it rewrites bytes in place, data
//! that passed validation changes under the kernels that trust it. A copy taken with `pread`
//! cannot change after validation, and a file that shrinks while it is read is an ordinary
//! error. Validation touches every byte anyway (checksums), so the copy costs one `memcpy` per
//! byte from the page cache; the price is resident memory equal to the file's size (readers of
//! files larger than memory use [`read_array_range`], as `split` does).

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::header::{ArrayInfo, ArrayKind, TcsHeader, SEGMENTED};
use super::{align_up, TcsError};
use crate::convert::{NoProgress, Progress};
use crate::error::{Error, Result};
use crate::format::{Format, LevelType};
use crate::tensor::Tensor;
use crate::value::{Index, Value};
use crate::view::{validate_levels_with, LevelView, TensorView};

/// Bytes read (and checksummed) per step, between progress reports.
const STEP_BYTES: usize = 32 << 20;

/// A validated `.tcs` file, held in memory.
pub struct TcsFile {
    path: PathBuf,
    header: TcsHeader,
    dims: Vec<usize>,
    format: Format,
    /// The whole file, in 64-byte lines so that every array (at a multiple of 64 bytes in the
    /// file) is 64-byte aligned in memory, as in a page-aligned map; for a segmented
    /// (version 3) file, its arrays gathered from their extents, each at a multiple of 64.
    data: Vec<Line>,
    /// Byte offset of each array in `data`.
    places: Vec<u64>,
}

/// 64 bytes, 64-byte aligned.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Zeroed, 64-byte aligned memory for `len` bytes.
fn lines(len: usize) -> Vec<Line> {
    vec![Line([0; 64]); len.div_ceil(64)]
}

impl TcsFile {
    /// Reads `path` and validates everything: header fields and checksum, layout against the
    /// file length, every array's checksum, monotone `pos`, `crd` in range (and inside the
    /// block's split range), and level sizes that agree with the arrays.
    pub fn open(path: &Path) -> Result<TcsFile> {
        Self::open_with_progress(path, &NoProgress)
    }

    /// [`open`](Self::open), reporting the read and checksum pass (in bytes) to `progress`.
    pub fn open_with_progress(path: &Path, progress: &dyn Progress) -> Result<TcsFile> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let header = TcsHeader::read_from(&file, path)?;
        if header.version >= SEGMENTED {
            let total = header.arrays.iter().map(|a| a.len).sum();
            progress.stage("validate", total);
            let mut done = 0;
            let read = |buf: &mut [u8], at| {
                read_exact_at(&file, path, buf, at)?;
                done += buf.len() as u64;
                progress.update(done);
                Ok(())
            };
            let gathered = gather(path, &header, read);
            let unchanged = check_length(&file, path, &header);
            progress.end_stage();
            let (data, places) = gathered?;
            unchanged?;
            return Self::validated(path, header, data, places);
        }
        let mut data = lines(header.file_len as usize);
        let bytes =
            &mut bytemuck::cast_slice_mut::<Line, u8>(&mut data)[..header.file_len as usize];
        progress.stage("validate", header.file_len);
        let mut done = 0usize;
        for piece in bytes.chunks_mut(STEP_BYTES) {
            if let Err(e) = read_exact_at(&file, path, piece, done as u64) {
                progress.end_stage();
                return Err(e);
            }
            done += piece.len();
            progress.update(done as u64);
        }
        let unchanged = check_length(&file, path, &header);
        progress.end_stage();
        unchanged?;
        let places = header.arrays.iter().map(|a| a.offset).collect();
        Self::validated(path, header, data, places)
    }

    /// Validates a whole file given as bytes (for tools and fuzzing); `path` only names it in
    /// errors.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<TcsFile> {
        let header = TcsHeader::parse(bytes, bytes.len() as u64).map_err(|source| Error::Tcs {
            path: path.to_path_buf(),
            source,
        })?;
        if header.version >= SEGMENTED {
            let read = |buf: &mut [u8], at: u64| {
                buf.copy_from_slice(&bytes[at as usize..at as usize + buf.len()]);
                Ok(())
            };
            let (data, places) = gather(path, &header, read)?;
            return Self::validated(path, header, data, places);
        }
        let mut data = lines(bytes.len());
        bytemuck::cast_slice_mut::<Line, u8>(&mut data)[..bytes.len()].copy_from_slice(bytes);
        let places = header.arrays.iter().map(|a| a.offset).collect();
        Self::validated(path, header, data, places)
    }

    fn validated(
        path: &Path,
        header: TcsHeader,
        data: Vec<Line>,
        places: Vec<u64>,
    ) -> Result<TcsFile> {
        let f = TcsFile {
            path: path.to_path_buf(),
            dims: header.dims(),
            format: header.format(),
            header,
            data,
            places,
        };
        f.validate().map_err(|source| Error::Tcs {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(f)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed header.
    pub fn header(&self) -> &TcsHeader {
        &self.header
    }

    /// Mode-space dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Storage format.
    pub fn format(&self) -> &Format {
        &self.format
    }

    /// The file's bytes (or a segmented file's gathered arrays).
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice::<Line, u8>(&self.data)
    }

    /// The raw bytes of one array (one of [`header`](Self::header)'s `arrays`).
    pub fn array_bytes(&self, a: &ArrayInfo) -> &[u8] {
        let i = self
            .header
            .arrays
            .iter()
            .position(|b| (b.kind, b.level) == (a.kind, a.level))
            .expect("an array of this file");
        let at = self.places[i] as usize;
        &self.bytes()[at..at + self.header.arrays[i].len as usize]
    }

    /// The file as it would be written with contiguous arrays (version 1 or 2): the same bytes
    /// for the same tensor however its arrays were segmented (a version-3 file depends on the
    /// blocks its writer appended), so equal contents compare equal byte for byte.
    pub fn contiguous_bytes(&self) -> Vec<u8> {
        let h = &self.header;
        let mut plain = TcsHeader::new(
            h.value_type,
            h.index_bits,
            h.is_block,
            h.modes.clone(),
            h.levels.clone(),
        )
        .expect("a valid header lays out again");
        let mut out = vec![0u8; plain.file_len as usize];
        for (p, a) in plain.arrays.iter_mut().zip(&h.arrays) {
            p.crc32 = a.crc32;
            out[p.offset as usize..(p.offset + p.len) as usize]
                .copy_from_slice(self.array_bytes(a));
        }
        let head = plain.to_bytes();
        out[..head.len()].copy_from_slice(&head);
        out
    }

    fn validate(&self) -> Result<(), TcsError> {
        if self.header.version < SEGMENTED {
            // A segmented file's gaps were checked as it was gathered.
            for g in self.header.gaps() {
                check_zero(&self.bytes()[g.start as usize..g.end as usize], g.start)?;
            }
        }
        for a in &self.header.arrays {
            check_crc(a, self.array_bytes(a))?;
        }
        let h = &self.header;
        crate::with_types!(h.value_type, h.index_bits, |W, J| {
            let (levels, vals) = self.slices::<W, J>()?;
            validate_contents(h, &self.dims, &self.format, &levels, vals.len())
        })
    }

    /// Level views and values, cast from the data (alignment is guaranteed by the layout and
    /// checked again by `bytemuck`).
    #[allow(clippy::type_complexity)]
    fn slices<V: Value, I: Index>(&self) -> Result<(Vec<LevelView<'_, I>>, &[V]), TcsError> {
        let cast = |a: &ArrayInfo| {
            bytemuck::try_cast_slice::<u8, I>(self.array_bytes(a))
                .map_err(|e| TcsError::Invalid(format!("{}: {e:?}", a.name())))
        };
        let mut arrays = self.header.arrays.iter();
        let mut levels = Vec::with_capacity(self.header.levels.len());
        for l in &self.header.levels {
            levels.push(match l.level_type {
                LevelType::Dense => LevelView::dense(l.size as usize, l.offset as usize),
                LevelType::Compressed => {
                    let (pos, crd) = (
                        arrays.next().expect("layout"),
                        arrays.next().expect("layout"),
                    );
                    debug_assert_eq!((pos.kind, crd.kind), (ArrayKind::Pos, ArrayKind::Crd));
                    LevelView::Compressed {
                        pos: cast(pos)?,
                        crd: cast(crd)?,
                    }
                }
                LevelType::Singleton => {
                    let crd = arrays.next().expect("layout");
                    debug_assert_eq!(crd.kind, ArrayKind::Crd);
                    LevelView::Singleton { crd: cast(crd)? }
                }
            });
        }
        let vals_info = arrays.next().expect("layout");
        let vals = bytemuck::try_cast_slice::<u8, V>(self.array_bytes(vals_info))
            .map_err(|e| TcsError::Invalid(format!("vals: {e:?}")))?;
        Ok((levels, vals))
    }

    fn check_types<V: Value, I: Index>(&self) -> Result<()> {
        check_types::<V, I>(&self.header, &self.path)
    }

    /// A zero-copy view of the tensor; `V` and `I` must match the file's types.
    pub fn view<V: Value, I: Index>(&self) -> Result<TensorView<'_, V, I>> {
        self.check_types::<V, I>()?;
        let (levels, vals) = self.slices::<V, I>().map_err(|source| Error::Tcs {
            path: self.path.clone(),
            source,
        })?;
        Ok(TensorView::new_unchecked(
            &self.dims,
            &self.format,
            levels,
            vals,
        ))
    }

    /// Copies the tensor into memory; `V` and `I` must match the file's types.
    pub fn to_tensor<V: Value, I: Index>(&self) -> Result<Tensor<V, I>> {
        let view = self.view::<V, I>()?;
        let levels = view
            .levels()
            .iter()
            .map(|l| match *l {
                LevelView::Dense { size, offset, .. } => crate::Level::Dense { size, offset },
                LevelView::Compressed { pos, crd } => crate::Level::Compressed {
                    pos: pos.to_vec(),
                    crd: crd.to_vec(),
                },
                LevelView::Singleton { crd } => crate::Level::Singleton { crd: crd.to_vec() },
            })
            .collect();
        Tensor::from_parts(
            self.dims.clone(),
            self.format.clone(),
            levels,
            view.vals().to_vec(),
        )
        .map_err(|source| Error::Tensor {
            path: self.path.clone(),
            source,
        })
    }
}

/// A segmented file's arrays gathered from their extents into aligned memory, each at a
/// multiple of 64 bytes (as in an unsegmented file), and where each starts; `read` fills a
/// buffer from a file offset. Checks that the gaps between extents are zero bytes.
fn gather(
    path: &Path,
    header: &TcsHeader,
    mut read: impl FnMut(&mut [u8], u64) -> Result<()>,
) -> Result<(Vec<Line>, Vec<u64>)> {
    let mut places = Vec::with_capacity(header.arrays.len());
    let mut at = 0u64;
    for a in &header.arrays {
        places.push(at);
        at = align_up(at + a.len).expect("the file's length bounds its arrays'");
    }
    let mut data = lines(at as usize);
    let bytes = bytemuck::cast_slice_mut::<Line, u8>(&mut data);
    let mut filled = places.clone();
    for e in &header.extents {
        let to = &mut filled[e.array as usize];
        read(&mut bytes[*to as usize..(*to + e.len) as usize], e.offset)?;
        *to += e.len;
    }
    for g in header.gaps() {
        let mut gap = vec![0u8; (g.end - g.start) as usize];
        read(&mut gap, g.start)?;
        check_zero(&gap, g.start).map_err(|source| Error::Tcs {
            path: path.to_path_buf(),
            source,
        })?;
    }
    Ok((data, places))
}

/// Reads a `.tcs` file of value type `V` and coordinates `I` straight into a tensor's own
/// arrays, checked exactly as [`TcsFile::open`] checks a file (zero gaps, every array's
/// checksum, the levels) before the tensor is handed out. `TcsFile::open` followed by
/// [`TcsFile::to_tensor`] copies every array twice and checks the levels twice; this copies
/// once from the page cache, into memory the tensor keeps.
pub fn read_tensor<V: Value, I: Index>(path: &Path) -> Result<Tensor<V, I>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let header = TcsHeader::read_from(&file, path)?;
    check_types::<V, I>(&header, path)?;
    let err = |source| Error::Tcs {
        path: path.to_path_buf(),
        source,
    };
    let vals_index = header.arrays.len() - 1;
    let vals_info = &header.arrays[vals_index];
    let reader = ArrayReader {
        file: &file,
        path,
        header: &header,
    };
    let (dims, format) = (header.dims(), header.format());
    // `vals` (about half the bytes) is read and checksummed on a second thread while this one
    // reads and checks the levels: two cores copy from the page cache at once.
    let (levels, vals) = std::thread::scope(|s| {
        let big = vals_info.len >= PARALLEL_BYTES;
        let vals = big.then(|| s.spawn(|| reader.read::<V>(vals_index)));
        let levels = reader.gaps().and_then(|()| read_levels::<I>(&reader));
        let vals_len = (vals_info.len / std::mem::size_of::<V>() as u64) as usize;
        let checked = levels.and_then(|levels| {
            let views: Vec<LevelView<'_, I>> = levels.iter().map(crate::Level::view).collect();
            validate_contents(&header, &dims, &format, &views, vals_len).map_err(err)?;
            Ok(levels)
        });
        let vals = match vals {
            Some(h) => h.join().expect("the vals reader does not panic"),
            None => reader.read::<V>(vals_index),
        };
        Ok::<_, Error>((checked?, vals?))
    })?;
    check_length(&file, path, &header)?;
    Ok(Tensor::from_validated(dims, format, levels, vals))
}

/// Arrays at least this long are read on a thread of their own.
const PARALLEL_BYTES: u64 = 4 << 20;

/// The levels of the file, their arrays read by `r`.
fn read_levels<I: Index>(r: &ArrayReader<'_>) -> Result<Vec<crate::Level<I>>> {
    let mut arrays = 0..r.header.arrays.len() - 1;
    let mut next = || arrays.next().expect("the header lists an array per level");
    let mut levels = Vec::with_capacity(r.header.levels.len());
    for l in &r.header.levels {
        levels.push(match l.level_type {
            LevelType::Dense => crate::Level::Dense {
                size: l.size as usize,
                offset: l.offset as usize,
            },
            LevelType::Compressed => crate::Level::Compressed {
                pos: r.read(next())?,
                crd: r.read(next())?,
            },
            LevelType::Singleton => crate::Level::Singleton {
                crd: r.read(next())?,
            },
        });
    }
    Ok(levels)
}

/// Reads the arrays of a file (from their extents) and checks its gaps.
struct ArrayReader<'f> {
    file: &'f File,
    path: &'f Path,
    header: &'f TcsHeader,
}

impl ArrayReader<'_> {
    /// The alignment gaps between arrays (or extents) are zero bytes.
    fn gaps(&self) -> Result<()> {
        for g in self.header.gaps() {
            let mut gap = vec![0u8; (g.end - g.start) as usize];
            self.read_at(&mut gap, g.start)?;
            check_zero(&gap, g.start).map_err(|source| Error::Tcs {
                path: self.path.to_path_buf(),
                source,
            })?;
        }
        Ok(())
    }

    /// Array number `i` as elements of `T`, its checksum checked.
    fn read<T: bytemuck::Pod>(&self, i: usize) -> Result<Vec<T>> {
        let a = &self.header.arrays[i];
        let in_file = |source| Error::Tcs {
            path: self.path.to_path_buf(),
            source,
        };
        let size = std::mem::size_of::<T>() as u64;
        if !a.len.is_multiple_of(size) {
            return Err(in_file(TcsError::Invalid(format!(
                "{}: {} bytes is not a whole number of {size}-byte elements",
                a.name(),
                a.len
            ))));
        }
        let mut v: Vec<T> = bytemuck::zeroed_vec((a.len / size) as usize);
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
        let mut to = 0;
        for (offset, len) in self.header.array_extents(i) {
            self.read_at(&mut bytes[to..to + len as usize], offset)?;
            to += len as usize;
        }
        check_crc(a, bytemuck::cast_slice(&v)).map_err(in_file)?;
        Ok(v)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        read_exact_at(self.file, self.path, buf, offset)
    }
}

/// Reads `buf.len()` bytes at `offset`. The header was read from a file of `file_len` bytes, so
/// reaching its end early means the file shrank since: [`TcsError::Changed`].
fn read_exact_at(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::Tcs {
                path: path.to_path_buf(),
                source: TcsError::Changed,
            }
        } else {
            Error::io(path, e)
        }
    })
}

/// After a read: a file that grew meanwhile is not the file the header describes either.
fn check_length(file: &File, path: &Path, header: &TcsHeader) -> Result<()> {
    if file.metadata().map_err(|e| Error::io(path, e))?.len() != header.file_len {
        return Err(Error::Tcs {
            path: path.to_path_buf(),
            source: TcsError::Changed,
        });
    }
    Ok(())
}

/// Gaps between arrays are alignment padding and must be zero; `at` is the gap's offset.
fn check_zero(gap: &[u8], at: u64) -> Result<(), TcsError> {
    match gap.iter().position(|&b| b != 0) {
        Some(i) => Err(TcsError::Padding(at + i as u64)),
        None => Ok(()),
    }
}

fn check_crc(a: &ArrayInfo, bytes: &[u8]) -> Result<(), TcsError> {
    let computed = crc32fast::hash(bytes);
    if computed != a.crc32 {
        return Err(TcsError::ArrayChecksum {
            array: a.name(),
            recorded: a.crc32,
            computed,
        });
    }
    Ok(())
}

/// The checks on the arrays' contents: the levels (monotone `pos`, ordered `crd` below the
/// dimensions, lengths), level sizes as recorded, and a block's coordinates inside its split.
fn validate_contents<I: Index>(
    header: &TcsHeader,
    dims: &[usize],
    format: &Format,
    levels: &[LevelView<'_, I>],
    vals_len: usize,
) -> Result<(), TcsError> {
    validate_levels_with(dims, format, levels, vals_len, &mut || {})?;
    for (k, (level, info)) in levels.iter().zip(&header.levels).enumerate() {
        let mode = header.modes[info.mode as usize];
        if let LevelView::Compressed { crd, .. } | LevelView::Singleton { crd } = level {
            if info.size != crd.len() as u64 {
                return Err(TcsError::Field {
                    what: format!("size of level {k}"),
                    recorded: info.size,
                    expected: crd.len() as u64,
                });
            }
            // Coordinates are already known to be below the dimension; a block must also
            // keep them inside its split range.
            let whole = mode.split_lo == 0 && mode.split_hi == mode.dim;
            if !whole {
                let outside = crd
                    .iter()
                    .map(|c| c.to_usize() as u64)
                    .find(|&c| c < mode.split_lo || c >= mode.split_hi);
                if let Some(c) = outside {
                    return Err(TcsError::OutsideSplit {
                        level: k,
                        coord: c,
                        lo: mode.split_lo,
                        hi: mode.split_hi,
                    });
                }
            }
        }
    }
    Ok(())
}

fn check_types<V: Value, I: Index>(header: &TcsHeader, path: &Path) -> Result<()> {
    if V::TYPE != header.value_type || I::BITS != header.index_bits {
        return Err(Error::Tcs {
            path: path.to_path_buf(),
            source: TcsError::TypeMismatch {
                file_value: header.value_type.name(),
                file_bits: header.index_bits,
                want_value: V::TYPE.name(),
                want_bits: I::BITS,
            },
        });
    }
    Ok(())
}

/// Reads elements `elems` of one array of an open `.tcs` file without mapping or reading the
/// rest of the file (for distributed loading). Checks the element type's size against the
/// header and the range against the array; the array checksum cannot be checked on a part,
/// so callers that need it should validate the whole file once with [`TcsFile::open`].
pub fn read_array_range<T: bytemuck::Pod>(
    file: &File,
    path: &Path,
    header: &TcsHeader,
    array: usize,
    elems: Range<u64>,
) -> Result<Vec<T>> {
    let a = header.arrays.get(array).ok_or_else(|| Error::Unsupported {
        path: path.to_path_buf(),
        what: format!(
            "array {array} does not exist ({} arrays)",
            header.arrays.len()
        ),
    })?;
    let size = std::mem::size_of::<T>() as u64;
    let expected = match a.kind {
        ArrayKind::Vals => header.value_type.size() as u64,
        _ => header.index_bits as u64 / 8,
    };
    let bad = |what: String| Error::Unsupported {
        path: path.to_path_buf(),
        what,
    };
    if size != expected {
        return Err(bad(format!(
            "{} has {expected}-byte elements, asked for {size}-byte",
            a.name()
        )));
    }
    if elems.start > elems.end || elems.end > a.len / size {
        return Err(bad(format!(
            "range {elems:?} is outside {} ({} elements)",
            a.name(),
            a.len / size
        )));
    }
    let mut out = vec![T::zeroed(); (elems.end - elems.start) as usize];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
    // The range, in bytes of the array, mapped through its extents.
    let (want, mut to) = (elems.start * size..elems.end * size, 0usize);
    let mut start = 0u64;
    for (offset, len) in header.array_extents(array) {
        let (lo, hi) = (want.start.max(start), want.end.min(start + len));
        if lo < hi {
            let n = (hi - lo) as usize;
            file.read_exact_at(&mut bytes[to..to + n], offset + (lo - start))
                .map_err(|e| Error::io(path, e))?;
            to += n;
        }
        start += len;
    }
    Ok(out)
}
