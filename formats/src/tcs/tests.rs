use super::*;
use crate::{Format, Tensor};
use std::path::Path;

fn sample() -> Tensor<f64, u32> {
    let entries = vec![
        (vec![0, 1, 2], 1.0),
        (vec![2, 0, 1], -2.5),
        (vec![2, 3, 0], 4.0),
        (vec![1, 1, 1], 0.5),
    ];
    Tensor::from_entries(
        vec![3, 4, 3],
        Format::parse("dss:1,0,2", 3).unwrap(),
        entries,
    )
    .unwrap()
}

fn write(dir: &Path, t: &Tensor<f64, u32>) -> std::path::PathBuf {
    let path = dir.join("t.tcs");
    write_tensor(&path, t, None).unwrap();
    path
}

#[test]
fn round_trip_preserves_arrays_and_is_zero_copy() {
    let dir = tempfile::tempdir().unwrap();
    let t = sample();
    let path = write(dir.path(), &t);
    let f = TcsFile::open(&path).unwrap();
    assert_eq!(f.header().file_len, std::fs::metadata(&path).unwrap().len());
    assert_eq!(f.to_tensor::<f64, u32>().unwrap(), t);
    // Read straight into the tensor's own arrays: the same tensor; other types are refused.
    assert_eq!(reader::read_tensor::<f64, u32>(&path).unwrap(), t);
    assert!(matches!(
        reader::read_tensor::<f64, u64>(&path),
        Err(crate::Error::Tcs {
            source: TcsError::TypeMismatch { .. },
            ..
        })
    ));
    let v = f.view::<f64, u32>().unwrap();
    assert_eq!(
        v.entries().collect::<Vec<_>>(),
        t.entries().collect::<Vec<_>>()
    );
    // Every array starts 64-byte aligned in the mapping.
    for a in &f.header().arrays {
        assert_eq!(f.array_bytes(a).as_ptr() as usize % 64, 0, "{}", a.name());
    }
    assert!(matches!(
        f.view::<f32, u32>(),
        Err(crate::Error::Tcs {
            source: TcsError::TypeMismatch { .. },
            ..
        })
    ));
}

#[test]
fn partial_reads_return_one_arrays_range() {
    let dir = tempfile::tempdir().unwrap();
    let t = sample();
    let path = write(dir.path(), &t);
    let file = std::fs::File::open(&path).unwrap();
    let h = TcsHeader::read_from(&file, &path).unwrap();
    let vals_index = h.arrays.len() - 1;
    let part: Vec<f64> = read_array_range(&file, &path, &h, vals_index, 1..3).unwrap();
    assert_eq!(part, t.vals()[1..3]);
    assert!(read_array_range::<f64>(&file, &path, &h, vals_index, 3..9).is_err());
    assert!(
        read_array_range::<u64>(&file, &path, &h, 0, 0..1).is_err(),
        "u32 array read as u64"
    );
}

#[test]
fn pieces_written_at_offsets_make_a_valid_file() {
    let dir = tempfile::tempdir().unwrap();
    let t = sample();
    let whole = TcsFile::open(&write(dir.path(), &t)).unwrap();
    let path = dir.path().join("pieces.tcs");
    let w = TcsWriter::create(&path, whole.header().clone()).unwrap();
    let n = whole.header().arrays.len();
    for (i, a) in whole.header().arrays.iter().enumerate().rev() {
        let bytes = whole.array_bytes(a);
        let elems: Vec<u32> = bytemuck::cast_slice(bytes).to_vec();
        if i == n - 1 {
            let vals: &[f64] = bytemuck::cast_slice(bytes);
            // Second half first: order of pieces must not matter.
            let mid = vals.len() / 2;
            w.write_at(i, mid as u64, &vals[mid..]).unwrap();
            w.write_at(i, 0, &vals[..mid]).unwrap();
        } else {
            w.write_at(i, 0, &elems).unwrap();
        }
    }
    assert!(w.write_at(0, 1000, &[0u32]).is_err());
    assert!(!path.exists());
    w.finish().unwrap();
    assert_eq!(
        TcsFile::open(&path)
            .unwrap()
            .to_tensor::<f64, u32>()
            .unwrap(),
        t
    );
}

