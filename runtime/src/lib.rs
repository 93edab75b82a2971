//! The Tessera task runtime.

pub mod io;
pub mod transport;
