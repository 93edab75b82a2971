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

use super::header::{ArrayInfo, ArrayKind, TcsHeader};
use super::TcsError;
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
    /// file) is 64-byte aligned in memory, as in a page-aligned map.
    data: Vec<Line>,
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
        Self::validated(path, header, data)
    }

    /// Validates a whole file given as bytes (for tools and fuzzing); `path` only names it in
    /// errors.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<TcsFile> {
        let header = TcsHeader::parse(bytes, bytes.len() as u64).map_err(|source| Error::Tcs {
            path: path.to_path_buf(),
            source,
        })?;
        let mut data = lines(bytes.len());
        bytemuck::cast_slice_mut::<Line, u8>(&mut data)[..bytes.len()].copy_from_slice(bytes);
        Self::validated(path, header, data)
    }

    fn validated(path: &Path, header: TcsHeader, data: Vec<Line>) -> Result<TcsFile> {
        let f = TcsFile {
            path: path.to_path_buf(),
            dims: header.dims(),
            format: header.format(),
            header,
            data,
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

    /// The whole file's bytes.
    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<Line, u8>(&self.data)[..self.header.file_len as usize]
    }

    /// The raw bytes of one array.
    pub fn array_bytes(&self, a: &ArrayInfo) -> &[u8] {
        &self.bytes()[a.offset as usize..(a.offset + a.len) as usize]
    }

    fn validate(&self) -> Result<(), TcsError> {
        let mut at = self.header.header_len;
        for a in &self.header.arrays {
            check_zero(&self.bytes()[at as usize..a.offset as usize], at)?;
            check_crc(a, self.array_bytes(a))?;
            at = a.offset + a.len;
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
    let (vals_info, level_arrays) = header.arrays.split_last().expect("vals is always there");
    let reader = |at| ArrayReader {
        file: &file,
        path,
        at,
    };
    let vals_at = level_arrays
        .last()
        .map_or(header.header_len, |a| a.offset + a.len);
    let (dims, format) = (header.dims(), header.format());
    // `vals` (about half the bytes) is read and checksummed on a second thread while this one
    // reads and checks the levels: two cores copy from the page cache at once.
    let (levels, vals) = std::thread::scope(|s| {
        let big = vals_info.len >= PARALLEL_BYTES;
        let vals = big.then(|| s.spawn(|| reader(vals_at).read::<V>(vals_info)));
        let levels = read_levels::<I>(&header, level_arrays, reader(header.header_len));
        let vals_len = (vals_info.len / std::mem::size_of::<V>() as u64) as usize;
        let checked = levels.and_then(|levels| {
            let views: Vec<LevelView<'_, I>> = levels.iter().map(crate::Level::view).collect();
            validate_contents(&header, &dims, &format, &views, vals_len).map_err(err)?;
            Ok(levels)
        });
        let vals = match vals {
            Some(h) => h.join().expect("the vals reader does not panic"),
            None => reader(vals_at).read::<V>(vals_info),
        };
        Ok::<_, Error>((checked?, vals?))
    })?;
    check_length(&file, path, &header)?;
    Ok(Tensor::from_validated(dims, format, levels, vals))
}

/// Arrays at least this long are read on a thread of their own.
const PARALLEL_BYTES: u64 = 4 << 20;

/// The levels of `header`, their arrays (`arrays`, in file order) read by `r`.
fn read_levels<I: Index>(
    header: &TcsHeader,
    arrays: &[ArrayInfo],
    mut r: ArrayReader<'_>,
) -> Result<Vec<crate::Level<I>>> {
    let mut arrays = arrays.iter();
    let mut next = || arrays.next().expect("the header lists an array per level");
    let mut levels = Vec::with_capacity(header.levels.len());
    for l in &header.levels {
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

/// Reads the arrays of a file in order, checking the gaps before them.
struct ArrayReader<'f> {
    file: &'f File,
    path: &'f Path,
    /// Where the previous array ended.
    at: u64,
}

impl ArrayReader<'_> {
    /// Array `a` as elements of `T`, its checksum and the zero gap before it checked.
    fn read<T: bytemuck::Pod>(&mut self, a: &ArrayInfo) -> Result<Vec<T>> {
        let mut gap = vec![0u8; (a.offset - self.at) as usize];
        self.read_at(&mut gap, self.at)?;
        let in_file = |source| Error::Tcs {
            path: self.path.to_path_buf(),
            source,
        };
        check_zero(&gap, self.at).map_err(in_file)?;
        let size = std::mem::size_of::<T>() as u64;
        if !a.len.is_multiple_of(size) {
            return Err(in_file(TcsError::Invalid(format!(
                "{}: {} bytes is not a whole number of {size}-byte elements",
                a.name(),
                a.len
            ))));
        }
        let mut v: Vec<T> = bytemuck::zeroed_vec((a.len / size) as usize);
        self.read_at(bytemuck::cast_slice_mut(&mut v), a.offset)?;
        check_crc(a, bytemuck::cast_slice(&v)).map_err(in_file)?;
        self.at = a.offset + a.len;
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
    file.read_exact_at(bytes, a.offset + elems.start * size)
        .map_err(|e| Error::io(path, e))?;
    Ok(out)
}
