//! Stores: n-d arrays of one element type, their views (slices), and the two reference counts.

use crate::analysis::AccessState;
use crate::buffer::{Borrow, Data, Ledger, MapPool};
use crate::dtype::DType;
use crate::error::{Result, RuntimeError};
use crate::execute::graph::Node;
use crate::partition::PartitionId;
use crate::rect::Rect;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The extent and elements of a bound store. A store made by `create` is allocated lazily, at
/// its first access: a store that fusion turns into task-local scratch (a temporary) is never
/// allocated at full size.
pub(crate) struct Bound {
    pub rect: Rect,
    dtype: DType,
    data: OnceLock<Data>,
    /// A launched task names the store, or it was made with its elements: what fusion's
    /// temporaries test asks instead of "allocated", because it is set when a task is
    /// scheduled (a function of the task stream, alike on every rank) while allocation
    /// happens wherever a point first touches the cells (timing).
    used: AtomicBool,
    /// A point has begun allocating `data`: others wait for it spinning, not asleep on the
    /// `OnceLock` ([`StoreRoot::allocate`]). A hint only; `data` decides.
    allocating: AtomicBool,
}

impl Bound {
    /// A bound store whose elements are `data`.
    pub(crate) fn with_data(rect: Rect, data: Data) -> Bound {
        let cell = OnceLock::new();
        let dtype = data.dtype();
        let _ = cell.set(data);
        Bound {
            rect,
            dtype,
            data: cell,
            used: AtomicBool::new(true),
            allocating: AtomicBool::new(true),
        }
    }

    /// A zero-filled store, allocated at its first access.
    pub(crate) fn zeros(rect: Rect, dtype: DType) -> Bound {
        Bound {
            rect,
            dtype,
            data: OnceLock::new(),
            used: AtomicBool::new(false),
            allocating: AtomicBool::new(false),
        }
    }

    pub(crate) fn is_allocated(&self) -> bool {
        self.data.get().is_some()
    }

    /// Records that a launched task names the store (see `used`).
    pub(crate) fn mark_used(&self) {
        self.used.store(true, Ordering::Relaxed);
    }

    /// Whether a launched task named the store, or it was made with its elements.
    pub(crate) fn is_used(&self) -> bool {
        self.used.load(Ordering::Relaxed)
    }

    /// Bytes the elements take (or will take once allocated).
    pub(crate) fn bytes(&self) -> u64 {
        (self.rect.volume() * self.dtype.size()) as u64
    }
}

/// Stores of at least this many bytes are reserved fallibly before their elements are made
/// (`StoreRoot::check_allocatable`).
const RESERVE_FIRST_BYTES: u64 = 64 << 20;

/// What a runtime's stores take: bytes allocated so far, and bytes held by live stores whose
/// buffers are whole (the others, across ranks, are measured page by page: `Buf::resident_bytes`).
/// `Default` (stores made outside a runtime, tests) has a pool of the least budget; a
/// runtime's is [`Memory::for_ranks`].
#[derive(Default)]
pub(crate) struct Memory {
    pub allocated: AtomicU64,
    pub live_whole: AtomicU64,
    /// Mappings of dropped stores, for the next store of the same size (across ranks).
    pool: MapPool,
}

impl Memory {
    /// The memory of a runtime of `ranks` ranks: its pool keeps a share of the machine's.
    pub(crate) fn for_ranks(ranks: usize) -> Memory {
        Memory {
            pool: MapPool::for_ranks(ranks),
            ..Memory::default()
        }
    }

