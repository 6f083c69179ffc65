//! `planCacheClear`: forgets a collection's cached plans, or only those of one query shape
//! (`query`, with optional `sort` and `projection`).

use bson::{doc, Document};

use crate::error::CommandResult;
use crate::plan::cache;
use crate::{CommandRequest, ServerContext};

pub fn run(_context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    let namespace = format!("{}.{}", request.db, name);
    let shape = match request.optional_document("query")? {
        Some(_) => Some(cache::query_shape(&super::find::parse_query_spec(request, "query")?)),
        None => None,
    };
    cache::clear(&namespace, shape.as_deref());
    Ok(doc! { "ok": 1.0 })
}
