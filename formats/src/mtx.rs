//! Matrix Market `.mtx` files: `coordinate` (real, integer or pattern) and `array` (real or
//! integer), `general`, `symmetric` or `skew-symmetric`. Symmetric storage is expanded on read:
//! an off-diagonal entry (i, j, v) also yields (j, i, v), or (j, i, -v) when skew-symmetric.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::atomic::AtomicFile;
use crate::chunks::{parse_threads, Chunk, How, KeyPacking, Mirror, ParallelParser};
use crate::error::{Error, Result, SyntaxError};
use crate::lines::{fields, is_blank, parse_f64, parse_u64, LineReader};
use crate::text::{sequential_chunk, EntryReader, READ_BUFFER};
use crate::tns::{parse_coord, push_u64, show};
use crate::value::ValueType;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Coordinate,
    Array,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Real,
    Integer,
    Pattern,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Symmetry {
    General,
    Symmetric,
    Skew,
}

/// Streaming `.mtx` reader.
pub struct MtxReader {
    path: PathBuf,
    lines: LineReader<File>,
    total: u64,
    layout: Layout,
    field: Field,
    symmetry: Symmetry,
    rows: u64,
    cols: u64,
    /// Entries (coordinate) or values (array) the header promises.
    declared: u64,
    seen: u64,
    /// The mirrored partner of the last off-diagonal symmetric entry.
    mirror: Option<([u64; 2], f64)>,
    /// Array layout: next (row, column) to be read, column-major.
    next_cell: (u64, u64),
    line: u64,
    /// Where the data lines begin: byte offset, lines before.
    data_start: (u64, u64),
    /// Started by the first [`EntryReader::next_chunk`] of a coordinate file before any
    /// `next_entry`.
    parallel: Option<ParallelParser>,
    /// True once `next_entry` has been used (batches then come from it).
    sequential: bool,
    /// From [`EntryReader::pack_keys`]: the parallel parser packs keys into pairs.
    packing: Option<KeyPacking>,
    /// From [`EntryReader::set_memory_budget`]: bounds the parallel parser's blocks in flight.
    memory: usize,
}

/// Budget assumed when none is set: room for every worker's blocks.
const DEFAULT_MEMORY: usize = 256 << 20;

