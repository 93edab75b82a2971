//! What travels between ranks, as bytes: store rectangles, a point's leftovers for the finish
//! step, the finish step's outcome, and the failures both carry ([`Failures`]).
//!
//! Elements are copied as their in-memory bytes: every element type is plain data without
//! padding (`PosRange` is `repr(C)` of two `u64`), and ranks of one job run one build on one
//! kind of machine (same endianness). This file is the one place that reinterprets cells as
//! bytes.

use crate::buffer::Data;
use crate::dtype::{DType, Element, PosRange, Scalar};
use crate::error::RuntimeError;
use crate::execute::launch::PointOut;
use crate::fusion::failure::SubFailures;
use crate::rect::Rect;
use crate::store::StoreRoot;

/// Appends little-endian fields to a message.
#[derive(Default)]
pub(crate) struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    /// An optional error message: 0, or 1 and the text.
    pub fn status(&mut self, err: Option<&str>) {
        match err {
            None => self.u64(0),
            Some(m) => {
                self.u64(1);
                self.bytes(m.as_bytes());
            }
        }
    }
    pub fn scalar(&mut self, s: Scalar) {
        let (k, bits) = match s {
            Scalar::F64(x) => (0, x.to_bits()),
            Scalar::I64(x) => (1, x as u64),
            Scalar::U64(x) => (2, x),
        };
        self.u64(k);
        self.u64(bits);
    }
    /// An optional error: 0; 1 and a task failure's parts (so that the receiver rebuilds the
    /// same error, and keeps the lowest point's as the sender does: `launch::keep_earliest`);
    /// 3, the rank and the text of an error another rank reported (relayed as it is, not as
    /// "rank 0: rank 1: ..."); or 2 and any other error's text.
    pub fn error(&mut self, err: Option<&RuntimeError>) {
        match err {
            None => self.u64(0),
            Some(RuntimeError::TaskFailed {
                task,
                point,
                message,
            }) => {
                self.u64(1);
                self.bytes(task.as_bytes());
                self.u64(point.len() as u64);
                point.iter().for_each(|&c| self.u64(c as u64));
                self.bytes(message.as_bytes());
            }
            Some(RuntimeError::Remote { rank, message }) => {
                self.u64(3);
                self.u64(*rank as u64);
                self.bytes(message.as_bytes());
            }
            Some(e) => {
                self.u64(2);
                self.bytes(e.to_string().as_bytes());
            }
        }
    }
    pub fn failures(&mut self, f: &Failures) {
        self.error(f.task.as_ref());
        self.u64(f.subs.len() as u64);
        f.subs.iter().for_each(|e| self.error(e.as_ref()));
    }
    pub fn data(&mut self, d: &Data) {
        self.u64(dtype_code(d.dtype()));
        let len = data_len(d);
        self.u64(len as u64);
        let size = d.dtype().size();
        let start = self.0.len();
        self.0.resize(start + len * size, 0);
        // SAFETY: `d` is a private buffer (a point's leftovers) no other thread touches; its
        // `len` cells are plain data of `size` bytes each (see the module comment).
        unsafe {
            std::ptr::copy_nonoverlapping(data_ptr(d), self.0[start..].as_mut_ptr(), len * size)
        };
    }
}

/// Reads what a [`Writer`] wrote; a short or malformed message is an error, never a panic.
pub(crate) struct Reader<'a> {
    pub buf: &'a [u8],
    pub from: usize,
}

