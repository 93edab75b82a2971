//! Shared helpers for the benchmark programs: wall-clock timing, peak resident memory,
//! and a side-by-side table whose last line is one JSON object of all figures.

use std::fmt::Write as _;
use std::time::Instant;

pub mod contest;
pub mod vmath;

/// splitmix64: reproducible inputs without a dependency.
pub struct Rng(pub u64);

impl Rng {
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in `[-0.5, 0.5)`.
    pub fn value(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    }
}

/// A random n×n CSR matrix with about `per` entries per row at uniform columns (a row's draws
/// that collide are one entry), its values drawn by `value` row by row.
pub fn random_csr(
    n: usize,
    per: usize,
    rng: &mut Rng,
    mut value: impl FnMut(&mut Rng) -> f64,
) -> tessera_formats::Tensor<f64, u32> {
    use tessera_formats::{Format, Level, Tensor};
    let mut pos = Vec::with_capacity(n + 1);
    let mut crd = Vec::with_capacity(n * per);
    let mut vals = Vec::with_capacity(n * per);
    let mut row = Vec::with_capacity(per);
    pos.push(0u32);
    for _ in 0..n {
        row.clear();
        row.extend((0..per).map(|_| rng.below(n) as u32));
        row.sort_unstable();
        row.dedup();
        crd.extend_from_slice(&row);
        vals.extend(row.iter().map(|_| value(rng)));
        pos.push(crd.len() as u32);
    }
    let levels = vec![
        Level::Dense { size: n, offset: 0 },
        Level::Compressed { pos, crd },
    ];
    let format = Format::parse("csr", 2).expect("a known format");
    Tensor::from_parts(vec![n, n], format, levels, vals).expect("valid CSR")
}

/// A number from environment variable `name`, or `default` when it is unset or not a number.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// When this process was started as a measured child job (`TESSERA_BENCH_JOB` set by the
/// parent), the job's name and its arguments (cargo's `--bench` flag removed).
pub fn child_job() -> Option<(String, Vec<String>)> {
    let job = std::env::var("TESSERA_BENCH_JOB").ok()?;
    let args = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    Some((job, args))
}

/// Runs `f` `reps` times and returns the best wall-clock time in seconds
/// (the minimum is the least noisy estimate on a shared machine).
pub fn best_of<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let out = f();
        best = best.min(t.elapsed().as_secs_f64());
        last = Some(out);
    }
    (best, last.expect("at least one repetition"))
}

/// The median of `v` (the upper one of an even count): what the benches report of
/// interleaved repetitions.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Peak resident set size of this process so far, in bytes (Linux `VmHWM`), or 0 if unknown.
pub fn peak_rss_bytes() -> u64 {
    status_field_kib("VmHWM:") * 1024
}

/// Peak resident set size of finished child processes (`getrusage(RUSAGE_CHILDREN)` via /proc is
/// not available, so children report their own peak; this reads a `/usr/bin/time`-free figure
/// from a child's stderr line `peak_rss_bytes=N` when a benchmark spawns one).
pub fn parse_child_peak(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak_rss_bytes=")?.trim().parse().ok())
}

fn status_field_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// One row of a comparison: a Tessera figure beside its alternative.
pub struct Row {
    pub name: String,
    pub unit: String,
    pub tessera: f64,
    pub alternative_name: String,
    pub alternative: f64,
    /// True when a larger figure is better (throughput); false for times.
    pub higher_is_better: bool,
}

/// A table of rows printed as aligned text; the last printed line is a JSON object
/// of every figure, so that scripts can read one run's results.
#[derive(Default)]
pub struct Table {
    title: String,
    rows: Vec<Row>,
    extra: Vec<(String, f64)>,
}

impl Table {
    pub fn new(title: &str) -> Self {
        Table {
            title: title.to_string(),
            ..Default::default()
        }
    }

    /// Adds a row comparing Tessera with an alternative. The printed ratio is always
    /// "Tessera relative to the alternative", > 1 meaning Tessera is better.
    pub fn row(
        &mut self,
        name: &str,
        unit: &str,
        tessera: f64,
        alternative_name: &str,
        alternative: f64,
        higher_is_better: bool,
    ) {
        self.rows.push(Row {
            name: name.into(),
            unit: unit.into(),
            tessera,
            alternative_name: alternative_name.into(),
            alternative,
            higher_is_better,
        });
    }

    /// Adds a figure with no alternative (peak memory, a count), reported in the JSON line.
    pub fn figure(&mut self, name: &str, value: f64) {
        self.extra.push((name.into(), value));
    }

    /// Prints the table and, last, the JSON line.
    pub fn print(&self) {
        println!("{}", self.title);
        println!(
            "{:<40} {:>14} {:>18} {:>14} {:>8}",
            "benchmark", "tessera", "alternative", "alt figure", "ratio"
        );
        for r in &self.rows {
            println!(
                "{:<40} {:>10.3} {:<3} {:>18} {:>14.3} {:>7.2}x",
                r.name,
                r.tessera,
                r.unit,
                r.alternative_name,
                r.alternative,
                ratio(r)
            );
        }
        for (k, v) in &self.extra {
            println!("{k:<40} {v:>14.3}");
        }
        println!("{}", self.json());
    }

    fn json(&self) -> String {
        let mut s = String::from("{");
        let mut first = true;
        let mut put = |k: &str, v: f64| {
            if !first {
                s.push_str(", ");
            }
            first = false;
            let v = if v.is_finite() {
                format!("{v}")
            } else {
                "null".into()
            };
            let _ = write!(s, "\"{}\": {}", k.replace('"', "'"), v);
        };
        for r in &self.rows {
            put(&format!("{} tessera ({})", r.name, r.unit), r.tessera);
            put(
                &format!("{} {} ({})", r.name, r.alternative_name, r.unit),
                r.alternative,
            );
            put(&format!("{} ratio", r.name), ratio(r));
        }
        for (k, v) in &self.extra {
            put(k, *v);
        }
        s.push('}');
        s
    }
}

fn ratio(r: &Row) -> f64 {
    if r.higher_is_better {
        r.tessera / r.alternative
    } else {
        r.alternative / r.tessera
    }
}

/// User + system CPU seconds of this process (`"self"`) or of the calling thread
/// (`"thread-self"`), from `/proc/<who>/stat` (clock ticks of 1/100 s, Linux's fixed
/// USER_HZ); 0 where that is unavailable.
pub fn cpu_seconds_of(who: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{who}/stat")).unwrap_or_default();
    // Fields after the parenthesized command name (which may hold spaces): utime and stime
    // are fields 14 and 15 of the line, 12 and 13 after the `)`.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}
