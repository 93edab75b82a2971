//! Tensors to and from files: [`Tensor::read`] and [`Tensor::write`] for `.tns`, `.mtx` and
//! `.tcs`, chosen by extension. Every error names the file (and, for text, line and column).

use std::fs::File;
use std::path::Path;

use crate::atomic::PendingDir;
use crate::convert::{convert, tick, ConvertOptions, Duplicates, NoProgress, Progress};
use crate::error::{Error, Result};
use crate::format::{Format, IntoFormat};
use crate::tcs::reader::read_tensor;
use crate::tcs::{write_tensor, TcsFile, TcsHeader};
use crate::tensor::{Coo, Tensor, TensorError};
use crate::text::{open_text, FileKind};
use crate::value::{Index, Value, ValueType};
use crate::{Chunk, MtxWriter, TnsWriter};

impl<V: Value, I: Index> Tensor<V, I> {
    /// Reads a `.tns`, `.mtx` or `.tcs` file (by extension) and stores it in `format`, a
    /// [`Format`] or a TACO format string (`"csr"`, `"ds:1,0"`, `"sss"`).
    ///
    /// Dimensions come from the file: the `.mtx` header, the `.tcs` header, or a `.tns`
    /// file's `# dims` comment (else the largest coordinate of each mode). Duplicate entries
    /// of text files are summed. A `.tcs` file in the requested format, value and coordinate
    /// types is copied as it is; any other is converted.
    pub fn read(path: impl AsRef<Path>, format: impl IntoFormat) -> Result<Self> {
        Self::read_with_progress(path, format, &NoProgress)
    }

    /// As [`Tensor::read`], reporting the stages of reading a text file to `progress` (a
    /// `.tcs` file is read in one step) and stopping with [`Error::Cancelled`] when it says so.
    ///
    /// A `.tns` or `.mtx` file of `f64` or `f32` values goes through the streaming converter
    /// ([`convert`]: every core parses, sorted input is packed as it is read) into a `.tcs`
    /// file in a temporary directory (`TMPDIR`), read back and removed: 0.13 s instead of
    /// 1.0 s for a 62 MB, 4 M-entry matrix. Integer values take the same path when the file
    /// has no duplicate entries and every value is one. Otherwise, and where no temporary
    /// file can be written, the file is read entry by entry in memory, with the same result.
    pub fn read_with_progress(
        path: impl AsRef<Path>,
        format: impl IntoFormat,
        progress: &dyn Progress,
    ) -> Result<Self> {
        let path = path.as_ref();
        let tensor_err = |source| Error::Tensor {
            path: path.to_path_buf(),
            source,
        };
        match FileKind::of(path)? {
            FileKind::Tcs => {
                let h =
                    TcsHeader::read_from(&File::open(path).map_err(|e| Error::io(path, e))?, path)?;
                let format = parse_for(path, format, h.rank())?;
                if h.value_type == V::TYPE && h.index_bits == I::BITS && h.format() == format {
                    return read_tensor(path);
                }
                let file = TcsFile::open(path)?;
                let mut coo = Coo::new::<I>(file.dims(), &format).map_err(tensor_err)?;
                tcs_entries(&file, &mut coo)?;
                coo.into_tensor(file.dims().to_vec(), format)
                    .map_err(tensor_err)
            }
            FileKind::Tns | FileKind::Mtx => {
                let rank = open_text(path)?.rank();
                let format = parse_for(path, format, rank)?;
                match read_converted(path, &format, progress, &std::env::temp_dir())? {
                    Some(t) => Ok(t),
                    None => read_text(path, format, progress),
                }
            }
        }
    }

