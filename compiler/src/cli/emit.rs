//! `tessera emit`: print the generated kernel.

use super::StatementArgs;
use crate::check::Dims;
use crate::driver;
use clap::Args;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct EmitArgs {
    #[command(flatten)]
    pub statement: StatementArgs,
    /// Print the kernel IR (loop nests and merge formulas) instead of Rust.
    #[arg(long)]
    pub ir: bool,
}

pub fn run(args: EmitArgs) -> anyhow::Result<ExitCode> {
    let c = super::front(&args.statement, &Dims::new())?;
    if args.ir {
        println!("{}", c.kernel);
    } else {
        println!("// {}", c.text);
        print!("{}", driver::pretty(crate::codegen::emit(&c.kernel))?);
    }
    Ok(ExitCode::SUCCESS)
}
