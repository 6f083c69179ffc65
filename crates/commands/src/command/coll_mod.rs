//! `collMod`: changes a collection's `validator`, `validationLevel` and `validationAction`
//! (kept in its createCollection options, as listCollections shows them). The change is one
//! catalog batch under the collection's write lock, so writes committed after it are checked
//! against the new settings. collMod options MongoDB has that Myriad does not support yet
//! (index changes, TTL, views, capped bounds, time series, pre-images) answer InvalidOptions.

use bson::{doc, Document};

use crate::error::{CommandError, CommandResult, INVALID_OPTIONS, NAMESPACE_NOT_FOUND, UNKNOWN_FIELD};
use crate::{CommandRequest, ServerContext};

/// Fields of the command that are transport, not collection changes.
const GENERIC_FIELDS: &[&str] = &[
    "$db", "lsid", "$clusterTime", "writeConcern", "comment", "$readPreference", "txnNumber", "apiVersion", "apiStrict",
    "apiDeprecationErrors", "maxTimeMS",
];

const VALIDATION_FIELDS: &[&str] = &["validator", "validationLevel", "validationAction"];

/// collMod options MongoDB 7.0 accepts that Myriad refuses for now.
const UNSUPPORTED_FIELDS: &[&str] = &[
    "index", "expireAfterSeconds", "viewOn", "pipeline", "changeStreamPreAndPostImages", "recordPreImages", "timeseries",
    "cappedSize", "cappedMax", "dryRun", "clusteredIndex", "usePowerOf2Sizes", "noPadding", "isTimeseriesNamespace",
];

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    let mut changes = Document::new();
    for (key, value) in request.body.iter().skip(1) {
        if GENERIC_FIELDS.contains(&key.as_str()) {
            continue;
        }
        if VALIDATION_FIELDS.contains(&key.as_str()) {
            changes.insert(key.clone(), value.clone());
        } else if UNSUPPORTED_FIELDS.contains(&key.as_str()) {
            return Err(CommandError::new(INVALID_OPTIONS, format!("Myriad does not support the collMod option '{key}' yet")));
        } else {
            return Err(CommandError::new(UNKNOWN_FIELD, format!("BSON field 'collMod.{key}' is an unknown field.")));
        }
    }
    crate::validation::check_options("collMod", &request.db, &name, &changes)?;
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Err(CommandError::new(NAMESPACE_NOT_FOUND, "ns does not exist"));
    };
    if changes.is_empty() {
        return Ok(doc! { "ok": 1.0 });
    }
    let mut options = collection.options()?;
    for (key, value) in &changes {
        options.insert(key.clone(), value.clone());
    }
    let mut command = doc! { "collMod": name.as_str() };
    command.extend(changes);
    match context.backend.set_collection_options(&request.db, &name, options, command) {
        Ok(_) => Ok(doc! { "ok": 1.0 }),
        Err(myriad_storage::StorageError::NamespaceNotFound(_)) => Err(CommandError::new(NAMESPACE_NOT_FOUND, "ns does not exist")),
        Err(error) => Err(error.into()),
    }
}
