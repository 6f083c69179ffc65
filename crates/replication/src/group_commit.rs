//! Group commit: the primary's concurrent writes share log entries. A writer hands its
//! [`ReplicatedWrite`] to the member's [`GroupCommit`] queue and waits; one proposer task takes
//! the queued writes as a *group* (in arrival order, bounded by [`GROUP_MAX_WRITES`] and
//! [`GROUP_MAX_BYTES`], checked before adding) and proposes the group as one Raft entry. While
//! [`GROUPS_IN_FLIGHT`] entries are proposed and not yet applied, new writes wait in the queue,
//! so a busy primary makes one log append, one fsync on each member, one AppendEntries round and
//! one state-machine RocksDB write for a whole group instead of for each write.
//!
//! Invariants:
//! - A group is one log entry: it commits, or not, as a whole, and the state machine applies it
//!   in one RocksDB write with its position ([`myriad_storage::Engine::apply_replicated_group`]),
//!   each write keeping its own proposal id, operations and so its own oplog timestamps.
//! - A write that changes the catalog ([`ReplicatedWrite::changes_catalog`]) is a group alone:
//!   a member that did not propose it applies it under the DDL mutex.
//! - Each writer learns its own group's outcome only: applied, interrupted because this member
//!   is not the leader any more (11602), or failed; a writer that stopped waiting is told
//!   nothing, and its write may still apply (the state machine then derives its effects).
//!   When this member stops being the leader, the writes still queued (never proposed) are
//!   failed at once with 11602.
//! - The queue holds one write per blocked writer (writers are threads that wait for their
//!   reply), so it is bounded by the threads that write.

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use myriad_storage::{ReplicatedWrite, StorageError};
use openraft::error::ClientWriteError;
use openraft::ServerState;
use parking_lot::Mutex;

use crate::{LogPayload, Raft};

/// Writes in one group at most.
pub(crate) const GROUP_MAX_WRITES: usize = 256;
/// Encoded bytes of one group's writes at most: a write that would take a non-empty group past
/// it starts the next group (a larger write is a group alone).
pub(crate) const GROUP_MAX_BYTES: usize = 1024 * 1024;
/// Groups proposed and not yet applied at most. One: the next group gathers every write that
/// arrives during the whole round of the one before, so each round carries as much as it can.
const GROUPS_IN_FLIGHT: usize = 1;

/// The first byte of a group's encoding. A log entry starting with another byte holds a single
/// write ([`ReplicatedWrite::encode`], version 1), as every entry did before group commit.
const GROUP_FORMAT_VERSION: u8 = 2;

/// What a writer learns of its group.
pub(crate) type Outcome = Result<(), StorageError>;

struct Pending {
    encoded: Vec<u8>,
    alone: bool,
    reply: SyncSender<Outcome>,
}

/// The writes waiting to be proposed, and the proposer's wake-up.
#[derive(Default)]
pub(crate) struct GroupCommit {
    queue: Mutex<Queue>,
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Pending>,
    /// Raft stopped: writes are refused instead of queued.
    closed: bool,
}

impl GroupCommit {
    /// Queues `write` for the next group; the receiver gets its outcome.
    pub(crate) fn submit(&self, write: &ReplicatedWrite) -> Receiver<Outcome> {
        let (reply, receiver) = sync_channel(1);
        let pending = Pending { encoded: write.encode(), alone: write.changes_catalog(), reply };
        let mut queue = self.queue.lock();
        if queue.closed {
            let _ = pending.reply.send(Err(stopped()));
        } else {
            queue.pending.push_back(pending);
            drop(queue);
            self.wake.notify_one();
        }
        receiver
    }

    /// The next group: the oldest queued writes, as many as the bounds allow (at least one),
    /// and a catalog change only alone.
    fn take_group(&self) -> Option<Vec<Pending>> {
        let queue = &mut self.queue.lock().pending;
        let first = queue.pop_front()?;
        let mut bytes = first.encoded.len();
        let alone = first.alone;
        let mut group = vec![first];
        while !alone && group.len() < GROUP_MAX_WRITES {
            let Some(next) = queue.front() else { break };
            if next.alone || bytes + next.encoded.len() > GROUP_MAX_BYTES {
                break;
            }
            bytes += next.encoded.len();
            group.extend(queue.pop_front());
        }
        Some(group)
    }