    /// Writes the tensor to a `.tns`, `.mtx` or `.tcs` file (by extension); the file appears
    /// only when complete. Text files get every stored entry (the explicit zeros of dense
    /// levels included); a `.tns` file starts with a `# dims` comment so that trailing zeros
    /// keep their place, and a `.mtx` file needs a matrix.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        match FileKind::of(path)? {
            FileKind::Tcs => write_tensor(path, self, None),
            FileKind::Mtx => {
                let &[rows, cols] = self.dims() else {
                    return Err(Error::Unsupported {
                        path: path.to_path_buf(),
                        what: format!(
                            "a .mtx file holds a matrix, but the tensor has rank {}; use .tns or .tcs",
                            self.dims().len()
                        ),
                    });
                };
                let (rows, cols, nnz) = (rows as u64, cols as u64, Some(self.nnz() as u64));
                let mut w = MtxWriter::create_of(path, rows, cols, nnz, V::TYPE)?;
                for (c, v) in self.entries() {
                    w.write_entry(c[0] as u64, c[1] as u64, v)?;
                }
                w.finish()
            }
            FileKind::Tns => {
                let mut w = TnsWriter::create(path)?;
                if !self.dims().is_empty() {
                    let dims: Vec<String> = self.dims().iter().map(|d| d.to_string()).collect();
                    w.write_comment(&format!("dims {}", dims.join(" ")))?;
                }
                let mut c64 = Vec::with_capacity(self.dims().len());
                for (c, v) in self.entries() {
                    c64.clear();
                    c64.extend(c.iter().map(|&x| x as u64));
                    w.write_entry(&c64, v)?;
                }
                w.finish()
            }
        }
    }
}

/// Reads a text file entry by entry into memory (see [`Tensor::read_with_progress`] for when).
fn read_text<V: Value, I: Index>(
    path: &Path,
    format: Format,
    progress: &dyn Progress,
) -> Result<Tensor<V, I>> {
    let tensor_err = |source| Error::Tensor {
        path: path.to_path_buf(),
        source,
    };
    let mut r = open_text(path)?;
    let rank = r.rank();
    // Gathered with dimensions as large as the coordinates allow; the real ones
    // (declared, or the largest coordinate + 1) are known at the end.
    let unbounded = vec![I::MAX_U64 as usize; rank];
    let mut coo = Coo::new::<I>(&unbounded, &format).map_err(tensor_err)?;
    let mut max = vec![0usize; rank];
    let mut chunk = Chunk::default();
    let mut c = vec![0usize; rank];
    progress.stage("read", r.total_bytes());
    while r.next_chunk(&mut chunk)? {
        for (e, &v) in chunk.vals.iter().enumerate() {
            for (m, x) in c.iter_mut().enumerate() {
                *x = usize::try_from(chunk.coords[e * rank + m]).unwrap_or(usize::MAX);
                max[m] = max[m].max(x.saturating_add(1));
            }
            coo.push(&c, text_value(path, &c, v)?).map_err(tensor_err)?;
        }
        tick(progress, r.bytes_read())?;
    }
    progress.end_stage();
    let dims = match r.declared_dims() {
        Some(d) => d.into_iter().map(|x| x as usize).collect(),
        None => max,
    };
    coo.into_tensor(dims, format).map_err(tensor_err)
}

/// Bytes of sorted runs [`read_converted`] keeps in memory before it spills them to its
/// temporary directory: the tensor read is held in memory whole anyway, and a text file of
/// this size holds about 40 M entries.
const READ_MEMORY: usize = 1 << 30;

/// `path` (a text file of `format`'s rank) converted to `format` through a `.tcs` file in a
/// new directory under `temp`, or `None` where the in-memory reader must do it: no room under
/// `temp` (errors naming files there), or integer values it would not read as [`text_value`]
/// does (that reader then names the entry).
///
/// Integer values go through the converter as `f64` with duplicates refused, then each is
/// converted exactly: the converter would sum duplicates in `f64` (0.5 + 0.5 would pass where
/// the in-memory reader refuses each half) and its packer rounds where [`text_value`] refuses.
/// Errors naming the input are returned as they are.
fn read_converted<V: Value, I: Index>(
    path: &Path,
    format: &Format,
    progress: &dyn Progress,
    temp: &Path,
) -> Result<Option<Tensor<V, I>>> {
    // Listed for a signal handler's `remove_pending_files`: Ctrl-C during the read leaves
    // nothing in `temp`.
    let Ok(dir) = PendingDir::create_in(temp, ".tessera-read-") else {
        return Ok(None);
    };
    let float = matches!(V::TYPE, ValueType::F64 | ValueType::F32);
    let tcs = dir.path().join("tensor.tcs");
    let opts = ConvertOptions {
        format: Some(format.to_string()),
        index_bits: I::BITS,
        value_type: if float { V::TYPE } else { ValueType::F64 },
        duplicates: if float {
            Duplicates::Sum
        } else {
            Duplicates::Error
        },
        memory: READ_MEMORY,
        temp_dir: Some(dir.path().to_path_buf()),
        ..ConvertOptions::default()
    };
    let converted = convert(path, &tcs, &opts, progress);
    let read = if float {
        converted.and_then(|_| read_tensor::<V, I>(&tcs)).map(Some)
    } else {
        converted
            .and_then(|_| read_tensor::<f64, I>(&tcs))
            .map(exact_values)
    };
    match read {
        Err(Error::Duplicate { .. }) => Ok(None),
        Err(e) if e.path().is_some_and(|p| p.starts_with(dir.path())) => Ok(None),
        other => other,
    }
}

