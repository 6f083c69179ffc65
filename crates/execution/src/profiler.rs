//! The database profiler and the slow-query log, as mongod's: when an operation finishes,
//! the dispatcher hands it to [`record_finished`], which decides from the `profile` settings
//! whether it is logged ("Slow query", id 51803) and whether it is written to
//! `<db>.system.profile`.
//!
//! MongoDB's rules, kept as they are:
//! - `slowms` (default 100) and `sampleRate` (default 1.0) are server-wide; the level (0, 1,
//!   2) and the `filter` are per database (the server default comes from `--profile`).
//! - An operation is logged when it took longer than slowms and was sampled, or, when its
//!   database has a filter, when the filter matches its profile document; at `logLevel` 1 or
//!   more every operation is logged.
//! - Level 2 profiles every operation; level 1 those sampled that took slowms or longer (or
//!   that match the filter, which replaces slowms). Operations on `system.profile` itself are
//!   never profiled.
//! - `system.profile` is a capped collection of 1 MiB, created when profiling is turned on
//!   and again on first use if it was dropped.
//!
//! Invariants:
//! - Nothing is built for an operation that is neither slow nor in a profiled database: the
//!   dispatcher's cost when profiling is off is one clock read and a few atomic loads.
//! - Everything kept is bounded: settings for at most [`MAX_DATABASE_SETTINGS`] databases,
//!   commands cut to 50 KB in profile documents and 10 KB in log lines, and `system.profile`
//!   is capped.
//! - A failure to write a profile document never fails the operation; it is logged.
//!
//! The settings themselves ([`Profiler`]) live with the operation table, in
//! `crate::operation::profiling`, and are re-exported here.

mod record;

use std::time::Duration;

use bson::{doc, Document};
use myriad_storage::{CollectionHandle, Durability};

use crate::backend::Backend;
use myriad_reply::error::{CommandError, CommandResult, NAMESPACE_EXISTS};
use crate::operation::OperationGuard;
use myriad_reply::reply::Reply;
use crate::request::CommandRequest;
use crate::ServerContext;

pub use crate::operation::profiling::{set_startup_settings, DatabaseSettings, ProfileFilter, Profiler, DEFAULT_SLOW_MS, MAX_DATABASE_SETTINGS};
pub use record::OperationRecord;

/// The profile collection of every database.
pub const PROFILE_COLLECTION: &str = "system.profile";
/// MongoDB's size for a profile collection it creates: 1 MiB.
pub const PROFILE_COLLECTION_BYTES: i32 = 1024 * 1024;
/// A finished operation, as the dispatcher hands it over.
pub struct FinishedOperation<'a> {
    pub context: &'a ServerContext,
    pub request: &'a CommandRequest,
    pub operation: &'a OperationGuard<'a>,
    pub elapsed: Duration,
    pub error: Option<&'a CommandError>,
    pub reply: &'a Reply,
}

/// Logs the operation as a slow query and writes its profile document, as the settings say.
pub fn record_finished(finished: &FinishedOperation<'_>) {
    let context = finished.context;
    let profiler = &context.operations.profiler;
    let metrics = finished.operation.metrics();
    let working = finished.elapsed.saturating_sub(metrics.paused);
    let millis = i64::try_from(working.as_millis()).unwrap_or(i64::MAX);
    let slow_ms = i64::from(profiler.slow_ms());
    let log_every_operation = crate::knobs::log_level() >= 1;
    let slow = millis > slow_ms;
    if !slow && !log_every_operation && !profiler.may_profile() {
        return;
    }
    let settings = profiler.database_settings(&finished.request.db);
    if !slow && !log_every_operation && settings.level == 0 && settings.filter.is_none() {
        return;
    }
    let sampled = profiler.sampled();
    let record = OperationRecord::new(finished, metrics, millis);
    let profile_document = settings.filter.as_ref().map(|_| record.profile_document());
    let filter_matches = match (&settings.filter, &profile_document) {
        (Some(filter), Some(document)) => Some(filter.matches(document)),
        _ => None,
    };
    let log = log_every_operation || filter_matches.unwrap_or(sampled && slow);
    let profile = !record.is_on_profile_collection()
        && match settings.level {
            2 => true,
            1 => sampled && filter_matches.unwrap_or(millis >= slow_ms),
            _ => false,
        };
    if log {
        let context_name = format!("conn{}", finished.request.connection.connection_id);
        context.logger.info("COMMAND", 51803, &context_name, "Slow query", record.log_attributes());
    }
    if profile {
        let document = profile_document.unwrap_or_else(|| record.profile_document());
        if let Err(error) = write_profile_document(context.backend.as_ref(), &finished.request.db, &document) {
            context.logger.log(
                crate::log::Severity::Warning,
                "COMMAND",
                20703,
                "profiler",
                "Failed to write a profile document",
                serde_json::json!({ "db": &finished.request.db, "error": error.to_string() }),
            );
        }
    }
}

/// `<db>.system.profile`, created (capped, 1 MiB) when missing.
pub fn profile_collection(backend: &dyn Backend, db: &str) -> CommandResult<CollectionHandle> {
    if let Some(collection) = backend.collection(db, PROFILE_COLLECTION)? {
        return Ok(collection);
    }
    match backend.create_collection(db, PROFILE_COLLECTION, doc! { "capped": true, "size": PROFILE_COLLECTION_BYTES }) {
        Ok(collection) => Ok(collection),
        Err(error) => {
            let error = CommandError::from(error);
            if error.code != NAMESPACE_EXISTS.code {
                return Err(error);
            }
            // Another operation created it first.
            backend.collection(db, PROFILE_COLLECTION)?.ok_or(error)
        }
    }
}

/// Appends one profile document. Stored documents need an `_id`, so it gets one.
fn write_profile_document(backend: &dyn Backend, db: &str, document: &Document) -> CommandResult<()> {
    let collection = profile_collection(backend, db)?;
    let prepared = crate::write::prepare_for_insert(document)?;
    let mut transaction = backend.begin_write(&collection);
    transaction.insert(&prepared)?;
    transaction.commit(Durability::Default)?;
    Ok(())
}
