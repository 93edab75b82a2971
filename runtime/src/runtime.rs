//! The runtime: stores, task registration, issue → window → solve → analyse → execute.

use crate::buffer::{Buf, SPARSE_MIN_BYTES};
use crate::dtype::{DType, Element, PosRange, ReduceOp, Scalar};
use crate::error::{Result, RuntimeError};
use crate::execute::executor::ThreadPool;
use crate::execute::graph::Node;
use crate::execute::Shared;
use crate::fusion::kernel::{unfused_body, Chunk, Elementwise};
use crate::fusion::memo::FusionMemo;
use crate::fusion::FusionConfig;
use crate::future::Future;
use crate::issue::task::{
    Issued, LaunchSpec, Privilege, Registered, Registry, TaskBody, TaskLauncher,
};
use crate::issue::validate::{check_futures, check_privilege, check_shard, resolve_constraints};
use crate::machine::Machine;
use crate::partition::{Domain, Interner};
use crate::rect::{Rect, MAX_DIMS};
use crate::solve_memo::SolveMemo;
use crate::stats::{Counters, Stats};
use crate::store::{Bound, Memory, Store, StoreRoot};
use crate::tracing::replay::Tracing;
use crate::window::{Adaptive, Window};
use crate::TaskContext;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

mod builder;
mod flow;
mod schedule;
mod solve;

pub use builder::{RuntimeBuilder, DEFAULT_TRACING, DEFAULT_WINDOW, RANKS_WINDOW};
pub(crate) use solve::Plan;

/// The issuing side's state: the window and the partition table.
pub(crate) struct Front {
    pub(crate) window: Window,
    interner: Interner,
    memo: SolveMemo,
    fusion_memo: FusionMemo,
    /// Automatic tracing (`None` when switched off).
    /// Boxed: it is taken out and put back on every issued task (a move of the pointer, not
    /// of the tracer's state).
    pub(crate) tracing: Option<Box<Tracing>>,
    /// The first error of a task launched by an idle worker's flush (adaptive window): the
    /// issuing thread reports it at its next submit, read or fence.
    deferred: Option<RuntimeError>,
}

pub(crate) struct Inner {
    id: u64,
    machine: Machine,
    pub(crate) shared: Arc<Shared>,
    pool: ThreadPool,
    registry: RwLock<Registry>,
    front: Mutex<Front>,
    next_store: AtomicU64,
    /// On one rank: the next launched task's stream position (`Launched::position`).
    next_position: AtomicU64,
    max_pending: usize,
    fusion: FusionConfig,
    /// The body a fused task's `Launched` carries (never called: its points run the
    /// sub-tasks' bodies).
    pub(crate) fused_body: TaskBody,
    /// Bytes of store elements allocated so far (lazily, at first access), and held now.
    mem: Arc<Memory>,
    /// Across ranks, every store made so far, for [`Stats::bytes_resident`] (dead ones
    /// pruned as it grows). Not on one rank: `take` needs the only reference to a store.
    roots: Mutex<Vec<std::sync::Weak<StoreRoot>>>,
    /// Across ranks: the thread receiving this rank's messages.
    comm_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Set when the window is adaptive (also `Shared::on_node_ran`: how a worker about to go idle
    /// launches it).
    adaptive: std::sync::OnceLock<Arc<Adaptive>>,
    /// With an adaptive window: the thread that launches tasks held while workers idle.
    window_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// A submitted launcher's emptied spec, for the next [`Runtime::task`]: the spec is over a
    /// kilobyte (inline arguments and constraints), and allocating and freeing it per task
    /// cost the issuing thread ~350 instructions (callgrind, stencil). Taken and returned with
    /// `try_lock`: a thread that finds it busy allocates.
    spare_spec: Mutex<Option<Box<LaunchSpec>>>,
}

/// A task runtime: the application issues a sequential stream of tasks over stores; the runtime
/// partitions the stores, finds the parallelism and runs point tasks on worker threads (and on
/// the application's thread while it waits), with results identical to running the stream in
/// order.
///
/// A `Runtime` is `Send + Sync`: several application threads may issue tasks on one runtime
/// (through an `Arc`). The stream is then the order their submits reach it, each thread's own
/// order kept, and a `read` of cells a task issued by another thread is writing at that
/// moment may fail with [`RuntimeError::ConcurrentAccess`] rather than wait for it: order
/// such a read after that thread's submit yourself. Across ranks every rank must issue the
/// same stream, so issue from one thread there.
///
/// Dropping the runtime waits for every issued task (as [`Runtime::fence`]), so a body that
/// never returns keeps the drop, `fence` and a `read` of what it writes waiting for good.
pub struct Runtime {
    inner: Arc<Inner>,
}

impl Runtime {
    /// A runtime on `threads` processors ([`RuntimeBuilder::threads`]) and default options.
    pub fn new(threads: usize) -> Runtime {
        Runtime::builder().threads(threads).build()
    }

    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// Processors per rank that launch domains are sized for (across ranks: the number
    /// every rank agreed on), the application's thread included.
    pub fn threads(&self) -> usize {
        self.inner.machine.threads
    }

