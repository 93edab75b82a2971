// Reading inputs and writing the output of a generated program, by file extension, with
// the readers and writers of tessera-formats (errors name the file, line and column; output
// files appear only when complete).

use std::error::Error;
use std::io::IsTerminal;
use std::path::Path;
use tessera_formats::tcs::write_tensor;
use tessera_formats::{
    text_value, open_text, FileKind, Format, Index, MtxWriter, TcsHeader, Tensor, TnsWriter,
    Value,
};

/// Rejects an output path that cannot hold the output before any work is done.
pub fn check_output_path(path: &Path, format: &Format) -> Result<(), Box<dyn Error>> {
    match FileKind::of(path)? {
        FileKind::Mtx if format.rank() != 2 => Err(format!(
            "{}: a .mtx file holds a matrix, but the output has rank {}; use .tns or .tcs",
            path.display(),
            format.rank()
        )
        .into()),
        _ => Ok(()),
    }
}

/// Reads a tensor file and stores it in `format`, converting its values to the program's
/// type `V` (an error names the entry `V` cannot hold: a fraction read as i64).
pub fn read<V: Value, I: Index>(
    path: &Path,
    format: &Format,
) -> Result<Tensor<V, I>, Box<dyn Error>> {
    let (dims, entries) = match FileKind::of(path)? {
        FileKind::Tcs => {
            let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            check_rank(path, TcsHeader::read_from(&file, path)?.rank(), format)?;
            // Copied as it is when its types and format are the program's, else converted.
            return Ok(Tensor::read(path, format)?);
        }
        FileKind::Tns | FileKind::Mtx => read_text::<V>(path, format)?,
    };
    Tensor::from_entries(dims, format.clone(), entries)
        .map_err(|e| format!("{}: {e}", path.display()).into())
}

fn check_rank(path: &Path, rank: usize, format: &Format) -> Result<(), Box<dyn Error>> {
    if rank != format.rank() {
        return Err(format!(
            "{}: the file holds a tensor of rank {rank}, but the statement uses it with {} indices",
            path.display(),
            format.rank()
        )
        .into());
    }
    Ok(())
}

type Entries<V> = Vec<(Vec<usize>, V)>;

/// Reads a `.tns`/`.mtx` file: dimensions from the header, or (`.tns`) the largest
/// coordinate per mode.
fn read_text<V: Value>(
    path: &Path,
    format: &Format,
) -> Result<(Vec<usize>, Entries<V>), Box<dyn Error>> {
    let mut r = open_text(path)?;
    check_rank(path, r.rank(), format)?;
    let rank = r.rank();
    let mut coords = vec![0u64; rank];
    let mut max = vec![0usize; rank];
    let mut entries = Vec::new();
    let bar = progress(path, r.total_bytes());
    while let Some(v) = r.next_entry(&mut coords)? {
        if entries.len() % (1 << 16) == 0 {
            if let Some(b) = &bar {
                b.set_position(r.bytes_read());
            }
        }
        let c: Vec<usize> = coords.iter().map(|&x| x as usize).collect();
        for (m, &x) in c.iter().enumerate() {
            max[m] = max[m].max(x + 1);
        }
        let v = text_value(path, &c, v)?;
        entries.push((c, v));
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let dims = match r.declared_dims() {
        Some(d) => d.into_iter().map(|x| x as usize).collect(),
        None => max,
    };
    Ok((dims, entries))
}

/// A progress bar for reading a large file, shown only on a terminal.
fn progress(path: &Path, total: u64) -> Option<indicatif::ProgressBar> {
    if total < (32 << 20) || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    let style = indicatif::ProgressStyle::with_template(
        "{msg} [{bar:40}] {binary_bytes}/{binary_total_bytes} ({eta})",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(format!("reading {}", path.display()));
    Some(bar)
}

/// Writes the output; the file appears only when complete.
pub fn write<V: Value, I: Index>(path: &Path, t: &Tensor<V, I>) -> Result<(), Box<dyn Error>> {
    match FileKind::of(path)? {
        FileKind::Tcs => write_tensor(path, t, None)?,
        FileKind::Mtx => {
            let d = t.dims();
            let (rows, cols, nnz) = (d[0] as u64, d[1] as u64, Some(t.nnz() as u64));
            let mut w = MtxWriter::create_of(path, rows, cols, nnz, V::TYPE)?;
            for (c, v) in t.entries() {
                w.write_entry(c[0] as u64, c[1] as u64, v)?;
            }
            w.finish()?;
        }
        FileKind::Tns => {
            // Every stored entry, explicit zeros included, so a dense output keeps its
            // dimensions; a scalar is one line holding its value.
            let mut w = TnsWriter::create(path)?;
            if !t.dims().is_empty() {
                // Declares the dimensions, which trailing zeros would otherwise lose.
                let dims: Vec<String> = t.dims().iter().map(|d| d.to_string()).collect();
                w.write_comment(&format!("dims {}", dims.join(" ")))?;
            }
            let mut c64 = Vec::with_capacity(t.dims().len());
            for (c, v) in t.entries() {
                c64.clear();
                c64.extend(c.iter().map(|&x| x as u64));
                w.write_entry(&c64, v)?;
            }
            w.finish()?;
        }
    }
    Ok(())
}
