//! A task's finish step across ranks. When it only folds (`submit_reduce` futures and
//! reductions into stores), every rank runs it: each point's results go to every other rank,
//! and its reduction buffers to the rank that folds their sub-store (the rank of the first
//! point reducing into it), so every rank knows every future after one message hop, and each
//! sub-store is folded where it is owned, in point order by the one-rank summation tree —
//! bitwise the same values at any rank count for a given launch. A task with unbound outputs
//! keeps the fold at rank 0, which then sends the outcome — futures' values, the outputs'
//! piece lengths, the failure — to every other rank, whose finish node is the receive of that
//! message.
//!
//! Failures travel with these messages as [`Failures`]: the task's, and a fused task's failed
//! sub-tasks one by one. Every rank that ends the task then knows every point's sub-task
//! failures, so its end-of-task settle (`Launched::end`, `run_finish`: a sub-task failed in one
//! point fails its readers in every point) fails the same sub-tasks, folds and futures on every
//! rank, as one rank does. A fused task without a finish step sends nothing: each rank ends
//! it on what its own points did, as it ends an unfused task (what a failed sub-task wrote is
//! poisoned where its point ran, and reaches other ranks only as a poisoned piece).

use super::channel::{key, Channel, KIND_FINISH, KIND_OUTS};
use super::codec::{Failures, Reader, Writer};
use super::valid::ValidMap;
use crate::error::RuntimeError;
use crate::execute::launch::Launched;
use crate::execute::launch::PointOut;
use crate::issue::task::Privilege;
use crate::rect::Rect;
use crate::store::Bound;

/// Where a task stands in the replicated stream.
pub(crate) struct Dist {
    pub seq: u64,
    pub channel: std::sync::Arc<Channel>,
    /// The rank of each point, by the task's sharding key (the same on every rank).
    pub owners: std::sync::Arc<[usize]>,
    /// Per argument, per point: the rank that folds the point's reduction buffer
    /// ([`fold_owners`]; empty for other arguments, and all 0 when rank 0 folds).
    pub folders: Vec<Vec<usize>>,
}

/// Whether every rank runs this task's finish step itself: when it has no unbound output
/// (whose extents rank 0 computes and sends). Every rank then receives every other rank's
/// points' results and folds them in point order, bitwise alike — one message hop instead of
/// two through rank 0 (a future gates the next tasks; CG waits on two per iteration) — and
/// folds the reduced sub-stores it owns ([`fold_owners`]). A function of the stream: the same
/// on every rank.
pub(crate) fn folds_everywhere(task: &Launched) -> bool {
    task.args
        .iter()
        .all(|a| a.privilege != Privilege::WriteUnbound)
}

/// The rank that folds each point's contribution to a reduction whose points reduce into
/// `rects` (indexed by point): the rank of the first point reducing into the same sub-store,
/// so a sub-store only its own rank's points reduce into moves nothing. When two different
/// sub-stores overlap (images, halos), one rank — point 0's — folds them all, in order: folds
/// of overlapping sub-stores on different ranks would each miss the other's contributions.
/// The same on every rank.
pub(crate) fn fold_owners(rects: &[Rect], owners: &[usize]) -> Vec<usize> {
    let d = crate::rect::distinct(rects);
    let overlap = d
        .iter()
        .enumerate()
        .any(|(i, a)| d[i + 1..].iter().any(|b| a.overlaps(b)));
    rects
        .iter()
        .map(|r| match overlap {
            true => owners[0],
            false => owners[rects.iter().position(|q| q == r).expect("its own rect")],
        })
        .collect()
}

