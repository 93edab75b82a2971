//! Text inputs with special values and layouts.

use tessera_formats::{convert, ConvertOptions, NoProgress, TcsFile, Tensor};

/// A skew-symmetric `.mtx` NaN is mirrored as `-v`: the stored NaNs must still be the one
/// canonical NaN (docs/tcs.md, Values), whichever path reads the file.
#[test]
fn skew_symmetric_nan_is_stored_canonical() {
    let dir = tempfile::tempdir().unwrap();
    let mtx = dir.path().join("s.mtx");
    std::fs::write(
        &mtx,
        "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 nan\n3 1 -nan\n",
    )
    .unwrap();
    for format in ["csr", "coo", "dense"] {
        let out = dir.path().join(format!("s-{format}.tcs"));
        let opts = ConvertOptions {
            format: Some(format.into()),
            ..ConvertOptions::default()
        };
        convert(&mtx, &out, &opts, &NoProgress).unwrap();
        let f = TcsFile::open(&out).unwrap();
        let t = f.to_tensor::<f64, u32>().unwrap();
        for v in t.vals().iter().filter(|v| v.is_nan()) {
            assert_eq!(
                v.to_bits(),
                f64::NAN.to_bits(),
                "{format}: {:#x}",
                v.to_bits()
            );
        }
    }
    let t = Tensor::<f64, u32>::read(&mtx, "csr").unwrap();
    for v in t.vals().iter().filter(|v| v.is_nan()) {
        assert_eq!(v.to_bits(), f64::NAN.to_bits(), "read: {:#x}", v.to_bits());
    }
}
