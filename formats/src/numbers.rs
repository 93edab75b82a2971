//! Number scanners for the hot loops of text parsing: digits are read eight bytes at a time
//! (SWAR: one 64-bit word tells where the digit run ends and converts up to seven digits with
//! three multiplications), and a data line in the common shape — coordinates separated by
//! single spaces or tabs, a plain decimal value, a newline — is parsed in one pass from where
//! it starts, without first looking for its end. Anything unusual gives `None`, and the caller
//! takes the careful, field-by-field parser, which also names the column of any error; so
//! these scanners accept a subset of what the careful parsers accept and must give the same
//! numbers on it (tested against them).
//!
//! Public for the conversion bench's parse floor, which must parse as fast as the converter.

/// Powers of ten that are exact in an `f64`.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// Integer powers of ten up to 10^15 (the fraction digits of a fast decimal).
const POW10_U64: [u64; 16] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
    100_000_000_000,
    1_000_000_000_000,
    10_000_000_000_000,
    100_000_000_000_000,
    1_000_000_000_000_000,
];

/// Length of the run of ASCII digits at the start of the little-endian word `x` (8 when all
/// its bytes are digits).
#[inline]
fn digit_run(x: u64) -> usize {
    // A byte is a digit when its high nibble is 3 both as it is and after adding 6
    // (0x30..=0x39). Adding 6 carries out of a byte only for bytes >= 0xFA, which are no
    // digits: the carry lands in a later byte, past the first non-digit, so it cannot move it.
    const HI: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    let bad = ((x & HI) ^ THREES) | ((x.wrapping_add(0x0606_0606_0606_0606) & HI) ^ THREES);
    (bad.trailing_zeros() / 8) as usize
}

