//! `tessera-data info FILE`: header, dimensions, nonzeros, level sizes, bytes and the
//! validation result; a non-zero exit status for an invalid file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tessera_datasets::progress::Bars;
use tessera_formats::tcs::ArrayKind;
use tessera_formats::{open_text, FileKind, LevelType, Progress, TcsFile};

const EXAMPLES: &str = "\
Examples:
  tessera-data info t.tcs     # header, levels, arrays; validates every array and checksum
  tessera-data info A.mtx     # reads every entry: dimensions, entries, sortedness";

/// Show what a file holds and whether it is valid.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// A .tcs, .tns or .mtx file.
    file: PathBuf,
}

impl Args {
    pub fn run(&self, quiet: bool) -> anyhow::Result<ExitCode> {
        let result = match FileKind::of(&self.file)? {
            FileKind::Tcs => tcs_info(&self.file, &Bars::new(quiet)),
            _ => text_info(&self.file, &Bars::new(quiet)),
        };
        match result {
            Ok(()) => {
                say!("validation:  ok");
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                say!("validation:  FAILED");
                eprintln!("error: {e}");
                Ok(ExitCode::FAILURE)
            }
        }
    }
}

fn tcs_info(path: &Path, bars: &Bars) -> Result<(), tessera_formats::Error> {
    let f = TcsFile::open_with_progress(path, bars)?;
    let h = f.header();
    let dims: Vec<String> = h.modes.iter().map(|m| m.dim.to_string()).collect();
    say!("file:        {}", path.display());
    say!(
        "kind:        .tcs version {} ({})",
        h.version,
        if h.is_block { "block" } else { "whole tensor" }
    );
    say!(
        "values:      {}, {}-bit coordinates",
        h.value_type.name(),
        h.index_bits
    );
    say!("rank:        {}", h.rank());
    say!("dims:        {}", dims.join(" x "));
    say!("format:      {}", f.format());
    say!("nonzeros:    {} stored values", h.nnz);
    if h.is_block {
        for (m, mode) in h.modes.iter().enumerate() {
            say!(
                "split m{m}:    [{}, {}) piece {} of {}",
                mode.split_lo,
                mode.split_hi,
                mode.split_index,
                mode.split_count
            );
        }
    }
    for (k, l) in h.levels.iter().enumerate() {
        match l.level_type {
            LevelType::Dense => say!(
                "level {k}:     dense, mode {}, size {}, offset {}",
                l.mode,
                l.size,
                l.offset
            ),
            LevelType::Compressed => say!(
                "level {k}:     compressed, mode {}, {} coordinates",
                l.mode,
                l.size
            ),
            LevelType::Singleton => say!(
                "level {k}:     singleton, mode {}, {} coordinates",
                l.mode,
                l.size
            ),
        }
    }
    for (i, a) in h.arrays.iter().enumerate() {
        let kind = match a.kind {
            ArrayKind::Pos => "pos",
            ArrayKind::Crd => "crd",
            ArrayKind::Vals => "vals",
        };
        // A segmented (version 3) array: where its first extent lies, and how many it has.
        let extents = h.array_extents(i);
        let at = extents.first().map_or(a.offset, |e| e.0);
        let pieces = match extents.len() {
            0 | 1 => String::new(),
            n => format!(" in {n} extents"),
        };
        say!(
            "array:       {kind:<4} level {} at byte {at:>12}, {:>14} bytes, crc32 {:08x}{pieces}",
            a.level,
            a.len,
            a.crc32
        );
    }
    say!("bytes:       {} (header {})", h.file_len, h.header_len);
    if !h.extents.is_empty() {
        say!(
            "extents:     {} (segmented arrays; table of {} bytes at the end)",
            h.extents.len(),
            h.table_len()
        );
    }
    Ok(())
}

fn text_info(path: &Path, bars: &Bars) -> Result<(), tessera_formats::Error> {
    let mut r = open_text(path)?;
    let rank = r.rank();
    let mut c = vec![0u64; rank];
    let mut prev = vec![0u64; rank];
    let mut max = vec![0u64; rank];
    let (mut n, mut sorted, mut zeros) = (0u64, true, 0u64);
    bars.stage("scan", r.total_bytes());
    while let Some(v) = r.next_entry(&mut c)? {
        if n > 0 && c <= prev {
            sorted = false;
        }
        for (m, &x) in c.iter().enumerate() {
            max[m] = max[m].max(x);
        }
        zeros += u64::from(v == 0.0);
        prev.copy_from_slice(&c);
        n += 1;
        if n.is_multiple_of(65536) {
            bars.update(r.bytes_read());
        }
    }
    bars.end_stage();
    let (dims, how) = match r.declared_dims() {
        Some(d) => (d, "declared"),
        None => (max.iter().map(|m| m + 1).collect(), "largest coordinates"),
    };
    let dims: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    say!("file:        {}", path.display());
    say!("rank:        {rank}");
    say!("dims:        {} ({how})", dims.join(" x "));
    say!("entries:     {n} ({zeros} explicit zeros)");
    say!(
        "order:       {}",
        if sorted {
            "sorted, no repeats (converts in one pass, no sort)"
        } else {
            "unsorted or with repeats (converts by external sort)"
        }
    );
    say!("bytes:       {}", r.total_bytes());
    Ok(())
}
