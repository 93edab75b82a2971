//! Solving a task: the solve memo or the solver (Algorithm 1), the sub-stores, the checks
//! that need them (`issue::validate`), and, across ranks, the agreement check; a [`Plan`]
//! is a solved task on its way to the analysis.

use super::{Front, Inner};
use crate::dtype::ReduceOp;
use crate::error::Result;
use crate::execute::launch::LaunchArg;
use crate::fusion::{FusedShape, Ready};
use crate::issue::task::{Args, Issued, Privilege, Scalars, TaskBody};
use crate::issue::validate::{check_aliasing, check_shapes};
use crate::partition::{Domain, Interner};
use crate::rect::Rect;
use crate::solve_memo::{Probe, SolveInputs, Solved};
use crate::solver::{record_keys, Solution, Solver, SolverArg};
use crate::stats::Counters;
use smallvec::SmallVec;
use std::sync::Arc;

impl Inner {
    /// Solves one task (its launch domain, partitions and sub-stores); on failure its future
    /// gets the error.
    pub(crate) fn solve(&self, front: &mut Front, t: Issued) -> Result<Ready> {
        self.solve_then(front, t, |_| {}, |r| r)
    }

    /// [`Inner::solve`], the task made into `wrap(ready)` where it is built (the window
    /// boxes it: a `Ready` is kilobytes, and boxing a finished one copied it once more;
    /// `memcpy` under `solve_ahead` 4.7 k → 3.8 k instructions per fused CG iteration); on
    /// failure `failed` sees the task before it is dropped.
    #[inline(always)]
    pub(super) fn solve_then<R>(
        &self,
        front: &mut Front,
        t: Issued,
        failed: impl FnOnce(&Issued),
        wrap: impl FnOnce(Ready) -> R,
    ) -> Result<R> {
        Counters::add(&self.shared.counters.tasks_solved, 1);
        let r = self.solve_inner(front, &t);
        match r {
            Ok((domain, token, args, parts)) => Ok(wrap(Ready {
                issued: t,
                domain,
                token,
                args,
                parts,
            })),
            Err(e) => {
                if let Some((_, cell)) = &t.result {
                    let _ = cell.value.set(Err(e.clone()));
                }
                failed(&t);
                Err(e)
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn solve_inner(
        &self,
        front: &mut Front,
        t: &Issued,
    ) -> Result<(Domain, u64, Args<LaunchArg>, crate::solver::Parts)> {
        for a in t
            .args
            .iter()
            .filter(|a| a.privilege != Privilege::WriteUnbound)
        {
            self.wait_bound(&a.root, &t.name)?;
        }
        // Eight inline: SpMV has five arguments.
        let sargs: SmallVec<[SolverArg; 8]> = t
            .args
            .iter()
            .map(|a| SolverArg {
                root: &a.root,
                rect: (a.privilege != Privilege::WriteUnbound).then(|| {
                    a.view
                        .rect()
                        .unwrap_or_else(|| a.root.bound().expect("waited").rect)
                }),
                writes: a.privilege.writes(),
            })
            .collect();
        let inputs = SolveInputs {
            task: &t.name,
            args: &sargs,
            constraints: &t.constraints,
            fixed: t.domain,
        };
        let mut probe = Probe::new(&inputs);
        let counters = &self.shared.counters;
        match front.memo.get(&mut probe, &inputs) {
            Some(Solved { solution, rects }) => {
                Counters::add(&counters.partitions_reused, solution.reused);
                Counters::add(&counters.solutions_replayed, 1);
                if solution.moved_keys {
                    record_keys(&front.interner, &sargs, &solution.parts);
                }
                let token = t.token(&solution.domain, &solution.parts);
                let args = launch_args(t, &sargs, rects);
                self.agree(&t.name, token, &args)?;
                Ok((solution.domain, token, args, solution.parts.clone()))
            }
            None => {
                check_shapes(&t.name, &sargs, &t.constraints)?;
                let mut solver = Solver {
                    task: &t.name,
                    machine: &self.machine,
                    interner: &mut front.interner,
                    counters,
                    completion: &self.shared.completion,
                    channel: self.shared.channel.get().map(|c| &**c),
                };
                let solution = solver.solve(&sargs, &t.constraints, t.domain)?;
                let rects = sub_stores(&front.interner, &solution);
                let args = launch_args(t, &sargs, &rects);
                check_aliasing(&t.name, &args, &solution, &front.interner)?;
                let token = t.token(&solution.domain, &solution.parts);
                self.agree(&t.name, token, &args)?;
                let (domain, parts) = (solution.domain, solution.parts.clone());
                front
                    .memo
                    .insert(probe, &inputs, Solved { solution, rects });
                Ok((domain, token, args, parts))
            }
        }
    }

    /// Across ranks with the agreement check on: every rank must have solved this task alike
    /// (token: domain, partitions, stores, views; and every point's sub-stores).
    fn agree(&self, task: &str, token: u64, args: &[LaunchArg]) -> Result<()> {
        let Some(ch) = self.shared.channel.get().filter(|c| c.agreement) else {
            return Ok(());
        };
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        token.hash(&mut h);
        for a in args {
            for r in a.rects.iter() {
                r.lo().hash(&mut h);
                r.hi().hash(&mut h);
            }
        }
        let seq = ch.solved.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        crate::replicate::agree(ch, task, seq, h.finish())
    }

    /// Across ranks with the agreement check on: every rank must launch the same task next
    /// (fused or not: window and fusion decisions too), or their transfers would never meet.
    /// A task that fails the check is not launched, on any rank; its futures get the error.
    pub(super) fn agree_launch(&self, plan: &Plan) -> Result<()> {
        let Some(ch) = self.shared.channel.get().filter(|c| c.agreement) else {
            return Ok(());
        };
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        (&*plan.name, plan.token, plan.domain.len(), &plan.shard).hash(&mut h);
        for a in &plan.args {
            (a.root.id, a.privilege, a.local).hash(&mut h);
            for r in a.rects.iter() {
                r.lo().hash(&mut h);
                r.hi().hash(&mut h);
            }
        }
        let seq = ch.seq.load(std::sync::atomic::Ordering::Relaxed);
        let r = crate::replicate::agree(ch, &plan.name, seq, h.finish());
        if let Err(e) = &r {
            for (_, cell) in &plan.results {
                let _ = cell.value.set(Err(e.clone()));
            }
        }
        r
    }
}

/// A task ready for the dependence analysis: one solved task, or a fused one.
pub(crate) struct Plan {
    pub name: Arc<str>,
    pub body: TaskBody,
    pub domain: Domain,
    pub token: u64,
    pub args: Args<LaunchArg>,
    pub scalars: Scalars,
    pub results: Args<(ReduceOp, Arc<crate::future::FutureCell>)>,
    pub fused: Option<Arc<FusedShape>>,
    /// The sharding key across ranks (`TaskLauncher::shard_by`).
    pub shard: Option<Args<usize>>,
}

impl Plan {
    /// [`Plan::single`] of a task left in place (its box reused): its arguments, scalars,
    /// result and sharding key are taken, its name and body shared; its issued arguments stay
    /// for [`window::unpend_task`].
    pub(crate) fn take_single(t: &mut Ready) -> Plan {
        Plan {
            name: t.issued.name.clone(),
            body: t.issued.body.clone(),
            domain: t.domain,
            token: t.token,
            args: std::mem::take(&mut t.args),
            scalars: std::mem::take(&mut t.issued.scalars),
            results: t.issued.result.take().into_iter().collect(),
            fused: None,
            shard: t.issued.shard.take(),
        }
    }

    pub(crate) fn single(mut t: Ready) -> Plan {
        Plan {
            name: t.issued.name,
            body: t.issued.body,
            domain: t.domain,
            token: t.token,
            args: t.args,
            scalars: std::mem::take(&mut t.issued.scalars),
            results: t.issued.result.take().into_iter().collect(),
            fused: None,
            shard: t.issued.shard.take(),
        }
    }
}

/// Each argument's per-point sub-stores (empty for unbound outputs).
fn sub_stores(interner: &Interner, sol: &Solution) -> Args<Arc<[Rect]>> {
    sol.parts
        .iter()
        .map(|p| match p {
            Some(p) => {
                let part = interner.get(*p);
                (0..sol.domain.len())
                    .map(|i| part.substore(&sol.domain, i))
                    .collect()
            }
            None => Arc::from([]),
        })
        .collect()
}

/// The task's arguments with their views and per-point sub-stores.
fn launch_args(t: &Issued, sargs: &[SolverArg], rects: &[Arc<[Rect]>]) -> Args<LaunchArg> {
    t.args
        .iter()
        .zip(sargs)
        .zip(rects)
        .map(|((a, s), r)| LaunchArg {
            root: a.root.clone(),
            view: s.rect.unwrap_or_else(|| Rect::from_shape(&[0])),
            privilege: a.privilege,
            overwrite: a.overwrite,
            rects: r.clone(),
            local: false,
        })
        .collect()
}
