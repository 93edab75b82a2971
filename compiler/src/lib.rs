//! The Tessera compiler.
pub mod ast;
pub mod diagnostics;
pub mod parse;
pub mod check;
pub mod oracle;
pub mod ir;
pub mod lower;
pub mod interp;
pub mod codegen;
pub mod bind;
pub mod cli;
pub mod driver;
