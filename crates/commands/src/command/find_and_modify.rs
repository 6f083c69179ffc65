//! `findAndModify`: updates (or removes) the first document in sort order and returns it,
//! before or after the change (`new`), projected by `fields`.

use bson::{doc, Bson, Document};
use myriad_query::projection::Projection;
use myriad_query::sort::SortSpec;

use myriad_execution::namespace_rules::written_collection_name;
use crate::error::{CommandError, CommandResult, FAILED_TO_PARSE};
use crate::write::durability;
use crate::{CommandRequest, ServerContext};

use super::update::{apply_statement, parse_array_filters, UpdateStatement};

/// Where findAndModify's fields are, for [`super::update::parse_update`].
const FIND_AND_MODIFY_FIELDS: super::update::StatementFields =
    super::update::StatementFields { filter: "query", update: "update", path: "findAndModify", constants: "c" };

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let bound = crate::let_variables::bound_request(request)?;
    let request = bound.as_ref().unwrap_or(request);
    let name = written_collection_name(request, context.replication.get().is_some())?;
    super::timeseries::refuse(context, request, &name)?;
    let empty = Document::new();
    let filter = request.optional_document("query")?.unwrap_or(&empty);
    let sort = match request.optional_document("sort")? {
        Some(sort) if !sort.is_empty() => Some(SortSpec::parse(sort)?),
        _ => None,
    };
    let projection = match request.optional_document("fields")? {
        Some(fields) if !fields.is_empty() => Some(Projection::parse(fields)?),
        _ => None,
    };
    let remove = request.flag("remove")?;
    let return_new = request.flag("new")?;
    let upsert = request.flag("upsert")?;
    let durability = durability(request)?;
    let update_document = match request.body.get("update") {
        None | Some(Bson::Null) => None,
        Some(update @ (Bson::Document(_) | Bson::Array(_))) => Some(update),
        Some(other) => return Err(request.wrong_type("update", "object", other)),
    };
    let hint = request.body.get("hint").filter(|hint| !matches!(hint, Bson::Null)).cloned();
    let retry = crate::retryable::begin(context, request, 1)?;
    let statement_retry = retry.as_ref().map(|retry| retry.statement(0).keeping_document());
    let (value, last_error) = match (remove, update_document) {
        (true, Some(_)) => return Err(CommandError::new(FAILED_TO_PARSE, "Cannot specify both an update and remove=true")),
        (false, None) => return Err(CommandError::new(FAILED_TO_PARSE, "Either an update or remove=true must be specified")),
        (true, None) => {
            if upsert || return_new {
                return Err(CommandError::new(FAILED_TO_PARSE, "Cannot specify both upsert=true and remove=true"));
            }
            context.count(&context.operation_counters.delete, 1);
            let (count, removed) = match context.backend.collection(&request.db, &name)? {
                Some(collection) => {
                    let collation = crate::collation::parse_field("findAndModify", &request.body)?;
                    let statement = super::delete::DeleteStatement { filter, multi: false, hint, collation };
                    super::delete::delete_matching(context, &collection, statement, sort.as_ref(), durability, statement_retry)?
                }
                None => (0, None),
            };
            crate::operation::note_deleted(count);
            (removed, doc! { "n": count as i32 })
        }
        (false, Some(update_document)) => {
            context.count(&context.operation_counters.update, 1);
            let statement = UpdateStatement {
                filter_document: filter,
                update: super::update::parse_update(
                    update_document,
                    &request.body,
                    &FIND_AND_MODIFY_FIELDS,
                    &parse_array_filters(&request.body, "findAndModify.arrayFilters")?,
                    &super::update::update_variables(request)?,
                )?,
                multi: false,
                upsert,
                hint,
                sort,
                return_new,
                bypass_document_validation: crate::validation::bypass_requested(request)?,
                collation: crate::collation::parse_field("findAndModify", &request.body)?,
            };
            let collection = if upsert {
                Some(context.backend.get_or_create_collection(&request.db, &name)?)
            } else {
                context.backend.collection(&request.db, &name)?
            };
            match collection {
                Some(collection) => {
                    let outcome = apply_statement(context, &collection, &statement, durability, statement_retry)?;
                    crate::operation::note_updated(outcome.matched as u64, outcome.modified as u64, u64::from(outcome.upserted_id.is_some()));
                    let mut last_error = doc! {
                        "n": (outcome.matched + i64::from(outcome.upserted_id.is_some())) as i32,
                        "updatedExisting": outcome.matched > 0,
                    };
                    if let Some(id) = outcome.upserted_id {
                        last_error.insert("upserted", id);
                    }
                    (outcome.document, last_error)
                }
                None => (None, doc! { "n": 0, "updatedExisting": false }),
            }
        }
    };
    let value = match (value, &projection) {
        (Some(document), Some(projection)) => Bson::Document(projection.apply(&document, None)?),
        (Some(document), None) => Bson::Document(document),
        (None, _) => Bson::Null,
    };
    let mut reply = doc! { "lastErrorObject": last_error, "value": value, "ok": 1.0 };
    if let Some(retry) = &retry {
        retry.annotate_reply(&mut reply);
    }
    Ok(reply)
}
