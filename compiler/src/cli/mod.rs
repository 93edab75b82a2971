//! The `tessera` command line: `emit`, `compile` and `run`, one module each.

mod cache;
mod compile;
mod emit;
mod front;
mod paths;
mod planned;
mod run;
mod types;

use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;

pub use front::{front, lower_diagnostic, Compiled, Rendered};

const EXAMPLES: &str = "\
Examples:
  tessera emit \"y(i) = A(i,j) * x(j)\" -f A:csr
  tessera emit \"C(i,j) = A(i,k) * B(k,j)\" -f A:csr -f B:csr -f C:csr -s \"parallelize(i)\"
  tessera compile \"y(i) = A(i,j) * x(j)\" -f A:csr -o spmv
  ./spmv -i A=matrix.mtx -i x=x.tns -o y.tns --threads 2
  tessera run \"a = b(i) * c(i)\" -i b=b.tns -i c=c.tns -o a.tns

Formats (-f NAME:FMT): one letter per level, d (dense), s (compressed) or q (singleton),
optionally followed by the mode order, e.g. A:ds (CSR), A:ds:1,0 (CSC), B:sss (CSF), A:sq (COO);
or a name: dense, csr, csc, dcsr, csf, coo. Tensors without -f are dense.
Types: values are f64 and coordinates u32 unless .tcs inputs record others or --type f32|i64,
--index u64 say so; the output file holds the program's value type.
Schedule (-s): directives separated by `;`: split(i, io, ii, 4), split(j, jo, ji, [100, 200]),
order(io, jo), extend(ko), map(io), parallelize(i). See docs/language.md.
A schedule with `split` distributes the statement: `emit --plan` shows its block tasks, and
`run` runs them on the task runtime (`--threads N`, `--stats`).
Environment: TESSERA_CACHE (compiled programs, default ~/.cache/tessera), TESSERA_CACHE_LIMIT
(MiB, default 4096); for comparisons, in compiled programs too: TESSERA_SIMD=0|avx2 (narrower
vector paths than the CPU's widest), TESSERA_PREFETCH=0|always|stream (no prefetching, or one
copy of the gather loops forced; unset, each call picks from its data). Results are bitwise the
same under every setting.";

/// Compile tensor algebra in Einstein notation to sparse kernels in Rust.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the generated kernel for a statement.
    #[command(after_help = EXAMPLES)]
    Emit(emit::EmitArgs),
    /// Build an executable that computes a statement on tensor files.
    #[command(after_help = EXAMPLES)]
    Compile(compile::CompileArgs),
    /// Compile (cached) and run a statement on tensor files.
    #[command(after_help = EXAMPLES)]
    Run(run::RunArgs),
    /// The cache of compiled programs: `info`, `clean` (size limit: TESSERA_CACHE_LIMIT MiB).
    Cache(cache::CacheArgs),
}

/// The statement: expression, formats and schedule (shared by every subcommand).
#[derive(Debug, Clone, Args)]
pub struct StatementArgs {
    /// The assignment, e.g. "y(i) = A(i,j) * x(j)".
    #[arg(value_name = "EXPR")]
    pub expr: String,
    /// A tensor's storage format, e.g. A:csr, A:ds, B:ds:1,0, T:sss (repeatable).
    #[arg(short = 'f', long = "format", value_name = "NAME:FMT")]
    pub formats: Vec<String>,
    /// The schedule, e.g. "split(i, io, ii, 4); parallelize(i)".
    #[arg(short = 's', long = "schedule", value_name = "SCHEDULE")]
    pub schedule: Option<String>,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Emit(a) => emit::run(a),
        Command::Compile(a) => compile::run(a),
        Command::Run(a) => run::run(a),
        Command::Cache(a) => cache::run(a),
    }
}

/// Writes to standard output. When the reader has gone away (`tessera emit ... | head`) the
/// program ends quietly with status 0, as Unix tools do, instead of panicking as `print!`
/// does; any other write error ends it with a message and status 1. Only reports and
/// printed code go here, after the work is done, so exiting leaves nothing half-written.
pub(crate) fn write_stdout(text: std::fmt::Arguments) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(text) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to standard output: {e}");
        std::process::exit(1);
    }
}

/// Prints an error: diagnostics as rendered, everything else with its chain of causes.
pub fn report(e: &anyhow::Error) {
    if let Some(r) = e.downcast_ref::<Rendered>() {
        eprint!("{}", r.0);
        return;
    }
    eprintln!("error: {e}");
    for cause in e.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
}
