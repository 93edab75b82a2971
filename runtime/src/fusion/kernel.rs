//! Kernel fusion (thesis §4.4): element-wise task descriptions and the loop that runs a fused
//! task's element-wise sub-tasks chunk by chunk.
//!
//! A task registered with [`Runtime::register_elementwise`](crate::Runtime::register_elementwise)
//! accesses every argument at the same index: element `i` of each output depends only on
//! element `i` of each input. Its body is written over one *chunk*: equal-length slices of
//! every argument. Such a body can run over any split of the sub-stores, so a fused task made
//! of element-wise sub-tasks runs one loop over cache-sized chunks and applies every sub-task
//! to a chunk before moving on; a temporary lives in a chunk-sized scratch buffer and never
//! reaches main memory. Unfused, the same body runs over the same chunks of the point's
//! sub-stores, so scalar results fold in the same order either way (bitwise equal).

use crate::dtype::{DType, Element, ReduceOp, Scalar};
use crate::issue::task::Privilege;
use crate::TaskContext;
use smallvec::SmallVec;
use std::ops::Range;
use std::sync::OnceLock;

/// Elements per chunk of an unfused element-wise task, and the most of a fused one
/// ([`fused_chunk`]). An unfused body streams its sub-stores from memory whatever the chunk
/// (unfused Black-Scholes 54-64 ms at 2048 and 4096, 58-67 at 1024: noisy, not slower); the
/// chunk only bounds the calls per element.
pub(crate) const CHUNK: usize = 4096;

/// The fewest elements per chunk of a fused task: 256 (Black-Scholes' 10 arrays in 20 KiB)
/// was slower than 512 (40 KiB), 11.3-13.5 against 9.7-10.0 ms, the calls per element
/// doubling.
const MIN_FUSED_CHUNK: usize = 512;

/// Elements per chunk of a kernel-fused task whose arrays (stores and scratch buffers) take
/// `bytes_per_element` bytes of each element together: the largest power of two, at most
/// [`CHUNK`], at which a chunk of every array fits in 5/6 of the L1 data cache, its steps
/// then reading and writing L1, the next chunk prefetched into L2 meanwhile
/// ([`prefetch_share`]). `None` where not even [`MIN_FUSED_CHUNK`] fits: the task then runs
/// `CHUNK` at a time from L2, without the prefetch, as it did before.
///
/// Measured on the Zen 5 bench VM (48 KiB L1d, `TESSERA_BENCH_ONLY=black-scholes:fused`, the
/// chunk and the prefetch made environment variables for the test, interleaved): fused
/// Black-Scholes 9.7-10.0 ms at 512 (40 KiB), 11.3-11.9 at 768 (60 KiB), 11.0-11.9 at 4096;
/// 13.6-16.7 at 512 without the prefetch (the first step to touch a store's chunk waits on
/// memory), and no faster with it at 4096 (11.5-12.4). A Zen 4 host (32 KiB L1d) measured
/// 512 slower than 4096 without the prefetch (22.9-26.4 against 19.6-20.2 ms, DESIGN.md):
/// there Black-Scholes' 10 arrays take the `None` path.
pub(crate) fn fused_chunk(bytes_per_element: usize) -> Option<usize> {
    chunk_in(tessera_formats::caches::l1_data(), bytes_per_element)
}

/// [`fused_chunk`] for an L1 data cache of `l1` bytes.
fn chunk_in(l1: usize, bytes_per_element: usize) -> Option<usize> {
    let fit = l1 / 6 * 5 / bytes_per_element.max(1);
    (fit >= MIN_FUSED_CHUNK).then(|| (1 << fit.ilog2()).min(CHUNK))
}