impl MtxReader {
    /// Opens `path` and reads its banner and size line.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let total = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut lines = LineReader::new(file, READ_BUFFER);
        let syntax = |line, column, msg: String| Error::Syntax {
            path: path.to_path_buf(),
            line,
            column,
            kind: SyntaxError::Header(msg),
        };
        let banner = lines
            .next_line()
            .map_err(|e| Error::io(path, e))?
            .map(|l| l.1.to_vec())
            .unwrap_or_default();
        let (layout, field, symmetry) = parse_banner(&banner).map_err(|(c, m)| syntax(1, c, m))?;
        let size_line = loop {
            match lines.next_line().map_err(|e| Error::io(path, e))? {
                None => {
                    let msg = "missing size line (rows columns [entries])".to_string();
                    return Err(syntax(lines.line_no() + 1, 1, msg));
                }
                Some((_, l)) if is_blank(l) || l.first() == Some(&b'%') => {}
                Some((_, l)) => break l.to_vec(),
            }
        };
        let line_no = lines.line_no();
        let want = if layout == Layout::Coordinate { 3 } else { 2 };
        let sizes: Vec<(u64, &[u8])> = fields(&size_line).collect();
        if sizes.len() != want {
            let what = if want == 3 {
                "rows columns entries"
            } else {
                "rows columns"
            };
            return Err(syntax(line_no, 1, format!("size line must be `{what}`")));
        }
        let mut nums = [0u64; 3];
        for (k, (col, f)) in sizes.iter().enumerate() {
            nums[k] = parse_u64(f).ok_or_else(|| {
                syntax(
                    line_no,
                    *col,
                    format!("expected a size, found `{}`", show(f)),
                )
            })?;
        }
        let (rows, cols) = (nums[0], nums[1]);
        if symmetry != Symmetry::General && rows != cols {
            return Err(syntax(
                line_no,
                1,
                format!("a symmetric matrix must be square, not {rows}x{cols}"),
            ));
        }
        let declared = match (layout, symmetry) {
            (Layout::Coordinate, _) => nums[2],
            (Layout::Array, Symmetry::General) => rows.saturating_mul(cols),
            (Layout::Array, Symmetry::Symmetric) => rows.saturating_mul(rows.saturating_add(1)) / 2,
            (Layout::Array, Symmetry::Skew) => rows.saturating_mul(rows.saturating_sub(1)) / 2,
        };
        let first_row = if symmetry == Symmetry::Skew { 1 } else { 0 };
        let data_start = (lines.consumed(), line_no);
        Ok(MtxReader {
            path: path.to_path_buf(),
            lines,
            total,
            layout,
            field,
            symmetry,
            rows,
            cols,
            declared,
            seen: 0,
            mirror: None,
            next_cell: (first_row, 0),
            line: line_no,
            data_start,
            parallel: None,
            sequential: false,
            packing: None,
            memory: DEFAULT_MEMORY,
        })
    }

    /// For a `coordinate general` file: the syntax of its data lines, where they begin (byte
    /// offset and lines before), and the entries the header declares. The block packer of a
    /// conversion reads such files in parallel; other layouts are read line by line.
    pub(crate) fn block_input(&self) -> Option<(MtxSyntax, u64, u64, u64)> {
        if self.layout != Layout::Coordinate || self.symmetry != Symmetry::General {
            return None;
        }
        let syntax = MtxSyntax {
            field: self.field,
            rows: self.rows,
            cols: self.cols,
        };
        Some((
            syntax,
            self.lines.consumed(),
            self.lines.line_no(),
            self.declared,
        ))
    }

    fn syntax(&self, line: u64, column: u64, kind: SyntaxError) -> Error {
        Error::Syntax {
            path: self.path.clone(),
            line,
            column,
            kind,
        }
    }

    /// Reads one data line into (row, col, value) before symmetric expansion.
    fn read_line(&mut self) -> Result<Option<(u64, u64, f64)>> {
        loop {
            let (line_no, line) = match self.lines.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => {
                    if self.seen != self.declared {
                        let kind = SyntaxError::EntryCount {
                            expected: self.declared,
                            found: self.seen,
                        };
                        return Err(self.syntax(self.lines.line_no() + 1, 1, kind));
                    }
                    return Ok(None);
                }
                Err(e) => return Err(Error::io(&self.path, e)),
            };
            if is_blank(line) || line.first() == Some(&b'%') {
                continue;
            }
            if self.seen == self.declared {
                return Err(Error::Syntax {
                    path: self.path.clone(),
                    line: line_no,
                    column: 1,
                    kind: SyntaxError::ExtraEntry(self.declared),
                });
            }
            let parsed = match self.layout {
                Layout::Coordinate => parse_coordinate_line(line, self.field, self.rows, self.cols),
                Layout::Array => parse_array_line(line, self.field)
                    .map(|v| (self.next_cell.0, self.next_cell.1, v)),
            };
            let (i, j, v) = parsed.map_err(|(column, kind)| Error::Syntax {
                path: self.path.clone(),
                line: line_no,
                column,
                kind,
            })?;
            self.seen += 1;
            self.line = line_no;
            if self.layout == Layout::Array {
                self.advance_cell();
                if v == 0.0 {
                    continue; // dense storage: zeros are not entries
                }
            }
            return Ok(Some((i, j, v)));
        }
    }

    /// The next batch of a coordinate file from the parallel parser, started on the first
    /// call. The workers parse, check, mirror and pack; this thread checks the count of
    /// entries against the header.
    fn parallel_chunk(&mut self, chunk: &mut Chunk) -> Result<bool> {
        if self.parallel.is_none() {
            let parse: crate::chunks::LineParser = match self.field {
                Field::Real => real_line,
                Field::Integer => integer_line,
                Field::Pattern => pattern_line,
            };
            let how = How {
                // Integer values must refuse decimals, which the scanner takes.
                scan: self.field == Field::Real,
                packing: self.packing.clone(),
                mirror: match self.symmetry {
                    Symmetry::General => None,
                    Symmetry::Symmetric => Some(Mirror::Symmetric),
                    Symmetry::Skew => Some(Mirror::Skew),
                },
            };
            let dims = Some(vec![self.rows, self.cols]);
            let (from, threads) = (self.data_start, parse_threads());
            let p =
                ParallelParser::start(&self.path, 2, dims, parse, how, from, threads, self.memory)?;
            self.parallel = Some(p);
        }
        let p = self.parallel.as_mut().expect("started");
        let got = p.next_chunk(chunk);
        let entries = p.entry_lines();
        match got {
            // An error the sequential reader meets first too: no extra entry before it.
            Err(e) if entries < self.declared => Err(e),
            Err(e) => Err(self.first_error().unwrap_or(e)),
            Ok(more) if entries > self.declared || (!more && entries < self.declared) => {
                let kind = SyntaxError::EntryCount {
                    expected: self.declared,
                    found: entries,
                };
                let fallback = self.syntax(self.data_start.1 + 1, 1, kind);
                Err(self.first_error().unwrap_or(fallback))
            }
            Ok(more) => Ok(more),
        }
    }

    /// The error the sequential reader reports for this file, read again from the start:
    /// where the count of entries is wrong, it names the line of the first extra entry (or
    /// the end), which the parallel parser does not know. Errors are rare; reading again
    /// keeps the parser's fast path free of the count.
    fn first_error(&self) -> Option<Error> {
        let mut again = match MtxReader::open(&self.path) {
            Ok(r) => r,
            Err(e) => return Some(e),
        };
        let mut coords = [0u64; 2];
        loop {
            match again.next_entry(&mut coords) {
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(e) => return Some(e),
            }
        }
    }

    /// Column-major order over the stored triangle.
    fn advance_cell(&mut self) {
        let (mut i, mut j) = self.next_cell;
        i += 1;
        if i >= self.rows {
            j += 1;
            i = match self.symmetry {
                Symmetry::General => 0,
                Symmetry::Symmetric => j,
                Symmetry::Skew => j + 1,
            };
        }
        self.next_cell = (i, j);
    }
}

