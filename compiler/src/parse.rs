//! Parsing statements: the entry points over the lalrpop grammar (`grammar.lalrpop`), the
//! resolution of `name(args)` forms the grammar leaves generic, and the translation of
//! lalrpop's errors into [`Diagnostic`]s with spans and hints.

use crate::ast::*;
use crate::diagnostics::{Diagnostic, SourceMap};
use lalrpop_util::lexer::Token;
use lalrpop_util::ParseError;

lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, clippy::pedantic, unused)]
    grammar,
    "/grammar.rs"
);

/// An error raised inside a grammar action; becomes a [`Diagnostic`].
#[derive(Clone, Debug)]
pub struct SyntaxError(pub Diagnostic);

impl SyntaxError {
    pub fn new(message: impl Into<String>, span: Span) -> SyntaxError {
        SyntaxError(Diagnostic::new(message, span))
    }
}

impl From<Diagnostic> for SyntaxError {
    fn from(d: Diagnostic) -> SyntaxError {
        SyntaxError(d)
    }
}

/// An argument of a schedule directive.
#[derive(Clone, Debug)]
pub enum Arg {
    Name(Ident),
    Int(usize, Span),
    List(Vec<usize>, Span),
}

impl Arg {
    fn span(&self) -> Span {
        match self {
            Arg::Name(i) => i.span.clone(),
            Arg::Int(_, s) | Arg::List(_, s) => s.clone(),
        }
    }
}

/// `name(args)` in a schedule.
pub struct Call {
    pub name: Ident,
    pub args: Vec<Arg>,
    pub span: Span,
}

/// One `;`-separated item after the assignment in the `tensor!` form.
pub enum Item {
    Format(FormatSpec),
    Directive(ScheduleItem),
}

/// The element-wise functions of one argument, by the name they are called with.
pub const FUNCTIONS: [(&str, Func); 7] = [
    ("exp", Func::Exp),
    ("log", Func::Log),
    ("sqrt", Func::Sqrt),
    ("abs", Func::Abs),
    ("sin", Func::Sin),
    ("cos", Func::Cos),
    ("tanh", Func::Tanh),
];

/// The element-wise functions of two arguments.
pub const BINARY_FUNCTIONS: [(&str, BinOp); 11] = [
    ("min", BinOp::Min),
    ("max", BinOp::Max),
    ("pow", BinOp::Pow),
    ("lt", BinOp::Lt),
    ("le", BinOp::Le),
    ("gt", BinOp::Gt),
    ("ge", BinOp::Ge),
    ("eq", BinOp::Eq),
    ("ne", BinOp::Ne),
    ("and", BinOp::And),
    ("or", BinOp::Or),
];

/// The reductions written `op[vars](e)` (`+` is the default and written without one).
pub const REDUCTIONS: [(&str, ReduceOp); 3] = [
    ("min", ReduceOp::Min),
    ("max", ReduceOp::Max),
    ("or", ReduceOp::Or),
];

/// The schedule directives with their argument forms, for hints.
pub const DIRECTIVES: [&str; 5] = [
    "split(i, io, ii, N)  or  split(i, io, ii, [p1, p2, ...])",
    "order(io, jo, ...)",
    "extend(ko)",
    "map(io, ...)",
    "parallelize(i)",
];

/// Every function, with its arity, for hints.
pub fn function_names() -> String {
    let one = FUNCTIONS.iter().map(|(n, _)| format!("{n}(x)"));
    let two = BINARY_FUNCTIONS.iter().map(|(n, _)| format!("{n}(x, y)"));
    one.chain(two).collect::<Vec<_>>().join(", ")
}

fn arity_mismatch(name: &Ident, want: usize, found: usize, span: Span) -> SyntaxError {
    let example = if want == 1 {
        format!("`{}(x(i))`", name.name)
    } else {
        format!("`{}(x(i), y(i))`", name.name)
    };
    let mut d = Diagnostic::new(
        format!(
            "`{}` takes {}, found {found}",
            name.name,
            if want == 1 {
                "one argument"
            } else {
                "2 arguments"
            }
        ),
        span,
    )
    .label(format!("{found} argument(s)"))
    .hint(format!("write e.g. {example}"));
    if want == 2 && found == 1 && REDUCTIONS.iter().any(|(n, _)| *n == name.name) {
        d = d.hint(format!(
            "to reduce over an index variable with `{0}`, name it in brackets: `{0}[k](A(i,k) + B(k,j))`",
            name.name
        ));
    }
    d.into()
}

