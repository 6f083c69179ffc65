//! Replays the fuzz corpora of myriad-query (fuzz/corpus/<target>/, kept in the repository) through
//! the very functions the cargo-fuzz targets run (fuzz/harness/query.rs, included here), so
//! every input the fuzzer kept, crashes turned regressions included, is checked on stable Rust
//! by `cargo test`. Any panic fails the test.

#[path = "../../../fuzz/harness/query.rs"]
#[allow(dead_code)]
mod harness;

#[path = "../../../fuzz/harness/replay.rs"]
mod replay;

use replay::replay;

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
