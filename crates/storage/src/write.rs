//! Write transactions: one write command's inserts, updates and deletes on one collection,
//! committed as one atomic RocksDB WriteBatch together with the counter merges.
//!
//! Invariants: the transaction holds the collection's lock stripe from `begin_write` until it is
//! committed or dropped, so unique checks (check-then-write) never race with another writer of
//! the same collection, nor with DDL on it. A large insert-only transaction releases it just
//! before its RocksDB write, leaving its unique keys and record ids registered in the stripe
//! (`commit.rs`): a later transaction checks its unique keys against those writes in flight
//! too, and every other stripe user waits for them to finish. Pending changes are kept in
//! ordered maps that override the database (read-your-writes); an operation that fails leaves
//! them unchanged.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use bson::{Bson, Document, RawDocument, RawDocumentBuf};

use crate::catalog::{CollectionEntry, CollectionHandle, IndexEntry};
use crate::engine::Engine;
use crate::index::{key_value_document, DocumentKeys, IndexKey};
use crate::multikey::MultikeyPaths;
use crate::keys;
use crate::stats;
use crate::stripes::StripeHold;
use crate::{RecordId, StorageError, MAX_DOCUMENT_SIZE_BYTES};

/// Per-transaction trimming state, set up at the first insert into a capped collection
/// (`capped.rs` trims).
pub(crate) struct CappedTrim {
    /// The collection's [documents, data size bytes] on disk when the transaction first needed
    /// them (read under the stripe, so no other writer changes them until commit).
    pub(crate) base: [i64; stats::COLLECTION_SLOTS],
    /// Every record below this id is gone (removed before, or by this transaction).
    pub(crate) next_oldest: RecordId,
    /// The highest record id this transaction removed by trimming.
    pub(crate) trimmed_through: Option<RecordId>,
}

/// A record's content before this transaction first changed it: kept on a replica-set member
/// for an update's `$v: 2` diff (`diffed`) and, for a collection with
/// `changeStreamPreAndPostImages`, for the oplog's pre-image of updates, replacements and
/// deletes.
pub(crate) struct PreImage {
    pub(crate) document: Document,
    /// The update is logged as its diff from this document.
    pub(crate) diffed: bool,
}

/// An open write transaction on one collection. Dropping it without `commit` discards it.
pub struct WriteTransaction<'e> {
    pub(crate) engine: &'e Engine,
    pub(crate) stripe: StripeHold<'e>,
    /// The collection's current catalog entry, or why it cannot be written.
    pub(crate) entry: Result<Arc<CollectionEntry>, StorageError>,
    /// Pending record state: `Some(bytes)` put, `None` deleted.
    pub(crate) records: BTreeMap<RecordId, Option<Vec<u8>>>,
    /// The first record this transaction inserted. Every record id from it up was allocated
    /// by this transaction (ids come from the stripe's counter, which is above every record
    /// that existed before), so the records in `records` from it up are exactly the ones this
    /// transaction inserted; the others existed before it.
    pub(crate) first_inserted: Option<RecordId>,
    /// `_id`s of the records this transaction deleted, for their operation records.
    pub(crate) deleted_ids: BTreeMap<RecordId, Bson>,
    /// The last record id this transaction allocated; the stripe's counter is advanced to it
    /// when the write is applied, not before.
    pub(crate) allocated_record_id: Option<RecordId>,
    /// Pending index entries by full key (prefix included): `Some(value)` put, `None` deleted.
    pub(crate) index_entries: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Delta of [documents, data size bytes].
    pub(crate) collection_delta: [i64; stats::COLLECTION_SLOTS],
    /// Per index (catalog order): delta of [size bytes, entries].
    pub(crate) index_deltas: Vec<[i64; stats::INDEX_SLOTS]>,
    /// Per index (catalog order): the highest record id this transaction maintains it for
    /// (`RecordId::MAX` when ready; a building index's position, read under the stripe).
    index_limits: Vec<RecordId>,
    pub(crate) operations: usize,
    /// The pre-image of each record this transaction updated, kept on a replica-set member for
    /// the oplog's update diffs (`update_diff.rs`).
    pub(crate) pre_images: BTreeMap<RecordId, PreImage>,
    /// Session records of retryable writes (`sessions.rs`), catalog keys to put.
    pub(crate) session_records: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Records written since the last recorded statement (`sessions.rs`): the next
    /// [`Self::record_statement`] names the statement that wrote them.
    pub(crate) unattributed_records: Vec<RecordId>,
    /// The retryable statement that wrote each record, for its oplog entry.
    pub(crate) statement_of: BTreeMap<RecordId, crate::operation_record::StatementOrigin>,
    /// Trimming state of a capped collection, once an insert needed it.
    pub(crate) capped_trim: Option<CappedTrim>,
    /// Owners of unique index keys read ahead in one batch (`read_unique_owners`), sorted by
    /// full key: valid while the stripe is held, below the pending entries.
    unique_owners_read: Vec<(Vec<u8>, Option<RecordId>)>,
    /// Where in `unique_owners_read` the next lookup looks first: the entry after the last one
    /// found (a batch's documents usually come in key order).
    read_ahead_hint: std::cell::Cell<usize>,
    /// The keys of `unique_owners_read` that a write in flight on the stripe puts (found by
    /// merging the sorted lists when they were read), sorted: what was read for them may
    /// predate the write.
    unique_keys_in_flight: Vec<Vec<u8>>,
    /// Emptied by each insert's plan and apply, and kept for the next one: an insert allocates
    /// no plan of its own.
    planned_inserts: PlannedEntries,
    /// Per index position, the array paths of the keys this transaction put (empty when none):
    /// `prepare` widens the indexes' stored multikey paths with them (`multikey.rs`).
    pub(crate) multikey_paths: Vec<MultikeyPaths>,
}

