//! Buffered line splitting for text formats: reads large chunks, finds line ends with
//! `memchr`, and never holds more than one chunk (plus one over-long line) in memory.

use std::io::{self, Read};

/// Lines longer than this are rejected rather than buffered without bound.
const MAX_LINE: usize = 16 << 20;

/// Splits a byte stream into lines (without `\n` or a trailing `\r`), counting line numbers.
pub(crate) struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    line_no: u64,
    consumed: u64,
}

impl<R: Read> LineReader<R> {
    pub(crate) fn new(inner: R, capacity: usize) -> Self {
        LineReader {
            inner,
            buf: vec![0; capacity.max(64)],
            start: 0,
            end: 0,
            eof: false,
            line_no: 0,
            consumed: 0,
        }
    }

    /// 1-based number of the line last returned.
    pub(crate) fn line_no(&self) -> u64 {
        self.line_no
    }

    /// Bytes of input consumed so far (for progress).
    pub(crate) fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The next line with its 1-based number, or `None` at the end of the input.
    pub(crate) fn next_line(&mut self) -> io::Result<Option<(u64, &[u8])>> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                let (s, e) = (self.start, self.start + i);
                self.start = e + 1;
                return Ok(Some(self.take(s, e, i as u64 + 1)));
            }
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                let (s, e) = (self.start, self.end);
                self.start = self.end;
                return Ok(Some(self.take(s, e, (e - s) as u64)));
            }
            self.fill()?;
        }
    }

    fn take(&mut self, s: usize, mut e: usize, bytes: u64) -> (u64, &[u8]) {
        self.line_no += 1;
        self.consumed += bytes;
        if e > s && self.buf[e - 1] == b'\r' {
            e -= 1;
        }
        (self.line_no, &self.buf[s..e])
    }

    /// Moves the partial line to the front and reads more; grows the buffer for long lines.
    fn fill(&mut self) -> io::Result<()> {
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        if self.end == self.buf.len() {
            if self.buf.len() >= MAX_LINE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "line {} is longer than {} MiB",
                        self.line_no + 1,
                        MAX_LINE >> 20
                    ),
                ));
            }
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Splits a line into fields separated by spaces or tabs, yielding (1-based column, field).
pub(crate) fn fields(line: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < line.len() && (line[i] == b' ' || line[i] == b'\t') {
            i += 1;
        }
        if i == line.len() {
            return None;
        }
        let s = i;
        while i < line.len() && line[i] != b' ' && line[i] != b'\t' {
            i += 1;
        }
        Some((s as u64 + 1, &line[s..i]))
    })
}

/// True for lines with only spaces/tabs.
pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|&b| b == b' ' || b == b'\t')
}

/// Parses an unsigned decimal integer, `None` if it is not one or overflows `u64`.
pub(crate) fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut x: u64 = 0;
    for &b in s {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        x = x.checked_mul(10)?.checked_add(d as u64)?;
    }
    Some(x)
}

/// Parses a real number (integers, decimals, exponents, `inf`, `nan`), correctly rounded to
/// the nearest `f64` (beyond its range: ±inf; subnormals kept). Every NaN (`nan`, `-NaN`, …)
/// becomes the one canonical NaN: text carries no payload, and a sign on NaN means nothing.
pub(crate) fn parse_f64(s: &[u8]) -> Option<f64> {
    simple_decimal(s)
        .or_else(|| fast_float2::parse::<f64, _>(s).ok())
        .map(crate::value::canonical_nan)
}

/// Powers of ten that are exact in an `f64`.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// The common value form `[-+]digits[.digits]` with at most 15 digits, which is most of what
/// tensor files hold: the digits form an integer below 2^53 and the divisor a power of ten,
/// both exact, so one division rounds correctly (Clinger's fast path). Anything else (more
/// digits, exponents, `inf`, `.5`, `1.`) is `None` and goes to the general parser.
#[inline]
fn simple_decimal(s: &[u8]) -> Option<f64> {
    decimal_prefix(s).and_then(|(v, n)| (n == s.len()).then_some(v))
}

