//! Control replication: every rank runs the same program, issues the same task stream and
//! analyses it identically; each rank runs only its shard of every index task's points and
//! moves exactly the sub-stores they need (Legate NumPy §control replication, Legate thesis
//! §5.4.1, runtime/DESIGN.md "Across ranks").
//!
//! - `valid`: per store, which rank holds the latest value of which rectangle.
//! - `schedule`: a rank's nodes for a task: its own points, the sends and receives they need,
//!   the finish step's messages.
//! - `channel`: the communication thread and the receive nodes it completes.
//! - `finish`: reductions and futures folded at rank 0 and sent to every rank.
//! - `share`: the part of a host-made store a rank keeps (memory per rank).
//! - this file: sharding, sending a rectangle, gathers (read-back and image sources) and the
//!   agreement check.

pub(crate) mod channel;
pub(crate) mod codec;
pub(crate) mod finish;
mod schedule;
pub(crate) mod share;
pub(crate) mod valid;

use crate::error::RuntimeError;
use crate::execute::graph::Node;
use crate::partition::Domain;
use crate::rect::Rect;
use crate::solver::{Span, SpanError};
use crate::stats::Counters;
use crate::store::StoreRoot;
use channel::{Channel, Key};
use codec::{read_rect, write_rect, Reader, Writer};
use std::sync::Arc;

/// Most ranks a job may have (holders are a 64-bit mask).
pub const MAX_RANKS: usize = 64;

/// The rank that runs linear point `p` of a launch domain of `n` points among `ranks`: blocks
/// of consecutive points (block sharding), so neighbouring tiles share a rank.
pub(crate) fn owner(p: usize, n: usize, ranks: usize) -> usize {
    p * ranks / n.max(1)
}

/// The rank of every point (in linear order) of `domain` among `ranks`. With a sharding key
/// (launch dimensions), the point's coordinates along the key, linearised row-major in the
/// key's order, are cut in blocks of consecutive values: points equal along the key share a
/// rank. Without one, the linear index is (block sharding; the same as a key of every
/// dimension in order).
pub(crate) fn owners(domain: &Domain, key: Option<&[usize]>, ranks: usize) -> Vec<usize> {
    let n = domain.len();
    let Some(key) = key else {
        return (0..n).map(|p| owner(p, n, ranks)).collect();
    };
    let m: usize = key.iter().map(|&d| domain.extent(d)).product();
    (0..n)
        .map(|p| {
            let at = domain.point(p);
            let q = key.iter().fold(0, |q, &d| q * domain.extent(d) + at[d]);
            owner(q, m, ranks)
        })
        .collect()
}

/// The rank of every point (in linear order) of a launch domain of `extents` among `ranks`,
/// with the sharding key `key` (`TaskLauncher::shard_by`; `None`: block sharding), as the
/// runtime assigns them: what a program needs to place data where the points will run.
/// `None` when the extents are not a launch domain.
pub fn shard_owners(extents: &[usize], key: Option<&[usize]>, ranks: usize) -> Option<Vec<usize>> {
    Domain::new(extents).map(|d| owners(&d, key, ranks.max(1)))
}

/// A `Send` node's work: this rank's copy of `rect`, with its poisonings as the task it is
/// sent for sees them (`as_of`: that task's `since` and position), to rank `to`.
pub(crate) fn send_rect(
    ch: &Channel,
    root: &StoreRoot,
    rect: Rect,
    to: usize,
    key: Key,
    as_of: (u64, u64),
    counters: &Counters,
) {
    let (w, bytes) = piece(root, rect, as_of);
    Counters::add(&counters.bytes_sent, bytes);
    ch.send(to, key, &w.0);
}