/// `t`'s values as `V`, or `None` if one is not what [`text_value`] reads as `V` (a fraction,
/// or an integer of 2^53 or more as `i64`).
fn exact_values<V: Value, I: Index>(t: Tensor<f64, I>) -> Option<Tensor<V, I>> {
    let (dims, format, levels, vals) = t.into_parts();
    let vals = vals
        .into_iter()
        .map(|x| text_exact(x).ok())
        .collect::<Option<Vec<V>>>()?;
    Some(Tensor::from_validated(dims, format, levels, vals))
}

/// The requested format for a file's tensor of `rank` modes; a misfit names the file.
fn parse_for(path: &Path, format: impl IntoFormat, rank: usize) -> Result<Format> {
    format.into_format(rank).map_err(|source| Error::Format {
        path: path.to_path_buf(),
        source,
    })
}

/// A value of a `.tns`/`.mtx` file as `V`, or an error naming the file and the entry (1-based
/// coordinates) when `V` cannot hold it: a fraction or a non-finite value read as `i64`.
/// Text values are parsed as `f64`, exact for integers below 2^53 only, so an `i64` value
/// of that size or more is an error too (a `.tcs` file holds any `i64` exactly).
pub fn text_value<V: Value>(path: &Path, coords: &[usize], x: f64) -> Result<V> {
    text_exact(x).map_err(|why| unfit::<V>(path, coords, x, why))
}

/// A text value `x` as `V`, or why `V` cannot hold it exactly (see [`text_value`]).
fn text_exact<V: Value>(x: f64) -> Result<V, &'static str> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if V::TYPE == ValueType::I64 && x.abs() >= EXACT {
        return Err(
            "integers of 2^53 or more are not read exactly from text; store the tensor as .tcs",
        );
    }
    V::from_f64_exact(x).ok_or("it is not an integer")
}

/// `x` as `V`, or an error naming the file and the entry (see [`text_value`]).
fn exact_value<V: Value>(path: &Path, coords: &[usize], x: f64) -> Result<V> {
    V::from_f64_exact(x).ok_or_else(|| unfit::<V>(path, coords, x, "it is not an integer"))
}

fn unfit<V: Value>(path: &Path, coords: &[usize], x: f64, why: &str) -> Error {
    let at: Vec<String> = coords.iter().map(|c| (c + 1).to_string()).collect();
    Error::Unsupported {
        path: path.to_path_buf(),
        what: format!(
            "the entry at ({}) is {x}, which is no {} value ({why})",
            at.join(", "),
            V::TYPE.name()
        ),
    }
}

/// Adds the entries of a `.tcs` file of any value and coordinate type to `coo`, as `V`.
fn tcs_entries<V: Value>(file: &TcsFile, coo: &mut Coo<V>) -> Result<()> {
    fn add<W: Value, J: Index, V: Value>(file: &TcsFile, coo: &mut Coo<V>) -> Result<()> {
        for (c, v) in file.view::<W, J>()?.entries() {
            // The same type is copied as it is (i64 counts beyond 2^53 survive).
            let v = if W::TYPE == V::TYPE {
                bytemuck::cast::<W, V>(v)
            } else {
                exact_value(file.path(), &c, v.to_f64())?
            };
            coo.push(&c, v)
                .map_err(|source: TensorError| Error::Tensor {
                    path: file.path().to_path_buf(),
                    source,
                })?;
        }
        Ok(())
    }
    let h = file.header();
    crate::with_types!(h.value_type, h.index_bits, |W, J| add::<W, J, V>(file, coo))
}

#[cfg(test)]
#[path = "io_tests.rs"]
mod tests;
