//! Which replays may run their points without ledger borrows (issue 14; runtime/DESIGN.md,
//! "Replays without ledger borrows").
//!
//! A point borrows every sub-store it views from its store's ledger, which refuses a borrow
//! that overlaps one another point holds for writing: a check that the dependence graph
//! ordered the two points, paid at every view and, on a stencil, on a cache line both cores
//! write at every step (without it METG(50) under actors is ~12-15 % lower). A replayed trace
//! runs a graph fixed when it was recorded, so the check can be made once, there, instead:
//! every two accesses of the trace that conflict (the same store, overlapping rectangles, one
//! of them writes) must be ordered by a path of the recorded edges; and for a replay linked
//! to the one before (no entry vertex between them), every access of the first that
//! conflicts with one of the second must reach it through the edges of both and the recorded
//! cross edges. Both are checked here, by brute force over the pairs and a transitive
//! closure — not by the incremental access state (`record::logical`) that made the edges,
//! so a fault there is caught rather than repeated.
//!
//! Why those two suffice for a chain of linked replays of one trace: an access `u` of replay
//! `r` and a conflicting `v` of replay `r + k` have counterparts `u'`, `v'` in every replay
//! (the same tasks over the same stores). If `u` writes, `u` conflicts with its own copy in
//! the next replay, so the pair check orders `u -> u' -> ... -> u^(k-1)`, which conflicts
//! with `v`; if `v` writes, `u` reaches `v` of replay `r + 1`, and each copy of `v` the
//! next. A replay behind an entry vertex runs after every pending access to its stores.
//! What comes after a replay sees its postcondition in the stores' access states, as after
//! ordinary analysis; tasks analysed as usual keep their borrows.

use crate::rect::Rect;

/// One vertex's access to a store of the trace (stores numbered as the trace numbers them).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Access {
    pub vertex: u32,
    pub store: u32,
    pub rect: Rect,
    pub writes: bool,
}

/// Vertices past which a trace is not checked (nor trusted): the closure takes
/// `vertices² / 8` bytes (2 MiB here).
const MAX_VERTICES: usize = 4096;

/// Pairs of accesses past which a trace is not checked (nor trusted).
const MAX_PAIRS: usize = 1 << 22;

/// Whether every two conflicting accesses of different vertices that `checked` selects are
/// ordered by a path of `edges` (each from a lower-numbered vertex to a higher one; edges from
/// `skip`, the vertex standing for what came before, are left out: it orders nothing inside).
/// `false` also when the trace is too large to check, or an edge runs backwards.
pub(crate) fn conflicts_ordered(
    vertices: usize,
    edges: &[(u32, u32)],
    skip: u32,
    accesses: &[Access],
    checked: impl Fn(u32, u32) -> bool,
) -> bool {
    if vertices > MAX_VERTICES {
        return false;
    }
    let Some(reach) = Closure::new(vertices, edges, skip) else {
        return false;
    };
    let mut by_store = accesses.to_vec();
    by_store.sort_by_key(|a| (a.store, a.vertex));
    let mut pairs = 0usize;
    for group in by_store.chunk_by(|a, b| a.store == b.store) {
        for (i, a) in group.iter().enumerate() {
            for b in &group[i + 1..] {
                pairs += 1;
                if pairs > MAX_PAIRS {
                    return false;
                }
                let conflict = (a.writes || b.writes) && a.rect.overlaps(&b.rect);
                // Sorted by vertex: `a` was issued first, so it must come first.
                if conflict
                    && a.vertex != b.vertex
                    && checked(a.vertex, b.vertex)
                    && !reach.reaches(a.vertex, b.vertex)
                {
                    return false;
                }
            }
        }
    }
    true
}

/// Reachability over a DAG whose edges run from lower to higher vertex numbers: per vertex,
/// a bit set of the vertices it reaches.
struct Closure {
    words: usize,
    bits: Vec<u64>,
}

impl Closure {
    fn new(vertices: usize, edges: &[(u32, u32)], skip: u32) -> Option<Closure> {
        let words = vertices.div_ceil(64);
        let mut bits = vec![0u64; vertices * words];
        let mut edges: Vec<(u32, u32)> = edges.iter().copied().filter(|e| e.0 != skip).collect();
        if edges.iter().any(|&(u, v)| u >= v || v as usize >= vertices) {
            return None;
        }
        // From the last source back: a successor's set is final before its predecessors
        // take it.
        edges.sort_unstable_by(|a, b| b.cmp(a));
        for (u, v) in edges {
            let (u, v) = (u as usize, v as usize);
            bits[u * words + v / 64] |= 1 << (v % 64);
            let (head, tail) = bits.split_at_mut(v * words);
            let from = &tail[..words];
            head[u * words..(u + 1) * words]
                .iter_mut()
                .zip(from)
                .for_each(|(a, b)| *a |= b);
        }
        Some(Closure { words, bits })
    }

