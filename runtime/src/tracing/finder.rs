//! Algorithm 3 (thesis §5.3.2): non-overlapping repeated sub-strings of a token string, from
//! its suffix array and LCP array, greedily longest first.
//!
//! The answer is defined by the reference implementation the thesis cites (§5.3.2, footnote
//! 2: `matching-substring.py` in the `david-broman/matching-substrings` repository), and this
//! module reproduces it exactly, tie-breaking included:
//!
//! 1. For each adjacent pair of suffixes `(a, b) = (SA[i], SA[i+1])` with common prefix `p =
//!    LCP[i]`: if the two prefixes do not overlap (`b >= a + p` or `b <= a - p`, compared as
//!    *signed* numbers — `a - p` may be negative), the pair gives two candidates of length
//!    `p` at `a` and at `b`. If they overlap, the shared prefix is periodic with period `d =
//!    |b - a|`; with `lo = min(a, b)` the pair gives two candidates of length `l = ((p + d) /
//!    2) / d * d` at `lo` and at `lo + l`.
//! 2. Each candidate carries a *group* number: a counter, starting at 0, that is bumped
//!    whenever a pair's candidate length differs from the previous pair's (length 0 pairs
//!    included). Consecutive pairs of equal length share a group (and then the same
//!    sub-string); the same sub-string may still land in several groups.
//! 3. Candidates are sorted by (length descending, group ascending, start ascending).
//! 4. Walking them in that order, a group's occurrences are collected while the candidate is
//!    non-empty, `min_len <= length <= max_len`, starts at or after the end of the group's
//!    previous occurrence, and neither its first nor its last position is covered yet. When
//!    the group changes, the collected occurrences are kept if there are at least
//!    `min_repeats` of them (then their positions become covered) and dropped otherwise.
//!
//! Covering is checked at an interval's two ends only: every covered interval is at least as
//! long as the candidate (candidates come longest first), so one lying strictly inside it is
//! impossible.
//!
//! Legion's C++ port computed `a - p` on unsigned integers at one point; when `p > a` that
//! wraps to a huge number, so the overlap test always passes and overlapping pairs are taken
//! as disjoint. Here positions are `isize`, as in the Python reference.

use std::ops::Range;
use std::time::Instant;

use super::suffix::{lcp_array, suffix_array};
use super::FinderCost;

/// Groups of non-overlapping occurrences of repeated sub-strings of `tokens`, longest
/// sub-string first (see the module documentation for the exact definition).
///
/// Every group holds at least `min_repeats` ranges of one sub-string whose length lies in
/// `min_len..=max_len`, in increasing order; no two ranges of the answer overlap. Runs in
/// O(n log n) for n tokens.
///
/// As in the reference, `min_repeats == 0` keeps empty groups (one per group boundary, and
/// one for an input with no candidates).
///
/// ```
/// use tessera_runtime::tracing::find_repeats;
/// let s: Vec<u64> = b"aabcbcbaa".iter().map(|&c| c as u64).collect();
/// // "aa" at 0 and 7, "bc" at 2 and 4 (thesis Figure 5.4).
/// assert_eq!(find_repeats(&s, 1, usize::MAX, 2), vec![vec![0..2, 7..9], vec![2..4, 4..6]]);
/// ```
pub fn find_repeats(
    tokens: &[u64],
    min_len: usize,
    max_len: usize,
    min_repeats: usize,
) -> Vec<Vec<Range<usize>>> {
    Finder::default().run(tokens, min_len, max_len, min_repeats)
}

/// The repeat finder with its cost counters: [`find_repeats`] for a caller that runs it many
/// times and accounts for the time spent (the runtime, at every sample point).
#[derive(Default, Debug)]
pub struct Finder {
    cost: FinderCost,
}

/// One candidate occurrence: a sub-string of `len` tokens at `start`, in group `group`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    /// Sort key: `Reverse(len)` first, so longer candidates come first.
    neg_len: std::cmp::Reverse<usize>,
    group: usize,
    start: usize,
}

impl Finder {
    pub fn new() -> Finder {
        Finder::default()
    }

    /// What the runs so far cost.
    pub fn cost(&self) -> &FinderCost {
        &self.cost
    }

    /// [`find_repeats`], counted in [`Finder::cost`].
    pub fn run(
        &mut self,
        tokens: &[u64],
        min_len: usize,
        max_len: usize,
        min_repeats: usize,
    ) -> Vec<Vec<Range<usize>>> {
        let t0 = Instant::now();
        let mut candidates = candidates(tokens);
        candidates.sort_unstable();
        let groups = select(tokens.len(), &candidates, min_len, max_len, min_repeats);
        self.cost.record(
            tokens.len(),
            candidates.len(),
            groups.len(),
            t0.elapsed().as_nanos(),
        );
        groups
    }
}

/// Steps 1 and 2: two candidates per adjacent pair of the suffix array.
fn candidates(tokens: &[u64]) -> Vec<Candidate> {
    let sa = suffix_array(tokens);
    let lcp = lcp_array(tokens, &sa);
    let mut out = Vec::with_capacity(2 * sa.len().saturating_sub(1));
    let (mut group, mut prev_len) = (0usize, 0usize);
    for (i, pair) in sa.windows(2).enumerate() {
        // Signed positions: `a - p` may be negative (see the module documentation).
        let (a, b, p) = (pair[0] as isize, pair[1] as isize, lcp[i] as isize);
        let (len, first, second) = if b >= a + p || b <= a - p {
            (p, a, b)
        } else {
            let d = (b - a).abs();
            let l = (p + d) / 2 / d * d;
            let lo = a.min(b);
            (l, lo, lo + l)
        };
        let len = len as usize;
        if len != prev_len {
            group += 1;
        }
        prev_len = len;
        for start in [first, second] {
            out.push(Candidate {
                neg_len: std::cmp::Reverse(len),
                group,
                start: start as usize,
            });
        }
    }
    out
}

/// Steps 3 and 4 (the candidates already sorted): greedy selection, group by group.
fn select(
    n: usize,
    sorted: &[Candidate],
    min_len: usize,
    max_len: usize,
    min_repeats: usize,
) -> Vec<Vec<Range<usize>>> {
    let mut covered = vec![false; n];
    let mut out = Vec::new();
    let mut group_ranges: Vec<Range<usize>> = Vec::new();
    let mut group = 0;
    let mut next_start = 0;
    // Ends a group: kept (and its positions covered) with enough occurrences, else dropped.
    let close = |ranges: &mut Vec<Range<usize>>, covered: &mut [bool], out: &mut Vec<_>| {
        if ranges.len() >= min_repeats {
            for r in ranges.iter() {
                covered[r.clone()].fill(true);
            }
            out.push(std::mem::take(ranges));
        } else {
            ranges.clear();
        }
    };
    for c in sorted {
        let (len, start) = (c.neg_len.0, c.start);
        if c.group != group {
            close(&mut group_ranges, &mut covered, &mut out);
            next_start = 0;
            group = c.group;
        }
        if len != 0
            && (min_len..=max_len).contains(&len)
            && start >= next_start
            && !covered[start]
            && !covered[start + len - 1]
        {
            group_ranges.push(start..start + len);
            next_start = start + len;
        }
    }
    close(&mut group_ranges, &mut covered, &mut out);
    out
}

#[cfg(test)]
#[path = "finder_tests.rs"]
mod tests;
