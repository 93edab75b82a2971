//! The value type and coordinate width a program computes with: `--type`/`--index` when
//! given, else what the `.tcs` inputs record (text files record no type), else f64 and u32.
//!
//! Value types are never mixed silently: `.tcs` inputs of different value types are an error
//! naming both, unless `--type` says which one to convert every input to. Coordinate widths
//! widen losslessly, so one `.tcs` input with 64-bit coordinates makes the program's u64.

use crate::ast::{BinOp, ReduceOp};
use crate::ir::{Expr, Kernel};
use anyhow::bail;
use clap::Args;
use std::path::Path;
use tessera_formats::{FileKind, TcsHeader, ValueType};

/// The type flags of `run` and `compile`.
#[derive(Debug, Clone, Args)]
pub struct TypeArgs {
    /// The value type the program computes in and writes: f32, f64, or i64 for counting
    /// (paths, triangles; refuses `/`, fractions and min/max reductions). Default: the type
    /// the .tcs inputs of `run` record (an error if they differ), else f64, as .tns/.mtx
    /// record none. Inputs of another type are converted to it; a fraction read as i64 is an
    /// error.
    #[arg(long = "type", value_name = "TYPE", value_parser = parse_value_type)]
    pub value_type: Option<ValueType>,
    /// Coordinate width: u32 or u64. Default: u64 if a .tcs input of `run` records 64-bit
    /// coordinates, else u32 (half the index traffic).
    #[arg(long, value_name = "WIDTH", value_parser = ["u32", "u64"])]
    pub index: Option<String>,
    /// The same as `--index u64`.
    #[arg(long, conflicts_with = "index")]
    pub wide_index: bool,
}

/// What a program is built for, and why (for messages).
#[derive(Clone, Debug, PartialEq)]
pub struct Types {
    pub value: ValueType,
    pub wide_index: bool,
    /// Where the value type came from: `--type i64`, an input, or the default.
    pub value_from: String,
}

/// Parses `--type`: f32, f64 or i64.
pub fn parse_value_type(s: &str) -> Result<ValueType, String> {
    ValueType::parse(s).ok_or_else(|| format!("`{s}` is not a value type; use f32, f64 or i64"))
}

/// The types for a statement's program, from its flags and the `.tcs` headers of `inputs`
/// (`NAME=PATH`); checked against what the kernel computes.
pub fn choose(args: &TypeArgs, inputs: &[String], k: &Kernel) -> anyhow::Result<Types> {
    let recorded = tcs_types(inputs)?;
    let value_from;
    let value = if let Some(t) = args.value_type {
        value_from = format!("`--type {}`", t.name());
        t
    } else if let Some((name, path, t, _)) = recorded.first() {
        if let Some((other, opath, o, _)) = recorded.iter().find(|r| r.2 != *t) {
            bail!(
                "inputs of different value types: `{name}` ({path}) holds {} values and \
                 `{other}` ({opath}) holds {} values; give `--type {}` or `--type {}` to convert \
                 every input to one type",
                t.name(),
                o.name(),
                t.name(),
                o.name()
            );
        }
        value_from = format!("input `{name}` ({path}, which holds {} values)", t.name());
        *t
    } else {
        value_from = "the default (text inputs record no type; give `--type`)".into();
        ValueType::F64
    };
    let wide_index = match args.index.as_deref() {
        Some(w) => w == "u64",
        None => args.wide_index || recorded.iter().any(|r| r.3 == 64),
    };
    let types = Types {
        value,
        wide_index,
        value_from,
    };
    check_kernel(&types, k)?;
    Ok(types)
}

/// `(name, path, value type, coordinate bits)` of every `.tcs` input, from its header.
fn tcs_types(inputs: &[String]) -> anyhow::Result<Vec<(String, String, ValueType, u32)>> {
    let mut out = Vec::new();
    for i in inputs {
        let Some((name, path)) = i.split_once('=') else {
            continue; // the program reports the malformed flag with its usage
        };
        let p = Path::new(path);
        if !matches!(FileKind::of(p), Ok(FileKind::Tcs)) {
            continue;
        }
        let file = std::fs::File::open(p).map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
        let h = TcsHeader::read_from(&file, p)?;
        out.push((
            name.to_string(),
            path.to_string(),
            h.value_type,
            h.index_bits,
        ));
    }
    Ok(out)
}

/// i64 programs compute exactly or not at all: a division can meet a missing (zero) entry,
/// a `min`/`max` reduction fills missing entries with ±∞, and a fraction would be truncated.
fn check_kernel(t: &Types, k: &Kernel) -> anyhow::Result<()> {
    if t.value != ValueType::I64 {
        return Ok(());
    }
    let why = |what: &str| {
        anyhow::anyhow!(
            "the program computes in i64 (chosen by {}), but {what}; compute in floating point \
             with `--type f64`",
            t.value_from
        )
    };
    if matches!(k.reduce, ReduceOp::Min | ReduceOp::Max) {
        bail!(why(
            "the statement reduces with min or max, whose missing entries are ±∞, which i64 has not"
        ));
    }
    for n in &k.nests {
        if let Some(what) = not_integral(&n.expr) {
            bail!(why(&what));
        }
    }
    Ok(())
}

/// What in `e` has no exact i64 meaning, if anything.
fn not_integral(e: &Expr) -> Option<String> {
    match e {
        Expr::Const(c) if c.fract() != 0.0 => Some(format!("the constant {c} is not an integer")),
        Expr::Binary(BinOp::Div, ..) => Some(
            "the statement divides (`/`), and an integer division by a missing (zero) entry has \
             no value"
                .into(),
        ),
        Expr::Access(_) | Expr::Const(_) => None,
        Expr::Neg(x) | Expr::Call(_, x) | Expr::UserCall(_, x) => not_integral(x),
        Expr::Binary(_, l, r) => not_integral(l).or_else(|| not_integral(r)),
    }
}