/// Index entry changes one operation will apply, computed before anything is applied.
#[derive(Default)]
struct PlannedEntries {
    puts: Vec<(usize, Vec<u8>, Vec<u8>)>,
    deletes: Vec<(usize, Vec<u8>, usize)>,
    /// Per index position, the array paths of the new keys (`multikey.rs`).
    multikey_paths: Vec<(usize, MultikeyPaths)>,
}

/// Where `plan_entries` takes one side's index keys from.
#[derive(Clone, Copy)]
enum KeySource<'a> {
    /// No document on this side (an insert's old side, a delete's new side).
    None,
    /// Computed from the document now.
    Document(&'a Document),
    /// Computed before the stripe was taken, per index position (an error is only raised for
    /// an index the write maintains, as when computed now).
    Prepared(&'a [Result<DocumentKeys, StorageError>]),
}

impl<'a> KeySource<'a> {
    fn keys(self, position: usize, index: &IndexEntry) -> Result<Cow<'a, DocumentKeys>, StorageError> {
        match self {
            KeySource::None => Ok(Cow::Owned(DocumentKeys::default())),
            KeySource::Document(document) => Ok(Cow::Owned(index.document_keys(&index.fields()?, document)?)),
            KeySource::Prepared(keys) => match keys.get(position) {
                Some(Ok(keys)) => Ok(Cow::Borrowed(keys)),
                Some(Err(error)) => Err(error.clone()),
                None => Err(StorageError::Corrupt("prepared keys do not match the collection's indexes".to_string())),
            },
        }
    }
}

/// An insert's per-document work, done before the collection's lock stripe is taken so that
/// concurrent inserts into one collection hold the stripe only for the unique checks and the
/// write: the `_id`, depth and size checks, the record's bytes and every index's keys.
pub struct PreparedInsert {
    bytes: Vec<u8>,
    /// The prefixes of the indexes `keys` were computed for, in catalog order.
    index_prefixes: IndexPrefixes,
    /// Per index position: its keys, or why the document has none.
    keys: Vec<Result<DocumentKeys, StorageError>>,
}

/// The prefixes of a collection's indexes, in catalog order: in place for up to
/// [`INLINE_INDEX_PREFIXES`] indexes, so preparing an insert allocates no list for them.
enum IndexPrefixes {
    Inline { prefixes: [u64; INLINE_INDEX_PREFIXES], count: usize },
    Listed(Vec<u64>),
}

const INLINE_INDEX_PREFIXES: usize = 4;

impl IndexPrefixes {
    fn of(entry: &CollectionEntry) -> IndexPrefixes {
        if entry.indexes.len() > INLINE_INDEX_PREFIXES {
            return IndexPrefixes::Listed(entry.indexes.iter().map(|index| index.prefix).collect());
        }
        let mut prefixes = [0; INLINE_INDEX_PREFIXES];
        for (slot, index) in prefixes.iter_mut().zip(entry.indexes.iter()) {
            *slot = index.prefix;
        }
        IndexPrefixes::Inline { prefixes, count: entry.indexes.len() }
    }

    fn as_slice(&self) -> &[u64] {
        match self {
            IndexPrefixes::Inline { prefixes, count } => &prefixes[..*count],
            IndexPrefixes::Listed(prefixes) => prefixes,
        }
    }
}

impl PreparedInsert {
    fn new(entry: &CollectionEntry, document: &Document) -> Result<PreparedInsert, StorageError> {
        validate_id(document)?;
        let bytes = serialize(document)?;
        Ok(PreparedInsert {
            bytes,
            index_prefixes: IndexPrefixes::of(entry),
            keys: entry.indexes.iter().map(|index| index.document_keys(&index.fields()?, document)).collect(),
        })
    }

