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
    #[arg(long, conflicts_with = "plan")]
    pub ir: bool,
    /// Print the distribution plan of the schedule's `split`/`extend`/`map`: the block grid,
    /// the block task's arguments with privileges and partitioning constraints, reductions
    /// and sharding.
    #[arg(long)]
    pub plan: bool,
}

pub fn run(args: EmitArgs) -> anyhow::Result<ExitCode> {
    let c = super::front(&args.statement, &Dims::new())?;
    if args.plan {
        print!("{}", c.plan?);
    } else if args.ir {
        println!("{}", c.kernel);
    } else {
        println!("// {}", c.text);
        print!("{}", driver::pretty(crate::codegen::emit(&c.kernel))?);
    }
    Ok(ExitCode::SUCCESS)
}
