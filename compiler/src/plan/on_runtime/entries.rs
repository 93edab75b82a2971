//! A sparse output as the plan's launches leave it: per launch, the entries its points emitted
//! (coordinates and values, each point's piece in two unbound stores), not yet assembled.
//! Assembled whole on every rank ([`Entries::into_tensor`]) or on one rank
//! ([`Entries::gather_on`]); or, to be stored across ranks, as one block per rank
//! ([`Entries::own_block`]): the ranks own the output's first level in equal coordinate
//! ranges, each sends the entries its points made to their owners, and no rank holds more
//! than its range (issue 12 item 5: memory per rank is its share).
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
        Ok(interp::from_entries(
            self.reduce,
            self.dims,
            self.format,
            list,
        )?)
    }

    /// The whole output on rank `root` only (`None` on the others). Collective.
    pub(super) fn gather_on<V: PlanValue, I: PlanIndex>(
        self,
        rt: &Runtime,
        root: usize,
    ) -> Result<Option<Tensor<V, I>>, PlanRunError> {
        let mut list = Vec::new();
        for (c, v) in &self.pieces {
            // Both reads on every rank, in the same order: each is a collective.
            let (c, v) = (rt.read_on::<u64>(c, root)?, rt.read_on::<V>(v, root)?);
            if let (Some(c), Some(v)) = (c, v) {
                push_entries(&mut list, &c, &v, self.dims.len())?;
            }
        }
        if rt.rank() != root {
            return Ok(None);
        }
        let t = interp::from_entries(self.reduce, self.dims, self.format, list)?;
        Ok(Some(t))
    }

    /// This rank's block of the output, to be stored with the other ranks' blocks: the
    /// entries whose first-level coordinate lies in this rank's range ([`owned_range`]),
    /// folded as the whole output folds them. A block whose first level is dense covers its
    /// range only (empty rows included, so that the blocks cover the level); a compressed
    /// first level gives no block for a range without entries, except rank 0's block of an
    /// output without any (a file needs one block). Collective; an error on any rank is an
    /// error on every rank.
    pub(super) fn own_block<V: PlanValue, I: PlanIndex>(
        self,
        rt: &Runtime,
        comm: &(dyn Communicator + Send + Sync),
    ) -> Result<Option<Tensor<V, I>>, PlanRunError> {
        let ranks = comm.size();
        let first = self.format.mode_order()[0];
        let extent = self.dims[first];
        let outgoing = self.outgoing::<V>(rt, ranks, first, extent);
        super::output::agree(comm, &outgoing)?;
        let incoming = comm
            .all_to_all(outgoing?)
            .map_err(|e| PlanRunError::Store(e.into()))?;
        let received = (incoming.iter().enumerate())
            .map(|(from, msg)| decode::<V>(msg, self.dims.len(), from))
            .collect::<Result<Vec<_>, _>>();
        super::output::agree(comm, &received)?;
        let mut received: Vec<(Key, Vec<usize>, V)> = received?.into_iter().flatten().collect();
        received.sort_unstable_by_key(|e| e.0);
        let dense_first = self.format.levels()[0] == LevelType::Dense;
        let range = owned_range(comm.rank(), ranks, extent);
        let any = comm
            .all_sum(&[received.len() as u64])
            .map_err(|e| PlanRunError::Store(e.into()))?[0];
        let keep = if dense_first {
            !range.is_empty()
        } else {
            !received.is_empty() || (any == 0 && comm.rank() == 0)
        };
        if !keep {
            return Ok(None);
        }
        let list = received.into_iter().map(|(_, c, v)| (c, v)).collect();
        let block = if dense_first {
            dense_first_block(self.reduce, &self.dims, &self.format, first, range, list)
        } else {
            interp::from_entries(self.reduce, self.dims, self.format, list).map_err(Into::into)
        };
        Ok(Some(block?))
    }

    /// The entries this rank's points made, as one message per owner rank.
    fn outgoing<V: PlanValue>(
        &self,
        rt: &Runtime,
        ranks: usize,
        first: usize,
        extent: usize,
    ) -> Result<Vec<Vec<u8>>, PlanRunError> {
        let order = self.dims.len();
        let mut out: Vec<Outgoing<V>> = (0..ranks).map(|_| Outgoing::default()).collect();
        for (launch, (c, v)) in self.pieces.iter().enumerate() {
            let (coords, vals) = (rt.read_own::<u64>(c)?, rt.read_own::<V>(v)?);
            // A point's piece is held by the rank that ran it, in both stores: this rank's
            // parts of the two cover the same entries, in the same order.
            let coords: Vec<u64> = coords.into_iter().flat_map(|(_, c)| c).collect();
            let n: usize = vals.iter().map(|(r, _)| r.volume()).sum();
            if coords.len() != n * order {
                return Err(PlanRunError::Plan(format!(
                    "internal: this rank holds {} output coordinates for {n} values of launch \
                     {launch}",
                    coords.len()
                )));
            }
            let mut k = 0;
            for (rect, vals) in vals {
                for (at, x) in (rect.lo()[0]..).zip(vals) {
                    let c = &coords[k * order..(k + 1) * order];
                    let to = owner(c[first] as usize, ranks, extent);
                    out[to].push([launch as u64, at as u64], c, x);
                    k += 1;
                }
            }
        }
        Ok(out.into_iter().map(Outgoing::encode).collect())
    }
}

/// The coordinates of the output's first level that rank `rank` of `ranks` owns: equal
/// consecutive ranges (the inverse of [`owner`]).
fn owned_range(rank: usize, ranks: usize, extent: usize) -> Range<usize> {
    let start = |r: usize| (r * extent).div_ceil(ranks);
    start(rank)..start(rank + 1)
}

/// The rank owning first-level coordinate `c` of `extent`.
fn owner(c: usize, ranks: usize, extent: usize) -> usize {
    (c as u128 * ranks as u128 / extent as u128) as usize
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
        let at = coords[e * order..(e + 1) * order]
            .iter()
            .map(|&c| c as usize);
        list.push((at.collect(), x));
    }
    Ok(())
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
            let c = coords[e * order..(e + 1) * order].iter();
            (
                [keys[2 * e], keys[2 * e + 1]],
                c.map(|&c| c as usize).collect(),
                vals[e],
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_and_owned_ranges_agree_and_cover_the_level() {
        for extent in [1usize, 2, 3, 7, 100, 101] {
            for ranks in 1..=5 {
                let mut next = 0;
                for r in 0..ranks {
                    let range = owned_range(r, ranks, extent);
                    assert_eq!(range.start, next, "extent {extent}, {ranks} ranks");
                    for c in range.clone() {
                        assert_eq!(owner(c, ranks, extent), r, "{c} of {extent}, {ranks}");
                    }
                    next = range.end;
                }
                assert_eq!(next, extent);
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
