//! Collations. Myriad compares strings by their bytes only (MongoDB's "simple" collation), so
//! a command asking for any other collation is refused with BadValue rather than run with
//! different string ordering than asked. `{locale: "simple"}` is the default and accepted.
//!
//! Checked once per command before it runs: the top-level `collation` (find, aggregate,
//! count, distinct, findAndModify, create, explain's inner command), and each update or
//! delete statement's, each bulkWrite operation's and each index spec's `collation`.

use bson::{Bson, Document};

use myriad_reply::error::{CommandError, CommandResult, BAD_VALUE, MISSING_FIELD};
use crate::request::{field_type_error, CommandRequest};

/// Where a command carries per-element collations: (command, array field).
const NESTED_COLLATIONS: &[(&str, &str)] =
    &[("update", "updates"), ("delete", "deletes"), ("createIndexes", "indexes"), ("bulkWrite", "ops")];

/// Refuses a non-simple collation anywhere in `request`.
pub fn refuse_non_simple(request: &CommandRequest) -> CommandResult<()> {
    check_document(&request.name, &request.body)?;
    if let Some(Bson::Document(inner)) = request.body.get("explain") {
        let inner_name = inner.keys().next().map_or("explain", String::as_str);
        check_document(inner_name, inner)?;
        check_nested(inner_name, inner)?;
    }
    check_nested(&request.name, &request.body)
}

fn check_nested(command: &str, body: &Document) -> CommandResult<()> {
    for (name, field) in NESTED_COLLATIONS {
        if *name != command {
            continue;
        }
        if let Some(Bson::Array(items)) = body.get(*field) {
            for item in items {
                if let Bson::Document(item) = item {
                    check_document(&format!("{command}.{field}"), item)?;
                }
            }
        }
    }
    Ok(())
}

fn check_document(context: &str, document: &Document) -> CommandResult<()> {
    match document.get("collation") {
        None => Ok(()),
        Some(collation) => check(context, collation),
    }
}

/// Accepts `{locale: "simple"}` and nothing else.
pub fn check(context: &str, collation: &Bson) -> CommandResult<()> {
    let Bson::Document(collation) = collation else {
        return Err(field_type_error(&format!("{context}.collation"), "object", collation));
    };
    match collation.get("locale") {
        None => Err(CommandError::new(MISSING_FIELD, "BSON field 'locale' is missing but a required field")),
        Some(Bson::String(locale)) if locale == "simple" => {
            match collation.keys().find(|key| key.as_str() != "locale") {
                Some(other) => Err(CommandError::new(BAD_VALUE, format!("Field '{other}' is invalid with locale 'simple'"))),
                None => Ok(()),
            }
        }
        Some(Bson::String(locale)) => Err(CommandError::new(
            BAD_VALUE,
            format!("Myriad does not support collations yet: only {{locale: \"simple\"}} is accepted, not locale '{locale}'"),
        )),
        Some(other) => Err(field_type_error("collation.locale", "string", other)),
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn only_the_simple_collation_is_accepted() {
        assert_eq!(check("find", &Bson::Document(doc! { "locale": "simple" })), Ok(()));
        let refused = |collation: Bson| check("find", &collation).map_err(|error| error.code);
        assert_eq!(refused(Bson::Document(doc! { "locale": "fr" })), Err(2));
        assert_eq!(refused(Bson::Document(doc! { "locale": "en", "strength": 2 })), Err(2));
        assert_eq!(refused(Bson::Document(doc! { "locale": "simple", "strength": 2 })), Err(2));
        assert_eq!(refused(Bson::Document(doc! {})), Err(40414));
        assert_eq!(refused(Bson::Int32(1)), Err(14));
    }
}
