//! The snapshot history (`transaction/history.rs`): a read at a cluster time sees exactly the
//! writes of the points at or before it, a time inside a point's range reads the point before, times
//! before the oldest kept point are SnapshotTooOld, and points leave by the window and by count
//! while the newest always stays. A model (the counter's value after each point) is checked
//! against reads at every time.

mod common;

use std::sync::atomic::Ordering;

use bson::{doc, Bson};
use myriad_storage::{Durability, Engine, SNAPSHOT_HISTORY_WINDOW_SECONDS};

fn set_counter(engine: &Engine, handle: &myriad_storage::CollectionHandle, value: i32) {
    let (record_id, raw) = engine.find_by_id(handle, &Bson::Int32(1)).expect("read").expect("present");
    let mut write = engine.begin_write(handle);
    write.update(record_id, &raw.to_document().expect("decode"), &doc! { "_id": 1, "n": value }).expect("update");
    write.commit(Durability::Default).expect("commit");
}

fn counter_at(engine: &Engine, handle: &myriad_storage::CollectionHandle, at: (u32, u32)) -> Result<i32, i32> {
    let id = engine.begin_transaction_at(at).map_err(|error| error.code())?;
    let records = engine.transaction_scan_records(id, handle, None, 10).expect("scan");
    engine.abort_transaction(id);
    assert_eq!(records.len(), 1);
    Ok(records[0].1.to_document().expect("decode").get_i32("n").expect("n"))
}

#[test]
fn reads_at_a_time_see_exactly_the_points_at_or_before_it() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = engine.get_or_create_collection("history", "counter").unwrap();
    common::insert_all(&engine, &handle, &[doc! {"_id": 1, "n": 0}]);
    engine.start_history_at((100, 1));
    // Point k covers the timestamps (100 + k, 1..=3) and leaves the counter at k.
    for value in 1..=5 {
        set_counter(&engine, &handle, value);
        engine.record_history_point((100 + value as u32, 1), (100 + value as u32, 3));
    }
    assert_eq!(counter_at(&engine, &handle, (100, 1)), Ok(0));
    assert_eq!(counter_at(&engine, &handle, (100, 9)), Ok(0), "between points: the earlier one");
    for value in 1..=5 {
        let seconds = 100 + value as u32;
        assert_eq!(counter_at(&engine, &handle, (seconds, 1)), Ok(value - 1), "the start of a point's range: the point before");
        assert_eq!(counter_at(&engine, &handle, (seconds, 2)), Ok(value - 1), "inside a point's range: the point before");
        assert_eq!(counter_at(&engine, &handle, (seconds, 3)), Ok(value), "the end of a point's range");
        assert_eq!(counter_at(&engine, &handle, (seconds, 7)), Ok(value), "after it, before the next");
    }
    assert_eq!(counter_at(&engine, &handle, (99, 5)), Err(239), "before the history: SnapshotTooOld");
    assert_eq!(engine.snapshot_history_bounds(), Some(((100, 1), (105, 3), 6)));
}

#[test]
fn points_leave_by_the_window_and_the_newest_stays() {
    let directory = tempfile::tempdir().unwrap();
    let engine = common::open(directory.path());
    let handle = engine.get_or_create_collection("history", "window").unwrap();
    common::insert_all(&engine, &handle, &[doc! {"_id": 1, "n": 0}]);
    engine.start_history_at((1_000, 1));
    set_counter(&engine, &handle, 1);
    engine.record_history_point((1_010, 1), (1_010, 1));
    let window = SNAPSHOT_HISTORY_WINDOW_SECONDS.load(Ordering::Relaxed);
    assert_eq!(window, 300, "MongoDB's default");
    // 300 s past the first point's time: it goes; the others stay.
    set_counter(&engine, &handle, 2);
    engine.record_history_point((1_301, 1), (1_301, 1));
    assert_eq!(counter_at(&engine, &handle, (1_000, 5)), Err(239));
    assert_eq!(counter_at(&engine, &handle, (1_010, 1)), Ok(1));
    assert_eq!(counter_at(&engine, &handle, (2_000, 1)), Ok(2));
    // Far later: every older point goes, the newest stays.
    set_counter(&engine, &handle, 3);
    engine.record_history_point((9_000, 1), (9_000, 4));
    assert_eq!(engine.snapshot_history_bounds(), Some(((9_000, 1), (9_000, 4), 1)));
    assert_eq!(counter_at(&engine, &handle, (9_000, 4)), Ok(3));
    assert_eq!(counter_at(&engine, &handle, (9_000, 2)), Err(239), "inside the only point left: nothing holds only the writes before it");
    assert_eq!(counter_at(&engine, &handle, (1_301, 1)), Err(239));
}