/// The value of the first `n` (1 to 8) digit bytes of the little-endian word `x`.
#[inline]
fn word_value(x: u64, n: usize) -> u64 {
    // Digit values; a byte below b'0' past the run borrows only from later bytes, which the
    // shift drops. The shift puts the run at the top: the bytes below it read as leading
    // zeros. Then pairs, quads and the whole are combined (Lemire's eight-digit conversion).
    let d = x.wrapping_sub(0x3030_3030_3030_3030) << (8 * (8 - n));
    let d = (d.wrapping_mul(10) + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
    let d = (d.wrapping_mul(100) + (d >> 16)) & 0x0000_FFFF_0000_FFFF;
    (d.wrapping_mul(10_000) + (d >> 32)) & 0xFFFF_FFFF
}

/// The run of ASCII digits at `text[at..]` as an integer and its length; `None` when there is
/// no digit or more than 19 (which could overflow a `u64`). Always inlined: `entry_line`
/// left the fraction's scan a call of its own, ~15 instructions an entry.
#[inline(always)]
pub fn digits_at(text: &[u8], at: usize) -> Option<(u64, usize)> {
    if let Some(word) = text.get(at..at + 8) {
        let x = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let n = digit_run(x);
        if n == 0 {
            return None;
        }
        if n < 8 {
            return Some((word_value(x, n), n));
        }
    }
    // Near the end of the text, or eight digits or more: byte by byte.
    let mut x = 0u64;
    let mut n = 0;
    while let Some(&b) = text.get(at + n) {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        x = x.wrapping_mul(10).wrapping_add(u64::from(d));
        n += 1;
    }
    (1..=19).contains(&n).then_some((x, n))
}

/// The plain decimal `[-+]digits[.digits]` with at most 15 digits at `text[at..]`, correctly
/// rounded (the digits form an integer below 2^53 and the divisor is an exact power of ten,
/// so one division rounds correctly: Clinger's fast path), and its length. `None` for more
/// digits, no digit before the point or none after it; what follows is not looked at.
/// Always inlined: a call per value cost the converter a fifth of its parsing (measured with
/// callgrind on the conversion bench's sorted `.tns`).
#[inline(always)]
pub fn decimal_at(text: &[u8], at: usize) -> Option<(f64, usize)> {
    let (neg, mut i) = match text.get(at)? {
        b'-' => (true, at + 1),
        b'+' => (false, at + 1),
        _ => (false, at),
    };
    let (int, n) = digits_at(text, i)?;
    i += n;
    let mut mantissa = int;
    let mut frac = 0;
    if text.get(i) == Some(&b'.') {
        let (f, m) = digits_at(text, i + 1)?;
        if n + m > 15 {
            return None;
        }
        mantissa = int * POW10_U64[m] + f;
        frac = m;
        i += 1 + m;
    } else if n > 15 {
        return None;
    }
    let v = mantissa as f64 / POW10[frac];
    Some((if neg { -v } else { v }, i - at))
}

/// Where the line that continues at `text[at..]` ends, if it ends right there: just past a
/// `\n` or `\r\n`, or at the end of the text.
#[inline]
fn line_end(text: &[u8], at: usize) -> Option<usize> {
    match text.get(at) {
        None => Some(at),
        Some(b'\n') => Some(at + 1),
        Some(b'\r') if text.get(at + 1) == Some(&b'\n') => Some(at + 2),
        _ => None,
    }
}

/// One data line of the common shape at `text[at..]`: `R` 1-based coordinates (made 0-based
/// into `coords`), each followed by spaces or tabs, then a plain decimal value and the line's
/// end. Returns the value and where the next line begins; `None` for any other line.
/// Always inlined into the packing loops: as a call it saved and restored six registers and
/// passed its result through memory, ~25 instructions an entry.
#[inline(always)]
pub fn entry_line<const R: usize>(
    text: &[u8],
    at: usize,
    coords: &mut [u64; R],
) -> Option<(f64, usize)> {
    let mut i = at;
    for c in coords.iter_mut() {
        let (x, n) = digits_at(text, i)?;
        i += n;
        if x == 0 || !matches!(text.get(i), Some(b' ' | b'\t')) {
            return None;
        }
        i += 1;
        while matches!(text.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        *c = x - 1;
    }
    let (v, n) = decimal_at(text, i)?;
    Some((v, line_end(text, i + n)?))
}

/// [`entry_line`] on a line whose first coordinate (`coords[0]` already) and the separator
/// byte after it end just before `text[at..]`: the other coordinates into `coords[1..]`, the
/// value and where the next line begins. The same entry as `entry_line` from the line's
/// start gives, where the line begins with the bytes (first coordinate and separator) of a
/// line that `entry_line` took with that first coordinate.
#[inline(always)]
pub fn entry_line_past_first<const R: usize>(
    text: &[u8],
    at: usize,
    coords: &mut [u64; R],
) -> Option<(f64, usize)> {
    let mut i = at;
    while matches!(text.get(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    let (_, rest) = coords.split_at_mut(1.min(R));
    for c in rest.iter_mut() {
        let (x, n) = digits_at(text, i)?;
        i += n;
        if x == 0 || !matches!(text.get(i), Some(b' ' | b'\t')) {
            return None;
        }
        i += 1;
        while matches!(text.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        *c = x - 1;
    }
    let (v, n) = decimal_at(text, i)?;
    Some((v, line_end(text, i + n)?))
}

/// Digits at the start of the little-endian word `x` (8 when all its bytes are digits).
#[inline(always)]
pub fn digits_in_word(x: u64) -> usize {
    digit_run(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scanners agree with the careful parsers wherever they accept.
    #[test]
    fn digits_match_the_scalar_parser() {
        for s in [
            "0",
            "7",
            "12",
            "123",
            "1234567",
            "12345678",
            "123456789",
            "00000042",
        ] {
            for pad in ["", " ", "\n", ".5", "abcdefghij", "9999999999"] {
                let text = format!("{s}{pad}");
                let got = digits_at(text.as_bytes(), 0);
                let run = text.bytes().take_while(u8::is_ascii_digit).count();
                let want = crate::lines::parse_u64(&text.as_bytes()[..run]).map(|x| (x, run));
                assert_eq!(got, want.filter(|_| run <= 19), "{text:?}");
            }
        }
        assert_eq!(digits_at(b"x1", 0), None);
        assert_eq!(digits_at(b"", 0), None);
        assert_eq!(digits_at(b"12345678901234567890", 0), None);
        assert_eq!(
            digits_at(b"1234567890123456789", 0),
            Some((1234567890123456789, 19))
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Where the scanners accept a field they give the careful parser's number, bit for
        /// bit, whatever follows it (bytes above 0xF9 included, for the carry in `digit_run`).
        #[test]
        fn scanners_match_the_careful_parsers(
            s in "[-+]?[0-9]{0,17}(\\.[0-9]{0,17})?",
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..10),
        ) {
            let mut text = s.clone().into_bytes();
            text.extend_from_slice(&tail);
            if let Some((v, len)) = decimal_at(&text, 0) {
                let careful = crate::lines::parse_f64(&text[..len]);
                proptest::prop_assert_eq!(Some(v.to_bits()), careful.map(f64::to_bits), "{:?}", s);
                proptest::prop_assert_eq!(
                    crate::lines::decimal_prefix(&text).map(|(v, n)| (v.to_bits(), n)),
                    Some((v.to_bits(), len))
                );
            } else {
                proptest::prop_assert!(crate::lines::decimal_prefix(&text).is_none(), "{:?}", s);
            }
            let run = text.iter().take_while(|b| b.is_ascii_digit()).count();
            let want = crate::lines::parse_u64(&text[..run]).filter(|_| run <= 19).map(|x| (x, run));
            proptest::prop_assert_eq!(digits_at(&text, 0), want);
        }

        /// A line the fast scanner accepts parses to the same entry with `tns::parse_line`.
        #[test]
        fn entry_lines_match_the_line_parser(
            c in proptest::collection::vec(0u64..20_000_000, 3),
            sep in "[ \t]{1,3}",
            v in "-?[0-9]{1,9}(\\.[0-9]{1,8})?",
            end in proptest::sample::select(vec!["\n", "\r\n", "", " \n", "x\n", "e5\n"]),
        ) {
            let line = format!("{}{sep}{}{sep}{}{sep}{v}{end}", c[0], c[1], c[2]);
            let mut coords = [0u64; 3];
            let fast = entry_line::<3>(line.as_bytes(), 0, &mut coords);
            let body = line.trim_end_matches('\n').trim_end_matches('\r');
            let mut want = [0u64; 3];
            let careful = crate::tns::parse_line(body.as_bytes(), &mut want, None);
            if let Some((value, next)) = fast {
                proptest::prop_assert_eq!(next, line.len());
                let careful = careful.expect("accepted by both").expect("an entry");
                proptest::prop_assert_eq!(value.to_bits(), careful.to_bits());
                proptest::prop_assert_eq!(coords, want);
            } else {
                // Only lines the fast scanner cannot prove well-formed are refused.
                let digits = v.bytes().filter(u8::is_ascii_digit).count();
                proptest::prop_assert!(
                    c.contains(&0) || !["\n", "\r\n", ""].contains(&end) || digits > 15
                        || careful.is_err(),
                    "{:?}", line
                );
            }
        }
    }
}
