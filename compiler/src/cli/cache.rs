//! `tessera cache`: where the compiled programs are, how much room they take, `clean`, and
//! the size limit kept after every build.
//!
//! The cache (see [`crate::driver::cache_dir`]) holds, per program, its executable under
//! `bin/NAME` and its crate under `crates/NAME`, plus one cargo target directory shared by
//! all builds (`target/`: the dependencies, built once, and each program's artefacts). The
//! limit (`TESSERA_CACHE_LIMIT` in MiB, default 4096) is kept by removing the programs used
//! least recently (a run touches its executable) with their artefacts; when the shared
//! dependencies alone exceed it, the target directory goes too and the next build rebuilds it.

use anyhow::Context;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use crate::driver;

#[derive(Debug, Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    pub action: CacheAction,
}

#[derive(Debug, Subcommand)]
pub enum CacheAction {
    /// Print the cache directory, its size and its limit.
    Info,
    /// Remove every cached program and build.
    Clean,
}

/// The default limit, in MiB.
const DEFAULT_LIMIT_MIB: u64 = 4096;

/// The limit in bytes: `TESSERA_CACHE_LIMIT` (MiB), else 4 GiB.
pub fn limit() -> anyhow::Result<u64> {
    match std::env::var("TESSERA_CACHE_LIMIT") {
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .map(|mib| mib.saturating_mul(1 << 20))
            .with_context(|| format!("TESSERA_CACHE_LIMIT={v}: expected a size in MiB, e.g. 2048")),
        Err(_) => Ok(DEFAULT_LIMIT_MIB << 20),
    }
}

pub fn run(args: CacheArgs) -> anyhow::Result<ExitCode> {
    let dir = driver::cache_dir();
    match args.action {
        CacheAction::Info => {
            let programs = programs(&dir).len();
            let limit = limit()? >> 20;
            super::write_stdout(format_args!(
                "cache:    {}\nsize:     {:.1} MiB in {programs} program(s)\nlimit:    {limit} MiB (TESSERA_CACHE_LIMIT)\n",
                dir.display(),
                size_of(&dir) as f64 / (1 << 20) as f64
            ));
        }
        CacheAction::Clean => {
            let freed = size_of(&dir);
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("removing {}", dir.display()))?;
            }
            super::write_stdout(format_args!(
                "removed {} ({:.1} MiB)\n",
                dir.display(),
                freed as f64 / (1 << 20) as f64
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Marks a program as just used, so the limit removes it last.
pub fn touch(bin: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(bin) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// Removes least recently used programs until the cache is within `limit` bytes; `keep` (the
/// program just built or run) is never removed. Returns the bytes freed.
pub fn enforce(dir: &Path, limit: u64, keep: &Path) -> u64 {
    let mut size = size_of(dir);
    if size <= limit {
        return 0;
    }
    let before = size;
    let mut progs = programs(dir);
    progs.sort_by_key(|(_, used)| *used);
    for (name, _) in progs {
        if size <= limit {
            break;
        }
        if keep.file_name().is_some_and(|k| k == name.as_str()) {
            continue;
        }
        for p in artefacts(dir, &name) {
            remove(&p);
        }
        size = size_of(dir);
    }
    if size > limit {
        // The shared dependencies alone are over the limit: rebuilt by the next build.
        remove(&dir.join("target"));
        size = size_of(dir);
    }
    before.saturating_sub(size)
}

/// Everything a program owns in the cache: executable, crate and build artefacts.
fn artefacts(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = vec![dir.join("bin").join(name), dir.join("crates").join(name)];
    let release = dir.join("target/release");
    let stem = name.replace('-', "_");
    for sub in [
        release.clone(),
        release.join("deps"),
        release.join(".fingerprint"),
    ] {
        if let Ok(entries) = std::fs::read_dir(&sub) {
            for e in entries.flatten() {
                let f = e.file_name().to_string_lossy().into_owned();
                if f == name
                    || f.starts_with(&format!("{name}-"))
                    || f.starts_with(&format!("{stem}-"))
                {
                    out.push(e.path());
                }
            }
        }
    }
    out
}

fn remove(p: &Path) {
    if p.is_dir() {
        let _ = std::fs::remove_dir_all(p);
    } else {
        let _ = std::fs::remove_file(p);
    }
}

/// The cached programs with the time each was last used.
fn programs(dir: &Path) -> Vec<(String, SystemTime)> {
    let Ok(entries) = std::fs::read_dir(dir.join("bin")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let used = e.metadata().ok()?.modified().ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), used))
        })
        .collect()
}

/// Bytes under `p` (symbolic links not followed).
fn size_of(p: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(p)
        .map(|entries| entries.flatten().map(|e| size_of(&e.path())).sum())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_removes_least_recently_used_programs_first() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for (n, name) in ["tessera-prog-a", "tessera-prog-b", "tessera-prog-c"]
            .iter()
            .enumerate()
        {
            std::fs::create_dir_all(d.join("bin")).unwrap();
            std::fs::create_dir_all(d.join("crates").join(name)).unwrap();
            std::fs::create_dir_all(d.join("target/release/deps")).unwrap();
            std::fs::write(d.join("bin").join(name), vec![0u8; 1000]).unwrap();
            std::fs::write(
                d.join("target/release/deps")
                    .join(format!("{}-0123", name.replace('-', "_"))),
                vec![0u8; 1000],
            )
            .unwrap();
            let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + n as u64);
            std::fs::File::options()
                .append(true)
                .open(d.join("bin").join(name))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        // `a` is the oldest but is the one in use: `b` goes first, then `c`.
        let keep = d.join("bin/tessera-prog-a");
        let freed = enforce(d, 4500, &keep);
        assert_eq!(freed, 2000);
        assert!(keep.exists());
        assert!(!d.join("bin/tessera-prog-b").exists());
        assert!(!d.join("crates/tessera-prog-b").exists());
        assert!(!d.join("target/release/deps/tessera_prog_b-0123").exists());
        assert!(d.join("bin/tessera-prog-c").exists());
        assert_eq!(enforce(d, 1 << 30, &keep), 0);
    }
}
