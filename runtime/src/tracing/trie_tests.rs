//! Tests of the replayer's matcher: no speculation, overlapping and nested candidates,
//! scoring and decay, and a property over random candidates and streams.

use super::*;
use crate::tracing::find_repeats;
use proptest::prelude::*;

fn t(s: &str) -> Vec<u64> {
    s.bytes().map(u64::from).collect()
}

/// Feeds `s`, returning the actions of each token.
fn feed_all(r: &mut Replayer, s: &str) -> Vec<Vec<Action>> {
    t(s).into_iter().map(|x| r.feed(x)).collect()
}

/// A replayer holding `candidates` (tokens, appearances), and their ids.
fn with<const N: usize>(candidates: [(&str, usize); N]) -> (Replayer, [TraceId; N]) {
    let mut r = Replayer::default();
    let ids = candidates.map(|(c, n)| r.insert(&t(c), n).unwrap());
    (r, ids)
}

fn release(s: &str) -> Action {
    Action::Release(t(s))
}

fn replay(id: TraceId, s: &str) -> Action {
    Action::Replay {
        trace: id,
        tokens: t(s),
    }
}

#[test]
fn no_candidates_release_at_once() {
    let mut r = Replayer::default();
    assert_eq!(
        feed_all(&mut r, "ab"),
        [vec![release("a")], vec![release("b")]]
    );
    assert_eq!(r.buffered(), 0);
    assert!(r.flush().is_empty());
}

#[test]
fn a_partial_match_is_never_replayed() {
    let (mut r, [abc]) = with([("abc", 2)]);
    let steps = feed_all(&mut r, "abx");
    assert!(steps[0].is_empty() && steps[1].is_empty(), "a, b held back");
    assert_eq!(r.buffered(), 0);
    assert_eq!(steps[2], [release("abx")], "the mismatch releases them");
    // A stream that ends mid-candidate: the fence releases, it does not replay.
    assert!(feed_all(&mut r, "ab").iter().all(Vec::is_empty));
    assert_eq!(r.flush(), [release("ab")]);
    assert_eq!(r.trace(abc).replays, 0);
    // The whole candidate replays.
    assert_eq!(feed_all(&mut r, "abc")[2], [replay(abc, "abc")]);
    assert_eq!(r.trace(abc).replays, 1);
}

#[test]
fn a_mismatch_restarts_matching_inside_the_buffer() {
    let (mut r, [aab]) = with([("aab", 2)]);
    // "aaab": the match starting at 0 fails at the third a, the one starting at 1 completes.
    let steps = feed_all(&mut r, "aaab");
    assert_eq!(steps[2], [release("a")]);
    assert_eq!(steps[3], [replay(aab, "aab")]);
}

#[test]
fn overlapping_candidates_take_the_better_score() {
    // "abc" and "bcd" overlap in "abcd": only one can be replayed.
    let (mut r, [abc, _]) = with([("abc", 2), ("bcd", 2)]);
    let steps = feed_all(&mut r, "abcd");
    assert!(
        steps[2].is_empty(),
        "abc is complete but bcd may still complete over it"
    );
    assert_eq!(
        steps[3],
        [replay(abc, "abc"), release("d")],
        "equal scores: the earlier"
    );

    let (mut r, [abc, bcd]) = with([("abc", 2), ("bcd", 5)]);
    assert!(r.score(bcd) > r.score(abc));
    let steps = feed_all(&mut r, "abcd");
    assert_eq!(steps[3], [release("a"), replay(bcd, "bcd")]);

    // When the better one fails, the one that waited for it is replayed.
    let steps = feed_all(&mut r, "abcx");
    assert_eq!(steps[3], [replay(abc, "abc"), release("x")]);
}

