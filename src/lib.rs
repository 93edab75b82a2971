//! Tessera: sparse tensor algebra in Einstein notation.
//!
//! This crate is the one dependency a program adds (`tessera = { path = "..." }`); it
//! re-exports what a user needs from the workspace's crates:
//!
//! - [`tensor!`]: a statement such as `y(i) = A(i,j) * x(j); A: csr` compiled into a kernel
//!   when your program is compiled; it returns `Result<Tensor, BindError>`.
//! - [`Tensor`] and [`Format`]: tensors in memory as level arrays (dense or compressed
//!   levels in a mode order, TACO's format strings), built from coordinates
//!   ([`Tensor::from_entries`]) or dense data ([`Tensor::dense_from_vec`]), read from and
//!   written to `.tns`, `.mtx` and `.tcs` files ([`Tensor::read`], [`Tensor::write`]),
//!   converted between formats ([`Tensor::to_format`]).
//! - [`formats`]: everything else about formats and files (streaming conversion, `.tcs`
//!   memory mapping, the readers and writers).
//! - [`runtime`]: the task runtime (stores, partitioning constraints, parallel execution).
//! - Features `sprs`, `nalgebra`, `faer`, `ndarray`: `Tensor::from_sprs`, `into_nalgebra_csr`,
//!   `from_faer`, `from_ndarray` and the other conversions, moving the arrays where the
//!   layouts agree (see the README).
//!
//! The README's examples are compiled and run as this crate's doctests
//! (`cargo test -p tessera --doc`).

// `tensor!` expands to paths under `::tessera`; this lets the crate's own tests use it.
extern crate self as tessera;

pub use tessera_formats::{
    Format, FormatError, Index, Level, LevelType, Tensor, TensorError, TensorView, Value,
};
pub use tessera_kernel_rt::bind::BindError;
pub use tessera_macros::tensor;

/// Level formats, tensors, views, and the `.tns`/`.mtx`/`.tcs` readers, writers and streaming
/// conversion (the `tessera-formats` crate).
pub use tessera_formats as formats;

/// The task runtime (the `tessera-runtime` crate; default feature `runtime`).
#[cfg(feature = "runtime")]
pub use tessera_runtime as runtime;

/// Tensors held in the runtime's stores, and errors of statements run on it
/// (`tensor!(rt => ...)`; feature `plans`).
#[cfg(feature = "plans")]
pub mod plans {
    /// The value and coordinate types a runtime stores: the bounds of a function generic over
    /// the tensors it passes to `tensor!(rt => ...)`.
    pub use tessera_compiler::plan::on_runtime::{PlanIndex, PlanValue};
    pub use tessera_compiler::plan::on_runtime::{PlanRunError, Stored};
}

// With the interop features, the crates converted to and from, at the versions Tessera uses.
#[cfg(feature = "faer")]
pub use tessera_formats::faer;
#[cfg(feature = "nalgebra")]
pub use tessera_formats::nalgebra_sparse;
#[cfg(feature = "ndarray")]
pub use tessera_formats::ndarray;
#[cfg(feature = "sprs")]
pub use tessera_formats::sprs;

/// What the expansion of [`tensor!`] names at run time. Not a public API: it changes with
/// the macro.
#[doc(hidden)]
pub mod __private {
    #[cfg(feature = "plans")]
    pub use tessera_compiler::plan::on_runtime as plans;
    pub use tessera_kernel_rt::{bind, rayon, tessera_formats};
    #[cfg(feature = "plans")]
    pub use tessera_runtime;

    /// Value types that hold ±∞, the missing entries of a `min`/`max` reduction. In `i64`
    /// they would be `i64::MAX`/`MIN`, and adding to them overflows (a panic in debug builds,
    /// a wrong value in release), so such a statement over `i64` tensors is a type error at
    /// the reduction, as `tessera run --type i64` refuses it.
    #[diagnostic::on_unimplemented(
        message = "a `min`/`max` reduction needs `f32` or `f64` tensors, not `{Self}`",
        label = "its missing entries are ±∞, which `{Self}` cannot hold",
        note = "convert the tensors to `f64` (`Tensor::from_entries` with `v as f64`)"
    )]
    pub trait InfiniteFill {}
    impl InfiniteFill for f32 {}
    impl InfiniteFill for f64 {}

    /// Value types that hold fractions: a constant such as `0.5` in `i64` would be truncated
    /// (to 0), so a statement with one over `i64` tensors is a type error at the constant, as
    /// `tessera run --type i64` refuses it.
    #[diagnostic::on_unimplemented(
        message = "a fractional constant needs `f32` or `f64` tensors, not `{Self}`",
        label = "`{Self}` would truncate this constant",
        note = "write an integer constant, or convert the tensors to `f64`"
    )]
    pub trait Fractions {}
    impl Fractions for f32 {}
    impl Fractions for f64 {}

    /// Compiles only when the operand's values hold fractions (see [`Fractions`]).
    pub fn fractions<T: Operand>(_: &T)
    where
        T::Value: Fractions,
    {
    }

    /// The value type of an operand (a tensor, or one kept in a runtime's stores).
    pub trait Operand {
        type Value;
    }
    impl<V: crate::Value, I: crate::Index> Operand for crate::Tensor<V, I> {
        type Value = V;
    }
    #[cfg(feature = "plans")]
    impl<V: plans::PlanValue, I: plans::PlanIndex> Operand for plans::Stored<V, I> {
        type Value = V;
    }

    /// Compiles only when the operand's values hold ±∞ (see [`InfiniteFill`]).
    pub fn infinite_fill<T: Operand>(_: &T)
    where
        T::Value: InfiniteFill,
    {
    }
}

/// The README's Rust examples, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Rust examples of `docs/language.md`, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../docs/language.md")]
pub struct LanguageDoctests;
