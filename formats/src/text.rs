//! What the `.tns` and `.mtx` readers have in common: a stream of entries with 0-based
//! coordinates, read with bounded memory, and a way to open either by extension.

use std::path::Path;

use crate::chunks::Chunk;
use crate::error::{Error, Result};
use crate::mtx::MtxReader;
use crate::tns::TnsReader;

/// Size of the read buffer of text readers.
pub(crate) const READ_BUFFER: usize = 256 << 10;

/// A streaming reader of tensor entries from a text file.
pub trait EntryReader {
    /// The file being read (for error messages).
    fn path(&self) -> &Path;
    /// Number of coordinates per entry.
    fn rank(&self) -> usize;
    /// Dimensions declared by the file (`.mtx` has them; `.tns` does not).
    fn declared_dims(&self) -> Option<Vec<u64>>;
    /// Reads the next entry: fills `coords` (0-based, `rank` of them) and returns the value,
    /// or `None` at the end of the file.
    fn next_entry(&mut self, coords: &mut [u64]) -> Result<Option<f64>>;
    /// Fills `chunk` (cleared first) with the next batch of entries, coordinates in mode
    /// order; false at the end. Readers may parse batches in parallel; do not mix with
    /// [`next_entry`](EntryReader::next_entry) on the same reader.
    fn next_chunk(&mut self, chunk: &mut Chunk) -> Result<bool> {
        sequential_chunk(self, chunk)
    }
    /// Announces that only coordinates will be used: batches may then hold 0 for every value
    /// and values need not be checked (a later full read reports bad ones).
    fn skip_values(&mut self) {}
    /// Asks for batches of packed keys ([`Chunk::pairs`]): level `k`'s coordinate (that of
    /// mode `order[k]`) in a field of `bits[k]` bits, the last level lowest; the fields must
    /// hold the declared dimensions, which the reader checks every entry against. Only
    /// before the first batch; true when the reader will pack (parallel `.tns` readers do),
    /// false when its batches stay as they are.
    #[doc(hidden)]
    fn pack_keys(&mut self, _order: &[usize], _bits: &[u32]) -> bool {
        false
    }
    /// The memory the reader's buffers may use (parallel readers keep fewer blocks in
    /// flight under a small budget).
    fn set_memory_budget(&mut self, _bytes: usize) {}
    /// Line of the entry last returned (1-based).
    fn line(&self) -> u64;
    /// Bytes consumed so far.
    fn bytes_read(&self) -> u64;
    /// Size of the file in bytes.
    fn total_bytes(&self) -> u64;
}

/// Entries per batch when a reader has no faster way than one entry at a time.
const CHUNK_ENTRIES: usize = 1 << 16;

/// A batch from repeated [`EntryReader::next_entry`] calls.
pub(crate) fn sequential_chunk<R: EntryReader + ?Sized>(
    r: &mut R,
    chunk: &mut Chunk,
) -> Result<bool> {
    chunk.clear();
    let mut coords = vec![0u64; r.rank()];
    while chunk.len() < CHUNK_ENTRIES {
        match r.next_entry(&mut coords)? {
            Some(v) => {
                chunk.coords.extend_from_slice(&coords);
                chunk.vals.push(v);
            }
            None => break,
        }
    }
    Ok(!chunk.is_empty())
}

/// The text formats Tessera reads and writes, and `.tcs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Tns,
    Mtx,
    Tcs,
}

impl FileKind {
    /// The kind named by a path's extension.
    pub fn of(path: &Path) -> Result<FileKind> {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        match ext.as_deref() {
            Some("tns") => Ok(FileKind::Tns),
            Some("mtx") => Ok(FileKind::Mtx),
            Some("tcs") => Ok(FileKind::Tcs),
            _ => Err(Error::Unsupported {
                path: path.to_path_buf(),
                what: "unknown file extension; expected .tns, .mtx or .tcs".into(),
            }),
        }
    }
}

/// Opens a `.tns` or `.mtx` file as an entry stream.
pub fn open_text(path: &Path) -> Result<Box<dyn EntryReader>> {
    match FileKind::of(path)? {
        FileKind::Tns => Ok(Box::new(TnsReader::open(path)?)),
        FileKind::Mtx => Ok(Box::new(MtxReader::open(path)?)),
        FileKind::Tcs => Err(Error::Unsupported {
            path: path.to_path_buf(),
            what: "expected a text file (.tns or .mtx)".into(),
        }),
    }
}
