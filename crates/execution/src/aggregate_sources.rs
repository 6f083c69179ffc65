//! What the aggregation stages that leave the pipeline's own collection ask of the server:
//! [`BackendForeignSource`] implements the query crate's `ForeignSource` over the backend and
//! the planner (`$lookup`, `$graphLookup`, `$unionWith` read through an index-using
//! [`Execution`]; `$out` writes a temporary collection and renames it over the target;
//! `$merge` writes one document at a time under the target's write lock), and
//! [`source_documents`] answers the first-stage sources (`$collStats`, `$indexStats`,
//! `$listSessions`, `$currentOp`).
//!
//! Every read and write checks the operation's interrupt flag first, so maxTimeMS and killOp
//! stop a stage that loops over other collections.

use std::sync::Arc;

use bson::{doc, oid::ObjectId, Bson, Document};
use myriad_query::aggregate::sources::SourceStage;
use myriad_query::aggregate::{DocumentStream, ForeignSource, MergeDecision, Namespace, OutWriter};
use myriad_query::filter::Filter;
use myriad_query::{QueryError, QueryResult};
use myriad_storage::{CollectionHandle, Durability};

use crate::backend::Backend;
use myriad_reply::error::CommandError;
use crate::execution::Execution;
use crate::operation::check_interrupt;
use crate::plan::QuerySpec;
use crate::{CommandRequest, ServerContext};

/// Documents `$out` inserts per write session (and lock hold).
const OUT_CHUNK_DOCUMENTS: usize = 64;

fn query_error(error: CommandError) -> QueryError {
    QueryError::Location(error.code, error.message)
}

/// The server side of the stages that read other collections or write.
pub struct BackendForeignSource {
    backend: Arc<dyn Backend>,
    /// The command's database: where names without a database live.
    db: String,
    /// The pipeline's collation: `$lookup`, `$graphLookup` and `$unionWith` read the other
    /// collection by it (None: each collection's default).
    collation: crate::collation::GivenCollation,
}

impl BackendForeignSource {
    pub fn new(backend: Arc<dyn Backend>, db: &str) -> BackendForeignSource {
        BackendForeignSource { backend, db: db.to_string(), collation: None }
    }

    /// Reads the other collections by `collator` (None: simple).
    pub fn with_collator(mut self, collator: Option<Arc<myriad_collation::Collator>>) -> BackendForeignSource {
        self.collation = Some(collator);
        self
    }

    fn database<'n>(&'n self, namespace: &'n Namespace) -> &'n str {
        namespace.db.as_deref().unwrap_or(&self.db)
    }
}

/// `$out` and `$merge` write documents, not measurements: a time-series target is refused
/// (mongod's $out takes a `timeseries` spec for that, not built here).
fn refuse_timeseries_target(existing: Option<&CollectionHandle>, stage: &str) -> QueryResult<()> {
    match existing {
        Some(collection) if crate::timeseries::of_collection(collection).is_some() => Err(QueryError::Location(
            166,
            format!("Namespace {} is a time-series collection; {stage} into it is not supported", collection.namespace()),
        )),
        _ => Ok(()),
    }
}

/// A time-series collection's measurements, read by another pipeline.
struct MeasurementReader {
    backend: Arc<dyn Backend>,
    stream: crate::timeseries::MeasurementStream,
}

impl DocumentStream for MeasurementReader {
    fn next_document(&mut self) -> QueryResult<Option<Document>> {
        check_interrupt().map_err(query_error)?;
        self.stream.next_measurement(self.backend.as_ref()).map_err(query_error)
    }
}

/// A query over another collection, a document at a time.
struct ExecutionStream {
    backend: Arc<dyn Backend>,
    execution: Option<Execution>,
}

impl DocumentStream for ExecutionStream {
    fn next_document(&mut self) -> QueryResult<Option<Document>> {
        check_interrupt().map_err(query_error)?;
        match &mut self.execution {
            Some(execution) => execution.next_filtered(self.backend.as_ref()).map_err(query_error),
            None => Ok(None),
        }
    }
}

fn query_spec(filter: &Document) -> QueryResult<QuerySpec> {
    Ok(QuerySpec {
        filter: Arc::new(Filter::parse(filter)?),
        filter_document: filter.clone(),
        projection: None,
        sort: None,
        skip: 0,
        limit: None,
        hint: None,
        allow_disk_use: None,
        min_max: None,
        collation: None,
    })
}

impl ForeignSource for BackendForeignSource {
    fn read(&self, namespace: &Namespace, filter: &Document) -> QueryResult<Box<dyn DocumentStream>> {
        check_interrupt().map_err(query_error)?;
        let collection = self.backend.collection(self.database(namespace), &namespace.collection).map_err(|error| query_error(error.into()))?;
        if let Some(timeseries) = collection.as_ref().and_then(crate::timeseries::of_collection) {
            let stream = crate::timeseries::MeasurementStream::open(
                self.backend.as_ref(),
                self.database(namespace),
                &namespace.collection,
                &timeseries,
                filter,
                self.collation.clone(),
            )
            .map_err(query_error)?;
            return Ok(Box::new(MeasurementReader { backend: self.backend.clone(), stream }));
        }
        let execution = match collection {
            Some(collection) => {
                let mut spec = query_spec(filter)?;
                spec.collation = self.collation.clone();
                Some(Execution::new(self.backend.as_ref(), collection, spec).map_err(query_error)?)
            }
            None => None,
        };
        Ok(Box::new(ExecutionStream { backend: self.backend.clone(), execution }))
    }

