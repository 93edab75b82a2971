//! Streaming `.tns` → `.tcs` conversion of a generated tensor, sorted and unsorted, beside
//! (a) merely reading all its bytes (the I/O floor) and (b) a naive in-memory converter
//! (read everything, sort, build, write).
//!
//! Each measured job runs in a child process (this program, re-run with
//! `TESSERA_BENCH_JOB` set) so that its peak RSS is its own. Files are generated once into a
//! temporary directory and read warm from the page cache, so the floor is memory bandwidth
//! through `read(2)`, not disk.
//!
//! Environment:
//! - `TESSERA_BENCH_CONVERSION_BYTES`: approximate size of each `.tns` (default 1 GiB);
//! - `TESSERA_BENCH_CONVERSION_MEMORY`: the converter's budget (default 256 MiB);
//! - `TESSERA_BENCH_DIR`: where to put the files (default: the system temp directory).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tessera_benches::{child_job, env_or, parse_child_peak, peak_rss_bytes, Table};
use tessera_datasets::generate::{Kind, Spec};
use tessera_formats::{convert, tcs, ConvertOptions, Format, NoProgress, Packer, Tensor};

const DIMS: [u64; 3] = [100_000, 100_000, 100_000];
/// Bytes per generated line, about: three 5-6 digit coordinates and a 3-decimal value.
const LINE_BYTES: u64 = 24;