    /// [`PreparedInsert::new`] for a document received as BSON bytes whose first field is a
    /// valid `_id` (callers decode any other document and move its `_id` first): the bytes are
    /// stored as they are, and the document is decoded only for an index that needs more than
    /// its `_id` (a secondary or partial index). `within_storage_depth`: the caller knows it
    /// nests at most [`myriad_keystring::nesting::MAX_USER_STORAGE_DEPTH`] levels.
    fn from_raw(entry: &CollectionEntry, raw: &RawDocument, within_storage_depth: bool) -> Result<PreparedInsert, StorageError> {
        let invalid = |error: &dyn std::fmt::Display| StorageError::InvalidDocument(format!("invalid BSON: {error}"));
        let id = match raw.iter().next() {
            Some(Ok(("_id", id))) => Bson::try_from(id).map_err(|error| invalid(&error))?,
            Some(Err(error)) => return Err(invalid(&error)),
            _ => return Err(StorageError::InvalidDocument("a raw insert needs its _id first".to_string())),
        };
        validate_id_value(Some(&id))?;
        let limit = myriad_keystring::nesting::MAX_USER_STORAGE_DEPTH;
        if !within_storage_depth {
            match myriad_keystring::nesting::check_document(raw, limit) {
                Ok(()) => {}
                Err(myriad_keystring::nesting::NestingError::TooDeep { .. }) => return Err(StorageError::DocumentTooDeep),
                Err(error) => return Err(invalid(&error)),
            }
        }
        if raw.as_bytes().len() > MAX_DOCUMENT_SIZE_BYTES {
            return Err(StorageError::DocumentTooLarge);
        }
        let (mut id_alone, mut whole): (Option<Document>, Option<Document>) = (None, None);
        let mut keys = Vec::with_capacity(entry.indexes.len());
        for index in &entry.indexes {
            if let Some(field) = index.id_alone_field() {
                // The `_id` index: its key is the `_id` value's, no document needed.
                keys.push(Ok(DocumentKeys::without_arrays(crate::index::single_value_keys(&field, index.sparse, Some(&id), index.collator().map(|collator| &**collator)))));
                continue;
            }
            let fields = index.fields()?;
            let from_id = index.keys_from_id_alone(&fields);
            let source = if from_id {
                &*id_alone.get_or_insert_with(|| bson::doc! { "_id": id.clone() })
            } else if let Some(document) = &whole {
                document
            } else {
                let decoded = myriad_keystring::nesting::decode_document(raw, limit).map_err(|error| invalid(&error))?;
                whole.insert(decoded)
            };
            keys.push(index.document_keys(&fields, source));
        }
        Ok(PreparedInsert { bytes: raw.as_bytes().to_vec(), index_prefixes: IndexPrefixes::of(entry), keys })
    }

    /// The document this insert stores, decoded from its bytes.
    pub fn document(&self) -> Result<Document, StorageError> {
        Document::from_reader(self.bytes.as_slice())
            .map_err(|error| StorageError::Corrupt(format!("prepared record: {error}")))
    }

    /// Bytes of the record this insert stores.
    pub fn size_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// True when the keys were computed for `entry`'s indexes.
    fn prepared_for(&self, entry: &CollectionEntry) -> bool {
        entry.indexes.iter().map(|index| index.prefix).eq(self.index_prefixes.as_slice().iter().copied())
    }

    /// This insert with keys for `entry`'s indexes: as prepared when the index set is the
    /// same (an index prefix is never reused, so equal prefixes mean equal definitions), else
    /// computed again from the record.
    fn for_indexes_of(self, entry: &CollectionEntry) -> Result<PreparedInsert, StorageError> {
        if self.prepared_for(entry) {
            return Ok(self);
        }
        let document = Document::from_reader(self.bytes.as_slice())
            .map_err(|error| StorageError::Corrupt(format!("prepared record: {error}")))?;
        PreparedInsert::new(entry, &document)
    }
}

impl CollectionHandle {
    /// Prepares the insert of `document` into this collection (see [`PreparedInsert`]); the
    /// transaction that inserts it may hold a newer version of the collection.
    pub fn prepare_insert(&self, document: &Document) -> Result<PreparedInsert, StorageError> {
        PreparedInsert::new(&self.entry, document)
    }

    /// [`CollectionHandle::prepare_insert`] of BSON bytes whose first field is a valid `_id`,
    /// stored as they are (see [`PreparedInsert`]).
    pub fn prepare_raw_insert(&self, document: &RawDocument, within_storage_depth: bool) -> Result<PreparedInsert, StorageError> {
        PreparedInsert::from_raw(&self.entry, document, within_storage_depth)
    }
}

