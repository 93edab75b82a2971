//! Parsing byte sizes given on the command line: `1048576`, `64K`, `256M`, `256MiB`, `1.5G`.
//! Units are binary (K = 1024).

/// Why a size was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid size `{0}`: expected a number with an optional unit K, M, G or T (e.g. 256M, 1.5GiB)"
)]
pub struct SizeError(pub String);

/// Parses a size in bytes.
pub fn parse_size(s: &str) -> Result<usize, SizeError> {
    let err = || SizeError(s.to_string());
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(err()),
    };
    let x: f64 = num.parse().map_err(|_| err())?;
    let bytes = x * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > usize::MAX as f64 {
        return Err(err());
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_binary() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("-5M").is_err());
    }
}
