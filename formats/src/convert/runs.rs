//! External merge sort of text input into storage order: sorted runs within the memory budget,
//! held in memory while the budget has room for them (see [`Hold`]) and written to temporary
//! files past that, then merged k ways (in rounds when there are more runs than the budget has
//! read buffers for). Runs the final merge takes at once are only distributed by their keys'
//! top bits, and the final merge sorts each bucket of all runs (see
//! [`MergeSource::bucketed`]).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::ranges::{self, Ranges, Span, WINDOW_WORDS};
use super::{duplicate_error, ConvertOptions, Duplicates, Progress, SortedSource, PROGRESS_EVERY};
use crate::chunks::Chunk;
use crate::error::{Error, Result};
use crate::format::Format;
use crate::text::{open_text, EntryReader};

/// The result of run generation: a source that merges the runs, and what was learned.
pub(crate) struct Sorted {
    pub source: MergeSource,
    pub dims: Vec<u64>,
    pub entries: u64,
    pub runs: usize,
    /// Runs written to disk (the others were held in memory).
    pub spilled: usize,
    /// Bytes of the runs held in memory: the final merge has the budget less these.
    pub held_bytes: usize,
    pub merge_rounds: usize,
}

/// Read buffer per run during a merge, derived from the budget.
fn merge_buffer(memory: usize) -> usize {
    (memory / 256).clamp(4 << 10, 1 << 20)
}

/// Reads `input`, sorts it into runs by storage order and merges runs until at most `fan_in`
/// remain; the returned source performs the final merge each time it is scanned.
/// The most entries a text file of this size can hold: a line takes at least two bytes
/// (`1\n`, a value of an array-layout `.mtx`) and a symmetric matrix's line gives two
/// entries. The run is never reserved larger, so that a budget far above the input
/// (`--memory 100G` for a 30 MB file) does not reserve 25 GB that the file cannot fill.
fn most_entries(reader: &dyn EntryReader) -> usize {
    usize::try_from(reader.total_bytes()).map_or(usize::MAX, |b| b.saturating_add(1))
}

/// The run's records, reserved at once: a budget larger than the machine can give is an
/// error naming `--memory`, not an abort that leaves the sorted runs' directory behind.
fn run_records(input: &Path, len: usize) -> Result<Vec<u64>> {
    let mut recs = Vec::new();
    recs.try_reserve_exact(len)
        .map_err(|_| Error::Unsupported {
            path: input.to_path_buf(),
            what: format!(
                "cannot allocate the {} MiB of a sorted run within the memory budget; give a \
             smaller --memory",
                (len * 8) >> 20
            ),
        })?;
    Ok(recs)
}

pub(crate) fn sort_runs(
    input: &Path,
    format: &Format,
    opts: &ConvertOptions,
    temp_parent: &Path,
    progress: &dyn Progress,
) -> Result<Sorted> {
    let mut reader = open_text(input)?;
    reader.set_memory_budget(opts.memory);
    let rank = reader.rank();
    let per_entry = 8 * (rank + 1);
    // A quarter of the budget holds the run being collected; sorting a part of it stably
    // takes a scratch half its size, the parser's blocks in flight an eighth (see
    // `chunks`), and the rest is left to the process and to what the allocator keeps.
    let run_bytes = (opts.memory / 4).max(64 << 10);
    let mut cap = opts
        .run_entries
        .unwrap_or(run_bytes / per_entry)
        .clamp(1, u32::MAX as usize);
    // Listed for a signal handler's `remove_pending_files`: a second Ctrl-C exits at once,
    // without unwinding to this directory's drop.
    let temp = crate::atomic::PendingDir::create_in(temp_parent, ".tessera-sort.")
        .map_err(|e| Error::io(temp_parent, e))?;
    let order = format.mode_order();
    // With declared dimensions whose fields fit one `u64`, the parse workers pack every key
    // (as a spilled run stores it): the run is collected as pairs, and no pass over the
    // run packs them, nor does this thread copy coordinates or track their maxima.
    let declared_max: Option<Vec<u64>> = reader
        .declared_dims()
        .map(|d| order.iter().map(|&m| d[m].saturating_sub(1)).collect());
    let packed = declared_max
        .as_deref()
        .and_then(packing)
        .filter(|bits| reader.pack_keys(order, bits));
    let mut run = RunBuffer {
        rank,
        recs: run_records(input, cap.min(most_entries(&*reader)) * (rank + 1))?,
        writer_buffer: merge_buffer(opts.memory),
        packed: packed.clone(),
        top: None,
    };
    let mut runs = Vec::new();
    let threads = crate::chunks::parse_threads();
    let mut hold = Hold::new(opts, rank, packed.is_some());
    let buffer = merge_buffer(opts.memory);
    let fan_in = opts
        .fan_in
        .unwrap_or((opts.memory / 3 / buffer).max(2))
        .max(2);
    let parallel = super::stitch::supports(format);
    let final_runs = match opts.fan_in {
        Some(_) => fan_in,
        None => final_fan_in(opts.memory, threads, parallel).max(fan_in),
    };
    let mut first_spill = true;
    let mut chunk = Chunk::default();
    let mut max = vec![0u64; rank];
    let mut entries = 0u64;
    progress.stage("sort runs", reader.total_bytes());
    while reader.next_chunk(&mut chunk)? {
        for (m, top) in max.iter_mut().enumerate().filter(|_| packed.is_none()) {
            let coords = chunk.coords.iter().skip(m).step_by(rank);
            *top = coords.fold(*top, |a, &c| a.max(c));
        }
        let mut at = 0;
        while at < chunk.len() {
            let take = (cap - run.len()).min(chunk.len() - at);
            run.append(&chunk, at..at + take, order);
            at += take;
            if run.len() == cap {
                if std::mem::take(&mut first_spill) {
                    // Entries of the whole file, estimated from those read so far.
                    let read = (entries + at as u64) as f64;
                    let share = reader.total_bytes() as f64 / reader.bytes_read().max(1) as f64;
                    let estimate = (read * share) as usize;
                    if opts.run_entries.is_none() {
                        if let Some(smaller) = hold.plan(cap, estimate) {
                            cap = smaller;
                        }
                    }
                    // Runs distributed by their keys' top bits, for the final merge to sort
                    // bucket by bucket (see `MergeSource::bucketed`), when it is expected to
                    // take them: at once, and with each bucket (of keys spread evenly) within a
                    // range of a merge that has a quarter of the budget. Otherwise, or when
                    // the runs turn out otherwise, they are sorted (see below).
                    let runs = estimate.div_ceil(cap.max(1)) * threads;
                    let index_bytes = opts.index_bits as usize / 8;
                    let small = super::stitch::merge_target(
                        opts.memory / 4,
                        rank,
                        index_bytes,
                        opts.run_entries,
                        threads,
                    );
                    run.top = packed
                        .as_ref()
                        .map(|b| bucket_top(estimate, b.iter().sum()))
                        .filter(|&top| {
                            let bucket = (estimate >> top) as u64;
                            parallel
                                && opts.fan_in.is_none()
                                && runs <= final_runs
                                && bucket <= small
                        });
                    hold.planned(run.top.is_some());
                }
                // The buffer still has its capacity of before (it shrinks below).
                let keep = hold.take(run.len(), run.recs.capacity() / (rank + 1));
                let spilled = run.spill(
                    temp.path(),
                    runs.len(),
                    threads,
                    input,
                    format,
                    opts.duplicates,
                    keep,
                )?;
                runs.extend(spilled);
                // Smaller runs from now on (see `Hold::plan`): the buffer gives back the rest.
                run.recs.shrink_to(cap * (rank + 1));
            }
        }
        entries += chunk.len() as u64;
        super::tick(progress, reader.bytes_read())?;
    }
    progress.end_stage();
    let dims = reader
        .declared_dims()
        .unwrap_or_else(|| max.iter().map(|&m| m + 1).collect());
    drop(reader);
    // Packed runs share the declared dimensions' fields: the final merge then reads them
    // as they lie, without packing them again.
    let level_max: Vec<u64> = match (&packed, declared_max) {
        (Some(_), Some(declared)) => declared,
        _ => order.iter().map(|&m| max[m]).collect(),
    };
    if runs.is_empty() {
        // Everything fit in one buffer: merge from memory.
        run.sort();
        run.dedup(input, format, opts.duplicates)?;
        let n = run.len();
        let source = MergeSource {
            rank,
            runs: Vec::new(),
            memory: Some(run),
            buffer: 0,
            packing: None,
            files: Default::default(),
            released: Released::every(RELEASE_STEP),
            _temp: temp,
        };
        return Ok(Sorted {
            source,
            dims,
            entries,
            runs: usize::from(n > 0),
            spilled: 0,
            held_bytes: 0,
            merge_rounds: 0,
        });
    }
    if run.len() > 0 {
        let keep = hold.take(run.len(), run.recs.capacity() / (rank + 1));
        let spilled = run.spill(
            temp.path(),
            runs.len(),
            threads,
            input,
            format,
            opts.duplicates,
            keep,
        )?;
        runs.extend(spilled);
    }
    drop(run);
    // Held runs distributed by their keys' top bits stay so when every run is, the parallel
    // final merge takes them at once, and each bucket of all runs fits what a worker merges
    // in memory; otherwise each is sorted now, as spilled runs were.
    let largest = largest_bucket(&runs);
    let target = super::stitch::merge_target(
        opts.memory - hold.held,
        rank,
        opts.index_bits as usize / 8,
        opts.run_entries,
        threads,
    );
    // Ranges of runs in files are read whole beside their bucket: half the target each.
    let target = match runs.iter().any(|r| r.held.is_none()) {
        true => target / 2,
        false => target,
    };
    let keep_buckets =
        parallel && runs.len() <= final_runs && largest.is_some_and(|n| n as u64 <= target);
    if !keep_buckets {
        runs.iter_mut().try_for_each(sort_buckets_of)?;
    }
    let run_count = runs.len();
    let spilled = runs.iter().filter(|r| r.held.is_none()).count();
    let mut merge_rounds = 0;
    let mut next_id = runs.len();
    // Keys that pack into a `u64` are merged as pairs, by every core (see `rounds`).
    let bits = packing(&level_max);
    let check = super::rounds::Check {
        input,
        format,
        duplicates: opts.duplicates,
        rank,
    };
    while runs.len() > final_runs {
        merge_rounds += 1;
        let stage = format!("merge round {merge_rounds}");
        if let Some(bits) = &bits {
            // Each group's runs are open at once, on every thread: within what the final
            // merge may hold open (see `final_fan_in`).
            let fan_in = fan_in.min(MAX_FINAL_RUNS / threads.max(1));
            let (merged, size) = super::rounds::plan(runs.len(), final_runs, fan_in, threads);
            progress.stage(&stage, merged as u64);
            let rest = runs.split_off(merged);
            let (how, at) = ((size, threads, buffer), (temp.path(), next_id));
            runs = super::rounds::merge_round(&runs, bits, how, at, &check, progress)?;
            next_id += runs.len();
            runs.extend(rest);
            progress.end_stage();
            continue;
        }
        progress.stage(&stage, runs.len() as u64);
        let mut merged = Vec::new();
        for (g, group) in runs.chunks(fan_in).enumerate() {
            let path = temp.path().join(format!("run-{next_id}"));
            next_id += 1;
            let narrow = group.iter().all(|r| r.narrow);
            let mut out = RunWriter::create(&path, narrow, buffer)?;
            // Consecutive runs merge into one that keeps their place in input order; sums
            // wait for the final merge (see `spill`), only rejection happens here.
            let mut dedup = Dedup {
                pending: None,
                input,
                format,
                duplicates: opts.duplicates,
            };
            merge(group, rank, buffer, &mut |k, v| match opts.duplicates {
                Duplicates::Error => dedup.push(k, v, &mut |k, v| out.write(k, v)),
                Duplicates::Sum => out.write(k, v),
            })?;
            dedup.flush(&mut |k, v| out.write(k, v))?;
            out.finish()?;
            for r in group {
                let _ = std::fs::remove_file(&r.path);
            }
            merged.push(Run {
                path,
                narrow,
                packed: None,
                held: None,
                buckets: None,
                low_bits: None,
            });
            super::tick(progress, ((g + 1) * fan_in) as u64)?;
        }
        progress.end_stage();
        runs = merged;
    }
    let source = MergeSource {
        rank,
        runs,
        memory: None,
        buffer,
        packing: packing(&level_max),
        files: Default::default(),
        released: Released::every(RELEASE_STEP),
        _temp: temp,
    };
    Ok(Sorted {
        source,
        dims,
        entries,
        runs: run_count,
        spilled,
        held_bytes: hold.held,
        merge_rounds,
    })
}

/// How much of the budget sorted runs may take in memory instead of files. Writing a run
/// and reading it back costs the kernel more than the run's bytes suggest (page-cache
/// pages allocated, filled, written back or freed: on the bench's 263 MB unsorted `.tns`
/// at 256 MiB, about as much system time as the whole conversion's user time), so runs
/// stay in memory (16 bytes an entry, as (packed key, value) pairs) while they fit, and
/// only those past the limit are spilled. While runs are collected, the budget holds the
/// run buffer, the sort's scratch beside it (if any), the parser's blocks in flight (an
/// eighth, see `chunks`) and the held runs; the final merge then has the budget less the
/// held runs (`Sorted::held_bytes`), at least a quarter of it.
struct Hold {
    /// The working budget.
    memory: usize,
    /// Bytes of an entry in the run buffer, and of the sort's scratch beside it.
    per_entry: usize,
    /// Bytes they take (16 a pair).
    held: usize,
    /// Write runs to disk even when held (`ConvertOptions::spill_runs`): the same
    /// accounting, so the same final merge, with the runs read back from files.
    to_disk: bool,
    /// The input will not fit whole (see [`Hold::plan`]): its first runs are held while
    /// they fit, the rest spilled.
    part: bool,
    /// No run is held (see [`Hold::planned`]).
    off: bool,
}

impl Hold {
    /// `packed`: the parse workers pack the keys into pairs (see `sort_runs`).
    fn new(opts: &ConvertOptions, rank: usize, packed: bool) -> Self {
        // A run's sort takes scratch beside the buffer for pairs of ranks below 3 (a
        // buffer of pairs of its own, `radix_sort_own_scratch`; ranks of 3 and more sort
        // in the room behind the pairs) and, for records whose keys do not pack, half the
        // records (the stable sort's).
        let record = 8 * (rank + 1);
        let own = if rank < 3 { 16 } else { 0 };
        let scratch = if packed { own } else { own.max(record / 2) };
        Hold {
            memory: opts.memory,
            per_entry: record + scratch,
            held: 0,
            to_disk: opts.spill_runs,
            part: false,
            off: false,
        }
    }

