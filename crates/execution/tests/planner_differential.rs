//! The planner cannot disagree with a collection scan: random collections, indexes and queries
//! (fuzz/harness/planner.rs, included here, says what is generated and compared), every plan
//! forced in turn against a forced collection scan. The same check is the `planner_differential`
//! fuzz target; its kept corpus (fuzz/corpus/planner_differential/) is replayed here too.

#[path = "../../../fuzz/harness/planner.rs"]
mod harness;

#[path = "../../../fuzz/harness/replay.rs"]
mod replay;

use proptest::collection::vec;
use proptest::prelude::any;
use proptest::test_runner::{Config, TestRunner};

/// Cases per run: each builds a collection of up to 24 documents and 3 indexes.
const CASES: u32 = 300;

#[test]
fn every_plan_returns_what_a_collection_scan_returns() {
    let directory = tempfile::tempdir().expect("temp dir");
    let engine = harness::engine(directory.path());
    let mut runner = TestRunner::new(Config { cases: CASES, failure_persistence: None, ..Config::default() });
    let outcome = runner.run(&vec(any::<u8>(), 0..400), |data| {
        harness::check_plans(&engine, &data);
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

#[test]
fn the_planner_differential_corpus_replays() {
    let directory = tempfile::tempdir().expect("temp dir");
    let engine = harness::engine(directory.path());
    assert!(replay::replay("planner_differential", move |data| harness::check_plans(&engine, data)) > 0, "the corpus is empty");
}