impl Engine {
    /// Starts a write transaction on `handle`'s collection, taking its lock stripe (held until
    /// commit or drop). The collection is re-resolved under the stripe so the transaction
    /// maintains exactly the current indexes; if it was dropped or renamed, every operation
    /// returns `NamespaceNotFound`.
    pub fn begin_write(&self, handle: &CollectionHandle) -> WriteTransaction<'_> {
        let stripe = StripeHold::Owned(self.lock_stripe_for_write(handle.entry.prefix));
        self.write_under(stripe, handle)
    }

    /// A write transaction on `handle`'s collection under `stripe` (which must be the
    /// collection's).
    pub(crate) fn write_under<'e>(&'e self, stripe: StripeHold<'e>, handle: &CollectionHandle) -> WriteTransaction<'e> {
        let entry = match self.collection(handle.db(), handle.name()) {
            Ok(Some(current)) if current.entry.prefix == handle.entry.prefix => Ok(current.entry),
            Ok(_) => Err(StorageError::NamespaceNotFound(handle.namespace().to_string())),
            Err(error) => Err(error),
        };
        let index_count = entry.as_ref().map(|entry| entry.indexes.len()).unwrap_or(0);
        let index_limits = match &entry {
            Ok(entry) if entry.has_building_indexes() => self.index_write_limits(entry),
            _ => vec![RecordId::MAX; index_count],
        };
        WriteTransaction {
            engine: self,
            stripe,
            entry,
            records: BTreeMap::new(),
            first_inserted: None,
            deleted_ids: BTreeMap::new(),
            allocated_record_id: None,
            index_entries: BTreeMap::new(),
            collection_delta: [0; stats::COLLECTION_SLOTS],
            index_deltas: vec![[0; stats::INDEX_SLOTS]; index_count],
            index_limits,
            operations: 0,
            session_records: BTreeMap::new(),
            unattributed_records: Vec::new(),
            statement_of: BTreeMap::new(),
            pre_images: BTreeMap::new(),
            capped_trim: None,
            unique_owners_read: Vec::new(),
            read_ahead_hint: std::cell::Cell::new(0),
            unique_keys_in_flight: Vec::new(),
            planned_inserts: PlannedEntries::default(),
            multikey_paths: Vec::new(),
        }
    }
}

pub(crate) fn serialize(document: &Document) -> Result<Vec<u8>, StorageError> {
    // Before the recursive encoder sees it, and so that no reader ever meets a record deeper
    // than MongoDB stores (the check itself is iterative).
    if myriad_keystring::nesting::document_depth_exceeds(document, myriad_keystring::nesting::MAX_USER_STORAGE_DEPTH) {
        return Err(StorageError::DocumentTooDeep);
    }
    // Room for a small document, so that most need no reallocation while they are encoded.
    let mut bytes = Vec::with_capacity(256);
    document
        .to_writer(&mut bytes)
        .map_err(|error| StorageError::InvalidDocument(format!("cannot serialize document: {error}")))?;
    if bytes.len() > MAX_DOCUMENT_SIZE_BYTES {
        return Err(StorageError::DocumentTooLarge);
    }
    Ok(bytes)
}

pub(crate) fn validate_id(document: &Document) -> Result<(), StorageError> {
    validate_id_value(document.get("_id"))
}

fn validate_id_value(id: Option<&Bson>) -> Result<(), StorageError> {
    match id {
        None => Err(StorageError::InvalidDocument("document has no _id".to_string())),
        Some(Bson::Array(_)) => Err(StorageError::InvalidDocument("_id cannot be an array".to_string())),
        Some(Bson::RegularExpression(_)) => {
            Err(StorageError::InvalidDocument("_id cannot be a regular expression".to_string()))
        }
        Some(Bson::Undefined) => Err(StorageError::InvalidDocument("_id cannot be undefined".to_string())),
        Some(Bson::Document(document)) => match dollar_prefixed_field(document) {
            Some(field) => Err(StorageError::DollarPrefixedField(field.to_string())),
            None => Ok(()),
        },
        Some(_) => Ok(()),
    }
}

/// The first field name starting with `$` in `document`, its embedded documents and arrays
/// (iterative: documents are depth-checked after this).
fn dollar_prefixed_field(document: &Document) -> Option<&str> {
    let mut pending: Vec<&Bson> = Vec::new();
    let mut documents = vec![document];
    loop {
        for document in documents.drain(..) {
            for (field, value) in document {
                if field.starts_with('$') {
                    return Some(field);
                }
                pending.push(value);
            }
        }
        let value = pending.pop()?;
        match value {
            Bson::Document(inner) => documents.push(inner),
            Bson::Array(items) => pending.extend(items),
            _ => {}
        }
    }
}

