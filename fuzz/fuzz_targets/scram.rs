#![no_main]

#[path = "../harness/scram.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::conversation(data));
