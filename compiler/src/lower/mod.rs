//! Lowering: a checked statement → [`Kernel`] (concrete index notation as loop nests).
//!
//! Stages, one module each: [`terms`] splits the right-hand side into nests by reduction
//! variables; [`order`] picks each nest's loop order from the operands' mode orders;
//! [`lattice`] gives each loop its merge formula; this module resolves levels loop by loop
//! and picks the output's assembly strategy. The result is checked by [`Kernel::verify`].

mod error;
mod lattice;
mod mirror;
mod order;
mod terms;

use std::collections::{BTreeSet, HashMap};

use tessera_formats::{Format, LevelType};

use crate::ast::{self, Directive, Span};
use crate::ir::{
    Access, AccessId, Assembly, DimSource, Expr, Kernel, LevelRef, Loop, Nest, OutputKind,
    TensorDecl, VarDecl, VarId,
};
pub use error::LowerError;
pub use mirror::{mirror, Mirror};
use order::Preference;

/// Lowers a checked statement: formats, and the loop to parallelize, as the checker decided
/// them (the checker and lowering never re-derive the same thing twice).
pub fn lower(c: &crate::check::Checked) -> Result<Kernel, LowerError> {
    let formats = c
        .tensors
        .iter()
        .map(|t| (t.name.clone(), t.format.clone()))
        .collect();
    lower_statement(&c.statement, &formats, c.schedule.parallelize.as_deref())
}

/// Lowers a statement whose tensors have the given formats (tensors not listed are dense
/// with the identity mode order). `+=` makes the output's previous value an extra input,
/// named like the output and placed last: `A(i) += e` is `A(i) = e + A_old(i)`.
/// `parallelize` names the statement variable whose loop runs over threads.
///
/// When the operands' mode orders agree with no loop order, the cheapest input that fixes it
/// (lowest rank, then fewest compressed levels) is re-packed once into the mode order that
/// does, and the kernel records it in [`Kernel::repacks`]. Under a distribution schedule the
/// plan partitions the re-packed form (a plan's run re-packs the input once, before its
/// stores are partitioned).
pub fn lower_statement(
    stmt: &ast::Statement,
    formats: &HashMap<String, Format>,
    parallelize: Option<&str>,
) -> Result<Kernel, LowerError> {
    let mut formats = formats.clone();
    let mut repacks: Vec<(String, Format, Format)> = Vec::new();
    loop {
        match lower_with(stmt, &formats, parallelize) {
            Err(LowerError::NoLoopOrder {
                repack: Some((name, to)),
                ..
            }) if !repacks.iter().any(|r| r.0 == name) => {
                let from = formats.insert(name.clone(), to.clone());
                let from = from.expect("only a tensor with a format has levels to conflict");
                repacks.push((name, from, to));
            }
            Ok(mut k) => {
                for (name, from, to) in repacks {
                    let slot = k
                        .tensors
                        .iter()
                        .find(|t| t.name == name && t.input_slot.is_some())
                        .and_then(|t| t.input_slot)
                        .expect("a re-packed tensor is an input");
                    k.repacks.push(crate::ir::Repack {
                        slot,
                        name,
                        from,
                        to,
                    });
                }
                return Ok(k);
            }
            Err(e) => return Err(e),
        }
    }
}