    fn reaches(&self, u: u32, v: u32) -> bool {
        let (u, v) = (u as usize, v as usize);
        self.bits[u * self.words + v / 64] >> (v % 64) & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(vertex: u32, store: u32, lo: usize, hi: usize, writes: bool) -> Access {
        Access {
            vertex,
            store,
            rect: Rect::new(&[lo], &[hi]),
            writes,
        }
    }

    fn all(_: u32, _: u32) -> bool {
        true
    }

    #[test]
    fn a_write_then_an_overlapping_read_needs_a_path() {
        let acc = [access(0, 0, 0, 10, true), access(2, 0, 5, 15, false)];
        assert!(!conflicts_ordered(3, &[], u32::MAX, &acc, all));
        assert!(!conflicts_ordered(3, &[(0, 1)], u32::MAX, &acc, all));
        // Through another vertex.
        assert!(conflicts_ordered(3, &[(0, 1), (1, 2)], u32::MAX, &acc, all));
        assert!(conflicts_ordered(3, &[(0, 2)], u32::MAX, &acc, all));
    }

    #[test]
    fn reads_disjoint_rectangles_other_stores_and_unchecked_pairs_need_none() {
        let reads = [access(0, 0, 0, 10, false), access(1, 0, 0, 10, false)];
        assert!(conflicts_ordered(2, &[], u32::MAX, &reads, all));
        let disjoint = [access(0, 0, 0, 10, true), access(1, 0, 10, 20, true)];
        assert!(conflicts_ordered(2, &[], u32::MAX, &disjoint, all));
        let stores = [access(0, 0, 0, 10, true), access(1, 1, 0, 10, true)];
        assert!(conflicts_ordered(2, &[], u32::MAX, &stores, all));
        let writes = [access(0, 0, 0, 10, true), access(1, 0, 0, 10, true)];
        assert!(!conflicts_ordered(2, &[], u32::MAX, &writes, all));
        // Only pairs across a boundary at vertex 2 checked: this one is inside the first part.
        assert!(conflicts_ordered(2, &[], u32::MAX, &writes, |u, v| u < 2 && v >= 2));
        // One vertex's two accesses never conflict with each other.
        let own = [access(0, 0, 0, 10, true), access(0, 0, 0, 10, false)];
        assert!(conflicts_ordered(1, &[], u32::MAX, &own, all));
    }

    #[test]
    fn edges_from_the_vertex_before_order_nothing_and_backward_edges_fail() {
        let writes = [access(0, 0, 0, 10, true), access(1, 0, 0, 10, true)];
        assert!(!conflicts_ordered(
            2,
            &[(u32::MAX, 1)],
            u32::MAX,
            &writes,
            all
        ));
        assert!(!conflicts_ordered(2, &[(1, 0)], u32::MAX, &writes, all));
        assert!(!conflicts_ordered(2, &[(0, 2)], u32::MAX, &writes, all));
    }

    #[test]
    fn the_closure_matches_a_search_on_random_dags() {
        let mut next = super::super::below(0x9e37_79b9_7f4a_7c15);
        for _ in 0..50 {
            let n = 1 + next(150) as usize;
            let edges: Vec<(u32, u32)> = (0..next(300))
                .filter_map(|_| {
                    let (a, b) = (next(n as u64) as u32, next(n as u64) as u32);
                    (a < b).then_some((a, b))
                })
                .collect();
            let c = Closure::new(n, &edges, u32::MAX).expect("forward edges");
            for u in 0..n as u32 {
                let mut seen = vec![false; n];
                let mut stack = vec![u];
                while let Some(w) = stack.pop() {
                    for &(a, b) in &edges {
                        if a == w && !seen[b as usize] {
                            seen[b as usize] = true;
                            stack.push(b);
                        }
                    }
                }
                for v in 0..n as u32 {
                    assert_eq!(c.reaches(u, v), seen[v as usize], "{u} -> {v} in {edges:?}");
                }
            }
        }
    }
}
