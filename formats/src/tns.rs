//! FROSTT `.tns` files: one entry per line, 1-based coordinates then the value, separated by
//! spaces or tabs; `#` comments and blank lines are skipped. A file whose lines hold a single
//! number is a rank-0 tensor (a scalar). A comment `# dims D1 D2 …` before the first entry
//! declares the dimensions (Tessera writes one): entries are then checked against them, and a
//! tensor without nonzeros or with empty trailing slices keeps its shape.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::atomic::AtomicFile;
use crate::chunks::{parse_threads, Chunk, How, KeyPacking, ParallelParser};
use crate::error::{Error, Result, SyntaxError};
use crate::lines::{decimal_prefix, fields, is_blank, parse_f64, parse_u64, LineReader};
use crate::text::{EntryReader, READ_BUFFER};

/// Budget assumed when none is set: room for every worker's blocks.
const DEFAULT_MEMORY: usize = 256 << 20;

/// Streaming `.tns` reader; the rank is taken from the first entry line.
pub struct TnsReader {
    path: PathBuf,
    lines: LineReader<File>,
    rank: usize,
    total: u64,
    /// The first entry, parsed while opening to learn the rank.
    first: Option<(Vec<u64>, f64, u64)>,
    /// Dimensions from a `# dims` comment.
    dims: Option<Vec<u64>>,
    /// Started by the first [`EntryReader::next_chunk`] before any `next_entry`.
    parallel: Option<ParallelParser>,
    /// True once `next_entry` has been used (batches then come from the sequential reader).
    sequential: bool,
    /// False after [`EntryReader::skip_values`].
    values: bool,
    /// From [`EntryReader::pack_keys`]: the parallel parser packs keys into pairs.
    packing: Option<KeyPacking>,
    /// From [`EntryReader::set_memory_budget`]: bounds the parallel parser's blocks in flight.
    memory: usize,
    line: u64,
}

impl TnsReader {
    /// Opens `path` and reads up to its first entry.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let total = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut r = TnsReader {
            path: path.to_path_buf(),
            lines: LineReader::new(file, READ_BUFFER),
            rank: 0,
            total,
            first: None,
            dims: None,
            parallel: None,
            sequential: false,
            values: true,
            packing: None,
            memory: DEFAULT_MEMORY,
            line: 0,
        };
        let path = r.path.clone();
        let syntax = |line, (column, kind)| Error::Syntax {
            path: path.clone(),
            line,
            column,
            kind,
        };
        let (line_no, line) = loop {
            match r.lines.next_line().map_err(|e| Error::io(&path, e))? {
                None if r.dims.is_some() => {
                    r.rank = r.dims.as_ref().map_or(0, Vec::len);
                    return Ok(r);
                }
                None => {
                    let line = r.lines.line_no() + 1;
                    return Err(syntax(line, (1, SyntaxError::Empty)));
                }
                Some((n, l)) if is_entry(l) => break (n, l),
                Some((n, l)) => {
                    if r.dims.is_none() {
                        r.dims = parse_dims_comment(l).map_err(|e| syntax(n, e))?;
                    }
                }
            }
        };
        let rank = r.dims.as_ref().map_or(fields(line).count() - 1, Vec::len);
        let mut coords = vec![0; rank];
        let v = parse_entry(line, &mut coords)
            .and_then(|v| check_bounds(line, &coords, r.dims.as_deref()).map(|_| v))
            .map_err(|e| syntax(line_no, e))?;
        r.rank = rank;
        r.first = Some((coords, v, line_no));
        Ok(r)
    }
}

