//! `delete` on a time-series collection (any filter, `limit: 0`, as MongoDB 7.0 allows): the
//! buckets the filter's bounds leave in are read in batches; each is read again under the turn
//! of its meta value's writers (so no insert into it runs meanwhile), then deleted when all
//! its measurements match or rewritten without the matching ones, where its `control.count`
//! is still the one read (a backstop: no writer of this process can have changed it).

use bson::{doc, Bson, Document};
use myriad_execution::timeseries::{open_bucket_key, writer_turn};
use myriad_query::filter::Filter;
use myriad_query::timeseries::{bucket_filter, Bucket, BucketLayout};

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

pub fn delete(context: &ServerContext, request: &CommandRequest, name: &str, timeseries: &Timeseries) -> CommandResult<Document> {
    super::refuse_in_transaction(request, name)?;
    let statements = crate::write::statements(request, "deletes")?;
    let ordered = crate::write::ordered(request)?;
    let mut deleted = 0i64;
    let mut write_errors = WriteErrors::default();
    for (index, statement) in statements.into_iter().enumerate() {
        let result = crate::operation::check_interrupt().and_then(|()| delete_statement(context, request, name, &timeseries.layout, statement));
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

fn delete_statement(context: &ServerContext, request: &CommandRequest, name: &str, layout: &BucketLayout, statement: &Document) -> CommandResult<i64> {
    let Some(Bson::Document(filter_document)) = statement.get("q") else {
        return Err(CommandError::new(MISSING_FIELD, "BSON field 'delete.deletes.q' is missing but a required field"));
    };
    if statement.get("limit").and_then(crate::request::integer_value) != Some(0) {
        return Err(CommandError::new(INVALID_OPTIONS, "Cannot perform a non-multi delete on a time-series collection"));
    }
    let filter = Filter::parse(filter_document)?;
    let buckets = Timeseries::buckets_name(name);
    let Some(collection) = context.backend.collection(&request.db, &buckets)? else { return Ok(0) };
    let spec = QuerySpec::for_filter(bucket_filter(filter_document, layout))?;
    let mut execution = Execution::new(context.backend.as_ref(), collection.clone(), spec)?;
    let mut deleted = 0i64;
    loop {
        let batch = execution.next_batch(context.backend.as_ref(), BUCKET_BATCH)?;
        let finished = batch.len() < BUCKET_BATCH;
        for raw in batch {
            crate::operation::check_interrupt()?;
            let bucket = Bucket::from_document(layout, crate::execution::to_document(&raw)?)?;
            deleted += delete_from_bucket(context, request, &buckets, &collection, layout, &filter, bucket)?;
        }
        if finished || execution.is_exhausted() {
            return Ok(deleted);
        }
    }
}

/// Removes the matching measurements of one bucket; how many it removed.
fn delete_from_bucket(
    context: &ServerContext,
    request: &CommandRequest,
    buckets: &str,
    collection: &myriad_storage::CollectionHandle,
    layout: &BucketLayout,
    filter: &Filter,
    bucket: Bucket,
) -> CommandResult<i64> {
    // Under the turn of the bucket's writers, read again: an insert may have grown it since
    // the batch was read, and its open bucket (if kept) is forgotten, since this rewrites it.
    let key = open_bucket_key(collection.prefix(), bucket.meta());
    let _turn = writer_turn(&key);
    context.open_buckets.forget(&key);
    let Some((_, raw)) = context.backend.find_by_id(collection, &Bson::ObjectId(bucket.id()))? else { return Ok(0) };
    let mut bucket = Bucket::from_document(layout, crate::execution::to_document(&raw)?)?;
    for _ in 0..MAX_BUCKET_ATTEMPTS {
        let mut kept = Vec::with_capacity(bucket.count());
        for index in 0..bucket.count() {
            let measurement = bucket.measurement(layout, index);
            if !filter.try_matches(&measurement)? {
                kept.push(index);
            }
        }
        let removed = bucket.count() - kept.len();
        if removed == 0 {
            return Ok(0);
        }
        let count = i32::try_from(bucket.count()).expect("a bucket holds at most 1000 measurements");
        let selector = doc! { "_id": bucket.id(), "control.count": count };
        let reply = if kept.is_empty() {
            let statement = doc! { "q": selector, "limit": 1 };
            super::super::delete::run(context, &internal_request(request, doc! { "delete": buckets, "deletes": [statement] }))?
        } else {
            let statement = doc! { "q": selector, "u": bucket.retaining(layout, &kept).to_document(layout) };
            super::super::update::run(context, &internal_request(request, doc! { "update": buckets, "updates": [statement] }))?
        };
        if let Some(error) = first_write_error(&reply) {
            return Err(error);
        }
        if reply.get("n").and_then(crate::request::integer_value) == Some(1) {
            return Ok(removed as i64);
        }
        let Some((_, raw)) = context.backend.find_by_id(collection, &Bson::ObjectId(bucket.id()))? else { return Ok(0) };
        bucket = Bucket::from_document(layout, crate::execution::to_document(&raw)?)?;
    }
    Err(CommandError::new(WRITE_CONFLICT, format!("Could not rewrite a bucket of {}.{buckets} after {MAX_BUCKET_ATTEMPTS} attempts", request.db)))
}
