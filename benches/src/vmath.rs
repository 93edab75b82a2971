//! `exp` and `ln` written so that a loop calling them vectorises, as the Black-Scholes codes
//! of the benchmark literature do (Intel's and PARSEC's use vector math libraries; `f64::exp`
//! and `f64::ln` are calls into libm, one element at a time).
//!
//! Both are branch-free straight-line arithmetic on the bits of the argument (Cody–Waite range
//! reduction and a polynomial), so LLVM turns a loop of them into SIMD code: the integer parts
//! use only 64-bit shifts, adds and ors, and integer-to-float conversions go through the
//! `1.5 · 2^52` magic-number trick. Their multiply-adds are fused ([`fma`]): one instruction
//! on the AVX2 + FMA and AVX-512 paths of `tessera_runtime::simd::wide` (where the bench's
//! loops run), a libm call per operation on a CPU without FMA (same bits, much slower). They are
//! accurate to a few units in the last place on the ranges Black-Scholes needs (see the
//! tests), not correctly rounded, and do not handle NaN, infinities or subnormal results
//! the way libm does (documented per function).

/// `1.5 · 2^52`: adding it to a float of magnitude below `2^51` rounds to an integer and
/// leaves that integer, two's complement, in the low bits of the sum's representation.
const ROUND: f64 = 6_755_399_441_055_744.0;
/// The bits of [`ROUND`].
const ROUND_BITS: u64 = 0x4338_0000_0000_0000;
/// `ln 2` split so that `n · LN2_HI` is exact for `|n| < 2^11` (fdlibm's constants).
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);

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

/// `c[0] + c[1] x + ... + c[N-1] x^(N-1)` (N at most 16) by Estrin's scheme: pairs
/// combined with `x`, pairs of those with `x^2`, then `x^4`, `x^8`. The longest dependency
/// chain is four multiply-adds instead of Horner's N, so a vectorised loop calling it is
/// bound by throughput rather than by one long chain per element (measured: with Horner
/// these were slower than libm's scalar calls; written out because a halving loop over the
/// array was not unrolled). Each step is a fused multiply-add ([`fma`]).
#[inline(always)]
fn estrin<const N: usize>(x: f64, c: [f64; N]) -> f64 {
    const { assert!(N <= 16) };
    // Each level adds a term only where it exists (`c + 0.0 * x` would not fold away).
    let (x2, coef) = (x * x, |i: usize| if i < N { c[i] } else { 0.0 });
    let x4 = x2 * x2;
    let pair = |i: usize| {
        if i + 1 < N {
            fma(coef(i + 1), x, coef(i))
        } else {
            coef(i)
        }
    };
    let quad = |i: usize| {
        if i + 2 < N {
            fma(pair(i + 2), x2, pair(i))
        } else {
            pair(i)
        }
    };
    let oct = |i: usize| {
        if i + 4 < N {
            fma(quad(i + 4), x4, quad(i))
        } else {
            quad(i)
        }
    };
    if N > 8 {
        fma(oct(8), x4 * x4, oct(0))
    } else {
        oct(0)
    }
}

/// `a * b + c` rounded once (`f64::mul_add`). Inside `tessera_runtime::simd::wide`'s AVX2 +
/// FMA and AVX-512 paths this is one `vfmadd` instruction, where `a * b + c` is two (Rust never
/// contracts them): on a Zen 3 core the multiplies and multiply-adds share two pipes and the
/// adds have two of their own, so a multiply-add does an add for free. On the plain path (a
/// CPU without FMA, or `TESSERA_SIMD=0`) it is a call to libm's `fma`, correctly rounded
/// too, so every path gives the same bits, slowly there.
#[inline(always)]
pub fn fma(a: f64, b: f64, c: f64) -> f64 {
    a.mul_add(b, c)
}

