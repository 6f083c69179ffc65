//! `bulkWrite` (MongoDB 8.0, admin database only): inserts, updates and deletes on any number
//! of collections (`nsInfo`) in one command, answered with summary counts and a cursor of
//! per-operation results (`admin.$cmd.bulkWrite`).
//!
//! - Operations run in order. Consecutive inserts into one namespace are applied in slices as
//!   the insert command's are; every update and delete is its own slice (see [`crate::bulk`]).
//!   Collections are created by their first insert or upsert.
//! - `ordered: true` (the default) stops at the first failing operation; `ordered: false` goes
//!   on. A failing operation is a result `{ok: 0, idx, code, codeName, errmsg, ...}`; an
//!   interruption (`maxTimeMS`, killOp) fails the whole command, what ran before staying done.
//! - `errorsOnly: true` keeps only the failures in the cursor; the counts cover everything.
//! - The results are bounded: past [`MAX_RESULTS_BYTES`] the next operation fails with
//!   ExceededMemoryLimit and the command stops, as MongoDB's bulkWriteMaxRepliesSize. Results
//!   beyond the first batch (`cursor.batchSize`, and 16 MiB) wait in a cursor counted against
//!   `cursorMemoryLimitBytes` like every other cursor.

pub mod parse;

pub use parse::{namespace_index, operation_target, split_namespace};

use std::collections::VecDeque;

use bson::{doc, Bson, Document, RawArrayBuf, RawDocumentBuf};

use crate::bulk::{insert_in_slices, is_interruption, InsertDocument, InsertStatement, WriteErrors};
use crate::command::update::{parse_statement, update_statement, StatementOutcome};
use crate::cursor::{take_batch, Cursor, CursorSource};
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::reply::{encode_document, Reply};
use crate::retryable::RetryableWrite;
use crate::{CommandRequest, ServerContext};
use parse::{BulkRequest, Operation};

/// Where the results cursor lives.
pub const RESULTS_NAMESPACE: &str = "admin.$cmd.bulkWrite";
/// Bytes of results kept at most (MongoDB's `bulkWriteMaxRepliesSize` default).
pub const MAX_RESULTS_BYTES: usize = 16 * 1024 * 1024;
const EXCEEDED_MEMORY_LIMIT: ErrorCode = ErrorCode::new(146);

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Reply> {
    let bulk = parse::parse(request)?;
    for namespace in &bulk.namespaces {
        if super::timeseries::resolve(context, &namespace.db, &namespace.collection)?.is_some() {
            return Err(CommandError::new(
                crate::error::ErrorCode::new(166),
                format!("Namespace {}.{} is a time-series collection; bulkWrite into it is not supported, insert measurements with insert", namespace.db, namespace.collection),
            ));
        }
    }
    let durability = crate::write::durability(request)?;
    let mut results = Results::new(bulk.errors_only);
    let retry = crate::retryable::begin(context, request, bulk.operations.len())?;
    let outcome = execute(context, request, &bulk, retry.as_ref(), &mut results);
    crate::bulk::sync_journal_if_asked(context, durability)?;
    match outcome {
        Err(error) if is_interruption(&error) => Err(crate::bulk::interrupted_with(error, results.summary())),
        Err(error) => Err(error),
        Ok(()) => reply(context, request, results, bulk.batch_size),
    }
}