#[test]
fn block_headers_record_and_check_split_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let t: Tensor<f32, u64> = Tensor::from_entries(
        vec![4, 4],
        Format::all_compressed(2),
        vec![(vec![2, 1], 1.0), (vec![3, 3], 2.0)],
    )
    .unwrap();
    let modes = vec![
        ModeInfo {
            dim: 4,
            split_lo: 2,
            split_hi: 4,
            split_index: 1,
            split_count: 2,
        },
        ModeInfo::whole(4),
    ];
    let path = dir.path().join("b.tcs");
    write_tensor(&path, &t, Some(modes.clone())).unwrap();
    let f = TcsFile::open(&path).unwrap();
    assert!(f.header().is_block);
    assert_eq!(f.header().modes, modes);
    // The same tensor claimed to be the first half of mode 0 has coordinates outside it.
    let mut wrong = modes;
    wrong[0] = ModeInfo {
        dim: 4,
        split_lo: 0,
        split_hi: 2,
        split_index: 0,
        split_count: 2,
    };
    write_tensor(&path, &t, Some(wrong)).unwrap();
    let e = TcsFile::open(&path).err().expect("outside split");
    assert!(
        matches!(
            e,
            crate::Error::Tcs {
                source: TcsError::OutsideSplit { coord: 2, .. },
                ..
            }
        ),
        "{e}"
    );
}

/// Every truncation and every single-byte change of a valid file is an error, never a panic,
/// for both readers: the validated file in memory and the read straight into a tensor.
#[test]
fn every_truncation_and_byte_flip_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    every_damage_is_rejected(&std::fs::read(write(dir.path(), &sample())).unwrap());
}

#[test]
fn every_truncation_and_byte_flip_of_a_segmented_file_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seg.tcs");
    write_segmented(&path, &sample(), 2);
    every_damage_is_rejected(&std::fs::read(&path).unwrap());
}

fn every_damage_is_rejected(good: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.tcs");
    let rejected = |bytes: &[u8], what: &str| {
        std::fs::write(&path, bytes).unwrap();
        assert!(TcsFile::open(&path).is_err(), "{what} was accepted");
        assert!(
            reader::read_tensor::<f64, u32>(&path).is_err(),
            "{what} was accepted by read_tensor"
        );
    };
    for len in 0..good.len() {
        rejected(&good[..len], &format!("truncated to {len} bytes"));
    }
    let mut longer = good.to_vec();
    longer.push(0);
    rejected(&longer, "a trailing byte");
    for at in 0..good.len() {
        for mask in [0x01u8, 0x80, 0xff] {
            let mut bad = good.to_vec();
            bad[at] ^= mask;
            rejected(&bad, &format!("flip {mask:#x} at byte {at}"));
        }
    }
}

/// A hostile header with a valid checksum but impossible sizes is rejected without
/// allocating or reading out of bounds.
#[test]
fn hostile_headers_with_valid_checksums_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let t = sample();
    let f = TcsFile::open(&write(dir.path(), &t)).unwrap();
    let good = std::fs::read(f.path()).unwrap();
    let path = dir.path().join("hostile.tcs");
    let mut cases: Vec<TcsHeader> = Vec::new();
    let mut h = f.header().clone();
    h.levels[1].size = u64::MAX / 2;
    cases.push(h);
    let mut h = f.header().clone();
    h.arrays[0].len += 4;
    cases.push(h);
    let mut h = f.header().clone();
    h.modes[0].dim = 1;
    cases.push(h);
    let mut h = f.header().clone();
    h.arrays[1].offset = 0;
    cases.push(h);
    let mut h = f.header().clone();
    h.modes[2].split_index = 5;
    cases.push(h);
    for (i, h) in cases.into_iter().enumerate() {
        let mut bytes = good.clone();
        let head = h.to_bytes();
        bytes[..head.len()].copy_from_slice(&head);
        std::fs::write(&path, &bytes).unwrap();
        assert!(TcsFile::open(&path).is_err(), "hostile case {i} accepted");
    }
}

