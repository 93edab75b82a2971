use super::*;
use proptest::prelude::*;

fn expr(src: &str) -> Assignment {
    assignment(src, 0).unwrap_or_else(|d| panic!("{src}: {}", d.plain()))
}

/// Asserts that parsing `src` in the `tensor!` form fails with a message containing `msg`
/// at a span whose text is `at`.
fn fails(src: &str, msg: &str, at: &str) -> Diagnostic {
    let d = program(src, 0).expect_err(src);
    assert!(
        d.message.contains(msg),
        "{src}: message {:?} lacks {msg:?}",
        d.message
    );
    assert_eq!(
        &src[d.span.start..d.span.end.min(src.len())],
        at,
        "{src}: span of {:?}",
        d.message
    );
    d
}

#[test]
fn spmv_parses_with_spans() {
    let a = expr("y(i) = A(i,j) * x(j)");
    assert_eq!(a.lhs.tensor.name, "y");
    assert_eq!(a.lhs.span, 0..4);
    assert!(!a.accumulate);
    let ExprKind::Binary(BinOp::Mul, l, r) = &a.rhs.kind else {
        panic!("{:?}", a.rhs)
    };
    let ExprKind::Access(acc) = &l.kind else {
        panic!()
    };
    assert_eq!(acc.tensor.name, "A");
    assert_eq!(
        acc.indices
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>(),
        ["i", "j"]
    );
    assert_eq!(acc.span, 7..13);
    assert_eq!(r.span, 16..20);
}

#[test]
fn precedence_and_unary_minus() {
    // a - b * -c / d  ==  a - ((b * (-c)) / d)
    let a = expr("s = a - b * -c / d");
    let ExprKind::Binary(BinOp::Sub, _, rhs) = &a.rhs.kind else {
        panic!("{:?}", a.rhs)
    };
    let ExprKind::Binary(BinOp::Div, prod, _) = &rhs.kind else {
        panic!("{rhs:?}")
    };
    let ExprKind::Binary(BinOp::Mul, _, neg) = &prod.kind else {
        panic!("{prod:?}")
    };
    assert!(matches!(neg.kind, ExprKind::Neg(_)));
    // Subtraction is left-associative.
    let a = expr("s = a - b - c");
    let ExprKind::Binary(BinOp::Sub, l, _) = &a.rhs.kind else {
        panic!()
    };
    assert!(matches!(l.kind, ExprKind::Binary(BinOp::Sub, _, _)));
}

#[test]
fn functions_constants_scalars_and_accumulate() {
    let a = expr("y(i) += exp(x(i)) * 2.5e-1 + sqrt(abs(alpha)) - log(3)");
    assert!(a.accumulate);
    let mut calls = Vec::new();
    fn walk(e: &Expr, out: &mut Vec<Func>) {
        match &e.kind {
            ExprKind::Call(f, x) => {
                out.push(*f);
                walk(x, out)
            }
            ExprKind::Binary(_, a, b) => {
                walk(a, out);
                walk(b, out)
            }
            ExprKind::Neg(x) => walk(x, out),
            _ => {}
        }
    }
    walk(&a.rhs, &mut calls);
    assert_eq!(calls, [Func::Exp, Func::Sqrt, Func::Abs, Func::Log]);
    let s = expr("a = b(i) * c(i)");
    assert!(s.lhs.indices.is_empty());
}

#[test]
fn program_with_formats_and_schedule() {
    let s = program(
        "C(i,j) = A(i,k) * B(k,j); A: csr; B: ds:1,0; split(i, io, ii, 4); \
         split(k, ko, ki, [10, 20]); order(io, ko); extend(ko); map(io); parallelize(i);",
        0,
    )
    .unwrap();
    let f: Vec<(&str, &str)> = s
        .formats
        .iter()
        .map(|f| (f.tensor.name.as_str(), f.format.as_str()))
        .collect();
    assert_eq!(f, [("A", "csr"), ("B", "ds:1,0")]);
    assert_eq!(s.schedule.len(), 6);
    assert!(matches!(&s.schedule[1].directive,
        Directive::Split { kind: SplitKind::Points(p), .. } if p == &[10, 20]));
    assert!(matches!(&s.schedule[5].directive, Directive::Parallelize(v) if v.name == "i"));
}

