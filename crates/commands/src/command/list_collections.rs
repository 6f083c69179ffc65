//! `listCollections`: reads the catalog family for one database (no per-collection work beyond
//! its entry), with `filter`, `nameOnly` and a cursor.

use std::collections::VecDeque;

use bson::{doc, Document};
use myriad_query::filter::Filter;
use myriad_storage::CollectionHandle;

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

pub fn describe(collection: &CollectionHandle, name_only: bool) -> CommandResult<Document> {
    if name_only {
        let kind = if super::timeseries::of_collection(collection).is_some() { "timeseries" } else { "collection" };
        return Ok(doc! { "name": collection.name(), "type": kind });
    }
    let options = collection.options()?;
    if let Some(entry) = super::timeseries::describe(collection, &options) {
        return Ok(entry);
    }
    let mut id_index = doc! { "v": 2, "key": { "_id": 1 }, "name": "_id_" };
    // The `_id` index has the collection's default collation (as mongod shows it).
    if let Ok(collation) = options.get_document("collation") {
        id_index.insert("collation", collation.clone());
    }
    Ok(doc! {
        "name": collection.name(),
        "type": "collection",
        "options": options,
        "info": { "readOnly": false, "uuid": collection.uuid() },
        "idIndex": id_index,
    })
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<crate::reply::Reply> {
    let filter = match request.optional_document("filter")? {
        Some(filter) if !filter.is_empty() => Some(Filter::parse(filter)?),
        _ => None,
    };
    let name_only = request.flag("nameOnly")?;
    let batch_size = match request.optional_document("cursor")?.and_then(|cursor| cursor.get("batchSize")) {
        Some(size) => crate::request::integer_value(size).filter(|size| *size >= 0).map_or(usize::MAX, |size| size as usize),
        None => usize::MAX,
    };
    let mut entries: VecDeque<Document> = VecDeque::new();
    for collection in context.backend.list_collections(&request.db)? {
        // The filter sees the full entry (it may test options or type) even with nameOnly.
        let full = describe(&collection, false)?;
        if filter.as_ref().map_or(true, |filter| filter.matches(&full)) {
            entries.push_back(if name_only { describe(&collection, true)? } else { full });
        }
    }
    let namespace = format!("{}.$cmd.listCollections", request.db);
    super::find::materialized_cursor_reply(context, request, namespace, entries, batch_size)
}
