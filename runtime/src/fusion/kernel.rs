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
use crate::task::Privilege;
use crate::TaskContext;
use smallvec::SmallVec;
use std::sync::OnceLock;

/// Elements per chunk: every live array of a fused chain keeps one chunk in cache (Black-Scholes'
/// 21 arrays of `f64` take 672 KiB, inside a 1 MiB L2). 256, 512 and 2048 were tried on the
/// fusion bench with AVX2 bodies; their differences were inside the noise of the shared 2-core
/// VM. With AVX-512 bodies (bs19) the calls per chunk show: fused Black-Scholes 23-25 ms at
/// 256, 16.0-17.9 at 1024, 14.5-15.5 at 2048, 14.0-15.0 at 4096 (unfused 54-64 ms at 2048
/// and 4096, 58-67 at 1024: noisy, not slower).
pub(crate) const CHUNK: usize = 4096;

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

type ErasedBody = dyn Fn(&[*const u8], &[*mut u8], usize, &[Scalar], Option<(ReduceOp, &mut Option<Scalar>)>)
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
        let run = move |ins: &[*const u8],
                        outs: &[*mut u8],
                        len: usize,
                        scalars: &[Scalar],
                        result: Option<(ReduceOp, &mut Option<Scalar>)>| {
            // SAFETY: the one place element-wise bodies see memory. Callers (`run_chunks`)
            // pass pointers to `len` initialised elements of `T` (dtype checked when the steps
            // are built): store cells inside a borrow the point holds (exclusive for
            // outputs; a ledger borrow, or a verified replay's, `Ledger::unheld`) or scratch
            // private to the point. No output overlaps another slice: a
            // task's written argument never aliases its other arguments (checked at submit),
            // and the temporaries of one step are in distinct scratch buffers (a buffer is
            // shared only by temporaries whose lives do not overlap: `scratch::share`).
            let mut chunk = Chunk {
                ins: ins
                    .iter()
                    .map(|&p| unsafe { std::slice::from_raw_parts(p as *const T, len) })
                    .collect(),
                outs: outs
                    .iter()
                    .map(|&p| unsafe { std::slice::from_raw_parts_mut(p as *mut T, len) })
                    .collect(),
                scalars,
                result,
            };
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
/// chunk. `results[slot]` receives each step's folded result. Only the steps marked in `live`
/// run; when one panics, `failed(step, payload, live)` says what goes on (it may mark more
/// steps dead, or resume the panic) and the loop continues with the next step.
pub(crate) fn run_chunks(
    n: usize,
    chunk: usize,
    steps: &[Step],
    results: &mut [Option<Scalar>],
    live: &mut [bool],
    failed: &mut OnPanic<'_>,
) {
    let mut ins: SmallVec<[*const u8; 8]> = SmallVec::new();
    let mut outs: SmallVec<[*mut u8; 8]> = SmallVec::new();
    let mut c = 0;
    while c < n {
        let len = chunk.min(n - c);
        for (i, s) in steps.iter().enumerate() {
            if !live[i] {
                continue;
            }
            ins.clear();
            outs.clear();
            ins.extend(s.ins.iter().map(|x| x.at(c) as *const u8));
            outs.extend(s.outs.iter().map(|x| x.at(c)));
            let result = s.result.map(|(op, slot)| (op, &mut results[slot]));
            let run = || (s.kernel.run)(&ins, &outs, len, &s.scalars, result);
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
                live[i] = false;
                failed(i, payload, live);
            }
        }
        c += len;
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
