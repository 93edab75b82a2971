//! How a tensor is cut into blocks: split points per mode, the block grid, mapping keys and
//! owners (SuperTaco §4.1/§4.5.2).
//!
//! Mode `m` over `[0, dim)` is cut at points `0 = p_0 <= p_1 <= ... <= p_N = dim` into `N`
//! ranges `[p_i, p_{i+1})` (empty ranges are allowed: they give empty blocks). A block is one
//! range per mode; its mapping key is the row-major index of its range indices over the
//! modes, and its owner rank is `key % ranks`, which spreads blocks evenly over ranks.

use super::IoError;
use std::ops::Range;

/// How one mode is split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModeSplit {
    /// `N` ranges of (nearly) equal length.
    Equal(usize),
    /// Explicit interior split points, non-decreasing, each at most the dimension.
    Points(Vec<usize>),
}

/// The split of every mode of a tensor (modes not named are not split).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitSpec {
    modes: Vec<(usize, ModeSplit)>,
}

impl SplitSpec {
    /// A split given mode by mode; a mode named twice is an error at [`SplitSpec::grid`].
    pub fn new(modes: Vec<(usize, ModeSplit)>) -> Self {
        SplitSpec { modes }
    }

    /// Parses `--blocks` text: `MODE:N[,MODE:N...]`, e.g. `0:4,1:2`.
    pub fn parse_blocks(text: &str) -> Result<Self, IoError> {
        let bad = |why: &str| IoError::SplitSyntax {
            text: text.into(),
            why: why.into(),
        };
        let mut modes = Vec::new();
        for part in text.split(',').filter(|p| !p.trim().is_empty()) {
            let (m, n) = part.split_once(':').ok_or_else(|| bad("expected MODE:N"))?;
            let mode = m
                .trim()
                .parse()
                .map_err(|_| bad("MODE must be a mode number"))?;
            let n: usize = n
                .trim()
                .parse()
                .map_err(|_| bad("N must be a positive integer"))?;
            if n == 0 {
                return Err(bad("N must be at least 1"));
            }
            modes.push((mode, ModeSplit::Equal(n)));
        }
        if modes.is_empty() {
            return Err(bad("expected at least one MODE:N"));
        }
        Ok(SplitSpec { modes })
    }

    /// Parses `--split-points` text: `MODE:P1/P2/...[,MODE:P1/...]`, e.g. `0:10/20,1:5`.
    pub fn parse_points(text: &str) -> Result<Self, IoError> {
        let bad = |why: &str| IoError::SplitSyntax {
            text: text.into(),
            why: why.into(),
        };
        let mut modes = Vec::new();
        for part in text.split(',').filter(|p| !p.trim().is_empty()) {
            let (m, ps) = part
                .split_once(':')
                .ok_or_else(|| bad("expected MODE:P1/P2/..."))?;
            let mode = m
                .trim()
                .parse()
                .map_err(|_| bad("MODE must be a mode number"))?;
            let points = ps
                .split('/')
                .map(|p| p.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| bad("split points must be non-negative integers"))?;
            modes.push((mode, ModeSplit::Points(points)));
        }
        if modes.is_empty() {
            return Err(bad("expected at least one MODE:P1/P2/..."));
        }
        Ok(SplitSpec { modes })
    }

    /// The block grid of this split over a tensor with dimensions `dims`.
    pub fn grid(&self, dims: &[usize]) -> Result<BlockGrid, IoError> {
        let mut bounds: Vec<Option<Vec<usize>>> = vec![None; dims.len()];
        for (mode, split) in &self.modes {
            let dim = *dims.get(*mode).ok_or(IoError::SplitMode {
                mode: *mode,
                rank: dims.len(),
            })?;
            if bounds[*mode].is_some() {
                return Err(IoError::SplitTwice { mode: *mode });
            }
            bounds[*mode] = Some(match split {
                ModeSplit::Equal(0) => {
                    return Err(IoError::SplitPoints {
                        mode: *mode,
                        why: "a mode splits into at least one range".into(),
                    })
                }
                ModeSplit::Equal(n) => (0..=*n)
                    .map(|i| (i as u128 * dim as u128 / *n as u128) as usize)
                    .collect(),
                ModeSplit::Points(points) => {
                    for w in points.windows(2) {
                        if w[1] < w[0] {
                            return Err(IoError::SplitPoints {
                                mode: *mode,
                                why: format!(
                                    "{} comes after {}: points must not decrease",
                                    w[1], w[0]
                                ),
                            });
                        }
                    }
                    if let Some(&p) = points.iter().find(|&&p| p > dim) {
                        return Err(IoError::SplitPoints {
                            mode: *mode,
                            why: format!("point {p} exceeds the dimension {dim}"),
                        });
                    }
                    std::iter::once(0)
                        .chain(points.iter().copied())
                        .chain(std::iter::once(dim))
                        .collect()
                }
            });
        }
        let bounds = bounds
            .into_iter()
            .zip(dims)
            .map(|(b, &d)| b.unwrap_or_else(|| vec![0, d]))
            .collect();
        BlockGrid::new(dims.to_vec(), bounds)
    }
}