/// `# dims 3 4 5` declares the dimensions; other comments are ignored.
fn parse_dims_comment(line: &[u8]) -> Result<Option<Vec<u64>>, (u64, SyntaxError)> {
    let mut it = fields(line);
    let rest: Vec<(u64, &[u8])> = match (it.next().map(|f| f.1), it.next().map(|f| f.1)) {
        (Some(b"#"), Some(b"dims")) => it.collect(),
        _ => return Ok(None),
    };
    let bad = |col, f: &[u8]| {
        let msg = format!("`# dims` needs dimensions as integers, found `{}`", show(f));
        (col, SyntaxError::Header(msg))
    };
    rest.iter()
        .map(|&(col, f)| parse_u64(f).ok_or_else(|| bad(col, f)))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Entries must lie inside declared dimensions.
fn check_bounds(
    line: &[u8],
    coords: &[u64],
    dims: Option<&[u64]>,
) -> Result<(), (u64, SyntaxError)> {
    let Some(dims) = dims else { return Ok(()) };
    for ((&c, &d), (col, _)) in coords.iter().zip(dims).zip(fields(line)) {
        if c >= d {
            return Err((
                col,
                SyntaxError::OutOfBounds {
                    coord: c + 1,
                    dim: d,
                },
            ));
        }
    }
    Ok(())
}

fn is_entry(line: &[u8]) -> bool {
    !is_blank(line) && line.iter().find(|&&b| b != b' ' && b != b'\t') != Some(&b'#')
}

/// One `.tns` line for the parallel parser: an entry, nothing (comment or blank), or an error.
pub(crate) fn parse_line(
    line: &[u8],
    coords: &mut [u64],
    dims: Option<&[u64]>,
) -> Result<Option<f64>, (u64, SyntaxError)> {
    parse_line_impl::<true>(line, coords, dims)
}

/// `.tns` lines for the block packer of a conversion, checked against declared dimensions.
pub(crate) struct TnsSyntax {
    pub dims: Option<Vec<u64>>,
}

impl crate::convert::LineSyntax for TnsSyntax {
    #[inline]
    fn parse(&self, line: &[u8], coords: &mut [u64]) -> Result<Option<f64>, (u64, SyntaxError)> {
        parse_line_impl::<true>(line, coords, self.dims.as_deref())
    }

    #[inline]
    fn scans_entries(&self) -> bool {
        true
    }

    #[inline]
    fn inside(&self, coords: &[u64]) -> bool {
        self.dims
            .as_ref()
            .is_none_or(|d| coords.iter().zip(d).all(|(c, d)| c < d))
    }
}

/// [`parse_line`] for readers that only need coordinates: values are not converted (0 is
/// returned) unless the line needs the careful parser, so a bad value may go unnoticed here.
pub(crate) fn parse_line_coords(
    line: &[u8],
    coords: &mut [u64],
    dims: Option<&[u64]>,
) -> Result<Option<f64>, (u64, SyntaxError)> {
    parse_line_impl::<false>(line, coords, dims)
}

#[inline]
fn parse_line_impl<const VALUE: bool>(
    line: &[u8],
    coords: &mut [u64],
    dims: Option<&[u64]>,
) -> Result<Option<f64>, (u64, SyntaxError)> {
    if let Some(v) = fast_fields::<VALUE>(line, coords) {
        if dims.is_none_or(|d| coords.iter().zip(d).all(|(c, d)| c < d)) {
            return Ok(Some(v));
        }
    }
    if !is_entry(line) {
        return Ok(None);
    }
    let v = parse_entry(line, coords)?;
    check_bounds(line, coords, dims)?;
    Ok(Some(v))
}

/// Parses `rank` coordinates (made 0-based) and a value; errors carry the column.
pub(crate) fn parse_entry(line: &[u8], coords: &mut [u64]) -> Result<f64, (u64, SyntaxError)> {
    match fast_entry(line, coords) {
        Some(v) => Ok(v),
        None => slow_entry(line, coords),
    }
}

/// The common case in one pass over the bytes; `None` for anything unusual (including every
/// error), which [`slow_entry`] then parses again to say exactly what is wrong.
#[inline]
fn fast_entry(line: &[u8], coords: &mut [u64]) -> Option<f64> {
    fast_fields::<true>(line, coords)
}

/// [`fast_entry`], optionally without converting the value (then 0 is returned).
#[inline]
pub(crate) fn fast_fields<const VALUE: bool>(line: &[u8], coords: &mut [u64]) -> Option<f64> {
    let n = line.len();
    let mut i = 0;
    let is_space = |b: u8| b == b' ' || b == b'\t';
    for c in coords.iter_mut() {
        while i < n && is_space(line[i]) {
            i += 1;
        }
        let start = i;
        let mut x: u64 = 0;
        while i < n {
            let d = line[i].wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            x = x.wrapping_mul(10).wrapping_add(d as u64);
            i += 1;
        }
        // At most 19 digits cannot overflow; longer numbers take the careful path.
        if i == start || i - start > 19 || x == 0 || (i < n && !is_space(line[i])) {
            return None;
        }
        *c = x - 1;
    }
    while i < n && is_space(line[i]) {
        i += 1;
    }
    let start = i;
    // The common decimal form converts as it is scanned; anything else ends at the field's
    // end and goes to the general parser.
    let fast = if VALUE {
        decimal_prefix(&line[start..])
            .filter(|&(_, len)| start + len == n || is_space(line[start + len]))
    } else {
        None
    };
    let v = match fast {
        Some((v, len)) => {
            i = start + len;
            v
        }
        None => {
            while i < n && !is_space(line[i]) {
                i += 1;
            }
            if VALUE {
                parse_f64(&line[start..i])?
            } else if i > start {
                0.0
            } else {
                return None;
            }
        }
    };
    while i < n && is_space(line[i]) {
        i += 1;
    }
    (i == n).then_some(v)
}

/// Field by field, with the column and kind of any error.
fn slow_entry(line: &[u8], coords: &mut [u64]) -> Result<f64, (u64, SyntaxError)> {
    let rank = coords.len();
    let mut it = fields(line);
    for c in coords.iter_mut() {
        let (col, f) = it.next().ok_or_else(|| field_count(line, rank))?;
        *c = parse_coord(f).map_err(|k| (col, k))?;
    }
    let (col, f) = it.next().ok_or_else(|| field_count(line, rank))?;
    let v = parse_f64(f).ok_or_else(|| (col, SyntaxError::BadValue(show(f))))?;
    if it.next().is_some() {
        return Err(field_count(line, rank));
    }
    Ok(v)
}

fn field_count(line: &[u8], rank: usize) -> (u64, SyntaxError) {
    let found: Vec<(u64, &[u8])> = fields(line).collect();
    // Point at the first surplus field, or just past the end when fields are missing.
    let column = found
        .get(rank + 1)
        .map(|f| f.0)
        .unwrap_or(line.len() as u64 + 1);
    let what = format!("{rank} coordinates and a value");
    (
        column,
        SyntaxError::FieldCount {
            expected: rank + 1,
            found: found.len(),
            what,
        },
    )
}

/// A 1-based coordinate made 0-based.
pub(crate) fn parse_coord(f: &[u8]) -> Result<u64, SyntaxError> {
    match parse_u64(f) {
        Some(0) => Err(SyntaxError::ZeroCoordinate),
        Some(c) => Ok(c - 1),
        None if !f.is_empty() && f.iter().all(u8::is_ascii_digit) => Err(SyntaxError::Overflow),
        None => Err(SyntaxError::BadCoordinate(show(f))),
    }
}

/// A field for an error message, shortened if long.
pub(crate) fn show(f: &[u8]) -> String {
    let s = String::from_utf8_lossy(f);
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s.into_owned()
    }
}

