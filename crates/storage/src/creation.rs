//! Group commit of collection creations (docs/design-storage.md, "Creation batching").
//!
//! Creating a collection is one catalog batch under the DDL mutex. Creations that arrive
//! together are committed together: each creator queues its request; one of them, the leader,
//! takes the pending requests (at most [`MAX_CREATIONS_PER_GROUP`]), takes the DDL mutex once,
//! allocates their prefixes, writes one WriteBatch, publishes one catalog snapshot, and hands
//! each creator its own outcome. The others sleep on a condition variable meanwhile; the next
//! leader is a creator whose request is still pending once the current group is done.
//!
//! Invariants:
//! - Every request gets exactly one outcome, decided under the DDL mutex against the catalog
//!   on disk and the creations before it in its group: of several requests for one namespace,
//!   the first creates it and the others get [`Created::Existing`] (NamespaceExists for an
//!   explicit create, the collection for an implicit one).
//! - A request that is invalid on its own (bad options) fails alone. A batch write that fails
//!   fails every creation of its group and changes nothing in memory.
//! - The persisted prefix counter moves once per group, past every prefix the group allocated,
//!   in the group's batch; prefixes are never reused.
//! - Readers never wait: the group's entries appear together in one new immutable snapshot,
//!   published after the batch is written.
//! - A creator holds no lock stripe (asserted) and not the DDL mutex while it waits: the leader
//!   takes the DDL mutex, and a thread waiting for a leader must not hold what it needs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bson::Document;
use rocksdb::WriteBatch;

use crate::catalog::{namespace_of, CollectionEntry, CollectionHandle, IndexEntry};
use crate::creation_queue::{Created, CreationRequest, LeaderGuard, Outcome};
use crate::operation_record::{command_record, CatalogEffect, OperationRecord};
use crate::catalog::database_entry_bytes;
use crate::engine::{validate_namespace, DatabaseDelta, Engine};
use crate::families::{FAMILY_CATALOG, FAMILY_STATS};
use crate::index::ParsedIndexSpec;
use crate::index_conflicts::IndexConflicts;
use crate::stats::{self, encode_counters};
use crate::{keys, CreateIndexesOutcome, StorageError};

/// Most creations one leader commits in one batch (bounds the batch and the leader's turn).
pub(crate) const MAX_CREATIONS_PER_GROUP: usize = 512;
/// createIndexes on a missing collection tries this many times to create it or find it (it
/// fails only if the collection is dropped again each time in between).
pub(crate) const MAX_CREATION_ATTEMPTS: usize = 8;

/// The batch of one group while it is built.
struct Group {
    batch: WriteBatch,
    next_prefix: u64,
    /// Entries this group creates, by namespace.
    created: HashMap<Arc<str>, Arc<CollectionEntry>>,
    /// Databases whose catalog entry is in the batch already or exists on disk.
    databases_known: HashSet<String>,
    database_deltas: HashMap<String, DatabaseDelta>,
    operations: Vec<OperationRecord>,
    entries: Vec<Arc<CollectionEntry>>,
    /// Why the batch holds an incomplete creation and must not be written.
    poisoned: Option<StorageError>,
}

impl Engine {
    /// Creates a collection (NamespaceExists when it exists), committed in one group with the
    /// creations queued at the same time.
    pub fn create_collection(
        &self,
        db: &str,
        collection: &str,
        options: Document,
    ) -> Result<CollectionHandle, StorageError> {
        let request = CreationRequest { db: db.to_string(), collection: collection.to_string(), options, extra_indexes: Vec::new() };
        match self.create_grouped(request)? {
            Created::New(entry) => Ok(CollectionHandle { entry }),
            Created::Existing(_) => Err(StorageError::NamespaceExists(namespace_of(db, collection))),
        }
    }

    /// Returns the collection, creating it (with default options) when absent; a concurrent
    /// creation of the same name makes this return that collection.
    pub fn get_or_create_collection(&self, db: &str, collection: &str) -> Result<CollectionHandle, StorageError> {
        if let Some(handle) = self.collection(db, collection)? {
            return Ok(handle);
        }
        let request =
            CreationRequest { db: db.to_string(), collection: collection.to_string(), options: Document::new(), extra_indexes: Vec::new() };
        match self.create_grouped(request)? {
            Created::New(entry) | Created::Existing(entry) => Ok(CollectionHandle { entry }),
        }
    }

