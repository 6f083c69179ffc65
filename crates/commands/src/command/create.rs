//! `create`: writes one catalog entry (no files, no RocksDB objects). Capped collections keep
//! their bounds in the options (`{capped: true, size, max?}`, normalised as MongoDB stores
//! them); views, time-series and clustered collections are refused with MongoDB's codes
//! rather than half-supported. Creating an existing collection with the same options
//! succeeds, as in MongoDB 7.0. `validator`, `validationLevel` and `validationAction` are
//! checked here and kept as given (see [`crate::validation`]).

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult, ErrorCode, INVALID_OPTIONS, LOCATION_51024, TYPE_MISMATCH};
use crate::request::unknown_fields::GENERIC_ARGUMENTS;
use crate::{CommandRequest, ServerContext};

/// The largest `size` MongoDB accepts (1 PB).
const MAX_CAPPED_SIZE_BYTES: i64 = 1 << 50;
/// `max` must stay below 2^31.
const MAX_CAPPED_DOCUMENTS_LIMIT: i64 = 1 << 31;
/// What MongoDB stores for a `max` of 0 or less: effectively no count bound.
const UNBOUNDED_CAPPED_DOCUMENTS: i32 = i32::MAX;

const NAMESPACE_EXISTS: ErrorCode = crate::error::NAMESPACE_EXISTS;

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    let options = collection_options(request)?;
    crate::validation::check_options("create", &request.db, &name, &options)?;
    myriad_execution::namespace_rules::check_client_create(&request.db, &name)?;
    if options.contains_key("timeseries") {
        return super::timeseries::create(context, request, &name, &options);
    }
    if options.contains_key("expireAfterSeconds") {
        return Err(CommandError::new(
            INVALID_OPTIONS,
            "'expireAfterSeconds' option is only supported on time-series collections or when 'clusteredIndex' is specified",
        ));
    }
    for unsupported in ["viewOn", "clusteredIndex"] {
        let requested = options.get(unsupported).is_some_and(|value| crate::request::truthy(value).unwrap_or(true));
        if requested {
            return Err(CommandError::new(
                INVALID_OPTIONS,
                format!("Myriad does not support the '{unsupported}' collection option yet"),
            ));
        }
    }
    // `storageEngine: {wiredTiger: {configString}}` is checked before anything else, as
    // MongoDB parses it with the other options; its block_compressor chooses the family the
    // collection's documents live in (storage's `compression.rs`).
    myriad_storage::requested_block_compressor(&options)?;
    match context.backend.create_collection(&request.db, &name, options.clone()) {
        Ok(_) => Ok(doc! { "ok": 1.0 }),
        Err(error) => {
            let mut error = CommandError::from(error);
            if error.code == NAMESPACE_EXISTS.code {
                let existing = context.backend.collection(&request.db, &name)?;
                if let Some(existing) = existing {
                    if existing.options()? == options {
                        return Ok(doc! { "ok": 1.0 });
                    }
                }
                error.message = format!("Collection {}.{name} already exists.", request.db);
            }
            Err(error)
        }
    }
}

