//! Where replication plugs into the commit pipeline: every write that reaches RocksDB through
//! the engine (document writes, catalog changes, index-build chunks) goes through
//! [`Engine::write_logged`]. A standalone node writes the batch at once, as always. A node with a
//! [`WriteReplicator`] installed (a replica-set member) hands the batch, the in-memory effects
//! it implies and its operation records to the replicator as one [`ReplicatedWrite`], which
//! appends it to the replication log and returns once a state machine applied it on this node
//! through [`Engine::apply_replicated`].
//!
//! Replication is physical: a [`ReplicatedWrite`] carries the RocksDB WriteBatch bytes
//! themselves, so every member holds the same keys, the same record ids and the same prefixes,
//! and a member can be seeded from a copy of another's files. Batch bytes name column families
//! by RocksDB's numeric id, so each write also carries the writer's family fingerprint
//! ([`Engine::family_fingerprint`]); a member whose families were numbered differently refuses
//! the write instead of misapplying it.
//!
//! The writer keeps its locks (its collection's stripe, the DDL mutex) while the write goes
//! through the log, so a member applies writes in log order and the next writer of a collection
//! sees the previous write's effects. The state machine must not take those locks for such a
//! write: the writer registers it as a *proposal*, and [`Engine::apply_replicated`] only writes
//! the batch of a registered proposal, leaving its in-memory effects to the writer, which
//! applies them under its locks once the replicator returns. A write with no registered
//! proposal (on a secondary, or one its writer stopped waiting for) is applied whole by the
//! state machine, which then takes the locks itself. Taking a proposal out of the registry and
//! writing its batch happen under one mutex, so exactly one of the two applies its effects.
//!
//! Invariants: a batch reaches RocksDB once per member, with the marker the replicator passes
//! (its applied position) in the same atomic write; the `local` database never goes through the
//! log (it is per member, as MongoDB's); effects are idempotent maxima and snapshot changes, so
//! re-deriving them from disk is always safe.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rocksdb::{WriteBatch, WriteOptions};

use crate::catalog::CollectionEntry;
use crate::families::{COLUMN_FAMILIES, FAMILY_CATALOG};
use crate::operation_record::{CatalogEffect, OperationRecord};
use crate::oplog::OplogAppend;
use crate::{Engine, RecordId, StorageError};

/// Appends writes to a replication log. Installed on a replica-set member's engine
/// ([`Engine::set_replicator`]).
pub trait WriteReplicator: Send + Sync {
    /// Appends `write` to the log and returns once this member applied it
    /// ([`Engine::apply_replicated`]), or an error when it will not be taken (this member is not
    /// the writable primary) or its outcome is unknown (the primary stepped down first).
    fn replicate(&self, write: ReplicatedWrite) -> Result<(), StorageError>;
}

/// An in-memory change a batch implies, replayed from the log on every member.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplicatedEffect {
    /// A collection's record-id counter moves up to `through`.
    RecordIds { prefix: u64, through: RecordId },
    /// A capped collection lost every record up to `through`.
    CappedTrimmed { prefix: u64, through: RecordId },
    /// A capped collection received inserts (its tailers wake).
    CappedInserted { prefix: u64 },
    /// The prefix counter moves to `next`.
    Prefixes { next: u64 },
    /// The catalog entry (its stored bytes) is published.
    Publish { entry: Vec<u8> },
    /// The namespace leaves the catalog snapshot (loaded again from disk if it still exists).
    Forget { namespace: String },
    /// A prepared transaction's commit over the collections `prefixes`, visible from
    /// `commit_time` (its coordinator's): every member records it as a late commit
    /// (`transaction/late_commits.rs`), so a member that becomes primary knows it too.
    LateCommit { prefixes: Vec<u64>, commit_time: crate::ClusterTime },
}

