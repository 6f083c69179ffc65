//! Replays the fuzz corpora of myriad-keystring (fuzz/corpus/<target>/, kept in the repository) through
//! the very functions the cargo-fuzz targets run (fuzz/harness/keystring.rs, included here), so
//! every input the fuzzer kept, crashes turned regressions included, is checked on stable Rust
//! by `cargo test`. Any panic fails the test.

#[path = "../../../fuzz/harness/keystring.rs"]
#[allow(dead_code)]
mod harness;

#[path = "../../../fuzz/harness/replay.rs"]
mod replay;

use replay::replay;

#[test]
fn the_key_encoding_corpus_replays() {
    assert!(replay("keystring", harness::key_encoding) > 0, "the keystring corpus is empty");
}
