//! The constraint solver (thesis Algorithm 1): equivalence classes from `align`, a dependence
//! order from `image`, key partitions reused for independent classes where they satisfy the
//! constraints, new tilings otherwise, then images computed in topological order.

use crate::buffer::Buf;
use crate::constraint::{Constraint, Cut};
use crate::dtype::{DType, Element, PosRange};
use crate::error::{Result, RuntimeError};
use crate::execute::graph::Completion;
use crate::machine::Machine;
use crate::partition::{Domain, ImageKey, Interner, Partition, PartitionId};
use crate::rect::{Rect, MAX_DIMS};
use crate::stats::Counters;
use crate::store::StoreRoot;
use smallvec::SmallVec;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One store argument as the solver sees it.
pub(crate) struct SolverArg<'a> {
    pub root: &'a Arc<StoreRoot>,
    /// Bounds of the view in root coordinates; `None` for an unbound output (not partitioned).
    pub rect: Option<Rect>,
    pub writes: bool,
}

/// Each argument's partition: eight inline (SpMV has five arguments; a partition id is
/// small), since a solution's are cloned for every task solved or replayed from the memo.
pub(crate) type Parts = SmallVec<[Option<PartitionId>; 8]>;

/// The launch domain and each argument's partition (`None` for unbound outputs).
#[derive(Clone)]
pub(crate) struct Solution {
    pub domain: Domain,
    pub parts: Parts,
    /// Classes that reused a key partition (counted again when the solution is replayed).
    pub reused: u64,
    /// Whether solving changed some store's key partitions: a replay then records them again
    /// (the first solves of a loop, before the key partitions settle).
    pub moved_keys: bool,
}

pub(crate) struct Solver<'a> {
    pub task: &'a str,
    pub machine: &'a Machine,
    pub interner: &'a mut Interner,
    pub counters: &'a Counters,
    pub completion: &'a Completion,
    /// Across ranks: image bounds are computed by the ranks holding the source's values.
    pub channel: Option<&'a crate::replicate::channel::Channel>,
}

/// An equivalence class of aligned arguments.
/// A task's equivalence classes (usually one or two).
type Classes = SmallVec<[Class; 2]>;

struct Class {
    members: SmallVec<[usize; 4]>,
    broadcast: [bool; MAX_DIMS],
    image_src: Option<usize>,
    /// The tiling the application chose for the class (`tile`), if any.
    tile: Option<Arc<[Cut]>>,
}

