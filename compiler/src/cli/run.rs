//! `tessera run`: compile (cached by the generated sources, so by expression, formats and
//! schedule) and run on files.

use super::StatementArgs;
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub statement: StatementArgs,
    /// An input tensor file: NAME=PATH (.tns, .mtx or .tcs; repeatable).
    #[arg(short = 'i', long = "input", value_name = "NAME=PATH", required = true)]
    pub inputs: Vec<String>,
    /// The output file (.tns, .mtx or .tcs; a scalar is written as a one-line .tns).
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: PathBuf,
    /// Worker threads for a parallelized loop (default: all cores).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Print the time spent reading, computing and writing to stderr.
    #[arg(long)]
    pub timings: bool,
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let (_, bin) = super::compile::build(&args.statement)?;
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
