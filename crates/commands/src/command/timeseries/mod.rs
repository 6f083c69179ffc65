//! Time-series collections, as MongoDB exposes them: `create` with `timeseries` makes the
//! collection `<name>` (a catalog entry holding only the options, which reads as a view) and
//! `system.buckets.<name>` (an ordinary collection of the shared tablespace holding the
//! buckets, laid out as `myriad_query::timeseries` describes). The commands that take a
//! collection ask [`resolve`] first and, for a time-series collection, run here:
//! - `insert` packs measurements into buckets ([`insert`]);
//! - `find`, `aggregate`, `count` and `distinct` run as a pipeline over the buckets that starts
//!   with a `$match` on bucket bounds (time and meta, so the planner can use the buckets'
//!   indexes) and `$_internalUnpackBucket` ([`read`]);
//! - `delete` rewrites or removes the buckets whose measurements match ([`delete`]);
//! - `createIndexes`, `listIndexes`, `dropIndexes`, `collStats` and `drop` translate between
//!   the collection's fields and the buckets' ([`catalog`]).
//!
//! Every bucket write is an ordinary `insert`, `update` or `delete` of `system.buckets.<name>`
//! run through the same handlers, so it takes the commit pipeline (replication, the oplog,
//! change streams) like any other write. Concurrent writers never lose a measurement: a
//! bucket is rewritten only where its `control.count` is still the one read (compare and set),
//! and a writer that loses the race reads the bucket again.
//!
//! Not here yet: updates and findAndModify on a time-series collection (refused with
//! mongod's code for an unsupported operation), BSONColumn-compressed (version 2) buckets,
//! time-series collections through the router, and retryable inserts.

mod catalog;
mod delete;
mod insert;
mod read;

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_query::timeseries::BucketLayout;
use myriad_storage::CollectionHandle;

use crate::error::{CommandError, CommandResult, ErrorCode, BAD_VALUE, INVALID_OPTIONS, OPERATION_NOT_SUPPORTED_IN_TRANSACTION, UNKNOWN_FIELD};
use crate::{CommandRequest, ServerContext};

pub use catalog::{coll_stats, create, create_indexes, describe, drop, drop_indexes, list_indexes};
pub use delete::delete;
pub use insert::insert;
pub use read::{aggregate, count, distinct, find};

/// The prefix of a time-series collection's buckets collection.
pub const BUCKETS_PREFIX: &str = "system.buckets.";
/// mongod's CommandNotSupportedOnView, which it answers for writes a time-series view does
/// not take.
const COMMAND_NOT_SUPPORTED_ON_VIEW: ErrorCode = ErrorCode::new(166);
/// The longest `bucketMaxSpanSeconds` mongod accepts (one year).
const MAX_SPAN_LIMIT_SECONDS: i64 = 31_536_000;

/// A time-series collection's settings, from its catalog entry's options.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeseries {
    pub layout: BucketLayout,
    /// `timeseries` as listCollections shows it (defaults filled in).
    pub options: Document,
    pub expire_after_seconds: Option<i64>,
}

impl Timeseries {
    pub fn buckets_name(name: &str) -> String {
        format!("{BUCKETS_PREFIX}{name}")
    }

    /// `$_internalUnpackBucket`'s argument for this collection.
    fn unpack_stage(&self) -> Document {
        let mut specification = doc! { "timeField": &self.layout.time_field };
        if let Some(meta) = &self.layout.meta_field {
            specification.insert("metaField", meta);
        }
        specification.insert("bucketMaxSpanSeconds", self.layout.max_span_seconds);
        doc! { "$_internalUnpackBucket": specification }
    }
}

/// The collection's time-series settings, or None for any other collection (and for a
/// buckets collection itself, which commands reach as an ordinary collection). One catalog
/// lookup; the parsed settings are cached with the catalog entry.
pub fn resolve(context: &ServerContext, db: &str, name: &str) -> CommandResult<Option<Arc<Timeseries>>> {
    if name.starts_with(BUCKETS_PREFIX) {
        return Ok(None);
    }
    Ok(context.backend.collection(db, name)?.and_then(|collection| of_collection(&collection)))
}

