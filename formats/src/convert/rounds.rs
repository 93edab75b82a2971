//! Merge rounds of the external sort when keys pack into one `u64` (nearly always): more runs
//! than the final merge takes at once are merged in consecutive groups, each into a run of
//! sorted (packed key, value) pairs, as spilled runs are. Groups are merged by every core at
//! once, each run read in chunks of pairs, and the merge compares one 128-bit number a record
//! (the key above the run's number), as the final merge does.
//!
//! Before (stop 49), a round merged every run, one group at a time, decoding every record
//! into a key of coordinates and writing records of coordinates that the final merge decoded
//! again: a 3 GB unsorted `.tns` at `--memory 64M` (510 runs, one round) took 29-32 s, about
//! 13 of them in the round on one core, against 5-7 s at 256M (122 runs, no round); now
//! 11-12 s. A large enough file reaches a round at any budget (more than 256 runs: about
//! 6 GB at the default 256M; a 10 GB file there took 94 s, now 42 s).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::ranges::RunFile;
use super::runs::{read_packed, unpack, Run};
use super::{duplicate_error, Duplicates, Progress};
use crate::error::{Error, Result};
use crate::format::Format;

/// How a round brings `runs` runs down to the `target` the final merge takes: the first
/// `merged` runs are merged in consecutive groups of `size` (at most `fan_in`; at least
/// `threads` groups, so that every core merges) and the others stay as they are. A round
/// that merged every run passed all the data through one more write and read; this passes
/// only the excess runs' share (a 3 GB file at 64M: 510 runs, 256 taken at once, so about
/// half of the data instead of all of it).
pub(super) fn plan(runs: usize, target: usize, fan_in: usize, threads: usize) -> (usize, usize) {
    let excess = runs.saturating_sub(target).max(1);
    let groups = excess
        .div_ceil(fan_in.max(2) - 1)
        .max(threads.min(excess))
        .max(1);
    let merged = (excess + groups).min(runs);
    // Groups of two at least: every group then takes a run off the count (a last group of
    // one run would only copy it).
    let size = merged.div_ceil(groups).max(2);
    (merged - usize::from(merged % size == 1), size)
}

/// What a round needs to know of the conversion: the input and format (to name a repeated
/// entry), what to do with repeats, and the key's rank.
pub(super) struct Check<'a> {
    pub input: &'a Path,
    pub format: &'a Format,
    pub duplicates: Duplicates,
    pub rank: usize,
}

/// Merges `runs` in consecutive groups of `size` into runs `dir/run-{first_id + g}` of
/// pairs packed by `bits`, `threads` groups at once, each run of a group read through
/// `buffer / threads` bytes (so the round holds what one merge of `size` runs with
/// `buffer` bytes each would). The merged runs come back in group order; the runs merged
/// are deleted. Equal keys keep run order (sums wait for the final merge, see
/// `RunBuffer::spill`); with `Duplicates::Error` a repeated key is rejected, the first
/// group's that has one whatever the timing (a failed group stops only the groups after
/// it). Progress counts the runs merged.
pub(super) fn merge_round(
    runs: &[Run],
    bits: &[u32],
    (size, threads, buffer): (usize, usize, usize),
    (dir, first_id): (&Path, usize),
    check: &Check<'_>,
    progress: &dyn Progress,
) -> Result<Vec<Run>> {
    let groups: Vec<&[Run]> = runs.chunks(size.max(1)).collect();
    // The next group to take, the groups done, and the first that failed.
    let (next, done) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let failed = AtomicUsize::new(usize::MAX);
    let merged: Mutex<Vec<Option<Result<Run>>>> = Mutex::new(groups.iter().map(|_| None).collect());
    let per_run = (buffer / threads.max(1)).max(1 << 10);
    // Merges the next group not taken yet; false when none is left (or one before failed).
    let merge_next = || -> bool {
        let g = next.fetch_add(1, Ordering::Relaxed);
        if g >= groups.len() || g > failed.load(Ordering::Relaxed) {
            return false;
        }
        let path = dir.join(format!("run-{}", first_id + g));
        let run = merge_group(groups[g], bits, per_run, &path, check);
        match &run {
            Ok(_) => groups[g].iter().for_each(|r| {
                let _ = std::fs::remove_file(r.path());
            }),
            Err(_) => _ = failed.fetch_min(g, Ordering::Relaxed),
        }
        merged.lock().unwrap_or_else(|e| e.into_inner())[g] = Some(run);
        done.fetch_add(1, Ordering::Relaxed);
        true
    };
    let cancelled = std::thread::scope(|scope| {
        for _ in 1..threads.max(1) {
            scope.spawn(|| while merge_next() {});
        }
        // This thread merges too, and reports progress (and a cancel) between its groups.
        loop {
            let runs_done = (done.load(Ordering::Relaxed) * size).min(runs.len());
            if let Err(e) = super::tick(progress, runs_done as u64) {
                failed.store(0, Ordering::Relaxed);
                return Some(e);
            }
            if !merge_next() {
                return None;
            }
        }
    });
    if let Some(e) = cancelled {
        return Err(e);
    }
    let merged = merged.into_inner().unwrap_or_else(|e| e.into_inner());
    // Every group up to the first that failed was merged, and none after it is kept.
    let merged: Vec<Run> = merged.into_iter().map_while(|r| r).collect::<Result<_>>()?;
    assert_eq!(merged.len(), groups.len(), "every group merged");
    Ok(merged)
}

