//! `tessera emit --plan`: the plan as a reader checks it against SuperTaco §4.5.

use std::fmt;

use super::{Grid, Partition, Plan, Privilege, Role, Sharding};
use crate::ast::SplitKind;

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.grid;
        writeln!(f, "plan for {}", self.source)?;
        if g.vars.is_empty() {
            return writeln!(f, "  no split: one task runs the whole kernel");
        }
        writeln!(f, "  block grid (outermost first):")?;
        for b in &g.vars {
            let how = match &b.kind {
                SplitKind::Ranges(n) => format!("{n} equal ranges"),
                SplitKind::Points(p) => format!("ranges starting at 0, {}", join(p)),
            };
            let role = match b.role {
                Role::Parallel => "parallel (owns output tiles)",
                Role::Extend => "extended reduction (parallel, partial outputs folded)",
                Role::Sequential => "sequential reduction (one launch per block)",
            };
            writeln!(f, "    {:<6} split of {} into {how}; {role}", b.name, b.var)?;
        }
        let domain = g.domain();
        writeln!(
            f,
            "  launches: {} of launch domain [{}] ({} point tasks each)",
            g.launches(),
            join(&domain),
            g.points()
        )?;
        writeln!(f, "  block task arguments:")?;
        for a in &self.args {
            writeln!(
                f,
                "    {:<10} {:<14} {}",
                a.store.to_string(),
                privilege(a.privilege, self.reduce),
                partition(&a.partition, g)
            )?;
        }
        writeln!(f, "  reduction: {}", reduction(g, self.reduce))?;
        let sharding = match &self.sharding {
            Sharding::Map(v) => format!("map({})", names(g, v)),
            Sharding::OwnerComputes(v) if v.is_empty() => "owner computes: one owner".into(),
            Sharding::OwnerComputes(v) => format!("owner computes, by ({})", names(g, v)),
        };
        writeln!(f, "  sharding: {sharding}")
    }
}

fn join<T: ToString>(xs: &[T]) -> String {
    xs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn names(g: &Grid, vars: &[usize]) -> String {
    let n: Vec<&str> = vars.iter().map(|&v| g.vars[v].name.as_str()).collect();
    n.join(", ")
}

/// A reduction as written in a statement (`+` by default).
fn op_name(op: crate::ast::ReduceOp) -> &'static str {
    match op {
        crate::ast::ReduceOp::Sum => "+",
        other => other.name(),
    }
}

fn privilege(p: Privilege, op: crate::ast::ReduceOp) -> String {
    let op = op_name(op);
    match p {
        Privilege::Read => "read".into(),
        Privilege::Write => "write".into(),
        Privilege::ReadWrite => "read-write".into(),
        Privilege::Reduce => format!("reduce({op})"),
        Privilege::WriteUnbound => "write unbound".into(),
        Privilege::ReduceUnbound => format!("reduce({op}) unbound"),
    }
}

fn partition(p: &Partition, g: &Grid) -> String {
    match p {
        Partition::Tiled { dims } => {
            let d: Vec<String> = dims
                .iter()
                .map(|d| d.map_or("*".to_string(), |v| g.vars[v].name.clone()))
                .collect();
            format!("tiled [{}]", d.join(", "))
        }
        Partition::Aligned(s) => format!("align({s})"),
        Partition::Broadcast => "broadcast".into(),
        Partition::Image(s) => format!("image({s})"),
        Partition::Blocks { by } => format!("tensor blocks by ({})", names(g, by)),
        Partition::Pieces => "one piece per point".into(),
    }
}

fn reduction(g: &Grid, op: crate::ast::ReduceOp) -> String {
    let of =
        |r: Role| -> Vec<usize> { (0..g.vars.len()).filter(|&v| g.vars[v].role == r).collect() };
    let (ext, seq) = (of(Role::Extend), of(Role::Sequential));
    let mut parts = Vec::new();
    if !ext.is_empty() {
        parts.push(format!(
            "partial outputs of ({}) folded with `{}` by a summation tree",
            names(g, &ext),
            op_name(op)
        ));
    }
    if !seq.is_empty() {
        parts.push(format!(
            "({}) hoisted into {} dependent launches",
            names(g, &seq),
            g.launches()
        ));
    }
    if parts.is_empty() {
        "none (every point writes its own tile)".into()
    } else {
        parts.join("; ")
    }
}