/// One entry of the replication log: a batch, the effects it implies, its operation records.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicatedWrite {
    /// The writer's [`Engine::family_fingerprint`].
    pub families: u64,
    /// The writer's proposal id (0: nobody waits for it).
    pub proposal: u64,
    /// Milliseconds since the epoch when the writer proposed it (the oplog's `wall`).
    pub wall_time_ms: i64,
    /// A cluster time its optime must pass (0: none), packed as `seconds << 32 | increment`:
    /// the proposer's clock floor ([`Engine::raise_cluster_time_floor`]), so that the shards of
    /// a cluster keep one clock (a time read at, or a prepared transaction's commit time).
    pub not_before: u64,
    /// `WriteBatch::data()`.
    pub batch: Vec<u8>,
    pub effects: Vec<ReplicatedEffect>,
    /// The operation records as oplog entries without optime (`op`, `ns`, `ui`, `o`, `o2`).
    pub operations: Vec<Vec<u8>>,
}

/// Version 3 adds `not_before` after `wall_time_ms` (2 is taken by a log entry's group header,
/// which a lone write of version 1 never starts with); a write without one is still encoded as
/// version 1, and both decode.
const FORMAT_VERSION: u8 = 1;
const FORMAT_VERSION_WITH_CLOCK: u8 = 3;

impl ReplicatedWrite {
    /// True when applying it changes the catalog (prefixes, published or forgotten entries):
    /// such a write is a log entry of its own, since a member that did not propose it applies it
    /// under the DDL mutex.
    pub fn changes_catalog(&self) -> bool {
        self.effects.iter().any(|effect| matches!(effect, ReplicatedEffect::Prefixes { .. } | ReplicatedEffect::Publish { .. } | ReplicatedEffect::Forget { .. }))
    }

    /// The encoding stored in the log: version, fixed fields, then length-prefixed effects,
    /// operations and batch (little-endian). [`Self::decode`] reverses it exactly.
    pub fn encode(&self) -> Vec<u8> {
        let operations_bytes: usize = self.operations.iter().map(|operation| operation.len() + 4).sum();
        let mut out = Vec::with_capacity(64 + self.batch.len() + operations_bytes);
        out.push(if self.not_before == 0 { FORMAT_VERSION } else { FORMAT_VERSION_WITH_CLOCK });
        out.extend_from_slice(&self.families.to_le_bytes());
        out.extend_from_slice(&self.proposal.to_le_bytes());
        out.extend_from_slice(&self.wall_time_ms.to_le_bytes());
        if self.not_before != 0 {
            out.extend_from_slice(&self.not_before.to_le_bytes());
        }
        put_length(&mut out, self.effects.len());
        for effect in &self.effects {
            encode_effect(&mut out, effect);
        }
        put_length(&mut out, self.operations.len());
        for operation in &self.operations {
            put_bytes(&mut out, operation);
        }
        put_bytes(&mut out, &self.batch);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<ReplicatedWrite, StorageError> {
        let mut reader = Reader { bytes, position: 0 };
        let version = reader.byte()?;
        if version != FORMAT_VERSION && version != FORMAT_VERSION_WITH_CLOCK {
            return Err(corrupt(format!("replicated write format {version}")));
        }
        let families = reader.u64()?;
        let proposal = reader.u64()?;
        let wall_time_ms = reader.u64()? as i64;
        let not_before = if version == FORMAT_VERSION_WITH_CLOCK { reader.u64()? } else { 0 };
        if version == FORMAT_VERSION_WITH_CLOCK && not_before == 0 {
            return Err(corrupt("a replicated write of format 3 without its clock".to_string()));
        }
        let effect_count = reader.length()?;
        let mut effects = Vec::with_capacity(effect_count.min(1024));
        for _ in 0..effect_count {
            effects.push(decode_effect(&mut reader)?);
        }
        let operation_count = reader.length()?;
        let mut operations = Vec::with_capacity(operation_count.min(1024));
        for _ in 0..operation_count {
            operations.push(reader.bytes()?.to_vec());
        }
        let batch = reader.bytes()?.to_vec();
        if reader.position != bytes.len() {
            return Err(corrupt(format!("{} bytes after a replicated write", bytes.len() - reader.position)));
        }
        Ok(ReplicatedWrite { families, proposal, wall_time_ms, not_before, batch, effects, operations })
    }
}

fn encode_effect(out: &mut Vec<u8>, effect: &ReplicatedEffect) {
    match effect {
        ReplicatedEffect::RecordIds { prefix, through } => {
            out.push(1);
            out.extend_from_slice(&prefix.to_le_bytes());
            out.extend_from_slice(&through.to_le_bytes());
        }
        ReplicatedEffect::CappedTrimmed { prefix, through } => {
            out.push(2);
            out.extend_from_slice(&prefix.to_le_bytes());
            out.extend_from_slice(&through.to_le_bytes());
        }
        ReplicatedEffect::CappedInserted { prefix } => {
            out.push(3);
            out.extend_from_slice(&prefix.to_le_bytes());
        }
        ReplicatedEffect::Prefixes { next } => {
            out.push(4);
            out.extend_from_slice(&next.to_le_bytes());
        }
        ReplicatedEffect::Publish { entry } => {
            out.push(5);
            put_bytes(out, entry);
        }
        ReplicatedEffect::Forget { namespace } => {
            out.push(6);
            put_bytes(out, namespace.as_bytes());
        }
        ReplicatedEffect::LateCommit { prefixes, commit_time } => {
            out.push(7);
            out.extend_from_slice(&pack_cluster_time(*commit_time).to_le_bytes());
            put_length(out, prefixes.len());
            for prefix in prefixes {
                out.extend_from_slice(&prefix.to_le_bytes());
            }
        }
    }
}

fn decode_effect(reader: &mut Reader<'_>) -> Result<ReplicatedEffect, StorageError> {
    Ok(match reader.byte()? {
        1 => ReplicatedEffect::RecordIds { prefix: reader.u64()?, through: reader.u64()? as RecordId },
        2 => ReplicatedEffect::CappedTrimmed { prefix: reader.u64()?, through: reader.u64()? as RecordId },
        3 => ReplicatedEffect::CappedInserted { prefix: reader.u64()? },
        4 => ReplicatedEffect::Prefixes { next: reader.u64()? },
        5 => ReplicatedEffect::Publish { entry: reader.bytes()?.to_vec() },
        6 => ReplicatedEffect::Forget {
            namespace: String::from_utf8(reader.bytes()?.to_vec()).map_err(|_| corrupt("namespace is not UTF-8".into()))?,
        },
        7 => {
            let commit_time = unpack_cluster_time(reader.u64()?);
            let count = reader.length()?;
            let mut prefixes = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                prefixes.push(reader.u64()?);
            }
            ReplicatedEffect::LateCommit { prefixes, commit_time }
        }
        tag => return Err(corrupt(format!("replicated effect tag {tag}"))),
    })
}

