use super::*;
use crate::parse;

fn checked(src: &str) -> Checked {
    let stmt = parse::program(src, 0).unwrap_or_else(|d| panic!("{src}: {}", d.plain()));
    check(stmt, &Dims::new()).unwrap_or_else(|d| panic!("{src}: {}", d.plain()))
}

#[test]
fn spmv_has_free_and_reduction_vars() {
    let c = checked("y(i) = A(i,j) * x(j); A: csr");
    assert_eq!(c.output().name, "y");
    assert_eq!(c.inputs().iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["A", "x"]);
    assert!(c.var("i").unwrap().free);
    assert!(!c.var("j").unwrap().free);
    assert_eq!(c.tensor("A").unwrap().format, tessera_formats::Format::parse("csr", 2).unwrap());
    assert_eq!(c.terms.len(), 1);
    assert_eq!(c.terms[0].reduction, ["j"]);
}
