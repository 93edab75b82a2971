//! Launch domains and partitions (`None`, `Tiling`, `Image`), interned so that two partitions
//! compare equal in constant time by id (thesis §4.1.1: the analysis must decide partition
//! (in)equality without looking at sub-stores).

use crate::rect::{Rect, MAX_DIMS};
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// The most points a launch domain has: replayed traces number a task's points in 32 bits
/// (`execute::actors`), and a larger domain given to `launch_domain` overflowed the point
/// count (`[usize::MAX, 2]`) and panicked in the solver instead of failing `submit`.
pub const MAX_POINTS: usize = u32::MAX as usize;

/// A rectangular launch domain `[0, extents)`; each point is one point task.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Domain {
    rect: Rect,
}

impl Domain {
    /// The domain `[0, extents)`, or `None` when it is empty, has too many dimensions or more
    /// than [`MAX_POINTS`] points.
    pub fn new(extents: &[usize]) -> Option<Domain> {
        let points = extents.iter().try_fold(1usize, |n, &e| n.checked_mul(e));
        (!extents.is_empty()
            && extents.len() <= MAX_DIMS
            && points.is_some_and(|n| (1..=MAX_POINTS).contains(&n)))
        .then(|| Domain {
            rect: Rect::from_shape(extents),
        })
    }

    pub fn dim(&self) -> usize {
        self.rect.dim()
    }

    /// Extent of launch dimension `k`.
    pub fn extent(&self, k: usize) -> usize {
        self.rect.extent(k)
    }

    pub fn extents(&self) -> Vec<usize> {
        self.rect.shape()
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.rect.volume()
    }

    /// The n-d point of linear (row-major) index `i`.
    pub fn point(&self, mut i: usize) -> [usize; MAX_DIMS] {
        let mut p = [0; MAX_DIMS];
        for d in (0..self.dim()).rev() {
            let e = self.rect.extent(d);
            p[d] = i % e;
            i /= e;
        }
        p
    }
}

/// An interned partition's id: equal ids mean equal partitions.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct PartitionId(pub(crate) u32);

/// A partition of one store view (bounds in the root store's coordinates).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Partition {
    /// Every point sees the whole view (replication).
    None { bounds: Rect },
    /// Affine tiles: point `p` gets `[proj(p) * tile, (proj(p) + 1) * tile) + offset`, clipped
    /// to `bounds`. `proj[d]` names the launch-domain dimension that drives store dimension
    /// `d`, or `None` for a dimension that is not split (its tile covers the whole extent).
    Tiling {
        tile: [usize; MAX_DIMS],
        proj: [Option<u8>; MAX_DIMS],
        offset: Rect,
        bounds: Rect,
        domain: Domain,
    },
    /// Tiles at boundaries the application chose (split points): store dimension `d`, driven
    /// by launch dimension `proj[d]`, gives point coordinate `c` the cells
    /// `[cuts[d][c], cuts[d][c+1])` past `offset`; undriven dimensions are whole. Clipped to
    /// `bounds`.
    Cuts {
        cuts: Arc<[Arc<[usize]>]>,
        proj: [Option<u8>; MAX_DIMS],
        offset: Rect,
        bounds: Rect,
        domain: Domain,
    },
    /// Data-dependent sub-stores computed from a source store's values; `key` says which source
    /// values, so that the same image is found again while the source is unchanged.
    Image {
        key: ImageKey,
        rects: Arc<[Rect]>,
        domain: Domain,
    },
}

/// What an image was computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ImageKey {
    pub src_root: u64,
    pub src_partition: PartitionId,
    pub src_version: u64,
    pub dst_bounds: Rect,
}

impl Partition {
    /// The sub-store of linear point `i` of `domain`, in root coordinates.
    pub(crate) fn substore(&self, domain: &Domain, i: usize) -> Rect {
        match self {
            Partition::None { bounds } => *bounds,
            Partition::Tiling {
                tile,
                proj,
                offset,
                bounds,
                ..
            } => {
                let p = domain.point(i);
                let mut lo = [0; MAX_DIMS];
                let mut hi = [0; MAX_DIMS];
                let n = bounds.dim();
                for d in 0..n {
                    let c = proj[d].map_or(0, |k| p[k as usize]);
                    lo[d] = offset.lo()[d] + c * tile[d];
                    hi[d] = lo[d] + tile[d];
                }
                Rect::new(&lo[..n], &hi[..n]).intersect(bounds)
            }
            Partition::Cuts {
                cuts,
                proj,
                offset,
                bounds,
                ..
            } => {
                let p = domain.point(i);
                let n = bounds.dim();
                let (mut lo, mut hi) = ([0; MAX_DIMS], [0; MAX_DIMS]);
                for d in 0..n {
                    (lo[d], hi[d]) = match proj[d] {
                        Some(k) => {
                            let c = p[k as usize];
                            (offset.lo()[d] + cuts[d][c], offset.lo()[d] + cuts[d][c + 1])
                        }
                        None => (bounds.lo()[d], bounds.hi()[d]),
                    };
                }
                Rect::new(&lo[..n], &hi[..n]).intersect(bounds)
            }
            Partition::Image { rects, .. } => rects[i],
        }
    }

