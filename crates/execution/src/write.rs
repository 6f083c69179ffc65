//! What insert, update, delete and findAndModify share: write concern, `_id` handling and batch
//! limits (the write reply's shape is [`crate::bulk::write_reply`], starting a write session is
//! [`crate::backend::begin_write_creating`]).

use std::borrow::Cow;

use bson::{oid::ObjectId, Bson, Document};
use myriad_storage::Durability;

use myriad_reply::error::{CommandError, CommandResult, INVALID_LENGTH};
use crate::request::CommandRequest;

/// `writeConcern`: `w: 0` suppresses the reply (the connection honours moreToCome);
/// `j: true` or `w: "majority"` syncs the WAL before replying.
pub fn durability(request: &CommandRequest) -> CommandResult<Durability> {
    let Some(concern) = request.optional_document("writeConcern")? else {
        return Ok(Durability::Default);
    };
    let journaled = match concern.get("j") {
        Some(value) => crate::request::truthy(value).unwrap_or(false),
        None => false,
    };
    let majority = matches!(concern.get("w"), Some(Bson::String(mode)) if mode == "majority");
    if let Some(w) = concern.get("w") {
        match w {
            Bson::String(_) => {}
            other => match crate::request::integer_value(other) {
                Some(count) if count >= 0 => {}
                _ => return Err(CommandError::new(myriad_reply::error::FAILED_TO_PARSE, format!("w has to be a number or a string; found: {other}"))),
            },
        }
    }
    Ok(if journaled || majority { Durability::Journaled } else { Durability::Default })
}

/// Checks the 1..=100,000 statements rule MongoDB enforces on write batches.
pub fn check_batch_size(count: usize) -> CommandResult<()> {
    if count == 0 || count > myriad_wire::MAX_WRITE_BATCH_SIZE {
        return Err(CommandError::new(
            INVALID_LENGTH,
            format!("Write batch sizes must be between 1 and 100000. Got {count} operations."),
        ));
    }
    Ok(())
}

/// A document ready to store: `_id` first (generated when missing), and an `_id` that MongoDB
/// would accept (not an array, regex or undefined). A document whose first field is already
/// an acceptable `_id` (what drivers send) is used as it is, without a copy.
pub fn prepare_for_insert(document: &Document) -> CommandResult<Cow<'_, Document>> {
    let id = document.get("_id");
    match id {
        Some(Bson::Array(_)) => return Err(CommandError::new(myriad_reply::error::BAD_VALUE, "can't use an array for _id")),
        Some(Bson::RegularExpression(_)) => return Err(CommandError::new(myriad_reply::error::BAD_VALUE, "can't use a regex for _id")),
        Some(Bson::Undefined) => return Err(CommandError::new(myriad_reply::error::BAD_VALUE, "can't use a undefined for _id")),
        Some(_) if document.keys().next().is_some_and(|key| key == "_id") => return Ok(Cow::Borrowed(document)),
        _ => {}
    }
    let mut prepared = Document::new();
    prepared.insert("_id", id.cloned().unwrap_or_else(|| Bson::ObjectId(ObjectId::new())));
    for (key, value) in document {
        if key != "_id" {
            prepared.insert(key.clone(), value.clone());
        }
    }
    Ok(Cow::Owned(prepared))
}

/// The statement documents of a write (`updates`, `deletes`), each required to be a document.
pub fn statements<'a>(request: &'a CommandRequest, field: &str) -> CommandResult<Vec<&'a Document>> {
    let statements = request.document_array(field)?;
    check_batch_size(statements.len())?;
    Ok(statements)
}

pub fn ordered(request: &CommandRequest) -> CommandResult<bool> {
    match request.body.get("ordered") {
        None => Ok(true),
        Some(value) => crate::request::truthy(value).ok_or_else(|| request.wrong_type("ordered", "bool", value)),
    }
}
