//! The `.tns` reader on arbitrary bytes: entry by entry, and in parallel batches. Either way
//! every entry has `rank` coordinates inside the declared dimensions, or the reader gives an
//! error; it never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_fuzz::read_text;

fuzz_target!(|data: &[u8]| read_text("in.tns", data));
