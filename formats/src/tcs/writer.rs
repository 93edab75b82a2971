//! Writing `.tcs` files: arrays streamed sequentially or written in pieces at computed
//! offsets, checksums, then the header; the file appears only when complete.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use super::header::{LevelInfo, ModeInfo, TcsHeader};
use super::TcsError;
use crate::atomic::AtomicFile;
use crate::error::{Error, Result};
use crate::pack::Sink;
use crate::tensor::{Level, Tensor};
use crate::value::{Index, Value};

/// Bytes buffered per array by an [`ArrayWriter`] before a positioned write.
const WRITE_BUFFER: usize = 1 << 20;

/// A `.tcs` file being written: laid out by its header, filled array by array, and renamed
/// into place by [`finish`](TcsWriter::finish).
pub struct TcsWriter {
    file: AtomicFile,
    header: TcsHeader,
    /// Checksums of arrays written whole by an [`ArrayWriter`]; others are computed at finish.
    crcs: Mutex<Vec<Option<u32>>>,
}

impl TcsWriter {
    /// Creates the temporary file, sized to `header.file_len`.
    pub fn create(path: &Path, header: TcsHeader) -> Result<Self> {
        let file = AtomicFile::create(path)?;
        crate::retry_interrupted(|| file.file().set_len(header.file_len))
            .map_err(|e| Error::io(path, e))?;
        let crcs = Mutex::new(vec![None; header.arrays.len()]);
        Ok(TcsWriter { file, header, crcs })
    }

    /// The header the file is laid out by.
    pub fn header(&self) -> &TcsHeader {
        &self.header
    }

    /// A sequential, buffered writer of array number `array` from its first element.
    pub fn array_writer<T: bytemuck::Pod>(&self, array: usize) -> Result<ArrayWriter<'_, T>> {
        let a = self.array(array, std::mem::size_of::<T>())?;
        Ok(ArrayWriter {
            writer: self,
            array,
            at: a.offset,
            end: a.offset + a.len,
            buf: Vec::with_capacity(WRITE_BUFFER),
            crc: crc32fast::Hasher::new(),
            _marker: std::marker::PhantomData,
        })
    }

    /// Writes `data` at element `elem_offset` of array number `array` (pieces may come in any
    /// order and from several threads).
    pub fn write_at<T: bytemuck::Pod>(
        &self,
        array: usize,
        elem_offset: u64,
        data: &[T],
    ) -> Result<()> {
        let size = std::mem::size_of::<T>() as u64;
        let a = self.array(array, size as usize)?;
        let end = elem_offset
            .checked_add(data.len() as u64)
            .and_then(|e| e.checked_mul(size));
        if end.is_none_or(|e| e > a.len) {
            return Err(self.misuse(format!(
                "piece at element {elem_offset} of length {} overruns {}",
                data.len(),
                a.name()
            )));
        }
        self.crcs.lock().expect("no panics while locked")[array] = None;
        let at = a.offset + elem_offset * size;
        self.file
            .file()
            .write_all_at(bytemuck::cast_slice(data), at)
            .map_err(|e| Error::io(self.file.target(), e))
    }

    fn array(&self, array: usize, elem_size: usize) -> Result<super::ArrayInfo> {
        let a = *self
            .header
            .arrays
            .get(array)
            .ok_or_else(|| self.misuse(format!("no array {array}")))?;
        let expected = match a.kind {
            super::ArrayKind::Vals => self.header.value_type.size(),
            _ => self.header.index_bits as usize / 8,
        };
        if expected != elem_size {
            return Err(self.misuse(format!(
                "{} has {expected}-byte elements, got {elem_size}-byte",
                a.name()
            )));
        }
        Ok(a)
    }

    fn misuse(&self, what: String) -> Error {
        Error::Unsupported {
            path: self.file.target().to_path_buf(),
            what,
        }
    }

    /// Copies array number `array` whole from `src` (read from its start; in the kernel where
    /// the platform allows), recording `crc32` as its checksum, which the caller computed
    /// while writing `src`.
    pub fn copy_array_from(&self, array: usize, src: &mut std::fs::File, crc32: u32) -> Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        let a = *self
            .header
            .arrays
            .get(array)
            .ok_or_else(|| self.misuse(format!("no array {array}")))?;
        let target = self.file.target();
        let len = src.metadata().map_err(|e| Error::io(target, e))?.len();
        if len != a.len {
            return Err(self.misuse(format!(
                "{} needs {} bytes, the source has {len}",
                a.name(),
                a.len
            )));
        }
        src.seek(SeekFrom::Start(0))
            .map_err(|e| Error::io(target, e))?;
        let mut dst = self.file.file();
        dst.seek(SeekFrom::Start(a.offset))
            .map_err(|e| Error::io(target, e))?;
        let copied =
            std::io::copy(&mut src.take(len), &mut dst).map_err(|e| Error::io(target, e))?;
        if copied != len {
            return Err(self.misuse(format!("{}: copied {copied} of {len} bytes", a.name())));
        }
        self.crcs.lock().expect("no panics while locked")[array] = Some(crc32);
        Ok(())
    }

    /// Computes missing checksums, writes the header and renames the file into place.
    pub fn finish(mut self) -> Result<()> {
        let target = self.file.target().to_path_buf();
        let crcs = self.crcs.lock().expect("no panics while locked").clone();
        for (a, crc) in self.header.arrays.iter_mut().zip(crcs) {
            a.crc32 = match crc {
                Some(c) => c,
                None => crc_of_range(self.file.file(), a.offset, a.len)
                    .map_err(|e| Error::io(&target, e))?,
            };
        }
        let bytes = self.header.to_bytes();
        self.file
            .file()
            .write_all_at(&bytes, 0)
            .map_err(|e| Error::io(&target, e))?;
        self.file.commit()
    }
}

