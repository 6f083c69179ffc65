//! The state machine: the member's engine. Applying an entry writes its batch through
//! [`Engine::apply_replicated`] together with the applied position (the entry's log id and the
//! membership in force), under catalog key [`APPLIED_KEY`], in one RocksDB write; blank and
//! membership entries write the position alone. Each operation of a write becomes an entry of
//! this member's oplog (`local.oplog.rs`) in the same RocksDB write, with its own timestamp: an
//! entry's optime is that of its last operation.
//!
//! Snapshots (`snapshot.rs`) are checkpoints of the engine; installing one replaces the
//! engine's replicated state and this machine's applied state with the snapshot's.

use std::sync::Arc;

use bson::{RawBson, RawDocumentBuf, Timestamp};
use myriad_storage::{oplog_record_id, Engine, Oplog, OplogAppend, ReplicatedWrite};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{Entry, EntryPayload, LogId, OptionalSend, SnapshotMeta, StorageError, StorageIOError, StoredMembership};
use serde::{Deserialize, Serialize};

pub(crate) mod snapshot;

use snapshot::{SnapshotBuilder, Snapshots};
use crate::group_commit::decode_group;
use crate::{decode, encode, Applied, Member, TypeConfig};

/// Catalog-family key of the applied position (`R` keys belong to replication).
pub(crate) const APPLIED_KEY: &[u8] = b"Rapplied";

type Result<T> = std::result::Result<T, StorageError<u64>>;

/// What the engine has applied, stored with every applied entry.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct AppliedState {
    pub(crate) last_applied: Option<LogId<u64>>,
    pub(crate) membership: StoredMembership<u64, Member>,
    /// The optime of the last applied entry (MongoDB's `{ts, t}`).
    pub(crate) optime: Optime,
    /// The proposal time of the last applied write (the oplog's `wall`), in ms since the epoch.
    pub(crate) last_write_wall_time_ms: i64,
}

/// MongoDB's optime: a timestamp (seconds, increment) and the term. Derived from the log alone
/// (the seconds from each write's proposal time, never going back; the increment counting
/// entries within one second; and past the write's `not_before`, the proposer's clock floor),
/// so every member gives an entry the same optime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Optime {
    pub seconds: u32,
    pub increment: u32,
    pub term: u64,
}

impl Optime {
    fn next(self, wall_time_ms: Option<i64>, term: u64) -> Optime {
        let proposed = wall_time_ms.map(|milliseconds| (milliseconds / 1000).clamp(0, i64::from(u32::MAX)) as u32).unwrap_or(0);
        if proposed > self.seconds {
            Optime { seconds: proposed, increment: 1, term }
        } else {
            Optime { seconds: self.seconds, increment: self.increment + 1, term }
        }
    }

    /// The optime after `self` for a write with `not_before` (packed; 0 for none): at least
    /// [`Self::next`], and after the floor.
    fn next_after(self, wall_time_ms: i64, not_before: u64, term: u64) -> Optime {
        let next = self.next(Some(wall_time_ms), term);
        let (seconds, increment) = myriad_storage::unpack_cluster_time(not_before);
        if not_before == 0 || (next.seconds, next.increment) > (seconds, increment) {
            next
        } else if increment == u32::MAX {
            Optime { seconds: seconds.saturating_add(1), increment: 1, term }
        } else {
            Optime { seconds, increment: increment + 1, term }
        }
    }
}

/// Recent entries' optimes by log index (the primary reports its secondaries' optimes from the
/// indexes they replicated), bounded.
#[derive(Default)]
pub(crate) struct RecentOptimes {
    entries: std::collections::VecDeque<(u64, Optime)>,
    pub(crate) last: AppliedState,
}

const RECENT_OPTIMES: usize = 65_536;

impl RecentOptimes {
    pub(crate) fn optime_at(&self, index: u64) -> Option<Optime> {
        let position = self.entries.binary_search_by_key(&index, |(entry_index, _)| *entry_index).ok()?;
        Some(self.entries[position].1)
    }

    fn record(&mut self, state: &AppliedState) {
        if let Some(log_id) = state.last_applied {
            if self.entries.len() == RECENT_OPTIMES {
                self.entries.pop_front();
            }
            self.entries.push_back((log_id.index, state.optime));
        }
        self.last = state.clone();
    }
}

pub(crate) struct StateMachine {
    engine: Arc<Engine>,
    state: AppliedState,
    recent: Arc<parking_lot::Mutex<RecentOptimes>>,
    /// This member's `local.oplog.rs`, written with every applied write.
    oplog: Oplog,
    snapshots: Arc<Snapshots>,
}

fn apply_error(error: impl std::fmt::Display) -> StorageError<u64> {
    StorageIOError::apply(openraft::LogId::default(), openraft::AnyError::error(error.to_string())).into()
}

impl StateMachine {
    pub(crate) fn open(
        engine: Arc<Engine>,
        recent: Arc<parking_lot::Mutex<RecentOptimes>>,
        oplog_cap_bytes: i64,
        snapshots: Arc<Snapshots>,
    ) -> std::result::Result<StateMachine, String> {
        let oplog = engine.open_oplog(oplog_cap_bytes).map_err(|error| format!("the oplog: {error}"))?;
        let state: AppliedState = match engine.read_replication_state(APPLIED_KEY).map_err(|error| error.to_string())? {
            Some(bytes) => decode(&bytes).map_err(|error| format!("applied position: {error}"))?,
            None => AppliedState::default(),
        };
        recent.lock().record(&state);
        engine.start_history_at((state.optime.seconds, state.optime.increment));
        Ok(StateMachine { engine, state, recent, oplog, snapshots })
    }