/// [`simple_decimal`] of the longest prefix of `s` in that form, with its length: a line
/// parser converts a value where it finds it, without first looking for its end. `None`
/// when the prefix has too many digits or is no number (the caller then takes the general
/// parser over the whole field).
#[inline]
pub(crate) fn decimal_prefix(s: &[u8]) -> Option<(f64, usize)> {
    let (neg, skip) = match s.first()? {
        b'-' => (true, 1),
        b'+' => (false, 1),
        _ => (false, 0),
    };
    let digits = &s[skip..];
    let mut mantissa = 0u64;
    let mut i = 0;
    while i < digits.len() && digits[i].is_ascii_digit() {
        mantissa = mantissa * 10 + u64::from(digits[i] - b'0');
        i += 1;
        if i > 15 {
            return None;
        }
    }
    if i == 0 {
        return None;
    }
    let mut frac_digits = 0;
    if i < digits.len() && digits[i] == b'.' {
        let int_digits = i;
        i += 1;
        while i < digits.len() && digits[i].is_ascii_digit() {
            if int_digits + frac_digits >= 15 {
                return None;
            }
            mantissa = mantissa * 10 + u64::from(digits[i] - b'0');
            frac_digits += 1;
            i += 1;
        }
        if frac_digits == 0 {
            return None;
        }
    }
    let v = mantissa as f64 / POW10[frac_digits];
    Some((if neg { -v } else { v }, skip + i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lines_across_chunk_boundaries_and_grows_for_long_lines() {
        let text = b"a b\r\n\nlong-line-that-exceeds-the-buffer\nlast";
        let mut r = LineReader::new(&text[..], 64);
        r.buf.truncate(4); // force refills and growth
        let mut got = Vec::new();
        while let Some((_, l)) = r.next_line().unwrap() {
            got.push(String::from_utf8(l.to_vec()).unwrap());
        }
        assert_eq!(
            got,
            ["a b", "", "long-line-that-exceeds-the-buffer", "last"]
        );
        assert_eq!(r.line_no(), 4);
        assert_eq!(r.consumed(), text.len() as u64);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// The fast path agrees bit for bit with the general parser on decimal-looking text.
        #[test]
        fn parse_f64_matches_the_general_parser(
            s in "[-+]?[0-9]{0,17}(\\.[0-9]{0,17})?",
            x in proptest::num::f64::ANY,
        ) {
            let general = fast_float2::parse::<f64, _>(s.as_bytes()).ok();
            let ours = parse_f64(s.as_bytes());
            proptest::prop_assert_eq!(ours.map(f64::to_bits), general.map(f64::to_bits), "{}", s);
            let shown = format!("{x}");
            let general = fast_float2::parse::<f64, _>(shown.as_bytes()).ok();
            let ours = parse_f64(shown.as_bytes());
            proptest::prop_assert_eq!(ours.map(f64::to_bits), general.map(f64::to_bits), "{}", shown);
        }
    }

    #[test]
    fn simple_decimals_take_the_fast_path_and_round_correctly() {
        assert_eq!(simple_decimal(b"0.143"), Some(0.143));
        assert_eq!(simple_decimal(b"-2.5"), Some(-2.5));
        assert_eq!(
            simple_decimal(b"-0.0").map(f64::to_bits),
            Some((-0.0f64).to_bits())
        );
        assert_eq!(simple_decimal(b"123456789012345"), Some(123456789012345.0));
        // Beyond 15 digits, exponents and odd forms go to the general parser.
        assert_eq!(simple_decimal(b"1234567890123456"), None);
        assert_eq!(simple_decimal(b"1e5"), None);
        assert_eq!(simple_decimal(b".5"), None);
        assert_eq!(simple_decimal(b"1."), None);
        assert_eq!(simple_decimal(b"-"), None);
        assert_eq!(parse_f64(b"0.1"), Some(0.1));
        assert_eq!(parse_f64(b"1e5"), Some(1e5));
        assert_eq!(parse_f64(b"abc"), None);
    }

    #[test]
    fn fields_report_columns() {
        let f: Vec<_> = fields(b" 1\t 22  3.5").collect();
        assert_eq!(f, vec![(2, &b"1"[..]), (5, &b"22"[..]), (9, &b"3.5"[..])]);
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"1x"), None);
        assert_eq!(parse_f64(b"-1.5e3"), Some(-1500.0));
        assert_eq!(parse_f64(b"1.5x"), None);
    }
}
