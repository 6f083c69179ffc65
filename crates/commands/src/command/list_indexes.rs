//! `listIndexes`: the specs as mongod lists them (`v`, `unique`/`hidden` when set, `key`, `name`,
//! the other options; [`myriad_storage::in_stored_order`]), through a cursor.

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult, NAMESPACE_NOT_FOUND};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    if let Some(timeseries) = super::timeseries::resolve(context, &request.db, &name)? {
        return super::timeseries::list_indexes(context, request, &name, &timeseries);
    }
    let namespace = format!("{}.{}", request.db, name);
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Err(CommandError::new(NAMESPACE_NOT_FOUND, format!("ns does not exist: {namespace}")));
    };
    let specs: Vec<Bson> = collection
        .indexes()?
        .iter()
        .map(|index| Bson::Document(myriad_storage::in_stored_order(&index.options, &index.key_pattern, &index.name)))
        .collect();
    let mut cursor = Document::new();
    cursor.insert("firstBatch", specs);
    cursor.insert("id", 0_i64);
    cursor.insert("ns", format!("{}.$cmd.listIndexes.{}", request.db, name));
    Ok(doc! { "cursor": cursor, "ok": 1.0 })
}
