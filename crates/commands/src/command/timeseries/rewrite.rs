//! `delete` and `update` on a time-series collection: both rewrite the buckets holding the
//! measurements their filter matches, through one loop ([`rewrite_buckets`]). The buckets the
//! filter's bounds leave in are read in batches; each is read again under the turn of its meta
//! value's writers (so no insert into it runs meanwhile, and its open bucket is forgotten),
//! handed to the statement, and deleted or replaced as it answers, where its `control.count`
//! is still the one read (a backstop: no writer of this process can have changed it).
//!
//! - `delete` (any filter, `limit: 0`, as MongoDB 7.0): a bucket whose measurements all match
//!   goes; one where some match is rewritten without them.
//! - `update` (operator updates, `multi` or not, `upsert`): each matching measurement is
//!   updated in its bucket. An update may not change a measurement's time, nor the meta value
//!   of only some measurements of a bucket (a measurement would have to move to another bucket,
//!   which is not one atomic write here); changing the meta value of every measurement of a
//!   bucket rewrites the bucket's `meta`, as MongoDB's meta-only updates do. Pipeline and
//!   replacement updates are refused. An upsert that matches nothing inserts through the
//!   insert path.

use bson::{doc, Bson, Document};
use myriad_execution::timeseries::{open_bucket_key, writer_turn};
use myriad_query::filter::Filter;
use myriad_query::timeseries::{bucket_filter, normalize_meta, Bucket, BucketLayout};
use myriad_query::{Update, UpdateContext};

use super::insert::first_write_error;
use super::{internal_request, Timeseries};
use crate::bulk::{is_interruption, write_reply, WriteErrors};
use crate::error::{CommandError, CommandResult, INVALID_OPTIONS, MISSING_FIELD, WRITE_CONFLICT};
use crate::execution::Execution;
use crate::plan::QuerySpec;
use crate::{CommandRequest, ServerContext};

/// Buckets read per batch.
const BUCKET_BATCH: usize = 64;
/// Reads of one bucket after losing races for it.
const MAX_BUCKET_ATTEMPTS: usize = 16;

/// What a statement does to one bucket.
enum BucketChange {
    Keep,
    Delete,
    Replace(Bucket),
}

/// What a statement did to one bucket: its change, the measurements it matched, and those it
/// changed.
struct Rewrite {
    change: BucketChange,
    matched: i64,
    modified: i64,
}

pub fn delete(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries) -> CommandResult<Document> {
    super::refuse_in_transaction(request, name)?;
    let statements = crate::write::statements(request, "deletes")?;
    let ordered = crate::write::ordered(request)?;
    let layout = &timeseries.layout;
    let mut deleted = 0i64;
    let mut write_errors = WriteErrors::default();
    for (index, statement) in statements.into_iter().enumerate() {
        let result = crate::operation::check_interrupt().and_then(|()| {
            let filter_document = statement_filter(statement, "delete.deletes")?;
            if statement.get("limit").and_then(crate::request::integer_value) != Some(0) {
                return Err(CommandError::new(INVALID_OPTIONS, "Cannot perform a non-multi delete on a time-series collection"));
            }
            let filter = Filter::parse(filter_document)?;
            let (matched, _) = rewrite_buckets(context, request, name, layout, filter_document, false, &mut |bucket| {
                let mut kept = Vec::with_capacity(bucket.count());
                for index in 0..bucket.count() {
                    if !filter.try_matches(&bucket.measurement(layout, index))? {
                        kept.push(index);
                    }
                }
                let removed = (bucket.count() - kept.len()) as i64;
                let change = match kept.len() {
                    _ if removed == 0 => BucketChange::Keep,
                    0 => BucketChange::Delete,
                    _ => BucketChange::Replace(bucket.retaining(layout, &kept)),
                };
                Ok(Rewrite { change, matched: removed, modified: removed })
            })?;
            Ok(matched)
        });
        match result {
            Ok(count) => deleted += count,
            Err(error) if is_interruption(&error) => {
                return Err(crate::bulk::interrupted_with(error, crate::bulk::counts(&[("n", deleted)])));
            }
            Err(error) => {
                write_errors.push(index, error);
                if ordered {
                    break;
                }
            }
        }
    }
    Ok(write_reply(deleted, write_errors))
}