fn put_length(out: &mut Vec<u8>, length: usize) {
    let length = u32::try_from(length).expect("a replicated write part is under 4 GiB");
    out.extend_from_slice(&length.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_length(out, bytes.len());
    out.extend_from_slice(bytes);
}

fn corrupt(message: String) -> StorageError {
    StorageError::Corrupt(format!("replicated write: {message}"))
}

struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], StorageError> {
        let end = self.position.checked_add(count).filter(|end| *end <= self.bytes.len());
        let end = end.ok_or_else(|| corrupt(format!("truncated at byte {}", self.position)))?;
        let taken = &self.bytes[self.position..end];
        self.position = end;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, StorageError> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, StorageError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn length(&mut self) -> Result<usize, StorageError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8], StorageError> {
        let length = self.length()?;
        self.take(length)
    }
}

/// Where a registered proposal stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProposalState {
    /// Its writer waits; nobody wrote its batch yet.
    Waiting,
    /// The state machine wrote its batch (its operations' first timestamp, when the state
    /// machine gave it); its writer applies the effects.
    Written(Option<crate::ClusterTime>),
}

/// The replicator installed on an engine and the proposals its writers wait for.
pub(crate) struct Replication {
    replicator: Arc<dyn WriteReplicator>,
    proposals: Mutex<HashMap<u64, ProposalState>>,
    next_proposal: AtomicU64,
    /// The cluster time every write proposed from now on must pass (packed as
    /// [`ReplicatedWrite::not_before`]); it only rises.
    cluster_time_floor: AtomicU64,
}