/// Version 1 files (written by the code before singleton levels existed, and kept in
/// `tests/fixtures`) still read, to the tensor of the `.tns` they were converted from.
#[test]
fn version_1_files_still_read() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let source: Tensor<f64, u32> = Tensor::read(dir.join("v1_source.tns"), "sq").unwrap();
    for (name, format) in [("csr_v1.tcs", "ds"), ("dcsc_v1.tcs", "ss:1,0")] {
        let f = TcsFile::open(&dir.join(name)).unwrap();
        assert_eq!(f.header().version, 1, "{name}");
        let t = f.to_tensor::<f64, u32>().unwrap();
        assert_eq!(t.format(), &Format::parse(format, 2).unwrap());
        assert_eq!(t.to_dense(), source.to_dense(), "{name}");
        // Written again without singleton levels, a file stays version 1.
        let again = dir_path_write(&t);
        assert_eq!(TcsFile::open(&again.1).unwrap().header().version, 1);
    }
}

fn dir_path_write(t: &Tensor<f64, u32>) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), t);
    (dir, path)
}

#[test]
fn coo_files_are_version_2_with_one_crd_per_singleton_level() {
    let t = sample().to_format("sqq:1,0,2").unwrap();
    let (_dir, path) = dir_path_write(&t);
    let f = TcsFile::open(&path).unwrap();
    let h = f.header();
    assert_eq!(h.version, 2);
    let kinds: Vec<(ArrayKind, u32)> = h.arrays.iter().map(|a| (a.kind, a.level)).collect();
    assert_eq!(
        kinds,
        [
            (ArrayKind::Pos, 0),
            (ArrayKind::Crd, 0),
            (ArrayKind::Crd, 1),
            (ArrayKind::Crd, 2),
            (ArrayKind::Vals, 3)
        ]
    );
    assert_eq!(f.to_tensor::<f64, u32>().unwrap(), t);
    // The same bytes labelled version 1 (checksum fixed) are refused: version 1 has no
    // singleton levels.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    let mut h1 = h.clone();
    h1.version = 1;
    let header = h1.to_bytes();
    bytes[..header.len()].copy_from_slice(&header);
    let e = TcsHeader::parse(&bytes, bytes.len() as u64).unwrap_err();
    assert!(e.to_string().contains("version 1 files cannot hold"), "{e}");
    // A future version is refused with the versions this reader knows.
    let mut future = h.clone();
    future.version = 4;
    let header = future.to_bytes();
    bytes[..header.len()].copy_from_slice(&header);
    let e = TcsHeader::parse(&bytes, bytes.len() as u64).unwrap_err();
    assert_eq!(e, TcsError::Version(4));
    assert!(e.to_string().contains("versions 1 to 3"), "{e}");
}

/// A tensor whose `vals` is read on a second thread: the same tensor back, and a changed byte
/// in `vals` or in `crd`, or a cut file, is an error naming the array.
#[test]
fn large_arrays_read_in_parallel_are_checked() {
    let n = 700_000; // vals of 5.6 MB: above the size read on a thread of its own
    let entries = (0..n).map(|i| (vec![i % 1000, i / 1000], i as f64 * 0.5));
    let t: Tensor<f64, u32> = Tensor::from_entries(
        vec![1000, n / 1000],
        Format::parse("csr", 2).unwrap(),
        entries,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &t);
    assert_eq!(reader::read_tensor::<f64, u32>(&path).unwrap(), t);
    let good = std::fs::read(&path).unwrap();
    let h = TcsFile::open(&path).unwrap().header().clone();
    for a in &h.arrays {
        let mut bad = good.clone();
        bad[(a.offset + a.len / 2) as usize] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        let e = reader::read_tensor::<f64, u32>(&path)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&a.name()) && e.contains("t.tcs"), "{e}");
    }
    std::fs::write(&path, &good[..good.len() - 8]).unwrap();
    assert!(reader::read_tensor::<f64, u32>(&path).is_err());
}

/// Writes `t` as a segmented (version 3) file: every array cut into pieces of `piece`
/// elements, appended round-robin across the arrays (as a block converter interleaves them).
fn write_segmented(path: &Path, t: &Tensor<f64, u32>, piece: usize) -> TcsHeader {
    write_segmented_flushing(path, t, piece, None, true)
}

