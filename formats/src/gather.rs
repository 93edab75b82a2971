//! Software prefetch for a generated kernel's indirect gathers: SpMV's `x(j)` read at each
//! nonzero's column `j = crd[p]`, TTV's `c(k)`.
//!
//! Such a loop streams its coordinates and values, which the hardware prefetcher follows, but
//! reads the gathered vector at addresses it cannot predict: when the vector is larger than
//! the caches and the coordinates jump about, nearly every `x[crd[p]]` misses, and the loop
//! runs at the latency of those misses however far out of order the core looks. The
//! coordinates that will be gathered are already in memory, though, so the loop can ask for
//! `x[crd[p + AHEAD]]` while it computes with `x[crd[p]]` (indirect prefetching, Ainsworth &
//! Jones, CGO 2017). Measured on the bench VM (Zen 4, SpMV of a 2 M x 2 M matrix with 16
//! nonzeros a row, 1 thread, scratch program, best of 7): uniform columns 1.26-1.38x, power-law
//! 1.35-1.45x faster; at 32 and 128 ahead within a few percent of 64, at 16 slower than none.
//!
//! The look-ahead read `crd[p + AHEAD]` is itself a load the hint waits for, so the loop also
//! asks for the coordinates' line `AHEAD` further on ([`prefetch_past`]), as Ainsworth & Jones
//! stagger theirs. Without it, the hint stalled wherever the hardware prefetcher had not yet
//! reached `crd[p + AHEAD]`, most with 8-byte coordinates, whose stream runs twice as fast in
//! bytes: on the Zen 5 bench VM, SpMV with `u64` coordinates at 2 threads went from 0.75-0.81x
//! the hand loop (slower than not prefetching at all) to 1.02-1.15x (`kernels` bench).
//!
//! Where the gathers stay near each other (a banded matrix: the next rows' columns are this
//! row's), the hardware already has the lines, and the extra load and hint per nonzero cost
//! ~10 % of a loop that is then bound by its instructions. So kernels decide once per call,
//! with [`decide`], which of three copies of the loop to run (a prefetch never changes a
//! result: every copy computes the same operations in the same order):
//! - [`Prefetch::Ahead`]: the look-ahead loop above.
//! - [`Prefetch::Stream`]: the gathered tensor is larger than level 1 but the gathers hit the
//!   caches. Then the loop's own streams fall behind: the hardware prefetcher does not keep
//!   the coordinates and values coming while the gathers keep level 1 busy, and asking for
//!   them [`STREAM`] positions on ([`prefetch_stream`]) pays. Measured on the Zen 5 bench VM
//!   (scratch program: rows of 1-31, 1-63 and power-law many nonzeros, `u32` coordinates,
//!   a vector of 8 Ki-1 Mi `f64`, 15 interleaved runs, also two processes at once): 1.15-1.55x
//!   faster than the plain loop (1.98x with rows of 32 on average, 1.05-1.09x with rows of
//!   4-7); at 256 positions on about the same. Not in the look-ahead loop: with gathers that
//!   miss every cache the extra requests compete with the gathers' (1.45x *slower*).
//! - [`Prefetch::Plain`]: the plain loop, as a hand-written loop would be. With a vector that
//!   fits level 1 (up to 32 KiB measured) the stream hints cost 8-25 %. With gathers near each
//!   other in a vector larger than the caches (banded SpMV, `kernels` bench, 2 M rows) they
//!   gained 5 % with `u32` coordinates and lost 5 % with `u64` ones, so those run plain too;
//!   into a cached vector (200 k rows) they gained 2-17 % in 7 runs of 8, so those stream.
//!
//! `TESSERA_PREFETCH=0` never prefetches, `TESSERA_PREFETCH=always` always runs the
//! look-ahead loops and `TESSERA_PREFETCH=stream` the streaming ones (on inputs of any size:
//! tests use them to run those loops on small tensors); unset or anything else, [`decide`]
//! decides. Read once per process.