/// Data lines of a `coordinate general` file, for the block packer.
pub(crate) struct MtxSyntax {
    field: Field,
    rows: u64,
    cols: u64,
}

impl crate::convert::LineSyntax for MtxSyntax {
    #[inline]
    fn parse(&self, line: &[u8], coords: &mut [u64]) -> Result<Option<f64>, (u64, SyntaxError)> {
        data_line(self.field, line, coords, Some(&[self.rows, self.cols]))
    }

    /// Real values only: integer fields must refuse decimals, which the scanner takes.
    #[inline]
    fn scans_entries(&self) -> bool {
        self.field == Field::Real
    }

    #[inline]
    fn inside(&self, coords: &[u64]) -> bool {
        coords.len() == 2 && coords[0] < self.rows && coords[1] < self.cols
    }
}

fn parse_banner(line: &[u8]) -> Result<(Layout, Field, Symmetry), (u64, String)> {
    let f: Vec<(u64, String)> = fields(line)
        .map(|(c, s)| (c, String::from_utf8_lossy(s).to_ascii_lowercase()))
        .collect();
    if f.first().map(|x| x.1.as_str()) != Some("%%matrixmarket") {
        return Err((
            1,
            "expected the banner `%%MatrixMarket matrix coordinate real general`".into(),
        ));
    }
    if f.len() != 5 {
        let col = f.get(5).map(|x| x.0).unwrap_or(line.len() as u64 + 1);
        return Err((col, "the banner needs four words: matrix, coordinate|array, real|integer|pattern, general|symmetric|skew-symmetric".into()));
    }
    if f[1].1 != "matrix" {
        return Err((
            f[1].0,
            format!("unsupported object `{}`; expected `matrix`", f[1].1),
        ));
    }
    let layout = match f[2].1.as_str() {
        "coordinate" => Layout::Coordinate,
        "array" => Layout::Array,
        other => {
            return Err((
                f[2].0,
                format!("unsupported format `{other}`; expected coordinate or array"),
            ))
        }
    };
    let field = match f[3].1.as_str() {
        "real" | "double" => Field::Real,
        "integer" => Field::Integer,
        "pattern" if layout == Layout::Coordinate => Field::Pattern,
        other => {
            return Err((
                f[3].0,
                format!(
                "unsupported field `{other}`; expected real, integer or pattern (coordinate only)"
            ),
            ))
        }
    };
    let symmetry = match f[4].1.as_str() {
        "general" => Symmetry::General,
        "symmetric" => Symmetry::Symmetric,
        "skew-symmetric" => Symmetry::Skew,
        other => {
            return Err((
                f[4].0,
                format!(
                    "unsupported symmetry `{other}`; expected general, symmetric or skew-symmetric"
                ),
            ))
        }
    };
    Ok((layout, field, symmetry))
}