/// Merged pairs written at once.
const BATCH: usize = 1 << 10;

/// Merges the runs of `group` (each sorted) into the run file `path` of pairs packed by
/// `bits`, each run read `per_run` bytes at a time: a tree of losers over 128-bit heads, as
/// the final merge's in-memory merge (`runs::merge_slices`), with a chunk refilled when it
/// is used up.
fn merge_group(
    group: &[Run],
    bits: &[u32],
    per_run: usize,
    path: &Path,
    check: &Check<'_>,
) -> Result<Run> {
    let rank = check.rank;
    let mut raw = Vec::new();
    let mut streams = Vec::with_capacity(group.len());
    for run in group {
        let mut s = Stream::open(run, rank, per_run)?;
        s.refill(rank, bits, &mut raw)?;
        streams.push(s);
    }
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut out = Output {
        file: BufWriter::with_capacity(per_run, file),
        path,
        last: None,
        batch: Vec::with_capacity(BATCH),
    };
    let k = streams.len();
    let mut heads: Vec<u128> = (streams.iter().enumerate())
        .map(|(i, s)| s.head(i))
        .collect();
    let mut tree = vec![0usize; k];
    let mut winner = super::runs::play(1, k, &heads, &mut tree);
    while heads[winner] != u128::MAX {
        let s = &mut streams[winner];
        out.batch.push(s.pairs[s.at]);
        s.at += 1;
        if s.at == s.pairs.len() {
            s.refill(rank, bits, &mut raw)?;
        }
        heads[winner] = s.head(winner);
        winner = super::runs::replay(winner, &heads, &mut tree);
        if out.batch.len() == BATCH {
            out.write(bits, check)?;
        }
    }
    out.write(bits, check)?;
    out.file.flush().map_err(|e| Error::io(path, e))?;
    Ok(Run::pairs(path, bits))
}

/// A run being merged: a chunk of its records as packed pairs, read on from `next`.
struct Stream<'a> {
    source: RunFile<'a>,
    pairs: Vec<[u64; 2]>,
    at: usize,
    next: u64,
    /// Records read at once.
    per: usize,
}

impl<'a> Stream<'a> {
    fn open(run: &'a Run, rank: usize, bytes: usize) -> Result<Self> {
        Ok(Stream {
            source: RunFile::open(run, rank)?,
            pairs: Vec::new(),
            at: 0,
            next: 0,
            per: (bytes / run.record_bytes(rank)).max(1),
        })
    }