/// A cluster time packed as `seconds << 32 | increment` (ordered as the time).
pub fn pack_cluster_time((seconds, increment): crate::ClusterTime) -> u64 {
    (u64::from(seconds) << 32) | u64::from(increment)
}

/// The inverse of [`pack_cluster_time`].
pub fn unpack_cluster_time(packed: u64) -> crate::ClusterTime {
    ((packed >> 32) as u32, packed as u32)
}

impl Engine {
    /// Installs (or, with None, removes) the replicator every non-`local` write goes through.
    pub fn set_replicator(&self, replicator: Option<Arc<dyn WriteReplicator>>) {
        self.replication.store(replicator.map(|replicator| {
            Arc::new(Replication {
                replicator,
                proposals: Mutex::new(HashMap::new()),
                next_proposal: AtomicU64::new(first_proposal_id()),
                cluster_time_floor: AtomicU64::new(0),
            })
        }));
    }

    /// Raises the clock floor: every write this member proposes from now on gets an optime
    /// after `time` (a hybrid logical clock's receive rule, as mongod advances its cluster time
    /// on a time it is asked to read at or commit at). Nothing off a replica set.
    pub fn raise_cluster_time_floor(&self, time: crate::ClusterTime) {
        if let Some(replication) = self.replication.load().as_ref() {
            replication.cluster_time_floor.fetch_max(pack_cluster_time(time), Ordering::AcqRel);
        }
    }

    /// Writes nothing through the replication log: once it returns, this member applied an
    /// entry whose optime passes its clock floor (a read at a time ahead of the log waits for
    /// that). Only a primary can; an error otherwise.
    pub fn write_no_op(&self) -> Result<(), StorageError> {
        self.write_admitted(WriteBatch::default(), &WriteOptions::default(), false, || Ok(Vec::new()), &[]).map(|_| ())
    }

    /// True when writes go through a replication log.
    pub fn is_replicated(&self) -> bool {
        self.replication.load().is_some()
    }

    /// The numeric ids RocksDB gave this node's column families, hashed: equal on members whose
    /// batch bytes mean the same thing. Computed once: every family is created at open.
    pub fn family_fingerprint(&self) -> Result<u64, StorageError> {
        if let Some(fingerprint) = self.family_fingerprint.get() {
            return Ok(*fingerprint);
        }
        let fingerprint = self.compute_family_fingerprint()?;
        Ok(*self.family_fingerprint.get_or_init(|| fingerprint))
    }

