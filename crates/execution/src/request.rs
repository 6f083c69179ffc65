//! A decoded command: its database, body (with OP_MSG document sequences folded in, but for
//! an insert's `documents`, kept as bytes) and typed accessors that reply with MongoDB's
//! errors for wrongly typed fields, the refusal of repeated field names ([`duplicates`]) and of
//! fields a strictly parsed command does not take ([`unknown_fields`]).

pub mod duplicates;
pub mod unknown_fields;

use std::sync::Arc;

use bson::{Bson, Document, RawDocument, RawDocumentBuf};
use myriad_wire::DocumentSequence;

use myriad_reply::error::{CommandError, CommandResult, INVALID_NAMESPACE, TYPE_MISMATCH};
use crate::session::ConnectionInfo;

pub struct CommandRequest {
    /// The `$db` of the command.
    pub db: String,
    /// The command name as sent (its first key).
    pub name: String,
    /// Shared, so the operation table can show the command without copying it.
    pub body: Arc<Document>,
    /// An insert's `documents` when they came as an OP_MSG document sequence: kept as the
    /// BSON bytes they came as (checked by the wire decoder), not in `body`, so that they go
    /// to storage without being decoded and encoded again. MongoDB's logs and profiler do not
    /// show sequence documents either.
    pub raw_documents: Option<RawDocuments>,
    pub connection: ConnectionInfo,
    /// Field names that occurred twice in one document of the message (the decoder keeps the
    /// last value; see [`myriad_wire::DuplicateFields`]), as paths from the body, sequence
    /// documents under `[identifier, index]`. Checked by [`crate::request::duplicates`].
    pub duplicate_fields: Vec<myriad_wire::DuplicateFieldPath>,
    /// It came in a large message (the server's decode lane took it): its command runs at the
    /// same lower priority, so cheap commands never wait for a core behind it.
    pub heavy: bool,
}

impl CommandRequest {
    /// Builds a request from an OP_MSG body and its kind-1 sequences, which become arrays
    /// under their identifiers (`updates`, `deletes`, `ops`), as MongoDB treats them; an
    /// insert's `documents` stay bytes ([`CommandRequest::raw_documents`]).
    pub fn from_op_msg(
        mut body: Document,
        sequences: Vec<DocumentSequence>,
        duplicate_fields: myriad_wire::DuplicateFields,
        connection: ConnectionInfo,
    ) -> CommandResult<CommandRequest> {
        let mut raw_documents = None;
        let is_insert = body.keys().next().is_some_and(|name| name == "insert");
        for sequence in sequences {
            if body.contains_key(&sequence.identifier) {
                return Err(CommandError::bad_value(format!(
                    "Duplicate field {} in both the command body and a document sequence",
                    sequence.identifier
                )));
            }
            if is_insert && sequence.identifier == "documents" {
                let storage_depth = myriad_keystring::nesting::MAX_USER_STORAGE_DEPTH;
                let within_storage_depth = sequence.deepest_nesting <= storage_depth;
                raw_documents = Some(RawDocuments { documents: Arc::from(sequence.documents), within_storage_depth });
                continue;
            }
            let documents = sequence.to_documents()?;
            body.insert(sequence.identifier, Bson::Array(documents.into_iter().map(Bson::Document).collect()));
        }
        let db = match body.get("$db") {
            Some(Bson::String(db)) => db.clone(),
            Some(_) => return Err(CommandError::type_mismatch("$db must be a string")),
            None => return Err(CommandError::bad_value("OP_MSG requests require a $db argument")),
        };
        let mut request = CommandRequest::new(db, body, connection)?;
        request.raw_documents = raw_documents;
        if !duplicate_fields.is_empty() {
            request.duplicate_fields = duplicate_fields.paths().to_vec();
            crate::request::duplicates::check_command(&request)?;
        }
        Ok(request)
    }

    pub fn new(db: String, body: Document, connection: ConnectionInfo) -> CommandResult<CommandRequest> {
        let name = match body.keys().next() {
            Some(name) => name.clone(),
            None => return Err(CommandError::bad_value("Empty command object")),
        };
        // `$external` holds the users that authenticate outside Myriad (X.509): a command may
        // name it, and only the authentication and user commands accept it
        // (`access::check_external_database`); it is never a namespace's database.
        if db != myriad_auth::EXTERNAL {
            validate_database_name(&db)?;
        }
        Ok(CommandRequest { db, name, body: Arc::new(body), connection, raw_documents: None, duplicate_fields: Vec::new(), heavy: false })
    }

