//! Element and coordinate types: kernels are generic over the value type (`f32`, `f64`, and
//! `i64` for counting tensors) and the coordinate width (`u32`, `u64`; 32-bit coordinates halve
//! the index traffic of sparse kernels).

use std::fmt::{Debug, Display};
use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

/// Which value type a file or tensor holds; recorded in `.tcs` headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    F32,
    F64,
    /// Signed 64-bit integers: counts (paths, triangles) exact beyond f64's 2^53.
    I64,
}

impl ValueType {
    /// Size of one value in bytes.
    pub fn size(self) -> usize {
        match self {
            ValueType::F32 => 4,
            ValueType::F64 | ValueType::I64 => 8,
        }
    }

    /// `f32` or `f64`.
    pub fn name(self) -> &'static str {
        match self {
            ValueType::F32 => "f32",
            ValueType::F64 => "f64",
            ValueType::I64 => "i64",
        }
    }

    /// The type named `f32`, `f64` or `i64` (what [`ValueType::name`] gives).
    pub fn parse(name: &str) -> Option<ValueType> {
        [ValueType::F32, ValueType::F64, ValueType::I64]
            .into_iter()
            .find(|t| t.name() == name)
    }
}

/// Evaluates `$body` with type aliases `$v` (the value type) and `$i` (the coordinate type)
/// bound to the Rust types of a run-time `ValueType` and coordinate width (32, else 64): the
/// one place a file's recorded types become a monomorphised call, e.g.
/// `with_types!(h.value_type, h.index_bits, |V, I| file.view::<V, I>())`.
#[macro_export]
macro_rules! with_types {
    ($vt:expr, $bits:expr, |$v:ident, $i:ident| $body:expr) => {
        match ($vt, $bits) {
            ($crate::ValueType::F32, 32) => {
                type $v = f32;
                type $i = u32;
                $body
            }
            ($crate::ValueType::F32, _) => {
                type $v = f32;
                type $i = u64;
                $body
            }
            ($crate::ValueType::F64, 32) => {
                type $v = f64;
                type $i = u32;
                $body
            }
            ($crate::ValueType::F64, _) => {
                type $v = f64;
                type $i = u64;
                $body
            }
            ($crate::ValueType::I64, 32) => {
                type $v = i64;
                type $i = u32;
                $body
            }
            ($crate::ValueType::I64, _) => {
                type $v = i64;
                type $i = u64;
                $body
            }
        }
    };
}

/// A tensor element type: `f32`, `f64` or `i64`.
///
/// `bytemuck::Pod` lets `.tcs` arrays be handed out as zero-copy slices of a mapped file.
pub trait Value:
    bytemuck::Pod
    + Copy
    + Default
    + Send
    + Sync
    + Debug
    + Display
    + PartialEq
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + 'static
{
    /// The tag recorded in files.
    const TYPE: ValueType;
    /// The additive identity.
    fn zero() -> Self;
    /// Converts from `f64`, rounding to the nearest representable value (`i64`: toward zero,
    /// saturating at its bounds, NaN to 0 — Rust's `as`).
    fn from_f64(x: f64) -> Self;
    /// Converts a value read from a file: `None` when this type cannot hold it (a fraction or
    /// a non-finite value for `i64`), so that readers report it instead of truncating.
    fn from_f64_exact(x: f64) -> Option<Self> {
        Some(Self::from_f64(x))
    }
    /// Widens to `f64`.
    fn to_f64(self) -> f64;
    /// `e^self`, within 2 ulps of libm's ([`crate::math::exp`], vectorisable: what generated
    /// kernels call).
    fn exp(self) -> Self;
    /// Natural logarithm, within 4 ulps of libm's ([`crate::math::ln`]).
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
}