/// Runs the operations in order until the end or, ordered, the first failure.
fn execute(
    context: &ServerContext,
    request: &CommandRequest,
    bulk: &BulkRequest<'_>,
    retry: Option<&RetryableWrite<'_>>,
    results: &mut Results,
) -> CommandResult<()> {
    let variables = super::update::update_variables(request)?;
    let replica_set = context.replication.get().is_some();
    let mut position = 0;
    while position < bulk.operations.len() {
        if results.bytes >= MAX_RESULTS_BYTES {
            let message = format!("BulkWrite response size exceeded limit ({MAX_RESULTS_BYTES} bytes)");
            results.failed(position, CommandError::new(EXCEEDED_MEMORY_LIMIT, message), false);
            return Ok(());
        }
        let namespace = &bulk.namespaces[bulk.operations[position].namespace()];
        let (db, collection) = (namespace.db.as_str(), namespace.collection.as_str());
        // As mongod's bulkWrite, a namespace clients may not write fails each operation on it.
        if let Err(error) = myriad_execution::namespace_rules::check_client_write(db, collection, replica_set) {
            results.failed(position, error, matches!(bulk.operations[position], Operation::Update { .. }));
            position += 1;
            if bulk.ordered {
                return Ok(());
            }
            continue;
        }
        let go_on = match &bulk.operations[position] {
            Operation::Insert { namespace: target, .. } => {
                let end = position
                    + bulk.operations[position..]
                        .iter()
                        .take_while(|operation| matches!(operation, Operation::Insert { namespace, .. } if namespace == target))
                        .count();
                let statements = bulk.operations[position..end].iter().enumerate().filter_map(|(offset, operation)| match operation {
                    Operation::Insert { document, .. } => Some(InsertStatement {
                        index: position + offset,
                        document: InsertDocument::Decoded(document),
                        refused: if request.duplicate_fields.is_empty() {
                            None
                        } else {
                            crate::request::duplicates::duplicate_under(request, &["ops", &(position + offset).to_string(), "document"])
                        },
                    }),
                    _ => None,
                });
                let go_on = insert_in_slices(context, db, collection, statements, bulk.ordered, bulk.bypass_document_validation, retry, &mut |index, outcome| {
                    results.inserted(index, outcome)
                })?;
                position = end;
                go_on
            }
            Operation::Update { statement, .. } => {
                let outcome = crate::operation::check_interrupt()
                    .and_then(|()| parse_statement(statement, &parse::UPDATE_FIELDS, bulk.bypass_document_validation, &variables))
                    .and_then(|parsed| update_statement(context, db, collection, &parsed, retry.map(|retry| retry.statement(position))));
                position += 1;
                results.updated(position - 1, outcome)? || !bulk.ordered
            }
            Operation::Delete { filter, multi, hint, collation, .. } => {
                let outcome = crate::operation::check_interrupt().and_then(|()| {
                    let statement = super::delete::DeleteStatement { filter, multi: *multi, hint: hint.clone(), collation: collation.clone() };
                    super::delete::delete_statement(context, db, collection, statement, retry.map(|retry| retry.statement(position)))
                });
                position += 1;
                results.deleted(position - 1, outcome)? || !bulk.ordered
            }
        };
        if !go_on {
            return Ok(());
        }
    }
    Ok(())
}

/// The per-operation results and the summary counts.
struct Results {
    errors_only: bool,
    items: Vec<Document>,
    /// Approximate bytes of `items`.
    bytes: usize,
    /// Shapes error messages as the write commands do (bounded).
    errors: WriteErrors,
    failures: i64,
    inserted: i64,
    matched: i64,
    modified: i64,
    upserted: i64,
    deleted: i64,
}

impl Results {
    fn new(errors_only: bool) -> Results {
        Results {
            errors_only,
            items: Vec::new(),
            bytes: 0,
            errors: WriteErrors::default(),
            failures: 0,
            inserted: 0,
            matched: 0,
            modified: 0,
            upserted: 0,
            deleted: 0,
        }
    }

    fn keep(&mut self, item: Document, failed: bool) {
        if failed || !self.errors_only {
            self.bytes += myriad_query::aggregate::memory::approximate_document_size_bytes(&item) as usize;
            self.items.push(item);
        }
    }

    fn succeeded(&mut self, index: usize, n: i64, fields: Document) {
        let mut item = doc! { "ok": 1.0, "idx": index as i32, "n": n as i32 };
        item.extend(fields);
        self.keep(item, false);
    }

