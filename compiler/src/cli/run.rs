//! `tessera run`: compile (cached by the generated sources, so by expression, formats and
//! schedule) and run on files.

use super::types::TypeArgs;
use super::StatementArgs;
use crate::check::Dims;
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use tessera_formats::{open_text, FileKind};

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub statement: StatementArgs,
    #[command(flatten)]
    pub types: TypeArgs,
    /// An input tensor file: NAME=PATH (.tns, .mtx or .tcs; repeatable).
    #[arg(short = 'i', long = "input", value_name = "NAME=PATH", required = true)]
    pub inputs: Vec<String>,
    /// The output file (.tns, .mtx or .tcs; a scalar is written as a one-line .tns).
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: PathBuf,
    /// Worker threads for a parallelized loop, 1 to 1024 (default: all cores).
    #[arg(long, value_name = "N", value_parser = threads_arg)]
    pub threads: Option<usize>,
    /// Print the time spent reading, computing and writing to stderr.
    #[arg(long)]
    pub timings: bool,
    /// After a run on the task runtime (a schedule with `split`), print its statistics to
    /// stderr: tasks issued, point tasks run, partitions created and reused, analysis time.
    #[arg(long)]
    pub stats: bool,
    /// With a distribution schedule: run the block tasks in this process with the
    /// interpreter instead of building the compiled program (no build wait; slower kernels).
    #[arg(long)]
    pub interpret: bool,
}

/// The most worker threads a program takes (the generated `main` has the same bound): the
/// thread pools' work stealing slows down with the square of their threads, so that a typo
/// such as `--threads 100000` ran a small SpMV for minutes instead of being refused.
pub const MAX_THREADS: usize = 1024;

/// `--threads N`: a count from 1 to [`MAX_THREADS`].
fn threads_arg(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a number of threads from 1 to {MAX_THREADS}"
        )),
    }
}

/// Dimensions that input files declare in a header (`.mtx`, or `.tns` with `# dims`), so that
/// a mismatch is reported against the expression before anything is built. A text file whose
/// start cannot be read (empty, a bad `.mtx` header) is an error now, naming its flag, not
/// after a build of minutes. Files without a header and `.tcs` (whose header is checked with
/// the whole file) are left to the program, which checks every input when it reads it.
fn header_dims(inputs: &[String]) -> anyhow::Result<Dims> {
    let mut dims = Dims::new();
    for i in inputs {
        let Some((name, path)) = i.split_once('=') else {
            continue;
        };
        let path = std::path::Path::new(path);
        if !matches!(FileKind::of(path), Ok(FileKind::Tns | FileKind::Mtx)) {
            continue;
        }
        let reader = open_text(path).map_err(|e| anyhow::anyhow!("`-i {i}`: {e}"))?;
        if let Some(d) = reader.declared_dims() {
            dims.insert(
                name.to_string(),
                d.into_iter().map(|x| x as usize).collect(),
            );
        }
    }
    Ok(dims)
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    // Before any build: every input readable, the output's directory there.
    super::paths::check_inputs(&args.inputs)?;
    super::paths::check_tensor_output(&args.output, "-o")?;
    let dims = header_dims(&args.inputs)?;
    let c = super::front(&args.statement, &dims)?;
    if args.interpret {
        match &c.plan {
            Ok(plan) if plan.is_distributed() => {
                let types = super::types::choose(&args.types, &args.inputs, &c.kernel)?;
                return super::planned::run(&args, &c, plan, &types);
            }
            Err(e) => return Err(super::Rendered(e.0.clone()).into()),
            Ok(_) => eprintln!(
                "note: --interpret applies to a distribution schedule (`split`); this statement \
                 runs its compiled kernel"
            ),
        }
    }
    let (_, bin) = super::compile::build(&args.statement, &args.types, &dims, &args.inputs, false)?;
    let mut cmd = Command::new(&bin);
    for i in &args.inputs {
        cmd.arg("-i").arg(i);
    }
    cmd.arg("-o").arg(&args.output);
    if let Some(n) = args.threads {
        cmd.arg("--threads").arg(n.to_string());
    }
    if args.timings {
        cmd.arg("--timings");
    }
    if args.stats {
        cmd.arg("--stats");
    }
    let status = cmd
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    // The program has printed its own error; pass its exit status on.
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}
