//! Replays the fuzz corpora of myriad-wire (fuzz/corpus/<target>/, kept in the repository) through
//! the very functions the cargo-fuzz targets run (fuzz/harness/wire.rs, included here), so
//! every input the fuzzer kept, crashes turned regressions included, is checked on stable Rust
//! by `cargo test`. Any panic fails the test.

#[path = "../../../fuzz/harness/wire.rs"]
#[allow(dead_code)]
mod harness;

#[path = "../../../fuzz/harness/replay.rs"]
mod replay;

use replay::replay;

#[test]
fn the_wire_message_corpus_replays() {
    assert!(replay("wire_message", harness::message_framing) > 0, "the wire_message corpus is empty");
}

#[test]
fn the_wire_compressed_corpus_replays() {
    assert!(replay("wire_compressed", harness::compressed_message) > 0, "the wire_compressed corpus is empty");
}

#[test]
fn the_wire_bson_corpus_replays() {
    assert!(replay("wire_bson", harness::bson_document) > 0, "the wire_bson corpus is empty");
}
