#![no_main]

#[path = "../harness/wire.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::compressed_message(data));