    /// The proposer: proposes queued writes as groups, at most [`GROUPS_IN_FLIGHT`] at a time,
    /// and answers each group's writers once Raft answers for it. Ends when Raft stops.
    pub(crate) async fn propose(self: Arc<Self>, raft: Raft) {
        let in_flight = Arc::new(tokio::sync::Semaphore::new(GROUPS_IN_FLIGHT));
        loop {
            let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else { return };
            let group = loop {
                if let Some(group) = self.take_group() {
                    break group;
                }
                self.wake.notified().await;
            };
            let payload = LogPayload(encode_group(group.iter().map(|pending| pending.encoded.as_slice())));
            let replies: Vec<SyncSender<Outcome>> = group.into_iter().map(|pending| pending.reply).collect();
            match raft.client_write_ff(payload).await {
                Ok(receiver) => {
                    tokio::spawn(async move {
                        let outcome = match receiver.await {
                            Ok(Ok(_)) => Ok(()),
                            Ok(Err(ClientWriteError::ForwardToLeader(_))) => Err(stepped_down()),
                            Ok(Err(error)) => Err(internal_error(error.to_string())),
                            Err(_) => Err(stopped()),
                        };
                        answer(replies, outcome);
                        drop(permit);
                    });
                }
                Err(_) => {
                    // Raft stopped (shutdown): this group and every queued write are refused.
                    answer(replies, Err(stopped()));
                    self.fail_queued(Err(stopped()), true);
                    return;
                }
            }
        }
    }
}

impl GroupCommit {
    /// Fails the queued writes with InterruptedDueToReplStateChange each time this member stops
    /// being the leader: behind the group in flight (whose answer waits for the next leader to
    /// commit or replace its entry) they would otherwise wait up to the writers' 30 s, where a
    /// write proposed on a deposed leader is refused at once. Ends when Raft stops.
    pub(crate) async fn fail_queued_on_step_down(self: Arc<Self>, raft: Raft) {
        let mut server = raft.server_metrics();
        let mut leading = false;
        loop {
            let now_leading = server.borrow_and_update().state == ServerState::Leader;
            if leading && !now_leading {
                self.fail_queued(Err(stepped_down()), false);
            }
            leading = now_leading;
            if server.changed().await.is_err() {
                return;
            }
        }
    }

    /// Answers every queued write with `outcome` (they were never proposed); with `close`,
    /// refuses later ones too.
    fn fail_queued(&self, outcome: Outcome, close: bool) {
        let queued = {
            let mut queue = self.queue.lock();
            queue.closed |= close;
            std::mem::take(&mut queue.pending)
        };
        answer(queued.into_iter().map(|pending| pending.reply).collect(), outcome);
    }
}

fn answer(replies: Vec<SyncSender<Outcome>>, outcome: Outcome) {
    for reply in replies {
        // A writer that stopped waiting dropped its receiver: nothing to tell.
        let _ = reply.send(outcome.clone());
    }
}

pub(crate) fn stepped_down() -> StorageError {
    StorageError::Replication {
        code: 11602,
        code_name: "InterruptedDueToReplStateChange",
        message: "operation was interrupted because the primary stepped down".into(),
    }
}

/// Raft stopped before the write was applied (the member shuts down).
fn stopped() -> StorageError {
    StorageError::Replication { code: 11600, code_name: "InterruptedAtShutdown", message: "interrupted at shutdown".into() }
}

fn internal_error(message: String) -> StorageError {
    StorageError::Replication { code: 1, code_name: "InternalError", message }
}

/// A group's encoding: [`GROUP_FORMAT_VERSION`], the write count (4 bytes), then each encoded
/// write with its length (4 bytes), little-endian.
fn encode_group<'a>(writes: impl ExactSizeIterator<Item = &'a [u8]> + Clone) -> Vec<u8> {
    let bytes: usize = writes.clone().map(|write| write.len() + 4).sum();
    let mut out = Vec::with_capacity(5 + bytes);
    out.push(GROUP_FORMAT_VERSION);
    out.extend_from_slice(&u32::try_from(writes.len()).expect("a group is bounded").to_le_bytes());
    for write in writes {
        out.extend_from_slice(&u32::try_from(write.len()).expect("a write is under 4 GiB").to_le_bytes());
        out.extend_from_slice(write);
    }
    out
}

