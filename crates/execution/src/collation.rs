//! Collations in commands. Every collation a command carries is read and checked once, before
//! it runs, by `myriad_collation::parse` (the one reader, shared by the node and the router):
//! the top-level `collation` (find, aggregate, count, distinct, findAndModify, create,
//! explain's inner command), each update or delete statement's, each bulkWrite operation's
//! and each index spec's. A refused one answers mongod's code and message.
//!
//! A query's collation is the one it gives, or else its collection's default (stored in the
//! collection's options by `create`); `{locale: "simple"}` given explicitly overrides a
//! non-simple default.

use std::sync::Arc;

use bson::{Bson, Document};
use myriad_collation::Collator;
use myriad_storage::CollectionHandle;

use myriad_reply::error::{CommandError, CommandResult, ErrorCode};
use crate::request::{field_type_error, CommandRequest};

/// Where a command carries per-element collations: (command, array field).
const NESTED_COLLATIONS: &[(&str, &str)] =
    &[("update", "updates"), ("delete", "deletes"), ("createIndexes", "indexes"), ("bulkWrite", "ops")];

/// A refused collation document as a command error.
pub fn collation_error(error: myriad_collation::CollationError) -> CommandError {
    CommandError::new(ErrorCode::new(error.code), error.message)
}

/// A command's or statement's `collation` as given: None when absent (the collection's default
/// applies), Some(None) for the simple collation.
pub type GivenCollation = Option<Option<Arc<Collator>>>;

/// Checks every collation in `request`.
pub fn check_request(request: &CommandRequest) -> CommandResult<()> {
    check_command(&request.name, &request.body)
}

/// Checks every collation in the command `name` with `body` (the node's and the router's
/// check alike).
pub fn check_command(name: &str, body: &Document) -> CommandResult<()> {
    check_document(name, body)?;
    if let Some(Bson::Document(inner)) = body.get("explain") {
        let inner_name = inner.keys().next().map_or("explain", String::as_str);
        check_document(inner_name, inner)?;
        check_nested(inner_name, inner)?;
    }
    check_nested(name, body)
}

/// The command's own `collation` when it gives one (None: absent or simple). A router merges
/// its shards' results by it.
pub fn given_collator(name: &str, body: &Document) -> CommandResult<Option<Arc<Collator>>> {
    Ok(parse_field(name, body)?.flatten())
}

fn check_nested(command: &str, body: &Document) -> CommandResult<()> {
    for (name, field) in NESTED_COLLATIONS {
        if *name != command {
            continue;
        }
        if let Some(Bson::Array(items)) = body.get(*field) {
            for item in items {
                let Bson::Document(item) = item else { continue };
                check_document(&format!("{command}.{field}"), item).map_err(|mut error| {
                    // mongod names the index spec a collation document was refused in.
                    if *name == "createIndexes" && matches!(item.get("collation"), Some(Bson::Document(_))) {
                        error.message = format!(
                            "failed to add collation information to index spec for index creation: {} :: caused by :: {}",
                            myriad_collation::shell_string(item),
                            error.message
                        );
                    }
                    error
                })?;
            }
        }
    }
    Ok(())
}

fn check_document(context: &str, document: &Document) -> CommandResult<()> {
    parse_field(context, document).map(|_| ())
}

/// The `collation` field of `document`: None when absent, Some(None) for the simple
/// collation, Some(collator) otherwise.
pub fn parse_field(context: &str, document: &Document) -> CommandResult<Option<Option<Arc<Collator>>>> {
    match document.get("collation") {
        None => Ok(None),
        Some(collation) => parse_value(context, collation).map(Some),
    }
}

/// A collation value (it must be a document).
pub fn parse_value(context: &str, collation: &Bson) -> CommandResult<Option<Arc<Collator>>> {
    let Bson::Document(collation) = collation else {
        return Err(field_type_error(&format!("{context}.collation"), "object", collation));
    };
    myriad_collation::parse(collation).map_err(collation_error)
}

/// A collection's default collation (from its options), read once per catalog version. A
/// stored collation that no longer reads (it cannot happen: it was checked before it was
/// stored) counts as none rather than making the collection unreadable.
pub fn collection_default(collection: &CollectionHandle) -> Option<Arc<Collator>> {
    let derived = collection.options_derived(|options| {
        let options = options.ok()?;
        match options.get("collation") {
            Some(Bson::Document(collation)) => myriad_collation::parse(collation).ok().flatten(),
            _ => None,
        }
    })?;
    (*derived).clone()
}

/// A command's collation: the one it gives (`given`, from [`parse_field`]), else its
/// collection's default.
pub fn effective(given: Option<Option<Arc<Collator>>>, collection: Option<&CollectionHandle>) -> Option<Arc<Collator>> {
    match given {
        Some(given) => given,
        None => collection.and_then(collection_default),
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn collations_are_read_with_mongod_codes() {
        assert_eq!(parse_value("find", &Bson::Document(doc! { "locale": "simple" })).map(|collator| collator.is_none()), Ok(true));
        let refused = |collation: Bson| parse_value("find", &collation).map(|_| ()).map_err(|error| error.code);
        assert_eq!(refused(Bson::Document(doc! { "locale": "fr" })), Ok(()));
        assert_eq!(refused(Bson::Document(doc! { "locale": "simple", "strength": 2 })), Err(9));
        assert_eq!(refused(Bson::Document(doc! {})), Err(4));
        assert_eq!(refused(Bson::Int32(1)), Err(14));
    }
}