/// What a piece of `rect` carries: a status; then the poisonings of `rect` in positions
/// `as_of.0..=as_of.1` (each with its position, its cells inside `rect` and its error), and the
/// elements of `rect`. Or a failure to read the elements. Also the bytes of elements it
/// carries, which the caller counts once per receiver.
///
/// The poisonings are those the task the piece is sent for would see here (a gather's: a
/// read's, from the latest whole rewrite launched on): not every live one (`poisoned_in`, until
/// the third hunt). A poisoning from before a whole rewrite lives until the rewrite's clear,
/// which comes after the piece's writers, so a piece sent in between shipped a failure the
/// task does not see on one rank (`a_send_ships_what_its_task_would_read_not_a_poisoning_
/// from_before_a_rewrite`). Each poisoning travels as it is, not as one failure of the whole
/// piece, so the receiver's copy is poisoned exactly where and as of when the sender's is:
/// recorded at the receiving task's position instead, a failed piece received as a whole
/// rewrite's input failed the rewrite's readers until its end there (`a_failed_piece_received_
/// for_a_rewrite_does_not_fail_the_rewrite_s_readers`), and cells of the piece no failed point
/// wrote read as failed there. The elements travel even where poisoned (those cells are read
/// by no one).
fn piece(root: &StoreRoot, rect: Rect, as_of: (u64, u64)) -> (Writer, u64) {
    let mut w = Writer::default();
    let mut body = Writer::default();
    if let Err(e) = read_rect(root, rect, &mut body) {
        w.status(Some(&e.to_string()));
        return (w, 0);
    }
    w.status(None);
    let poisonings = root.poisonings_between(as_of.0, as_of.1, &rect);
    w.u64(poisonings.len() as u64);
    for (at, cells, err) in &poisonings {
        w.u64(*at);
        codec::write_cells(&mut w, cells);
        w.error(Some(err));
    }
    w.0.extend_from_slice(&body.0);
    (w, (rect.volume() * root.dtype.size()) as u64)
}

/// Applies a received piece of `rect` (what [`piece`] wrote) to this rank's copy: its
/// elements, and each of its poisonings at the sender's position (the task it was sent for,
/// and every later reader of these cells here, then sees what it would see on the sender).
/// A piece that failed to travel (or to be read) poisons all of `rect` at `fallback`, the
/// receiving task's position. `Err` only for that.
pub(crate) fn receive_piece(
    root: &StoreRoot,
    rect: Rect,
    r: &mut Reader<'_>,
    fallback: u64,
) -> Result<(), RuntimeError> {
    let got = read_piece(root, rect, r);
    if let Err(e) = &got {
        root.set_received_poison(e.clone(), fallback, Some(rect));
    }
    got
}

/// [`receive_piece`] but for the failure's poisoning.
fn read_piece(root: &StoreRoot, rect: Rect, r: &mut Reader<'_>) -> Result<(), RuntimeError> {
    if let Some(message) = r.status()? {
        return Err(RuntimeError::Remote {
            rank: r.from,
            message,
        });
    }
    let n = r.u64()? as usize;
    let mut poisonings = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let at = r.u64()?;
        let cells = codec::read_cells(r)?;
        if cells.dim() != rect.dim() {
            return Err(RuntimeError::Remote {
                rank: r.from,
                message: "malformed message: poisoned cells of another dimension".into(),
            });
        }
        let err = r.error()?.ok_or_else(|| RuntimeError::Remote {
            rank: r.from,
            message: "malformed message: a poisoning without an error".into(),
        })?;
        poisonings.push((at, cells.intersect(&rect), err));
    }
    write_rect(root, rect, r)?;
    for (at, cells, err) in poisonings {
        root.set_received_poison(err, at, Some(cells));
    }
    Ok(())
}

fn transport(e: crate::transport::TransportError) -> RuntimeError {
    RuntimeError::Transport(e.to_string())
}

