//! From a checked, lowered statement to an executable: the generated crate around a kernel
//! (a `main` that reads inputs, checks them, runs the kernel and writes the output), its
//! offline cargo build, and the compile cache `tessera run` uses.
//!
//! The generated crate depends only on the workspace's `tessera-formats` (by path) and
//! `rayon`. It is built with the workspace's `Cargo.lock` and one shared target directory
//! under the cache, so builds are offline and only the kernel crate itself is compiled after
//! the first one. Everything is written to a temporary directory and renamed into place, so
//! an interrupted build never leaves a half-written crate or binary behind.

use crate::check::Checked;
use crate::ir::Kernel;
use std::path::{Path, PathBuf};
use std::process::Command;
use tessera_formats::ValueType;

/// The verbatim sources copied into every generated crate.
const TEMPLATE_MAIN: &str = include_str!("driver/template_main.rs");
const TEMPLATE_IO: &str = include_str!("driver/template_io.rs");
/// How the program computes: the plain kernel on rayon's pool, or a distribution plan's
/// block tasks on tessera-runtime.
const TEMPLATE_COMPUTE: &str = include_str!("driver/template_compute.rs");
const TEMPLATE_PLANNED: &str = include_str!("driver/template_planned.rs");
// bind.rs lives in tessera-kernel-rt (what `tensor!` needs at run time) and is copied as is.
const BIND: &str = include_str!("../../kernel-rt/src/bind.rs");

/// Why a program could not be generated or built.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("cannot find the Tessera workspace at {0} (it must contain formats/Cargo.toml); set TESSERA_WORKSPACE to the repository root")]
    Workspace(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the statement's distribution plan could not be made:\n{0}")]
    Plan(String),
    #[error("the generated kernel is not valid Rust (a bug in tessera-compiler): {0}")]
    Unparsable(String),
    #[error("could not run cargo ({cargo}): {source}")]
    CargoMissing {
        cargo: String,
        source: std::io::Error,
    },
    #[error("cargo failed to build the generated crate in {dir}:\n{stderr}")]
    Cargo { dir: PathBuf, stderr: String },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> DriverError + '_ {
    move |source| DriverError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Choices that change the generated program (all of them are in its sources, so in its
/// cache key: an f32 program never reuses an f64 one's build).
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The value type the program computes in and writes.
    pub value: ValueType,
    /// 64-bit coordinates instead of 32-bit.
    pub wide_index: bool,
    /// The schedule distributes the statement (`split`): the program runs its plan's block
    /// tasks on tessera-runtime, with the generated block kernel.
    pub distributed: bool,
    /// With `distributed`: the program links MPI and, started by `mpirun`, runs the plan
    /// across the job's ranks (`tessera compile --mpi`).
    pub mpi: bool,
}

impl Default for Options {
    /// f64 values, 32-bit coordinates, the plain kernel.
    fn default() -> Self {
        Options {
            value: ValueType::F64,
            wide_index: false,
            distributed: false,
            mpi: false,
        }
    }
}

/// The files of a generated crate, and the key that names it in the cache.
#[derive(Clone, Debug)]
pub struct GeneratedCrate {
    /// `(path relative to the crate root, contents)`.
    pub files: Vec<(String, String)>,
    /// Hash of everything that affects the build.
    pub key: String,
    /// Package and binary name.
    pub name: String,
}

/// Pretty-prints generated tokens as a Rust file.
pub fn pretty(tokens: proc_macro2::TokenStream) -> Result<String, DriverError> {
    let file: syn::File =
        syn::parse2(tokens).map_err(|e| DriverError::Unparsable(e.to_string()))?;
    Ok(prettyplease::unparse(&file))
}

/// The root of the Tessera workspace whose `tessera-formats` generated crates use.
pub fn workspace_root() -> Result<PathBuf, DriverError> {
    let root = match std::env::var_os("TESSERA_WORKSPACE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    };
    let root = root.canonicalize().unwrap_or(root);
    if root.join("formats/Cargo.toml").is_file() {
        Ok(root)
    } else {
        Err(DriverError::Workspace(root))
    }
}

/// Where compiled programs are cached: `$TESSERA_CACHE`, else `$XDG_CACHE_HOME/tessera`,
/// else `~/.cache/tessera`.
pub fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("TESSERA_CACHE") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(p).join("tessera");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache/tessera"),
        None => std::env::temp_dir().join("tessera-cache"),
    }
}

pub use crate::codegen::signature_source;