/// [`write_segmented`], syncing behind the appends every `flush` bytes if asked, allocating
/// the file ahead of them or not (`ahead`).
fn write_segmented_flushing(
    path: &Path,
    t: &Tensor<f64, u32>,
    piece: usize,
    flush: Option<u64>,
    ahead: bool,
) -> TcsHeader {
    let dir = tempfile::tempdir().unwrap();
    let plain = TcsFile::open(&write(dir.path(), t)).unwrap();
    let h = plain.header();
    let mut app = Appender::create(path, h.rank(), h.arrays.len()).unwrap();
    app.set_allocate_ahead(ahead);
    if let Some(step) = flush {
        app.flush_behind_every(step);
    }
    let arrays: Vec<&[u8]> = h.arrays.iter().map(|a| plain.array_bytes(a)).collect();
    let elem = |i: usize| if i == arrays.len() - 1 { 8 } else { 4 };
    let mut at = 0;
    while arrays.iter().any(|a| a.len() > at) {
        for (i, a) in arrays.iter().enumerate() {
            let lo = (at * elem(i)).min(a.len());
            let hi = ((at + piece) * elem(i)).min(a.len());
            app.append::<u8>(i, &a[lo..hi]).unwrap();
        }
        at += piece;
    }
    let mut fresh = h.clone();
    fresh.arrays.iter_mut().for_each(|a| a.crc32 = 0);
    let len = app.finish(fresh).unwrap();
    assert_eq!(len, std::fs::metadata(path).unwrap().len());
    TcsFile::open(path).unwrap().header().clone()
}

/// Syncing behind the appends (on a thread of its own, while later pieces are appended)
/// leaves the file byte for byte as without it.
#[test]
fn flushing_behind_the_appends_leaves_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let t = sample();
    let (a, b) = (dir.path().join("a.tcs"), dir.path().join("b.tcs"));
    write_segmented_flushing(&a, &t, 1, None, true);
    for step in [1, 64, 1000] {
        write_segmented_flushing(&b, &t, 1, Some(step), true);
        assert_eq!(
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
            "{step}"
        );
    }
}

/// A file allocated ahead of its appends (it grows by at least 1 MiB past the data while
/// they come) ends at its data's length, byte for byte the file appended without it.
#[test]
fn allocating_ahead_of_the_appends_leaves_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let t = sample();
    let (a, b) = (dir.path().join("a.tcs"), dir.path().join("b.tcs"));
    write_segmented_flushing(&a, &t, 2, None, false);
    write_segmented_flushing(&b, &t, 2, None, true);
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    // The allocation took place (where the file system allocates ahead at all).
    let mut app = Appender::create(&dir.path().join("c.tcs"), 1, 3).unwrap();
    app.append::<u8>(0, &[1; 100]).unwrap();
    let len = app.file().metadata().unwrap().len();
    let probe = std::fs::File::create(dir.path().join("probe")).unwrap();
    let flags = rustix::fs::FallocateFlags::empty();
    if rustix::fs::fallocate(&probe, flags, 0, 4096).is_ok() {
        assert!(len >= 1 << 20, "{len}");
    }
}

