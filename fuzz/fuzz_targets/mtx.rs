//! The `.mtx` (Matrix Market) reader on arbitrary bytes, entry by entry and in batches.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_fuzz::read_text;

fuzz_target!(|data: &[u8]| read_text("in.mtx", data));
