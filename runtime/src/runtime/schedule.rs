//! From a solved task to running points: its `Launched` task and nodes, their dependences
//! (Definition 1, through each store's access state: `analysis.rs`), and the ready nodes
//! handed to the executor.

use super::{Inner, Plan};
use crate::analysis::Preds;
use crate::execute::executor::Executor;
use crate::execute::graph::{Node, NodeList, Work};
use crate::execute::launch::{LaunchArg, Launched};
use crate::issue::task::{Privilege, ScalarArg};
use crate::rect::{distinct, Rect};
use crate::stats::Counters;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

impl Inner {
    /// Launches a solved (possibly fused) task into the dependence analysis.
    pub(crate) fn analyse(&self, plan: Plan) {
        crate::tracing::replay::bump_versions(&plan);
        Counters::add(&self.shared.counters.tasks_analysed, 1);
        self.schedule(plan);
    }

    /// Builds the point (and finish) nodes, adds their dependences, and hands ready ones to the
    /// executor.
    pub(crate) fn schedule(&self, t: Plan) {
        if let Some(ch) = self.shared.channel.get() {
            return self.schedule_replicated(ch, t);
        }
        let b = self.build_nodes(t);
        let task = &b.task;
        let n = b.points.len();
        for s in &task.scalars {
            if let ScalarArg::Future(cell) = s {
                if let Some(pred) = cell.node.get() {
                    b.points.iter().for_each(|p| Node::add_edge(pred, p));
                }
            }
        }
        // Joining: long reader groups may get stand-ins, started below with the task's nodes.
        let mut preds: SmallVec<[Preds; 4]> = (0..n).map(|_| Preds::joining()).collect();
        let mut finish_preds = Preds::joining();
        // A temporary's points work on scratch: no one else can see the store. (Versions were
        // bumped when the task was launched: `note_writes`.)
        for a in task.args.iter().filter(|a| !a.local) {
            let mut meta = a.root.meta();
            let per_point = b.points.iter().zip(a.rects.iter()).zip(&mut preds);
            match a.privilege {
                Privilege::Read => {
                    per_point.for_each(|((p, r), pr)| meta.access.read(*r, p, pr));
                }
                Privilege::Write | Privilege::ReadWrite => {
                    per_point.for_each(|((p, r), pr)| meta.access.write(*r, p, pr));
                }
                Privilege::Reduce(_) | Privilege::WriteUnbound => {
                    b.finish_access(a, &mut meta, &mut finish_preds)
                }
            }
        }
        self.start(b.link_finish());
        for p in preds.iter_mut().chain([&mut finish_preds]) {
            let joins = p.take_joins();
            if !joins.is_empty() {
                self.start(joins.into_iter());
            }
        }
    }

    /// The next launched task's stream position on one rank (`Launched::position`).
    pub(crate) fn next_position(&self) -> u64 {
        self.next_position.fetch_add(1, Ordering::Relaxed)
    }

    /// A plan's launched task, `points` of whose points run here; each store it uses holds a
    /// pending reference from now on.
    pub(crate) fn launched(
        &self,
        t: Plan,
        points: usize,
        dist: Option<crate::replicate::finish::Dist>,
    ) -> Arc<Launched> {
        let domain = t.domain;
        let n = domain.len();
        let has_finish =
            Launched::needs_finish(t.args.iter().map(|a| a.privilege), !t.results.is_empty());
        let roots = Launched::hold_roots(t.args.iter().map(|a| &a.root));
        let position = match &dist {
            Some(d) => d.seq,
            None => self.next_position(),
        };
        let mut task = Launched {
            position,
            name: t.name,
            body: t.body,
            domain,
            token: t.token,
            read_groups: crate::execute::context::ReadGroups::of(&t.args),
            args: t.args,
            scalars: t.scalars,
            results: t.results,
            fused: t.fused,
            roots,
            remaining: AtomicUsize::new(points),
            // Only a finish step reads what points leave behind.
            outs: Launched::outs(n, has_finish),
            failure: Mutex::new(None),
            sub_failures: Mutex::default(),
            since: Default::default(),
            has_finish,
            dist,
        };
        task.note_rewrites();
        Arc::new(task)
    }