/// Pieces whose checksums other threads compute (`reserve_unhashed`), interleaved with pieces
/// hashed as they are appended, even within one array, leave the file byte for byte as when
/// every piece is hashed on append; a checksum never given is an error, not a wrong file.
#[test]
fn checksums_given_by_the_writers_leave_the_same_file() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let t = sample();
    let plain = TcsFile::open(&write(dir.path(), &t)).unwrap();
    let h = plain.header();
    let (a, b) = (dir.path().join("a.tcs"), dir.path().join("b.tcs"));
    write_segmented(&a, &t, 1);
    let arrays: Vec<&[u8]> = h.arrays.iter().map(|a| plain.array_bytes(a)).collect();
    let elem = |i: usize| if i == arrays.len() - 1 { 8 } else { 4 };
    for skip in [None, Some(3)] {
        let mut app = Appender::create(&b, h.rank(), h.arrays.len()).unwrap();
        let late = app.late_crcs();
        let file = app.file().try_clone().unwrap();
        let mut later = Vec::new();
        let mut n = 0;
        for at in 0.. {
            if arrays.iter().all(|a| a.len() <= at * 4) {
                break;
            }
            for (i, a) in arrays.iter().enumerate() {
                let lo = (at * elem(i)).min(a.len());
                let hi = ((at + 1) * elem(i)).min(a.len());
                if (at + i) % 3 == 0 {
                    app.append::<u8>(i, &a[lo..hi]).unwrap();
                } else {
                    let (off, slot) = app.reserve_unhashed(i, (hi - lo) as u64);
                    later.push((a[lo..hi].to_vec(), off, slot));
                }
            }
        }
        // The writers, on threads of their own and in reverse order.
        let mut skipped = false;
        std::thread::scope(|s| {
            for (bytes, off, slot) in later.iter().rev() {
                n += 1;
                if skip.is_some_and(|k| n >= k) && !skipped && !bytes.is_empty() {
                    skipped = true;
                    file.write_all_at(bytes, *off).unwrap();
                    continue;
                }
                let (late, file) = (&late, &file);
                s.spawn(move || {
                    late.hash(*slot, bytes);
                    file.write_all_at(bytes, *off).unwrap();
                });
            }
        });
        let mut fresh = h.clone();
        fresh.arrays.iter_mut().for_each(|a| a.crc32 = 0);
        match (skip, app.finish(fresh)) {
            (None, Ok(_)) => assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap()),
            (Some(_), Err(e)) => assert!(e.to_string().contains("unhashed"), "{e}"),
            (skip, r) => panic!("{skip:?}: {:?}", r.map(|_| ())),
        }
    }
}

/// A tensor of 300 entries: arrays long enough for hundreds of pieces.
fn wide() -> Tensor<f64, u32> {
    let entries = (0..300usize).map(|i| (vec![i / 20 % 20, i % 20, i * 7 % 20], i as f64 - 99.5));
    Tensor::from_entries(
        vec![20, 20, 20],
        Format::parse("dss:1,0,2", 3).unwrap(),
        entries,
    )
    .unwrap()
}

/// A small random number generator (xorshift64*), for the schedules of the tests below.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }
}

/// The arrays of `plain` cut into pieces, in rounds over the arrays as
/// [`write_segmented`] appends them: (array, bytes) with `piece(array)` elements each
/// (some empty, where an array ended).
fn pieces(plain: &TcsFile, mut piece: impl FnMut() -> usize) -> Vec<(usize, &[u8])> {
    let h = plain.header();
    let arrays: Vec<&[u8]> = h.arrays.iter().map(|a| plain.array_bytes(a)).collect();
    let elem = |i: usize| if i == arrays.len() - 1 { 8 } else { 4 };
    let mut at = vec![0; arrays.len()];
    let mut out = Vec::new();
    while arrays.iter().zip(&at).any(|(a, &at)| at < a.len()) {
        for (i, a) in arrays.iter().enumerate() {
            let hi = (at[i] + piece() * elem(i)).min(a.len());
            out.push((i, &a[at[i]..hi]));
            at[i] = hi;
        }
    }
    out
}

