//! The finder and the matcher put together as the issue path will call them (Algorithm 2,
//! synchronously): one call per issued task's token.

use std::collections::VecDeque;
use std::ops::Range;

use super::intervals::Intervals;
use super::{Action, Finder, FinderCost, Replayer, RulerSampler, ScoreParams};

/// Settings of a [`Tracer`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TracerConfig {
    /// Tokens of history kept for the finder (its largest window).
    pub history: usize,
    /// The finder runs every `sample_unit` tokens (over ruler-function windows).
    pub sample_unit: usize,
    /// Shortest and longest trace worth recording.
    pub min_len: usize,
    pub max_len: usize,
    /// Longest candidate that is a whole flush interval repeated (`intervals.rs`); only
    /// intervals longer than `max_len` are proposed so. At most `max_len`: off.
    pub long_len: usize,
    /// Occurrences the finder must see in a window to propose a candidate.
    pub min_repeats: usize,
    pub score: ScoreParams,
    /// Greedy matching, one pursued match at a time (`Replayer::set_one_pointer`).
    pub one_pointer: bool,
    /// Skip a sample whose whole window was replayed: the finder would only find the
    /// traces being replayed (or pieces of them) again.
    pub skip_replayed: bool,
}

impl Default for TracerConfig {
    fn default() -> TracerConfig {
        TracerConfig {
            history: 1024,
            sample_unit: 64,
            min_len: 2,
            max_len: usize::MAX,
            long_len: 0,
            min_repeats: 2,
            score: ScoreParams::default(),
            one_pointer: false,
            skip_replayed: false,
        }
    }
}

/// History, sampler, finder and matcher: tokens in, actions out. Its decisions are a function
/// of the tokens alone, so every rank issuing the same stream decides the same (§5.4.1).
#[derive(Debug)]
pub struct Tracer {
    config: TracerConfig,
    history: VecDeque<u64>,
    sampler: RulerSampler,
    finder: Finder,
    replayer: Replayer,
    /// Tokens issued up to and including the last one handed back unreplayed (or still
    /// held): the finder's window is all replayed when it starts after this.
    not_replayed_until: u64,
    /// Samples skipped because their window was all replayed.
    skipped: u64,
    /// Token counts at which the stream was flushed (a read, fence or future wait): no
    /// match can span one, so candidates are cut there (oldest first, within the history).
    barriers: VecDeque<u64>,
    /// Scratch for [`by_first_appearance`].
    classes: rustc_hash::FxHashMap<u64, u64>,
    renamed: Vec<u64>,
}

impl Tracer {
    pub fn new(config: TracerConfig) -> Tracer {
        let history = config.history.max(1);
        let mut replayer = Replayer::new(config.score);
        replayer.set_one_pointer(config.one_pointer);
        Tracer {
            config,
            history: VecDeque::with_capacity(history),
            sampler: RulerSampler::new(config.sample_unit, history),
            finder: Finder::new(),
            replayer,
            not_replayed_until: 0,
            skipped: 0,
            barriers: VecDeque::new(),
            classes: Default::default(),
            renamed: Vec::new(),
        }
    }

    /// One issued task's token: records it, runs the finder if this is a sample point (its
    /// candidates apply from this token on), and feeds the matcher. An empty answer means the
    /// task is held back; actions hand back held tasks in issue order.
    pub fn issue(&mut self, token: u64) -> Vec<Action> {
        if self.history.len() == self.config.history.max(1) {
            self.history.pop_front();
        }
        self.history.push_back(token);
        if let Some(window) = self.sampler.observe() {
            let history = self.history.make_contiguous();
            let recent = &history[history.len().saturating_sub(window)..];
            // Held tokens are not decided yet; they do not keep the finder running.
            let first = self.sampler.seen() - recent.len() as u64 + 1;
            let all_replayed = first > self.not_replayed_until;
            if self.config.skip_replayed && all_replayed {
                self.skipped += 1;
            } else {
                let c = &self.config;
                by_first_appearance(recent, &mut self.classes, &mut self.renamed);
                let renamed = &self.renamed;
                let groups = self
                    .finder
                    .run(renamed, c.min_len, c.max_len, c.min_repeats);
                let cuts: Vec<usize> = self
                    .barriers
                    .iter()
                    .filter(|&&b| b >= first && b < self.sampler.seen())
                    .map(|&b| (b - first + 1) as usize)
                    .collect();
                if cuts.is_empty() {
                    self.replayer.ingest(recent, &groups);
                } else {
                    let mut pieces = cut_groups(&groups, &cuts, c.min_len);
                    if c.long_len > c.max_len {
                        let iv = Intervals::new(&cuts, renamed.len(), first == 1);
                        let (max, long) = (c.max_len, c.long_len);
                        pieces.retain(|g| !iv.piece_of_a_whole(renamed, g, max, long));
                        let mut whole = iv.repeated_whole(renamed, max, long, c.min_repeats);
                        whole.append(&mut pieces);
                        pieces = whole;
                    }
                    self.replayer.ingest(recent, &pieces);
                }
            }
        }
        let actions = self.replayer.feed(token);
        self.note(&actions);
        actions
    }

