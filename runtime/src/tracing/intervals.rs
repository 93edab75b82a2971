//! Flush intervals in the finder's window (runtime/DESIGN.md, branch `tbs21`): the stretches of
//! the stream between two flushes (a read, fence or future wait). A loop that flushes once per
//! iteration repeats its body as a whole interval; when the body is longer than the finder's
//! `max_len`, the finder only proposes pieces of it, and replaying a piece cuts every iteration
//! into several launches with the intermediates crossing the cuts made in memory (fused
//! Black-Scholes: an 18-task chain per run, ended by a fence).
//!
//! Two rules, both functions of the tokens and the flushes alone (every rank decides alike):
//! * [`Intervals::repeated_whole`]: equal bounded intervals longer than `max_len` and at most
//!   `long_len` are proposed as one candidate, the whole interval.
//! * [`Intervals::piece_of_a_whole`]: a candidate that is a proper piece of such an interval and
//!   occurs at most once per interval is not proposed: the whole interval is the trace to want
//!   once it repeats (its first occurrences may still differ, e.g. a store named by its distance
//!   from first use in the first iteration only), and a piece replayed before it would split the
//!   loop body until the whole is found.

use std::ops::Range;

/// The flush intervals of one finder window.
pub(crate) struct Intervals {
    /// Where intervals start: window indices, increasing; the first is 0 only when the window
    /// starts the stream (the stream's start bounds an interval as a flush does).
    bounds: Vec<usize>,
    /// Tokens in the window (the last interval is open: the stream goes on).
    len: usize,
}

/// Where an occurrence lies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Inside the bounded interval `bounds[i]..bounds[i + 1]`.
    Bounded(usize),
    /// Inside the open interval at the window's end.
    Tail,
    /// Before the first bound (the interval's start is not in the window) or across a bound.
    Elsewhere,
}

impl Intervals {
    /// `cuts`: window indices before which the stream was flushed (increasing); `at_start`:
    /// whether the window's first token is the stream's first.
    pub(crate) fn new(cuts: &[usize], len: usize, at_start: bool) -> Intervals {
        let mut bounds = Vec::with_capacity(cuts.len() + 1);
        if at_start && cuts.first() != Some(&0) {
            bounds.push(0);
        }
        bounds.extend_from_slice(cuts);
        Intervals { bounds, len }
    }

    /// The bounded intervals, oldest first.
    fn bounded(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.bounds.windows(2).map(|w| w[0]..w[1])
    }

    fn place(&self, r: &Range<usize>) -> Place {
        let Some(i) = self.bounds.iter().rposition(|&b| b <= r.start) else {
            return Place::Elsewhere;
        };
        match self.bounds.get(i + 1) {
            Some(&end) if r.end <= end => Place::Bounded(i),
            Some(_) => Place::Elsewhere,
            None => Place::Tail,
        }
    }

    /// Groups of equal bounded intervals longer than `max_len` and at most `long_len`, seen at
    /// least `min_repeats` times: each a candidate, the whole interval (oldest first).
    pub(crate) fn repeated_whole(
        &self,
        tokens: &[u64],
        max_len: usize,
        long_len: usize,
        min_repeats: usize,
    ) -> Vec<Vec<Range<usize>>> {
        let mut groups: Vec<Vec<Range<usize>>> = Vec::new();
        for r in self
            .bounded()
            .filter(|r| r.len() > max_len && r.len() <= long_len)
        {
            match groups
                .iter_mut()
                .find(|g| tokens[g[0].clone()] == tokens[r.clone()])
            {
                Some(g) => g.push(r),
                None => groups.push(vec![r]),
            }
        }
        groups.retain(|g| g.len() >= min_repeats.max(2));
        groups
    }

