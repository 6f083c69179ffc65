//! Parsing `bulkWrite`: everything MongoDB's parser refuses fails the whole command before any
//! operation runs (unknown fields, wrong types, a bad namespace or nsInfo index); what only
//! running an operation finds (a bad filter or update operator) is that operation's error.

use bson::{Bson, Document};

use crate::command::update::{check_statement_types, StatementFields};
use crate::error::{
    CommandError, CommandResult, ErrorCode, BAD_VALUE, FAILED_TO_PARSE, ILLEGAL_OPERATION, INVALID_NAMESPACE, LOCATION_51024,
    MISSING_FIELD,
};
use crate::request::{field_type_error, CommandRequest};

/// Update operations' fields as the update statement parser reads them.
pub const UPDATE_FIELDS: StatementFields = StatementFields { filter: "filter", update: "updateMods", path: "bulkWrite.ops", constants: "constants" };

/// Constants given with a non-pipeline update (MongoDB's 51198).
const CONSTANTS_WITHOUT_PIPELINE: ErrorCode = ErrorCode::new(51198);

const TOP_LEVEL_FIELDS: &[&str] =
    &["bulkWrite", "ops", "nsInfo", "cursor", "bypassDocumentValidation", "ordered", "errorsOnly", "let", "stmtId", "stmtIds"];
const INSERT_FIELDS: &[&str] = &["insert", "document"];
const UPDATE_OPERATION_FIELDS: &[&str] =
    &["update", "filter", "updateMods", "multi", "upsert", "arrayFilters", "hint", "collation", "sort", "constants"];
const DELETE_FIELDS: &[&str] = &["delete", "filter", "multi", "hint", "collation"];

pub struct Namespace {
    pub db: String,
    pub collection: String,
}

/// One entry of `ops`, with the index of its namespace in `nsInfo`.
pub enum Operation<'r> {
    Insert { namespace: usize, document: &'r Document },
    /// The statement is parsed when it runs ([`crate::command::update::parse_statement`]).
    Update { namespace: usize, statement: &'r Document },
    Delete { namespace: usize, filter: &'r Document, multi: bool, hint: Option<Bson>, collation: crate::collation::GivenCollation },
}

impl Operation<'_> {
    pub fn namespace(&self) -> usize {
        match self {
            Operation::Insert { namespace, .. } | Operation::Update { namespace, .. } | Operation::Delete { namespace, .. } => *namespace,
        }
    }
}

pub struct BulkRequest<'r> {
    pub namespaces: Vec<Namespace>,
    pub operations: Vec<Operation<'r>>,
    pub ordered: bool,
    pub bypass_document_validation: bool,
    pub errors_only: bool,
    /// Results in the first batch at most (`cursor.batchSize`; unbounded by default).
    pub batch_size: usize,
}

fn unknown_field(path: &str, field: &str) -> CommandError {
    CommandError::unknown_field(&format!("{path}.{field}"))
}

fn missing_field(path: &str) -> CommandError {
    CommandError::new(MISSING_FIELD, format!("BSON field '{path}' is missing but a required field"))
}

/// `db.collection` split and checked as MongoDB checks a namespace it writes to.
pub fn split_namespace(namespace: &str) -> Option<(String, String)> {
    let (db, collection) = namespace.split_once('.')?;
    crate::request::validate_database_name(db).ok()?;
    crate::request::validate_collection_name(collection).ok()?;
    Some((db.to_string(), collection.to_string()))
}

/// The nsInfo index an operation names (a non-negative whole number), or None.
pub fn namespace_index(value: &Bson) -> Option<i64> {
    crate::request::integer_value(value).filter(|index| *index >= 0)
}

/// The operation type and nsInfo index of an `ops` entry, as far as they can be read.
pub fn operation_target(operation: &Document) -> Option<(&str, usize)> {
    let (kind, index) = operation.iter().next()?;
    let index = usize::try_from(namespace_index(index)?).ok()?;
    Some((kind.as_str(), index))
}

pub fn parse(request: &CommandRequest) -> CommandResult<BulkRequest<'_>> {
    if let Some(field) = request.body.keys().find(|field| {
        !TOP_LEVEL_FIELDS.contains(&field.as_str()) && !crate::request::unknown_fields::GENERIC_ARGUMENTS.contains(&field.as_str())
    }) {
        return Err(unknown_field("bulkWrite", field));
    }
    let operations = request.optional_array("ops")?.ok_or_else(|| missing_field("bulkWrite.ops"))?;
    let namespace_entries = request.optional_array("nsInfo")?.ok_or_else(|| missing_field("bulkWrite.nsInfo"))?;
    crate::write::check_batch_size(operations.len())?;
    let namespaces = namespace_entries.iter().map(parse_namespace).collect::<CommandResult<Vec<_>>>()?;
    let operations = operations
        .iter()
        .map(|operation| parse_operation(operation, namespaces.len()))
        .collect::<CommandResult<Vec<_>>>()?;
    request.optional_document("let")?;
    let flag = |field: &str, default: bool| request.optional_flag(field).map(|value| value.unwrap_or(default));
    Ok(BulkRequest {
        namespaces,
        operations,
        ordered: flag("ordered", true)?,
        bypass_document_validation: flag("bypassDocumentValidation", false)?,
        errors_only: flag("errorsOnly", false)?,
        batch_size: batch_size(request)?,
    })
}

