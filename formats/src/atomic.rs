//! Output files that appear only when complete: written to a temporary file in the target's
//! directory and renamed into place by [`AtomicFile::commit`]; dropped uncommitted, they vanish.
//! A program stopped by a signal does not unwind, so the temporaries being written are also
//! listed here for its signal handler to remove ([`remove_pending_files`]), as are the
//! temporary directories of text reads ([`PendingDir`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Runs a file-system call again while a signal interrupts it (`EINTR`). `write_all` and
/// `read_exact` already do; `ftruncate` (`set_len`) and `fsync` (`sync_all`) do not, and a
/// signal arriving during them (a profiler's or a fuzzer's timer, a child's SIGCHLD) would
/// otherwise fail a conversion that had nothing wrong with it.
pub fn retry_interrupted<T>(mut call: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    loop {
        match call() {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Why `path` cannot take an output file, if it cannot: it is a directory, or its directory
/// does not exist or is not one. For checks before work whose result it would hold (found
/// only when the output is written, a missing directory costs the whole computation); the
/// caller names the flag.
pub fn output_path_problem(path: &Path) -> Option<String> {
    let shown = path.display();
    if path.is_dir() {
        return Some(format!(
            "{shown} is a directory; give a file name inside it"
        ));
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        return Some(format!(
            "the directory {} does not exist (create it first)",
            dir.display()
        ));
    }
    (!dir.is_dir()).then(|| format!("{} is not a directory", dir.display()))
}

/// Temporary files of the [`AtomicFile`]s not yet committed or dropped, the [`PendingDir`]s
/// not yet dropped, and whether the process is exiting (then no new temporary may appear).
struct Pending {
    paths: Vec<PathBuf>,
    closed: bool,
}

static PENDING: Mutex<Pending> = Mutex::new(Pending {
    paths: Vec::new(),
    closed: false,
});

fn pending() -> std::sync::MutexGuard<'static, Pending> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes every temporary file an [`AtomicFile`] is still writing: for a signal handler
/// (a thread, as `ctrlc` runs it) to call just before the process exits, so that an
/// interrupted program leaves nothing half-written behind. A file renamed into place in the
/// meantime is complete and stays. Afterwards no new temporary can be created
/// ([`AtomicFile::create`] fails), so none appears between this call and the exit.
pub fn remove_pending_files() {
    let mut pending = pending();
    pending.closed = true;
    for p in std::mem::take(&mut pending.paths) {
        // A listed directory ([`PendingDir`]) goes with everything in it. Its writers may
        // still be adding files (the external sort's runs): a file made between the listing
        // and the `rmdir` fails the removal, so it is tried again.
        if std::fs::remove_file(&p).is_err() {
            for _ in 0..100 {
                if std::fs::remove_dir_all(&p).is_ok() || !p.exists() {
                    break;
                }
            }
        }
    }
}

/// A temporary directory that [`remove_pending_files`] removes with its contents, as it
/// removes an [`AtomicFile`]'s temporary; removed when dropped too. `Tensor::read` converts a
/// text file into one.
pub(crate) struct PendingDir {
    dir: tempfile::TempDir,
    _listed: Listed,
}

impl PendingDir {
    /// A new directory in `parent`, named `prefix` and random characters. Created and listed
    /// under one lock, as [`AtomicFile::create`] does, so that a signal handler either sees it
    /// or makes this fail.
    pub(crate) fn create_in(parent: &Path, prefix: &str) -> std::io::Result<PendingDir> {
        let mut pending = pending();
        if pending.closed {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "the program is stopping (interrupted by a signal)",
            ));
        }
        let dir = tempfile::Builder::new().prefix(prefix).tempdir_in(parent)?;
        pending.paths.push(dir.path().to_path_buf());
        let listed = Listed(dir.path().to_path_buf());
        Ok(PendingDir {
            dir,
            _listed: listed,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A file at a name its creator chose, listed for [`remove_pending_files`] until dropped: the
/// temporary of a file that several processes write at once (the distributed storer's, whose
/// name every rank must know, so not an [`AtomicFile`]'s private one). Dropping it does not
/// remove the file; its owner renames it into place or removes it.
pub struct PendingFile {
    _listed: Listed,
}

impl PendingFile {
    /// Creates (or truncates) `path` and lists it, under one lock as [`AtomicFile::create`]
    /// does: a signal handler either sees it listed or makes this fail.
    pub fn create(path: &Path) -> std::io::Result<(File, PendingFile)> {
        let mut pending = pending();
        if pending.closed {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "the program is stopping (interrupted by a signal)",
            ));
        }
        let file = File::create(path)?;
        pending.paths.push(path.to_path_buf());
        let listed = Listed(path.to_path_buf());
        Ok((file, PendingFile { _listed: listed }))
    }
}

/// A temporary's entry in [`PENDING`], removed when the `AtomicFile` is committed or dropped.
struct Listed(PathBuf);

impl Drop for Listed {
    fn drop(&mut self) {
        pending().paths.retain(|p| *p != self.0);
    }
}

use crate::error::{Error, Result};

/// A file being written that replaces `target` only on [`commit`](AtomicFile::commit).
pub struct AtomicFile {
    temp: tempfile::NamedTempFile,
    target: PathBuf,
    /// Whether [`commit`](AtomicFile::commit) syncs the data to disk before the rename.
    sync: bool,
    _listed: Listed,
}

impl AtomicFile {
    /// Creates the temporary file next to `target` (same file system, so rename is atomic).
    pub fn create(target: &Path) -> Result<Self> {
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // Checked first so that a missing directory gets a plain error naming it.
        std::fs::metadata(&dir).map_err(|e| Error::io(&dir, e))?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // The temporary is created and listed under one lock: a signal handler's
        // `remove_pending_files` either runs before (and this fails) or sees it listed. Were
        // it listed after creation, a signal in between would leave it behind.
        let mut pending = pending();
        if pending.closed {
            let stopped = std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "the program is stopping (interrupted by a signal)",
            );
            return Err(Error::io(target, stopped));
        }
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".partial")
            .tempfile_in(&dir)
            .map_err(|e| Error::io(target, e))?;
        pending.paths.push(temp.path().to_path_buf());
        let listed = Listed(temp.path().to_path_buf());
        drop(pending);
        // Temporary files are created private (0600); the result is an ordinary data file.
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o644);
        temp.as_file()
            .set_permissions(mode)
            .map_err(|e| Error::io(target, e))?;
        Ok(AtomicFile {
            _listed: listed,
            temp,
            target: target.to_path_buf(),
            sync: true,
        })
    }

    /// The open temporary file.
    pub fn file(&self) -> &File {
        self.temp.as_file()
    }

    /// The final path.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Whether [`commit`](Self::commit) syncs the file to disk before renaming it (the
    /// default). Without the sync the file still appears whole or not at all to every reader
    /// while the machine stays up; only a crash right after the rename could leave the new
    /// name on data that never reached the disk — which a `.tcs` reader's checksums reject.
    pub fn set_sync(&mut self, on: bool) {
        self.sync = on;
    }

    /// Whether [`commit`](Self::commit) syncs (see [`set_sync`](Self::set_sync)).
    pub fn syncs(&self) -> bool {
        self.sync
    }

    /// Flushes to disk (unless [`set_sync`](Self::set_sync) turned that off) and renames the
    /// temporary file onto the target.
    pub fn commit(self) -> Result<()> {
        let target = self.target;
        if self.sync {
            retry_interrupted(|| self.temp.as_file().sync_all())
                .map_err(|e| Error::io(&target, e))?;
            #[cfg(test)]
            SYNCED_COMMITS.with(|n| n.set(n.get() + 1));
        }
        self.temp
            .persist(&target)
            .map_err(|e| Error::io(&target, e.error))?;
        Ok(())
    }
}

#[cfg(test)]
thread_local! {
    /// Commits that synced, on this thread (tests check that an option reaches the file).
    pub(crate) static SYNCED_COMMITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::retry_interrupted;
    use std::io::{Error, ErrorKind};

    #[test]
    fn interrupted_calls_are_retried_and_other_errors_are_not() {
        let mut calls = 0;
        let ok = retry_interrupted(|| {
            calls += 1;
            if calls < 3 {
                Err(Error::from(ErrorKind::Interrupted))
            } else {
                Ok(calls)
            }
        });
        assert_eq!(ok.unwrap(), 3);
        let mut calls = 0;
        let err = retry_interrupted(|| -> std::io::Result<()> {
            calls += 1;
            Err(Error::from(ErrorKind::PermissionDenied))
        });
        assert_eq!(err.unwrap_err().kind(), ErrorKind::PermissionDenied);
        assert_eq!(calls, 1);
    }
}