    fn compute_family_fingerprint(&self) -> Result<u64, StorageError> {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for name in COLUMN_FAMILIES {
            let mut probe = WriteBatch::default();
            probe.put_cf(self.family(name)?, b"", b"");
            let id = family_id_of_first_record(probe.data())?;
            for byte in name.bytes().chain(id.to_le_bytes()) {
                hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        Ok(hash)
    }

    /// Writes `batch` with `options`: at once on a standalone node (or for the `local`
    /// database), else through the replication log as one [`ReplicatedWrite`]. Returns once the
    /// batch is written on this node; the caller then applies `effects` itself, under the locks
    /// it holds (the same effects a secondary derives in [`Self::apply_replicated`]).
    pub(crate) fn write_logged(
        &self,
        batch: WriteBatch,
        options: &WriteOptions,
        local: bool,
        effects: impl FnOnce() -> Result<Vec<ReplicatedEffect>, StorageError>,
        operations: &[OperationRecord],
    ) -> Result<(), StorageError> {
        self.admit_write(batch.size_in_bytes(), operations)?;
        self.write_admitted(batch, options, local, effects, operations).map(|_| ())
    }

    /// [`Self::write_logged`] for a batch the caller already admitted (through the free-space
    /// guard, or its floor for a write that may not be refused). An error from the local path
    /// wrote nothing; one from the replication log may leave the write's outcome unknown.
    /// Returns the write's first timestamp when it went through the replication log.
    pub(crate) fn write_admitted(
        &self,
        batch: WriteBatch,
        options: &WriteOptions,
        local: bool,
        effects: impl FnOnce() -> Result<Vec<ReplicatedEffect>, StorageError>,
        operations: &[OperationRecord],
    ) -> Result<Option<crate::ClusterTime>, StorageError> {
        let replication = self.replication.load();
        let Some(replication) = replication.as_ref().filter(|_| !local) else {
            return self.write_to_rocksdb(batch, options).map(|()| None);
        };
        let mut encoded_operations = Vec::with_capacity(operations.len());
        for operation in operations {
            encoded_operations.push(bson::to_vec(&operation.to_oplog_entry()?).map_err(|error| corrupt(error.to_string()))?);
        }
        let proposal = replication.next_proposal.fetch_add(1, Ordering::Relaxed);
        let write = ReplicatedWrite {
            families: self.family_fingerprint()?,
            proposal,
            wall_time_ms: wall_time_ms(),
            not_before: replication.cluster_time_floor.load(Ordering::Acquire),
            batch: batch.data().to_vec(),
            effects: effects()?,
            operations: encoded_operations,
        };
        replication.proposals.lock().insert(proposal, ProposalState::Waiting);
        let replicated = replication.replicator.replicate(write);
        let state = replication.proposals.lock().remove(&proposal);
        match (state, replicated) {
            (Some(ProposalState::Written(first_time)), _) => Ok(first_time),
            (_, Err(error)) => Err(error),
            (_, Ok(())) => Err(StorageError::Replication {
                code: 11602,
                code_name: "InterruptedDueToReplStateChange",
                message: "the write was not applied on this member before the replicator returned".to_string(),
            }),
        }
    }

    /// Applies one log entry holding one write on this member ([`Self::apply_replicated_group`]).
    pub fn apply_replicated(&self, write: &ReplicatedWrite, marker: (&[u8], &[u8]), oplog: Option<OplogAppend<'_>>) -> Result<(), StorageError> {
        self.apply_replicated_group(std::slice::from_ref(write), &[], marker, oplog)
    }

    /// Applies one log entry on this member: writes the batches of its `writes` (a group commit:
    /// one write, or several without catalog effects) with `marker` (the applier's position, a
    /// catalog-family key and value) and `oplog`'s entries in one atomic RocksDB write, then,
    /// for each write that no waiting writer of this member proposed, derives its in-memory
    /// effects under the locks a writer would hold. `first_times` are the writes' first
    /// timestamps (their optimes' start, as the state machine gave them; empty when unknown),
    /// handed to their writers.
    pub fn apply_replicated_group(
        &self,
        writes: &[ReplicatedWrite],
        first_times: &[crate::ClusterTime],
        marker: (&[u8], &[u8]),
        mut oplog: Option<OplogAppend<'_>>,
    ) -> Result<(), StorageError> {
        assert!(first_times.is_empty() || first_times.len() == writes.len(), "one first timestamp per write");
        self.apply_replicated_batch(writes, first_times, marker, oplog.as_mut())?;
        if let Some(oplog) = oplog {
            self.notify_oplog(oplog.oplog);
        }
        Ok(())
    }

    /// [`Self::apply_replicated_group`]; `oplog`'s entries go in the same RocksDB write.
    fn apply_replicated_batch(
        &self,
        writes: &[ReplicatedWrite],
        first_times: &[crate::ClusterTime],
        marker: (&[u8], &[u8]),
        oplog: Option<&mut OplogAppend<'_>>,
    ) -> Result<(), StorageError> {
        let fingerprint = self.family_fingerprint()?;
        if let Some(write) = writes.iter().find(|write| write.families != fingerprint) {
            return Err(StorageError::Corrupt(format!(
                "a replicated write names column families by other ids (fingerprint {:x}, this member's {fingerprint:x}); seed this member from a copy of the primary's files",
                write.families
            )));
        }
        if writes.len() > 1 && writes.iter().any(ReplicatedWrite::changes_catalog) {
            return Err(corrupt("a catalog change grouped with other writes in one log entry".into()));
        }
        let mut batch = concatenated_batch(writes)?;
        batch.put_cf(self.family(FAMILY_CATALOG)?, marker.0, marker.1);
        if let Some(oplog) = oplog {
            self.add_oplog_entries(&mut batch, oplog)?;
        }
        // An entry the set committed cannot be refused: below the floor it waits for space,
        // before any lock a reader could wait for is taken.
        self.wait_for_disk_space(batch.size_in_bytes())?;
        if let Some(replication) = self.replication.load().as_ref() {
            let mut proposals = replication.proposals.lock();
            let waiting: Vec<bool> = writes.iter().map(|write| proposals.get(&write.proposal) == Some(&ProposalState::Waiting)).collect();
            if waiting.contains(&true) {
                // No write of the group changes the catalog (checked above, or it is alone and
                // waited for): the writers that wait derive their effects, the others are derived
                // here, after the write, as for any write nobody waits for.
                self.write_to_rocksdb(batch, &WriteOptions::default())?;
                for (position, write) in writes.iter().enumerate().filter(|(position, _)| waiting[*position]) {
                    proposals.insert(write.proposal, ProposalState::Written(first_times.get(position).copied()));
                }
                drop(proposals);
                for (position, write) in writes.iter().enumerate().filter(|(position, _)| !waiting[*position]) {
                    self.apply_data_effects(&write.effects, first_times.get(position).copied());
                }
                return Ok(());
            }
        }
        let mut catalog_effects = Vec::new();
        for effect in writes.iter().flat_map(|write| &write.effects) {
            match effect {
                ReplicatedEffect::Prefixes { next } => catalog_effects.push(CatalogEffect::AdvancePrefixes(*next)),
                ReplicatedEffect::Publish { entry } => {
                    catalog_effects.push(CatalogEffect::Publish(Arc::new(CollectionEntry::from_bytes(entry)?)))
                }
                ReplicatedEffect::Forget { namespace } => catalog_effects.push(CatalogEffect::Remove(namespace.as_str().into())),
                _ => {}
            }
        }
        if catalog_effects.is_empty() {
            self.write_to_rocksdb(batch, &WriteOptions::default())?;
        } else {
            // As a catalog change on the primary: under the DDL mutex, the sequence lock odd
            // from the write until the new snapshot is published.
            let mut ddl = self.lock_ddl();
            self.catalog_change_sequence.fetch_add(1, Ordering::AcqRel);
            let written = self.write_to_rocksdb(batch, &WriteOptions::default());
            if written.is_ok() {
                self.apply_catalog_effects(&mut ddl, catalog_effects);
            }
            self.catalog_change_sequence.fetch_add(1, Ordering::AcqRel);
            written?;
        }
        for (position, write) in writes.iter().enumerate() {
            self.apply_data_effects(&write.effects, first_times.get(position).copied());
        }
        Ok(())
    }

    /// Derives a replicated write's record-id and capped-collection effects on a member that
    /// did not propose it, under each collection's stripe. The stripe is taken without waiting
    /// for the collection's inserts in flight (`lock_stripe_for_write`): a counter's maximum
    /// needs none of them written, and on the primary their writers may wait for entries this
    /// state machine has yet to apply (a capped collection has no insert in flight).
    /// `first_time` is the write's first timestamp (a late commit is recorded at it, with the
    /// database as this write left it: the prepared transaction's collections had no other
    /// writer between its prepare and this write).
    fn apply_data_effects(&self, effects: &[ReplicatedEffect], first_time: Option<crate::ClusterTime>) {
        for effect in effects {
            match effect {
                ReplicatedEffect::RecordIds { prefix, through } => {
                    // A counter not loaded yet is read from disk on first use, past this write.
                    let mut stripe = self.lock_stripe_for_write(*prefix);
                    if let Some(counter) = stripe.last_record_ids.get_mut(prefix) {
                        *counter = (*counter).max(*through);
                    }
                }
                ReplicatedEffect::CappedTrimmed { prefix, through } => {
                    let mut stripe = self.lock_stripe_for_write(*prefix);
                    let oldest = stripe.oldest_record_ids.entry(*prefix).or_insert(1);
                    *oldest = (*oldest).max(through + 1);
                }
                ReplicatedEffect::CappedInserted { prefix } => self.capped_inserts.notify(*prefix),
                ReplicatedEffect::LateCommit { prefixes, commit_time } => {
                    if let Some(written_at) = first_time.filter(|written_at| *commit_time < *written_at) {
                        self.record_late_commit(prefixes.clone(), *commit_time, written_at);
                    }
                }
                ReplicatedEffect::Prefixes { .. } | ReplicatedEffect::Publish { .. } | ReplicatedEffect::Forget { .. } => {}
            }
        }
    }

    /// Reads a key of the catalog family the replicator keeps its own state under.
    pub fn read_replication_state(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.db.get_cf(self.family(FAMILY_CATALOG)?, key)?)
    }

    /// Writes a key of the catalog family for the replicator's own state (never replicated).
    pub fn write_replication_state(&self, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.family(FAMILY_CATALOG)?, key, value);
        self.write_unrefusable(batch, &WriteOptions::default())
    }
}

