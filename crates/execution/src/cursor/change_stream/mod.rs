//! Change streams on a replica-set member: `aggregate` with `$changeStream` first reads this
//! member's oplog (`local.oplog.rs`) from a position and turns each entry of its scope (a
//! collection, a database, or every user database) into a change event.
//!
//! - Position: the last oplog entry consumed, as its record id (its timestamp). A new stream
//!   starts after the last entry applied; `resumeAfter`/`startAfter` after a token's entry;
//!   `startAtOperationTime` at a time. Tokens are timestamps, identical on every member, so a
//!   stream resumes on the new primary after a failover without losing or repeating an event.
//! - A position at or below what the oplog trimmed answers ChangeStreamHistoryLost (286).
//! - The cursor is awaitData: a getMore with nothing to return waits for the oplog (up to its
//!   `maxTimeMS`, 1 s by default) and answers with `postBatchResumeToken`, the position reached.
//! - Bounds: a batch holds at most the batch size and [`MAX_BATCH_BYTES`]; one call reads at
//!   most [`MAX_ENTRIES_PER_CALL`] oplog entries, each chunk after an interrupt check.
//! - The stages after `$changeStream` (only those MongoDB allows) run on each batch of events;
//!   one that changes an event's `_id` (its resume token) fails the stream, as on mongod.
//! - A collection's stream ends with `invalidate` after its drop or rename, a database's after
//!   its dropDatabase.

mod event;

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document, RawDocumentBuf, Timestamp};
use myriad_query::aggregate::Pipeline;
use myriad_reply::error::{CommandError, CommandResult, ErrorCode};
use myriad_reply::reply::encode_document;
use myriad_storage::{oplog_record_id, oplog_timestamp, CollectionHandle, RecordId, OPLOG_COLLECTION, OPLOG_DATABASE};

use crate::backend::Backend;
use super::tailable::{Deadline, WAIT_SLICE};
use crate::execution::MAX_BATCH_BYTES;
use crate::ServerContext;
pub use event::{parse_resume_token, resume_token, TokenKind};

const ILLEGAL_OPERATION: ErrorCode = ErrorCode::new(20);
const INVALID_NAMESPACE: ErrorCode = ErrorCode::new(73);
const INVALID_RESUME_TOKEN: ErrorCode = ErrorCode::new(260);
const CHANGE_STREAM_FATAL_ERROR: ErrorCode = ErrorCode::new(280);
const CHANGE_STREAM_HISTORY_LOST: ErrorCode = ErrorCode::new(286);
const CHANGE_STREAM_NOT_ON_REPLICA_SET: ErrorCode = ErrorCode::new(40573);
const MULTIPLE_RESUME_OPTIONS: ErrorCode = ErrorCode::new(40674);

/// Oplog entries one call reads at most (then it answers with what it found).
pub const MAX_ENTRIES_PER_CALL: usize = 10_000;
/// Oplog entries read per storage call.
const READ_CHUNK: usize = 256;
/// The stages MongoDB allows after `$changeStream`.
const ALLOWED_STAGES: &[&str] = &["$match", "$project", "$addFields", "$set", "$unset", "$replaceRoot", "$replaceWith", "$redact"];

/// What a stream watches.
#[derive(Clone, Debug, PartialEq)]
enum Scope {
    Collection { db: String, collection: String },
    Database { db: String },
    Deployment,
}

#[derive(Clone, Copy, PartialEq)]
enum FullDocument {
    Default,
    UpdateLookup,
    /// `whenAvailable` / `required`: an update's post-image, its oplog pre-image with the
    /// diff applied (collections with `changeStreamPreAndPostImages`); else null / an error.
    WhenAvailable,
    Required,
}

/// `fullDocumentBeforeChange`: the pre-image an update, replacement or delete's oplog entry
/// carries (`preImage`, collections with `changeStreamPreAndPostImages`).
#[derive(Clone, Copy, PartialEq)]
enum BeforeChange {
    Off,
    /// Null when the entry has none.
    WhenAvailable,
    /// NoMatchingDocument (47) when the entry has none.
    Required,
}

const NO_MATCHING_DOCUMENT: ErrorCode = ErrorCode::new(47);

/// An open change stream (a cursor source).
pub struct ChangeStream {
    scope: Scope,
    oplog: CollectionHandle,
    /// The last oplog entry consumed (or the start position).
    position: RecordId,
    full_document: FullDocument,
    before_change: BeforeChange,
    show_expanded_events: bool,
    stages: Option<Pipeline>,
    /// The timestamp of the invalidate to return next.
    pending_invalidate: Option<Timestamp>,
    finished: bool,
}

