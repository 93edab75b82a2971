//! The final merge cut into key ranges that workers merge in parallel (`stitch`): where each
//! range's section of every sorted run begins and ends.
//!
//! A boundary is a key, and its *row* every run's lower bound of it (the first record not
//! below it), so that the entries of one coordinate never straddle two ranges. Rows are
//! found window by window, each key's bound in a run searched from the bound of the key
//! before it, and only the keys are kept: the merge finds a window of rows again when its
//! workers reach it ([`Ranges::span`]). A table of every row (ranges × runs) grew with the
//! input at a fixed budget: 1.9 MB of a 16 MiB budget for a 3 GB `.tns`, past the budget
//! for larger files.

use std::fs::File;
use std::ops::Range;
use std::sync::Mutex;

use super::runs::{decode, pack, Run};
use crate::error::{Error, Result};

/// Samples per range when choosing the boundaries: the more, the more even the ranges.
pub(super) const SAMPLES_PER_RANGE: u64 = 8;

/// Records a search reads in one positioned read once its interval is this short, and the
/// first step of its gallop from the bound before.
const SEARCH_WINDOW: u64 = 256;

/// A run's lower bounds are found by reading it from the bound before (in chunks) instead of
/// a search per key when it holds fewer records than this per boundary: a search costs a
/// few positioned reads (a few µs), about what decoding this many records from the page
/// cache costs.
const SCAN_RECORDS_PER_KEY: u64 = 1024;

/// Records read at once by a scan for lower bounds.
const SCAN_CHUNK: u64 = 4096;

/// Words of rows (a position per run) found at once, when cutting and when the merge asks
/// for rows past the ones it holds: few enough for a small budget, many enough that the
/// searches of a window run together.
pub(super) const WINDOW_WORDS: usize = 16 << 10;

/// Rows below the one asked for that a new window keeps: workers take ranges in order and
/// at most `2 * threads` are in flight, so a worker that asks late still finds its rows
/// (one later than this searches them alone).
const WINDOW_LAG: usize = 64;

/// The final merge's key ranges: range `j` is records `row(j)[r]..row(j + 1)[r]` of every
/// run `r`, row 0 every run's start and row `len()` every run's end.
pub(crate) struct Ranges<'a> {
    count: usize,
    rows: Rows<'a>,
    /// For runs distributed by the top bits of their keys (`MergeSource::bucketed`): the
    /// bucket each boundary lies at (range `j` is buckets `buckets[j]..buckets[j + 1]`);
    /// empty otherwise.
    buckets: Vec<usize>,
}

enum Rows<'a> {
    /// Every row, `width` positions each, laid end to end: rows that cost nothing to find
    /// (one run held in memory, or bucketed runs) and are few.
    Table { width: usize, at: Vec<u64> },
    /// Rows found from the boundaries' keys as the merge reaches them.
    Keys(Lazy<'a>),
}

/// One range's section of every run.
pub(crate) struct Span {
    pub lo: Vec<u64>,
    pub hi: Vec<u64>,
    /// The buckets it covers, for bucketed runs.
    pub buckets: Option<Range<usize>>,
}

impl Span {
    /// Entries (before summing duplicates).
    pub fn entries(&self) -> u64 {
        entries_between(&self.lo, &self.hi)
    }
}

/// Records between rows `lo` and `hi`, over all runs.
pub(super) fn entries_between(lo: &[u64], hi: &[u64]) -> u64 {
    hi.iter().zip(lo).map(|(h, l)| h - l).sum()
}