impl EntryReader for TnsReader {
    fn path(&self) -> &Path {
        &self.path
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn declared_dims(&self) -> Option<Vec<u64>> {
        self.dims.clone()
    }
    fn skip_values(&mut self) {
        self.values = false;
    }
    fn set_memory_budget(&mut self, bytes: usize) {
        self.memory = bytes;
    }
    fn pack_keys(&mut self, order: &[usize], bits: &[u32]) -> bool {
        // Packing needs the values, the parallel parser, and bounds it checks (declared
        // dimensions) that the fields hold.
        if self.rank == 0 || !self.values || self.sequential || self.parallel.is_some() {
            return false;
        }
        self.packing = self
            .dims
            .as_ref()
            .and_then(|d| KeyPacking::of(d, order, bits));
        self.packing.is_some()
    }
    fn next_chunk(&mut self, chunk: &mut Chunk) -> Result<bool> {
        if self.sequential {
            return crate::text::sequential_chunk(self, chunk);
        }
        if self.parallel.is_none() {
            let p = ParallelParser::start(
                &self.path,
                self.rank,
                self.dims.clone(),
                if self.values {
                    parse_line
                } else {
                    parse_line_coords
                },
                How {
                    scan: self.values,
                    packing: self.packing.clone(),
                    mirror: None,
                },
                (0, 0),
                parse_threads(),
                self.memory,
            )?;
            self.parallel = Some(p);
        }
        self.parallel.as_mut().expect("started").next_chunk(chunk)
    }
    fn next_entry(&mut self, coords: &mut [u64]) -> Result<Option<f64>> {
        self.sequential = true;
        if let Some((c, v, line)) = self.first.take() {
            coords.copy_from_slice(&c);
            self.line = line;
            return Ok(Some(v));
        }
        loop {
            let (line_no, line) = match self.lines.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(None),
                Err(e) => return Err(Error::io(&self.path, e)),
            };
            if !is_entry(line) {
                continue;
            }
            let dims = self.dims.as_deref();
            return match parse_entry(line, coords)
                .and_then(|v| check_bounds(line, coords, dims).map(|_| v))
            {
                Ok(v) => {
                    self.line = line_no;
                    Ok(Some(v))
                }
                Err((column, kind)) => Err(Error::Syntax {
                    path: self.path.clone(),
                    line: line_no,
                    column,
                    kind,
                }),
            };
        }
    }
    fn line(&self) -> u64 {
        self.line
    }
    fn bytes_read(&self) -> u64 {
        match &self.parallel {
            Some(p) => p.bytes_done(),
            None => self.lines.consumed(),
        }
    }
    fn total_bytes(&self) -> u64 {
        self.total
    }
}