/// Elements of `left` not in `right` (both sorted and deduplicated).
fn sorted_difference<'a, T: Ord>(left: &'a [T], right: &[T]) -> Vec<&'a T> {
    let mut difference = Vec::new();
    let mut right_position = 0;
    for item in left {
        while right.get(right_position).is_some_and(|other| other < item) {
            right_position += 1;
        }
        if right.get(right_position) != Some(item) {
            difference.push(item);
        }
    }
    difference
}

impl<'e> WriteTransaction<'e> {
    fn entry(&self) -> Result<Arc<CollectionEntry>, StorageError> {
        self.entry.clone()
    }

    /// The collection this transaction writes (current version).
    pub fn handle(&self) -> Result<CollectionHandle, StorageError> {
        Ok(CollectionHandle { entry: self.entry()? })
    }

    /// True when this transaction inserted record `record_id` (see `first_inserted`).
    pub(crate) fn inserted_here(&self, record_id: RecordId) -> bool {
        self.first_inserted.is_some_and(|first| record_id >= first)
    }

    /// Number of inserts, updates and deletes applied so far.
    pub fn pending_operations(&self) -> usize {
        self.operations
    }

    /// Reads a record as this transaction sees it (its own pending writes included).
    pub fn get_record(&self, record_id: RecordId) -> Result<Option<RawDocumentBuf>, StorageError> {
        match self.current_record_bytes(record_id)? {
            Some(bytes) => RawDocumentBuf::from_bytes(bytes)
                .map(Some)
                .map_err(|error| StorageError::Corrupt(format!("record: {error}"))),
            None => Ok(None),
        }
    }

    fn current_record_bytes(&self, record_id: RecordId) -> Result<Option<Vec<u8>>, StorageError> {
        if let Some(pending) = self.records.get(&record_id) {
            return Ok(pending.clone());
        }
        if record_id <= 0 {
            return Ok(None);
        }
        let entry = self.entry()?;
        let family = self.engine.records_family(&entry)?;
        Ok(self.engine.db.get_cf(family, keys::record_key(entry.prefix, record_id))?)
    }

    /// The record currently owning a unique index key: this transaction's pending writes
    /// first, then what was read ahead for it, then the database. A key that a write in flight
    /// on the stripe puts is read from the database once that write is done (what was read
    /// ahead for it may predate the write).
    fn unique_key_owner(&self, entry: &CollectionEntry, full_key: &[u8]) -> Result<Option<RecordId>, StorageError> {
        let value = match self.index_entries.get(full_key) {
            Some(Some(value)) => Some(keys::read_i64(value)?),
            Some(None) => None,
            None => match self.read_ahead_owner(full_key) {
                Some(owner) if self.unique_keys_in_flight.binary_search_by(|key| key.as_slice().cmp(full_key)).is_err() => owner,
                _ => {
                    if let Some(write) = self.stripe.write_in_flight_putting(full_key) {
                        write.wait_until_done();
                    }
                    self.read_unique_owner(entry, full_key)?
                }
            },
        };
        Ok(value)
    }

    /// The owner `read_unique_owners` found for `full_key`, if it read that key.
    fn read_ahead_owner(&self, full_key: &[u8]) -> Option<Option<RecordId>> {
        let hint = self.read_ahead_hint.get();
        let position = match self.unique_owners_read.get(hint) {
            Some((key, _)) if key.as_slice() == full_key => hint,
            _ => self.unique_owners_read.binary_search_by(|(key, _)| key.as_slice().cmp(full_key)).ok()?,
        };
        self.read_ahead_hint.set(position + 1);
        self.unique_owners_read.get(position).map(|(_, owner)| *owner)
    }

    /// The owner of a unique index key in the database.
    fn read_unique_owner(&self, entry: &CollectionEntry, full_key: &[u8]) -> Result<Option<RecordId>, StorageError> {
        match self.engine.db.get_pinned_cf(self.engine.indexes_family(entry)?, full_key)? {
            Some(value) => Ok(Some(keys::read_i64(&value)?)),
            None => Ok(None),
        }
    }

    pub(crate) fn duplicate_key(entry: &CollectionEntry, position: usize, key: &IndexKey) -> StorageError {
        let Some(index) = entry.indexes.get(position) else {
            return StorageError::Corrupt("index position out of range".to_string());
        };
        StorageError::DuplicateKey {
            namespace: entry.namespace.to_string(),
            index_name: index.name().to_string(),
            key_pattern: index.key_pattern().unwrap_or_default(),
            key_value: index
                .fields()
                .map(|fields| key_value_document(&fields, key.keystring(), key.type_bits()))
                .unwrap_or_default(),
        }
    }

