//! The cluster time this process has seen: the latest `operationTime` in any reply of a
//! replica-set member it called (shards and config servers; their optimes come from one kind of
//! clock, each member's log advancing past the times it is asked to read at). A router reads
//! every shard of a snapshot transaction or snapshot read at this one time, as mongos reads at
//! its latest in-memory cluster time.
//!
//! Invariant: the clock only rises.

use std::sync::atomic::{AtomicU64, Ordering};

use bson::{RawBsonRef, RawDocument, Timestamp};

static LATEST: AtomicU64 = AtomicU64::new(0);

/// Takes in a member's reply body: its `operationTime`, when it has one.
pub fn observe_reply(reply: &RawDocument) {
    if let Ok(Some(RawBsonRef::Timestamp(time))) = reply.get("operationTime") {
        observe(time);
    }
}

/// Raises the clock to `time`.
pub fn observe(time: Timestamp) {
    LATEST.fetch_max(myriad_storage::pack_cluster_time((time.time, time.increment)), Ordering::AcqRel);
}

/// The latest cluster time seen; None before any.
pub fn latest() -> Option<Timestamp> {
    let packed = LATEST.load(Ordering::Acquire);
    let (time, increment) = myriad_storage::unpack_cluster_time(packed);
    (packed != 0).then_some(Timestamp { time, increment })
}

/// The time a router reads at for a read concern at level snapshot without `atClusterTime`:
/// its latest cluster time, or the concern's `afterClusterTime` when that is later (a causally
/// consistent session's), which it takes out of the concern (a member takes one or the other).
pub fn read_time(concern: &mut bson::Document) -> Option<Timestamp> {
    let after = match concern.remove("afterClusterTime") {
        Some(bson::Bson::Timestamp(after)) => Some(after),
        _ => None,
    };
    match (latest(), after) {
        (Some(latest), Some(after)) => Some(if (after.time, after.increment) > (latest.time, latest.increment) { after } else { latest }),
        (latest, after) => latest.or(after),
    }
}

#[cfg(test)]
mod tests {
    use bson::{rawdoc, Timestamp};

    #[test]
    fn the_clock_only_rises() {
        super::observe_reply(&rawdoc! { "ok": 1.0, "operationTime": Timestamp { time: 2_000_000_000, increment: 5 } });
        super::observe_reply(&rawdoc! { "ok": 1.0, "operationTime": Timestamp { time: 2_000_000_000, increment: 3 } });
        super::observe_reply(&rawdoc! { "ok": 1.0 });
        assert_eq!(super::latest(), Some(Timestamp { time: 2_000_000_000, increment: 5 }));
        // A causally consistent session's later afterClusterTime wins, and leaves the concern.
        let later = Timestamp { time: 2_000_000_001, increment: 1 };
        let mut concern = bson::doc! { "level": "snapshot", "afterClusterTime": later };
        assert_eq!(super::read_time(&mut concern), Some(later));
        assert!(!concern.contains_key("afterClusterTime"));
        let mut concern = bson::doc! { "level": "snapshot" };
        assert_eq!(super::read_time(&mut concern), Some(Timestamp { time: 2_000_000_000, increment: 5 }));
    }
}
