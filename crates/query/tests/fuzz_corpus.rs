//! Replays the fuzz corpora of myriad-query (fuzz/corpus/<target>/, kept in the repository) through
//! the very functions the cargo-fuzz targets run (fuzz/harness/query.rs, included here), so
//! every input the fuzzer kept, crashes turned regressions included, is checked on stable Rust
//! by `cargo test`. Any panic fails the test.

#[path = "../../../fuzz/harness/query.rs"]
#[allow(dead_code)]
mod harness;

use std::path::PathBuf;

/// The fuzzer runs on an 8 MiB main-thread stack with optimised frames; unoptimised test
/// frames are several times larger, so each replay gets room to match.
const REPLAY_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Runs `function` over every file of the target's corpus; returns how many there were.
fn replay(target: &'static str, function: fn(&[u8])) -> usize {
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

#[test]
fn the_query_filter_corpus_replays() {
    assert!(replay("query_filter", harness::filter) > 0, "the query_filter corpus is empty");
}

#[test]
fn the_query_update_corpus_replays() {
    assert!(replay("query_update", harness::update) > 0, "the query_update corpus is empty");
}

#[test]
fn the_query_projection_corpus_replays() {
    assert!(replay("query_projection", harness::projection) > 0, "the query_projection corpus is empty");
}

#[test]
fn the_query_pipeline_corpus_replays() {
    assert!(replay("query_pipeline", harness::pipeline) > 0, "the query_pipeline corpus is empty");
}