impl<'a> Ranges<'a> {
    /// Ranges between consecutive `rows` (each a position per run), the first every run's
    /// start and the last every run's end.
    pub fn table(rows: Vec<Vec<u64>>, buckets: Vec<usize>) -> Self {
        let width = rows.first().map_or(0, Vec::len);
        Ranges {
            count: rows.len() - 1,
            rows: Rows::Table {
                width,
                at: rows.concat(),
            },
            buckets,
        }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    /// Range `j`'s section of every run.
    pub fn span(&self, j: usize) -> Result<Span> {
        let (lo, hi) = match &self.rows {
            Rows::Table { width, at } => {
                let row = |b: usize| at[b * width..(b + 1) * width].to_vec();
                (row(j), row(j + 1))
            }
            Rows::Keys(lazy) => lazy.rows(j, self.count)?,
        };
        let buckets = self.buckets.get(j..j + 2).map(|b| b[0]..b[1]);
        Ok(Span { lo, hi, buckets })
    }
}

/// Cuts the merge of `runs` (sorted, records of `rank` coordinates) into key ranges of about
/// `target` entries (at least `min_ranges` when each would still hold a few thousand), none
/// above `2 * target` unless it holds one coordinate only. The boundaries are keys sampled
/// evenly from every run (so in proportion to its length); a range the samples made too
/// large is halved at the middle key of its largest section until it fits. The rows are
/// found a window of `window_words` positions at a time ([`WINDOW_WORDS`] but in tests:
/// the ranges do not depend on it), `threads` threads sharing the runs.
pub(crate) fn cut(
    runs: &[Run],
    rank: usize,
    (target, min_ranges): (u64, usize),
    threads: usize,
    window_words: usize,
) -> Result<Ranges<'_>> {
    let files: Vec<RunFile> = runs
        .iter()
        .map(|r| RunFile::open(r, rank))
        .collect::<Result<_>>()?;
    let total: u64 = files.iter().map(|f| f.records).sum();
    let count = total
        .div_ceil(target)
        .max((min_ranges as u64).min(total / 4096))
        .max(1);
    let sampled = sample_keys(&files, rank, (total, count))?;
    let mut lazy = Lazy::new(files, rank, count, window_words);
    let per_window = (window_words / lazy.files.len().max(1)).max(1) * rank;
    let windows: Vec<&[u64]> = match sampled.is_empty() {
        true => vec![&[]],
        false => sampled.chunks(per_window).collect(),
    };
    let mut from = vec![0; lazy.files.len()];
    for (w, keys) in windows.iter().enumerate() {
        let mut cuts = Cuts {
            keys: keys.to_vec(),
            rows: lazy.rows_from(keys, &from, threads)?,
            from,
        };
        if w + 1 == windows.len() {
            cuts.end(&lazy.files);
        }
        cuts.dedup(rank);
        cuts.split(&lazy.files, rank, target)?;
        from = cuts.rows.pop().unwrap_or(cuts.from);
        lazy.keys.extend(cuts.keys);
    }
    lazy.scanned = scanned(&lazy.files, lazy.keys.len() / rank.max(1));
    Ok(Ranges {
        count: lazy.keys.len() / rank.max(1) + 1,
        rows: Rows::Keys(lazy),
        buckets: Vec::new(),
    })
}

/// `count - 1` keys picked evenly from [`SAMPLES_PER_RANGE`] keys a range sampled evenly
/// from the runs (`total` records) laid end to end (so many runs shorter than the sampling
/// step are still sampled), ascending and distinct, `rank` coordinates each laid end to
/// end. The samples
/// are held flat and sorted by index (62 000 of them for a 3 GB `.tns` at 16 MiB: a vector
/// each took 2.5 times the memory).
fn sample_keys(files: &[RunFile], rank: usize, (total, count): (u64, u64)) -> Result<Vec<u64>> {
    let step = (total / (count * SAMPLES_PER_RANGE)).max(1);
    let mut samples = Vec::new();
    let mut next = step / 2;
    let mut start = 0;
    for f in files {
        while next < start + f.records {
            samples.extend(f.key(next - start)?);
            next += step;
        }
        start += f.records;
    }
    let n = (samples.len() / rank.max(1)) as u64;
    let sample = |i: u32| &samples[i as usize * rank..(i as usize + 1) * rank];
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_unstable_by(|&a, &b| sample(a).cmp(sample(b)));
    let mut keys: Vec<u64> = Vec::new();
    for b in 1..count {
        let key = sample(order[(b * n / count) as usize]);
        if keys.len() < rank || &keys[keys.len() - rank..] != key {
            keys.extend_from_slice(key);
        }
    }
    Ok(keys)
}

/// Per run, whether its bounds of `keys` boundaries are found by reading it rather than by
/// searches (see [`SCAN_RECORDS_PER_KEY`]).
fn scanned(files: &[RunFile], keys: usize) -> Vec<bool> {
    files
        .iter()
        .map(|f| f.records < keys as u64 * SCAN_RECORDS_PER_KEY)
        .collect()
}

