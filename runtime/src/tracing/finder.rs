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
//! 3. Candidates are sorted by (length descending, group ascending, start ascending). (All
//!    candidates of a group share its length, so this sorts groups, then starts within each.)
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

/// The candidates, group by group: the `len`-token sub-strings at `starts[at]` form group
/// `id`. Generation fills `groups` in increasing `id`, each group's starts contiguous.
struct Candidates {
    starts: Vec<usize>,
    groups: Vec<Group>,
}

struct Group {
    len: usize,
    id: usize,
    at: Range<usize>,
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
        let mut c = candidates(tokens);
        c.sort();
        let groups = select(tokens.len(), &c, min_len, max_len, min_repeats);
        self.cost.record(
            tokens.len(),
            c.starts.len(),
            groups.len(),
            t0.elapsed().as_nanos(),
        );
        groups
    }
}

/// Steps 1 and 2: two candidates per adjacent pair of the suffix array.
fn candidates(tokens: &[u64]) -> Candidates {
    let sa = suffix_array(tokens);
    let lcp = lcp_array(tokens, &sa);
    let mut c = Candidates {
        starts: Vec::with_capacity(2 * sa.len().saturating_sub(1)),
        groups: Vec::new(),
    };
    let (mut id, mut prev_len) = (0usize, 0usize);
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
            id += 1;
        }
        prev_len = len;
        let at = c.starts.len();
        c.starts.extend([first as usize, second as usize]);
        match c.groups.last_mut() {
            Some(g) if g.id == id => g.at.end = c.starts.len(),
            _ => c.groups.push(Group {
                len,
                id,
                at: at..c.starts.len(),
            }),
        }
    }
    c
}

impl Candidates {
    /// Step 3: the order (length descending, group ascending, start ascending), as groups
    /// by (length descending, id ascending) with each group's starts ascending.
    fn sort(&mut self) {
        for g in &self.groups {
            self.starts[g.at.clone()].sort_unstable();
        }
        // Stable: groups of equal length stay in increasing id.
        self.groups.sort_by_key(|g| std::cmp::Reverse(g.len));
    }
}

/// Step 4 (the candidates sorted): greedy selection, group by group.
fn select(
    n: usize,
    c: &Candidates,
    min_len: usize,
    max_len: usize,
    min_repeats: usize,
) -> Vec<Vec<Range<usize>>> {
    let mut covered = vec![false; n];
    let mut out = Vec::new();
    let mut ranges: Vec<Range<usize>> = Vec::new();
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
    // The reference starts "in" group 0, so a first group with another id closes an empty one.
    let mut current = 0;
    for g in &c.groups {
        if g.id != current {
            close(&mut ranges, &mut covered, &mut out);
            current = g.id;
        }
        let len = g.len;
        if len == 0 || !(min_len..=max_len).contains(&len) {
            continue;
        }
        let mut next_start = 0;
        for &start in &c.starts[g.at.clone()] {
            if start >= next_start && !covered[start] && !covered[start + len - 1] {
                ranges.push(start..start + len);
                next_start = start + len;
            }
        }
    }
    close(&mut ranges, &mut covered, &mut out);
    out
}

#[cfg(test)]
#[path = "finder_tests.rs"]
mod tests;