/// The effects of a catalog change, for the log.
pub(crate) fn catalog_effects_for_log(effects: &[CatalogEffect]) -> Result<Vec<ReplicatedEffect>, StorageError> {
    effects
        .iter()
        .map(|effect| {
            Ok(match effect {
                CatalogEffect::AdvancePrefixes(next) => ReplicatedEffect::Prefixes { next: *next },
                CatalogEffect::Publish(entry) => ReplicatedEffect::Publish { entry: entry.to_bytes()? },
                CatalogEffect::Remove(namespace) => ReplicatedEffect::Forget { namespace: namespace.to_string() },
            })
        })
        .collect()
}

/// The first proposal id of this process: random, so that the ids of different members never
/// meet in practice. A member applies every member's entries, and one that was the primary may
/// still have writers waiting for their own ids: an entry of the next primary carrying one of
/// them would be taken for theirs (its effects left to the wrong writer).
fn first_proposal_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    // Below 2^63, so the counter never wraps to 0 (which means nobody waits).
    (random >> 1).max(1)
}

fn wall_time_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|elapsed| elapsed.as_millis() as i64).unwrap_or(0)
}

/// RocksDB's WriteBatch header (`write_batch.cc`): an 8-byte sequence, then a 4-byte
/// little-endian record count; the records follow.
const BATCH_HEADER_BYTES: usize = 12;