    /// A plan's task and its point (and finish) nodes, not yet connected to anything; each
    /// store it uses holds a pending reference from now on.
    pub(crate) fn build_nodes(&self, t: Plan) -> Built {
        let n = t.domain.len();
        // A range, not a collected list of every point: no allocation per launch.
        self.build_nodes_at(t, 0..n, None)
    }

    /// [`Inner::build_nodes`] for the points `mine` only (across ranks: this rank's shard).
    /// Across ranks a rank other than 0 gets, as its finish step, the receive of rank 0's
    /// outcome.
    pub(crate) fn build_nodes_at(
        &self,
        t: Plan,
        mine: impl ExactSizeIterator<Item = usize>,
        dist: Option<crate::replicate::finish::Dist>,
    ) -> Built {
        let task = self.launched(t, mine.len(), dist);
        task.mark_used();
        let points: NodeList = mine
            .map(|p| {
                Node::new(Work::Point {
                    task: task.clone(),
                    point: p,
                })
            })
            .collect();
        let finish = task.has_finish.then(|| match &task.dist {
            Some(d)
                if d.channel.rank != 0 && !crate::replicate::finish::folds_everywhere(&task) =>
            {
                Node::new(Work::Recv(crate::replicate::channel::Recv {
                    from: 0,
                    key: crate::replicate::channel::key(
                        d.seq,
                        crate::replicate::channel::KIND_FINISH,
                        0,
                        0,
                        0,
                    ),
                    deliver: crate::replicate::channel::Deliver::Finish { task: task.clone() },
                }))
            }
            _ => Node::new(Work::Finish { task: task.clone() }),
        });
        Built {
            task,
            points,
            finish,
        }
    }

    /// Counts `nodes` as outstanding and hands the ready ones to the executor (each node's
    /// issue guard is dropped: its in-edges must all be in place).
    pub(crate) fn start(&self, nodes: impl ExactSizeIterator<Item = Arc<Node>>) {
        self.shared
            .outstanding
            .fetch_add(nodes.len(), Ordering::AcqRel);
        for node in nodes {
            if node.release() {
                self.pool.spawn(node);
            }
        }
    }

    /// [`Inner::start`] for nodes the caller keeps (a replay's vertices, and its entry vertex
    /// if any): only the ready ones are cloned, for the executor.
    pub(crate) fn start_kept(&self, nodes: &[Arc<Node>], entry: Option<&Arc<Node>>) {
        let all = nodes.iter().chain(entry);
        self.shared
            .outstanding
            .fetch_add(nodes.len() + entry.is_some() as usize, Ordering::AcqRel);
        for node in all {
            if node.release() {
                self.pool.spawn(node.clone());
            }
        }
    }
}

/// A launched task's nodes (see `Inner::build_nodes`).
pub(crate) struct Built {
    pub task: Arc<Launched>,
    pub points: NodeList,
    pub finish: Option<Arc<Node>>,
}

impl Built {
    /// Records the finish step's access of argument `a`: it writes each distinct sub-store
    /// of a reduction (folding), and all of an unbound store, whose extent later tasks wait
    /// for (it is the store's producer).
    pub(crate) fn finish_access(
        &self,
        a: &LaunchArg,
        meta: &mut crate::store::RootMeta,
        preds: &mut Preds,
    ) {
        let f = self
            .finish
            .as_ref()
            .expect("reductions and unbound outputs have a finish step");
        if a.privilege == Privilege::WriteUnbound {
            meta.access.write(Rect::new(&[0], &[usize::MAX]), f, preds);
            meta.producer = Some(f.clone());
        } else {
            for r in distinct(&a.rects) {
                meta.access.write(r, f, preds);
            }
        }
    }

    /// Orders the finish step after the points, makes it the producer of the task's futures,
    /// and returns every node, points first.
    pub(crate) fn link_finish(self) -> impl ExactSizeIterator<Item = Arc<Node>> {
        if let Some(f) = &self.finish {
            self.points.iter().for_each(|p| Node::add_edge(p, f));
            for (_, cell) in &self.task.results {
                let _ = cell.node.set(f.clone());
            }
        }
        let mut all = self.points;
        all.extend(self.finish);
        all.into_iter()
    }
}
