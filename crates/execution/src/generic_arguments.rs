//! Checks of the generic arguments any command takes, made as mongod makes them before the
//! command runs: the Stable API parameters (`apiVersion`, `apiStrict`, `apiDeprecationErrors`),
//! the read concern's level, and a write concern a standalone cannot satisfy.

use bson::{Bson, Document};
use myriad_reply::error::{CommandError, CommandResult, ErrorCode, BAD_VALUE, FAILED_TO_PARSE, TYPE_MISMATCH};

use crate::request::CommandRequest;

const API_VERSION_ERROR: ErrorCode = ErrorCode::new(322);
const API_STRICT_ERROR: ErrorCode = ErrorCode::new(323);
const API_DEPRECATION_ERROR: ErrorCode = ErrorCode::new(324);
/// mongod's code for `apiStrict` or `apiDeprecationErrors` without `apiVersion`.
const API_PARAMETERS_WITHOUT_VERSION: ErrorCode = ErrorCode::new(4886600);

/// The commands of Stable API version 1, by canonical name (mongod's `apiVersions()`).
const API_VERSION_1_COMMANDS: &[&str] = &[
    "abortTransaction", "aggregate", "authenticate", "collMod", "commitTransaction", "count", "create", "createIndexes",
    "delete", "drop", "dropDatabase", "dropIndexes", "endSessions", "find", "findAndModify", "getMore", "hello", "insert",
    "killCursors", "listCollections", "listDatabases", "listIndexes", "ping", "refreshSessions", "saslContinue",
    "saslStart", "update",
];

/// The commands deprecated in Stable API version 1: none yet (mongod has none either).
const API_VERSION_1_DEPRECATED_COMMANDS: &[&str] = &[];

/// The read concern levels mongod knows.
const READ_CONCERN_LEVELS: &[&str] = &["local", "majority", "linearizable", "available", "snapshot"];

/// The Stable API parameters of a request for the command whose canonical name is `command`.
pub fn check_api_parameters(request: &CommandRequest, command: &str) -> CommandResult<()> {
    let body = &request.body;
    let version = optional_typed(body, "apiVersion", "string", |value| matches!(value, Bson::String(_)))?;
    let strict = optional_typed(body, "apiStrict", "bool", |value| matches!(value, Bson::Boolean(_)))?;
    let deprecation_errors = optional_typed(body, "apiDeprecationErrors", "bool", |value| matches!(value, Bson::Boolean(_)))?;
    let Some(Bson::String(version)) = version else {
        if strict.is_some() || deprecation_errors.is_some() {
            return Err(CommandError::new(
                API_PARAMETERS_WITHOUT_VERSION,
                "Provided apiStrict and/or apiDeprecationErrors without passing apiVersion",
            ));
        }
        return Ok(());
    };
    if version != "1" {
        return Err(CommandError::new(API_VERSION_ERROR, "API version must be \"1\""));
    }
    if strict == Some(&Bson::Boolean(true)) && !API_VERSION_1_COMMANDS.contains(&command) {
        return Err(CommandError::new(
            API_STRICT_ERROR,
            format!(
                "Provided apiStrict:true, but the command {command} is not in API Version 1. Information on supported commands \
                 and migrations in API Version 1 can be found at https://dochub.mongodb.org/core/manual-versioned-api."
            ),
        ));
    }
    if deprecation_errors == Some(&Bson::Boolean(true)) && API_VERSION_1_DEPRECATED_COMMANDS.contains(&command) {
        return Err(CommandError::new(
            API_DEPRECATION_ERROR,
            format!("Provided apiDeprecationErrors:true, but the command {command} is deprecated in API Version 1."),
        ));
    }
    Ok(())
}

/// `readConcern.level`, when given, is one mongod knows.
pub fn check_read_concern(request: &CommandRequest) -> CommandResult<()> {
    let Some(concern) = optional_typed(&request.body, "readConcern", "object", |value| matches!(value, Bson::Document(_)))? else {
        return Ok(());
    };
    let Bson::Document(concern) = concern else { return Ok(()) };
    match concern.get("level") {
        None => Ok(()),
        Some(Bson::String(level)) if READ_CONCERN_LEVELS.contains(&level.as_str()) => Ok(()),
        Some(Bson::String(_)) => Err(CommandError::new(
            FAILED_TO_PARSE,
            "readConcern.level must be either 'local', 'majority', 'linearizable', 'available', or 'snapshot'",
        )),
        Some(other) => Err(wrong_type("readConcern.level", other, "string")),
    }
}

