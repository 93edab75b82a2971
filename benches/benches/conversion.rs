//! Streaming `.tns`/`.mtx` → `.tcs` conversion of generated files beside its floors:
//!
//! - the *parse floor*: the best pass we can write that only tokenizes and parses every number
//!   of the file (memory-mapped, on every core, each line of the common shape in one pass and
//!   integers eight digits per word and decimals by the exact fast path — the converter's own
//!   scanners, `tessera_formats::numbers` — with `fast-float2` behind them) and does nothing
//!   else;
//! - the *read floor*: every byte read once through `read(2)`;
//! - the *write floor*: as many bytes as the sorted conversion's output written to a fresh
//!   file as the converter writes them (every core, positioned writes, synced while written)
//!   and synced before it is renamed into place: the floor of a conversion with `--sync`
//!   (`ConvertOptions::sync`), whose output must reach the disk before the rename; the default
//!   conversion does not sync, and both are timed;
//! - sorted against unsorted input (`.tns` and `.mtx`), and the peak RSS of sorted and unsorted
//!   conversions at each memory budget (the budget is the reference: a ratio ≥ 1 is within it).
//!
//! Each measured job runs in a child process (this program, re-run with `TESSERA_BENCH_JOB`
//! set) so that its peak RSS is its own; jobs are interleaved (floor, read, write, sorted, unsorted,
//! .mtx floor, .mtx, unsorted .mtx, sorted with --sync, in turn) and repeated, and the medians are reported, with each job's CPU
//! time (user + system, the steadier figure on a shared machine; counted over the timed part
//! only, like the wall time, so not the removal of the last round's output). Files are
//! generated once and read warm from the page cache.
//!
//! Environment:
//! - `TESSERA_BENCH_CONVERSION_BYTES`: approximate size of each `.tns` (default 256 MiB; the
//!   issue's figure is for 1 GiB, 40 M entries);
//! - `TESSERA_BENCH_CONVERSION_REPS`: repetitions (default 3);
//! - `TESSERA_BENCH_CONVERSION_BUDGETS`: memory budgets in MiB for the RSS rows (default
//!   `16,64,256`); the timed conversions use the largest;
//! - `TESSERA_BENCH_DIR`: where to put the files (default: the system temp directory);
//! - `TESSERA_BENCH_CONVERSION_PAIR_BYTES`: when set, also the sorted / unsorted pairs
//!   (`.tns` and `.mtx`) at this size, e.g. `1073741824` for issue 16's check at 1 GB (a
//!   gigabyte pair's spill and page-cache costs differ from the 256 MiB files'), converted
//!   once untimed and then timed interleaved at the largest budget after the other jobs, their
//!   files removed after; the table then has their unsorted ÷ sorted rows. On a VM the
//!   unsorted runs' system time (the spill files' pages) varies by a factor of three from
//!   minute to minute: read their ratio beside the CPU seconds each job line prints. Unset
//!   (the default), nothing more runs.
//!
//! `TESSERA_BENCH_JOB=generate conversion PATH sorted|unsorted|mtx|unsorted-mtx BYTES` writes one of the
//! bench's inputs and exits, and `TESSERA_BENCH_JOB=convert conversion IN OUT MEMORY [sync]` converts
//! one: to profile a conversion (callgrind, strace) on the bench's own files.
//! `TESSERA_BENCH_JOB=write conversion PATH BYTES` is the write floor alone.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tessera_benches::{child_job, env_or, parse_child_peak, peak_rss_bytes, Table};
use tessera_datasets::generate::{Kind, Spec};
use tessera_formats::{convert, ConvertOptions, NoProgress};

const DIMS: [u64; 3] = [100_000, 100_000, 100_000];
/// A matrix for the `.mtx` rows.
const MTX_DIMS: [u64; 2] = [4_000_000, 4_000_000];
/// Bytes per generated line, about: three 5-6 digit coordinates and a 3-decimal value.
const LINE_BYTES: u64 = 24;

