//! Pass two: stream sorted, distinct entries into a `.tcs` file laid out from the level counts.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::{scan_distinct, ConvertOptions, Progress, SortedSource};
use crate::error::{Error, Result};
use crate::format::{Format, LevelType};
use crate::pack::{PackError, Packer, Sink};
use crate::tcs::{ArraySource, ArrayWriter, LevelInfo, ModeInfo, TcsHeader, TcsWriter};
use crate::tensor::TensorError;
use crate::value::{Index, Value};

/// What pass two wrote.
pub(crate) struct Built {
    pub entries: u64,
    pub bytes: u64,
}

/// Writes the `.tcs` file for `format` from a sorted source; `counts[k]` is the number of
/// coordinates stored at level `k` (used for compressed levels).
#[allow(clippy::too_many_arguments)]
pub(crate) fn build(
    source: &mut dyn SortedSource,
    input: &Path,
    output: &Path,
    format: &Format,
    dims: &[u64],
    counts: &[u64],
    opts: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<Built> {
    crate::with_types!(opts.value_type, opts.index_bits, |W, J| {
        build_typed::<W, J>(source, input, output, format, dims, counts, opts, progress)
    })
}

#[allow(clippy::too_many_arguments)]
fn build_typed<V: Value, I: Index>(
    source: &mut dyn SortedSource,
    input: &Path,
    output: &Path,
    format: &Format,
    dims: &[u64],
    counts: &[u64],
    opts: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<Built> {
    let tensor_err = |source| Error::Tensor {
        path: input.to_path_buf(),
        source,
    };
    check_width::<I>(dims, counts).map_err(tensor_err)?;
    let header = layout::<V, I>(format, dims, counts).map_err(|source| Error::Tcs {
        path: output.to_path_buf(),
        source,
    })?;
    let bytes = header.file_len;
    let mut writer = TcsWriter::create(output, header)?;
    writer.set_sync(opts.sync);
    let mut pairs = Vec::new();
    let mut array = 0;
    for &t in format.levels() {
        let mut next = || -> Result<_> {
            array += 1;
            Ok(Stoppable::new(
                writer.array_writer::<I>(array - 1)?,
                progress,
            ))
        };
        pairs.push(match t {
            LevelType::Compressed => Some((Some(next()?), next()?)),
            LevelType::Singleton => Some((None, next()?)),
            LevelType::Dense => None,
        });
    }
    let vals = Stoppable::new(writer.array_writer::<V>(array)?, progress);
    let udims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    let dense = format.mode_order().iter().map(|&m| (udims[m], 0)).collect();
    type Out<'w, 'p, T> = Stoppable<'p, ArrayWriter<'w, T>>;
    let mut packer: Packer<V, I, Out<'_, '_, I>, Out<'_, '_, V>> = Packer::new(
        &udims,
        format,
        dense,
        |k| pairs[k].take().expect("arrays for every sparse level"),
        vals,
    );
    let mut key = vec![0usize; format.rank()];
    let pack_err = |e: PackError<Error>| match e {
        PackError::Tensor(t) => tensor_err(t),
        PackError::Sink(e) => e,
    };
    scan_distinct(
        source,
        input,
        format,
        opts.duplicates,
        progress,
        &mut |c, v| {
            for (k, &x) in c.iter().enumerate() {
                key[k] = x as usize;
            }
            packer.push(&key, V::from_f64(v)).map_err(pack_err)
        },
    )?;
    let entries = packer.count() as u64;
    let (levels, vals, _) = packer.finish().map_err(pack_err)?;
    for (pos, crd) in levels.into_iter().flatten() {
        if let Some(pos) = pos {
            pos.inner.finish()?;
        }
        crd.inner.finish()?;
    }
    vals.inner.finish()?;
    writer.finish()?;
    Ok(Built { entries, bytes })
}

/// One pass instead of two, for a source that is expensive to read twice (the merge of
/// sorted runs, or text read once): the arrays are spooled to temporary files in `temp_dir` while the level
/// sizes are not yet known, then copied into the laid-out output.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_spooled(
    source: &mut dyn SortedSource,
    input: &Path,
    output: &Path,
    format: &Format,
    dims: Option<&[u64]>,
    opts: &ConvertOptions,
    temp_dir: &Path,
    stage: Option<&str>,
    progress: &dyn Progress,
) -> Result<Built> {
    crate::with_types!(opts.value_type, opts.index_bits, |W, J| {
        spooled_typed::<W, J>(
            source, input, output, format, dims, opts, temp_dir, stage, progress,
        )
    })
}

#[allow(clippy::too_many_arguments)]
fn spooled_typed<V: Value, I: Index>(
    source: &mut dyn SortedSource,
    input: &Path,
    output: &Path,
    format: &Format,
    dims: Option<&[u64]>,
    opts: &ConvertOptions,
    temp_dir: &Path,
    stage: Option<&str>,
    progress: &dyn Progress,
) -> Result<Built> {
    let tensor_err = |source| Error::Tensor {
        path: input.to_path_buf(),
        source,
    };
    if let Some(dims) = dims {
        check_width::<I>(dims, &[]).map_err(tensor_err)?;
        check_dense_size::<V>(format, dims).map_err(tensor_err)?;
    }
    let buffer = spool_buffer(opts.memory);
    let spool = || Spool::create(temp_dir, output, buffer, progress);
    let mut pairs = Vec::new();
    for &t in format.levels() {
        pairs.push(match t {
            LevelType::Compressed => Some((Some(spool()?), spool()?)),
            LevelType::Singleton => Some((None, spool()?)),
            LevelType::Dense => None,
        });
    }
    // Without known dimensions (all levels compressed) coordinates are bounded only by the
    // coordinate width, which the packer checks.
    let udims: Vec<usize> = match dims {
        Some(dims) => dims.iter().map(|&d| d as usize).collect(),
        None => vec![usize::MAX; format.rank()],
    };
    let dense = format.mode_order().iter().map(|&m| (udims[m], 0)).collect();
    let mut packer: Packer<V, I, Spool<'_>, Spool<'_>> = Packer::new(
        &udims,
        format,
        dense,
        |k| pairs[k].take().expect("arrays for every sparse level"),
        spool()?,
    );
    let mut key = vec![0usize; format.rank()];
    let pack_err = |e: PackError<Error>| match e {
        PackError::Tensor(t) => tensor_err(t),
        PackError::Sink(e) => e,
    };
    if let Some(stage) = stage {
        progress.stage(stage, 0);
    }
    scan_distinct(
        source,
        input,
        format,
        opts.duplicates,
        progress,
        &mut |c, v| {
            for (k, &x) in c.iter().enumerate() {
                key[k] = x as usize;
            }
            packer.push(&key, V::from_f64(v)).map_err(pack_err)
        },
    )?;
    if stage.is_some() {
        progress.end_stage();
    }
    let entries = packer.count() as u64;
    let dims = match dims {
        Some(dims) => dims.to_vec(),
        None => {
            let dims = source
                .dims()
                .expect("a source without dimensions reports them");
            check_width::<I>(&dims, &[]).map_err(tensor_err)?;
            dims
        }
    };
    let (levels, vals, sizes) = packer.finish().map_err(pack_err)?;
    let counts: Vec<u64> = sizes.positions.iter().map(|&p| p as u64).collect();
    let header = layout::<V, I>(format, &dims, &counts).map_err(|source| Error::Tcs {
        path: output.to_path_buf(),
        source,
    })?;
    let bytes = header.file_len;
    let mut writer = TcsWriter::create(output, header)?;
    writer.set_sync(opts.sync);
    progress.stage("write", 0);
    let mut sources = Vec::new();
    for (pos, crd) in levels.into_iter().flatten() {
        for s in pos.into_iter().chain([crd]) {
            let (file, crc32) = s.into_file()?;
            sources.push((file, crc32));
        }
    }
    sources.push(vals.into_file()?);
    let sources = sources
        .into_iter()
        .enumerate()
        .map(|(array, (file, crc32))| ArraySource { array, file, crc32 })
        .collect();
    writer.copy_arrays_from(sources, crate::chunks::parse_threads())?;
    writer.finish()?;
    progress.end_stage();
    Ok(Built { entries, bytes })
}

/// An array spooled to an anonymous temporary file (gone even if the process dies), with
/// its checksum computed buffer by buffer. Full buffers are checksummed and written by a
/// thread of the spool's own, so that the thread packing entries (the serial part of a
/// conversion) does not wait on the file system; buffers come back to be reused.
struct Spool<'p> {
    /// Asked at every full buffer whether to stop (a dense gap can be long: many buffers of
    /// zeros from one entry).
    progress: &'p dyn Progress,
    buf: Vec<u8>,
    /// Bytes per buffer.
    capacity: usize,
    full: Option<mpsc::SyncSender<Vec<u8>>>,
    empty: mpsc::Receiver<Vec<u8>>,
    writer: Option<JoinHandle<Result<(File, u32)>>>,
}

