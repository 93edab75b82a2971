//! Chunk-sized scratch buffers for a kernel-fused task's temporaries, kept per worker thread
//! and reused by the next point instead of allocated (and zero-filled) for every point.
//!
//! A reused buffer holds whatever the previous chunk or point left in it. That is what an
//! element-wise output passed with `write` may start with (its body assigns every element);
//! a temporary whose first use in the fused task reads it is cleared before every chunk by
//! the chunk loop (`kernel::run_chunks`), so it reads zeros as the fresh store it replaces
//! would.
//!
//! Temporaries whose lives do not overlap share one buffer ([`share`]): a chunk of every
//! temporary would otherwise stay in cache at once. Black-Scholes fused has 16 temporaries but
//! at most 5 alive at any sub-task; with its 5 stores that is 10 chunk-sized arrays instead
//! of 21, and the fewer the arrays, the longer the chunk that keeps them all in L1
//! (`kernel::fused_chunk`: 512 `f64` for Black-Scholes' 10 in a 48 KiB L1).

use crate::issue::task::Privilege;
use std::cell::RefCell;

/// Buffers kept per thread beyond this many are freed (a fused task has a few temporaries).
const KEEP: usize = 64;

thread_local! {
    static POOL: RefCell<Vec<Vec<u64>>> = const { RefCell::new(Vec::new()) };
}

/// Scratch buffers taken from this thread's pool; they go back when this is dropped (also
/// when a body panics).
#[derive(Default)]
pub(crate) struct Scratch {
    bufs: smallvec::SmallVec<[Vec<u64>; 4]>,
}

impl Scratch {
    /// A buffer of at least `bytes` bytes, 8-byte aligned (every element type's alignment),
    /// valid until `self` is dropped. Its contents are unspecified.
    pub(crate) fn take(&mut self, bytes: usize) -> *mut u8 {
        let words = bytes.div_ceil(8);
        let mut buf = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
        if buf.len() < words {
            buf.resize(words, 0);
        }
        let ptr = buf.as_mut_ptr() as *mut u8;
        // Moving the `Vec` into `bufs` does not move its heap block: `ptr` stays valid.
        self.bufs.push(buf);
        ptr
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            let room = KEEP.saturating_sub(p.len());
            p.extend(self.bufs.drain(..).take(room));
        });
    }
}

