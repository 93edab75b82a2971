//! The `.tcs` reader and validator on mutated files. The first byte chooses whether the
//! checksums are recomputed after mutation (so that the mutation reaches the layout and
//! level checks behind them) or left as they are (so that the checksums themselves are
//! tested). A file the validator accepts is then walked as a kernel would walk it; a file it
//! rejects must be rejected with an error, never a panic.
#![no_main]
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tessera_formats::TcsFile;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if mode & 1 == 1 {
        tessera_fuzz::fix_checksums(&mut bytes);
    }
    let from_memory = TcsFile::from_bytes(Path::new("fuzz.tcs"), &bytes);
    if let Ok(f) = &from_memory {
        tessera_fuzz::walk_tcs(f);
    }
    if mode & 2 == 2 {
        // The same bytes through the file reader: the same verdict.
        let path = tessera_fuzz::write("in.tcs", &bytes);
        let from_file = TcsFile::open(&path);
        assert_eq!(
            from_file.is_ok(),
            from_memory.is_ok(),
            "{:?}",
            from_file.as_ref().err()
        );
    }
});