#[test]
fn command_line_pieces_have_their_own_offsets() {
    let mut sources = SourceMap::new();
    let formats = vec!["A:csr".to_string(), "x:cs".to_string()];
    let stmt = command_line(
        "y(i) = A(i,j) * x(j)",
        &formats,
        Some("parallelize(i)"),
        &mut sources,
    )
    .unwrap();
    let (name, local) = sources.locate(&stmt.formats[1].span).unwrap();
    assert_eq!((name, local), ("-f x:cs", 0..4));
    let (name, local) = sources.locate(&stmt.schedule[0].span).unwrap();
    assert_eq!((name, local), ("-s parallelize(i)", 0..14));
    assert_eq!(sources.text(&stmt.formats[0].span), "A:csr");
    // An error in the schedule names the -s argument.
    let mut sources = SourceMap::new();
    let d = command_line("y(i) = x(i)", &[], Some("paralelize(i)"), &mut sources).unwrap_err();
    assert_eq!(
        sources.locate(&d.span).unwrap(),
        ("-s paralelize(i)", 0..10)
    );
    let text = sources.render(&d, false);
    assert!(
        text.contains("unknown schedule directive `paralelize`"),
        "{text}"
    );
    assert!(text.contains("-s paralelize(i)"), "{text}");
}

/// A rendered syntax error never draws an arrow to an empty label: either the span says
/// something or it is only underlined.
#[test]
fn rendered_errors_label_their_span_or_only_underline_it() {
    for (expr, schedule) in [
        (
            "y(i) = x(i)",
            Some("split(i, io, ii, 99999999999999999999999)"),
        ),
        ("y(i) = 99999999999999999999999 * x(i)", None),
        ("y(i) = x(i) +", None),
        ("y(i) = x(i)", Some("paralelize(i)")),
    ] {
        let mut sources = SourceMap::new();
        let d = command_line(expr, &[], schedule, &mut sources).unwrap_err();
        let text = sources.render(&d, false);
        let empty = text
            .lines()
            .find(|l| l.trim_end().ends_with('─') && l.contains('╰'));
        assert_eq!(empty, None, "an arrow to nothing:\n{text}");
    }
}