fn lower_with(
    stmt: &ast::Statement,
    formats: &HashMap<String, Format>,
    parallelize: Option<&str>,
) -> Result<Kernel, LowerError> {
    let mut b = Builder {
        formats,
        tensors: Vec::new(),
        vars: Vec::new(),
        accesses: Vec::new(),
        by_name: HashMap::new(),
        var_by_name: HashMap::new(),
        user_functions: Vec::new(),
    };
    let asg = &stmt.assignment;
    for ix in &asg.lhs.indices {
        b.var(ix, true);
    }
    let (reduce, body) = match &asg.rhs.kind {
        ast::ExprKind::Reduce(op, _, body) => (*op, &**body),
        _ => (ast::ReduceOp::Sum, &asg.rhs),
    };
    let mut rhs = b.expr(body)?;
    if asg.accumulate {
        let old = b.access(&asg.lhs, true)?;
        rhs = Expr::Binary(ast::BinOp::Add, Box::new(rhs), Box::new(Expr::Access(old)));
    }
    let output = b.tensors.len();
    let out_format = b.format_for(&asg.lhs.tensor, asg.lhs.indices.len(), &asg.lhs.span)?;
    b.tensors.push(TensorDecl {
        name: asg.lhs.tensor.name.clone(),
        span: asg.lhs.tensor.span.clone(),
        format: out_format,
        input_slot: None,
    });
    let lhs_ix = &asg.lhs.indices;
    let repeated =
        (0..lhs_ix.len()).find(|k| lhs_ix[..*k].iter().any(|o| o.name == lhs_ix[*k].name));
    if let Some(ix) = repeated.map(|k| &lhs_ix[k]) {
        return Err(LowerError::RepeatedIndex {
            var: ix.name.clone(),
            tensor: asg.lhs.tensor.name.clone(),
            span: asg.lhs.span.clone(),
        });
    }
    let output_access = b.push_access(output, &asg.lhs)?;
    b.finish_dims(&asg.lhs);
    let output_kind = if asg.lhs.indices.is_empty() {
        OutputKind::Scalar
    } else if b.tensors[output]
        .format
        .levels()
        .iter()
        .any(|l| l.is_sparse())
    {
        OutputKind::Sparse
    } else {
        OutputKind::Dense
    };

    // Dense levels below a compressed one are padded by the assembly with zeros; under
    // `min`/`max` the padding must be the fill, which `Collect` patches (see `Assembly`).
    let padded = output_kind == OutputKind::Sparse
        && reduce.fill() != 0.0
        && padded_levels(&b.tensors[output].format);
    let free: BTreeSet<VarId> = (0..b.vars.len()).filter(|v| b.vars[*v].free).collect();
    // A `min[k](...)` body is one term: its `+` is the semiring's product, not a sum of terms.
    let groups = if reduce == ast::ReduceOp::Sum {
        terms::group_terms(&rhs, &b.accesses, &free)
    } else {
        vec![terms::TermGroup {
            reductions: terms::vars_of(&rhs, &b.accesses)
                .difference(&free)
                .copied()
                .collect(),
            expr: rhs,
        }]
    };
    let mut kernel = Kernel {
        tensors: b.tensors,
        output,
        vars: b.vars,
        accesses: b.accesses,
        output_access,
        output_kind,
        nests: Vec::new(),
        parallel: None,
        repacks: Vec::new(),
        user_functions: std::mem::take(&mut b.user_functions),
        reduce,
        source: source_text(stmt),
    };
    for g in &groups {
        let nest = lower_nest(&kernel, g.expr.clone(), &asg.span)?;
        kernel.nests.push(nest);
    }
    if kernel.output_kind == OutputKind::Sparse && (kernel.nests.len() > 1 || padded) {
        for n in &mut kernel.nests {
            n.assembly = Assembly::Collect;
        }
    }
    kernel.parallel = parallel_var(&kernel, stmt, parallelize)?;
    kernel.verify().map_err(|msg| LowerError::Internal {
        msg: format!("{msg}\n{kernel}"),
    })?;
    Ok(kernel)
}

/// Collects tensors, variables and accesses while converting the syntax tree.
struct Builder<'a> {
    formats: &'a HashMap<String, Format>,
    tensors: Vec<TensorDecl>,
    vars: Vec<VarDecl>,
    accesses: Vec<Access>,
    by_name: HashMap<String, usize>,
    var_by_name: HashMap<String, VarId>,
    /// The user's functions called (`tensor!`), in order of first call.
    user_functions: Vec<String>,
}

