//! `tessera-data split`/`merge` and the block metadata they write and trust. A structured
//! tensor is converted to `.tcs`, split by a structured spec on 1–3 thread ranks, and merged
//! back: the merge must reproduce the original file's contents byte for byte. Then the blocks'
//! metadata is damaged (a mode record field set to a fuzzed value, checksums recomputed so that
//! the damage reaches the metadata checks; a block removed or copied): the merge must fail with
//! an error on every rank, leaving no output, or write a file the validator accepts.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tessera_formats::{convert, ConvertOptions, TcsFile};
use tessera_fuzz::{clear, fix_checksums, scratch, write, ArbTensor};
use tessera_runtime::io::{merge_dir, split_file, ModeSplit, NoProgress, SplitSpec};
use tessera_runtime::transport::run_ranks;

#[derive(Debug, Arbitrary)]
enum Split {
    Equal(u8),
    Points(Vec<u8>),
}

#[derive(Debug, Arbitrary)]
enum Damage {
    None,
    /// Block file (index), mode record (index), field (0..5), new value.
    Field(u8, u8, u8, u64),
    Remove(u8),
    Copy(u8),
}

#[derive(Debug, Arbitrary)]
struct Input {
    tensor: ArbTensor,
    /// Bit k: level k dense.
    format: u8,
    index64: bool,
    split: Vec<(u8, Split)>,
    split_ranks: u8,
    merge_ranks: u8,
    damage: Damage,
    /// Split specs as text, as `--blocks` and `--split-points` take them.
    text: Option<(bool, String)>,
}

fn ranks<T: Send, F>(n: u8, f: F) -> Result<T, String>
where
    F: Fn(&tessera_runtime::transport::ThreadComm) -> Result<T, tessera_runtime::io::IoError>
        + Sync,
{
    let results = run_ranks(n as usize % 3 + 1, f);
    let errors = results.iter().filter(|r| r.is_err()).count();
    assert!(
        errors == 0 || errors == results.len(),
        "some ranks failed, others did not"
    );
    results
        .into_iter()
        .next()
        .unwrap()
        .map_err(|e| e.to_string())
}

fuzz_target!(|input: Input| {
    if let Some((points, text)) = &input.text {
        let _ = if *points {
            SplitSpec::parse_points(text)
        } else {
            SplitSpec::parse_blocks(text)
        };
    }
    clear("s-");
    let (dims, _) = input.tensor.shape();
    if dims.is_empty() {
        return;
    }
    let tns = write("s-in.tns", input.tensor.to_tns().as_bytes());
    let letters: String = (0..dims.len())
        .map(|k| if input.format >> k & 1 == 1 { 'd' } else { 's' })
        .collect();
    let whole = scratch().join("s-whole.tcs");
    let opts = ConvertOptions {
        format: Some(letters),
        index_bits: if input.index64 { 64 } else { 32 },
        ..ConvertOptions::default()
    };
    if convert(&tns, &whole, &opts, &tessera_formats::NoProgress).is_err() {
        return;
    }
    let spec = SplitSpec::new(
        input
            .split
            .iter()
            .take(4)
            .map(|(m, s)| {
                let s = match s {
                    Split::Equal(n) => ModeSplit::Equal(*n as usize % 6),
                    Split::Points(p) => {
                        ModeSplit::Points(p.iter().take(4).map(|&x| x as usize % 20).collect())
                    }
                };
                (*m as usize % 5, s)
            })
            .collect(),
    );
    let blocks = scratch().join("s-blocks");
    let split = ranks(input.split_ranks, |c| {
        split_file(c, &whole, &spec, &blocks, &NoProgress)
    });
    if split.is_err() {
        return;
    }
    let merged = scratch().join("s-merged.tcs");
    ranks(input.merge_ranks, |c| {
        merge_dir(c, &blocks, &merged, &NoProgress)
    })
    .expect("blocks just split merge again");
    // Contents, not bytes: the converter writes segmented (version 3) arrays whose extents
    // follow its parse blocks; merge writes each array in one piece.
    let contents = |p: &std::path::Path| TcsFile::open(p).unwrap().contiguous_bytes();
    assert!(
        contents(&whole) == contents(&merged),
        "split then merge changed the file"
    );
    std::fs::remove_file(&merged).unwrap();

    let mut files: Vec<_> = std::fs::read_dir(&blocks)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    if files.is_empty() {
        return;
    }
    let pick = |k: u8| files[k as usize % files.len()].clone();
    match input.damage {
        Damage::None => return,
        Damage::Field(f, mode, field, value) => {
            let path = pick(f);
            let mut b = std::fs::read(&path).unwrap();
            let at = 64 + (mode as usize % dims.len()) * 40 + (field as usize % 5) * 8;
            b[at..at + 8].copy_from_slice(&value.to_le_bytes());
            fix_checksums(&mut b);
            std::fs::write(&path, b).unwrap();
        }
        Damage::Remove(f) => std::fs::remove_file(pick(f)).unwrap(),
        Damage::Copy(f) => {
            std::fs::copy(pick(f), blocks.join("zz-copy.tcs")).unwrap();
        }
    }
    match ranks(input.merge_ranks, |c| {
        merge_dir(c, &blocks, &merged, &NoProgress)
    }) {
        Ok(_) => {
            let f = TcsFile::open(&merged).expect("a merge that succeeds writes a valid file");
            tessera_fuzz::walk_tcs(&f);
        }
        Err(_) => assert!(!merged.exists(), "a failed merge left its output"),
    }
});
