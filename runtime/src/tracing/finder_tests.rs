//! Tests of Algorithm 3: the thesis' example, golden answers of the reference implementation,
//! and properties against a naive O(n²)-per-step version of the same definition.

use super::*;
use crate::tracing::suffix::tests::{common, naive_sa};
use proptest::prelude::*;

fn tokens(s: &str) -> Vec<u64> {
    s.bytes().map(u64::from).collect()
}

/// Parses "[a-b,c-d][e-f]" (the golden file's notation) into groups of ranges.
fn parse_groups(s: &str) -> Vec<Vec<Range<usize>>> {
    let range = |r: &str| {
        let (a, b) = r.split_once('-').expect("start-end");
        a.parse().unwrap()..b.parse().unwrap()
    };
    s.split_terminator(']')
        .map(|g| {
            let g = g.strip_prefix('[').expect("a group opens with [");
            g.split_terminator(',').map(range).collect()
        })
        .collect()
}

#[test]
fn thesis_figure_5_4() {
    // "aabcbcbaa": candidates (2, aa, 7), (2, aa, 0), (2, bc, 2), (2, bc, 4) win; output aa, bc.
    let s = tokens("aabcbcbaa");
    assert_eq!(
        find_repeats(&s, 1, usize::MAX, 2),
        vec![vec![0..2, 7..9], vec![2..4, 4..6]]
    );
    // Nothing repeats non-overlapping at length 3 or more.
    assert!(find_repeats(&s, 3, usize::MAX, 2).is_empty());
    // Length 1 only (the reference's answer): the groups come in suffix-array order.
    assert_eq!(
        find_repeats(&s, 1, 1, 2),
        vec![vec![7..8, 8..9], vec![0..1, 1..2], vec![4..5, 6..7]]
    );
}

/// Every golden case: the answer of the reference implementation (run with pydivsufsort) on
/// the strings its own file tries and on random strings over 2-4 letters.
#[test]
fn golden_answers_of_the_reference() {
    let file = include_str!("finder_golden.tsv");
    let mut cases = 0;
    for line in file.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 5, "malformed golden line {line:?}");
        let (min, max, rep) = (
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
        );
        assert_eq!(
            find_repeats(&tokens(f[0]), min, max, rep),
            parse_groups(f[4]),
            "find_repeats({:?}, {min}, {max}, {rep})",
            f[0]
        );
        cases += 1;
    }
    assert_eq!(cases, 299);
}

#[test]
fn wide_tokens_order_numerically() {
    // Golden answers of the reference on u64 arrays (numeric order of the tokens).
    let (m, h) = (u64::MAX, 1 << 63);
    assert_eq!(
        find_repeats(&[m, 3, h, m, 3, h, 7, 3, h], 1, 100, 2),
        vec![vec![0..3, 3..6]]
    );
    assert_eq!(
        find_repeats(&[9, 1, 9, 1, 9, 1, 1 << 40, 9, 1], 1, 100, 2),
        vec![vec![1..3, 3..5]]
    );
}

#[test]
fn degenerate_inputs_do_not_panic() {
    for rep in 0..3 {
        for (lo, hi) in [(0, 0), (0, 10), (1, 1), (2, usize::MAX), (5, 2)] {
            let empty = find_repeats(&[], lo, hi, rep);
            assert_eq!(empty, if rep == 0 { vec![vec![]] } else { vec![] });
            let single = find_repeats(&[42], lo, hi, rep);
            assert_eq!(single, if rep == 0 { vec![vec![]] } else { vec![] });
            for n in [2, 3, 7, 64] {
                check_invariants(
                    &vec![7; n],
                    lo,
                    hi,
                    rep,
                    &find_repeats(&vec![7; n], lo, hi, rep),
                );
            }
        }
    }
    // All equal: halves of the longest even run.
    assert_eq!(find_repeats(&[7; 8], 1, 100, 2), vec![vec![0..4, 4..8]]);
    assert_eq!(find_repeats(&[7; 9], 1, 100, 2)[0], vec![0..4, 4..8]);
}

#[test]
fn the_unsigned_port_would_differ() {
    // "aaaa": the pair (SA[2], SA[3]) = (1, 0) shares p = 3 tokens, so `a - p` is negative.
    // Computed unsigned it wraps, the overlapping pair is taken as disjoint (two "aaa" at 1
    // and 0, which cannot both be kept), "aa" is never proposed, and the answer would be
    // three "a"s at 1, 2 and 3.
    let groups = find_repeats(&tokens("aaaa"), 1, 100, 2);
    assert_eq!(groups, vec![vec![0..2, 2..4]]);
}