/// A catalog entry's time-series settings (None for a buckets collection or any other).
pub fn of_collection(collection: &CollectionHandle) -> Option<Arc<Timeseries>> {
    if collection.name().starts_with(BUCKETS_PREFIX) {
        return None;
    }
    let derived = collection.options_derived(|options| options.ok().and_then(|options| from_stored_options(&options).ok()).map(Arc::new));
    derived.and_then(|timeseries| (*timeseries).clone())
}

/// Refuses a command a time-series collection does not take, as mongod refuses writes other
/// than inserts and deletes on its view.
pub fn refuse(context: &ServerContext, request: &CommandRequest, name: &str) -> CommandResult<()> {
    if resolve(context, &request.db, name)?.is_some() {
        return Err(CommandError::new(
            COMMAND_NOT_SUPPORTED_ON_VIEW,
            format!("Namespace {}.{name} is a time-series collection; {} is not supported on it", request.db, request.name),
        ));
    }
    Ok(())
}

/// Writes to a time-series collection are refused inside a transaction, as in MongoDB 7.0.
fn refuse_in_transaction(request: &CommandRequest, name: &str) -> CommandResult<()> {
    if request.body.contains_key("autocommit") {
        return Err(CommandError::new(
            OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
            format!("Cannot write to time-series collection {}.{name} in a multi-document transaction.", request.db),
        ));
    }
    Ok(())
}

/// A command of this server's own, run by the handlers on behalf of `request` (same
/// connection and database): bucket reads and writes.
fn internal_request(request: &CommandRequest, body: Document) -> CommandRequest {
    let name = body.keys().next().cloned().unwrap_or_default();
    let mut body = body;
    body.insert("$db", request.db.clone());
    for carried in ["writeConcern", "maxTimeMS", "comment", "let"] {
        if let Some(value) = request.body.get(carried) {
            if !body.contains_key(carried) {
                body.insert(carried, value.clone());
            }
        }
    }
    CommandRequest {
        db: request.db.clone(),
        name,
        body: Arc::new(body),
        raw_documents: None,
        connection: request.connection.clone(),
        duplicate_fields: Vec::new(),
    }
}

