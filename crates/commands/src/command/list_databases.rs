//! `listDatabases`: per-database totals come from the stats family, so the cost does not grow
//! with the number of collections.

use bson::{doc, Bson, Document};
use myriad_query::filter::Filter;

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let filter = match request.optional_document("filter")? {
        Some(filter) if !filter.is_empty() => Some(Filter::parse(filter)?),
        _ => None,
    };
    let name_only = request.flag("nameOnly")?;
    let mut databases = Vec::new();
    let mut total_size = 0i64;
    for database in context.backend.list_databases()? {
        let size = database.size_on_disk_bytes;
        let entry = doc! { "name": &database.name, "sizeOnDisk": size, "empty": database.empty };
        if filter.as_ref().map_or(true, |filter| filter.matches(&entry)) {
            total_size += size;
            databases.push(Bson::Document(if name_only { doc! { "name": &database.name } } else { entry }));
        }
    }
    if name_only {
        return Ok(doc! { "databases": databases, "ok": 1.0 });
    }
    Ok(doc! {
        "databases": databases,
        "totalSize": total_size,
        "totalSizeMb": total_size / (1024 * 1024),
        "ok": 1.0,
    })
}
