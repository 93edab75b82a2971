//! Suffix array and LCP array over 64-bit tokens.
//!
//! The byte-oriented crates (`divsufsort`, `libsais`, `suffix`) do not take an alphabet of
//! 2^64 symbols, so tokens are first replaced by their rank among the distinct tokens (order
//! preserving, so the suffix order is the one of the tokens' numeric order), and the array is
//! built by prefix doubling with counting sorts: O(n log n) time, O(n) space.

/// The suffix array of `s`: the start of every suffix, in increasing lexicographic order of
/// the suffixes (a suffix that is a prefix of another comes first).
pub(crate) fn suffix_array(s: &[u64]) -> Vec<usize> {
    let n = s.len();
    if n == 0 {
        return Vec::new();
    }
    // Rank the tokens: rank[i] = number of distinct tokens smaller than s[i].
    let mut sorted: Vec<u64> = s.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut rank: Vec<usize> = s
        .iter()
        .map(|t| {
            sorted
                .binary_search(t)
                .expect("every token is in the sorted set")
        })
        .collect();
    let mut classes = sorted.len();

    let mut sa: Vec<usize> = Vec::with_capacity(n);
    let mut by_second: Vec<usize> = Vec::with_capacity(n);
    let mut next_rank = vec![0usize; n];
    let mut count = vec![0usize; n.max(classes) + 1];

    // Round 0: order by the first token alone.
    counting_sort(&rank, classes, 0..n, &mut sa, &mut count);
    let mut width = 1;
    while classes < n {
        // Order by the second half (rank of the suffix `width` further on): suffixes with no
        // second half come first, by increasing start (shorter first, which is what an empty
        // second half means); then the others in the order of their second half.
        by_second.clear();
        by_second.extend(n - width.min(n)..n);
        by_second.extend(sa.iter().filter(|&&p| p >= width).map(|&p| p - width));
        // A stable counting sort by the first half keeps that order among equal first halves.
        counting_sort(
            &rank,
            classes,
            by_second.iter().copied(),
            &mut sa,
            &mut count,
        );
        // New classes: equal (first, second) pairs share a class.
        let key = |p: usize| (rank[p], rank.get(p + width).map_or(0, |&r| r + 1));
        next_rank[sa[0]] = 0;
        classes = 1;
        for w in sa.windows(2) {
            if key(w[0]) != key(w[1]) {
                classes += 1;
            }
            next_rank[w[1]] = classes - 1;
        }
        std::mem::swap(&mut rank, &mut next_rank);
        width *= 2;
    }
    sa
}

/// Stable counting sort of `order` by `key` (values below `classes`) into `out`.
fn counting_sort(
    key: &[usize],
    classes: usize,
    order: impl Iterator<Item = usize> + Clone,
    out: &mut Vec<usize>,
    count: &mut [usize],
) {
    count[..=classes].fill(0);
    for p in order.clone() {
        count[key[p] + 1] += 1;
    }
    for c in 1..=classes {
        count[c] += count[c - 1];
    }
    out.clear();
    out.resize(key.len(), 0);
    for p in order {
        let slot = &mut count[key[p]];
        out[*slot] = p;
        *slot += 1;
    }
}

/// Kasai's LCP array: `lcp[i]` is the length of the longest common prefix of the suffixes
/// at `sa[i]` and `sa[i + 1]`; the last entry is 0. O(n).
pub(crate) fn lcp_array(s: &[u64], sa: &[usize]) -> Vec<usize> {
    let n = sa.len();
    let mut lcp = vec![0; n];
    let mut pos = vec![0; n];
    for (i, &p) in sa.iter().enumerate() {
        pos[p] = i;
    }
    let mut h: usize = 0;
    for start in 0..n {
        let i = pos[start];
        if i + 1 == n {
            h = 0;
            continue;
        }
        let other = sa[i + 1];
        while start + h < n && other + h < n && s[start + h] == s[other + h] {
            h += 1;
        }
        lcp[i] = h;
        h = h.saturating_sub(1);
    }
    lcp
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The suffix array by sorting the suffixes as slices: O(n² log n).
    pub(in crate::tracing) fn naive_sa(s: &[u64]) -> Vec<usize> {
        let mut sa: Vec<usize> = (0..s.len()).collect();
        sa.sort_by(|&a, &b| s[a..].cmp(&s[b..]));
        sa
    }

    /// The common prefix of the suffixes at `a` and `b`, by scanning.
    pub(in crate::tracing) fn common(s: &[u64], a: usize, b: usize) -> usize {
        s[a..]
            .iter()
            .zip(&s[b..])
            .take_while(|(x, y)| x == y)
            .count()
    }

    fn naive_lcp(s: &[u64], sa: &[usize]) -> Vec<usize> {
        let mut lcp: Vec<usize> = sa.windows(2).map(|w| common(s, w[0], w[1])).collect();
        if !sa.is_empty() {
            lcp.push(0);
        }
        lcp
    }

    #[test]
    fn figure_5_4() {
        let s: Vec<u64> = b"aabcbcbaa".iter().map(|&c| c as u64).collect();
        let sa = suffix_array(&s);
        assert_eq!(sa, [8, 7, 0, 1, 6, 4, 2, 5, 3]);
        assert_eq!(lcp_array(&s, &sa), [1, 2, 1, 0, 1, 3, 0, 2, 0]);
    }

    #[test]
    fn degenerate_inputs() {
        assert!(suffix_array(&[]).is_empty());
        assert!(lcp_array(&[], &[]).is_empty());
        assert_eq!(suffix_array(&[7]), [0]);
        assert_eq!(suffix_array(&[5; 6]), [5, 4, 3, 2, 1, 0]);
        assert_eq!(lcp_array(&[5; 4], &[3, 2, 1, 0]), [1, 2, 3, 0]);
        // Extreme token values keep their numeric order.
        assert_eq!(suffix_array(&[u64::MAX, 0, u64::MAX]), [1, 2, 0]);
    }

    proptest! {
        #[test]
        fn matches_naive(s in prop::collection::vec(0u64..4, 0..80)) {
            let sa = suffix_array(&s);
            prop_assert_eq!(&sa, &naive_sa(&s));
            prop_assert_eq!(lcp_array(&s, &sa), naive_lcp(&s, &sa));
        }

        #[test]
        fn matches_naive_wide_tokens(s in prop::collection::vec(prop::sample::select(vec![0, 1 << 40, u64::MAX - 1, u64::MAX]), 0..60)) {
            let sa = suffix_array(&s);
            prop_assert_eq!(&sa, &naive_sa(&s));
            prop_assert_eq!(lcp_array(&s, &sa), naive_lcp(&s, &sa));
        }
    }
}
