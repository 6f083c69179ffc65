//! `delete`: `limit: 1` removes the first current match, `limit: 0` all of them, each re-checked
//! under the collection's write lock (see [`crate::modify`]). Every statement is its own slice
//! (see [`crate::bulk`]); ordered deletes stop at the first failing statement.

use std::sync::Arc;

use bson::{rawdoc, Bson, Document, RawDocumentBuf};
use myriad_query::filter::Filter;
use myriad_storage::{CollectionHandle, Durability};

use myriad_execution::namespace_rules::written_collection_name;
use crate::bulk::{is_interruption, write_reply, WriteErrors};
use crate::error::{CommandError, CommandResult, FAILED_TO_PARSE, MISSING_FIELD};
use crate::modify::{for_each_current_match, Scope};
use crate::plan::QuerySpec;
use crate::retryable::{RetryStatement, RetryableWrite};
use crate::write::{durability, ordered, statements};
use crate::{CommandRequest, ServerContext};

/// Deletes the current matches of the statement's filter (at most one unless `multi`, the
/// first in `sort` order when given), each re-checked under the collection's write lock.
/// Returns how many were deleted and the first deleted document.
pub fn delete_matching(
    context: &ServerContext,
    collection: &CollectionHandle,
    statement: DeleteStatement<'_>,
    sort: Option<&myriad_query::sort::SortSpec>,
    durability: Durability,
    retry: Option<RetryStatement<'_>>,
) -> CommandResult<(u64, Option<Document>)> {
    let DeleteStatement { filter: filter_document, multi, hint, collation } = statement;
    if let Some(retry) = retry {
        if multi {
            return Err(RetryableWrite::refuse_multi("limit=0"));
        }
        if let Some(recorded) = retry.executed()? {
            let document = recorded.get_document("d").ok().map(Document::try_from).transpose();
            let document = document.map_err(|error| CommandError::new(crate::error::INTERNAL_ERROR, format!("statement record: {error}")))?;
            return Ok((recorded.get_i64("n").unwrap_or(0) as u64, document));
        }
    }
    let spec = QuerySpec {
        filter: Arc::new(Filter::parse(filter_document)?),
        filter_document: filter_document.clone(),
        projection: None,
        sort: sort.cloned(),
        skip: 0,
        limit: None,
        hint,
        allow_disk_use: None,
        min_max: None,
        collation,
    }
    .with_collation(collection);
    let scope = if multi { Scope::All } else { Scope::One };
    let mut first = None;
    let deleted = for_each_current_match(context.backend.as_ref(), collection, &spec, scope, durability, |transaction, record_id, document| {
        transaction.delete(record_id, &document)?;
        if let Some(retry) = retry {
            let mut record = rawdoc! { "n": 1i64 };
            if retry.keeps_document {
                record.append("d", RawDocumentBuf::from_document(&document).expect("a stored document converts to raw BSON"));
            }
            retry.record(transaction, &record)?;
        }
        if first.is_none() {
            first = Some(document);
        }
        Ok(())
    })?;
    Ok((deleted, first))
}

/// One delete statement: its filter, `limit: 0` (multi), hint and collation.
pub struct DeleteStatement<'a> {
    pub filter: &'a Document,
    pub multi: bool,
    pub hint: Option<Bson>,
    pub collation: crate::collation::GivenCollation,
}

/// Runs one delete statement on `db.name` (nothing to delete when the collection does not
/// exist): the count deleted. Commits per chunk without syncing (see [`crate::bulk`]).
pub fn delete_statement(
    context: &ServerContext,
    db: &str,
    name: &str,
    statement: DeleteStatement<'_>,
    retry: Option<RetryStatement<'_>>,
) -> CommandResult<u64> {
    context.count(&context.operation_counters.delete, 1);
    match context.backend.collection(db, name)? {
        Some(collection) => Ok(delete_matching(context, &collection, statement, None, Durability::Default, retry)?.0),
        None => {
            Filter::parse(statement.filter)?;
            Ok(0)
        }
    }
}