/// A window of boundaries being cut: `keys` (`rank` coordinates each) and their `rows`, after
/// the row `from` (the window before's last, or every run's start), and, in the last window,
/// the end row with no key.
struct Cuts {
    keys: Vec<u64>,
    rows: Vec<Vec<u64>>,
    from: Vec<u64>,
}

impl Cuts {
    /// Adds the end row (every run's end).
    fn end(&mut self, files: &[RunFile]) {
        self.rows.push(files.iter().map(|f| f.records).collect());
    }

    /// Drops the boundaries whose row equals the one before (empty ranges), with their keys.
    fn dedup(&mut self, rank: usize) {
        let (mut keys, mut rows) = (Vec::new(), Vec::new());
        let mut before = &self.from;
        for (i, row) in self.rows.iter().enumerate() {
            if row != before {
                rows.push(row.clone());
                keys.extend_from_slice(self.keys.get(i * rank..(i + 1) * rank).unwrap_or(&[]));
            }
            before = row;
        }
        (self.keys, self.rows) = (keys, rows);
    }

    /// Halves every range of this window above `2 * target` entries (see [`cut`]).
    fn split(&mut self, files: &[RunFile], rank: usize, target: u64) -> Result<()> {
        let mut j = 0;
        while j < self.rows.len() {
            let lo = if j == 0 {
                &self.from
            } else {
                &self.rows[j - 1]
            };
            let hi = &self.rows[j];
            match entries_between(lo, hi) > 2 * target {
                true => match split_key(files, lo, hi)? {
                    Some((key, row)) => {
                        self.rows.insert(j, row);
                        let at = j * rank;
                        self.keys.splice(at..at, key);
                    }
                    None => j += 1,
                },
                false => j += 1,
            }
        }
        Ok(())
    }
}

/// The key in the middle of the largest section of the range from row `lo` to row `hi` (or
/// just above it, when that key is the range's first) and its row; `None` when the range
/// holds one coordinate only.
fn split_key(files: &[RunFile], lo: &[u64], hi: &[u64]) -> Result<Option<(Vec<u64>, Vec<u64>)>> {
    let r = (0..files.len())
        .max_by_key(|&r| hi[r] - lo[r])
        .expect("a run");
    let mut key = files[r].key(lo[r] + (hi[r] - lo[r]) / 2)?;
    let row_of = |key: &[u64]| -> Result<Vec<u64>> {
        (files.iter().zip(lo))
            .map(|(f, &from)| f.lower_bound_from(key, from))
            .collect()
    };
    let mut row = row_of(&key)?;
    if row == lo {
        // Every key of the range is at least this one: cut above it instead.
        let last = key.last_mut().expect("rank of at least 1");
        let Some(next) = last.checked_add(1) else {
            return Ok(None);
        };
        *last = next;
        row = row_of(&key)?;
    }
    Ok((row != hi).then_some((key, row)))
}

/// The inner boundaries' keys and the rows of a window of them, found again as the merge
/// reaches them.
struct Lazy<'a> {
    files: Vec<RunFile<'a>>,
    rank: usize,
    /// Boundaries `1..count`, `rank` coordinates each, laid end to end, ascending.
    keys: Vec<u64>,
    /// Per run, whether it is scanned rather than searched (see [`scanned`]).
    scanned: Vec<bool>,
    window: Mutex<Window>,
    /// Positions a window holds (see [`cut`]).
    window_words: usize,
}

/// Rows `first..` of the boundaries, laid end to end.
#[derive(Default)]
struct Window {
    first: usize,
    rows: Vec<u64>,
}

impl<'a> Lazy<'a> {
    fn new(files: Vec<RunFile<'a>>, rank: usize, count: u64, window_words: usize) -> Self {
        Lazy {
            window_words,
            scanned: scanned(&files, count as usize),
            files,
            rank,
            keys: Vec::new(),
            window: Mutex::new(Window::default()),
        }
    }

