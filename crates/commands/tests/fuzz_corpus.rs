//! Replays the SCRAM fuzz corpus (fuzz/corpus/scram/, kept in the repository) through the very
//! function the cargo-fuzz target runs (fuzz/harness/scram.rs, included here), so every input
//! the fuzzer kept, crashes turned regressions included, is checked on stable Rust by
//! `cargo test`. Any panic fails the test.

#[path = "../../../fuzz/harness/scram.rs"]
#[allow(dead_code)]
mod harness;

#[path = "../../../fuzz/harness/replay.rs"]
mod replay;

use replay::replay;

#[test]
fn the_scram_conversation_corpus_replays() {
    assert!(replay("scram", harness::conversation) > 0, "the scram corpus is empty");
}
