//! What the `tessera-data` CLI tests share: running the binary, expecting success or a
//! clean failure, and a small disk that fills up.
#![allow(dead_code, unused_imports)] // each test file uses its own part

mod tmpfs;

use std::path::Path;
use std::process::{Command, Output};

/// The binary, not yet started.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tessera-data"))
}

/// Runs `tessera-data ARGS` in `dir`.
pub fn run(dir: &Path, args: &[&str]) -> Output {
    bin()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("binary runs")
}

/// Asserts success; returns stdout and stderr.
pub fn ok(o: Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    text
}

/// Asserts a failure with an exit status (not death by a signal); returns stderr.
pub fn failed(o: Output) -> String {
    let text = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "expected a failure: {text}");
    assert!(
        o.status.code().is_some(),
        "killed by a signal instead of failing: {:?}\n{text}",
        o.status
    );
    text
}

pub use tmpfs::Tmpfs;

/// A `.tcs` file's contents in the contiguous layout: equal for equal tensors, however the
/// writer segmented the arrays (a converted file's extents follow its parse blocks).
pub fn tcs_bytes(path: &Path) -> Vec<u8> {
    tessera_formats::TcsFile::open(path)
        .unwrap()
        .contiguous_bytes()
}