fn main() {
    if let Some((job, args)) = child_job() {
        run_job(&job, &args);
        return;
    }
    let bytes = env_or("TESSERA_BENCH_CONVERSION_BYTES", 1 << 30);
    let memory = env_or("TESSERA_BENCH_CONVERSION_MEMORY", 256 << 20);
    let parent = std::env::var("TESSERA_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let dir = tempfile::tempdir_in(&parent).expect("temporary directory");
    let nnz = bytes / LINE_BYTES;
    let sorted = dir.path().join("sorted.tns");
    let unsorted = dir.path().join("unsorted.tns");
    eprintln!(
        "generating two .tns files of ~{} MiB ({nnz} entries) in {}",
        bytes >> 20,
        dir.path().display()
    );
    let t = Instant::now();
    generate(&sorted, nnz, true);
    generate(&unsorted, nnz, false);
    eprintln!("generated in {:.1} s", t.elapsed().as_secs_f64());
    let mb = |p: &Path| std::fs::metadata(p).unwrap().len() as f64 / 1e6;
    let (sorted_mb, unsorted_mb) = (mb(&sorted), mb(&unsorted));

    let floor = child("read", &[&sorted]);
    let fast = child(
        "convert",
        &[
            &sorted,
            &dir.path().join("s.tcs"),
            Path::new(&memory.to_string()),
        ],
    );
    let slow = child(
        "convert",
        &[
            &unsorted,
            &dir.path().join("u.tcs"),
            Path::new(&memory.to_string()),
        ],
    );
    let naive_sorted = child("naive", &[&sorted, &dir.path().join("ns.tcs")]);
    let naive_unsorted = child("naive", &[&unsorted, &dir.path().join("nu.tcs")]);
    let entries = |r: &Job| r.entries as f64 / r.seconds / 1e6;

    let mut table = Table::new(&format!(
        "conversion .tns -> .tcs (sss, u32, f64), {sorted_mb:.0} MB sorted / {unsorted_mb:.0} MB unsorted, budget {} MiB",
        memory >> 20
    ));
    table.row(
        "sorted conversion vs read floor",
        "MB/s",
        sorted_mb / fast.seconds,
        "read all bytes",
        sorted_mb / floor.seconds,
        true,
    );
    table.row(
        "sorted conversion vs naive",
        "MB/s",
        sorted_mb / fast.seconds,
        "naive in-memory",
        sorted_mb / naive_sorted.seconds,
        true,
    );
    table.row(
        "unsorted conversion vs naive",
        "MB/s",
        unsorted_mb / slow.seconds,
        "naive in-memory",
        unsorted_mb / naive_unsorted.seconds,
        true,
    );
    table.row(
        "unsorted vs sorted conversion",
        "MB/s",
        unsorted_mb / slow.seconds,
        "tessera sorted",
        sorted_mb / fast.seconds,
        true,
    );
    table.row(
        "sorted nonzeros/s",
        "M/s",
        entries(&fast),
        "naive in-memory",
        entries(&naive_sorted),
        true,
    );
    table.row(
        "unsorted nonzeros/s",
        "M/s",
        entries(&slow),
        "naive in-memory",
        entries(&naive_unsorted),
        true,
    );
    table.row(
        "sorted conversion CPU time",
        "s",
        fast.cpu,
        "read all bytes",
        floor.cpu,
        false,
    );
    table.row(
        "unsorted vs sorted CPU time",
        "s",
        slow.cpu,
        "tessera sorted",
        fast.cpu,
        false,
    );
    table.row(
        "sorted peak RSS",
        "MiB",
        mib(fast.peak),
        "naive in-memory",
        mib(naive_sorted.peak),
        false,
    );
    table.row(
        "unsorted peak RSS",
        "MiB",
        mib(slow.peak),
        "naive in-memory",
        mib(naive_unsorted.peak),
        false,
    );
    table.figure("budget MiB", mib(memory));
    table.figure("entries sorted", fast.entries as f64);
    table.figure("entries unsorted", slow.entries as f64);
    table.figure("read floor peak RSS MiB", mib(floor.peak));
    table.print();
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn generate(path: &Path, nnz: u64, sorted: bool) {
    let spec = Spec {
        dims: DIMS.to_vec(),
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
struct Job {
    seconds: f64,
    /// User + system CPU time of the job (all its threads): on a shared machine this is the
    /// steadier figure, since wall time includes waiting for a core.
    cpu: f64,
    entries: u64,
    peak: u64,
}

fn child(job: &str, args: &[&Path]) -> Job {
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
        "{job:>8} {:?}: {:.2} s ({:.2} CPU s), {} entries, peak RSS {:.0} MiB",
        args[0].file_name().unwrap(),
        r.seconds,
        r.cpu,
        r.entries,
        mib(r.peak)
    );
    r
}

fn run_job(job: &str, args: &[String]) {
    let t = Instant::now();
    let entries = match job {
        "read" => read_all(Path::new(&args[0])),
        "convert" => {
            let opts = ConvertOptions {
                memory: args[2].parse().unwrap(),
                ..ConvertOptions::default()
            };
            convert(Path::new(&args[0]), Path::new(&args[1]), &opts, &NoProgress)
                .expect("convert")
                .entries_read
        }
        "naive" => naive(Path::new(&args[0]), Path::new(&args[1])),
        _ => panic!("unknown job {job}"),
    };
    eprintln!("seconds={}", t.elapsed().as_secs_f64());
    eprintln!("cpu_seconds={}", cpu_seconds());
    eprintln!("entries={entries}");
    eprintln!("peak_rss_bytes={}", peak_rss_bytes());
}

/// User + system time of this process so far, from /proc/self/stat (clock ticks of 1/100 s,
/// Linux's fixed USER_HZ); 0 where that is unavailable.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesized command name: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// The I/O floor: every byte read once through an 8 MiB buffer, newlines counted so the
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
        lines += memchr_count(&buf[..n]);
    }
}

fn memchr_count(b: &[u8]) -> u64 {
    b.iter().filter(|&&c| c == b'\n').count() as u64
}

/// What one would write without streaming: read the file into memory, parse every line,
/// sort, build the level arrays, write.
fn naive(input: &Path, output: &Path) -> u64 {
    let text = std::fs::read_to_string(input).unwrap();
    let mut keys: Vec<[u64; 3]> = Vec::new();
    let mut vals: Vec<f64> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let mut k = [0u64; 3];
        for x in &mut k {
            *x = it.next().unwrap().parse::<u64>().unwrap() - 1;
        }
        keys.push(k);
        vals.push(it.next().unwrap().parse().unwrap());
    }
    drop(text);
    let mut perm: Vec<u32> = (0..keys.len() as u32).collect();
    perm.sort_unstable_by_key(|&i| keys[i as usize]);
    let dims: Vec<usize> = DIMS.iter().map(|&d| d as usize).collect();
    let format = Format::all_compressed(3);
    let mut packer: Packer<f64, u32, Vec<u32>, Vec<f64>> = Packer::new(
        &dims,
        &format,
        vec![(0, 0); 3],
        |_| (Vec::new(), Vec::new()),
        Vec::new(),
    );
    let mut i = 0;
    while i < perm.len() {
        let k = keys[perm[i] as usize];
        let mut v = vals[perm[i] as usize];
        i += 1;
        while i < perm.len() && keys[perm[i] as usize] == k {
            v += vals[perm[i] as usize];
            i += 1;
        }
        packer
            .push(&[k[0] as usize, k[1] as usize, k[2] as usize], v)
            .unwrap();
    }
    let (levels, vals, _) = packer.finish().unwrap();
    let levels = levels
        .into_iter()
        .map(|l| {
            let (pos, crd) = l.unwrap();
            tessera_formats::Level::Compressed { pos, crd }
        })
        .collect();
    let t: Tensor<f64, u32> = Tensor::from_parts(dims, format, levels, vals).unwrap();
    tcs::write_tensor(output, &t, None).unwrap();
    keys.len() as u64
}
