//! Reading `.tcs` files: a memory map validated in full before any slice is handed out, and
//! partial reads of one array's element range for distributed loading.

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
use crate::value::{Index, Value, ValueType};
use crate::view::{validate_levels_with, LevelView, TensorView, TICK_ELEMENTS};

/// Bytes checksummed between releases of mapped pages.
const RELEASE_BYTES: usize = 32 << 20;

/// A validated, memory-mapped `.tcs` file.
pub struct TcsFile {
    path: PathBuf,
    header: TcsHeader,
    dims: Vec<usize>,
    format: Format,
    map: memmap2::Mmap,
}

impl TcsFile {
    /// Maps `path` and validates everything: header fields and checksum, layout against the
    /// file length, every array's checksum, monotone `pos`, `crd` in range (and inside the
    /// block's split range), and level sizes that agree with the arrays.
    pub fn open(path: &Path) -> Result<TcsFile> {
        Self::open_with_progress(path, &NoProgress)
    }

    /// [`open`](Self::open), reporting the checksum pass (in bytes) to `progress`.
    pub fn open_with_progress(path: &Path, progress: &dyn Progress) -> Result<TcsFile> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let header = TcsHeader::read_from(&file, path)?;
        // SAFETY: the map is read-only and every access goes through slices checked against
        // its length. Like any file-backed map it assumes no other process truncates or
        // rewrites the file while it is open; Tessera's writers never modify a file in place
        // (they rename a new file over it), so its own files keep the mapped contents intact.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let err = |source| Error::Tcs {
            path: path.to_path_buf(),
            source,
        };
        if map.len() as u64 != header.file_len {
            return Err(err(TcsError::FileLength {
                recorded: header.file_len,
                actual: map.len() as u64,
            }));
        }
        let f = TcsFile {
            path: path.to_path_buf(),
            dims: header.dims(),
            format: header.format(),
            header,
            map,
        };
        progress.stage("validate", f.header.file_len);
        let checked = f.validate(progress).map_err(err);
        progress.end_stage();
        checked?;
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

    /// The raw bytes of one array.
    pub fn array_bytes(&self, a: &ArrayInfo) -> &[u8] {
        &self.map[a.offset as usize..(a.offset + a.len) as usize]
    }

    fn validate(&self, progress: &dyn Progress) -> Result<(), TcsError> {
        let mut at = self.header.header_len;
        for a in &self.header.arrays {
            // Gaps between arrays are alignment padding and must be zero.
            if let Some(i) = self.map[at as usize..a.offset as usize]
                .iter()
                .position(|&b| b != 0)
            {
                return Err(TcsError::Padding(at + i as u64));
            }
            let computed = self.crc_releasing(a, progress);
            if computed != a.crc32 {
                return Err(TcsError::ArrayChecksum {
                    array: a.name(),
                    recorded: a.crc32,
                    computed,
                });
            }
            at = a.offset + a.len;
        }
        match (self.header.value_type, self.header.index_bits) {
            (ValueType::F32, 32) => self.validate_typed::<f32, u32>(),
            (ValueType::F32, _) => self.validate_typed::<f32, u64>(),
            (ValueType::F64, 32) => self.validate_typed::<f64, u32>(),
            (ValueType::F64, _) => self.validate_typed::<f64, u64>(),
        }
    }

    /// CRC of one array, releasing checked pages as it goes.
    fn crc_releasing(&self, a: &ArrayInfo, progress: &dyn Progress) -> u32 {
        let mut h = crc32fast::Hasher::new();
        let mut done = a.offset;
        for piece in self.array_bytes(a).chunks(RELEASE_BYTES) {
            h.update(piece);
            self.release_pages();
            done += piece.len() as u64;
            progress.update(done);
        }
        h.finalize()
    }

    /// Drops the mapping's resident pages (they are read again from the page cache or the
    /// file when next touched). Long sequential passes call this now and then so that the
    /// process's resident memory stays bounded however large the file is.
    pub fn release_pages(&self) {
        // SAFETY: the map is a read-only shared file mapping: MADV_DONTNEED discards the
        // process's page table entries only, and later accesses fault the same file contents
        // back in, so every slice handed out stays valid and unchanged. Failure is harmless.
        let _ = unsafe {
            self.map
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        };
    }

    fn validate_typed<V: Value, I: Index>(&self) -> Result<(), TcsError> {
        let (levels, vals) = self.slices::<V, I>()?;
        let mut tick = || self.release_pages();
        validate_levels_with(&self.dims, &self.format, &levels, vals.len(), &mut tick)?;
        self.release_pages();
        for (k, (level, info)) in levels.iter().zip(&self.header.levels).enumerate() {
            let mode = self.header.modes[info.mode as usize];
            if let LevelView::Compressed { pos, crd } = level {
                if info.size != crd.len() as u64 {
                    return Err(TcsError::Field {
                        what: format!("size of level {k}"),
                        recorded: info.size,
                        expected: crd.len() as u64,
                    });
                }
                debug_assert_eq!(pos.last().map(|p| p.to_usize()), Some(crd.len()));
                // Coordinates are already known to be below the dimension; a block must also
                // keep them inside its split range. Checked piecewise, releasing pages.
                let whole = mode.split_lo == 0 && mode.split_hi == mode.dim;
                let pieces = if whole {
                    [].chunks(1)
                } else {
                    crd.chunks(TICK_ELEMENTS)
                };
                for piece in pieces {
                    let outside = piece
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
                    self.release_pages();
                }
            }
        }
        Ok(())
    }

    /// Level views and values, cast from the map (alignment is guaranteed by the layout and
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
            });
        }
        let vals_info = arrays.next().expect("layout");
        let vals = bytemuck::try_cast_slice::<u8, V>(self.array_bytes(vals_info))
            .map_err(|e| TcsError::Invalid(format!("vals: {e:?}")))?;
        Ok((levels, vals))
    }

    fn check_types<V: Value, I: Index>(&self) -> Result<()> {
        if V::TYPE != self.header.value_type || I::BITS != self.header.index_bits {
            return Err(Error::Tcs {
                path: self.path.clone(),
                source: TcsError::TypeMismatch {
                    file_value: self.header.value_type.name(),
                    file_bits: self.header.index_bits,
                    want_value: V::TYPE.name(),
                    want_bits: I::BITS,
                },
            });
        }
        Ok(())
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