/// On a standalone node, a write concern waiting for more than one member, or for a tag set,
/// can never be satisfied: BadValue, as mongod refuses it.
pub fn check_standalone_write_concern(request: &CommandRequest) -> CommandResult<()> {
    use crate::member_write_concern::{requested, Requested};
    let Some(Bson::Document(concern)) = request.body.get("writeConcern") else { return Ok(()) };
    match requested(concern) {
        Requested::Mode(mode) => Err(CommandError::new(
            BAD_VALUE,
            format!("cannot use non-majority 'w' mode {mode} when a host is not a member of a replica set"),
        )),
        Requested::Members(_) => Err(CommandError::new(BAD_VALUE, "cannot use 'w' > 1 when a host is not replicated")),
        Requested::Nothing | Requested::Majority => Ok(()),
    }
}

/// The value of `field`, refused with TypeMismatch when it is not `expected` (null counts as
/// absent, as mongod's parsers take it).
fn optional_typed<'d>(body: &'d Document, field: &str, expected: &str, fits: impl Fn(&Bson) -> bool) -> CommandResult<Option<&'d Bson>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(value) if fits(value) => Ok(Some(value)),
        Some(value) => Err(wrong_type(field, value, expected)),
    }
}

fn wrong_type(field: &str, value: &Bson, expected: &str) -> CommandError {
    let actual = myriad_query::bson_types::type_name(value);
    CommandError::new(TYPE_MISMATCH, format!("BSON field '{field}' is the wrong type '{actual}', expected type '{expected}'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn request(body: Document) -> CommandRequest {
        CommandRequest::new("db".to_string(), body, crate::session::ConnectionInfo::detached(1)).expect("a request")
    }

    #[test]
    fn api_parameters_are_checked_as_mongod_checks_them() {
        let code = |body: Document, command: &str| check_api_parameters(&request(body), command).err().map(|error| error.code);
        assert_eq!(code(doc! {"distinct": "c", "apiVersion": "1", "apiStrict": true}, "distinct"), Some(323));
        assert_eq!(code(doc! {"distinct": "c", "apiVersion": "1", "apiStrict": false}, "distinct"), None);
        assert_eq!(code(doc! {"find": "c", "apiVersion": "1", "apiStrict": true}, "find"), None);
        assert_eq!(code(doc! {"find": "c", "apiVersion": "2"}, "find"), Some(322));
        assert_eq!(code(doc! {"ping": 1, "apiStrict": true}, "ping"), Some(4886600));
        assert_eq!(code(doc! {"ping": 1, "apiDeprecationErrors": false}, "ping"), Some(4886600));
        assert_eq!(code(doc! {"ping": 1, "apiVersion": 1}, "ping"), Some(14));
        assert_eq!(code(doc! {"ping": 1, "apiVersion": "1", "apiDeprecationErrors": true}, "ping"), None);
    }

    #[test]
    fn read_and_write_concerns_a_standalone_cannot_honour_are_refused() {
        let read = |body: Document| check_read_concern(&request(body)).err().map(|error| error.code);
        assert_eq!(read(doc! {"find": "c", "readConcern": {"level": "unknown"}}), Some(9));
        assert_eq!(read(doc! {"find": "c", "readConcern": {"level": "majority"}}), None);
        assert_eq!(read(doc! {"find": "c", "readConcern": {"level": 1}}), Some(14));
        let write = |body: Document| check_standalone_write_concern(&request(body)).err().map(|error| error.code);
        assert_eq!(write(doc! {"insert": "c", "writeConcern": {"w": 50}}), Some(2));
        assert_eq!(write(doc! {"insert": "c", "writeConcern": {"w": "tagged"}}), Some(2));
        assert_eq!(write(doc! {"insert": "c", "writeConcern": {"w": "majority"}}), None);
        assert_eq!(write(doc! {"insert": "c", "writeConcern": {"w": 1}}), None);
        assert_eq!(write(doc! {"insert": "c", "writeConcern": {"w": 0}}), None);
    }
}
