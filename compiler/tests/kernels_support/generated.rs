//! Building and running a crate of generated kernels: one crate per test, built once with
//! cargo (offline, against this workspace's Cargo.lock and tessera-formats), sharing one
//! target directory so the dependencies are compiled once for every such test.

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_formats::{Level, Tensor};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Exact `f64` literals (NaN and infinities included).
pub fn lit(v: f64) -> String {
    format!("f64::from_bits({:#x})", v.to_bits())
}

/// Rust code that rebuilds `t` with value type `v` and index type `i`, levels as they are
/// (dense offsets included).
pub fn tensor_code(t: &Tensor<f64, u64>, v: &str, i: &str) -> String {
    let levels: Vec<String> = t
        .levels()
        .iter()
        .map(|l| match l {
            Level::Dense { size, offset } => {
                format!("Level::Dense {{ size: {size}, offset: {offset} }}")
            }
            Level::Compressed { pos, crd } => format!(
                "Level::Compressed {{ pos: Vec::<{i}>::from({pos:?}), crd: Vec::<{i}>::from({crd:?}) }}"
            ),
            Level::Singleton { crd } => {
                format!("Level::Singleton {{ crd: Vec::<{i}>::from({crd:?}) }}")
            }
        })
        .collect();
    let vals: Vec<String> = t
        .vals()
        .iter()
        .map(|x| format!("<{v}>::from_f64({})", lit(*x)))
        .collect();
    format!(
        "Tensor::<{v}, {i}>::from_parts(vec!{:?}, Format::parse({:?}, {}).unwrap(), vec![{}], vec![{}]).unwrap()",
        t.dims(),
        t.format().to_string(),
        t.format().rank(),
        levels.join(", "),
        vals.join(", ")
    )
}

/// Writes crate `name` (`src/kernels.rs` and `src/main.rs`, which starts with `mod kernels;`)
/// under the target directory, runs it, and returns its stdout; panics with cargo's output
/// when it does not build or exits with an error.
pub fn run_crate(name: &str, kernels: &str, main: &str) -> String {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let dir = target.join(name);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let root = workspace_root();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = {name:?}\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
             [dependencies]\ntessera-formats = {{ path = {:?} }}\nrayon = \"1.12\"\n\n[workspace]\n",
            root.join("formats")
        ),
    )
    .unwrap();
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    std::fs::write(dir.join("src/kernels.rs"), kernels).unwrap();
    std::fs::write(dir.join("src/main.rs"), format!("mod kernels;\n{main}")).unwrap();
    let run = Command::new(env!("CARGO"))
        .args(["run", "--offline", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env(
            "CARGO_TARGET_DIR",
            target.join("tessera-codegen-check-target"),
        )
        .output()
        .expect("cargo runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "generated crate failed ({}):\n{stdout}\n{stderr}",
        dir.display()
    );
    stdout
}
