//! `createIndexes`: catalog entries plus a build from the existing documents; an identical
//! existing index is a no-op, as in MongoDB.

use bson::{doc, Bson, Document};

use myriad_execution::namespace_rules::written_collection_name;
use crate::error::{CommandError, CommandResult, INVALID_INDEX_SPECIFICATION_OPTION};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = written_collection_name(request, context.replication.get().is_some())?;
    // One lookup serves the time-series check and the default collation: a missing name costs
    // a point read each time (absent names are not cached), and most createIndexes of a node
    // of many collections create their collection.
    let collection = context.backend.collection(&request.db, &name)?;
    if let Some(timeseries) = collection.as_ref().and_then(super::timeseries::of_collection) {
        return super::timeseries::create_indexes(context, request, &name, &timeseries);
    }
    let mut specs: Vec<Document> = match request.optional_array("indexes")? {
        Some(specs) if !specs.is_empty() => specs
            .iter()
            .map(|spec| match spec {
                Bson::Document(spec) => Ok(spec.clone()),
                other => Err(request.wrong_type("indexes", "object", other)),
            })
            .collect::<CommandResult<_>>()?,
        Some(_) => return Err(CommandError::bad_value("Must specify at least one index to create")),
        None => {
            return Err(CommandError::new(
                crate::error::MISSING_FIELD,
                "BSON field 'createIndexes.indexes' is missing but a required field",
            ))
        }
    };
    let collection_default = collection.and_then(|collection| crate::collation::collection_default(&collection));
    for spec in &mut specs {
        validate_id_index_spec(spec)?;
        validate_hidden(spec)?;
        normalize_collation(spec, collection_default.as_deref())?;
    }
    let outcome = context.backend.create_indexes(&request.db, &name, specs)?;
    let mut reply = doc! {
        "numIndexesBefore": outcome.indexes_before as i32,
        "numIndexesAfter": outcome.indexes_after as i32,
        "createdCollectionAutomatically": outcome.created_collection_automatically,
    };
    if outcome.indexes_before == outcome.indexes_after {
        reply.insert("note", "all indexes already exist");
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

/// An index's collation as mongod stores it: the normalised document, none for the simple
/// collation, and the collection's default when the spec names none. The `_id` index must
/// keep the collection's collation (BadValue otherwise, as mongod).
fn normalize_collation(spec: &mut Document, collection_default: Option<&myriad_collation::Collator>) -> CommandResult<()> {
    let collator = match spec.get("collation") {
        Some(collation) => crate::collation::parse_value("createIndexes.indexes", collation)?,
        None => {
            if let Some(default) = collection_default {
                spec.insert("collation", default.to_document());
            }
            return Ok(());
        }
    };
    let is_id_index = spec.get_str("name") == Ok(myriad_storage::ID_INDEX_NAME);
    if is_id_index && !myriad_collation::same_collation(collator.as_deref(), collection_default) {
        let shown = |collator: Option<&myriad_collation::Collator>| collator.map_or_else(|| "{}".to_string(), |collator| myriad_collation::shell_string(&collator.to_document()));
        return Err(CommandError::bad_value(format!(
            "The _id index must have the same collation as the collection. Index collation: {}, collection collation: {}",
            shown(collator.as_deref()),
            shown(collection_default)
        )));
    }
    match collator {
        Some(collator) => spec.insert("collation", collator.to_document()),
        None => spec.remove("collation"),
    };
    Ok(())
}

/// The fields an `_id` index specification may have (MongoDB's list); anything else, such as
/// `unique` or `sparse`, is refused with InvalidIndexSpecificationOption.
const ID_INDEX_FIELDS: &[&str] = &["key", "name", "v", "collation", "ns"];

/// A spec whose key is `{_id: 1}` describes the `_id` index, which takes no options.
fn validate_id_index_spec(spec: &Document) -> CommandResult<()> {
    let Some(Bson::Document(key)) = spec.get("key") else {
        return Ok(());
    };
    let is_id_pattern = key.len() == 1 && key.get("_id").and_then(crate::request::integer_value) == Some(1);
    if !is_id_pattern {
        return Ok(());
    }
    match spec.keys().find(|field| !ID_INDEX_FIELDS.contains(&field.as_str())) {
        Some(field) => Err(CommandError::new(
            INVALID_INDEX_SPECIFICATION_OPTION,
            format!("The field '{field}' is not valid for an _id index specification. Specification: {spec}"),
        )),
        None => Ok(()),
    }
}

/// `hidden` must be a boolean (TypeMismatch, as MongoDB's spec validation answers).
fn validate_hidden(spec: &Document) -> CommandResult<()> {
    match spec.get("hidden") {
        None | Some(Bson::Boolean(_)) => Ok(()),
        Some(other) => Err(CommandError::new(
            crate::error::TYPE_MISMATCH,
            format!("The field 'hidden' must be a bool, but got {}", myriad_query::bson_types::type_name(other)),
        )),
    }
}