    /// This runtime's rank (0 on one rank).
    pub fn rank(&self) -> usize {
        self.inner.machine.rank
    }

    /// Ranks running the same task stream (1 without a communicator).
    pub fn ranks(&self) -> usize {
        self.inner.machine.ranks
    }

    /// This runtime's id: what [`Store::runtime_id`] gives for its stores (unique in the
    /// process, never reused), so a caller can tell another runtime's store before issuing.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Registers a task body under a stable name.
    ///
    /// A panic in the body fails its task ([`RuntimeError::TaskFailed`]) and poisons what the
    /// failing point writes. The body must not wait on the issuing side: `fence` from a body
    /// fails with [`RuntimeError::InsideTask`], and a `read`, `take` or `Future::get` of
    /// something the body's own task or a later one produces waits for good. Tasks a body
    /// submits join the stream when it runs, a place that depends on timing.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::DuplicateTask`] when `name` is taken (the runtime's own tasks are named
    /// `tessera.*`).
    pub fn register(
        &self,
        name: &str,
        body: impl Fn(&mut TaskContext<'_>) + Send + Sync + 'static,
    ) -> Result<()> {
        self.register_with(name, Arc::new(body), None)
    }

    /// Registers an element-wise task: every argument (all of element type `T`, passed with
    /// `read`, `write` or `read_write`, sub-stores of equal length) is accessed at the same
    /// index, and `body` runs over one [`Chunk`] of them at a time. Launched alone it runs
    /// over the point's sub-stores chunk by chunk; fused with other element-wise tasks, one
    /// loop applies every one of them to a cache-sized chunk before the next, and fused
    /// temporaries live in chunk-sized scratch. The body must assign every element of each
    /// output passed with `write`; results (`submit_reduce`) are folded with
    /// [`Chunk::add_result`]. The body runs through [`crate::simd::wide`] (AVX2 + FMA where the
    /// CPU has them, bitwise the same results): write it as an `#[inline(always)]` closure so
    /// that its loop is compiled for those instructions.
    pub fn register_elementwise<T: Element>(
        &self,
        name: &str,
        body: impl Fn(&mut Chunk<'_, T>) + Send + Sync + 'static,
    ) -> Result<()> {
        let kernel = Arc::new(Elementwise::new(body));
        let k = kernel.clone();
        let body: TaskBody = Arc::new(move |ctx: &mut TaskContext<'_>| unfused_body(&k, ctx));
        self.register_with(name, body, Some(kernel))
    }

    fn register_with(
        &self,
        name: &str,
        body: TaskBody,
        kernel: Option<Arc<Elementwise>>,
    ) -> Result<()> {
        let mut reg = self
            .inner
            .registry
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if reg.register(name, body, kernel) {
            Ok(())
        } else {
            Err(RuntimeError::DuplicateTask(name.into()))
        }
    }

    /// Starts building a launch of the task registered as `name` (an unknown name is reported
    /// by `submit`).
    pub fn task(&self, name: &str) -> TaskLauncher<'_> {
        let task = self
            .inner
            .registry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .ok_or_else(|| name.to_string());
        let spare = match self.inner.spare_spec.try_lock() {
            Ok(mut s) => s.take(),
            Err(_) => None,
        };
        let spec = match spare {
            Some(mut spec) => {
                spec.task = task;
                spec
            }
            None => Box::new(LaunchSpec {
                task,
                args: Default::default(),
                constraints: Default::default(),
                scalars: Default::default(),
                domain: None,
                shard: None,
            }),
        };
        TaskLauncher { rt: self, spec }
    }

    fn new_root(&self, dtype: DType, dim: usize, bound: Option<Bound>) -> Store {
        let id = self.inner.next_store.fetch_add(1, Ordering::Relaxed);
        let root = Arc::new(StoreRoot::new(
            id,
            self.inner.id,
            dtype,
            dim,
            bound,
            self.inner.mem.clone(),
            self.ranks() > 1,
        ));
        if self.ranks() == 1 {
            return Store::from_root(root, None);
        }
        let mut roots = self.inner.roots.lock().unwrap_or_else(|e| e.into_inner());
        if roots.len() == roots.capacity() {
            roots.retain(|r| r.strong_count() > 0);
        }
        roots.push(Arc::downgrade(&root));
        drop(roots);
        Store::from_root(root, None)
    }

    fn check_shape(dtype: DType, shape: &[usize]) -> Result<()> {
        if shape.len() > MAX_DIMS {
            return Err(RuntimeError::TooManyDims {
                shape: shape.to_vec(),
                dims: shape.len(),
                max: MAX_DIMS,
            });
        }
        let bytes = shape
            .iter()
            .try_fold(dtype.size(), |acc, &e| acc.checked_mul(e));
        if bytes.is_none_or(|b| b > isize::MAX as usize) {
            return Err(RuntimeError::ShapeTooLarge {
                shape: shape.to_vec(),
            });
        }
        Ok(())
    }

    /// A zero-filled store. Its elements take memory at its first access: a store this
    /// machine cannot hold fails the task that first touches it (and a `read`) with
    /// [`RuntimeError::OutOfMemory`].
    ///
    /// # Errors
    ///
    /// [`RuntimeError::TooManyDims`] past [`MAX_DIMS`] dimensions, and
    /// [`RuntimeError::ShapeTooLarge`] when the store's bytes do not fit an `isize`.
    pub fn create(&self, dtype: DType, shape: &[usize]) -> Result<Store> {
        Self::check_shape(dtype, shape)?;
        let rect = Rect::from_shape(shape);
        Ok(self.new_root(dtype, shape.len(), Some(Bound::zeros(rect, dtype))))
    }

    /// A store holding `data` (row-major).
    pub fn from_vec<T: Element>(&self, shape: &[usize], data: Vec<T>) -> Result<Store> {
        Self::check_shape(T::DTYPE, shape)?;
        let rect = Rect::from_shape(shape);
        if data.len() != rect.volume() {
            return Err(RuntimeError::HostDataLength {
                shape: shape.to_vec(),
                expected: rect.volume(),
                got: data.len(),
            });
        }
        if self.ranks() > 1 && rect.volume() * T::DTYPE.size() >= SPARSE_MIN_BYTES {
            return Ok(self.cut_to_share(rect, data));
        }
        Ok(self.new_root(
            T::DTYPE,
            shape.len(),
            Some(Bound::with_data(rect, T::wrap(Buf::from_vec(data)))),
        ))
    }

    /// Across ranks, a store of host data every rank made whole: this rank keeps only its
    /// share (`replicate::share`) in a buffer allocated page by page, and frees `data`.
    fn cut_to_share<T: Element>(&self, rect: Rect, data: Vec<T>) -> Store {
        let m = &self.inner.machine;
        let mine = crate::replicate::share::share(rect, m, m.rank);
        let mut buf = Buf::<T>::sparse_zeros(rect.volume(), None);
        // A share is whole rows: one run of the row-major buffer.
        let (start, len) = (rect.linear(mine.lo()), mine.volume());
        buf.copy_from(start, &data[start..start + len]);
        drop(data);
        let store = self.new_root(
            T::DTYPE,
            rect.dim(),
            Some(Bound::with_data(rect, T::wrap(buf))),
        );
        store.root.meta().valid = Some(crate::replicate::share::cut_map(rect, m));
        store
    }

    /// A 1-d store of `len` elements that the ranks made in parts (each read only its share of
    /// a file, say): `shares[r]` lists the ranges rank `r` holds — every rank passes the same
    /// list, one entry per rank, the ranges disjoint and together `0..len` — and `mine` is
    /// this rank's ranges' elements, in the order listed. The valid-copy map says who holds
    /// what, so tasks move exactly the parts another rank's points need; this rank allocates
    /// only its ranges (and what it later receives). On one rank `mine` is the whole store.
    pub fn from_share<T: Element>(
        &self,
        len: usize,
        shares: &[Vec<Range<usize>>],
        mine: Vec<T>,
    ) -> Result<Store> {
        let (me, ranks) = (self.rank(), self.ranks());
        check_shares(len, shares, ranks)?;
        let held: usize = shares[me].iter().map(|r| r.len()).sum();
        if mine.len() != held {
            return Err(RuntimeError::HostDataLength {
                shape: vec![held],
                expected: held,
                got: mine.len(),
            });
        }
        if ranks == 1 {
            return self.from_vec(&[len], mine);
        }
        let whole = Rect::from_shape(&[len]);
        let mut buf = Buf::<T>::sparse_zeros(len, None);
        let mut at = 0;
        for r in &shares[me] {
            buf.copy_from(r.start, &mine[at..at + r.len()]);
            at += r.len();
        }
        drop(mine);
        let store = self.new_root(T::DTYPE, 1, Some(Bound::with_data(whole, T::wrap(buf))));
        let mut valid = crate::replicate::valid::ValidMap::all(whole, ranks);
        for (rank, list) in shares.iter().enumerate() {
            for r in list.iter().filter(|r| !r.is_empty()) {
                valid.write(Rect::new(&[r.start], &[r.end]), rank);
            }
        }
        store.root.meta().valid = Some(valid);
        Ok(store)
    }

    /// A 1-d `PosRange` store of the ranges between consecutive `offsets` (a compressed
    /// level's `pos` in TACO's layout, `n + 1` offsets for `n` ranges). Whether the ranges are
    /// monotone is found while building them and recorded, so images from this store need no
    /// pass over it to find out (see `solver::monotone`).
    pub fn from_offsets(&self, offsets: impl IntoIterator<Item = u64>) -> Result<Store> {
        let mut it = offsets.into_iter();
        let (mut lo, mut falls) = (it.next().unwrap_or(0), false);
        // Consecutive ranges meet (`hi` is the next `lo`): monotone unless an offset falls.
        let ranges: Vec<PosRange> = it
            .map(|hi| {
                falls |= hi < lo;
                let r = PosRange::new(lo, hi);
                lo = hi;
                r
            })
            .collect();
        let store = self.from_vec(&[ranges.len()], ranges)?;
        let rect = store.rect().expect("bound");
        let mut meta = store.root.meta();
        meta.monotone = Some((meta.version, rect, !falls));
        drop(meta);
        Ok(store)
    }

    /// A 1-d store whose extent the task writing it decides (see `write_unbound`).
    pub fn create_unbound(&self, dtype: DType) -> Store {
        self.new_root(dtype, 1, None)
    }

    /// Sets every element of `store` to `value` (a deferred task).
    pub fn fill(&self, store: &Store, value: impl Into<Scalar>) -> Result<()> {
        let value = value.into();
        let fits = match store.dtype() {
            DType::F64 => f64::from_scalar(value).is_some(),
            DType::F32 => f32::from_scalar(value).is_some(),
            DType::I64 => i64::from_scalar(value).is_some(),
            DType::I32 => i32::from_scalar(value).is_some(),
            DType::U64 => u64::from_scalar(value).is_some(),
            DType::U32 => u32::from_scalar(value).is_some(),
            DType::Range => false,
        };
        if !fits {
            return Err(RuntimeError::FillValue {
                store: store.id(),
                dtype: store.dtype(),
                value,
            });
        }
        self.task("tessera.fill")
            .write(store)
            .scalar(value)
            .submit()
    }

    /// Waits for the tasks writing `store` and copies its elements out (row-major).
    ///
    /// Across ranks this is a collective (every rank reads the same stores in the same
    /// order) and every rank gets the same values.
    pub fn read<T: Element>(&self, store: &Store) -> Result<Vec<T>> {
        self.read_to(store, None)
            .map(|v| v.expect("every rank receives"))
    }

    /// [`Runtime::read`] whose values only rank `root` receives (`None` on the others): no
    /// other rank gathers the store. On one rank, `root` must be 0.
    pub fn read_on<T: Element>(&self, store: &Store, root: usize) -> Result<Option<Vec<T>>> {
        let ranks = self.ranks();
        if root >= ranks {
            return Err(RuntimeError::BadRank { rank: root, ranks });
        }
        self.read_to(store, Some(root))
    }

    /// Waits like [`Runtime::read`] and returns the store's elements, consuming the handle.
    ///
    /// On one rank, when this is the application's only handle on the store, the handle
    /// covers the whole store and no task uses it any more (`take` waits for those still
    /// running), the buffer is moved out: no copy. Otherwise (other handles or views, a view
    /// of part of the store, across ranks) the elements are copied as `read` copies them.
    /// Across ranks this is a collective like `read`, and every rank gets the same values.
    pub fn take<T: Element>(&self, mut store: Store) -> Result<Vec<T>> {
        let rect = self.ready_to_read::<T>(&store)?;
        let whole = store.root.bound().is_some_and(|b| b.rect == rect);
        if whole && self.inner.shared.channel.get().is_none() && store.app_refs() == 1 {
            // A finished node drops its task (and the task's handles on stores) before it is
            // marked done: once these are done, only handles outside the task graph remain.
            let pending = store.root.meta().access.pending(&rect);
            self.wait_then_check(pending, &store, &rect)?;
            // With tracing, the tracer's first-use map holds a weak reference to every store it
            // has seen (`Tracing::store_name`), which `Arc::get_mut` counts as a handle: every
            // `take` of a traced program copied (stop 59). It never upgrades it, and no task
            // can name this store again (this is its last handle): forgotten here.
            if Arc::strong_count(&store.root) == 1 && Arc::weak_count(&store.root) > 0 {
                let mut front = self.inner.front.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(tr) = front.tracing.as_mut() {
                    tr.forget_store(store.root.id);
                }
            }
            // The authority: no other handle of any kind (a clone, a view, a task) exists.
            if let Some(root) = Arc::get_mut(&mut store.root) {
                return Ok(match root.take_data() {
                    Some(mut data) => {
                        let buf = T::buf_mut(&mut data).expect("dtype checked");
                        std::mem::replace(buf, Buf::from_vec(Vec::new())).into_vec()
                    }
                    // Never touched: zeros, as a read would see them.
                    None => vec![T::default(); rect.volume()],
                });
            }
        }
        self.copy_out(&store, rect, None)
            .map(|v| v.expect("every rank receives"))
    }

    /// Waits (helping) for `nodes`, then fails if a task writing `rect` of `store` failed.
    fn wait_then_check(&self, nodes: Vec<Arc<Node>>, store: &Store, rect: &Rect) -> Result<()> {
        for n in nodes {
            n.watch();
            self.inner
                .wait_helping(&self.inner.shared.completion, || n.is_done());
        }
        match store.root.poisoned_for_read(rect) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Checks a read of `store` as `T`, issues what the window holds and waits until the
    /// store is bound; returns the view's bounds.
    fn ready_to_read<T: Element>(&self, store: &Store) -> Result<Rect> {
        self.check_store(store)?;
        if store.dtype() != T::DTYPE {
            return Err(RuntimeError::DTypeMismatch {
                store: store.id(),
                requested: T::DTYPE,
                actual: store.dtype(),
            });
        }
        self.inner.flush()?;
        self.inner.wait_bound(&store.root, "read")?;
        Ok(store.rect().expect("bound"))
    }

    fn read_to<T: Element>(&self, store: &Store, to: Option<usize>) -> Result<Option<Vec<T>>> {
        let rect = self.ready_to_read::<T>(store)?;
        self.copy_out(store, rect, to)
    }

    /// Gathers `rect` of `store` across ranks (to rank `to`, or every rank), waits for its
    /// writers and copies it out.
    fn copy_out<T: Element>(
        &self,
        store: &Store,
        rect: Rect,
        to: Option<usize>,
    ) -> Result<Option<Vec<T>>> {
        if let Some(ch) = self.inner.shared.channel.get() {
            // Every rank reads the same stores in the same order: a collective.
            let inner = &self.inner;
            let wait = &mut |n: &Arc<Node>| {
                n.watch();
                inner.wait_helping(&inner.shared.completion, || n.is_done())
            };
            crate::replicate::gather(ch, &store.root, rect, to, &inner.shared.counters, wait)?;
            if to.is_some_and(|r| r != ch.rank) {
                return Ok(None);
            }
        }
        self.copy_local(store, rect).map(Some)
    }

    /// Waits for the tasks writing `rect` of `store` and copies this rank's elements of it
    /// out (row-major): the caller knows this rank holds them.
    fn copy_local<T: Element>(&self, store: &Store, rect: Rect) -> Result<Vec<T>> {
        let writers = store.root.meta().access.pending_writers(&rect);
        self.wait_then_check(writers, store, &rect)?;
        // A store no task touched is allocated here, and its copy after it: neither may abort.
        store.root.check_allocatable()?;
        let mut out = Vec::new();
        out.try_reserve_exact(rect.volume())
            .map_err(|_| RuntimeError::OutOfMemory {
                store: store.id(),
                bytes: (rect.volume() * T::DTYPE.size()) as u64,
            })?;
        let bound = store.root.bound().expect("bound");
        let buf = T::buf(store.root.data().expect("bound")).expect("dtype checked");
        let _b =
            store
                .root
                .ledger
                .borrow(rect, false)
                .map_err(|r| RuntimeError::ConcurrentAccess {
                    store: store.id(),
                    rect: format!("{r:?}"),
                })?;
        rect.for_each_run(&bound.rect, |start, len| {
            // SAFETY: shared ledger borrow of `rect`; runs lie inside it.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(buf.base().add(start), len)
            });
        });
        Ok(out)
    }

    /// This rank's own part of `store`, to write a distributed result piecewise (as
    /// `io::store_file` does) instead of gathering it on one rank: the rectangles whose latest
    /// value this rank holds and no lower-numbered rank does, each with its elements
    /// (row-major), in the same order on every rank. The ranks' parts are disjoint and cover
    /// the store (a part every rank holds is rank 0's); on one rank the part is the whole
    /// store. Waits for the tasks writing them.
    ///
    /// Not a collective: who holds what follows from the issued tasks alone, the same on
    /// every rank (the valid-copy map), so no rank asks another. A task that failed on
    /// another rank shows only where it poisons what this rank reads.
    pub fn read_own<T: Element>(&self, store: &Store) -> Result<Vec<(Rect, Vec<T>)>> {
        let rect = self.ready_to_read::<T>(store)?;
        let own: Vec<Rect> = match self.inner.shared.channel.get() {
            None => vec![rect],
            Some(ch) => match &store.root.meta().valid {
                Some(v) => v
                    .split(&rect)
                    .into_iter()
                    .filter(|(_, holders)| holders.trailing_zeros() as usize == ch.rank)
                    .map(|(r, _)| r)
                    .collect(),
                // Every rank holds all of it.
                None if ch.rank == 0 => vec![rect],
                None => vec![],
            },
        };
        own.into_iter()
            .map(|r| Ok((r, self.copy_local(store, r)?)))
            .collect()
    }

    /// Waits until every issued task has run. Fails only if analysing a task still in the window
    /// fails (that task is dropped, and the others are waited for all the same); task
    /// failures are reported by `read` and futures.
    ///
    /// # Errors
    ///
    /// The first error of analysing a task in the window, and [`RuntimeError::InsideTask`]
    /// when called from a body of this runtime's task: the task calling it is one of those
    /// it would wait for.
    pub fn fence(&self) -> Result<()> {
        if self.inner.shared.in_node() {
            return Err(RuntimeError::InsideTask { call: "fence" });
        }
        // Not `?`: the tasks launched before the failing one still run, and the caller (and
        // dropping the runtime, which fences before it stops the workers) must be able to
        // count on them having ended; it returned while they ran.
        let flushed = self.inner.flush();
        let shared = &self.inner.shared;
        self.inner.wait_helping(&shared.idle, || {
            shared.outstanding.load(Ordering::Acquire) == 0
        });
        let mut front = self.inner.front.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tr) = front.tracing.as_mut() {
            tr.let_go_of_replays();
        }
        flushed
    }