impl Solver<'_> {
    pub(crate) fn solve(
        &mut self,
        args: &[SolverArg],
        cons: &[Constraint],
        fixed: Option<Domain>,
    ) -> Result<Solution> {
        let mut classes = self.classes(args, cons)?;
        let domain = match fixed {
            Some(d) => d,
            None => {
                if let Some(c) = classes.iter().find(|c| c.tile.is_some()) {
                    return Err(self.tile_error(args, c, "`tile` needs a fixed launch domain"));
                }
                self.choose_domain(args, &classes)
            }
        };
        let mut sol = Solution {
            domain,
            parts: smallvec::smallvec![None; args.len()],
            reused: 0,
            moved_keys: false,
        };
        for class in classes.iter().filter(|c| c.image_src.is_none()) {
            match &class.tile {
                Some(cuts) => self.solve_tiled(args, class, cuts, &mut sol)?,
                None => self.solve_independent(args, class, &mut sol),
            }
        }
        self.solve_images(args, &mut classes, &mut sol)?;
        sol.moved_keys = record_keys(self.interner, args, &sol.parts);
        Ok(sol)
    }

    /// Builds equivalence classes (union-find over `align`) with their broadcast dimensions and
    /// image sources.
    fn classes(&self, args: &[SolverArg], cons: &[Constraint]) -> Result<Classes> {
        // Inline storage: tasks have a few arguments, and these are built for every task.
        let mut parent: SmallVec<[usize; 8]> = (0..args.len()).collect();
        fn find(p: &mut [usize], mut i: usize) -> usize {
            while p[i] != i {
                p[i] = p[p[i]];
                i = p[i];
            }
            i
        }
        for c in cons {
            if let Constraint::Align(a, b) = *c {
                let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
                parent[ra.max(rb)] = ra.min(rb);
            }
        }
        let mut classes = Classes::new();
        let mut class_of: SmallVec<[usize; 8]> = smallvec::smallvec![usize::MAX; args.len()];
        for i in 0..args.len() {
            if args[i].rect.is_none() {
                continue;
            }
            let r = find(&mut parent, i);
            if class_of[r] == usize::MAX {
                class_of[r] = classes.len();
                classes.push(Class {
                    members: SmallVec::new(),
                    broadcast: [false; MAX_DIMS],
                    image_src: None,
                    tile: None,
                });
            }
            class_of[i] = class_of[r];
            classes[class_of[r]].members.push(i);
        }
        for c in cons {
            match c {
                Constraint::Broadcast(a, dims) => {
                    let b = &mut classes[class_of[*a]].broadcast;
                    b.iter_mut().zip(dims).for_each(|(b, d)| *b |= d);
                }
                Constraint::Image { src, dst } => {
                    let cl = &mut classes[class_of[*dst]];
                    if cl.image_src.is_some() {
                        return Err(RuntimeError::ImageTwice {
                            task: self.task.into(),
                            dst: args[*dst].root.id,
                        });
                    }
                    cl.image_src = Some(*src);
                }
                Constraint::Tile(a, cuts) => {
                    let cl = &mut classes[class_of[*a]];
                    if cl.tile.as_ref().is_some_and(|t| t != cuts) {
                        return Err(self.tile_error(args, cl, "aligned arguments tiled twice"));
                    }
                    cl.tile = Some(cuts.clone());
                }
                Constraint::Align(..) => {}
            }
        }
        if let Some(c) = classes
            .iter()
            .find(|c| c.tile.is_some() && c.image_src.is_some())
        {
            return Err(self.tile_error(args, c, "a tiled argument cannot also be an image"));
        }
        Ok(classes)
    }

    fn tile_error(&self, args: &[SolverArg], class: &Class, reason: &str) -> RuntimeError {
        RuntimeError::Tile {
            task: self.task.into(),
            store: args[class.members[0]].root.id,
            reason: reason.into(),
        }
    }

    /// A class the application tiled: every member gets the tiles `cuts` describe over its
    /// own view (equal tiles become a `Tiling`, which can be a key partition; split points
    /// become `Cuts`).
    fn solve_tiled(
        &mut self,
        args: &[SolverArg],
        class: &Class,
        cuts: &[Cut],
        sol: &mut Solution,
    ) -> Result<()> {
        let domain = sol.domain;
        for &m in &class.members {
            let rect = args[m].rect.expect("bound");
            let p = tiled_partition(cuts, rect, domain)
                .map_err(|reason| self.tile_error(args, class, &reason))?;
            sol.parts[m] = Some(self.intern(p));
        }
        Ok(())
    }

    /// A key partition of some member of `class` that respects its broadcast dimensions (and
    /// `domain`, if given): the member and the partition's tile shape.
    fn find_key(
        &self,
        args: &[SolverArg],
        class: &Class,
        domain: Option<Domain>,
    ) -> Option<(usize, PartitionId)> {
        // Prefer written members: their key partition is where the data was last produced.
        let written = class.members.iter().filter(|&&m| args[m].writes);
        let read = class.members.iter().filter(|&&m| !args[m].writes);
        for &m in written.chain(read) {
            let rect = args[m].rect?;
            let meta = args[m].root.meta();
            for &k in &meta.keys {
                if let Partition::Tiling {
                    proj,
                    bounds,
                    domain: kd,
                    ..
                } = &**self.interner.get(k)
                {
                    let respects =
                        (0..rect.dim()).all(|d| !class.broadcast[d] || proj[d].is_none());
                    if *bounds == rect && respects && domain.is_none_or(|d| d == *kd) {
                        return Some((m, k));
                    }
                }
            }
        }
        None
    }

    /// The launch domain: a reusable key partition's, else one piece per processor for the
    /// largest independent class (respecting the minimum piece size).
    fn choose_domain(&self, args: &[SolverArg], classes: &[Class]) -> Domain {
        let independent = || classes.iter().filter(|c| c.image_src.is_none());
        for class in independent() {
            if let Some((_, k)) = self.find_key(args, class, None) {
                if let Partition::Tiling { domain, .. } = &**self.interner.get(k) {
                    return *domain;
                }
            }
        }
        let volume = independent()
            .filter(|c| {
                let r = args[c.members[0]].rect.expect("classes hold bound args");
                (0..r.dim()).any(|d| !c.broadcast[d])
            })
            .map(|c| args[c.members[0]].rect.map_or(0, |r| r.volume()))
            .max();
        let pieces = volume.map_or(1, |v| self.machine.pieces_for(v));
        Domain::new(&[pieces]).expect("at least one piece")
    }

    fn solve_independent(&mut self, args: &[SolverArg], class: &Class, sol: &mut Solution) {
        let domain = sol.domain;
        let (tile, proj) = match self.find_key(args, class, Some(domain)) {
            Some((_, k)) => {
                Counters::add(&self.counters.partitions_reused, 1);
                sol.reused += 1;
                match &**self.interner.get(k) {
                    Partition::Tiling { tile, proj, .. } => (*tile, *proj),
                    _ => unreachable!("find_key returns tilings"),
                }
            }
            None => {
                let shape = args[class.members[0]].rect.expect("bound").shape();
                new_tiling(&shape, &class.broadcast, domain)
            }
        };
        for &m in &class.members {
            let rect = args[m].rect.expect("bound");
            let p = if proj.iter().all(|p| p.is_none()) {
                Partition::None { bounds: rect }
            } else {
                Partition::Tiling {
                    tile,
                    proj,
                    offset: rect,
                    bounds: rect,
                    domain,
                }
            };
            sol.parts[m] = Some(self.intern(p));
        }
    }

    fn intern(&mut self, p: Partition) -> PartitionId {
        let (id, new) = self.interner.intern(p);
        if new {
            Counters::add(&self.counters.partitions_created, 1);
        }
        id
    }

    /// Solves image-dependent classes once their source's partition is known.
    fn solve_images(
        &mut self,
        args: &[SolverArg],
        classes: &mut [Class],
        sol: &mut Solution,
    ) -> Result<()> {
        let (domain, parts) = (sol.domain, &mut sol.parts);
        let mut todo: Vec<usize> = (0..classes.len())
            .filter(|&c| classes[c].image_src.is_some())
            .collect();
        while !todo.is_empty() {
            let before = todo.len();
            let mut i = 0;
            while i < todo.len() {
                let class = &classes[todo[i]];
                let src = class.image_src.expect("dependent class");
                let Some(src_part) = parts[src] else {
                    i += 1;
                    continue;
                };
                let dst = class.members[0];
                let pid = self.image(args, src, src_part, dst, domain)?;
                let rects = match &**self.interner.get(pid) {
                    Partition::Image { rects, .. } => rects.clone(),
                    _ => unreachable!(),
                };
                parts[dst] = Some(pid);
                let dst_rect = args[dst].rect.expect("bound");
                // Aligned members take the same rows of their own views.
                for &m in &class.members[1..] {
                    let mr = args[m].rect.expect("bound");
                    let moved: Arc<[Rect]> = rects
                        .iter()
                        .map(|r| r.untranslate(dst_rect.lo()).translate(mr.lo()))
                        .collect();
                    let key = ImageKey {
                        dst_bounds: mr,
                        ..self.image_key(args, src, src_part, dst)
                    };
                    parts[m] = Some(self.intern(Partition::Image {
                        key,
                        rects: moved,
                        domain,
                    }));
                }
                todo.swap_remove(i);
            }
            if todo.len() == before {
                let store = args[classes[todo[0]].members[0]].root.id;
                return Err(RuntimeError::ImageCycle {
                    task: self.task.into(),
                    store,
                });
            }
        }
        Ok(())
    }

    fn image_key(
        &self,
        args: &[SolverArg],
        src: usize,
        src_part: PartitionId,
        dst: usize,
    ) -> ImageKey {
        ImageKey {
            src_root: args[src].root.id,
            src_partition: src_part,
            src_version: args[src].root.meta().version,
            dst_bounds: args[dst].rect.expect("bound"),
        }
    }

    /// The image of `src`'s partition into `dst`, reused while `src` is unchanged.
    ///
    /// It is always exact: the issuing thread waits for the tasks still writing `src`. (It used
    /// to give a read-only destination `None` instead when `src` still had writers; whether a
    /// worker had finished then decided the partition, and ranks could disagree.)
    fn image(
        &mut self,
        args: &[SolverArg],
        src: usize,
        src_part: PartitionId,
        dst: usize,
        domain: Domain,
    ) -> Result<PartitionId> {
        let key = self.image_key(args, src, src_part, dst);
        if let Some(id) = self.interner.find_image(&key) {
            return Ok(id);
        }
        let root = &args[src].root;
        let src_rect = args[src].rect.expect("bound");
        let writers = root.meta().access.pending_writers(&src_rect);
        if !writers.is_empty() {
            Counters::add(&self.counters.blocking_waits, 1);
            for w in writers {
                w.wait(self.completion);
            }
        }
        let part = self.interner.get(src_part).clone();
        let dst_rect = args[dst].rect.expect("bound");
        let extent = dst_rect.extent(0) as u64;
        let pieces: Vec<Rect> = (0..domain.len())
            .map(|p| part.substore(&domain, p))
            .collect();
        let sorted = root.dtype == DType::Range && monotone(root, src_rect);
        let local = |piece: Rect| match root.dtype {
            DType::Range if sorted => monotone_span(root, piece),
            DType::Range => spans::<PosRange>(root, piece),
            DType::I64 => coordinate_span::<i64>(root, piece),
            DType::I32 => coordinate_span::<i32>(root, piece),
            DType::U64 => coordinate_span::<u64>(root, piece),
            DType::U32 => coordinate_span::<u32>(root, piece),
            _ => unreachable!("image sources are checked at issue"),
        };
        let all_spans = match self.channel {
            None => pieces.iter().map(|&p| local(p)).collect(),
            Some(ch) => crate::replicate::image_spans(ch, root, &pieces, &local)?,
        };
        let mut rects = Vec::with_capacity(domain.len());
        for span in all_spans {
            let (lo, hi) = match span {
                Err(SpanError::Negative) => {
                    return Err(RuntimeError::ImageNegative {
                        task: self.task.into(),
                        store: root.id,
                    })
                }
                Err(SpanError::Busy(r)) => {
                    return Err(RuntimeError::ConcurrentAccess {
                        store: root.id,
                        rect: format!("{r:?}"),
                    })
                }
                Ok(None) => (0, 0),
                Ok(Some(s)) => s,
            };
            if hi > extent {
                return Err(RuntimeError::ImageOutOfBounds {
                    task: self.task.into(),
                    src: root.id,
                    dst: args[dst].root.id,
                    value: hi - 1,
                    extent: extent as usize,
                });
            }
            let base = dst_rect.lo()[0];
            rects.push(dst_rect.with_range(0, base + lo as usize, base + hi as usize));
        }
        Ok(self.intern(Partition::Image {
            key,
            rects: rects.into(),
            domain,
        }))
    }
}