    fn failed(&mut self, index: usize, error: CommandError, update: bool) {
        let error = self.errors.shape(error);
        let mut item = doc! { "ok": 0.0, "idx": index as i32, "code": error.code, "codeName": error.code_name(), "errmsg": &error.message };
        if let Some(extra) = error.extra {
            item.extend(extra);
        }
        item.insert("n", 0);
        if update {
            item.insert("nModified", 0);
        }
        self.failures += 1;
        self.keep(item, true);
    }

    fn inserted(&mut self, index: usize, outcome: CommandResult<()>) {
        match outcome {
            Ok(()) => {
                self.inserted += 1;
                self.succeeded(index, 1, Document::new());
            }
            Err(error) => self.failed(index, error, false),
        }
    }

    /// Records an update's outcome: Ok(true) when it succeeded; an interruption is returned.
    fn updated(&mut self, index: usize, outcome: CommandResult<StatementOutcome>) -> CommandResult<bool> {
        match outcome {
            Ok(outcome) => {
                self.modified += outcome.modified;
                let mut fields = doc! { "nModified": outcome.modified as i32 };
                let n = match outcome.upserted_id {
                    Some(id) => {
                        self.upserted += 1;
                        fields.insert("upserted", doc! { "_id": id });
                        1
                    }
                    None => {
                        self.matched += outcome.matched;
                        outcome.matched
                    }
                };
                self.succeeded(index, n, fields);
                Ok(true)
            }
            Err(error) if is_interruption(&error) => Err(error),
            Err(error) => {
                self.failed(index, error, true);
                Ok(false)
            }
        }
    }

    fn deleted(&mut self, index: usize, outcome: CommandResult<u64>) -> CommandResult<bool> {
        match outcome {
            Ok(count) => {
                self.deleted += count as i64;
                self.succeeded(index, count as i64, Document::new());
                Ok(true)
            }
            Err(error) if is_interruption(&error) => Err(error),
            Err(error) => {
                self.failed(index, error, false);
                Ok(false)
            }
        }
    }

    /// The reply's counts, in MongoDB's order.
    fn summary(&self) -> Document {
        crate::bulk::counts(&[
            ("nErrors", self.failures),
            ("nInserted", self.inserted),
            ("nMatched", self.matched),
            ("nModified", self.modified),
            ("nUpserted", self.upserted),
            ("nDeleted", self.deleted),
        ])
    }
}

/// `{cursor: {id, firstBatch, ns}, nErrors, nInserted, ..., ok: 1}`; results past the first
/// batch go into a cursor (none for an unacknowledged write, whose reply nobody reads).
fn reply(context: &ServerContext, request: &CommandRequest, results: Results, batch_size: usize) -> CommandResult<Reply> {
    let summary = results.summary();
    let unacknowledged = matches!(
        request.optional_document("writeConcern")?.and_then(|concern| concern.get("w")).and_then(crate::request::integer_value),
        Some(0)
    );
    let mut documents: VecDeque<RawDocumentBuf> =
        if unacknowledged { VecDeque::new() } else { results.items.iter().map(encode_document).collect::<CommandResult<_>>()? };
    drop(results);
    let mut retained_bytes: usize = documents.iter().map(|document| document.as_bytes().len()).sum();
    let first_batch = take_batch(&mut documents, &mut retained_bytes, batch_size);
    let cursor_id = if documents.is_empty() {
        0
    } else {
        let source = CursorSource::Materialized { documents, bytes: retained_bytes };
        context.cursors.register(Cursor::new(RESULTS_NAMESPACE.to_string(), source, super::find::session_id(request)))
    };
    let mut batch = RawArrayBuf::new();
    for document in first_batch {
        batch.push(document);
    }
    let mut cursor = RawDocumentBuf::new();
    cursor.append("id", cursor_id);
    cursor.append("firstBatch", batch);
    cursor.append("ns", RESULTS_NAMESPACE);
    let mut body = RawDocumentBuf::new();
    body.append("cursor", cursor);
    for (name, value) in &summary {
        if let Bson::Int32(count) = value {
            body.append(name.as_str(), *count);
        }
    }
    body.append("ok", 1.0);
    Ok(Reply::Encoded(body))
}