/// A collective (every rank calls it at the same point of the stream): afterwards rank `to`
/// (every rank when `None`) holds the latest value of `rect` of `root`. Waits (with `wait`) for
/// this rank's pending accesses of `rect` first, since it overwrites stale parts of this rank's
/// copy outside the graph. Does nothing, on every rank alike, when the receivers already hold
/// all of `rect`.
pub(crate) fn gather(
    ch: &Channel,
    root: &Arc<StoreRoot>,
    rect: Rect,
    to: Option<usize>,
    counters: &Counters,
    wait: &mut dyn FnMut(&Arc<Node>),
) -> Result<(), RuntimeError> {
    let receivers: u64 = match to {
        Some(r) => 1 << r,
        None => valid::everyone(ch.ranks),
    };
    let todo: Vec<(Rect, u64)> = match &root.meta().valid {
        Some(v) => v
            .incomplete(&rect, ch.ranks)
            .into_iter()
            .filter(|(_, m)| receivers & !m != 0)
            .collect(),
        None => return Ok(()),
    };
    if todo.is_empty() {
        return Ok(());
    }
    let pending = root.meta().access.pending(&rect);
    pending.iter().for_each(&mut *wait);
    let (me, ranks) = (ch.rank, ch.ranks);
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); ranks];
    for (rect, holders) in &todo {
        if holders.trailing_zeros() as usize != me {
            continue;
        }
        // As a read after every task launched so far sees it (`poisoned_for_read`).
        let (w, bytes) = piece(root, *rect, (root.last_rewrite(), u64::MAX));
        for (r, o) in out.iter_mut().enumerate() {
            if receivers & !holders & (1 << r) != 0 {
                o.extend_from_slice(&w.0);
                // Every receiver gets its own copy: counted once, a read at 3 or more ranks
                // looked cheaper than it was.
                Counters::add(&counters.bytes_sent, bytes);
            }
        }
    }
    let incoming = ch.comm.all_to_all(out).map_err(transport)?;
    let mut readers: Vec<Reader<'_>> = incoming
        .iter()
        .enumerate()
        .map(|(from, b)| Reader { buf: b, from })
        .collect();
    let mut first = Ok(());
    for (rect, holders) in &todo {
        if receivers & !holders & (1 << me) == 0 {
            continue;
        }
        let r = &mut readers[holders.trailing_zeros() as usize];
        // A failure that did not travel poisons after every task issued so far, as the next
        // one's input. The poisonings that came as they are, the read's own check
        // (`poisoned_for_read`) reports, as one rank would.
        let next = ch.seq.load(std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = receive_piece(root, *rect, r, next) {
            first = first.and(Err(e));
        }
    }
    let mut meta = root.meta();
    let valid = meta.valid.as_mut().expect("checked above");
    for r in (0..ranks).filter(|r| receivers & (1 << r) != 0) {
        for (rect, _) in &todo {
            valid.add_holder(*rect, r);
        }
    }
    first
}

/// The debug agreement check: every rank hashes what it decided for a task; any difference
/// fails every rank with the hashes.
pub(crate) fn agree(ch: &Channel, task: &str, seq: u64, hash: u64) -> Result<(), RuntimeError> {
    let all = ch.comm.all_gather_u64(&[hash]).map_err(transport)?;
    let hashes: Vec<u64> = all
        .iter()
        .map(|v| v.first().copied().unwrap_or(0))
        .collect();
    if hashes.iter().any(|&h| h != hash) {
        return Err(RuntimeError::RanksDisagree {
            task: task.into(),
            seq,
            hashes,
        });
    }
    Ok(())
}

