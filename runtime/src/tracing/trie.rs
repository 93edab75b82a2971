//! The trace replayer's matcher (thesis §5.3.3, §5.4.2): candidate traces in a trie, matched
//! against the incoming token stream without speculation.
//!
//! Every incoming token starts a pointer at the trie's root and moves every live pointer one
//! edge down; a pointer with no edge for the token dies. A pointer that reaches the end of a
//! candidate is a *complete match* (and lives on if a longer candidate continues from there).
//! Tokens are held back while a live pointer that started in the held-back buffer could still
//! complete; a token no pointer covers is released to ordinary analysis at once. A match is
//! replayed only once it is complete and no better choice could still complete over it:
//!
//! * with no pointer in the buffer still matching, complete matches are taken by score
//!   (highest first, then earliest), each if it does not overlap one already taken;
//! * otherwise, a complete match that ends at or before the earliest live pointer's start is
//!   taken the same way, unless it overlaps a better-scored complete match that has to wait
//!   for that pointer; everything else waits.
//!
//! So nothing is ever replayed on a prefix of a candidate (no speculation). The buffer holds
//! fewer than three times the longest candidate's length L: a live pointer has matched fewer
//! than L tokens, a match waiting for it starts less than L before it, and a match waiting
//! for that one less than L before that.
//!
//! When a trace is replayed for the first time, the candidates it contains are retired, and
//! the finder's later proposals contained in a replayed trace are not admitted: in a loop the
//! finder's windows propose many pieces of the body, which only cost pointers and matches
//! once the body is being replayed.
//!
//! **Score** (§5.3.3): length × appearances, the appearance count decayed exponentially with
//! the time since the trace last appeared and capped, and raised slightly once the trace has
//! been replayed. Time is counted in trace lengths (as Legion's implementation does), so a
//! long loop body is not penalised for being long: a trace of length L seen last `t` tokens
//! ago has count `visits · decay^(t / L)` (integer division). An appearance at least one
//! trace length after the previous one adds 1 after decaying the old count the same way;
//! closer ones (overlapping occurrences) do not count.

use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::ops::Range;

/// A candidate trace in a [`Replayer`]; ids are dense, in insertion order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId(pub u32);

/// Constants of the score (§5.3.3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoreParams {
    /// Decay of the appearance count per trace length elapsed (0 < decay ≤ 1).
    pub decay: f64,
    /// Largest appearance count the score uses, so that an early trace does not win forever.
    pub cap: f64,
    /// Factor for a trace that has been replayed before (recording a new one has a cost).
    pub replay_bonus: f64,
}

impl Default for ScoreParams {
    fn default() -> ScoreParams {
        ScoreParams {
            decay: 0.99,
            cap: 10.0,
            replay_bonus: 1.25,
        }
    }
}

/// A candidate trace and its score's inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceInfo {
    /// The trace's tokens.
    pub tokens: Vec<u64>,
    /// Decayed appearance count, as of `last_seen`.
    pub visits: f64,
    /// Stream index where the trace last appeared (or was found by the finder).
    pub last_seen: u64,
    /// Earliest start of an appearance that counts: one trace length after the last one
    /// (overlapping occurrences count once), or the time the finder reported it.
    pub counts_from: u64,
    /// Times the replayer chose it.
    pub replays: u64,
    /// Dropped because a replayed trace contains it (it no longer matches).
    pub retired: bool,
}

impl TraceInfo {
    fn len(&self) -> u64 {
        self.tokens.len() as u64
    }

    /// Periods of one trace length from `last_seen` to `at` (0 if `at` is earlier).
    fn periods(&self, at: u64) -> u64 {
        at.saturating_sub(self.last_seen) / self.len()
    }

    fn decayed(&self, at: u64, p: &ScoreParams) -> f64 {
        let periods = i32::try_from(self.periods(at)).unwrap_or(i32::MAX);
        self.visits * p.decay.powi(periods)
    }

    /// Counts an appearance starting at `start`, unless it starts before `counts_from`.
    fn visit(&mut self, start: u64, p: &ScoreParams) {
        if start < self.counts_from {
            return;
        }
        self.visits = self.decayed(start, p) + 1.0;
        self.last_seen = start;
        self.counts_from = start + self.len();
    }