/// One WriteBatch holding every record of `writes`' batches in order: their records
/// concatenated under one header whose count is their sum (as RocksDB's
/// `WriteBatchInternal::Append`), so a group applies in one atomic write.
fn concatenated_batch(writes: &[ReplicatedWrite]) -> Result<WriteBatch, StorageError> {
    if let [write] = writes {
        return Ok(WriteBatch::from_data(&write.batch));
    }
    let records_bytes: usize = writes.iter().map(|write| write.batch.len().saturating_sub(BATCH_HEADER_BYTES)).sum();
    let mut data = Vec::with_capacity(BATCH_HEADER_BYTES + records_bytes);
    data.extend_from_slice(&[0u8; BATCH_HEADER_BYTES]);
    let mut count: u32 = 0;
    for write in writes {
        let header = write.batch.get(..BATCH_HEADER_BYTES).ok_or_else(|| corrupt(format!("a batch of {} bytes", write.batch.len())))?;
        let records = u32::from_le_bytes(header[8..].try_into().expect("4 bytes"));
        count = count.checked_add(records).ok_or_else(|| corrupt("a group of over 4 billion records".into()))?;
        data.extend_from_slice(&write.batch[BATCH_HEADER_BYTES..]);
    }
    data[8..BATCH_HEADER_BYTES].copy_from_slice(&count.to_le_bytes());
    Ok(WriteBatch::from_data(&data))
}