/// True when `stages` name `$changeStream` (it must be the first: [`open`] says so otherwise).
pub fn is_change_stream(stages: &[Document]) -> bool {
    stages.iter().any(|stage| stage.contains_key("$changeStream"))
}

/// Opens the stream of `aggregate` on `db` (and `collection`, None for `aggregate: 1`).
pub fn open(context: &ServerContext, db: &str, collection: Option<&str>, stages: &[Document], variables: &[String]) -> CommandResult<ChangeStream> {
    let Some(member) = context.replication.get() else {
        return Err(CommandError::new(CHANGE_STREAM_NOT_ON_REPLICA_SET, "The $changeStream stage is only supported on replica sets"));
    };
    let specification = match stages.first().and_then(|stage| stage.get("$changeStream")) {
        Some(Bson::Document(specification)) => specification,
        Some(other) => return Err(crate::request::field_type_error("$changeStream", "object", other)),
        None => return Err(CommandError::new(ErrorCode::new(40602), "$changeStream is only valid as the first stage in a pipeline")),
    };
    let rest = &stages[1..];
    for stage in rest {
        let name = stage.keys().next().map(String::as_str).unwrap_or("");
        if name == "$changeStream" {
            return Err(CommandError::new(ErrorCode::new(40602), "$changeStream is only valid as the first stage in a pipeline"));
        }
        if !ALLOWED_STAGES.contains(&name) {
            return Err(CommandError::new(ILLEGAL_OPERATION, format!("{name} is not permitted in a $changeStream pipeline")));
        }
    }
    let stages = if rest.is_empty() { None } else { Some(Pipeline::parse_with_variables(rest, variables)?) };
    let options = Options::parse(specification)?;
    let scope = scope_of(db, collection, options.all_changes_for_cluster)?;
    let oplog = context.backend.collection(OPLOG_DATABASE, OPLOG_COLLECTION)?.ok_or_else(|| {
        CommandError::new(CHANGE_STREAM_NOT_ON_REPLICA_SET, "The $changeStream stage is only supported on replica sets")
    })?;
    let position = match options.start {
        Start::Now => {
            let optime = member.last_applied_optime();
            oplog_record_id(Timestamp { time: optime.seconds, increment: optime.increment.max(1) })
        }
        Start::After(ts) => oplog_record_id(ts),
        Start::At(ts) => oplog_record_id(ts) - 1,
    };
    let stream = ChangeStream {
        scope,
        oplog,
        position,
        full_document: options.full_document,
        before_change: options.before_change,
        show_expanded_events: options.show_expanded_events,
        stages,
        pending_invalidate: None,
        finished: false,
    };
    stream.check_history(context.backend.as_ref())?;
    Ok(stream)
}

fn scope_of(db: &str, collection: Option<&str>, all_changes_for_cluster: bool) -> CommandResult<Scope> {
    if all_changes_for_cluster {
        if db != "admin" || collection.is_some() {
            return Err(CommandError::new(
                INVALID_NAMESPACE,
                "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' database, and with no collection name",
            ));
        }
        return Ok(Scope::Deployment);
    }
    if matches!(db, "admin" | "config" | "local") {
        return Err(CommandError::new(INVALID_NAMESPACE, format!("$changeStream may not be opened on the internal {db} database")));
    }
    Ok(match collection {
        Some(collection) if collection.starts_with("system.") => {
            return Err(CommandError::new(INVALID_NAMESPACE, format!("$changeStream may not be opened on the internal {db}.{collection} collection")));
        }
        Some(collection) => Scope::Collection { db: db.to_string(), collection: collection.to_string() },
        None => Scope::Database { db: db.to_string() },
    })
}

enum Start {
    Now,
    After(Timestamp),
    At(Timestamp),
}

struct Options {
    all_changes_for_cluster: bool,
    full_document: FullDocument,
    before_change: BeforeChange,
    show_expanded_events: bool,
    start: Start,
}

