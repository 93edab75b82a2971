//! `tessera compile`: build an executable for a statement.

use super::types::TypeArgs;
use super::StatementArgs;
use crate::check::Dims;
use crate::driver::{self, Options};
use anyhow::Context;
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct CompileArgs {
    #[command(flatten)]
    pub statement: StatementArgs,
    #[command(flatten)]
    pub types: TypeArgs,
    /// Where to write the executable.
    #[arg(short = 'o', long = "output", value_name = "PROG")]
    pub output: PathBuf,
    /// Also keep the generated crate's sources in this directory.
    #[arg(long, value_name = "DIR")]
    pub keep_source: Option<PathBuf>,
    /// Link MPI into the program, so that `mpirun -n N PROG ...` runs the statement's plan
    /// across N ranks (every rank reads the inputs and runs its shard of the block tasks;
    /// rank 0 writes the output). Needs a distribution schedule (`-s "split(...)"`); the same
    /// program started without `mpirun` is one rank.
    #[arg(long)]
    pub mpi: bool,
}

/// Generates and builds (or finds in the cache) the executable for a statement; `dims` are
/// tensor dimensions known before it runs (see [`super::front`]), `inputs` the `-i NAME=PATH`
/// files whose `.tcs` headers may choose the types (see [`super::types`]).
pub fn build(
    statement: &StatementArgs,
    types: &TypeArgs,
    dims: &Dims,
    inputs: &[String],
    mpi: bool,
) -> anyhow::Result<(driver::GeneratedCrate, PathBuf)> {
    let c = super::front(statement, dims)?;
    let types = super::types::choose(types, inputs, &c.kernel)?;
    // A schedule with `split` compiles to a program running its plan on the task runtime;
    // a plan the planner refuses is reported, never silently replaced by the plain kernel.
    let distributed = match &c.plan {
        Ok(p) => p.is_distributed(),
        Err(e) if !c.checked.schedule.splits.is_empty() => {
            return Err(super::Rendered(e.0.clone()).into())
        }
        Err(_) => false,
    };
    if mpi && !distributed {
        anyhow::bail!(
            "`--mpi`: `{}` has no distribution schedule, so there is nothing to run across \
             ranks; add one, e.g. `-s \"split(i,io,ii,4); map(io)\"` (see `tessera help \
             compile`), or leave out `--mpi`",
            statement.expr
        );
    }
    let opts = Options {
        value: types.value,
        wide_index: types.wide_index,
        distributed,
        mpi,
    };
    let g = driver::generate(&c.checked, &c.kernel, &c.text, opts)?;
    let cache = driver::cache_dir();
    let bin = driver::build(&g, &cache, std::io::stderr().is_terminal())?;
    super::cache::touch(&bin);
    let freed = super::cache::enforce(&cache, super::cache::limit()?, &bin);
    if freed > 0 {
        eprintln!(
            "note: removed {:.1} MiB of least recently used programs from {} (TESSERA_CACHE_LIMIT)",
            freed as f64 / (1 << 20) as f64,
            cache.display()
        );
    }
    Ok((g, bin))
}

pub fn run(args: CompileArgs) -> anyhow::Result<ExitCode> {
    super::paths::check_output(&args.output, "-o")?;
    if let Some(dir) = &args.keep_source {
        if dir.exists() && !dir.is_dir() {
            anyhow::bail!("`--keep-source {}`: not a directory", dir.display());
        }
    }
    let (g, bin) = build(&args.statement, &args.types, &Dims::new(), &[], args.mpi)?;
    driver::copy_atomically(&bin, &args.output)
        .with_context(|| format!("writing the executable to {}", args.output.display()))?;
    if let Some(dir) = &args.keep_source {
        for (rel, text) in &g.files {
            let path = dir.join(rel);
            if let Some(p) = path.parent() {
                std::fs::create_dir_all(p).with_context(|| p.display().to_string())?;
            }
            std::fs::write(&path, text).with_context(|| path.display().to_string())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