/// One chunk of an element-wise task: equal-length slices of its arguments, inputs (arguments
/// passed with `read`) and outputs (`write` or `read_write`) each in argument order.
pub struct Chunk<'a, T> {
    ins: SmallVec<[&'a [T]; 4]>,
    outs: SmallVec<[&'a mut [T]; 4]>,
    scalars: &'a [Scalar],
    result: Option<(ReduceOp, &'a mut Option<Scalar>)>,
}

impl<'a, T> Chunk<'a, T> {
    /// Elements in this chunk (every slice has this length).
    pub fn len(&self) -> usize {
        self.ins
            .first()
            .map(|s| s.len())
            .or_else(|| self.outs.first().map(|s| s.len()))
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The inputs and the outputs. An output passed with `write` starts with unspecified
    /// values (a fused temporary's scratch): the body must assign every element of it.
    pub fn split(&mut self) -> (&[&'a [T]], &mut [&'a mut [T]]) {
        (&self.ins, &mut self.outs)
    }

    /// Scalar argument `i` (values and futures, in the order they were added).
    pub fn scalar(&self, i: usize) -> Scalar {
        *self.scalars.get(i).unwrap_or_else(|| {
            panic!(
                "scalar {i} does not exist (the task has {})",
                self.scalars.len()
            )
        })
    }

    /// Scalar argument `i` as the chunk's element type (a future made by
    /// [`Runtime::value_future`](crate::Runtime::value_future) from a store of `T` gives the
    /// stored value back exactly). Panics, naming the scalar, when the value does not fit `T`.
    pub fn scalar_value(&self, i: usize) -> T
    where
        T: Element,
    {
        let v = self.scalar(i);
        T::from_scalar(v).unwrap_or_else(|| {
            panic!(
                "scalar {i} ({v:?}) does not fit the element type {:?}",
                T::DTYPE
            )
        })
    }

    /// Folds `v` into the task's result (`submit_reduce`) with the task's operator; chunk
    /// results fold in chunk order.
    pub fn add_result(&mut self, v: impl Into<Scalar>) {
        let v = v.into();
        let (op, acc) = self
            .result
            .as_mut()
            .expect("add_result in a task not submitted with submit_reduce");
        **acc = Some(match **acc {
            Some(a) => Scalar::combine(*op, a, v),
            None => v,
        });
    }
}

/// A body over the chunk of `len` elements at element `c` of the input and output slots.
type ErasedBody = dyn Fn(&[Slot], &[Slot], usize, usize, &[Scalar], Option<(ReduceOp, &mut Option<Scalar>)>)
    + Send
    + Sync;

/// A registered element-wise body with its element type, type-erased.
pub(crate) struct Elementwise {
    pub dtype: DType,
    run: Box<ErasedBody>,
}

impl Elementwise {
    pub(crate) fn new<T: Element>(
        body: impl Fn(&mut Chunk<'_, T>) + Send + Sync + 'static,
    ) -> Elementwise {
        let run = move |ins: &[Slot],
                        outs: &[Slot],
                        c: usize,
                        len: usize,
                        scalars: &[Scalar],
                        result: Option<(ReduceOp, &mut Option<Scalar>)>| {
            // SAFETY: the one place element-wise bodies see memory. Callers (`run_chunks`)
            // pass slots whose `at(c)` points to `len` initialised elements of `T` (dtype
            // checked when the steps are built; `c + len` within the sub-stores, `len` within
            // every scratch buffer, which holds a whole chunk): store cells inside a borrow
            // the point holds (exclusive for outputs; a ledger borrow, or a verified
            // replay's, `Ledger::unheld`) or scratch private to the point. No output overlaps
            // another slice: a task's written argument never aliases its other arguments
            // (checked at submit), and the temporaries of one step are in distinct scratch
            // buffers (a buffer is shared only by temporaries whose lives do not overlap:
            // `scratch::share`).
            let mut chunk = Chunk {
                ins: SmallVec::new(),
                outs: SmallVec::new(),
                scalars,
                result,
            };
            // Pushed one by one, not collected: `collect` goes through `SmallVec::extend`'s
            // reserve path, which with `run_chunks`' own pointer lists (gone: it passes the
            // slots) took 9 % of fused Black-Scholes at 512-element chunks.
            for x in ins {
                chunk
                    .ins
                    .push(unsafe { std::slice::from_raw_parts(x.at(c) as *const T, len) });
            }
            for x in outs {
                chunk
                    .outs
                    .push(unsafe { std::slice::from_raw_parts_mut(x.at(c) as *mut T, len) });
            }
            // Compiled for AVX-512 or AVX2 + FMA where the CPU has them (bitwise the same
            // results): a body marked `#[inline(always)]` vectorises eight or four `f64` wide
            // there. This closure is `#[inline(always)]` too: `wide` calls it from three paths,
            // and LLVM inlined it into none of them without (fused Black-Scholes 23 -> 35 ms).
            crate::simd::wide(
                #[inline(always)]
                || body(&mut chunk),
            )
        };
        Elementwise {
            dtype: T::DTYPE,
            run: Box::new(run),
        }
    }
}

/// The step that sets every output of a chunk to zero (`T::default()`, the zeros a fresh
/// store is allocated with): it clears a reused scratch buffer standing for a temporary that
/// the fused task reads before it writes it (`scratch.rs`). One per element type, made once.
pub(crate) fn zero_kernel(dtype: DType) -> &'static Elementwise {
    fn make<T: Element>() -> Elementwise {
        Elementwise::new::<T>(|c: &mut Chunk<'_, T>| {
            for o in c.split().1.iter_mut() {
                o.fill(T::default());
            }
        })
    }
    static KERNELS: OnceLock<[Elementwise; 7]> = OnceLock::new();
    let k = KERNELS.get_or_init(|| {
        [
            make::<f64>(),
            make::<f32>(),
            make::<i64>(),
            make::<i32>(),
            make::<u64>(),
            make::<u32>(),
            make::<crate::dtype::PosRange>(),
        ]
    });
    &k[match dtype {
        DType::F64 => 0,
        DType::F32 => 1,
        DType::I64 => 2,
        DType::I32 => 3,
        DType::U64 => 4,
        DType::U32 => 5,
        DType::Range => 6,
    }]
}

/// Where one argument of a step lives: a store's cells (advanced per chunk) or a chunk-sized
/// scratch buffer (the same cells every chunk).
#[derive(Clone, Copy)]
pub(crate) struct Slot {
    pub base: *mut u8,
    pub size: usize,
    pub scratch: bool,
}

impl Slot {
    fn at(&self, c: usize) -> *mut u8 {
        if self.scratch {
            self.base
        } else {
            // In bounds: `c` is below the sub-store's length (see `run_chunks`).
            self.base.wrapping_add(c * self.size)
        }
    }
}

/// One element-wise sub-task as the chunk loop runs it.
pub(crate) struct Step<'a> {
    pub kernel: &'a Elementwise,
    pub ins: SmallVec<[Slot; 4]>,
    pub outs: SmallVec<[Slot; 4]>,
    /// Inline room for four: the usual element-wise task takes up to three (a step size's
    /// sign, numerator and denominator), and a spilled list is a heap allocation per point.
    pub scalars: SmallVec<[Scalar; 4]>,
    /// The result operator and the accumulator slot this step folds into.
    pub result: Option<(ReduceOp, usize)>,
}

/// What [`run_chunks`] does when step `i` panics: given the step, the panic and which steps
/// still run.
pub(crate) type OnPanic<'a> = dyn FnMut(usize, Box<dyn std::any::Any + Send>, &mut [bool]) + 'a;

/// Runs `steps` over `n` elements, `chunk` at a time, every step on a chunk before the next
/// chunk; with `prefetch`, each step first asks for its share of the next chunk's store lines
/// ([`prefetch_share`]). `results[slot]` receives each step's folded result. Only the steps
/// marked in `live` run; when one panics, `failed(step, payload, live)` says what goes on (it
/// may mark more steps dead, or resume the panic) and the loop continues with the next step.
pub(crate) fn run_chunks(
    n: usize,
    chunk: usize,
    steps: &[Step],
    results: &mut [Option<Scalar>],
    live: &mut [bool],
    failed: &mut OnPanic<'_>,
    prefetch: bool,
) {
    let streams = if prefetch {
        streams(steps)
    } else {
        SmallVec::new()
    };
    // Each step's share of a whole next chunk, worked out once (it was per step and chunk:
    // a division and a walk over the streams, ~6 % of fused Black-Scholes' samples).
    let plan = SharePlan::new(&streams, chunk, steps.len());
    let mut c = 0;
    while c < n {
        let len = chunk.min(n - c);
        let next = chunk.min(n - c - len);
        for (i, s) in steps.iter().enumerate() {
            if next == chunk {
                plan.ask(i, &streams, c + len);
            } else if next > 0 && !streams.is_empty() {
                prefetch_share(&streams, c + len, next, i, steps.len());
            }
            if !live[i] {
                continue;
            }
            let result = s.result.map(|(op, slot)| (op, &mut results[slot]));
            let run = || (s.kernel.run)(&s.ins, &s.outs, c, len, &s.scalars, result);
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
                live[i] = false;
                failed(i, payload, live);
            }
        }
        c += len;
    }
}