impl Options {
    fn parse(specification: &Document) -> CommandResult<Options> {
        let mut options = Options { all_changes_for_cluster: false, full_document: FullDocument::Default, before_change: BeforeChange::Off, show_expanded_events: false, start: Start::Now };
        let mut starts = 0;
        for (name, value) in specification {
            let flag = || value.as_bool().ok_or_else(|| crate::request::field_type_error(&format!("$changeStream.{name}"), "bool", value));
            match name.as_str() {
                "allChangesForCluster" => options.all_changes_for_cluster = flag()?,
                "showExpandedEvents" => options.show_expanded_events = flag()?,
                "fullDocument" => {
                    options.full_document = match value.as_str() {
                        Some("default") => FullDocument::Default,
                        Some("updateLookup") => FullDocument::UpdateLookup,
                        Some("whenAvailable") => FullDocument::WhenAvailable,
                        Some("required") => FullDocument::Required,
                        _ => return Err(CommandError::bad_value(format!("unrecognized value for fullDocument: {value}"))),
                    }
                }
                "fullDocumentBeforeChange" => {
                    options.before_change = match value.as_str() {
                        Some("off") => BeforeChange::Off,
                        Some("whenAvailable") => BeforeChange::WhenAvailable,
                        Some("required") => BeforeChange::Required,
                        _ => return Err(CommandError::bad_value(format!("unrecognized value for fullDocumentBeforeChange: {value}"))),
                    }
                }
                "resumeAfter" | "startAfter" => {
                    starts += 1;
                    let (ts, kind) = parse_resume_token(value)?;
                    if kind == TokenKind::Invalidate && name == "resumeAfter" {
                        return Err(CommandError::new(
                            INVALID_RESUME_TOKEN,
                            "Attempting to resume a change stream using 'resumeAfter' is not allowed from an invalidate notification.",
                        ));
                    }
                    options.start = Start::After(ts);
                }
                "startAtOperationTime" => {
                    starts += 1;
                    let Bson::Timestamp(ts) = value else {
                        return Err(crate::request::field_type_error("$changeStream.startAtOperationTime", "timestamp", value));
                    };
                    options.start = Start::At(Timestamp { time: ts.time, increment: ts.increment.max(1) });
                }
                other => return Err(CommandError::unknown_field(&format!("$changeStream.{other}"))),
            }
        }
        if starts > 1 {
            return Err(CommandError::new(MULTIPLE_RESUME_OPTIONS, "Only one type of resume option is allowed, but multiple were found."));
        }
        Ok(options)
    }
}


impl ChangeStream {
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The token of the position reached (`postBatchResumeToken`).
    pub fn post_batch_resume_token(&self) -> Document {
        resume_token(oplog_timestamp(self.position.max(1)), TokenKind::HighWaterMark)
    }

    /// ChangeStreamHistoryLost when entries after the position may have been trimmed.
    fn check_history(&self, backend: &dyn Backend) -> CommandResult<()> {
        if self.position < backend.oplog_trimmed_through() {
            return Err(CommandError::new(
                CHANGE_STREAM_HISTORY_LOST,
                "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
            ));
        }
        Ok(())
    }

    /// Up to `max_documents` events after the position, within the batch byte bound.
    pub fn next_batch(&mut self, backend: &dyn Backend, max_documents: usize, deadline: Deadline) -> CommandResult<Vec<RawDocumentBuf>> {
        self.check_history(backend)?;
        let (mut events, mut read, mut bytes) = (Vec::new(), 0usize, 0usize);
        while events.len() < max_documents && !self.finished && read < MAX_ENTRIES_PER_CALL {
            if let Some(ts) = self.pending_invalidate.take() {
                events.push(invalidate_event(ts));
                self.finished = true;
                break;
            }
            if super::tailable::interrupted(deadline)? {
                break;
            }
            let entries = backend.scan_records(&self.oplog, Some(self.position), READ_CHUNK)?;
            let at_end = entries.len() < READ_CHUNK;
            for (record_id, entry) in entries {
                let entry = crate::execution::to_document(&entry)?;
                let event = self.event_of(backend, &entry)?;
                if let Some(event) = &event {
                    let size = bson::to_vec(event).map(|encoded| encoded.len()).unwrap_or(0);
                    if !events.is_empty() && (bytes + size > MAX_BATCH_BYTES || events.len() >= max_documents) {
                        return self.finish_batch(events);
                    }
                    bytes += size;
                }
                self.position = record_id;
                read += 1;
                events.extend(event);
                if self.pending_invalidate.is_some() {
                    break;
                }
            }
            if at_end && self.pending_invalidate.is_none() {
                break;
            }
        }
        self.finish_batch(events)
    }

