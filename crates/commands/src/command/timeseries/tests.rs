use bson::{doc, Bson};

use super::*;

fn parsed(timeseries: bson::Document) -> CommandResult<Timeseries> {
    parse_create_options(&Bson::Document(timeseries), None)
}

fn code(result: CommandResult<Timeseries>) -> i32 {
    result.err().map_or(0, |error| error.code)
}

#[test]
fn create_options_default_as_mongod_stores_them() {
    let timeseries = parsed(doc! { "timeField": "t", "metaField": "m" }).unwrap();
    assert_eq!(timeseries.options, doc! { "timeField": "t", "metaField": "m", "granularity": "seconds", "bucketMaxSpanSeconds": 3600 });
    assert_eq!((timeseries.layout.max_span_seconds, timeseries.layout.rounding_seconds), (3600, 60));
    let hours = parsed(doc! { "timeField": "t", "granularity": "hours" }).unwrap();
    assert_eq!((hours.layout.max_span_seconds, hours.layout.rounding_seconds), (2_592_000, 86_400));
    let custom = parsed(doc! { "timeField": "t", "bucketMaxSpanSeconds": 120, "bucketRoundingSeconds": 120 }).unwrap();
    assert_eq!(custom.options, doc! { "timeField": "t", "bucketRoundingSeconds": 120, "bucketMaxSpanSeconds": 120 });
}

#[test]
fn stored_options_read_back_as_given() {
    for given in [doc! { "timeField": "t", "metaField": "m", "granularity": "minutes" }, doc! { "timeField": "t", "bucketMaxSpanSeconds": 60, "bucketRoundingSeconds": 60 }] {
        let timeseries = parse_create_options(&Bson::Document(given), Some(&Bson::Int32(30))).unwrap();
        assert_eq!(from_stored_options(&stored_options(&timeseries)).unwrap(), timeseries);
    }
}

#[test]
fn invalid_create_options_get_mongods_codes() {
    assert_eq!(code(parsed(doc! {})), 40414);
    assert_eq!(code(parsed(doc! { "timeField": "t", "other": 1 })), 40415);
    assert_eq!(code(parsed(doc! { "timeField": "t", "granularity": "days" })), 2);
    assert_eq!(code(parsed(doc! { "timeField": "t", "metaField": "t" })), 72);
    assert_eq!(code(parsed(doc! { "timeField": "t", "metaField": "_id" })), 72);
    assert_eq!(code(parsed(doc! { "timeField": "t", "bucketMaxSpanSeconds": 10 })), 72);
    assert_eq!(code(parsed(doc! { "timeField": "t", "bucketMaxSpanSeconds": 10, "bucketRoundingSeconds": 20 })), 72);
    assert_eq!(code(parsed(doc! { "timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 10 })), 72);
    assert_eq!(code(parsed(doc! { "timeField": 5 })), 14);
    assert_eq!(code(parsed(doc! { "timeField": "$t" })), 2);
}
