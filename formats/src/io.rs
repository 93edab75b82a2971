//! Tensors to and from files: [`Tensor::read`] and [`Tensor::write`] for `.tns`, `.mtx` and
//! `.tcs`, chosen by extension. Every error names the file (and, for text, line and column).

use std::fs::File;
use std::path::Path;

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
                let mut r = open_text(path)?;
                let rank = r.rank();
                let format = parse_for(path, format, rank)?;
                // Gathered with dimensions as large as the coordinates allow; the real ones
                // (declared, or the largest coordinate + 1) are known at the end.
                let unbounded = vec![I::MAX_U64 as usize; rank];
                let mut coo = Coo::new::<I>(&unbounded, &format).map_err(tensor_err)?;
                let mut max = vec![0usize; rank];
                let mut chunk = Chunk::default();
                let mut c = vec![0usize; rank];
                while r.next_chunk(&mut chunk)? {
                    for (e, &v) in chunk.vals.iter().enumerate() {
                        for (m, x) in c.iter_mut().enumerate() {
                            *x = usize::try_from(chunk.coords[e * rank + m]).unwrap_or(usize::MAX);
                            max[m] = max[m].max(x.saturating_add(1));
                        }
                        coo.push(&c, text_value(path, &c, v)?).map_err(tensor_err)?;
                    }
                }
                let dims = match r.declared_dims() {
                    Some(d) => d.into_iter().map(|x| x as usize).collect(),
                    None => max,
                };
                coo.into_tensor(dims, format).map_err(tensor_err)
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
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if V::TYPE == ValueType::I64 && x.abs() >= EXACT {
        return Err(unfit::<V>(
            path,
            coords,
            x,
            "integers of 2^53 or more are not read exactly from text; store the tensor as .tcs",
        ));
    }
    exact_value(path, coords, x)
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