/// The writes of a log entry: a group's, or the single write of an entry made before group
/// commit. Refuses missing or trailing bytes.
pub(crate) fn decode_group(bytes: &[u8]) -> Result<Vec<ReplicatedWrite>, StorageError> {
    if bytes.first() != Some(&GROUP_FORMAT_VERSION) {
        return Ok(vec![ReplicatedWrite::decode(bytes)?]);
    }
    let truncated = || StorageError::Corrupt(format!("a write group of {} bytes is truncated", bytes.len()));
    let mut rest = &bytes[1..];
    let mut take = |count: usize| -> Result<&[u8], StorageError> {
        let taken = rest.get(..count).ok_or_else(truncated)?;
        rest = &rest[count..];
        Ok(taken)
    };
    let length = |taken: &[u8]| u32::from_le_bytes(taken.try_into().expect("4 bytes")) as usize;
    let count = length(take(4)?);
    let mut writes = Vec::with_capacity(count.min(GROUP_MAX_WRITES));
    for _ in 0..count {
        let write_bytes = length(take(4)?);
        writes.push(ReplicatedWrite::decode(take(write_bytes)?)?);
    }
    if !rest.is_empty() {
        return Err(StorageError::Corrupt(format!("{} bytes after a write group", rest.len())));
    }
    Ok(writes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_storage::ReplicatedEffect;

    fn write(proposal: u64, batch_bytes: usize, effects: Vec<ReplicatedEffect>) -> ReplicatedWrite {
        ReplicatedWrite { families: 1, proposal, wall_time_ms: 5, not_before: 0, batch: vec![7; batch_bytes], effects, operations: vec![vec![1, 2]] }
    }

    #[test]
    fn groups_round_trip_and_single_writes_still_decode() {
        let writes = vec![write(1, 10, Vec::new()), write(2, 0, Vec::new()), write(3, 300, Vec::new())];
        let encoded: Vec<Vec<u8>> = writes.iter().map(ReplicatedWrite::encode).collect();
        let group = encode_group(encoded.iter().map(Vec::as_slice));
        assert_eq!(decode_group(&group).unwrap(), writes);
        assert_eq!(decode_group(&encoded[0]).unwrap(), vec![writes[0].clone()]);
        for cut in 0..group.len() {
            assert!(decode_group(&group[..cut]).is_err(), "a group cut at {cut} bytes decodes");
        }
        let mut longer = group.clone();
        longer.push(0);
        assert!(decode_group(&longer).is_err());
    }

    #[test]
    fn groups_keep_their_bounds_and_order_and_catalog_changes_alone() {
        let commit = GroupCommit::default();
        let catalog = vec![ReplicatedEffect::Prefixes { next: 9 }];
        let mut receivers = Vec::new();
        let mut proposal = 0;
        let mut submit = |batch_bytes: usize, effects: Vec<ReplicatedEffect>| {
            proposal += 1;
            receivers.push(commit.submit(&write(proposal, batch_bytes, effects)));
        };
        for _ in 0..GROUP_MAX_WRITES + 3 {
            submit(1, Vec::new());
        }
        submit(1, catalog.clone());
        submit(1, Vec::new());
        submit(GROUP_MAX_BYTES / 2, Vec::new());
        submit(GROUP_MAX_BYTES / 2, Vec::new());
        submit(2 * GROUP_MAX_BYTES, Vec::new());
        let mut sizes = Vec::new();
        let mut proposals = Vec::new();
        while let Some(group) = commit.take_group() {
            assert!(group.len() == 1 || group.iter().map(|pending| pending.encoded.len()).sum::<usize>() <= GROUP_MAX_BYTES);
            sizes.push(group.len());
            for pending in &group {
                proposals.push(ReplicatedWrite::decode(&pending.encoded).unwrap().proposal);
            }
        }
        assert_eq!(sizes, vec![GROUP_MAX_WRITES, 3, 1, 2, 1, 1]);
        assert_eq!(proposals, (1..=proposal).collect::<Vec<u64>>());
    }
}