/// Finishes `app` with the plain file's header (checksums cleared) and checks that the file
/// holds the tensor with the checksums of its arrays.
fn finish_and_check(app: Appender, plain: &TcsFile, path: &Path) -> crate::Result<()> {
    let mut fresh = plain.header().clone();
    fresh.arrays.iter_mut().for_each(|a| a.crc32 = 0);
    app.finish(fresh)?;
    let f = TcsFile::open(path).unwrap();
    for (a, b) in f.header().arrays.iter().zip(&plain.header().arrays) {
        assert_eq!(a.crc32, crc32fast::hash(f.array_bytes(a)), "{}", a.name());
        assert_eq!(a.crc32, b.crc32, "{}", a.name());
    }
    assert_eq!(
        f.to_tensor::<f64, u32>().unwrap(),
        plain.to_tensor::<f64, u32>().unwrap()
    );
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Checksums that writer threads give in a random order, some before and some long after
    /// later reservations (of the same array and others), between pieces hashed as they are
    /// appended, fold into each array's checksum: that of the array read back.
    #[test]
    fn checksums_folded_out_of_order_across_threads_are_the_arrays(
        seed in 1u64..,
        most in 1usize..6,
        lag in 0usize..12,
    ) {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let plain = TcsFile::open(&write(dir.path(), &wide())).unwrap();
        let h = plain.header();
        let path = dir.path().join("b.tcs");
        let mut rng = Rng(seed);
        let pieces = pieces(&plain, || rng.below(most + 1));
        let mut app = Appender::create(&path, h.rank(), h.arrays.len()).unwrap();
        let (late, file) = (app.late_crcs(), app.file().try_clone().unwrap());
        std::thread::scope(|s| {
            let writers: Vec<_> = (0..3)
                .map(|_| {
                    let (tx, rx) = std::sync::mpsc::channel::<(&[u8], u64, usize)>();
                    let (late, file) = (&late, &file);
                    s.spawn(move || {
                        for (bytes, at, slot) in rx {
                            late.hash(slot, bytes);
                            file.write_all_at(bytes, at).unwrap();
                        }
                    });
                    tx
                })
                .collect();
            let mut waiting = Vec::new();
            for (n, &(array, bytes)) in pieces.iter().enumerate() {
                if rng.below(3) == 0 {
                    app.append::<u8>(array, bytes).unwrap();
                } else {
                    let (at, slot) = app.reserve_unhashed(array, bytes.len() as u64);
                    waiting.push((bytes, at, slot));
                }
                // Random waiting pieces to random writers, while more than up to `lag` wait
                // (all of them after the last piece).
                let keep = if n + 1 == pieces.len() { 0 } else { rng.below(lag + 1) };
                while waiting.len() > keep {
                    let w = waiting.swap_remove(rng.below(waiting.len()));
                    writers[rng.below(writers.len())].send(w).unwrap();
                }
            }
        });
        proptest::prop_assert!(finish_and_check(app, &plain, &path).is_ok());
    }
}

/// Checksums folded as they come leave the appender holding only the parts and slots of the
/// pieces whose writers have not hashed them yet (here the last `LAG`, hashed newest first
/// within each window), however many pieces came before, and the file byte for byte as when
/// every piece is hashed on append; a slot never hashed holds up the parts after it in its
/// array and makes `finish` fail.
#[test]
fn folded_checksums_keep_the_pending_state_small() {
    use std::os::unix::fs::FileExt;
    const LAG: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let t = wide();
    let plain = TcsFile::open(&write(dir.path(), &t)).unwrap();
    let h = plain.header();
    let (a, b) = (dir.path().join("a.tcs"), dir.path().join("b.tcs"));
    write_segmented(&a, &t, 1);
    let pieces = pieces(&plain, || 1);
    assert!(pieces.len() > 500, "{}", pieces.len());
    for never in [None, Some(pieces.len() / 3)] {
        let mut app = Appender::create(&b, h.rank(), h.arrays.len()).unwrap();
        let late = app.late_crcs();
        let mut window = Vec::new();
        let mut most = (0, 0);
        for (n, &(array, bytes)) in pieces.iter().enumerate() {
            let (at, slot) = app.reserve_unhashed(array, bytes.len() as u64);
            app.file().write_all_at(bytes, at).unwrap();
            if never != Some(n) {
                window.push((slot, bytes));
            }
            let (parts, slots, _) = app.pending();
            most = (most.0.max(parts), most.1.max(slots));
            if window.len() == LAG {
                window
                    .drain(..)
                    .rev()
                    .for_each(|(slot, b)| late.hash(slot, b));
            }
        }
        window.drain(..).for_each(|(slot, b)| late.hash(slot, b));
        let (_, _, extents) = app.pending();
        let mut fresh = h.clone();
        fresh.arrays.iter_mut().for_each(|a| a.crc32 = 0);
        let header = TcsFile::open(&a).unwrap().header().clone();
        assert_eq!(extents, header.extents.len());
        match never {
            None => {
                // Reservations hashed within a window: its parts and slots, and the one just
                // made (no more than 2 parts a slot: the slot's and those hashed now after it).
                assert!(most.0 <= 2 * (LAG + 1) && most.1 <= LAG + 1, "{most:?}");
                app.finish(fresh).unwrap();
                assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
            }
            Some(_) => {
                // Every later slot waits behind the one never hashed.
                assert!(most.1 > pieces.len() / 2, "{most:?}");
                let e = app.finish(fresh).expect_err("a slot never hashed");
                assert!(e.to_string().contains("written unhashed"), "{e}");
            }
        }
    }
}

