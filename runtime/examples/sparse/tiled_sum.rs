//! A reduction into a tiled store, for checks across ranks: points (i, j) of a 2 × 4 launch
//! reduce weighed elements of tile j of `s` into tile i of `acc` (3 cells a tile), and each
//! returns its weights' sum as the task's future.

use tessera_runtime::{Cut, ReduceOp, Result, Runtime};

/// Cells in a tile of `acc`.
pub const CELLS: usize = 3;

/// Points of the launch whose tile of `acc` another rank owns send their buffers: the bytes
/// rank `me` of `ranks` sends (block sharding of the 8 points; a tile's owner is the rank of
/// its first point).
pub fn bytes_sent_by(me: usize, ranks: usize) -> u64 {
    let owner = |p: usize| p * ranks / 8;
    let sending = (0..8).filter(|&p| owner(p) == me && owner(4 * (p / 4)) != me);
    (sending.count() * CELLS * 8) as u64
}

/// Runs the reduction on `rt`: the future's bits, `acc`'s bits, and the bytes this rank sent
/// for it (store elements, counted once its points have run).
pub fn run(rt: &Runtime) -> Result<(u64, Vec<u64>, u64)> {
    rt.register("weighed", |ctx| {
        let s = ctx.read::<f64>(0);
        let mut acc = ctx.reduce::<f64>(1);
        let (i, lo) = (ctx.point()[0], acc.range().start);
        let mut total = 0.0;
        for k in s.range() {
            let w = s.at(k) / (1.0 + (i + k) as f64);
            acc.reduce_at(lo + k % CELLS, w);
            total += w;
        }
        ctx.set_result(total);
    })?;
    let s = rt.from_vec(&[400], (0..400).map(|i| 1.0 / (3.0 + i as f64)).collect())?;
    // A value before the fold: the folding rank needs the latest one.
    let acc = rt.from_vec(&[2 * CELLS], (0..2 * CELLS).map(|c| c as f64).collect())?;
    let before = rt.stats();
    let f = rt
        .task("weighed")
        .read(&s)
        .tile(&s, &[Cut::Equal(1)])
        .reduce(&acc, ReduceOp::Sum)
        .tile(&acc, &[Cut::Equal(0)])
        .launch_domain(&[2, 4])
        .submit_reduce(ReduceOp::Sum)?;
    let total = f.get()?.as_f64().to_bits();
    rt.fence()?;
    let sent = rt.stats().since(&before).bytes_sent;
    let bits = rt.read::<f64>(&acc)?.iter().map(|x| x.to_bits()).collect();
    Ok((total, bits, sent))
}