/// Makes each argument's tiling its store's key partition: always for written arguments
/// (where the data now lives), for read ones only when the store has none for that view.
/// Returns whether any store's key partitions changed (each such store's epoch is bumped).
pub(crate) fn record_keys(
    interner: &Interner,
    args: &[SolverArg],
    parts: &[Option<PartitionId>],
) -> bool {
    let mut changed = false;
    for (a, p) in args.iter().zip(parts) {
        let (Some(p), Some(rect)) = (p, a.rect) else {
            continue;
        };
        if !matches!(&**interner.get(*p), Partition::Tiling { .. }) {
            continue;
        }
        let mut meta = a.root.meta();
        let existing = meta
            .keys
            .iter()
            .position(|k| interner.get(*k).bounds() == rect);
        let changes = match existing {
            Some(i) if a.writes && (i != 0 || meta.keys[0] != *p) => {
                meta.keys.remove(i);
                meta.keys.insert(0, *p);
                true
            }
            Some(_) => false,
            None => {
                meta.keys.insert(0, *p);
                meta.keys.truncate(4);
                true
            }
        };
        if changes {
            a.root.key_epoch.fetch_add(1, Ordering::Relaxed);
            changed = true;
        }
    }
    changed
}

/// The partition `cuts` describe over `rect`, or why they do not fit `domain`.
fn tiled_partition(
    cuts: &[Cut],
    rect: Rect,
    domain: Domain,
) -> std::result::Result<Partition, String> {
    let mut proj = [None; MAX_DIMS];
    let mut tile = [0; MAX_DIMS];
    let mut bounds: Vec<Arc<[usize]>> = Vec::with_capacity(cuts.len());
    if cuts.len() != rect.dim() {
        return Err(format!(
            "{} cuts for a view of {} dimensions",
            cuts.len(),
            rect.dim()
        ));
    }
    for (d, cut) in cuts.iter().enumerate() {
        let n = rect.extent(d);
        tile[d] = n;
        let Some(k) = cut.launch_dim() else {
            bounds.push(Arc::from([]));
            continue;
        };
        if k >= domain.dim() {
            return Err(format!(
                "dimension {d} follows launch dimension {k}, but the launch domain has {}",
                domain.dim()
            ));
        }
        if proj[..d].contains(&Some(k as u8)) {
            return Err(format!("launch dimension {k} cuts two dimensions"));
        }
        proj[d] = Some(k as u8);
        let parts = domain.extent(k);
        let edges: Vec<usize> = match cut {
            Cut::At(_, p) if p.len() + 1 != parts => {
                return Err(format!(
                    "{} split points make {} tiles, but launch dimension {k} has {parts} points",
                    p.len(),
                    p.len() + 1
                ))
            }
            Cut::At(_, p) => std::iter::once(0)
                .chain(p.iter().map(|&x| x.min(n)))
                .chain([n])
                .collect(),
            _ => {
                tile[d] = n.div_ceil(parts).max(1);
                (0..=parts).map(|c| (c * tile[d]).min(n)).collect()
            }
        };
        bounds.push(edges.into());
    }
    if cuts.iter().all(|c| !matches!(c, Cut::At(..))) {
        return Ok(Partition::Tiling {
            tile,
            proj,
            offset: rect,
            bounds: rect,
            domain,
        });
    }
    Ok(Partition::Cuts {
        cuts: bounds.into(),
        proj,
        offset: rect,
        bounds: rect,
        domain,
    })
}

