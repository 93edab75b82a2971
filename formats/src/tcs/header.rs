//! The `.tcs` header: fields, layout of the data section, serialization and checked parsing.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{align_up, value_tag, TcsError, ALIGN, MAGIC, MAX_RANK, MIN_VERSION, VERSION};
use crate::error::{Error, Result};
use crate::format::{Format, LevelType};
use crate::value::ValueType;

const PREFIX: usize = 64;
const MODE_RECORD: usize = 40;
const LEVEL_RECORD: usize = 24;
const ARRAY_RECORD: usize = 32;
/// Bytes of one record of a version-3 extent table.
pub const EXTENT_RECORD: usize = 24;
/// Records of the extent table encoded at a time by [`TcsHeader::table_chunks`] (96 KiB).
const TABLE_CHUNK: usize = 4096;
/// The first version whose arrays are lists of extents.
pub const SEGMENTED: u32 = 3;

/// Per tensor mode: its dimension and, for a block, the block's place in a split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeInfo {
    /// Extent of the mode in the whole tensor.
    pub dim: u64,
    /// The block covers coordinates `split_lo..split_hi` of this mode (`0..dim` if whole).
    pub split_lo: u64,
    pub split_hi: u64,
    /// Which of `split_count` pieces along this mode the block is (0 of 1 if whole).
    pub split_index: u64,
    pub split_count: u64,
}

impl ModeInfo {
    /// A mode of a whole (unsplit) tensor.
    pub fn whole(dim: u64) -> Self {
        ModeInfo {
            dim,
            split_lo: 0,
            split_hi: dim,
            split_index: 0,
            split_count: 1,
        }
    }
}

/// Per storage level: the mode it stores, its type, and its size and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelInfo {
    /// The tensor mode stored at this level.
    pub mode: u32,
    pub level_type: LevelType,
    /// Dense: number of coordinates. Compressed or singleton: number of stored coordinates
    /// (`crd` length).
    pub size: u64,
    /// Dense: first coordinate. Compressed or singleton: 0.
    pub offset: u64,
}

/// Which array a record describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrayKind {
    Pos,
    Crd,
    Vals,
}

/// Where one array lies in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayInfo {
    pub kind: ArrayKind,
    /// The level of a `pos`/`crd` array; the rank for `vals`.
    pub level: u32,
    /// Byte offset from the start of the file (a multiple of 64).
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// CRC-32 (IEEE) of the array's bytes.
    pub crc32: u32,
}

impl ArrayInfo {
    /// A name for messages, e.g. `crd of level 1`.
    pub fn name(&self) -> String {
        match self.kind {
            ArrayKind::Pos => format!("pos of level {}", self.level),
            ArrayKind::Crd => format!("crd of level {}", self.level),
            ArrayKind::Vals => "vals".to_string(),
        }
    }
}

/// One stretch of a segmented (version 3) array: `len` bytes at file offset `offset`. An
/// array is its extents in table order, concatenated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Number of the array (in [`TcsHeader::arrays`]) this extent belongs to.
    pub array: u32,
    pub offset: u64,
    pub len: u64,
}

/// Everything a `.tcs` header records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcsHeader {
    /// The format version recorded (1, or 2 when a level is a singleton).
    pub version: u32,
    pub value_type: ValueType,
    /// Coordinate width: 32 or 64.
    pub index_bits: u32,
    /// True for a block of a split tensor.
    pub is_block: bool,
    pub modes: Vec<ModeInfo>,
    pub levels: Vec<LevelInfo>,
    /// For each compressed level in order its `pos` then `crd`, for each singleton level its
    /// `crd`, then `vals`.
    pub arrays: Vec<ArrayInfo>,
    /// Number of stored values (length of `vals`).
    pub nnz: u64,
    /// Bytes before the first array (a multiple of 64).
    pub header_len: u64,
    /// Total file length.
    pub file_len: u64,
    /// Version 3: where every array's bytes lie, in file order (the extent table at the end
    /// of the file); empty in versions 1 and 2, whose arrays are contiguous at their records'
    /// offsets.
    pub extents: Vec<Extent>,
}