/// Bytes in a cache line, the unit [`prefetch_share`] asks for.
const LINE: usize = 64;

/// The distinct store slots of `steps` (not scratch): the arrays a chunk loop streams.
fn streams(steps: &[Step]) -> SmallVec<[Slot; 8]> {
    let mut streams: SmallVec<[Slot; 8]> = SmallVec::new();
    for x in steps.iter().flat_map(|s| s.ins.iter().chain(&s.outs)) {
        if !x.scratch && !streams.iter().any(|y| y.base == x.base) {
            streams.push(*x);
        }
    }
    streams
}

/// Asks for share `step` of `steps` of the lines of `streams`' chunk of `len` elements at
/// element `at` (the next chunk), into L2. Spread over the steps so the requests overlap with
/// the bodies' arithmetic instead of queueing at once. Addresses are computed, never read: a
/// prefetch does not fault (`tessera_formats::simd::prefetch`).
fn prefetch_share(streams: &[Slot], at: usize, len: usize, step: usize, steps: usize) {
    share_lines(streams, at, len, step, steps, |p| {
        tessera_formats::simd::prefetch_l2(p)
    });
}

/// The lines [`prefetch_share`] asks for, each passed to `ask`.
fn share_lines(
    streams: &[Slot],
    at: usize,
    len: usize,
    step: usize,
    steps: usize,
    mut ask: impl FnMut(*const u8),
) {
    share_ranges(streams, len, step, steps, |k, lines| {
        each_line(&streams[k], at, lines, &mut ask)
    });
}

