//! `tessera-data merge`: merge a directory of block files into one `.tcs` tensor, on several
//! ranks (threads, or MPI processes under `mpirun`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tessera_runtime::io::merge_dir;

use crate::split::{on_ranks, report, Ranks};

const EXAMPLES: &str = "\
Examples:
  tessera-data merge blocks/ -o t.tcs              # 2 thread ranks
  tessera-data merge blocks/ -o t.tcs --ranks 4
  mpirun -n 4 tessera-data merge blocks/ -o t.tcs  # MPI ranks (built with --features mpi)";

/// Merge the .tcs block files of a directory (as written by `split`) into one .tcs tensor.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Directory of block files (every *.tcs in it is a block of the tensor).
    input: PathBuf,
    /// The merged .tcs file (written to a temporary name, renamed when complete).
    #[arg(short, long, value_name = "OUT.tcs")]
    output: PathBuf,
    #[command(flatten)]
    ranks: Ranks,
}

impl Args {
    pub fn run(&self, quiet: bool) -> anyhow::Result<ExitCode> {
        let start = Instant::now();
        let (summary, how) = on_ranks(&self.ranks, quiet, |comm, progress| {
            merge_dir(comm, &self.input, &self.output, progress)
        })?;
        if let Some(s) = summary {
            report(
                "merge",
                &self.input.display().to_string(),
                &self.output.display().to_string(),
                &s,
                &how,
                start,
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}