impl TcsHeader {
    /// Lays out a file for these modes and levels: computes every array's length and offset
    /// (checksums are filled in by the writer).
    pub fn new(
        value_type: ValueType,
        index_bits: u32,
        is_block: bool,
        modes: Vec<ModeInfo>,
        levels: Vec<LevelInfo>,
    ) -> Result<TcsHeader, TcsError> {
        let singleton = levels.iter().any(|l| l.level_type == LevelType::Singleton);
        let mut h = TcsHeader {
            version: if singleton { 2 } else { MIN_VERSION },
            value_type,
            index_bits,
            is_block,
            modes,
            levels,
            arrays: Vec::new(),
            nnz: 0,
            header_len: 0,
            file_len: 0,
            extents: Vec::new(),
        };
        h.check_fields()?;
        let (lens, nnz) = h.expected_array_lengths()?;
        h.nnz = nnz;
        h.header_len = header_len(h.levels.len(), lens.len()).ok_or_else(too_large)?;
        let mut at = h.header_len;
        for (kind, level, len) in lens {
            h.arrays.push(ArrayInfo {
                kind,
                level,
                offset: at,
                len,
                crc32: 0,
            });
            at = at.checked_add(len).ok_or_else(too_large)?;
            at = align_up(at).ok_or_else(too_large)?;
        }
        h.file_len = h
            .arrays
            .last()
            .map(|a| a.offset + a.len)
            .unwrap_or(h.header_len);
        Ok(h)
    }

    /// The version-3 form of a header laid out by [`new`](Self::new): the arrays' bytes lie in
    /// `extents` (file order, each at the first multiple of 64 after the previous one, the
    /// first at `header_len`), the extent table follows them, and the array records keep
    /// lengths and checksums with offset 0. Fails unless the extents tile every array exactly.
    pub fn segmented(mut self, extents: Vec<Extent>) -> Result<TcsHeader, TcsError> {
        self.version = SEGMENTED;
        for a in &mut self.arrays {
            a.offset = 0;
        }
        self.extents = extents;
        let table = (self.extents.len() as u64)
            .checked_mul(EXTENT_RECORD as u64)
            .ok_or_else(too_large)?;
        self.file_len = self
            .table_offset()?
            .checked_add(table)
            .ok_or_else(too_large)?;
        self.check_layout()?;
        Ok(self)
    }

    /// Where each byte range of array number `array` lies in the file, in array order.
    pub fn array_extents(&self, array: usize) -> Vec<(u64, u64)> {
        if self.version < SEGMENTED {
            return self
                .arrays
                .get(array)
                .map(|a| vec![(a.offset, a.len)])
                .unwrap_or_default();
        }
        self.extents
            .iter()
            .filter(|e| e.array as usize == array)
            .map(|e| (e.offset, e.len))
            .collect()
    }

    /// The alignment padding of the data section, as byte ranges (zero bytes in a valid file):
    /// between arrays (or extents) and, in version 3, before the extent table.
    pub fn gaps(&self) -> Vec<std::ops::Range<u64>> {
        let mut placed: Vec<(u64, u64)> = if self.version < SEGMENTED {
            self.arrays.iter().map(|a| (a.offset, a.len)).collect()
        } else {
            self.extents.iter().map(|e| (e.offset, e.len)).collect()
        };
        if self.version >= SEGMENTED {
            placed.push((self.file_len - self.table_len(), 0));
        }
        let mut at = self.header_len;
        let mut gaps = Vec::new();
        for (offset, len) in placed {
            if offset > at {
                gaps.push(at..offset);
            }
            at = offset + len;
        }
        gaps
    }

    /// Bytes of the extent table (0 before version 3).
    pub fn table_len(&self) -> u64 {
        self.extents.len() as u64 * EXTENT_RECORD as u64
    }

    /// Where the extent table starts: after the last extent, aligned.
    fn table_offset(&self) -> Result<u64, TcsError> {
        let end = self
            .extents
            .last()
            .map_or(Some(self.header_len), |e| e.offset.checked_add(e.len));
        end.and_then(align_up).ok_or_else(too_large)
    }

