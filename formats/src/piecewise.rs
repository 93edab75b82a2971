//! Writes of large buffers to files, cut into pieces of at most [`PIECE`] bytes.
//!
//! Why, measured on the VMs this project runs on: free memory is handed back to the host
//! (virtio-balloon's free page reporting) in blocks of 2 MiB and up, and the page cache
//! fills a write of 2 MiB or more with folios that large, taken from exactly those blocks,
//! each of which then costs the host a fault (allocating and zeroing its backing) at its
//! first touch, the copy into it. Writing 720 MB of a cached file into a new one (`dd
//! if=u.tns of=d.bin`, each after the last copy was removed and 6 s idle) took 1.04-1.11 s
//! of system time in blocks of 2, 4 or 16 MiB, 0.24-0.29 s in blocks of 64 KiB to 1 MiB (in
//! either order). A conversion's spilled runs, written whole (16 MB a call), paid the first
//! on every byte. Reads showed no such step: the first pass over a file that has been idle
//! a while is slower whatever the size of its reads.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The largest piece written at once: a quarter of the 2 MiB at which the cost above
/// begins (writes of 64 KiB to 1 MiB cost the same).
pub(crate) const PIECE: usize = 512 << 10;

/// `file.write_all_at(bytes, at)` in pieces of at most [`PIECE`] bytes.
pub(crate) fn write_all_at(file: &File, bytes: &[u8], at: u64) -> std::io::Result<()> {
    let mut at = at;
    for piece in bytes.chunks(PIECE) {
        file.write_all_at(piece, at)?;
        at += piece.len() as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_land_where_one_write_would() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..PIECE * 2 + 12345)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        let at = 4097;
        let path = dir.path().join("at");
        let file = File::create(&path).unwrap();
        write_all_at(&file, &bytes, at as u64).unwrap();
        let back = std::fs::read(&path).unwrap();
        assert_eq!(back.len(), at + bytes.len());
        assert!(back[..at].iter().all(|&b| b == 0));
        assert_eq!(&back[at..], &bytes[..]);
        let path = dir.path().join("seq");
        let file = File::create(&path).unwrap();
        write_all_at(&file, &bytes[..PIECE], 0).unwrap();
        write_all_at(&file, &bytes[PIECE..], PIECE as u64).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
}