    /// A snapshot of the runtime's counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.inner.shared.counters.snapshot();
        s.bytes_allocated = self.inner.mem.allocated.load(Ordering::Relaxed);
        s.bytes_resident = self.resident_bytes();
        s
    }

    /// Bytes of memory the elements of this runtime's live stores occupy now.
    fn resident_bytes(&self) -> u64 {
        if self.ranks() == 1 {
            return self.inner.mem.live_whole.load(Ordering::Relaxed);
        }
        let roots = self.inner.roots.lock().unwrap_or_else(|e| e.into_inner());
        roots
            .iter()
            .filter_map(|r| r.upgrade())
            .map(|r| r.resident_bytes())
            .sum()
    }

    fn check_store(&self, s: &Store) -> Result<()> {
        if s.root.runtime != self.inner.id {
            return Err(RuntimeError::ForeignStore { store: s.id() });
        }
        Ok(())
    }

    /// Validates a launch and puts it in the window.
    pub(crate) fn issue(
        &self,
        l: TaskLauncher<'_>,
        result: Option<ReduceOp>,
    ) -> Result<Option<Future>> {
        // Used in place: moving the spec out of its box would copy it.
        let mut l = l.spec;
        let found = std::mem::replace(&mut l.task, Err(String::new()));
        let Registered { name, body, kernel } = found.map_err(RuntimeError::UnknownTask)?;
        // An `Arc` clone, not a `String`: the name is only formatted when a check fails.
        let task = name.clone();
        for a in &l.args {
            if a.root.runtime != self.inner.id {
                return Err(RuntimeError::ForeignStore { store: a.root.id });
            }
            check_privilege(&task, &a.root, a.privilege)?;
        }
        check_futures(&task, &l.scalars, &self.inner)?;
        let mut front = self.inner.front.lock().unwrap_or_else(|e| e.into_inner());
        let future = result.map(|_| Future::pending(Arc::downgrade(&self.inner)));
        let mut result = result.zip(future.as_ref().map(|f| f.cell.clone()));
        let mut reg = Registered { name, body, kernel };
        // In a replay streak the spec is compared with the recording's next task as it is: on
        // a match its constraints are not resolved, its domain not checked (the recording's
        // are taken) and the task is held at once (`Inner::streak_spec`, tracing/replay.rs).
        if front.tracing.as_ref().is_some_and(|t| t.in_streak()) {
            match self.inner.streak_spec(&mut front, &mut l, reg, result) {
                Ok(r) => {
                    self.keep_spec(l);
                    Counters::add(&self.inner.shared.counters.tasks_issued, 1);
                    return self.issued(front, r).map(|()| future);
                }
                Err(back) => (reg, result) = back,
            }
        }
        let constraints = resolve_constraints(&task, &l.args, &l.constraints)?;
        let domain = match &l.domain {
            Some(d) => Some(Domain::new(d).ok_or_else(|| RuntimeError::BadLaunchDomain {
                task: task.to_string(),
                domain: d.to_vec(),
            })?),
            None => None,
        };
        if let Some(dims) = &l.shard {
            check_shard(&task, dims, domain.as_ref())?;
        }
        let issued = Issued::from_spec(reg, &mut l, constraints, domain, result);
        self.keep_spec(l);
        Counters::add(&self.inner.shared.counters.tasks_issued, 1);
        // Later tasks may read the store before this one is analysed (it may wait in the
        // window): it is as good as bound for them.
        for a in &issued.args {
            if a.privilege == Privilege::WriteUnbound {
                a.root.meta().unbound_issued = true;
            }
        }
        let r = if front.tracing.is_some() {
            self.inner.trace_issue(&mut front, issued)
        } else {
            self.inner.enqueue(&mut front, issued)
        };
        self.issued(front, r).map(|()| future)
    }