#[test]
fn syntax_errors_point_at_the_culprit() {
    fails("y(i) = A(i,j) x(j)", "unexpected `x`", "x");
    let d = fails("y(i) = A(i,j) x(j)", "", "x");
    assert!(d.hint.as_deref().unwrap().contains('*'), "{:?}", d.hint);
    fails("y(i) = A(i,j) * x(j", "unexpected end of input", "");
    let d = fails("y(i) = A(i+1)", "index arithmetic is not supported", "i+1");
    assert!(
        d.hint.as_deref().unwrap().contains("plain variable"),
        "{:?}",
        d.hint
    );
    // `sinh(x(i))` parses as a call of a user's function (`tensor!` only; see check_tests).
    let a = expr("y(i) = sinh(x(i))");
    assert!(matches!(a.rhs.kind, ExprKind::UserCall(ref n, _) if n.name == "sinh"));
    fails("y(i) = sinh(x(i), 2)", "unknown function `sinh`", "sinh");
    fails(
        "y(i) = max(x(i))",
        "`max` takes 2 arguments, found 1",
        "max(x(i))",
    );
    let d = fails("y(i) = max(x(i))", "", "max(x(i))");
    assert!(d.hint.unwrap().contains("max[k]("));
    fails("y(i) = sum[j](A(i,j))", "unknown reduction `sum`", "sum");
    fails(
        "y(i) = min[](A(i,j))",
        "names no index variable",
        "min[](A(i,j))",
    );
    fails(
        "y(i) = exp(x(i), 2)",
        "`exp` takes one argument, found 2",
        "exp(x(i), 2)",
    );
    fails("y(i) = x(i) $ 2", "unexpected character `$`", "$");
    fails("y(i) == x(i)", "unexpected `=`", "=");
    fails(
        "y(i) = x(i); A: csr; paralelize(i)",
        "unknown schedule directive",
        "paralelize",
    );
    fails(
        "y(i) = x(i); split(i, io, 4)",
        "`split` expects",
        "split(i, io, 4)",
    );
    fails(
        "y(i) = x(i); split(i, io, ii, 0)",
        "at least one range",
        "0",
    );
    fails(
        "y(i) = x(i); split(i, io, ii, [5, 3])",
        "strictly increasing",
        "[5, 3]",
    );
    fails("y(i) = x(i); split(i, io, ii, k)", "number of ranges", "k");
    fails(
        "y(i) = x(i); parallelize(i, j)",
        "one index variable",
        "parallelize(i, j)",
    );
    fails("y(i) = x(i); order(3)", "index-variable name", "3");
    fails(
        "y(i) = 99999999999999999999999 * x(i)",
        "too large",
        "99999999999999999999999",
    );
    // Overflowing literals would otherwise become `inf` (and panicked code generation).
    fails("y(i) = 1e999 * x(i)", "not a finite number", "1e999");
    fails("y(i) = x(i) / 2.5E+400", "not a finite number", "2.5E+400");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whitespace and comments never change the parse (only the spans).
    #[test]
    fn whitespace_is_insignificant(spaces in prop::collection::vec(" |  |\t|\n| # c\n", 12)) {
        let parts = ["y", "(i)", "=", "A", "(i,j)", "*", "x", "(j)", "+", "-", "z(i)", ""];
        let spaced: String = parts.iter().zip(&spaces).map(|(p, s)| format!("{p}{s}")).collect();
        let a = expr("y(i)=A(i,j)*x(j)+-z(i)");
        let b = assignment(&spaced, 0).map_err(|d| TestCaseError::fail(format!("{spaced:?}: {}", d.plain())))?;
        prop_assert_eq!(strip(&a.rhs), strip(&b.rhs));
    }

    /// Spans always lie inside the source and cover the text they name.
    #[test]
    fn ident_spans_cover_their_names(base in 0usize..1000) {
        let src = "out(i, k) += alpha * B(i, j) * C(j, k)";
        let a = assignment(src, base).unwrap();
        let mut names = vec![a.lhs.tensor.clone()];
        names.extend(a.lhs.indices.iter().cloned());
        crate::check::visit_accesses(&a.rhs, &mut |acc| {
            names.push(acc.tensor.clone());
            names.extend(acc.indices.iter().cloned());
        });
        for n in names {
            prop_assert_eq!(&src[n.span.start - base..n.span.end - base], n.name.as_str());
        }
    }
}

/// The expression without spans, for comparing parses.
fn strip(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Access(a) => {
            let idx: Vec<&str> = a.indices.iter().map(|i| i.name.as_str()).collect();
            format!("{}({})", a.tensor.name, idx.join(","))
        }
        ExprKind::Const(c) => c.to_string(),
        ExprKind::Neg(x) => format!("-({})", strip(x)),
        ExprKind::Call(f, x) => format!("{f:?}({})", strip(x)),
        ExprKind::Binary(op, a, b) => format!("({} {op:?} {})", strip(a), strip(b)),
        ExprKind::UserCall(f, x) => format!("{}({})", f.name, strip(x)),
        ExprKind::Reduce(op, vars, x) => {
            let v: Vec<&str> = vars.iter().map(|i| i.name.as_str()).collect();
            format!("{op:?}[{}]({})", v.join(","), strip(x))
        }
    }
}