impl Builder<'_> {
    fn var(&mut self, ix: &ast::Ident, free: bool) -> VarId {
        if let Some(v) = self.var_by_name.get(&ix.name) {
            return *v;
        }
        self.vars.push(VarDecl {
            name: ix.name.clone(),
            span: ix.span.clone(),
            free,
            dim: DimSource::Output { mode: 0 },
        });
        self.var_by_name
            .insert(ix.name.clone(), self.vars.len() - 1);
        self.vars.len() - 1
    }

    fn format_for(&self, t: &ast::Ident, rank: usize, span: &Span) -> Result<Format, LowerError> {
        let Some(f) = self.formats.get(&t.name) else {
            return Ok(Format::dense(rank));
        };
        if f.rank() != rank {
            return Err(LowerError::FormatRank {
                tensor: t.name.clone(),
                rank,
                format: f.to_string(),
                levels: f.rank(),
                span: span.clone(),
            });
        }
        Ok(f.clone())
    }

    /// An input access; `old_output` marks the previous value of a `+=` output.
    fn access(&mut self, acc: &ast::Access, old_output: bool) -> Result<AccessId, LowerError> {
        let key = if old_output {
            format!("{}\u{0}old", acc.tensor.name)
        } else {
            acc.tensor.name.clone()
        };
        let t = match self.by_name.get(&key) {
            Some(t) => {
                let first = self.tensors[*t].rank();
                if first != acc.indices.len() {
                    return Err(LowerError::RankMismatch {
                        tensor: acc.tensor.name.clone(),
                        first,
                        second: acc.indices.len(),
                        span: acc.span.clone(),
                    });
                }
                *t
            }
            None => {
                let format = self.format_for(&acc.tensor, acc.indices.len(), &acc.span)?;
                let slot = self.tensors.len();
                self.tensors.push(TensorDecl {
                    name: acc.tensor.name.clone(),
                    span: acc.tensor.span.clone(),
                    format,
                    input_slot: Some(slot),
                });
                self.by_name.insert(key, slot);
                slot
            }
        };
        for (mode, ix) in acc.indices.iter().enumerate() {
            let v = self.var(ix, false);
            if self.vars[v].dim == (DimSource::Output { mode: 0 }) && !self.vars[v].free {
                self.vars[v].dim = DimSource::Input { slot: t, mode };
            }
        }
        self.push_access(t, acc)
    }

    fn push_access(&mut self, t: usize, acc: &ast::Access) -> Result<AccessId, LowerError> {
        let mut mode_vars = Vec::new();
        for ix in &acc.indices {
            mode_vars.push(self.var_by_name[&ix.name]);
        }
        let order = self.tensors[t].format.mode_order().to_vec();
        let level_vars = order.iter().map(|m| mode_vars[*m]).collect();
        self.accesses.push(Access {
            tensor: t,
            level_vars,
            span: acc.span.clone(),
        });
        Ok(self.accesses.len() - 1)
    }

    /// Free variables take their extent from `out_dims`, which the caller validated
    /// against the inputs; reduction variables from their first input.
    fn finish_dims(&mut self, lhs: &ast::Access) {
        for (mode, ix) in lhs.indices.iter().enumerate() {
            let v = self.var_by_name[&ix.name];
            self.vars[v].dim = DimSource::Output { mode };
        }
    }

    fn expr(&mut self, e: &ast::Expr) -> Result<Expr, LowerError> {
        Ok(match &e.kind {
            ast::ExprKind::Access(a) => Expr::Access(self.access(a, false)?),
            ast::ExprKind::Const(c) => Expr::Const(*c),
            ast::ExprKind::Neg(x) => Expr::Neg(Box::new(self.expr(x)?)),
            ast::ExprKind::Call(f, x) => Expr::Call(*f, Box::new(self.expr(x)?)),
            ast::ExprKind::Binary(op, l, r) => {
                Expr::Binary(*op, Box::new(self.expr(l)?), Box::new(self.expr(r)?))
            }
            ast::ExprKind::UserCall(name, x) => {
                let k = match self.user_functions.iter().position(|n| *n == name.name) {
                    Some(k) => k,
                    None => {
                        self.user_functions.push(name.name.clone());
                        self.user_functions.len() - 1
                    }
                };
                Expr::UserCall(k, Box::new(self.expr(x)?))
            }
            ast::ExprKind::Reduce(..) => {
                return Err(LowerError::Internal {
                    msg:
                        "a reduction inside an expression reached lowering (the checker rejects it)"
                            .into(),
                })
            }
        })
    }
}

