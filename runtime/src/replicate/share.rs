//! Memory per rank: which part of a store a rank keeps when every rank hands the runtime the
//! whole of it (`from_vec`), before any task has said who needs what.
//!
//! Stores across ranks are allocated page by page as they are written (`Buf::sparse_zeros`),
//! so a store a task creates holds, on each rank, only the pieces that rank's points write and
//! the parts it receives. Host data is different: every rank made the whole vector. Keeping
//! it whole would make every rank hold every input; instead each rank keeps the rows the
//! default launch of this store would give its points (the solver's tiling: one piece per
//! processor, `ceil(rows / pieces)` rows each, blocks of pieces per rank), and the
//! valid-copy map says so. A later task whose partition differs (an image, a halo) receives
//! the rest like any other missing part.

use super::owner;
use super::valid::ValidMap;
use crate::machine::Machine;
use crate::rect::Rect;

/// The rows of `whole` (its first dimension) that rank `rank` keeps: the union of the tiles
/// of its points under the default launch. Empty when it has no point.
pub(crate) fn share(whole: Rect, m: &Machine, rank: usize) -> Rect {
    let rows = whole.extent(0);
    let n = m.pieces_for(whole.volume());
    let tile = rows.div_ceil(n.max(1));
    let mine: Vec<usize> = (0..n).filter(|&p| owner(p, n, m.ranks) == rank).collect();
    let (lo, hi) = match (mine.first(), mine.last()) {
        (Some(&a), Some(&b)) => ((a * tile).min(rows), ((b + 1) * tile).min(rows)),
        _ => (0, 0),
    };
    let lo = whole.lo()[0] + lo;
    whole.with_range(0, lo, lo.max(whole.lo()[0] + hi))
}

/// The valid-copy map of a store cut by [`share`]: each rank holds its rows alone.
pub(crate) fn cut_map(whole: Rect, m: &Machine) -> ValidMap {
    let mut valid = ValidMap::all(whole, m.ranks);
    for r in 0..m.ranks {
        let s = share(whole, m, r);
        if !s.is_empty() {
            valid.write(s, r);
        }
    }
    valid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(threads: usize, ranks: usize) -> Machine {
        Machine {
            threads,
            ranks,
            rank: 0,
            min_piece: 1,
        }
    }

    #[test]
    fn shares_are_the_default_tiles_of_each_ranks_points_and_cover_the_store() {
        for (rows, threads, ranks) in [(10, 1, 2), (10, 2, 3), (7, 1, 4), (3, 1, 4), (1000, 2, 4)] {
            let m = machine(threads, ranks);
            let whole = Rect::from_shape(&[rows, 3]);
            let n = m.pieces_for(whole.volume());
            let tile = rows.div_ceil(n);
            let mut covered = vec![usize::MAX; rows];
            for r in 0..ranks {
                let s = share(whole, &m, r);
                assert_eq!((s.lo()[1], s.hi()[1]), (0, 3), "whole rows");
                for c in &mut covered[s.lo()[0]..s.hi()[0]] {
                    assert_eq!(*c, usize::MAX, "rank shares are disjoint");
                    *c = r;
                }
            }
            for (row, &r) in covered.iter().enumerate() {
                assert_eq!(r, owner(row / tile, n, ranks), "row {row} of {rows}");
            }
            let valid = cut_map(whole, &m);
            for r in 0..ranks {
                let s = share(whole, &m, r);
                assert!(valid.missing(&s, r).is_empty(), "rank {r} holds its share");
            }
        }
    }
}