fn batch_size(request: &CommandRequest) -> CommandResult<usize> {
    let Some(cursor) = request.optional_document("cursor")? else { return Ok(usize::MAX) };
    if let Some(field) = cursor.keys().find(|field| field.as_str() != "batchSize") {
        return Err(unknown_field("bulkWrite.cursor", field));
    }
    match cursor.get("batchSize") {
        None | Some(Bson::Null) => Ok(usize::MAX),
        Some(value) => match crate::request::integer_value(value) {
            Some(size) if size >= 0 => Ok(usize::try_from(size).unwrap_or(usize::MAX)),
            Some(size) => Err(CommandError::new(LOCATION_51024, format!("BSON field 'batchSize' value must be >= 0, actual value '{size}'"))),
            None => Err(field_type_error("bulkWrite.cursor.batchSize", "long", value)),
        },
    }
}

fn parse_namespace(entry: &Bson) -> CommandResult<Namespace> {
    let Bson::Document(entry) = entry else { return Err(field_type_error("bulkWrite.nsInfo", "object", entry)) };
    for field in entry.keys() {
        match field.as_str() {
            "ns" => {}
            "encryptionInformation" => {
                return Err(CommandError::new(
                    ILLEGAL_OPERATION,
                    "Myriad does not support Queryable Encryption: bulkWrite's nsInfo.encryptionInformation is refused",
                ))
            }
            other => return Err(unknown_field("bulkWrite.nsInfo", other)),
        }
    }
    let namespace = match entry.get("ns") {
        Some(Bson::String(namespace)) => namespace,
        Some(other) => return Err(field_type_error("bulkWrite.nsInfo.ns", "string", other)),
        None => return Err(missing_field("bulkWrite.nsInfo.ns")),
    };
    let (db, collection) = split_namespace(namespace)
        .ok_or_else(|| CommandError::new(INVALID_NAMESPACE, format!("Invalid namespace specified for bulkWrite: '{namespace}'")))?;
    Ok(Namespace { db, collection })
}

fn parse_operation(operation: &Bson, namespace_count: usize) -> CommandResult<Operation<'_>> {
    let Bson::Document(operation) = operation else { return Err(field_type_error("bulkWrite.ops", "object", operation)) };
    let Some((kind, index)) = operation.iter().next() else {
        return Err(CommandError::new(FAILED_TO_PARSE, "BulkWrite ops entry is empty"));
    };
    let allowed = match kind.as_str() {
        "insert" => INSERT_FIELDS,
        "update" => UPDATE_OPERATION_FIELDS,
        "delete" => DELETE_FIELDS,
        other => return Err(CommandError::new(FAILED_TO_PARSE, format!("Unrecognized bulkWrite operation: {other}"))),
    };
    if let Some(field) = operation.keys().find(|field| !allowed.contains(&field.as_str())) {
        return Err(unknown_field("bulkWrite.ops", field));
    }
    let namespace = match crate::request::integer_value(index) {
        Some(index) if index < 0 => {
            return Err(CommandError::new(LOCATION_51024, format!("BSON field '{kind}' value must be >= 0, actual value '{index}'")))
        }
        Some(index) => index as usize,
        None => return Err(field_type_error(&format!("bulkWrite.ops.{kind}"), "int", index)),
    };
    if namespace >= namespace_count {
        return Err(CommandError::new(BAD_VALUE, format!("BulkWrite ops entry {operation} has an invalid nsInfo index.")));
    }
    match kind.as_str() {
        "insert" => match operation.get("document") {
            Some(Bson::Document(document)) => Ok(Operation::Insert { namespace, document }),
            Some(other) => Err(field_type_error("bulkWrite.ops.document", "object", other)),
            None => Err(missing_field("bulkWrite.ops.document")),
        },
        "update" => {
            check_statement_types(operation, &UPDATE_FIELDS)?;
            let pipeline = matches!(operation.get("updateMods"), Some(Bson::Array(_)));
            if !pipeline && !matches!(operation.get("constants"), None | Some(Bson::Null)) {
                return Err(CommandError::new(CONSTANTS_WITHOUT_PIPELINE, "Constant values may only be specified for pipeline updates"));
            }
            Ok(Operation::Update { namespace, statement: operation })
        }
        _ => parse_delete(operation, namespace),
    }
}