    /// The extent table's bytes (empty before version 3).
    pub fn table_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.table_len() as usize);
        for chunk in self.table_chunks() {
            b.extend_from_slice(&chunk);
        }
        b
    }

    /// The extent table's bytes in order, [`TABLE_CHUNK`] records at a time: a writer and
    /// the table's checksum need not hold a second copy of a large table whole.
    pub(crate) fn table_chunks(&self) -> impl Iterator<Item = Vec<u8>> + '_ {
        self.extents.chunks(TABLE_CHUNK).map(|extents| {
            let mut b = Vec::with_capacity(extents.len() * EXTENT_RECORD);
            for e in extents {
                b.extend_from_slice(&e.array.to_le_bytes());
                b.extend_from_slice(&0u32.to_le_bytes());
                b.extend_from_slice(&e.offset.to_le_bytes());
                b.extend_from_slice(&e.len.to_le_bytes());
            }
            b
        })
    }

    /// The tensor's rank.
    pub fn rank(&self) -> usize {
        self.modes.len()
    }

    /// Mode-space dimensions.
    pub fn dims(&self) -> Vec<usize> {
        self.modes.iter().map(|m| m.dim as usize).collect()
    }

    /// The storage format (level types and mode order).
    pub fn format(&self) -> Format {
        let types = self.levels.iter().map(|l| l.level_type).collect();
        let order = self.levels.iter().map(|l| l.mode as usize).collect();
        Format::new(types, order).expect("validated mode order")
    }

    /// Serializes the header, checksum and padding: exactly `header_len` bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.header_len as usize);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.push(1); // little-endian
        b.push(value_tag(self.value_type));
        b.push(self.index_bits as u8);
        b.push(self.is_block as u8);
        b.extend_from_slice(&(self.rank() as u32).to_le_bytes());
        b.extend_from_slice(&(self.arrays.len() as u32).to_le_bytes());
        for x in [self.header_len, self.file_len, self.nnz] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        // Version 3: the extent count and the extent table's checksum; else reserved zeros.
        let (count, table_crc) = if self.version >= SEGMENTED {
            let mut crc = crc32fast::Hasher::new();
            self.table_chunks().for_each(|b| crc.update(&b));
            (self.extents.len() as u64, crc.finalize())
        } else {
            (0, 0)
        };
        b.extend_from_slice(&count.to_le_bytes());
        b.extend_from_slice(&table_crc.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for m in &self.modes {
            for x in [m.dim, m.split_lo, m.split_hi, m.split_index, m.split_count] {
                b.extend_from_slice(&x.to_le_bytes());
            }
        }
        for l in &self.levels {
            b.extend_from_slice(&l.mode.to_le_bytes());
            let t: u32 = match l.level_type {
                LevelType::Dense => 0,
                LevelType::Compressed => 1,
                LevelType::Singleton => 2,
            };
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&l.size.to_le_bytes());
            b.extend_from_slice(&l.offset.to_le_bytes());
        }
        for a in &self.arrays {
            let kind: u32 = match a.kind {
                ArrayKind::Pos => 0,
                ArrayKind::Crd => 1,
                ArrayKind::Vals => 2,
            };
            b.extend_from_slice(&kind.to_le_bytes());
            b.extend_from_slice(&a.level.to_le_bytes());
            b.extend_from_slice(&a.offset.to_le_bytes());
            b.extend_from_slice(&a.len.to_le_bytes());
            b.extend_from_slice(&a.crc32.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.resize(self.header_len as usize, 0);
        b
    }

    /// Parses and checks a header from the start of a file of `file_len` bytes; `bytes` must
    /// hold at least the header (else [`TcsError::Truncated`] says how much is needed).
    pub fn parse(bytes: &[u8], file_len: u64) -> Result<TcsHeader, TcsError> {
        let (mut h, table) = Self::parse_head(bytes, file_len)?;
        if let Some(t) = table {
            let at = file_len - t.len;
            let b = bytes
                .get(at as usize..file_len as usize)
                .ok_or(TcsError::Truncated {
                    needed: file_len,
                    len: bytes.len() as u64,
                })?;
            h.extents = t.parse(b)?;
        }
        h.checked()
    }

    /// The checks that need every field (the extent table included).
    fn checked(self) -> Result<TcsHeader, TcsError> {
        self.check_fields()?;
        self.check_layout()?;
        Ok(self)
    }

    /// Parses the header at the start of the file, leaving the extent table of a version-3
    /// file (at the file's end) to the caller: it is described by the second result.
    fn parse_head(bytes: &[u8], file_len: u64) -> Result<(TcsHeader, Option<Table>), TcsError> {
        let mut c = Cursor {
            b: bytes,
            at: 0,
            file_len,
        };
        if c.take(8)? != MAGIC {
            return Err(TcsError::BadMagic);
        }
        let version = c.u32()?;
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(TcsError::Version(version));
        }
        let endian = c.u8()?;
        if endian != 1 {
            return Err(TcsError::Endianness(endian));
        }
        let value_type = match c.u8()? {
            1 => ValueType::F32,
            2 => ValueType::F64,
            3 => ValueType::I64,
            t => return Err(TcsError::ValueTypeTag(t)),
        };
        let index_bits = match c.u8()? {
            b @ (32 | 64) => b as u32,
            b => return Err(TcsError::IndexWidth(b)),
        };
        let flags = c.u8()?;
        if flags > 1 {
            return Err(field("flags", flags as u64, 0));
        }
        let rank = c.u32()? as u64;
        if rank as usize > MAX_RANK {
            return Err(TcsError::Rank(rank));
        }
        let rank = rank as usize;
        let narrays = c.u32()? as usize;
        let (hlen, flen, nnz) = (c.u64()?, c.u64()?, c.u64()?);
        let (count, table_crc, reserved) = (c.u64()?, c.u32()?, c.u32()?);
        let segmented = version >= SEGMENTED;
        for (r, what) in [
            (count, "extent count (reserved before version 3)"),
            (
                table_crc as u64,
                "extent table checksum (reserved before version 3)",
            ),
            (reserved as u64, "reserved header field"),
        ] {
            if r != 0 && (!segmented || what == "reserved header field") {
                return Err(field(what, r, 0));
            }
        }
        // The table lies at the end of the file: its length is bounded by the file's.
        let table = match count.checked_mul(EXTENT_RECORD as u64) {
            Some(len) if len <= flen.min(file_len) => segmented.then_some(Table {
                count: count as usize,
                len,
                crc: table_crc,
            }),
            _ => {
                return Err(TcsError::Invalid(format!(
                    "{count} extents do not fit a file of {file_len} bytes"
                )))
            }
        };
        if narrays > 2 * rank + 1 {
            return Err(field("array count", narrays as u64, (2 * rank + 1) as u64));
        }
        let expected_hlen = header_len(rank, narrays).expect("bounded by MAX_RANK");
        if hlen != expected_hlen {
            return Err(field("header length", hlen, expected_hlen));
        }
        if (bytes.len() as u64) < hlen {
            return Err(TcsError::Truncated {
                needed: hlen,
                len: file_len.min(bytes.len() as u64),
            });
        }
        let modes = (0..rank).map(|_| c.mode()).collect::<Result<Vec<_>, _>>()?;
        let levels = (0..rank)
            .map(|_| c.level())
            .collect::<Result<Vec<_>, _>>()?;
        let arrays = (0..narrays)
            .map(|_| c.array())
            .collect::<Result<Vec<_>, _>>()?;
        let computed = crc32fast::hash(&bytes[..c.at]);
        let recorded = c.u32()?;
        if computed != recorded {
            return Err(TcsError::HeaderChecksum { recorded, computed });
        }
        if let Some(i) = bytes[c.at..hlen as usize].iter().position(|&x| x != 0) {
            return Err(TcsError::Padding((c.at + i) as u64));
        }
        if flen != file_len {
            return Err(TcsError::FileLength {
                recorded: flen,
                actual: file_len,
            });
        }
        if version < 2 {
            if let Some(k) = levels
                .iter()
                .position(|l| l.level_type == LevelType::Singleton)
            {
                return Err(TcsError::Invalid(format!(
                    "level {k} is a singleton level, which version {version} files cannot hold (version 2 added them)"
                )));
            }
        }
        let h = TcsHeader {
            version,
            value_type,
            index_bits,
            is_block: flags == 1,
            modes,
            levels,
            arrays,
            nnz,
            header_len: hlen,
            file_len: flen,
            extents: Vec::new(),
        };
        Ok((h, table))
    }

    /// Reads and checks only the header of an open file (no mapping, no array reads).
    pub fn read_from(file: &File, path: &Path) -> Result<TcsHeader> {
        let err = |source| Error::Tcs {
            path: path.to_path_buf(),
            source,
        };
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut prefix = vec![0u8; (PREFIX as u64).min(len) as usize];
        file.read_exact_at(&mut prefix, 0)
            .map_err(|e| Error::io(path, e))?;
        // Parsing the prefix alone yields the header length (or an earlier error).
        let needed = match TcsHeader::parse_head(&prefix, len) {
            Ok(_) => unreachable!("a header is longer than its prefix"),
            Err(TcsError::Truncated { needed, .. })
                if needed <= len && needed > prefix.len() as u64 =>
            {
                needed
            }
            Err(TcsError::Truncated { needed, .. }) => {
                return Err(err(TcsError::Truncated { needed, len }))
            }
            Err(e) => return Err(err(e)),
        };
        let mut bytes = vec![0u8; needed as usize];
        file.read_exact_at(&mut bytes, 0)
            .map_err(|e| Error::io(path, e))?;
        let (mut h, table) = TcsHeader::parse_head(&bytes, len).map_err(err)?;
        if let Some(t) = table {
            let mut b = vec![0u8; t.len as usize];
            file.read_exact_at(&mut b, len - t.len)
                .map_err(|e| Error::io(path, e))?;
            h.extents = t.parse(&b).map_err(err)?;
        }
        h.checked().map_err(err)
    }

    /// Checks modes and levels: a permutation of modes, split ranges, dense ranges.
    fn check_fields(&self) -> Result<(), TcsError> {
        if !matches!(self.index_bits, 32 | 64) {
            return Err(TcsError::IndexWidth(self.index_bits as u8));
        }
        if self.levels.len() != self.modes.len() || self.modes.len() > MAX_RANK {
            return Err(TcsError::Rank(self.modes.len() as u64));
        }
        let max_index = if self.index_bits == 32 {
            u32::MAX as u64
        } else {
            u64::MAX
        };
        for (m, mode) in self.modes.iter().enumerate() {
            if mode.dim > 0 && mode.dim - 1 > max_index {
                return Err(TcsError::Invalid(format!(
                    "mode {m}: dimension {} does not fit {}-bit coordinates",
                    mode.dim, self.index_bits
                )));
            }
            if mode.dim > isize::MAX as u64 {
                return Err(TcsError::Invalid(format!(
                    "mode {m}: dimension {} is too large",
                    mode.dim
                )));
            }
            if mode.split_lo > mode.split_hi || mode.split_hi > mode.dim {
                return Err(TcsError::Invalid(format!(
                    "mode {m}: split range [{}, {}) is not inside [0, {})",
                    mode.split_lo, mode.split_hi, mode.dim
                )));
            }
            if mode.split_index >= mode.split_count {
                return Err(TcsError::Invalid(format!(
                    "mode {m}: split index {} is not below the split count {}",
                    mode.split_index, mode.split_count
                )));
            }
        }
        let order: Vec<usize> = self.levels.iter().map(|l| l.mode as usize).collect();
        let types = self.levels.iter().map(|l| l.level_type).collect();
        Format::new(types, order).map_err(|e| TcsError::Invalid(e.to_string()))?;
        for (k, l) in self.levels.iter().enumerate() {
            let mode = self.modes[l.mode as usize];
            match l.level_type {
                LevelType::Dense => {
                    let end = l.offset.checked_add(l.size);
                    if l.offset < mode.split_lo || end.is_none_or(|e| e > mode.split_hi) {
                        return Err(TcsError::Invalid(format!(
                            "dense level {k}: range [{}, {}+{}) is not inside the mode's range [{}, {})",
                            l.offset, l.offset, l.size, mode.split_lo, mode.split_hi
                        )));
                    }
                }
                LevelType::Compressed | LevelType::Singleton if l.offset != 0 => {
                    return Err(field(&format!("offset of sparse level {k}"), l.offset, 0));
                }
                LevelType::Compressed | LevelType::Singleton => {}
            }
        }
        Ok(())
    }

    /// Array kinds, levels and lengths implied by the level records, in file order, and the
    /// number of values.
    #[allow(clippy::type_complexity)]
    fn expected_array_lengths(&self) -> Result<(Vec<(ArrayKind, u32, u64)>, u64), TcsError> {
        let w = self.index_bits as u64 / 8;
        let mut parents = 1u64;
        let mut out = Vec::new();
        for (k, l) in self.levels.iter().enumerate() {
            match l.level_type {
                LevelType::Dense => parents = parents.checked_mul(l.size).ok_or_else(too_large)?,
                LevelType::Compressed => {
                    let pos = parents
                        .checked_add(1)
                        .and_then(|p| p.checked_mul(w))
                        .ok_or_else(too_large)?;
                    out.push((ArrayKind::Pos, k as u32, pos));
                    out.push((
                        ArrayKind::Crd,
                        k as u32,
                        l.size.checked_mul(w).ok_or_else(too_large)?,
                    ));
                    parents = l.size;
                }
                LevelType::Singleton => {
                    if l.size != parents {
                        return Err(field(
                            &format!("size of singleton level {k}"),
                            l.size,
                            parents,
                        ));
                    }
                    out.push((
                        ArrayKind::Crd,
                        k as u32,
                        l.size.checked_mul(w).ok_or_else(too_large)?,
                    ));
                }
            }
        }
        let vals = parents
            .checked_mul(self.value_type.size() as u64)
            .ok_or_else(too_large)?;
        out.push((ArrayKind::Vals, self.levels.len() as u32, vals));
        Ok((out, parents))
    }

    /// Arrays must be exactly those the levels imply, back to back at 64-byte alignment,
    /// ending at the end of the file.
    fn check_layout(&self) -> Result<(), TcsError> {
        let (expected, nnz) = self.expected_array_lengths()?;
        if self.arrays.len() != expected.len() {
            return Err(field(
                "array count",
                self.arrays.len() as u64,
                expected.len() as u64,
            ));
        }
        if self.nnz != nnz {
            return Err(field("number of values", self.nnz, nnz));
        }
        for (a, (kind, level, len)) in self.arrays.iter().zip(&expected) {
            if a.kind != *kind || a.level != *level {
                return Err(TcsError::Invalid(format!(
                    "array record {} is out of order (expected {kind:?} of level {level})",
                    a.name()
                )));
            }
            if a.len != *len {
                return Err(field(&format!("byte length of {}", a.name()), a.len, *len));
            }
        }
        if self.version >= SEGMENTED {
            return self.check_extents();
        }
        let mut at = self.header_len;
        for a in &self.arrays {
            if a.offset != at {
                return Err(field(&format!("offset of {}", a.name()), a.offset, at));
            }
            let end = a.offset.checked_add(a.len).ok_or_else(too_large)?;
            if end > self.file_len {
                return Err(TcsError::Truncated {
                    needed: end,
                    len: self.file_len,
                });
            }
            at = align_up(end).ok_or_else(too_large)?;
        }
        let end = self
            .arrays
            .last()
            .map(|a| a.offset + a.len)
            .unwrap_or(self.header_len);
        if end != self.file_len {
            return Err(TcsError::FileLength {
                recorded: self.file_len,
                actual: end,
            });
        }
        Ok(())
    }
}