    /// Whether `group` (occurrences of one candidate) is a proper piece of whole intervals
    /// longer than `max_len` and at most `long_len`, at most once in each: every occurrence in
    /// its own interval, at least one of them bounded, every bounded one strictly longer than
    /// the occurrence and within those lengths (the open interval at the end not yet longer
    /// than `long_len`), and those bounded intervals either one or with two of them equal (the
    /// body repeats whole; intervals that all differ, a loop varying a task every iteration,
    /// keep their pieces).
    pub(crate) fn piece_of_a_whole(
        &self,
        tokens: &[u64],
        group: &[Range<usize>],
        max_len: usize,
        long_len: usize,
    ) -> bool {
        let mut seen: Vec<Place> = Vec::with_capacity(group.len());
        let mut whole: Vec<Range<usize>> = Vec::new();
        for r in group {
            let place = self.place(r);
            if seen.contains(&place) {
                return false;
            }
            seen.push(place);
            match place {
                Place::Elsewhere => return false,
                Place::Tail if self.len - self.bounds[self.bounds.len() - 1] > long_len => {
                    return false
                }
                Place::Tail => {}
                Place::Bounded(i) => {
                    let iv = self.bounds[i]..self.bounds[i + 1];
                    if iv.len() <= max_len || iv.len() > long_len || iv.len() <= r.len() {
                        return false;
                    }
                    whole.push(iv);
                }
            }
        }
        let repeats = |a: &Range<usize>| {
            whole
                .iter()
                .any(|b| a != b && tokens[a.clone()] == tokens[b.clone()])
        };
        whole.len() == 1 || whole.iter().any(repeats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `body` repeated `n` times, a flush after each (the cuts), the window from the start.
    fn flushed(body: &[u64], n: usize) -> (Vec<u64>, Vec<usize>) {
        let tokens: Vec<u64> = (0..n).flat_map(|_| body.iter().copied()).collect();
        let cuts = (1..n).map(|k| k * body.len()).collect();
        (tokens, cuts)
    }

    #[test]
    fn equal_long_intervals_are_one_candidate_short_ones_are_left_to_the_finder() {
        let body: Vec<u64> = (0..18).collect();
        let (tokens, cuts) = flushed(&body, 4);
        // The last interval is open (no flush after it yet): not a whole occurrence.
        let iv = Intervals::new(&cuts, tokens.len(), true);
        assert_eq!(
            iv.repeated_whole(&tokens, 16, 32, 2),
            vec![vec![0..18, 18..36, 36..54]]
        );
        // Not at the stream's start: the first interval's start is unknown.
        let iv = Intervals::new(&cuts, tokens.len(), false);
        assert_eq!(
            iv.repeated_whole(&tokens, 16, 32, 2),
            vec![vec![18..36, 36..54]]
        );
        // Within the finder's reach, or longer than the longest whole trace: nothing.
        assert!(iv.repeated_whole(&tokens, 18, 32, 2).is_empty());
        assert!(iv.repeated_whole(&tokens, 16, 17, 2).is_empty());
        assert!(iv.repeated_whole(&tokens, 16, 32, 3).is_empty());
    }

    #[test]
    fn a_piece_once_per_long_interval_waits_for_the_whole() {
        let body: Vec<u64> = (0..18).collect();
        let (tokens, cuts) = flushed(&body, 3);
        let iv = Intervals::new(&cuts, tokens.len(), true);
        // Once per interval, a proper piece: not proposed.
        assert!(iv.piece_of_a_whole(&tokens, &[2..10, 20..28, 38..46], 16, 32));
        // One bounded interval and the open one (the second iteration being issued).
        let iv2 = Intervals::new(&cuts[..1], 30, true);
        assert!(iv2.piece_of_a_whole(&tokens, &[2..10, 20..28], 16, 32));
        // Twice in one interval: a repeat inside the body, kept.
        assert!(!iv.piece_of_a_whole(&tokens, &[2..5, 6..9, 20..23], 16, 32));
        // Intervals within the finder's reach, or longer than a whole trace: kept.
        assert!(!iv.piece_of_a_whole(&tokens, &[2..10, 20..28], 18, 32));
        assert!(!iv.piece_of_a_whole(&tokens, &[2..10, 20..28], 16, 17));
        // Before the first bound (not at the stream's start): kept.
        let late = Intervals::new(&cuts, tokens.len(), false);
        assert!(!late.piece_of_a_whole(&tokens, &[2..10, 20..28], 16, 32));
    }

    #[test]
    fn a_piece_of_intervals_that_all_differ_is_kept() {
        // A loop varying one task every iteration: the body never repeats whole.
        let mut tokens = Vec::new();
        for k in 0..3u64 {
            tokens.extend(0..17u64);
            tokens.push(100 + k);
        }
        let cuts = [18, 36];
        let iv = Intervals::new(&cuts, tokens.len(), true);
        assert!(iv.repeated_whole(&tokens, 16, 32, 2).is_empty());
        assert!(!iv.piece_of_a_whole(&tokens, &[0..16, 18..34, 36..52], 16, 32));
        // Two of the three equal: the body repeats whole.
        tokens[17] = 100;
        tokens[35] = 100;
        assert!(iv.piece_of_a_whole(&tokens, &[0..16, 18..34, 36..52], 16, 32));
    }
}