    /// True when no two points of `domain` can share a cell, without looking at them.
    pub(crate) fn disjoint_by_construction(&self, domain: &Domain) -> bool {
        match self {
            Partition::None { .. } => domain.len() == 1,
            Partition::Tiling { proj, bounds, .. } | Partition::Cuts { proj, bounds, .. } => {
                // Disjoint when every launch dimension with more than one point splits some
                // store dimension: then distinct points get distinct tiles.
                (0..domain.dim()).all(|k| {
                    domain.extent(k) == 1 || (0..bounds.dim()).any(|d| proj[d] == Some(k as u8))
                })
            }
            Partition::Image { .. } => false,
        }
    }

    /// The bounds of the view this partition splits.
    pub(crate) fn bounds(&self) -> Rect {
        match self {
            Partition::None { bounds }
            | Partition::Tiling { bounds, .. }
            | Partition::Cuts { bounds, .. } => *bounds,
            Partition::Image { key, .. } => key.dst_bounds,
        }
    }
}

/// The table of every partition made so far. Interning is what gives constant-time equality.
#[derive(Default)]
pub(crate) struct Interner {
    ids: HashMap<Partition, PartitionId>,
    images: HashMap<ImageKey, PartitionId>,
    /// The newest image per source, source partition and destination view: when the source's
    /// values change, the image of the old values is dropped (its id is never handed out again,
    /// so equality by id stays sound) and memory stays bounded.
    latest_image: HashMap<(u64, PartitionId, Rect), ImageKey>,
    parts: Vec<Arc<Partition>>,
}

impl Interner {
    /// The id of `p`, and whether it was new.
    pub(crate) fn intern(&mut self, p: Partition) -> (PartitionId, bool) {
        if let Partition::Image { key, .. } = &p {
            if let Some(&id) = self.images.get(key) {
                return (id, false);
            }
        } else if let Some(&id) = self.ids.get(&p) {
            return (id, false);
        }
        let id = PartitionId(self.parts.len() as u32);
        self.parts.push(Arc::new(p.clone()));
        match p {
            Partition::Image { key, .. } => {
                let slot = (key.src_root, key.src_partition, key.dst_bounds);
                if let Some(old) = self.latest_image.insert(slot, key) {
                    if let Some(old_id) = self.images.remove(&old) {
                        self.parts[old_id.0 as usize] = Arc::new(Partition::None {
                            bounds: old.dst_bounds,
                        });
                    }
                }
                self.images.insert(key, id);
            }
            p => {
                self.ids.insert(p, id);
            }
        }
        (id, true)
    }

    /// The image already computed for `key`, if any.
    pub(crate) fn find_image(&self, key: &ImageKey) -> Option<PartitionId> {
        self.images.get(key).copied()
    }

    pub(crate) fn get(&self, id: PartitionId) -> &Arc<Partition> {
        &self.parts[id.0 as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiling(n: usize, tiles: usize, lo: usize) -> Partition {
        let bounds = Rect::new(&[lo], &[lo + n]);
        let mut tile = [0; MAX_DIMS];
        tile[0] = n.div_ceil(tiles);
        let mut proj = [None; MAX_DIMS];
        proj[0] = Some(0);
        Partition::Tiling {
            tile,
            proj,
            offset: bounds,
            bounds,
            domain: Domain::new(&[tiles]).unwrap(),
        }
    }

    #[test]
    fn tiles_cover_the_view_exactly_once() {
        for (n, t, lo) in [(10, 3, 0), (7, 7, 2), (3, 5, 1), (0, 2, 0)] {
            let p = tiling(n, t, lo);
            let d = Domain::new(&[t]).unwrap();
            let mut seen = vec![0; n];
            for i in 0..t {
                let r = p.substore(&d, i);
                for x in r.lo()[0]..r.hi()[0] {
                    seen[x - lo] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "n={n} t={t}: {seen:?}");
        }
    }

    #[test]
    fn images_of_old_source_values_are_dropped() {
        let mut i = Interner::default();
        let domain = Domain::new(&[1]).unwrap();
        let key = |v| ImageKey {
            src_root: 1,
            src_partition: PartitionId(0),
            src_version: v,
            dst_bounds: Rect::new(&[0], &[4]),
        };
        let img = |v| Partition::Image {
            key: key(v),
            rects: vec![Rect::new(&[0], &[v as usize])].into(),
            domain,
        };
        let (a, _) = i.intern(img(1));
        assert_eq!(i.find_image(&key(1)), Some(a));
        let (b, new) = i.intern(img(2));
        assert!(new && a != b);
        assert_eq!(i.find_image(&key(1)), None, "the old version is gone");
        assert_eq!(i.find_image(&key(2)), Some(b));
    }

    #[test]
    fn interning_gives_equal_ids_to_equal_partitions() {
        let mut i = Interner::default();
        let (a, new_a) = i.intern(tiling(10, 2, 0));
        let (b, new_b) = i.intern(tiling(10, 2, 0));
        let (c, _) = i.intern(tiling(10, 2, 1));
        assert!(new_a && !new_b);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
