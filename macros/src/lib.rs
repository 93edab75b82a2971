//! The `tensor!` macro.
