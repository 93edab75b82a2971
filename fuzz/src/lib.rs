//! What the fuzz targets share: a scratch directory for the readers that take paths, a walk
//! over a validated `.tcs` file that touches every array the way a kernel would, a checksum
//! fix-up so that mutated `.tcs` files reach the checks behind the checksums, and small
//! structured tensors (`arbitrary`) for the targets where random bytes would rarely parse.

pub mod compile;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use tessera_formats::tcs::{ArrayInfo, TcsFile};
use tessera_formats::{Index, LevelView, TensorView, Value};

/// A directory private to this process (in `/dev/shm` when it exists: no disk writes).
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("tessera-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

/// Writes `bytes` to `name` in the scratch directory.
pub fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, bytes).expect("scratch write");
    path
}

/// Removes every file of the scratch directory whose name starts with `prefix` (so a target
/// starts each input from a clean state).
pub fn clear(prefix: &str) {
    if let Ok(entries) = std::fs::read_dir(scratch()) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(prefix) {
                let p = e.path();
                let _ = if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
            }
        }
    }
}

/// Size of the fixed prefix of a `.tcs` header and of its records (docs/tcs.md).
const PREFIX: usize = 64;
const MODE_RECORD: usize = 40;
const LEVEL_RECORD: usize = 24;
const EXTENT_RECORD: usize = tessera_formats::tcs::header::EXTENT_RECORD;
const ARRAY_RECORD: usize = 32;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Recomputes the array checksums and then the header checksum of a (mutated) `.tcs` file in
/// place, as far as its rank and array count let them be found; does nothing where the
/// records lie outside the bytes. A mutation then fails a semantic check, not a checksum.
pub fn fix_checksums(b: &mut [u8]) {
    let (Some(rank), Some(narrays)) = (u32_at(b, 16), u32_at(b, 20)) else {
        return;
    };
    let (rank, narrays) = (rank.min(64) as usize, narrays.min(1024) as usize);
    let records = PREFIX + rank * (MODE_RECORD + LEVEL_RECORD);
    let crc_at = records + narrays * ARRAY_RECORD;
    if crc_at + 4 > b.len() {
        return;
    }
    let extents = segments(b);
    for k in 0..narrays {
        let r = records + k * ARRAY_RECORD;
        let (Some(off), Some(len)) = (u64_at(b, r + 8), u64_at(b, r + 16)) else {
            return;
        };
        let crc = match &extents {
            // Version 3: the array is its extents, in table order.
            Some(extents) => {
                let mut h = crc32fast::Hasher::new();
                for &(array, at, n) in extents {
                    let end = at.checked_add(n);
                    let bytes = end.and_then(|e| b.get(at as usize..e as usize));
                    if let (true, Some(bytes)) = (array as usize == k, bytes) {
                        h.update(bytes);
                    }
                }
                Some(h.finalize())
            }
            None => {
                let end = off.checked_add(len);
                end.and_then(|e| b.get(off as usize..e as usize))
                    .map(crc32fast::hash)
            }
        };
        if let Some(crc) = crc {
            b[r + 24..r + 28].copy_from_slice(&crc.to_le_bytes());
        }
    }
    if extents.is_some() {
        let count = u64_at(b, 48).unwrap_or(0) as usize;
        let table = &b[b.len() - count * EXTENT_RECORD..];
        let crc = crc32fast::hash(table);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = crc32fast::hash(&b[..crc_at]);
    b[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
}

/// The extent table of a version-3 file, as (array, offset, length), when its count fits the
/// bytes; `None` for older versions.
fn segments(b: &[u8]) -> Option<Vec<(u32, u64, u64)>> {
    if u32_at(b, 8)? < 3 {
        return None;
    }
    let count = usize::try_from(u64_at(b, 48)?).ok()?;
    let start = b.len().checked_sub(count.checked_mul(EXTENT_RECORD)?)?;
    (0..count)
        .map(|i| {
            let r = start + i * EXTENT_RECORD;
            Some((u32_at(b, r)?, u64_at(b, r + 8)?, u64_at(b, r + 16)?))
        })
        .collect()
}

/// Touches everything a validated file hands out, as kernels and converters would: every
/// array's bytes, every level's children and coordinates from the root down, every entry,
/// sub-blocks of dense levels, and the copy into memory. Panics only if the reader's promise
/// (a validated file is safe to walk) is broken.
pub fn walk_tcs(f: &TcsFile) {
    let h = f.header();
    let mut sum = 0u64;
    for a in &h.arrays {
        let a: &ArrayInfo = a;
        sum = sum.wrapping_add(f.array_bytes(a).iter().map(|&x| x as u64).sum::<u64>());
    }
    std::hint::black_box(sum);
    tessera_formats::with_types!(h.value_type, h.index_bits, |V, I| walk_typed::<V, I>(f))
}

fn walk_typed<V: Value, I: Index>(f: &TcsFile) {
    let view = f
        .view::<V, I>()
        .expect("a validated file has a view of its own types");
    walk_view(&view);
    let levels = view.levels().len();
    for k in 0..levels {
        if let LevelView::Dense { size, offset, .. } = view.levels()[k] {
            // The middle half of the level, as a block task would see it.
            let (lo, hi) = (offset + size / 4, offset + size - size / 4);
            if let Ok(sub) = view.sub_block(k, lo..hi) {
                walk_view(&sub);
            }
        }
    }
    let t = f
        .to_tensor::<V, I>()
        .expect("a validated file copies into a tensor");
    assert_eq!(t.nnz(), view.vals().len());
}

/// Every level from the root, with the checks a kernel relies on: children ranges inside the
/// level's positions, coordinates inside the dimension, one value per leaf position.
pub fn walk_view<V: Value, I: Index>(view: &TensorView<'_, V, I>) {
    let dims = view.dims();
    let order = view.format().mode_order().to_vec();
    let mut parents: Vec<usize> = vec![0];
    for (k, level) in view.levels().iter().enumerate() {
        let dim = dims[order[k]];
        let mut next = Vec::new();
        for &p in &parents {
            for c in level.children(p) {
                let coord = level.coord(p, c);
                assert!(
                    coord < dim,
                    "level {k}: coordinate {coord} >= dimension {dim}"
                );
                next.push(c);
            }
            if next.len() > 1 << 20 {
                return; // big dense tensors: the entries walk below covers them
            }
        }
        parents = next;
    }
    for &leaf in &parents {
        std::hint::black_box(view.vals()[leaf]);
    }
    let mut n = 0usize;
    view.for_each_level_entry(|c, v| {
        n += 1;
        for (k, &x) in c.iter().enumerate() {
            assert!(x < dims[order[k]]);
        }
        std::hint::black_box(v);
    });
    assert!(n <= view.vals().len());
    std::hint::black_box(view.entries().count());
}

/// A small sparse tensor: dimensions and entries (coordinates reduced modulo the dimension),
/// values from a small set that includes the awkward ones (NaN, ±inf, subnormals, −0).
#[derive(Debug, Arbitrary)]
pub struct ArbTensor {
    pub dims: Vec<u8>,
    pub entries: Vec<(Vec<u16>, ArbValue)>,
}

/// A value: an ordinary number, or one of the special ones.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum ArbValue {
    Small(i8),
    Any(f64),
    Nan,
    Inf,
    NegInf,
    Subnormal,
    NegZero,
    Huge,
}

impl ArbValue {
    pub fn get(self) -> f64 {
        match self {
            ArbValue::Small(i) => i as f64 / 4.0,
            ArbValue::Any(x) => x,
            ArbValue::Nan => f64::NAN,
            ArbValue::Inf => f64::INFINITY,
            ArbValue::NegInf => f64::NEG_INFINITY,
            ArbValue::Subnormal => 4.9e-324,
            ArbValue::NegZero => -0.0,
            ArbValue::Huge => f64::MAX,
        }
    }
}

impl ArbTensor {
    /// Rank 0..=4 and dimensions 1..=256; entries clipped into range.
    pub fn shape(&self) -> (Vec<usize>, Vec<(Vec<usize>, f64)>) {
        let dims: Vec<usize> = self
            .dims
            .iter()
            .take(4)
            .map(|&d| d as usize % 16 + 1)
            .collect();
        let entries = self
            .entries
            .iter()
            .take(64)
            .map(|(c, v)| {
                let coords = dims
                    .iter()
                    .enumerate()
                    .map(|(k, &d)| c.get(k).copied().unwrap_or(0) as usize % d)
                    .collect();
                (coords, v.get())
            })
            .collect();
        (dims, entries)
    }

    /// The tensor as `.tns` text with a `# dims` line (1-based coordinates).
    pub fn to_tns(&self) -> String {
        let (dims, entries) = self.shape();
        let mut s = String::from("# dims");
        for d in &dims {
            s += &format!(" {d}");
        }
        s.push('\n');
        for (c, v) in entries {
            for x in c {
                s += &format!("{} ", x + 1);
            }
            s += &format!("{v}\n");
        }
        s
    }
}

/// Reads `data` as the text file `name` (its extension picks the reader) twice, entry by
/// entry and in batches; both must agree, and every coordinate must lie inside the declared
/// dimensions (when the file declares them).
pub fn read_text(name: &str, data: &[u8]) {
    let path = write(name, data);
    let one = entries_one_by_one(&path);
    let batched = entries_batched(&path);
    match (&one, &batched) {
        (Ok(a), Ok(b)) => assert!(same_entries(a, b), "entry and batch reads disagree"),
        (Err(_), Err(_)) => {}
        _ => panic!("one read failed, the other did not: {one:?} vs {batched:?}"),
    }
}

type Read = Result<Vec<(Vec<u64>, f64)>, String>;

fn check_dims(r: &dyn tessera_formats::EntryReader, coords: &[u64]) {
    assert_eq!(coords.len(), r.rank());
    if let Some(d) = r.declared_dims() {
        assert_eq!(d.len(), r.rank());
        for (c, d) in coords.iter().zip(&d) {
            assert!(c < d, "coordinate {c} outside the declared dimension {d}");
        }
    }
}

fn entries_one_by_one(path: &Path) -> Read {
    let mut r = tessera_formats::open_text(path).map_err(|e| e.to_string())?;
    let mut coords = vec![0u64; r.rank()];
    let mut out = Vec::new();
    while let Some(v) = r.next_entry(&mut coords).map_err(|e| e.to_string())? {
        check_dims(&*r, &coords);
        out.push((coords.clone(), v));
    }
    Ok(out)
}

fn entries_batched(path: &Path) -> Read {
    let mut r = tessera_formats::open_text(path).map_err(|e| e.to_string())?;
    r.set_memory_budget(1 << 16);
    let rank = r.rank();
    let mut chunk = tessera_formats::Chunk::default();
    let mut out = Vec::new();
    while r.next_chunk(&mut chunk).map_err(|e| e.to_string())? {
        assert_eq!(chunk.coords.len(), chunk.vals.len() * rank);
        for (k, &v) in chunk.vals.iter().enumerate() {
            let coords = if rank == 0 {
                Vec::new()
            } else {
                chunk.coords[k * rank..(k + 1) * rank].to_vec()
            };
            check_dims(&*r, &coords);
            out.push((coords, v));
        }
    }
    Ok(out)
}

/// Equal entries, values compared bit for bit (NaN included).
fn same_entries(a: &[(Vec<u64>, f64)], b: &[(Vec<u64>, f64)]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.0 == y.0 && x.1.to_bits() == y.1.to_bits())
}

/// The nonzero entries of a validated file (level coordinates, value as `f64`), zeros left
/// out (dense levels store them; text does not).
pub fn entries_f64(f: &TcsFile) -> Vec<(Vec<usize>, f64)> {
    fn collect<V: Value, I: Index>(f: &TcsFile) -> Vec<(Vec<usize>, f64)> {
        let view = f.view::<V, I>().expect("types match");
        let mut out = Vec::new();
        view.for_each_level_entry(|c, v| {
            let x = v.to_f64();
            if x != 0.0 {
                out.push((c.to_vec(), x));
            }
        });
        out
    }
    let h = f.header();
    tessera_formats::with_types!(h.value_type, h.index_bits, |V, I| collect::<V, I>(f))
}