/// `e^x`. Arguments are clamped to `[-708, 709]`, so the result is at least `e^-708`
/// (about `3e-308`, where libm would give a subnormal or zero) and finite. Not for NaN.
#[inline(always)]
pub fn exp(x: f64) -> f64 {
    let x = x.clamp(-708.0, 709.0);
    // x = n ln 2 + r with n an integer and |r| <= ln 2 / 2 (plus an ulp: `t` is rounded once).
    let t = fma(x, std::f64::consts::LOG2_E, ROUND);
    let n = t - ROUND;
    let r = fma(-n, LN2_LO, fma(-n, LN2_HI, x));
    // e^r by a degree-11 polynomial (error below 0.08 ulp on the interval).
    let p = estrin(r, EXP_POLY);
    // 2^n built in the exponent field: n + 1023 is in [2, 2046].
    let biased = t.to_bits().wrapping_sub(ROUND_BITS).wrapping_add(1023);
    p * f64::from_bits(biased << 52)
}

/// `ln x` for positive, finite, normal `x` (anything else gives an unspecified number).
#[inline(always)]
pub fn ln(x: f64) -> f64 {
    const SQRT2: f64 = std::f64::consts::SQRT_2;
    let bits = x.to_bits();
    // x = 2^e m with m in [1, 2); then m in [sqrt(1/2), sqrt(2)).
    let m = f64::from_bits((bits & 0x000F_FFFF_FFFF_FFFF) | 0x3FF0_0000_0000_0000);
    let e =
        f64::from_bits((bits >> 52) | 0x4330_0000_0000_0000) - (4_503_599_627_370_496.0 + 1023.0);
    let big = m > SQRT2;
    let m = if big { m * 0.5 } else { m };
    let e = if big { e + 1.0 } else { e };
    // ln m = 2 atanh(s) = 2 s (1 + z/3 + z^2/5 + ...), z = s^2, |s| <= 0.172: fdlibm's
    // degree-7 fit in z (the series needs degree 11).
    let s = (m - 1.0) / (m + 1.0);
    let z = s * s;
    let p = estrin(z, LN_POLY);
    fma(e, LN2_HI, fma(2.0 * s, p, e * LN2_LO))
}

/// `e^r` on `|r| <= ln 2 / 2` to degree 6 (mpmath `chebyfit`, 50 digits, rounded to `f64`):
/// relative error below `2.6e-9` (measured `2.53e-9`), for [`cnd`] only (see [`exp_for_cnd`]).
const EXP6_POLY: [f64; 7] = [
    1.0,
    1.000_000_037_716_214_2,
    0.500_000_004_711_775_7,
    0.166_664_155_146_523_39,
    0.041_666_352_896_773_985,
    0.008_375_126_398_231_344,
    0.001_394_110_843_407_010_3,
];

/// `e^x` for `x <= 0` to a relative `2.6e-9`: what [`cnd`] needs (bs22). There it multiplies
/// a value of at most 0.5 (`1 - Φ(|x|)` plus the formula's error), so it moves the result
/// by under `1.3e-9` (measured `7.0e-10`), a seventieth of the formula's own `7.5e-8`, where
/// [`exp`]'s 2 ulps cost the degree-11 polynomial and a second `ln 2` constant: this is
/// 5 operations fewer and one clamp instead of two, and `cnd` 1.89 -> 1.45 ns an element
/// (microbench, AVX2). Arguments below `-708` give `e^-708`; not for NaN.
#[inline(always)]
fn exp_for_cnd(x: f64) -> f64 {
    // One compare-and-select (`f64::max` would add NaN handling); `x` is at most 0.
    let x = if x < -708.0 { -708.0 } else { x };
    let t = fma(x, std::f64::consts::LOG2_E, ROUND);
    let n = t - ROUND;
    // One `ln 2` constant: `n ln 2` is off by at most `1021 · 2^-54`, `6e-14` relative.
    let r = fma(-n, std::f64::consts::LN_2, x);
    let p = estrin(r, EXP6_POLY);
    // 2^n built in the exponent field: n + 1023 is in [2, 1023].
    let biased = t.to_bits().wrapping_sub(ROUND_BITS).wrapping_add(1023);
    p * f64::from_bits(biased << 52)
}