/// After one of this rank's points ran, for a task with a finish step: its leftovers go to
/// every rank that folds them — its results to every other rank and each reduction buffer to
/// the rank that folds its sub-store (or everything to rank 0, with unbound outputs).
pub(crate) fn after_point(task: &Launched, point: usize, dist: &Dist) {
    if !folds_everywhere(task) {
        if dist.channel.rank != 0 {
            send_out(task, point, dist);
        }
        return;
    }
    let failed = failures(task);
    let ch = &dist.channel;
    let folder = |arg: usize| dist.folders[arg][point];
    // The point's results stay here too (this rank's own finish step folds them), and so do
    // the buffers of sub-stores this rank folds; the others leave.
    let (results, mut away) = {
        let mut out = task.outs[point].lock().unwrap_or_else(|e| e.into_inner());
        let (kept, away): (Vec<_>, Vec<_>) = std::mem::take(&mut out.reduce)
            .into_iter()
            .partition(|(arg, _)| folder(*arg) == ch.rank);
        out.reduce = kept;
        (out.results.clone(), away)
    };
    for to in (0..ch.ranks).filter(|&r| r != ch.rank) {
        let (mine, rest): (Vec<_>, Vec<_>) =
            away.into_iter().partition(|(arg, _)| folder(*arg) == to);
        away = rest;
        let out = PointOut {
            reduce: mine,
            results: results.clone(),
            ..PointOut::default()
        };
        let bytes: usize = out
            .reduce
            .iter()
            .map(|(arg, d)| super::codec::data_len(d) * task.args[*arg].root.dtype.size())
            .sum();
        ch.count_bytes(bytes);
        let body = super::codec::write_out(&out, &failed);
        ch.send(to, key(dist.seq, KIND_OUTS, 0, point, 0), &body);
    }
}

/// On rank 0, after the finish step: sends its outcome to every other rank (nothing when
/// every rank folds for itself).
pub(crate) fn broadcast(task: &Launched, dist: &Dist) {
    if folds_everywhere(task) {
        return;
    }
    let mut w = Writer::default();
    // After the settle over every point (`run_finish`): the sub-tasks that failed anywhere.
    w.failures(&failures(task));
    w.u64(task.results.len() as u64);
    for (_, cell) in &task.results {
        match cell.value.get() {
            Some(Ok(s)) => {
                w.error(None);
                w.scalar(*s);
            }
            // As the error itself: a failed point's comes back as the same error on every
            // rank, as one rank reports it.
            Some(Err(e)) => w.error(Some(e)),
            None => w.error(Some(&RuntimeError::Remote {
                rank: dist.channel.rank,
                message: "the finish step set no value".into(),
            })),
        }
    }
    // Unbound outputs: every point's length (the extents are their prefix sums).
    for lens in unbound_lens(task) {
        w.u64(lens.len() as u64);
        lens.iter().for_each(|&l| w.u64(l));
    }
    let ch = &dist.channel;
    for to in (0..ch.ranks).filter(|&r| r != ch.rank) {
        ch.send(to, key(dist.seq, KIND_FINISH, 0, 0, 0), &w.0);
    }
}

/// On the other ranks: applies rank 0's outcome (or the job's failure) and ends the task.
pub(crate) fn apply(task: &Launched, msg: Result<&[u8], RuntimeError>, from: usize) {
    if let Err(e) = msg.and_then(|m| read(task, &mut Reader { buf: m, from })) {
        task.fail_with(e.clone());
        for (_, cell) in &task.results {
            let _ = cell.value.set(Err(e.clone()));
        }
        // Unbound outputs get no extent: bind them empty so nothing waits on them forever
        // (they are poisoned by `end`).
        for a in task
            .args
            .iter()
            .filter(|a| a.privilege == Privilege::WriteUnbound)
        {
            bind_empty(a.root.as_ref());
        }
    }
    task.end();
}

fn read(task: &Launched, r: &mut Reader<'_>) -> Result<(), RuntimeError> {
    let from = r.from;
    apply_failures(task, r.failures()?);
    let n = r.u64()? as usize;
    for slot in 0..n {
        let value = match r.error()? {
            None => Ok(r.scalar()?),
            Some(e) => Err(e),
        };
        if let Some((_, cell)) = task.results.get(slot) {
            let _ = cell.value.set(value);
        }
    }
    let unbound: Vec<usize> = (0..task.args.len())
        .filter(|&i| task.args[i].privilege == Privilege::WriteUnbound)
        .collect();
    if unbound.is_empty() {
        return Ok(());
    }
    let mut outs = task.take_outs();
    let dist = task
        .dist
        .as_ref()
        .expect("a finish message is for a task across ranks");
    for arg in unbound {
        let n = r.u64()? as usize;
        if n != task.domain.len() {
            return Err(RuntimeError::Remote {
                rank: from,
                message: format!("{n} piece lengths for {} points", task.domain.len()),
            });
        }
        let lens = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
        bind_pieces(task, arg, &lens, &mut outs, dist);
    }
    Ok(())
}

