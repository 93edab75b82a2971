//! A section of a level tree: leaves `[start, end)` with exactly the parts of the `pos`, `crd`
//! and `vals` arrays that walking them touches, indexed by positions in the whole tree. Ranks
//! exchange sections when storing (SuperTaco §4.6.1) and read their own from a file when
//! loading (§4.4).

use super::walk::{Level, Tree, Walk};
use tessera_formats::{Index, Value};

/// A received section of one block: leaves `[start, end)` with the array parts they need,
/// indexed by their positions in the whole block.
pub(crate) struct Section<V, I> {
    pub first: Vec<usize>,
    pub start: usize,
    pub end: usize,
    pub dense: Vec<Option<(usize, usize)>>,
    pub pos_base: Vec<usize>,
    pub crd_base: Vec<usize>,
    pub pos: Vec<Vec<I>>,
    pub crd: Vec<Vec<I>>,
    pub vals: Vec<V>,
}

impl<V, I> Section<V, I> {
    /// Bytes its array parts hold.
    pub fn bytes(&self) -> usize {
        let index: usize = self.pos.iter().chain(&self.crd).map(Vec::len).sum();
        index * std::mem::size_of::<I>() + self.vals.len() * std::mem::size_of::<V>()
    }
}

impl<V: Value, I: Index> Section<V, I> {
    /// Checks what walking leaves `[start, end)` from path `first` relies on, so that a
    /// corrupt file gives an error rather than a wrong walk or an out-of-bounds index: every
    /// `pos` part non-decreasing and ending past the section's last node, every `crd` part
    /// inside the range `bound[k]` of its level (the dimension, or a block's split range).
    pub fn check(&self, bound: &[std::ops::Range<usize>]) -> Result<(), String> {
        if self.start >= self.end {
            return Ok(());
        }
        for (k, (dense, bound)) in self.dense.iter().zip(bound).enumerate() {
            if dense.is_some() {
                continue;
            }
            let (pos, crd) = (&self.pos[k], &self.crd[k]);
            if pos.windows(2).any(|w| w[1] < w[0]) {
                return Err(format!("pos of level {k} decreases"));
            }
            let last_node = self.crd_base[k] + crd.len();
            if crd.is_empty() || pos.last().map(|p| p.to_usize()) < Some(last_node) {
                return Err(format!("pos of level {k} does not cover its coordinates"));
            }
            if let Some(c) = crd.iter().find(|c| !bound.contains(&c.to_usize())) {
                return Err(format!(
                    "crd of level {k} holds {c}, outside the dimension (or the block's split range) {bound:?}"
                ));
            }
        }
        if self.vals.len() != self.end - self.start {
            return Err("vals part has the wrong length".into());
        }
        Ok(())
    }
}

impl<V: Value, I: Index> Tree for Section<V, I> {
    type V = V;
    #[inline]
    fn rank(&self) -> usize {
        self.dense.len()
    }
    #[inline]
    fn dense(&self, k: usize) -> Option<(usize, usize)> {
        self.dense[k]
    }
    #[inline]
    fn pos(&self, k: usize, q: usize) -> usize {
        self.pos[k][q - self.pos_base[k]].to_usize()
    }
    #[inline]
    fn crd(&self, k: usize, i: usize) -> usize {
        self.crd[k][i - self.crd_base[k]].to_usize()
    }
}

impl<V: Value, I: Index> Walk for Section<V, I> {
    type I = I;
    fn level(&self, k: usize) -> Level<'_, I> {
        match self.dense[k] {
            Some((size, offset)) => Level::Dense { size, offset },
            None => Level::Compressed {
                pos: &self.pos[k],
                pos_base: self.pos_base[k],
                crd: &self.crd[k],
                crd_base: self.crd_base[k],
            },
        }
    }
    fn vals(&self) -> (&[V], usize) {
        (&self.vals, self.start)
    }
}