/// `name(args)` in an expression is a function call when `name` is a function, else a tensor
/// access whose arguments must all be index-variable names.
pub fn resolve_call(name: Ident, args: Vec<Expr>, span: Span) -> Result<Expr, SyntaxError> {
    if let Some((_, func)) = FUNCTIONS.iter().find(|(n, _)| *n == name.name) {
        if args.len() != 1 {
            return Err(arity_mismatch(&name, 1, args.len(), span));
        }
        let arg = args.into_iter().next().expect("one argument");
        return Ok(Expr {
            kind: ExprKind::Call(*func, Box::new(arg)),
            span,
        });
    }
    if let Some((_, op)) = BINARY_FUNCTIONS.iter().find(|(n, _)| *n == name.name) {
        if args.len() != 2 {
            return Err(arity_mismatch(&name, 2, args.len(), span));
        }
        let mut it = args.into_iter();
        let (a, b) = (it.next().expect("two"), it.next().expect("two"));
        return Ok(Expr {
            kind: ExprKind::Binary(*op, Box::new(a), Box::new(b)),
            span,
        });
    }
    // `f(x(i))`, `f(A(i,j) * 2)`: a function of a value, not a tensor access. Whether it may
    // be a user's function is the checker's decision (only `tensor!` has them).
    if let [arg] = &args[..] {
        if reads_a_tensor(arg) {
            let arg = args.into_iter().next().expect("one argument");
            return Ok(Expr {
                kind: ExprKind::UserCall(name, Box::new(arg)),
                span,
            });
        }
    }
    let mut indices = Vec::with_capacity(args.len());
    for arg in args {
        match arg.kind {
            ExprKind::Access(Access {
                tensor,
                indices: inner,
                ..
            }) if inner.is_empty() => indices.push(tensor),
            ExprKind::Binary(..) | ExprKind::Neg(_) | ExprKind::Const(_) => {
                return Err(index_arithmetic(&name, arg.span).into())
            }
            _ => return Err(unknown_function(&name, arg.span).into()),
        }
    }
    let access = Access {
        tensor: name,
        indices,
        span: span.clone(),
    };
    Ok(Expr {
        kind: ExprKind::Access(access),
        span,
    })
}

/// True when `e` reads a tensor with indices or calls a function (so it is a value, where
/// `i + 1` over bare names is index arithmetic).
fn reads_a_tensor(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Access(a) => !a.indices.is_empty(),
        ExprKind::Const(_) => false,
        ExprKind::Call(..) | ExprKind::Reduce(..) | ExprKind::UserCall(..) => true,
        ExprKind::Neg(x) => reads_a_tensor(x),
        ExprKind::Binary(_, a, b) => reads_a_tensor(a) || reads_a_tensor(b),
    }
}

/// `A(i+1, j)`, `A(2, j)`: indices are names only.
fn index_arithmetic(tensor: &Ident, span: Span) -> Diagnostic {
    Diagnostic::new(
        format!(
            "index arithmetic is not supported: the indices of `{}` must be index-variable names",
            tensor.name
        ),
        span,
    )
    .label("not an index-variable name")
    .hint("shifted or constant indices (`i+1`, `2`) are not supported; write a plain variable such as `i`, and shift or slice the data when you build the tensor")
    .hint(format!(
        "if `{}` was meant as a function, the functions are: {}",
        tensor.name,
        function_names()
    ))
}

/// `foo(x(i))`: neither a tensor access (its argument is not a name) nor a function.
pub fn unknown_function(name: &Ident, arg_span: Span) -> Diagnostic {
    Diagnostic::new(
        format!("unknown function `{}`", name.name),
        name.span.clone(),
    )
    .label("not a function")
    .related(
        arg_span,
        "a tensor's indices are index-variable names, so this is not a tensor access",
    )
    .hint(format!("the functions are: {}", function_names()))
    .hint("reductions other than `+` are written `min[k](...)`, `max[k](...)`, `or[k](...)`")
    .hint(format!(
        "in `tensor!`, a Rust function `fn {}(x: f64) -> f64` in scope may be called on a value",
        name.name
    ))
}

/// `min[k, l](e)`: a reduction with another operator than `+`.
pub fn resolve_reduction(
    name: Ident,
    vars: Vec<Ident>,
    body: Expr,
    span: Span,
) -> Result<Expr, SyntaxError> {
    let Some((_, op)) = REDUCTIONS.iter().find(|(n, _)| *n == name.name) else {
        let names: Vec<&str> = REDUCTIONS.iter().map(|(n, _)| *n).collect();
        let mut d = Diagnostic::new(format!("unknown reduction `{}`", name.name), name.span)
            .label("not a reduction")
            .hint(format!(
                "the reductions are {} (written `min[k](...)`)",
                names.join(", ")
            ));
        if name.name == "sum" {
            d = d.hint("sums need no operator: `y(i) = A(i,j) * x(j)` sums over `j`");
        }
        return Err(d.into());
    };
    if vars.is_empty() {
        return Err(Diagnostic::new(
            format!(
                "`{}[...]` names no index variable to reduce over",
                name.name
            ),
            span,
        )
        .label("empty brackets")
        .hint(format!("write e.g. `{}[k](A(i,k) + B(k,j))`", name.name))
        .into());
    }
    Ok(Expr {
        kind: ExprKind::Reduce(*op, vars, Box::new(body)),
        span,
    })
}

