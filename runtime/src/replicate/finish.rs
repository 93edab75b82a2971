//! A task's finish step across ranks: rank 0 folds every point's leftovers (its own points'
//! and the ones the other ranks sent) in point order, exactly as one rank would, then sends
//! the outcome — futures' values, unbound stores' contents, the failure — to every other
//! rank, whose finish node is the receive of that message. So every rank gets bitwise the
//! same values at any rank count for a given launch.

use super::channel::{key, Channel, KIND_FINISH, KIND_OUTS};
use super::codec::{Reader, Writer};
use crate::error::RuntimeError;
use crate::launch::Launched;
use crate::rect::Rect;
use crate::store::Bound;
use crate::task::Privilege;

/// Where a task stands in the replicated stream.
pub(crate) struct Dist {
    pub seq: u64,
    pub channel: std::sync::Arc<Channel>,
}

/// On rank 0, after the finish step: sends its outcome to every other rank.
pub(crate) fn broadcast(task: &Launched, dist: &Dist) {
    let failed = task
        .failure
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut w = Writer::default();
    w.status(failed.as_ref().map(|e| e.to_string()).as_deref());
    w.u64(task.results.len() as u64);
    for (_, cell) in &task.results {
        match cell.value.get() {
            Some(Ok(s)) => {
                w.status(None);
                w.scalar(*s);
            }
            Some(Err(e)) => w.status(Some(&e.to_string())),
            None => w.status(Some("the finish step set no value")),
        }
    }
    for a in task
        .args
        .iter()
        .filter(|a| a.privilege == Privilege::WriteUnbound)
    {
        match a.root.data() {
            Some(d) => {
                w.u64(1);
                w.data(d);
            }
            None => w.u64(0),
        }
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
    if let Some(message) = r.status()? {
        task.fail_with(RuntimeError::Remote {
            rank: from,
            message,
        });
    }
    let n = r.u64()? as usize;
    for slot in 0..n {
        let value = match r.status()? {
            None => Ok(r.scalar()?),
            Some(message) => Err(RuntimeError::Remote {
                rank: from,
                message,
            }),
        };
        if let Some((_, cell)) = task.results.get(slot) {
            let _ = cell.value.set(value);
        }
    }
    for a in task
        .args
        .iter()
        .filter(|a| a.privilege == Privilege::WriteUnbound)
    {
        if r.u64()? == 1 {
            let d = r.data()?;
            let len = super::codec::data_len(&d);
            a.root.bind(Bound::with_data(Rect::from_shape(&[len]), d));
        } else {
            bind_empty(a.root.as_ref());
        }
    }
    Ok(())
}

fn bind_empty(root: &crate::store::StoreRoot) {
    if root.bound().is_none() {
        root.bind(Bound::with_data(
            Rect::from_shape(&[0]),
            crate::buffer::Data::zeros(root.dtype, 0),
        ));
    }
}

/// On a rank other than 0, after one of its points ran: its leftovers (and the task's failure
/// here, if any) go to rank 0's finish step.
pub(crate) fn send_out(task: &Launched, point: usize, dist: &Dist) {
    let out = std::mem::take(&mut *task.outs[point].lock().unwrap_or_else(|e| e.into_inner()));
    let failed = task
        .failure
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|e| e.to_string());
    let body = super::codec::write_out(&out, failed.as_deref());
    dist.channel
        .send(0, key(dist.seq, KIND_OUTS, 0, point, 0), &body);
}