    /// Bytes the run buffer, its sort's scratch and the held runs may take while runs are
    /// collected: the budget less the parser's blocks in flight (an eighth) and a 16th for
    /// the rest (the chunk being copied, the process's own).
    fn collecting(&self) -> usize {
        self.memory - self.memory / 8 - self.memory / 16
    }

    /// Bytes the held runs may take beside a run buffer of `cap` entries: what collecting
    /// leaves them, and at most three quarters of the budget (the final merge's at least a
    /// quarter), or an eighth when only part of the input is held (see [`Hold::plan`]).
    fn limit(&self, cap: usize) -> usize {
        if self.off {
            return 0;
        }
        // Held in part, runs up to what collecting leaves them took peak RSS past the
        // budget as collecting ended and the final merge began (the generator's 954 MB
        // unsorted `.mtx` at 128 MiB: 148 MiB, at 192 MiB: 203 MiB); at most a quarter
        // still peaked at 127.5 of 128 MiB: without held runs, that moment already peaks
        // ~21 MiB above the collecting's plateau (106 MiB at 128, sampled every 3 ms).
        let most = match self.part {
            true => self.memory / 8,
            false => self.memory / 4 * 3,
        };
        (self.collecting())
            .saturating_sub(cap * self.per_entry)
            .min(most)
    }

    /// Whether the runs of a buffer of `n` entries (of a run buffer of `cap`) stay in
    /// memory; they are counted as held when they fit, even when `to_disk`.
    fn take(&mut self, n: usize, cap: usize) -> bool {
        let bytes = n * 16;
        if self.held + bytes > self.limit(cap) {
            return false;
        }
        self.held += bytes;
        !self.to_disk
    }

    /// Decides, at the first full run buffer of `cap` entries, from an estimate of the
    /// input's `entries`, whether runs are held: all of them (with a 32nd to spare) fit
    /// beside this buffer, or beside a smaller one of at least a quarter of `cap` (the
    /// size returned, for the runs from now on), or else the first runs are held while they
    /// fit and the rest spilled (when the final merge takes the runs by buckets, see
    /// [`Hold::planned`]). Before conv24 none was held then: on a 2.1 GB unsorted `.tns` at
    /// 256 MiB, 10 of 88 runs held had made the conversion slower (31.1 s against 27.6 s,
    /// one run each under load, before the bucketed final merge). With it (conv24, the
    /// generator's 1.05 GB unsorted `.tns`, 44.7 M entries, 256 MiB, 4 interleaved single
    /// jobs at load 2-4, `TESSERA_BENCH_JOB=convert chrt -f 1 taskset -c 0,1`): 8 of 44 runs
    /// held, system time 1.47-1.81 -> 1.13-1.39 s, wall 2.47-2.94 -> 2.18-2.66 s (medians
    /// 2.65 -> 2.39 s), peak RSS 85 -> 214 MB; the same tensor (text written back, cmp).
    fn plan(&mut self, cap: usize, entries: usize) -> Option<usize> {
        let bytes = (entries + entries / 32) * 16;
        if bytes <= self.limit(cap) {
            return None;
        }
        let smaller = self.collecting().saturating_sub(bytes) / self.per_entry;
        if bytes > self.limit(0) || smaller < cap / 4 {
            self.part = true;
            return None;
        }
        Some(smaller)
    }

    /// After [`Hold::plan`]: whether the final merge is expected to take the runs by
    /// buckets (`bucketed`, see `MergeSource::bucketed`). Runs held in part of an input
    /// too large for them stay held only then: merge rounds (or a merge of sorted runs)
    /// would have their buffers beside the held runs.
    fn planned(&mut self, bucketed: bool) {
        self.off = self.part && !bucketed;
    }
}

/// Runs the final merge takes at once. A merge round passes the data of the runs it merges
/// through one more write and read (`rounds`: only the runs past this count), so it is
/// worth avoiding wherever the final merge can take more runs than a round can. The
/// parallel final merge (`stitch::merged`) merges a range of packed runs in memory
/// (positioned reads, no buffer per run), or else reads each run through a buffer of
/// `memory / 8 / threads / runs`, at least [`MIN_RUN_BUFFER`]: it stays within the budget
/// up to `memory / (8 · threads · MIN_RUN_BUFFER)` runs. At most [`MAX_FINAL_RUNS`], as
/// every run is a file held open (by the shared reader, and by each worker's streaming
/// merge) and the usual limit is 1024. The serial merge into the general packer has a full
/// buffer per run, so it keeps the rounds' fan-in (0 here).
fn final_fan_in(memory: usize, threads: usize, parallel: bool) -> usize {
    if !parallel {
        return 0;
    }
    (memory / (8 * threads.max(1) * MIN_RUN_BUFFER)).min(MAX_FINAL_RUNS)
}

/// The most runs the parallel final merge takes at once (see [`final_fan_in`]).
const MAX_FINAL_RUNS: usize = 256;

/// The smallest read buffer per run of the parallel final merge's streaming path.
pub(crate) const MIN_RUN_BUFFER: usize = 2 << 10;

/// A sorted run on disk. A spilled run whose keys pack into 64 bits (nearly always) is
/// stored as its sorted (packed key, value) pairs, written as they lie in memory: 16 bytes
/// a record and no encoding; one only distributed by the top bits of its keys, as compact
/// records without those bits ([`distribute_compact`]); merge rounds write pairs too
/// (`rounds`). Otherwise (keys past 64 bits, and the runs their merge rounds write)
/// coordinates are stored as 32-bit words when all of the run's fit, which cuts the bytes
/// written and read back by the sort by about a third.
pub(crate) struct Run {
    path: PathBuf,
    /// Every coordinate fits 32 bits.
    narrow: bool,
    /// Records are (packed key, value) pairs, the key's fields of these bits (see
    /// [`sort_pairs`]).
    packed: Option<Vec<u32>>,
    /// The run's sorted pairs, when the budget held it in memory (see [`Hold`]): no file
    /// was written, and `path` names none.
    held: Option<Box<[[u64; 2]]>>,
    /// Where each bucket of a run begins (one more than the buckets: the last is the run's
    /// length), when its pairs are only distributed by the top bits of their keys
    /// (see [`distribute`]) and not yet sorted below them: the final merge then sorts each
    /// bucket of all runs at once instead of merging sorted runs ([`MergeSource::bucketed`]).
    buckets: Option<Box<[usize]>>,
    /// Set for a distributed run written to a file: its records there are compact, each the
    /// key's bits below its bucket's (these many, in as few little-endian bytes) and the
    /// value (see [`distribute_compact`]), read back by buckets ([`read_compact`]).
    low_bits: Option<u32>,
}

impl Run {
    /// A run written to `path` as sorted pairs packed by `bits` (by a spill or a round).
    pub(super) fn pairs(path: &Path, bits: &[u32]) -> Run {
        Run {
            path: path.to_path_buf(),
            narrow: bits.iter().all(|&b| b <= 32),
            packed: Some(bits.to_vec()),
            held: None,
            buckets: None,
            low_bits: None,
        }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn narrow(&self) -> bool {
        self.narrow
    }

    pub(super) fn packed(&self) -> Option<&[u32]> {
        self.packed.as_deref()
    }

    pub(super) fn held(&self) -> Option<&[[u64; 2]]> {
        self.held.as_deref()
    }

    /// Bytes of one record: the packed key or the coordinates (32- or 64-bit), and the value.
    pub(super) fn record_bytes(&self, rank: usize) -> usize {
        match (self.low_bits, &self.packed) {
            (Some(low), _) => compact_bytes(low),
            (None, Some(_)) => 16,
            (None, None) => (if self.narrow { 4 } else { 8 }) * rank + 8,
        }
    }
}

/// Entries of one run while they are collected: records of the level-order key followed by
/// the value's bits, flattened.
pub(crate) struct RunBuffer {
    rank: usize,
    /// Records, or (packed key, value bits) pairs when `packed`; the capacity is that of
    /// the records either way, and pairs leave the rest to the sort (see [`sort_pairs`]).
    recs: Vec<u64>,
    /// Bytes buffered by each run writer.
    writer_buffer: usize,
    /// The entries come as pairs whose keys have fields of these bits (see
    /// `chunks::KeyPacking`).
    packed: Option<Vec<u32>>,
    /// Runs held in memory are only distributed by this many top bits of their keys (see
    /// [`distribute`]), when set; sorted otherwise.
    top: Option<u32>,
}

impl RunBuffer {
    fn len(&self) -> usize {
        match self.packed {
            Some(_) => self.recs.len() / 2,
            None => self.recs.len() / (self.rank + 1),
        }
    }

    fn record(&self, e: usize) -> (&[u64], f64) {
        let s = self.rank + 1;
        let r = &self.recs[e * s..(e + 1) * s];
        (&r[..self.rank], f64::from_bits(r[self.rank]))
    }

    /// Appends entries `range` of `chunk` as records, their coordinates in level `order`.
    fn append(&mut self, chunk: &Chunk, range: Range<usize>, order: &[usize]) {
        if self.packed.is_some() {
            self.recs
                .extend_from_slice(bytemuck::cast_slice(&chunk.pairs[range]));
            return;
        }
        let rank = self.rank;
        let coords = &chunk.coords[range.start * rank..range.end * rank];
        // One branch-free loop per common rank: this copy runs on the thread that feeds
        // the parsers, once per entry of the input.
        macro_rules! fixed {
            ($($r:literal)*) => {
                match rank {
                    $($r => {
                        let order: [usize; $r] = order.try_into().expect("the rank's order");
                        for (c, &v) in coords.chunks_exact($r).zip(&chunk.vals[range]) {
                            let c: &[u64; $r] = c.try_into().expect("a coordinate per mode");
                            self.recs.extend(order.map(|m| c[m]));
                            self.recs.push(v.to_bits());
                        }
                    })*
                    0 => self.recs.extend(chunk.vals[range].iter().map(|v| v.to_bits())),
                    _ => {
                        for (c, &v) in coords.chunks_exact(rank).zip(&chunk.vals[range]) {
                            self.recs.extend(order.iter().map(|&m| c[m]));
                            self.recs.push(v.to_bits());
                        }
                    }
                }
            };
        }
        fixed!(1 2 3 4)
    }

    fn sort(&mut self) {
        let n = self.len();
        if let Some(bits) = self.packed.take() {
            self.recs.resize(n * (self.rank + 1), 0);
            sort_packed_pairs(&mut self.recs, n, &bits);
            spread_pairs(&mut self.recs, &bits);
            return;
        }
        if !sort_packed(&mut self.recs, self.rank) {
            sort_records(&mut self.recs, self.rank);
        }
    }

    fn dedup(&mut self, input: &Path, format: &Format, duplicates: Duplicates) -> Result<()> {
        let n = dedup_records(&mut self.recs, self.rank, input, format, duplicates)?;
        self.recs.truncate(n);
        Ok(())
    }

    /// Cuts the buffer into up to `pieces` parts, and on one thread per part sorts it (stably),
    /// rejects duplicates if asked to, and writes it as a run file `run-{first_id + i}`. Parts
    /// are runs of their own, so sorting uses every core without any extra memory.
    /// Duplicates are *not* summed here: a run's partial sums would group the additions by
    /// run, and runs depend on the memory budget and the thread count. They are summed once,
    /// in input order, by the final merge (see [`merge`]).
    ///
    /// With `keep`, runs of (packed key, value) pairs are held in memory instead of written
    /// (see [`Hold`]); runs of records always go to files.
    #[allow(clippy::too_many_arguments)]
    fn spill(
        &mut self,
        dir: &Path,
        first_id: usize,
        pieces: usize,
        input: &Path,
        format: &Format,
        duplicates: Duplicates,
        keep: bool,
    ) -> Result<Vec<Run>> {
        if let Some(bits) = self.packed.clone() {
            let at = (dir, first_id, pieces);
            return self.spill_pairs(&bits, at, (input, format, duplicates), keep);
        }
        let stride = self.rank + 1;
        let per_piece = self.len().div_ceil(pieces.max(1)).max(1) * stride;
        let (rank, writer_buffer) = (self.rank, self.writer_buffer);
        let results = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .recs
                .chunks_mut(per_piece)
                .enumerate()
                .map(|(i, piece)| {
                    let path = dir.join(format!("run-{}", first_id + i));
                    scope.spawn(move || -> Result<Run> {
                        if let Some(bits) = sort_pairs(piece, rank) {
                            let n = piece.len() / (rank + 1);
                            let pairs = bytemuck::cast_slice(&piece[..2 * n]);
                            let check = (input, format, duplicates);
                            return write_pairs(pairs, &bits, &path, check, keep);
                        }
                        sort_records(piece, rank);
                        if duplicates == Duplicates::Error {
                            dedup_records(piece, rank, input, format, duplicates)?;
                        }
                        let recs = &piece[..];
                        let narrow = recs
                            .chunks_exact(rank + 1)
                            .all(|r| r[..rank].iter().all(|&c| c <= u64::from(u32::MAX)));
                        let mut out = RunWriter::create(&path, narrow, writer_buffer)?;
                        out.write_records(recs, rank)?;
                        out.finish()?;
                        Ok(Run {
                            path,
                            narrow,
                            packed: None,
                            held: None,
                            buckets: None,
                            low_bits: None,
                        })
                    })
                })
                .collect();
            join_runs(handles)
        });
        self.recs.clear();
        results
    }

    /// [`RunBuffer::spill`] of pairs packed by `bits`: the same pieces (so the same runs), each
    /// sorted with its share of the room behind the pairs (as [`sort_pairs`] has).
    fn spill_pairs(
        &mut self,
        bits: &[u32],
        (dir, first_id, pieces): (&Path, usize, usize),
        check: (&Path, &Format, Duplicates),
        keep: bool,
    ) -> Result<Vec<Run>> {
        let n = self.len();
        let per_piece = n.div_ceil(pieces.max(1)).max(1);
        // Held runs are left to the final merge to sort below their top bits (see
        // `MergeSource::bucketed`); rejecting duplicates needs each run sorted.
        let top = self.top.filter(|_| check.2 == Duplicates::Sum);
        if top.is_none() || !keep {
            // Zeroes the room behind the pairs: the sort's second buffer (below).
            self.recs.resize(n * (self.rank + 1).max(2), 0);
        }
        let (pairs, rest) = self.recs.split_at_mut(2 * n);
        let pairs: &mut [[u64; 2]] = bytemuck::cast_slice_mut(pairs);
        // Ranks of 3 and more leave room for a radix sort's second buffer, as in `sort_pairs`.
        let mut scratch: Vec<&mut [[u64; 2]]> = if rest.len() >= 2 * n {
            let rest: &mut [[u64; 2]] = bytemuck::cast_slice_mut(&mut rest[..2 * n]);
            rest.chunks_mut(per_piece).collect()
        } else {
            Vec::new()
        };
        let total: u32 = bits.iter().sum();
        let results = std::thread::scope(|scope| {
            let handles: Vec<_> = pairs
                .chunks_mut(per_piece)
                .enumerate()
                .map(|(i, piece)| {
                    let path = dir.join(format!("run-{}", first_id + i));
                    let scratch = (i < scratch.len()).then(|| std::mem::take(&mut scratch[i]));
                    scope.spawn(move || -> Result<Run> {
                        if let Some(top) = top {
                            let shift = total - top;
                            if keep {
                                let mut held = vec![[0u64; 2]; piece.len()].into_boxed_slice();
                                let buckets = distribute(piece, &mut held, shift, top);
                                return Ok(Run {
                                    path,
                                    narrow: bits.iter().all(|&b| b <= 32),
                                    packed: Some(bits.to_vec()),
                                    held: Some(held),
                                    buckets: Some(buckets),
                                    low_bits: None,
                                });
                            }
                            // Distributed into the sort's second buffer as compact records,
                            // and written from it.
                            let mut own;
                            let out = match scratch {
                                Some(s) => s,
                                None => {
                                    own = vec![[0u64; 2]; piece.len()];
                                    &mut own[..]
                                }
                            };
                            let out: &mut [u8] = bytemuck::cast_slice_mut(out);
                            let buckets = distribute_compact(piece, out, shift, top);
                            let bytes = &out[..piece.len() * compact_bytes(shift)];
                            let file = File::create(&path).map_err(|e| Error::io(&path, e))?;
                            crate::piecewise::write_all_at(&file, bytes, 0)
                                .map_err(|e| Error::io(&path, e))?;
                            return Ok(Run {
                                path,
                                narrow: bits.iter().all(|&b| b <= 32),
                                packed: Some(bits.to_vec()),
                                held: None,
                                buckets: Some(buckets),
                                low_bits: Some(shift),
                            });
                        }
                        match scratch {
                            Some(s) => radix_sort_pairs(piece, s, total),
                            None => radix_sort_own_scratch(piece, total),
                        }
                        write_pairs(piece, bits, &path, check, keep)
                    })
                })
                .collect();
            join_runs(handles)
        });
        self.recs.clear();
        results
    }
}