    /// Creates the collection of `request` in a group with the creations queued at the same
    /// time, or finds it existing. The caller holds no lock stripe and not the DDL mutex.
    pub(crate) fn create_grouped(&self, request: CreationRequest) -> Outcome {
        validate_namespace(&request.db, &request.collection)?;
        crate::stripes::assert_no_stripes_held();
        let queue = &self.creations;
        let mut state = queue.state.lock();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.pending.push((ticket, request));
        loop {
            if let Some(outcome) = state.outcomes.remove(&ticket) {
                return outcome;
            }
            if state.leading {
                queue.group_done.wait(&mut state);
                continue;
            }
            state.leading = true;
            let take = state.pending.len().min(MAX_CREATIONS_PER_GROUP);
            let requests: Vec<(u64, CreationRequest)> = state.pending.drain(..take).collect();
            drop(state);
            let mut leader = LeaderGuard { queue, tickets: requests.iter().map(|(ticket, _)| *ticket).collect(), outcomes: Vec::new() };
            leader.outcomes = self.commit_group(requests);
            drop(leader);
            state = queue.state.lock();
        }
    }

    /// createIndexes on a missing collection: creates it with the indexes, ready (an empty
    /// collection has nothing to build), grouped with concurrent creations. None when the
    /// collection exists by the time its group is committed.
    pub(crate) fn create_with_indexes(
        &self,
        db: &str,
        collection: &str,
        parsed: &[ParsedIndexSpec],
    ) -> Result<Option<CreateIndexesOutcome>, StorageError> {
        let mut conflicts = IndexConflicts::of_new_collection();
        let mut to_build: Vec<ParsedIndexSpec> = Vec::new();
        for spec in parsed {
            if conflicts.admit(spec)? {
                to_build.push(spec.clone());
            }
        }
        Self::check_index_limit(1 + to_build.len())?;
        let request = CreationRequest { db: db.to_string(), collection: collection.to_string(), options: Document::new(), extra_indexes: to_build };
        Ok(match self.create_grouped(request)? {
            Created::New(entry) => Some(CreateIndexesOutcome {
                indexes_before: 1,
                indexes_after: entry.indexes.len(),
                created_collection_automatically: true,
            }),
            Created::Existing(_) => None,
        })
    }

    /// Decides every request of a group under the DDL mutex and commits the new collections in
    /// one batch and one snapshot publication.
    fn commit_group(&self, requests: Vec<(u64, CreationRequest)>) -> Vec<(u64, Outcome)> {
        let mut ddl = self.lock_ddl();
        let mut group = Group {
            batch: WriteBatch::default(),
            next_prefix: ddl.next_prefix,
            created: HashMap::new(),
            databases_known: HashSet::new(),
            database_deltas: HashMap::new(),
            operations: Vec::new(),
            entries: Vec::new(),
            poisoned: None,
        };
        let mut outcomes: Vec<(u64, Outcome)> =
            requests.into_iter().map(|(ticket, request)| (ticket, self.add_creation(&mut group, &request))).collect();
        if group.entries.is_empty() {
            return outcomes;
        }
        let written = match group.poisoned.take() {
            Some(error) => Err(error),
            None => self.finish_group(&mut ddl, group),
        };
        use std::sync::atomic::Ordering;
        match written {
            Ok(created) => {
                self.creations.groups.fetch_add(1, Ordering::Relaxed);
                self.creations.created.fetch_add(created as u64, Ordering::Relaxed);
            }
            Err(error) => {
                for (_, outcome) in &mut outcomes {
                    if matches!(outcome, Ok(Created::New(_))) {
                        *outcome = Err(error.clone());
                    }
                }
            }
        }
        outcomes
    }

