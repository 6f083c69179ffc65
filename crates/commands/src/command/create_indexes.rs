//! `createIndexes`: catalog entries plus a build from the existing documents; an identical
//! existing index is a no-op, as in MongoDB.

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    let specs: Vec<Document> = match request.optional_array("indexes")? {
        Some(specs) if !specs.is_empty() => specs
            .iter()
            .map(|spec| match spec {
                Bson::Document(spec) => Ok(spec.clone()),
                other => Err(crate::request::field_type_error("indexes", "object", other)),
            })
            .collect::<CommandResult<_>>()?,
        Some(_) => return Err(CommandError::bad_value("Must specify at least one index to create")),
        None => {
            return Err(CommandError::new(
                crate::error::FAILED_TO_PARSE,
                "BSON field 'createIndexes.indexes' is missing but a required field",
            ))
        }
    };
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