impl<'a> Reader<'a> {
    fn bad(&self, what: &str) -> RuntimeError {
        RuntimeError::Remote {
            rank: self.from,
            message: format!("malformed message: {what}"),
        }
    }
    pub fn u64(&mut self) -> Result<u64, RuntimeError> {
        let (h, t) = self
            .buf
            .split_first_chunk::<8>()
            .ok_or_else(|| self.bad("short field"))?;
        self.buf = t;
        Ok(u64::from_le_bytes(*h))
    }
    pub fn bytes(&mut self) -> Result<&'a [u8], RuntimeError> {
        let n = self.u64()? as usize;
        if n > self.buf.len() {
            return Err(self.bad("short bytes"));
        }
        let (h, t) = self.buf.split_at(n);
        self.buf = t;
        Ok(h)
    }
    pub fn status(&mut self) -> Result<Option<String>, RuntimeError> {
        Ok(match self.u64()? {
            0 => None,
            _ => Some(String::from_utf8_lossy(self.bytes()?).into_owned()),
        })
    }
    fn text(&mut self) -> Result<String, RuntimeError> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }
    /// What [`Writer::error`] wrote; an error other than a task failure comes back as
    /// [`RuntimeError::Remote`] from the sender.
    pub fn error(&mut self) -> Result<Option<RuntimeError>, RuntimeError> {
        Ok(match self.u64()? {
            0 => None,
            1 => {
                let task = self.text()?;
                let dim = self.u64()? as usize;
                if dim > crate::rect::MAX_DIMS {
                    return Err(self.bad("point"));
                }
                let point = (0..dim)
                    .map(|_| self.u64().map(|c| c as usize))
                    .collect::<Result<_, _>>()?;
                let message = self.text()?;
                Some(RuntimeError::TaskFailed {
                    task,
                    point,
                    message,
                })
            }
            2 => Some(RuntimeError::Remote {
                rank: self.from,
                message: self.text()?,
            }),
            3 => {
                let rank = self.u64()? as usize;
                Some(RuntimeError::Remote {
                    rank,
                    message: self.text()?,
                })
            }
            _ => return Err(self.bad("error kind")),
        })
    }
    pub fn failures(&mut self) -> Result<Failures, RuntimeError> {
        let task = self.error()?;
        let n = self.u64()? as usize;
        let subs = (0..n).map(|_| self.error()).collect::<Result<_, _>>()?;
        Ok(Failures { task, subs })
    }
    pub fn scalar(&mut self) -> Result<Scalar, RuntimeError> {
        let (k, bits) = (self.u64()?, self.u64()?);
        Ok(match k {
            0 => Scalar::F64(f64::from_bits(bits)),
            1 => Scalar::I64(bits as i64),
            _ => Scalar::U64(bits),
        })
    }
    pub fn data(&mut self) -> Result<Data, RuntimeError> {
        let dtype = dtype_of(self.u64()?).ok_or_else(|| self.bad("element type"))?;
        let len = self.u64()? as usize;
        let n = len
            .checked_mul(dtype.size())
            .filter(|&n| n <= self.buf.len())
            .ok_or_else(|| self.bad("short elements"))?;
        let d = Data::zeros(dtype, len);
        // SAFETY: `d` was just made and is private; it has `len` cells of `dtype.size()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.buf.as_ptr(), data_ptr(&d), n) };
        self.buf = &self.buf[n..];
        Ok(d)
    }
}

/// Appends a rectangle: its dimension, then its lower and upper corners.
pub(crate) fn write_cells(w: &mut Writer, r: &Rect) {
    w.u64(r.dim() as u64);
    r.lo().iter().chain(r.hi()).for_each(|&c| w.u64(c as u64));
}

/// Reads what [`write_cells`] appended.
pub(crate) fn read_cells(r: &mut Reader<'_>) -> Result<Rect, RuntimeError> {
    let dim = r.u64()? as usize;
    if dim > crate::rect::MAX_DIMS {
        return Err(r.bad("cells"));
    }
    let mut c = [0usize; 2 * crate::rect::MAX_DIMS];
    for x in c.iter_mut().take(2 * dim) {
        *x = r.u64()? as usize;
    }
    let (lo, hi) = (&c[..dim], &c[dim..2 * dim]);
    if lo.iter().zip(hi).any(|(l, h)| l > h) {
        return Err(r.bad("cells"));
    }
    Ok(Rect::new(lo, hi))
}

