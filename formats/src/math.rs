//! `e^x` and `ln x` that a loop can vectorise: what [`Value::exp`](crate::Value::exp) and
//! [`Value::ln`](crate::Value::ln) compute for every value type, so that generated kernels
//! (`tensor!` statements, `tessera run` programs) and the compiler's reference evaluators give
//! the same bits.
//!
//! `f64::exp` and `f64::ln` are calls into libm, one element at a time, so a loop that calls
//! them runs one element per call even where the rest of its arithmetic is eight `f64` wide
//! (a `tensor!` Black-Scholes chain spent most of its time in those calls). These are
//! branch-free straight-line arithmetic on the argument's bits — Cody–Waite range reduction
//! and a polynomial, specials chosen by selects — so LLVM turns a loop of them into SIMD code.
//! NumPy's AVX-512 paths make the same trade.
//!
//! Accuracy (measured against libm by this module's tests over the whole range, subnormals
//! and specials included): `exp` within 2 units in the last place, `ln` within 4; not
//! correctly rounded. Specials as IEEE and libm have them: `exp` of NaN is NaN, of `+∞` is
//! `+∞`, of `−∞` is 0, overflow gives `+∞` and underflow subnormals or 0; `ln` of NaN or of a
//! negative number is NaN, of `±0` is `−∞`, of `+∞` is `+∞`, and subnormal arguments are
//! exact-scaled first.
//!
//! The multiply-adds are separate multiplies and adds (Rust never contracts them), so every
//! SIMD path and the plain one give the same bits; [`exp_with`] and [`ln_with`] take the
//! multiply-add as a parameter for callers that always run on FMA paths (the benchmarks'
//! vector math passes `f64::mul_add`).

/// `1.5 · 2^52`: adding it to a float of magnitude below `2^51` rounds to an integer and
/// leaves that integer, two's complement, in the low bits of the sum's representation.
pub const ROUND: f64 = 6_755_399_441_055_744.0;
/// The bits of [`ROUND`].
const ROUND_BITS: u64 = 0x4338_0000_0000_0000;
/// `ln 2` split so that `n · LN2_HI` is exact for `|n| < 2^11` (fdlibm's constants).
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
/// `2^52`, which scales a subnormal to a normal number exactly.
const TWO_52: f64 = 4_503_599_627_370_496.0;

/// `e^r` on `|r| <= ln 2 / 2` to degree 11: a Chebyshev fit computed in 50-digit arithmetic
/// (mpmath `chebyfit`) and rounded to `f64`; the rounded polynomial's relative error is below
/// `1.7e-17` (0.08 ulp) on the interval. The Taylor series needs degree 13 for the same.
const EXP_POLY: [f64; 12] = [
    1.0,
    1.0,
    0.500_000_000_000_001_9,
    0.166_666_666_666_666_8,
    0.041_666_666_666_488_1,
    0.008_333_333_333_319_601,
    0.001_388_888_895_231_477_5,
    0.000_198_412_698_900_471_13,
    2.480_148_548_232_849_4e-5,
    2.755_724_091_857_897e-6,
    2.763_263_963_904_103e-7,
    2.511_003_760_596_377_7e-8,
];

/// `(atanh(s)/s - 1) / s^2` as a polynomial in `z = s^2` on `|s| <= 0.1716`: fdlibm's
/// `Lg1`..`Lg7` (`e_log.c`, error below `2^-58.45`) halved, after the leading 1.
const LN_POLY: [f64; 8] = [
    1.0,
    f64::from_bits(0x3FE5_5555_5555_5593) / 2.0,
    f64::from_bits(0x3FD9_9999_9997_FA04) / 2.0,
    f64::from_bits(0x3FD2_4924_9422_9359) / 2.0,
    f64::from_bits(0x3FCC_71C5_1D8E_78AF) / 2.0,
    f64::from_bits(0x3FC7_4664_96CB_03DE) / 2.0,
    f64::from_bits(0x3FC3_9A09_D078_C69F) / 2.0,
    f64::from_bits(0x3FC2_F112_DF3E_5244) / 2.0,
];

/// `a * b + c` as two operations, each rounded: the same bits on every CPU.
#[inline(always)]
fn mul_add_separate(a: f64, b: f64, c: f64) -> f64 {
    a * b + c
}

