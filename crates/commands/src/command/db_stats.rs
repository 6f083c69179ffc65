//! `dbStats`: per-database totals from the stats family.

use bson::{doc, Document};

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let scale = super::coll_stats::scale(request)?;
    let stats = context.backend.database_stats(&request.db)?;
    let average = if stats.objects > 0 { stats.data_size_bytes / stats.objects } else { 0 };
    Ok(doc! {
        "db": &request.db,
        "collections": stats.collections,
        "views": 0_i64,
        "objects": stats.objects,
        "avgObjSize": average as f64,
        "dataSize": (stats.data_size_bytes / scale) as f64,
        "storageSize": (stats.data_size_bytes / scale) as f64,
        "indexes": stats.indexes,
        "indexSize": (stats.index_size_bytes / scale) as f64,
        "totalSize": ((stats.data_size_bytes + stats.index_size_bytes) / scale) as f64,
        "scaleFactor": scale,
        "ok": 1.0,
    })
}