fn main() {
    if let Some((job, args)) = child_job() {
        // As `tessera-data` does: the RSS rows report what its users get.
        tessera_formats::heap::bound_to_budget();
        run_job(&job, &args);
        return;
    }
    let bytes = env_or("TESSERA_BENCH_CONVERSION_BYTES", 256u64 << 20);
    let reps = env_or("TESSERA_BENCH_CONVERSION_REPS", 3usize).max(1);
    let budgets: Vec<u64> = std::env::var("TESSERA_BENCH_CONVERSION_BUDGETS")
        .unwrap_or_else(|_| "16,64,256".into())
        .split(',')
        .filter_map(|b| b.trim().parse::<u64>().ok())
        .map(|b| b << 20)
        .collect();
    let memory = *budgets.iter().max().unwrap_or(&(256 << 20));
    let parent = std::env::var("TESSERA_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let dir = tempfile::tempdir_in(&parent).expect("temporary directory");
    let d = dir.path();
    let nnz = bytes / LINE_BYTES;
    let (sorted, unsorted, mtx, mtx_unsorted) = (
        d.join("sorted.tns"),
        d.join("unsorted.tns"),
        d.join("m.mtx"),
        d.join("u.mtx"),
    );
    eprintln!(
        "generating .tns files of ~{} MiB ({nnz} entries) and .mtx files in {}",
        bytes >> 20,
        d.display()
    );
    let t = Instant::now();
    generate(&sorted, &DIMS, nnz, true);
    generate(&unsorted, &DIMS, nnz, false);
    generate(&mtx, &MTX_DIMS, nnz, true);
    generate(&mtx_unsorted, &MTX_DIMS, nnz, false);
    eprintln!("generated in {:.1} s", t.elapsed().as_secs_f64());
    let mb = |p: &Path| std::fs::metadata(p).unwrap().len() as f64 / 1e6;
    let (sorted_mb, unsorted_mb, mtx_mb) = (mb(&sorted), mb(&unsorted), mb(&mtx));
    let mem = memory.to_string();
    let out = d.join("out.tcs");
    // The write floor writes as many bytes as the sorted conversion's output.
    child("convert", &[s(&sorted), s(&out), &mem]);
    let out_bytes = std::fs::metadata(&out)
        .expect("the output")
        .len()
        .to_string();
    let written = d.join("written.bin");

    // Interleaved repetitions: each round runs every job once.
    let names = [
        "floor",
        "read",
        "write",
        "sorted",
        "unsorted",
        "mtx floor",
        "mtx",
        "unsorted mtx",
        "sorted --sync",
    ];
    let mut runs: Vec<Vec<Job>> = names.iter().map(|_| Vec::new()).collect();
    for rep in 0..reps {
        eprintln!("round {}/{reps}", rep + 1);
        runs[0].push(child("floor", &[s(&sorted)]));
        runs[1].push(child("read", &[s(&sorted)]));
        runs[2].push(child("write", &[s(&written), &out_bytes]));
        runs[3].push(child("convert", &[s(&sorted), s(&out), &mem]));
        runs[4].push(child("convert", &[s(&unsorted), s(&out), &mem]));
        runs[5].push(child("floor", &[s(&mtx)]));
        runs[6].push(child("convert", &[s(&mtx), s(&out), &mem]));
        runs[7].push(child("convert", &[s(&mtx_unsorted), s(&out), &mem]));
        runs[8].push(child("convert", &[s(&sorted), s(&out), &mem, "sync"]));
    }
    let med: Vec<Job> = runs.iter().map(|r| median(r)).collect();
    let [floor, read, write, fast, slow, mtx_floor, mtx_conv, mtx_slow, synced] = &med[..] else {
        unreachable!()
    };
    // Peak RSS against the budget, one run per budget (the smallest first).
    let mut rss = Vec::new();
    for &b in &budgets {
        let m = b.to_string();
        let sp = child("convert", &[s(&sorted), s(&out), &m]);
        let up = child("convert", &[s(&unsorted), s(&out), &m]);
        let mp = child("convert", &[s(&mtx), s(&out), &m]);
        let ump = child("convert", &[s(&mtx_unsorted), s(&out), &m]);
        rss.push((b, sp, up, mp, ump));
    }

    let pair = std::env::var("TESSERA_BENCH_CONVERSION_PAIR_BYTES")
        .ok()
        .and_then(|b| b.trim().parse::<u64>().ok())
        .map(|b| pair_at(d, b, reps, &mem));

    let mut table = Table::new(&format!(
        "conversion -> .tcs (sss, u32, f64), {sorted_mb:.0} MB sorted / {unsorted_mb:.0} MB unsorted .tns, {mtx_mb:.0} MB sorted / unsorted .mtx; budget {} MiB; medians of {reps} interleaved rounds",
        memory >> 20
    ));
    table.row(
        "sorted .tns vs parse floor",
        "MB/s",
        sorted_mb / fast.seconds,
        "parse floor",
        sorted_mb / floor.seconds,
        true,
    );
    table.row(
        "sorted .tns vs read floor",
        "MB/s",
        sorted_mb / fast.seconds,
        "read floor",
        sorted_mb / read.seconds,
        true,
    );
    // With --sync the output must reach the disk before the rename: the write floor bounds it.
    table.row(
        "sorted .tns --sync time vs write floor",
        "s",
        synced.seconds,
        "write floor",
        write.seconds,
        false,
    );
    table.row(
        "sorted .tns --sync vs default time",
        "s",
        synced.seconds,
        "default (no sync)",
        fast.seconds,
        false,
    );
    table.row(
        "unsorted vs sorted .tns time",
        "s",
        slow.seconds,
        "sorted",
        fast.seconds,
        false,
    );
    table.row(
        "sorted .mtx vs parse floor",
        "MB/s",
        mtx_mb / mtx_conv.seconds,
        "parse floor",
        mtx_mb / mtx_floor.seconds,
        true,
    );
    table.row(
        "unsorted vs sorted .mtx time",
        "s",
        mtx_slow.seconds,
        "sorted",
        mtx_conv.seconds,
        false,
    );
    table.row(
        "sorted .tns CPU time vs parse floor",
        "s",
        fast.cpu,
        "parse floor",
        floor.cpu,
        false,
    );
    table.row(
        "unsorted vs sorted CPU time",
        "s",
        slow.cpu,
        "sorted",
        fast.cpu,
        false,
    );
    table.row(
        "sorted .mtx CPU time vs parse floor",
        "s",
        mtx_conv.cpu,
        "parse floor",
        mtx_floor.cpu,
        false,
    );
    for (b, sp, up, mp, ump) in &rss {
        let budget = mib(*b);
        table.row(
            &format!("sorted .tns peak RSS, budget {budget:.0}"),
            "MiB",
            mib(sp.peak),
            "budget",
            budget,
            false,
        );
        table.row(
            &format!("unsorted .tns peak RSS, budget {budget:.0}"),
            "MiB",
            mib(up.peak),
            "budget",
            budget,
            false,
        );
        table.row(
            &format!("sorted .mtx peak RSS, budget {budget:.0}"),
            "MiB",
            mib(mp.peak),
            "budget",
            budget,
            false,
        );
        table.row(
            &format!("unsorted .mtx peak RSS, budget {budget:.0}"),
            "MiB",
            mib(ump.peak),
            "budget",
            budget,
            false,
        );
        table.figure(
            &format!("sorted .tns seconds at budget {budget:.0} MiB"),
            sp.seconds,
        );
        table.figure(
            &format!("unsorted .tns seconds at budget {budget:.0} MiB"),
            up.seconds,
        );
    }
    table.figure("sorted .tns GB/s", sorted_mb / 1e3 / fast.seconds);
    table.figure("sorted .tns seconds", fast.seconds);
    table.figure("sorted .tns --sync seconds", synced.seconds);
    table.figure("parse floor seconds", floor.seconds);
    table.figure("write floor seconds", write.seconds);
    table.figure(
        "write floor MB/s (output bytes)",
        out_bytes.parse::<f64>().unwrap_or(0.0) / 1e6 / write.seconds,
    );
    if let Some(p) = &pair {
        let at = format!("{:.0} MB", p.mb);
        for (what, (sorted, unsorted)) in [(".tns", &p.tns), (".mtx", &p.mtx)] {
            table.row(
                &format!("unsorted vs sorted {what} time at {at}"),
                "s",
                unsorted.seconds,
                "sorted",
                sorted.seconds,
                false,
            );
            table.row(
                &format!(
                    "unsorted {what} peak RSS at {at}, budget {:.0}",
                    mib(memory)
                ),
                "MiB",
                mib(unsorted.peak),
                "budget",
                mib(memory),
                false,
            );
        }
    }
    table.figure("entries", fast.entries as f64);
    table.figure("load average at the end", load_average());
    table.print();
}

/// The sorted / unsorted pairs at one size (`TESSERA_BENCH_CONVERSION_PAIR_BYTES`): medians of
/// `reps` interleaved rounds, (sorted, unsorted) each.
struct Pair {
    /// Megabytes of the unsorted `.tns`.
    mb: f64,
    tns: (Job, Job),
    mtx: (Job, Job),
}

/// Generates the pairs of about `bytes` each in `d`, times them at budget `mem`, and
/// removes them (four files of that size otherwise stay until the bench ends).
fn pair_at(d: &Path, bytes: u64, reps: usize, mem: &str) -> Pair {
    let nnz = bytes / LINE_BYTES;
    let files = [
        (d.join("pair-s.tns"), &DIMS[..], true),
        (d.join("pair-u.tns"), &DIMS[..], false),
        (d.join("pair-s.mtx"), &MTX_DIMS[..], true),
        (d.join("pair-u.mtx"), &MTX_DIMS[..], false),
    ];
    eprintln!("generating the pairs of ~{} MiB", bytes >> 20);
    for (path, dims, sorted) in &files {
        generate(path, dims, nnz, *sorted);
        // Written back now, not under the timed jobs: without this, the first rounds at
        // 1 GB ran beside the write-back of 4 GB just generated (unsorted `.tns` 3.75 s
        // against 2.2 s in single jobs).
        std::fs::File::open(path)
            .and_then(|f| f.sync_all())
            .expect("the generated pair");
    }
    let out = d.join("pair-out.tcs");
    // One untimed round first: right after four gigabyte files were written, the first
    // conversions ran up to twice their CPU time (unsorted `.tns` 3.1-3.7 s in the bench,
    // 1.85-2.0 s as single jobs on the same files a minute later), the cost of the moment,
    // not of the converter.
    eprintln!("pair warm-up round");
    for (path, _, _) in &files {
        child("convert", &[s(path), s(&out), mem]);
    }
    let mut jobs: Vec<Vec<Job>> = files.iter().map(|_| Vec::new()).collect();
    for rep in 0..reps {
        eprintln!("pair round {}/{reps}", rep + 1);
        for (j, (path, _, _)) in files.iter().enumerate() {
            jobs[j].push(child("convert", &[s(path), s(&out), mem]));
        }
    }
    let mb = std::fs::metadata(&files[1].0).map_or(0.0, |m| m.len() as f64 / 1e6);
    for (path, _, _) in &files {
        let _ = std::fs::remove_file(path);
    }
    let _ = std::fs::remove_file(&out);
    let m: Vec<Job> = jobs.iter().map(|r| median(r)).collect();
    Pair {
        mb,
        tns: (m[0], m[1]),
        mtx: (m[2], m[3]),
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn generate(path: &Path, dims: &[u64], nnz: u64, sorted: bool) {
    let spec = Spec {
        dims: dims.to_vec(),
        nnz: Some(nnz),
        density: None,
        kind: Kind::Uniform,
        seed: 1,
        sorted,
        duplicates: false,
    };
    tessera_datasets::generate::generate(
        &spec,
        path,
        &ConvertOptions::default(),
        &NoProgress,
        &|_| {},
    )
    .expect("generate");
}

/// What a child reports.
#[derive(Clone, Copy)]
struct Job {
    seconds: f64,
    /// User + system CPU time of the job (all its threads).
    cpu: f64,
    entries: u64,
    peak: u64,
}

/// The job of median wall time.
fn median(jobs: &[Job]) -> Job {
    let mut v = jobs.to_vec();
    v.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    v[v.len() / 2]
}

fn child(job: &str, args: &[&str]) -> Job {
    let out = Command::new(std::env::current_exe().unwrap())
        .env("TESSERA_BENCH_JOB", job)
        .args(args)
        .output()
        .expect("spawn job");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "job {job} failed:\n{stderr}");
    let field = |name: &str| {
        stderr
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let r = Job {
        seconds: field("seconds="),
        cpu: field("cpu_seconds="),
        entries: field("entries=") as u64,
        peak: parse_child_peak(&stderr).unwrap_or(0),
    };
    eprintln!(
        "{job:>8} {:?} {}: {:.2} s ({:.2} CPU s), {} entries, peak RSS {:.0} MiB",
        Path::new(args[0]).file_name().unwrap(),
        args.get(2).map_or(String::new(), |m| format!(
            "budget {:.0} MiB",
            mib(m.parse().unwrap_or(0))
        )),
        r.seconds,
        r.cpu,
        r.entries,
        mib(r.peak)
    );
    r
}

fn run_job(job: &str, args: &[String]) {
    if job == "generate" {
        let nnz = args[2].parse::<u64>().expect("bytes") / LINE_BYTES;
        let (dims, sorted): (&[u64], bool) = match args[1].as_str() {
            "sorted" => (&DIMS, true),
            "unsorted" => (&DIMS, false),
            "mtx" => (&MTX_DIMS, true),
            "unsorted-mtx" => (&MTX_DIMS, false),
            other => panic!("unknown input kind {other}"),
        };
        generate(Path::new(&args[0]), dims, nnz, sorted);
        return;
    }
    if job == "convert" || job == "write" {
        // A fresh output, as a user's would be: replacing the last round's file would time
        // freeing its pages too.
        let _ = std::fs::remove_file(if job == "write" { &args[0] } else { &args[1] });
    }
    // CPU time from here, as wall time: removing the last output (ext4 freeing its page cache
    // and buffer heads, ~5% of a sorted `.mtx` conversion's samples) is not the job's.
    let cpu_before = tessera_benches::cpu_seconds_of("self");
    let t = Instant::now();
    let entries = match job {
        "read" => read_all(Path::new(&args[0])),
        "floor" => parse_floor(Path::new(&args[0])),
        "write" => write_floor(Path::new(&args[0]), args[1].parse().expect("bytes")),
        "convert" => {
            let opts = ConvertOptions {
                memory: args[2].parse().unwrap(),
                sync: args.get(3).is_some_and(|a| a == "sync"),
                ..ConvertOptions::default()
            };
            let report = convert(Path::new(&args[0]), Path::new(&args[1]), &opts, &NoProgress)
                .expect("convert");
            eprintln!("runs={}", report.runs);
            eprintln!("runs_spilled={}", report.runs_spilled);
            eprintln!("merge_rounds={}", report.merge_rounds);
            report.entries_read
        }
        _ => panic!("unknown job {job}"),
    };
    eprintln!("seconds={}", t.elapsed().as_secs_f64());
    let cpu = tessera_benches::cpu_seconds_of("self") - cpu_before;
    eprintln!("cpu_seconds={:.2}", cpu.max(0.0));
    eprintln!("entries={entries}");
    eprintln!("peak_rss_bytes={}", peak_rss_bytes());
}

/// The read floor: every byte read once through an 8 MiB buffer, newlines counted so the
/// loop cannot be optimized away.
fn read_all(path: &Path) -> u64 {
    let mut f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; 8 << 20];
    let mut lines = 0;
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return lines;
        }
        lines += buf[..n].iter().filter(|&&c| c == b'\n').count() as u64;
    }
}

