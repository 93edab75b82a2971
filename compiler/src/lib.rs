//! The Tessera compiler.
