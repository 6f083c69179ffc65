//! `$_internalUnpackBucket: {timeField, metaField?, bucketMaxSpanSeconds}`: each bucket of a
//! time-series collection's `system.buckets.<name>` becomes its measurements, one at a time
//! (as `$unwind` streams an array), which is how the collection reads as MongoDB exposes it.

use bson::{Bson, Document};

use crate::error::{QueryError, QueryResult};
use crate::timeseries::{Bucket, BucketLayout};

#[derive(Clone, Debug)]
pub(crate) struct UnpackBucket {
    layout: BucketLayout,
}

/// A bucket being unpacked: the decoded bucket and the next measurement's index.
pub(crate) struct Unpacking {
    bucket: Bucket,
    next: usize,
}

impl UnpackBucket {
    pub(crate) fn parse(specification: &Bson) -> QueryResult<UnpackBucket> {
        let Bson::Document(specification) = specification else {
            return Err(QueryError::Location(5346500, "$_internalUnpackBucket specification must be an object".into()));
        };
        let mut time_field = None;
        let mut meta_field = None;
        let mut max_span_seconds = None;
        for (key, value) in specification {
            match (key.as_str(), value) {
                ("timeField", Bson::String(name)) => time_field = Some(name.clone()),
                ("metaField", Bson::String(name)) => meta_field = Some(name.clone()),
                ("bucketMaxSpanSeconds", value) => {
                    max_span_seconds = crate::expression::integral_value(value).filter(|seconds| *seconds > 0);
                    if max_span_seconds.is_none() {
                        return Err(QueryError::Location(5510600, "bucketMaxSpanSeconds field must be a positive integer".into()));
                    }
                }
                ("assumeNoMixedSchemaData" | "usesExtendedRange" | "fixedBuckets", Bson::Boolean(_)) => {}
                (other, _) => {
                    return Err(QueryError::Location(5346506, format!("unrecognized option to $_internalUnpackBucket: {other}")));
                }
            }
        }
        let time_field = time_field.ok_or_else(|| QueryError::Location(5346508, "The $_internalUnpackBucket stage requires a timeField parameter".into()))?;
        let max_span_seconds =
            max_span_seconds.ok_or_else(|| QueryError::Location(5510601, "The $_internalUnpackBucket stage requires a bucketMaxSpanSeconds parameter".into()))?;
        Ok(UnpackBucket { layout: BucketLayout { time_field, meta_field, max_span_seconds, rounding_seconds: max_span_seconds } })
    }

    pub(crate) fn start(&self, bucket: Document) -> QueryResult<Unpacking> {
        Ok(Unpacking { bucket: Bucket::from_document(&self.layout, bucket)?, next: 0 })
    }

    pub(crate) fn next_document(&self, unpacking: &mut Unpacking) -> Option<Document> {
        if unpacking.next >= unpacking.bucket.count() {
            return None;
        }
        let measurement = unpacking.bucket.take_measurement(&self.layout, unpacking.next);
        unpacking.next += 1;
        Some(measurement)
    }
}
