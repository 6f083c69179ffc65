//! `bulkWrite` through the router, as mongos 8.0 answers it: the node's own parser checks the
//! command (so its errors are the node's), then the operations run in order, each through the
//! router's insert, update or delete routing:
//! - consecutive inserts into one namespace go as one insert command (ordered as the
//!   bulkWrite is), whose per-document outcome is each operation's result;
//! - every update and delete goes as its own command: its result needs its own counts;
//! - `ordered: true` stops at the first failed operation; `ordered: false` goes on;
//! - the summary counts (nInserted, nMatched, nModified, nUpserted, nDeleted, nErrors), the
//!   per-operation results cursor (`admin.$cmd.bulkWrite`, `errorsOnly` keeping only failures)
//!   and a shard's writeConcernError are the reply.
//!
//! Bounds: results are kept up to the node's [`MAX_RESULTS_BYTES`] (past it the next operation
//! fails with ExceededMemoryLimit and the command stops, as on a node); results past the first
//! batch wait in a router cursor, counted against the router's cursor memory bound.

use std::collections::BTreeMap;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_commands::command::bulk_write::parse::{self, BulkRequest, Operation};
use myriad_commands::command::bulk_write::{MAX_RESULTS_BYTES, RESULTS_NAMESPACE};

use crate::error::{ClusterError, ClusterResult};
use crate::router::command::{delete, insert, update};
use crate::router::context::RouterContext;
use crate::router::cursor::RouterCursor;
use crate::router::request::RouterRequest;

/// ExceededMemoryLimit, as a node's bulkWrite answers past its results bound.
const EXCEEDED_MEMORY_LIMIT: i32 = 146;
/// The bulkWrite fields every operation's insert, update or delete command carries.
const SHARED_FIELDS: &[&str] = &["bypassDocumentValidation", "writeConcern", "comment", "maxTimeMS"];

pub async fn run(context: &Arc<RouterContext>, request: &RouterRequest) -> ClusterResult<Document> {
    let node_request = request.node_request()?;
    let bulk = parse::parse(&node_request)?;
    let raw_operations = request.body.get_array("ops").map_err(|_| ClusterError::internal("parsed ops went missing"))?;
    let mut results = Results::new(bulk.errors_only);
    let mut position = 0;
    while position < bulk.operations.len() {
        if results.bytes >= MAX_RESULTS_BYTES {
            let message = format!("BulkWrite response size exceeded limit ({MAX_RESULTS_BYTES} bytes)");
            results.failed(position, &ClusterError::coded(EXCEEDED_MEMORY_LIMIT, message).to_reply(), false);
            break;
        }
        let namespace = &bulk.namespaces[bulk.operations[position].namespace()];
        let (end, go_on) = match &bulk.operations[position] {
            Operation::Insert { .. } => {
                let end = insert_run_end(&bulk, position);
                let documents = bulk.operations[position..end].iter().filter_map(|operation| match operation {
                    Operation::Insert { document, .. } => Some(Bson::Document((*document).clone())),
                    _ => None,
                });
                let mut body = doc! { "insert": &namespace.collection, "documents": documents.collect::<Vec<_>>(), "ordered": bulk.ordered };
                add_shared_fields(&mut body, &request.body, false);
                let reply = run_sub_command(context, request, &namespace.db, body).await;
                (end, results.inserts(position, end - position, bulk.ordered, reply))
            }
            Operation::Update { statement, .. } => {
                let mut body = doc! { "update": &namespace.collection, "updates": [update_statement(statement)] };
                add_shared_fields(&mut body, &request.body, true);
                let reply = run_sub_command(context, request, &namespace.db, body).await;
                (position + 1, results.statement(position, true, reply))
            }
            Operation::Delete { .. } => {
                let raw = raw_operations.get(position).and_then(Bson::as_document).cloned().unwrap_or_default();
                let mut body = doc! { "delete": &namespace.collection, "deletes": [delete_statement(&raw)] };
                add_shared_fields(&mut body, &request.body, true);
                let reply = run_sub_command(context, request, &namespace.db, body).await;
                (position + 1, results.statement(position, false, reply))
            }
        };
        position = end;
        if !go_on && bulk.ordered {
            break;
        }
    }
    results.reply(context, bulk.batch_size, is_unacknowledged(&request.body)).await
}