/// The column-family id of a WriteBatch's first record (RocksDB's `write_batch.cc` layout:
/// 8-byte sequence, 4-byte count, then a tag byte; tag 0x01 is a put into the default family,
/// 0x05 a put into the family whose varint32 id follows).
fn family_id_of_first_record(data: &[u8]) -> Result<u32, StorageError> {
    match data.get(BATCH_HEADER_BYTES) {
        Some(0x01) => Ok(0),
        Some(0x05) => {
            let mut id: u32 = 0;
            for (index, byte) in data[BATCH_HEADER_BYTES + 1..].iter().take(5).enumerate() {
                id |= u32::from(byte & 0x7f) << (7 * index);
                if byte & 0x80 == 0 {
                    return Ok(id);
                }
            }
            Err(corrupt("unterminated column family id".into()))
        }
        tag => Err(corrupt(format!("unexpected write batch record tag {tag:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips() {
        let write = ReplicatedWrite {
            families: 7,
            proposal: 42,
            wall_time_ms: 1_700_000_000_000,
            not_before: 0,
            batch: vec![1, 2, 3],
            effects: vec![
                ReplicatedEffect::RecordIds { prefix: 9, through: 100 },
                ReplicatedEffect::CappedTrimmed { prefix: 9, through: 3 },
                ReplicatedEffect::CappedInserted { prefix: 9 },
                ReplicatedEffect::Prefixes { next: 12 },
                ReplicatedEffect::Publish { entry: vec![5; 40] },
                ReplicatedEffect::Forget { namespace: "db.c".into() },
                ReplicatedEffect::LateCommit { prefixes: vec![9, 12], commit_time: (1_700_000_000, 4) },
            ],
            operations: vec![vec![8, 0, 0, 0, 0], vec![]],
        };
        for not_before in [0, pack_cluster_time((1_700_000_001, 7))] {
            let write = ReplicatedWrite { not_before, ..write.clone() };
            let encoded = write.encode();
            assert_eq!(encoded[0], if not_before == 0 { 1 } else { 3 }, "a write without a clock keeps format 1");
            assert_eq!(ReplicatedWrite::decode(&encoded).unwrap(), write);
            for cut in 0..encoded.len() {
                assert!(ReplicatedWrite::decode(&encoded[..cut]).is_err(), "a write cut at {cut} bytes decodes");
            }
            let mut longer = encoded.clone();
            longer.push(0);
            assert!(ReplicatedWrite::decode(&longer).is_err());
        }
        assert_eq!(unpack_cluster_time(pack_cluster_time((5, 9))), (5, 9));
    }

    #[test]
    fn grouped_batches_are_written_as_one() {
        let directory = tempfile::tempdir().unwrap();
        let engine = Engine::open(directory.path(), &crate::EngineOptions::default()).unwrap();
        let catalog = engine.family(FAMILY_CATALOG).unwrap();
        let write_of = |pairs: &[(&[u8], &[u8])]| {
            let mut batch = WriteBatch::default();
            for (key, value) in pairs {
                batch.put_cf(catalog, key, value);
            }
            ReplicatedWrite { families: 0, proposal: 0, wall_time_ms: 0, not_before: 0, batch: batch.data().to_vec(), effects: Vec::new(), operations: Vec::new() }
        };
        let writes = [write_of(&[(b"Ta", b"1"), (b"Tb", b"2")]), write_of(&[(b"Tc", b"3")]), write_of(&[(b"Ta", b"4")])];
        let batch = concatenated_batch(&writes).unwrap();
        assert_eq!(batch.len(), 4);
        engine.db.write(batch).unwrap();
        let read = |key: &[u8]| engine.db.get_cf(catalog, key).unwrap();
        assert_eq!((read(b"Ta"), read(b"Tb"), read(b"Tc")), (Some(b"4".to_vec()), Some(b"2".to_vec()), Some(b"3".to_vec())));
        assert!(concatenated_batch(&[write_of(&[]), ReplicatedWrite { batch: vec![0; 5], ..write_of(&[]) }]).is_err());
    }

    #[test]
    fn family_ids_are_read_from_batches() {
        let directory = tempfile::tempdir().unwrap();
        let engine = Engine::open(directory.path(), &crate::EngineOptions::default()).unwrap();
        let first = engine.family_fingerprint().unwrap();
        assert_eq!(first, engine.family_fingerprint().unwrap());
        let mut probe = WriteBatch::default();
        probe.put(b"k", b"v");
        assert_eq!(family_id_of_first_record(probe.data()).unwrap(), 0);
    }
}
