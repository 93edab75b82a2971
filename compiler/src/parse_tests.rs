use super::*;

fn expr(src: &str) -> Assignment {
    assignment(src, 0).unwrap_or_else(|d| panic!("{src}: {}", d.plain()))
}

fn err(src: &str) -> Diagnostic {
    assignment(src, 0).expect_err(src)
}

#[test]
fn spmv_parses_with_spans() {
    let a = expr("y(i) = A(i,j) * x(j)");
    assert_eq!(a.lhs.tensor.name, "y");
    assert_eq!(a.lhs.span, 0..4);
    assert!(!a.accumulate);
    let ExprKind::Binary(BinOp::Mul, l, r) = &a.rhs.kind else { panic!("{:?}", a.rhs) };
    let ExprKind::Access(acc) = &l.kind else { panic!() };
    assert_eq!(acc.tensor.name, "A");
    assert_eq!(acc.indices.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["i", "j"]);
    assert_eq!(acc.span, 7..13);
    assert_eq!(r.span, 16..20);
}