/// The end of the run of inserts into the namespace of the insert at `start`.
fn insert_run_end(bulk: &BulkRequest<'_>, start: usize) -> usize {
    let target = bulk.operations[start].namespace();
    start
        + bulk.operations[start..]
            .iter()
            .take_while(|operation| matches!(operation, Operation::Insert { namespace, .. } if *namespace == target))
            .count()
}

/// Copies the bulkWrite's fields every operation's command shares (`let` only to updates and
/// deletes, which take it).
fn add_shared_fields(body: &mut Document, bulk_body: &Document, with_let: bool) {
    for field in SHARED_FIELDS.iter().copied().chain(with_let.then_some("let")) {
        if let Some(value) = bulk_body.get(field) {
            body.insert(field, value.clone());
        }
    }
}

/// A bulkWrite update operation as an update command's statement (`filter` is `q`,
/// `updateMods` is `u`, `constants` is `c`; the other fields have the same names).
fn update_statement(operation: &Document) -> Document {
    let mut statement = Document::new();
    for (field, value) in operation.iter().skip(1) {
        let name = match field.as_str() {
            "filter" => "q",
            "updateMods" => "u",
            "constants" => "c",
            other => other,
        };
        statement.insert(name, value.clone());
    }
    statement
}

/// A bulkWrite delete operation as a delete command's statement (`multi` is `limit: 0`).
fn delete_statement(operation: &Document) -> Document {
    let multi = operation.get("multi").and_then(myriad_commands::request::truthy).unwrap_or(false);
    let mut statement = doc! { "q": operation.get_document("filter").cloned().unwrap_or_default(), "limit": if multi { 0 } else { 1 } };
    for field in ["hint", "collation"] {
        if let Some(value) = operation.get(field) {
            statement.insert(field, value.clone());
        }
    }
    statement
}

fn is_unacknowledged(body: &Document) -> bool {
    let w = body.get_document("writeConcern").ok().and_then(|concern| concern.get("w"));
    w.and_then(myriad_commands::request::integer_value) == Some(0)
}

/// Runs one operation's insert, update or delete command through the router's routing.
async fn run_sub_command(context: &Arc<RouterContext>, request: &RouterRequest, db: &str, body: Document) -> ClusterResult<Document> {
    let sub_request = RouterRequest::new(db.to_string(), body, request.connection_id, request.remote)?;
    match sub_request.name.as_str() {
        "insert" => insert::run(context, &sub_request).await,
        "update" => update::run(context, &sub_request).await,
        _ => delete::run(context, &sub_request).await,
    }
}

/// The error fields of a write error entry or error reply: everything but `ok` and `index`,
/// `codeName` added from the code.
fn error_fields(entry: &Document) -> Document {
    let code = entry.get("code").and_then(myriad_commands::request::integer_value).unwrap_or(1);
    let code = i32::try_from(code).unwrap_or(1);
    let mut fields = doc! { "code": code, "codeName": myriad_error_codes::code_name(code), "errmsg": entry.get_str("errmsg").unwrap_or_default() };
    for (key, value) in entry {
        if !matches!(key.as_str(), "ok" | "index" | "code" | "codeName" | "errmsg") {
            fields.insert(key.clone(), value.clone());
        }
    }
    fields
}

/// The write errors of a command's reply, by statement index.
fn write_errors(reply: &Document) -> BTreeMap<usize, Document> {
    let Ok(errors) = reply.get_array("writeErrors") else { return BTreeMap::new() };
    errors
        .iter()
        .filter_map(Bson::as_document)
        .filter_map(|entry| {
            let index = entry.get("index").and_then(myriad_commands::request::integer_value)?;
            Some((usize::try_from(index).ok()?, entry.clone()))
        })
        .collect()
}

