//! Paths checked before anything is built: a build takes seconds, so a missing input or an
//! output directory that does not exist must be found first, with an error naming the path
//! and the flag it came from (not the cached binary the copy would have started from).

use anyhow::bail;
use std::path::Path;

/// `-o PATH`: its directory exists (and is a directory), and `PATH` is not itself one.
pub fn check_output(path: &Path, flag: &str) -> anyhow::Result<()> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        bail!("`{flag}` names no file");
    }
    if path.is_dir() {
        bail!("`{flag} {shown}`: {shown} is a directory; give a file name inside it");
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        bail!(
            "`{flag} {shown}`: the directory {} does not exist (create it first)",
            dir.display()
        );
    }
    if !dir.is_dir() {
        bail!("`{flag} {shown}`: {} is not a directory", dir.display());
    }
    Ok(())
}

/// `-i NAME=PATH`: each path is an existing file.
pub fn check_inputs(inputs: &[String]) -> anyhow::Result<()> {
    for i in inputs {
        let Some((_, path)) = i.split_once('=') else {
            continue; // the program reports the malformed flag with its usage
        };
        let p = Path::new(path);
        if p.is_dir() {
            bail!("`-i {i}`: {path} is a directory, not a tensor file");
        }
        if let Err(e) = std::fs::File::open(p) {
            bail!("`-i {i}`: cannot read {path}: {e}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_directories_and_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nodir/prog");
        let e = check_output(&missing, "-o").unwrap_err().to_string();
        assert!(e.contains("nodir") && e.contains("does not exist"), "{e}");
        let e = check_output(dir.path(), "-o").unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        check_output(&dir.path().join("prog"), "-o").unwrap();

        let gone = format!("A={}", dir.path().join("a.tns").display());
        let e = check_inputs(&[gone]).unwrap_err().to_string();
        assert!(e.contains("a.tns") && e.contains("cannot read"), "{e}");
        std::fs::write(dir.path().join("a.tns"), "1 1 1.0\n").unwrap();
        check_inputs(&[format!("A={}", dir.path().join("a.tns").display())]).unwrap();
    }
}