use std::sync::OnceLock;

use crate::Index;

/// How many positions ahead a gather loop asks for the vector's line.
pub const AHEAD: usize = 64;

/// A gathered tensor of at most this many bytes is taken to stay in the caches: a third of the
/// last-level cache ([`crate::caches::last_level`]). Measured on the bench VM (Zen 4, 32 MiB
/// L3, SpMV of 16 uniform or power-law columns a row, scratch program, the look-ahead loop's
/// time over the plain loop's): `x` of 2 and 4 MiB 1.15-1.3 (gathers that hit L2 or L3 gain
/// nothing from the hint and pay its load and instruction), 8 MiB 0.8-1.15, 12 MiB 0.6-0.8
/// (one 2-thread run 1.06), 16 MiB 0.7-0.85.
fn cached_bytes() -> usize {
    crate::caches::last_level() / 3
}

/// Two gathers at most this many bytes apart are near: the lines between them are likely
/// cached or already streamed in by the hardware.
const NEAR_BYTES: usize = 32 << 10;

/// The most lines [`prefetch_row`] asks for (512 bytes: a row of 64 `f64`).
const ROW_LINES: usize = 8;

/// Coordinates sampled by [`decide`].
const SAMPLES: usize = 64;

/// Which copy of a gather loop a kernel runs (see the module's documentation), ordered: a nest
/// with several gathers runs the greatest any of them asks for ([`combine`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Prefetch {
    /// The plain loop: the gathered tensor fits in level 1, or it is larger than the caches
    /// and the gathers stay near each other, or prefetching is off.
    Plain,
    /// The loop that asks for its own coordinates and values [`STREAM`] positions on: the
    /// tensor is beyond level 1 and the caches hold it.
    Stream,
    /// The look-ahead loop: the gathers lie far apart in a tensor larger than the caches.
    Ahead,
}

/// The copy for a gather loop over the coordinates `crd` (one level's whole array) into a
/// tensor of `len` slices of `value_bytes` bytes each (values of a vector, rows of a matrix):
/// plain if the tensor fits in level 1, streaming if it fits in a third of the last-level
/// cache, else look-ahead where at more than half of `SAMPLES` evenly spaced positions `p` the
/// gathers at `p` and `p + AHEAD` lie more than `NEAR_BYTES` apart, and plain where they stay
/// near each other (a banded matrix, whose gathers the hardware streams in with everything
/// else). O(SAMPLES) reads, whatever the size.
pub fn decide<I: Index>(crd: &[I], len: usize, value_bytes: usize) -> Prefetch {
    match setting() {
        Setting::Never => Prefetch::Plain,
        Setting::Always => Prefetch::Ahead,
        Setting::Stream => Prefetch::Stream,
        Setting::Auto => {
            let caches = (crate::caches::l1_data(), cached_bytes());
            measure(crd, len, value_bytes, caches)
        }
    }
}

/// The copy a nest with these gathers runs: the greatest one asks for (look-ahead before
/// streaming before plain; plain for none).
pub fn combine(decided: &[Prefetch]) -> Prefetch {
    decided.iter().copied().max().unwrap_or(Prefetch::Plain)
}

/// [`decide`]'s measurement, whatever the environment says, for a level 1 of `l1` bytes and
/// caches holding `cached`.
fn measure<I: Index>(
    crd: &[I],
    len: usize,
    value_bytes: usize,
    (l1, cached): (usize, usize),
) -> Prefetch {
    let bytes = len.saturating_mul(value_bytes);
    if bytes <= l1 {
        Prefetch::Plain
    } else if bytes <= cached {
        Prefetch::Stream
    } else if apart(crd, value_bytes) {
        Prefetch::Ahead
    } else {
        Prefetch::Plain
    }
}