/// `c[0] + c[1] x + ... + c[N-1] x^(N-1)` (N at most 16) by Estrin's scheme, with `mad(a, b,
/// c)` for `a * b + c`: pairs combined with `x`, pairs of those with `x^2`, then `x^4`, `x^8`.
/// The longest dependency chain is four multiply-adds instead of Horner's N, so a vectorised
/// loop calling it is bound by throughput rather than by one long chain per element (with
/// Horner the benchmarks' vector math was slower than libm's scalar calls).
#[inline(always)]
pub fn estrin<const N: usize>(x: f64, c: [f64; N], mad: impl Fn(f64, f64, f64) -> f64) -> f64 {
    const { assert!(N <= 16) };
    // Each level adds a term only where it exists (`c + 0.0 * x` would not fold away).
    let (x2, coef) = (x * x, |i: usize| if i < N { c[i] } else { 0.0 });
    let x4 = x2 * x2;
    let pair = |i: usize| {
        if i + 1 < N {
            mad(coef(i + 1), x, coef(i))
        } else {
            coef(i)
        }
    };
    let quad = |i: usize| {
        if i + 2 < N {
            mad(pair(i + 2), x2, pair(i))
        } else {
            pair(i)
        }
    };
    let oct = |i: usize| {
        if i + 4 < N {
            mad(quad(i + 4), x4, quad(i))
        } else {
            quad(i)
        }
    };
    if N > 8 {
        mad(oct(8), x4 * x4, oct(0))
    } else {
        oct(0)
    }
}

/// `2^n` from `t = n + ROUND` (`n` an integer in `[-1022, 1023]`), built in the exponent
/// field.
#[inline(always)]
pub fn pow2(t: f64) -> f64 {
    let biased = t.to_bits().wrapping_sub(ROUND_BITS).wrapping_add(1023);
    f64::from_bits(biased << 52)
}

/// `e^x` within 2 ulps of libm over the whole range (see the module's notes).
#[inline(always)]
pub fn exp(x: f64) -> f64 {
    exp_with(x, mul_add_separate)
}

/// [`exp`] with `mad` for its multiply-adds.
#[inline(always)]
pub fn exp_with(x: f64, mad: impl Fn(f64, f64, f64) -> f64 + Copy) -> f64 {
    // Beyond these e^x is +inf or 0 whatever x is; NaN goes through (`clamp` keeps it).
    let x = x.clamp(-746.0, 710.0);
    // x = n ln 2 + r with n an integer in [-1077, 1025] and |r| <= ln 2 / 2 (plus an ulp).
    let t = mad(x, std::f64::consts::LOG2_E, ROUND);
    let n = t - ROUND;
    // n · LN2_HI is exact and x - n · LN2_HI too (Sterbenz): r carries one rounding.
    let r = mad(-n, LN2_LO, mad(-n, LN2_HI, x));
    let p = estrin(r, EXP_POLY, mad);
    // 2^n as 2^h · 2^(n-h), h = n/2 rounded: both factors are normal numbers for every n
    // here, and the second multiply alone rounds, to a subnormal, 0 or +inf where e^x is one.
    let th = 0.5 * n + ROUND;
    let h = th - ROUND;
    p * pow2(th) * pow2((n - h) + ROUND)
}

/// `ln x` within 4 ulps of libm over the whole range (see the module's notes).
#[inline(always)]
pub fn ln(x: f64) -> f64 {
    ln_with(x, mul_add_separate)
}

