//! Loops compiled for the CPU's wide vector instructions: the runtime's element-wise bodies
//! and the compiler's generated kernels (which name only this crate) run through [`wide`].
//!
//! Rust builds for the baseline of its target: on x86-64 that is SSE2, two `f64` per
//! instruction and no fused multiply-add. Nearly every x86-64 CPU in use has AVX2 and FMA (four
//! `f64` per instruction), and an element-wise loop of arithmetic (Black-Scholes' `exp`, `ln`
//! and distribution function, written to vectorise) runs in about half the instructions there.
//! Vector math libraries pick their code path at run time for this reason; [`wide`] does the
//! same for a closure: it calls the closure inside a function compiled for AVX-512 (F, DQ, VL)
//! with AVX2 + FMA when the CPU has all of those (eight `f64` per instruction; on the bench
//! VM's Zen 5, fused Black-Scholes 23 -> 17 ms), else for AVX2 + FMA when it has both, and
//! plainly otherwise.
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

/// 0: not decided yet; 1: the plain path; 2: AVX2 + FMA; 3: AVX-512 (F, DQ, VL) with them.
static PATH: AtomicU8 = AtomicU8::new(0);

/// The path [`wide`] takes, decided once per process from the CPU and `TESSERA_SIMD` (`0`: the
/// plain path; `avx2`: AVX2 + FMA even where the CPU has AVX-512; unset or anything else: the
/// widest the CPU has).
fn path() -> u8 {
    match PATH.load(Ordering::Relaxed) {
        0 => {
            let p = choose(cpu_path(), std::env::var("TESSERA_SIMD").ok().as_deref());
            PATH.store(p, Ordering::Relaxed);
            p
        }
        p => p,
    }
}

/// The path for a CPU whose widest is `cpu` under `TESSERA_SIMD=env`.
fn choose(cpu: u8, env: Option<&str>) -> u8 {
    match env {
        Some("0") => 1,
        Some("avx2") => cpu.min(2),
        _ => cpu,
    }
}

/// Whether [`wide`] takes a wide path (AVX2 + FMA, or AVX-512): the CPU has AVX2 and FMA and
/// the environment variable `TESSERA_SIMD` is not `0`. Decided once per process.
pub fn wide_available() -> bool {
    path() >= 2
}

/// Whether [`wide`] compiles for AVX-512 (eight `f64` per instruction): the CPU has AVX-512 F,
/// DQ and VL besides AVX2 and FMA, and `TESSERA_SIMD` is neither `0` nor `avx2`.
pub fn avx512_available() -> bool {
    path() == 3
}

/// Calls `f` compiled for AVX-512 or AVX2 + FMA, the widest the CPU has (see the module
/// documentation: `f` must be inlined here for that to matter), otherwise calls it as it is.
#[inline(always)]
pub fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    match path() {
        // SAFETY: `path` is 3 only when the running CPU reports AVX-512 F, DQ and VL, AVX2 and
        // FMA (`is_x86_feature_detected!`), the whole precondition of calling a function
        // compiled with those target features.
        3 => return unsafe { avx512(f) },
        // SAFETY: `path` is 2 or more only when the running CPU reports AVX2 and FMA, the
        // whole precondition of calling a function compiled with those target features.
        2 => return unsafe { avx2_fma(f) },
        _ => {}
    }
    plain(f)
}

/// The plain path, out of line as the wide ones are: on every path `f`'s loops get a function
/// and its registers to themselves (generated kernels' nests rely on it: inlined into their
/// kernel they shared its registers and reloaded slices per row).
#[inline(never)]
fn plain<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn avx2_fma<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
fn avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Asks the CPU to start loading the cache line that holds `p` (into every level, as for a
/// read soon), and returns at once: a hint, for [`crate::gather`]'s look-ahead. `p` need not
/// point into anything: `prefetcht0` never faults, on any address, mapped or not (Intel SDM
/// vol. 2, PREFETCHh: "prefetches ... do not cause exceptions"; the same on AMD), and it
/// reads nothing a program can see, so computing `p` with `wrapping_add` past a slice is as
/// harmless here as it is anywhere pointers are not dereferenced. Elsewhere than x86-64, no
/// instruction (stable Rust has no prefetch intrinsic there).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    prefetch_into::<false, T>(p)
}

/// As [`prefetch`], into the level-2 cache only (`prefetcht1`): for lines wanted a while from
/// now (the next chunk of a fused element-wise loop), which would evict the lines in use from
/// level 1.
#[inline(always)]
pub fn prefetch_l2<T>(p: *const T) {
    prefetch_into::<true, T>(p)
}

#[inline(always)]
fn prefetch_into<const L2_ONLY: bool, T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        // SAFETY: `prefetcht0` and `prefetcht1` need only SSE, in the x86-64 baseline, and
        // neither reads nor writes memory the program can observe, nor faults on any address
        // (see `prefetch`): no precondition is left for the caller.
        unsafe {
            match L2_ONLY {
                false => _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()),
                true => _mm_prefetch::<_MM_HINT_T1>(p.cast::<i8>()),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The widest path the running CPU has: 1 plain, 2 AVX2 + FMA, 3 AVX-512 with them.
fn cpu_path() -> u8 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if !(has!("avx2") && has!("fma")) {
            1
        } else if has!("avx512f") && has!("avx512dq") && has!("avx512vl") {
            3
        } else {
            2
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        1
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

    /// Each wide path the CPU has, called directly (not through the process's choice), gives
    /// the plain path's bits, for lengths that leave a remainder after the vector loop.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn every_path_the_cpu_has_gives_the_plain_paths_bits() {
        for n in [0, 1, 7, 8, 9, 31, 1000, 1003] {
            let xs: Vec<f64> = (0..n).map(|i| (i as f64 - 500.0) * 0.37).collect();
            let mut plain = vec![0.0; n];
            body(&xs, &mut plain);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            if cpu_path() >= 2 {
                let mut out = vec![0.0; n];
                // SAFETY: the CPU reports AVX2 and FMA (`cpu_path` is 2 or more).
                unsafe {
                    avx2_fma(
                        #[inline(always)]
                        || body(&xs, &mut out),
                    )
                };
                assert_eq!(bits(&plain), bits(&out), "AVX2, n = {n}");
            }
            if cpu_path() == 3 {
                let mut out = vec![0.0; n];
                // SAFETY: the CPU reports AVX-512 F, DQ, VL, AVX2 and FMA (`cpu_path` is 3).
                unsafe {
                    avx512(
                        #[inline(always)]
                        || body(&xs, &mut out),
                    )
                };
                assert_eq!(bits(&plain), bits(&out), "AVX-512, n = {n}");
            }
        }
    }

    #[test]
    fn the_path_is_decided_once_and_follows_the_cpu() {
        let first = wide_available();
        assert_eq!(first, wide_available());
        let env = std::env::var("TESSERA_SIMD").ok();
        assert_eq!(path(), choose(cpu_path(), env.as_deref()));
        assert_eq!(first, path() >= 2);
    }

    #[test]
    fn the_environment_narrows_the_path_and_never_widens_it() {
        assert_eq!(choose(3, None), 3);
        assert_eq!(choose(3, Some("avx2")), 2);
        assert_eq!(choose(3, Some("0")), 1);
        assert_eq!(choose(2, Some("avx2")), 2);
        assert_eq!(choose(2, None), 2);
        assert_eq!(choose(1, Some("avx2")), 1);
        assert_eq!(choose(1, Some("yes")), 1);
    }
}
