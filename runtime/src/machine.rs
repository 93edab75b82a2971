//! The machine the runtime partitions for: how many processors a launch domain is sized to.
//!
//! Across ranks (`RuntimeBuilder::communicator`) `threads` is the number every rank agreed on
//! and `ranks`/`rank` are the communicator's; which rank runs which point is
//! `replicate::owner`.

/// Processors and piece-size policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Machine {
    /// Processors per rank (across ranks: the smallest any rank asked for).
    pub threads: usize,
    /// Ranks running the same task stream.
    pub ranks: usize,
    /// This process's rank.
    pub rank: usize,
    /// Smallest number of elements worth giving one point task.
    pub min_piece: usize,
}

impl Machine {
    /// Total processors: the default size of a launch domain.
    pub fn processors(&self) -> usize {
        self.threads * self.ranks
    }

    /// Number of pieces for a store of `volume` elements when nothing fixes the launch domain:
    /// one per processor, but never pieces smaller than `min_piece`.
    pub fn pieces_for(&self, volume: usize) -> usize {
        let by_size = volume.div_ceil(self.min_piece.max(1)).max(1);
        self.processors().min(by_size).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_stores_get_few_pieces() {
        let m = Machine {
            threads: 8,
            ranks: 1,
            rank: 0,
            min_piece: 100,
        };
        assert_eq!(m.pieces_for(0), 1);
        assert_eq!(m.pieces_for(250), 3);
        assert_eq!(m.pieces_for(1_000_000), 8);
    }
}