/// Writes entries as `.tns` lines (1-based coordinates), atomically.
pub struct TnsWriter {
    out: BufWriter<File>,
    file: AtomicFile,
    line: Vec<u8>,
}

impl TnsWriter {
    /// Whether finishing syncs the file to disk before renaming it ([`AtomicFile::set_sync`]).
    pub fn set_sync(&mut self, on: bool) {
        self.file.set_sync(on);
    }

    /// Starts writing `path` (it appears only after [`finish`](TnsWriter::finish)).
    pub fn create(path: &Path) -> Result<Self> {
        let file = AtomicFile::create(path)?;
        let handle = file.file().try_clone().map_err(|e| Error::io(path, e))?;
        Ok(TnsWriter {
            out: BufWriter::with_capacity(1 << 20, handle),
            file,
            line: Vec::new(),
        })
    }

    /// Writes one entry with 0-based coordinates.
    pub fn write_entry(&mut self, coords: &[u64], value: impl std::fmt::Display) -> Result<()> {
        self.line.clear();
        for &c in coords {
            push_u64(&mut self.line, c + 1);
            self.line.push(b' ');
        }
        let _ = write!(self.line, "{value}");
        self.line.push(b'\n');
        self.out
            .write_all(&self.line)
            .map_err(|e| Error::io(self.file.target(), e))
    }

    /// Writes a `#` comment line.
    pub fn write_comment(&mut self, text: &str) -> Result<()> {
        for l in text.lines() {
            writeln!(self.out, "# {l}").map_err(|e| Error::io(self.file.target(), e))?;
        }
        Ok(())
    }

    /// Flushes and moves the file into place.
    pub fn finish(self) -> Result<()> {
        let target = self.file.target().to_path_buf();
        self.out
            .into_inner()
            .map_err(|e| Error::io(&target, e.into_error()))?;
        self.file.commit()
    }
}

/// Appends the decimal digits of `x` (faster than `write!` for the common case).
pub(crate) fn push_u64(out: &mut Vec<u8>, mut x: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (x % 10) as u8;
        x /= 10;
        if x == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
#[path = "tns_tests.rs"]
mod tests;