    /// Empties a submitted spec (its `args`, `scalars`, `shard` and `task` are taken already)
    /// for the next launcher.
    fn keep_spec(&self, mut l: Box<LaunchSpec>) {
        l.constraints.clear();
        l.domain = None;
        if let Ok(mut spare) = self.inner.spare_spec.try_lock() {
            spare.get_or_insert(l);
        }
    }

    /// After a task went to the tracer or the window: the error of a deferred launch, if
    /// any, and the issuer throttled.
    fn issued(&self, mut front: std::sync::MutexGuard<'_, Front>, r: Result<()>) -> Result<()> {
        let r = r.and(front.deferred.take().map_or(Ok(()), Err));
        self.inner.release(front);
        r?;
        self.inner.throttle();
        Ok(())
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.fence();
        if let Some(a) = self.inner.adaptive.get() {
            a.stop();
            join(&self.inner.window_thread);
        }
        if let Some(ch) = self.inner.shared.channel.get() {
            ch.stop();
            join(&self.inner.comm_thread);
        }
        self.inner.pool.shutdown();
    }
}

/// Joins the thread in `slot`, if any (the runtime's communication or window thread).
fn join(slot: &Mutex<Option<std::thread::JoinHandle<()>>>) {
    let handle = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(h) = handle {
        let _ = h.join();
    }
}

