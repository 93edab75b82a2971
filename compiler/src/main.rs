//! `tessera`: compile tensor algebra in Einstein notation to sparse kernels.
use clap::Parser;
use std::process::ExitCode;
use tessera_compiler::cli::{self, Cli};

fn main() -> ExitCode {
    let args = Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            cli::report(&e);
            ExitCode::FAILURE
        }
    }
}