/// Lowers one group of terms into a loop nest.
fn lower_nest(k: &Kernel, expr: Expr, span: &Span) -> Result<Nest, LowerError> {
    let operands = expr.accesses();
    let out = &k.accesses[k.output_access];
    let mut vars: Vec<VarId> = out.level_vars.clone();
    vars.sort_unstable();
    for a in &operands {
        for v in &k.accesses[*a].level_vars {
            if !vars.contains(v) {
                vars.push(*v);
            }
        }
    }
    let order = loop_order(k, &vars, &operands, span)?;

    let mut located = operands.clone();
    if k.output_kind == OutputKind::Dense {
        located.push(k.output_access);
    }
    let mut resolved = vec![0usize; k.accesses.len()];
    let mut bound = vec![false; k.vars.len()];
    let mut loops = Vec::new();
    for &v in &order {
        bound[v] = true;
        let mut iterate = Vec::new();
        for &a in &operands {
            let r = LevelRef {
                access: a,
                level: resolved[a],
            };
            if r.level < k.accesses[a].level_vars.len()
                && k.level_type(r).is_sparse()
                && k.level_var(r) == v
            {
                iterate.push(r);
                resolved[a] += 1;
            }
        }
        let mut locate = Vec::new();
        for &a in &located {
            loop {
                let r = LevelRef {
                    access: a,
                    level: resolved[a],
                };
                // A compressed level whose variable is already bound is searched: in a
                // compatible loop order that is only the second mode of a diagonal `A(i,i)`.
                if r.level >= k.accesses[a].level_vars.len()
                    || !bound[k.level_var(r)]
                    || (k.level_type(r) != LevelType::Dense && a == k.output_access)
                {
                    break;
                }
                locate.push(r);
                resolved[a] += 1;
            }
        }
        let f = lattice::formula(&expr, &iterate, k.reduce);
        let domain = lattice::domain(f, iterate.len());
        loops.push(Loop {
            var: v,
            iterate,
            locate,
            domain,
        });
    }
    let acc_depth = order
        .iter()
        .rposition(|v| k.vars[*v].free)
        .map_or(0, |d| d + 1);
    let mut required = Vec::new();
    terms::required_factors(&expr, k.reduce, &mut required);
    let assembly = assembly(k, &order);
    Ok(Nest {
        expr,
        loops,
        acc_depth,
        required,
        assembly,
    })
}

/// The loop order of a nest over `vars`, or the error that says which operand to store
/// differently.
fn loop_order(
    k: &Kernel,
    vars: &[VarId],
    operands: &[AccessId],
    span: &Span,
) -> Result<Vec<VarId>, LowerError> {
    let out = &k.accesses[k.output_access];
    let mut rank = vec![usize::MAX; k.vars.len()];
    for (i, v) in out.level_vars.iter().chain(vars).enumerate() {
        rank[*v] = rank[*v].min(i);
    }
    let mut pref = Preference {
        sparse: BTreeSet::new(),
        free: vars.iter().copied().filter(|v| k.vars[*v].free).collect(),
        rank,
    };
    let per_access: Vec<Vec<(VarId, VarId)>> = operands
        .iter()
        .map(|a| order::access_edges(&k.accesses[*a], &k.tensors[k.accesses[*a].tensor]))
        .collect();
    for e in per_access.iter().flatten() {
        pref.sparse.insert(e.0);
        pref.sparse.insert(e.1);
    }
    for a in operands {
        let acc = &k.accesses[*a];
        for (l, t) in k.tensors[acc.tensor].format.levels().iter().enumerate() {
            if t.is_sparse() {
                pref.sparse.insert(acc.level_vars[l]);
            }
        }
    }
    let edges: Vec<(VarId, VarId)> = per_access.iter().flatten().copied().collect();
    if k.output_kind == OutputKind::Sparse {
        let mut with_out = edges.clone();
        with_out.extend(order::output_edges(out));
        if let Some(o) = order::topo_order(vars, &with_out, &pref) {
            return Ok(o);
        }
    }
    if let Some(o) = order::topo_order(vars, &edges, &pref) {
        return Ok(o);
    }
    Err(no_order_error(k, operands, &per_access, vars, &pref, span))
}

