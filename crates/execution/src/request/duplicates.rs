//! Refusing repeated field names where MongoDB refuses them.
//!
//! The wire decoder records every field name that occurs twice in one document
//! ([`myriad_wire::DuplicateFields`]; the decoded [`bson::Document`] keeps only the last
//! value). Before any handler runs, [`check_command`] answers as MongoDB does for:
//! - a repeated top-level field of the command (not a generic argument such as `lsid`): 40413, "BSON field '<command>.<field>' is a
//!   duplicate field" (MongoDB's IDL parser);
//! - a repeated path in a find or findAndModify projection, or in a `$project` stage: 31250,
//!   "Path collision at <path>";
//! - a second `_id` in a `$group` stage: 15948.
//!
//! Inserted documents are checked one by one by insert ([`document_duplicate`]), so a bad
//! document becomes that document's write error: a second `_id` is MongoDB's BadValue "can't
//! have multiple _id fields in one document"; any other repeated name is refused with
//! BadValue too, where MongoDB would store both fields: Myriad's documents hold one value per
//! name, and refusing is better than silently keeping one.

use myriad_reply::error::{CommandError, CommandResult, ErrorCode, DUPLICATE_FIELD};
use super::unknown_fields::GENERIC_ARGUMENTS;
use super::CommandRequest;

const PATH_COLLISION: ErrorCode = ErrorCode::new(31250);
const GROUP_ID_TWICE: ErrorCode = ErrorCode::new(15948);

/// The error for the first repeated field of the request that MongoDB refuses at parse time.
pub fn check_command(request: &CommandRequest) -> CommandResult<()> {
    for path in &request.duplicate_fields {
        if let Some(error) = command_error(&request.name, path) {
            return Err(error);
        }
    }
    Ok(())
}

fn command_error(command: &str, path: &[String]) -> Option<CommandError> {
    let components: Vec<&str> = path.iter().map(String::as_str).collect();
    match (command, components.as_slice()) {
        (_, [field]) if GENERIC_ARGUMENTS.contains(field) => None,
        (_, [field]) => Some(CommandError::new(DUPLICATE_FIELD, format!("BSON field '{command}.{field}' is a duplicate field"))),
        ("find", ["projection", rest @ ..]) | ("findAndModify" | "findandmodify", ["fields", rest @ ..]) => {
            Some(path_collision(&rest.join(".")))
        }
        ("aggregate", ["pipeline", _, "$project", field]) => Some(path_collision(field)),
        ("aggregate", ["pipeline", _, "$group", "_id"]) => {
            Some(CommandError::new(GROUP_ID_TWICE, "a group's _id may only be specified once"))
        }
        _ => None,
    }
}

fn path_collision(field: &str) -> CommandError {
    CommandError::new(PATH_COLLISION, format!("Path collision at {field}"))
}

/// The write error for the document at `index` of the insert's `documents`, when one of its
/// field names occurs twice.
pub fn document_duplicate(request: &CommandRequest, index: usize) -> Option<CommandError> {
    if request.duplicate_fields.is_empty() {
        return None;
    }
    duplicate_under(request, &["documents", &index.to_string()])
}

/// The write error for the document at `prefix` in the request (`["documents", "3"]`, or a
/// bulkWrite's `["ops", "3", "document"]`), when one of its field names occurs twice.
pub fn duplicate_under(request: &CommandRequest, prefix: &[&str]) -> Option<CommandError> {
    if request.duplicate_fields.is_empty() {
        return None;
    }
    let depth = prefix.len();
    let path = request.duplicate_fields.iter().find(|path| {
        path.len() > depth && path.iter().zip(prefix).all(|(component, expected)| component == expected)
    })?;
    if path.len() == depth + 1 && path[depth] == "_id" {
        return Some(CommandError::bad_value("can't have multiple _id fields in one document"));
    }
    Some(CommandError::bad_value(format!(
        "Document contains the field name '{}' twice; Myriad stores one value per field name",
        path[depth..].join(".")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(components: &[&str]) -> Vec<String> {
        components.iter().map(|component| component.to_string()).collect()
    }

    #[test]
    fn a_repeated_field_is_the_write_error_of_its_own_document() {
        let mut request =
            CommandRequest::new("admin".into(), bson::doc! { "bulkWrite": 1 }, crate::ConnectionInfo::detached(1)).unwrap();
        request.duplicate_fields = vec![path(&["ops", "3", "document", "_id"]), path(&["ops", "5", "document", "a", "b"])];
        assert!(duplicate_under(&request, &["ops", "0", "document"]).is_none());
        assert_eq!(duplicate_under(&request, &["ops", "3", "document"]).unwrap().message, "can't have multiple _id fields in one document");
        let nested = duplicate_under(&request, &["ops", "5", "document"]).unwrap();
        assert!(nested.message.contains("'a.b' twice"), "{}", nested.message);
        assert!(document_duplicate(&request, 3).is_none(), "an insert's documents are elsewhere");
    }

    #[test]
    fn each_place_answers_mongodb_code() {
        let cases: &[(&str, &[&str], Option<(i32, &str)>)] = &[
            ("insert", &["ordered"], Some((40413, "BSON field 'insert.ordered' is a duplicate field"))),
            ("insert", &["lsid"], None),
            ("find", &["projection", "a"], Some((31250, "Path collision at a"))),
            ("find", &["projection", "a", "b"], Some((31250, "Path collision at a.b"))),
            ("findAndModify", &["fields", "x"], Some((31250, "Path collision at x"))),
            ("aggregate", &["pipeline", "0", "$project", "a"], Some((31250, "Path collision at a"))),
            ("aggregate", &["pipeline", "2", "$group", "_id"], Some((15948, "a group's _id may only be specified once"))),
            ("find", &["filter", "a"], None),
            ("insert", &["documents", "0", "_id"], None),
        ];
        for (command, components, expected) in cases {
            let got = command_error(command, &path(components)).map(|error| (error.code, error.message));
            assert_eq!(got, expected.map(|(code, message)| (code, message.to_string())), "{command} {components:?}");
        }
    }
}
