//! The limits that keep hostile input from exhausting a thread's stack, with MongoDB's values
//! and error codes. Every check here is iterative and runs before anything recursive is built.
//!
//! - Field paths in projections, sorts, updates and aggregation: at most
//!   [`MAX_FIELD_PATH_COMPONENTS`] components (MongoDB's `FieldPath` constructor:
//!   `Overflow` (15), "FieldPath is too long", beyond `BSONDepth::getMaxAllowableDepth()`).
//! - Field paths in filters: at most [`MAX_MATCH_PATH_COMPONENTS`] components (MongoDB's
//!   `MatchExpressionParser`: code 5729100, "FieldPath is too long", beyond
//!   `BSONDepth::getMaxDepthForUserStorage()`).
//! - Stored documents: at most [`MAX_USER_STORAGE_DEPTH`] levels (`Overflow`, as MongoDB's
//!   insert and update paths report it).
//! - Reading stored documents: [`decode_stored`] refuses anything deeper than
//!   [`MAX_BSON_DEPTH`] with `DataCorruptionDetected` (301) instead of recursing into it.

use bson::{Document, RawDocument};

use crate::error::{QueryError, QueryResult};

pub use myriad_keystring::nesting::{document_depth_exceeds, MAX_BSON_DEPTH, MAX_USER_STORAGE_DEPTH};
use myriad_keystring::nesting::{check_document, decode_document, NestingError};

/// Most components in a projection, sort, update or aggregation field path.
pub const MAX_FIELD_PATH_COMPONENTS: usize = MAX_BSON_DEPTH;
/// Most components in a filter's field path.
pub const MAX_MATCH_PATH_COMPONENTS: usize = MAX_USER_STORAGE_DEPTH;

/// MongoDB's `Overflow` code.
pub const OVERFLOW: i32 = 15;
/// The code of MongoDB's match parser for a too-long path.
pub const MATCH_PATH_TOO_LONG: i32 = 5_729_100;
/// MongoDB's `DataCorruptionDetected` code.
pub const DATA_CORRUPTION_DETECTED: i32 = 301;

/// Counts a dotted path's components without splitting it (so without allocating per
/// component): the number of dots plus one.
pub fn path_component_count(path: &str) -> usize {
    path.bytes().filter(|&byte| byte == b'.').count() + 1
}

/// Rejects a projection, sort, update or aggregation path longer than
/// [`MAX_FIELD_PATH_COMPONENTS`] with `Overflow`.
pub fn check_field_path_length(path: &str) -> QueryResult<()> {
    if path_component_count(path) > MAX_FIELD_PATH_COMPONENTS {
        return Err(QueryError::Location(OVERFLOW, "FieldPath is too long".into()));
    }
    Ok(())
}

/// Rejects a filter path longer than [`MAX_MATCH_PATH_COMPONENTS`] with code 5729100.
pub fn check_match_path_length(path: &str) -> QueryResult<()> {
    if path_component_count(path) > MAX_MATCH_PATH_COMPONENTS {
        return Err(QueryError::Location(MATCH_PATH_TOO_LONG, "FieldPath is too long".into()));
    }
    Ok(())
}

/// Rejects a document that nests deeper than MongoDB stores, with `Overflow`.
pub fn check_storage_depth(document: &Document) -> QueryResult<()> {
    if document_depth_exceeds(document, MAX_USER_STORAGE_DEPTH) {
        return Err(QueryError::Location(
            OVERFLOW,
            format!("Document exceeds maximum nesting depth of {MAX_USER_STORAGE_DEPTH}"),
        ));
    }
    Ok(())
}

/// Decodes a stored record without recursion. A record nesting deeper than [`MAX_BSON_DEPTH`]
/// (only an older version could have written one: writes are limited to
/// [`MAX_USER_STORAGE_DEPTH`]) or one that is not well-formed BSON is reported as
/// `DataCorruptionDetected`: the record breaks an invariant the server keeps for everything it
/// stores, and the request that met it did nothing wrong, so a code blaming the request
/// (`Overflow`, `BadValue`) would mislead.
pub fn decode_stored(raw: &RawDocument) -> QueryResult<Document> {
    decode_document(raw, MAX_BSON_DEPTH).map_err(stored_error)
}

/// Checks a stored record as [`decode_stored`] would, without decoding it: for records sent
/// to a client as stored. Fails exactly when `decode_stored` fails, with the same error.
pub fn check_stored(raw: &RawDocument) -> QueryResult<()> {
    check_document(raw, MAX_BSON_DEPTH).map_err(stored_error)
}

fn stored_error(error: NestingError) -> QueryError {
    let detail = match error {
        NestingError::TooDeep { limit } => {
            format!("stored document exceeds the maximum BSON nesting depth of {limit}")
        }
        NestingError::Invalid(reason) => format!("stored document is not valid BSON: {reason}"),
    };
    QueryError::Location(DATA_CORRUPTION_DETECTED, detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, RawDocumentBuf};

    fn path(components: usize) -> String {
        vec!["a"; components].join(".")
    }

    #[test]
    fn path_limits_follow_mongodb() {
        assert_eq!(path_component_count("a"), 1);
        assert_eq!(path_component_count("a.b.c"), 3);
        assert!(check_field_path_length(&path(200)).is_ok());
        let error = check_field_path_length(&path(201)).expect_err("too long");
        assert_eq!((error.code(), error.code_name()), (15, "Overflow"));
        assert!(check_match_path_length(&path(180)).is_ok());
        let error = check_match_path_length(&path(181)).expect_err("too long");
        assert_eq!((error.code(), error.code_name()), (5_729_100, "Location5729100"));
    }

    fn nested(depth: usize) -> Document {
        let mut document = doc! {"a": 1};
        for _ in 1..depth {
            document = doc! {"a": document};
        }
        document
    }

    #[test]
    fn storage_depth_is_180_levels() {
        assert!(check_storage_depth(&nested(180)).is_ok());
        let error = check_storage_depth(&nested(181)).expect_err("too deep");
        assert_eq!((error.code(), error.code_name()), (15, "Overflow"));
    }

    #[test]
    fn decode_stored_reads_up_to_200_levels_and_reports_deeper_records_as_corrupt() {
        let at_limit = nested(200);
        let raw = RawDocumentBuf::from_document(&at_limit).expect("serialises");
        assert_eq!(decode_stored(&raw), Ok(at_limit));
        let raw = RawDocumentBuf::from_document(&nested(201)).expect("serialises");
        let error = decode_stored(&raw).expect_err("too deep");
        assert_eq!((error.code(), error.code_name()), (301, "DataCorruptionDetected"));
    }
}