/// The runs of the sorting threads `handles`, in their order; the first error if any failed.
fn join_runs(handles: Vec<std::thread::ScopedJoinHandle<'_, Result<Run>>>) -> Result<Vec<Run>> {
    handles
        .into_iter()
        .map(|h| h.join().expect("sorting threads do not panic"))
        .collect()
}

/// Sorts the `n` pairs at the front of `recs` (keys packed by `bits`) stably by key, with
/// the room behind them as the radix sort's second buffer when there is enough.
fn sort_packed_pairs(recs: &mut [u64], n: usize, bits: &[u32]) {
    let (pairs, rest) = recs.split_at_mut(2 * n);
    let pairs: &mut [[u64; 2]] = bytemuck::cast_slice_mut(pairs);
    if rest.len() >= 2 * n {
        let scratch: &mut [[u64; 2]] = bytemuck::cast_slice_mut(&mut rest[..2 * n]);
        radix_sort_pairs(pairs, scratch, bits.iter().sum());
    } else {
        radix_sort_own_scratch(pairs, bits.iter().sum());
    }
}

/// [`radix_sort_pairs`] with a second buffer of its own, for ranks below 3, whose records
/// leave less room than that behind the pairs. No more memory than the stable comparison
/// sort it replaces takes for runs of up to 500,000 pairs (its scratch is then as long as
/// the pairs; longer runs come with budgets of 64 MiB and more, where the extra is a 24th of
/// the budget), and far fewer instructions.
fn radix_sort_own_scratch(pairs: &mut [[u64; 2]], bits: u32) {
    let mut scratch = vec![[0u64; 2]; pairs.len()];
    radix_sort_pairs(pairs, &mut scratch, bits);
}

/// Writes sorted `pairs` (see [`sort_pairs`]) as a run file of pairs, as they lie in
/// memory, or with `keep` holds a copy of them in memory instead; rejects repeated keys
/// when asked to.
fn write_pairs(
    pairs: &[[u64; 2]],
    bits: &[u32],
    path: &Path,
    (input, format, duplicates): (&Path, &Format, Duplicates),
    keep: bool,
) -> Result<Run> {
    let rank = bits.len();
    if duplicates == Duplicates::Error {
        if let Some(w) = pairs.windows(2).find(|w| w[0][0] == w[1][0]) {
            let mut key = vec![0u64; rank];
            unpack(w[0][0], bits, &mut key);
            return Err(duplicate_error(input, format, &key));
        }
    }
    let held = if keep {
        Some(Box::from(pairs))
    } else {
        let out = File::create(path).map_err(|e| Error::io(path, e))?;
        crate::piecewise::write_all_at(&out, bytemuck::cast_slice(pairs), 0)
            .map_err(|e| Error::io(path, e))?;
        None
    };
    Ok(Run {
        held,
        ..Run::pairs(path, bits)
    })
}

/// `pairs` distributed stably by the `top` bits of their keys at `shift` and above (the
/// keys have no bits above those) into `out` (as long), and where each of the `2^top`
/// buckets begins in it (and the length last). One counting pass and one scatter: the run's
/// copy into held memory, or into the buffer it is written from, which sorting it would have
/// taken as well.
fn distribute(pairs: &[[u64; 2]], out: &mut [[u64; 2]], shift: u32, top: u32) -> Box<[usize]> {
    let (starts, bucket) = bucket_starts(pairs, shift, top);
    let mut next = starts[..starts.len() - 1].to_vec();
    for p in pairs {
        let b = bucket(p[0]);
        out[next[b]] = *p;
        next[b] += 1;
    }
    starts
}

/// Where each bucket of `pairs` by the `top` bits of their keys at `shift` begins, and the
/// length last (see [`distribute`]); with the function from a key to its bucket.
fn bucket_starts(
    pairs: &[[u64; 2]],
    shift: u32,
    top: u32,
) -> (Box<[usize]>, impl Fn(u64) -> usize) {
    let buckets = 1usize << top;
    // Masked to the buckets (a no-op for keys of their bits): indexes without bounds checks.
    let bucket = move |key: u64| (key >> shift) as usize & (buckets - 1);
    let mut starts = vec![0usize; buckets + 1];
    for p in pairs {
        starts[bucket(p[0]) + 1] += 1;
    }
    for b in 1..starts.len() {
        starts[b] += starts[b - 1];
    }
    (starts.into_boxed_slice(), bucket)
}

/// Bytes of a compact record whose key keeps `low` bits (see [`distribute_compact`]).
fn compact_bytes(low: u32) -> usize {
    low.div_ceil(8) as usize + 8
}

/// [`distribute`] writing compact records into `out` (at least [`compact_bytes`]`(shift)`
/// bytes a pair): each the key's `shift` bits below its bucket's, in the fewest little-endian
/// bytes, then the value's 8. A bucket's records lie together, so the bits dropped are the
/// bucket's number, known where it is read back ([`read_compact`]). Spilled runs are written
/// and read once each; at 2 GB of unsorted text (51-bit keys, 11 of them the buckets') a
/// record takes 13 bytes instead of 16, and every byte not written spares the page cache a
/// fresh page (see `piecewise`). The buckets lie last first (bucket `b` at records `n -
/// starts[b + 1]..n - starts[b]`, in input order within it): the final merge reads them first
/// to last, so what it has read is the file's tail, which it cuts off as it goes
/// ([`MergeSource::release`]).
fn distribute_compact(pairs: &[[u64; 2]], out: &mut [u8], shift: u32, top: u32) -> Box<[usize]> {
    let (starts, bucket) = bucket_starts(pairs, shift, top);
    let rec = compact_bytes(shift);
    let low = low_mask(shift);
    let mut next: Vec<usize> = (0..starts.len() - 1)
        .map(|b| compact_from(&starts, b + 1) * rec)
        .collect();
    for p in pairs {
        let at = &mut next[bucket(p[0])];
        // All eight bytes of the key, then the value over the ones past its `rec - 8`.
        out[*at..*at + 8].copy_from_slice(&(p[0] & low).to_le_bytes());
        out[*at + rec - 8..*at + rec].copy_from_slice(&p[1].to_le_bytes());
        *at += rec;
    }
    starts
}

/// Records of buckets `b..` of a run whose buckets begin at `starts`. A compact run file
/// holds its buckets last first (see [`distribute_compact`]), so these come first in it: this
/// is where bucket `b - 1` begins, and the length (in records) of the file cut to buckets
/// `b..`.
fn compact_from(starts: &[usize], b: usize) -> usize {
    starts[starts.len() - 1] - starts[b]
}

/// The mask of a key's `low` bits.
fn low_mask(low: u32) -> u64 {
    1u64.checked_shl(low).map_or(u64::MAX, |b| b - 1)
}

/// Reads buckets `buckets` of a compact run (see [`distribute_compact`]; `starts`, where
/// each of its buckets begins) from its `file` into `out` (as long as they are) as (packed
/// key, value bits) pairs, the keys packed by `bits`, the buckets last first as in the file
/// (each in input order). The records are read into the tail of `out` and spread forward
/// from its front: a pair never ends past the record after its own, so each is read before
/// it is overwritten.
fn read_compact(
    run: &Run,
    starts: &[usize],
    file: &File,
    rank: usize,
    buckets: Range<usize>,
    bits: &[u32],
    out: &mut [[u64; 2]],
) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let (Some(low), Some(own)) = (run.low_bits, &run.packed) else {
        unreachable!("a compact run is packed");
    };
    let rec = compact_bytes(low);
    let (first, end) = (starts[buckets.start], starts[buckets.end]);
    let n = end - first;
    assert_eq!(out.len(), n, "the caller sizes `out` to the buckets");
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
    let tail = (16 - rec) * n;
    // A read past the end (a bucket read after `MergeSource::release` cut it off) fails here.
    let at = compact_from(starts, buckets.end) * rec;
    file.read_exact_at(&mut bytes[tail..], at as u64)
        .map_err(|e| Error::io(&run.path, e))?;
    let mask = low_mask(low);
    let mut i = 0;
    for b in buckets.rev() {
        let high = (b as u64).checked_shl(low).unwrap_or(0);
        for _ in starts[b]..starts[b + 1] {
            let at = tail + i * rec;
            let key = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
            let value = u64::from_le_bytes(bytes[at + rec - 8..at + rec].try_into().expect("8"));
            bytes[16 * i..16 * i + 8].copy_from_slice(&(high | (key & mask)).to_ne_bytes());
            bytes[16 * i + 8..16 * i + 16].copy_from_slice(&value.to_ne_bytes());
            i += 1;
        }
    }
    repack(out, own, bits, rank);
    Ok(())
}

/// Packs the keys of `pairs`, packed by `own`, by `bits` instead (no-op when the same).
fn repack(pairs: &mut [[u64; 2]], own: &[u32], bits: &[u32], rank: usize) {
    if own != bits {
        let mut key = vec![0; rank];
        for p in pairs.iter_mut() {
            unpack(p[0], own, &mut key);
            p[0] = pack(&key, bits);
        }
    }
}

/// The top bits of held runs' buckets (see [`distribute`]) for an input of about `entries`
/// entries whose keys have `bits` bits: buckets of all runs of about [`BUCKET_PAIRS`] to
/// 2 · [`BUCKET_PAIRS`] pairs, so that the final merge sorts each in a core's L2 cache; at
/// most [`TOP_DIGIT`] + 1 bits (a scatter to more buckets than that misses the caches more
/// than it saves).
fn bucket_top(entries: usize, bits: u32) -> u32 {
    let top = (entries / (2 * BUCKET_PAIRS))
        .next_power_of_two()
        .trailing_zeros()
        .clamp(1, TOP_DIGIT + 1);
    top.min(bits)
}

/// The most entries a bucket holds over all `runs` when every run is distributed by the
/// same top bits (see [`distribute`]); `None` when not every run is.
fn largest_bucket(runs: &[Run]) -> Option<usize> {
    let starts: Vec<&[usize]> = runs
        .iter()
        .map(|r| r.buckets.as_deref())
        .collect::<Option<_>>()?;
    let buckets = starts.first()?.len().checked_sub(1)?;
    if starts.iter().any(|s| s.len() != buckets + 1) {
        return None;
    }
    (0..buckets)
        .map(|b| starts.iter().map(|s| s[b + 1] - s[b]).sum())
        .max()
}

/// Sorts each bucket of a run that [`distribute`] left unsorted below its top bits (held,
/// or read from its file and written back): the run is then a sorted one.
fn sort_buckets_of(run: &mut Run) -> Result<()> {
    let Some(starts) = run.buckets.take() else {
        return Ok(());
    };
    let sort = |pairs: &mut [[u64; 2]]| {
        let largest = starts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        let mut scratch = vec![[0u64; 2]; largest];
        for w in starts.windows(2) {
            sort_bucket(&mut pairs[w[0]..w[1]], &mut scratch[..w[1] - w[0]]);
        }
    };
    if let Some(held) = run.held.as_deref_mut() {
        sort(held);
        return Ok(());
    }
    let path = &run.path;
    let mut pairs = vec![[0u64; 2]; starts.last().copied().unwrap_or(0)];
    let mut file = File::options()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    match &run.packed {
        // Read back by its buckets, written back as pairs.
        Some(own) if run.low_bits.is_some() => {
            let buckets = 0..starts.len() - 1;
            read_compact(run, &starts, &file, own.len(), buckets, own, &mut pairs)?;
            // Read last bucket first: reversed whole, then each bucket back to input order.
            pairs.reverse();
            for w in starts.windows(2) {
                pairs[w[0]..w[1]].reverse();
            }
            run.low_bits = None;
        }
        _ => file
            .read_exact(bytemuck::cast_slice_mut(&mut pairs))
            .map_err(|e| Error::io(path, e))?,
    }
    sort(&mut pairs);
    crate::piecewise::write_all_at(&file, bytemuck::cast_slice(&pairs), 0)
        .map_err(|e| Error::io(path, e))
}

/// Sorts pairs whose keys share their top bits (a bucket of [`distribute`]) stably by key,
/// with `scratch` as long as `pairs`: by the bits below the highest in which two keys
/// differ.
fn sort_bucket(pairs: &mut [[u64; 2]], scratch: &mut [[u64; 2]]) {
    if sort_bucket_in(pairs, scratch) {
        pairs.copy_from_slice(scratch);
    }
}

