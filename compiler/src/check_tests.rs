use super::*;
use crate::parse;
use proptest::prelude::*;

fn checked(src: &str) -> Checked {
    checked_with(src, &Dims::new()).unwrap_or_else(|d| panic!("{src}: {}", d.plain()))
}

fn checked_with(src: &str, dims: &Dims) -> Result<Checked, Diagnostic> {
    let stmt = parse::program(src, 0).unwrap_or_else(|d| panic!("{src}: {}", d.plain()));
    check(stmt, dims)
}

/// Asserts that checking fails with a message containing `msg` at a span whose text is `at`.
fn fails_with(src: &str, dims: &Dims, msg: &str, at: &str) -> Diagnostic {
    let d = checked_with(src, dims).expect_err(src);
    assert!(
        d.message.contains(msg),
        "{src}: message {:?} lacks {msg:?}",
        d.message
    );
    assert_eq!(&src[d.span.clone()], at, "{src}: span of {:?}", d.message);
    d
}

fn fails(src: &str, msg: &str, at: &str) -> Diagnostic {
    fails_with(src, &Dims::new(), msg, at)
}

fn dims(list: &[(&str, &[usize])]) -> Dims {
    list.iter()
        .map(|(n, d)| (n.to_string(), d.to_vec()))
        .collect()
}

#[test]
fn spmv_has_free_and_reduction_vars() {
    let c = checked("y(i) = A(i,j) * x(j); A: csr");
    assert_eq!(c.output().name, "y");
    assert_eq!(
        c.inputs()
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["A", "x"]
    );
    assert!(c.var("i").unwrap().free);
    assert!(!c.var("j").unwrap().free);
    assert_eq!(
        c.tensor("A").unwrap().format,
        Format::parse("csr", 2).unwrap()
    );
    assert_eq!(c.tensor("x").unwrap().format, Format::dense(1));
    assert_eq!(c.terms.len(), 1);
    assert_eq!(c.terms[0].reduction, ["j"]);
}

#[test]
fn terms_carry_sign_and_their_own_reductions() {
    let c = checked("y(i) = A(i,j)*x(j) - (z(i) - B(i,k)*w(k))");
    let t: Vec<(bool, Vec<String>)> = c
        .terms
        .iter()
        .map(|t| (t.negated, t.reduction.clone()))
        .collect();
    assert_eq!(
        t,
        [
            (false, vec!["j".to_string()]),
            (true, vec![]),
            (false, vec!["k".to_string()])
        ]
    );
    let c = checked("a = B(i,j,k) * B(i,j,k)");
    assert_eq!(c.tensors.len(), 2, "a tensor used twice is one tensor");
    assert_eq!(c.terms[0].reduction, ["i", "j", "k"]);
}

#[test]
fn dims_are_agreed_and_recorded() {
    let d = dims(&[("A", &[3, 4]), ("x", &[4])]);
    let c = checked_with("y(i) = A(i,j) * x(j)", &d).unwrap();
    assert_eq!(c.var("i").unwrap().dim, Some(3));
    assert_eq!(c.var("j").unwrap().dim, Some(4));
    let e = fails_with(
        "y(i) = A(i,j) * x(j)",
        &dims(&[("A", &[3, 4]), ("x", &[5])]),
        "dimension mismatch for index `j`: 5 in mode 0 of `x` but 4 in mode 1 of `A`",
        "j",
    );
    assert_eq!(e.related.len(), 1);
    fails_with(
        "y(i) = A(i,j) * x(j)",
        &dims(&[("A", &[3, 4, 2])]),
        "`A` has 3 modes",
        "A(i,j)",
    );
}