    /// Rows `j` and `j + 1` of `count` ranges, from the window, after finding the next
    /// window when they are not in it. A worker asking for rows the window no longer holds
    /// (later than [`WINDOW_LAG`] ranges) finds them on their own, searched from the start.
    fn rows(&self, j: usize, count: usize) -> Result<(Vec<u64>, Vec<u64>)> {
        let width = self.files.len();
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let held = window.rows.len() / width.max(1);
        let has = |b: usize| b >= window.first && b < window.first + held;
        if !(has(j) && has(j + 1)) {
            if j < window.first {
                drop(window);
                return Ok((self.row_searched(j)?, self.row_searched(j + 1)?));
            }
            *window = self.next_window(&window, j, count)?;
        }
        let row = |b: usize| {
            let at = (b - window.first) * width;
            window.rows[at..at + width].to_vec()
        };
        Ok((row(j), row(j + 1)))
    }

    /// The window holding rows `j` and `j + 1` and as many after as `window_words` allows,
    /// and up to [`WINDOW_LAG`] rows before `j` that `old` holds.
    fn next_window(&self, old: &Window, j: usize, count: usize) -> Result<Window> {
        let width = self.files.len();
        let held = old.rows.len() / width.max(1);
        let first = j.saturating_sub(WINDOW_LAG).max(old.first);
        let first = if first < old.first + held { first } else { j };
        let kept = (old.first + held).saturating_sub(first).min(j + 1 - first);
        let mut rows = match kept {
            0 => Vec::new(),
            _ => old.rows[(first - old.first) * width..][..kept * width].to_vec(),
        };
        let per_window = (self.window_words / width.max(1)).max(2);
        let end = (j + per_window).min(count);
        let mut b = first + kept;
        let mut from = match kept {
            // Nothing to go on from: the first row searched (a scan from every run's start
            // would read everything before it).
            0 if b > 0 => {
                let row = self.row_searched(b)?;
                rows.extend_from_slice(&row);
                b += 1;
                row
            }
            0 => vec![0; width],
            _ => rows[rows.len() - width..].to_vec(),
        };
        while b <= end {
            // A run of inner boundaries at once, then the end row.
            let inner = b.max(1)..end.min(count - 1) + 1;
            if b == 0 {
                rows.extend(std::iter::repeat_n(0, width));
                b = 1;
                continue;
            }
            if b == count {
                rows.extend(self.files.iter().map(|f| f.records));
                b += 1;
                continue;
            }
            let keys = &self.keys[(inner.start - 1) * self.rank..(inner.end - 1) * self.rank];
            for row in self.rows_from(keys, &from, 1)? {
                rows.extend_from_slice(&row);
                from = row;
            }
            b = inner.end;
        }
        Ok(Window { first, rows })
    }

    /// Row `b` of the boundaries, searched in every run from its start.
    fn row_searched(&self, b: usize) -> Result<Vec<u64>> {
        let count = self.keys.len() / self.rank.max(1) + 1;
        match b {
            0 => Ok(vec![0; self.files.len()]),
            b if b == count => Ok(self.files.iter().map(|f| f.records).collect()),
            b => {
                let key = &self.keys[(b - 1) * self.rank..b * self.rank];
                (self.files.iter())
                    .map(|f| f.lower_bound_from(key, 0))
                    .collect()
            }
        }
    }

    /// The rows of `keys` (ascending, `rank` coordinates each), each run's bounds found from
    /// its position in `from` (a row at or below the first key's), the runs shared out among
    /// `threads` threads.
    fn rows_from(&self, keys: &[u64], from: &[u64], threads: usize) -> Result<Vec<Vec<u64>>> {
        let n = keys.len() / self.rank.max(1);
        let column = |r: usize| {
            let f = &self.files[r];
            match self.scanned[r] {
                true => f.scan_from(keys, self.rank, from[r]),
                false => f.search_from(keys, self.rank, from[r]),
            }
        };
        let runs = self.files.len();
        let per = runs.div_ceil(threads.max(1)).max(1);
        let columns: Vec<Vec<u64>> = if runs < 2 || threads < 2 || n == 0 {
            (0..runs).map(column).collect::<Result<_>>()?
        } else {
            let column = &column;
            let parts: Vec<Result<Vec<Vec<u64>>>> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..runs)
                    .step_by(per)
                    .map(|r| scope.spawn(move || (r..(r + per).min(runs)).map(column).collect()))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("searching threads do not panic"))
                    .collect()
            });
            let mut columns = Vec::with_capacity(runs);
            for p in parts {
                columns.extend(p?);
            }
            columns
        };
        Ok((0..n)
            .map(|i| columns.iter().map(|c| c[i]).collect())
            .collect())
    }
}