/// [`sort_bucket`] leaving the sorted pairs in `scratch` when its last pass wrote them there
/// (true), and with digits of 12 bits where they take a pass fewer than digits of 11 (keys
/// of 34 to 36 bits below the bucket's, as rank-2 keys of 44 bits with 10 top bits):
/// histograms of 4,096 counts, for buckets of [`BUCKET_PAIRS`] or more pairs. For the
/// final merge, which packs the pairs from wherever they lie.
fn sort_bucket_in(pairs: &mut [[u64; 2]], scratch: &mut [[u64; 2]]) -> bool {
    let Some(first) = pairs.first().map(|p| p[0]) else {
        return false;
    };
    let span = pairs.iter().fold(0, |a, p| a | (p[0] ^ first));
    let bits = 64 - span.leading_zeros();
    match bits.div_ceil(LSD_DIGIT + 1) < bits.div_ceil(LSD_DIGIT) {
        true => lsd_sort_pairs_in::<{ 2 * LSD_BUCKETS }>(pairs, scratch, bits),
        false => lsd_sort_pairs_in::<LSD_BUCKETS>(pairs, scratch, bits),
    }
}

/// Sorts records by key, stably; fixed-size records for ranks up to 8 sort without
/// indirection.
fn sort_records(recs: &mut [u64], rank: usize) {
    macro_rules! fixed {
        ($($s:literal)*) => {
            match rank + 1 {
                $($s => sort_fixed::<$s>(recs),)*
                s => sort_general(recs, s),
            }
        };
    }
    fixed!(1 2 3 4 5 6 7 8 9)
}

/// Sorts records (stably) by keys packed into one `u64` each, when their coordinates' bits
/// fit (see [`sort_pairs`]), and spreads them back. False (and nothing changed) when the
/// keys do not fit.
fn sort_packed(recs: &mut [u64], rank: usize) -> bool {
    match sort_pairs(recs, rank) {
        Some(bits) => {
            spread_pairs(recs, &bits);
            true
        }
        None => false,
    }
}

/// Bits of each level's largest coordinate in records of `rank` coordinates and a value.
fn level_bits(recs: &[u64], rank: usize) -> Vec<u32> {
    let mut bits = vec![0u32; rank];
    for r in recs.chunks_exact(rank + 1) {
        for (b, &c) in bits.iter_mut().zip(r) {
            *b = (*b).max(64 - c.leading_zeros());
        }
    }
    bits
}

/// Compacts records in place into (packed key, value) pairs at the front of `recs` and sorts
/// them stably by key: half the bytes moved, one comparison each. The bits of each level's
/// field in the key, or `None` (and nothing changed) when the keys do not fit 64 bits.
fn sort_pairs(recs: &mut [u64], rank: usize) -> Option<Vec<u32>> {
    let s = rank + 1;
    let n = recs.len() / s;
    let bits = level_bits(recs, rank);
    if rank == 0 || bits.iter().sum::<u32>() > 64 {
        return None;
    }
    let pack = |r: &[u64]| {
        r.iter()
            .zip(&bits)
            .fold(0u64, |p, (&c, &b)| if b == 0 { p } else { (p << b) | c })
    };
    // Pair i (words 2i, 2i+1) never lies past record i (words s*i ..), so compacting in
    // order reads every record before it is overwritten.
    for i in 0..n {
        let p = pack(&recs[i * s..i * s + rank]);
        let v = recs[i * s + rank];
        recs[2 * i] = p;
        recs[2 * i + 1] = v;
    }
    // Ranks of 3 and more leave room behind the pairs for a radix sort's second buffer.
    sort_packed_pairs(recs, n, &bits);
    Some(bits)
}

/// [`unpack`] for a rank known at compile time: a loop that unrolls, into an array.
#[inline(always)]
pub(crate) fn unpack_fixed<const R: usize>(mut p: u64, bits: &[u32; R]) -> [u64; R] {
    let mut key = [0; R];
    for k in (0..R).rev() {
        let b = bits[k];
        key[k] = p & u64::MAX.checked_shr(64 - b).unwrap_or(0);
        p = p.checked_shr(b).unwrap_or(0);
    }
    key
}

/// A packed key's coordinates (fields of `bits`, the last level lowest).
#[inline]
pub(super) fn unpack(mut p: u64, bits: &[u32], key: &mut [u64]) {
    for (k, &b) in key.iter_mut().zip(bits).rev() {
        *k = if b == 0 {
            0
        } else {
            p & (u64::MAX >> (64 - b))
        };
        p = p.checked_shr(b).unwrap_or(0);
    }
}

/// Spreads the sorted pairs at the front of `recs` back into records, in reverse (record i
/// never lies before pair i).
fn spread_pairs(recs: &mut [u64], bits: &[u32]) {
    let rank = bits.len();
    let s = rank + 1;
    for i in (0..recs.len() / s).rev() {
        let (p, v) = (recs[2 * i], recs[2 * i + 1]);
        unpack(p, bits, &mut recs[i * s..i * s + rank]);
        recs[i * s + rank] = v;
    }
}

/// Sorts (key, value) pairs by key, stably (equal keys keep their order: duplicates are
/// summed in input order), by the key's low `bits` bits (the higher ones are zero).
/// `scratch` is a second buffer as long as `pairs`. Inputs larger than [`BUCKET_PAIRS`] with
/// wide keys are first distributed stably by their top bits into buckets of about that many
/// pairs, and each bucket, whose two buffers then stay in a core's L2 cache, is sorted by
/// [`lsd_sort_pairs`] on the remaining bits: an LSD sort over the whole buffer scatters every
/// pass across all of it and spends most of its time in cache and TLB misses (measured on 1 M
/// pairs of 51-bit keys under load: 136–140 ms for four 13-bit passes, 83–100 ms distributed
/// by 10 bits first), and buckets much smaller than the cache pay for histograms of
/// thousands of counts, or fall to the comparison sort.
fn radix_sort_pairs(pairs: &mut [[u64; 2]], scratch: &mut [[u64; 2]], bits: u32) {
    let top = (pairs.len() / BUCKET_PAIRS)
        .next_power_of_two()
        .trailing_zeros()
        .min(TOP_DIGIT);
    if top == 0 || bits <= top + 11 {
        lsd_sort_pairs(pairs, scratch, bits);
        return;
    }
    msd_then_lsd(pairs, scratch, bits, top);
}

/// Pairs per bucket of [`radix_sort_pairs`]'s first distribution, at most: 128 KiB, so that
/// a bucket and its scratch stay in a 512 KiB L2 cache.
const BUCKET_PAIRS: usize = 1 << 13;

/// The most bits of [`radix_sort_pairs`]'s first, most significant digit.
const TOP_DIGIT: u32 = 10;

/// One stable distribution by the top `top` of `bits` bits into `scratch`, then each
/// bucket sorted on the bits below and copied back.
fn msd_then_lsd(pairs: &mut [[u64; 2]], scratch: &mut [[u64; 2]], bits: u32, top: u32) {
    let shift = bits - top;
    let mut starts = vec![0usize; (1 << top) + 1];
    for p in pairs.iter() {
        starts[(p[0] >> shift) as usize + 1] += 1;
    }
    for b in 1..starts.len() {
        starts[b] += starts[b - 1];
    }
    let mut next = starts.clone();
    for p in pairs.iter() {
        let b = (p[0] >> shift) as usize;
        scratch[next[b]] = *p;
        next[b] += 1;
    }
    let low = u64::MAX >> (64 - shift);
    for w in starts.windows(2) {
        let r = w[0]..w[1];
        // The bucket's own key bits: its pairs share the top digit.
        let span = scratch[r.clone()].iter().fold(0, |a, p| a | (p[0] & low));
        let bits = 64 - span.leading_zeros();
        lsd_sort_pairs(&mut scratch[r.clone()], &mut pairs[r.clone()], bits);
        pairs[r.clone()].copy_from_slice(&scratch[r]);
    }
}

/// The least-significant-digit radix sort of [`radix_sort_pairs`]: one counting pass per
/// digit of up to 11 bits, every pass's histogram taken in one read, passes where every key
/// has the same digit skipped. Linear in the pairs, where the comparison sort was n log n.
fn lsd_sort_pairs(pairs: &mut [[u64; 2]], scratch: &mut [[u64; 2]], bits: u32) {
    if lsd_sort_pairs_in::<LSD_BUCKETS>(pairs, scratch, bits) {
        pairs.copy_from_slice(scratch);
    }
}

/// The widest digit of [`lsd_sort_pairs`], and the counts of its histograms.
const LSD_DIGIT: u32 = 11;
const LSD_BUCKETS: usize = 1 << LSD_DIGIT;

/// [`lsd_sort_pairs`] with histograms of `BUCKETS` counts (a power of two: digits of up to
/// its bits), leaving the sorted pairs where the last pass wrote them: true when that is
/// `scratch` (an odd number of passes), which then holds them instead of `pairs`.
fn lsd_sort_pairs_in<const BUCKETS: usize>(
    pairs: &mut [[u64; 2]],
    scratch: &mut [[u64; 2]],
    bits: u32,
) -> bool {
    let n = pairs.len();
    if n < 2 || bits == 0 {
        return false;
    }
    if n < 256 || u32::try_from(n).is_err() {
        // A few pairs (a bucket of `msd_then_lsd`): the stable insertion and merge sort
        // beats clearing and summing histograms of thousands of counts. (Runs hold at most
        // `u32::MAX` entries, so the counts below fit 32 bits; more go here too.)
        pairs.sort_by_key(|p| p[0]);
        return false;
    }
    let passes = bits.div_ceil(BUCKETS.trailing_zeros());
    let digit = bits.div_ceil(passes);
    let mask = (1u64 << digit) - 1;
    let buckets = 1usize << digit;
    // Every pass's histogram in one read of the keys. A histogram is an array of the
    // largest digit's size, and every digit is masked to it (a no-op, `mask` is no wider):
    // its counts are then indexed without bounds checks. Counts of 32 bits: a pass's 4,096
    // write positions then take 16 KiB of the L1 cache beside the lines they write to,
    // not all of its 32 KiB.
    let digit_of = |key: u64, shift: u32| ((key >> shift) & mask) as usize & (BUCKETS - 1);
    let mut counts = vec![[0u32; BUCKETS]; passes as usize];
    for p in pairs.iter() {
        for (d, count) in counts.iter_mut().enumerate() {
            count[digit_of(p[0], d as u32 * digit)] += 1;
        }
    }
    let (mut from, mut to) = (pairs, scratch);
    let mut in_scratch = false;
    for (d, count) in counts.iter_mut().enumerate() {
        if count[..buckets].contains(&(n as u32)) {
            continue;
        }
        let mut at = 0;
        for c in count[..buckets].iter_mut() {
            (*c, at) = (at, at + *c);
        }
        let shift = d as u32 * digit;
        for p in from.iter() {
            let b = digit_of(p[0], shift);
            to[count[b] as usize] = *p;
            count[b] += 1;
        }
        std::mem::swap(&mut from, &mut to);
        in_scratch = !in_scratch;
    }
    in_scratch
}

/// Sums sorted records with equal keys into one (or rejects them), in place; returns the
/// length (in words) of the distinct records now at the front.
fn dedup_records(
    r: &mut [u64],
    rank: usize,
    input: &Path,
    format: &Format,
    duplicates: Duplicates,
) -> Result<usize> {
    let s = rank + 1;
    let n = r.len() / s;
    if n == 0 {
        return Ok(0);
    }
    let mut w = 0;
    for e in 1..n {
        if r[e * s..e * s + s - 1] == r[w * s..w * s + s - 1] {
            if duplicates == Duplicates::Error {
                return Err(duplicate_error(input, format, &r[e * s..e * s + s - 1]));
            }
            let sum = f64::from_bits(r[w * s + s - 1]) + f64::from_bits(r[e * s + s - 1]);
            r[w * s + s - 1] = sum.to_bits();
        } else {
            w += 1;
            if w != e {
                r.copy_within(e * s..(e + 1) * s, w * s);
            }
        }
    }
    Ok((w + 1) * s)
}

/// Stable: records with equal keys keep their input order, so that duplicates are summed in
/// the order of the file whatever the runs are.
fn sort_fixed<const S: usize>(recs: &mut [u64]) {
    let r: &mut [[u64; S]] = bytemuck::cast_slice_mut(recs);
    r.sort_by(|a, b| a[..S - 1].cmp(&b[..S - 1]));
}

/// Ranks above 8: sort an index, then permute (needs a second copy of the run).
fn sort_general(recs: &mut [u64], s: usize) {
    let key = |e: u32| &recs[e as usize * s..e as usize * s + s - 1];
    let mut perm: Vec<u32> = (0..(recs.len() / s) as u32).collect();
    // Ties by position: a stable order without the stable sort's buffer.
    perm.sort_unstable_by(|&a, &b| key(a).cmp(key(b)).then(a.cmp(&b)));
    let sorted: Vec<u64> = perm
        .iter()
        .flat_map(|&e| recs[e as usize * s..(e as usize + 1) * s].iter().copied())
        .collect();
    recs.copy_from_slice(&sorted);
}

/// Sums (or rejects) adjacent equal keys before passing entries on.
struct Dedup<'a> {
    pending: Option<(Vec<u64>, f64)>,
    input: &'a Path,
    format: &'a Format,
    duplicates: Duplicates,
}

impl Dedup<'_> {
    fn push(
        &mut self,
        k: &[u64],
        v: f64,
        out: &mut dyn FnMut(&[u64], f64) -> Result<()>,
    ) -> Result<()> {
        match &mut self.pending {
            Some((p, acc)) if p.as_slice() == k => {
                if self.duplicates == Duplicates::Error {
                    return Err(duplicate_error(self.input, self.format, k));
                }
                *acc += v;
            }
            Some((p, acc)) => {
                out(p, *acc)?;
                p.copy_from_slice(k);
                *acc = v;
            }
            None => self.pending = Some((k.to_vec(), v)),
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut dyn FnMut(&[u64], f64) -> Result<()>) -> Result<()> {
        match self.pending.take() {
            Some((p, acc)) => out(&p, acc),
            None => Ok(()),
        }
    }
}

/// A run file: records of `rank` little-endian `u64` coordinates and an `f64` value.
struct RunWriter {
    path: PathBuf,
    out: BufWriter<File>,
    /// Coordinates as u32 (the caller checked that they fit).
    narrow: bool,
}

impl RunWriter {
    fn create(path: &Path, narrow: bool, buffer: usize) -> Result<Self> {
        let f = File::create(path).map_err(|e| Error::io(path, e))?;
        Ok(RunWriter {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(buffer, f),
            narrow,
        })
    }

    fn write(&mut self, key: &[u64], v: f64) -> Result<()> {
        for &k in key {
            let r = if self.narrow {
                self.out.write_all(&(k as u32).to_le_bytes())
            } else {
                self.out.write_all(&k.to_le_bytes())
            };
            r.map_err(|e| Error::io(&self.path, e))?;
        }
        self.out
            .write_all(&v.to_le_bytes())
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Writes whole records as stored in a [`RunBuffer`] (the same byte layout).
    fn write_records(&mut self, recs: &[u64], rank: usize) -> Result<()> {
        if self.narrow {
            for r in recs.chunks_exact(rank + 1) {
                self.write(&r[..rank], f64::from_bits(r[rank]))?;
            }
            return Ok(());
        }
        let bytes: &[u8] = bytemuck::cast_slice(recs);
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(&self.path, e))
    }

