#![no_main]

#[path = "../harness/planner.rs"]
mod harness;

use std::sync::{Arc, OnceLock};

/// One engine for the whole run (each input builds its own collection and drops it after);
/// its temporary directory is removed when the fuzzer exits normally.
static ENGINE: OnceLock<(tempfile::TempDir, Arc<myriad_storage::Engine>)> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (_, engine) = ENGINE.get_or_init(|| {
        let directory = tempfile::tempdir().expect("temp dir");
        let engine = harness::engine(directory.path());
        (directory, engine)
    });
    harness::check_plans(engine, data);
});
