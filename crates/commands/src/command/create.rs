//! `create`: writes one catalog entry (no files, no RocksDB objects). Views, capped and
//! time-series collections are refused with MongoDB's codes rather than half-supported.

use bson::{doc, Document};

use crate::error::{CommandError, CommandResult};
use crate::{CommandRequest, ServerContext};

/// Fields of the command that are transport, not collection options.
const GENERIC_FIELDS: &[&str] = &["$db", "lsid", "$clusterTime", "writeConcern", "comment", "$readPreference", "txnNumber", "apiVersion", "apiStrict", "apiDeprecationErrors"];

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    let mut options = Document::new();
    for (key, value) in request.body.iter().skip(1) {
        if !GENERIC_FIELDS.contains(&key.as_str()) {
            options.insert(key.clone(), value.clone());
        }
    }
    for unsupported in ["viewOn", "timeseries", "capped", "clusteredIndex"] {
        let requested = options.get(unsupported).is_some_and(|value| crate::request::truthy(value).unwrap_or(true));
        if requested {
            return Err(CommandError::new(
                crate::error::INVALID_OPTIONS,
                format!("Myriad does not support the '{unsupported}' collection option yet"),
            ));
        }
    }
    context.backend.create_collection(&request.db, &name, options).map_err(|error| {
        let mut error = CommandError::from(error);
        if error.code == crate::error::NAMESPACE_EXISTS.code {
            error.message = format!("Collection {}.{name} already exists.", request.db);
        }
        error
    })?;
    Ok(doc! { "ok": 1.0 })
}
