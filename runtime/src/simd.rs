//! Element-wise code compiled for the CPU's wide vector instructions.
//!
//! Rust builds for the baseline of its target: on x86-64 that is SSE2, two `f64` per
//! instruction and no fused multiply-add. Nearly every x86-64 CPU in use has AVX2 and FMA (four
//! `f64` per instruction), and an element-wise loop of arithmetic (Black-Scholes' `exp`, `ln`
//! and distribution function, written to vectorise) runs in about half the instructions there.
//! Vector math libraries pick their code path at run time for this reason; [`wide`] does the
//! same for a closure: it calls the closure inside a function compiled for AVX2 + FMA when the
//! CPU has both, and plainly otherwise.
//!
//! The results do not change: Rust never contracts `a * b + c` into a fused multiply-add
//! unless asked (`f64::mul_add`, which is correctly rounded on both paths), and the wider
//! registers compute the same IEEE operations lane by lane. So a program gives bitwise the same
//! answer on either path, which `TESSERA_SIMD=0` (the plain path always) lets a test check.
//!
//! Only code *inlined* into the wide function is compiled for it. A closure called from the
//! plain and the wide path has two call sites, and LLVM does not inline a large one into
//! either: mark the closure `#[inline(always)]` (the element-wise bodies of the benches and
//! the compiler's generated chunk bodies do), and the functions it calls `#[inline]`.

use std::sync::atomic::{AtomicU8, Ordering};

/// 0: not decided yet; 1: the plain path; 2: the wide path.
static PATH: AtomicU8 = AtomicU8::new(0);

/// Whether [`wide`] takes the wide path: the CPU has AVX2 and FMA and the environment variable
/// `TESSERA_SIMD` is not `0`. Decided once per process.
pub fn wide_available() -> bool {
    match PATH.load(Ordering::Relaxed) {
        0 => {
            let wide = cpu_has_wide() && std::env::var("TESSERA_SIMD").as_deref() != Ok("0");
            PATH.store(if wide { 2 } else { 1 }, Ordering::Relaxed);
            wide
        }
        p => p == 2,
    }
}

/// Calls `f` compiled for AVX2 + FMA where the CPU has them (see the module documentation:
/// `f` must be inlined here for that to matter), otherwise calls it as it is.
#[inline(always)]
pub fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if wide_available() {
        // SAFETY: `wide_available` is true only when the running CPU reports AVX2 and FMA
        // (`is_x86_feature_detected!`), which is the whole precondition of calling a function
        // compiled with those target features. This is the only `unsafe` of this module.
        return unsafe { avx2_fma(f) };
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn avx2_fma<R>(f: impl FnOnce() -> R) -> R {
    f()
}

fn cpu_has_wide() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of the kind that vectorises: division, square root, a polynomial, a select.
    #[inline(always)]
    fn body(xs: &[f64], out: &mut [f64]) {
        for (o, &x) in out.iter_mut().zip(xs) {
            let r = (x.abs() + 1.0).sqrt() / (x * x + 3.0);
            let p = 1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r / 120.0)));
            let q = x.mul_add(p, -r);
            *o = if x < 0.0 { q - p } else { q * p };
        }
    }

    #[test]
    fn the_wide_path_gives_the_plain_paths_bits() {
        let xs: Vec<f64> = (0..10_000).map(|i| (i as f64 - 5000.0) * 0.37).collect();
        let (mut plain, mut wide_out) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
        body(&xs, &mut plain);
        wide(
            #[inline(always)]
            || body(&xs, &mut wide_out),
        );
        assert!(plain
            .iter()
            .zip(&wide_out)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    #[test]
    fn the_path_is_decided_once_and_follows_the_cpu() {
        let first = wide_available();
        assert_eq!(first, wide_available());
        if std::env::var("TESSERA_SIMD").as_deref() != Ok("0") {
            assert_eq!(first, cpu_has_wide());
        }
    }
}