/// Whether the gathers at most of `SAMPLES` evenly spaced positions `p` and `p + AHEAD` lie
/// more than `NEAR_BYTES` apart (never for `AHEAD` coordinates or fewer).
fn apart<I: Index>(crd: &[I], value_bytes: usize) -> bool {
    if crd.len() <= AHEAD {
        return false;
    }
    let span = (crd.len() - AHEAD) as u128;
    let apart = (0..SAMPLES)
        .filter(|k| {
            let p = (*k as u128 * span / SAMPLES as u128) as usize;
            let gap = crd[p].to_usize().abs_diff(crd[p + AHEAD].to_usize());
            gap.saturating_mul(value_bytes) > NEAR_BYTES
        })
        .count();
    apart * 2 > SAMPLES
}

/// Asks for the line of `vals[i]` (see [`crate::simd::prefetch`]); `i` may lie outside `vals`
/// (a coordinate of a malformed tensor, or one a window does not hold): nothing is read.
#[inline(always)]
pub fn prefetch<T>(vals: &[T], i: usize) {
    crate::simd::prefetch(vals.as_ptr().wrapping_add(i));
}

/// Asks for the line `AHEAD` elements past `item` in its array: the coordinates a look-ahead
/// walk reads next. The walk reads `crd[p + AHEAD]` to hint at what it will gather, and that
/// read itself waited on memory whenever the hardware prefetcher had not yet reached it
/// (measured: SpMV with `u32` coordinates, uniform and power-law, 2 M rows, 1 and 2 threads,
/// scratch program, 9 interleaved runs: 1.0-1.3x faster with this hint than without).
#[inline(always)]
pub fn prefetch_past<T>(item: &T) {
    prefetch_after::<AHEAD, T>(item)
}

/// How many positions ahead a streaming loop asks for its own coordinates and values.
pub const STREAM: usize = 512;

/// Asks for the line `STREAM` elements past `item` in its array (a coordinate or a value the
/// streaming loop reads now; see [`Prefetch::Stream`]).
#[inline(always)]
pub fn prefetch_stream<T>(item: &T) {
    prefetch_after::<STREAM, T>(item)
}

/// Asks for the line `N` elements past `item`; the address may lie past the array's end:
/// nothing is read.
#[inline(always)]
fn prefetch_after<const N: usize, T>(item: &T) {
    crate::simd::prefetch((item as *const T).wrapping_add(N));
}