    fn finish(mut self) -> Result<()> {
        self.out.flush().map_err(|e| Error::io(&self.path, e))
    }
}

/// Reads one run's records (or a section of them) in order, from its file or from memory.
struct RunReader<'a> {
    path: PathBuf,
    input: BufReader<std::io::Take<Box<dyn Read + 'a>>>,
    record: Vec<u8>,
    key: Vec<u64>,
    /// A narrow key of up to 4 coordinates as one number, ordered as the key.
    packed: u128,
    value: f64,
    narrow: bool,
    packing: Option<Vec<u32>>,
}

impl<'a> RunReader<'a> {
    /// Reads records `section` of `run` (all of them when `None`).
    fn open(run: &'a Run, rank: usize, buffer: usize, section: Option<Range<u64>>) -> Result<Self> {
        use std::io::{Seek, SeekFrom};
        let path = &run.path;
        let rec = run.record_bytes(rank) as u64;
        let start = section.as_ref().map_or(0, |s| s.start * rec);
        let source: Box<dyn Read + 'a> = match &run.held {
            Some(pairs) => {
                let bytes: &[u8] = bytemuck::cast_slice(pairs);
                Box::new(&bytes[start as usize..])
            }
            None => {
                let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
                f.seek(SeekFrom::Start(start))
                    .map_err(|e| Error::io(path, e))?;
                Box::new(f)
            }
        };
        let (f, buffer) = match section {
            None => (source.take(u64::MAX), buffer),
            Some(s) => {
                let bytes = (s.end - s.start) * rec;
                (
                    source.take(bytes),
                    buffer.min(bytes as usize).max(rec as usize),
                )
            }
        };
        Ok(RunReader {
            path: path.to_path_buf(),
            input: BufReader::with_capacity(buffer, f),
            record: vec![0; rec as usize],
            key: vec![0; rank],
            packed: 0,
            value: 0.0,
            narrow: run.narrow,
            packing: run.packed.clone(),
        })
    }

    /// Loads the next record; false at the end of the run.
    fn advance(&mut self) -> Result<bool> {
        use std::io::BufRead;
        let len = self.record.len();
        // Decoded where it lies in the read buffer; a record split by a refill (or the end
        // of the run) is copied out first.
        let buf = self
            .input
            .fill_buf()
            .map_err(|e| Error::io(&self.path, e))?;
        if buf.len() >= len {
            decode(
                &buf[..len],
                (self.narrow, self.packing.as_deref()),
                &mut self.key,
                &mut self.packed,
                &mut self.value,
            );
            self.input.consume(len);
            return Ok(true);
        }
        match self.input.read_exact(&mut self.record) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(Error::io(&self.path, e)),
        }
        decode(
            &self.record,
            (self.narrow, self.packing.as_deref()),
            &mut self.key,
            &mut self.packed,
            &mut self.value,
        );
        Ok(true)
    }
}

/// One run record: its key (and the key packed, when narrow) and its value. `packing`: the
/// record is a (packed key, value) pair with fields of these bits.
#[inline]
pub(super) fn decode(
    record: &[u8],
    (narrow, packing): (bool, Option<&[u32]>),
    key: &mut [u64],
    packed: &mut u128,
    value: &mut f64,
) {
    if let Some(bits) = packing {
        unpack(
            u64::from_le_bytes(record[..8].try_into().expect("8 bytes")),
            bits,
            key,
        );
        if narrow {
            *packed = key.iter().fold(0, |p, &k| (p << 32) | u128::from(k));
        }
    } else if narrow {
        *packed = 0;
        for (k, chunk) in key.iter_mut().zip(record.chunks_exact(4)) {
            *k = u64::from(u32::from_le_bytes(chunk.try_into().expect("4 bytes")));
            *packed = (*packed << 32) | u128::from(*k);
        }
    } else {
        for (k, chunk) in key.iter_mut().zip(record.chunks_exact(8)) {
            *k = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        }
    }
    let tail = &record[record.len() - 8..];
    *value = f64::from_le_bytes(tail.try_into().expect("8 bytes"));
}

/// K-way merge of sorted runs into `f`, using a binary min-heap of run indices. Equal keys
/// come out in run order (runs are numbered in input order and sorted stably), so every
/// entry of a coordinate comes out in input order, and the sum of duplicates is the same
/// left-to-right sum at every memory budget and thread count.
fn merge(
    paths: &[Run],
    rank: usize,
    buffer: usize,
    f: &mut dyn FnMut(&[u64], f64) -> Result<()>,
) -> Result<()> {
    merge_sections(paths, None, rank, buffer, f)
}

/// [`merge`] of records `lo[r]..hi[r]` of each run `r` (`sections = Some((lo, hi))`), or of
/// whole runs.
fn merge_sections(
    paths: &[Run],
    sections: Option<(&[u64], &[u64])>,
    rank: usize,
    buffer: usize,
    f: &mut dyn FnMut(&[u64], f64) -> Result<()>,
) -> Result<()> {
    let mut readers = Vec::with_capacity(paths.len());
    for (i, p) in paths.iter().enumerate() {
        let section = sections.map(|(lo, hi)| lo[i]..hi[i]);
        if section.as_ref().is_some_and(Range::is_empty) {
            continue;
        }
        let mut r = RunReader::open(p, rank, buffer, section)?;
        if r.advance()? {
            readers.push(r);
        }
    }
    // Narrow keys of up to 4 coordinates compare as one 128-bit number (most of a merge's
    // time is comparisons); others compare coordinate by coordinate.
    if rank <= 4 && paths.iter().all(|r| r.narrow) {
        merge_heap(readers, f, |rs, a, b| (rs[a].packed, a) < (rs[b].packed, b))
    } else {
        merge_heap(readers, f, |rs, a, b| (&rs[a].key, a) < (&rs[b].key, b))
    }
}

/// The k-way merge of open runs by a tree of losers under `less` (a strict total order:
/// ties are broken by run number): each internal node keeps the run that lost the match
/// played there, so replacing the winner replays only its path to the root, one comparison
/// per level (a binary heap's sift-down makes two).
fn merge_heap(
    mut readers: Vec<RunReader<'_>>,
    f: &mut dyn FnMut(&[u64], f64) -> Result<()>,
    less: impl Fn(&[RunReader], usize, usize) -> bool + Copy,
) -> Result<()> {
    let k = readers.len();
    if k == 0 {
        return Ok(());
    }
    let mut done = vec![false; k];
    // Run `a` beats run `b`: it has an entry, and it comes first or `b` has none.
    let beats = |rs: &[RunReader], done: &[bool], a: usize, b: usize| {
        !done[a] && (done[b] || less(rs, a, b))
    };
    // Leaves are the runs (node k + i for run i); `tree[0]` is the overall winner.
    const EMPTY: usize = usize::MAX;
    let mut tree = vec![EMPTY; k];
    for leaf in 0..k {
        let mut winner = leaf;
        let mut node = (leaf + k) / 2;
        while node > 0 {
            if tree[node] == EMPTY {
                // The first to arrive waits here for its opponent.
                tree[node] = winner;
                winner = EMPTY;
                break;
            }
            if beats(&readers, &done, tree[node], winner) {
                std::mem::swap(&mut tree[node], &mut winner);
            }
            node /= 2;
        }
        if winner != EMPTY {
            tree[0] = winner;
        }
    }
    loop {
        let top = tree[0];
        if done[top] {
            return Ok(());
        }
        f(&readers[top].key, readers[top].value)?;
        if !readers[top].advance()? {
            done[top] = true;
        }
        let mut winner = top;
        let mut node = (top + k) / 2;
        while node > 0 {
            if beats(&readers, &done, tree[node], winner) {
                std::mem::swap(&mut tree[node], &mut winner);
            }
            node /= 2;
        }
        tree[0] = winner;
    }
}

/// The final merge, repeated for each pass over the sorted entries.
pub(crate) struct MergeSource {
    rank: usize,
    runs: Vec<Run>,
    /// When all input fit one buffer: the sorted, distinct records.
    memory: Option<RunBuffer>,
    buffer: usize,
    /// Bits of each level's field when every key of every run packs into one `u64` (see
    /// [`packing`]): key ranges are then merged in memory ([`MergeSource::merge_packed`]).
    packing: Option<Vec<u32>>,
    /// The runs' files, opened at the first in-memory range merge and read by every later
    /// one (positioned reads, so the workers share them): one `open` per run and range cost
    /// 10 000 opens of a 64 MB file at 16 MiB. `None` for a run held in memory.
    files: std::sync::OnceLock<Vec<Option<File>>>,
    /// The buckets every compact run has been read through (see [`MergeSource::release`]).
    released: std::sync::Mutex<Released>,
    /// Removed (with the runs) when the source is dropped, on success or failure.
    _temp: crate::atomic::PendingDir,
}

/// The buckets read by the final merge (see [`MergeSource::release`]): every bucket below
/// `upto`, and the ranges `start -> end` read above it.
struct Released {
    upto: usize,
    read: std::collections::BTreeMap<usize, usize>,
    /// `upto` when the files were last cut.
    cut: usize,
    /// Bytes of compact runs read between two cuts of their files.
    step: usize,
}

impl Released {
    fn every(step: usize) -> std::sync::Mutex<Released> {
        std::sync::Mutex::new(Released {
            upto: 0,
            read: Default::default(),
            cut: 0,
            step,
        })
    }
}

/// [`Released::step`] of a conversion: 32 MiB, some 40 cuts of a 3 GB file's 120 runs.
const RELEASE_STEP: usize = 32 << 20;

impl SortedSource for MergeSource {
    fn scan(
        &mut self,
        progress: &dyn Progress,
        f: &mut dyn FnMut(&[u64], f64) -> Result<()>,
    ) -> Result<()> {
        let mut n = 0u64;
        let mut counted = |k: &[u64], v: f64| {
            n += 1;
            if n.is_multiple_of(PROGRESS_EVERY) {
                super::tick(progress, n)?;
            }
            f(k, v)
        };
        match (&self.memory, &self.packing) {
            (Some(buf), _) => (0..buf.len()).try_for_each(|e| {
                let (k, v) = buf.record(e);
                counted(k, v)
            }),
            (None, Some(bits)) if self.bucketed() => {
                let mut key = vec![0; self.rank];
                let buckets = self.runs[0].buckets.as_deref().map_or(0, |s| s.len() - 1);
                self.sort_buckets(0..buckets, self.buffer, &mut |batch| {
                    batch.iter().try_for_each(|p| {
                        unpack(p[0], bits, &mut key);
                        counted(&key, f64::from_bits(p[1]))
                    })
                })
            }
            (None, _) => merge(&self.runs, self.rank, self.buffer, &mut counted),
        }
    }
}

