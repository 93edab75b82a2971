//! The comparison the held-out `tensor!` program suites share: a program run twice on every
//! configured runtime (traces recorded the first time replay the second) must give bitwise
//! what it gave on the plain runtime.

use proptest::prelude::*;
use tessera::runtime::Runtime;

/// Runs `run` twice on each of `configs` and fails, naming the configuration, the round and
/// the first result that differs, unless every run gives `want`.
pub fn same_on_every_runtime<T: PartialEq, E: std::fmt::Display>(
    configs: impl IntoIterator<Item = (&'static str, Runtime)>,
    want: &[T],
    run: impl Fn(&Runtime) -> Result<Vec<T>, E>,
) -> Result<(), TestCaseError> {
    for (name, rt) in configs {
        for round in 0..2 {
            let got = run(&rt).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
            prop_assert!(
                got == want,
                "{} (round {}): {:?}",
                name,
                round,
                got.iter()
                    .zip(want)
                    .position(|(g, w)| g != w)
                    .map(|k| format!("result {k} differs"))
            );
        }
    }
    Ok(())
}