    /// This request with another body (fields removed or changed), all else the same.
    pub fn with_body(&self, body: Document) -> CommandRequest {
        CommandRequest {
            db: self.db.clone(),
            name: self.name.clone(),
            body: Arc::new(body),
            connection: self.connection.clone(),
            raw_documents: self.raw_documents.clone(),
            duplicate_fields: self.duplicate_fields.clone(),
            heavy: self.heavy,
        }
    }

    /// An insert's documents: the raw sequence when one came, else the body's `documents`
    /// array (each element required to be a document).
    pub fn insert_documents(&self) -> CommandResult<Vec<InsertDocument<'_>>> {
        match &self.raw_documents {
            Some(raw) => Ok(raw
                .documents
                .iter()
                .map(|document| InsertDocument::Raw { document, within_storage_depth: raw.within_storage_depth })
                .collect()),
            None => Ok(self.document_array("documents")?.into_iter().map(InsertDocument::Decoded).collect()),
        }
    }

    /// The bytes of the insert documents kept raw (0 when none were).
    pub fn raw_documents_size_bytes(&self) -> usize {
        self.raw_documents.as_ref().map_or(0, |raw| raw.documents.iter().map(|document| document.as_bytes().len()).sum())
    }

    /// The value of the command's first field (the collection name for most commands).
    pub fn first_value(&self) -> Option<&Bson> {
        self.body.get(&self.name)
    }

    /// The collection named by the command's first field.
    pub fn collection_name(&self) -> CommandResult<String> {
        collection_name_of(self.first_value())
    }

    pub fn optional_document(&self, field: &str) -> CommandResult<Option<&Document>> {
        match self.body.get(field) {
            None | Some(Bson::Null) => Ok(None),
            Some(Bson::Document(document)) => Ok(Some(document)),
            Some(other) => Err(self.wrong_type(field, "object", other)),
        }
    }

    pub fn optional_array(&self, field: &str) -> CommandResult<Option<&Vec<Bson>>> {
        match self.body.get(field) {
            None | Some(Bson::Null) => Ok(None),
            Some(Bson::Array(array)) => Ok(Some(array)),
            Some(other) => Err(self.wrong_type(field, "array", other)),
        }
    }

    pub fn optional_string(&self, field: &str) -> CommandResult<Option<&str>> {
        match self.body.get(field) {
            None | Some(Bson::Null) => Ok(None),
            Some(Bson::String(text)) => Ok(Some(text)),
            Some(other) => Err(self.wrong_type(field, "string", other)),
        }
    }

    /// MongoDB accepts booleans and numbers for flags; absent (or null) is false.
    pub fn flag(&self, field: &str) -> CommandResult<bool> {
        Ok(self.optional_flag(field)?.unwrap_or(false))
    }

    /// A flag whose absence (or null) means a default decided elsewhere.
    pub fn optional_flag(&self, field: &str) -> CommandResult<Option<bool>> {
        match self.body.get(field) {
            None | Some(Bson::Null) => Ok(None),
            Some(value) => truthy(value).map(Some).ok_or_else(|| self.wrong_type(field, "bool", value)),
        }
    }

    /// A whole number (int32, int64 or an integral double).
    pub fn optional_integer(&self, field: &str) -> CommandResult<Option<i64>> {
        match self.body.get(field) {
            None | Some(Bson::Null) => Ok(None),
            Some(value) => integer_value(value).map(Some).ok_or_else(|| self.wrong_type(field, "number", value)),
        }
    }

    /// A document array field whose elements must each be documents (insert's `documents`).
    pub fn document_array(&self, field: &str) -> CommandResult<Vec<&Document>> {
        let array = self
            .optional_array(field)?
            .ok_or_else(|| CommandError::new(myriad_reply::error::MISSING_FIELD, format!("BSON field '{}.{field}' is missing but a required field", self.name)))?;
        array
            .iter()
            .map(|value| match value {
                Bson::Document(document) => Ok(document),
                other => Err(self.wrong_type(field, "object", other)),
            })
            .collect()
    }

    /// TypeMismatch for a wrongly typed field, named as MongoDB names it:
    /// `'<command>.<field>'` (`'insert.ordered'`, `'update.updates.q'`).
    pub fn wrong_type(&self, field: &str, expected: &str, actual: &Bson) -> CommandError {
        field_type_error(&format!("{}.{field}", self.parser_context()), expected, actual)
    }

    /// The name mongod's IDL parser gives the command in its messages: `FindCommandRequest`
    /// for find, the command's name for the others.
    pub fn parser_context(&self) -> &str {
        if self.name == "find" {
            "FindCommandRequest"
        } else {
            &self.name
        }
    }
}