/// Finds the cheapest operand whose re-storing would make a loop order exist (lowest rank,
/// then fewest compressed levels, then one that leaves a sparse output in its level order),
/// and says how.
fn no_order_error(
    k: &Kernel,
    operands: &[AccessId],
    per_access: &[Vec<(VarId, VarId)>],
    vars: &[VarId],
    pref: &Preference,
    span: &Span,
) -> LowerError {
    let mut best: Option<((usize, usize, bool), LowerError)> = None;
    let out_edges = if k.output_kind == OutputKind::Sparse {
        order::output_edges(&k.accesses[k.output_access])
    } else {
        Vec::new()
    };
    for (i, a) in operands.iter().enumerate() {
        if per_access[i].is_empty() {
            continue;
        }
        let acc = &k.accesses[*a];
        let tensor = &k.tensors[acc.tensor];
        // Re-storing a tensor changes every use of it: all of them leave the graph here.
        let same = |j: usize| k.accesses[operands[j]].tensor == acc.tensor;
        let others: Vec<(VarId, VarId)> = per_access
            .iter()
            .enumerate()
            .filter(|(j, _)| !same(*j))
            .flat_map(|(_, e)| e.iter().copied())
            .collect();
        let Some(order) = order::topo_order(vars, &others, pref) else {
            continue;
        };
        // Mode m's variable is level_vars[level_of_mode[m]]; sort modes by loop position.
        let level_of_mode = tensor.format.level_of_mode();
        let mut modes: Vec<usize> = (0..tensor.rank()).collect();
        modes.sort_by_key(|m| {
            let v = acc.level_vars[level_of_mode[*m]];
            order.iter().position(|o| *o == v)
        });
        let letters: String = tensor.format.levels().iter().map(|l| l.letter()).collect();
        let mo: Vec<String> = modes.iter().map(|m| m.to_string()).collect();
        let mo = mo.join(",");
        // ... and comes back in the new mode order, for each use: `A(i,j) + A(j,i)` has
        // none that serves both uses, so re-storing `A` is no advice.
        let Ok(to) = Format::new(tensor.format.levels().to_vec(), modes.clone()) else {
            continue;
        };
        let mut with_uses = others.clone();
        for (j, b) in operands.iter().enumerate() {
            if same(j) {
                with_uses.extend(edges_when_stored(k, *b, &to));
            }
        }
        if order::topo_order(vars, &with_uses, pref).is_none() {
            continue;
        }
        let with_out: Vec<(VarId, VarId)> = with_uses.iter().chain(&out_edges).copied().collect();
        let out_in_order = order::topo_order(vars, &with_out, pref).is_some();
        // The previous value of a `+=` output shares the output's format: never re-packed;
        // nor, under `min`/`max`, a format whose dense levels below a compressed one would be
        // padded with 0 rather than the fill.
        let padded = padded_levels(&tensor.format);
        let repack = (tensor.name != k.output_tensor().name && !(padded && k.reduce.fill() != 0.0))
            .then(|| (tensor.name.clone(), to));
        let cost = (
            tensor.rank(),
            tensor
                .format
                .levels()
                .iter()
                .filter(|l| l.is_sparse())
                .count(),
            !out_in_order,
        );
        let err = LowerError::NoLoopOrder {
            span: acc.span.clone(),
            hint: format!(
                "store {name} with mode order {mo} (-f {name}:{letters}:{mo})",
                name = tensor.name
            ),
            repack,
        };
        if best.as_ref().is_none_or(|(c, _)| cost < *c) {
            best = Some((cost, err));
        }
    }
    best.map(|b| b.1)
        .or_else(|| read_in_two_orders(k, operands))
        .unwrap_or_else(|| LowerError::NoLoopOrder {
            span: span.clone(),
            hint: "no single operand can be re-stored to fix this; give the operands mode orders that agree".into(),
            repack: None,
        })
}

/// The precedence edges access `b` asks for once its tensor is stored in `to` (a format of
/// the same rank): its mode variables taken in `to`'s level order.
fn edges_when_stored(k: &Kernel, b: AccessId, to: &Format) -> Vec<(VarId, VarId)> {
    let acc = &k.accesses[b];
    let level_of_mode = k.tensors[acc.tensor].format.level_of_mode();
    let level_vars: Vec<VarId> = (to.mode_order().iter())
        .map(|&m| acc.level_vars[level_of_mode[m]])
        .collect();
    let Some(last) = to.levels().iter().rposition(|l| l.is_sparse()) else {
        return Vec::new();
    };
    level_vars[..=last]
        .windows(2)
        .map(|w| (w[0], w[1]))
        .collect()
}

/// When a tensor with compressed levels is read with its modes in two orders (`A(i,j) +
/// A(j,i)`), no format of it serves both uses: the error at the second use says to pass the
/// values a second time, stored in the other order.
fn read_in_two_orders(k: &Kernel, operands: &[AccessId]) -> Option<LowerError> {
    let mode_vars = |a: AccessId| -> Vec<VarId> {
        let acc = &k.accesses[a];
        let level_of_mode = k.tensors[acc.tensor].format.level_of_mode();
        level_of_mode.iter().map(|&l| acc.level_vars[l]).collect()
    };
    for (n, &b) in operands.iter().enumerate() {
        let tensor = &k.tensors[k.accesses[b].tensor];
        if !tensor.format.levels().iter().any(|l| l.is_sparse()) {
            continue;
        }
        let first = operands[..n].iter().find(|&&a| {
            k.accesses[a].tensor == k.accesses[b].tensor && {
                let (x, y) = (mode_vars(a), mode_vars(b));
                x.iter().zip(&y).any(|(u, v)| u != v) && x.iter().all(|v| y.contains(v))
            }
        });
        if first.is_some() {
            let name = &tensor.name;
            return Some(LowerError::NoLoopOrder {
                span: k.accesses[b].span.clone(),
                hint: format!(
                    "no single operand can be re-stored to fix this: `{name}` is read with its \
                     modes in two orders, which no one format of it serves; for this use, pass \
                     the same values as a second tensor stored in the other mode order \
                     (in Rust `Tensor::to_format`; on the command line the same file again)"
                ),
                repack: None,
            });
        }
    }
    None
}

