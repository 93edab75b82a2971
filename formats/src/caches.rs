//! The data caches' sizes, read once from Linux's sysfs (`/sys/devices/system/cpu/cpu0/cache`),
//! for the loops that size their work to them: the gather look-ahead's choice
//! ([`crate::gather`]) and the runtime's fused element-wise chunks.

use std::sync::OnceLock;

/// The last-level cache's size in bytes (the highest-level unified or data cache of CPU 0);
/// 32 MiB where it cannot be read.
pub fn last_level() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| {
        data_caches()
            .into_iter()
            .max()
            .map_or(32 << 20, |(_, bytes)| bytes)
    })
}

/// The level-1 data cache's size in bytes (of CPU 0); 32 KiB where it cannot be read.
pub fn l1_data() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| {
        data_caches()
            .into_iter()
            .find(|(level, _)| *level == 1)
            .map_or(32 << 10, |(_, bytes)| bytes)
    })
}

/// `(level, bytes)` of every cache of CPU 0 that holds data (all but instruction caches).
fn data_caches() -> Vec<(u32, usize)> {
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache") else {
        return Vec::new();
    };
    let read = |p: &std::path::Path, f: &str| std::fs::read_to_string(p.join(f)).ok();
    dir.filter_map(|e| {
        let p = e.ok()?.path();
        let level: u32 = read(&p, "level")?.trim().parse().ok()?;
        if read(&p, "type")?.trim() == "Instruction" {
            return None;
        }
        Some((level, size(&read(&p, "size")?)?))
    })
    .collect()
}

/// Parses sysfs' cache size: `32768K`, `1M`, or plain bytes.
fn size(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let n: usize = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(size("32768K\n"), Some(32 << 20));
        assert_eq!(size("1M"), Some(1 << 20));
        assert_eq!(size("512"), Some(512));
        assert_eq!(size("12X"), None);
        assert_eq!(size(""), None);
        assert!(l1_data() >= 1 << 10);
        assert!(last_level() >= l1_data());
    }
}
