//! Paths checked before anything is built: a build takes seconds, so a missing input or an
//! output directory that does not exist must be found first, with an error naming the path
//! and the flag it came from (not the cached binary the copy would have started from).

use anyhow::bail;
use std::path::Path;
use tessera_formats::{output_path_problem, FileKind};

/// `-o PATH`: its directory exists (and is a directory), and `PATH` is not itself one.
pub fn check_output(path: &Path, flag: &str) -> anyhow::Result<()> {
    if path.as_os_str().is_empty() {
        bail!("`{flag}` names no file");
    }
    if let Some(why) = output_path_problem(path) {
        bail!("`{flag} {}`: {why}", path.display());
    }
    Ok(())
}

/// `-o PATH` of `run`: also a tensor file's extension, which the program would otherwise
/// refuse only after the build.
pub fn check_tensor_output(path: &Path, flag: &str) -> anyhow::Result<()> {
    check_output(path, flag)?;
    if let Err(e) = FileKind::of(path) {
        bail!("`{flag} {}`: {e}", path.display());
    }
    Ok(())
}

/// `-i NAME=PATH`: each path is an existing file with a tensor file's extension, and no
/// name is given twice (the program refuses both, but only after the build).
pub fn check_inputs(inputs: &[String]) -> anyhow::Result<()> {
    let mut seen = Vec::new();
    for i in inputs {
        let Some((name, path)) = i.split_once('=') else {
            continue; // the program reports the malformed flag with its usage
        };
        if seen.contains(&name) {
            bail!("`-i {i}`: `{name}` is given twice");
        }
        seen.push(name);
        let p = Path::new(path);
        if p.is_dir() {
            bail!("`-i {i}`: {path} is a directory, not a tensor file");
        }
        if let Err(e) = std::fs::File::open(p) {
            bail!("`-i {i}`: cannot read {path}: {e}");
        }
        if let Err(e) = FileKind::of(p) {
            bail!("`-i {i}`: {e}");
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

        let a = format!("A={}", dir.path().join("a.tns").display());
        let e = check_inputs(&[a.clone(), a.clone()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("given twice"), "{e}");
        std::fs::write(dir.path().join("a.txt"), "1 1 1.0\n").unwrap();
        let e = check_inputs(&[format!("A={}", dir.path().join("a.txt").display())]);
        assert!(e.unwrap_err().to_string().contains("extension"));
        let e = check_tensor_output(&dir.path().join("y.txt"), "-o").unwrap_err();
        assert!(e.to_string().contains("extension"), "{e}");
        check_tensor_output(&dir.path().join("y.tns"), "-o").unwrap();
    }
}