/// One document of an insert, as it came: decoded in the command body, or BSON bytes from a
/// document sequence.
#[derive(Clone, Copy)]
pub enum InsertDocument<'a> {
    Decoded(&'a Document),
    /// `within_storage_depth`: the wire decoder found it nests no deeper than MongoDB stores,
    /// so storage need not walk it again.
    Raw { document: &'a RawDocument, within_storage_depth: bool },
}

/// An insert's `documents` as they came in an OP_MSG document sequence.
#[derive(Clone)]
pub struct RawDocuments {
    pub documents: Arc<[RawDocumentBuf]>,
    /// Every document nests at most `MAX_USER_STORAGE_DEPTH` levels.
    pub within_storage_depth: bool,
}

pub fn truthy(value: &Bson) -> Option<bool> {
    match value {
        Bson::Boolean(flag) => Some(*flag),
        Bson::Int32(number) => Some(*number != 0),
        Bson::Int64(number) => Some(*number != 0),
        Bson::Double(number) => Some(*number != 0.0),
        Bson::Null | Bson::Undefined => Some(false),
        _ => None,
    }
}

pub fn integer_value(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(number) => Some(i64::from(*number)),
        Bson::Int64(number) => Some(*number),
        Bson::Double(number) if number.fract() == 0.0 && number.abs() < 9.2e18 => Some(*number as i64),
        _ => None,
    }
}

pub fn type_name(value: &Bson) -> &'static str {
    match value {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::Undefined => "undefined",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::DbPointer(_) => "dbPointer",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::Symbol(_) => "symbol",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        Bson::MinKey => "minKey",
        Bson::MaxKey => "maxKey",
    }
}

pub fn field_type_error(field: &str, expected: &str, actual: &Bson) -> CommandError {
    CommandError::new(
        TYPE_MISMATCH,
        format!("BSON field '{field}' is the wrong type '{}', expected type '{expected}'", type_name(actual)),
    )
}

/// Database names: non-empty, under 64 bytes, none of `/\. "$` or NUL (MongoDB's rules).
pub fn validate_database_name(db: &str) -> CommandResult<()> {
    if db.is_empty() || db.len() >= 64 || db.contains(['/', '\\', '.', ' ', '"', '$', '\0']) {
        return Err(CommandError::new(INVALID_NAMESPACE, format!("Invalid database name: '{db}'")));
    }
    Ok(())
}

/// Collection names: non-empty, no NUL, not starting with `$` or `.`, not ending with `.`.
/// The collection a command names by its first field's value, checked as mongod checks it
/// (a router's requests too).
pub fn collection_name_of(value: Option<&Bson>) -> CommandResult<String> {
    match value {
        Some(Bson::String(name)) => {
            validate_collection_name(name)?;
            Ok(name.clone())
        }
        Some(other) => Err(CommandError::new(INVALID_NAMESPACE, format!("collection name has invalid type {}", type_name(other)))),
        None => Err(CommandError::bad_value("missing collection name")),
    }
}

pub fn validate_collection_name(name: &str) -> CommandResult<()> {
    if name.is_empty() || name.contains('\0') || name.starts_with('.') || name.ends_with('.') {
        return Err(CommandError::new(INVALID_NAMESPACE, format!("Invalid collection name: '{name}'")));
    }
    if name.contains('$') && !name.starts_with("oplog.$") {
        return Err(CommandError::new(INVALID_NAMESPACE, format!("Invalid collection name: {name}")));
    }
    Ok(())
}