impl MergeSource {
    /// Sorted runs on disk (0 when everything fit one in memory).
    pub(crate) fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// Cuts the merged entries into key ranges of about `target` entries (see
    /// [`ranges::cut`]; runs held in memory or bucketed are cut where they lie).
    pub(crate) fn ranges(
        &self,
        target: u64,
        min_ranges: usize,
        threads: usize,
    ) -> Result<Ranges<'_>> {
        self.ranges_in_windows((target, min_ranges), threads, WINDOW_WORDS)
    }

    /// [`MergeSource::ranges`], rows found `window_words` positions at a time (see
    /// [`ranges::cut`]: tests vary it).
    fn ranges_in_windows(
        &self,
        (target, min_ranges): (u64, usize),
        threads: usize,
        window_words: usize,
    ) -> Result<Ranges<'_>> {
        let target = target.max(1);
        if let Some(buf) = &self.memory {
            // One sorted run of distinct entries: any cut keeps coordinates whole.
            let n = buf.len() as u64;
            let count = n.div_ceil(target).max(1);
            let at = (0..=count).map(|b| vec![(b * target).min(n)]).collect();
            return Ok(Ranges::table(at, Vec::new()));
        }
        if self.bucketed() {
            return Ok(self.bucket_ranges(target, min_ranges));
        }
        let bounds = (target, min_ranges);
        ranges::cut(&self.runs, self.rank, bounds, threads, window_words)
    }

    /// The runs the final merge takes.
    #[cfg(test)]
    pub(crate) fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// Merges the key range `span` (see [`MergeSource::ranges`]) into `f` (see [`merge`]),
    /// each run read through a buffer of at most `buffer` bytes: in memory when the keys
    /// pack and the range holds at most `in_memory` records (ranges above twice their target
    /// hold one coordinate and may be of any length), else by the streaming k-way merge.
    pub(crate) fn merge_range(
        &self,
        span: &Span,
        (buffer, in_memory): (usize, u64),
        f: &mut dyn FnMut(&[u64], f64) -> Result<()>,
    ) -> Result<()> {
        let (lo, hi) = (&span.lo, &span.hi);
        match &self.memory {
            Some(buf) => (lo[0]..hi[0]).try_for_each(|e| {
                let (k, v) = buf.record(e as usize);
                f(k, v)
            }),
            None => match self.pairs_bits(span, in_memory) {
                Some(bits) => {
                    let mut key = vec![0; self.rank];
                    self.merge_range_pairs(span, buffer, &mut |batch| {
                        batch.iter().try_for_each(|p| {
                            unpack(p[0], bits, &mut key);
                            f(&key, f64::from_bits(p[1]))
                        })
                    })
                }
                None => merge_sections(&self.runs, Some((lo, hi)), self.rank, buffer, f),
            },
        }
    }

    /// The fields of the packed keys (see [`packing`]) when the range `span` is merged in
    /// memory, by [`MergeSource::merge_range_pairs`] (the keys pack, and the range holds at
    /// most `in_memory` records); `None` when it is not.
    pub(crate) fn pairs_bits(&self, span: &Span, in_memory: u64) -> Option<&[u32]> {
        match (&self.memory, &self.packing) {
            (None, Some(bits)) if self.bucketed() || span.entries() <= in_memory => Some(bits),
            _ => None,
        }
    }

    /// True when the runs (held in memory or written to files) are distributed by the same
    /// top bits of their keys and not sorted below them (see [`distribute`]): the final merge
    /// then takes their buckets in order, and sorts each bucket of all runs at once (the
    /// runs' sections laid end to end in run order, so the stable sort gives the merge's
    /// order, equal keys in input order), instead of merging sorted runs: the runs' sorts
    /// and the tree of losers are replaced by sorts of buckets in a core's cache. Measured
    /// (conv12, under load 6, medians of 5 interleaved rounds at 256 MiB): the bench's
    /// 263 MB unsorted `.tns` 0.99 -> 0.74 s (CPU 0.72 -> 0.57 s), 239 MB unsorted `.mtx`
    /// 0.92 -> 0.66 s (0.66 -> 0.53 s), sorted inputs unchanged (0.35 and 0.25 CPU s);
    /// a 2.1 GB unsorted `.tns` of 88 spilled runs 16.8 -> 13.8 s, user time 6.7 -> 3.0 s.
    /// Backing held runs with huge pages (`madvise`) halved the page faults but not the
    /// system time on this machine, and was left out.
    fn bucketed(&self) -> bool {
        !self.runs.is_empty() && self.runs.iter().all(|r| r.buckets.is_some())
    }

    /// The ranges of [`MergeSource::ranges`] over bucketed runs: whole buckets of about
    /// `target` entries in all (a single bucket may hold more), at least `min_ranges` when
    /// each would still hold a few thousand.
    fn bucket_ranges(&self, target: u64, min_ranges: usize) -> Ranges<'_> {
        // Ranges of runs in files are read whole beside their bucket (see `sort_runs`).
        let target = match self.runs.iter().any(|r| r.held.is_none()) {
            true => (target / 2).max(1),
            false => target,
        };
        let starts: Vec<&[usize]> = self
            .runs
            .iter()
            .map(|r| r.buckets.as_deref().unwrap_or(&[0]))
            .collect();
        let buckets = starts[0].len() - 1;
        let size = |b: usize| starts.iter().map(|s| (s[b + 1] - s[b]) as u64).sum::<u64>();
        let total: u64 = starts.iter().map(|s| s[buckets] as u64).sum();
        let count = total
            .div_ceil(target)
            .max((min_ranges as u64).min(total / 4096))
            .max(1);
        let per = total.div_ceil(count);
        let mut cuts = vec![0];
        let mut n = 0;
        for b in 0..buckets {
            let e = size(b);
            if n > 0 && n + e > per {
                cuts.push(b);
                n = 0;
            }
            n += e;
        }
        cuts.push(buckets);
        let at = cuts
            .iter()
            .map(|&b| starts.iter().map(|s| s[b] as u64).collect())
            .collect();
        Ranges::table(at, cuts)
    }

    /// Buckets `buckets` of bucketed runs (see [`MergeSource::bucketed`]) in key order, each
    /// bucket's sections of all runs gathered in run order and sorted stably, handed to `f`
    /// a bucket at a time.
    fn sort_buckets(
        &self,
        buckets: Range<usize>,
        chunk: usize,
        f: &mut dyn FnMut(&[[u64; 2]]) -> Result<()>,
    ) -> Result<()> {
        let bits = self.packing.as_deref().unwrap_or(&[]);
        let starts: Vec<&[usize]> = self
            .runs
            .iter()
            .map(|r| r.buckets.as_deref().unwrap_or(&[]))
            .collect();
        let (first, end) = (buckets.start, buckets.end);
        PACKED.with(|cell| {
            let (read, raw, pairs, scratch) = &mut *cell.borrow_mut();
            // The records of these buckets of every run written to a file, read at once (a
            // run's buckets lie together in it, last first in a compact run); held runs are
            // read where they lie.
            let mut offsets = Vec::with_capacity(self.runs.len());
            let from_files: usize = (self.runs.iter().zip(&starts))
                .filter(|(r, _)| r.held.is_none())
                .map(|(_, s)| s[end] - s[first])
                .sum();
            if read.len() < from_files {
                *read = Vec::new();
                *read = vec![[0; 2]; from_files];
            }
            let mut at = 0;
            for (r, run) in self.runs.iter().enumerate() {
                offsets.push(at);
                if run.held.is_none() {
                    let (from, len) = (starts[r][first], starts[r][end] - starts[r][first]);
                    let file = self.files()?[r].as_ref();
                    let section = &mut read[at..at + len];
                    match (run.low_bits, file) {
                        (Some(_), Some(file)) => {
                            let buckets = first..end;
                            read_compact(run, starts[r], file, self.rank, buckets, bits, section)?
                        }
                        _ => read_packed(
                            run,
                            file,
                            self.rank,
                            from as u64,
                            bits,
                            chunk,
                            raw,
                            section,
                        )?,
                    }
                    at += len;
                }
            }
            self.release(first..end);
            for b in buckets {
                // A compact run's buckets were read last first (`read_compact`).
                let sections = (self.runs.iter().zip(&starts))
                    .zip(&offsets)
                    .map(|((r, s), &o)| match (r.held.as_deref(), r.low_bits) {
                        (Some(held), _) => &held[s[b]..s[b + 1]],
                        (None, Some(_)) => &read[o + s[end] - s[b + 1]..o + s[end] - s[b]],
                        (None, None) => &read[o + s[b] - s[first]..o + s[b + 1] - s[first]],
                    });
                let n: usize = sections.clone().map(<[_]>::len).sum();
                if pairs.len() < n {
                    // Grown to the largest bucket so far, and kept (see `merge_packed`).
                    *pairs = Vec::new();
                    *scratch = Vec::new();
                    *pairs = vec![[0; 2]; n];
                    *scratch = vec![[0; 2]; n];
                }
                let mut at = 0;
                for s in sections {
                    pairs[at..at + s.len()].copy_from_slice(s);
                    at += s.len();
                }
                if n > 0 {
                    let sorted = match sort_bucket_in(&mut pairs[..n], &mut scratch[..n]) {
                        true => &scratch[..n],
                        false => &pairs[..n],
                    };
                    f(sorted)?;
                }
            }
            Ok(())
        })
    }

    /// [`MergeSource::merge_range`] of a range that [`MergeSource::pairs_bits`] says is
    /// merged in memory, its entries handed to `f` as they are merged: batches of (packed
    /// key, value bits) pairs. The caller unpacks each key where it is used, in a loop of
    /// its own, instead of taking a call and a copy of the key per entry.
    pub(crate) fn merge_range_pairs(
        &self,
        span: &Span,
        buffer: usize,
        f: &mut dyn FnMut(&[[u64; 2]]) -> Result<()>,
    ) -> Result<()> {
        let bits = self
            .packing
            .as_deref()
            .expect("packed keys (see `pairs_bits`)");
        let chunk = buffer * self.runs.len() / 2;
        if let Some(b) = &span.buckets {
            return self.sort_buckets(b.clone(), chunk, f);
        }
        self.merge_packed(&span.lo, &span.hi, bits, chunk, f)
    }

    /// Notes that buckets `buckets` of every run have been read, and cuts each compact run's
    /// file (see [`distribute_compact`]) down to the buckets not yet read by then: those past
    /// the first bucket some range has still to read (ranges are read by several workers at
    /// once, so one may finish before a range below it).
    ///
    /// Why: the final merge writes the output while it reads the runs, and without this the
    /// runs' page-cache pages stay until their files are removed at the end, so that every
    /// output page is a page the kernel has not used for a while. On a virtual machine that
    /// hands free memory back to its host (this project's CI and bench VMs, conv25 in
    /// `convert`) such a page costs a fault in the host at its first touch; truncating drops
    /// the runs' pages (dirty or not, without writing them back, unlike a punched hole on
    /// ext4) for the output to take. Measured with a 1.6 GB file cut down as 2.5 GB are
    /// written: 2.1 s against 3.9-4.7 s (system time 2.0 against 3.6-4.3 s). Best effort: a
    /// failed cut leaves the file to be removed with the others.
    ///
    /// A bucket is read once (the final merge and [`SortedSource::scan`] read each once): read
    /// again once a cut has passed it, a compact run's section of it fails as a read past the
    /// end of the file, never as other data.
    fn release(&self, buckets: Range<usize>) {
        if buckets.is_empty() {
            return;
        }
        // The cuts stay under the lock: one made outside it could land after a later, shorter
        // one and lengthen the file again. (~5 ms a cut of 120 files, some 40 times.)
        let mut guard = self.released.lock().unwrap_or_else(|e| e.into_inner());
        let r = &mut *guard;
        r.read.insert(buckets.start, buckets.end);
        let before = r.upto;
        while let Some(end) = r.read.remove(&r.upto) {
            r.upto = end;
        }
        let (upto, Some(files)) = (r.upto, self.files.get()) else {
            return;
        };
        if upto == before {
            return;
        }
        // Compact runs in files, as (file, bucket starts, record bytes).
        let compact = self.runs.iter().zip(files).filter_map(|(run, file)| {
            let (low, starts) = (run.low_bits?, run.buckets.as_deref()?);
            Some((file.as_ref()?, starts, compact_bytes(low)))
        });
        // Cut in steps (`RELEASE_STEP`): a cut costs ~45 µs a file whatever it frees (ext4 on
        // the CI VM), and the 3 GB file's merge reads 1,562 ranges of 120 runs.
        let read: usize = (compact.clone())
            .map(|(_, starts, rec)| (starts[upto] - starts[r.cut]) * rec)
            .sum();
        if read < r.step {
            return;
        }
        r.cut = upto;
        for (file, starts, rec) in compact {
            let _ = file.set_len((compact_from(starts, upto) * rec) as u64);
        }
    }

    /// The runs' files (see [`MergeSource::files`]), opened at the first call.
    fn files(&self) -> Result<&[Option<File>]> {
        if let Some(files) = self.files.get() {
            return Ok(files);
        }
        let opened = self
            .runs
            .iter()
            .map(|r| match r.held {
                Some(_) => Ok(None),
                // Writable, to be cut short as the merge reads them (`release`).
                None => File::options()
                    .read(true)
                    .write(true)
                    .open(&r.path)
                    .map(Some)
                    .map_err(|e| Error::io(&r.path, e)),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.files.get_or_init(|| opened))
    }

    /// [`MergeSource::merge_range`] in memory: every run's section of the range read with
    /// positioned reads of up to `chunk` bytes, each record packed into one `u64` key by the
    /// levels' bits over all runs (so that packed order is key order), and the sections,
    /// laid end to end, merged by [`merge_slices`]. A range's records are few enough for
    /// memory (the caller sizes them, see `stitch::merged`); this replaces a buffered reader
    /// per run, a decode per record and comparisons of 128-bit keys.
    fn merge_packed(
        &self,
        lo: &[u64],
        hi: &[u64],
        bits: &[u32],
        chunk: usize,
        f: &mut dyn FnMut(&[[u64; 2]]) -> Result<()>,
    ) -> Result<()> {
        PACKED.with(|cell| {
            let (pairs, raw, batch, _) = &mut *cell.borrow_mut();
            let n = ranges::entries_between(lo, hi) as usize;
            if pairs.len() < n {
                // Grown to the largest range so far, and kept at that length: no pairs
                // zeroed before each read, nor copied when it grows (`reserve` on a
                // cleared vector reallocates, copying the old capacity).
                *pairs = Vec::new();
                *pairs = vec![[0; 2]; n];
            }
            let mut bounds = vec![0];
            for (r, run) in self.runs.iter().enumerate() {
                let file = self.files()?[r].as_ref();
                let (at, len) = (bounds[r], (hi[r] - lo[r]) as usize);
                let section = &mut pairs[at..at + len];
                read_packed(run, file, self.rank, lo[r], bits, chunk, raw, section)?;
                bounds.push(at + len);
            }
            batch.resize(MERGED_BATCH, [0; 2]);
            let batch: &mut [[u64; 2]; MERGED_BATCH] =
                (&mut batch[..]).try_into().expect("a batch's length");
            let mut len = 0;
            merge_slices(&pairs[..n], &bounds, |p| {
                // Masked: the index is always below the batch's length.
                batch[len & (MERGED_BATCH - 1)] = *p;
                len += 1;
                if len == MERGED_BATCH {
                    f(batch)?;
                    len = 0;
                }
                Ok(())
            })?;
            if len > 0 {
                f(&batch[..len])?;
            }
            Ok(())
        })
    }
}

/// Merges the sorted sections `bounds[i]..bounds[i + 1]` of `pairs` (packed key, value) in
/// key order, equal keys in section order, by a tree of losers (see [`merge_heap`]): each
/// section's head is held as one 128-bit number, the key above the section's number, so
/// that one comparison orders keys and breaks ties, and an ended section's head is
/// `u128::MAX`, above every other. Up to 256 sections, the tree is one of a power of two
/// leaves known at compile time ([`merge_fixed`]), the extra leaves empty.
fn merge_slices<E>(
    pairs: &[[u64; 2]],
    bounds: &[usize],
    f: impl FnMut(&[u64; 2]) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let k = bounds.len().saturating_sub(1);
    match k {
        0 => Ok(()),
        1 => pairs[bounds[0]..bounds[1]].iter().try_for_each(f),
        2 => merge_fixed::<2, E>(pairs, bounds, f),
        3..=4 => merge_fixed::<4, E>(pairs, bounds, f),
        5..=8 => merge_fixed::<8, E>(pairs, bounds, f),
        9..=16 => merge_fixed::<16, E>(pairs, bounds, f),
        17..=32 => merge_fixed::<32, E>(pairs, bounds, f),
        33..=64 => merge_fixed::<64, E>(pairs, bounds, f),
        // The final merge takes up to `MAX_FINAL_RUNS` runs at once.
        65..=128 => merge_fixed::<128, E>(pairs, bounds, f),
        129..=256 => merge_fixed::<256, E>(pairs, bounds, f),
        _ => merge_general(pairs, bounds, f),
    }
}

/// The first winner of a tree of losers over `heads` (node `n`'s children are `2n` and
/// `2n + 1`; nodes `k..` are the leaves, section `n - k`), each node's loser written to
/// `tree`.
pub(super) fn play(node: usize, k: usize, heads: &[u128], tree: &mut [usize]) -> usize {
    if node >= k {
        return node - k;
    }
    let (a, b) = (
        play(2 * node, k, heads, tree),
        play(2 * node + 1, k, heads, tree),
    );
    let (win, lose) = if heads[a] < heads[b] { (a, b) } else { (b, a) };
    tree[node] = lose;
    win
}

/// [`merge_slices`] of up to `K` sections (`K` a power of two): arrays of `K`, every index
/// masked to them (no bounds checks), the winner's head in a register and a replay of
/// `log2 K` levels that unrolls.
fn merge_fixed<const K: usize, E>(
    pairs: &[[u64; 2]],
    bounds: &[usize],
    mut f: impl FnMut(&[u64; 2]) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    const { assert!(K.is_power_of_two() && K >= 2) };
    let k = bounds.len() - 1;
    debug_assert!(k <= K);
    let m = K - 1;
    // Sections past `k` are empty.
    let mut cur = [0usize; K];
    let mut end = [0usize; K];
    cur[..k].copy_from_slice(&bounds[..k]);
    end[..k].copy_from_slice(&bounds[1..]);
    let head = |i: usize, at: usize, end: usize| {
        if at < end {
            (u128::from(pairs[at][0]) << 64) | i as u128
        } else {
            u128::MAX
        }
    };
    let mut heads = [u128::MAX; K];
    for i in 0..k {
        heads[i] = head(i, cur[i], end[i]);
    }
    let mut tree = [0usize; K];
    let mut w = play(1, K, &heads, &mut tree);
    let mut wh = heads[w];
    while wh != u128::MAX {
        let at = cur[w & m];
        f(&pairs[at])?;
        cur[w & m] = at + 1;
        wh = head(w, at + 1, end[w & m]);
        heads[w & m] = wh;
        let mut node = (w + K) >> 1;
        for _ in 0..K.trailing_zeros() {
            // Selects: the outcome is unpredictable (a branch would miss half the time).
            let o = tree[node & m];
            let oh = heads[o & m];
            let lost = oh < wh;
            tree[node & m] = if lost { w } else { o };
            (w, wh) = if lost { (o, oh) } else { (w, wh) };
            node >>= 1;
        }
    }
    Ok(())
}