impl TcsHeader {
    /// Version 3: array records at offset 0; extents in file order, each non-empty, a whole
    /// number of elements, at the first multiple of 64 after the previous one (the first at
    /// `header_len`), so none overlaps another or the header; the extent table right after
    /// the last one, ending the file; every array's extents adding up to its length.
    fn check_extents(&self) -> Result<(), TcsError> {
        let mut filled = vec![0u64; self.arrays.len()];
        let mut at = self.header_len;
        for (i, e) in self.extents.iter().enumerate() {
            let what = |w: &str| format!("extent {i} ({w})");
            let a = self.arrays.get(e.array as usize).ok_or_else(|| {
                TcsError::Invalid(what(&format!(
                    "names array {}, but the file has {}",
                    e.array,
                    self.arrays.len()
                )))
            })?;
            let elem = match a.kind {
                ArrayKind::Vals => self.value_type.size() as u64,
                _ => self.index_bits as u64 / 8,
            };
            if e.len == 0 || !e.len.is_multiple_of(elem) {
                return Err(TcsError::Invalid(what(&format!(
                    "{} bytes of {}: not a positive whole number of {elem}-byte elements",
                    e.len,
                    a.name()
                ))));
            }
            if e.offset != at {
                return Err(field(&what("offset"), e.offset, at));
            }
            let end = e.offset.checked_add(e.len).ok_or_else(too_large)?;
            let n = &mut filled[e.array as usize];
            *n = n.saturating_add(e.len);
            if *n > a.len {
                return Err(TcsError::Invalid(what(&format!(
                    "runs past the end of {} ({} bytes)",
                    a.name(),
                    a.len
                ))));
            }
            at = align_up(end).ok_or_else(too_large)?;
        }
        for (a, &n) in self.arrays.iter().zip(&filled) {
            if a.offset != 0 {
                return Err(field(
                    &format!("offset of {} (version 3)", a.name()),
                    a.offset,
                    0,
                ));
            }
            if n != a.len {
                return Err(field(
                    &format!("bytes of {} in extents", a.name()),
                    n,
                    a.len,
                ));
            }
        }
        let end = at.checked_add(self.table_len()).ok_or_else(too_large)?;
        if end != self.file_len {
            return Err(TcsError::FileLength {
                recorded: self.file_len,
                actual: end,
            });
        }
        Ok(())
    }
}