/// The length each point emitted for unbound argument `arg`: its own pieces, or the lengths
/// a remote point sent.
pub(crate) fn piece_lens(outs: &[PointOut], arg: usize) -> Vec<u64> {
    outs.iter()
        .map(|o| {
            let mine: usize = o
                .pieces
                .iter()
                .filter(|(a, _)| *a == arg)
                .map(|(_, d)| super::codec::data_len(d))
                .sum();
            let remote: u64 = o
                .remote_lens
                .iter()
                .filter(|(a, _)| *a == arg)
                .map(|(_, l)| l)
                .sum();
            mine as u64 + remote
        })
        .collect()
}

/// Each unbound output's per-point lengths, from the bound store's valid-copy map order
/// (rank 0, after `bind_pieces`).
fn unbound_lens(task: &Launched) -> Vec<Vec<u64>> {
    task.args
        .iter()
        .filter(|a| a.privilege == Privilege::WriteUnbound)
        .map(|a| a.root.meta().piece_lens.clone())
        .collect()
}

/// Binds unbound argument `arg` across ranks without moving a piece: point `p`'s piece lies
/// at the exclusive prefix sum of the lengths before it (the same on every rank); this rank
/// writes its own points' pieces there, and the valid-copy map says which rank holds which
/// point's piece. The map is set before the store is bound: the issuing thread reads it only
/// after it sees the store bound.
pub(crate) fn bind_pieces(
    task: &Launched,
    arg: usize,
    lens: &[u64],
    outs: &mut [PointOut],
    dist: &Dist,
) {
    let root = &task.args[arg].root;
    let ranks = dist.channel.ranks;
    let total = lens.iter().sum::<u64>() as usize;
    let whole = Rect::from_shape(&[total]);
    let data = crate::buffer::Data::sparse_zeros(root.dtype, total);
    let mut valid = ValidMap::all(whole, ranks);
    let mut off = 0;
    for (p, &len) in lens.iter().enumerate() {
        let mut at = off;
        for (_, d) in outs[p].pieces.iter().filter(|(a, _)| *a == arg) {
            super::codec::copy_into(&data, at, d);
            at += super::codec::data_len(d);
        }
        let len = len as usize;
        valid.write(Rect::new(&[off], &[off + len]), dist.owners[p]);
        off += len;
    }
    {
        let mut meta = root.meta();
        meta.valid = Some(valid);
        meta.piece_lens = lens.to_vec();
    }
    root.bind(Bound::with_data(whole, data));
}

fn bind_empty(root: &crate::store::StoreRoot) {
    if root.bound().is_none() {
        root.bind(Bound::with_data(
            Rect::from_shape(&[0]),
            crate::buffer::Data::zeros(root.dtype, 0),
        ));
    }
}

/// The failures on this rank so far, as a point's leftovers and rank 0's outcome carry them.
fn failures(task: &Launched) -> Failures {
    let failure = task.failure.lock().unwrap_or_else(|e| e.into_inner());
    Failures {
        task: failure.clone(),
        subs: task
            .sub_failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
    }
}

/// Records the failures another rank sent: the task's fails it here too (its futures and
/// folds), poisoning nothing (`Launched::fail_remote`: the failed point's cells are poisoned
/// there and travel as poisoned pieces; what one rank poisons whole, every rank poisons whole
/// at the task's end); each failed sub-task's only joins this rank's list, for the end-of-task
/// settle (the cells it poisoned are poisoned there).
pub(crate) fn apply_failures(task: &Launched, f: Failures) {
    if let Some(e) = f.task {
        task.fail_remote(e);
    }
    task.fail_subs(f.subs);
}

/// On a rank other than 0, after one of its points ran: its leftovers (and the task's failure
/// here, if any) go to rank 0's finish step.
fn send_out(task: &Launched, point: usize, dist: &Dist) {
    let out = std::mem::take(&mut *task.outs[point].lock().unwrap_or_else(|e| e.into_inner()));
    let failed = failures(task);
    let bytes: usize = out
        .reduce
        .iter()
        .map(|(arg, d)| super::codec::data_len(d) * task.args[*arg].root.dtype.size())
        .sum();
    dist.channel.count_bytes(bytes);
    let body = super::codec::write_out(&out, &failed);
    // Unbound pieces stay here until the finish step's outcome binds the store.
    task.outs[point]
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pieces = out.pieces;
    dist.channel
        .send(0, key(dist.seq, KIND_OUTS, 0, point, 0), &body);
}