/// Random expressions as (minimally parenthesized text, fully parenthesized canonical form).
fn arb_expr() -> impl Strategy<Value = (String, String, u8)> {
    let name = prop::sample::select(vec!["A", "b", "x_1", "Tensor"]);
    let idx = prop::sample::subsequence(vec!["i", "j", "k"], 0..=3);
    let leaf = prop_oneof![
        (name, idx).prop_map(|(n, ix)| {
            let t = if ix.is_empty() {
                n.to_string()
            } else {
                format!("{n}({})", ix.join(", "))
            };
            let c = format!("{n}({})", ix.join(","));
            (t, c, 4u8)
        }),
        (0u32..1000).prop_map(|n| (n.to_string(), f64::from(n).to_string(), 4u8)),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (
                inner.clone(),
                prop::sample::select(vec!["+", "-", "*", "/"]),
                inner.clone()
            )
                .prop_map(|((ta, ca, pa), op, (tb, cb, pb))| {
                    let (prec, name) = match op {
                        "+" => (1, "Add"),
                        "-" => (1, "Sub"),
                        "*" => (2, "Mul"),
                        _ => (2, "Div"),
                    };
                    // Left-associative: the right operand needs parentheses at equal precedence.
                    let l = if pa < prec { format!("({ta})") } else { ta };
                    let r = if pb <= prec { format!("({tb})") } else { tb };
                    (format!("{l} {op} {r}"), format!("({ca} {name} {cb})"), prec)
                }),
            inner.clone().prop_map(|(t, c, p)| {
                let t = if p < 3 {
                    format!("-({t})")
                } else {
                    format!("-{t}")
                };
                (t, format!("-({c})"), 3)
            }),
            (
                prop::sample::select(vec!["exp", "log", "sqrt", "abs"]),
                inner
            )
                .prop_map(|(f, (t, c, _))| {
                    let name = match f {
                        "exp" => "Exp",
                        "log" => "Log",
                        "sqrt" => "Sqrt",
                        _ => "Abs",
                    };
                    (format!("{f}({t})"), format!("{name}({c})"), 4)
                }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Precedence, associativity, unary minus and calls parse as a printer with minimal
    /// parentheses intends.
    #[test]
    fn printed_expressions_parse_back((text, canonical, _) in arb_expr()) {
        let src = format!("out(i) = {text}");
        let a = assignment(&src, 0).map_err(|d| TestCaseError::fail(format!("{src}: {}", d.plain())))?;
        prop_assert_eq!(strip(&a.rhs), canonical);
    }

    /// Any input over the language's characters is parsed and checked without a panic, and
    /// every error span lies inside the input.
    #[test]
    fn garbage_never_panics(src in "[a-cij()=+*/;:,\\[\\]0-9 .-]{0,40}") {
        let result = program(&src, 0).and_then(|s| crate::check::check(s, &crate::check::Dims::new()));
        if let Err(d) = result {
            prop_assert!(d.span.start <= d.span.end && d.span.end <= src.len(), "{:?} in {src:?}", d.span);
            prop_assert!(!d.message.is_empty());
        }
    }
}

#[test]
fn functions_of_two_arguments_and_reductions_parse() {
    let a = expr("y(i) = max(x(i), 0) + pow(z(i), 2)");
    let ExprKind::Binary(BinOp::Add, l, r) = &a.rhs.kind else {
        panic!("{:?}", a.rhs)
    };
    assert!(matches!(l.kind, ExprKind::Binary(BinOp::Max, _, _)));
    assert!(matches!(r.kind, ExprKind::Binary(BinOp::Pow, _, _)));
    let a = expr("C(i,j) = min[k](A(i,k) + B(k,j))");
    let ExprKind::Reduce(ReduceOp::Min, vars, body) = &a.rhs.kind else {
        panic!("{:?}", a.rhs)
    };
    assert_eq!(vars[0].name, "k");
    assert_eq!(strip(body), "(A(i,k) Add B(k,j))");
    assert_eq!(a.rhs.span, 9..32);
}
