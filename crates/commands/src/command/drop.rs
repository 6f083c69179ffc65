//! `drop`: one batch removes the catalog entry and range-deletes the records and every index;
//! compaction later returns the disk space. A missing collection is not an error (MongoDB 7.0).

use bson::{doc, Document};

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    if super::timeseries::resolve(context, &request.db, &name)?.is_some() {
        return super::timeseries::drop(context, request, &name);
    }
    let namespace = format!("{}.{}", request.db, name);
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Ok(doc! { "ok": 1.0 });
    };
    let index_count = collection.index_count() as i32;
    context.cursors.kill_namespace(&namespace);
    context.backend.drop_collection(&request.db, &name)?;
    Ok(doc! { "nIndexesWas": index_count, "ns": namespace, "ok": 1.0 })
}