/// The addresses of lines `lines` of `s`'s chunk at element `at`, each passed to `f`.
#[inline(always)]
fn each_line(s: &Slot, at: usize, lines: Range<usize>, f: &mut impl FnMut(*const u8)) {
    let start = s.base.wrapping_add(at * s.size);
    for l in lines {
        f(start.wrapping_add(l * LINE));
    }
}

/// Share `step` of `steps` of the lines of a chunk of `len` elements of every stream, as
/// ranges of line numbers within stream `k`'s chunk, each passed to `range(k, lines)`.
fn share_ranges(
    streams: &[Slot],
    len: usize,
    step: usize,
    steps: usize,
    mut range: impl FnMut(usize, Range<usize>),
) {
    let lines = |s: &Slot| (len * s.size).div_ceil(LINE);
    let total: usize = streams.iter().map(lines).sum();
    let (from, to) = (step * total / steps, (step + 1) * total / steps);
    // `first`: the index, among all the chunk's lines, of this stream's first line.
    let mut first = 0;
    for (k, s) in streams.iter().enumerate() {
        let n = lines(s);
        let (lo, hi) = (from.max(first), to.min(first + n));
        if lo < hi {
            range(k, lo - first..hi - first);
        }
        first += n;
        if first >= to {
            break;
        }
    }
}

