//! Element types of stores, scalar values, and reduction operators.

use crate::buffer::{Buf, Data};
use std::fmt::Debug;

/// The element type of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F64,
    F32,
    I64,
    I32,
    U64,
    /// 32-bit coordinates (the compiler's default index width: half the index traffic).
    U32,
    /// A 1-d range of positions (the `pos` array of a compressed level).
    Range,
}

impl DType {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::Range => 16,
        }
    }
}

/// A half-open range of positions `[lo, hi)`: row `i` of a CSR matrix owns `crd[lo..hi]`.
/// (The thesis writes these as closed `[lo, hi]`; half-open ranges need no sentinel for empty
/// rows.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct PosRange {
    pub lo: u64,
    pub hi: u64,
}

impl PosRange {
    pub fn new(lo: u64, hi: u64) -> PosRange {
        PosRange { lo, hi }
    }

    pub fn len(&self) -> usize {
        self.hi.saturating_sub(self.lo) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.hi <= self.lo
    }
}

/// An associative, commutative reduction operator. Over integers, `Sum` and `Prod` wrap on
/// overflow (in debug builds too), so the result does not depend on the build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Min,
    Max,
}

/// A scalar task argument or task result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    F64(f64),
    I64(i64),
    U64(u64),
}

impl Scalar {
    /// The value as `f64` (integers convert with the usual rounding).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::F64(v) => v,
            Scalar::I64(v) => v as f64,
            Scalar::U64(v) => v as f64,
        }
    }

    /// The value as `i64` (floats truncate).
    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::F64(v) => v as i64,
            Scalar::I64(v) => v,
            Scalar::U64(v) => v as i64,
        }
    }

    /// The value as `u64` (floats truncate, negatives saturate at 0).
    pub fn as_u64(self) -> u64 {
        match self {
            Scalar::F64(v) => v as u64,
            Scalar::I64(v) => v.max(0) as u64,
            Scalar::U64(v) => v,
        }
    }

    /// Combines two scalars with `op`; mixed kinds combine as `f64`.
    pub fn combine(op: ReduceOp, a: Scalar, b: Scalar) -> Scalar {
        match (a, b) {
            (Scalar::I64(x), Scalar::I64(y)) => Scalar::I64(i64::combine(op, x, y)),
            (Scalar::U64(x), Scalar::U64(y)) => Scalar::U64(u64::combine(op, x, y)),
            _ => Scalar::F64(f64::combine(op, a.as_f64(), b.as_f64())),
        }
    }
}

impl From<f64> for Scalar {
    fn from(v: f64) -> Scalar {
        Scalar::F64(v)
    }
}
impl From<i64> for Scalar {
    fn from(v: i64) -> Scalar {
        Scalar::I64(v)
    }
}
impl From<u64> for Scalar {
    fn from(v: u64) -> Scalar {
        Scalar::U64(v)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A type that can be the element of a store. Implemented for `f64`, `f32`, `i64`, `i32`,
/// `u64`, `u32` and [`PosRange`]; sealed because the runtime stores each kind in its own buffer.
pub trait Element:
    Copy + Send + Sync + Debug + PartialEq + Default + 'static + sealed::Sealed
{
    const DTYPE: DType;
    /// The identity of `op`, or `None` when the type cannot be reduced with it.
    fn identity(op: ReduceOp) -> Option<Self>;
    /// `op(a, b)`.
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
    /// Converts a scalar (for `fill`); `None` when it does not fit the type.
    fn from_scalar(s: Scalar) -> Option<Self>;
    /// The positions this element points at when it is the source of an image:
    /// a range for [`PosRange`], the single coordinate `[v, v+1)` for integers, `None` for floats
    /// (and for negative integers, which point nowhere).
    fn image_span(self) -> Option<(u64, u64)>;
    #[doc(hidden)]
    fn buf(data: &Data) -> Option<&Buf<Self>>;
    #[doc(hidden)]
    fn buf_mut(data: &mut Data) -> Option<&mut Buf<Self>>;
    #[doc(hidden)]
    fn wrap(buf: Buf<Self>) -> Data;
}

/// `$add` and `$mul` combine `Sum` and `Prod`: plain for floats, wrapping for integers, so that
/// an integer reduction that overflows gives the same (wrapped) value in debug and release
/// builds — it panicked in debug builds only, failing the task there alone — as NumPy's do.
macro_rules! numeric {
    ($t:ty, $variant:ident, $zero:expr, $one:expr, $min:expr, $max:expr, $span:expr, $from:expr,
     $add:expr, $mul:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn identity(op: ReduceOp) -> Option<Self> {
                Some(match op {
                    ReduceOp::Sum => $zero,
                    ReduceOp::Prod => $one,
                    ReduceOp::Min => $max,
                    ReduceOp::Max => $min,
                })
            }
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => {
                        let f: fn(Self, Self) -> Self = $add;
                        f(a, b)
                    }
                    ReduceOp::Prod => {
                        let f: fn(Self, Self) -> Self = $mul;
                        f(a, b)
                    }
                    ReduceOp::Min => {
                        if b < a {
                            b
                        } else {
                            a
                        }
                    }
                    ReduceOp::Max => {
                        if b > a {
                            b
                        } else {
                            a
                        }
                    }
                }
            }
            fn from_scalar(s: Scalar) -> Option<Self> {
                let f: fn(Scalar) -> Option<Self> = $from;
                f(s)
            }
            fn image_span(self) -> Option<(u64, u64)> {
                let f: fn(Self) -> Option<(u64, u64)> = $span;
                f(self)
            }
            fn buf(data: &Data) -> Option<&Buf<Self>> {
                match data {
                    Data::$variant(b) => Some(b),
                    _ => None,
                }
            }
            fn buf_mut(data: &mut Data) -> Option<&mut Buf<Self>> {
                match data {
                    Data::$variant(b) => Some(b),
                    _ => None,
                }
            }
            fn wrap(buf: Buf<Self>) -> Data {
                Data::$variant(buf)
            }
        }
    };
}

