use bson::{doc, Bson, DateTime, Document};

use super::*;

fn layout(meta: Option<&str>) -> BucketLayout {
    BucketLayout { time_field: "t".into(), meta_field: meta.map(str::to_string), max_span_seconds: 3600, rounding_seconds: 60 }
}

fn at(milliseconds: i64) -> Bson {
    Bson::DateTime(DateTime::from_millis(milliseconds))
}

#[test]
fn a_bucket_reads_back_the_measurements_it_was_given() {
    let layout = layout(Some("m"));
    let measurements: Vec<Document> = vec![
        doc! { "t": at(61_500), "m": "a", "x": 1, "_id": 1 },
        doc! { "t": at(62_000), "m": "a", "y": "only here", "_id": 2 },
        doc! { "t": at(90_000), "m": "a", "x": 3.5, "_id": 3 },
    ];
    let mut bucket = Bucket::new(&layout, layout.bucket_start_ms(61_500), Some(Bson::String("a".into())));
    for measurement in &measurements {
        assert!(bucket.accepts(&layout, 61_500, 10));
        bucket.push(&layout, measurement);
    }
    let stored = bucket.to_document(&layout);
    assert_eq!(stored.get_document("control").unwrap().get_document("min").unwrap().get("t"), Some(&at(60_000)));
    assert_eq!(stored.get_document("control").unwrap().get_document("max").unwrap().get("t"), Some(&at(90_000)));
    assert_eq!(stored.get_document("data").unwrap().get_document("y").unwrap(), &doc! { "1": "only here" });
    let read = Bucket::from_document(&layout, stored).unwrap();
    assert_eq!(read.count(), 3);
    let mut taken = read.clone();
    for (index, measurement) in measurements.iter().enumerate() {
        assert_eq!(&read.measurement(&layout, index), measurement, "measurement {index}");
        assert_eq!(&taken.take_measurement(&layout, index), measurement, "measurement {index}");
    }
}

#[test]
fn a_bucket_refuses_what_falls_outside_its_span_or_count() {
    let layout = layout(None);
    let mut bucket = Bucket::new(&layout, 0, None);
    assert!(!bucket.accepts(&layout, 3_600_000, 10));
    assert!(!bucket.accepts(&layout, -1, 10));
    for index in 0..MAX_MEASUREMENTS_PER_BUCKET {
        bucket.push(&layout, &doc! { "t": at(i64::try_from(index).unwrap()) });
    }
    assert!(!bucket.accepts(&layout, 5, 10));
}

#[test]
fn malformed_stored_buckets_are_errors() {
    let layout = layout(None);
    let id = bson::oid::ObjectId::new();
    let cases = [
        doc! { "_id": id },
        doc! { "_id": id, "control": { "min": { "t": 1 } }, "data": { "t": { "0": at(0) } } },
        doc! { "_id": id, "control": { "min": { "t": at(0) } }, "data": { "t": { "1": at(0) } } },
        doc! { "_id": id, "control": { "min": { "t": at(0) } }, "data": { "t": { "0": 5 } } },
        doc! { "_id": id, "control": { "min": { "t": at(0) } }, "data": { "t": { "0": at(0) }, "x": { "3": 1 } } },
        doc! { "_id": id, "control": { "min": { "t": at(0) } }, "data": { "t": { "0": at(3_600_000) } } },
    ];
    for case in cases {
        assert!(Bucket::from_document(&layout, case.clone()).is_err(), "{case}");
    }
}

#[test]
fn filters_on_time_and_meta_become_bucket_bounds() {
    let layout = layout(Some("m"));
    let day_ms = 86_400_000;
    let filter = doc! { "t": { "$gte": at(day_ms), "$lt": at(2 * day_ms) }, "m.site": "x", "value": { "$gt": 3 } };
    let lowest = bson::oid::ObjectId::from_bytes([0, 1, 0x43, 0x70, 0, 0, 0, 0, 0, 0, 0, 0]);
    let highest = bson::oid::ObjectId::from_bytes([0, 2, 0xa3, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        bucket_filter(&filter, &layout),
        doc! { "$and": [
            { "control.max.t": { "$gte": at(day_ms) } },
            { "_id": { "$gte": lowest } },
            { "control.min.t": { "$lt": at(2 * day_ms) } },
            { "_id": { "$lte": highest } },
            { "meta.site": "x" },
        ] }
    );
    // Before 1970 plus one span, no bound on `_id` is safe (bucket ids clamp at 0).
    assert_eq!(bucket_filter(&doc! { "t": { "$gt": at(10) } }, &layout), doc! { "control.max.t": { "$gt": at(10) } });
    assert_eq!(bucket_filter(&doc! { "value": 1, "t": 5 }, &layout), Document::new());
    assert_eq!(bucket_filter(&doc! { "mx": 1 }, &layout), Document::new());
    assert_eq!(bucket_filter(&doc! { "m": { "$in": [1, 2] } }, &layout), doc! { "meta": { "$in": [1, 2] } });
}

#[test]
fn meta_values_are_normalised_at_every_depth() {
    let value = Bson::Document(doc! { "c": 1, "b": { "f": true, "d": 0 } });
    assert_eq!(normalize_meta(&value), Bson::Document(doc! { "b": { "d": 0, "f": true }, "c": 1 }));
}
