//! The databases a standalone mongod always has: `admin` (`system.version` with the
//! featureCompatibilityVersion document), `config` (`system.sessions`, with its TTL index
//! `lsidTTLIndex`) and `local` (`startup_log`, a capped collection with one document per
//! start). Created when missing at start-up, so listDatabases shows them on a fresh node.

use bson::{doc, Bson, Document};
use myriad_reply::error::{CommandError, CommandResult, NAMESPACE_EXISTS};
use myriad_storage::{CollectionHandle, Durability};

use crate::backend::Backend;

/// The featureCompatibilityVersion a fresh node records (getParameter reports the same).
pub const FEATURE_COMPATIBILITY_VERSION: &str = "8.0";
/// mongod's `local.startup_log` size.
const STARTUP_LOG_BYTES: i64 = 10 * 1024 * 1024;
/// mongod's `localLogicalSessionTimeoutMinutes` (30), as lsidTTLIndex's expiry.
const SESSION_EXPIRY_SECONDS: i32 = 30 * 60;

/// What one start records in `local.startup_log`.
pub struct StartupRecord<'a> {
    pub argv: &'a [String],
    pub parsed_options: Document,
}

/// Creates what is missing of the three databases and appends this start to the startup log.
pub fn create_at_startup(backend: &dyn Backend, start: &StartupRecord<'_>) -> CommandResult<()> {
    let version = existing_or_created(backend, "admin", "system.version", Document::new())?;
    let feature_compatibility = Bson::String("featureCompatibilityVersion".to_string());
    if backend.find_by_id(&version, &feature_compatibility)?.is_none() {
        insert(backend, &version, doc! { "_id": feature_compatibility, "version": FEATURE_COMPATIBILITY_VERSION })?;
    }
    if backend.collection("config", "system.sessions")?.is_none() {
        existing_or_created(backend, "config", "system.sessions", Document::new())?;
        let index = doc! { "key": { "lastUse": 1 }, "name": "lsidTTLIndex", "expireAfterSeconds": SESSION_EXPIRY_SECONDS };
        backend.create_indexes("config", "system.sessions", vec![index])?;
    }
    let log = existing_or_created(backend, "local", "startup_log", doc! { "capped": true, "size": STARTUP_LOG_BYTES })?;
    let now = bson::DateTime::now();
    let hostname = crate::aggregate_server_state::hostname();
    let record = doc! {
        "_id": format!("{hostname}-{}", now.timestamp_millis()),
        "hostname": &hostname,
        "startTime": now,
        "startTimeLocal": now.try_to_rfc3339_string().unwrap_or_default(),
        "cmdLine": start.parsed_options.clone(),
        "pid": Bson::Int64(i64::from(std::process::id())),
        "argv": start.argv.iter().map(|argument| Bson::String(argument.clone())).collect::<Vec<_>>(),
    };
    insert(backend, &log, record)
}

fn existing_or_created(backend: &dyn Backend, db: &str, name: &str, options: Document) -> CommandResult<CollectionHandle> {
    if let Some(collection) = backend.collection(db, name)? {
        return Ok(collection);
    }
    match backend.create_collection(db, name, options) {
        Ok(collection) => Ok(collection),
        Err(error) => {
            let error = CommandError::from(error);
            if error.code != NAMESPACE_EXISTS.code {
                return Err(error);
            }
            backend.collection(db, name)?.ok_or(error)
        }
    }
}

fn insert(backend: &dyn Backend, collection: &CollectionHandle, document: Document) -> CommandResult<()> {
    let mut transaction = backend.begin_write(collection);
    transaction.insert(&document)?;
    transaction.commit(Durability::Journaled)?;
    Ok(())
}
