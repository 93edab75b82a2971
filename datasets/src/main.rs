//! `tessera-data`: convert tensors between `.tns`, `.mtx` and `.tcs`, inspect and validate
//! files, and generate synthetic tensors.

/// `println!` for the reports this tool prints on standard output (see [`write_stdout`]).
macro_rules! say {
    ($($t:tt)*) => {
        $crate::write_stdout(format_args!("{}\n", format_args!($($t)*)))
    };
}

mod cmd;
mod merge;
mod split;

use std::process::ExitCode;

/// Writes a report line. When the reader has gone away (`tessera-data info t.tcs | head`)
/// the program ends quietly with status 0, as Unix tools do, instead of panicking as
/// `println!` does; any other write error ends it with a message and status 1. Reports are
/// printed only after the work is done, so nothing is left half-written by exiting here.
fn write_stdout(line: std::fmt::Arguments) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(line) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to standard output: {e}");
        std::process::exit(1);
    }
}

use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  tessera-data generate --dims 1000,1000,1000 --nnz 1000000 --seed 1 -o t.tns
  tessera-data convert t.tns t.tcs --format sss --memory 256M
  tessera-data info t.tcs
  tessera-data convert t.tcs back.tns";

/// Convert, inspect and generate sparse tensors (.tns, .mtx, .tcs).
#[derive(Parser)]
#[command(name = "tessera-data", version, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Hide progress bars.
    #[arg(long, short, global = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    Convert(cmd::convert::Args),
    Info(cmd::info::Args),
    Generate(cmd::generate::Args),
    Split(split::Args),
    Merge(merge::Args),
}

fn main() -> ExitCode {
    tessera_formats::heap::bound_to_budget();
    let cli = Cli::parse();
    tessera_datasets::progress::install_interrupt_handler();
    let result = match &cli.command {
        Command::Convert(a) => a.run(cli.quiet),
        Command::Info(a) => a.run(cli.quiet),
        Command::Generate(a) => a.run(cli.quiet),
        Command::Split(a) => a.run(cli.quiet),
        Command::Merge(a) => a.run(cli.quiet),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, joined by ": ", leaving out a cause whose text the message
/// before it already quotes (the formats errors embed their source in their own message,
/// and printing both would say everything twice).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
