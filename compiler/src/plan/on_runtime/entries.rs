//! A sparse output as the plan's launches leave it: per launch, the entries its points emitted
//! (coordinates and values, each point's piece in two unbound stores), not yet assembled.
//! Assembled whole on every rank ([`Entries::into_tensor`]) or on one rank
//! ([`Entries::gather_on`]); or, to be stored across ranks, as one block per rank
//! ([`Entries::own_block`]): the ranks own the output's first level in consecutive coordinate
//! ranges holding about equal numbers of entries ([`Split`]), each sends the entries its points
//! made to their owners, and no rank holds more than its range (issue 12 item 5: memory per
//! rank is its share).
//!
//! Entries are folded in one order at any rank count: launch by launch, and within a launch
//! in the order of its store (point by point). An owner sorts what it receives by that key
//! before assembling, and assembly folds duplicates in list order (a stable sort), so a block
//! holds, bit for bit, what the whole output holds in its range.

use super::{PlanIndex, PlanRunError, PlanValue};
use crate::ast::ReduceOp;
use crate::interp;
use std::ops::Range;
use tessera_formats::{Format, Level, LevelType, Tensor};
use tessera_runtime::transport::Communicator;
use tessera_runtime::{Runtime, Store};

/// Per launch, the unbound stores of its entries: coordinates (`u64`, the output's order in
/// mode space per entry) and values.
pub(super) struct Entries {
    pub(super) pieces: Vec<(Store, Store)>,
    pub(super) reduce: ReduceOp,
    pub(super) dims: Vec<usize>,
    pub(super) format: Format,
}

/// An entry's place in the one-process order: (launch, index in the launch's stores).
type Key = [u64; 2];

/// Where the file is cut between the ranks' blocks: one level-order coordinate per rank after
/// the first (`io::store_file_cut`).
pub(super) type Cuts = Vec<Vec<usize>>;

impl Entries {
    /// The whole output, on every rank (each gathers every piece).
    pub(super) fn into_tensor<V: PlanValue, I: PlanIndex>(
        self,
        rt: &Runtime,
    ) -> Result<Tensor<V, I>, PlanRunError> {
        let mut list = Vec::new();
        for (c, v) in self.pieces {
            let (c, v) = (rt.take::<u64>(c)?, rt.take::<V>(v)?);
            push_entries(&mut list, &c, &v, self.dims.len())?;
        }
        let t = interp::from_entries(self.reduce, self.dims, self.format, list)?;
        Ok(t)
    }

    /// The whole output on rank `root` only (`None` on the others). Collective: every rank
    /// reads every piece, whatever failed before, and returns the first error.
    pub(super) fn gather_on<V: PlanValue, I: PlanIndex>(
        self,
        rt: &Runtime,
        root: usize,
    ) -> Result<Option<Tensor<V, I>>, PlanRunError> {
        let mut list = Vec::new();
        let mut first: Result<(), PlanRunError> = Ok(());
        for (c, v) in &self.pieces {
            let (c, v) = (rt.read_on::<u64>(c, root), rt.read_on::<V>(v, root));
            let got = match (c, v) {
                (Ok(Some(c)), Ok(Some(v))) => push_entries(&mut list, &c, &v, self.dims.len()),
                (Ok(_), Ok(_)) => Ok(()),
                (Err(e), _) | (_, Err(e)) => Err(e.into()),
            };
            first = first.and(got);
        }
        first?;
        if rt.rank() != root {
            return Ok(None);
        }
        let t = interp::from_entries(self.reduce, self.dims, self.format, list)?;
        Ok(Some(t))
    }

