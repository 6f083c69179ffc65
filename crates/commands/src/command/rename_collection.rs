//! `renameCollection`: a catalog-only change (prefixes stay), so it is O(1) even across
//! databases.

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult, INVALID_NAMESPACE};
use crate::request::{validate_collection_name, validate_database_name};
use crate::{CommandRequest, ServerContext};

fn split_namespace(namespace: &str) -> CommandResult<(&str, &str)> {
    let Some((db, collection)) = namespace.split_once('.') else {
        return Err(CommandError::new(INVALID_NAMESPACE, format!("Invalid namespace specified '{namespace}'")));
    };
    validate_database_name(db)?;
    validate_collection_name(collection)?;
    Ok((db, collection))
}

/// The source and target namespaces as the command names them, each a string (a router reads
/// them with this too).
pub fn source_and_target(request: &CommandRequest) -> CommandResult<(String, String)> {
    let source = match request.first_value() {
        Some(Bson::String(namespace)) => namespace.clone(),
        Some(other) => return Err(crate::request::field_type_error("renameCollection", "string", other)),
        None => return Err(CommandError::bad_value("renameCollection requires a source namespace")),
    };
    let target = match request.body.get("to") {
        Some(Bson::String(namespace)) => namespace.clone(),
        Some(other) => return Err(request.wrong_type("to", "string", other)),
        None => return Err(CommandError::new(crate::error::MISSING_FIELD, "BSON field 'renameCollection.to' is missing but a required field")),
    };
    Ok((source, target))
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let (source, target) = source_and_target(request)?;
    let (source_db, source_collection) = split_namespace(&source)?;
    if super::timeseries::resolve(context, source_db, source_collection)?.is_some() {
        return Err(CommandError::new(crate::error::ILLEGAL_OPERATION, format!("Cannot rename time-series collection {source}")));
    }
    let (target_db, target_collection) = split_namespace(&target)?;
    if source == target {
        return Err(CommandError::new(crate::error::ILLEGAL_OPERATION, "Can't rename a collection to itself"));
    }
    let drop_target = request.flag("dropTarget")?;
    if context.backend.collection(source_db, source_collection)?.is_none() {
        return Err(CommandError::new(
            crate::error::NAMESPACE_NOT_FOUND,
            format!("Source collection {source} does not exist"),
        ));
    }
    if !drop_target && context.backend.collection(target_db, target_collection)?.is_some() {
        return Err(CommandError::new(crate::error::NAMESPACE_EXISTS, "target namespace exists"));
    }
    context.cursors.kill_namespace(&source);
    context.cursors.kill_namespace(&target);
    context.backend.rename_collection((source_db, source_collection), (target_db, target_collection), drop_target)?;
    Ok(doc! { "ok": 1.0 })
}