#[test]
fn semantic_errors_point_at_the_culprit() {
    fails(
        "y(i) = A(i,j) * A(j)",
        "`A` is used with 1 indices here but 2 before",
        "A(j)",
    );
    fails("A(i,i) = x(i)", "appears twice in one access of `A`", "i");
    let d = fails("y(i) = sinh(x(i))", "unknown function `sinh`", "sinh");
    let hint = d.hint.unwrap();
    assert!(
        hint.contains("tanh(x)") && hint.contains("max(x, y)"),
        "{hint}"
    );
    assert!(hint.contains("in `tensor!`, a Rust function"), "{hint}");
    // `tensor!` accepts it: a call of the Rust function in scope.
    let stmt = crate::parse::program("y(i) = sinh(x(i)) * 2", 0).unwrap();
    let c = check_tensor_macro(stmt, &Dims::new()).unwrap();
    let k = crate::lower::lower(&c).unwrap();
    assert_eq!(k.user_functions, vec!["sinh".to_string()]);
    fails(
        "y(i) = A(i,j) + min[j](B(i,j))",
        "must be the whole right-hand side",
        "min[j](B(i,j))",
    );
    fails(
        "y(i) += min[j](B(i,j))",
        "`+=` adds to the output",
        "min[j](B(i,j))",
    );
    fails("y(i) = min[i](B(i,j))", "`i` indexes the output", "i");
    fails("y(i) = min[j,k](B(i,j))", "`k` is not used", "k");
    fails("C(i,j) = min[k](A(i,k) + B(l,j))", "`l` is reduced", "l");
    // A distribution schedule of a `min` reduction is checked like a sum's.
    checked("y(i) = min[j](B(i,j)); split(j, jo, ji, 2); extend(jo)");
    fails(
        "y(i) = A(i,j) * y(j)",
        "the output `y` also appears on the right-hand side",
        "y(j)",
    );
    fails(
        "y(i,k) = A(i,j) * x(j)",
        "output index `k` does not appear",
        "k",
    );
    fails(
        "y(i) = A(i,j) * j",
        "used both as an index variable and as a tensor",
        "j",
    );
    fails(
        "y(i) = A(i,j) * x(j); B: csr",
        "not a tensor of the statement",
        "B",
    );
    fails(
        "y(i) = A(i,j) * x(j); A: csr; A: dense",
        "two formats are given for `A`",
        "A: dense",
    );
    fails("y(i) = A(i,j) * x(j); A: sss", "bad format for `A`", "sss");
    fails("y(i) = A(i,j) * x(j); x: csr", "bad format for `x`", "csr");
    fails(
        "y(i) = A(i,j) * x(j); A: ds:0,0",
        "bad format for `A`",
        "ds:0,0",
    );
}