/// [`share_ranges`] for every step, for chunks of a fixed length: what each step of a chunk
/// loop asks for of the next chunk when it is a whole one.
struct SharePlan {
    /// `(stream, lines)` of every step, in step order; step `i`'s are
    /// `ranges[first[i]..first[i + 1]]`.
    ranges: SmallVec<[(usize, Range<usize>); 24]>,
    first: SmallVec<[usize; 24]>,
}

impl SharePlan {
    fn new(streams: &[Slot], len: usize, steps: usize) -> SharePlan {
        let mut plan = SharePlan {
            ranges: SmallVec::new(),
            first: SmallVec::new(),
        };
        for step in 0..steps {
            plan.first.push(plan.ranges.len());
            share_ranges(streams, len, step, steps, |k, l| plan.ranges.push((k, l)));
        }
        plan.first.push(plan.ranges.len());
        plan
    }

    /// Step `step`'s share of the chunk at element `at`, into L2 (as [`prefetch_share`]).
    #[inline]
    fn ask(&self, step: usize, streams: &[Slot], at: usize) {
        self.each_line(step, streams, at, tessera_formats::simd::prefetch_l2);
    }

    /// The lines [`SharePlan::ask`] asks for, each passed to `f`.
    #[inline(always)]
    fn each_line(&self, step: usize, streams: &[Slot], at: usize, mut f: impl FnMut(*const u8)) {
        for (k, lines) in &self.ranges[self.first[step]..self.first[step + 1]] {
            each_line(&streams[*k], at, lines.clone(), &mut f);
        }
    }
}