fn parse_delete(operation: &Document, namespace: usize) -> CommandResult<Operation<'_>> {
    let filter = match operation.get("filter") {
        Some(Bson::Document(filter)) => filter,
        Some(other) => return Err(field_type_error("bulkWrite.ops.filter", "object", other)),
        None => return Err(missing_field("bulkWrite.ops.filter")),
    };
    let multi = match operation.get("multi") {
        None | Some(Bson::Null) => false,
        Some(value) => crate::request::truthy(value).ok_or_else(|| field_type_error("bulkWrite.ops.multi", "bool", value))?,
    };
    let hint = operation.get("hint").filter(|hint| !matches!(hint, Bson::Null)).cloned();
    let collation = crate::collation::parse_field("bulkWrite.ops", operation)?;
    Ok(Operation::Delete { namespace, filter, multi, hint, collation })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn request(body: Document) -> CommandRequest {
        let mut body = body;
        body.insert("$db", "admin");
        CommandRequest::new("admin".into(), body, crate::ConnectionInfo::detached(1)).unwrap()
    }

    fn code(body: Document) -> i32 {
        let request = request(body);
        parse(&request).err().map(|error| error.code).unwrap_or(0)
    }

    #[test]
    fn parses_mixed_operations() {
        let request = request(doc! {
            "bulkWrite": 1,
            "ops": [
                { "insert": 0, "document": { "_id": 1 } },
                { "update": 1, "filter": { "_id": 1 }, "updateMods": { "$inc": { "n": 1 } }, "upsert": true },
                { "delete": 0, "filter": {}, "multi": true },
            ],
            "nsInfo": [{ "ns": "a.b" }, { "ns": "c.d" }],
            "ordered": false,
            "errorsOnly": true,
            "cursor": { "batchSize": 2 },
        });
        let parsed = parse(&request).unwrap();
        assert_eq!(parsed.operations.len(), 3);
        assert_eq!(parsed.operations[1].namespace(), 1);
        assert!(!parsed.ordered && parsed.errors_only && parsed.batch_size == 2);
        assert_eq!(parsed.namespaces[1].db, "c");
        assert!(matches!(parsed.operations[2], Operation::Delete { multi: true, .. }));
    }

    #[test]
    fn refuses_what_mongodb_refuses_before_running() {
        let ns = || vec![Bson::Document(doc! { "ns": "a.b" })];
        let insert = || vec![Bson::Document(doc! { "insert": 0, "document": {} })];
        assert_eq!(code(doc! { "bulkWrite": 1, "ops": [], "nsInfo": ns() }), 16);
        assert_eq!(code(doc! { "bulkWrite": 1, "ops": insert(), "nsInfo": ns(), "bogus": 1 }), 40415);
        assert_eq!(code(doc! { "bulkWrite": 1, "nsInfo": ns() }), 40414);
        assert_eq!(code(doc! { "bulkWrite": 1, "ops": [{ "insert": 1, "document": {} }], "nsInfo": ns() }), 2);
        assert_eq!(code(doc! { "bulkWrite": 1, "ops": [{ "insert": -1, "document": {} }], "nsInfo": ns() }), 51024);
        assert_eq!(code(doc! { "bulkWrite": 1, "ops": [{ "upsert": 0 }], "nsInfo": ns() }), 9);
        assert_eq!(code(doc! { "bulkWrite": 1, "ops": [{ "insert": 0 }], "nsInfo": ns() }), 40414);
        assert_eq!(code(doc! { "bulkWrite": 1, "ops": insert(), "nsInfo": [{ "ns": "nodot" }] }), 73);
        assert_eq!(code(doc! { "bulkWrite": 1, "ops": insert(), "nsInfo": [{ "ns": "a.b", "encryptionInformation": {} }] }), 20);
        let sorted_multi = doc! { "update": 0, "filter": {}, "updateMods": { "$set": { "a": 1 } }, "multi": true, "sort": { "a": 1 } };
        assert_eq!(code(doc! { "bulkWrite": 1, "ops": [sorted_multi], "nsInfo": ns() }), 9);
        let constants = doc! { "update": 0, "filter": {}, "updateMods": { "$set": { "a": 1 } }, "constants": { "x": 1 } };
        assert_eq!(code(doc! { "bulkWrite": 1, "ops": [constants], "nsInfo": ns() }), 51198);
        assert_eq!(code(doc! { "bulkWrite": 1, "ops": insert(), "nsInfo": ns(), "cursor": { "batchSize": -1 } }), 51024);
    }
}