fn parse_value(field: Field, col: u64, f: &[u8]) -> Result<f64, (u64, SyntaxError)> {
    let bad = || (col, SyntaxError::BadValue(show(f)));
    match field {
        Field::Integer => {
            let (neg, digits) = match f.first() {
                Some(b'-') => (true, &f[1..]),
                Some(b'+') => (false, &f[1..]),
                _ => (false, f),
            };
            let x = parse_u64(digits).ok_or_else(bad)? as f64;
            Ok(if neg { -x } else { x })
        }
        _ => parse_f64(f).ok_or_else(bad),
    }
}

fn parse_coordinate_line(
    line: &[u8],
    field: Field,
    rows: u64,
    cols: u64,
) -> Result<(u64, u64, f64), (u64, SyntaxError)> {
    let expected = if field == Field::Pattern { 2 } else { 3 };
    let what = if expected == 2 {
        "row column"
    } else {
        "row column value"
    };
    let found: Vec<(u64, &[u8])> = fields(line).collect();
    if found.len() != expected {
        let column = found
            .get(expected)
            .map(|f| f.0)
            .unwrap_or(line.len() as u64 + 1);
        return Err((
            column,
            SyntaxError::FieldCount {
                expected,
                found: found.len(),
                what: what.into(),
            },
        ));
    }
    let mut ij = [0u64; 2];
    for (k, bound) in [rows, cols].into_iter().enumerate() {
        let (col, f) = found[k];
        ij[k] = parse_coord(f).map_err(|e| (col, e))?;
        if ij[k] >= bound {
            return Err((
                col,
                SyntaxError::OutOfBounds {
                    coord: ij[k] + 1,
                    dim: bound,
                },
            ));
        }
    }
    let v = if field == Field::Pattern {
        1.0
    } else {
        parse_value(field, found[2].0, found[2].1)?
    };
    Ok((ij[0], ij[1], v))
}

/// A data line of a coordinate file for the parallel parser: the entry, `None` for a blank
/// or comment line, or the column and kind of an error; `dims` are the rows and columns.
#[inline]
fn data_line(
    field: Field,
    line: &[u8],
    coords: &mut [u64],
    dims: Option<&[u64]>,
) -> Result<Option<f64>, (u64, SyntaxError)> {
    let (rows, cols) = match dims {
        Some(&[r, c]) => (r, c),
        _ => (u64::MAX, u64::MAX),
    };
    // The common line in one pass; anything else (every error included) is parsed again
    // field by field below.
    let fast = match field {
        Field::Real => crate::tns::fast_fields::<true>(line, coords),
        // Integer values must refuse decimals, which the `.tns` fast path takes.
        Field::Integer => {
            crate::tns::fast_fields::<true>(line, coords).filter(|_| integer_tail(line))
        }
        Field::Pattern => fast_pair(line, coords).then_some(1.0),
    };
    if let Some(v) = fast.filter(|_| coords[0] < rows && coords[1] < cols) {
        return Ok(Some(v));
    }
    if is_blank(line) || line.first() == Some(&b'%') {
        return Ok(None);
    }
    let (i, j, v) = parse_coordinate_line(line, field, rows, cols)?;
    coords[0] = i;
    coords[1] = j;
    Ok(Some(v))
}

/// True when the last field of `line` is an integer of at most 15 digits (with an optional
/// sign): its value as parsed by the `.tns` fast path is then exact, as `parse_value`'s.
fn integer_tail(line: &[u8]) -> bool {
    let is_space = |b: &u8| *b == b' ' || *b == b'\t';
    let end = line.len() - line.iter().rev().take_while(|b| is_space(b)).count();
    let digits = line[..end]
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let mut start = end - digits;
    if start > 0 && matches!(line[start - 1], b'-' | b'+') {
        start -= 1;
    }
    (1..=15).contains(&digits) && start > 0 && is_space(&line[start - 1])
}