fn crc_of_range(file: &std::fs::File, offset: u64, len: u64) -> std::io::Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; WRITE_BUFFER.min(len as usize)];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], offset + done)?;
        h.update(&buf[..n]);
        done += n as u64;
    }
    Ok(h.finalize())
}

/// Appends elements to one array of a [`TcsWriter`], computing its checksum on the way.
pub struct ArrayWriter<'a, T> {
    writer: &'a TcsWriter,
    array: usize,
    at: u64,
    end: u64,
    buf: Vec<u8>,
    crc: crc32fast::Hasher,
    _marker: std::marker::PhantomData<T>,
}

impl<T: bytemuck::Pod> ArrayWriter<'_, T> {
    fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let len = self.buf.len() as u64;
        if self.at + len > self.end {
            let name = self.writer.header.arrays[self.array].name();
            return Err(self.writer.misuse(format!("more data than fits in {name}")));
        }
        self.crc.update(&self.buf);
        let file = self.writer.file.file();
        file.write_all_at(&self.buf, self.at)
            .map_err(|e| Error::io(self.writer.file.target(), e))?;
        self.at += len;
        self.buf.clear();
        Ok(())
    }

    /// Flushes and records the checksum; the array must be exactly full.
    pub fn finish(mut self) -> Result<()> {
        self.flush()?;
        if self.at != self.end {
            let name = self.writer.header.arrays[self.array].name();
            return Err(self
                .writer
                .misuse(format!("{name} is {} bytes short", self.end - self.at)));
        }
        let crc = std::mem::take(&mut self.crc).finalize();
        self.writer.crcs.lock().expect("no panics while locked")[self.array] = Some(crc);
        Ok(())
    }
}

impl<T: bytemuck::Pod> Sink<T> for ArrayWriter<'_, T> {
    type Error = Error;
    fn push_n(&mut self, x: T, n: usize) -> Result<()> {
        let bytes = bytemuck::bytes_of(&x);
        for _ in 0..n {
            if self.buf.len() + bytes.len() > WRITE_BUFFER {
                self.flush()?;
            }
            self.buf.extend_from_slice(bytes);
        }
        Ok(())
    }
    fn push(&mut self, x: T) -> Result<()> {
        if self.buf.len() + std::mem::size_of::<T>() > WRITE_BUFFER {
            self.flush()?;
        }
        self.buf.extend_from_slice(bytemuck::bytes_of(&x));
        Ok(())
    }
}

/// Writes an in-memory tensor (or a block of one, when `modes` gives split ranges; `None`
/// means a whole tensor) to `path`.
pub fn write_tensor<V: Value, I: Index>(
    path: &Path,
    t: &Tensor<V, I>,
    modes: Option<Vec<ModeInfo>>,
) -> Result<()> {
    let is_block = modes.is_some();
    let modes = modes.unwrap_or_else(|| {
        t.dims()
            .iter()
            .map(|&d| ModeInfo::whole(d as u64))
            .collect()
    });
    let levels = t
        .levels()
        .iter()
        .zip(t.format().mode_order())
        .map(|(l, &m)| match l {
            Level::Dense { size, offset } => LevelInfo {
                mode: m as u32,
                level_type: crate::LevelType::Dense,
                size: *size as u64,
                offset: *offset as u64,
            },
            Level::Compressed { crd, .. } | Level::Singleton { crd } => LevelInfo {
                mode: m as u32,
                level_type: l.level_type(),
                size: crd.len() as u64,
                offset: 0,
            },
        })
        .collect();
    let tcs_err = |source: TcsError| Error::Tcs {
        path: path.to_path_buf(),
        source,
    };
    let header = TcsHeader::new(V::TYPE, I::BITS, is_block, modes, levels).map_err(tcs_err)?;
    let w = TcsWriter::create(path, header)?;
    let mut array = 0;
    for l in t.levels() {
        match l {
            Level::Compressed { pos, crd } => {
                w.write_at(array, 0, pos)?;
                w.write_at(array + 1, 0, crd)?;
                array += 2;
            }
            Level::Singleton { crd } => {
                w.write_at(array, 0, crd)?;
                array += 1;
            }
            Level::Dense { .. } => {}
        }
    }
    w.write_at(array, 0, t.vals())?;
    w.finish()
}
