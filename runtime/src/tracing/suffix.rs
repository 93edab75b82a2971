//! Suffix array and LCP array over 64-bit tokens.
//!
//! The byte-oriented crates (`divsufsort`, `libsais`, `suffix`) do not take an alphabet of
//! 2^64 symbols, so tokens are first replaced by their class among the distinct tokens (order
//! preserving, so the suffix order is the one of the tokens' numeric order: O(n log n)), and
//! the array is built by SA-IS (induced sorting, Nong, Zhang and Chan 2009) over those
//! classes in O(n), with Kasai's LCP in O(n).

/// No suffix in this slot yet.
const EMPTY: u32 = u32::MAX;

/// The suffix array of `s`: the start of every suffix, in increasing lexicographic order of
/// the suffixes (a suffix that is a prefix of another comes first).
pub(crate) fn suffix_array(s: &[u64]) -> Vec<usize> {
    let n = s.len();
    assert!(n < EMPTY as usize, "under 2^32 - 1 tokens");
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_unstable_by_key(|&p| s[p as usize]);
    let mut class = vec![0u32; n];
    let mut classes = 0;
    for (i, &p) in order.iter().enumerate() {
        if i > 0 && s[p as usize] != s[order[i - 1] as usize] {
            classes += 1;
        }
        class[p as usize] = classes;
    }
    sais(&class, classes as usize + 1)
        .into_iter()
        .map(|p| p as usize)
        .collect()
}

/// SA-IS over `s` with symbols below `k`, the end of `s` acting as a sentinel smaller than
/// every symbol (so a suffix that is a prefix of another sorts first).
fn sais(s: &[u32], k: usize) -> Vec<u32> {
    let n = s.len();
    match n {
        0 => return Vec::new(),
        1 => return vec![0],
        2 => return if s[0] < s[1] { vec![0, 1] } else { vec![1, 0] },
        _ => {}
    }
    // S-type: the suffix at i is smaller than the one at i + 1. The last one is L-type (the
    // sentinel after it is smaller).
    let mut stype = vec![false; n];
    for i in (0..n - 1).rev() {
        stype[i] = s[i] < s[i + 1] || (s[i] == s[i + 1] && stype[i + 1]);
    }
    // Bucket c holds the suffixes starting with symbol c: slots bucket[c]..bucket[c + 1].
    let mut bucket = vec![0u32; k + 1];
    for &c in s {
        bucket[c as usize + 1] += 1;
    }
    for c in 0..k {
        bucket[c + 1] += bucket[c];
    }
    // Leftmost S-type positions (LMS): S-type right after an L-type.
    let is_lms = |i: usize| i > 0 && stype[i] && !stype[i - 1];
    let lms: Vec<u32> = (1..n).filter(|&i| is_lms(i)).map(|i| i as u32).collect();
    let mut sa = vec![EMPTY; n];
    // Induced from the LMS suffixes in text order, the LMS *substrings* come out sorted.
    induce(s, &stype, &bucket, &lms, &mut sa);
    if lms.is_empty() {
        return sa; // every suffix was induced from the sentinel's
    }
    let sorted_lms: Vec<u32> = sa.iter().copied().filter(|&p| is_lms(p as usize)).collect();
    // Name each LMS substring (from one LMS position to the next, inclusive) by its rank
    // among the distinct ones; the last runs into the sentinel and is unlike any other.
    let mut index_of = vec![EMPTY; n];
    for (j, &p) in lms.iter().enumerate() {
        index_of[p as usize] = j as u32;
    }
    let end_of = |j: usize| lms.get(j + 1).map_or(n, |&e| e as usize);
    let mut names = vec![0u32; lms.len()];
    let mut name = 0u32;
    for w in sorted_lms.windows(2) {
        let (a, b) = (w[0] as usize, w[1] as usize);
        let (ja, jb) = (index_of[a] as usize, index_of[b] as usize);
        let (ea, eb) = (end_of(ja), end_of(jb));
        let same = ea < n && eb < n && ea - a == eb - b && s[a..=ea] == s[b..=eb];
        if !same {
            name += 1;
        }
        names[jb] = name;
    }
    // The LMS suffixes in sorted order: directly if the names are distinct, else from the
    // suffix array of the string of names (in text order), recursively.
    let sorted_lms = if name as usize + 1 == lms.len() {
        sorted_lms
    } else {
        let reduced = sais(&names, name as usize + 1);
        reduced.iter().map(|&j| lms[j as usize]).collect()
    };
    induce(s, &stype, &bucket, &sorted_lms, &mut sa);
    sa
}

/// Induced sorting: `lms` at the ends of their buckets (keeping their order), then L-type
/// suffixes from left to right, then S-type suffixes from right to left.
fn induce(s: &[u32], stype: &[bool], bucket: &[u32], lms: &[u32], sa: &mut [u32]) {
    let n = s.len();
    sa.fill(EMPTY);
    let mut tail = bucket[1..].to_vec();
    for &p in lms.iter().rev() {
        let c = s[p as usize] as usize;
        tail[c] -= 1;
        sa[tail[c] as usize] = p;
    }
    let mut head = bucket[..bucket.len() - 1].to_vec();
    // The suffix before the sentinel is L-type and the smallest of its bucket.
    let c = s[n - 1] as usize;
    sa[head[c] as usize] = (n - 1) as u32;
    head[c] += 1;
    for i in 0..n {
        let v = sa[i];
        if v != EMPTY && v > 0 && !stype[v as usize - 1] {
            let c = s[v as usize - 1] as usize;
            sa[head[c] as usize] = v - 1;
            head[c] += 1;
        }
    }
    let mut tail = bucket[1..].to_vec();
    for i in (0..n).rev() {
        let v = sa[i];
        if v != EMPTY && v > 0 && stype[v as usize - 1] {
            let c = s[v as usize - 1] as usize;
            tail[c] -= 1;
            sa[tail[c] as usize] = v - 1;
        }
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
        fn matches_naive_long(s in prop::collection::vec(0u64..3, 100..600)) {
            let sa = suffix_array(&s);
            prop_assert_eq!(&sa, &naive_sa(&s));
            prop_assert_eq!(lcp_array(&s, &sa), naive_lcp(&s, &sa));
        }

        #[test]
        fn matches_naive_periodic(unit in prop::collection::vec(0u64..3, 1..6), reps in 1usize..40, tail in prop::collection::vec(0u64..3, 0..4)) {
            let s: Vec<u64> = unit.iter().cycle().take(unit.len() * reps).chain(&tail).copied().collect();
            prop_assert_eq!(suffix_array(&s), naive_sa(&s));
        }

        #[test]
        fn matches_naive_wide_tokens(s in prop::collection::vec(prop::sample::select(vec![0, 1 << 40, u64::MAX - 1, u64::MAX]), 0..60)) {
            let sa = suffix_array(&s);
            prop_assert_eq!(&sa, &naive_sa(&s));
            prop_assert_eq!(lcp_array(&s, &sa), naive_lcp(&s, &sa));
        }
    }
}
