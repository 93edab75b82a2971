//! The Tessera compiler.
pub mod ast;