    fn check_interrupt(&self) -> QueryResult<()> {
        check_interrupt().map_err(query_error)
    }

    fn begin_out(&self, target: &Namespace) -> QueryResult<Box<dyn OutWriter>> {
        let db = self.database(target).to_string();
        let existing = self.backend.collection(&db, &target.collection).map_err(|error| query_error(error.into()))?;
        refuse_timeseries_target(existing.as_ref(), "$out")?;
        if let Some(existing) = &existing {
            if existing.capped_bounds().is_some() {
                return Err(QueryError::Location(17152, format!("namespace '{db}.{}' is capped so it can't be used for $out", target.collection)));
            }
        }
        let temporary = format!("tmp.agg_out.{}", ObjectId::new().to_hex());
        let options = match &existing {
            Some(existing) => existing.options().map_err(|error| query_error(error.into()))?,
            None => Document::new(),
        };
        self.backend.create_collection(&db, &temporary, options).map_err(|error| query_error(error.into()))?;
        let writer = TemporaryOut { backend: self.backend.clone(), db, temporary, target: target.collection.clone(), pending: Vec::new(), committed: false };
        if let Some(existing) = existing {
            let specs: Vec<Document> = existing
                .indexes()
                .map_err(|error| query_error(error.into()))?
                .into_iter()
                .filter(|index| index.name != "_id_")
                .map(|index| index.options)
                .collect();
            if !specs.is_empty() {
                self.backend.create_indexes(&writer.db, &writer.temporary, specs).map_err(|error| query_error(error.into()))?;
            }
        }
        Ok(Box::new(writer))
    }

    fn check_merge_target(&self, target: &Namespace, on: &[String]) -> QueryResult<()> {
        let existing = self.backend.collection(self.database(target), &target.collection).map_err(|error| query_error(error.into()))?;
        refuse_timeseries_target(existing.as_ref(), "$merge")?;
        if on == ["_id"] {
            return Ok(());
        }
        let collection = self.backend.collection(self.database(target), &target.collection).map_err(|error| query_error(error.into()))?;
        let has_unique_index = collection.is_some_and(|collection| {
            collection.indexes().unwrap_or_default().iter().any(|index| {
                index.unique && !index.options.contains_key("partialFilterExpression") && {
                    let mut fields: Vec<&str> = index.key_pattern.keys().map(String::as_str).collect();
                    let mut wanted: Vec<&str> = on.iter().map(String::as_str).collect();
                    fields.sort_unstable();
                    wanted.sort_unstable();
                    fields == wanted
                }
            })
        });
        if !has_unique_index {
            return Err(QueryError::Location(51183, "Cannot find index to verify that join fields will be unique".into()));
        }
        Ok(())
    }

    fn merge_one(
        &self,
        target: &Namespace,
        on_values: &Document,
        decide: &mut dyn FnMut(Option<&Document>) -> QueryResult<MergeDecision>,
    ) -> QueryResult<()> {
        check_interrupt().map_err(query_error)?;
        let db = self.database(target).to_string();
        let mut session = crate::backend::begin_write_creating(self.backend.as_ref(), &db, &target.collection).map_err(query_error)?;
        let handle = session.handle().map_err(|error| query_error(error.into()))?;
        let existing = self.find_match(&handle, on_values)?;
        let decision = decide(existing.as_ref().map(|(_, document)| document))?;
        match (decision, existing) {
            (MergeDecision::Keep, _) => return Ok(()),
            (MergeDecision::Insert(document), _) => {
                let prepared = crate::write::prepare_for_insert(&document).map_err(query_error)?;
                session.insert(&prepared).map_err(|error| query_error(error.into()))?;
            }
            (MergeDecision::Replace(document), Some((record_id, old))) => {
                session.update(record_id, &old, &document).map_err(|error| query_error(error.into()))?;
            }
            (MergeDecision::Replace(_), None) => return Ok(()),
        }
        session.commit(Durability::Default).map_err(|error| query_error(error.into()))
    }
}

impl BackendForeignSource {
    /// The target document whose `on` fields equal `on_values`, read under the write lock the
    /// caller holds.
    fn find_match(&self, handle: &CollectionHandle, on_values: &Document) -> QueryResult<Option<(myriad_storage::RecordId, Document)>> {
        if on_values.len() == 1 {
            if let Some(id) = on_values.get("_id") {
                let found = self.backend.find_by_id(handle, id).map_err(|error| query_error(error.into()))?;
                return match found {
                    Some((record_id, raw)) => Ok(Some((record_id, crate::execution::to_document(&raw).map_err(query_error)?))),
                    None => Ok(None),
                };
            }
        }
        let mut execution = Execution::new(self.backend.as_ref(), handle.clone(), query_spec(on_values)?).map_err(query_error)?;
        let mut matches = execution.next_matches(self.backend.as_ref(), 1).map_err(query_error)?;
        Ok(matches.pop())
    }
}