pub fn update(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries) -> CommandResult<Document> {
    super::refuse_in_transaction(request, name)?;
    let statements = crate::write::statements(request, "updates")?;
    let ordered = crate::write::ordered(request)?;
    let (mut matched, mut modified) = (0i64, 0i64);
    let mut upserted = Vec::new();
    let mut write_errors = WriteErrors::default();
    for (index, statement) in statements.into_iter().enumerate() {
        let result = crate::operation::check_interrupt().and_then(|()| update_statement(context, request, name, timeseries, statement));
        match result {
            Ok(StatementOutcome { matched: found, modified: changed, upserted_id }) => {
                matched += found;
                modified += changed;
                if let Some(id) = upserted_id {
                    upserted.push(doc! { "index": index as i32, "_id": id });
                }
            }
            Err(error) if is_interruption(&error) => {
                return Err(crate::bulk::interrupted_with(error, crate::bulk::counts(&[("n", matched), ("nModified", modified)])));
            }
            Err(error) => {
                write_errors.push(index, error);
                if ordered {
                    break;
                }
            }
        }
    }
    let mut reply = write_reply(matched + upserted.len() as i64, write_errors);
    reply.insert("nModified", modified as i32);
    if !upserted.is_empty() {
        reply.insert("upserted", upserted);
    }
    Ok(reply)
}

struct StatementOutcome {
    matched: i64,
    modified: i64,
    upserted_id: Option<Bson>,
}

fn update_statement(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries, statement: &Document) -> CommandResult<StatementOutcome> {
    let layout = &timeseries.layout;
    let filter_document = statement_filter(statement, "update.updates")?;
    let specification = match statement.get("u") {
        Some(Bson::Document(specification)) => specification,
        Some(Bson::Array(_)) => {
            return Err(CommandError::new(INVALID_OPTIONS, "Pipeline-style updates are not supported on a time-series collection yet"))
        }
        _ => return Err(CommandError::new(MISSING_FIELD, "BSON field 'update.updates.u' is missing but a required field")),
    };
    if !specification.keys().next().is_some_and(|key| key.starts_with('$')) {
        return Err(CommandError::new(INVALID_OPTIONS, "Replacement updates are not supported on a time-series collection"));
    }
    let array_filters: Vec<Document> = match statement.get("arrayFilters") {
        Some(Bson::Array(filters)) => filters.iter().filter_map(|filter| filter.as_document().cloned()).collect(),
        _ => Vec::new(),
    };
    let update = Update::parse(specification, &array_filters)?;
    let multi = statement.get("multi").and_then(|multi| multi.as_bool()).unwrap_or(false);
    let upsert = statement.get("upsert").and_then(|upsert| upsert.as_bool()).unwrap_or(false);
    let filter = Filter::parse(filter_document)?;
    let context_now = UpdateContext { is_upsert_insert: false, matched_array_position: None, now: bson::DateTime::now() };
    let (matched, modified) = rewrite_buckets(context, request, name, layout, filter_document, !multi, &mut |bucket| {
        updated_bucket(layout, bucket, &filter, &update, &context_now, multi)
    })?;
    if matched > 0 || !upsert {
        return Ok(StatementOutcome { matched, modified, upserted_id: None });
    }
    let seed = myriad_query::upsert_seed(filter_document)?;
    let insert_context = UpdateContext { is_upsert_insert: true, ..context_now };
    let document = super::insert::with_id(update.apply_to(&seed, &insert_context)?.unwrap_or(seed));
    let id = document.get("_id").cloned();
    let reply = super::insert(context, &internal_request(request, doc! { "insert": name, "documents": [document] }), name, timeseries)?;
    if let Some(error) = first_write_error(&reply) {
        return Err(error);
    }
    Ok(StatementOutcome { matched: 0, modified: 0, upserted_id: id })
}

/// One bucket with `update` applied to its measurements that match (the first only, unless
/// `multi`); see the module documentation for what may change.
fn updated_bucket(layout: &BucketLayout, bucket: &Bucket, filter: &Filter, update: &Update, context: &UpdateContext, multi: bool) -> CommandResult<Rewrite> {
    let mut measurements = Vec::with_capacity(bucket.count());
    let (mut matched, mut modified) = (0i64, 0i64);
    let mut new_meta: Option<Option<Bson>> = None;
    let mut meta_of_all_changed = true;
    for index in 0..bucket.count() {
        let measurement = bucket.measurement(layout, index);
        if (matched > 0 && !multi) || !filter.try_matches(&measurement)? {
            meta_of_all_changed = false;
            measurements.push(measurement);
            continue;
        }
        matched += 1;
        let Some(updated) = update.apply_to(&measurement, context)? else {
            meta_of_all_changed = false;
            measurements.push(measurement);
            continue;
        };
        modified += 1;
        if updated.get(&layout.time_field) != measurement.get(&layout.time_field) {
            return Err(CommandError::new(INVALID_OPTIONS, format!("Cannot change the time field '{}' of a measurement in a time-series collection", layout.time_field)));
        }
        let meta = layout.meta_field.as_ref().and_then(|field| updated.get(field)).map(normalize_meta);
        if meta.as_ref() != bucket.meta() {
            match &new_meta {
                Some(earlier) if *earlier != meta => meta_of_all_changed = false,
                _ => new_meta = Some(meta),
            }
        } else {
            meta_of_all_changed = false;
        }
        measurements.push(updated);
    }
    if modified == 0 {
        return Ok(Rewrite { change: BucketChange::Keep, matched, modified });
    }
    let meta = match new_meta {
        None => bucket.meta().cloned(),
        Some(meta) if meta_of_all_changed => meta,
        Some(_) => {
            let field = layout.meta_field.as_deref().unwrap_or_default();
            return Err(CommandError::new(
                INVALID_OPTIONS,
                format!("Cannot change the meta field '{field}' of only some of the measurements a time-series bucket holds"),
            ));
        }
    };
    Ok(Rewrite { change: BucketChange::Replace(bucket.rebuilt(layout, meta, &measurements)), matched, modified })
}

