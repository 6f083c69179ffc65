//! `validate`: reads every record (each must be valid BSON), checks the stats family's count
//! against the records, and checks that every index entry points at a live record.

use std::collections::HashSet;

use bson::{doc, Bson, Document};
use myriad_storage::IndexKeyRange;

use crate::error::{CommandError, CommandResult, NAMESPACE_NOT_FOUND};
use crate::{CommandRequest, ServerContext};

/// Records and index entries are read in batches of this many.
const VALIDATE_BATCH: usize = 1024;

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    let namespace = format!("{}.{}", request.db, name);
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Err(CommandError::new(NAMESPACE_NOT_FOUND, format!("Collection '{namespace}' does not exist to validate.")));
    };
    let backend = &context.backend;
    let mut errors: Vec<Bson> = Vec::new();
    let mut record_ids = HashSet::new();
    let mut invalid_documents = 0i64;
    let mut last = None;
    loop {
        let records = backend.scan_records(&collection, last, VALIDATE_BATCH)?;
        for (record_id, raw) in &records {
            record_ids.insert(*record_id);
            if myriad_query::decode_stored(raw).is_err() {
                invalid_documents += 1;
            }
            last = Some(*record_id);
        }
        if records.len() < VALIDATE_BATCH {
            break;
        }
    }
    if invalid_documents > 0 {
        errors.push(Bson::String(format!("{invalid_documents} records are not valid BSON")));
    }
    let stats = backend.collection_stats(&collection)?;
    if stats.count != record_ids.len() as i64 {
        errors.push(Bson::String(format!(
            "the stored count {} does not match the {} records found",
            stats.count,
            record_ids.len()
        )));
    }
    let everything = IndexKeyRange {
        lower: vec![myriad_keystring::FORMAT_VERSION],
        lower_inclusive: true,
        upper: vec![myriad_keystring::FORMAT_VERSION + 1],
        upper_inclusive: false,
    };
    let mut keys_per_index = Document::new();
    let mut index_details = Document::new();
    let indexes = collection.indexes()?;
    for index in indexes.iter() {
        let mut keys = 0i64;
        let mut dangling = 0i64;
        let mut start_after: Option<Vec<u8>> = None;
        loop {
            let entries = backend.scan_index(&collection, &index.name, &everything, start_after.as_deref(), VALIDATE_BATCH)?;
            for (_, record_id) in &entries {
                keys += 1;
                if !record_ids.contains(record_id) {
                    dangling += 1;
                }
            }
            match entries.last() {
                Some((key, _)) if entries.len() == VALIDATE_BATCH => start_after = Some(key.clone()),
                _ => break,
            }
        }
        let mut valid = true;
        if dangling > 0 {
            valid = false;
            errors.push(Bson::String(format!("index {} has {dangling} entries for missing records", index.name)));
        }
        if !index.sparse && keys < record_ids.len() as i64 {
            valid = false;
            errors.push(Bson::String(format!(
                "index {} has {keys} entries for {} records",
                index.name,
                record_ids.len()
            )));
        }
        keys_per_index.insert(index.name.clone(), keys);
        index_details.insert(index.name.clone(), doc! { "valid": valid });
    }
    let valid = errors.is_empty();
    Ok(doc! {
        "ns": namespace,
        "nInvalidDocuments": invalid_documents,
        "nNonCompliantDocuments": 0_i64,
        "nrecords": record_ids.len() as i64,
        "nIndexes": indexes.len() as i32,
        "keysPerIndex": keys_per_index,
        "indexDetails": index_details,
        "valid": valid,
        "repaired": false,
        "warnings": [],
        "errors": errors,
        "extraIndexEntries": [],
        "missingIndexEntries": [],
        "corruptRecords": [],
        "ok": 1.0,
    })
}