#[test]
fn nested_candidates_wait_for_the_longer_one() {
    let (mut r, [ab, abcd]) = with([("ab", 2), ("abcd", 2)]);
    let steps = feed_all(&mut r, "abcd");
    assert!(
        steps[..3].iter().all(Vec::is_empty),
        "ab waits while abcd still matches"
    );
    assert_eq!(steps[3], [replay(abcd, "abcd")], "4 × 2 beats 2 × 2");
    assert!(
        r.trace(ab).retired,
        "abcd replayed: ab, inside it, is retired"
    );

    // The longer one fails after the shorter one completed: the shorter one replays.
    let (mut r, [ab, _]) = with([("ab", 2), ("abcd", 2)]);
    let steps = feed_all(&mut r, "abcx");
    assert_eq!(steps[3], [replay(ab, "ab"), release("cx")]);
}

#[test]
fn back_to_back_occurrences_replay_each_time() {
    let (mut r, [id]) = with([("xyz", 3)]);
    let mut replays = 0;
    for a in feed_all(&mut r, "xyzxyzxyzq").into_iter().flatten() {
        match a {
            Action::Replay { trace, tokens } => {
                assert_eq!((trace, tokens), (id, t("xyz")));
                replays += 1;
            }
            Action::Release(tokens) => assert_eq!(tokens, t("q")),
        }
    }
    assert_eq!(replays, 3);
    assert_eq!(r.trace(id).replays, 3);
}

#[test]
fn a_waiting_match_goes_ahead_of_a_later_live_pointer() {
    // ab waits for abcd; when abcd fails, a match of cef has begun after ab: ab does not
    // overlap it, so ab need not wait any longer.
    let (mut r, [ab, _, cef]) = with([("ab", 2), ("abcd", 2), ("cef", 2)]);
    let steps = feed_all(&mut r, "abce");
    assert!(steps[1].is_empty() && steps[2].is_empty());
    assert_eq!(steps[3], [replay(ab, "ab")]);
    assert_eq!(r.buffered(), 2, "c and e wait for cef");
    assert_eq!(feed_all(&mut r, "f"), [vec![replay(cef, "cef")]]);
}

#[test]
fn ingest_takes_the_finders_groups() {
    let history = t("abcabcxyxy");
    let groups = find_repeats(&history, 2, 100, 2);
    let mut r = Replayer::default();
    r.ingest(&history, &groups);
    assert_eq!(r.traces(), groups.len());
    assert_eq!(r.trace(TraceId(0)).tokens, t("abc"));
    assert_eq!(r.trace(TraceId(0)).visits, 2.0);
    // Ingesting again keeps ids and counts.
    r.ingest(&history, &groups);
    assert_eq!(r.traces(), groups.len());
    assert_eq!(r.trace(TraceId(0)).visits, 2.0);
    assert_eq!(r.insert(&[], 1), None);
}

#[test]
fn score_is_length_times_capped_decayed_appearances() {
    let p = ScoreParams {
        decay: 0.5,
        cap: 4.0,
        replay_bonus: 1.5,
    };
    let mut info = TraceInfo {
        tokens: vec![1, 2],
        visits: 3.0,
        last_seen: 10,
        counts_from: 12,
        replays: 0,
        retired: false,
    };
    assert_eq!(info.score(10, &p), 6.0, "2 × 3");
    assert_eq!(
        info.score(11, &p),
        6.0,
        "less than one trace length later: no decay"
    );
    assert_eq!(info.score(12, &p), 3.0, "one trace length: halved");
    assert_eq!(info.score(16, &p), 0.75, "three: 2 × 3 / 8");
    assert_eq!(
        info.score(5, &p),
        6.0,
        "before the last appearance: no decay"
    );
    info.visits = 100.0;
    assert_eq!(info.score(10, &p), 8.0, "capped at 4 appearances");
    info.replays = 1;
    assert_eq!(info.score(10, &p), 12.0, "replayed: × 1.5");

    // Appearances: one trace length or more apart counts, decayed first; overlapping not.
    info.visits = 3.0;
    info.visit(11, &p);
    assert_eq!((info.visits, info.last_seen), (3.0, 10));
    info.visit(12, &p);
    assert_eq!((info.visits, info.last_seen), (2.5, 12));
}