/// For each argument of a kernel-fused task, the scratch buffer its chunks live in (`None`:
/// not a temporary; it is a store's cells), and how many buffers there are. `subs` lists each
/// sub-task's arguments (fused argument, privilege) in issue order; `local[j]`: argument `j`
/// is a temporary.
///
/// A temporary lives from the sub-task that names it first to the last one that names it; one
/// whose first use is not `write` lives from before the first sub-task (the chunk loop clears
/// it there). Two temporaries share a buffer only when one's life ends strictly before the
/// other's starts, so the arguments of one sub-task never share (a body's output slice must
/// not alias its other slices), and a value is never overwritten while a later sub-task of the
/// chunk still reads it. Buffers are dealt greedily in order of birth, the lowest free first:
/// as many as the most temporaries alive at one sub-task.
pub(crate) fn share<'a>(
    subs: impl IntoIterator<Item = &'a [(usize, Privilege)]>,
    local: &[bool],
) -> (Vec<Option<usize>>, usize) {
    // Life of each temporary in steps: 0 is the clearing step, sub-task `i` is step `i + 1`.
    let mut life: Vec<Option<(usize, usize)>> = vec![None; local.len()];
    for (i, args) in subs.into_iter().enumerate() {
        for &(j, p) in args {
            if local[j] {
                let born = if p == Privilege::Write { i + 1 } else { 0 };
                life[j].get_or_insert((born, i + 1)).1 = i + 1;
            }
        }
    }
    let mut order: Vec<usize> = (0..local.len()).filter(|&j| life[j].is_some()).collect();
    order.sort_by_key(|&j| life[j].map(|l| l.0));
    let mut buffer = vec![None; local.len()];
    // The last step that uses each buffer's current temporary.
    let mut busy_until: Vec<usize> = Vec::new();
    for j in order {
        let (born, dies) = life[j].expect("a temporary");
        let b = match busy_until.iter().position(|&end| end < born) {
            Some(b) => b,
            None => {
                busy_until.push(0);
                busy_until.len() - 1
            }
        };
        busy_until[b] = dies;
        buffer[j] = Some(b);
    }
    let n = busy_until.len();
    (buffer, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Privilege::{Read as R, ReadWrite as RW, Write as W};

    fn plan(subs: &[&[(usize, Privilege)]], local: &[bool]) -> (Vec<Option<usize>>, usize) {
        share(subs.iter().copied(), local)
    }

    /// Every sub-task's temporaries are in distinct buffers.
    fn no_step_shares(subs: &[&[(usize, Privilege)]], buffer: &[Option<usize>]) {
        for (i, args) in subs.iter().enumerate() {
            let mut seen = vec![];
            for &(j, _) in args.iter() {
                if let Some(b) = buffer[j] {
                    if !seen.contains(&(j, b)) {
                        assert!(!seen.iter().any(|&(_, c)| c == b), "step {i}: {buffer:?}");
                        seen.push((j, b));
                    }
                }
            }
        }
    }

    #[test]
    fn a_chain_of_temporaries_takes_two_buffers() {
        // x (store 0) -> t1 -> t2 -> t3 -> t4 -> y (store 5): each temporary dies where the
        // next is born, so two buffers alternate.
        let subs: &[&[(usize, Privilege)]] = &[
            &[(0, R), (1, W)],
            &[(1, R), (2, W)],
            &[(2, R), (3, W)],
            &[(3, R), (4, W)],
            &[(4, R), (5, W)],
        ];
        let local = [false, true, true, true, true, false];
        let (buffer, n) = plan(subs, &local);
        assert_eq!(n, 2);
        assert_eq!(buffer, [None, Some(0), Some(1), Some(0), Some(1), None]);
        no_step_shares(subs, &buffer);
    }

    #[test]
    fn a_temporary_read_later_keeps_its_buffer_and_one_read_first_lives_from_the_start() {
        // t1 is read three steps after it is made; t3 is read (and cleared) before it is
        // written, so it is alive from the start and takes a buffer of its own.
        let subs: &[&[(usize, Privilege)]] = &[
            &[(0, R), (1, W)],
            &[(0, R), (2, W)],
            &[(2, R), (4, W)],
            &[(1, R), (4, R), (3, RW)],
            &[(3, R), (5, W)],
        ];
        let local = [false, true, true, true, true, false];
        let (buffer, n) = plan(subs, &local);
        no_step_shares(subs, &buffer);
        // Lives in steps: t1 [1, 4], t2 [2, 3], t3 [0, 5], t4 [3, 4]; all four are alive at
        // step 3 (t4 is born where t2 is last read).
        assert_eq!(n, 4);
        assert_ne!(buffer[3], buffer[1]);
        assert!(buffer.iter().flatten().all(|&b| b < n));
    }

    #[test]
    fn temporaries_alive_together_never_share() {
        // Exhaustive over small chains: for each pair of temporaries, sharing a buffer means
        // their lives are disjoint.
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..500 {
            let mut next = |m: usize| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % m as u64) as usize
            };
            let args = 2 + next(8);
            let local: Vec<bool> = (0..args).map(|_| next(3) > 0).collect();
            let subs: Vec<Vec<(usize, Privilege)>> = (0..1 + next(10))
                .map(|_| {
                    (0..1 + next(3))
                        .map(|_| (next(args), [R, W, RW][next(3)]))
                        .collect()
                })
                .collect();
            let refs: Vec<&[(usize, Privilege)]> = subs.iter().map(|s| &s[..]).collect();
            let (buffer, n) = plan(&refs, &local);
            no_step_shares(&refs, &buffer);
            let life = |j: usize| {
                let steps: Vec<usize> = (0..refs.len())
                    .filter(|&i| refs[i].iter().any(|&(k, _)| k == j))
                    .collect();
                let first = refs[steps[0]].iter().find(|&&(k, _)| k == j).unwrap().1;
                let born = if first == W { steps[0] + 1 } else { 0 };
                (born, steps[steps.len() - 1] + 1)
            };
            for a in 0..args {
                for b in a + 1..args {
                    if buffer[a].is_some() && buffer[a] == buffer[b] {
                        let (la, lb) = (life(a), life(b));
                        assert!(la.1 < lb.0 || lb.1 < la.0, "{a} {la:?}, {b} {lb:?}");
                    }
                }
            }
            assert!(buffer.iter().flatten().all(|&b| b < n));
        }
    }
}