    /// Remembers the last token handed back unreplayed (stream indices count from 1).
    fn note(&mut self, actions: &[Action]) {
        let mut end = self.sampler.seen() - self.replayer.buffered() as u64;
        for a in actions.iter().rev() {
            match a {
                Action::Release(_) => {
                    self.not_replayed_until = self.not_replayed_until.max(end);
                    return;
                }
                Action::Replay { tokens, .. } => end -= tokens.len() as u64,
            }
        }
    }

    /// Samples skipped because their whole window had been replayed.
    pub fn skipped_samples(&self) -> u64 {
        self.skipped
    }

    /// Hands back every held task (a fence, a read, the end of the program).
    pub fn flush(&mut self) -> Vec<Action> {
        let seen = self.sampler.seen();
        if seen > 0 && self.barriers.back() != Some(&seen) {
            self.barriers.push_back(seen);
            let oldest = seen.saturating_sub(self.config.history as u64);
            while self.barriers.front().is_some_and(|&b| b < oldest) {
                self.barriers.pop_front();
            }
        }
        let actions = self.replayer.flush();
        self.note(&actions);
        actions
    }

    /// The tokens kept for the finder, oldest first.
    pub fn history(&self) -> impl Iterator<Item = u64> + '_ {
        self.history.iter().copied()
    }

    /// Tokens issued so far.
    pub fn issued(&self) -> u64 {
        self.sampler.seen()
    }

    pub fn finder_cost(&self) -> &FinderCost {
        self.finder.cost()
    }

    pub fn replayer(&self) -> &Replayer {
        &self.replayer
    }
}

/// `tokens` renamed 0, 1, 2, … by first appearance, into `out`. The finder breaks ties by
/// the tokens' order (its suffix array sorts them), so on the hash values themselves its
/// answer would depend on everything hashed into a token, such as a kernel's fingerprint or
/// a body's address in a task's name, which change from one process (or rank) to the next.
/// Renamed, it depends only on which tokens are equal: a function of the task stream.
fn by_first_appearance(
    tokens: &[u64],
    classes: &mut rustc_hash::FxHashMap<u64, u64>,
    out: &mut Vec<u64>,
) {
    classes.clear();
    out.clear();
    out.extend(tokens.iter().map(|&t| {
        let next = classes.len() as u64;
        *classes.entry(t).or_insert(next)
    }));
}