/// Checks a schedule call against the directive it names and builds it.
pub fn resolve_directive(call: Call) -> Result<ScheduleItem, SyntaxError> {
    let Call { name, args, span } = call;
    let directive = match name.name.as_str() {
        "split" => resolve_split(&name, args, &span)?,
        "order" => Directive::Order(names(&name, args, &span, 1..usize::MAX)?),
        "map" => Directive::Map(names(&name, args, &span, 1..usize::MAX)?),
        "extend" => Directive::Extend(one_name(&name, args, &span)?),
        "parallelize" => Directive::Parallelize(one_name(&name, args, &span)?),
        _ => {
            return Err(Diagnostic::new(
                format!("unknown schedule directive `{}`", name.name),
                name.span,
            )
            .label("not a directive")
            .hint(format!("the directives are: {}", DIRECTIVES.join("; ")))
            .into())
        }
    };
    Ok(ScheduleItem { directive, span })
}

fn arity_error(name: &Ident, form: &str, found: usize, span: &Span) -> SyntaxError {
    Diagnostic::new(
        format!("`{}` expects {form}, found {found} argument(s)", name.name),
        span.clone(),
    )
    .label("here")
    .hint(format!("the directives are: {}", DIRECTIVES.join("; ")))
    .into()
}

fn expect_name(directive: &Ident, arg: Arg) -> Result<Ident, SyntaxError> {
    match arg {
        Arg::Name(i) => Ok(i),
        other => Err(Diagnostic::new(
            format!("`{}` expects an index-variable name here", directive.name),
            other.span(),
        )
        .label("not a name")
        .into()),
    }
}

fn names(
    directive: &Ident,
    args: Vec<Arg>,
    span: &Span,
    count: std::ops::Range<usize>,
) -> Result<Vec<Ident>, SyntaxError> {
    if !count.contains(&args.len()) {
        return Err(arity_error(
            directive,
            "one or more index variables",
            args.len(),
            span,
        ));
    }
    args.into_iter()
        .map(|a| expect_name(directive, a))
        .collect()
}

fn one_name(directive: &Ident, args: Vec<Arg>, span: &Span) -> Result<Ident, SyntaxError> {
    if args.len() != 1 {
        return Err(arity_error(
            directive,
            "one index variable",
            args.len(),
            span,
        ));
    }
    expect_name(directive, args.into_iter().next().expect("one argument"))
}

fn resolve_split(name: &Ident, args: Vec<Arg>, span: &Span) -> Result<Directive, SyntaxError> {
    if args.len() != 4 {
        return Err(arity_error(
            name,
            "(variable, outer, inner, N or [points])",
            args.len(),
            span,
        ));
    }
    let mut it = args.into_iter();
    let var = expect_name(name, it.next().expect("4 args"))?;
    let outer = expect_name(name, it.next().expect("4 args"))?;
    let inner = expect_name(name, it.next().expect("4 args"))?;
    let kind = match it.next().expect("4 args") {
        Arg::Int(0, s) => {
            return Err(Diagnostic::new("a split needs at least one range", s)
                .label("zero ranges")
                .hint("write the number of ranges, e.g. `split(i, io, ii, 4)`")
                .into())
        }
        Arg::Int(n, _) => SplitKind::Ranges(n),
        Arg::List(points, s) => {
            if points.is_empty() || points[0] == 0 || points.windows(2).any(|w| w[0] >= w[1]) {
                return Err(Diagnostic::new(
                    "split points must be positive and strictly increasing",
                    s,
                )
                .label("these points")
                .hint("each point starts a range after the first, e.g. `[100, 200]` gives ranges [0,100) [100,200) [200,n)")
                .into());
            }
            SplitKind::Points(points)
        }
        Arg::Name(i) => {
            return Err(Diagnostic::new(
                "the last argument of `split` is a number of ranges or a list of split points",
                i.span,
            )
            .label("a name")
            .hint("e.g. `split(i, io, ii, 4)` or `split(i, io, ii, [100, 200])`")
            .into())
        }
    };
    Ok(Directive::Split {
        var,
        outer,
        inner,
        kind,
    })
}

// ---------------------------------------------------------------- entry points

