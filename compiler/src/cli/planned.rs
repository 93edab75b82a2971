//! `tessera run` for a statement whose schedule distributes it (`split`, with `extend` and
//! `map`): the plan's block tasks run on `tessera-runtime` in this process, each point task
//! running the interpreter's block entry point on its sub-stores. Unscheduled statements
//! still compile to a native program (see `run.rs`).

use super::run::RunArgs;
use super::types::Types;
use super::Compiled;
use crate::plan::on_runtime::{self, PlanIndex, PlanValue};
use crate::plan::Plan;
use anyhow::{bail, Context};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;
use tessera_formats::Tensor;
use tessera_runtime::Runtime;

pub fn run(args: &RunArgs, c: &Compiled, plan: &Plan, t: &Types) -> anyhow::Result<ExitCode> {
    let bits = if t.wide_index { 64 } else { 32 };
    tessera_formats::with_types!(t.value, bits, |V, I| go::<V, I>(args, c, plan))
}

fn go<V: PlanValue, I: PlanIndex>(
    args: &RunArgs,
    c: &Compiled,
    plan: &Plan,
) -> anyhow::Result<ExitCode> {
    // Ctrl-C or SIGTERM while the output is written: remove its temporary, then stop.
    let _ = ctrlc::set_handler(|| {
        tessera_formats::remove_pending_files();
        std::process::exit(130);
    });
    let k = &c.kernel;
    let t0 = Instant::now();
    let mut tensors: Vec<Tensor<V, I>> = Vec::new();
    for decl in k.tensors.iter().filter(|t| t.input_slot.is_some()) {
        let path = input_path(&args.inputs, &decl.name)?;
        let t = Tensor::read(path, decl.format.clone())
            .with_context(|| format!("reading input `{}`", decl.name))?;
        tensors.push(t);
    }
    let out_dims = output_dims(c, &tensors)?;
    let refs: Vec<&Tensor<V, I>> = tensors.iter().collect();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let rt = Runtime::builder().threads(threads).build();
    let t1 = Instant::now();
    let out = on_runtime::run(&rt, plan, k, &refs, &out_dims)?;
    let t2 = Instant::now();
    out.write(&args.output)
        .with_context(|| format!("writing the output `{}`", k.output_tensor().name))?;
    if args.timings {
        eprintln!(
            "read {:.3} s, compute {:.3} s (block tasks on {threads} threads), write {:.3} s",
            (t1 - t0).as_secs_f64(),
            (t2 - t1).as_secs_f64(),
            t2.elapsed().as_secs_f64()
        );
    }
    if args.stats {
        eprintln!("{}", on_runtime::stats_line(&rt));
    }
    Ok(ExitCode::SUCCESS)
}

/// The path given for input `name` with `-i NAME=PATH`.
fn input_path<'a>(inputs: &'a [String], name: &str) -> anyhow::Result<&'a Path> {
    for i in inputs {
        match i.split_once('=') {
            Some((n, p)) if n == name => return Ok(Path::new(p)),
            Some(_) => {}
            None => bail!("`-i {i}`: an input is NAME=PATH, e.g. `-i {name}=file.tns`"),
        }
    }
    bail!("no file for input `{name}`: give it with `-i {name}=PATH`")
}

/// The output's dimensions, from the inputs that share its index variables.
fn output_dims<V: PlanValue, I: PlanIndex>(
    c: &Compiled,
    tensors: &[Tensor<V, I>],
) -> anyhow::Result<Vec<usize>> {
    let k = &c.kernel;
    let out = &k.accesses[k.output_access];
    let order = k.output_tensor().format.mode_order();
    let mut dims = vec![0; order.len()];
    for (l, &m) in order.iter().enumerate() {
        let v = out.level_vars[l];
        dims[m] = match extent_from_inputs(c, tensors, v) {
            Some(d) => d,
            None => bail!(
                "the output index `{}` indexes no input, so its extent is unknown",
                k.vars[v].name
            ),
        };
    }
    Ok(dims)
}

/// The extent of index variable `v` in the first input that uses it.
fn extent_from_inputs<V: PlanValue, I: PlanIndex>(
    c: &Compiled,
    tensors: &[Tensor<V, I>],
    v: usize,
) -> Option<usize> {
    let k = &c.kernel;
    k.accesses.iter().find_map(|a| {
        let decl = &k.tensors[a.tensor];
        let slot = decl.input_slot?;
        let l = a.level_vars.iter().position(|&x| x == v)?;
        Some(tensors[slot].dims()[decl.format.mode_order()[l]])
    })
}