/// A version-3 extent table still to be read: `count` records, `len` bytes at the end of the
/// file, with checksum `crc`.
struct Table {
    count: usize,
    len: u64,
    crc: u32,
}

impl Table {
    fn parse(&self, b: &[u8]) -> Result<Vec<Extent>, TcsError> {
        let computed = crc32fast::hash(b);
        if computed != self.crc {
            return Err(TcsError::Invalid(format!(
                "extent table checksum mismatch (recorded {:#010x}, computed {computed:#010x})",
                self.crc
            )));
        }
        let mut c = Cursor {
            b,
            at: 0,
            file_len: b.len() as u64,
        };
        (0..self.count)
            .map(|_| {
                let array = c.u32()?;
                let reserved = c.u32()?;
                if reserved != 0 {
                    return Err(field("reserved extent field", reserved as u64, 0));
                }
                Ok(Extent {
                    array,
                    offset: c.u64()?,
                    len: c.u64()?,
                })
            })
            .collect()
    }
}

/// Bytes of the header of a file of rank `rank` with `narrays` arrays.
pub(crate) fn header_len(rank: usize, narrays: usize) -> Option<u64> {
    let content = PREFIX + rank * (MODE_RECORD + LEVEL_RECORD) + narrays * ARRAY_RECORD + 4;
    align_up(content as u64)
}