/// The cumulative normal distribution `Φ(x)` by Abramowitz–Stegun 26.2.17 (as the
/// Black-Scholes benchmarks use; absolute error below `7.5e-8`), branch-free with the
/// vectorisable [`exp_for_cnd`]; `cnd(-x) = 1 - cnd(x)` exactly for `x > 0`. Its
/// multiply-adds are fused (bs21), and its `e^(-x²/2)` is good to `2.6e-9` relative, not to
/// the last place (bs22): each result is within `1e-9` of the same formula evaluated with
/// separate multiplies and adds and libm's `exp`, and within the formula's `7.5e-8` of `Φ`
/// (see the tests).
#[inline(always)]
pub fn cnd(x: f64) -> f64 {
    let k = 1.0 / fma(0.231_641_9, x.abs(), 1.0);
    // k (b1 + b2 k + b3 k^2 + b4 k^3 + b5 k^4) by Horner: Estrin's shorter chain measured no
    // faster here (the loop is bound by the multiply pipes, not by latency).
    let b = fma(k, 1.330_274_429, -1.821_255_978);
    let b = fma(k, b, 1.781_477_937);
    let b = fma(k, b, -0.356_563_782);
    let poly = k * fma(k, b, 0.319_381_530);
    let w = fma(
        -0.398_942_280_401_432_7 * exp_for_cnd(-0.5 * x * x),
        poly,
        1.0,
    );
    if x < 0.0 {
        1.0 - w
    } else {
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Relative error against libm over `n` points of `[lo, hi]`.
    fn worst(f: fn(f64) -> f64, g: fn(f64) -> f64, lo: f64, hi: f64, n: usize) -> f64 {
        (0..=n)
            .map(|i| lo + (hi - lo) * i as f64 / n as f64)
            .map(|x| ((f(x) - g(x)) / g(x)).abs())
            .fold(0.0, f64::max)
    }

    /// Largest distance in units in the last place from libm over `n + 1` points spread
    /// evenly over `[lo, hi]` (`log`: evenly in the logarithm), results positive.
    fn worst_ulps(
        f: fn(f64) -> f64,
        g: fn(f64) -> f64,
        lo: f64,
        hi: f64,
        n: usize,
        log: bool,
    ) -> u64 {
        (0..=n)
            .map(|i| {
                let t = i as f64 / n as f64;
                if log {
                    (lo.ln() + (hi.ln() - lo.ln()) * t).exp()
                } else {
                    lo + (hi - lo) * t
                }
            })
            .filter(|&x| g(x) > 0.0)
            .map(|x| f(x).to_bits().abs_diff(g(x).to_bits()))
            .max()
            .unwrap_or(0)
    }

    /// Measured (bs19), 1,000,004 points each: exp at most 2 ulps from libm on [-700, 700] and
    /// on [-1, 1]; ln at most 3 ulps on [1e-300, 1e300] (evenly in the logarithm) and 4 on
    /// [0.5, 2] (the Taylor/atanh-series versions before: 2, 2, 4, 5). With fused
    /// multiply-adds (bs21) the same: 2, 2, 3, 4 (and exp 2 on [-708, 0], cnd's range). The
    /// bounds guard the polynomials: dropping the last coefficient of either fails them.
    #[test]
    fn exp_and_ln_are_within_a_few_ulps_of_libm() {
        let got = [
            worst_ulps(exp, f64::exp, -700.0, 700.0, 1_000_003, false),
            worst_ulps(exp, f64::exp, -1.0, 1.0, 1_000_003, false),
            worst_ulps(exp, f64::exp, -708.0, 0.0, 1_000_003, false),
            worst_ulps(ln, f64::ln, 1e-300, 1e300, 1_000_003, true),
            worst_ulps(ln, f64::ln, 0.5, 2.0, 1_000_003, false),
        ];
        assert!(
            got[..3].iter().all(|&u| u <= 2) && got[3] <= 3 && got[4] <= 4,
            "{got:?}"
        );
    }

    /// The formula as the bench wrote it before bs21: separate multiplies and adds.
    fn cnd_unfused(x: f64) -> f64 {
        let k = 1.0 / (1.0 + 0.231_641_9 * x.abs());
        let poly = k
            * (0.319_381_530
                + k * (-0.356_563_782
                    + k * (1.781_477_937 + k * (-1.821_255_978 + k * 1.330_274_429))));
        let w = 1.0 - 0.398_942_280_401_432_7 * (-0.5 * x * x).exp() * poly;
        if x < 0.0 {
            1.0 - w
        } else {
            w
        }
    }

    /// `Φ(x)` from the Taylor series of `erf` (`|x| <= 5`; cancellation leaves it good to
    /// about `1e-12` there, far below the formula's `7.5e-8`).
    fn phi(x: f64) -> f64 {
        let z = x / std::f64::consts::SQRT_2;
        let (mut term, mut sum) = (z, z);
        for n in 1..200 {
            term *= -z * z / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        0.5 + sum / std::f64::consts::PI.sqrt()
    }

    /// Measured over 2,000,001 points of [-40, 40]: at most 7.0e-10 from the unfused
    /// evaluation with libm's `exp` (bs21, with the 2-ulp [`exp`]: 5.6e-16), at most 7.431e-8
    /// from `Φ` on [-5, 5] (the formula's bound is 7.5e-8; the unfused evaluation's distance
    /// is 7.452e-8), symmetric to the bit. Dropping a term of either polynomial fails the
    /// first bound (the last of `EXP6_POLY`: 6.9e-7).
    #[test]
    fn cnd_is_the_abramowitz_stegun_formula_to_1e_9() {
        let xs = (0..=2_000_000).map(|i| -40.0 + 80.0 * i as f64 / 2_000_000.0);
        let worst = xs
            .clone()
            .map(|x| (cnd(x) - cnd_unfused(x)).abs())
            .fold(0.0, f64::max);
        assert!(worst <= 1e-9, "{worst:e}");
        let worst = xs
            .clone()
            .filter(|x| x.abs() <= 5.0)
            .map(|x| (cnd(x) - phi(x)).abs())
            .fold(0.0, f64::max);
        assert!(worst < 7.5e-8, "{worst:e}");
        assert!(xs.filter(|&x| x > 0.0).all(|x| cnd(-x) == 1.0 - cnd(x)));
        assert!(cnd(-1e300) == 0.0 && cnd(1e300) == 1.0);
    }

    #[test]
    fn exp_is_within_a_few_ulp_of_libm() {
        assert!(worst(exp, f64::exp, -700.0, 700.0, 200_001) < 1e-15);
        assert!(worst(exp, f64::exp, -1.0, 1.0, 200_001) < 1e-15);
        assert_eq!(exp(0.0), 1.0);
        // Clamped, not zero or infinite.
        assert!(exp(-1e4) > 0.0 && exp(-1e4) < 1e-307);
        assert!(exp(1e4).is_finite());
    }

    /// [`exp_for_cnd`] over its range (cnd's `-x²/2`): relative error at most 2.6e-9 against
    /// libm (measured 2.53e-9 on [-708, 0]), clamped at -708.
    #[test]
    fn exp_for_cnd_is_within_2_6e_9_of_libm() {
        let worst = (0..=2_000_000)
            .map(|i| -708.0 * i as f64 / 2_000_000.0)
            .map(|x| ((exp_for_cnd(x) - x.exp()) / x.exp()).abs())
            .fold(0.0, f64::max);
        assert!(worst <= 2.6e-9, "{worst:e}");
        assert_eq!(exp_for_cnd(-1e300), exp_for_cnd(-708.0));
        assert!(exp_for_cnd(-708.0) > 0.0);
    }

    #[test]
    fn ln_is_within_a_few_ulp_of_libm() {
        assert!(worst(ln, f64::ln, 1e-3, 10.0, 200_001) < 1e-15);
        assert!(worst(ln, f64::ln, 1e-300, 1e300, 200_001) < 1e-15);
        // Absolute error near 1, where ln is near 0.
        for i in 0..=10_000 {
            let x = 0.99 + 0.02 * i as f64 / 10_000.0;
            assert!((ln(x) - x.ln()).abs() < 1e-16, "{x}");
        }
        assert_eq!(ln(1.0), 0.0);
        assert_eq!(ln(2.0), std::f64::consts::LN_2);
    }
}
