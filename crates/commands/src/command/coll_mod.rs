//! `collMod`: changes a collection's `validator`, `validationLevel` and `validationAction`
//! (kept in its createCollection options, as listCollections shows them), and one index's
//! `expireAfterSeconds` or `hidden` (`index: {name | keyPattern, expireAfterSeconds, hidden}`,
//! answered with `expireAfterSeconds_old/_new` and `hidden_old/_new` as MongoDB answers). Each
//! change is one catalog batch under the collection's write lock, so writes committed after it
//! are checked against the new settings. collMod options MongoDB has that Myriad does not
//! support yet (converting an index to unique, views, capped bounds, time series, pre-images,
//! a clustered collection's TTL) answer InvalidOptions.

use bson::{doc, Bson, Document};
use myriad_storage::{IndexOptionChanges, IndexSelector, StorageError};

use crate::error::{CommandError, CommandResult, BAD_VALUE, INVALID_OPTIONS, NAMESPACE_NOT_FOUND};
use crate::request::field_type_error;
use crate::request::unknown_fields::GENERIC_ARGUMENTS;
use crate::{CommandRequest, ServerContext};

/// Options collMod replaces in the collection's options, checked as create checks them.
const OPTION_FIELDS: &[&str] = &["validator", "validationLevel", "validationAction", "changeStreamPreAndPostImages"];

/// collMod options MongoDB 7.0 accepts that Myriad refuses for now.
const UNSUPPORTED_FIELDS: &[&str] = &[
    "expireAfterSeconds", "viewOn", "pipeline", "recordPreImages", "timeseries",
    "cappedSize", "cappedMax", "dryRun", "clusteredIndex", "usePowerOf2Sizes", "noPadding", "isTimeseriesNamespace",
];

/// Fields of `index` that convert an index to unique, which Myriad does not support yet.
const UNSUPPORTED_INDEX_FIELDS: &[&str] = &["unique", "prepareUnique", "forceNonUnique"];