/// Tile shape and projection splitting `shape` over `domain`: launch dimension `k` splits the
/// `k`-th dimension that is not broadcast.
fn new_tiling(
    shape: &[usize],
    broadcast: &[bool; MAX_DIMS],
    domain: Domain,
) -> ([usize; MAX_DIMS], [Option<u8>; MAX_DIMS]) {
    let mut tile = [0; MAX_DIMS];
    tile[..shape.len()].copy_from_slice(shape);
    let mut proj = [None; MAX_DIMS];
    let free = (0..shape.len()).filter(|&d| !broadcast[d]);
    for (k, d) in free.zip(0..domain.dim()).map(|(d, k)| (k, d)) {
        let parts = domain.extent(k);
        proj[d] = Some(k as u8);
        tile[d] = shape[d].div_ceil(parts).max(1);
    }
    (tile, proj)
}

/// Why the source of an image could not be read.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SpanError {
    Negative,
    Busy(Rect),
}

/// What the elements of a piece of an image source point at: the union `[min lo, max hi)`,
/// `None` when they point at nothing.
pub(crate) type Span = std::result::Result<Option<(u64, u64)>, SpanError>;

/// The [`Span`] of `piece` of `root`, from this rank's copy.
fn spans<T: Element>(root: &StoreRoot, piece: Rect) -> Span {
    let bound = root.bound().expect("image sources are bound");
    let buf: &Buf<T> = T::buf(root.data().expect("bound")).expect("dtype checked");
    let _borrow = root.ledger.borrow(piece, false).map_err(SpanError::Busy)?;
    let mut acc: Option<(u64, u64)> = None;
    let mut negative = false;
    piece.for_each_run(&bound.rect, |start, len| {
        for i in start..start + len {
            // SAFETY: `_borrow` holds a shared borrow of `piece`, which contains cell `i`.
            let v = unsafe { *buf.base().add(i) };
            match v.image_span() {
                Some((lo, hi)) if hi > lo => {
                    acc = Some(acc.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
                }
                Some(_) => {}
                None => negative = true,
            }
        }
    });
    if negative {
        Err(SpanError::Negative)
    } else {
        Ok(acc)
    }
}

/// The [`Span`] of `piece` of a coordinate store (`crd → x`): `[min, max + 1)`, or
/// `Negative` if any coordinate is. What [`spans`] finds, from a min/max pass over each run
/// that the compiler vectorises (the largest image of a plan: one element per nonzero).
fn coordinate_span<T: Element + Ord + Into<i128>>(root: &StoreRoot, piece: Rect) -> Span {
    let bound = root.bound().expect("image sources are bound");
    let buf: &Buf<T> = T::buf(root.data().expect("bound")).expect("dtype checked");
    let _borrow = root.ledger.borrow(piece, false).map_err(SpanError::Busy)?;
    let mut acc: Option<(T, T)> = None;
    piece.for_each_run(&bound.rect, |start, len| {
        // SAFETY: `_borrow` holds a shared borrow of `piece`, which contains the run.
        let run = unsafe { std::slice::from_raw_parts(buf.base().add(start), len) };
        if let Some(&first) = run.first() {
            let (lo, hi) = (run.iter()).fold((first, first), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            acc = Some(acc.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
        }
    });
    let Some((lo, hi)) = acc else { return Ok(None) };
    let (lo, hi): (i128, i128) = (lo.into(), hi.into());
    if lo < 0 {
        return Err(SpanError::Negative);
    }
    // `hi` fits in u64 (the types are at most 64 bits, and `hi >= lo >= 0`); `u64::MAX`
    // saturates and is then out of bounds of any destination.
    Ok(Some((lo as u64, (hi as u64).saturating_add(1))))
}

/// Whether the `PosRange` view `rect` of `root` is monotone in row-major order: every range
/// has `lo <= hi`, and `hi` is at most the next range's `lo` (as `pos` of a compressed level
/// always is). Then the image of a piece is found from its ends ([`monotone_span`]).
///
/// Checked once per store version and view (cached in the store's metadata); the caller has
/// waited for the view's writers, so the check sees the version's values. Across ranks only
/// where this rank's copy is all current (no rank wrote part of the store since it was
/// created); elsewhere the answer is `false` and images are scanned.
fn monotone(root: &StoreRoot, rect: Rect) -> bool {
    let version = {
        let meta = root.meta();
        if meta.valid.is_some() {
            return false;
        }
        match meta.monotone {
            Some((v, r, known)) if v == meta.version && r == rect => return known,
            _ => meta.version,
        }
    };
    let bound = root.bound().expect("image sources are bound");
    let buf: &Buf<PosRange> = PosRange::buf(root.data().expect("bound")).expect("dtype checked");
    let Ok(_borrow) = root.ledger.borrow(rect, false) else {
        return false;
    };
    let (mut bad, mut prev_hi) = (false, 0);
    rect.for_each_run(&bound.rect, |start, len| {
        // SAFETY: `_borrow` holds a shared borrow of `rect`, which contains the run.
        let run = unsafe { std::slice::from_raw_parts(buf.base().add(start), len) };
        bad |= !ranges_monotone(run, &mut prev_hi);
    });
    root.meta().monotone = Some((version, rect, !bad));
    !bad
}

/// Whether `run` is monotone (`lo <= hi <=` the next `lo`) after a range ending at `prev_hi`,
/// which it leaves at the run's last `hi`. Branch-free in the loop (bitwise, not `&&`): it
/// runs over every range of a fresh `pos` and should cost no more than reading it.
pub(crate) fn ranges_monotone(run: &[PosRange], prev_hi: &mut u64) -> bool {
    let mut bad = false;
    for r in run {
        bad |= (r.lo < *prev_hi) | (r.hi < r.lo);
        *prev_hi = r.hi;
    }
    !bad
}

/// The [`Span`] of `piece` of a monotone `PosRange` store (see [`monotone`]): the first
/// non-empty range's `lo` and the last one's `hi`, equal to what [`spans`] finds by scanning
/// every range (`lo` and `hi` only grow), found by looking in from both ends.
fn monotone_span(root: &StoreRoot, piece: Rect) -> Span {
    let bound = root.bound().expect("image sources are bound");
    let buf: &Buf<PosRange> = PosRange::buf(root.data().expect("bound")).expect("dtype checked");
    let _borrow = root.ledger.borrow(piece, false).map_err(SpanError::Busy)?;
    let mut runs: SmallVec<[Range<usize>; 1]> = SmallVec::new();
    piece.for_each_run(&bound.rect, |start, len| runs.push(start..start + len));
    // SAFETY: `_borrow` holds a shared borrow of `piece`, which contains every cell of `runs`.
    let at = |i: usize| unsafe { *buf.base().add(i) };
    let non_empty = |r: &PosRange| r.hi > r.lo;
    let first = runs.iter().flat_map(|r| r.clone()).map(at).find(non_empty);
    let last = (runs.iter().rev().flat_map(|r| r.clone().rev()))
        .map(at)
        .find(non_empty);
    Ok(first.zip(last).map(|(f, l)| (f.lo, l.hi)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Runtime;
    use proptest::prelude::*;

    /// `pos` ranges: monotone (gaps and empty ranges included) when `monotone`, else each
    /// range anywhere (possibly reversed or overlapping).
    fn ranges(monotone: bool) -> impl Strategy<Value = Vec<PosRange>> {
        let step = (0u64..3, 0u64..4, 0u64..40, 0u64..40);
        prop::collection::vec(step, 1..48).prop_map(move |steps| {
            let mut at = 0;
            let mut out = Vec::with_capacity(steps.len());
            for (gap, len, a, b) in steps {
                if monotone {
                    out.push(PosRange::new(at + gap, at + gap + len));
                    at += gap + len;
                } else {
                    out.push(PosRange::new(a, b));
                }
            }
            out
        })
    }

    /// A sub-rectangle of `shape` from four fractions.
    fn sub_rect(shape: &[usize], f: [f64; 4]) -> Rect {
        let (mut lo, mut hi) = (vec![], vec![]);
        for (d, &n) in shape.iter().enumerate() {
            let (a, b) = (
                (f[2 * d] * n as f64) as usize,
                (f[2 * d + 1] * n as f64) as usize,
            );
            lo.push(a.min(b));
            hi.push(a.max(b).min(n));
        }
        Rect::new(&lo, &hi)
    }

    proptest! {
        #[test]
        fn images_from_the_ends_of_monotone_pos_equal_the_scan(
            data in any::<bool>().prop_flat_map(ranges),
            two_d in any::<bool>(),
            f in prop::array::uniform4(0.0f64..1.0),
        ) {
            let rt = Runtime::new(1);
            let n = data.len();
            // 2-d: whole rows of the first factor, so pieces have several runs.
            let shape = match (two_d, (2..n).find(|k| n % k == 0)) {
                (true, Some(k)) => vec![n / k, k],
                _ => vec![n],
            };
            let is_monotone = data.windows(2).all(|w| w[0].hi <= w[1].lo)
                && data.iter().all(|r| r.lo <= r.hi);
            let s = rt.from_vec(&shape, data).unwrap();
            let whole = s.rect().unwrap();
            prop_assert_eq!(monotone(&s.root, whole), is_monotone);
            if is_monotone {
                for piece in [sub_rect(&shape, f), whole] {
                    let fast = monotone_span(&s.root, piece).unwrap();
                    let scan = spans::<PosRange>(&s.root, piece).unwrap();
                    prop_assert_eq!(fast, scan, "piece {:?}", piece);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn coordinate_images_equal_the_scan(
            data in prop::collection::vec(-3i64..200, 1..64),
            f in prop::array::uniform4(0.0f64..1.0),
        ) {
            let rt = Runtime::new(1);
            let n = data.len();
            let shape = match (2..n).find(|k| n % k == 0) {
                Some(k) => vec![n / k, k],
                None => vec![n],
            };
            let piece = sub_rect(&shape, f);
            let same = |s: &crate::Store, label: &str| {
                let (fast, scan) = match s.dtype() {
                    DType::I64 => (coordinate_span::<i64>(&s.root, piece), spans::<i64>(&s.root, piece)),
                    DType::I32 => (coordinate_span::<i32>(&s.root, piece), spans::<i32>(&s.root, piece)),
                    DType::U64 => (coordinate_span::<u64>(&s.root, piece), spans::<u64>(&s.root, piece)),
                    _ => (coordinate_span::<u32>(&s.root, piece), spans::<u32>(&s.root, piece)),
                };
                let show = |x: Span| format!("{:?}", x.map_err(|e| matches!(e, SpanError::Negative)));
                assert_eq!(show(fast), show(scan), "{} piece {:?}", label, piece);
            };
            same(&rt.from_vec(&shape, data.clone()).unwrap(), "i64");
            same(&rt.from_vec(&shape, data.iter().map(|&v| v as i32).collect()).unwrap(), "i32");
            let unsigned: Vec<i64> = data.iter().map(|v| v.abs()).collect();
            same(&rt.from_vec(&shape, unsigned.iter().map(|&v| v as u64).collect()).unwrap(), "u64");
            same(&rt.from_vec(&shape, unsigned.iter().map(|&v| v as u32).collect()).unwrap(), "u32");
        }
    }

    proptest! {
        #[test]
        fn from_offsets_records_what_the_check_finds(
            offsets in prop::collection::vec(0u64..20, 0..24),
            sorted in any::<bool>(),
        ) {
            let mut offsets = offsets;
            if sorted {
                offsets.sort_unstable();
            }
            let rt = Runtime::new(1);
            let s = rt.from_offsets(offsets.iter().copied()).unwrap();
            let recorded = s.root.meta().monotone.take().map(|(_, _, m)| m);
            prop_assert_eq!(recorded, Some(monotone(&s.root, s.rect().unwrap())));
        }
    }

    #[test]
    fn a_write_that_breaks_monotonicity_is_seen_at_the_next_version() {
        let rt = Runtime::new(2);
        let pos: Vec<PosRange> = (0..100).map(|i| PosRange::new(i, i + 1)).collect();
        let s = rt.from_vec(&[100], pos).unwrap();
        let whole = s.rect().unwrap();
        assert!(monotone(&s.root, whole));
        rt.register("reverse", |ctx| {
            let mut w = ctx.write::<PosRange>(0);
            w.as_mut_slice().reverse();
        })
        .unwrap();
        rt.task("reverse").read_write(&s).submit().unwrap();
        rt.fence().unwrap();
        assert!(!monotone(&s.root, whole), "not the cached answer");
        // Images of the reversed store are scanned, and still exact.
        assert_eq!(
            spans::<PosRange>(&s.root, Rect::new(&[10], &[20])).unwrap(),
            Some((80, 90))
        );
    }
}