/// Asks for every line of `vals[start..start + len]` (a row of a dense matrix), as
/// [`prefetch`] does for one value; the range may lie outside `vals`.
#[inline(always)]
pub fn prefetch_row<T>(vals: &[T], start: usize, len: usize) {
    const LINE: usize = 64;
    let first = vals.as_ptr().wrapping_add(start).cast::<u8>();
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    // Every line the row touches, the first and last partial ones included, up to
    // `ROW_LINES`: past those the hardware prefetcher follows a row read in order.
    let lines = (first as usize % LINE + bytes)
        .div_ceil(LINE)
        .min(ROW_LINES);
    for k in 0..lines {
        crate::simd::prefetch(first.wrapping_add(k * LINE));
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Setting {
    Never,
    Auto,
    Always,
    Stream,
}

/// The environment's setting, read once per process.
fn setting() -> Setting {
    static SETTING: OnceLock<Setting> = OnceLock::new();
    *SETTING.get_or_init(|| parse(std::env::var("TESSERA_PREFETCH").ok().as_deref()))
}

fn parse(env: Option<&str>) -> Setting {
    match env {
        Some("0") => Setting::Never,
        Some("always") => Setting::Always,
        Some("stream") => Setting::Stream,
        _ => Setting::Auto,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Coordinates of `rows` rows of `per` nonzeros each, column of the `k`-th nonzero of row
    /// `r` from `col(r, k)`, sorted within each row.
    fn rows(rows: usize, per: usize, col: impl Fn(usize, usize) -> u32) -> Vec<u32> {
        let mut crd = Vec::new();
        for r in 0..rows {
            let mut row: Vec<u32> = (0..per).map(|k| col(r, k)).collect();
            row.sort_unstable();
            crd.extend(row);
        }
        crd
    }

    /// splitmix64's finaliser: neighbouring inputs give unrelated outputs.
    fn scramble(x: usize) -> usize {
        let mut z = (x as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as usize
    }

    const N: usize = 1 << 21;
    /// Caches of 1 MiB in the tests, level 1 of 48 KiB (`SIZES`; the machine's own sizes are
    /// read by `decide`).
    const CACHED: usize = 1 << 20;
    const SIZES: (usize, usize) = (48 << 10, CACHED);

    #[test]
    fn a_nest_runs_the_greatest_copy_its_gathers_ask_for() {
        use Prefetch::{Ahead, Plain, Stream};
        assert_eq!(combine(&[]), Plain);
        assert_eq!(combine(&[Plain, Stream]), Stream);
        assert_eq!(combine(&[Stream, Ahead, Plain]), Ahead);
        assert_eq!(combine(&[Plain, Plain]), Plain);
    }

    #[test]
    fn scattered_gathers_into_a_large_vector_look_ahead() {
        let crd = rows(10_000, 16, |r, k| (scramble(r * 16 + k) % N) as u32);
        assert_eq!(measure(&crd, N, 8, SIZES), Prefetch::Ahead);
        // The same gathers into a vector the caches hold stream, and into one level 1 holds
        // run plain.
        assert_eq!(measure(&crd, CACHED / 8, 8, SIZES), Prefetch::Stream);
        assert_eq!(measure(&crd, SIZES.0 / 8 + 1, 8, SIZES), Prefetch::Stream);
        assert_eq!(measure(&crd, SIZES.0 / 8, 8, SIZES), Prefetch::Plain);
    }

    #[test]
    fn banded_gathers_run_plain_past_the_caches_and_stream_within_them() {
        // Columns within 64 of the row: `AHEAD` positions on is four rows on.
        let crd = rows(10_000, 16, |r, k| (r + scramble(r * 16 + k) % 64) as u32);
        assert_eq!(measure(&crd, N, 8, SIZES), Prefetch::Plain);
        assert_eq!(measure(&crd, CACHED / 8, 8, SIZES), Prefetch::Stream);
        // Rows of a banded matrix taken in a scattered order are far again.
        let crd = rows(10_000, 16, |r, k| {
            ((scramble(r) % (N - 64)) + scramble(r * 16 + k) % 64) as u32
        });
        assert_eq!(measure(&crd, N, 8, SIZES), Prefetch::Ahead);
    }

    #[test]
    fn short_and_empty_levels_run_plain() {
        let crd: Vec<u32> = (0..AHEAD as u32).map(|i| i * 100_000).collect();
        assert_eq!(measure(&crd, N, 8, SIZES), Prefetch::Plain);
        assert_eq!(measure::<u32>(&[], N, 8, SIZES), Prefetch::Plain);
        let short = &crd[..AHEAD / 2];
        assert_eq!(
            measure(short, usize::MAX, usize::MAX, SIZES),
            Prefetch::Plain
        );
    }

    #[test]
    fn the_environment_switch_reads_as_documented() {
        assert_eq!(parse(Some("0")), Setting::Never);
        assert_eq!(parse(Some("always")), Setting::Always);
        assert_eq!(parse(Some("stream")), Setting::Stream);
        assert_eq!(parse(Some("1")), Setting::Auto);
        assert_eq!(parse(None), Setting::Auto);
    }

    #[test]
    fn a_prefetch_outside_the_slice_reads_nothing() {
        let v = [1.0f64; 4];
        for i in [0, 3, 4, 1 << 40, usize::MAX] {
            prefetch(&v, i);
            prefetch_row(&v, i, 40);
        }
        // `AHEAD` past the last element is far outside the array.
        prefetch_past(&v[3]);
        prefetch_stream(&v[3]);
        assert_eq!(v, [1.0; 4]);
    }
}
