#![no_main]

#[path = "../harness/keystring.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::key_encoding(data));