/// The write floor: `bytes` bytes written to a fresh file next to `path` and renamed onto it,
/// as the converter writes its output: 4 MiB positioned writes taken in turn by every core,
/// a thread of its own syncing what was written each 16 MiB (so that the disk works while
/// the writers do), and the whole file synced before the rename. Returns the bytes.
fn write_floor(path: &Path, bytes: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    const CHUNK: u64 = 4 << 20;
    const SYNC_STEP: u64 = 16 << 20;
    let temp = path.with_extension("partial");
    let file = std::fs::File::create(&temp).unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (next, written) = (AtomicU64::new(0), AtomicU64::new(0));
    let (ask, asked) = std::sync::mpsc::sync_channel::<()>(1);
    std::thread::scope(|scope| {
        let syncing = file.try_clone().unwrap();
        scope.spawn(move || asked.iter().for_each(|()| syncing.sync_data().unwrap()));
        let writers: Vec<_> = (0..threads)
            .map(|t| {
                let (file, next, written, ask) = (&file, &next, &written, ask.clone());
                scope.spawn(move || {
                    let data = vec![b'0' + t as u8; CHUNK as usize];
                    loop {
                        let at = next.fetch_add(CHUNK, Ordering::Relaxed);
                        if at >= bytes {
                            return;
                        }
                        let n = CHUNK.min(bytes - at);
                        file.write_all_at(&data[..n as usize], at).unwrap();
                        let before = written.fetch_add(n, Ordering::Relaxed);
                        if (before + n) / SYNC_STEP > before / SYNC_STEP {
                            let _ = ask.try_send(());
                        }
                    }
                })
            })
            .collect();
        drop(ask);
        writers.into_iter().for_each(|w| w.join().unwrap());
    });
    file.sync_all().unwrap();
    std::fs::rename(&temp, path).unwrap();
    bytes
}

