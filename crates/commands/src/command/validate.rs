//! `validate`: every record must be valid BSON, the stats family's count must equal the
//! records, and every index entry must name a live record (a non-sparse index holds at least
//! one entry per record). Everything is read from one storage snapshot, so writes running
//! meanwhile never make healthy data look corrupt.

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult, NAMESPACE_NOT_FOUND};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    let namespace = format!("{}.{}", request.db, name);
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Err(CommandError::new(NAMESPACE_NOT_FOUND, format!("Collection '{namespace}' does not exist to validate.")));
    };
    let report = context.backend.validate_collection(&collection)?;
    let mut errors: Vec<Bson> = Vec::new();
    if report.invalid_records > 0 {
        errors.push(Bson::String(format!("{} records are not valid BSON", report.invalid_records)));
    }
    if report.counted_records != report.records {
        errors.push(Bson::String(format!(
            "the stored count {} does not match the {} records found",
            report.counted_records, report.records
        )));
    }
    let mut keys_per_index = Document::new();
    let mut index_details = Document::new();
    for index in &report.indexes {
        let mut valid = true;
        if index.dangling > 0 {
            valid = false;
            errors.push(Bson::String(format!("index {} has {} entries for missing records", index.name, index.dangling)));
        }
        if !index.sparse && !index.partial && index.keys < report.records {
            valid = false;
            errors.push(Bson::String(format!("index {} has {} entries for {} records", index.name, index.keys, report.records)));
        }
        keys_per_index.insert(index.name.clone(), int32(index.keys));
        index_details.insert(index.name.clone(), doc! { "valid": valid });
    }
    Ok(doc! {
        "ns": namespace,
        "nInvalidDocuments": int32(report.invalid_records),
        "nNonCompliantDocuments": 0,
        "nrecords": int32(report.records),
        "nIndexes": report.indexes.len() as i32,
        "keysPerIndex": keys_per_index,
        "indexDetails": index_details,
        "valid": errors.is_empty(),
        "repaired": false,
        "warnings": [],
        "errors": errors,
        "extraIndexEntries": [],
        "missingIndexEntries": [],
        "corruptRecords": [],
        "ok": 1.0,
    })
}

/// validate's counters are int32 in MongoDB's reply (saturating past its range).
fn int32<T: TryInto<i32>>(count: T) -> i32 {
    count.try_into().unwrap_or(i32::MAX)
}