/// A slot never hashed makes `finish` fail with the array it belongs to, even after the slots
/// reserved after it, in every array, were hashed and folded; reservations of no bytes need
/// no checksum.
#[test]
fn a_slot_never_hashed_fails_finish() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let plain = TcsFile::open(&write(dir.path(), &sample())).unwrap();
    let h = plain.header();
    let path = dir.path().join("b.tcs");
    let pieces = pieces(&plain, || 1);
    assert!(pieces.iter().any(|p| p.1.is_empty()));
    let hashed: Vec<usize> = (0..pieces.len())
        .filter(|&n| !pieces[n].1.is_empty())
        .collect();
    for never in hashed.iter().map(|&n| Some(n)).chain([None]) {
        let mut app = Appender::create(&path, h.rank(), h.arrays.len()).unwrap();
        let late = app.late_crcs();
        for (n, &(array, bytes)) in pieces.iter().enumerate() {
            let (at, slot) = app.reserve_unhashed(array, bytes.len() as u64);
            app.file().write_all_at(bytes, at).unwrap();
            if never != Some(n) && !bytes.is_empty() {
                late.hash(slot, bytes);
            }
        }
        let done = finish_and_check(app, &plain, &path);
        let Some(never) = never else {
            done.unwrap();
            continue;
        };
        let e = done.expect_err("a slot never hashed").to_string();
        let name = h.arrays[pieces[never].0].name();
        assert!(
            e.contains(&format!("bytes of {name} written unhashed")),
            "{never}: {e}"
        );
    }
}

/// A segmented file reads back as the tensor through every reader, its arrays 64-byte aligned
/// in memory, and partial reads cross extents.
#[test]
fn segmented_files_read_back_through_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let t = sample();
    let plain = TcsFile::open(&write(dir.path(), &t)).unwrap();
    for piece in [1, 2, 3, 100] {
        let path = dir.path().join(format!("seg{piece}.tcs"));
        let h = write_segmented(&path, &t, piece);
        assert_eq!(h.version, 3);
        // Pieces of one array appended back to back make one extent.
        let most = h.arrays.iter().map(|a| a.len / 4).max().unwrap() as usize;
        let rounds = most.div_ceil(piece);
        assert!(h.extents.len() <= rounds * h.arrays.len(), "{piece}");
        assert!(piece > 1 || h.extents.len() > h.arrays.len(), "{piece}");
        let f = TcsFile::open(&path).unwrap();
        assert_eq!(f.to_tensor::<f64, u32>().unwrap(), t);
        // In the contiguous layout, the bytes `write_tensor` gives.
        assert_eq!(f.contiguous_bytes(), std::fs::read(plain.path()).unwrap());
        let bytes = std::fs::read(&path).unwrap();
        let g = TcsFile::from_bytes(&path, &bytes).unwrap();
        assert_eq!(g.to_tensor::<f64, u32>().unwrap(), t);
        assert_eq!(reader::read_tensor::<f64, u32>(&path).unwrap(), t);
        for (a, b) in f.header().arrays.iter().zip(&plain.header().arrays) {
            assert_eq!(f.array_bytes(a), plain.array_bytes(b), "{}", a.name());
            assert_eq!(a.crc32, b.crc32, "{}", a.name());
            assert_eq!(f.array_bytes(a).as_ptr() as usize % 64, 0, "{}", a.name());
        }
        let file = std::fs::File::open(&path).unwrap();
        let n = h.arrays.len();
        for i in 0..n - 1 {
            let all: &[u32] = bytemuck::cast_slice(plain.array_bytes(&plain.header().arrays[i]));
            for lo in 0..=all.len() {
                for hi in lo..=all.len() {
                    let part: Vec<u32> =
                        read_array_range(&file, &path, &h, i, lo as u64..hi as u64).unwrap();
                    assert_eq!(part, all[lo..hi], "array {i} {lo}..{hi}");
                }
            }
        }
        let vals: Vec<f64> = read_array_range(&file, &path, &h, n - 1, 1..4).unwrap();
        assert_eq!(vals, t.vals()[1..4]);
    }
}

