//! One rank's share of a launched task: every rank runs this for every task, in stream order,
//! and derives the same transfers from the same valid-copy maps.

use super::channel::{key, Channel, Deliver, Recv, KIND_DATA, KIND_OUTS};
use super::finish::Dist;
use super::owners;
use super::valid::ValidMap;
use crate::analysis::Preds;
use crate::execute::graph::{Node, NodeList, Work};
use crate::issue::task::{Privilege, ScalarArg};
use crate::rect::distinct;
use crate::rect::Rect;
use crate::runtime::{Inner, Plan};
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Inner {
    /// Builds this rank's nodes for a task: its own points (its sharding key's, or block
    /// sharding), a send for each
    /// piece another rank's point needs that this rank must provide, a receive for each piece
    /// its points need from another rank, and the finish step's messages; then updates every
    /// store's valid-copy map as all ranks do.
    pub(crate) fn schedule_replicated(&self, ch: &Arc<Channel>, t: Plan) {
        let seq = ch.seq.fetch_add(1, Ordering::Relaxed);
        let (me, ranks) = (ch.rank, ch.ranks);
        let n = t.domain.len();
        let owners: Arc<[usize]> = owners(&t.domain, t.shard.as_deref(), ranks).into();
        let own = |p: usize| owners[p];
        let mine: Vec<usize> = (0..n).filter(|&p| own(p) == me).collect();
        // Who folds each reduced sub-store: its owner when every rank folds, else rank 0.
        let everywhere = t
            .args
            .iter()
            .all(|a| a.privilege != Privilege::WriteUnbound);
        let folders: Vec<Vec<usize>> = t
            .args
            .iter()
            .map(|a| match a.privilege {
                Privilege::Reduce(_) if everywhere => super::finish::fold_owners(&a.rects, &owners),
                Privilege::Reduce(_) => vec![0; n],
                _ => Vec::new(),
            })
            .collect();
        let dist = Dist {
            seq,
            channel: ch.clone(),
            owners: owners.clone(),
            folders: folders.clone(),
        };
        let b = self.build_nodes_at(t, mine.iter().copied(), Some(dist));
        let task = b.task.clone();
        for s in &task.scalars {
            if let ScalarArg::Future(cell) = s {
                if let Some(pred) = cell.node.get() {
                    b.points.iter().for_each(|p| Node::add_edge(pred, p));
                }
            }
        }
        debug_assert_eq!(everywhere, super::finish::folds_everywhere(&task));
        // The rank that folds sub-store `r` of reduction argument `i`.
        let folder = |i: usize, r: Rect| {
            let p = task.args[i].rects.iter().position(|q| *q == r);
            folders[i][p.expect("a sub-store some point reduces into")]
        };
        let mut extra = NodeList::new();
        // Transfers first, for every argument: a point's own accesses come after them.
        for (i, a) in task.args.iter().enumerate().filter(|(_, a)| !a.local) {
            // A written sub-store is brought up to date too: a body need not write every
            // element it may write, and the ones it skips keep their latest values.
            let wants: SmallVec<[(usize, Rect, usize); 8]> = match a.privilege {
                Privilege::Read | Privilege::ReadWrite | Privilege::Write => {
                    (0..n).map(|p| (p, a.rects[p], own(p))).collect()
                }
                // The rank that folds a sub-store needs its latest value.
                Privilege::Reduce(_) => distinct(&a.rects)
                    .into_iter()
                    .enumerate()
                    .map(|(j, r)| (j, r, folder(i, r)))
                    .collect(),
                Privilege::WriteUnbound => continue,
            };
            let whole = a.root.bound().expect("bound arguments").rect;
            let mut meta = a.root.meta();
            let meta = &mut *meta;
            let valid = meta
                .valid
                .get_or_insert_with(|| ValidMap::all(whole, ranks));
            for (p, rect, to) in wants {
                for (j, (piece, from)) in valid.missing(&rect, to).into_iter().enumerate() {
                    let k = key(seq, KIND_DATA, i, p, j);
                    if from == me {
                        // The piece as this task sees it (`replicate::piece`).
                        let node = Node::new(Work::Send {
                            root: a.root.clone(),
                            rect: piece,
                            to,
                            key: k,
                            since: task.since_of(&a.root),
                            at: seq,
                        });
                        meta.access.read(piece, &node, &mut Preds::default());
                        extra.push(node);
                    }
                    if to == me {
                        let node = Node::new(Work::Recv(Recv {
                            from,
                            key: k,
                            deliver: Deliver::Data {
                                root: a.root.clone(),
                                rect: piece,
                            },
                        }));
                        meta.access.write(piece, &node, &mut Preds::default());
                        extra.push(node);
                    }
                    valid.add_holder(piece, to);
                }
            }
        }
        // This rank's points and finish step in the dependence analysis.
        let mut preds: SmallVec<[Preds; 4]> = mine.iter().map(|_| Preds::default()).collect();
        let mut finish_preds = Preds::default();
        for (i, a) in task.args.iter().enumerate().filter(|(_, a)| !a.local) {
            let mut meta = a.root.meta();
            let per_point = b.points.iter().zip(&mine).zip(&mut preds);
            match a.privilege {
                Privilege::Read => {
                    per_point.for_each(|((node, &p), pr)| meta.access.read(a.rects[p], node, pr))
                }
                Privilege::Write | Privilege::ReadWrite => {
                    per_point.for_each(|((node, &p), pr)| meta.access.write(a.rects[p], node, pr))
                }
                // Each rank folds into its copy of the sub-stores it owns.
                Privilege::Reduce(_) if everywhere => {
                    let f = b.finish.as_ref().expect("a reduction has a finish step");
                    for r in distinct(&a.rects)
                        .into_iter()
                        .filter(|&r| folder(i, r) == me)
                    {
                        meta.access.write(r, f, &mut finish_preds);
                    }
                }
                Privilege::Reduce(_) if me != 0 => {}
                Privilege::Reduce(_) | Privilege::WriteUnbound => {
                    b.finish_access(a, &mut meta, &mut finish_preds)
                }
            }
            if let Some(valid) = meta.valid.as_mut() {
                match a.privilege {
                    Privilege::Write | Privilege::ReadWrite => {
                        (0..n).for_each(|p| valid.write(a.rects[p], own(p)))
                    }
                    Privilege::Reduce(_) => distinct(&a.rects)
                        .into_iter()
                        .for_each(|r| valid.write(r, folder(i, r))),
                    _ => {}
                }
            }
        }
        // A finish step run here (rank 0's, or every rank's when it only folds) waits for
        // every other rank's points' leftovers.
        let folds_here = me == 0 || everywhere;
        if let (Some(f), true) = (&b.finish, folds_here) {
            for p in (0..n).filter(|&p| own(p) != me) {
                let node = Node::new(Work::Recv(Recv {
                    from: own(p),
                    key: key(seq, KIND_OUTS, 0, p, 0),
                    deliver: Deliver::Outs {
                        task: task.clone(),
                        point: p,
                    },
                }));
                Node::add_edge(&node, f);
                extra.push(node);
            }
        }
        // A store this task writes whole drops its older poisonings only once every access of
        // it here up to this task's has finished (`StoreRoot::clear_poison_before`): not at
        // the task's end, which waits only for this rank's readers of the cells its points
        // here write. Only a store poisoned by now gets one: a poisoning that lands later
        // stays until a later rewrite's clear (no reader after this task sees it).
        let mut cleared: SmallVec<[&Arc<crate::store::StoreRoot>; 4]> = SmallVec::new();
        for a in task.args.iter().filter(|a| !a.local) {
            let whole = match a.privilege {
                Privilege::Write | Privilege::ReadWrite => a.root.bound().map(|b| b.rect),
                _ => None,
            };
            let Some(whole) = whole.filter(|w| *w == a.view) else {
                continue;
            };
            if !a.root.tainted() || cleared.iter().any(|r| Arc::ptr_eq(r, &a.root)) {
                continue;
            }
            cleared.push(&a.root);
            let node = Node::new(Work::Clear {
                root: a.root.clone(),
                at: seq,
            });
            for pred in a.root.meta().access.pending(&whole) {
                Node::add_edge(&pred, &node);
            }
            extra.push(node);
        }
        if mine.is_empty() && b.finish.is_none() {
            // Nothing of this task runs here: it ends now (its pending references drop).
            task.end();
        }
        let nodes: Vec<_> = b.link_finish().chain(extra).collect();
        self.start(nodes.into_iter());
    }
}
