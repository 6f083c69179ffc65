//! `delete`: `limit: 1` removes the first match, `limit: 0` all matches; one batch per statement.

use std::sync::Arc;

use bson::{Bson, Document};
use myriad_query::filter::Filter;
use myriad_storage::{CollectionHandle, Durability};

use crate::error::{CommandError, CommandResult, FAILED_TO_PARSE};
use crate::plan::{Execution, QuerySpec, BLOCKING_SORT_MEMORY_LIMIT_BYTES};
use crate::write::{durability, ordered, statements, write_reply};
use crate::{CommandRequest, ServerContext};

/// Deletes the matches of `filter_document` (at most one unless `multi`); returns them.
pub fn delete_matching(
    context: &ServerContext,
    collection: &CollectionHandle,
    filter_document: &Document,
    multi: bool,
    hint: Option<Bson>,
    sort: Option<&myriad_query::sort::SortSpec>,
    durability: Durability,
) -> CommandResult<Vec<Document>> {
    let spec = QuerySpec {
        filter: Arc::new(Filter::parse(filter_document)?),
        filter_document: filter_document.clone(),
        projection: None,
        sort: None,
        skip: 0,
        limit: if multi || sort.is_some() { None } else { Some(1) },
        hint,
    };
    let mut execution = Execution::new(collection.clone(), spec)?;
    let mut matches = if multi || sort.is_some() {
        execution.drain_unprojected(&context.engine, BLOCKING_SORT_MEMORY_LIMIT_BYTES)?
    } else {
        execution.next_matches(&context.engine, 1)?
    };
    if let Some(sort) = sort {
        matches.sort_by(|(_, left), (_, right)| sort.compare(left, right));
        matches.truncate(1);
    }
    let mut transaction = context.engine.begin_write(collection);
    let mut deleted = Vec::with_capacity(matches.len());
    for (record_id, document) in matches {
        transaction.delete(record_id, &document)?;
        deleted.push(document);
    }
    transaction.commit(durability)?;
    Ok(deleted)
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let statements = statements(request, "deletes")?;
    let ordered = ordered(request)?;
    let durability = durability(request)?;
    let name = request.collection_name()?;
    let collection = context.engine.collection(&request.db, &name)?;
    let mut deleted = 0i64;
    let mut write_errors = Vec::new();
    for (index, statement) in statements.into_iter().enumerate() {
        context.count(&context.operation_counters.delete, 1);
        let result = (|| -> CommandResult<usize> {
            let filter = match statement.get("q") {
                Some(Bson::Document(filter)) => filter,
                Some(other) => return Err(crate::request::field_type_error("q", "object", other)),
                None => return Err(CommandError::new(FAILED_TO_PARSE, "BSON field 'delete.deletes.q' is missing but a required field")),
            };
            let multi = match statement.get("limit").map(crate::request::integer_value) {
                Some(Some(0)) => true,
                Some(Some(1)) => false,
                Some(_) => return Err(CommandError::new(crate::error::FAILED_TO_PARSE, "The limit field in delete objects must be 0 or 1.")),
                None => return Err(CommandError::new(FAILED_TO_PARSE, "BSON field 'delete.deletes.limit' is missing but a required field")),
            };
            let hint = statement.get("hint").filter(|hint| !matches!(hint, Bson::Null)).cloned();
            match &collection {
                Some(collection) => Ok(delete_matching(context, collection, filter, multi, hint, None, durability)?.len()),
                None => {
                    Filter::parse(filter)?;
                    Ok(0)
                }
            }
        })();
        match result {
            Ok(count) => deleted += count as i64,
            Err(error) => {
                write_errors.push(error.to_write_error(index));
                if ordered {
                    break;
                }
            }
        }
    }
    Ok(write_reply(deleted, write_errors))
}