/// Generates the crate for a statement: `statement` is its text (shown by `--help`).
pub fn generate(
    c: &Checked,
    kernel: &Kernel,
    statement: &str,
    opts: Options,
) -> Result<GeneratedCrate, DriverError> {
    let workspace = workspace_root()?;
    let inputs = kernel.inputs();
    let (kernel_mods, compute, kernel_src) = if opts.distributed {
        // The kernel the program's plan will be rebuilt from at start, from the same text.
        let (k, _) = crate::plan::from_text(statement).map_err(DriverError::Plan)?;
        let compute = TEMPLATE_PLANNED.replace(
            "@FINGERPRINT@",
            &format!("{:#x}", crate::plan::kernel_fingerprint(&k)),
        );
        let src = pretty(crate::codegen::emit_block(&k))?;
        ("mod kernel_block;", compute, ("src/kernel_block.rs", src))
    } else {
        let src = pretty(crate::codegen::emit(kernel))?;
        (
            "mod kernel;",
            TEMPLATE_COMPUTE.to_string(),
            ("src/kernel.rs", src),
        )
    };
    let main = TEMPLATE_MAIN
        .replace("@KERNEL_MODS@", kernel_mods)
        .replace("@STATEMENT@", &format!("{statement:?}"))
        .replace("@SIGNATURE@", &signature_source(c, &inputs, "bind"))
        .replace("@VALUE@", opts.value.name())
        .replace("@INDEX@", if opts.wide_index { "u64" } else { "u32" });
    let mut files = vec![
        ("src/main.rs".to_string(), main),
        ("src/io.rs".to_string(), TEMPLATE_IO.to_string()),
        ("src/bind.rs".to_string(), BIND.to_string()),
        ("src/compute.rs".to_string(), compute),
        (kernel_src.0.to_string(), kernel_src.1),
    ];
    // A planned program also compiles the compiler (its plans) and the runtime.
    let crates: &[&str] = if opts.distributed {
        &["formats", "compiler", "runtime", "kernel-rt"]
    } else {
        &["formats"]
    };
    // The MPI transport is the runtime's feature; the program's own feature of the same name
    // selects its MPI launch path (`compute::with_ranks`).
    let features = if opts.mpi {
        "[features]\ndefault = [\"mpi\"]\nmpi = [\"tessera-runtime/mpi\"]\n\n"
    } else if opts.distributed {
        "[features]\nmpi = [\"tessera-runtime/mpi\"]\n\n"
    } else {
        ""
    };
    let key = cache_key(&files, &workspace, crates, features);
    let name = format!("tessera-prog-{key}");
    let path_dep = |krate: &str, extra: &str| {
        format!(
            "tessera-{krate} = {{ path = {:?}{extra} }}\n",
            workspace.join(krate).display().to_string()
        )
    };
    let mut deps = path_dep("formats", "");
    if opts.distributed {
        // The compiler without its command line and code generation: plans and interpreter.
        deps += &path_dep("compiler", ", default-features = false");
        deps += &path_dep("runtime", "");
    }
    // Everything in cargo's default 16 codegen units, so both cores build each crate: the
    // first program ever built (tessera-formats is most of it) took 48.8 s with the
    // dependencies in one unit and 30.8 s in 16; a new statement's crate 19 s in one unit
    // and 11 s in 16 (distributed SpMV). Reading inputs, the kernel and writing took the same
    // either way (4 M-entry CSR SpMV from .tcs and from .tns, 5 interleaved runs).
    let manifest = format!(
        "[package]\nname = {name:?}\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n\
         {features}[dependencies]\n{deps}rayon = \"1\"\nindicatif = \"0.18\"\nctrlc = {{ version = \"3\", features = [\"termination\"] }}\n\n\
         # A crate of its own, not a member of any enclosing workspace.\n[workspace]\n"
    );
    files.push(("Cargo.toml".to_string(), manifest));
    Ok(GeneratedCrate { files, key, name })
}

/// FNV-1a over everything that affects the build: stable across runs and Rust versions
/// (unlike `DefaultHasher`), which a cache on disk needs.
fn cache_key(
    files: &[(String, String)],
    workspace: &Path,
    crates: &[&str],
    features: &str,
) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes.iter().chain([0xffu8].iter()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    feed(env!("CARGO_PKG_VERSION").as_bytes());
    feed(workspace.to_string_lossy().as_bytes());
    feed(features.as_bytes());
    // The sources of the workspace crates are compiled into the program too: a change there
    // must not reuse a program built against the old ones.
    for krate in crates {
        for (path, bytes) in crate_sources(&workspace.join(krate)) {
            feed(path.to_string_lossy().as_bytes());
            feed(&bytes);
        }
    }
    for (path, text) in files {
        feed(path.as_bytes());
        feed(text.as_bytes());
    }
    format!("{h:016x}")
}

