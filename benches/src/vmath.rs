//! The benchmarks' vector math: [`exp`] and [`ln`] are `tessera_formats::math`'s (what
//! generated kernels call) with fused multiply-adds, as the Black-Scholes codes of the
//! benchmark literature use vector math libraries (Intel's and PARSEC's; `f64::exp` and
//! `f64::ln` are calls into libm, one element at a time), and [`cnd`] is the cumulative normal
//! distribution those codes use. The loops that call them run inside
//! `tessera_runtime::simd::wide`, whose AVX2 + FMA and AVX-512 paths make each multiply-add
//! one instruction; on a CPU without FMA ([`fma`] is then a libm call) they give the same
//! bits, slowly.

use tessera_formats::math::{estrin, pow2, ROUND};

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

/// `e^x` within 2 ulps of libm, fused multiply-adds ([`tessera_formats::math::exp_with`]).
#[inline(always)]
pub fn exp(x: f64) -> f64 {
    tessera_formats::math::exp_with(x, fma)
}

/// `ln x` within 3 ulps of libm, fused multiply-adds ([`tessera_formats::math::ln_with`]).
#[inline(always)]
pub fn ln(x: f64) -> f64 {
    tessera_formats::math::ln_with(x, fma)
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
    let p = estrin(r, EXP6_POLY, fma);
    // n is in [-1022, 0].
    p * pow2(t)
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
}