    /// This rank's block of the output, to be stored with the other ranks' blocks, and the
    /// cuts between the ranks' blocks (level-order coordinates, one per rank after the first,
    /// for `io::store_file_cut`: the blocks are written where they are, in balance). The block
    /// holds the entries whose first-level coordinate lies in this rank's range ([`Split`]),
    /// folded as the whole output folds them. A block whose first level is dense covers its
    /// range only (empty rows included, so that the blocks cover the level); a compressed
    /// first level gives no block for a range without entries, except rank 0's block of an
    /// output without any (a file needs one block). Collective; an error before the blocks
    /// are assembled is an error on every rank (the caller agrees on the blocks).
    pub(super) fn own_block<V: PlanValue, I: PlanIndex>(
        self,
        rt: &Runtime,
        comm: &(dyn Communicator + Send + Sync),
    ) -> Result<(Option<Tensor<V, I>>, Cuts), PlanRunError> {
        let Entries {
            pieces,
            reduce,
            dims,
            format,
        } = self;
        let (order, first) = (dims.len(), format.mode_order()[0]);
        let mine = made_here::<V>(rt, &pieces, order, first, dims[first]);
        // The pieces are in `mine` now: this rank holds its entries once.
        drop(pieces);
        super::output::agree(comm, &mine)?;
        let mine = mine?;
        let split = Split::balanced(comm, &mine.coords, order, first, dims[first])?;
        let incoming = comm
            .all_to_all(mine.route(&split, order, first))
            .map_err(|e| PlanRunError::Store(e.into()))?;
        let received = (incoming.iter().enumerate())
            .map(|(from, msg)| decode::<V>(msg, order, from))
            .collect::<Result<Vec<_>, _>>();
        super::output::agree(comm, &received)?;
        let mut received: Vec<(Key, Vec<usize>, V)> = received?.into_iter().flatten().collect();
        received.sort_unstable_by_key(|e| e.0);
        let cuts = (1..comm.size())
            .map(|r| {
                let mut at = vec![0; order];
                at[0] = split.range(r).start;
                at
            })
            .collect();
        let range = split.range(comm.rank());
        let dense_first = format.levels()[0] == LevelType::Dense;
        let keep = if dense_first {
            !range.is_empty()
        } else {
            !received.is_empty() || (split.total == 0 && comm.rank() == 0)
        };
        if !keep {
            return Ok((None, cuts));
        }
        let list = received.into_iter().map(|(_, c, v)| (c, v)).collect();
        let block = if dense_first {
            dense_first_block(reduce, &dims, &format, first, range, list)?
        } else {
            interp::from_entries(reduce, dims, format, list)?
        };
        Ok((Some(block), cuts))
    }
}

/// The entries the points of this rank made (`pieces`: per launch, coordinates and values),
/// with their one-process order keys; an error for a first-level coordinate (mode `first`)
/// past `extent`, which only a faulty kernel makes.
fn made_here<V: PlanValue>(
    rt: &Runtime,
    pieces: &[(Store, Store)],
    order: usize,
    first: usize,
    extent: usize,
) -> Result<Outgoing<V>, PlanRunError> {
    let internal = |what: String| PlanRunError::Plan(format!("internal: {what}"));
    let mut mine = Outgoing::default();
    for (launch, (c, v)) in pieces.iter().enumerate() {
        let (coords, vals) = (rt.read_own::<u64>(c)?, rt.read_own::<V>(v)?);
        // A point's piece is held by the rank that ran it, in both stores: this rank's parts
        // of the two cover the same entries, in the same order.
        let coords: Vec<u64> = coords.into_iter().flat_map(|(_, c)| c).collect();
        let n: usize = vals.iter().map(|(r, _)| r.volume()).sum();
        if coords.len() != n * order {
            return Err(internal(format!(
                "this rank holds {} output coordinates for {n} values of launch {launch}",
                coords.len()
            )));
        }
        let mut k = 0;
        for (rect, vals) in vals {
            for (at, x) in (rect.lo()[0]..).zip(vals) {
                let c = &coords[k * order..(k + 1) * order];
                if c[first] as usize >= extent {
                    return Err(internal(format!(
                        "an output entry at {c:?} lies outside the output's {extent} along its \
                         first level"
                    )));
                }
                mine.push([launch as u64, at as u64], c, x);
                k += 1;
            }
        }
    }
    Ok(mine)
}

/// Most buckets of first-level coordinates the ranks count their entries in to split the
/// level.
const BUCKETS: usize = 4096;

/// The ranks' shares of the output's first level: consecutive ranges of coordinates, cut
/// between buckets so that each rank gets about as many entries as the others (a power-law
/// matrix's heavy rows do not all land on one rank). The same on every rank: it is made from
/// the ranks' summed counts.
struct Split {
    extent: usize,
    buckets: usize,
    /// Per rank, its first bucket; then `buckets`.
    starts: Vec<usize>,
    /// Entries in the whole output.
    total: u64,
}

impl Split {
    /// Counts this rank's entries (`coords`, `order` per entry) per bucket of mode `first`,
    /// sums the counts over the ranks and cuts. Collective.
    fn balanced(
        comm: &(dyn Communicator + Send + Sync),
        coords: &[u64],
        order: usize,
        first: usize,
        extent: usize,
    ) -> Result<Split, PlanRunError> {
        let buckets = extent.clamp(1, BUCKETS);
        let mut counts = vec![0u64; buckets];
        for c in coords.chunks_exact(order) {
            counts[bucket(c[first] as usize, buckets, extent)] += 1;
        }
        let counts = comm
            .all_sum(&counts)
            .map_err(|e| PlanRunError::Store(e.into()))?;
        Ok(Split::cut(&counts, comm.size(), extent))
    }