#[test]
fn schedule_errors_point_at_the_culprit() {
    fails(
        "y(i) = A(i,j) * x(j); split(k, ko, ki, 2)",
        "not an index variable",
        "k",
    );
    fails(
        "y(i) = A(i,j) * x(j); split(i, io, ii, 2); split(i, a, b, 2)",
        "split twice",
        "i",
    );
    fails(
        "y(i) = A(i,j) * x(j); split(i, j, ii, 2)",
        "already names an index variable",
        "j",
    );
    fails(
        "y(i) = A(i,j) * x(j); order(i)",
        "not the outer variable of a split",
        "i",
    );
    fails(
        "y(i) = A(i,j) * x(j); split(i, io, ii, 2); order(io, io)",
        "named twice",
        "io",
    );
    fails(
        "y(i) = A(i,j) * x(j); split(i, io, ii, 2); extend(io)",
        "only reduction variables are extended",
        "io",
    );
    // Across directives too: `map(io); map(io)` was accepted, and the statement then failed
    // when it ran, on one rank as well, with the runtime's `BadShardKey` (launch dimension 0
    // named twice in the sharding key).
    let src = "y(i) = A(i,j) * x(j); split(i, io, ii, 2); map(io); map(io)";
    let d = fails(src, "`io` is named twice in `map`", "io");
    assert_eq!(d.span.start, src.rfind("io").unwrap(), "the second `io`");
    fails(
        "y(i) = A(i,j) * x(j); split(i, io, ii, 2); split(j, jo, ji, 2); map(io, jo); map(jo)",
        "`jo` is named twice in `map`",
        "jo",
    );
    fails(
        "y(i) = A(i,j) * x(j); split(j, jo, ji, 2); extend(jo); extend(jo)",
        "`jo` is named twice in `extend`",
        "jo",
    );
    // Different variables in separate `map`s stay one key.
    let c =
        checked("y(i) = A(i,j) * x(j); split(i, io, ii, 2); split(j, jo, ji, 2); map(io); map(jo)");
    assert_eq!(c.schedule.map, ["io", "jo"]);
    fails(
        "y(i) = A(i,j) * x(j); parallelize(j)",
        "parallelizing it would race",
        "j",
    );
    fails(
        "y(i) = A(i,j) * x(j); parallelize(i); parallelize(i)",
        "`parallelize` is given twice",
        "parallelize(i)",
    );
    fails_with(
        "y(i) = A(i,j) * x(j); split(j, jo, ji, [2, 9])",
        &dims(&[("A", &[3, 4])]),
        "split point 9 is not inside `j`",
        "split(j, jo, ji, [2, 9])",
    );
    let c = checked("y(i) = A(i,j) * x(j); split(i, io, ii, 2); split(j, jo, ji, [2]); order(jo, io); extend(jo); map(io); parallelize(ii)");
    assert_eq!(c.schedule.splits.len(), 2);
    assert_eq!(
        c.schedule.order.as_deref(),
        Some(&["jo".to_string(), "io".to_string()][..])
    );
    assert_eq!(c.schedule.extend, ["jo"]);
    assert_eq!(c.schedule.map, ["io"]);
    // The inner variable of a split parallelizes its statement variable's loop.
    assert_eq!(c.schedule.parallelize.as_deref(), Some("i"));
}

