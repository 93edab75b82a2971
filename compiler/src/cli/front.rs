//! The front half of every subcommand: parse, check and lower a statement given on the
//! command line, with errors rendered against the argument they are about.

use super::StatementArgs;
use crate::check::{self, Checked, Dims};
use crate::diagnostics::{Diagnostic, SourceMap};
use crate::ir::Kernel;
use crate::lower;
use crate::parse;
use crate::plan::{self, Plan};
use std::io::IsTerminal;

/// A diagnostic already rendered for the terminal.
#[derive(Debug)]
pub struct Rendered(pub String);

impl std::fmt::Display for Rendered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Rendered {}

/// A statement ready for code generation.
pub struct Compiled {
    pub checked: Checked,
    pub kernel: Kernel,
    /// The block tasks of its distribution schedule, or why the planner refused it (rendered;
    /// reported only by the subcommands that use the plan: `emit --plan` and `run` with
    /// `split`).
    pub plan: Result<Plan, Rendered>,
    /// The statement as one line (`expr; A:csr; parallelize(i)`), for `--help` and messages.
    pub text: String,
}

pub use crate::diagnostics::lower_diagnostic;

/// Parses, checks and lowers the statement of a command line; `dims` are the dimensions of
/// the tensors known now (from the headers of input files), checked with spans.
pub fn front(args: &StatementArgs, dims: &Dims) -> anyhow::Result<Compiled> {
    let mut sources = SourceMap::new();
    let render = |d: &Diagnostic, sources: &SourceMap| {
        anyhow::Error::new(Rendered(sources.render(d, std::io::stderr().is_terminal())))
    };
    let stmt = parse::command_line(
        &args.expr,
        &args.formats,
        args.schedule.as_deref(),
        &mut sources,
    )
    .map_err(|d| render(&d, &sources))?;
    let checked = check::check(stmt, dims).map_err(|d| render(&d, &sources))?;
    let kernel = lower::lower(&checked).map_err(|e| render(&lower_diagnostic(&e), &sources))?;
    for r in &kernel.repacks {
        eprintln!(
            "note: `{n}` is re-packed from {} to {} once before the kernel (its mode order agrees \
             with no loop order); give `-f {n}:{}` to store it that way and skip the transpose",
            r.from,
            r.to,
            r.to,
            n = r.name
        );
    }
    let plan = plan::plan(&checked, &kernel)
        .map_err(|d| Rendered(sources.render(&d, std::io::stderr().is_terminal())));
    let mut text = args.expr.trim().to_string();
    for f in &args.formats {
        text += "; ";
        text += f.trim();
    }
    if let Some(s) = &args.schedule {
        text += "; ";
        text += s.trim().trim_end_matches(';');
    }
    Ok(Compiled {
        checked,
        kernel,
        plan,
        text,
    })
}