    /// Cuts `counts` (entries per bucket, summed) into `ranks` consecutive ranges of about
    /// equal weight; with no entries at all, of equal numbers of buckets.
    fn cut(counts: &[u64], ranks: usize, extent: usize) -> Split {
        let total: u64 = counts.iter().sum();
        let weight = |n: u64| if total == 0 { 1 } else { n };
        let all = counts.iter().map(|&n| weight(n) as u128).sum::<u128>();
        let mut starts = vec![0; ranks + 1];
        let (mut before, mut b) = (0u128, 0);
        for (r, start) in starts.iter_mut().enumerate().skip(1) {
            // The first bucket with at least r / ranks of the weight before it.
            while b < counts.len() && before * (ranks as u128) < r as u128 * all {
                before += weight(counts[b]) as u128;
                b += 1;
            }
            *start = b;
        }
        starts[ranks] = counts.len();
        Split {
            extent,
            buckets: counts.len(),
            starts,
            total,
        }
    }

    /// The rank owning first-level coordinate `c`.
    fn owner(&self, c: usize) -> usize {
        let b = bucket(c, self.buckets, self.extent);
        self.starts.partition_point(|&s| s <= b) - 1
    }

    /// The coordinates rank `rank` owns.
    fn range(&self, rank: usize) -> Range<usize> {
        // Bucket `b` begins at the first coordinate `c` with `c · buckets ≥ b · extent`.
        let at =
            |b: usize| (b as u128 * self.extent as u128).div_ceil(self.buckets as u128) as usize;
        at(self.starts[rank])..at(self.starts[rank + 1])
    }
}

/// The bucket of coordinate `c` of `extent` split into `buckets`.
fn bucket(c: usize, buckets: usize, extent: usize) -> usize {
    (c as u128 * buckets as u128 / extent as u128) as usize
}

/// Appends the entries of one launch's coordinates (`order` per entry) and values.
fn push_entries<V: Copy>(
    list: &mut Vec<(Vec<usize>, V)>,
    coords: &[u64],
    vals: &[V],
    order: usize,
) -> Result<(), PlanRunError> {
    if coords.len() != vals.len() * order {
        return Err(PlanRunError::Plan(format!(
            "internal: {} output coordinates for {} values",
            coords.len(),
            vals.len()
        )));
    }
    for (e, &x) in vals.iter().enumerate() {
        list.push((entry_coords(coords, e, order), x));
    }
    Ok(())
}

/// Entry `e`'s coordinates from a flat array of `order` per entry.
fn entry_coords(flat: &[u64], e: usize, order: usize) -> Vec<usize> {
    flat[e * order..(e + 1) * order]
        .iter()
        .map(|&c| c as usize)
        .collect()
}

/// The block of the entries in `range` of a dense first level (mode `first`): assembled over
/// the range alone, then placed at its offset.
fn dense_first_block<V: PlanValue, I: PlanIndex>(
    reduce: ReduceOp,
    dims: &[usize],
    format: &Format,
    first: usize,
    range: Range<usize>,
    mut list: Vec<(Vec<usize>, V)>,
) -> Result<Tensor<V, I>, PlanRunError> {
    for (c, _) in &mut list {
        c[first] -= range.start;
    }
    let mut local = dims.to_vec();
    local[first] = range.len();
    let t = interp::from_entries::<V, I>(reduce, local, format.clone(), list)?;
    let (_, format, mut levels, vals) = t.into_parts();
    levels[0] = Level::Dense {
        size: range.len(),
        offset: range.start,
    };
    Ok(Tensor::from_parts(dims.to_vec(), format, levels, vals)?)
}

/// Entries bound for one rank: keys, coordinates and values, each in one array.
struct Outgoing<V> {
    keys: Vec<u64>,
    coords: Vec<u64>,
    vals: Vec<V>,
}

impl<V> Default for Outgoing<V> {
    fn default() -> Self {
        Outgoing {
            keys: Vec::new(),
            coords: Vec::new(),
            vals: Vec::new(),
        }
    }
}

impl<V: PlanValue> Outgoing<V> {
    fn push(&mut self, key: Key, coords: &[u64], x: V) {
        self.keys.extend(key);
        self.coords.extend_from_slice(coords);
        self.vals.push(x);
    }

    /// The entries (`order` coordinates each) as one message per owner rank of their
    /// first-level coordinate (mode `first`), in this rank's order.
    fn route(self, split: &Split, order: usize, first: usize) -> Vec<Vec<u8>> {
        let mut out: Vec<Outgoing<V>> = (0..split.starts.len() - 1)
            .map(|_| Outgoing::default())
            .collect();
        for (e, &x) in self.vals.iter().enumerate() {
            let c = &self.coords[e * order..(e + 1) * order];
            let key = [self.keys[2 * e], self.keys[2 * e + 1]];
            out[split.owner(c[first] as usize)].push(key, c, x);
        }
        out.into_iter().map(Outgoing::encode).collect()
    }