/// Cuts each group's occurrences where its first occurrence spans a flush (`cuts`: indices
/// into the window before which the stream was flushed): a candidate spanning a flush could
/// never complete, but its pieces between flushes can. Pieces shorter than `min_len` go.
fn cut_groups(
    groups: &[Vec<Range<usize>>],
    cuts: &[usize],
    min_len: usize,
) -> Vec<Vec<Range<usize>>> {
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        let Some(first) = g.first() else { continue };
        let mut at = first.start;
        let inner = cuts
            .iter()
            .copied()
            .filter(|&c| c > first.start && c < first.end);
        for end in inner.chain(std::iter::once(first.end)) {
            if end - at >= min_len.max(1) {
                let (a, b) = (at - first.start, end - first.start);
                out.push(g.iter().map(|r| r.start + a..r.start + b).collect());
            }
            at = end;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loop body of `period` tokens, with a stray token after every `stray_every`-th
    /// iteration (a convergence check).
    fn loop_stream(iterations: usize, period: u64, stray_every: usize) -> Vec<u64> {
        let mut s = Vec::new();
        for i in 1..=iterations {
            s.extend(1..=period);
            if i % stray_every == 0 {
                s.push(1000 + i as u64);
            }
        }
        s
    }

    /// Issues `stream` and flushes; returns the actions and the share of tokens replayed.
    fn run(tracer: &mut Tracer, stream: &[u64]) -> (Vec<Action>, f64) {
        let mut out: Vec<Action> = stream.iter().flat_map(|&t| tracer.issue(t)).collect();
        out.extend(tracer.flush());
        let replayed: usize = out
            .iter()
            .map(|a| match a {
                Action::Replay { tokens, .. } => tokens.len(),
                Action::Release(_) => 0,
            })
            .sum();
        (out, replayed as f64 / stream.len().max(1) as f64)
    }

    fn tokens_of(actions: &[Action]) -> Vec<u64> {
        actions
            .iter()
            .flat_map(|a| match a {
                Action::Release(t) | Action::Replay { tokens: t, .. } => t.iter().copied(),
            })
            .collect()
    }

    #[test]
    fn a_loop_is_found_and_replayed() {
        let stream = loop_stream(200, 10, 7);
        let mut tracer = Tracer::new(TracerConfig::default());
        let (actions, replayed) = run(&mut tracer, &stream);
        assert_eq!(
            tokens_of(&actions),
            stream,
            "every task handed back once, in order"
        );
        assert!(replayed > 0.9, "replayed {:.1} %", replayed * 100.0);
        let cost = *tracer.finder_cost();
        assert_eq!(cost.runs, tracer.issued() / 64);
        assert!(cost.tokens > 0 && cost.groups > 0);
        // Nothing is replayed before the first sample point found a candidate.
        let before: usize = actions
            .iter()
            .take_while(|a| matches!(a, Action::Release(_)))
            .map(|a| tokens_of(std::slice::from_ref(a)).len())
            .sum();
        assert!(before >= 64, "released {before} before the first candidate");
    }

    #[test]
    fn one_pointer_and_skipped_samples_still_replay_a_loop() {
        // The runtime's configuration: greedy matching, no finder over replayed windows.
        for (stream, min_share) in [
            ((0..3000).map(|i| i % 2).collect::<Vec<u64>>(), 0.95),
            // True period 71, longer than the longest trace (64): a 57-token piece of it
            // is replayed, and the body alone (10) was retired as a piece of it (80 %).
            (loop_stream(300, 10, 7), 0.75),
            (loop_stream(300, 10, 3), 0.9),
        ] {
            let config = TracerConfig {
                sample_unit: 8,
                max_len: 64,
                one_pointer: true,
                skip_replayed: true,
                ..TracerConfig::default()
            };
            let mut tracer = Tracer::new(config);
            let (actions, replayed) = run(&mut tracer, &stream);
            assert_eq!(tokens_of(&actions), stream, "every task handed back once");
            assert!(replayed > min_share, "replayed {:.1} %", replayed * 100.0);
            let samples = stream.len() as u64 / 8;
            let runs = tracer.finder_cost().runs;
            assert_eq!(runs + tracer.skipped_samples(), samples);
            assert!(
                runs < samples / 2,
                "{runs} finder runs of {samples} samples"
            );
        }
    }

    #[test]
    fn candidates_are_cut_at_flushes() {
        // An iteration of 6 tasks, then a wait on a future (a flush): the finder's repeats
        // straddle the flushes at some phase, and only their pieces between flushes can match.
        let mut tracer = Tracer::new(TracerConfig {
            max_len: 64,
            one_pointer: true,
            skip_replayed: true,
            ..TracerConfig::default()
        });
        let (mut handed, mut replayed_late) = (0, 0);
        for it in 0..100 {
            let mut actions: Vec<Action> = (1..=6).flat_map(|t| tracer.issue(t)).collect();
            actions.extend(tracer.flush());
            handed += tokens_of(&actions).len();
            if it >= 20 {
                replayed_late += actions
                    .iter()
                    .map(|a| match a {
                        Action::Replay { tokens, .. } => tokens.len(),
                        Action::Release(_) => 0,
                    })
                    .sum::<usize>();
            }
        }
        assert_eq!(handed, 600);
        assert_eq!(
            replayed_late,
            80 * 6,
            "every iteration after the 20th is replayed"
        );
        assert_eq!(
            cut_groups(&[vec![2..8, 8..14]], &[4, 10], 2),
            [vec![2..4, 8..10], vec![4..8, 10..14]]
        );
        assert_eq!(cut_groups(&[vec![0..3, 3..6]], &[1], 2), [vec![1..3, 4..6]]);
    }

    /// Each iteration's replays (as trace lengths) of an 18-token body flushed after every
    /// iteration, the first iteration's first token different (a store named by distance then):
    /// the runtime's configuration with `long_len`.
    fn flushed_body_replays(long_len: usize) -> Vec<Vec<usize>> {
        let mut tracer = Tracer::new(TracerConfig {
            sample_unit: 4,
            max_len: 16,
            long_len,
            one_pointer: true,
            skip_replayed: true,
            ..TracerConfig::default()
        });
        (0..12u64)
            .map(|it| {
                let mut actions: Vec<Action> = (0..18u64)
                    .flat_map(|t| tracer.issue(if it == 0 && t == 0 { 99 } else { t }))
                    .collect();
                actions.extend(tracer.flush());
                assert_eq!(tokens_of(&actions).len(), 18, "every task handed back once");
                actions
                    .iter()
                    .filter_map(|a| match a {
                        Action::Replay { tokens, .. } => Some(tokens.len()),
                        Action::Release(_) => None,
                    })
                    .collect()
            })
            .collect()
    }

    /// A loop body longer than `max_len`, flushed every iteration, is replayed whole once it has
    /// repeated whole (`Intervals::repeated_whole`), and no piece of it is replayed before
    /// (`Intervals::piece_of_a_whole`). Mutation-checked: without the whole-interval
    /// candidates nothing of 18 is replayed; without dropping the pieces, pieces of up to 16
    /// are replayed in the first iterations.
    #[test]
    fn a_flushed_body_longer_than_max_len_is_replayed_whole() {
        let replays = flushed_body_replays(32);
        assert!(
            replays.iter().flatten().all(|&n| n == 18),
            "only whole bodies are replayed: {replays:?}"
        );
        assert!(
            replays[4..].iter().all(|r| r == &[18]),
            "from the fifth iteration on: {replays:?}"
        );
        // Off (`long_len` ≤ `max_len`): pieces, as before.
        let off = flushed_body_replays(0);
        assert!(off.iter().flatten().all(|&n| n <= 16), "{off:?}");
        assert!(off.iter().flatten().count() > 0, "{off:?}");
    }

    #[test]
    fn every_rank_decides_the_same() {
        // Ranks issuing the same stream take the same actions at the same tokens.
        let stream = loop_stream(150, 6, 4);
        let per_token = |config| {
            let mut tracer = Tracer::new(config);
            stream.iter().map(|&t| tracer.issue(t)).collect::<Vec<_>>()
        };
        let config = TracerConfig {
            sample_unit: 16,
            history: 256,
            ..TracerConfig::default()
        };
        let first = per_token(config);
        for _ in 0..3 {
            assert_eq!(per_token(config), first);
        }
    }

    /// What a tracer decided, without the token values: per action its kind, length and
    /// trace.
    fn decisions(actions: &[Vec<Action>]) -> Vec<Vec<(bool, usize, u32)>> {
        let one = |a: &Action| match a {
            Action::Release(t) => (false, t.len(), 0),
            Action::Replay { trace, tokens } => (true, tokens.len(), trace.0),
        };
        actions
            .iter()
            .map(|at| at.iter().map(one).collect())
            .collect()
    }

    #[test]
    fn decisions_depend_on_which_tokens_are_equal_not_on_their_values() {
        // Tokens hash task names, which may hold a kernel's fingerprint or a body's address:
        // other values in another process (or rank). The runtime's configuration, over a
        // CG-like stream: iterations of 11 tokens (two of them seen twice in an iteration, the
        // first iteration's differing), a flush after the 8th.
        let config = TracerConfig {
            sample_unit: 8,
            max_len: 16,
            one_pointer: true,
            skip_replayed: true,
            ..TracerConfig::default()
        };
        let body: [u64; 11] = [1, 2, 3, 4, 5, 6, 7, 1, 8, 5, 9];
        let per_token = |name: &dyn Fn(u64) -> u64| {
            let mut tracer = Tracer::new(config);
            let mut out = Vec::new();
            for it in 0..60u64 {
                for (k, &t) in body.iter().enumerate() {
                    out.push(tracer.issue(name(if it == 0 { 100 + t } else { t })));
                    if k == 7 {
                        out.push(tracer.flush());
                    }
                }
            }
            out.push(tracer.flush());
            decisions(&out)
        };
        let want = per_token(&|t| t);
        assert!(want.iter().flatten().any(|d| d.0), "nothing replayed");
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..16 {
            // Another name for every token: a random bijection (odd multiplier, offset).
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let (mul, add) = (seed | 1, seed.rotate_left(29));
            assert_eq!(per_token(&|t| t.wrapping_mul(mul).wrapping_add(add)), want);
        }
    }

    #[test]
    fn a_stream_without_repeats_is_released_as_it_comes() {
        let stream: Vec<u64> = (0..500).collect();
        let mut tracer = Tracer::new(TracerConfig {
            history: 1,
            sample_unit: 1,
            ..TracerConfig::default()
        });
        for &t in &stream {
            assert_eq!(tracer.issue(t), [Action::Release(vec![t])]);
        }
        assert_eq!(tracer.replayer().traces(), 0);
    }

    #[test]
    fn a_divergence_mid_trace_releases_the_held_tasks() {
        let mut tracer = Tracer::new(TracerConfig {
            sample_unit: 8,
            ..TracerConfig::default()
        });
        let body = [1, 2, 3, 4];
        for _ in 0..8 {
            for &t in &body {
                tracer.issue(t);
            }
        }
        assert!(tracer.replayer().traces() > 0);
        tracer.flush();
        // Half a body, then something else: the held half comes back unreplayed.
        let mut out = Vec::new();
        for t in [1, 2, 99] {
            out.extend(tracer.issue(t));
        }
        assert!(
            out.iter().all(|a| matches!(a, Action::Release(_))),
            "{out:?}"
        );
        assert_eq!(tokens_of(&out), [1, 2, 99]);
    }
}