/// The blocks of a split tensor: per mode the range boundaries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockGrid {
    dims: Vec<usize>,
    /// `bounds[m]` = `[0, p_1, ..., dim]`: `counts(m) + 1` boundaries.
    bounds: Vec<Vec<usize>>,
}

impl BlockGrid {
    /// A grid from explicit boundaries (each starting at 0, ending at the dimension).
    pub fn new(dims: Vec<usize>, bounds: Vec<Vec<usize>>) -> Result<Self, IoError> {
        if dims.is_empty() {
            return Err(IoError::Scalar);
        }
        for (m, b) in bounds.iter().enumerate() {
            let ok = b.len() >= 2
                && b[0] == 0
                && b.last() == Some(&dims[m])
                && b.windows(2).all(|w| w[0] <= w[1]);
            if !ok {
                return Err(IoError::SplitPoints {
                    mode: m,
                    why: format!("boundaries {b:?} do not cover [0, {})", dims[m]),
                });
            }
        }
        let grid = BlockGrid { dims, bounds };
        grid.block_count()?;
        Ok(grid)
    }

    /// Mode-space dimensions of the tensor.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Number of ranges of mode `m`.
    pub fn count(&self, m: usize) -> usize {
        self.bounds[m].len() - 1
    }

    /// Total number of blocks (the mapping key size).
    pub fn block_count(&self) -> Result<usize, IoError> {
        (0..self.dims.len())
            .try_fold(1usize, |acc, m| acc.checked_mul(self.count(m)))
            .ok_or(IoError::TooManyBlocks)
    }

    /// The range index of coordinate `c` of mode `m`: the `i` with `c` in `[p_i, p_{i+1})`
    /// (empty ranges are skipped).
    pub fn range_index(&self, m: usize, c: usize) -> usize {
        self.bounds[m].partition_point(|&p| p <= c) - 1
    }

    /// Range `i` of mode `m`.
    pub fn range(&self, m: usize, i: usize) -> Range<usize> {
        self.bounds[m][i]..self.bounds[m][i + 1]
    }

    /// Mapping key of block indices (row-major over modes).
    pub fn key(&self, index: &[usize]) -> usize {
        index
            .iter()
            .enumerate()
            .fold(0, |acc, (m, &i)| acc * self.count(m) + i)
    }

    /// Block indices of a mapping key (the inverse of [`BlockGrid::key`]).
    pub fn index(&self, mut key: usize) -> Vec<usize> {
        let mut index = vec![0; self.dims.len()];
        for m in (0..self.dims.len()).rev() {
            index[m] = key % self.count(m);
            key /= self.count(m);
        }
        index
    }

    /// The rank that owns block `key` in a job of `ranks` ranks.
    pub fn owner(key: usize, ranks: usize) -> usize {
        key % ranks.max(1)
    }

    /// Per mode: (range, range index, range count) of block `key`.
    pub fn block_ranges(&self, key: usize) -> Vec<BlockRange> {
        self.index(key)
            .into_iter()
            .enumerate()
            .map(|(m, i)| BlockRange {
                range: self.range(m, i),
                index: i,
                count: self.count(m),
            })
            .collect()
    }
}

/// One mode of a block: its coordinate range, its index among the mode's ranges, and the
/// number of ranges (the block metadata a `.tcs` block header records).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRange {
    pub range: Range<usize>,
    pub index: usize,
    pub count: usize,
}
