//! `count`: without a query, skip or limit it reads the stats family (no scan).
//!
//! `n` is an int32 when it fits one and an int64 otherwise, as MongoDB's count command
//! appends its long long count with `appendNumber`, which picks the smallest integer type.

use bson::{doc, Bson, Document};

use crate::error::CommandResult;
use crate::execution::Execution;
use crate::{CommandRequest, ServerContext};

/// Matches are counted in batches of this many documents.
const COUNT_BATCH: usize = 1024;

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    if let Some(timeseries) = super::timeseries::resolve(context, &request.db, &name)? {
        return super::timeseries::count(context, request, &name, &timeseries);
    }
    let spec = super::find::parse_query_spec(request, "query")?;
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Ok(doc! { "n": count_value(0), "ok": 1.0 });
    };
    if spec.filter_document.is_empty() && spec.skip == 0 && spec.limit.is_none() {
        return counted_without_scan(context, request, &name, collection);
    }
    let mut execution = Execution::new(context.backend.as_ref(), collection, spec)?;
    let mut count = 0i64;
    loop {
        let found = execution.count_matches(context.backend.as_ref(), COUNT_BATCH)?;
        count = count.saturating_add(i64::try_from(found).unwrap_or(i64::MAX));
        if found < COUNT_BATCH {
            break;
        }
    }
    crate::operation::note_examined_amounts(execution.counters.keys_examined, execution.counters.documents_examined);
    Ok(doc! { "n": count_value(count), "ok": 1.0 })
}

/// Most reads of the counters while DDL keeps replacing the collection.
const COUNTER_READ_ATTEMPTS: usize = 8;

/// The document counter of the collection. The counters belong to one version of it: a
/// rename over it or a drop between the lookup and the read would make them another's (a
/// dropped target's are gone), so they are read again until the version read is still the
/// current one (bounded; the last read stands).
fn counted_without_scan(
    context: &ServerContext,
    request: &CommandRequest,
    name: &str,
    mut collection: myriad_storage::CollectionHandle,
) -> CommandResult<Document> {
    let mut count = context.backend.collection_stats(&collection)?.count;
    for _ in 1..COUNTER_READ_ATTEMPTS {
        match context.backend.collection(&request.db, name)? {
            Some(current) if current.same_version(&collection) => break,
            Some(current) => {
                count = context.backend.collection_stats(&current)?.count;
                collection = current;
            }
            None => {
                count = 0;
                break;
            }
        }
    }
    Ok(doc! { "n": count_value(count), "ok": 1.0 })
}

/// A count as MongoDB's `appendNumber` writes it: int32 when it fits, else int64.
fn count_value(count: i64) -> Bson {
    i32::try_from(count).map_or(Bson::Int64(count), Bson::Int32)
}
