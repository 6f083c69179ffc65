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
    let spec = super::find::parse_query_spec(request, "query")?;
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Ok(doc! { "n": count_value(0), "ok": 1.0 });
    };
    if spec.filter_document.is_empty() && spec.skip == 0 && spec.limit.is_none() {
        let stats = context.backend.collection_stats(&collection)?;
        return Ok(doc! { "n": count_value(stats.count), "ok": 1.0 });
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
    crate::operation::note_examined(&execution.counters);
    Ok(doc! { "n": count_value(count), "ok": 1.0 })
}

/// A count as MongoDB's `appendNumber` writes it: int32 when it fits, else int64.
fn count_value(count: i64) -> Bson {
    i32::try_from(count).map_or(Bson::Int64(count), Bson::Int32)
}
