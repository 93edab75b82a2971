//! Pass two: stream sorted, distinct entries into a `.tcs` file laid out from the level counts.

use std::path::Path;

use super::{scan_distinct, ConvertOptions, Progress, SortedSource};
use crate::error::{Error, Result};
use crate::format::{Format, LevelType};
use crate::pack::{PackError, Packer};
use crate::tcs::{ArrayWriter, LevelInfo, ModeInfo, TcsHeader, TcsWriter};
use crate::tensor::TensorError;
use crate::value::{Index, Value, ValueType};

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
    match (opts.value_type, opts.index_bits) {
        (ValueType::F32, 32) => {
            build_typed::<f32, u32>(source, input, output, format, dims, counts, opts, progress)
        }
        (ValueType::F32, _) => {
            build_typed::<f32, u64>(source, input, output, format, dims, counts, opts, progress)
        }
        (ValueType::F64, 32) => {
            build_typed::<f64, u32>(source, input, output, format, dims, counts, opts, progress)
        }
        (ValueType::F64, _) => {
            build_typed::<f64, u64>(source, input, output, format, dims, counts, opts, progress)
        }
    }
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
    let writer = TcsWriter::create(output, header)?;
    let mut pairs = Vec::new();
    let mut array = 0;
    for &t in format.levels() {
        if t == LevelType::Compressed {
            pairs.push(Some((
                writer.array_writer::<I>(array)?,
                writer.array_writer::<I>(array + 1)?,
            )));
            array += 2;
        } else {
            pairs.push(None);
        }
    }
    let vals = writer.array_writer::<V>(array)?;
    let udims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    let dense = format.mode_order().iter().map(|&m| (udims[m], 0)).collect();
    let mut packer: Packer<V, I, ArrayWriter<'_, I>, ArrayWriter<'_, V>> = Packer::new(
        &udims,
        format,
        dense,
        |k| pairs[k].take().expect("one pair per compressed level"),
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
        pos.finish()?;
        crd.finish()?;
    }
    vals.finish()?;
    writer.finish()?;
    Ok(Built { entries, bytes })
}

/// Coordinates and positions must fit the chosen width; say how to fix it if not.
fn check_width<I: Index>(dims: &[u64], counts: &[u64]) -> Result<(), TensorError> {
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

fn layout<V: Value, I: Index>(
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
