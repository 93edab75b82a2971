//! Statements for the compiler targets: structured expressions and schedules printed as the
//! text a user would type, and the pipeline every statement goes through.

use std::collections::HashMap;

use arbitrary::Arbitrary;
use tessera_compiler::check::{self, Dims};
use tessera_compiler::diagnostics::{Diagnostic, SourceMap};
use tessera_compiler::{codegen, lower, parse};

const TENSORS: [&str; 8] = ["A", "B", "C", "x", "y", "z", "a", "T"];
const INDICES: [&str; 6] = ["i", "j", "k", "l", "io", "ii"];
const FUNCS: [&str; 6] = ["exp", "log", "sqrt", "abs", "sin", "max"];
const FORMATS: [&str; 16] = [
    "csr",
    "csc",
    "dcsr",
    "csf",
    "dense",
    "d",
    "s",
    "ds",
    "sd",
    "ss",
    "dd",
    "ds:1,0",
    "sss:2,0,1",
    "dss:0,2,1",
    "sss",
    "ds:0,0",
];

/// An expression over a few names.
#[derive(Debug, Arbitrary)]
pub enum Expr {
    Access(u8, Vec<u8>),
    Number(i16),
    Float(u16),
    Neg(Box<Expr>),
    Binary(u8, Box<Expr>, Box<Expr>),
    Call(u8, Vec<Expr>),
    Paren(Box<Expr>),
}

fn name(list: &[&'static str], k: u8) -> &'static str {
    list[k as usize % list.len()]
}

fn access(t: u8, idx: &[u8]) -> String {
    let idx: Vec<&str> = idx.iter().take(4).map(|&k| name(&INDICES, k)).collect();
    if idx.is_empty() && t.is_multiple_of(2) {
        name(&TENSORS, t).to_string()
    } else {
        format!("{}({})", name(&TENSORS, t), idx.join(","))
    }
}

impl Expr {
    pub fn text(&self, depth: usize) -> String {
        if depth > 24 {
            return "1".into();
        }
        match self {
            Expr::Access(t, idx) => access(*t, idx),
            Expr::Number(n) => n.to_string(),
            Expr::Float(x) => format!("{}.{}", x / 100, x % 100),
            Expr::Neg(e) => format!("-{}", e.text(depth + 1)),
            Expr::Binary(op, a, b) => format!(
                "{} {} {}",
                a.text(depth + 1),
                ["+", "-", "*", "/"][*op as usize % 4],
                b.text(depth + 1)
            ),
            Expr::Call(f, args) => {
                let args: Vec<String> = args.iter().take(3).map(|a| a.text(depth + 1)).collect();
                format!("{}({})", name(&FUNCS, *f), args.join(", "))
            }
            Expr::Paren(e) => format!("({})", e.text(depth + 1)),
        }
    }
}

/// A schedule directive over real and made-up variable names.
#[derive(Debug, Arbitrary)]
pub enum Directive {
    Split(u8, u8, u8, u8),
    SplitAt(u8, u8, u8, Vec<u8>),
    Order(Vec<u8>),
    Extend(u8),
    Map(Vec<u8>),
    Parallelize(u8),
}

const VARS: [&str; 12] = [
    "i", "j", "k", "l", "io", "ii", "jo", "ji", "ko", "ki", "q", "i",
];

fn vars(v: &[u8]) -> String {
    let names: Vec<&str> = v.iter().take(4).map(|&k| name(&VARS, k)).collect();
    names.join(", ")
}

impl Directive {
    pub fn text(&self) -> String {
        match self {
            Directive::Split(v, o, i, n) => format!(
                "split({}, {}, {}, {n})",
                name(&VARS, *v),
                name(&VARS, *o),
                name(&VARS, *i)
            ),
            Directive::SplitAt(v, o, i, p) => {
                let p: Vec<String> = p.iter().take(4).map(|x| x.to_string()).collect();
                format!(
                    "split({}, {}, {}, [{}])",
                    name(&VARS, *v),
                    name(&VARS, *o),
                    name(&VARS, *i),
                    p.join(", ")
                )
            }
            Directive::Order(v) => format!("order({})", vars(v)),
            Directive::Extend(v) => format!("extend({})", name(&VARS, *v)),
            Directive::Map(v) => format!("map({})", vars(v)),
            Directive::Parallelize(v) => format!("parallelize({})", name(&VARS, *v)),
        }
    }
}

/// A whole statement: output, `=` or `+=`, right-hand side, formats, schedule, dimensions.
#[derive(Debug, Arbitrary)]
pub struct Statement {
    lhs: (u8, Vec<u8>),
    accumulate: bool,
    rhs: Expr,
    formats: Vec<(u8, u8)>,
    schedule: Vec<Directive>,
    dims: Vec<(u8, Vec<u8>)>,
}

impl Statement {
    pub fn expr(&self) -> String {
        let op = if self.accumulate { "+=" } else { "=" };
        format!(
            "{} {op} {}",
            access(self.lhs.0, &self.lhs.1),
            self.rhs.text(0)
        )
    }

    pub fn formats(&self) -> Vec<String> {
        self.formats
            .iter()
            .take(4)
            .map(|&(t, f)| format!("{}:{}", name(&TENSORS, t), name(&FORMATS, f)))
            .collect()
    }

    pub fn schedule(&self) -> Option<String> {
        if self.schedule.is_empty() {
            return None;
        }
        let d: Vec<String> = self.schedule.iter().take(6).map(Directive::text).collect();
        Some(d.join("; "))
    }

    pub fn dims(&self) -> Dims {
        let mut dims: HashMap<String, Vec<usize>> = HashMap::new();
        for (t, d) in self.dims.iter().take(4) {
            let d = d.iter().take(4).map(|&x| x as usize % 8).collect();
            dims.insert(name(&TENSORS, *t).to_string(), d);
        }
        dims
    }
}

/// Parse, check, lower and generate a kernel; every error must render as a diagnostic.
pub fn compile(expr: &str, formats: &[String], schedule: Option<&str>, dims: &Dims) {
    let mut sources = SourceMap::new();
    let stmt = match parse::command_line(expr, formats, schedule, &mut sources) {
        Ok(s) => s,
        Err(d) => {
            std::hint::black_box(sources.render(&d, false));
            return;
        }
    };
    let checked = match check::check(stmt, dims) {
        Ok(c) => c,
        Err(d) => {
            std::hint::black_box(sources.render(&d, false));
            return;
        }
    };
    match lower::lower(&checked) {
        Ok(kernel) => {
            // Code generation must accept every lowered kernel (printing it is left out:
            // prettyplease dominated the time per input).
            std::hint::black_box(codegen::emit(&kernel));
        }
        Err(e) => {
            // As the CLI shows it: the message at the error's span, with its hint.
            let mut d = Diagnostic::new(e.to_string(), e.span());
            if let Some(h) = e.hint() {
                d = d.hint(h);
            }
            std::hint::black_box(sources.render(&d, false));
        }
    }
}
