//! Collection validators (`validator`, `validationLevel`, `validationAction` in the
//! collection's options), checked on every insert and update.
//!
//! The validator is parsed once per version of the collection's catalog entry and cached
//! with it ([`CollectionHandle::options_derived`]); a collection without options pays one
//! branch per write command. Writes check the version their write session holds under the
//! collection's lock, so a `collMod` applies from the first write that commits after it.
//!
//! - `validationLevel`: `off` checks nothing; `strict` (the default) checks every insert and
//!   update; `moderate` skips updates of documents that already failed the validator.
//! - `validationAction`: `error` (the default) fails the write with
//!   DocumentValidationFailure (121) and `errInfo: {failingDocumentId, details}`; `warn`
//!   writes the document and logs "Document would fail validation" (id 20294).
//! - `bypassDocumentValidation: true` on the command skips the check.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_query::filter::Filter;
use myriad_storage::{CollectionHandle, StorageError};

use crate::backend::WriteSession;
use myriad_reply::error::{CommandError, CommandResult, ErrorCode, BAD_VALUE, INVALID_OPTIONS, MISSING_FIELD};
use crate::{CommandRequest, ServerContext};

pub const DOCUMENT_VALIDATION_FAILURE: ErrorCode = ErrorCode::new(121);
const QUERY_FEATURE_NOT_ALLOWED: ErrorCode = ErrorCode::new(224);
/// Largest `errInfo` sent with a failure; past it the details are left out (MongoDB also
/// bounds its validation errors).
const MAX_ERROR_DETAILS_BYTES: usize = 8 * 1024 * 1024;
/// Nesting of `$and`/`$or`/`$nor` the allowed-operator check walks (filters allow 100).
const MAX_VALIDATOR_DEPTH: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValidationLevel {
    Off,
    Strict,
    Moderate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValidationAction {
    Error,
    Warn,
}

/// A collection's parsed validation settings.
#[derive(Debug)]
pub struct Validator {
    filter: Filter,
    source: Document,
    level: ValidationLevel,
    action: ValidationAction,
}

/// What the catalog entry caches: the validator, none, or why the stored one cannot be used.
type CachedValidator = Result<Option<Arc<Validator>>, CommandError>;

/// `validationLevel` as given to create or collMod (`command` names the field in errors).
pub fn parse_level(command: &str, value: &Bson) -> CommandResult<ValidationLevel> {
    match value {
        Bson::String(level) => match level.as_str() {
            "off" => Ok(ValidationLevel::Off),
            "strict" => Ok(ValidationLevel::Strict),
            "moderate" => Ok(ValidationLevel::Moderate),
            other => Err(CommandError::new(
                BAD_VALUE,
                format!("Enumeration value '{other}' for field '{command}.validationLevel' is not a valid value."),
            )),
        },
        other => Err(crate::request::field_type_error(&format!("{command}.validationLevel"), "string", other)),
    }
}

/// `validationAction` as given to create or collMod.
pub fn parse_action(command: &str, value: &Bson) -> CommandResult<ValidationAction> {
    match value {
        Bson::String(action) => match action.as_str() {
            "error" => Ok(ValidationAction::Error),
            "warn" => Ok(ValidationAction::Warn),
            other => Err(CommandError::new(
                BAD_VALUE,
                format!("Enumeration value '{other}' for field '{command}.validationAction' is not a valid value."),
            )),
        },
        other => Err(crate::request::field_type_error(&format!("{command}.validationAction"), "string", other)),
    }
}

/// `changeStreamPreAndPostImages: {enabled: <bool>}`.
fn check_change_images(command: &str, images: &Bson) -> CommandResult<()> {
    let Bson::Document(images) = images else {
        return Err(crate::request::field_type_error(&format!("{command}.changeStreamPreAndPostImages"), "object", images));
    };
    if let Some(other) = images.keys().find(|key| *key != "enabled") {
        return Err(CommandError::unknown_field(&format!("changeStreamPreAndPostImages.{other}")));
    }
    match images.get("enabled") {
        Some(Bson::Boolean(_)) => Ok(()),
        Some(other) => Err(crate::request::field_type_error("changeStreamPreAndPostImages.enabled", "bool", other)),
        None => Err(CommandError::new(MISSING_FIELD, "BSON field 'changeStreamPreAndPostImages.enabled' is missing but a required field")),
    }
}

/// Checks the validation options of a create or collMod on `db.collection`: the validator
/// is a document, may not use `$where`, `$near`, `$nearSphere`, `$geoNear` or `$text`, and
/// parses as a filter; level and action are known values. Also `changeStreamPreAndPostImages`
/// (`{enabled: <bool>}`, as mongod parses it), which create and collMod take too.
pub fn check_options(command: &str, db: &str, collection: &str, options: &Document) -> CommandResult<()> {
    if let Some(images) = options.get("changeStreamPreAndPostImages") {
        check_change_images(command, images)?;
    }
    if let Some(level) = options.get("validationLevel") {
        parse_level(command, level)?;
    }
    if let Some(action) = options.get("validationAction") {
        parse_action(command, action)?;
    }
    let Some(validator) = options.get("validator") else { return Ok(()) };
    let Bson::Document(validator) = validator else {
        return Err(crate::request::field_type_error(&format!("{command}.validator"), "object", validator));
    };
    if validator.is_empty() {
        return Ok(());
    }
    if ["admin", "local", "config"].contains(&db) {
        return Err(CommandError::new(INVALID_OPTIONS, format!("Document validators are not allowed on collections in the {db} database")));
    }
    if collection.starts_with("system.") {
        return Err(CommandError::new(INVALID_OPTIONS, "Document validators not allowed on system collection"));
    }
    check_allowed_operators(validator, 0)?;
    Filter::parse(validator).map_err(|error| {
        let error = CommandError::from(error);
        CommandError::new(ErrorCode::new(error.code), format!("Parsing of collection validator failed :: caused by :: {}", error.message))
    })?;
    Ok(())
}

/// `$where`, geo-near and `$text` are refused in validators with QueryFeatureNotAllowed.
fn check_allowed_operators(filter: &Document, depth: usize) -> CommandResult<()> {
    if depth > MAX_VALIDATOR_DEPTH {
        return Ok(());
    }
    for (key, value) in filter {
        let refused = match key.as_str() {
            "$where" => Some("$where"),
            "$text" => Some("$text"),
            "$and" | "$or" | "$nor" => {
                if let Bson::Array(children) = value {
                    for child in children {
                        if let Bson::Document(child) = child {
                            check_allowed_operators(child, depth + 1)?;
                        }
                    }
                }
                None
            }
            _ => match value {
                Bson::Document(operators) if operators.keys().any(|name| matches!(name.as_str(), "$near" | "$nearSphere" | "$geoNear")) => {
                    Some("$geoNear, $near, and $nearSphere")
                }
                _ => None,
            },
        };
        if let Some(operator) = refused {
            return Err(CommandError::new(QUERY_FEATURE_NOT_ALLOWED, format!("{operator} is not allowed in this context")));
        }
    }
    Ok(())
}

fn parse_cached(options: Result<Document, StorageError>) -> CachedValidator {
    let options = options.map_err(CommandError::from)?;
    let level = match options.get("validationLevel") {
        Some(level) => parse_level("collMod", level)?,
        None => ValidationLevel::Strict,
    };
    let action = match options.get("validationAction") {
        Some(action) => parse_action("collMod", action)?,
        None => ValidationAction::Error,
    };
    match options.get("validator") {
        Some(Bson::Document(source)) if !source.is_empty() && level != ValidationLevel::Off => {
            // A validator compares strings by the collection's default collation, as mongod's.
            let collator = match options.get("collation") {
                Some(Bson::Document(collation)) => myriad_collation::parse(collation).ok().flatten(),
                _ => None,
            };
            Ok(Some(Arc::new(Validator { filter: Filter::parse(source)?.with_collator(collator), source: source.clone(), level, action })))
        }
        _ => Ok(None),
    }
}

/// The validation a write must apply, for the collection version `transaction` holds; None
/// when there is nothing to check (no options, no validator, level off, or bypassed).
pub fn for_write(transaction: &dyn WriteSession, bypass: bool) -> CommandResult<Option<Arc<Validator>>> {
    if bypass {
        return Ok(None);
    }
    let handle = transaction.handle()?;
    of_collection(&handle)
}

fn of_collection(handle: &CollectionHandle) -> CommandResult<Option<Arc<Validator>>> {
    let Some(cached) = handle.options_derived(parse_cached) else { return Ok(None) };
    cached.as_ref().clone()
}

/// `bypassDocumentValidation` of a write command (a boolean; anything else is refused).
pub fn bypass_requested(request: &CommandRequest) -> CommandResult<bool> {
    match request.body.get("bypassDocumentValidation") {
        None | Some(Bson::Null) => Ok(false),
        Some(value) => crate::request::truthy(value).ok_or_else(|| request.wrong_type("bypassDocumentValidation", "bool", value)),
    }
}

/// Checks an inserted document (or an upsert's new document).
pub fn check_insert(context: &ServerContext, transaction: &dyn WriteSession, document: &Document, bypass: bool) -> CommandResult<()> {
    match for_write(transaction, bypass)? {
        Some(validator) => validator.check(context, transaction, None, document),
        None => Ok(()),
    }
}

/// Checks an update of `old` into `new`.
pub fn check_update(context: &ServerContext, transaction: &dyn WriteSession, old: &Document, new: &Document, bypass: bool) -> CommandResult<()> {
    match for_write(transaction, bypass)? {
        Some(validator) => validator.check(context, transaction, Some(old), new),
        None => Ok(()),
    }
}

impl Validator {
    /// Checks `document`; `previous` is the stored version an update replaces.
    pub fn check(&self, context: &ServerContext, transaction: &dyn WriteSession, previous: Option<&Document>, document: &Document) -> CommandResult<()> {
        if self.filter.try_matches(document)? {
            return Ok(());
        }
        if self.level == ValidationLevel::Moderate && previous.is_some_and(|previous| !self.filter.matches(previous)) {
            return Ok(());
        }
        let error_info = self.error_info(document);
        match self.action {
            ValidationAction::Error => Err(CommandError {
                code: DOCUMENT_VALIDATION_FAILURE.code,
                message: "Document failed validation".to_string(),
                extra: Some(doc! { "errInfo": error_info }),
            }),
            ValidationAction::Warn => {
                let namespace = transaction.handle().map(|handle| handle.namespace().to_string()).unwrap_or_default();
                let attributes = serde_json::json!({
                    "namespace": namespace,
                    "document": Bson::Document(document.clone()).into_relaxed_extjson(),
                    "errInfo": Bson::Document(error_info).into_relaxed_extjson(),
                });
                context.logger.log(crate::log::Severity::Warning, "STORAGE", 20294, "conn", "Document would fail validation", attributes);
                Ok(())
            }
        }
    }

    /// `{failingDocumentId, details}`, with the details left out past
    /// [`MAX_ERROR_DETAILS_BYTES`].
    fn error_info(&self, document: &Document) -> Document {
        let failing_id = document.get("_id").cloned().unwrap_or(Bson::Null);
        let details = myriad_query::validation_error::describe(&self.source, document);
        let size = bson::to_vec(&details).map_or(usize::MAX, |bytes| bytes.len());
        if size > MAX_ERROR_DETAILS_BYTES {
            let operator = details.get_str("operatorName").unwrap_or("$and").to_string();
            return doc! { "failingDocumentId": failing_id, "details": { "operatorName": operator, "reason": "validation error details too large" } };
        }
        doc! { "failingDocumentId": failing_id, "details": details }
    }
}
