//! Chunk-sized scratch buffers for a kernel-fused task's temporaries, kept per worker thread
//! and reused by the next point instead of allocated (and zero-filled) for every point.
//!
//! A reused buffer holds whatever the previous chunk or point left in it. That is what an
//! element-wise output passed with `write` may start with (its body assigns every element);
//! a temporary whose first use in the fused task reads it is cleared before every chunk by
//! the chunk loop (`kernel::run_chunks`), so it reads zeros as the fresh store it replaces
//! would.

use std::cell::RefCell;

/// Buffers kept per thread beyond this many are freed (a fused task has a few temporaries).
const KEEP: usize = 64;

thread_local! {
    static POOL: RefCell<Vec<Vec<u64>>> = const { RefCell::new(Vec::new()) };
}

/// Scratch buffers taken from this thread's pool; they go back when this is dropped (also
/// when a body panics).
#[derive(Default)]
pub(crate) struct Scratch {
    bufs: smallvec::SmallVec<[Vec<u64>; 4]>,
}

impl Scratch {
    /// A buffer of at least `bytes` bytes, 8-byte aligned (every element type's alignment),
    /// valid until `self` is dropped. Its contents are unspecified.
    pub(crate) fn take(&mut self, bytes: usize) -> *mut u8 {
        let words = bytes.div_ceil(8);
        let mut buf = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
        if buf.len() < words {
            buf.resize(words, 0);
        }
        let ptr = buf.as_mut_ptr() as *mut u8;
        // Moving the `Vec` into `bufs` does not move its heap block: `ptr` stays valid.
        self.bufs.push(buf);
        ptr
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            let room = KEEP.saturating_sub(p.len());
            p.extend(self.bufs.drain(..).take(room));
        });
    }
}