/// Bytes a spool buffers: up to 1 MiB, less under a small budget (a spool holds up to three
/// buffers, and a conversion has two spools per compressed level and one for the values).
fn spool_buffer(memory: usize) -> usize {
    (memory / 128).clamp(16 << 10, 1 << 20)
}

impl<'p> Spool<'p> {
    /// A spool in `dir` for the output file `output` (which errors name: the spool has none).
    fn create(
        dir: &Path,
        output: &Path,
        capacity: usize,
        progress: &'p dyn Progress,
    ) -> Result<Spool<'p>> {
        let output = output.to_path_buf();
        let fail = move |dir: &Path, e: std::io::Error| {
            let what = format!("temporary file in {}: {e}", dir.display());
            Error::io(&output, std::io::Error::new(e.kind(), what))
        };
        let mut file = tempfile::tempfile_in(dir).map_err(|e| fail(dir, e))?;
        // One buffer being filled, one queued, one being written: 3 MiB per spool at most.
        let (full, full_rx) = mpsc::sync_channel::<Vec<u8>>(1);
        let (empty_tx, empty) = mpsc::sync_channel::<Vec<u8>>(2);
        let dir = dir.to_path_buf();
        let writer = std::thread::spawn(move || -> Result<(File, u32)> {
            let mut crc = crc32fast::Hasher::new();
            for mut buf in full_rx {
                crc.update(&buf);
                file.write_all(&buf).map_err(|e| fail(&dir, e))?;
                buf.clear();
                let _ = empty_tx.try_send(buf);
            }
            Ok((file, crc.finalize()))
        });
        Ok(Spool {
            progress,
            buf: Vec::with_capacity(capacity),
            capacity,
            full: Some(full),
            empty,
            writer: Some(writer),
        })
    }

    fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.progress.cancelled() {
            return Err(Error::Cancelled);
        }
        let next = self
            .empty
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(self.capacity));
        let buf = std::mem::replace(&mut self.buf, next);
        let sent = self.full.as_ref().map(|tx| tx.send(buf).is_ok());
        if sent != Some(true) {
            // The writer stopped: it failed, and says why.
            return Err(self.finish().err().unwrap_or_else(|| {
                Error::io(
                    Path::new("spool"),
                    std::io::Error::other("spool writer stopped early"),
                )
            }));
        }
        Ok(())
    }

    /// Stops the writer and returns the file and checksum, or the writer's error.
    fn finish(&mut self) -> Result<(File, u32)> {
        self.full = None;
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Error::io(
                Path::new("spool"),
                std::io::Error::other("spool writer panicked"),
            )),
            None => Err(Error::io(
                Path::new("spool"),
                std::io::Error::other("spool writer already stopped"),
            )),
        }
    }

    fn into_file(mut self) -> Result<(File, u32)> {
        self.flush()?;
        self.finish()
    }
}