/// Element types by their code in messages.
const DTYPES: [DType; 7] = [
    DType::F64,
    DType::F32,
    DType::I64,
    DType::I32,
    DType::U64,
    DType::U32,
    DType::Range,
];

fn dtype_code(d: DType) -> u64 {
    DTYPES
        .iter()
        .position(|&x| x == d)
        .expect("every dtype is listed") as u64
}

fn dtype_of(c: u64) -> Option<DType> {
    DTYPES.get(c as usize).copied()
}

/// The first cell of `d` as bytes, and its number of cells.
fn raw(d: &Data) -> (*mut u8, usize) {
    fn r<T: Element>(d: &Data) -> (*mut u8, usize) {
        let b = T::buf(d).expect("dtype matches");
        (b.base() as *mut u8, b.len())
    }
    match d.dtype() {
        DType::F64 => r::<f64>(d),
        DType::F32 => r::<f32>(d),
        DType::I64 => r::<i64>(d),
        DType::I32 => r::<i32>(d),
        DType::U64 => r::<u64>(d),
        DType::U32 => r::<u32>(d),
        DType::Range => r::<PosRange>(d),
    }
}

pub(crate) fn data_len(d: &Data) -> usize {
    raw(d).1
}

fn data_ptr(d: &Data) -> *mut u8 {
    raw(d).0
}

/// Appends the elements of `rect` of `root` (row-major) under a shared ledger borrow.
pub(crate) fn read_rect(root: &StoreRoot, rect: Rect, w: &mut Writer) -> Result<(), RuntimeError> {
    let bound = root.bound().expect("transferred stores are bound");
    let data = root.data().expect("bound");
    let size = root.dtype.size();
    let _b = root
        .ledger
        .borrow(rect, false)
        .map_err(|r| RuntimeError::ConcurrentAccess {
            store: root.id,
            rect: format!("{r:?}"),
        })?;
    w.u64((rect.volume() * size) as u64);
    let base = data_ptr(data);
    rect.for_each_run(&bound.rect, |start, len| {
        // SAFETY: shared ledger borrow of `rect`; runs lie inside it and inside the buffer.
        let run = unsafe { std::slice::from_raw_parts(base.add(start * size), len * size) };
        w.0.extend_from_slice(run);
    });
    Ok(())
}

/// Writes what [`read_rect`] appended into `rect` of `root`, under an exclusive ledger borrow.
pub(crate) fn write_rect(
    root: &StoreRoot,
    rect: Rect,
    r: &mut Reader<'_>,
) -> Result<(), RuntimeError> {
    let bound = root.bound().expect("transferred stores are bound");
    let data = root.data().expect("bound");
    let size = root.dtype.size();
    let bytes = r.bytes()?;
    if bytes.len() != rect.volume() * size {
        return Err(r.bad("rectangle size"));
    }
    // Every cell of `rect` is written below: old values need no zeroing first.
    let _b = root
        .ledger
        .borrow_to_overwrite(rect)
        .map_err(|b| RuntimeError::ConcurrentAccess {
            store: root.id,
            rect: format!("{b:?}"),
        })?;
    let base = data_ptr(data);
    let mut k = 0;
    rect.for_each_run(&bound.rect, |start, len| {
        // SAFETY: exclusive ledger borrow of `rect`; runs lie inside it and inside the buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes[k..].as_ptr(), base.add(start * size), len * size)
        };
        k += len * size;
    });
    Ok(())
}

/// The failures a message carries across ranks: the task's as a whole (its text), and, for a
/// fused task, each sub-task's ([`crate::fusion::failure`]: its sub-tasks fail one by one on
/// every rank as on one; empty when none failed). Nothing else of a failure crosses ranks but
/// the poisoned pieces (a `Send` of a poisoned sub-store carries its error).
#[derive(Default)]
pub(crate) struct Failures {
    /// The task's failure kept on the sender (its lowest failed point's there).
    pub task: Option<RuntimeError>,
    pub subs: SubFailures,
}