/// [`merge_slices`] of any number of sections, in vectors.
fn merge_general<E>(
    pairs: &[[u64; 2]],
    bounds: &[usize],
    mut f: impl FnMut(&[u64; 2]) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let k = bounds.len() - 1;
    let mut cur = bounds[..k].to_vec();
    let head = |i: usize, at: usize| {
        if at < bounds[i + 1] {
            (u128::from(pairs[at][0]) << 64) | i as u128
        } else {
            u128::MAX
        }
    };
    let mut heads: Vec<u128> = (0..k).map(|i| head(i, cur[i])).collect();
    let mut tree = vec![0usize; k];
    let mut winner = play(1, k, &heads, &mut tree);
    while heads[winner] != u128::MAX {
        f(&pairs[cur[winner]])?;
        cur[winner] += 1;
        heads[winner] = head(winner, cur[winner]);
        winner = replay(winner, &heads, &mut tree);
    }
    Ok(())
}

/// The new winner of a tree of losers over `heads` (`tree` as [`play`] left it) after the
/// head of `winner`, the winner before, changed: the matches on its path to the root
/// played again. Written as selects (the outcome is unpredictable: a branch would miss
/// half the time).
pub(super) fn replay(mut winner: usize, heads: &[u128], tree: &mut [usize]) -> usize {
    let mut node = (winner + tree.len()) / 2;
    while node >= 1 {
        let other = tree[node];
        let lost = heads[other] < heads[winner];
        tree[node] = if lost { winner } else { other };
        winner = if lost { other } else { winner };
        node /= 2;
    }
    winner
}

thread_local! {
    /// A merge worker's buffers for [`MergeSource::merge_packed`], kept between its ranges
    /// (the worker threads end with the conversion): the pairs, the bytes read, and the
    /// batch of merged pairs.
    static PACKED: std::cell::RefCell<MergeBuffers> = Default::default();
}

/// See [`PACKED`]: the pairs, the bytes read, the batch of merged pairs, and the scratch of
/// a bucket's sort ([`MergeSource::sort_buckets`]).
type MergeBuffers = (Vec<[u64; 2]>, Vec<u8>, Vec<[u64; 2]>, Vec<[u64; 2]>);

/// Merged pairs handed on at once by [`MergeSource::merge_range_pairs`] (16 KiB).
const MERGED_BATCH: usize = 1 << 10;

/// Bits of each level's field in a packed key, from each level's largest coordinate; `None`
/// when the key does not fit one `u64`.
fn packing(level_max: &[u64]) -> Option<Vec<u32>> {
    let bits: Vec<u32> = level_max.iter().map(|&m| 64 - m.leading_zeros()).collect();
    (!bits.is_empty() && bits.iter().sum::<u32>() <= 64).then_some(bits)
}

/// Reads records `from..from + out.len()` of `run` into `out` as (packed key, value bits),
/// the keys packed by `bits`: a run of pairs packed alike is read straight into `out` (or
/// copied, when held in memory); others are read `chunk` bytes at a time into `raw` and
/// (re)packed. `file` is the run's, `None` when it is held.
#[allow(clippy::too_many_arguments)]
pub(super) fn read_packed(
    run: &Run,
    file: Option<&File>,
    rank: usize,
    from: u64,
    bits: &[u32],
    chunk: usize,
    raw: &mut Vec<u8>,
    out: &mut [[u64; 2]],
) -> Result<()> {
    use std::os::unix::fs::FileExt;
    if out.is_empty() {
        return Ok(());
    }
    let rec = run.record_bytes(rank);
    let read = |buf: &mut [u8], at: u64| match file {
        Some(file) => file
            .read_exact_at(buf, at * rec as u64)
            .map_err(|e| Error::io(&run.path, e)),
        None => {
            let held: &[u8] = bytemuck::cast_slice(run.held.as_deref().unwrap_or(&[]));
            let at = at as usize * rec;
            buf.copy_from_slice(&held[at..at + buf.len()]);
            Ok(())
        }
    };
    assert!(run.low_bits.is_none(), "compact runs are read by buckets");
    if let Some(own) = &run.packed {
        read(bytemuck::cast_slice_mut(out), from)?;
        repack(out, own, bits, rank);
        return Ok(());
    }
    let per = (chunk / rec).max(1);
    let (mut key, mut packed, mut value) = (vec![0; rank], 0, 0.0);
    let mut at = from;
    for part in out.chunks_mut(per) {
        raw.resize(part.len() * rec, 0);
        read(raw, at)?;
        for (r, p) in raw.chunks_exact(rec).zip(part.iter_mut()) {
            decode(r, (run.narrow, None), &mut key, &mut packed, &mut value);
            *p = [pack(&key, bits), value.to_bits()];
        }
        at += part.len() as u64;
    }
    Ok(())
}