/// A pattern line `row column` in one pass (0-based into `coords`); false for anything else.
fn fast_pair(line: &[u8], coords: &mut [u64]) -> bool {
    let n = line.len();
    let is_space = |b: u8| b == b' ' || b == b'\t';
    let mut i = 0;
    for c in coords.iter_mut().take(2) {
        while i < n && is_space(line[i]) {
            i += 1;
        }
        let start = i;
        let mut x = 0u64;
        while i < n && line[i].is_ascii_digit() {
            x = x.wrapping_mul(10).wrapping_add(u64::from(line[i] - b'0'));
            i += 1;
        }
        // At most 19 digits cannot overflow; the careful path takes longer numbers.
        if i == start || i - start > 19 || x == 0 || (i < n && !is_space(line[i])) {
            return false;
        }
        *c = x - 1;
    }
    while i < n && is_space(line[i]) {
        i += 1;
    }
    i == n
}

fn real_line(
    line: &[u8],
    coords: &mut [u64],
    dims: Option<&[u64]>,
) -> Result<Option<f64>, (u64, SyntaxError)> {
    data_line(Field::Real, line, coords, dims)
}

fn integer_line(
    line: &[u8],
    coords: &mut [u64],
    dims: Option<&[u64]>,
) -> Result<Option<f64>, (u64, SyntaxError)> {
    data_line(Field::Integer, line, coords, dims)
}

fn pattern_line(
    line: &[u8],
    coords: &mut [u64],
    dims: Option<&[u64]>,
) -> Result<Option<f64>, (u64, SyntaxError)> {
    data_line(Field::Pattern, line, coords, dims)
}

fn parse_array_line(line: &[u8], field: Field) -> Result<f64, (u64, SyntaxError)> {
    let found: Vec<(u64, &[u8])> = fields(line).collect();
    if found.len() != 1 {
        let column = found.get(1).map(|f| f.0).unwrap_or(1);
        return Err((
            column,
            SyntaxError::FieldCount {
                expected: 1,
                found: found.len(),
                what: "value".into(),
            },
        ));
    }
    parse_value(field, found[0].0, found[0].1)
}

impl EntryReader for MtxReader {
    fn path(&self) -> &Path {
        &self.path
    }
    fn rank(&self) -> usize {
        2
    }
    fn declared_dims(&self) -> Option<Vec<u64>> {
        Some(vec![self.rows, self.cols])
    }
    fn set_memory_budget(&mut self, bytes: usize) {
        self.memory = bytes;
    }
    fn pack_keys(&mut self, order: &[usize], bits: &[u32]) -> bool {
        // Only the parallel parser packs, and only before it starts.
        let parallel = self.layout == Layout::Coordinate && !self.sequential;
        if !parallel || self.parallel.is_some() {
            return false;
        }
        self.packing = KeyPacking::of(&[self.rows, self.cols], order, bits);
        self.packing.is_some()
    }
    fn next_chunk(&mut self, chunk: &mut Chunk) -> Result<bool> {
        if self.sequential || self.layout == Layout::Array {
            return sequential_chunk(self, chunk);
        }
        self.parallel_chunk(chunk)
    }
    fn next_entry(&mut self, coords: &mut [u64]) -> Result<Option<f64>> {
        self.sequential = true;
        if let Some((c, v)) = self.mirror.take() {
            coords.copy_from_slice(&c);
            return Ok(Some(v));
        }
        let Some((i, j, v)) = self.read_line()? else {
            return Ok(None);
        };
        if self.symmetry != Symmetry::General {
            let name = if self.symmetry == Symmetry::Skew {
                "skew-symmetric"
            } else {
                "symmetric"
            };
            if i < j {
                return Err(self.syntax(self.line, 1, SyntaxError::UpperTriangle(name)));
            }
            if i == j && self.symmetry == Symmetry::Skew {
                return Err(self.syntax(self.line, 1, SyntaxError::SkewDiagonal));
            }
            if i != j {
                let mv = if self.symmetry == Symmetry::Skew {
                    -v
                } else {
                    v
                };
                self.mirror = Some(([j, i], mv));
            }
        }
        coords[0] = i;
        coords[1] = j;
        Ok(Some(v))
    }
    fn line(&self) -> u64 {
        self.line
    }
    fn bytes_read(&self) -> u64 {
        match &self.parallel {
            Some(p) => self.data_start.0 + p.bytes_done(),
            None => self.lines.consumed(),
        }
    }
    fn total_bytes(&self) -> u64 {
        self.total
    }
}

