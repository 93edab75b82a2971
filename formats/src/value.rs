//! Element and coordinate types: kernels are generic over the value type (`f32`, `f64`) and the
//! coordinate width (`u32`, `u64`; 32-bit coordinates halve the index traffic of sparse kernels).

use std::fmt::{Debug, Display};
use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

/// Which value type a file or tensor holds; recorded in `.tcs` headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    F32,
    F64,
}

impl ValueType {
    /// Size of one value in bytes.
    pub fn size(self) -> usize {
        match self {
            ValueType::F32 => 4,
            ValueType::F64 => 8,
        }
    }

    /// `f32` or `f64`.
    pub fn name(self) -> &'static str {
        match self {
            ValueType::F32 => "f32",
            ValueType::F64 => "f64",
        }
    }
}

/// A tensor element type: `f32` or `f64`.
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
    /// Converts from `f64`, rounding to the nearest representable value.
    fn from_f64(x: f64) -> Self;
    /// Widens to `f64`.
    fn to_f64(self) -> f64;
    /// `e^self`.
    fn exp(self) -> Self;
    /// Natural logarithm.
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
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
        }
    };
}
impl_value!(f32, ValueType::F32);
impl_value!(f64, ValueType::F64);

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
}
