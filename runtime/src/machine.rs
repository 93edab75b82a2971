//! The machine the runtime partitions for: how many processors a launch domain is sized to, and
//! which rank owns which point.
//!
//! Transport seam: under control replication every rank runs the same task stream and the same
//! (deterministic) analysis; `owner` is the sharding function that decides which rank executes a
//! point, and the ranks exchange the sub-stores their points need over a
//! [`crate::transport::Communicator`]. This crate executes one rank today (`ranks == 1`, every
//! point local); `ranks`/`rank` are where a communicator's `size()`/`rank()` plug in.

/// Processors and piece-size policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Machine {
    /// Worker threads on this rank.
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

    /// The rank that executes linear point `p` of a domain of `n` points (block sharding).
    #[allow(dead_code)] // used once a transport gives more than one rank
    pub fn owner(&self, p: usize, n: usize) -> usize {
        p * self.ranks / n.max(1)
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
