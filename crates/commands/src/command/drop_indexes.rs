//! `dropIndexes`: by name, by key pattern, a list of names, or `"*"` (all but `_id_`).

use bson::{doc, Bson, Document};
use myriad_storage::IndexSelector;

use crate::error::{CommandError, CommandResult, NAMESPACE_NOT_FOUND};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    if let Some(timeseries) = super::timeseries::resolve(context, &request.db, &name)? {
        return super::timeseries::drop_indexes(context, request, &name, &timeseries);
    }
    if context.backend.collection(&request.db, &name)?.is_none() {
        return Err(CommandError::new(NAMESPACE_NOT_FOUND, format!("ns not found {}.{}", request.db, name)));
    }
    let selectors: Vec<IndexSelector> = match request.body.get("index") {
        Some(Bson::String(star)) if star == "*" => vec![IndexSelector::All],
        Some(Bson::String(index)) => vec![IndexSelector::Name(index.clone())],
        Some(Bson::Document(pattern)) => vec![IndexSelector::KeyPattern(pattern.clone())],
        Some(Bson::Array(names)) => names
            .iter()
            .map(|name| match name {
                Bson::String(name) => Ok(IndexSelector::Name(name.clone())),
                other => Err(request.wrong_type("index", "string", other)),
            })
            .collect::<CommandResult<_>>()?,
        Some(other) => return Err(request.wrong_type("index", "string or object", other)),
        None => {
            return Err(CommandError::new(crate::error::MISSING_FIELD, "BSON field 'dropIndexes.index' is missing but a required field"))
        }
    };
    let mut indexes_before = None;
    for selector in selectors {
        let before = context.backend.drop_indexes(&request.db, &name, selector)?;
        indexes_before.get_or_insert(before);
    }
    Ok(doc! { "nIndexesWas": indexes_before.unwrap_or(0) as i32, "ok": 1.0 })
}