/// One index change, parsed: which index, and what changes.
struct IndexChange {
    selector: IndexSelector,
    changes: IndexOptionChanges,
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    super::timeseries::refuse(context, request, &name)?;
    let mut changes = Document::new();
    let mut index_change = None;
    for (key, value) in request.body.iter().skip(1) {
        if GENERIC_ARGUMENTS.contains(&key.as_str()) {
            continue;
        }
        if OPTION_FIELDS.contains(&key.as_str()) {
            changes.insert(key.clone(), value.clone());
        } else if key == "index" {
            index_change = parse_index_change(value)?;
        } else if UNSUPPORTED_FIELDS.contains(&key.as_str()) {
            return Err(CommandError::new(INVALID_OPTIONS, format!("Myriad does not support the collMod option '{key}' yet")));
        } else {
            return Err(CommandError::unknown_field(&format!("collMod.{key}")));
        }
    }
    crate::validation::check_options("collMod", &request.db, &name, &changes)?;
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Err(CommandError::new(NAMESPACE_NOT_FOUND, "ns does not exist"));
    };
    let mut reply = Document::new();
    if let Some(change) = index_change {
        let command = doc! { "collMod": name.as_str(), "index": request.body.get("index").cloned().unwrap_or(Bson::Null) };
        let outcome = context
            .backend
            .set_index_options(&request.db, &name, &change.selector, &change.changes, command)
            .map_err(not_found_as_mongodb_says)?;
        if let Some(new) = outcome.expire_after_seconds_new {
            if let Some(old) = outcome.expire_after_seconds_old {
                reply.insert("expireAfterSeconds_old", old);
            }
            reply.insert("expireAfterSeconds_new", new);
        }
        if outcome.hidden_old != outcome.hidden_new {
            reply.insert("hidden_old", outcome.hidden_old);
            reply.insert("hidden_new", outcome.hidden_new);
        }
    }
    if !changes.is_empty() {
        let mut options = collection.options()?;
        for (key, value) in &changes {
            options.insert(key.clone(), value.clone());
        }
        let mut command = doc! { "collMod": name.as_str() };
        command.extend(changes);
        context.backend.set_collection_options(&request.db, &name, options, command).map_err(not_found_as_mongodb_says)?;
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

fn not_found_as_mongodb_says(error: StorageError) -> CommandError {
    match error {
        StorageError::NamespaceNotFound(_) => CommandError::new(NAMESPACE_NOT_FOUND, "ns does not exist"),
        other => other.into(),
    }
}

/// Parses `index: {name | keyPattern, expireAfterSeconds?, hidden?}`; None for `index: null`.
fn parse_index_change(value: &Bson) -> CommandResult<Option<IndexChange>> {
    let index = match value {
        Bson::Null => return Ok(None),
        Bson::Document(index) => index,
        other => return Err(field_type_error("collMod.index", "object", other)),
    };
    let mut name = None;
    let mut key_pattern = None;
    let mut changes = IndexOptionChanges::default();
    for (field, value) in index {
        match (field.as_str(), value) {
            (_, Bson::Null) => {}
            ("name", Bson::String(text)) => name = Some(text.clone()),
            ("name", other) => return Err(field_type_error("collMod.index.name", "string", other)),
            ("keyPattern", Bson::Document(pattern)) => key_pattern = Some(pattern.clone()),
            ("keyPattern", other) => return Err(field_type_error("collMod.index.keyPattern", "object", other)),
            ("expireAfterSeconds", seconds) => changes.expire_after_seconds = Some(expire_after_seconds(seconds)?),
            ("hidden", Bson::Boolean(hidden)) => changes.hidden = Some(*hidden),
            ("hidden", other) => return Err(field_type_error("collMod.index.hidden", "bool", other)),
            (field, _) if UNSUPPORTED_INDEX_FIELDS.contains(&field) => {
                return Err(CommandError::new(INVALID_OPTIONS, format!("Myriad does not support collMod of an index's '{field}' yet")));
            }
            (field, _) => {
                return Err(CommandError::unknown_field(&format!("collMod.index.{field}")));
            }
        }
    }
    let selector = match (name, key_pattern) {
        (Some(_), Some(_)) => return Err(CommandError::new(INVALID_OPTIONS, "Cannot specify both key pattern and name.")),
        (None, None) => return Err(CommandError::new(INVALID_OPTIONS, "Must specify either index name or key pattern.")),
        (Some(name), None) => IndexSelector::Name(name),
        (None, Some(pattern)) => IndexSelector::KeyPattern(pattern),
    };
    if changes == IndexOptionChanges::default() {
        return Err(CommandError::new(INVALID_OPTIONS, "no expireAfterSeconds or hidden field"));
    }
    let names_id = match &selector {
        IndexSelector::Name(name) => name == myriad_storage::ID_INDEX_NAME,
        IndexSelector::KeyPattern(pattern) => pattern.len() == 1 && pattern.get("_id").and_then(crate::request::integer_value) == Some(1),
        _ => false,
    };
    if names_id && changes.hidden.is_some() {
        return Err(CommandError::new(BAD_VALUE, "can't hide _id index"));
    }
    Ok(Some(IndexChange { selector, changes }))
}

/// collMod's `expireAfterSeconds` as MongoDB takes it: any number, a double truncated and a
/// decimal rounded half to even, NaN as 0, above 2^31 - 1 (infinity included) clamped to it;
/// below 0 refused with InvalidOptions, anything not a number with TypeMismatch.
fn expire_after_seconds(value: &Bson) -> CommandResult<i32> {
    let Some(seconds) = myriad_storage::expire_after_seconds_number(value) else {
        return Err(field_type_error("collMod.index.expireAfterSeconds", "[long, int, decimal, double]", value));
    };
    if seconds.is_nan() {
        return Ok(0);
    }
    if seconds < 0.0 {
        return Err(CommandError::new(INVALID_OPTIONS, "TTL index 'expireAfterSeconds' option cannot be less than 0"));
    }
    // Within 0..=i32::MAX after the clamp.
    Ok(seconds.min(f64::from(i32::MAX)) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expire_after_seconds_is_coerced_as_mongodb_does() {
        let decimal = |text: &str| Bson::Decimal128(text.parse().unwrap());
        assert_eq!(expire_after_seconds(&Bson::Double(50.7)).unwrap(), 50);
        assert_eq!(expire_after_seconds(&decimal("51.5")).unwrap(), 52);
        assert_eq!(expire_after_seconds(&Bson::Double(-0.9)).unwrap(), 0);
        assert_eq!(expire_after_seconds(&Bson::Double(f64::NAN)).unwrap(), 0);
        assert_eq!(expire_after_seconds(&Bson::Double(f64::INFINITY)).unwrap(), i32::MAX);
        assert_eq!(expire_after_seconds(&Bson::Int64(1 << 40)).unwrap(), i32::MAX);
        assert_eq!(expire_after_seconds(&Bson::Int32(-1)).unwrap_err().code, 72);
        assert_eq!(expire_after_seconds(&Bson::Double(f64::NEG_INFINITY)).unwrap_err().code, 72);
        assert_eq!(expire_after_seconds(&Bson::Boolean(true)).unwrap_err().code, 14);
        assert_eq!(expire_after_seconds(&Bson::String("1".into())).unwrap_err().code, 14);
    }

    #[test]
    fn index_changes_need_one_index_and_one_change() {
        let code = |index: Document| parse_index_change(&Bson::Document(index)).err().map(|error| error.code);
        assert_eq!(code(doc! {"name": "a_1"}), Some(72));
        assert_eq!(code(doc! {"hidden": true}), Some(72));
        assert_eq!(code(doc! {"name": "a_1", "keyPattern": {"a": 1}, "hidden": true}), Some(72));
        assert_eq!(code(doc! {"name": "_id_", "hidden": true}), Some(2));
        assert_eq!(code(doc! {"keyPattern": {"_id": 1}, "hidden": false}), Some(2));
        assert_eq!(code(doc! {"name": "a_1", "hidden": 1}), Some(14));
        assert_eq!(code(doc! {"name": "a_1", "unique": true}), Some(72));
        assert_eq!(code(doc! {"name": "a_1", "bogus": 1}), Some(40415));
        assert_eq!(code(doc! {"name": "a_1", "expireAfterSeconds": 5, "hidden": true}), None);
        assert!(parse_index_change(&Bson::Null).unwrap().is_none());
        assert_eq!(parse_index_change(&Bson::Int32(1)).err().map(|error| error.code), Some(14));
    }
}
