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
        let plan = c.plan?;
        super::write_stdout(format_args!("{plan}"));
    } else if args.ir {
        super::write_stdout(format_args!("{}\n", c.kernel));
    } else {
        let code = driver::pretty(crate::codegen::emit(&c.kernel))?;
        super::write_stdout(format_args!("// {}\n{code}", c.text));
    }
    Ok(ExitCode::SUCCESS)
}