/// The per-operation results and the summary counts (the node's bulkWrite's).
struct Results {
    errors_only: bool,
    items: Vec<Document>,
    /// Approximate bytes of `items`.
    bytes: usize,
    failures: i64,
    inserted: i64,
    matched: i64,
    modified: i64,
    upserted: i64,
    deleted: i64,
    write_concern_error: Option<Document>,
}

impl Results {
    fn new(errors_only: bool) -> Results {
        Results {
            errors_only,
            items: Vec::new(),
            bytes: 0,
            failures: 0,
            inserted: 0,
            matched: 0,
            modified: 0,
            upserted: 0,
            deleted: 0,
            write_concern_error: None,
        }
    }

    fn keep(&mut self, item: Document, failed: bool) {
        if failed || !self.errors_only {
            self.bytes += myriad_query::aggregate::memory::approximate_document_size_bytes(&item) as usize;
            self.items.push(item);
        }
    }

    fn succeeded(&mut self, index: usize, n: i64, fields: Document) {
        let mut item = doc! { "ok": 1.0, "idx": index as i32, "n": i32::try_from(n).unwrap_or(i32::MAX) };
        item.extend(fields);
        self.keep(item, false);
    }

    /// `{ok: 0, idx, code, codeName, errmsg, ...extra, n: 0, nModified: 0 (updates)}`.
    fn failed(&mut self, index: usize, error: &Document, update: bool) {
        let mut item = doc! { "ok": 0.0, "idx": index as i32 };
        item.extend(error_fields(error));
        item.insert("n", 0);
        if update {
            item.insert("nModified", 0);
        }
        self.failures += 1;
        self.keep(item, true);
    }

    fn note_write_concern_error(&mut self, reply: &Document) {
        if self.write_concern_error.is_none() {
            self.write_concern_error = reply.get_document("writeConcernError").ok().cloned();
        }
    }

    /// The outcome of the insert command of `count` operations from `start`; whether they all
    /// succeeded. Ordered, the operations after the first failure did not run.
    fn inserts(&mut self, start: usize, count: usize, ordered: bool, reply: ClusterResult<Document>) -> bool {
        let reply = match reply {
            Ok(reply) => reply,
            Err(error) => {
                for offset in 0..if ordered { 1 } else { count } {
                    self.failed(start + offset, &error.to_reply(), false);
                }
                return false;
            }
        };
        self.note_write_concern_error(&reply);
        let errors = write_errors(&reply);
        let first_error = errors.keys().next().copied();
        for offset in 0..count {
            if ordered && first_error.is_some_and(|first| offset > first) {
                break;
            }
            match errors.get(&offset) {
                Some(entry) => self.failed(start + offset, entry, false),
                None => {
                    self.inserted += 1;
                    self.succeeded(start + offset, 1, Document::new());
                }
            }
        }
        errors.is_empty()
    }

    /// The outcome of one update's or delete's command; whether it succeeded.
    fn statement(&mut self, index: usize, update: bool, reply: ClusterResult<Document>) -> bool {
        let reply = match reply {
            Ok(reply) => reply,
            Err(error) => {
                self.failed(index, &error.to_reply(), update);
                return false;
            }
        };
        self.note_write_concern_error(&reply);
        if let Some(entry) = write_errors(&reply).into_values().next() {
            self.failed(index, &entry, update);
            return false;
        }
        let n = reply.get("n").and_then(myriad_commands::request::integer_value).unwrap_or(0);
        if !update {
            self.deleted += n;
            self.succeeded(index, n, Document::new());
            return true;
        }
        let modified = reply.get("nModified").and_then(myriad_commands::request::integer_value).unwrap_or(0);
        self.modified += modified;
        let mut fields = doc! { "nModified": i32::try_from(modified).unwrap_or(i32::MAX) };
        let upserted_id = reply.get_array("upserted").ok().and_then(|entries| entries.first()).and_then(Bson::as_document).and_then(|entry| entry.get("_id"));
        match upserted_id {
            Some(id) => {
                self.upserted += 1;
                fields.insert("upserted", doc! { "_id": id.clone() });
            }
            None => self.matched += n,
        }
        self.succeeded(index, n, fields);
        true
    }