    fn add(&self, bytes: u64, sparse: bool) {
        self.allocated.fetch_add(bytes, Ordering::Relaxed);
        if !sparse {
            self.live_whole.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    fn remove(&self, bytes: u64, sparse: bool) {
        if !sparse {
            self.live_whole.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

/// How many times a point looks for elements another point is allocating before it blocks
/// ([`StoreRoot::allocate`]): the first quarter spinning, the rest yielding.
const ALLOCATION_SPINS: u32 = 256;

impl Drop for StoreRoot {
    fn drop(&mut self) {
        if let Some(b) = self.bound.get().filter(|b| b.is_allocated()) {
            self.mem.remove(b.bytes(), self.sparse);
        }
        if let Some(data) = self.bound.get_mut().and_then(|b| b.data.take()) {
            self.mem.pool.put(data);
        }
    }
}

/// A field on a pair of cache lines of its own (128 bytes: Zen's adjacent-line prefetch
/// pairs them). Why (metg23): the issuing thread writes a store's `pending_refs` (every
/// launch) and `meta` (every write's version, every replay's access state), and the worker
/// that ends a task writes `pending_refs`, while every point reads the store's bound, taint
/// flag and ledger beside them: on shared lines each of those writes cost the points a miss.
/// `stencil_steps` (200-iteration bodies, interleaved): ~3.4–3.5 → ~3.2–3.3 µs a step.
#[repr(align(128))]
pub(crate) struct OwnLine<T>(pub T);

impl<T> std::ops::Deref for OwnLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The shared state of one store; views of it share the root.
pub(crate) struct StoreRoot {
    pub id: u64,
    pub runtime: u64,
    pub dtype: DType,
    pub dim: usize,
    bound: OnceLock<Bound>,
    pub ledger: Ledger,
    /// Handles the application holds ([`Store`] clones), and launchers naming the store that
    /// are not submitted yet (`issue::task::LaunchSpec`). On its own lines: the issuing
    /// thread writes it twice per argument of every task it issues.
    pub app_refs: OwnLine<AtomicUsize>,
    /// Issued tasks that use the store and have not finished.
    pub pending_refs: OwnLine<AtomicUsize>,
    pub meta: OwnLine<Mutex<RootMeta>>,
    /// Bumped whenever `meta.keys` changes, so the solve memo can tell that a store's key
    /// partitions are unchanged without locking and comparing them.
    pub key_epoch: AtomicU64,
    /// Bytes of store elements this store's runtime allocated (shared by its stores).
    mem: Arc<Memory>,
    /// Across ranks: the elements are allocated page by page as they are written
    /// (`Buf::sparse_zeros`), so a rank's memory holds only the pieces it writes or receives.
    sparse: bool,
    /// Set when a task that writes this store failed: its contents are not to be trusted.
    /// With the stream positions of the live poisonings ([`Poison`]): a point asks only for
    /// those from no later than its own task ([`StoreRoot::poisoned_before`]).
    poison: Mutex<Option<Poison>>,
    /// Fast check for `poison` (read by every point before it runs).
    tainted: AtomicBool,
    /// The latest stream position at which a task that rewrote the whole store ended
    /// successfully ([`StoreRoot::clear_poison`]): a failure from before it is not these
    /// contents' ([`StoreRoot::set_poison`]).
    cleared: AtomicU64,
    /// The stream position of the latest task launched that writes the whole store (0: none;
    /// [`StoreRoot::note_rewrite`]). A task reads it as it is launched, in stream order, and
    /// its points ignore poisonings from before it (`Launched::since`). The clear above
    /// comes only when such a task's *last* point ends, while a reader's point depends only on
    /// the points it overlaps, so without this a reader released by an early point of the
    /// rewrite saw the old poison in some runs (`a_whole_rewrite_clears_the_poison_for_every_
    /// reader_point`). (A ring of the latest four, searched by the reader as it ran, lost the
    /// one before a reader whenever the issuing thread had launched four more rewrites by
    /// then: the reader then failed or not by timing.)
    last_rewrite: AtomicU64,
}

/// A store's live poisonings ([`StoreRoot::set_poison`]), in stream order: each one's
/// position, the cells it poisoned (the failed point's sub-store, or `None` for the whole
/// store) and its error. A reader asks for one in a range of positions (between the latest
/// whole rewrite before it and itself) that overlaps the cells it reads, and gets the
/// earliest such (lowest position, then lowest cells): a fixed choice, since the set it
/// chooses from is fixed by the time the reader runs (it waited for every writer of those
/// cells), while the order in which failures land is not. A clear drops those up to its
/// position ([`StoreRoot::clear_poison`]), so a loop that rewrites the store keeps few.
///
/// Why cells: a point of a later task depends only on the points it overlaps. A poisoning
/// by a failed point is seen by exactly the reader points that overlap it, which wait for
/// it; a store-wide poison was seen also by reader points elsewhere in the store that
/// happened to start after the failure, so what failed depended on timing (the held-out
/// panicking streams found plain runs disagreeing with themselves). The list is not capped:
/// a cap that folded older poisonings into a store-wide range (as until stop 47) brings
/// that timing back past it (a task failing in 257 points poisoned cells its good points
/// wrote, for readers that started after the 257th failure only). Each entry costs about
/// what the failure's own error does.
#[derive(Default)]
struct Poison {
    at: Vec<Poisoning>,
}

struct Poisoning {
    at: u64,
    cells: Option<Rect>,
    err: RuntimeError,
    /// Across ranks: received in a piece (`replicate::receive_piece`), that is, an input of
    /// the task it came for, not something that task wrote. Mostly at the sender's position,
    /// before that task's; only a piece that failed to travel poisons at the receiving task's
    /// own position, and this tells it apart from that task's own poisonings.
    received: bool,
}

impl Poison {
    #[cfg(test)]
    fn add(&mut self, at: u64, cells: Option<Rect>, err: RuntimeError) {
        self.insert(Poisoning {
            at,
            cells,
            err,
            received: false,
        });
    }

    fn insert(&mut self, new: Poisoning) {
        let i = self.at.partition_point(|p| p.at <= new.at);
        let same = |p: &&mut Poisoning| p.at == new.at;
        if let Some(p) = self.at[..i]
            .iter_mut()
            .rev()
            .take_while(same)
            .find(|p| p.cells == new.cells && p.received == new.received)
        {
            // The same cells poisoned again at the same position (two failed points reducing
            // into one sub-store, two points of an unbound output, the finish step after its
            // points): the lowest point's error is kept, as the task keeps it, whichever came
            // first in time.
            let mut kept = Some(p.err.clone());
            crate::execute::launch::keep_earliest(&mut kept, new.err);
            p.err = kept.expect("kept");
            return;
        }
        self.at.insert(i, new);
    }

    /// The error of the earliest live poisoning in positions `since..=at` that overlaps
    /// `cells` (`None`: anywhere in the store): lowest position, then lowest cells (the whole
    /// store first, then by lower corner).
    fn first_within(&self, since: u64, at: u64, cells: Option<&Rect>) -> Option<&RuntimeError> {
        self.first_where(cells, |p| since <= p.at && p.at <= at)
    }

    /// [`Poison::first_within`] counting, of the poisonings at `at` itself, only the received
    /// ones: what a fused task's sub-task sees of its inputs (its task's own poisonings are
    /// its sub-tasks', `fusion::failure`).
    fn first_input_within(&self, since: u64, at: u64, cells: &Rect) -> Option<&RuntimeError> {
        self.first_where(Some(cells), |p| {
            since <= p.at && (p.at < at || p.at == at && p.received)
        })
    }

    fn first_where(
        &self,
        cells: Option<&Rect>,
        keep: impl Fn(&Poisoning) -> bool,
    ) -> Option<&RuntimeError> {
        let overlaps = |c: &Option<Rect>| match (c, cells) {
            (Some(c), Some(r)) => c.overlaps(r),
            _ => true,
        };
        (self.at.iter())
            .filter(|p| keep(p) && overlaps(&p.cells))
            .min_by(|a, b| {
                (a.at, a.cells.as_ref().map(Rect::lo)).cmp(&(b.at, b.cells.as_ref().map(Rect::lo)))
            })
            .map(|p| &p.err)
    }

    /// Drops the poisonings up to `at`; true when none is left.
    fn clear_to(&mut self, at: u64) -> bool {
        self.at.retain(|p| p.at > at);
        self.at.is_empty()
    }

    /// Every live poisoning in positions `since..=at` that overlaps `cells`, each with its
    /// position, its cells inside `cells` and its error, in stream order.
    fn all_within(&self, since: u64, at: u64, cells: &Rect) -> Vec<(u64, Rect, RuntimeError)> {
        (self.at.iter())
            .filter(|p| since <= p.at && p.at <= at)
            .filter(|p| p.cells.as_ref().is_none_or(|c| c.overlaps(cells)))
            .map(|p| {
                let c = p.cells.as_ref().map_or(*cells, |c| c.intersect(cells));
                (p.at, c, p.err.clone())
            })
            .collect()
    }
}

/// A store's key partitions, most recent first: at most four (`solver::record_keys`), kept
/// inline, since every new store gets one as its first task is solved.
pub(crate) type Keys = smallvec::SmallVec<[PartitionId; 4]>;

/// Analysis-side metadata, touched only by the issuing side.
#[derive(Default)]
pub(crate) struct RootMeta {
    pub access: AccessState,
    /// Key partitions: the last partition used for each view (by bounds) of the store.
    pub keys: Keys,
    /// Bumped on every write, so that images computed from old values are not reused.
    pub version: u64,
    /// For an unbound store: the node that will bind it.
    pub producer: Option<Arc<Node>>,
    /// For an unbound store: a task writing it has been issued (it may still wait in the
    /// window, unanalysed, so `producer` is not known yet).
    pub unbound_issued: bool,
    /// Across ranks: which rank holds the latest value of which rectangle (`None`: every
    /// rank holds all of it, as when every rank created it alike).
    pub valid: Option<crate::replicate::valid::ValidMap>,
    /// Across ranks, for a store bound by a finish step: each point's length (rank 0 sends
    /// them to the other ranks).
    pub piece_lens: Vec<u64>,
    /// For a `PosRange` store used as an image source: whether the view `.1` was monotone
    /// at version `.0` (checked once per version and view; see `solver::monotone`).
    pub monotone: Option<(u64, Rect, bool)>,
}

impl StoreRoot {
    /// A 1-element `f64` root with id `id`, no runtime attached: for unit tests that only
    /// need stores to name.
    #[cfg(test)]
    pub(crate) fn for_test(id: u64) -> Arc<StoreRoot> {
        Arc::new(StoreRoot::new(
            id,
            0,
            DType::F64,
            1,
            None,
            Arc::default(),
            false,
        ))
    }

    pub(crate) fn new(
        id: u64,
        runtime: u64,
        dtype: DType,
        dim: usize,
        bound: Option<Bound>,
        mem: Arc<Memory>,
        sparse: bool,
    ) -> StoreRoot {
        let cell = OnceLock::new();
        if let Some(b) = bound {
            if b.is_allocated() {
                mem.add(b.bytes(), sparse);
            }
            let _ = cell.set(b);
        }
        StoreRoot {
            id,
            runtime,
            dtype,
            dim,
            bound: cell,
            ledger: Ledger::default(),
            app_refs: OwnLine(AtomicUsize::new(0)),
            pending_refs: OwnLine(AtomicUsize::new(0)),
            meta: OwnLine(Mutex::default()),
            key_epoch: AtomicU64::new(0),
            mem,
            sparse,
            poison: Mutex::new(None),
            tainted: AtomicBool::new(false),
            cleared: AtomicU64::new(0),
            last_rewrite: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn bound(&self) -> Option<&Bound> {
        self.bound.get()
    }

    /// The elements of a bound store, allocated (zero-filled) at the first call. A dropped
    /// store's buffer of the same size is reused (`MapPool`: a mapping across ranks, a large
    /// ordinary buffer on one rank) with its old values zeroed only where a borrow needs it
    /// (`Ledger::install_stale`): a store written whole (`write_all`, CG's fresh `q` every
    /// iteration) is neither zero-filled nor faulted in again.
    #[inline]
    pub(crate) fn data(&self) -> Option<&Data> {
        self.bound_data().map(|(_, data)| data)
    }

    /// What a point of a verified replay takes for `rect` instead of a ledger borrow
    /// ([`Ledger::unheld`]), the elements made first so that the stale cells of a recycled
    /// buffer are installed before they are settled.
    pub(crate) fn unheld(&self, rect: Rect, exclusive: bool, overwrite: bool) -> Borrow<'_> {
        let _ = self.data();
        self.ledger.unheld(rect, exclusive, overwrite)
    }

    /// [`StoreRoot::bound`] and [`StoreRoot::data`] together, the bound looked up once: a
    /// view takes both for every argument of every point.
    #[inline]
    pub(crate) fn bound_data(&self) -> Option<(&Bound, &Data)> {
        let b = self.bound.get()?;
        // The first call allocates, out of line: every view of every point calls this.
        match b.data.get() {
            Some(data) => Some((b, data)),
            None => Some((b, self.allocate(b))),
        }
    }

    /// Whether the elements are allocated or can be: a store of `create` takes memory only at
    /// its first access, and a shape that passed `create` but that the machine cannot hold
    /// aborted the process there (the global allocator's failure handler). Large stores are
    /// first reserved fallibly and given back, which costs one mapping and unmapping next to
    /// a first touch of at least [`RESERVE_FIRST_BYTES`].
    pub(crate) fn check_allocatable(&self) -> Result<()> {
        let Some(b) = self.bound.get().filter(|b| b.data.get().is_none()) else {
            return Ok(());
        };
        let bytes = b.bytes();
        if bytes < RESERVE_FIRST_BYTES || Vec::<u8>::new().try_reserve_exact(bytes as usize).is_ok()
        {
            return Ok(());
        }
        Err(RuntimeError::OutOfMemory {
            store: self.id,
            bytes,
        })
    }

    #[cold]
    #[inline(never)]
    fn allocate<'s>(&'s self, b: &'s Bound) -> &'s Data {
        // In a point this fails its task (and poisons what it writes) instead of aborting.
        if let Err(e) = self.check_allocatable() {
            panic!("{e}");
        }
        // The points of a launch often view a fresh store at once. A loser of the `OnceLock`'s
        // race sleeps on a futex until the winner wakes it, which on this VM cost more than
        // the allocation (a pooled buffer, or calloc): a CG making a new vector per result
        // lost ~3 % of an iteration to it. So a point that finds another allocating waits
        // for it spinning, then yielding, and only then blocks.
        if b.allocating.swap(true, Ordering::AcqRel) {
            for i in 0..ALLOCATION_SPINS {
                if let Some(data) = b.data.get() {
                    return data;
                }
                match i < ALLOCATION_SPINS / 4 {
                    true => std::hint::spin_loop(),
                    false => std::thread::yield_now(),
                }
            }
        }
        b.data.get_or_init(|| {
            self.mem.add(b.bytes(), self.sparse);
            let (data, stale) = if self.sparse {
                Data::sparse(b.dtype, b.rect, Some(&self.mem.pool))
            } else {
                match Data::reused(b.dtype, b.rect, &self.mem.pool) {
                    Some((data, stale)) => (data, Some(stale)),
                    None => (Data::zeros(b.dtype, b.rect.volume()), None),
                }
            };
            if let Some(stale) = stale {
                self.ledger.install_stale(stale);
            }
            data
        })
    }

    /// Bytes of memory the elements occupy now (0 before they are allocated).
    pub(crate) fn resident_bytes(&self) -> u64 {
        self.bound()
            .and_then(|b| b.data.get())
            .map_or(0, Data::resident_bytes)
    }

    /// The elements, moved out (`None` while unbound or never allocated); `&mut` proves no
    /// view of them is alive.
    pub(crate) fn take_data(&mut self) -> Option<Data> {
        // Cells no task touched still hold a recycled mapping's values.
        self.ledger.settle_all();
        let b = self.bound.get_mut()?;
        let data = b.data.take()?;
        *b.allocating.get_mut() = false;
        self.mem.remove(b.bytes(), self.sparse);
        Some(data)
    }

    /// Binds an unbound store; false if it was already bound.
    pub(crate) fn bind(&self, b: Bound) -> bool {
        let bytes = b.bytes();
        let ok = self.bound.set(b).is_ok();
        if ok {
            self.mem.add(bytes, self.sparse);
        }
        ok
    }

    pub(crate) fn meta(&self) -> MutexGuard<'_, RootMeta> {
        self.meta.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The error of the failed task whose output the contents are, if any. Inline for the
    /// common answer (every point asks it of every store it reads).
    #[inline]
    pub(crate) fn poisoned(&self) -> Option<RuntimeError> {
        if !self.tainted() {
            return None;
        }
        self.poison_error()
    }

    /// Whether the store may be poisoned ([`StoreRoot::poisoned`] is `None` when not): one
    /// load, for a point's look at all its stores at once before it asks argument by argument.
    #[inline]
    pub(crate) fn tainted(&self) -> bool {
        self.tainted.load(Ordering::Acquire)
    }

    /// [`StoreRoot::poisoned`] as a point of the task at stream position `at` reading `cells`
    /// must see it: only a poisoning from no later in the stream (an earlier task's failure,
    /// the task's own, or, across ranks, a failed piece received for this task, at the
    /// sender's position of it). A later task that writes the store depends only on
    /// the points of this one it overlaps, so its failing point may poison the store before a
    /// point of this task that reads other cells has run; seeing that poison failed this
    /// task (and poisoned its outputs) only when it lost the race: an earlier task's outcome
    /// depended on the timing of a later one, even on the plain runtime (found by the
    /// held-out stream tests; `a_later_task_s_failure_does_not_fail_an_earlier_reader`).
    /// Nor one from before `since`, the latest whole rewrite launched before the task
    /// ([`StoreRoot::last_rewrite`] as it was launched): the cells the point reads come from
    /// that rewrite's points, which it waited for. Nor one of cells it does not read
    /// ([`Poison`]).
    #[inline]
    pub(crate) fn poisoned_before(
        &self,
        since: u64,
        at: u64,
        cells: &Rect,
    ) -> Option<RuntimeError> {
        self.poisoned_between(since, at, Some(cells))
    }

    /// A poisoning of `cells` (`None`: any) in positions `since..=last`: the one check behind
    /// [`StoreRoot::poisoned_before`] and [`StoreRoot::poisoned_for_read`].
    #[inline]
    fn poisoned_between(
        &self,
        since: u64,
        last: u64,
        cells: Option<&Rect>,
    ) -> Option<RuntimeError> {
        if !self.tainted() {
            return None;
        }
        self.poison_error_between(since, last, cells)
    }

    #[cold]
    fn poison_error(&self) -> Option<RuntimeError> {
        self.poison_error_between(0, u64::MAX, None)
    }

    /// [`StoreRoot::poisoned`] as a read of `cells` after every task launched so far sees
    /// it, once it has waited for the writers of what it reads (the latest whole rewrite's
    /// points among them, but not for the rewrite's end, which clears older poisonings):
    /// poisonings from before that rewrite are not the contents it reads.
    pub(crate) fn poisoned_for_read(&self, cells: &Rect) -> Option<RuntimeError> {
        self.poisoned_between(self.last_rewrite(), u64::MAX, Some(cells))
    }

    /// The error of the earliest live poisoning of `cells` in positions `since..=at`
    /// ([`Poison::first_within`]).
    #[cold]
    fn poison_error_between(
        &self,
        since: u64,
        at: u64,
        cells: Option<&Rect>,
    ) -> Option<RuntimeError> {
        (self.poison.lock().unwrap_or_else(|e| e.into_inner()))
            .as_ref()
            .and_then(|p| p.first_within(since, at, cells).cloned())
    }

    /// Across ranks, what a piece of `cells` sent for a task carries: every poisoning of
    /// those cells that the task (at `at`, ignoring those from before `since`, as
    /// [`StoreRoot::poisoned_before`]) would see here, with its position and its cells inside
    /// `cells` (`replicate::piece`). The receiver records each as it is
    /// ([`StoreRoot::set_received_poison`]), so its copy of `cells` is poisoned exactly where
    /// and as of when this one is.
    pub(crate) fn poisonings_between(
        &self,
        since: u64,
        at: u64,
        cells: &Rect,
    ) -> Vec<(u64, Rect, RuntimeError)> {
        if !self.tainted() {
            return vec![];
        }
        (self.poison.lock().unwrap_or_else(|e| e.into_inner()))
            .as_ref()
            .map_or_else(Vec::new, |p| p.all_within(since, at, cells))
    }

    /// [`StoreRoot::poisoned_before`] without the poisonings at `at` itself but the received
    /// ones: what a fused task's sub-task sees of the tasks before the fused one (its own
    /// position's poisonings are its sub-tasks', which it tells apart by their order,
    /// `fusion::failure`; a failed piece received for it, across ranks, is its input).
    pub(crate) fn poisoned_by_earlier(
        &self,
        since: u64,
        at: u64,
        cells: &Rect,
    ) -> Option<RuntimeError> {
        if !self.tainted() {
            return None;
        }
        (self.poison.lock().unwrap_or_else(|e| e.into_inner()))
            .as_ref()
            .and_then(|p| p.first_input_within(since, at, cells).cloned())
    }

    /// Records that the task at stream position `at`, launched now (in stream order), writes
    /// the whole store.
    pub(crate) fn note_rewrite(&self, at: u64) {
        self.last_rewrite.fetch_max(at, Ordering::AcqRel);
    }

    /// The latest task launched so far that writes the whole store (0: none).
    pub(crate) fn last_rewrite(&self) -> u64 {
        self.last_rewrite.load(Ordering::Acquire)
    }

    /// Marks the contents (`cells`, or the whole store) as produced by a failed task, with its
    /// error, at stream position `at`: the position of the task whose write or transfer failed
    /// (`Launched::position`; see [`StoreRoot::clear_poison`]).
    ///
    /// A poisoning from before the latest successful whole write that has ended is dropped:
    /// those contents were replaced. A failed task's end (`Launched::end`, after its finish
    /// step) can come after a later task rewrote the whole store and ended, since that task's
    /// points depend on the failed task's points, not on its finish step; poisoning then left
    /// the later task's good values poisoned for good (seen under actors, whose finish steps
    /// all go to one worker: `replays_renewing_ended_tasks_fail_fold_and_poison_as_new_ones`).
    /// `cells`: what the failure poisons (a failed point's sub-store), `None` for the whole
    /// store.
    pub(crate) fn set_poison(&self, err: RuntimeError, at: u64, cells: Option<Rect>) {
        self.poison_at(err, at, cells, false);
    }

    /// [`StoreRoot::set_poison`] for a failed piece received (across ranks): the sender's
    /// poisoning of those cells at its own position `at` (`replicate::piece`), or, for a piece
    /// that failed to travel, `at` is the receiving task's position. Either way it is the
    /// receiving task's input, which its sub-tasks see if fused
    /// ([`StoreRoot::poisoned_by_earlier`]).
    pub(crate) fn set_received_poison(&self, err: RuntimeError, at: u64, cells: Option<Rect>) {
        self.poison_at(err, at, cells, true);
    }

    fn poison_at(&self, err: RuntimeError, at: u64, cells: Option<Rect>, received: bool) {
        let mut p = self.poison.lock().unwrap_or_else(|e| e.into_inner());
        // `tainted` first, then `cleared` (both sequentially consistent; `clear_poison` does
        // the reverse): a clear that this misses sees `tainted` and takes the lock after us.
        self.tainted.store(true, Ordering::SeqCst);
        if at < self.cleared.load(Ordering::SeqCst) {
            if p.is_none() {
                self.tainted.store(false, Ordering::Release);
            }
            return;
        }
        p.get_or_insert_with(Poison::default).insert(Poisoning {
            at,
            cells,
            err,
            received,
        });
    }

    /// Across ranks, instead of [`StoreRoot::clear_poison`]: the task at `at` writes the
    /// whole store and every access of it on this rank up to that task's (its own points
    /// included) has finished (`Work::Clear`, after them in the graph). Drops the poisonings
    /// from before `at`: every task launched since reads from `at` on
    /// ([`StoreRoot::last_rewrite`]), and none launched before still looks here. At the
    /// rewrite's end, as on one rank, was too early: a rank's share of the rewrite depends
    /// only on that rank's readers of the cells it writes there (none, on a rank holding no
    /// point of it, which ends it as it is scheduled), so a reader of other cells, or a
    /// failed piece it waits for, came after the clear and computed from failed cells as if
    /// they were good (`a_reader_sees_its_poisoned_cells_though_a_later_rewrite_ended_first_
    /// on_its_rank`). The rewrite's own poisonings (at `at`) stay, whatever its outcome: only
    /// older ones are replaced by it for the tasks after it.
    pub(crate) fn clear_poison_before(&self, at: u64) {
        self.drop_poisonings(at, at.checked_sub(1));
    }

    /// Marks the contents as trustworthy again: the task at stream position `at` rewrote the
    /// whole store. Only a poisoning from no later in the stream is cleared: a task ends when
    /// its last point does, and a later task that writes part of the store depends only on
    /// the points it overlaps, so it may fail (or, across ranks, receive a failed piece)
    /// before the earlier task ends; that failure must survive the earlier task's end.
    pub(crate) fn clear_poison(&self, at: u64) {
        self.drop_poisonings(at, Some(at));
    }

    /// Refuses poisonings from before `cleared` from now on and drops those up to `up_to`
    /// (`None`: none); a later poisoning stays.
    fn drop_poisonings(&self, cleared: u64, up_to: Option<u64>) {
        self.cleared.fetch_max(cleared, Ordering::SeqCst);
        if self.tainted.load(Ordering::SeqCst) {
            let mut p = self.poison.lock().unwrap_or_else(|e| e.into_inner());
            if let (Some(q), Some(up_to)) = (p.as_mut(), up_to) {
                if q.clear_to(up_to) {
                    *p = None;
                    self.tainted.store(false, Ordering::Release);
                }
            }
        }
    }
}

/// The application's handle to a store, or to a rectangular view (slice) of one.
///
/// Views of one store alias: tasks on overlapping views are ordered by the dependence analysis.
/// Cloning or dropping a handle changes the store's application reference count; tasks hold the
/// store separately (the pending count) so that data outlives handles dropped early.
pub struct Store {
    pub(crate) root: Arc<StoreRoot>,
    /// The view in root coordinates, interned; [`ViewKey::WHOLE`] means the whole store (the
    /// only option while unbound).
    pub(crate) view: ViewKey,
}

/// A view's rectangle, interned process-wide: one `&'static Rect` per distinct rectangle, so
/// two keys are equal exactly when their views are, and a key compares as one pointer (`None`,
/// the whole store, is its own key; a rectangle, even the store's whole extent, gets another).
/// The launch path names and compares views for every task (constraint operands, the
/// replay streak's check of each argument); inline `Option<Rect>`s (80 bytes) made an issued
/// argument 96 bytes and a constraint ~190 to write and move, and each check a rectangle
/// compare. Keys are made where a view is (`Store::slice`), not per task.
///
/// Process-wide rather than per runtime so that a view needs no handle to its runtime. The
/// table keeps one leaked rectangle (72 bytes, plus its table entry) per distinct rectangle
/// any view of the process ever had, and is never pruned: a program making a new slice every
/// iteration, each different, grows it by one entry per slice.
#[derive(Clone, Copy)]
pub(crate) struct ViewKey(Option<&'static Rect>);

impl ViewKey {
    /// The whole store (no view).
    pub(crate) const WHOLE: ViewKey = ViewKey(None);

    /// The key of `view`: equal views, the same key; different views, different keys.
    pub(crate) fn of(view: Option<Rect>) -> ViewKey {
        static TABLE: OnceLock<Mutex<rustc_hash::FxHashSet<&'static Rect>>> = OnceLock::new();
        let Some(r) = view else {
            return ViewKey::WHOLE;
        };
        let mut table = TABLE
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(&k) = table.get(&r) {
            return ViewKey(Some(k));
        }
        let k: &'static Rect = Box::leak(Box::new(r));
        table.insert(k);
        ViewKey(Some(k))
    }

    /// The view's rectangle (`None`: the whole store).
    #[inline]
    pub(crate) fn rect(self) -> Option<Rect> {
        self.0.copied()
    }
}

/// By identity: the table gives each distinct rectangle one address.
impl PartialEq for ViewKey {
    #[inline]
    fn eq(&self, other: &ViewKey) -> bool {
        // `None` is the null pointer: one compare of the two addresses.
        let at = |k: &ViewKey| k.0.map_or(std::ptr::null(), |r| r as *const Rect);
        at(self) == at(other)
    }
}

impl Eq for ViewKey {}

impl Store {
    /// A new handle on `root`: the whole store, or a view of it (interned here).
    pub(crate) fn from_root(root: Arc<StoreRoot>, view: Option<Rect>) -> Store {
        Store::keyed(root, ViewKey::of(view))
    }

    fn keyed(root: Arc<StoreRoot>, view: ViewKey) -> Store {
        root.app_refs.fetch_add(1, Ordering::Relaxed);
        Store { root, view }
    }

    /// The store's id (stable for the runtime's lifetime; views share their store's id).
    pub fn id(&self) -> u64 {
        self.root.id
    }

    /// The id of the runtime that made the store: unique in the process (ids are never
    /// reused, not even after that runtime is dropped). What a caller keeping per-runtime
    /// facts (which of its tasks a runtime has registered) keys them by.
    pub fn runtime_id(&self) -> u64 {
        self.root.runtime
    }

    pub fn dtype(&self) -> DType {
        self.root.dtype
    }

    /// The view's shape, or `None` while the store is unbound.
    pub fn shape(&self) -> Option<Vec<usize>> {
        self.rect().map(|r| r.shape())
    }

    pub fn is_bound(&self) -> bool {
        self.root.bound().is_some()
    }

    /// Whether the store's elements occupy memory yet: a store made by
    /// [`Runtime::create`](crate::Runtime::create) is allocated at its first access, and a
    /// temporary that task fusion keeps in task-local scratch never is.
    pub fn is_allocated(&self) -> bool {
        self.root.bound().is_some_and(|b| b.is_allocated())
    }

    /// The view's bounds in the root store's coordinates (`None` while unbound).
    pub fn rect(&self) -> Option<Rect> {
        self.view
            .rect()
            .or_else(|| self.root.bound().map(|b| b.rect))
    }

    /// A view of `range` along dimension `dim`; indices of the view start at 0.
    pub fn slice(&self, dim: usize, range: Range<usize>) -> Result<Store> {
        let rect = self
            .rect()
            .ok_or(RuntimeError::Unbound { store: self.id() })?;
        let bad = || RuntimeError::BadSlice {
            store: self.id(),
            dim,
            lo: range.start,
            hi: range.end,
            shape: rect.shape(),
        };
        if dim >= rect.dim() || range.start > range.end || range.end > rect.extent(dim) {
            return Err(bad());
        }
        let lo = rect.lo()[dim];
        Ok(Store::from_root(
            self.root.clone(),
            Some(rect.with_range(dim, lo + range.start, lo + range.end)),
        ))
    }

    /// Handles the application holds on this store (all views counted), and task launchers
    /// naming it that are not submitted yet.
    pub fn app_refs(&self) -> usize {
        self.root.app_refs.load(Ordering::Relaxed)
    }

    /// Issued tasks using this store that have not finished.
    pub fn pending_refs(&self) -> usize {
        self.root.pending_refs.load(Ordering::Acquire)
    }
}

impl Clone for Store {
    fn clone(&self) -> Store {
        Store::keyed(self.root.clone(), self.view)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.root.app_refs.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "store#{}({:?}, {:?})",
            self.id(),
            self.dtype(),
            self.rect()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Poison;
    use crate::error::RuntimeError;
    use crate::rect::Rect;

    fn err(point: usize) -> RuntimeError {
        RuntimeError::TaskFailed {
            task: "t".into(),
            point: vec![point],
            message: "m".into(),
        }
    }

    fn poison(at: &[u64]) -> Poison {
        let mut p = Poison::default();
        at.iter().for_each(|&a| p.add(a, None, err(0)));
        p
    }

    fn r(lo: usize, hi: usize) -> Rect {
        Rect::new(&[lo], &[hi])
    }

    /// Poisonings at 3 and 10, a whole rewrite at 5: a reader at 7 sees neither (the range
    /// `5..=7` holds none), one at 12 sees 10, and one that no rewrite covers sees 3. (Two
    /// positions kept as one range `3..=10` made the reader at 7 fail.)
    #[test]
    fn a_reader_sees_only_the_poisonings_in_its_range() {
        let p = poison(&[10, 3]);
        assert!(p.first_within(5, 7, None).is_none());
        assert!(p.first_within(5, 12, None).is_some());
        assert!(p.first_within(0, 7, None).is_some());
        assert!(p.first_within(11, 20, None).is_none());
    }

    /// A fused task at 6 sees, of the poisonings at its own position, only a piece received
    /// for it (its input), not what its own sub-tasks poisoned; earlier ones it sees either
    /// way, later ones never.
    #[test]
    fn a_fused_task_sees_a_piece_received_for_it_but_not_its_own_poisonings() {
        let mut p = Poison::default();
        p.add(6, Some(r(0, 10)), err(0));
        assert!(p.first_input_within(0, 6, &r(0, 10)).is_none(), "its own");
        assert!(p.first_within(0, 6, Some(&r(0, 10))).is_some());
        p.insert(super::Poisoning {
            at: 6,
            cells: Some(r(20, 30)),
            err: err(2),
            received: true,
        });
        assert!(p.first_input_within(0, 6, &r(25, 26)).is_some(), "received");
        assert!(
            p.first_input_within(0, 7, &r(5, 6)).is_some(),
            "from before the task"
        );
        assert!(
            p.first_input_within(0, 5, &r(25, 26)).is_none(),
            "from after it"
        );
    }

    /// Two failed points of the task at 4 poison their own cells: a reader of other cells
    /// sees neither, one overlapping either sees it, a whole-store question sees both; the
    /// same point failing twice is kept once.
    #[test]
    fn a_reader_sees_only_the_poisoned_cells_it_reads() {
        let mut p = Poison::default();
        p.add(4, Some(r(0, 10)), err(0));
        p.add(4, Some(r(20, 30)), err(2));
        p.add(4, Some(r(20, 30)), err(2));
        assert_eq!(p.at.len(), 2);
        assert!(
            p.first_within(0, 9, Some(&r(10, 20))).is_none(),
            "between them"
        );
        assert!(p.first_within(0, 9, Some(&r(5, 15))).is_some());
        assert!(p.first_within(0, 9, Some(&r(25, 26))).is_some());
        assert!(p.first_within(0, 9, None).is_some());
        assert!(
            p.first_within(5, 9, Some(&r(0, 30))).is_none(),
            "after them"
        );
        p.add(6, None, err(9));
        assert!(
            p.first_within(0, 9, Some(&r(10, 20))).is_some(),
            "a whole-store poisoning covers any"
        );
    }

    /// The error a reader gets is the earliest poisoning of its cells, whatever order the
    /// failures landed in (a reader of one failed point's cells named whichever point of any
    /// task failed first).
    #[test]
    fn a_reader_gets_the_earliest_poisoning_of_its_cells_in_any_arrival_order() {
        let adds = [
            (7, r(0, 10), 5),
            (4, r(20, 30), 2),
            (4, r(0, 10), 1),
            (4, r(5, 8), 3),
        ];
        let orders: [[usize; 4]; 3] = [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]];
        for order in orders {
            let mut p = Poison::default();
            for i in order {
                let (at, cells, point) = adds[i];
                p.add(at, Some(cells), err(point));
            }
            let point = |e: Option<&RuntimeError>| match e {
                Some(RuntimeError::TaskFailed { point, .. }) => Some(point[0]),
                _ => None,
            };
            assert_eq!(
                point(p.first_within(0, 9, Some(&r(6, 7)))),
                Some(1),
                "{order:?}"
            );
            assert_eq!(
                point(p.first_within(0, 9, Some(&r(25, 26)))),
                Some(2),
                "{order:?}"
            );
            assert_eq!(
                point(p.first_within(5, 9, Some(&r(6, 7)))),
                Some(5),
                "{order:?}"
            );
            assert_eq!(point(p.first_within(0, 9, None)), Some(1), "{order:?}");
        }
    }

    #[test]
    fn a_clear_drops_the_poisonings_up_to_it() {
        let mut p = poison(&[3, 10]);
        assert!(!p.clear_to(5), "10 stays");
        assert!(p.first_within(0, 9, None).is_none() && p.first_within(0, 10, None).is_some());
        assert!(p.clear_to(10), "none left");
        // Not capped: many poisonings stay exact.
        let mut p = Poison::default();
        (0..1000).for_each(|i| p.add(1, Some(r(2 * i, 2 * i + 1)), err(i)));
        assert!(
            p.first_within(0, 9, Some(&r(1, 2))).is_none(),
            "a gap between cells"
        );
    }
}
