//! A small disk that fills up, for the fault tests of `tessera-data` and of compiled
//! programs (`compiler/tests/output_faults.rs` includes this file by path).

use std::path::Path;
use std::process::Command;

/// A small tmpfs that fills up: mounted over a fresh directory, unmounted on drop.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (after saying why) where mounting is not allowed.
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match o {
            Ok(o) if o.status.success() => Some(Tmpfs { dir }),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: cannot mount a tmpfs (needs root): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount: {e}");
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
