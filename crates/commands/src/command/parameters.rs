//! `getParameter` and `setParameter` over a fixed set of known parameters.

use std::collections::BTreeMap;

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult, INVALID_OPTIONS};
use crate::{CommandRequest, ServerContext};

/// Names that are spelled two ways (the seed's name, then MongoDB's).
const ALIASES: &[(&str, &str)] = &[("routeRefreshCacheVerticalDepth", "routingTableCacheChunkBucketSize")];

/// Parameters a client may read, with their defaults. setParameter may change those whose
/// value is a number or a boolean; the others are read-only.
pub fn defaults() -> BTreeMap<String, Bson> {
    let mut parameters = BTreeMap::new();
    parameters.insert("featureCompatibilityVersion".to_string(), Bson::Document(doc! { "version": "7.0" }));
    parameters.insert("authenticationMechanisms".to_string(), Bson::Array(vec![Bson::String("SCRAM-SHA-256".into())]));
    parameters.insert("logLevel".to_string(), Bson::Int32(0));
    parameters.insert("cursorTimeoutMillis".to_string(), Bson::Int64(600_000));
    parameters.insert("notablescan".to_string(), Bson::Boolean(false));
    parameters.insert("maxBSONDepth".to_string(), Bson::Int32(100));
    parameters.insert("routingTableCacheChunkBucketSize".to_string(), Bson::Int32(500));
    parameters.insert("internalQueryExecMaxBlockingSortBytes".to_string(), Bson::Int32(100 * 1024 * 1024));
    parameters
}

fn canonical_name(name: &str) -> &str {
    ALIASES.iter().find(|(alias, _)| *alias == name).map_or(name, |(_, canonical)| canonical)
}

const COMMAND_FIELDS: &[&str] = &["getParameter", "setParameter", "$db", "lsid", "$clusterTime", "comment", "$readPreference", "apiVersion"];

pub fn get(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let parameters = context.parameters.read();
    let mut reply = Document::new();
    let all = matches!(request.first_value(), Some(Bson::String(star)) if star == "*")
        || matches!(request.first_value(), Some(Bson::Document(options)) if options.get_bool("allParameters").unwrap_or(false));
    if all {
        for (name, value) in parameters.iter() {
            reply.insert(name.clone(), value.clone());
        }
    } else {
        for (name, _) in request.body.iter().filter(|(name, _)| !COMMAND_FIELDS.contains(&name.as_str())) {
            if let Some(value) = parameters.get(canonical_name(name)) {
                reply.insert(name.clone(), value.clone());
            }
        }
        if reply.is_empty() {
            return Err(CommandError::new(INVALID_OPTIONS, "no option found to get"));
        }
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

pub fn set(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let mut parameters = context.parameters.write();
    let mut reply = Document::new();
    let mut changed = 0;
    for (name, value) in request.body.iter().filter(|(name, _)| !COMMAND_FIELDS.contains(&name.as_str())) {
        let canonical = canonical_name(name).to_string();
        let Some(old) = parameters.get(&canonical) else {
            return Err(CommandError::new(
                INVALID_OPTIONS,
                format!("attempted to set unrecognized parameter [{name}], use help:true to see options "),
            ));
        };
        let compatible = matches!(
            (old, value),
            (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_), Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))
                | (Bson::Boolean(_), Bson::Boolean(_))
        );
        if !compatible {
            return Err(CommandError::bad_value(format!("Invalid value for parameter {name}: {value}")));
        }
        if canonical == "routingTableCacheChunkBucketSize" && crate::request::integer_value(value).map_or(true, |size| size < 2) {
            return Err(CommandError::bad_value(format!("{name} must be an integer of at least 2")));
        }
        reply.insert("was", old.clone());
        parameters.insert(canonical, value.clone());
        changed += 1;
    }
    if changed == 0 {
        return Err(CommandError::new(INVALID_OPTIONS, "no option found to set, use help:true to see options "));
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}
