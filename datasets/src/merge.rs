//! `tessera-data merge`: merge a directory of block files into one `.tcs` tensor, on several
//! ranks (threads, or MPI processes under `mpirun`).

use std::path::PathBuf;
use std::process::ExitCode;

use tessera_runtime::io::merge_dir;

use crate::split::{run_and_report, Ranks};

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
        run_and_report(
            "merge",
            &self.ranks,
            quiet,
            &self.input,
            &self.output,
            |comm, p| merge_dir(comm, &self.input, &self.output, p),
        )
    }
}