/// True when a dense level lies below a compressed one (`sd`): stored with zeros in the
/// positions nothing was written to.
pub fn padded_levels(f: &Format) -> bool {
    f.levels()
        .iter()
        .skip_while(|l| **l == LevelType::Dense)
        .any(|l| *l == LevelType::Dense)
}

/// How a sparse output is assembled, from the loop order (see [`Assembly`]).
fn assembly(k: &Kernel, order: &[VarId]) -> Assembly {
    if k.output_kind != OutputKind::Sparse {
        return Assembly::None;
    }
    let out = &k.accesses[k.output_access].level_vars;
    let r = out.len();
    if order.len() >= r && order[..r] == out[..] {
        return Assembly::InOrder;
    }
    if order[..r - 1] == out[..r - 1] {
        return Assembly::Workspace {
            flush_depth: r - 1,
            var: out[r - 1],
        };
    }
    if order.len() >= r && out.iter().all(|v| order[..r].contains(v)) {
        return Assembly::Scatter;
    }
    Assembly::Collect
}

/// The variable of `parallelize(v)` (`name`, resolved by the checker to a statement
/// variable), checked to be the outermost loop of every nest and free.
fn parallel_var(
    k: &Kernel,
    stmt: &ast::Statement,
    name: Option<&str>,
) -> Result<Option<VarId>, LowerError> {
    let Some(name) = name else {
        return Ok(None);
    };
    let span = stmt
        .schedule
        .iter()
        .find(|item| matches!(item.directive, Directive::Parallelize(_)))
        .map_or_else(|| stmt.assignment.span.clone(), |item| item.span.clone());
    let err = |reason: String| LowerError::Parallelize {
        var: name.to_string(),
        reason,
        span: span.clone(),
    };
    let Some(v) = k.vars.iter().position(|d| d.name == name) else {
        return Err(err("no such index variable".into()));
    };
    if !k.vars[v].free {
        return Err(err(format!("`{name}` is a reduction variable")));
    }
    for nest in &k.nests {
        if nest.loops.first().map(|l| l.var) != Some(v) {
            let names: Vec<&str> = nest
                .loops
                .iter()
                .map(|l| k.vars[l.var].name.as_str())
                .collect();
            return Err(err(format!(
                "`{name}` is not the outermost loop (loop order: {})",
                names.join(", ")
            )));
        }
    }
    Ok(Some(v))
}

/// The statement as text, for the generated code's documentation.
fn source_text(stmt: &ast::Statement) -> String {
    fn expr(e: &ast::Expr) -> String {
        match &e.kind {
            ast::ExprKind::Access(a) => access(a),
            ast::ExprKind::Const(c) => format!("{c}"),
            ast::ExprKind::Neg(x) => format!("-({})", expr(x)),
            ast::ExprKind::Call(f, x) => {
                format!("{}({})", format!("{f:?}").to_lowercase(), expr(x))
            }
            ast::ExprKind::Binary(op, l, r) => {
                let o = crate::semiring::binop_name(*op);
                if crate::semiring::is_infix(*op) {
                    format!("({} {o} {})", expr(l), expr(r))
                } else {
                    format!("{o}({}, {})", expr(l), expr(r))
                }
            }
            ast::ExprKind::UserCall(name, x) => format!("{}({})", name.name, expr(x)),
            ast::ExprKind::Reduce(op, vars, body) => {
                let v: Vec<&str> = vars.iter().map(|i| i.name.as_str()).collect();
                format!("{}[{}]({})", op.name(), v.join(","), expr(body))
            }
        }
    }
    fn access(a: &ast::Access) -> String {
        if a.indices.is_empty() {
            return a.tensor.name.clone();
        }
        let ix: Vec<&str> = a.indices.iter().map(|i| i.name.as_str()).collect();
        format!("{}({})", a.tensor.name, ix.join(","))
    }
    let asg = &stmt.assignment;
    format!(
        "{} {} {}",
        access(&asg.lhs),
        if asg.accumulate { "+=" } else { "=" },
        expr(&asg.rhs)
    )
}