impl Drop for Spool<'_> {
    fn drop(&mut self) {
        self.full = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl<T: bytemuck::Pod> Sink<T> for Spool<'_> {
    type Error = Error;
    fn push_n(&mut self, x: T, n: usize) -> Result<()> {
        for _ in 0..n {
            Sink::<T>::push(self, x)?;
        }
        Ok(())
    }
    #[inline]
    fn push(&mut self, x: T) -> Result<()> {
        if self.buf.len() + std::mem::size_of::<T>() > self.capacity {
            self.flush()?;
        }
        self.buf.extend_from_slice(bytemuck::bytes_of(&x));
        Ok(())
    }
}

/// A sink that asks `progress` between long runs of copies whether to stop: one entry after
/// a gap in a dense level writes as many zeros as the gap is long.
struct Stoppable<'p, S> {
    inner: S,
    progress: &'p dyn Progress,
}

impl<'p, S> Stoppable<'p, S> {
    fn new(inner: S, progress: &'p dyn Progress) -> Self {
        Stoppable { inner, progress }
    }
}

/// Copies between two questions to a [`Stoppable`]'s progress.
const STOP_EVERY: usize = 1 << 20;

impl<T: Copy, S: Sink<T, Error = Error>> Sink<T> for Stoppable<'_, S> {
    type Error = Error;
    fn push_n(&mut self, x: T, mut n: usize) -> Result<()> {
        while n > 0 {
            let k = n.min(STOP_EVERY);
            self.inner.push_n(x, k)?;
            n -= k;
            if n > 0 && self.progress.cancelled() {
                return Err(Error::Cancelled);
            }
        }
        Ok(())
    }
    #[inline]
    fn push(&mut self, x: T) -> Result<()> {
        self.inner.push(x)
    }
}