    /// Runs the stages after `$changeStream` on `events` and encodes what comes out.
    fn finish_batch(&self, events: Vec<Document>) -> CommandResult<Vec<RawDocumentBuf>> {
        let output = match &self.stages {
            None => events,
            Some(stages) => {
                let tokens: Vec<Bson> = events.iter().filter_map(|event| event.get("_id").cloned()).collect();
                let output = stages.run(events.into_iter())?;
                for event in &output {
                    if !event.get("_id").is_some_and(|id| tokens.contains(id)) {
                        return Err(CommandError::new(
                            CHANGE_STREAM_FATAL_ERROR,
                            "Encountered an event whose _id field, which contains the resume token, was modified by the pipeline. Modifying the _id field of an event makes it impossible to resume the stream from that point. Only transformations that retain the unmodified _id field are allowed.",
                        ));
                    }
                }
                output
            }
        };
        output.iter().map(encode_document).collect()
    }

    /// awaitData: waits until the oplog grows or `timeout` passes, then answers what it found.
    pub fn await_batch(&mut self, backend: &dyn Backend, max_documents: usize, timeout: Duration) -> CommandResult<Vec<RawDocumentBuf>> {
        let deadline = Instant::now() + timeout;
        loop {
            if super::tailable::interrupted(Deadline::EndsTheBatch)? {
                return Ok(Vec::new());
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            if backend.wait_for_capped_insert(&self.oplog, Some(self.position), (deadline - now).min(WAIT_SLICE))? {
                let batch = self.next_batch(backend, max_documents, Deadline::EndsTheBatch)?;
                if !batch.is_empty() || self.finished {
                    return Ok(batch);
                }
            }
        }
    }

    /// The event of an oplog entry, or None when it is outside the scope (or not an event).
    fn event_of(&mut self, backend: &dyn Backend, entry: &Document) -> CommandResult<Option<Document>> {
        let (Ok(operation), Ok(namespace), Ok(ts)) = (entry.get_str("op"), entry.get_str("ns"), entry.get_timestamp("ts")) else {
            return Ok(None);
        };
        let object = entry.get_document("o").cloned().unwrap_or_default();
        if operation == "c" {
            return Ok(self.command_event(namespace, &object, ts, entry));
        }
        if !self.watches(namespace) {
            return Ok(None);
        }
        let id = match operation {
            "u" => entry.get_document("o2").ok().and_then(|key| key.get("_id")).cloned(),
            _ => object.get("_id").cloned(),
        };
        let Some(id) = id else { return Ok(None) };
        let mut event = base_event(ts, entry, if operation == "u" && !object.contains_key("$v") { "replace" } else { kind_of(operation) });
        match operation {
            "i" => {
                event.insert("fullDocument", object.clone());
            }
            "u" if object.contains_key("$v") => match self.full_document {
                FullDocument::UpdateLookup => {
                    event.insert("fullDocument", lookup(backend, namespace, &id)?);
                }
                FullDocument::WhenAvailable | FullDocument::Required => {
                    let diff = object.get_document("diff").cloned().unwrap_or_default();
                    let post_image = entry.get_document("preImage").ok().map(|pre_image| myriad_storage::apply_update_diff(pre_image, &diff));
                    match post_image {
                        Some(post_image) => event.insert("fullDocument", post_image),
                        None if self.full_document == FullDocument::Required => return Err(image_missing("post", &event)),
                        None => event.insert("fullDocument", Bson::Null),
                    };
                }
                FullDocument::Default => {}
            },
            "u" => {
                event.insert("fullDocument", object.clone());
            }
            "d" => {}
            _ => return Ok(None),
        }
        if self.before_change != BeforeChange::Off && operation != "i" {
            match entry.get_document("preImage") {
                Ok(pre_image) => event.insert("fullDocumentBeforeChange", pre_image.clone()),
                Err(_) if self.before_change == BeforeChange::Required => return Err(image_missing("pre", &event)),
                Err(_) => event.insert("fullDocumentBeforeChange", Bson::Null),
            };
        }
        event.insert("ns", event::namespace_document(namespace));
        event.insert("documentKey", doc! { "_id": id });
        if operation == "u" && object.contains_key("$v") {
            let diff = object.get_document("diff").cloned().unwrap_or_default();
            event.insert("updateDescription", event::update_description(&diff));
        }
        Ok(Some(event))
    }

    /// The event of a catalog change (`op: "c"` on `db.$cmd`), setting up an invalidate when it
    /// ends this stream.
    fn command_event(&mut self, namespace: &str, command: &Document, ts: Timestamp, entry: &Document) -> Option<Document> {
        let db = namespace.strip_suffix(".$cmd")?;
        let (name, value) = command.iter().next()?;
        let target = |collection: &str| format!("{db}.{collection}");
        match (name.as_str(), value) {
            ("drop", Bson::String(collection)) => {
                if !self.watches(&target(collection)) {
                    return None;
                }
                if matches!(&self.scope, Scope::Collection { .. }) {
                    self.pending_invalidate = Some(ts);
                }
                let mut event = base_event(ts, entry, "drop");
                event.insert("ns", event::namespace_document(&target(collection)));
                Some(event)
            }
            ("renameCollection", Bson::String(from)) => {
                if !self.watches(from) {
                    return None;
                }
                if matches!(&self.scope, Scope::Collection { .. }) {
                    self.pending_invalidate = Some(ts);
                }
                let mut event = base_event(ts, entry, "rename");
                event.insert("ns", event::namespace_document(from));
                if let Ok(to) = command.get_str("to") {
                    event.insert("to", event::namespace_document(to));
                }
                Some(event)
            }
            ("dropDatabase", _) => {
                let watched = match &self.scope {
                    Scope::Collection { db: watched, .. } | Scope::Database { db: watched } => watched == db,
                    Scope::Deployment => !is_internal(db),
                };
                if !watched {
                    return None;
                }
                if !matches!(&self.scope, Scope::Deployment) {
                    self.pending_invalidate = Some(ts);
                }
                let mut event = base_event(ts, entry, "dropDatabase");
                event.insert("ns", doc! { "db": db });
                Some(event)
            }
            ("create" | "createIndexes" | "dropIndexes" | "collMod", Bson::String(collection)) if self.show_expanded_events => {
                if !self.watches(&target(collection)) {
                    return None;
                }
                let kind = match name.as_str() {
                    "collMod" => "modify",
                    other => other,
                };
                let mut event = base_event(ts, entry, kind);
                event.insert("ns", event::namespace_document(&target(collection)));
                let mut description = command.clone();
                description.remove(name);
                event.insert("operationDescription", description);
                Some(event)
            }
            _ => None,
        }
    }

    /// True when changes to `namespace` (`db.collection`) belong to this stream.
    fn watches(&self, namespace: &str) -> bool {
        let Some((db, collection)) = namespace.split_once('.') else { return false };
        if collection.starts_with("system.") {
            return false;
        }
        match &self.scope {
            Scope::Collection { db: watched_db, collection: watched } => db == watched_db && collection == watched,
            Scope::Database { db: watched_db } => db == watched_db,
            Scope::Deployment => !is_internal(db),
        }
    }
}

/// mongod's error for a `required` image an event has none of (the collection has no
/// `changeStreamPreAndPostImages`, or had none when the change was made).
fn image_missing(which: &str, event: &Document) -> CommandError {
    let option = if which == "pre" { "pre-image for all update, delete and replace events" } else { "post-image for all update events" };
    let token = event.get("_id").map(ToString::to_string).unwrap_or_default();
    CommandError::new(NO_MATCHING_DOCUMENT, format!("Change stream was configured to require a {option}, but the {which}-image was not found for event: {token}"))
}

fn is_internal(db: &str) -> bool {
    matches!(db, "admin" | "config" | "local")
}

fn kind_of(operation: &str) -> &'static str {
    match operation {
        "i" => "insert",
        "u" => "update",
        "d" => "delete",
        _ => "unknown",
    }
}

fn base_event(ts: Timestamp, entry: &Document, kind: &str) -> Document {
    let mut event = doc! { "_id": resume_token(ts, TokenKind::Event), "operationType": kind, "clusterTime": ts };
    if let Ok(wall) = entry.get_datetime("wall") {
        event.insert("wallTime", *wall);
    }
    event
}

fn invalidate_event(ts: Timestamp) -> Document {
    doc! { "_id": resume_token(ts, TokenKind::Invalidate), "operationType": "invalidate", "clusterTime": ts }
}

/// The current version of a document (`fullDocument: "updateLookup"`), or null.
fn lookup(backend: &dyn Backend, namespace: &str, id: &Bson) -> CommandResult<Bson> {
    let Some((db, collection)) = namespace.split_once('.') else { return Ok(Bson::Null) };
    let Some(handle) = backend.collection(db, collection)? else { return Ok(Bson::Null) };
    Ok(match backend.find_by_id(&handle, id)? {
        Some((_, raw)) => Bson::Document(crate::execution::to_document(&raw)?),
        None => Bson::Null,
    })
}