/// Extent tables with valid checksums that do not describe the arrays are rejected by every
/// reader, with a message saying what is wrong.
#[test]
fn hostile_extent_tables_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seg.tcs");
    let h = write_segmented(&path, &sample(), 1);
    let good = std::fs::read(&path).unwrap();
    let bad = dir.path().join("bad.tcs");
    let mut cases: Vec<(TcsHeader, &str)> = Vec::new();
    let mut c = h.clone();
    c.extents[1].offset = c.extents[0].offset;
    cases.push((c, "extent 1 (offset)"));
    let mut c = h.clone();
    c.extents[2].array = 99;
    cases.push((c, "names array 99"));
    let mut c = h.clone();
    c.extents.swap(0, 1);
    cases.push((c, "extent 0 (offset)"));
    let mut c = h.clone();
    c.extents[0].len = 2;
    cases.push((c, "whole number of 4-byte elements"));
    let mut c = h.clone();
    c.extents[0].len = 0;
    cases.push((c, "not a positive"));
    let mut c = h.clone();
    let last = c.extents.len() - 1;
    c.extents[last].len += 8;
    cases.push((c, "runs past the end of"));
    let mut c = h.clone();
    c.arrays[0].offset = 64;
    cases.push((c, "offset of pos of level 1 (version 3)"));
    let mut c = h.clone();
    c.extents.pop();
    c.extents.push(h.extents[0]);
    cases.push((c, ""));
    for (c, what) in cases {
        let mut bytes = good.clone();
        let head = c.to_bytes();
        let table = c.table_bytes();
        bytes[..head.len()].copy_from_slice(&head);
        let at = bytes.len() - table.len();
        bytes[at..].copy_from_slice(&table);
        std::fs::write(&bad, &bytes).unwrap();
        let e = TcsFile::open(&bad).err().expect(what).to_string();
        assert!(e.contains(what) && e.contains("bad.tcs"), "{what}: {e}");
        assert!(reader::read_tensor::<f64, u32>(&bad).is_err(), "{what}");
        assert!(TcsFile::from_bytes(&bad, &bytes).is_err(), "{what}");
    }
    // A count of extents larger than the file fits is refused before any allocation.
    let mut bytes = good.clone();
    let mut c = h.clone();
    c.extents = vec![h.extents[0]; 1 << 20];
    let head = c.to_bytes();
    bytes[..head.len()].copy_from_slice(&head);
    let e = TcsFile::from_bytes(&bad, &bytes).err().unwrap().to_string();
    assert!(e.contains("extents do not fit"), "{e}");
}

/// An extent table longer than one chunk of `TcsHeader::table_chunks` (4,096 records) is
/// written whole, and the header's checksum covers every chunk (found by a review: taking
/// only the first chunk in either place passed every other test).
#[test]
fn an_extent_table_past_one_chunk_is_written_and_checked_whole() {
    let entries = (0..3000usize).map(|i| {
        let coords = vec![i / 60 % 50, i % 60, i * 7 % 40];
        (coords, i as f64 - 99.5)
    });
    let format = Format::parse("dss:1,0,2", 3).unwrap();
    let t = Tensor::from_entries(vec![50, 60, 40], format, entries).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seg.tcs");
    write_segmented(&path, &t, 1);
    let f = TcsFile::open(&path).unwrap();
    assert!(
        f.header().extents.len() > 4096,
        "{}",
        f.header().extents.len()
    );
    assert_eq!(f.to_tensor::<f64, u32>().unwrap(), t);
}
