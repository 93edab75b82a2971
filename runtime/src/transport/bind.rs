//! Binding thread ranks to cores, as `mpirun` binds processes (OpenMPI binds each rank to a
//! core by default for up to two ranks).
//!
//! Why: unbound, the ranks of a 2-rank job on this 2-core VM often ended up sharing one
//! core while the other ran only idle pollers (a yielding poller is runnable, so a waking
//! worker finds no idle core to move to, and threads rarely migrate afterwards). CG at 2
//! thread ranks then ran at 1.0-1.3x one rank, at 1.5-1.7x bound (the ranks bench, see
//! runtime/DESIGN.md "Thread ranks bound to cores").
//!
//! A rank gets a block of the CPUs the launching thread may run on; threads the rank
//! starts (the runtime's workers and communication thread) inherit the binding.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// The CPUs (indices into `cpus`, the launcher's allowed CPUs in order) that rank `rank` of
/// `ranks` is bound to: consecutive blocks, so neighbouring ranks share a CPU only when
/// there are more ranks than CPUs (then each rank gets one, `rank · cpus / ranks`).
pub(crate) fn share(cpus: &[usize], rank: usize, ranks: usize) -> Vec<usize> {
    let (c, n) = (cpus.len(), ranks.max(1));
    if c == 0 {
        return vec![];
    }
    let lo = rank * c / n;
    let hi = ((rank + 1) * c / n).max(lo + 1);
    cpus[lo..hi].to_vec()
}

/// The CPUs the calling thread may run on, in increasing order (empty if unknown).
pub(crate) fn allowed() -> Vec<usize> {
    let Ok(set) = sched_getaffinity(Pid::from_raw(0)) else {
        return vec![];
    };
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

/// Binds the calling thread to `cpus`. A placement hint: if the system refuses (or `cpus`
/// is empty), the thread stays where it may run now, which changes speed, never results.
pub(crate) fn bind(cpus: &[usize]) {
    let mut set = CpuSet::new();
    for &c in cpus {
        if set.set(c).is_err() {
            return;
        }
    }
    if !cpus.is_empty() {
        let _ = sched_setaffinity(Pid::from_raw(0), &set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_get_blocks_of_the_cpus_and_share_only_when_outnumbering_them() {
        let cpus = [0, 1];
        let of = |ranks: usize| -> Vec<Vec<usize>> {
            (0..ranks).map(|r| share(&cpus, r, ranks)).collect()
        };
        assert_eq!(of(1), vec![vec![0, 1]]);
        assert_eq!(of(2), vec![vec![0], vec![1]]);
        assert_eq!(of(4), vec![vec![0], vec![0], vec![1], vec![1]]);
        assert_eq!(of(3), vec![vec![0], vec![0], vec![1]]);
        let four = [2, 3, 6, 7];
        assert_eq!(share(&four, 0, 2), vec![2, 3]);
        assert_eq!(share(&four, 1, 2), vec![6, 7]);
        assert_eq!(share(&four, 2, 3), vec![6, 7]);
        assert!(share(&[], 0, 2).is_empty());
    }

    /// What each rank's thread, and a thread it starts, may run on; at 2 and 4 ranks.
    fn placements(ranks: usize, bound: bool) -> Vec<(Vec<usize>, Vec<usize>)> {
        let job = |_: &crate::transport::ThreadComm| {
            let inherited = std::thread::spawn(allowed).join().unwrap();
            Ok::<_, crate::transport::TransportError>((allowed(), inherited))
        };
        let out = if bound {
            crate::transport::run_ranks_bound(ranks, job)
        } else {
            crate::transport::run_ranks(ranks, job)
        };
        out.into_iter().map(|r| r.unwrap()).collect()
    }

    #[test]
    fn bound_ranks_and_the_threads_they_start_run_on_their_share_only() {
        let all = allowed();
        assert!(!all.is_empty(), "this thread's CPUs are readable");
        for ranks in [2, 4] {
            for (rank, (own, inherited)) in placements(ranks, true).into_iter().enumerate() {
                let want = share(&all, rank, ranks);
                assert_eq!(own, want, "rank {rank} of {ranks}");
                assert_eq!(
                    inherited, want,
                    "a thread started by rank {rank} of {ranks}"
                );
            }
        }
        // Unbound ranks keep the launcher's CPUs.
        for (own, inherited) in placements(2, false) {
            assert_eq!((own, inherited), (all.clone(), all.clone()));
        }
    }
}