/// Width reserved for the entry count when it is patched in at the end.
const COUNT_FIELD: usize = 20;

/// Writes a general real coordinate `.mtx` file, atomically.
pub struct MtxWriter {
    out: BufWriter<File>,
    file: AtomicFile,
    declared: Option<u64>,
    /// Byte offset of the reserved count field when the count was not known up front.
    count_at: Option<u64>,
    written: u64,
    line: Vec<u8>,
}

impl MtxWriter {
    /// Whether finishing syncs the file to disk before renaming it ([`AtomicFile::set_sync`]).
    pub fn set_sync(&mut self, on: bool) {
        self.file.set_sync(on);
    }

    /// Starts `path` for a `rows` x `cols` matrix; `entries` may be unknown (`None`): then the
    /// count is written when the file is finished.
    pub fn create(path: &Path, rows: u64, cols: u64, entries: Option<u64>) -> Result<Self> {
        Self::create_of(path, rows, cols, entries, ValueType::F64)
    }

    /// [`create`](Self::create) for values of type `values`: the header's field is `integer`
    /// for `i64`, else `real`.
    pub fn create_of(
        path: &Path,
        rows: u64,
        cols: u64,
        entries: Option<u64>,
        values: ValueType,
    ) -> Result<Self> {
        let file = AtomicFile::create(path)?;
        let handle = file.file().try_clone().map_err(|e| Error::io(path, e))?;
        let field = match values {
            ValueType::I64 => "integer",
            ValueType::F32 | ValueType::F64 => "real",
        };
        let mut head = format!("%%MatrixMarket matrix coordinate {field} general\n").into_bytes();
        push_u64(&mut head, rows);
        head.push(b' ');
        push_u64(&mut head, cols);
        head.push(b' ');
        let count_at = match entries {
            Some(n) => {
                push_u64(&mut head, n);
                None
            }
            None => {
                let at = head.len() as u64;
                head.extend_from_slice(&[b' '; COUNT_FIELD]);
                Some(at)
            }
        };
        head.push(b'\n');
        let mut out = BufWriter::with_capacity(1 << 20, handle);
        out.write_all(&head).map_err(|e| Error::io(path, e))?;
        Ok(MtxWriter {
            out,
            file,
            declared: entries,
            count_at,
            written: 0,
            line: Vec::new(),
        })
    }

    /// Writes one entry with 0-based coordinates.
    pub fn write_entry(&mut self, row: u64, col: u64, value: impl std::fmt::Display) -> Result<()> {
        self.line.clear();
        push_u64(&mut self.line, row + 1);
        self.line.push(b' ');
        push_u64(&mut self.line, col + 1);
        self.line.push(b' ');
        let _ = write!(self.line, "{value}");
        self.line.push(b'\n');
        self.written += 1;
        self.out
            .write_all(&self.line)
            .map_err(|e| Error::io(self.file.target(), e))
    }

    /// Flushes, fills in the entry count if needed, and moves the file into place.
    pub fn finish(self) -> Result<()> {
        let target = self.file.target().to_path_buf();
        if let Some(n) = self.declared.filter(|&n| n != self.written) {
            return Err(Error::Unsupported {
                path: target,
                what: format!(
                    "internal: {} entries written but {n} declared",
                    self.written
                ),
            });
        }
        let handle = self
            .out
            .into_inner()
            .map_err(|e| Error::io(&target, e.into_error()))?;
        if let Some(at) = self.count_at {
            let text = format!("{:>width$}", self.written, width = COUNT_FIELD);
            handle
                .write_all_at(text.as_bytes(), at)
                .map_err(|e| Error::io(&target, e))?;
        }
        self.file.commit()
    }
}

#[cfg(test)]
#[path = "mtx_tests.rs"]
mod tests;