/// `parallelize` of a split's block variable passes the checker and lowers (the two agree).
#[test]
fn parallelize_of_a_block_variable_lowers() {
    for s in [
        "split(i,io,ii,4); parallelize(io)",
        "split(i,io,ii,4); parallelize(ii)",
    ] {
        let c = checked(&format!("y(i) = A(i,j) * x(j); A: csr; {s}"));
        assert_eq!(c.schedule.parallelize.as_deref(), Some("i"), "{s}");
        let k = crate::lower::lower(&c).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(k.parallel, Some(0), "{s}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The checker accepts exactly the dimension assignments in which every index variable has
    /// one extent; and the run-time check in `bind` agrees with it.
    #[test]
    fn dimension_agreement_matches_bind(a in prop::collection::vec(1usize..4, 3), b in prop::collection::vec(1usize..4, 2), x in 1usize..4) {
        // C(i,k) = A(i,j,l) * B(l,k) * x(j)
        let src = "C(i,k) = A(i,j,l) * B(l,k) * x(j)";
        let d = dims(&[("A", &a), ("B", &b), ("x", &[x])]);
        let consistent = a[2] == b[0] && a[1] == x;
        let result = checked_with(src, &d);
        prop_assert_eq!(result.is_ok(), consistent);
        let c = checked(src);
        let dense = Format::dense(3);
        let (f2, f1) = (Format::dense(2), Format::dense(1));
        let sig = crate::bind::Signature {
            output: crate::bind::Operand { name: "C", format: "dd", uses: &[&["i", "k"]] },
            inputs: &[
                crate::bind::Operand { name: "A", format: "ddd", uses: &[&["i", "j", "l"]] },
                crate::bind::Operand { name: "B", format: "dd", uses: &[&["l", "k"]] },
                crate::bind::Operand { name: "x", format: "d", uses: &[&["j"]] },
            ],
        };
        let xd = [x];
        let bound = sig.bind(&[(&a[..], &dense), (&b[..], &f2), (&xd[..], &f1)]);
        prop_assert_eq!(bound.is_ok(), consistent);
        if let Ok(out) = bound {
            prop_assert_eq!(out, vec![a[0], b[1]]);
            let checked = result.unwrap();
            prop_assert_eq!(checked.var("i").unwrap().dim, Some(a[0]));
        }
        prop_assert_eq!(c.vars.len(), 4);
    }
}

#[test]
fn bind_names_tensor_mode_and_both_dims() {
    let sig = crate::bind::Signature {
        output: crate::bind::Operand {
            name: "y",
            format: "d",
            uses: &[&["i"]],
        },
        inputs: &[
            crate::bind::Operand {
                name: "A",
                format: "ds",
                uses: &[&["i", "j"]],
            },
            crate::bind::Operand {
                name: "x",
                format: "d",
                uses: &[&["j"]],
            },
        ],
    };
    let csr = Format::parse("csr", 2).unwrap();
    let csc = Format::parse("csc", 2).unwrap();
    let v = Format::dense(1);
    let e = sig.bind(&[(&[3, 4], &csr), (&[5], &v)]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "dimension mismatch for index `j`: mode 0 of `x` has dimension 5, but mode 1 of `A` has 4"
    );
    let e = sig.bind(&[(&[3, 4], &csc), (&[4], &v)]).unwrap_err();
    assert!(
        e.to_string()
            .contains("`A` is stored as `ds:1,0`, but the kernel was compiled for `ds`"),
        "{e}"
    );
    let e = sig.bind(&[(&[3], &v), (&[4], &v)]).unwrap_err();
    assert!(e.to_string().contains("`A` has 1 modes"), "{e}");
    assert_eq!(sig.bind(&[(&[3, 4], &csr), (&[4], &v)]).unwrap(), vec![3]);
}

#[test]
fn bind_checks_every_use_of_a_tensor() {
    // C(i,j) = A(i,k) * A(k,j): A's two uses tie both of its modes to k.
    let sig = crate::bind::Signature {
        output: crate::bind::Operand {
            name: "C",
            format: "ds",
            uses: &[&["i", "j"]],
        },
        inputs: &[crate::bind::Operand {
            name: "A",
            format: "ds",
            uses: &[&["i", "k"], &["k", "j"]],
        }],
    };
    let csr = Format::parse("csr", 2).unwrap();
    assert_eq!(sig.bind(&[(&[3, 3], &csr)]).unwrap(), vec![3, 3]);
    let e = sig.bind(&[(&[3, 4], &csr)]).unwrap_err();
    assert!(
        matches!(&e, crate::bind::BindError::Dim { var, .. } if var == "k"),
        "{e}"
    );
}

#[test]
fn bind_cached_checks_every_call_against_the_signature_not_the_first_call() {
    // The cache holds the signature's parsed formats: a call with another format after a
    // good one (or a good one after a bad one) is judged afresh, as `bind` judges it.
    let sig = crate::bind::Signature {
        output: crate::bind::Operand {
            name: "y",
            format: "d",
            uses: &[&["i"]],
        },
        inputs: &[
            crate::bind::Operand {
                name: "A",
                format: "ds",
                uses: &[&["i", "j"]],
            },
            crate::bind::Operand {
                name: "x",
                format: "d",
                uses: &[&["j"]],
            },
        ],
    };
    let csr = Format::parse("csr", 2).unwrap();
    let csc = Format::parse("csc", 2).unwrap();
    let v = Format::dense(1);
    for first in [&csr, &csc] {
        let cache = crate::bind::FormatCache::new();
        for f in [first, &csc, &csr, &csr, &csc] {
            let cached = sig.bind_cached(&cache, &[(&[3, 4], f), (&[4], &v)]);
            assert_eq!(cached, sig.bind(&[(&[3, 4], f), (&[4], &v)]), "{f}");
            assert_eq!(cached.is_ok(), f == &csr, "{f}");
        }
        let e = sig.bind_cached(&cache, &[(&[3, 4], &csr), (&[5], &v)]);
        assert!(
            matches!(e, Err(crate::bind::BindError::Dim { .. })),
            "{e:?}"
        );
    }
}