/// A run file opened for positioned reads of keys; a run held in memory has no file and is
/// read where it lies.
pub(super) struct RunFile<'a> {
    pub run: &'a Run,
    pub file: Option<File>,
    rank: usize,
    pub records: u64,
}

impl<'a> RunFile<'a> {
    pub fn open(run: &'a Run, rank: usize) -> Result<Self> {
        let (file, len) = match run.held() {
            Some(pairs) => (None, (pairs.len() * 16) as u64),
            None => {
                let path = run.path();
                let file = File::open(path).map_err(|e| Error::io(path, e))?;
                let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
                (Some(file), len)
            }
        };
        Ok(RunFile {
            records: len / run.record_bytes(rank) as u64,
            run,
            file,
            rank,
        })
    }

    /// The key of record `i`.
    pub fn key(&self, i: u64) -> Result<Vec<u64>> {
        let mut key = Vec::new();
        self.each_key(i..i + 1, |k| {
            key = k.to_vec();
            false
        })?;
        Ok(key)
    }

    /// Calls `f` with the keys of records `range` (read at once) in order while it returns
    /// true; how many keys it took.
    pub fn each_key(&self, range: Range<u64>, mut f: impl FnMut(&[u64]) -> bool) -> Result<u64> {
        let rec = self.run.record_bytes(self.rank);
        let bytes = self.read(range)?;
        let layout = (self.run.narrow(), self.run.packed());
        let (mut key, mut packed, mut value) = (vec![0; self.rank], 0, 0.0);
        let mut n = 0;
        for r in bytes.chunks_exact(rec) {
            decode(r, layout, &mut key, &mut packed, &mut value);
            if !f(&key) {
                break;
            }
            n += 1;
        }
        Ok(n)
    }