fn statement_filter<'s>(statement: &'s Document, path: &str) -> CommandResult<&'s Document> {
    match statement.get("q") {
        Some(Bson::Document(filter)) => Ok(filter),
        _ => Err(CommandError::new(MISSING_FIELD, format!("BSON field '{path}.q' is missing but a required field"))),
    }
}

/// Runs `change` on every bucket that may hold a measurement `filter_document` matches (until
/// the first that matches one, with `first_only`) and writes what it answers; the
/// measurements matched and modified, in all.
fn rewrite_buckets(
    context: &ServerContext,
    request: &CommandRequest,
    name: &str,
    layout: &BucketLayout,
    filter_document: &Document,
    first_only: bool,
    change: &mut dyn FnMut(&Bucket) -> CommandResult<Rewrite>,
) -> CommandResult<(i64, i64)> {
    let buckets = Timeseries::buckets_name(name);
    let Some(collection) = context.backend.collection(&request.db, &buckets)? else { return Ok((0, 0)) };
    let spec = QuerySpec::for_filter(bucket_filter(filter_document, layout))?;
    let mut execution = Execution::new(context.backend.as_ref(), collection.clone(), spec)?;
    let (mut matched, mut modified) = (0i64, 0i64);
    loop {
        let batch = execution.next_batch(context.backend.as_ref(), BUCKET_BATCH)?;
        let finished = batch.len() < BUCKET_BATCH;
        for raw in batch {
            crate::operation::check_interrupt()?;
            let bucket = Bucket::from_document(layout, crate::execution::to_document(&raw)?)?;
            let (found, changed) = rewrite_bucket(context, request, &buckets, &collection, layout, bucket, change)?;
            matched += found;
            modified += changed;
            if first_only && found > 0 {
                return Ok((matched, modified));
            }
        }
        if finished || execution.is_exhausted() {
            return Ok((matched, modified));
        }
    }
}

/// Rewrites one bucket as `change` answers, under its meta value's writer turn.
fn rewrite_bucket(
    context: &ServerContext,
    request: &CommandRequest,
    buckets: &str,
    collection: &myriad_storage::CollectionHandle,
    layout: &BucketLayout,
    bucket: Bucket,
    change: &mut dyn FnMut(&Bucket) -> CommandResult<Rewrite>,
) -> CommandResult<(i64, i64)> {
    let key = open_bucket_key(collection.prefix(), bucket.meta());
    let _turn = writer_turn(&key);
    context.open_buckets.forget(&key);
    let Some(mut bucket) = super::stored_bucket(context, collection, layout, bucket.id())? else { return Ok((0, 0)) };
    for _ in 0..MAX_BUCKET_ATTEMPTS {
        let Rewrite { change: bucket_change, matched, modified } = change(&bucket)?;
        let count = i32::try_from(bucket.count()).expect("a bucket holds at most 1000 measurements");
        let selector = doc! { "_id": bucket.id(), "control.count": count };
        let reply = match bucket_change {
            BucketChange::Keep => return Ok((matched, modified)),
            BucketChange::Delete => {
                let statement = doc! { "q": selector, "limit": 1 };
                super::super::delete::run(context, &internal_request(request, doc! { "delete": buckets, "deletes": [statement] }))?
            }
            BucketChange::Replace(rewritten) => {
                let statement = doc! { "q": selector, "u": rewritten.to_document(layout) };
                super::super::update::run(context, &internal_request(request, doc! { "update": buckets, "updates": [statement] }))?
            }
        };
        if let Some(error) = first_write_error(&reply) {
            return Err(error);
        }
        if reply.get("n").and_then(crate::request::integer_value) == Some(1) {
            return Ok((matched, modified));
        }
        let Some(stored) = super::stored_bucket(context, collection, layout, bucket.id())? else { return Ok((0, 0)) };
        bucket = stored;
    }
    Err(CommandError::new(WRITE_CONFLICT, format!("Could not rewrite a bucket of {}.{buckets} after {MAX_BUCKET_ATTEMPTS} attempts", request.db)))
}