/// [`ln`] with `mad` for its multiply-adds.
#[inline(always)]
pub fn ln_with(x: f64, mad: impl Fn(f64, f64, f64) -> f64 + Copy) -> f64 {
    const SQRT2: f64 = std::f64::consts::SQRT_2;
    // A subnormal x is 2^-52 times a normal one.
    let tiny = x < f64::MIN_POSITIVE;
    let bits = if tiny { x * TWO_52 } else { x }.to_bits();
    // x = 2^e m with m in [1, 2); then m in [sqrt(1/2), sqrt(2)). (Sign and specials are
    // replaced at the end: their bits give some finite number here.)
    let m = f64::from_bits((bits & 0x000F_FFFF_FFFF_FFFF) | 0x3FF0_0000_0000_0000);
    let e = f64::from_bits((bits >> 52) | 0x4330_0000_0000_0000) - (TWO_52 + 1023.0);
    let e = if tiny { e - 52.0 } else { e };
    let big = m > SQRT2;
    let m = if big { m * 0.5 } else { m };
    let e = if big { e + 1.0 } else { e };
    // ln m = 2 atanh(s) = 2 s (1 + z/3 + z^2/5 + ...), z = s^2, |s| <= 0.172: fdlibm's
    // degree-7 fit in z (the series needs degree 11). m - 1 is exact (Sterbenz).
    let s = (m - 1.0) / (m + 1.0);
    let p = estrin(s * s, LN_POLY, mad);
    let y = mad(e, LN2_HI, mad(2.0 * s, p, e * LN2_LO));
    // Selects, not branches: NaN and negatives fail `x >= 0`.
    let y = if x == f64::INFINITY { x } else { y };
    let y = if x == 0.0 { f64::NEG_INFINITY } else { y };
    if x >= 0.0 {
        y
    } else {
        f64::NAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place (0 for equal values, including two NaNs; the
    /// signed-magnitude bits made monotone so that a distance across 0 counts right).
    fn ulps(a: f64, b: f64) -> u64 {
        if a.is_nan() && b.is_nan() {
            return 0;
        }
        let key = |x: f64| {
            let b = x.to_bits() as i64;
            if b < 0 {
                i64::MIN - b
            } else {
                b
            }
        };
        key(a).abs_diff(key(b))
    }

    /// A deterministic spread of `n` doubles over `[lo, hi]`, evenly in the value or, for a
    /// positive range, in the logarithm.
    fn spread(lo: f64, hi: f64, n: usize, log: bool) -> impl Iterator<Item = f64> {
        (0..=n).map(move |i| {
            let t = i as f64 / n as f64;
            if log {
                (lo.ln() + (hi.ln() - lo.ln()) * t).exp()
            } else {
                lo + (hi - lo) * t
            }
        })
    }

    /// The largest distance of `f` from `g` over each range `(lo, hi, points, in the log)`.
    fn worst(f: fn(f64) -> f64, g: fn(f64) -> f64, ranges: &[(f64, f64, usize, bool)]) -> Vec<u64> {
        let one = |&(lo, hi, n, log)| spread(lo, hi, n, log).map(|x| ulps(f(x), g(x))).max();
        ranges.iter().map(|r| one(r).unwrap_or(0)).collect()
    }

    /// Dropping the last coefficient of either polynomial fails these bounds.
    #[test]
    fn exp_is_within_2_ulps_of_libm_over_its_whole_range() {
        let got = worst(
            exp,
            f64::exp,
            &[
                (-1.0, 1.0, 1_000_003, false),
                (-709.0, 709.7, 1_000_003, false),
                // Results subnormal or underflowing to 0, and overflowing to +inf.
                (-745.2, -707.0, 200_003, false),
                (709.0, 710.0, 20_003, false),
                (1e-300, 1e-3, 100_003, true),
            ],
        );
        assert!(got.iter().all(|&u| u <= 2), "{got:?}");
    }

    #[test]
    fn ln_is_within_4_ulps_of_libm_over_its_whole_range() {
        let got = worst(
            ln,
            f64::ln,
            &[
                (0.5, 2.0, 1_000_003, false),
                (1e-300, 1e300, 1_000_003, true),
                // Subnormal arguments, down to the smallest.
                (5e-324, 2.2e-308, 200_003, true),
                (1e300, f64::MAX, 20_003, true),
            ],
        );
        assert!(got.iter().all(|&u| u <= 4), "{got:?}");
    }

    #[test]
    fn specials_are_libm_s() {
        let exp_args = [
            0.0,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e308,
            -1e308,
            709.8,
            -745.2,
            -746.0,
        ];
        for x in exp_args {
            assert_eq!(ulps(exp(x), x.exp()), 0, "exp({x})");
        }
        let ln_args = [
            1.0,
            0.0,
            -0.0,
            -1.0,
            -1e-310,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            5e-324,
            f64::MAX,
        ];
        for x in ln_args {
            assert!(ulps(ln(x), x.ln()) <= 1, "ln({x}): {} vs {}", ln(x), x.ln());
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(ln(1.0), 0.0);
        assert_eq!(ln(2.0), std::f64::consts::LN_2);
    }

    /// With fused multiply-adds (the benchmarks' vector math) the same bounds hold.
    #[test]
    fn the_fused_variants_keep_the_bounds() {
        let fused = |x| exp_with(x, f64::mul_add);
        let xs = spread(-745.2, 709.7, 1_000_003, false);
        assert!(xs.map(|x| ulps(fused(x), x.exp())).max() <= Some(2));
        let fused = |x| ln_with(x, f64::mul_add);
        let xs = spread(5e-324, f64::MAX, 1_000_003, true);
        assert!(xs.map(|x| ulps(fused(x), x.ln())).max() <= Some(4));
    }
}