/// The ordinary (unfused) body of an element-wise task: its views of one point's sub-stores,
/// run chunk by chunk like a fused task would.
pub(crate) fn unfused_body(kernel: &Elementwise, ctx: &mut TaskContext<'_>) {
    fn go<T: Element>(kernel: &Elementwise, ctx: &mut TaskContext<'_>) {
        // Inline up to four of each (no allocation per point for the usual task).
        let mut reads: SmallVec<[_; 4]> = SmallVec::new();
        let mut writes: SmallVec<[_; 4]> = SmallVec::new();
        let mut len = None;
        for i in 0..ctx.args_len() {
            let n = match ctx.privilege(i) {
                Privilege::Read => {
                    let v = ctx.read::<T>(i);
                    let n = v.as_slice().len();
                    reads.push(v);
                    n
                }
                Privilege::Write | Privilege::ReadWrite => {
                    let v = ctx.write::<T>(i);
                    let n = v.as_slice().len();
                    writes.push(v);
                    n
                }
                p => panic!("element-wise task: argument {i} is passed with {p:?}"),
            };
            if *len.get_or_insert(n) != n {
                panic!(
                    "element-wise task: argument {i} has {n} elements in this point, the first has {}",
                    len.unwrap_or(0)
                );
            }
        }
        let size = std::mem::size_of::<T>();
        let step = Step {
            kernel,
            ins: reads
                .iter()
                .map(|v| Slot {
                    base: v.as_slice().as_ptr() as *mut u8,
                    size,
                    scratch: false,
                })
                .collect(),
            outs: writes
                .iter_mut()
                .map(|v| Slot {
                    base: v.as_mut_slice().as_mut_ptr() as *mut u8,
                    size,
                    scratch: false,
                })
                .collect(),
            scalars: (0..ctx.scalars_len()).map(|i| ctx.scalar(i)).collect(),
            result: ctx.result_op().map(|op| (op, 0)),
        };
        let mut result = [None];
        // Unfused, a panic fails the task as before.
        let resume = &mut |_, p, _: &mut [bool]| std::panic::resume_unwind(p);
        run_chunks(
            len.unwrap_or(0),
            CHUNK,
            &[step],
            &mut result,
            &mut [true],
            resume,
            false,
        );
        drop((reads, writes));
        if let Some(v) = result[0] {
            ctx.set_result(v);
        }
    }
    match kernel.dtype {
        DType::F64 => go::<f64>(kernel, ctx),
        DType::F32 => go::<f32>(kernel, ctx),
        DType::I64 => go::<i64>(kernel, ctx),
        DType::I32 => go::<i32>(kernel, ctx),
        DType::U64 => go::<u64>(kernel, ctx),
        DType::U32 => go::<u32>(kernel, ctx),
        DType::Range => go::<crate::dtype::PosRange>(kernel, ctx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fused_chunk_of_every_array_fits_in_l1() {
        // Black-Scholes: 5 stores and 5 scratch buffers of `f64`, 48 KiB of L1.
        assert_eq!(chunk_in(48 << 10, 80), Some(512));
        // Two arrays of `f32` fit a whole `CHUNK`; so does anything in a huge L1.
        assert_eq!(chunk_in(48 << 10, 8), Some(CHUNK));
        assert_eq!(chunk_in(usize::MAX, 8), Some(CHUNK));
        // Powers of two between: 6 arrays of `f64` in 32 KiB (26 KiB) take 512, not 546.
        assert_eq!(chunk_in(32 << 10, 48), Some(512));
        assert_eq!(chunk_in(64 << 10, 48), Some(1024));
        // Too many arrays for the fewest elements a call is worth: no L1 plan.
        assert_eq!(chunk_in(32 << 10, 80), None);
        assert_eq!(chunk_in(48 << 10, 400), None);
        assert_eq!(chunk_in(0, 0), None);
    }

    #[test]
    fn the_next_chunk_is_asked_for_once_across_the_steps() {
        // Every line of the next chunk of every stream, in exactly one step's share.
        let (a, b) = (0x10_0000usize, 0x80_0000usize);
        let streams = [
            Slot {
                base: a as *mut u8,
                size: 8,
                scratch: false,
            },
            Slot {
                base: b as *mut u8,
                size: 4,
                scratch: false,
            },
        ];
        for (at, len, steps) in [(1024, 512, 7), (64, 100, 3), (0, 1, 5), (512, 512, 1)] {
            let mut asked = Vec::new();
            for i in 0..steps {
                share_lines(&streams, at, len, i, steps, |p| asked.push(p as usize));
            }
            let mut want: Vec<usize> = streams
                .iter()
                .flat_map(|s| {
                    let (lo, hi) = (
                        s.base as usize + at * s.size,
                        s.base as usize + (at + len) * s.size,
                    );
                    (lo..hi).step_by(LINE)
                })
                .collect();
            asked.sort_unstable();
            want.sort_unstable();
            assert_eq!(asked, want, "at {at}, {len} elements, {steps} steps");
        }
    }

    #[test]
    fn a_share_plan_asks_each_step_for_what_share_lines_works_out_per_chunk() {
        let slot = |base: usize, size| Slot {
            base: base as *mut u8,
            size,
            scratch: false,
        };
        let five = [8, 8, 4, 8, 2].map(|size| slot(size << 24, size));
        for (streams, len, steps) in [
            (&five[..], 512, 18),
            (&five[..2], 4096, 7),
            (&five[..1], 100, 3),
            (&five[..], 8, 40),
            (&five[..0], 512, 4),
        ] {
            let plan = SharePlan::new(streams, len, steps);
            for step in 0..steps {
                for at in [len, 5 * len] {
                    let (mut planned, mut worked_out) = (Vec::new(), Vec::new());
                    plan.each_line(step, streams, at, |p| planned.push(p as usize));
                    share_lines(streams, at, len, step, steps, |p| {
                        worked_out.push(p as usize)
                    });
                    assert_eq!(
                        planned, worked_out,
                        "step {step} of {steps}, {len} elements"
                    );
                }
            }
        }
    }
}