/// A point's leftovers for the finish step, and the failures on its rank so far: its
/// reduction buffers and results, and only the lengths of its unbound pieces (which stay on
/// its rank).
pub(crate) fn write_out(out: &PointOut, failures: &Failures) -> Vec<u8> {
    let mut w = Writer::default();
    w.failures(failures);
    w.u64(out.reduce.len() as u64);
    for (arg, d) in &out.reduce {
        w.u64(*arg as u64);
        w.data(d);
    }
    w.u64(out.pieces.len() as u64);
    for (arg, d) in &out.pieces {
        w.u64(*arg as u64);
        w.u64(data_len(d) as u64);
    }
    w.u64(out.results.len() as u64);
    for r in &out.results {
        match r {
            None => w.u64(0),
            Some(s) => {
                w.u64(1);
                w.scalar(*s);
            }
        }
    }
    w.0
}

pub(crate) fn read_out(r: &mut Reader<'_>) -> Result<(PointOut, Failures), RuntimeError> {
    let failures = r.failures()?;
    let mut out = PointOut::default();
    for _ in 0..r.u64()? {
        let arg = r.u64()? as usize;
        out.reduce.push((arg, r.data()?));
    }
    for _ in 0..r.u64()? {
        let arg = r.u64()? as usize;
        out.remote_lens.push((arg, r.u64()?));
    }
    for _ in 0..r.u64()? {
        let s = match r.u64()? {
            0 => None,
            _ => Some(r.scalar()?),
        };
        out.results.push(s);
    }
    Ok((out, failures))
}

/// Copies `src` into `dst` from element `at` on (same element type).
pub(crate) fn copy_into(dst: &Data, at: usize, src: &Data) {
    let size = dst.dtype().size();
    let n = data_len(src);
    assert!(
        src.dtype() == dst.dtype() && at + n <= data_len(dst),
        "piece fits the store"
    );
    // SAFETY: `dst` is a store being bound by the finish step (no view of it exists yet) and
    // `src` a point's private piece; the assert keeps the copy inside both.
    unsafe { std::ptr::copy_nonoverlapping(data_ptr(src), data_ptr(dst).add(at * size), n * size) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task's or sub-task's failure crosses ranks as the same error (so every rank keeps
    /// the same lowest point's); another error as its text from the sender.
    #[test]
    fn failures_come_back_as_the_errors_sent() {
        let failed = RuntimeError::TaskFailed {
            task: "h".into(),
            point: vec![5, 1],
            message: "h refuses".into(),
        };
        let other = RuntimeError::Transport("gone".into());
        let remote = RuntimeError::Remote {
            rank: 3,
            message: other.to_string(),
        };
        for task in [failed.clone(), other.clone()] {
            let sent = Failures {
                task: Some(task.clone()),
                subs: smallvec::smallvec![None, Some(failed.clone()), Some(other.clone())],
            };
            let mut w = Writer::default();
            w.failures(&sent);
            let got = Reader { buf: &w.0, from: 3 }.failures().unwrap();
            let want = if task == failed { &failed } else { &remote };
            assert_eq!(got.task.as_ref(), Some(want));
            let subs = [None, Some(failed.clone()), Some(remote.clone())];
            assert_eq!(got.subs.as_slice(), subs);
        }
        // Relayed by another rank (rank 0 passing rank 3's on): still rank 3's.
        let mut w = Writer::default();
        w.error(Some(&remote));
        let relayed = Reader { buf: &w.0, from: 0 }.error().unwrap();
        assert_eq!(relayed.as_ref(), Some(&remote));
        // An unknown kind is a malformed message.
        let mut w = Writer::default();
        w.u64(9);
        assert!(Reader { buf: &w.0, from: 0 }.error().is_err());
        let mut w = Writer::default();
        w.failures(&Failures {
            task: Some(failed.clone()),
            subs: Default::default(),
        });
        // A short message is an error, not a panic.
        assert!(Reader {
            buf: &w.0[..20],
            from: 3
        }
        .failures()
        .is_err());
    }
}
