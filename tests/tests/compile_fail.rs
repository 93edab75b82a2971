//! `tensor!` errors are `compile_error!`s at the offending tokens (trybuild compares the
//! compiler's full output, spans included, with `ui/*.stderr`).

#[test]
fn statement_errors_are_compile_errors_at_their_span() {
    trybuild::TestCases::new().compile_fail("ui/*.rs");
}
