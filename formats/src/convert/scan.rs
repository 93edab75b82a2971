//! Pass one over sorted input: dimensions, sortedness in the target order, and the number of
//! coordinates stored at each level (the count of distinct coordinate prefixes; from the
//! non-unique level of a COO format down, the count of distinct entries).

use std::path::{Path, PathBuf};

use super::{duplicate_error, ConvertOptions, Duplicates, Progress, SortedSource};
use crate::chunks::Chunk;
use crate::error::Result;
use crate::format::Format;
use crate::text::open_text;

/// What pass one learned about presorted input.
pub(crate) struct Scanned {
    pub entries: u64,
    pub dims: Vec<u64>,
    pub counts: Vec<u64>,
}

/// Counts, per level, how many distinct coordinate prefixes end at that level (every
/// distinct entry counts at the levels from `coo`, a COO format's non-unique level, down).
pub(crate) struct LevelCounter {
    prev: Vec<u64>,
    pub counts: Vec<u64>,
    started: bool,
    coo: usize,
}

impl LevelCounter {
    pub fn new(format: &Format) -> Self {
        let rank = format.rank();
        LevelCounter {
            prev: vec![0; rank],
            counts: vec![0; rank],
            started: false,
            coo: format.coo_start().unwrap_or(rank),
        }
    }

    /// Adds an entry that is strictly greater than the previous one.
    pub fn push(&mut self, key: &[u64]) {
        let first_new = if self.started {
            key.iter()
                .zip(&self.prev)
                .position(|(a, b)| a != b)
                .unwrap_or(key.len())
        } else {
            0
        };
        for c in &mut self.counts[first_new.min(self.coo)..] {
            *c += 1;
        }
        self.prev.copy_from_slice(key);
        self.started = true;
    }
}

/// Pass one over a text file: `None` as soon as an entry comes out of storage order (the
/// caller then sorts externally).
pub(crate) fn scan_sorted(
    input: &Path,
    format: &Format,
    opts: &ConvertOptions,
    progress: &dyn Progress,
) -> Result<Option<Scanned>> {
    let mut reader = open_text(input)?;
    reader.set_memory_budget(opts.memory);
    // Pass two parses (and checks) the values; pass one needs only coordinates.
    reader.skip_values();
    let rank = reader.rank();
    progress.stage("scan", reader.total_bytes());
    let order = format.mode_order();
    let mut chunk = Chunk::default();
    let mut key = vec![0u64; rank];
    let mut prev = vec![0u64; rank];
    let mut max = vec![0u64; rank];
    let mut counter = LevelCounter::new(format);
    let mut entries = 0u64;
    while reader.next_chunk(&mut chunk)? {
        for e in 0..chunk.len() {
            let coords = &chunk.coords[e * rank..(e + 1) * rank];
            for (k, &m) in order.iter().enumerate() {
                key[k] = coords[m];
                max[m] = max[m].max(coords[m]);
            }
            let cmp = if entries == 0 {
                std::cmp::Ordering::Greater
            } else {
                key.cmp(&prev)
            };
            match cmp {
                std::cmp::Ordering::Less => {
                    progress.end_stage();
                    return Ok(None);
                }
                std::cmp::Ordering::Equal if opts.duplicates == Duplicates::Error => {
                    return Err(duplicate_error(input, format, &key));
                }
                std::cmp::Ordering::Equal => {}
                std::cmp::Ordering::Greater => counter.push(&key),
            }
            std::mem::swap(&mut key, &mut prev);
            entries += 1;
        }
        super::tick(progress, reader.bytes_read())?;
    }
    progress.end_stage();
    let dims = reader
        .declared_dims()
        .unwrap_or_else(|| max.iter().map(|&m| m + 1).collect());
    Ok(Some(Scanned {
        entries,
        dims,
        counts: counter.counts,
    }))
}

/// A text file read once, in the hope that it is sorted in the target order: entries are
/// handed on (in level order) while they keep that order; the first one out of order stops
/// the scan with `unsorted` set, and the caller falls back to the external sort. Coordinate
/// maxima are kept for files without a `# dims` comment.
pub(crate) struct CheckedTextSource {
    pub path: PathBuf,
    pub format: Format,
    pub memory: usize,
    /// Set when an entry came out of order (the scan then ended with an error to ignore).
    pub unsorted: bool,
    /// Entries read.
    pub entries: u64,
    /// Largest coordinate seen per mode.
    pub max: Vec<u64>,
    /// Dimensions declared by the file, if any.
    pub declared: Option<Vec<u64>>,
}

impl CheckedTextSource {
    /// Dimensions: declared, or one past the largest coordinates.
    pub fn dims(&self) -> Vec<u64> {
        self.declared
            .clone()
            .unwrap_or_else(|| self.max.iter().map(|&m| m + 1).collect())
    }
}

impl SortedSource for CheckedTextSource {
    fn scan(
        &mut self,
        progress: &dyn Progress,
        f: &mut dyn FnMut(&[u64], f64) -> Result<()>,
    ) -> Result<()> {
        let mut reader = open_text(&self.path)?;
        reader.set_memory_budget(self.memory);
        self.declared = reader.declared_dims();
        progress.stage("convert", reader.total_bytes());
        let order = self.format.mode_order();
        let rank = reader.rank();
        self.max = vec![0; rank];
        let mut chunk = Chunk::default();
        let mut key = vec![0u64; rank];
        let mut prev = vec![0u64; rank];
        while reader.next_chunk(&mut chunk)? {
            for (e, &v) in chunk.vals.iter().enumerate() {
                let coords = &chunk.coords[e * rank..(e + 1) * rank];
                for (k, &m) in order.iter().enumerate() {
                    key[k] = coords[m];
                    self.max[m] = self.max[m].max(coords[m]);
                }
                if self.entries > 0 && key < prev {
                    self.unsorted = true;
                    progress.end_stage();
                    return Err(crate::error::Error::Cancelled);
                }
                f(&key, v)?;
                std::mem::swap(&mut key, &mut prev);
                self.entries += 1;
            }
            super::tick(progress, reader.bytes_read())?;
        }
        progress.end_stage();
        Ok(())
    }

    fn dims(&self) -> Option<Vec<u64>> {
        Some(CheckedTextSource::dims(self))
    }
}

/// A presorted text file read again for pass two.
pub(crate) struct TextSource {
    pub path: PathBuf,
    pub format: Format,
    /// The conversion's memory budget, passed on to the reader.
    pub memory: usize,
}

impl SortedSource for TextSource {
    fn scan(
        &mut self,
        progress: &dyn Progress,
        f: &mut dyn FnMut(&[u64], f64) -> Result<()>,
    ) -> Result<()> {
        let mut reader = open_text(&self.path)?;
        reader.set_memory_budget(self.memory);
        progress.stage("write", reader.total_bytes());
        let order = self.format.mode_order();
        let rank = reader.rank();
        let mut chunk = Chunk::default();
        let mut key = vec![0u64; rank];
        while reader.next_chunk(&mut chunk)? {
            for (e, &v) in chunk.vals.iter().enumerate() {
                let coords = &chunk.coords[e * rank..(e + 1) * rank];
                for (k, &m) in order.iter().enumerate() {
                    key[k] = coords[m];
                }
                f(&key, v)?;
            }
            super::tick(progress, reader.bytes_read())?;
        }
        progress.end_stage();
        Ok(())
    }
}