/// What the command parser reads of a delete before any statement runs; a failure fails the
/// whole command. A router runs it too before it routes the statements.
struct Arguments<'r> {
    statements: Vec<&'r Document>,
    ordered: bool,
    durability: myriad_storage::Durability,
    name: String,
}

fn parse_arguments(request: &CommandRequest, replica_set: bool) -> CommandResult<Arguments<'_>> {
    let statements = statements(request, "deletes")?;
    let arguments = Arguments { ordered: ordered(request)?, durability: durability(request)?, name: written_collection_name(request, replica_set)?, statements };
    for statement in &arguments.statements {
        check_statement_types(request, statement)?;
    }
    Ok(arguments)
}

/// The delete's argument errors, as the node answers them (see [`Arguments`]).
pub fn check_arguments(request: &CommandRequest) -> CommandResult<()> {
    parse_arguments(request, false).map(|_| ())
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let bound = crate::let_variables::bound_request(request)?;
    let request = bound.as_ref().unwrap_or(request);
    let Arguments { statements, ordered, durability, name } = parse_arguments(request, context.replication.get().is_some())?;
    if let Some(timeseries) = super::timeseries::resolve(context, &request.db, &name)? {
        return super::timeseries::delete(context, request, &name, &timeseries);
    }
    let retry = crate::retryable::begin(context, request, statements.len())?;
    let mut deleted = 0i64;
    let mut write_errors = WriteErrors::default();
    let mut interruption = None;
    for (index, statement) in statements.into_iter().enumerate() {
        let result = crate::operation::check_interrupt().and_then(|()| {
            let Some(Bson::Document(filter)) = statement.get("q") else {
                return Err(CommandError::new(MISSING_FIELD, "BSON field 'delete.deletes.q' is missing but a required field"));
            };
            let multi = statement.get("limit").and_then(crate::request::integer_value) == Some(0);
            let hint = statement.get("hint").filter(|hint| !matches!(hint, Bson::Null)).cloned();
            let collation = crate::collation::parse_field("delete.deletes", statement)?;
            let statement = DeleteStatement { filter, multi, hint, collation };
            delete_statement(context, &request.db, &name, statement, retry.as_ref().map(|retry| retry.statement(index)))
        });
        match result {
            Ok(count) => deleted += count as i64,
            Err(error) if is_interruption(&error) => {
                interruption = Some(error);
                break;
            }
            Err(error) => {
                write_errors.push(index, error);
                if ordered {
                    break;
                }
            }
        }
    }
    crate::operation::note_deleted(deleted as u64);
    crate::bulk::sync_journal_if_asked(context, durability)?;
    match interruption {
        Some(error) => Err(crate::bulk::interrupted_with(error, crate::bulk::counts(&[("n", deleted)]))),
        None => {
            let mut reply = write_reply(deleted, write_errors);
            if let Some(retry) = &retry {
                retry.annotate_reply(&mut reply);
            }
            Ok(reply)
        }
    }
}

/// What MongoDB's command parser checks in every statement before any runs (a failure fails
/// the whole command, not one statement): `q` a document, `limit` present and 0 or 1.
fn check_statement_types(request: &CommandRequest, statement: &Document) -> CommandResult<()> {
    match statement.get("q") {
        Some(Bson::Document(_)) => {}
        Some(other) => return Err(request.wrong_type("deletes.q", "object", other)),
        None => return Err(CommandError::new(MISSING_FIELD, "BSON field 'delete.deletes.q' is missing but a required field")),
    }
    match statement.get("limit").map(crate::request::integer_value) {
        Some(Some(0 | 1)) => Ok(()),
        Some(_) => Err(CommandError::new(FAILED_TO_PARSE, "The limit field in delete objects must be 0 or 1.")),
        None => Err(CommandError::new(MISSING_FIELD, "BSON field 'delete.deletes.limit' is missing but a required field")),
    }
}