    /// The bytes of records `range`, read at once.
    fn read(&self, range: Range<u64>) -> Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let rec = self.run.record_bytes(self.rank) as u64;
        let (from, to) = (range.start * rec, range.end * rec);
        let Some(file) = &self.file else {
            let pairs: &[u8] = bytemuck::cast_slice(self.run.held().unwrap_or(&[]));
            return Ok(pairs[from as usize..to as usize].to_vec());
        };
        let mut bytes = vec![0u8; (to - from) as usize];
        file.read_exact_at(&mut bytes, from)
            .map_err(|e| Error::io(self.run.path(), e))?;
        Ok(bytes)
    }

    /// The bounds of `keys` (ascending, `rank` coordinates each), every record before `from`
    /// being below the first: each a [`RunFile::lower_bound_from`] the bound before.
    fn search_from(&self, keys: &[u64], rank: usize, from: u64) -> Result<Vec<u64>> {
        let mut at = from;
        keys.chunks_exact(rank)
            .map(|k| {
                at = self.lower_bound_from(k, at)?;
                Ok(at)
            })
            .collect()
    }

    /// The first record at or after `from` whose key is not below `key`, every record before
    /// `from` being below it: a gallop from `from` (steps doubling from [`SEARCH_WINDOW`]),
    /// then a binary search down to [`SEARCH_WINDOW`] records read at once. A key whose
    /// bound lies near the bound before (the next boundary in a run) costs a read or two.
    pub fn lower_bound_from(&self, key: &[u64], from: u64) -> Result<u64> {
        let (mut lo, mut hi, mut step) = (from, self.records, SEARCH_WINDOW);
        while lo + step < hi {
            if self.key(lo + step)?.as_slice() < key {
                lo += step + 1;
                step *= 2;
            } else {
                hi = lo + step;
            }
        }
        while hi - lo > SEARCH_WINDOW {
            let mid = lo + (hi - lo) / 2;
            if self.key(mid)?.as_slice() < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo == hi {
            return Ok(lo);
        }
        Ok(lo + self.each_key(lo..hi, |k| k < key)?)
    }

    /// [`RunFile::search_from`] by one pass over the run from `from`, [`SCAN_CHUNK`] records
    /// read at once: where the keys lie close together in the run (many key ranges over many
    /// runs: a small budget) a search per key took more positioned reads than the run's
    /// bytes (at 16 MiB the bench's 263 MB `.tns` makes 228 runs and 680 ranges, and the
    /// searches took 620 000 reads).
    pub fn scan_from(&self, keys: &[u64], rank: usize, from: u64) -> Result<Vec<u64>> {
        self.scan_chunked(keys, rank, from, SCAN_CHUNK)
    }

    /// [`RunFile::scan_from`], `chunk` records read at once.
    fn scan_chunked(&self, keys: &[u64], rank: usize, from: u64, chunk: u64) -> Result<Vec<u64>> {
        let n = keys.len() / rank.max(1);
        // Keys that fit a packed run's fields are compared packed, as the run stores them.
        let packed: Option<Vec<u64>> = self.run.packed().and_then(|bits| {
            keys.chunks_exact(rank)
                .map(|k| {
                    let fits = k
                        .iter()
                        .zip(bits)
                        .all(|(&c, &b)| c.checked_shr(b) == Some(0) || b >= 64);
                    fits.then(|| pack(k, bits))
                })
                .collect()
        });
        let key = |i: usize| &keys[i * rank..(i + 1) * rank];
        let mut bounds = Vec::with_capacity(n);
        let mut at = from;
        while at < self.records && bounds.len() < n {
            let end = (at + chunk).min(self.records);
            let mut i = at;
            match &packed {
                Some(packed) => {
                    for p in self.read(at..end)?.chunks_exact(16) {
                        let p = u64::from_le_bytes(p[..8].try_into().expect("8 bytes"));
                        while bounds.len() < n && packed[bounds.len()] <= p {
                            bounds.push(i);
                        }
                        i += 1;
                    }
                }
                None => {
                    self.each_key(at..end, |k| {
                        while bounds.len() < n && key(bounds.len()) <= k {
                            bounds.push(i);
                        }
                        i += 1;
                        bounds.len() < n
                    })?;
                }
            }
            at = end;
        }
        bounds.resize(n, self.records);
        Ok(bounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::runs::sort_runs;
    use crate::convert::ConvertOptions;
    use crate::format::Format;

    /// A search from any position at or below the bound, and a scan from it, find the first
    /// record not below the key, as a pass over the whole run does: for keys in the run
    /// (repeated ones included), between and around them.
    #[test]
    fn lower_bounds_from_any_start_are_exact() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("r.tns");
        let mut text = String::new();
        let mut x = 7u64;
        for e in 0..8000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            text += &format!("{} {} {e}\n", (x >> 40) % 40 + 1, (x >> 20) % 30 + 1);
        }
        std::fs::write(&input, text).unwrap();
        let opts = ConvertOptions {
            run_entries: Some(4000),
            ..Default::default()
        };
        let format = Format::all_compressed(2);
        let sorted = sort_runs(&input, &format, &opts, dir.path(), &crate::NoProgress).unwrap();
        let runs = sorted.source.runs();
        assert!(runs.len() >= 2);
        for run in runs {
            let file = RunFile::open(run, 2).unwrap();
            let mut all = Vec::new();
            file.each_key(0..file.records, |k| {
                all.push(k.to_vec());
                true
            })
            .unwrap();
            assert!(all.len() > 2 * SEARCH_WINDOW as usize);
            // Second coordinates up to 29 take 5 bits: 32 and 33 do not fit a packed key.
            let every: Vec<u64> = (0..42)
                .flat_map(|a| (0..34).flat_map(move |b| [a, b]))
                .collect();
            let want: Vec<u64> = every
                .chunks_exact(2)
                .map(|k| all.partition_point(|x| x.as_slice() < k) as u64)
                .collect();
            for (i, k) in every.chunks_exact(2).enumerate() {
                for from in [0, want[i] / 3, want[i].saturating_sub(300), want[i]] {
                    assert_eq!(file.lower_bound_from(k, from).unwrap(), want[i], "{k:?}");
                }
            }
            for start in [0, 11, 400] {
                let keys = &every[start * 2..];
                let from = want[start];
                assert_eq!(file.search_from(keys, 2, from).unwrap(), want[start..]);
                assert_eq!(file.scan_from(keys, 2, from).unwrap(), want[start..]);
                assert_eq!(
                    file.scan_chunked(keys, 2, from, 100).unwrap(),
                    want[start..]
                );
            }
            assert!(run.packed().is_some(), "the packed comparison is exercised");
        }
    }
}
