//! The commit pipeline: every write transaction commits in two steps, so that replication can
//! sit between them.
//!
//! - [`WriteTransaction::prepare`] turns what the transaction did (under the collection's
//!   stripe: reads, unique checks, the new records and index entries) into a
//!   [`PreparedWrite`]: the one RocksDB WriteBatch that makes it durable (records, index
//!   entries and counter merges) and the operation records that describe it, shaped like
//!   MongoDB's oplog entries (`op`, `ns`, `ui`, `o`, `o2`).
//! - [`WriteTransaction::apply`] writes the batch (never synced under the stripe) and then
//!   derives the in-memory state from the prepared write alone: the collection's record-id
//!   counter moves to the highest id the write allocated. Nothing in memory changes for a
//!   write that is never applied. For `j: true` it then releases the stripe and waits for a
//!   WAL sync covering the write (group commit, `journal.rs`) before returning.
//!
//! Invariants: `prepare` changes nothing and reads nothing but the multikey paths of indexes the
//! write puts array keys into (`multikey.rs`: a path that becomes multikey widens the index's
//! `M` entry in the same batch, so no large insert-only write that does releases the stripe); `apply` is the only place a data write
//! reaches RocksDB and the only place the record-id counter advances; both run under the
//! stripe, so no other writer of the collection sees a state between them. The one exception is
//! a large insert-only write ([`RELEASE_BEFORE_WRITE_MIN_OPERATIONS`]): it advances the counter
//! and registers its unique keys as a write in flight under the stripe, then writes after
//! releasing it; the next writer sees its ids taken and its keys owned, and every other stripe
//! user waits for it (docs/design-storage.md, "Writers and lock stripes"). No fsync runs
//! under a stripe: a journaled write is visible once written (as MongoDB's), and its `apply`
//! returns only once a sync that began after the write was published has succeeded, so no
//! reply acknowledges a journaled write before it is durable. A Raft log will carry the
//! operation records between the two steps; change streams will read them.

use bson::{Bson, RawDocument, RawDocumentBuf};
use rocksdb::{WriteBatch, WriteOptions};

use crate::families::{FAMILY_CATALOG, FAMILY_STATS};
use crate::journal::Durability;
use crate::keys;
use crate::operation_record::{OperationKind, OperationRecord};
use crate::replication::ReplicatedEffect;
use crate::stats::{self, encode_counters};
use crate::stripes::WriteInFlight;
use crate::write::WriteTransaction;
use crate::{RecordId, StorageError};

/// A write ready to apply: its batch, its operation records, and the in-memory effect.
pub struct PreparedWrite {
    batch: WriteBatch,
    pub operations: Vec<OperationRecord>,
    /// The collection prefix and the highest record id the write allocated.
    allocated: Option<(u64, RecordId)>,
    /// A capped collection's prefix and the highest record id trimming removed.
    capped_trimmed_through: Option<(u64, RecordId)>,
    /// The prefix of a capped collection this write inserted into (its tailers are woken).
    capped_inserted: Option<u64>,
    /// The batch widens some index's multikey paths: it is written under the stripe.
    widens_multikey_paths: bool,
}

impl PreparedWrite {
    /// The batch, the operation records, the in-memory effects and the highest record id
    /// allocated (with its collection prefix), for a commit that writes several prepared
    /// writes as one (a multi-document transaction's, `transaction/commit.rs`).
    pub(crate) fn into_parts(
        self,
    ) -> (
        WriteBatch,
        Vec<OperationRecord>,
        Vec<ReplicatedEffect>,
        Option<(u64, RecordId)>,
    ) {
        let effects = data_effects(
            self.allocated,
            self.capped_trimmed_through,
            self.capped_inserted,
        );
        (self.batch, self.operations, effects, self.allocated)
    }
}

fn id_of(bytes: &[u8]) -> Result<Bson, StorageError> {
    let document = RawDocument::from_bytes(bytes).map_err(|error| StorageError::Corrupt(format!("record: {error}")))?;
    let id = document.get("_id").map_err(|error| StorageError::Corrupt(format!("record: {error}")))?;
    match id {
        Some(id) => id.to_raw_bson().try_into().map_err(|error| StorageError::Corrupt(format!("record _id: {error:?}"))),
        None => Err(StorageError::Corrupt("record without _id".to_string())),
    }
}