    /// Applies one entry: its writes (a group, `group_commit.rs`) with their oplog entries and
    /// the new applied position in one RocksDB write, or the position alone for a blank or
    /// membership entry. Each write's operations get the next timestamps, in group order.
    fn apply_entry(&mut self, entry: &Entry<TypeConfig>) -> Result<()> {
        let writes = match &entry.payload {
            EntryPayload::Normal(payload) => decode_group(&payload.0).map_err(apply_error)?,
            EntryPayload::Blank | EntryPayload::Membership(_) => Vec::new(),
        };
        let mut state = self.state.clone();
        state.last_applied = Some(entry.log_id);
        if let EntryPayload::Membership(membership) = &entry.payload {
            state.membership = StoredMembership::new(Some(entry.log_id), membership.clone());
        }
        let term = entry.log_id.leader_id.term;
        let mut entries = Vec::new();
        let mut entry_first = None;
        let mut first_times = Vec::with_capacity(writes.len());
        for write in &writes {
            let first = state.optime.next_after(write.wall_time_ms, write.not_before, term);
            entry_first.get_or_insert(first);
            first_times.push((first.seconds, first.increment));
            // Each operation is an oplog entry with its own timestamp: the write's optime is the last.
            let operations = write.operations.len() as u32;
            state.optime = Optime { increment: first.increment + operations.saturating_sub(1), ..first };
            state.last_write_wall_time_ms = write.wall_time_ms;
            entries.extend(oplog_entries(write, first).map_err(apply_error)?);
        }
        if writes.is_empty() {
            state.optime = state.optime.next(None, term);
        }
        let marker = encode(&state);
        // Either write may wait for disk space (`myriad_storage::disk_space`).
        tokio::task::block_in_place(|| {
            if writes.is_empty() {
                self.engine.write_replication_state(APPLIED_KEY, &marker)
            } else {
                let oplog = (!entries.is_empty()).then_some(OplogAppend { oplog: &mut self.oplog, entries });
                self.engine.apply_replicated_group(&writes, &first_times, (APPLIED_KEY, &marker), oplog)
            }
        })
        .map_err(apply_error)?;
        // The point of history goes in before the optime is published, so a snapshot read
        // that waited for this optime finds it.
        if let Some(first) = entry_first {
            self.engine.record_history_point((first.seconds, first.increment), (state.optime.seconds, state.optime.increment));
        }
        self.recent.lock().record(&state);
        self.state = state;
        Ok(())
    }
}

/// MongoDB's oplog entries of `write`'s operations, the first at `first`: each operation's
/// `{op, ns, ui, o, o2}` with `ts`, `t`, `v` and `wall`.
fn oplog_entries(write: &ReplicatedWrite, first: Optime) -> std::result::Result<Vec<(i64, RawDocumentBuf)>, String> {
    let wall = bson::DateTime::from_millis(write.wall_time_ms);
    let mut entries = Vec::with_capacity(write.operations.len());
    for (offset, operation) in write.operations.iter().enumerate() {
        let ts = Timestamp { time: first.seconds, increment: first.increment + offset as u32 };
        let mut entry = RawDocumentBuf::from_bytes(operation.clone()).map_err(|error| format!("an operation record: {error}"))?;
        entry.append("ts", RawBson::Timestamp(ts));
        entry.append("t", first.term as i64);
        entry.append("v", 2i64);
        entry.append("wall", RawBson::DateTime(wall));
        entries.push((oplog_record_id(ts), entry));
    }
    Ok(entries)
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId<u64>>, StoredMembership<u64, Member>)> {
        Ok((self.state.last_applied, self.state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut replies = Vec::new();
        for entry in entries {
            if self.state.last_applied.is_some_and(|applied| applied.index >= entry.log_id.index) {
                // Applied before a restart (its position was written with it): not again.
                replies.push(Applied { index: entry.log_id.index });
                continue;
            }
            self.apply_entry(&entry)?;
            replies.push(Applied { index: entry.log_id.index });
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder(Arc::clone(&self.snapshots))
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>> {
        self.snapshots.receive()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta<u64, Member>, snapshot: Box<tokio::fs::File>) -> Result<()> {
        let state = self.snapshots.install(snapshot).await?;
        if state.last_applied != meta.last_log_id {
            return Err(apply_error(format!("the snapshot holds entry {:?}, its meta says {:?}", state.last_applied, meta.last_log_id)));
        }
        // This member's oplog has no entries between its last and the snapshot's position.
        let optime = state.optime;
        self.engine.forget_oplog_history_through(oplog_record_id(Timestamp { time: optime.seconds, increment: optime.increment.max(1) }));
        self.engine.start_history_at((optime.seconds, optime.increment));
        self.recent.lock().record(&state);
        self.state = state;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>> {
        self.snapshots.current()
    }
}

#[cfg(test)]
mod tests {
    use super::Optime;

    #[test]
    fn an_optime_passes_the_clock_floor_and_never_goes_back() {
        let start = Optime { seconds: 100, increment: 4, term: 1 };
        let pack = |seconds, increment| myriad_storage::pack_cluster_time((seconds, increment));
        // No floor, or one already passed: the wall clock's rule.
        assert_eq!(start.next_after(100_500, 0, 1), Optime { seconds: 100, increment: 5, term: 1 });
        assert_eq!(start.next_after(101_000, pack(100, 9), 1), Optime { seconds: 101, increment: 1, term: 1 });
        // A floor ahead of the log: just after it.
        assert_eq!(start.next_after(100_500, pack(100, 9), 2), Optime { seconds: 100, increment: 10, term: 2 });
        assert_eq!(start.next_after(100_500, pack(103, 0), 1), Optime { seconds: 103, increment: 1, term: 1 });
        assert_eq!(start.next_after(100_500, pack(103, u32::MAX), 1), Optime { seconds: 104, increment: 1, term: 1 });
    }
}