    /// The score at stream index `at`.
    pub fn score(&self, at: u64, p: &ScoreParams) -> f64 {
        let bonus = if self.replays > 0 {
            p.replay_bonus
        } else {
            1.0
        };
        self.len() as f64 * self.decayed(at, p).min(p.cap) * bonus
    }
}

/// What to do with buffered tokens, in stream order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Analyse these tasks as usual: no candidate can match them.
    Release(Vec<u64>),
    /// These tasks are one complete occurrence of `trace`: replay it (after verifying them).
    Replay { trace: TraceId, tokens: Vec<u64> },
}

/// True when `needle` occurs in `hay`. Tokens are hashes, so a window's first token rarely
/// matches by chance: in practice linear.
fn contains(hay: &[u64], needle: &[u64]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

/// A pointer into the trie: the node reached and the stream index where its match began.
#[derive(Clone, Copy, Debug)]
struct Pointer {
    node: u32,
    start: u64,
}

/// A complete match of `trace` beginning at stream index `start`.
#[derive(Clone, Copy, Debug)]
struct Match {
    trace: TraceId,
    start: u64,
}

const ROOT: u32 = 0;

/// Candidate traces in a trie and the matching state of the stream fed to it.
#[derive(Debug)]
pub struct Replayer {
    params: ScoreParams,
    /// Edges: (node, token) → child.
    edges: HashMap<(u32, u64), u32>,
    /// Per node: the trace ending there, and how many edges leave it.
    ends: Vec<Option<TraceId>>,
    children: Vec<u32>,
    traces: Vec<TraceInfo>,
    /// Traces replayed at least once, in the order of their first replay.
    replayed: Vec<TraceId>,
    /// Live pointers, oldest first (some may have started before `buffer_start`: they still
    /// count appearances but hold nothing back).
    live: Vec<Pointer>,
    /// Complete matches not yet decided, all starting at or after `buffer_start`.
    complete: Vec<Match>,
    buffer: VecDeque<u64>,
    /// Stream index of `buffer[0]`.
    buffer_start: u64,
    /// Start a pointer only where no live pointer holds buffered tokens (see `one_pointer`).
    one_pointer: bool,
}

impl Default for Replayer {
    fn default() -> Replayer {
        Replayer::new(ScoreParams::default())
    }
}

impl Replayer {
    pub fn new(params: ScoreParams) -> Replayer {
        Replayer {
            params,
            edges: HashMap::default(),
            ends: vec![None],
            children: vec![0],
            traces: Vec::new(),
            replayed: Vec::new(),
            live: Vec::new(),
            complete: Vec::new(),
            buffer: VecDeque::new(),
            buffer_start: 0,
            one_pointer: false,
        }
    }

    /// Matches greedily: a token starts a pointer only when no live pointer holds buffered
    /// tokens back, and pointers that hold nothing are dropped. Still no speculation (a match
    /// is replayed only when complete), but at most one match is pursued at a time: in a
    /// periodic stream every token would otherwise start a pointer that lives for a whole
    /// trace (a stencil with traces of 64: about 64 live pointers, 6k instructions per
    /// token). The price: when the pursued match fails, matches that started inside it are
    /// not seen, and appearances are counted only for pursued matches.
    pub fn set_one_pointer(&mut self, on: bool) {
        self.one_pointer = on;
    }

    /// Adds a candidate (an existing one keeps its id and history); `None` for no tokens.
    /// `appearances` seeds a new candidate's count (how often the finder saw it).
    pub fn insert(&mut self, tokens: &[u64], appearances: usize) -> Option<TraceId> {
        if tokens.is_empty() {
            return None;
        }
        let mut node = ROOT;
        for &t in tokens {
            node = match self.edges.get(&(node, t)) {
                Some(&child) => child,
                None => {
                    let child = u32::try_from(self.ends.len()).expect("trie under 2^32 nodes");
                    self.edges.insert((node, t), child);
                    self.children[node as usize] += 1;
                    self.ends.push(None);
                    self.children.push(0);
                    child
                }
            };
        }
        if let Some(id) = self.ends[node as usize] {
            return Some(id);
        }
        let id = TraceId(u32::try_from(self.traces.len()).expect("under 2^32 traces"));
        self.traces.push(TraceInfo {
            tokens: tokens.to_vec(),
            visits: appearances as f64,
            last_seen: self.now(),
            counts_from: self.now(),
            replays: 0,
            retired: false,
        });
        self.ends[node as usize] = Some(id);
        Some(id)
    }

    /// Adds the finder's groups over `history` as candidates, each seeded with its number of
    /// occurrences, except those contained in a trace that has been replayed (they would
    /// only be retired again, see the module documentation).
    pub fn ingest(&mut self, history: &[u64], groups: &[Vec<Range<usize>>]) {
        for g in groups {
            if let Some(r) = g.first() {
                let tokens = &history[r.clone()];
                let covered = self.replayed.iter().any(|&id| {
                    let t = &self.traces[id.0 as usize];
                    !t.retired && t.tokens.len() > tokens.len() && contains(&t.tokens, tokens)
                });
                if !covered {
                    self.insert(tokens, g.len());
                }
            }
        }
    }

    /// Retires the candidates that `id` (being replayed for the first time) contains: in a
    /// loop, the finder's windows at other phases propose many pieces of the loop body, and
    /// each keeps pointers live and matches completing for nothing while the body is replayed
    /// (measured: 8.3k → 3.2k instructions per issued task on the whole `Tracer` path with
    /// sampling every 64 tasks; see runtime/DESIGN.md). The price: a piece that also occurs on its own elsewhere is no
    /// longer replayed there.
    fn retire_pieces_of(&mut self, id: TraceId) {
        self.replayed.push(id);
        let whole = std::mem::take(&mut self.traces[id.0 as usize].tokens);
        for end in &mut self.ends {
            let Some(piece) = *end else { continue };
            let t = &mut self.traces[piece.0 as usize];
            if piece != id && t.tokens.len() < whole.len() && contains(&whole, &t.tokens) {
                t.retired = true;
                *end = None;
            }
        }
        self.traces[id.0 as usize].tokens = whole;
    }

    /// The candidate `id`.
    pub fn trace(&self, id: TraceId) -> &TraceInfo {
        &self.traces[id.0 as usize]
    }

    /// Candidates inserted so far, retired ones included (ids are `0..traces()`).
    pub fn traces(&self) -> usize {
        self.traces.len()
    }

    /// The score of `id` now.
    pub fn score(&self, id: TraceId) -> f64 {
        self.trace(id).score(self.now(), &self.params)
    }

    /// Tokens held back, waiting for a candidate to complete or fail.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Stream index of the next token.
    pub fn now(&self) -> u64 {
        self.buffer_start + self.buffer.len() as u64
    }

    /// Feeds the next token of the stream. An empty answer means the token is held back
    /// (pending); otherwise the actions cover a prefix of the buffered tokens, in order.
    pub fn feed(&mut self, token: u64) -> Vec<Action> {
        let at = self.now();
        self.buffer.push_back(token);
        if self.one_pointer {
            let from = self.buffer_start;
            self.live.retain(|p| p.start >= from);
        }
        if !self.one_pointer || self.live.is_empty() {
            self.live.push(Pointer {
                node: ROOT,
                start: at,
            });
        }
        let mut kept = 0;
        for i in 0..self.live.len() {
            let p = self.live[i];
            let Some(&node) = self.edges.get(&(p.node, token)) else {
                continue;
            };
            if let Some(trace) = self.ends[node as usize] {
                self.traces[trace.0 as usize].visit(p.start, &self.params);
                if p.start >= self.buffer_start {
                    self.complete.push(Match {
                        trace,
                        start: p.start,
                    });
                }
            }
            if self.children[node as usize] > 0 {
                self.live[kept] = Pointer { node, ..p };
                kept += 1;
            }
        }
        self.live.truncate(kept);
        self.decide(false)
    }

    /// Ends the stream for now (a fence): complete matches are decided as if nothing more
    /// could match, and every buffered token is handed back.
    pub fn flush(&mut self) -> Vec<Action> {
        self.decide(true)
    }

    /// Start of the earliest live pointer holding buffered tokens back.
    fn earliest_holder(&self, closing: bool) -> Option<u64> {
        if closing {
            return None;
        }
        self.live
            .iter()
            .map(|p| p.start)
            .filter(|&s| s >= self.buffer_start)
            .min()
    }

    fn decide(&mut self, closing: bool) -> Vec<Action> {
        let mut out = Vec::new();
        let holder = self.earliest_holder(closing);
        let end = |m: &Match| m.start + self.traces[m.trace.0 as usize].len();
        // Only a match ending at or before the earliest live pointer can be replayed now;
        // most tokens inside a loop find none, and then the order does not matter.
        if self
            .complete
            .iter()
            .any(|m| holder.is_none_or(|h| end(m) <= h))
        {
            let (now, params) = (self.now(), self.params);
            let mut ranked: Vec<(f64, Match)> = self
                .complete
                .drain(..)
                .map(|m| (self.traces[m.trace.0 as usize].score(now, &params), m))
                .collect();
            // Best first: highest score, then earliest start, then lowest id.
            ranked.sort_by(|(sa, a), (sb, b)| {
                sb.total_cmp(sa)
                    .then(a.start.cmp(&b.start))
                    .then(a.trace.cmp(&b.trace))
            });
            let mut waiting_from = u64::MAX;
            for (_, m) in ranked {
                let end = m.start + self.traces[m.trace.0 as usize].len();
                if m.start < self.buffer_start || self.traces[m.trace.0 as usize].retired {
                    continue; // overlaps a match taken before it, or retired meanwhile
                }
                if holder.is_some_and(|h| end > h) {
                    // A live pointer could still complete a match over this one: wait, and
                    // let nothing worse cut into this one meanwhile.
                    waiting_from = waiting_from.min(m.start);
                    self.complete.push(m);
                    continue;
                }
                if end > waiting_from {
                    self.complete.push(m);
                    continue;
                }
                self.release_to(m.start, &mut out);
                let tokens = self.take(end);
                let info = &mut self.traces[m.trace.0 as usize];
                info.replays += 1;
                if info.replays == 1 {
                    self.retire_pieces_of(m.trace);
                }
                out.push(Action::Replay {
                    trace: m.trace,
                    tokens,
                });
            }
            let (buffer_start, traces) = (self.buffer_start, &self.traces);
            self.complete
                .retain(|m| m.start >= buffer_start && !traces[m.trace.0 as usize].retired);
        }
        // One pointer, and nothing pursued any more: matches may start inside the buffer
        // (after a replay, or one token after a failed match's start). Hand back the first
        // token unless a replay just took tokens, and match the rest again from the root.
        let replayed = out.iter().any(|a| matches!(a, Action::Replay { .. }));
        if self.one_pointer
            && !closing
            && holder.is_none()
            && self.complete.is_empty()
            && !self.buffer.is_empty()
        {
            if !replayed {
                self.release_to(self.buffer_start + 1, &mut out);
            }
            let rest: Vec<u64> = self.buffer.drain(..).collect();
            self.live.clear();
            for t in rest {
                out.extend(self.feed(t));
            }
            return out;
        }
        // Release what no live pointer or waiting match can still use.
        let first_needed = self
            .complete
            .iter()
            .map(|m| m.start)
            .chain(holder)
            .min()
            .unwrap_or(u64::MAX);
        self.release_to(first_needed, &mut out);
        out
    }

    /// Hands back buffered tokens before stream index `to` as one release.
    fn release_to(&mut self, to: u64, out: &mut Vec<Action>) {
        if to > self.buffer_start {
            let tokens = self.take(to);
            if !tokens.is_empty() {
                out.push(Action::Release(tokens));
            }
        }
    }

    /// Removes buffered tokens before stream index `to` (at most the whole buffer).
    fn take(&mut self, to: u64) -> Vec<u64> {
        let n = (to - self.buffer_start).min(self.buffer.len() as u64) as usize;
        self.buffer_start += n as u64;
        self.buffer.drain(..n).collect()
    }
}

#[cfg(test)]
#[path = "trie_tests.rs"]
mod tests;