/// Parses one assignment (`y(i) = A(i,j) * x(j)`) whose spans start at `base`.
pub fn assignment(src: &str, base: usize) -> Result<Assignment, Diagnostic> {
    grammar::AssignmentParser::new()
        .parse(base, src)
        .map_err(|e| convert(e, src, base))
}

/// Parses a format flag (`A:ds:1,0`).
pub fn format_spec(src: &str, base: usize) -> Result<FormatSpec, Diagnostic> {
    grammar::FormatSpecParser::new()
        .parse(base, src)
        .map_err(|e| convert(e, src, base))
}

/// Parses a schedule (`split(i, io, ii, 4); parallelize(io)`).
pub fn schedule(src: &str, base: usize) -> Result<Vec<ScheduleItem>, Diagnostic> {
    grammar::ScheduleParser::new()
        .parse(base, src)
        .map_err(|e| convert(e, src, base))
}

/// Parses the `tensor!` form: `y(i) = A(i,j) * x(j); A: csr; parallelize(i)`.
pub fn program(src: &str, base: usize) -> Result<Statement, Diagnostic> {
    let (assignment, formats, schedule) = grammar::ProgramParser::new()
        .parse(base, src)
        .map_err(|e| convert(e, src, base))?;
    Ok(Statement {
        assignment,
        formats,
        schedule,
    })
}

/// Parses the command-line form: the expression, each `-f` flag and the `-s` schedule, each
/// as its own piece of `sources` (so diagnostics name the argument they are about).
pub fn command_line(
    expr: &str,
    formats: &[String],
    schedule_text: Option<&str>,
    sources: &mut SourceMap,
) -> Result<Statement, Diagnostic> {
    let base = sources.add("expression", expr);
    let assignment = assignment(expr, base)?;
    let mut specs = Vec::with_capacity(formats.len());
    for f in formats {
        let base = sources.add(format!("-f {f}"), f.as_str());
        specs.push(format_spec(f, base)?);
    }
    let schedule = match schedule_text {
        Some(s) => {
            let base = sources.add(format!("-s {s}"), s);
            schedule(s, base)?
        }
        None => Vec::new(),
    };
    Ok(Statement {
        assignment,
        formats: specs,
        schedule,
    })
}

// ---------------------------------------------------------------- lalrpop errors

type LalrpopError<'a> = ParseError<usize, Token<'a>, SyntaxError>;

fn convert(e: LalrpopError<'_>, src: &str, base: usize) -> Diagnostic {
    match e {
        ParseError::User { error } => error.0,
        ParseError::InvalidToken { location } => {
            let ch = src[location..].chars().next().unwrap_or(' ');
            let span = (base + location)..(base + location + ch.len_utf8());
            Diagnostic::new(format!("unexpected character `{ch}`"), span)
                .label("not part of the language")
                .hint(
                    "expressions use names, numbers, `( ) [ ] , + - * / = +=`; schedules also `;`",
                )
        }
        ParseError::UnrecognizedEof { location, expected } => {
            let span = (base + location)..(base + location);
            let d = Diagnostic::new("unexpected end of input", span).label("input ends here");
            with_expected(d, &expected)
        }
        ParseError::UnrecognizedToken {
            token: (l, tok, r),
            expected,
        } => {
            let span = (base + l)..(base + r);
            let d = Diagnostic::new(format!("unexpected `{}`", tok.1), span).label("unexpected");
            let implicit_product = expected.iter().any(|e| e == "\"*\"")
                && (tok.1 == "(" || tok.1.starts_with(|c: char| c.is_alphanumeric() || c == '_'));
            if implicit_product {
                d.hint("factors are multiplied with `*`, e.g. `A(i,j) * x(j)`")
            } else {
                with_expected(d, &expected)
            }
        }
        ParseError::ExtraToken { token: (l, tok, r) } => Diagnostic::new(
            format!("unexpected `{}` after the end", tok.1),
            (base + l)..(base + r),
        )
        .label("extra input"),
    }
}

/// Adds "expected one of ..." with lalrpop's terminal names made readable.
fn with_expected(d: Diagnostic, expected: &[String]) -> Diagnostic {
    let mut names: Vec<String> = expected.iter().map(|e| terminal_name(e)).collect();
    names.sort();
    names.dedup();
    match names.len() {
        0 => d,
        1 => d.hint(format!("expected {}", names[0])),
        _ => d.hint(format!("expected one of {}", names.join(", "))),
    }
}

fn terminal_name(t: &str) -> String {
    if t.starts_with("r#") {
        if t.contains("A-Za-z") {
            "a name".into()
        } else if t.contains("\\.") {
            "a number".into()
        } else {
            "an integer".into()
        }
    } else {
        format!("`{}`", t.trim_matches('"'))
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