/// `from_share`'s ranges: one list per rank, disjoint, together exactly `0..len`.
fn check_shares(len: usize, shares: &[Vec<Range<usize>>], ranks: usize) -> Result<()> {
    let bad = |why: String| Err(RuntimeError::BadShares { len, why });
    if shares.len() != ranks {
        return bad(format!(
            "{} lists of ranges for {ranks} ranks",
            shares.len()
        ));
    }
    let mut all: Vec<&Range<usize>> = shares.iter().flatten().filter(|r| !r.is_empty()).collect();
    all.sort_by_key(|r| r.start);
    let mut next = 0;
    for r in all {
        if r.start != next || r.end > len {
            return bad(format!("{r:?} after {next} cells covered"));
        }
        next = r.end;
    }
    if next != len {
        return bad(format!("the ranges end at {next}"));
    }
    Ok(())
}

/// The built-in body of [`Runtime::fill`].
fn fill_body(ctx: &mut TaskContext<'_>) {
    fn go<T: Element>(ctx: &TaskContext<'_>) {
        let v = T::from_scalar(ctx.scalar(0)).expect("fill value checked at submit");
        ctx.write::<T>(0).fill(v);
    }
    match ctx.dtype(0) {
        DType::F64 => go::<f64>(ctx),
        DType::F32 => go::<f32>(ctx),
        DType::I64 => go::<i64>(ctx),
        DType::I32 => go::<i32>(ctx),
        DType::U64 => go::<u64>(ctx),
        DType::U32 => go::<u32>(ctx),
        DType::Range => panic!("ranges cannot be filled"),
    }
}

#[cfg(test)]
mod tests;
