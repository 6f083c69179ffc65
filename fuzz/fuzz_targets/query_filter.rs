#![no_main]

#[path = "../harness/query.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::filter(data));