#[test]
fn decay_lets_a_newer_trace_win() {
    let p = ScoreParams::default();
    let mut r = Replayer::new(p);
    let old = r.insert(&t("pq"), 10).unwrap();
    // Long after "pq" was seen, a candidate seen twice outranks it.
    for _ in 0..1000 {
        r.feed(0);
    }
    let new = r.insert(&t("rs"), 2).unwrap();
    assert!(
        r.score(old) < r.score(new),
        "{} vs {}",
        r.score(old),
        r.score(new)
    );
    // And seeing "pq" again brings it back.
    for x in t("pqpqpqpq") {
        r.feed(x);
    }
    assert_eq!(r.trace(old).last_seen, 1006);
    assert!(r.score(old) > r.score(new));
}

#[test]
fn appearances_are_counted_even_where_another_trace_replays() {
    let (mut r, [ab, abcd]) = with([("ab", 1), ("abcd", 2)]);
    r.feed(0);
    r.feed(0);
    let steps = feed_all(&mut r, "abcd");
    assert_eq!(steps[3], [replay(abcd, "abcd")]);
    assert_eq!(
        r.trace(ab).last_seen,
        2,
        "ab appeared at 2, inside the replay"
    );
    assert_eq!(r.trace(ab).replays, 0);
}

#[test]
fn replaying_a_trace_retires_its_pieces() {
    let (mut r, [bc, abcd, other]) = with([("bc", 2), ("abcd", 2), ("xy", 2)]);
    assert_eq!(
        feed_all(&mut r, "xbc")[2],
        [replay(bc, "bc")],
        "bc replays on its own"
    );
    assert_eq!(feed_all(&mut r, "abcd")[3], [replay(abcd, "abcd")]);
    assert!(r.trace(bc).retired && !r.trace(abcd).retired && !r.trace(other).retired);
    // bc still walks the trie (a prefix of nothing now) but never completes.
    assert_eq!(
        feed_all(&mut r, "qbcq"),
        [
            vec![release("q")],
            vec![],
            vec![release("bc")],
            vec![release("q")]
        ]
    );
    // The finder proposing bc again is ignored; a trace not inside abcd is admitted.
    let n = r.traces();
    r.ingest(&t("bcbc"), &[vec![0..2, 2..4]]);
    assert_eq!(r.traces(), n);
    r.ingest(&t("cdecde"), &[vec![0..3, 3..6]]);
    assert_eq!(r.traces(), n + 1);
}

proptest! {
    /// Whatever the candidates and the stream: the actions hand back the stream exactly once
    /// and in order, every replay is one whole candidate, and the buffer stays under three
    /// times the longest candidate.
    #[test]
    fn actions_cover_the_stream_in_order(
        cands in prop::collection::vec((prop::collection::vec(0u64..3, 1..5), 1usize..5), 0..6),
        stream in prop::collection::vec(0u64..3, 0..80),
    ) {
        let mut r = Replayer::default();
        for (c, n) in &cands {
            r.insert(c, *n);
        }
        let longest = cands.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
        let mut out = Vec::new();
        for &x in &stream {
            for a in r.feed(x) {
                out.push(a);
            }
            prop_assert!(r.buffered() < 3 * longest.max(1));
        }
        out.extend(r.flush());
        prop_assert_eq!(r.buffered(), 0);
        let mut seen = Vec::new();
        for a in out {
            match a {
                Action::Release(ts) => {
                    prop_assert!(!ts.is_empty());
                    seen.extend(ts);
                }
                Action::Replay { trace, tokens } => {
                    prop_assert_eq!(&r.trace(trace).tokens, &tokens);
                    seen.extend(tokens);
                }
            }
        }
        prop_assert_eq!(seen, stream);
    }
}
