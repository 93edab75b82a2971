//! Checking the schedule: every name refers to a real variable, splits make fresh names,
//! block loops are outer variables of splits, and no reduction variable is parallelized.

use super::{Schedule, Split, VarInfo};
use crate::ast::*;
use crate::diagnostics::Diagnostic;

/// A variable the schedule may name: a statement variable or one made by a split.
struct SchedVar {
    name: String,
    /// The statement variable it derives from.
    root: String,
    /// True for the outer (block) variable of a split.
    outer: bool,
    split: bool,
}

/// Validates the schedule: names refer to real variables, splits make fresh names, block
/// loops are outer variables of splits, and no reduction variable is parallelized.
pub(super) fn check_schedule(
    items: &[ScheduleItem],
    vars: &[VarInfo],
) -> Result<Schedule, Diagnostic> {
    let mut known: Vec<SchedVar> = vars
        .iter()
        .map(|v| SchedVar {
            name: v.name.clone(),
            root: v.name.clone(),
            outer: false,
            split: false,
        })
        .collect();
    let is_free = |root: &str| vars.iter().any(|v| v.name == root && v.free);
    let mut sched = Schedule::default();
    let mut order_span: Option<&Span> = None;
    let mut par_span: Option<&Span> = None;
    for item in items {
        match &item.directive {
            Directive::Split {
                var,
                outer,
                inner,
                kind,
            } => {
                sched
                    .splits
                    .push(split(&mut known, vars, item, var, outer, inner, kind)?);
            }
            Directive::Order(names) => {
                once(&mut order_span, &item.span, "order")?;
                sched.order = Some(block_vars(&known, names, "order", &[])?);
            }
            Directive::Map(names) => {
                let names = block_vars(&known, names, "map", &sched.map)?;
                sched.map.extend(names);
            }
            Directive::Extend(v) => {
                let one = std::slice::from_ref(v);
                let name = block_vars(&known, one, "extend", &sched.extend)?.remove(0);
                let root = &known[lookup(&known, v)?].root;
                if is_free(root) {
                    return Err(Diagnostic::new(
                        format!("`{}` comes from the free variable `{root}`; only reduction variables are extended", v.name),
                        v.span.clone(),
                    )
                    .label("not a reduction variable")
                    .hint("extend the outer variable of a split reduction variable, e.g. `split(k, ko, ki, 2); extend(ko)`"));
                }
                sched.extend.push(name);
            }
            Directive::Parallelize(v) => {
                once(&mut par_span, &item.span, "parallelize")?;
                let root = known[lookup(&known, v)?].root.clone();
                if !is_free(&root) {
                    return Err(Diagnostic::new(
                        format!("`{}` is a reduction variable; parallelizing it would race on the output", v.name),
                        v.span.clone(),
                    )
                    .label("reduction variable")
                    .hint("parallelize a variable of the output, usually the outermost one"));
                }
                // A split's block or inner variable parallelizes its statement variable's
                // kernel loop: lowering then sees only statement variables.
                sched.parallelize = Some(root);
            }
        }
    }
    Ok(sched)
}

fn dim_of(vars: &[VarInfo], name: &str) -> Option<usize> {
    vars.iter().find(|v| v.name == name).and_then(|v| v.dim)
}

fn lookup(known: &[SchedVar], v: &Ident) -> Result<usize, Diagnostic> {
    known.iter().position(|k| k.name == v.name).ok_or_else(|| {
        let names: Vec<&str> = known.iter().map(|k| k.name.as_str()).collect();
        Diagnostic::new(
            format!(
                "the schedule names `{}`, which is not an index variable",
                v.name
            ),
            v.span.clone(),
        )
        .label("unknown variable")
        .hint(format!("the index variables are: {}", names.join(", ")))
    })
}

/// Names that must be outer (block) variables of splits, each named once, also across the
/// directive's earlier items (`before`: `map(io); map(io)` would shard by one launch
/// dimension twice, which the runtime refuses when the statement runs).
fn block_vars(
    known: &[SchedVar],
    names: &[Ident],
    directive: &str,
    before: &[String],
) -> Result<Vec<String>, Diagnostic> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        let k = lookup(known, n)?;
        if !known[k].outer {
            return Err(Diagnostic::new(
                format!("`{directive}` takes block variables, but `{}` is not the outer variable of a split", n.name),
                n.span.clone(),
            )
            .label("not a block variable")
            .hint(format!("split it first, e.g. `split({0}, {0}o, {0}i, 2); {directive}({0}o)`", n.name)));
        }
        if out.contains(&n.name) || before.contains(&n.name) {
            return Err(Diagnostic::new(
                format!("`{}` is named twice in `{directive}`", n.name),
                n.span.clone(),
            )
            .label("repeated"));
        }
        out.push(n.name.clone());
    }
    Ok(out)
}

fn once<'a>(
    seen: &mut Option<&'a Span>,
    span: &'a Span,
    directive: &str,
) -> Result<(), Diagnostic> {
    if let Some(first) = seen.replace(span) {
        return Err(
            Diagnostic::new(format!("`{directive}` is given twice"), span.clone())
                .label("second")
                .related(first.clone(), "first")
                .hint(format!("give `{directive}` at most once")),
        );
    }
    Ok(())
}

/// `split(var, outer, inner, kind)`: `var` is known and not split yet, `outer` and `inner` are
/// fresh, split points lie inside a known dimension.
fn split(
    known: &mut Vec<SchedVar>,
    vars: &[VarInfo],
    item: &ScheduleItem,
    var: &Ident,
    outer: &Ident,
    inner: &Ident,
    kind: &SplitKind,
) -> Result<Split, Diagnostic> {
    let k = lookup(known, var)?;
    if known[k].split {
        return Err(
            Diagnostic::new(format!("`{}` is split twice", var.name), var.span.clone())
                .label("already split")
                .hint(
                    "split each variable at most once; split the inner or outer variable to nest",
                ),
        );
    }
    for fresh in [outer, inner] {
        if known.iter().any(|v| v.name == fresh.name)
            || (fresh.name == inner.name && outer.name == inner.name)
        {
            return Err(Diagnostic::new(
                format!("`{}` already names an index variable", fresh.name),
                fresh.span.clone(),
            )
            .label("not a fresh name")
            .hint("a split introduces two new variable names, e.g. `split(i, io, ii, 4)`"));
        }
    }
    if let (SplitKind::Points(p), Some(dim)) = (kind, dim_of(vars, &known[k].root)) {
        if let Some(&last) = p.last().filter(|&&l| l >= dim) {
            return Err(Diagnostic::new(
                format!(
                    "split point {last} is not inside `{}`, whose dimension is {dim}",
                    var.name
                ),
                item.span.clone(),
            )
            .label("split point out of range")
            .hint(format!("split points must be below {dim}")));
        }
    }
    known[k].split = true;
    let root = known[k].root.clone();
    known.push(SchedVar {
        name: outer.name.clone(),
        root: root.clone(),
        outer: true,
        split: false,
    });
    known.push(SchedVar {
        name: inner.name.clone(),
        root,
        outer: false,
        split: false,
    });
    Ok(Split {
        var: var.name.clone(),
        outer: outer.name.clone(),
        inner: inner.name.clone(),
        kind: kind.clone(),
    })
}
