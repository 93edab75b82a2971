//! The Tessera task runtime.
