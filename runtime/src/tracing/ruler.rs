//! Ruler-function sampling of the history (thesis §5.3.4): when to run the finder, and over
//! how many of the most recent tokens.
//!
//! The ruler function r(j) counts how often 2 divides j (r = 0, 1, 0, 2, 0, 1, 0, 3, …).
//! After every `unit` tasks (the j-th time) the finder runs over the last `unit · 2^r(j)`
//! tokens, at most the history's capacity: short windows often (quick to react to a short
//! loop), long ones rarely (to find long loops). Since `unit · 2^r(j)` divides `j · unit`,
//! a window never reaches before the first token. Each window is O(w log w), and the windows
//! of one size together cover the stream once, so the total is O(n log² n) for n tasks.

/// Decides at which history lengths the finder runs. A pure function of the count of tokens
/// seen, so every rank issuing the same stream samples at the same tokens.
#[derive(Clone, Debug)]
pub struct RulerSampler {
    unit: usize,
    capacity: usize,
    seen: u64,
}

impl RulerSampler {
    /// Samples every `unit` tokens, windows of at most `capacity` tokens (both at least 1).
    pub fn new(unit: usize, capacity: usize) -> RulerSampler {
        RulerSampler {
            unit: unit.max(1),
            capacity: capacity.max(1),
            seen: 0,
        }
    }

    /// Counts one more token; `Some(w)`: run the finder over the last `w` tokens now.
    pub fn observe(&mut self) -> Option<usize> {
        self.seen += 1;
        self.window_at(self.seen)
    }

    /// Tokens counted so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The window after the `count`-th token (counting from 1), if the finder runs then.
    pub fn window_at(&self, count: u64) -> Option<usize> {
        let unit = self.unit as u64;
        if count == 0 || !count.is_multiple_of(unit) {
            return None;
        }
        let ruler = (count / unit).trailing_zeros();
        let window = 1u64
            .checked_shl(ruler)
            .and_then(|p| p.checked_mul(unit))
            .unwrap_or(u64::MAX);
        Some(usize::try_from(window).map_or(self.capacity, |w| w.min(self.capacity)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(s: &mut RulerSampler, n: usize) -> Vec<Option<usize>> {
        (0..n).map(|_| s.observe()).collect()
    }

    #[test]
    fn thesis_example_buffer_of_four() {
        // §5.3.4: analyse the first task, then the first two, then the third, then all four.
        let mut s = RulerSampler::new(1, 4);
        assert_eq!(windows(&mut s, 4), [Some(1), Some(2), Some(1), Some(4)]);
        // Then the same again, over the most recent tokens; 8 is capped at the capacity.
        assert_eq!(windows(&mut s, 4), [Some(1), Some(2), Some(1), Some(4)]);
    }

    #[test]
    fn ruler_sequence_of_a_buffer_of_eight() {
        let mut s = RulerSampler::new(1, 8);
        let w: Vec<usize> = windows(&mut s, 16)
            .into_iter()
            .map(Option::unwrap)
            .collect();
        assert_eq!(w, [1, 2, 1, 4, 1, 2, 1, 8, 1, 2, 1, 4, 1, 2, 1, 8]);
    }

    #[test]
    fn multiples_of_a_unit() {
        let mut s = RulerSampler::new(250, 4000);
        let fired: Vec<(u64, usize)> = (0..4000u64)
            .filter_map(|_| s.observe().map(|w| (s.seen(), w)))
            .collect();
        assert_eq!(fired.len(), 16, "once every 250 tokens");
        assert_eq!(
            &fired[..4],
            &[(250, 250), (500, 500), (750, 250), (1000, 1000)]
        );
        assert_eq!(fired[7], (2000, 2000));
        assert_eq!(fired[15], (4000, 4000));
        // A window never reaches before the first token, and never exceeds the capacity.
        assert!(fired.iter().all(|&(at, w)| w as u64 <= at && w <= 4000));
        assert_eq!(s.window_at(8000), Some(4000));
    }

    #[test]
    fn deterministic_and_total() {
        let s = RulerSampler::new(3, 100);
        assert_eq!(s.window_at(0), None);
        assert_eq!(s.window_at(4), None);
        assert_eq!(s.window_at(3), Some(3));
        assert_eq!(s.window_at(12), Some(12));
        // Huge counts saturate at the capacity instead of overflowing.
        assert_eq!(s.window_at(3 << 62), Some(100));
        assert_eq!(RulerSampler::new(0, 0).window_at(1), Some(1));
        let mut a = RulerSampler::new(7, 64);
        let mut b = a.clone();
        assert_eq!(windows(&mut a, 500), windows(&mut b, 500));
    }
}