    /// The RocksDB key and value of one index entry (docs/design-storage.md, "indexes").
    fn entry_key(entry: &CollectionEntry, position: usize, key: &IndexKey, record_id: RecordId) -> (Vec<u8>, Vec<u8>) {
        match entry.indexes.get(position) {
            Some(index) => {
                let record_in_key = (!index.unique).then_some(record_id);
                (
                    keys::index_entry_key(index.prefix, key.keystring(), record_in_key),
                    keys::index_entry_value(index.unique, record_id, key.type_bits()),
                )
            }
            None => (Vec::new(), Vec::new()),
        }
    }

    /// Plans the index entry changes from `old` to `new` for record `record_id` into `planned`
    /// (emptied first) and checks unique indexes (against pending writes, then the database).
    /// Applies nothing.
    fn plan_entries(
        &self,
        entry: &CollectionEntry,
        record_id: RecordId,
        old: KeySource<'_>,
        new: KeySource<'_>,
        planned: &mut PlannedEntries,
    ) -> Result<(), StorageError> {
        planned.puts.clear();
        planned.deletes.clear();
        planned.multikey_paths.clear();
        for (position, index) in entry.indexes.iter().enumerate() {
            // A building index above its build's position is the builder's to fill.
            if self.index_limits.get(position).is_some_and(|limit| record_id > *limit) {
                continue;
            }
            let old_keys = old.keys(position, index)?;
            let new_keys = new.keys(position, index)?;
            if !new_keys.multikey_paths.is_empty() {
                planned.multikey_paths.push((position, new_keys.multikey_paths.clone()));
            }
            let (old_keys, new_keys) = (&old_keys.keys, &new_keys.keys);
            // A key whose keystring stays but whose type bits change (1 becomes 1.0) is deleted
            // and put again: the put wins (apply_entries), and the counters see both sizes.
            for index_key in sorted_difference(old_keys, new_keys) {
                let (key, value) = Self::entry_key(entry, position, index_key, record_id);
                let size = key.len() + value.len();
                planned.deletes.push((position, key, size));
            }
            for index_key in sorted_difference(new_keys, old_keys) {
                let (key, value) = Self::entry_key(entry, position, index_key, record_id);
                if index.unique {
                    if let Some(owner) = self.unique_key_owner(entry, &key)? {
                        if owner != record_id {
                            return Err(Self::duplicate_key(entry, position, index_key));
                        }
                    }
                }
                planned.puts.push((position, key, value));
            }
        }
        Ok(())
    }

    /// Applies a plan, leaving `planned` empty.
    fn apply_entries(&mut self, planned: &mut PlannedEntries) {
        for (position, paths) in planned.multikey_paths.drain(..) {
            if self.multikey_paths.len() <= position {
                self.multikey_paths.resize_with(position + 1, Vec::new);
            }
            crate::multikey::merge_paths(&mut self.multikey_paths[position], &paths);
        }
        // Deletes first: an update may delete and re-put keys of other positions only, but a
        // delete then insert of the same unique key in one transaction must end as a put.
        for (position, key, size) in planned.deletes.drain(..) {
            if let Some(delta) = self.index_deltas.get_mut(position) {
                delta[stats::INDEX_SIZE_BYTES] -= size as i64;
                delta[stats::INDEX_ENTRIES] -= 1;
            }
            self.index_entries.insert(key, None);
        }
        for (position, key, value) in planned.puts.drain(..) {
            if let Some(delta) = self.index_deltas.get_mut(position) {
                delta[stats::INDEX_SIZE_BYTES] += (key.len() + value.len()) as i64;
                delta[stats::INDEX_ENTRIES] += 1;
            }
            self.index_entries.insert(key, Some(value));
        }
    }

    /// Allocates the next record id of the collection (the stripe's counter, loaded from disk
    /// on first use, then this transaction's own allocations). The stripe's counter itself is
    /// only advanced by `apply`, from the prepared write.
    fn next_record_id(&mut self) -> Result<RecordId, StorageError> {
        let last = match self.allocated_record_id {
            Some(allocated) => allocated,
            None => {
                let entry = self.entry()?;
                match self.stripe.last_record_ids.get(&entry.prefix) {
                    Some(last) => *last,
                    None => {
                        let last = self.engine.read_last_record_id(&entry)?;
                        self.stripe.last_record_ids.insert(entry.prefix, last);
                        last
                    }
                }
            }
        };
        let next = last
            .checked_add(1)
            .ok_or_else(|| StorageError::Corrupt("record id space exhausted".to_string()))?;
        self.allocated_record_id = Some(next);
        Ok(next)
    }