impl WriteTransaction<'_> {
    /// Builds the batch and the operation records of everything this transaction did. Reads
    /// nothing and changes nothing.
    pub fn prepare(&self) -> Result<PreparedWrite, StorageError> {
        self.prepare_with(true)
    }

    /// [`Self::prepare`], leaving the operation records out when `with_operations` is false
    /// (nobody would read them: `commit` without an observer). The batch is the same.
    fn prepare_with(&self, with_operations: bool) -> Result<PreparedWrite, StorageError> {
        let entry = self.entry.clone()?;
        let engine = self.engine;
        let mut batch = WriteBatch::default();
        let mut operations = Vec::with_capacity(if with_operations { self.records.len() } else { 0 });
        let records_family = engine.records_family(&entry)?;
        for (record_id, state) in &self.records {
            let key = keys::record_key(entry.prefix, *record_id);
            let inserted = with_operations && self.inserted_here(*record_id);
            let (kind, id, document) = match state {
                Some(bytes) if !with_operations => {
                    batch.put_cf(records_family, key, bytes);
                    continue;
                }
                None if !with_operations => {
                    batch.delete_cf(records_family, key);
                    continue;
                }
                Some(bytes) => {
                    batch.put_cf(records_family, key, bytes);
                    let kind = if inserted { OperationKind::Insert } else { OperationKind::Update };
                    let document = RawDocumentBuf::from_bytes(bytes.clone()).map_err(|error| StorageError::Corrupt(format!("record: {error}")))?;
                    (kind, id_of(bytes)?, Some(document))
                }
                None if inserted => {
                    // Inserted and deleted by this transaction: nothing reaches the disk.
                    batch.delete_cf(records_family, key);
                    continue;
                }
                None => {
                    batch.delete_cf(records_family, key);
                    let id = self.deleted_ids.get(record_id).cloned().unwrap_or(Bson::Null);
                    (OperationKind::Delete, id, None)
                }
            };
            let pre_image = self.pre_images.get(record_id);
            let diff = match (kind, pre_image, &document) {
                (OperationKind::Update, Some(pre_image), Some(post_image)) if pre_image.diffed => {
                    let post_image = post_image.to_document().map_err(|error| StorageError::Corrupt(format!("record: {error}")))?;
                    Some(crate::update_diff::update_diff(&pre_image.document, &post_image))
                }
                _ => None,
            };
            let change_pre_image = match pre_image {
                Some(pre_image) if entry.records_change_images() && kind != OperationKind::Insert => Some(
                    RawDocumentBuf::from_document(&pre_image.document).map_err(|error| StorageError::Corrupt(format!("pre-image: {error}")))?,
                ),
                _ => None,
            };
            operations.push(OperationRecord {
                kind,
                namespace: entry.namespace.to_string(),
                collection_uuid: entry.uuid,
                id,
                document,
                diff,
                pre_image: change_pre_image,
                statement: self.statement_of.get(record_id).copied(),
            });
        }
        let indexes_family = engine.indexes_family(&entry)?;
        for (key, state) in &self.index_entries {
            match state {
                Some(value) => batch.put_cf(indexes_family, key, value),
                None => batch.delete_cf(indexes_family, key),
            }
        }
        self.add_counter_merges(&mut batch)?;
        if !self.session_records.is_empty() {
            let catalog = engine.family(FAMILY_CATALOG)?;
            for (key, value) in &self.session_records {
                batch.put_cf(catalog, key, value);
            }
        }
        let widened = self.multikey_paths.iter().enumerate().filter(|(_, paths)| !paths.is_empty());
        let added = widened.filter_map(|(position, paths)| Some((entry.indexes.get(position)?.prefix, paths.as_slice())));
        let widens_multikey_paths = engine.add_multikey_widening(&mut batch, added)?;
        let capped_trimmed_through =
            self.capped_trim.as_ref().and_then(|trim| trim.trimmed_through).map(|id| (entry.prefix, id));
        let capped_inserted = (self.first_inserted.is_some() && entry.capped_bounds().is_some()).then_some(entry.prefix);
        Ok(PreparedWrite {
            batch,
            operations,
            allocated: self.allocated_record_id.map(|id| (entry.prefix, id)),
            capped_trimmed_through,
            capped_inserted,
            widens_multikey_paths,
        })
    }

    /// The stats merges: the collection's and each touched index's counters, and the
    /// database's, in the same batch as the data they count.
    fn add_counter_merges(&self, batch: &mut WriteBatch) -> Result<(), StorageError> {
        let entry = self.entry.clone()?;
        let stats_family = self.engine.family(FAMILY_STATS)?;
        if self.collection_delta.iter().any(|value| *value != 0) {
            batch.merge_cf(stats_family, keys::stats_prefix_key(entry.prefix), encode_counters(&self.collection_delta));
        }
        let mut index_size_delta = 0i64;
        for (index, delta) in entry.indexes.iter().zip(&self.index_deltas) {
            if delta.iter().any(|value| *value != 0) {
                batch.merge_cf(stats_family, keys::stats_prefix_key(index.prefix), encode_counters(delta));
            }
            index_size_delta += delta[stats::INDEX_SIZE_BYTES];
        }
        let mut database_delta = [0i64; stats::DATABASE_SLOTS];
        database_delta[stats::DATABASE_DOCUMENTS] = self.collection_delta[stats::COLLECTION_DOCUMENTS];
        database_delta[stats::DATABASE_DATA_SIZE_BYTES] = self.collection_delta[stats::COLLECTION_DATA_SIZE_BYTES];
        if let Some(compressor) = entry.block_compressor {
            database_delta[compressor.database_slot()] = database_delta[stats::DATABASE_DATA_SIZE_BYTES];
        }
        database_delta[stats::DATABASE_INDEX_SIZE_BYTES] = index_size_delta;
        if database_delta.iter().any(|value| *value != 0) {
            batch.merge_cf(stats_family, keys::stats_database_key(entry.db()), encode_counters(&database_delta));
        }
        Ok(())
    }

    /// Writes a prepared write of this transaction, then derives the in-memory state from it.
    /// For `Durability::Journaled`, then releases the stripe and returns once a WAL sync
    /// (shared with concurrent journaled writes) made the write durable. Returns its operation
    /// records.
    pub fn apply(mut self, prepared: PreparedWrite, durability: Durability) -> Result<Vec<OperationRecord>, StorageError> {
        if self.operations == 0 {
            return Ok(Vec::new());
        }
        if self.releases_stripe_before_writing(&prepared) {
            return self.apply_in_flight(prepared, durability);
        }
        let engine = self.engine;
        let entry = self.entry.clone()?;
        let (allocated, trimmed, inserted) = (prepared.allocated, prepared.capped_trimmed_through, prepared.capped_inserted);
        let effects = move || Ok(data_effects(allocated, trimmed, inserted));
        engine.write_logged(prepared.batch, &WriteOptions::default(), entry.db() == "local", effects, &prepared.operations)?;
        // Published once the write returned: at least this write's own sequence number.
        let written_through = engine.db.latest_sequence_number();
        self.advance_record_id_counter(prepared.allocated);
        if let Some((prefix, trimmed_through)) = prepared.capped_trimmed_through {
            let oldest = self.stripe.oldest_record_ids.entry(prefix).or_insert(1);
            *oldest = (*oldest).max(trimmed_through + 1);
        }
        if let Some(prefix) = prepared.capped_inserted {
            self.engine.capped_inserts.notify(prefix);
        }
        // Under the stripe: an observer sees one collection's writes in commit order.
        self.engine.observe(&prepared.operations);
        // The stripe is released before the wait, so the next writers of the collection write
        // meanwhile and the next sync covers them all.
        drop(self);
        if durability == Durability::Journaled {
            engine.journal.wait_durable(&engine.db, written_through)?;
        }
        Ok(prepared.operations)
    }

    /// True for a write that may release the stripe before its RocksDB write: only inserts
    /// (no update, delete or capped trimming; not into a capped collection), at least
    /// [`RELEASE_BEFORE_WRITE_MIN_OPERATIONS`] of them (any number on a replica-set member),
    /// and nobody observing operation records (an observer must see one collection's writes in
    /// commit order).
    fn releases_stripe_before_writing(&self, prepared: &PreparedWrite) -> bool {
        // Through a replication log every insert-only write goes this way: its wait for a
        // majority is far longer than a second stripe acquisition, and the next inserts into the
        // collection are proposed meanwhile, so one log append carries many of them.
        let minimum = if self.engine.is_replicated() { 1 } else { RELEASE_BEFORE_WRITE_MIN_OPERATIONS };
        self.operations >= minimum
            && self.records.first_key_value().is_none_or(|(lowest, _)| self.inserted_here(*lowest))
            && self.deleted_ids.is_empty()
            && self.capped_trim.is_none()
            && prepared.capped_inserted.is_none()
            && prepared.capped_trimmed_through.is_none()
            && !prepared.widens_multikey_paths
            && !self.engine.has_observer()
    }

    /// [`Self::apply`] of an insert-only write that lets the collection's next writer in while
    /// RocksDB writes it: under the stripe, the record-id counter moves past the write's ids and
    /// the write's unique keys are registered as in flight; then the stripe is released, the
    /// batch written, and the registration marked done (`stripes.rs`, [`WriteInFlight`]).
    fn apply_in_flight(mut self, prepared: PreparedWrite, durability: Durability) -> Result<Vec<OperationRecord>, StorageError> {
        let engine = self.engine;
        let entry = self.entry.clone()?;
        let unique_prefixes: Vec<[u8; 8]> = entry.indexes.iter().filter(|index| index.unique).map(|index| index.prefix.to_be_bytes()).collect();
        // Sorted: the pending entries are ordered by full key. Taken, not copied: the batch
        // holds what is written, and the transaction ends here.
        let unique_keys: Vec<Vec<u8>> = std::mem::take(&mut self.index_entries)
            .into_iter()
            .filter(|(key, value)| value.is_some() && unique_prefixes.iter().any(|prefix| key.starts_with(prefix)))
            .map(|(key, _)| key)
            .collect();
        let write = std::sync::Arc::new(WriteInFlight::new(unique_keys));
        self.advance_record_id_counter(prepared.allocated);
        self.stripe.writes_in_flight.push(std::sync::Arc::clone(&write));
        drop(self);
        let allocated = prepared.allocated;
        let effects = move || Ok(data_effects(allocated, None, None));
        let written = engine.write_logged(prepared.batch, &WriteOptions::default(), entry.db() == "local", effects, &prepared.operations);
        // Published once the write returned: at least this write's own sequence number.
        let written_through = engine.db.latest_sequence_number();
        write.mark_done();
        engine.forget_finished_writes(entry.prefix);
        written?;
        if durability == Durability::Journaled {
            engine.journal.wait_durable(&engine.db, written_through)?;
        }
        Ok(prepared.operations)
    }

    /// Moves the stripe's record-id counter of the collection to the highest id the write
    /// allocated (`prepared.allocated`); it never goes back.
    fn advance_record_id_counter(&mut self, allocated: Option<(u64, RecordId)>) {
        if let Some((prefix, allocated)) = allocated {
            let counter = self.stripe.last_record_ids.entry(prefix).or_insert(allocated);
            assert!(*counter <= allocated, "record ids go backwards: counter {counter}, allocated {allocated}");
            *counter = allocated;
        }
    }

    /// Prepares and applies: one atomic WriteBatch, counter merges included.
    pub fn commit(self, durability: Durability) -> Result<(), StorageError> {
        self.entry.clone()?;
        if self.operations == 0 {
            return Ok(());
        }
        // The operation records cost a copy and a parse of every document: built only when an
        // observer will receive them.
        let prepared = self.prepare_with(self.engine.has_observer() || self.engine.is_replicated())?;
        self.apply(prepared, durability).map(drop)
    }
}

/// The in-memory effects of a prepared write, as a member that did not propose it derives them
/// from the replication log.
fn data_effects(
    allocated: Option<(u64, RecordId)>,
    capped_trimmed_through: Option<(u64, RecordId)>,
    capped_inserted: Option<u64>,
) -> Vec<ReplicatedEffect> {
    let mut effects = Vec::new();
    if let Some((prefix, through)) = allocated {
        effects.push(ReplicatedEffect::RecordIds { prefix, through });
    }
    if let Some((prefix, through)) = capped_trimmed_through {
        effects.push(ReplicatedEffect::CappedTrimmed { prefix, through });
    }
    if let Some(prefix) = capped_inserted {
        effects.push(ReplicatedEffect::CappedInserted { prefix });
    }
    effects
}

/// Fewer inserts than this write under the stripe: their write is short, and releasing the
/// stripe first would only cost a second acquisition (to forget the write in flight).
pub const RELEASE_BEFORE_WRITE_MIN_OPERATIONS: usize = 64;
