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
//! - this file: sharding, sending a rectangle, gathers (read-back and image sources) and the
//!   agreement check.

pub(crate) mod channel;
pub(crate) mod codec;
pub(crate) mod finish;
mod schedule;
pub(crate) mod valid;

use crate::error::RuntimeError;
use crate::graph::Node;
use crate::rect::Rect;
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

/// A `Send` node's work: this rank's copy of `rect` (or the store's failure) to rank `to`.
pub(crate) fn send_rect(
    ch: &Channel,
    root: &StoreRoot,
    rect: Rect,
    to: usize,
    key: Key,
    counters: &Counters,
) {
    let w = piece(root, rect, counters);
    ch.send(to, key, &w.0);
}

/// A status and the elements of `rect`, or the store's (or the copy's) failure.
fn piece(root: &StoreRoot, rect: Rect, counters: &Counters) -> Writer {
    let mut w = Writer::default();
    if let Some(e) = root.poisoned() {
        w.status(Some(&e.to_string()));
        return w;
    }
    let mut body = Writer::default();
    match read_rect(root, rect, &mut body) {
        Ok(()) => {
            w.status(None);
            w.0.extend_from_slice(&body.0);
            Counters::add(
                &counters.bytes_sent,
                (rect.volume() * root.dtype.size()) as u64,
            );
        }
        Err(e) => w.status(Some(&e.to_string())),
    }
    w
}

fn transport(e: crate::transport::TransportError) -> RuntimeError {
    RuntimeError::Transport(e.to_string())
}

/// A collective (every rank calls it at the same point of the stream): afterwards every rank
/// holds the latest value of `rect` of `root`. Waits (with `wait`) for this rank's pending
/// accesses of `rect` first, since it overwrites stale parts of this rank's copy outside the
/// graph. Does nothing, on every rank alike, when every rank already holds all of `rect`.
pub(crate) fn gather(
    ch: &Channel,
    root: &Arc<StoreRoot>,
    rect: Rect,
    counters: &Counters,
    wait: &mut dyn FnMut(&Arc<Node>),
) -> Result<(), RuntimeError> {
    let todo = match &root.meta().valid {
        Some(v) => v.incomplete(&rect, ch.ranks),
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
        let w = piece(root, *rect, counters);
        for (r, o) in out.iter_mut().enumerate() {
            if holders & (1 << r) == 0 {
                o.extend_from_slice(&w.0);
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
        if holders & (1 << me) != 0 {
            continue;
        }
        let r = &mut readers[holders.trailing_zeros() as usize];
        let got = r.status().and_then(|s| match s {
            Some(message) => Err(RuntimeError::Remote {
                rank: r.from,
                message,
            }),
            None => write_rect(root, *rect, r),
        });
        if let Err(e) = got {
            root.set_poison(e.clone());
            first = first.and(Err(e));
        }
    }
    let mut meta = root.meta();
    let valid = meta.valid.as_mut().expect("checked above");
    for r in 0..ranks {
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
