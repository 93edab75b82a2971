//! `tessera-data split`: cut a `.tcs` tensor into one `.tcs` file per block, on several ranks
//! (threads, or MPI processes under `mpirun`); and what `split` and `merge` share: starting
//! the ranks and showing progress on rank 0.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use tessera_runtime::io::{split_file, IoError, NoProgress, Progress, SplitSpec, Summary};
use tessera_runtime::transport::{run_ranks, Communicator};

const EXAMPLES: &str = "\
Examples:
  tessera-data split t.tcs --blocks 0:4,1:2 -o blocks/            # 4 x 2 equal blocks, 2 thread ranks
  tessera-data split t.tcs --split-points 0:100/250 -o blocks/ --ranks 4
  mpirun -n 4 tessera-data split t.tcs --blocks 0:8 -o blocks/    # MPI ranks (built with --features mpi)
  tessera-data merge blocks/ -o t2.tcs";

/// Split a .tcs tensor into blocks, one .tcs file per block (with its split metadata).
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// The .tcs tensor to split.
    input: PathBuf,
    /// N equal ranges per mode: MODE:N[,MODE:N...] (modes not named are not split).
    #[arg(
        long,
        value_name = "MODE:N,...",
        conflicts_with = "split_points",
        required_unless_present = "split_points"
    )]
    blocks: Option<String>,
    /// Explicit split points per mode: MODE:P1/P2/...[,MODE:...]; ranges are [0,P1), [P1,P2), ...
    #[arg(long, value_name = "MODE:P1/P2,...")]
    split_points: Option<String>,
    /// Directory for the block files (created; must not already hold .tcs files).
    #[arg(short, long, value_name = "DIR")]
    output: PathBuf,
    #[command(flatten)]
    ranks: Ranks,
}

/// How many ranks run the work.
#[derive(clap::Args)]
pub struct Ranks {
    /// Thread ranks to run on, 1 to 256 (ignored under mpirun, where each MPI process is a
    /// rank).
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = ranks_arg)]
    ranks: usize,
}

/// The most thread ranks `--ranks` takes. Every rank exchanges headers and counters with every
/// other, so time and memory grow with the square of their number: on a 500-entry matrix 128
/// ranks took 0.7 s, 1024 took 79 s and 1.1 GB, and 100000 were killed for want of memory
/// (23 GB). More ranks than cores make nothing faster.
const MAX_THREAD_RANKS: usize = 256;

/// `--ranks N`: a count from 1 to [`MAX_THREAD_RANKS`].
fn ranks_arg(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_THREAD_RANKS).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a number of thread ranks from 1 to {MAX_THREAD_RANKS} (more ranks than \
             cores make nothing faster)"
        )),
    }
}

impl Args {
    pub fn run(&self, quiet: bool) -> anyhow::Result<ExitCode> {
        let spec = match (&self.blocks, &self.split_points) {
            (Some(b), _) => SplitSpec::parse_blocks(b).context("--blocks")?,
            (None, Some(p)) => SplitSpec::parse_points(p).context("--split-points")?,
            (None, None) => anyhow::bail!("give --blocks or --split-points"),
        };
        run_and_report(
            "split",
            &self.ranks,
            quiet,
            &self.input,
            &self.output,
            |comm, p| split_file(comm, &self.input, &spec, &self.output, p),
        )
    }
}

