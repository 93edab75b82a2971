// Reading inputs and writing the output of a generated program, by file extension, with
// the readers and writers of tessera-formats (errors name the file, line and column; output
// files appear only when complete).

use std::cell::RefCell;
use std::error::Error;
use std::io::IsTerminal;
use std::path::Path;
use tessera_formats::{open_text, FileKind, Format, Index, Progress, TcsHeader, Tensor, Value};

/// Rejects an output path that cannot hold the output before any work is done: found only
/// when writing, a missing directory would cost the whole computation (across ranks it also
/// surfaced as a temporary file's name, or as rank 0 alone aborting the job).
pub fn check_output_path(path: &Path, format: &Format) -> Result<(), Box<dyn Error>> {
    if let Some(why) = tessera_formats::output_path_problem(path) {
        return Err(format!("`-o {}`: {why}", path.display()).into());
    }
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
/// type `V` (an error names the entry `V` cannot hold: a fraction read as i64). A text file
/// goes through the streaming converter, on every core (`Tensor::read_with_progress`).
pub fn read<V: Value, I: Index>(
    path: &Path,
    format: &Format,
) -> Result<Tensor<V, I>, Box<dyn Error>> {
    let rank = match FileKind::of(path)? {
        FileKind::Tcs => {
            let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            TcsHeader::read_from(&file, path)?.rank()
        }
        FileKind::Tns | FileKind::Mtx => open_text(path)?.rank(),
    };
    check_rank(path, rank, format)?;
    // A `.tcs` file is copied as it is when its types and format are the program's, else
    // converted.
    Ok(Tensor::read_with_progress(path, format, &Bar::new(path))?)
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

/// A bar per stage of reading a large file (scan, sort, write, ...), on a terminal only.
struct Bar {
    name: String,
    shown: bool,
    bar: RefCell<Option<indicatif::ProgressBar>>,
}

impl Bar {
    fn new(path: &Path) -> Bar {
        let large = std::fs::metadata(path).is_ok_and(|m| m.len() >= 32 << 20);
        Bar {
            name: path.display().to_string(),
            shown: large && std::io::stderr().is_terminal(),
            bar: RefCell::new(None),
        }
    }
}

impl Progress for Bar {
    fn stage(&self, stage: &str, total: u64) {
        if !self.shown {
            return;
        }
        let bar = indicatif::ProgressBar::new(total);
        let style = indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_message(format!("reading {}: {stage}", self.name));
        if let Some(old) = self.bar.replace(Some(bar)) {
            old.finish_and_clear();
        }
    }
    fn update(&self, done: u64) {
        if let Some(b) = &*self.bar.borrow() {
            b.set_position(done);
        }
    }
    fn end_stage(&self) {
        if let Some(b) = self.bar.borrow_mut().take() {
            b.finish_and_clear();
        }
    }
}

/// Writes the output (by extension); the file appears only when complete. A `.tns` file gets
/// every stored entry, explicit zeros included, after a `# dims` comment, so a dense output
/// keeps its dimensions; a scalar is one line holding its value.
pub fn write<V: Value, I: Index>(path: &Path, t: &Tensor<V, I>) -> Result<(), Box<dyn Error>> {
    Ok(t.write(path)?)
}
