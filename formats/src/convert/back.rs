//! The way back: `.tcs` → `.tns`/`.mtx`, and between the text formats.

use std::path::Path;

use super::{ConvertReport, Progress, PROGRESS_EVERY};
use crate::error::{Error, Result};
use crate::format::LevelType;
use crate::mtx::MtxWriter;
use crate::tcs::TcsFile;
use crate::text::{open_text, FileKind};
use crate::tns::TnsWriter;
use crate::value::{Index, Value};
use crate::view::TensorView;

/// Writes a `.tcs` file's entries as `.tns` or `.mtx` (rank 2), in storage order. Explicit
/// zeros that dense levels store are not written.
/// `.tcs` → `.tns` / `.mtx`; `sync`: the output is synced to disk before it is renamed into
/// place ([`AtomicFile::set_sync`](crate::AtomicFile::set_sync)).
pub fn tcs_to_text(
    input: &Path,
    output: &Path,
    sync: bool,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    let file = TcsFile::open_with_progress(input, progress)?;
    let h = file.header();
    crate::with_types!(h.value_type, h.index_bits, |W, J| {
        write_text(&file.view::<W, J>()?, output, sync, progress)
    })
}

fn write_text<V: Value, I: Index>(
    view: &TensorView<'_, V, I>,
    output: &Path,
    sync: bool,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    let skip_zeros = view.format().levels().contains(&LevelType::Dense);
    let order = view.format().mode_order().to_vec();
    let dims: Vec<u64> = view.dims().iter().map(|&d| d as u64).collect();
    let mut coords = vec![0u64; order.len()];
    let mut written = 0u64;
    progress.stage("export", view.vals().len() as u64);
    let mut each = |f: &mut dyn FnMut(&[u64], V) -> Result<()>| {
        let mut seen = 0u64;
        view.try_for_each_level_entry(|c, v| {
            seen += 1;
            if seen.is_multiple_of(PROGRESS_EVERY) {
                super::tick(progress, seen)?;
            }
            if skip_zeros && v == V::zero() {
                return Ok(());
            }
            for (k, &m) in order.iter().enumerate() {
                coords[m] = c[k] as u64;
            }
            written += 1;
            f(&coords, v)
        })
    };
    match FileKind::of(output)? {
        FileKind::Mtx => {
            if dims.len() != 2 {
                return Err(Error::Unsupported {
                    path: output.to_path_buf(),
                    what: format!(
                        "a .mtx file holds a matrix, but the tensor has rank {}",
                        dims.len()
                    ),
                });
            }
            let mut w = MtxWriter::create(output, dims[0], dims[1], None)?;
            w.set_sync(sync);
            each(&mut |c, v| w.write_entry(c[0], c[1], v))?;
            w.finish()?;
        }
        _ => {
            let mut w = tns_with_dims(output, &dims)?;
            w.set_sync(sync);
            each(&mut |c, v| w.write_entry(c, v))?;
            w.finish()?;
        }
    }
    progress.end_stage();
    let bytes = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
    Ok(ConvertReport {
        entries_read: written,
        entries_written: written,
        dims,
        presorted: true,
        runs: 0,
        runs_spilled: 0,
        merge_rounds: 0,
        output_bytes: bytes,
    })
}

/// A `.tns` writer whose first line declares the dimensions, so that empty trailing rows
/// and columns keep their place when the file is read back.
fn tns_with_dims(output: &Path, dims: &[u64]) -> Result<TnsWriter> {
    let mut w = TnsWriter::create(output)?;
    let shape: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    w.write_comment(&format!("dims {}", shape.join(" ")))?;
    Ok(w)
}

/// `.tns` ↔ `.mtx` (entries pass through unchanged; `.tns` → `.mtx` first finds the
/// dimensions).
pub(crate) fn text_to_text(
    input: &Path,
    output: &Path,
    sync: bool,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    let mut reader = open_text(input)?;
    let rank = reader.rank();
    let mut coords = vec![0u64; rank];
    let mut n = 0u64;
    let dims = match reader.declared_dims() {
        Some(d) => d,
        None => {
            progress.stage("scan", reader.total_bytes());
            let mut max = vec![0u64; rank];
            while reader.next_entry(&mut coords)?.is_some() {
                for (m, &c) in coords.iter().enumerate() {
                    max[m] = max[m].max(c);
                }
            }
            progress.end_stage();
            reader = open_text(input)?;
            max.iter().map(|m| m + 1).collect()
        }
    };
    progress.stage("write", reader.total_bytes());
    match FileKind::of(output)? {
        FileKind::Mtx => {
            if rank != 2 {
                return Err(Error::Unsupported {
                    path: output.to_path_buf(),
                    what: format!("a .mtx file holds a matrix, but the tensor has rank {rank}"),
                });
            }
            let mut w = MtxWriter::create(output, dims[0], dims[1], None)?;
            w.set_sync(sync);
            while let Some(v) = reader.next_entry(&mut coords)? {
                w.write_entry(coords[0], coords[1], v)?;
                n += 1;
            }
            w.finish()?;
        }
        _ => {
            let mut w = tns_with_dims(output, &dims)?;
            w.set_sync(sync);
            while let Some(v) = reader.next_entry(&mut coords)? {
                w.write_entry(&coords, v)?;
                n += 1;
                if n.is_multiple_of(PROGRESS_EVERY) {
                    super::tick(progress, reader.bytes_read())?;
                }
            }
            w.finish()?;
        }
    }
    progress.end_stage();
    let bytes = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
    Ok(ConvertReport {
        entries_read: n,
        entries_written: n,
        dims,
        presorted: true,
        runs: 0,
        runs_spilled: 0,
        merge_rounds: 0,
        output_bytes: bytes,
    })
}