    /// `[entries: u64][keys][coords][vals]`, little-endian as the machine's (ranks of one job
    /// run one binary).
    fn encode(self) -> Vec<u8> {
        let n = self.vals.len() as u64;
        let mut msg = n.to_ne_bytes().to_vec();
        msg.extend_from_slice(bytemuck::cast_slice(&self.keys));
        msg.extend_from_slice(bytemuck::cast_slice(&self.coords));
        msg.extend_from_slice(bytemuck::cast_slice(&self.vals));
        msg
    }
}

/// The entries of one rank's message ([`Outgoing::encode`]), checked against its length.
fn decode<V: PlanValue>(
    msg: &[u8],
    order: usize,
    from: usize,
) -> Result<Vec<(Key, Vec<usize>, V)>, PlanRunError> {
    let bad = || {
        PlanRunError::Plan(format!(
            "internal: a malformed message of output entries from rank {from}"
        ))
    };
    let (head, rest) = msg.split_at_checked(8).ok_or_else(bad)?;
    let n = u64::from_ne_bytes(head.try_into().expect("8 bytes")) as usize;
    let sizes = [16 * n, 8 * order * n, std::mem::size_of::<V>() * n];
    if rest.len() != sizes.iter().sum::<usize>() {
        return Err(bad());
    }
    let (keys, rest) = rest.split_at(sizes[0]);
    let (coords, vals) = rest.split_at(sizes[1]);
    // Copies: the message's bytes are not aligned for `u64`.
    let keys: Vec<u64> = bytemuck::pod_collect_to_vec(keys);
    let coords: Vec<u64> = bytemuck::pod_collect_to_vec(coords);
    let vals: Vec<V> = bytemuck::pod_collect_to_vec(vals);
    Ok((0..n)
        .map(|e| {
            let key = [keys[2 * e], keys[2 * e + 1]];
            (key, entry_coords(&coords, e, order), vals[e])
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranks' ranges are consecutive and cover the level, each coordinate's owner is the
    /// rank whose range holds it, and every rank's entries are at most an equal share plus
    /// one bucket's (with no entries, equal numbers of buckets).
    #[test]
    fn splits_cover_the_level_agree_with_owners_and_balance_the_entries() {
        let mut state = 7u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for extent in [1usize, 2, 3, 7, 100, 101, 5000, 9001] {
            let buckets = extent.clamp(1, BUCKETS);
            for skew in [0u32, 1, 3] {
                // Heavy first coordinates under skew (a power law's sorted rows), none at all
                // under skew 0 half the time.
                let counts: Vec<u64> = (0..buckets)
                    .map(|b| match skew {
                        0 => 0,
                        s => next() % (1 + (4096 >> (s * (b * 12 / buckets) as u32).min(12))),
                    })
                    .collect();
                for ranks in 1..=5 {
                    let split = Split::cut(&counts, ranks, extent);
                    let total: u64 = counts.iter().sum();
                    let heaviest = *counts.iter().max().unwrap();
                    let mut at = 0;
                    for r in 0..ranks {
                        let range = split.range(r);
                        assert_eq!(range.start, at, "extent {extent}, {ranks} ranks");
                        for c in range.clone() {
                            assert_eq!(split.owner(c), r, "{c} of {extent}, {ranks} ranks");
                        }
                        at = range.end;
                        let share: u64 = counts[split.starts[r]..split.starts[r + 1]].iter().sum();
                        assert!(
                            share <= total / ranks as u64 + heaviest + 1,
                            "rank {r} of {ranks}: {share} of {total}"
                        );
                        if total == 0 {
                            let n = split.starts[r + 1] - split.starts[r];
                            assert!(n.abs_diff(buckets / ranks) <= 1, "{n} of {buckets}");
                        }
                    }
                    assert_eq!(at, extent);
                }
            }
        }
    }

    #[test]
    fn messages_round_trip_and_damaged_ones_are_refused() {
        let mut out = Outgoing::<f64>::default();
        out.push([0, 5], &[3, 4], 1.5);
        out.push([2, 0], &[0, 9], -2.0);
        let msg = out.encode();
        let got = decode::<f64>(&msg, 2, 1).unwrap();
        assert_eq!(
            got,
            vec![([0, 5], vec![3, 4], 1.5), ([2, 0], vec![0, 9], -2.0)]
        );
        assert!(decode::<f64>(&msg[..msg.len() - 1], 2, 1).is_err());
        assert!(decode::<f64>(&msg[..4], 2, 1).is_err());
        assert!(decode::<f64>(&Outgoing::<f64>::default().encode(), 2, 1)
            .unwrap()
            .is_empty());
    }
}