fn field(what: &str, recorded: u64, expected: u64) -> TcsError {
    TcsError::Field {
        what: what.to_string(),
        recorded,
        expected,
    }
}

fn too_large() -> TcsError {
    TcsError::Invalid("array sizes overflow 64 bits".into())
}

/// Little-endian reads that report truncation instead of panicking.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    file_len: u64,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], TcsError> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or(TcsError::Truncated {
                needed: (self.at + n) as u64,
                len: self.file_len.min(self.b.len() as u64),
            })?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, TcsError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, TcsError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, TcsError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn mode(&mut self) -> Result<ModeInfo, TcsError> {
        Ok(ModeInfo {
            dim: self.u64()?,
            split_lo: self.u64()?,
            split_hi: self.u64()?,
            split_index: self.u64()?,
            split_count: self.u64()?,
        })
    }
    fn level(&mut self) -> Result<LevelInfo, TcsError> {
        let mode = self.u32()?;
        let level_type = match self.u32()? {
            0 => LevelType::Dense,
            1 => LevelType::Compressed,
            2 => LevelType::Singleton,
            t => {
                return Err(field(
                    "level type (0 dense, 1 compressed, 2 singleton)",
                    t as u64,
                    0,
                ))
            }
        };
        Ok(LevelInfo {
            mode,
            level_type,
            size: self.u64()?,
            offset: self.u64()?,
        })
    }
    fn array(&mut self) -> Result<ArrayInfo, TcsError> {
        let kind = match self.u32()? {
            0 => ArrayKind::Pos,
            1 => ArrayKind::Crd,
            2 => ArrayKind::Vals,
            k => return Err(field("array kind (0 pos, 1 crd, 2 vals)", k as u64, 0)),
        };
        let level = self.u32()?;
        let (offset, len, crc32) = (self.u64()?, self.u64()?, self.u32()?);
        let reserved = self.u32()?;
        if reserved != 0 {
            return Err(field("reserved array field", reserved as u64, 0));
        }
        Ok(ArrayInfo {
            kind,
            level,
            offset,
            len,
            crc32,
        })
    }
}

const _: () = assert!(ALIGN.is_power_of_two());