    /// Adds one creation to the group's batch, or finds the collection existing. Allocates
    /// prefixes only for a creation that goes into the batch.
    fn add_creation(&self, group: &mut Group, request: &CreationRequest) -> Outcome {
        let (db, collection) = (request.db.as_str(), request.collection.as_str());
        let namespace = namespace_of(db, collection);
        if let Some(entry) = group.created.get(namespace.as_str()) {
            return Ok(Created::Existing(entry.clone()));
        }
        if let Some(entry) = self.read_entry(db, collection)? {
            return Ok(Created::Existing(Arc::new(entry)));
        }
        let prefix = group.next_prefix;
        let next_prefix = prefix
            .checked_add(2 + request.extra_indexes.len() as u64)
            .filter(|next| *next < i64::MAX as u64)
            .ok_or_else(|| StorageError::Corrupt("prefix space exhausted".to_string()))?;
        let mut indexes = Vec::with_capacity(1 + request.extra_indexes.len());
        indexes.push(IndexEntry::from_parsed(&crate::index::id_index_spec_for(&request.options), prefix + 1)?);
        for (spec, index_prefix) in request.extra_indexes.iter().zip(prefix + 2..) {
            indexes.push(IndexEntry::from_parsed(spec, index_prefix)?);
        }
        let entry = CollectionEntry::new(db, collection, prefix, bson::Uuid::new().bytes(), &request.options, indexes)?;
        let entry_bytes = entry.to_bytes()?;
        let mut command = bson::doc! { "create": collection };
        if !request.options.is_empty() {
            command.extend(request.options.clone());
        }
        let operation = command_record(db, entry.uuid, command)?;
        let database_key = keys::database_key(db);
        let catalog = self.family(FAMILY_CATALOG)?;
        let database_missing = !group.databases_known.contains(db) && self.db.get_pinned_cf(catalog, &database_key)?.is_none();
        if database_missing {
            if let Some(existing) = group.databases_known.iter().find(|known| known.eq_ignore_ascii_case(db)) {
                return Err(StorageError::DatabaseDifferCase { existing: existing.clone(), requested: db.to_string() });
            }
            self.check_database_case(db)?;
        }
        group.batch.put_cf(catalog, keys::collection_key(db, collection), entry_bytes);
        let extra_index_prefixes = entry.indexes.iter().skip(1).map(|index| index.prefix);
        let tracked = self.add_multikey_tracking(&mut group.batch, extra_index_prefixes);
        if let Err(error) = tracked.and_then(|()| self.add_ttl_entries(&mut group.batch, &entry, entry.indexes.iter())) {
            // The batch holds part of this creation: the group is not written.
            group.poisoned = Some(error.clone());
            return Err(error);
        }
        if database_missing {
            group.batch.put_cf(catalog, &database_key, database_entry_bytes(db)?);
        }
        group.databases_known.insert(db.to_string());
        let delta = group.database_deltas.entry(db.to_string()).or_insert([0; stats::DATABASE_SLOTS]);
        delta[stats::DATABASE_COLLECTIONS] += 1;
        delta[stats::DATABASE_INDEXES] += entry.indexes.len() as i64;
        group.next_prefix = next_prefix;
        group.operations.push(operation);
        let entry = Arc::new(entry);
        group.created.insert(entry.namespace.clone(), entry.clone());
        group.entries.push(entry.clone());
        Ok(Created::New(entry))
    }

    /// Writes the group's batch (with the prefix counter and the database counters) and
    /// publishes its entries; returns how many collections it created.
    fn finish_group(&self, ddl: &mut crate::engine::DdlState, mut group: Group) -> Result<usize, StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        let stats_family = self.family(FAMILY_STATS)?;
        group.batch.put_cf(catalog, keys::CATALOG_NEXT_PREFIX_KEY, group.next_prefix.to_be_bytes());
        for (db, delta) in &group.database_deltas {
            group.batch.merge_cf(stats_family, keys::stats_database_key(db), encode_counters(delta));
        }
        let created = group.entries.len();
        let mut effects = Vec::with_capacity(1 + created);
        effects.push(CatalogEffect::AdvancePrefixes(group.next_prefix));
        effects.extend(group.entries.into_iter().map(CatalogEffect::Publish));
        self.apply_catalog_changes(ddl, group.batch, effects, &group.operations)?;
        Ok(created)
    }
}