    /// Inserts a document (which must have an `_id`). Checks size and unique indexes against
    /// the database and this transaction; on error the transaction is unchanged.
    pub fn insert(&mut self, document: &Document) -> Result<RecordId, StorageError> {
        let entry = self.entry()?;
        let prepared = PreparedInsert::new(&entry, document)?;
        self.insert_prepared(prepared)
    }

    /// Reads the current owners of every unique index key the `prepared` inserts would put,
    /// in one batched lookup, so that their unique checks need no point read each. What was
    /// read stays valid while this transaction holds the stripe (no other writer changes the
    /// collection's entries meanwhile); this transaction's own entries take precedence.
    pub fn read_unique_owners(&mut self, prepared: &[&PreparedInsert]) -> Result<(), StorageError> {
        let entry = self.entry()?;
        let mut full_keys = Vec::new();
        for insert in prepared.iter().filter(|insert| insert.prepared_for(&entry)) {
            for (position, index) in entry.indexes.iter().enumerate() {
                // A building index's entries are maintained only up to its build's position.
                if !index.unique || self.index_limits.get(position) != Some(&RecordId::MAX) {
                    continue;
                }
                if let Some(Ok(index_keys)) = insert.keys.get(position) {
                    full_keys.extend(index_keys.keys.iter().map(|key| keys::index_entry_key(index.prefix, key.keystring(), None)));
                }
            }
        }
        full_keys.sort_unstable();
        full_keys.dedup();
        let values = self.engine.db.batched_multi_get_cf(self.engine.indexes_family(&entry)?, &full_keys, true);
        assert_eq!(values.len(), full_keys.len(), "a batched read answers every key it was given");
        let mut owners = Vec::with_capacity(full_keys.len());
        for (full_key, value) in full_keys.into_iter().zip(values) {
            let owner = match value? {
                Some(value) => Some(keys::read_i64(&value)?),
                None => None,
            };
            owners.push((full_key, owner));
        }
        self.unique_keys_in_flight = self.stripe.writes_in_flight.iter().flat_map(|write| write.unique_keys_among(&owners)).collect();
        self.unique_keys_in_flight.sort_unstable();
        self.unique_keys_in_flight.dedup();
        // Sorted and without repeats, as `read_ahead_owner`'s binary search needs.
        self.unique_owners_read = owners;
        self.read_ahead_hint.set(0);
        Ok(())
    }

    /// Inserts a document prepared by [`CollectionHandle::prepare_insert`], outside this
    /// transaction's stripe. Keys prepared for another set of indexes than the collection has
    /// now (an index was created or dropped since) are computed again from the record's bytes.
    pub fn insert_prepared(&mut self, prepared: PreparedInsert) -> Result<RecordId, StorageError> {
        // The entry is borrowed, not cloned: every writer of the collection shares its
        // reference count, and a clone per document had their cores trade its cache line.
        let entry = self.entry.as_ref().map_err(Clone::clone)?;
        let prepared = prepared.for_indexes_of(entry)?;
        Self::check_capped_document_size(entry, prepared.bytes.len())?;
        let capped = entry.capped_bounds().is_some();
        let record_id = self.next_record_id()?;
        let entry = self.entry.as_ref().map_err(Clone::clone)?;
        let mut planned = std::mem::take(&mut self.planned_inserts);
        if let Err(error) = self.plan_entries(entry, record_id, KeySource::None, KeySource::Prepared(&prepared.keys), &mut planned) {
            // Hand the id back: this transaction holds the stripe, so nobody allocated since.
            self.allocated_record_id = Some(record_id - 1);
            self.planned_inserts = planned;
            return Err(error);
        }
        self.apply_entries(&mut planned);
        self.planned_inserts = planned;
        let bytes = prepared.bytes;
        self.collection_delta[stats::COLLECTION_DOCUMENTS] += 1;
        self.collection_delta[stats::COLLECTION_DATA_SIZE_BYTES] += bytes.len() as i64;
        self.records.insert(record_id, Some(bytes));
        self.unattributed_records.push(record_id);
        assert!(self.first_inserted.is_none_or(|first| first < record_id), "record ids of one transaction ascend");
        self.first_inserted.get_or_insert(record_id);
        self.operations += 1;
        if !capped {
            return Ok(record_id);
        }
        let entry = self.entry()?;
        if let Err(error) = self.trim_capped(&entry, record_id) {
            // Half-trimmed: the transaction can no longer commit.
            self.entry = Err(error.clone());
            return Err(error);
        }
        Ok(record_id)
    }