/// `$out`'s temporary collection: renamed over the target on commit, dropped otherwise.
struct TemporaryOut {
    backend: Arc<dyn Backend>,
    db: String,
    temporary: String,
    target: String,
    pending: Vec<Document>,
    committed: bool,
}

impl TemporaryOut {
    fn flush(&mut self) -> QueryResult<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        check_interrupt().map_err(query_error)?;
        let handle = self
            .backend
            .collection(&self.db, &self.temporary)
            .map_err(|error| query_error(error.into()))?
            .ok_or_else(|| QueryError::Location(26, format!("$out's temporary collection {}.{} was dropped", self.db, self.temporary)))?;
        let mut session = self.backend.begin_write(&handle);
        for document in self.pending.drain(..) {
            let prepared = crate::write::prepare_for_insert(&document).map_err(query_error)?;
            session.insert(&prepared).map_err(|error| query_error(error.into()))?;
        }
        session.commit(Durability::Default).map_err(|error| query_error(error.into()))
    }
}

impl OutWriter for TemporaryOut {
    fn insert(&mut self, document: Document) -> QueryResult<()> {
        self.pending.push(document);
        if self.pending.len() >= OUT_CHUNK_DOCUMENTS {
            self.flush()?;
        }
        Ok(())
    }

    fn commit(mut self: Box<Self>) -> QueryResult<()> {
        self.flush()?;
        self.backend
            .rename_collection((&self.db, &self.temporary), (&self.db, &self.target), true)
            .map_err(|error| query_error(error.into()))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for TemporaryOut {
    fn drop(&mut self) {
        if !self.committed {
            // Nothing to report to: the pipeline already failed; a leftover would only be a
            // tmp.agg_out collection.
            let _ = self.backend.drop_collection(&self.db, &self.temporary);
        }
    }
}

/// The documents a first-stage source produces.
pub fn source_documents(context: &ServerContext, request: &CommandRequest, source: &SourceStage, collection: Option<&str>) -> myriad_reply::CommandResult<Vec<Document>> {
    match source {
        SourceStage::CollStats { latency_stats, storage_stats, count, query_exec_stats, .. } => {
            let name = collection.ok_or_else(|| {
                CommandError::new(myriad_reply::error::ErrorCode::new(73), "$collStats must be run against a collection namespace")
            })?;
            let options = super::aggregate_server_state::CollStatsOptions { latency_stats: *latency_stats, storage_stats: *storage_stats, count: *count, query_exec_stats: *query_exec_stats };
            Ok(vec![super::aggregate_server_state::coll_stats(context, &request.db, name, &options)?])
        }
        SourceStage::IndexStats => {
            let name = collection.ok_or_else(|| CommandError::new(myriad_reply::error::ErrorCode::new(73), "$indexStats must be run against a collection namespace"))?;
            super::aggregate_server_state::index_stats(context, &request.db, name)
        }
        SourceStage::ListSessions { local: true, all_users, users, .. } => {
            if request.db != "admin" || collection.is_some() {
                return Err(CommandError::new(
                    myriad_reply::error::ErrorCode::new(73),
                    "$listLocalSessions must be run against the 'admin' database with {aggregate: 1}",
                ));
            }
            Ok(crate::logical_sessions::list_local(context, request, *all_users, users))
        }
        SourceStage::ListSessions { .. } => {
            if request.db != "config" || collection != Some("system.sessions") {
                return Err(CommandError::new(myriad_reply::error::ErrorCode::new(73), "$listSessions may only be run against config.system.sessions"));
            }
            Ok(super::aggregate_server_state::sessions(context))
        }
        SourceStage::CurrentOp { all_users, .. } => {
            if request.db != "admin" || collection.is_some() {
                return Err(CommandError::new(
                    myriad_reply::error::ErrorCode::new(73),
                    "$currentOp must be run against the 'admin' database with {aggregate: 1}",
                ));
            }
            let operations = super::aggregate_server_state::current_operations(context);
            if *all_users || !context.security.is_enabled() {
                return Ok(operations);
            }
            // With --auth and allUsers false: the operations of the caller's own user.
            let own: Vec<Bson> = request
                .connection
                .session
                .authenticated_user_names()
                .iter()
                .map(|user| Bson::Document(doc! { "user": &user.user, "db": &user.db }))
                .collect();
            let mine = |operation: &Document| operation.get_array("effectiveUsers").is_ok_and(|users| users.iter().any(|user| own.contains(user)));
            Ok(operations.into_iter().filter(|operation| mine(operation)).collect())
        }
    }
}