/// Parses `create`'s `timeseries` (and `expireAfterSeconds`) as mongod checks them, into the
/// settings and the options to store.
fn parse_create_options(timeseries: &Bson, expire_after_seconds: Option<&Bson>) -> CommandResult<Timeseries> {
    let Bson::Document(given) = timeseries else {
        return Err(crate::request::field_type_error("create.timeseries", "object", timeseries));
    };
    let mut time_field = None;
    let mut meta_field = None;
    let mut granularity = None;
    let mut max_span = None;
    let mut rounding = None;
    for (key, value) in given {
        let string = |value: &Bson| match value {
            Bson::String(text) => Ok(text.clone()),
            other => Err(crate::request::field_type_error(&format!("create.timeseries.{key}"), "string", other)),
        };
        let seconds = |value: &Bson| {
            crate::request::integer_value(value).ok_or_else(|| crate::request::field_type_error(&format!("create.timeseries.{key}"), "int", value))
        };
        match key.as_str() {
            "timeField" => time_field = Some(string(value)?),
            "metaField" => meta_field = Some(string(value)?),
            "granularity" => granularity = Some(string(value)?),
            "bucketMaxSpanSeconds" => max_span = Some(seconds(value)?),
            "bucketRoundingSeconds" => rounding = Some(seconds(value)?),
            other => return Err(CommandError::new(UNKNOWN_FIELD, format!("BSON field 'create.timeseries.{other}' is an unknown field."))),
        }
    }
    let time_field = time_field.ok_or_else(|| CommandError::new(crate::error::MISSING_FIELD, "BSON field 'create.timeseries.timeField' is missing but a required field"))?;
    check_field_name("timeField", &time_field)?;
    if let Some(meta) = &meta_field {
        check_field_name("metaField", meta)?;
        if *meta == time_field {
            return Err(CommandError::new(INVALID_OPTIONS, "The 'metaField' can not be the same as the 'timeField'"));
        }
        if meta == "_id" {
            return Err(CommandError::new(INVALID_OPTIONS, "The 'metaField' can not be '_id'"));
        }
    }
    let (granularity, max_span_seconds, rounding_seconds) = match (granularity, max_span, rounding) {
        (Some(_), _, Some(_)) => {
            return Err(CommandError::new(INVALID_OPTIONS, "Time-series 'bucketRoundingSeconds' is not allowed with 'granularity'"));
        }
        (None, None, None) => (Some("seconds".to_string()), 3_600, 60),
        (Some(granularity), span, None) => {
            let (default_span, rounding) = match granularity.as_str() {
                "seconds" => (3_600, 60),
                "minutes" => (86_400, 3_600),
                "hours" => (2_592_000, 86_400),
                other => {
                    return Err(CommandError::new(BAD_VALUE, format!("Enumeration value '{other}' for field 'create.timeseries.granularity' is not a valid value.")))
                }
            };
            if span.is_some_and(|span| span != default_span) {
                return Err(CommandError::new(
                    INVALID_OPTIONS,
                    format!("Timeseries 'bucketMaxSpanSeconds' is not configurable to a value other than the default of {default_span} for the provided granularity"),
                ));
            }
            (Some(granularity), default_span, rounding)
        }
        (None, Some(span), Some(rounding)) => {
            if span != rounding {
                return Err(CommandError::new(INVALID_OPTIONS, "Time-series 'bucketMaxSpanSeconds' and 'bucketRoundingSeconds' must be equal"));
            }
            if !(1..=MAX_SPAN_LIMIT_SECONDS).contains(&span) {
                return Err(CommandError::new(INVALID_OPTIONS, format!("Time-series 'bucketMaxSpanSeconds' must be between 1 and {MAX_SPAN_LIMIT_SECONDS}")));
            }
            (None, span, rounding)
        }
        (None, _, _) => {
            return Err(CommandError::new(INVALID_OPTIONS, "Time-series 'bucketMaxSpanSeconds' and 'bucketRoundingSeconds' must be specified together"))
        }
    };
    let mut options = doc! { "timeField": &time_field };
    if let Some(meta) = &meta_field {
        options.insert("metaField", meta);
    }
    match &granularity {
        Some(granularity) => options.insert("granularity", granularity),
        None => options.insert("bucketRoundingSeconds", i32::try_from(rounding_seconds).unwrap_or(i32::MAX)),
    };
    options.insert("bucketMaxSpanSeconds", i32::try_from(max_span_seconds).unwrap_or(i32::MAX));
    let expire_after_seconds = match expire_after_seconds {
        None => None,
        Some(value) => match crate::request::integer_value(value) {
            Some(seconds) if seconds >= 0 => Some(seconds),
            _ => return Err(CommandError::new(INVALID_OPTIONS, "TTL index 'expireAfterSeconds' option must be a non-negative integer")),
        },
    };
    Ok(Timeseries {
        layout: BucketLayout { time_field, meta_field, max_span_seconds, rounding_seconds },
        options,
        expire_after_seconds,
    })
}

fn check_field_name(which: &str, name: &str) -> CommandResult<()> {
    if name.is_empty() || name.starts_with('$') || name.contains('.') || name.contains('\0') {
        return Err(CommandError::new(BAD_VALUE, format!("The '{which}' '{name}' is not a valid field name: it must be non-empty, not start with '$' and not contain '.'")));
    }
    Ok(())
}

/// The settings a stored catalog entry holds (`{timeseries: {...}, expireAfterSeconds?}`).
fn from_stored_options(options: &Document) -> CommandResult<Timeseries> {
    let timeseries = options.get("timeseries").ok_or_else(|| CommandError::new(INVALID_OPTIONS, "not a time-series collection"))?;
    parse_create_options(timeseries, options.get("expireAfterSeconds"))
}

/// The catalog options of the collection `<name>` itself.
fn stored_options(timeseries: &Timeseries) -> Document {
    let mut options = doc! { "timeseries": timeseries.options.clone() };
    if let Some(seconds) = timeseries.expire_after_seconds {
        options.insert("expireAfterSeconds", seconds);
    }
    options
}

#[cfg(test)]
mod tests;