    /// `{cursor: {id, firstBatch, ns}, nErrors, nInserted, ..., writeConcernError?}`; results
    /// past the first batch wait in a router cursor (none for an unacknowledged write).
    async fn reply(self, context: &RouterContext, batch_size: usize, unacknowledged: bool) -> ClusterResult<Document> {
        let counts = myriad_commands::bulk::counts(&[
            ("nErrors", self.failures),
            ("nInserted", self.inserted),
            ("nMatched", self.matched),
            ("nModified", self.modified),
            ("nUpserted", self.upserted),
            ("nDeleted", self.deleted),
        ]);
        let (db, collection) = RESULTS_NAMESPACE.split_once('.').unwrap_or(("admin", "$cmd.bulkWrite"));
        let items = if unacknowledged { Vec::new() } else { self.items };
        let mut cursor = RouterCursor::materialized(db.to_string(), collection.to_string(), items);
        let first_batch = if batch_size == 0 { Vec::new() } else { cursor.next_batch(batch_size).await? };
        let id = if cursor.is_exhausted() { 0 } else { context.cursors.register(cursor) };
        let batch: Vec<Bson> = first_batch.into_iter().map(Bson::Document).collect();
        let mut reply = doc! { "cursor": { "id": id, "firstBatch": batch, "ns": RESULTS_NAMESPACE } };
        reply.extend(counts);
        if let Some(write_concern_error) = self.write_concern_error {
            reply.insert("writeConcernError", write_concern_error);
        }
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_become_write_statements() {
        let update = doc! { "update": 0, "filter": { "x": 1 }, "updateMods": { "$inc": { "n": 1 } }, "upsert": true, "hint": "x_1" };
        assert_eq!(update_statement(&update), doc! { "q": { "x": 1 }, "u": { "$inc": { "n": 1 } }, "upsert": true, "hint": "x_1" });
        let delete = doc! { "delete": 1, "filter": { "x": 1 }, "multi": true, "collation": { "locale": "fr" } };
        assert_eq!(delete_statement(&delete), doc! { "q": { "x": 1 }, "limit": 0, "collation": { "locale": "fr" } });
        assert_eq!(delete_statement(&doc! { "delete": 0, "filter": {} }), doc! { "q": {}, "limit": 1 });
    }

    #[test]
    fn ordered_inserts_stop_at_the_first_write_error() {
        let reply = doc! { "n": 1, "writeErrors": [{ "index": 1, "code": 11000, "errmsg": "dup", "keyPattern": { "_id": 1 } }] };
        let mut ordered = Results::new(false);
        assert!(!ordered.inserts(4, 3, true, Ok(reply.clone())));
        assert_eq!(ordered.items.len(), 2, "the third insert did not run");
        assert_eq!(ordered.items[1], doc! { "ok": 0.0, "idx": 5, "code": 11000, "codeName": "DuplicateKey", "errmsg": "dup", "keyPattern": { "_id": 1 }, "n": 0 });
        let mut unordered = Results::new(true);
        let reply = doc! { "n": 2, "writeErrors": [{ "index": 1, "code": 11000, "errmsg": "dup" }] };
        assert!(!unordered.inserts(0, 3, false, Ok(reply)));
        assert_eq!((unordered.inserted, unordered.failures, unordered.items.len()), (2, 1, 1), "errorsOnly keeps the failure only");
    }

    #[test]
    fn updates_count_matches_or_upserts() {
        let mut results = Results::new(false);
        assert!(results.statement(0, true, Ok(doc! { "n": 2, "nModified": 1 })));
        assert!(results.statement(1, true, Ok(doc! { "n": 1, "nModified": 0, "upserted": [{ "index": 0, "_id": 9 }] })));
        assert!(!results.statement(2, false, Err(ClusterError::coded(61, "no shard key"))));
        assert_eq!((results.matched, results.modified, results.upserted, results.failures), (2, 1, 1, 1));
        assert_eq!(results.items[1], doc! { "ok": 1.0, "idx": 1, "n": 1, "nModified": 0, "upserted": { "_id": 9 } });
        assert_eq!(results.items[2].get_str("codeName").ok(), Some("ShardKeyNotFound"));
    }
}
