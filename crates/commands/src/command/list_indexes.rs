//! `listIndexes`: the specs as created (`v`, `key`, `name` and options), through a cursor.

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
        .map(|index| {
            let mut spec = doc! { "v": 2, "key": index.key_pattern.clone(), "name": &index.name };
            for (key, value) in &index.options {
                if !matches!(key.as_str(), "v" | "key" | "name" | "ns") {
                    spec.insert(key.clone(), value.clone());
                }
            }
            Bson::Document(spec)
        })
        .collect();
    let mut cursor = Document::new();
    cursor.insert("firstBatch", specs);
    cursor.insert("id", 0_i64);
    cursor.insert("ns", format!("{}.$cmd.listIndexes.{}", request.db, name));
    Ok(doc! { "cursor": cursor, "ok": 1.0 })
}
