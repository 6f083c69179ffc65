//! Replays a fuzz target's kept corpus (fuzz/corpus/<target>/) through the function the
//! target runs: shared by the corpus-replay tests of myriad-wire, myriad-query and
//! myriad-keystring, which include this file. Any panic fails the test.

use std::path::PathBuf;

/// The fuzzer runs on an 8 MiB main-thread stack with optimised frames; unoptimised test
/// frames are several times larger, so each replay gets room to match.
const REPLAY_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Runs `function` over every file of the target's corpus; returns how many there were.
pub fn replay(target: &'static str, function: impl Fn(&[u8]) + Send + 'static) -> usize {
    let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&directory)
        .unwrap_or_else(|error| panic!("corpus {}: {error}", directory.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .collect();
    paths.sort();
    let count = paths.len();
    std::thread::Builder::new()
        .stack_size(REPLAY_STACK_BYTES)
        .spawn(move || {
            for path in paths {
                let data = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
                eprintln!("replaying {}", path.display());
                function(&data);
            }
        })
        .expect("replay thread")
        .join()
        .unwrap_or_else(|_| panic!("an input of the {target} corpus failed (its path is printed above)"));
    count
}