    /// The head as one number ordered as (key, run `i`); `u128::MAX` once the run is done.
    fn head(&self, i: usize) -> u128 {
        match self.pairs.get(self.at) {
            Some(p) => (u128::from(p[0]) << 64) | i as u128,
            None => u128::MAX,
        }
    }

    /// Reads the next chunk (none at the run's end), its keys packed by `bits`.
    fn refill(&mut self, rank: usize, bits: &[u32], raw: &mut Vec<u8>) -> Result<()> {
        let n = (self.source.records - self.next).min(self.per as u64) as usize;
        self.pairs.resize(n, [0; 2]);
        let (run, file) = (self.source.run, self.source.file.as_ref());
        let chunk = self.per * run.record_bytes(rank);
        read_packed(
            run,
            file,
            rank,
            self.next,
            bits,
            chunk,
            raw,
            &mut self.pairs,
        )?;
        self.next += n as u64;
        self.at = 0;
        Ok(())
    }
}

/// The merged run's file and the pairs waiting to be written to it.
struct Output<'a> {
    file: BufWriter<File>,
    path: &'a Path,
    /// The last key written (to find repeats across batches).
    last: Option<u64>,
    batch: Vec<[u64; 2]>,
}

impl Output<'_> {
    /// Writes the batch, first rejecting a repeated key if asked to.
    fn write(&mut self, bits: &[u32], check: &Check<'_>) -> Result<()> {
        if check.duplicates == Duplicates::Error {
            for p in &self.batch {
                if self.last == Some(p[0]) {
                    let mut key = vec![0; bits.len()];
                    unpack(p[0], bits, &mut key);
                    return Err(duplicate_error(check.input, check.format, &key));
                }
                self.last = Some(p[0]);
            }
        }
        let bytes: &[u8] = bytemuck::cast_slice(&self.batch);
        self.file
            .write_all(bytes)
            .map_err(|e| Error::io(self.path, e))?;
        self.batch.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of sorted pairs (keys of two 4-bit fields, many repeated across runs; the value
    /// says which run and record it came from) written to files in `dir`.
    fn runs_in(dir: &Path, sizes: &[usize], seed: u64) -> Vec<Run> {
        let mut x = seed;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let bits = [4, 4];
        sizes
            .iter()
            .enumerate()
            .map(|(r, &n)| {
                let mut pairs: Vec<[u64; 2]> = (0..n).map(|_| [next() % 256, 0]).collect();
                pairs.sort_by_key(|p| p[0]);
                for (i, p) in pairs.iter_mut().enumerate() {
                    p[1] = (r * 1000 + i) as u64;
                }
                let path = dir.join(format!("in-{r}"));
                std::fs::write(&path, bytemuck::cast_slice::<_, u8>(&pairs)).unwrap();
                Run::pairs(&path, &bits)
            })
            .collect()
    }

    /// A round's plan merges groups of at most the fan-in, each of two runs at least, and
    /// brings the count within the target in one round when its groups can; rounds always
    /// end, and leave the target's count when they can.
    #[test]
    fn a_round_merges_only_the_runs_past_the_target() {
        for runs in 3..300 {
            for target in [2, 3, 16, 256] {
                for fan_in in [2, 3, 85] {
                    for threads in 1..4 {
                        let (mut n, mut rounds) = (runs, 0);
                        while n > target {
                            let (merged, size) = plan(n, target, fan_in, threads);
                            assert!((2..=fan_in.max(2)).contains(&size), "{runs} {target}");
                            assert!(merged <= n);
                            let after = merged.div_ceil(size) + (n - merged);
                            assert!(after < n, "{n} runs, target {target}: {after}");
                            let reach = (n - target).div_ceil(fan_in - 1) * fan_in <= n;
                            if rounds == 0 && reach && threads == 1 {
                                assert!(after <= target, "{n} -> {after}, target {target}");
                            }
                            (n, rounds) = (after, rounds + 1);
                        }
                    }
                }
            }
        }
    }

    fn read_run(run: &Run) -> Vec<[u64; 2]> {
        bytemuck::pod_collect_to_vec(&std::fs::read(run.path()).unwrap())
    }

    /// A round gives each group of `fan_in` runs as the stable sort of their records laid end
    /// to end (equal keys in run order), whatever the threads and the chunk each run is read
    /// in, and deletes the runs it merged.
    #[test]
    fn a_round_merges_each_group_as_the_stable_sort_of_its_runs() {
        let format = Format::all_compressed(2);
        let input = Path::new("in.tns");
        for (seed, fan_in, threads, buffer) in [(1, 2, 1, 16), (2, 3, 2, 48), (3, 4, 2, 4096)] {
            let dir = tempfile::tempdir().unwrap();
            let runs = runs_in(dir.path(), &[0, 37, 5, 300, 1, 64, 129, 2], seed);
            let groups: Vec<Vec<[u64; 2]>> = runs
                .chunks(fan_in)
                .map(|g| {
                    let mut all: Vec<[u64; 2]> = g.iter().flat_map(read_run).collect();
                    all.sort_by_key(|p| p[0]);
                    all
                })
                .collect();
            let check = Check {
                input,
                format: &format,
                duplicates: Duplicates::Sum,
                rank: 2,
            };
            let how = (fan_in, threads, buffer);
            let merged = merge_round(
                &runs,
                &[4, 4],
                how,
                (dir.path(), 8),
                &check,
                &super::super::NoProgress,
            )
            .unwrap();
            let got: Vec<Vec<[u64; 2]>> = merged.iter().map(read_run).collect();
            assert_eq!(
                got, groups,
                "seed {seed}, fan-in {fan_in}, {threads} threads"
            );
            assert!(runs.iter().all(|r| !r.path().exists()));
        }
    }

    /// With `Duplicates::Error` a key that two runs share is rejected, naming its
    /// coordinates; distinct keys pass.
    #[test]
    fn a_round_rejects_a_repeated_key_when_asked() {
        let format = Format::all_compressed(2);
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, keys: &[u64]| {
            let pairs: Vec<[u64; 2]> = keys.iter().map(|&k| [k, 0]).collect();
            let path = dir.path().join(name);
            std::fs::write(&path, bytemuck::cast_slice::<_, u8>(&pairs)).unwrap();
            Run::pairs(&path, &[4, 4])
        };
        let check = Check {
            input: Path::new("in.tns"),
            format: &format,
            duplicates: Duplicates::Error,
            rank: 2,
        };
        let progress = &super::super::NoProgress;
        let distinct = [write("a", &[1, 5, 9]), write("b", &[2, 6])];
        let how = (2, 2, 64);
        assert!(merge_round(&distinct, &[4, 4], how, (dir.path(), 10), &check, progress).is_ok());
        let shared = [write("c", &[1, 0x35]), write("d", &[2, 0x35])];
        let e = merge_round(&shared, &[4, 4], how, (dir.path(), 20), &check, progress);
        let msg = e.err().expect("a repeated key").to_string();
        assert!(msg.contains("[4, 6]"), "{msg}"); // 1-based
                                                  // A repeat whose entries fall in two batches of the output (keys of 8-bit fields).
        for split in [BATCH - 1, BATCH, BATCH + 1] {
            let a: Vec<u64> = (0..split as u64).collect();
            let mut runs = [write("e", &a), write("f", &[split as u64 - 1])];
            runs.iter_mut()
                .for_each(|r| *r = Run::pairs(r.path(), &[8, 8]));
            let e = merge_round(&runs, &[8, 8], how, (dir.path(), 30), &check, progress);
            assert!(e.is_err(), "split {split}");
        }
        // Repeats in two groups: the first group's is named, whichever thread finds which.
        for _ in 0..20 {
            let runs = [
                write("g", &[0x11]),
                write("h", &[0x11]),
                write("i", &[0x22]),
                write("j", &[0x22]),
            ];
            let e = merge_round(&runs, &[4, 4], how, (dir.path(), 40), &check, progress);
            let msg = e.err().expect("a repeated key").to_string();
            assert!(msg.contains("[2, 2]"), "{msg}");
        }
    }
}