#[test]
fn finder_counts_its_cost() {
    let mut f = Finder::new();
    let s = tokens("abcabcabcxyzxyz");
    let a = f.run(&s, 1, 100, 2);
    f.run(&s[..6], 1, 100, 2);
    assert_eq!(a, find_repeats(&s, 1, 100, 2));
    let c = *f.cost();
    assert_eq!((c.runs, c.tokens), (2, 21));
    assert_eq!(c.candidates, 2 * 14 + 2 * 5, "two per adjacent pair");
    assert!(c.groups >= 2);
    assert_eq!(FinderCost::default().ns_per_task(0), 0.0);
}

/// Properties any answer has, whatever the tie-breaking.
fn check_invariants(s: &[u64], lo: usize, hi: usize, rep: usize, groups: &[Vec<Range<usize>>]) {
    let mut covered = vec![false; s.len()];
    let mut prev_len = usize::MAX;
    for g in groups {
        assert!(g.len() >= rep);
        let Some(first) = g.first() else { continue };
        let len = first.len();
        assert!(
            len >= lo.max(1) && len <= hi,
            "length {len} outside {lo}..={hi}"
        );
        assert!(len <= prev_len, "longest first");
        prev_len = len;
        for w in g.windows(2) {
            assert!(w[0].end <= w[1].start, "increasing, non-overlapping");
        }
        for r in g {
            assert_eq!(&s[r.clone()], &s[first.clone()], "one sub-string per group");
            for c in &mut covered[r.clone()] {
                assert!(!*c, "ranges of different groups overlap");
                *c = true;
            }
        }
    }
}

/// The same definition written the slow, direct way: suffixes sorted by comparing slices,
/// common prefixes by scanning, groups as runs of equal candidate length, and overlap checked
/// against every interval chosen so far.
fn naive(s: &[u64], lo: usize, hi: usize, rep: usize) -> Vec<Vec<Range<usize>>> {
    assert!(
        rep >= 1,
        "the empty-group quirk of min_repeats = 0 is left to the golden cases"
    );
    let sa = naive_sa(s);
    // (length, first start, second start) per adjacent pair.
    let pairs: Vec<(usize, usize, usize)> = sa
        .windows(2)
        .map(|w| {
            let (a, b) = (w[0].min(w[1]), w[0].max(w[1]));
            let p = common(s, a, b);
            if a + p <= b {
                (p, a, b)
            } else {
                let d = b - a;
                let l = (p + d) / 2 / d * d;
                (l, a, a + l)
            }
        })
        .collect();
    // Groups: maximal runs of consecutive pairs with the same length; the run index orders
    // groups of equal length.
    let mut runs: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, &(len, x, y)) in pairs.iter().enumerate() {
        if i == 0 || pairs[i - 1].0 != len {
            runs.push((len, Vec::new()));
        }
        runs.last_mut().unwrap().1.extend([x, y]);
    }
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by_key(|&r| (std::cmp::Reverse(runs[r].0), r));
    let mut chosen: Vec<Range<usize>> = Vec::new();
    let mut out = Vec::new();
    for r in order {
        let (len, ref starts) = runs[r];
        if len == 0 || len < lo || len > hi {
            continue;
        }
        let mut starts = starts.clone();
        starts.sort_unstable();
        let mut group: Vec<Range<usize>> = Vec::new();
        for st in starts {
            let cand = st..st + len;
            let free = chosen
                .iter()
                .chain(&group)
                .all(|c| c.end <= cand.start || cand.end <= c.start);
            if free {
                group.push(cand);
            }
        }
        if group.len() >= rep {
            chosen.extend(group.iter().cloned());
            out.push(group);
        }
    }
    out
}

proptest! {
    #[test]
    fn agrees_with_the_naive_definition(
        s in prop::collection::vec(0u64..3, 0..70),
        lo in 0usize..4,
        span in 0usize..12,
        rep in 1usize..4,
    ) {
        let hi = lo + span;
        let got = find_repeats(&s, lo, hi, rep);
        check_invariants(&s, lo, hi, rep, &got);
        prop_assert_eq!(got, naive(&s, lo, hi, rep));
    }

    #[test]
    fn agrees_on_binary_strings_without_bounds(s in prop::collection::vec(0u64..2, 0..120)) {
        let got = find_repeats(&s, 1, usize::MAX, 2);
        check_invariants(&s, 1, usize::MAX, 2, &got);
        prop_assert_eq!(got, naive(&s, 1, usize::MAX, 2));
    }

    #[test]
    fn renaming_tokens_in_order_changes_nothing(s in prop::collection::vec(0u64..4, 0..60)) {
        // Only the order of tokens matters: an order-preserving renaming gives the same answer.
        let wide: Vec<u64> = s.iter().map(|&t| (t << 60) | 12345).collect();
        prop_assert_eq!(find_repeats(&s, 1, 50, 2), find_repeats(&wide, 1, 50, 2));
    }
}