/// The options as MongoDB stores them: `capped`, `size` and `max` first and normalised, then
/// every other option as given.
fn collection_options(request: &CommandRequest) -> CommandResult<Document> {
    let capped = match request.body.get("capped") {
        None | Some(Bson::Null) => false,
        Some(value) => safe_bool(value).ok_or_else(|| wrong_type("capped", value, "[bool, long, int, decimal, double]"))?,
    };
    let size = optional_safe_int64(request, "size")?;
    let max = optional_safe_int64(request, "max")?;
    if let Some(size) = size {
        if size < 1 {
            return Err(CommandError::new(LOCATION_51024, format!("BSON field 'size' value must be >= 1, actual value '{size}'")));
        }
        if size > MAX_CAPPED_SIZE_BYTES {
            return Err(CommandError::new(
                LOCATION_51024,
                format!("BSON field 'size' value must be <= {MAX_CAPPED_SIZE_BYTES}, actual value '{size}'"),
            ));
        }
    }
    if let Some(max) = max.filter(|max| *max >= MAX_CAPPED_DOCUMENTS_LIMIT) {
        return Err(CommandError::new(
            LOCATION_51024,
            format!("BSON field 'max' value must be < {MAX_CAPPED_DOCUMENTS_LIMIT}, actual value '{max}'"),
        ));
    }
    let mut options = Document::new();
    match (capped, size) {
        (true, None) => {
            return Err(CommandError::new(INVALID_OPTIONS, "the 'size' field is required when 'capped' is true"));
        }
        (false, Some(_)) => return Err(capped_required()),
        (false, None) if max.is_some() => return Err(capped_required()),
        (true, Some(size)) => {
            options.insert("capped", true);
            options.insert("size", compact_number(size));
            if let Some(max) = max {
                let max = if max <= 0 { UNBOUNDED_CAPPED_DOCUMENTS } else { i32::try_from(max).unwrap_or(UNBOUNDED_CAPPED_DOCUMENTS) };
                options.insert("max", max);
            }
        }
        (false, None) => {}
    }
    for (key, value) in request.body.iter().skip(1) {
        if key == "collation" {
            // Stored normalised (every option filled in), as mongod stores it; the simple
            // collation is no collation and is not stored.
            if let Some(collator) = crate::collation::parse_value("create", value)? {
                options.insert("collation", collator.to_document());
            }
            continue;
        }
        if !GENERIC_ARGUMENTS.contains(&key.as_str()) && !["capped", "size", "max"].contains(&key.as_str()) {
            options.insert(key.clone(), value.clone());
        }
    }
    Ok(options)
}

fn capped_required() -> CommandError {
    CommandError::new(INVALID_OPTIONS, "the 'capped' field needs to be true when either the 'size' or 'max' fields are present")
}

fn wrong_type(field: &str, value: &Bson, expected: &str) -> CommandError {
    CommandError::new(
        TYPE_MISMATCH,
        // mongod's list closes its quote before its bracket: '[bool, long, int, decimal, double']
        format!(
            "BSON field 'create.{field}' is the wrong type '{}', expected types '{}']",
            crate::request::type_name(value),
            expected.strip_suffix(']').unwrap_or(expected)
        ),
    )
}

/// MongoDB's `safeBool`: a boolean or any number (non-zero is true).
fn safe_bool(value: &Bson) -> Option<bool> {
    match value {
        Bson::Boolean(flag) => Some(*flag),
        Bson::Decimal128(_) => Some(safe_int64(value) != Some(0)),
        other => crate::request::truthy(other).filter(|_| !matches!(other, Bson::Undefined)),
    }
}

/// MongoDB's `safeInt64`: any number, fractions truncated toward zero (NaN is 0).
pub fn safe_int64(value: &Bson) -> Option<i64> {
    let truncate = |number: f64| if number.is_nan() { 0 } else { number as i64 };
    match value {
        Bson::Int32(number) => Some(i64::from(*number)),
        Bson::Int64(number) => Some(*number),
        Bson::Double(number) => Some(truncate(*number)),
        Bson::Decimal128(decimal) => decimal.to_string().parse::<f64>().ok().map(truncate).or(Some(0)),
        _ => None,
    }
}

fn optional_safe_int64(request: &CommandRequest, field: &str) -> CommandResult<Option<i64>> {
    match request.body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(value) => safe_int64(value).map(Some).ok_or_else(|| wrong_type(field, value, "[long, int, decimal, double]")),
    }
}

/// A whole number as MongoDB appends it: int32 when it fits, else int64.
fn compact_number(number: i64) -> Bson {
    i32::try_from(number).map_or(Bson::Int64(number), Bson::Int32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_int64_truncates_as_mongodb() {
        assert_eq!(safe_int64(&Bson::Double(2.5)), Some(2));
        assert_eq!(safe_int64(&Bson::Double(-1.9)), Some(-1));
        assert_eq!(safe_int64(&Bson::Double(f64::NAN)), Some(0));
        assert_eq!(safe_int64(&Bson::Double(1e300)), Some(i64::MAX));
        assert_eq!(safe_int64(&Bson::String("1".into())), None);
        assert_eq!(safe_bool(&Bson::Int32(1)), Some(true));
        assert_eq!(safe_bool(&Bson::String("x".into())), None);
        assert_eq!(compact_number(4096), Bson::Int32(4096));
        assert_eq!(compact_number(1 << 40), Bson::Int64(1 << 40));
    }
}