/// A crate's `Cargo.toml`, `build.rs` and every file under its `src`, sorted by path
/// (unreadable files are skipped: they would fail the build anyway).
fn crate_sources(krate: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![krate.join("src")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path, bytes));
            }
        }
    }
    for file in ["Cargo.toml", "build.rs"] {
        if let Ok(bytes) = std::fs::read(krate.join(file)) {
            out.push((krate.join(file), bytes));
        }
    }
    out.sort();
    out
}

/// The cached executable for a generated crate, if one was built before.
pub fn cached_binary(g: &GeneratedCrate, cache: &Path) -> Option<PathBuf> {
    let bin = cache.join("bin").join(&g.name);
    bin.is_file().then_some(bin)
}

/// Builds a generated crate (or reuses the cached build) and returns the executable's path
/// in the cache. `progress` shows a spinner while cargo runs.
pub fn build(g: &GeneratedCrate, cache: &Path, progress: bool) -> Result<PathBuf, DriverError> {
    if let Some(bin) = cached_binary(g, cache) {
        return Ok(bin);
    }
    let dir = write_crate(g, cache)?;
    let target = cache.join("target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let started = std::time::Instant::now();
    // On a terminal a spinner; otherwise (CI logs, pipes) one line per phase, so a build of
    // tens of seconds is never silent.
    let spinner = progress.then(|| spinner(&g.name));
    if !progress {
        eprintln!(
            "tessera: building program {} with cargo (once per statement, formats and schedule; \
             later runs reuse it)",
            g.name
        );
    }
    let mut command = Command::new(&cargo);
    command.args(["build", "--release", "--offline", "--quiet"]);
    if cfg!(target_arch = "x86_64") {
        // Hot loops in one 64-byte fetch window, as in the workspace's `.cargo/config.toml`
        // (which says why); the user's RUSTFLAGS or target rustflags still take precedence.
        command.args([
            "--config",
            r#"build.rustflags=["-C", "llvm-args=-align-loops=64"]"#,
        ]);
    }
    let output = command
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .map_err(|source| DriverError::CargoMissing {
            cargo: cargo.clone(),
            source,
        })?;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    if !output.status.success() {
        return Err(DriverError::Cargo {
            dir,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    if !progress {
        eprintln!(
            "tessera: built {} in {:.1} s",
            g.name,
            started.elapsed().as_secs_f64()
        );
    }
    let built = target.join("release").join(&g.name);
    let bin_dir = cache.join("bin");
    std::fs::create_dir_all(&bin_dir).map_err(io_err(&bin_dir))?;
    let bin = bin_dir.join(&g.name);
    copy_atomically(&built, &bin)?;
    Ok(bin)
}

/// Writes the crate under `cache/crates/NAME` (temporary directory, then rename) with the
/// workspace's `Cargo.lock`, so cargo resolves the same versions offline.
fn write_crate(g: &GeneratedCrate, cache: &Path) -> Result<PathBuf, DriverError> {
    let crates = cache.join("crates");
    let dir = crates.join(&g.name);
    if dir.join("Cargo.toml").is_file() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&crates).map_err(io_err(&crates))?;
    let tmp = crates.join(format!(".{}.{}.tmp", g.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    for (rel, text) in &g.files {
        let path = tmp.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        std::fs::write(&path, text).map_err(io_err(&path))?;
    }
    let lock = workspace_root()?.join("Cargo.lock");
    if lock.is_file() {
        std::fs::copy(&lock, tmp.join("Cargo.lock")).map_err(io_err(&lock))?;
    }
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another process finished the same crate first: use theirs.
        Err(_) if dir.join("Cargo.toml").is_file() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(DriverError::Io {
            path: dir,
            source: e,
        }),
    }
}

/// Copies `from` to `to` through a temporary file in `to`'s directory.
pub fn copy_atomically(from: &Path, to: &Path) -> Result<(), DriverError> {
    let dir = to
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        to.file_name().and_then(|n| n.to_str()).unwrap_or("prog"),
        std::process::id()
    ));
    // Blame the side that failed: a missing source, else the destination's directory.
    std::fs::copy(from, &tmp).map_err(|e| DriverError::Io {
        path: if from.is_file() {
            tmp.clone()
        } else {
            from.to_path_buf()
        },
        source: e,
    })?;
    std::fs::rename(&tmp, to).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        DriverError::Io {
            path: to.to_path_buf(),
            source: e,
        }
    })
}

fn spinner(name: &str) -> indicatif::ProgressBar {
    let s = indicatif::ProgressBar::new_spinner();
    s.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    s.set_message(format!("building {name} (cargo build --release --offline)"));
    s.enable_steady_tick(std::time::Duration::from_millis(120));
    s
}

#[cfg(test)]
#[path = "driver_tests.rs"]
mod tests;