/// The parse floor: the file mapped, cut at newlines into one part per core, and every
/// number of every line parsed (all fields but the last as integers, the last as a float);
/// comment lines (`#`, `%`) skipped. Returns the lines with numbers; the sums keep the
/// parsing from being optimized away.
fn parse_floor(path: &Path) -> u64 {
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: the benchmark's own file, which nothing writes while it is mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut cuts = vec![0];
    for t in 1..threads {
        let at = (map.len() * t / threads).max(*cuts.last().unwrap());
        let next = map[at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(map.len(), |i| at + i + 1);
        cuts.push(next);
    }
    cuts.push(map.len());
    let parts: Vec<(u64, u64, f64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = cuts
            .windows(2)
            .map(|w| {
                let part = &map[w[0]..w[1]];
                scope.spawn(move || parse_numbers(part))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (lines, ints, floats) = parts.iter().fold((0, 0u64, 0.0), |a, p| {
        (a.0 + p.0, a.1.wrapping_add(p.1), a.2 + p.2)
    });
    std::hint::black_box((ints, floats));
    lines
}

/// Lines, the wrapping sum of the integers and the sum of the floats of `text`: lines of the
/// common shape (coordinates, then a plain decimal value) by the converter's own one-pass line
/// scanner (`numbers::entry_line`, for the rank of the first data line), any other line field
/// by field with its word-at-a-time number scanners (`numbers`: integers eight digits per
/// word, plain decimals by the exact fast path) and `fast-float2` behind them.
fn parse_numbers(text: &[u8]) -> (u64, u64, f64) {
    let first = text
        .split(|&b| b == b'\n')
        .find(|l| !l.is_empty() && l[0] != b'#' && l[0] != b'%')
        .unwrap_or_default();
    let fields = first
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .count();
    match fields {
        2 => parse_lines::<1>(text),
        3 => parse_lines::<2>(text),
        4 => parse_lines::<3>(text),
        5 => parse_lines::<4>(text),
        _ => parse_lines::<0>(text),
    }
}

/// [`parse_numbers`] with the line scanner for `R` coordinates (none for `R` = 0).
fn parse_lines<const R: usize>(text: &[u8]) -> (u64, u64, f64) {
    let mut sums = (0u64, 0u64, 0.0f64);
    let mut coords = [0u64; R];
    let mut i = 0;
    while i < text.len() {
        if R > 0 {
            if let Some((v, next)) = tessera_formats::numbers::entry_line::<R>(text, i, &mut coords)
            {
                sums.0 += 1;
                for c in coords {
                    sums.1 = sums.1.wrapping_add(c);
                }
                sums.2 += v;
                i = next;
                continue;
            }
        }
        i = parse_line(text, i, &mut sums);
    }
    sums
}

/// Parses the line at `text[i..]` field by field into `sums` (lines, integers, floats);
/// returns where the next line begins.
fn parse_line(text: &[u8], mut i: usize, sums: &mut (u64, u64, f64)) -> usize {
    use tessera_formats::numbers::{decimal_at, digits_at};
    let ends_field = |b: Option<&u8>| matches!(b, None | Some(b' ' | b'\t' | b'\n' | b'\r'));
    let n = text.len();
    if text[i] == b'#' || text[i] == b'%' {
        return memchr_from(text, i).map_or(n, |p| p + 1);
    }
    sums.0 += 1;
    loop {
        while i < n && (text[i] == b' ' || text[i] == b'\t' || text[i] == b'\r') {
            i += 1;
        }
        if i >= n || text[i] == b'\n' {
            return i + 1;
        }
        match digits_at(text, i) {
            Some((x, len)) if ends_field(text.get(i + len)) => {
                sums.1 = sums.1.wrapping_add(x);
                i += len;
                continue;
            }
            _ => {}
        }
        let (v, len) = match decimal_at(text, i) {
            Some((v, len)) if ends_field(text.get(i + len)) => (v, len),
            _ => fast_float2::parse_partial::<f64, _>(&text[i..]).unwrap_or((0.0, 1)),
        };
        sums.2 += v;
        i += len.max(1);
    }
}

/// The first newline at or after `at`.
fn memchr_from(text: &[u8], at: usize) -> Option<usize> {
    text[at..].iter().position(|&b| b == b'\n').map(|p| at + p)
}