macro_rules! impl_value {
    ($t:ty, $tag:expr) => {
        impl Value for $t {
            const TYPE: ValueType = $tag;
            fn zero() -> Self {
                0.0
            }
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            // In f64 and rounded (for `f32` all but correctly rounded): the vectorisable
            // functions of `math`, so generated loops stay SIMD and evaluators agree. Inlined
            // always: called across crates from a loop compiled for AVX-512 or AVX2
            // (`crate::simd::wide`), a call would run the plain path one element
            // at a time (the `tensor!` Black-Scholes chain: 50 -> 80 ms).
            #[inline(always)]
            fn exp(self) -> Self {
                crate::math::exp(self as f64) as $t
            }
            #[inline(always)]
            fn ln(self) -> Self {
                crate::math::ln(self as f64) as $t
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
        }
    };
}
impl_value!(f32, ValueType::F32);
impl_value!(f64, ValueType::F64);

/// Counting tensors. Arithmetic is the integers' (a product of two counts is exact); the
/// transcendental functions, defined for every value type, go through `f64` and truncate.
impl Value for i64 {
    const TYPE: ValueType = ValueType::I64;
    fn zero() -> Self {
        0
    }
    fn from_f64(x: f64) -> Self {
        x as i64
    }
    fn from_f64_exact(x: f64) -> Option<Self> {
        // 2^63 itself is out of range; every integral f64 below it converts exactly.
        let fits =
            x.fract() == 0.0 && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&x);
        fits.then_some(x as i64)
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn exp(self) -> Self {
        Self::from_f64(crate::math::exp(self as f64))
    }
    fn ln(self) -> Self {
        Self::from_f64(crate::math::ln(self as f64))
    }
    fn sqrt(self) -> Self {
        Self::from_f64((self as f64).sqrt())
    }
    fn abs(self) -> Self {
        i64::abs(self)
    }
}

/// A coordinate/position type: `u32` or `u64`.
pub trait Index:
    bytemuck::Pod + Copy + Default + Send + Sync + Debug + Display + Ord + std::hash::Hash + 'static
{
    /// Width in bits (32 or 64), recorded in `.tcs` headers.
    const BITS: u32;
    /// The largest value as a `u64`.
    const MAX_U64: u64;
    /// Converts a `usize` that the caller knows fits (checked in debug builds; values that do
    /// not fit are truncated in release builds — use [`Index::try_from_usize`] for input data).
    fn from_usize(x: usize) -> Self;
    /// Converts a `usize`, or `None` when it does not fit in this width.
    fn try_from_usize(x: usize) -> Option<Self>;
    /// Widens to `usize` (every `u32`/`u64` fits on the 64-bit targets Tessera supports).
    fn to_usize(self) -> usize;
}

macro_rules! impl_index {
    ($t:ty) => {
        impl Index for $t {
            const BITS: u32 = <$t>::BITS;
            const MAX_U64: u64 = <$t>::MAX as u64;
            fn from_usize(x: usize) -> Self {
                debug_assert!(
                    <$t>::try_from(x).is_ok(),
                    "{x} does not fit in {}",
                    stringify!($t)
                );
                x as $t
            }
            fn try_from_usize(x: usize) -> Option<Self> {
                <$t>::try_from(x).ok()
            }
            fn to_usize(self) -> usize {
                self as usize
            }
        }
    };
}
impl_index!(u32);
impl_index!(u64);

#[cfg(not(target_pointer_width = "64"))]
compile_error!("tessera-formats assumes a 64-bit target (u64 coordinates must fit in usize)");

/// `x`, or the canonical quiet NaN (`f64::NAN`, bits `0x7ff8000000000000`) if `x` is any
/// NaN: what files store for NaN, so that output does not depend on which NaN an input spelled
/// or which NaN the hardware made when adding duplicates (`inf + -inf`).
#[inline]
pub(crate) fn canonical_nan(x: f64) -> f64 {
    if x.is_nan() {
        f64::NAN
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_conversions_check_their_width() {
        assert_eq!(u32::try_from_usize(u32::MAX as usize), Some(u32::MAX));
        assert_eq!(u32::try_from_usize(u32::MAX as usize + 1), None);
        assert_eq!(
            u64::try_from_usize(usize::MAX).map(|x| x.to_usize()),
            Some(usize::MAX)
        );
        assert_eq!(<u32 as Index>::BITS, 32);
        assert_eq!(<u64 as Index>::BITS, 64);
    }

    #[test]
    fn values_convert_and_compute() {
        assert_eq!(f32::from_f64(1.5).to_f64(), 1.5);
        assert_eq!(<f64 as Value>::sqrt(9.0), 3.0);
        assert_eq!(<f32 as Value>::abs(-2.0), 2.0);
        assert_eq!(f64::TYPE.size(), 8);
        assert_eq!(f32::TYPE.name(), "f32");
        assert!((<f64 as Value>::ln(<f64 as Value>::exp(2.0)) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn i64_values_are_exact_and_refuse_fractions() {
        assert_eq!(i64::from_f64_exact(3.0), Some(3));
        assert_eq!(i64::from_f64_exact(-7.0), Some(-7));
        assert_eq!(i64::from_f64_exact(1.5), None);
        assert_eq!(i64::from_f64_exact(f64::NAN), None);
        assert_eq!(i64::from_f64_exact(f64::INFINITY), None);
        assert_eq!(i64::from_f64_exact(2f64.powi(63)), None);
        assert_eq!(i64::from_f64_exact(-(2f64.powi(63))), Some(i64::MIN));
        assert_eq!(f64::from_f64_exact(1.5), Some(1.5));
        assert_eq!(<i64 as Value>::sqrt(10), 3);
        assert_eq!(<i64 as Value>::abs(-4), 4);
        assert_eq!(i64::TYPE.size(), 8);
        for t in [ValueType::F32, ValueType::F64, ValueType::I64] {
            assert_eq!(ValueType::parse(t.name()), Some(t));
        }
        assert_eq!(ValueType::parse("u8"), None);
    }
}