/// Runs `work` on the ranks (see [`on_ranks`]) and prints rank 0's one-line summary.
pub fn run_and_report(
    verb: &str,
    ranks: &Ranks,
    quiet: bool,
    input: &std::path::Path,
    output: &std::path::Path,
    work: impl Fn(&dyn Communicator, &dyn Progress) -> Result<Summary, IoError> + Sync,
) -> anyhow::Result<ExitCode> {
    let (summary, how, secs) = on_ranks(ranks, quiet, work)?;
    if let Some(s) = summary {
        report(
            verb,
            &input.display().to_string(),
            &output.display().to_string(),
            &s,
            &how,
            secs,
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints a one-line summary with throughput (`secs`: the ranks' work).
pub fn report(verb: &str, from: &str, to: &str, s: &Summary, how: &str, secs: f64) {
    say!("{verb} {from} -> {to}: {} blocks, {} values, {:.1} MB in {secs:.2} s ({:.2} GB/s) on {how}", s.blocks, s.values, s.bytes as f64 / 1e6, s.bytes as f64 / 1e9 / secs.max(1e-9));
}

/// Runs `f` on every rank: MPI ranks when started by mpirun (and built with the `mpi`
/// feature), else `ranks` threads. Returns rank 0's result (`None` on other MPI ranks), a
/// description of the ranks and the seconds rank 0 spent in `f`. Those leave out MPI's start
/// and finish (`MPI_Init` alone took 0.25 s here), which a split of a small tensor would
/// otherwise report as its own time. Progress is drawn by rank 0 only.
pub fn on_ranks<T: Send>(
    ranks: &Ranks,
    quiet: bool,
    f: impl Fn(&dyn Communicator, &dyn Progress) -> Result<T, IoError> + Sync,
) -> anyhow::Result<(Option<T>, String, f64)> {
    #[cfg(feature = "mpi")]
    if tessera_runtime::transport::mpi::launched_by_mpirun() {
        let bars = Bars::new(quiet);
        let out = tessera_runtime::transport::mpi::run_world(|comm| {
            let progress: &dyn Progress = if comm.rank() == 0 { &bars } else { &NoProgress };
            let timed = Timed::new(comm.rank(), progress);
            let start = Instant::now();
            let out = f(comm, &timed);
            let secs = start.elapsed().as_secs_f64();
            timed.report();
            out.map(|t| (comm.rank() == 0).then_some(t))
                .map(|t| (t, comm.size(), secs))
        });
        bars.finish();
        report_peak_rss();
        let (t, size, secs) = out?;
        return Ok((t, format!("{size} MPI ranks"), secs));
    }
    if tessera_runtime::transport::launched_by_mpirun() {
        // Without the feature every process would run all thread ranks and write the same files.
        anyhow::bail!("started by mpirun, but this tessera-data was built without MPI support: rebuild with `cargo build --release -p tessera-datasets --features mpi`");
    }
    let bars = Bars::new(quiet);
    let start = Instant::now();
    let mut results = run_ranks(ranks.ranks, |comm| {
        let progress: &dyn Progress = if comm.rank() == 0 { &bars } else { &NoProgress };
        let timed = Timed::new(comm.rank(), progress);
        let out = f(comm, &timed);
        timed.report();
        out
    });
    let secs = start.elapsed().as_secs_f64();
    bars.finish();
    report_peak_rss();
    let first = results.remove(0)?;
    Ok((Some(first), format!("{} thread ranks", ranks.ranks), secs))
}

/// With `TESSERA_REPORT_PEAK_RSS` set, prints this process's peak resident memory as
/// `peak_rss_bytes=N` on stderr (benchmarks read it per MPI rank).
fn report_peak_rss() {
    if std::env::var_os("TESSERA_REPORT_PEAK_RSS").is_none() {
        return;
    }
    let kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmHWM:")?
                    .split_whitespace()
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
        });
    eprintln!("peak_rss_bytes={}", kib.unwrap_or(0) * 1024);
}

/// With `TESSERA_DATA_TIMING` set, each rank prints on stderr how long each of its phases
/// took (wall time, from the phase's start to the next one's), to see where a run spends its
/// time and whether the ranks work at the same time. Otherwise it only forwards.
struct Timed<'p> {
    rank: usize,
    inner: &'p dyn Progress,
    /// Phases in order with their start; `None` when timing is off.
    phases: Option<Mutex<Vec<(String, Instant)>>>,
    origin: Instant,
}

impl<'p> Timed<'p> {
    fn new(rank: usize, inner: &'p dyn Progress) -> Self {
        let on = std::env::var_os("TESSERA_DATA_TIMING").is_some();
        Timed {
            rank,
            inner,
            phases: on.then(|| Mutex::new(Vec::new())),
            origin: Instant::now(),
        }
    }

    /// One line per rank: `timing rank=R total=S phase=S ...` (seconds).
    fn report(&self) {
        let Some(phases) = &self.phases else { return };
        let phases = phases.lock().expect("timing lock");
        let end = Instant::now();
        let mut line = format!(
            "timing rank={} total={:.3}",
            self.rank,
            (end - self.origin).as_secs_f64()
        );
        let mut at = self.origin;
        let mut name = "setup";
        for (next, start) in phases.iter() {
            line += &format!(" [{name}]={:.3}", (*start - at).as_secs_f64());
            (name, at) = (next, *start);
        }
        line += &format!(" [{name}]={:.3}", (end - at).as_secs_f64());
        eprintln!("{line}");
    }
}

impl Progress for Timed<'_> {
    fn start(&self, phase: &str, total: u64) {
        if let Some(p) = &self.phases {
            p.lock()
                .expect("timing lock")
                .push((phase.to_string(), Instant::now()));
        }
        self.inner.start(phase, total);
    }

    fn advance(&self, n: u64) {
        self.inner.advance(n);
    }

    fn cancelled(&self) -> bool {
        tessera_datasets::progress::interrupted()
    }
}

/// An indicatif bar per phase, on stderr.
pub struct Bars {
    bar: Mutex<Option<ProgressBar>>,
    quiet: bool,
}

impl Bars {
    pub fn new(quiet: bool) -> Self {
        Bars {
            bar: Mutex::new(None),
            quiet,
        }
    }

    fn finish(&self) {
        if let Some(b) = self.bar.lock().expect("progress lock").take() {
            b.finish_and_clear();
        }
    }
}

impl Progress for Bars {
    fn start(&self, phase: &str, total: u64) {
        let bar = if self.quiet {
            ProgressBar::hidden()
        } else if total > 0 {
            let b = ProgressBar::new(total);
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix:>16} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} ({eta})",
                )
                .expect("valid template"),
            );
            b
        } else {
            ProgressBar::new_spinner()
        };
        bar.set_prefix(phase.to_string());
        if let Some(old) = self.bar.lock().expect("progress lock").replace(bar) {
            old.finish_and_clear();
        }
    }

    fn advance(&self, n: u64) {
        if let Some(b) = &*self.bar.lock().expect("progress lock") {
            b.inc(n);
        }
    }
}