    /// The record's current content as a document: `old` when it is byte-identical to what is
    /// stored (the usual case, no parsing), else the stored bytes parsed. Index keys are always
    /// derived from what is really stored, so a stale `old` cannot corrupt an index.
    fn stored_document(&self, record_id: RecordId, old: &Document) -> Result<(Document, usize), StorageError> {
        let stored = self.current_record_bytes(record_id)?.ok_or(StorageError::RecordNotFound(record_id))?;
        let mut old_bytes = Vec::with_capacity(stored.len());
        let matches = old.to_writer(&mut old_bytes).is_ok() && old_bytes == stored;
        let document = if matches {
            old.clone()
        } else {
            Document::from_reader(stored.as_slice())
                .map_err(|error| StorageError::Corrupt(format!("record {record_id}: {error}")))?
        };
        Ok((document, stored.len()))
    }

    /// Replaces record `record_id`, whose current content is `old`, with `new`. Only index
    /// entries whose keys changed are rewritten. On error the transaction is unchanged.
    pub fn update(&mut self, record_id: RecordId, old: &Document, new: &Document) -> Result<(), StorageError> {
        self.update_keeping(record_id, old, new, true)
    }

    /// [`Self::update`] of a whole-document replacement: the oplog logs the new document.
    pub fn replace(&mut self, record_id: RecordId, old: &Document, new: &Document) -> Result<(), StorageError> {
        self.update_keeping(record_id, old, new, false)
    }

    fn update_keeping(&mut self, record_id: RecordId, old: &Document, new: &Document, keep_pre_image: bool) -> Result<(), StorageError> {
        let entry = self.entry()?;
        let (old, current_len) = self.stored_document(record_id, old)?;
        validate_id(new)?;
        let bytes = serialize(new)?;
        let mut planned = PlannedEntries::default();
        self.plan_entries(&entry, record_id, KeySource::Document(&old), KeySource::Document(new), &mut planned)?;
        self.apply_entries(&mut planned);
        self.collection_delta[stats::COLLECTION_DATA_SIZE_BYTES] += bytes.len() as i64 - current_len as i64;
        if (keep_pre_image || entry.records_change_images()) && self.engine.is_replicated() && !self.pre_images.contains_key(&record_id) {
            self.pre_images.insert(record_id, PreImage { document: old, diffed: keep_pre_image });
        }
        self.records.insert(record_id, Some(bytes));
        self.unattributed_records.push(record_id);
        self.operations += 1;
        Ok(())
    }

    /// Deletes record `record_id`, whose current content is `old`, and its index entries.
    pub fn delete(&mut self, record_id: RecordId, old: &Document) -> Result<(), StorageError> {
        self.entry()?;
        let (old, current_len) = self.stored_document(record_id, old)?;
        self.delete_document(record_id, old, current_len)
    }

    /// Deletes record `record_id`, whose stored content (`current_len` bytes) is `old`.
    pub(crate) fn delete_document(&mut self, record_id: RecordId, old: Document, current_len: usize) -> Result<(), StorageError> {
        let entry = self.entry()?;
        let mut planned = PlannedEntries::default();
        self.plan_entries(&entry, record_id, KeySource::Document(&old), KeySource::None, &mut planned)?;
        self.apply_entries(&mut planned);
        self.collection_delta[stats::COLLECTION_DOCUMENTS] -= 1;
        self.collection_delta[stats::COLLECTION_DATA_SIZE_BYTES] -= current_len as i64;
        self.deleted_ids.insert(record_id, old.get("_id").cloned().unwrap_or(Bson::Null));
        if entry.records_change_images() && self.engine.is_replicated() && !self.pre_images.contains_key(&record_id) {
            self.pre_images.insert(record_id, PreImage { document: old, diffed: false });
        }
        self.records.insert(record_id, None);
        self.unattributed_records.push(record_id);
        self.operations += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollar_prefixed_fields_of_an_id_are_found_at_any_depth() {
        use bson::doc;
        assert_eq!(dollar_prefixed_field(&doc! {"a": 1, "b": {"c": [1, {"d": 2}]}}), None);
        assert_eq!(dollar_prefixed_field(&doc! {"$oid": "x"}), Some("$oid"));
        assert_eq!(dollar_prefixed_field(&doc! {"a": {"b": [1, {"$c": 2}]}}), Some("$c"));
        let error = validate_id_value(Some(&bson::Bson::Document(doc! {"x": {"$a": 1}}))).unwrap_err();
        assert_eq!((error.code(), error.to_string().as_str()), (52, "_id fields may not contain '$'-prefixed fields: $a is not valid for storage."));
    }

    #[test]
    fn sorted_difference_finds_missing_items() {
        let left = vec![vec![1], vec![2], vec![4]];
        let right = vec![vec![2], vec![3]];
        assert_eq!(sorted_difference(&left, &right), vec![&vec![1], &vec![4]]);
        assert!(sorted_difference(&right, &right).is_empty());
    }
}