/// The image bounds of each of `pieces` of the image source `root`, computed by the ranks that
/// hold the source's values and exchanged (one all-gather of a few words per piece): each
/// piece is cut along the valid-copy map, the lowest holder of each part computes its span,
/// and every rank unites the parts' spans of each piece in the same order. No source values
/// move. When every rank holds every part, each computes them itself (no collective; the
/// condition is the same on every rank).
pub(crate) fn image_spans(
    ch: &Channel,
    root: &StoreRoot,
    pieces: &[Rect],
    local: &dyn Fn(Rect) -> Span,
) -> Result<Vec<Span>, RuntimeError> {
    let everyone = valid::everyone(ch.ranks);
    let parts: Vec<Vec<(Rect, u64)>> = {
        let meta = root.meta();
        pieces
            .iter()
            .map(|p| match &meta.valid {
                Some(v) => v.split(p),
                None => vec![(*p, everyone)],
            })
            .collect()
    };
    if parts.iter().flatten().all(|(_, m)| *m == everyone) {
        return Ok(pieces.iter().map(|&p| local(p)).collect());
    }
    // Per part this rank computes: [piece, part, code, lo, hi].
    let mut mine = vec![];
    for (p, list) in parts.iter().enumerate() {
        for (j, (rect, m)) in list.iter().enumerate() {
            if m.trailing_zeros() as usize != ch.rank {
                continue;
            }
            let (code, lo, hi) = match local(*rect) {
                Ok(None) => (0, 0, 0),
                Ok(Some((lo, hi))) => (1, lo, hi),
                Err(SpanError::Negative) => (2, 0, 0),
                Err(SpanError::Busy(_)) => (3, 0, 0),
            };
            mine.extend([p as u64, j as u64, code, lo, hi]);
        }
    }
    let all = ch.comm.all_gather_u64(&mine).map_err(transport)?;
    let mut table: Vec<Vec<Option<[u64; 3]>>> = parts.iter().map(|l| vec![None; l.len()]).collect();
    for (from, words) in all.iter().enumerate() {
        for w in words.chunks_exact(5) {
            let slot = table
                .get_mut(w[0] as usize)
                .and_then(|l| l.get_mut(w[1] as usize))
                .ok_or_else(|| RuntimeError::Remote {
                    rank: from,
                    message: "image bounds for a piece that does not exist".into(),
                })?;
            *slot = Some([w[2], w[3], w[4]]);
        }
    }
    table
        .iter()
        .zip(pieces)
        .map(|(list, piece)| {
            let mut acc: Span = Ok(None);
            for got in list {
                let [code, lo, hi] = got.ok_or_else(|| RuntimeError::Remote {
                    rank: ch.rank,
                    message: "no rank sent the image bounds of a source part".into(),
                })?;
                acc = match (acc, code) {
                    (Err(e), _) => Err(e),
                    (_, 2) => Err(SpanError::Negative),
                    (_, 3) => Err(SpanError::Busy(*piece)),
                    (Ok(a), 1) => Ok(Some(a.map_or((lo, hi), |(x, y)| (x.min(lo), y.max(hi))))),
                    (Ok(a), _) => Ok(a),
                };
            }
            Ok(acc)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_of_every_dimension_in_order_is_block_sharding() {
        for ranks in 1..=4 {
            for ext in [[6usize, 1], [3, 4], [1, 5], [7, 2]] {
                let d = Domain::new(&ext).unwrap();
                assert_eq!(owners(&d, Some(&[0, 1]), ranks), owners(&d, None, ranks));
            }
        }
    }

    #[test]
    fn points_equal_along_the_key_share_a_rank_in_blocks_of_its_values() {
        // A 3 × 2 domain keyed by dimension 1: its two values split over the ranks.
        let d = Domain::new(&[3, 2]).unwrap();
        assert_eq!(owners(&d, Some(&[1]), 2), [0, 1, 0, 1, 0, 1]);
        // Four ranks, two key values: ranks 0 and 2 (the blocks' first ranks) run them.
        assert_eq!(owners(&d, Some(&[1]), 4), [0, 2, 0, 2, 0, 2]);
        // Keyed by dimension 0 at 2 ranks: values 0, 1 on rank 0, value 2 on rank 1.
        assert_eq!(owners(&d, Some(&[0]), 2), [0, 0, 0, 0, 1, 1]);
        // The key's order is the linearisation's: (1, 0) walks dimension 1 slowest.
        assert_eq!(owners(&d, Some(&[1, 0]), 2), [0, 1, 0, 1, 0, 1]);
        assert_eq!(owners(&d, Some(&[]), 3), [0; 6]);
    }
}