/// The values of the dense levels alone (the product of their dimensions, a lower bound on
/// the values of any nonempty tensor in `format`) must be addressable in a file: otherwise
/// the conversion is refused before it starts writing zeros it could never finish.
pub(crate) fn check_dense_size<V: Value>(format: &Format, dims: &[u64]) -> Result<(), TensorError> {
    format
        .levels()
        .iter()
        .zip(format.mode_order())
        .filter(|(t, _)| **t == LevelType::Dense)
        .try_fold(V::TYPE.size() as u64, |bytes, (_, &m)| {
            bytes.checked_mul(dims[m])
        })
        .map(|_| ())
        .ok_or(TensorError::TooLarge)
}

/// Coordinates and positions must fit the chosen width; say how to fix it if not. A
/// dimension past what a `.tcs` file may declare (`isize::MAX`: it must be addressable) is the
/// input's fault too, found here rather than as an invalid output header.
pub(crate) fn check_width<I: Index>(dims: &[u64], counts: &[u64]) -> Result<(), TensorError> {
    if let Some((mode, &dim)) = dims
        .iter()
        .enumerate()
        .find(|(_, &d)| d > isize::MAX as u64)
    {
        return Err(TensorError::DimensionTooLarge { mode, dim });
    }
    for x in dims
        .iter()
        .map(|d| d.saturating_sub(1))
        .chain(counts.iter().copied())
    {
        if x > I::MAX_U64 {
            return Err(TensorError::IndexOverflow {
                value: x,
                bits: I::BITS,
            });
        }
    }
    Ok(())
}

pub(crate) fn layout<V: Value, I: Index>(
    format: &Format,
    dims: &[u64],
    counts: &[u64],
) -> Result<TcsHeader, crate::tcs::TcsError> {
    let modes = dims.iter().map(|&d| ModeInfo::whole(d)).collect();
    let levels = format
        .levels()
        .iter()
        .zip(format.mode_order())
        .enumerate()
        .map(|(k, (&t, &m))| LevelInfo {
            mode: m as u32,
            level_type: t,
            size: if t == LevelType::Dense {
                dims[m]
            } else {
                counts[k]
            },
            offset: 0,
        })
        .collect();
    TcsHeader::new(V::TYPE, I::BITS, false, modes, levels)
}
