//! Accounting of the bytes a rank's buffers hold, to check memory bounds in tests without
//! measuring the process: the buffers that grow with the data (a section read from a file, a
//! sink's segments) report what they hold; the peak is kept per thread, which is per rank for
//! thread ranks.

use std::cell::Cell;

thread_local! {
    /// (bytes held now, peak since the last reset)
    static HELD: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// `bytes` more are held.
pub(crate) fn hold(bytes: usize) {
    HELD.with(|h| {
        let (now, peak) = h.get();
        let now = now + bytes;
        h.set((now, peak.max(now)));
    });
}

/// `bytes` held before are freed.
pub(crate) fn release(bytes: usize) {
    HELD.with(|h| {
        let (now, peak) = h.get();
        h.set((now.saturating_sub(bytes), peak));
    });
}

/// Forgets the peak (and what is held) on this thread.
#[cfg(test)]
pub(crate) fn reset() {
    HELD.with(|h| h.set((0, 0)));
}

/// The most bytes held at once on this thread since the last [`reset`].
#[cfg(test)]
pub(crate) fn peak() -> usize {
    HELD.with(|h| h.get().1)
}

/// A buffer's bytes, held while it lives.
pub(crate) struct Held(usize);

impl Held {
    pub(crate) fn new(bytes: usize) -> Self {
        hold(bytes);
        Held(bytes)
    }

    /// The buffer now holds `bytes`.
    pub(crate) fn set(&mut self, bytes: usize) {
        if bytes > self.0 {
            hold(bytes - self.0);
        } else {
            release(self.0 - bytes);
        }
        self.0 = bytes;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        release(self.0);
    }
}