/// A key's coordinates packed into fields of `bits` (the last level lowest; see [`unpack`]).
#[inline]
pub(super) fn pack(key: &[u64], bits: &[u32]) -> u64 {
    key.iter()
        .zip(bits)
        .fold(0, |p, (&c, &b)| p.checked_shl(b).unwrap_or(0) | c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Merging the key ranges one after the other gives the serial merge's entries in
        /// its order (duplicates in input order), whatever the runs and the range size; no
        /// range holds more than twice the target unless it is one coordinate.
        #[test]
        fn ranges_merged_in_turn_are_the_serial_merge(
            rank in 1usize..4,
            spread in 1u64..40,
            n in 1usize..600,
            run_entries in 1usize..80,
            target in 1u64..50,
            wide in any::<bool>(),
            seed in any::<u64>(),
        ) {
            check_ranges(rank, spread, n, run_entries, target, wide, seed)?;
        }
    }

    /// The ranges cut a window at a time, asked for by six threads at once (some late) or
    /// from the middle on and then from the start, are the ranges of the single-table cut (`single_table_cut`, the code
    /// before stop 48, every lower bound found by a pass over the whole run): for runs held
    /// in memory or in files, packed or not, scanned or searched (the larger cases), with
    /// ranges halved at window edges.
    #[test]
    fn the_windowed_cut_is_the_single_table_cut() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for case in 0..40 {
            let rank = 1 + (rnd() % 3) as usize;
            let spread = 1 + rnd() % 60;
            let big = case % 10 == 0;
            let (n, run_entries, target) = match big {
                true => (3000 + rnd() % 6000, 1500 + rnd() % 4000, 500 + rnd() % 4000),
                false => (1 + rnd() % 700, 1 + rnd() % 90, 1 + rnd() % 60),
            };
            let scale = if rnd() % 4 == 0 { 1u64 << 33 } else { 1 };
            let mut lines: Vec<Vec<u64>> = (0..n)
                .map(|_| (0..rank).map(|_| (rnd() % spread) * scale + 1).collect())
                .collect();
            if rnd() % 5 == 0 {
                lines.sort();
            }
            let mut text = String::new();
            for (e, line) in lines.iter().enumerate() {
                line.iter().for_each(|c| text += &format!("{c} "));
                text += &format!("{e}\n");
            }
            let dir = tempfile::tempdir().unwrap();
            let input = dir.path().join("r.tns");
            std::fs::write(&input, text).unwrap();
            let opts = ConvertOptions {
                run_entries: Some(run_entries as usize),
                spill_runs: rnd() % 2 == 0,
                force_external_sort: true,
                ..Default::default()
            };
            let format = Format::all_compressed(rank);
            let sorted = sort_runs(&input, &format, &opts, dir.path(), &crate::NoProgress).unwrap();
            let source = &sorted.source;
            if source.memory.is_some() || source.bucketed() {
                continue;
            }
            for min_ranges in [3, 1, 64] {
                let want = single_table_cut(&source.runs, rank, target, min_ranges);
                for words in [1, 2, 3, 7, 64, WINDOW_WORDS] {
                    let got = source
                        .ranges_in_windows((target, min_ranges), 2, words)
                        .unwrap();
                    assert_eq!(got.len() + 1, want.len(), "case {case}, windows of {words}");
                    let next = std::sync::atomic::AtomicUsize::new(0);
                    let threads = if words == 2 { 6 } else { 1 };
                    std::thread::scope(|scope| {
                        for t in 0..threads {
                            let (got, want, next) = (&got, &want, &next);
                            scope.spawn(move || loop {
                                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                if i >= got.len() {
                                    break;
                                }
                                // One thread starts in the middle (nothing to go on from)
                                // and comes back to the start (behind its window).
                                let j = match threads {
                                    1 => (i + got.len() / 2) % got.len(),
                                    _ => i,
                                };
                                if t > 0 && j % 7 == t {
                                    std::thread::sleep(std::time::Duration::from_micros(300));
                                }
                                let s = got.span(j).unwrap();
                                assert_eq!((&s.lo, &s.hi), (&want[j], &want[j + 1]), "case {case}");
                            });
                        }
                    });
                }
            }
        }
    }

    /// The rows of the cut as stop 47 made them: sampled keys, a table of every row, and
    /// oversized ranges halved in place; each lower bound by a pass over the whole run.
    fn single_table_cut(
        runs: &[Run],
        rank: usize,
        target: u64,
        min_ranges: usize,
    ) -> Vec<Vec<u64>> {
        use super::ranges::{RunFile, SAMPLES_PER_RANGE};
        let files: Vec<RunFile> = runs
            .iter()
            .map(|r| RunFile::open(r, rank).unwrap())
            .collect();
        let row_of = |k: &[u64]| -> Vec<u64> {
            let below = |f: &RunFile| f.each_key(0..f.records, |x| x < k).unwrap();
            files.iter().map(below).collect()
        };
        let total: u64 = files.iter().map(|f| f.records).sum();
        let count = total
            .div_ceil(target)
            .max((min_ranges as u64).min(total / 4096))
            .max(1);
        let step = (total / (count * SAMPLES_PER_RANGE)).max(1);
        let (mut samples, mut next, mut start) = (Vec::new(), step / 2, 0);
        for f in &files {
            while next < start + f.records {
                samples.push(f.key(next - start).unwrap());
                next += step;
            }
            start += f.records;
        }
        samples.sort_unstable();
        let mut keys: Vec<Vec<u64>> = (1..count)
            .map(|b| samples[(b * samples.len() as u64 / count) as usize].clone())
            .collect();
        keys.dedup();
        let mut at = vec![vec![0; files.len()]];
        at.extend(keys.iter().map(|k| row_of(k)));
        at.push(files.iter().map(|f| f.records).collect());
        at.dedup();
        let mut j = 0;
        while j + 1 < at.len() {
            let (lo, hi) = (at[j].clone(), at[j + 1].clone());
            let entries: u64 = hi.iter().zip(&lo).map(|(h, l)| h - l).sum();
            let mut row = None;
            if entries > 2 * target {
                let r = (0..files.len()).max_by_key(|&r| hi[r] - lo[r]).unwrap();
                let mut key = files[r].key(lo[r] + (hi[r] - lo[r]) / 2).unwrap();
                row = Some(row_of(&key));
                if row.as_ref() == Some(&lo) {
                    let last = key.last().unwrap().checked_add(1);
                    row = last.map(|c| {
                        *key.last_mut().unwrap() = c;
                        row_of(&key)
                    });
                }
            }
            match row.filter(|r| *r != hi) {
                Some(r) => at.insert(j + 1, r),
                None => j += 1,
            }
        }
        at
    }

    /// Many runs shorter than the sampling step (38 runs of one entry) once left no
    /// samples at all and the range cut indexed an empty list.
    #[test]
    fn runs_shorter_than_the_sampling_step_are_sampled() {
        check_ranges(1, 1, 38, 1, 19, false, 0).unwrap();
        check_ranges(2, 30, 500, 1, 7, true, 9).unwrap();
    }

    /// Converts `n` random entries with runs of `run_entries`, cuts the merge into ranges
    /// of about `target` and checks them against the serial merge.
    fn check_ranges(
        rank: usize,
        spread: u64,
        n: usize,
        run_entries: usize,
        target: u64,
        wide: bool,
        seed: u64,
    ) -> std::result::Result<(), TestCaseError> {
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("r.tns");
        let mut text = String::new();
        // Coordinates past 32 bits make runs of 64-bit records (and keys too wide to pack).
        let scale = if wide { 1u64 << 33 } else { 1 };
        for e in 0..n {
            for _ in 0..rank {
                text += &format!("{} ", (next() % spread) * scale + 1);
            }
            text += &format!("{e}\n");
        }
        std::fs::write(&input, text).unwrap();
        let format = Format::all_compressed(rank);
        let opts = ConvertOptions {
            run_entries: Some(run_entries),
            ..Default::default()
        };
        let mut sorted = sort_runs(&input, &format, &opts, dir.path(), &crate::NoProgress).unwrap();
        let mut want = Vec::new();
        sorted
            .source
            .scan(&crate::NoProgress, &mut |k, v| {
                want.push((k.to_vec(), v));
                Ok(())
            })
            .unwrap();
        let ranges = sorted.source.ranges(target, 3, 2).unwrap();
        let mut got = Vec::new();
        for j in 0..ranges.len() {
            let mut keys = std::collections::BTreeSet::new();
            let span = ranges.span(j).unwrap();
            sorted
                .source
                .merge_range(&span, (64, 2 * target), &mut |k, v| {
                    keys.insert(k.to_vec());
                    got.push((k.to_vec(), v));
                    Ok(())
                })
                .unwrap();
            prop_assert!(span.entries() <= 2 * target || keys.len() == 1);
        }
        prop_assert_eq!(got, want);
        // Rows found a window at a time, and asked for out of order (a worker late by
        // more than the window keeps, or ahead of it), are the same ranges.
        let spans: Vec<(Vec<u64>, Vec<u64>)> = (0..ranges.len())
            .map(|j| ranges.span(j).map(|s| (s.lo, s.hi)).unwrap())
            .collect();
        for words in [1, 2, 3, 7] {
            let small = sorted
                .source
                .ranges_in_windows((target, 3), 2, words)
                .unwrap();
            prop_assert_eq!(small.len(), ranges.len());
            let mut order: Vec<usize> = (0..spans.len()).collect();
            let late = (next() as usize % spans.len().max(1)).min(spans.len());
            order.extend((0..late).rev());
            for _ in 0..spans.len() / 3 {
                order.push(next() as usize % spans.len());
            }
            for j in order {
                let s = small.span(j).unwrap();
                prop_assert_eq!(
                    &(s.lo, s.hi),
                    &spans[j],
                    "range {} of windows of {}",
                    j,
                    words
                );
            }
        }
        Ok(())
    }

    /// The pairs a run file holds. Not `bytemuck::cast_slice` of the bytes read: a `Vec<u8>`
    /// is only byte-aligned (an empty one's pointer is 1, which `cast_slice` refuses), so the
    /// test failed by chance whenever a generated run was empty.
    fn pairs_in(path: &std::path::Path) -> Vec<[u64; 2]> {
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(bytes.len() % 16, 0, "a run file holds whole pairs");
        let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap());
        bytes
            .chunks_exact(16)
            .map(|p| [word(&p[..8]), word(&p[8..])])
            .collect()
    }
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Packed sorting agrees with the record sort on keys of any width (or declines).
        #[test]
        fn packed_sort_matches_the_record_sort(
            rank in 1usize..5,
            shift in 0u32..40,
            raw in proptest::collection::vec((proptest::collection::vec(0u64..1 << 24, 4), any::<u64>()), 0..200),
        ) {
            let mut recs = Vec::new();
            for (key, v) in &raw {
                recs.extend(key[..rank].iter().map(|&c| c << shift));
                recs.push(*v);
            }
            let mut want = recs.clone();
            sort_records(&mut want, rank);
            let fits = sort_packed(&mut recs, rank);
            prop_assert_eq!(fits, rank as u32 * (24 + shift) <= 64 || recs.is_empty() || fits);
            if fits {
                prop_assert_eq!(recs, want);
            }
        }

        /// The unrolled unpacking of a rank known at compile time gives the coordinates of
        /// the general one, for fields of any width (64 included) and empty ones.
        #[test]
        fn fixed_unpacking_is_the_general_one(
            rank in 1usize..5,
            cuts in proptest::collection::vec(0u32..65, 4),
            raw in any::<u64>(),
        ) {
            // Field widths summing to at most 64.
            let mut bits: Vec<u32> = Vec::new();
            let mut left = 64;
            for &c in &cuts[..rank] {
                let b = c.min(left);
                bits.push(b);
                left -= b;
            }
            let total: u32 = bits.iter().sum();
            let p = if total == 64 { raw } else { raw & ((1u64 << total) - 1) };
            let mut want = vec![0; rank];
            unpack(p, &bits, &mut want);
            let got: Vec<u64> = match rank {
                1 => unpack_fixed::<1>(p, &bits[..].try_into().unwrap()).to_vec(),
                2 => unpack_fixed::<2>(p, &bits[..].try_into().unwrap()).to_vec(),
                3 => unpack_fixed::<3>(p, &bits[..].try_into().unwrap()).to_vec(),
                _ => unpack_fixed::<4>(p, &bits[..].try_into().unwrap()).to_vec(),
            };
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(pack(&want, &bits), p);
        }

        /// The radix sort orders pairs as the stable comparison sort does: keys of any width,
        /// many equal keys (whose values must keep their input order).
        #[test]
        fn radix_sort_is_the_stable_sort(
            bits in 1u32..65,
            spread in 1u64..5000,
            n in 0usize..3000,
            seed in any::<u64>(),
        ) {
            let mut x = seed | 1;
            let mut next = || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x };
            let top = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
            let keys: Vec<u64> = (0..spread).map(|_| next() & top).collect();
            let mut pairs: Vec<[u64; 2]> =
                (0..n as u64).map(|i| [keys[(next() % spread) as usize], i]).collect();
            let mut want = pairs.clone();
            want.sort_by_key(|p| p[0]);
            let mut scratch = vec![[0u64; 2]; n];
            let mut distributed = pairs.clone();
            radix_sort_pairs(&mut pairs, &mut scratch, bits);
            prop_assert_eq!(&pairs, &want);
            // The distribution by top bits, which only larger inputs take.
            if bits > TOP_DIGIT {
                msd_then_lsd(&mut distributed, &mut scratch, bits, 1 + (seed % u64::from(TOP_DIGIT)) as u32);
                prop_assert_eq!(distributed, want);
            }
        }

        /// A bucket's sort is the stable sort, in the buffer it says: keys of up to 48 bits,
        /// so digits of 11 bits and of 12 (34 to 36 bits: three passes, the last into the
        /// scratch), an odd or even number of passes, and buckets below the radix sort's
        /// 256 pairs.
        #[test]
        fn bucket_sort_is_the_stable_sort_where_it_says(
            bits in prop_oneof![1u32..49, 34u32..37],
            spread in 1u64..5000,
            n in 0usize..6000,
            seed in any::<u64>(),
        ) {
            let mut x = seed | 1;
            let mut next = || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x };
            let keys: Vec<u64> = (0..spread).map(|_| next() & ((1u64 << bits) - 1)).collect();
            let mut pairs: Vec<[u64; 2]> =
                (0..n as u64).map(|i| [keys[(next() % spread) as usize], i]).collect();
            let mut want = pairs.clone();
            want.sort_by_key(|p| p[0]);
            let mut scratch = vec![[0u64; 2]; n];
            let mut copied = pairs.clone();
            let sorted = match sort_bucket_in(&mut pairs, &mut scratch) {
                true => &scratch,
                false => &pairs,
            };
            prop_assert_eq!(sorted, &want);
            sort_bucket(&mut copied, &mut scratch);
            prop_assert_eq!(copied, want);
        }

        /// The in-memory merge of sorted sections is the stable sort of their concatenation:
        /// key order, equal keys in section order (duplicates summed in input order); every
        /// tree size of `merge_fixed` and the general merge beyond them (up to 300 sections),
        /// and the general merge on the same sections.
        #[test]
        fn slice_merge_is_the_stable_sort(
            sections in proptest::collection::vec(
                proptest::collection::vec(0u64..20, 0..30), 0..300),
        ) {
            let mut pairs = Vec::new();
            let mut bounds = vec![0];
            for (i, mut keys) in sections.into_iter().enumerate() {
                keys.sort_unstable();
                pairs.extend(keys.iter().enumerate().map(|(j, &k)| [k, (i * 100 + j) as u64]));
                bounds.push(pairs.len());
            }
            let mut want = pairs.clone();
            want.sort_by_key(|p| p[0]);
            let mut got = Vec::new();
            merge_slices::<()>(&pairs, &bounds, |p| {
                got.push(*p);
                Ok(())
            })
            .unwrap();
            prop_assert_eq!(&got, &want);
            let mut general = Vec::new();
            if bounds.len() > 1 {
                merge_general::<()>(&pairs, &bounds, |p| {
                    general.push(*p);
                    Ok(())
                })
                .unwrap();
            }
            prop_assert_eq!(&general, &want);
        }

        /// Runs distributed by their keys' top bits (`distribute`), held or written to files,
        /// and merged bucket by bucket (`MergeSource::ranges` of bucketed runs,
        /// `merge_range_pairs`, `scan`) give
        /// the stable sort of all runs laid end to end in run order (values number the
        /// entries, so equal keys must come in input order); `sort_buckets_of` makes each
        /// the stable sort of its run. Gathering a bucket's sections in another order than
        /// the runs', or a range cut one bucket short, fails it. Ranges are read in order or
        /// each pair swapped (as two workers may finish them), and the compact runs' files are
        /// cut after every range or every `step` bytes read (`release`): a cut past a bucket
        /// not yet read fails the read, at the end less than `step` bytes are left uncut, and
        /// a range read again after its cut fails.
        #[test]
        fn bucketed_runs_merge_as_the_stable_sort(
            raw in proptest::collection::vec(
                proptest::collection::vec(0u64..1 << 20, 0..1500), 1..6),
            few in proptest::bool::ANY,
            top in 1u32..9,
            target in 1u64..4000,
            spill_from in 0usize..7,
            compact in proptest::bool::ANY,
            swapped in proptest::bool::ANY,
            step in prop_oneof![Just(0usize), 1usize..20_000],
        ) {
            let keys: Vec<Vec<u64>> = raw
                .iter()
                .map(|r| r.iter().map(|&k| if few { k % 40 } else { k }).collect())
                .collect();
            let mut all = Vec::new();
            for (i, ks) in keys.iter().enumerate() {
                all.extend(ks.iter().enumerate().map(|(j, &k)| [k, (i * 10_000 + j) as u64]));
            }
            let mut want = all.clone();
            want.sort_by_key(|p| p[0]);
            // A fresh source each time: the merge cuts the compact runs' files as it reads.
            let source = || -> MergeSource {
                let temp = crate::atomic::PendingDir::create_in(&std::env::temp_dir(), ".t").unwrap();
                let mut runs = Vec::new();
                for (i, ks) in keys.iter().enumerate() {
                    let pairs: Vec<[u64; 2]> =
                        ks.iter().enumerate().map(|(j, &k)| [k, (i * 10_000 + j) as u64]).collect();
                    let mut held = vec![[0u64; 2]; pairs.len()].into_boxed_slice();
                    let buckets = distribute(&pairs, &mut held, 20 - top, top);
                    assert_eq!(buckets.len(), (1 << top) + 1);
                    // Runs from `spill_from` on are written to files, as spilled runs: as
                    // pairs, or `compact` as the spills write them (`distribute_compact`).
                    let path = temp.path().join(format!("run-{i}"));
                    let (held, low_bits) = match (spill_from <= i, compact) {
                        (false, _) => (Some(held), None),
                        (true, false) => {
                            std::fs::write(&path, bytemuck::cast_slice::<_, u8>(&held)).unwrap();
                            (None, None)
                        }
                        (true, true) => {
                            let mut bytes = vec![0u8; 16 * pairs.len()];
                            let starts = distribute_compact(&pairs, &mut bytes, 20 - top, top);
                            assert_eq!(&starts, &buckets);
                            let rec = compact_bytes(20 - top);
                            std::fs::write(&path, &bytes[..rec * pairs.len()]).unwrap();
                            (None, Some(20 - top))
                        }
                    };
                    runs.push(Run {
                        path,
                        narrow: true,
                        packed: Some(vec![20]),
                        held,
                        buckets: Some(buckets),
                        low_bits,
                    });
                }
                MergeSource {
                    rank: 1,
                    runs,
                    memory: None,
                    buffer: 4096,
                    packing: Some(vec![20]),
                    files: Default::default(),
                    released: Released::every(step),
                    _temp: temp,
                }
            };
            let merged = source();
            prop_assert!(merged.bucketed());
            let ranges = merged.ranges(target, 4, 2).unwrap();
            let mut got = vec![Vec::new(); ranges.len()];
            for i in 0..ranges.len() {
                let j = match swapped && (i ^ 1) < ranges.len() {
                    true => i ^ 1,
                    false => i,
                };
                let span = ranges.span(j).unwrap();
                merged
                    .merge_range_pairs(&span, 4096, &mut |b| {
                        got[j].extend_from_slice(b);
                        Ok(())
                    })
                    .unwrap();
                prop_assert_eq!(got[j].len() as u64, span.entries());
            }
            prop_assert_eq!(&got.concat(), &want);
            // Cut in steps of `step` bytes read: what is left uncut was read since the last cut.
            let left: u64 = (merged.runs.iter())
                .filter(|r| r.low_bits.is_some())
                .map(|r| std::fs::metadata(&r.path).unwrap().len())
                .sum();
            prop_assert!(left as usize <= step.saturating_sub(1), "{left} bytes left uncut");
            // Range 0 read again: a compact run with records there reads past its file's end.
            let span = ranges.span(0).unwrap();
            let cut = left == 0 && (merged.runs.iter().enumerate())
                .any(|(r, run)| run.low_bits.is_some() && span.hi[r] > span.lo[r]);
            if cut {
                let again = merged.merge_range_pairs(&span, 4096, &mut |_| Ok(()));
                prop_assert!(again.is_err(), "a bucket read after its cut");
            }
            let mut scanned = Vec::new();
            source()
                .scan(&super::super::NoProgress, &mut |k, v| {
                    scanned.push([k[0], v.to_bits()]);
                    Ok(())
                })
                .unwrap();
            prop_assert_eq!(&scanned, &want);
            let mut sorted = source();
            for (run, ks) in sorted.runs.iter_mut().zip(&keys) {
                sort_buckets_of(run).unwrap();
                prop_assert!(run.buckets.is_none() && run.low_bits.is_none());
                let pairs = match run.held.as_deref() {
                    Some(held) => held.to_vec(),
                    None => pairs_in(&run.path),
                };
                let sorted: Vec<u64> = pairs.iter().map(|p| p[0]).collect();
                let mut k = ks.clone();
                k.sort_unstable();
                prop_assert_eq!(sorted, k);
            }
            let mut i = 0;
            for run in &sorted.runs {
                let pairs: Vec<[u64; 2]> = match run.held.as_deref() {
                    Some(held) => held.to_vec(),
                    None => pairs_in(&run.path),
                };
                let mut w: Vec<[u64; 2]> = all[i..i + pairs.len()].to_vec();
                w.sort_by_key(|p| p[0]);
                prop_assert_eq!(&pairs, &w);
                i += pairs.len();
            }
        }

        /// Fixed-size and general sorts agree with sorting (key, value) pairs, for every rank
        /// the dispatch distinguishes, and dedup sums equal keys.
        #[test]
        fn record_sort_and_dedup_match_a_reference(
            rank in 0usize..11,
            raw in proptest::collection::vec((proptest::collection::vec(0u64..3, 10), -3i32..4), 0..40),
        ) {
            let mut run = RunBuffer { rank, recs: Vec::new(), writer_buffer: 4096, packed: None, top: None };
            let mut reference: std::collections::BTreeMap<Vec<u64>, f64> = Default::default();
            for (key, v) in &raw {
                run.recs.extend_from_slice(&key[..rank]);
                run.recs.push(f64::from(*v).to_bits());
                *reference.entry(key[..rank].to_vec()).or_insert(0.0) += f64::from(*v);
            }
            let mut packed = run.recs.clone();
            sort_records(&mut run.recs, rank);
            if sort_packed(&mut packed, rank) {
                prop_assert_eq!(&packed, &run.recs);
            }
            run.dedup(Path::new("x"), &Format::all_compressed(rank), Duplicates::Sum).unwrap();
            let got: Vec<(Vec<u64>, f64)> = (0..run.len()).map(|e| {
                let (k, v) = run.record(e);
                (k.to_vec(), v)
            }).collect();
            let want: Vec<(Vec<u64>, f64)> = reference.into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }
}