numeric!(
    f64,
    F64,
    0.0,
    1.0,
    f64::NEG_INFINITY,
    f64::INFINITY,
    |_| None,
    |s| Some(s.as_f64()),
    |a, b| a + b,
    |a, b| a * b
);
numeric!(
    f32,
    F32,
    0.0,
    1.0,
    f32::NEG_INFINITY,
    f32::INFINITY,
    |_| None,
    |s| Some(s.as_f64() as f32),
    |a, b| a + b,
    |a, b| a * b
);
numeric!(
    i64,
    I64,
    0,
    1,
    i64::MIN,
    i64::MAX,
    |v| (v >= 0).then(|| (v as u64, v as u64 + 1)),
    |s| match s {
        Scalar::F64(_) => None,
        Scalar::I64(v) => Some(v),
        Scalar::U64(v) => i64::try_from(v).ok(),
    },
    i64::wrapping_add,
    i64::wrapping_mul
);
numeric!(
    i32,
    I32,
    0,
    1,
    i32::MIN,
    i32::MAX,
    |v| (v >= 0).then(|| (v as u64, v as u64 + 1)),
    |s| match s {
        Scalar::F64(_) => None,
        Scalar::I64(v) => i32::try_from(v).ok(),
        Scalar::U64(v) => i32::try_from(v).ok(),
    },
    i32::wrapping_add,
    i32::wrapping_mul
);
numeric!(
    u64,
    U64,
    0,
    1,
    0,
    u64::MAX,
    |v| Some((v, v + 1)),
    |s| match s {
        Scalar::F64(_) => None,
        Scalar::I64(v) => u64::try_from(v).ok(),
        Scalar::U64(v) => Some(v),
    },
    u64::wrapping_add,
    u64::wrapping_mul
);
numeric!(
    u32,
    U32,
    0,
    1,
    0,
    u32::MAX,
    |v| Some((v as u64, v as u64 + 1)),
    |s| match s {
        Scalar::F64(_) => None,
        Scalar::I64(v) => u32::try_from(v).ok(),
        Scalar::U64(v) => u32::try_from(v).ok(),
    },
    u32::wrapping_add,
    u32::wrapping_mul
);

impl sealed::Sealed for PosRange {}
impl Element for PosRange {
    const DTYPE: DType = DType::Range;
    fn identity(_: ReduceOp) -> Option<Self> {
        None
    }
    fn combine(_: ReduceOp, a: Self, _: Self) -> Self {
        a
    }
    fn from_scalar(_: Scalar) -> Option<Self> {
        None
    }
    fn image_span(self) -> Option<(u64, u64)> {
        Some((self.lo, self.hi))
    }
    fn buf(data: &Data) -> Option<&Buf<Self>> {
        match data {
            Data::Range(b) => Some(b),
            _ => None,
        }
    }
    fn buf_mut(data: &mut Data) -> Option<&mut Buf<Self>> {
        match data {
            Data::Range(b) => Some(b),
            _ => None,
        }
    }
    fn wrap(buf: Buf<Self>) -> Data {
        Data::Range(buf)
    }
}
