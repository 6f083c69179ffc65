//! What the query fuzz targets run, shared with the corpus-replay test of myriad-query
//! (crates/query/tests/fuzz_corpus.rs includes this file). The bytes are one BSON document,
//! decoded as the server decodes stored records (iteratively, at most 200 levels deep); every
//! function must return normally for any input.

use bson::{doc, DateTime, Document, RawDocument};
use myriad_query::limits::decode_stored;
use myriad_query::{Filter, Pipeline, Projection, Update, UpdateContext};

/// Documents that parsed filters, projections and updates are applied to.
fn samples() -> Vec<Document> {
    vec![
        doc! {},
        doc! { "_id": 1, "a": 1, "b": "text", "c": [1, 2, { "d": 3 }], "e": { "f": [ { "g": 1 }, { "g": 2 } ] } },
        doc! { "_id": "x", "a": [[1, 2], [3]], "b": null, "c": 2.5, "e": { "f": { "g": [1, "2", true] } } },
    ]
}

fn document(data: &[u8]) -> Option<Document> {
    let raw = RawDocument::from_bytes(data).ok()?;
    decode_stored(raw).ok()
}

/// Filter parsing, then matching against the sample documents.
pub fn filter(data: &[u8]) {
    let Some(specification) = document(data) else { return };
    let Ok(filter) = Filter::parse(&specification) else { return };
    for sample in samples() {
        let _ = filter.matches_with_position(&sample);
    }
}

/// Update parsing (an `arrayFilters` array beside the update, when the document has one under
/// that name, and the update itself under `u` or as the whole document), then applying it.
pub fn update(data: &[u8]) {
    let Some(specification) = document(data) else { return };
    let array_filters: Vec<Document> = match specification.get_array("arrayFilters") {
        Ok(items) => items.iter().filter_map(|item| item.as_document().cloned()).collect(),
        Err(_) => Vec::new(),
    };
    let update_document = specification.get_document("u").cloned().unwrap_or(specification);
    let Ok(update) = Update::parse(&update_document, &array_filters) else { return };
    for (position, mut sample) in samples().into_iter().enumerate() {
        let context = UpdateContext { is_upsert_insert: position == 0, matched_array_position: Some(position), now: DateTime::from_millis(0) };
        let _ = update.apply(&mut sample, &context);
    }
}

/// Projection parsing, as find and as $project parse it, then projecting the samples.
pub fn projection(data: &[u8]) {
    let Some(specification) = document(data) else { return };
    for parsed in [Projection::parse(&specification), Projection::parse_aggregate(&specification)] {
        let Ok(projection) = parsed else { continue };
        for sample in samples() {
            let _ = projection.apply(&sample, Some(0));
            let _ = projection.apply(&sample, None);
        }
    }
}

/// Aggregation pipeline parsing: the document's embedded documents are the stages.
pub fn pipeline(data: &[u8]) {
    let Some(specification) = document(data) else { return };
    let stages: Vec<Document> = specification.values().filter_map(|value| value.as_document().cloned()).collect();
    let _ = Pipeline::parse(&stages);
}
