//! From an oplog entry to a change event, and resume tokens.
//!
//! A resume token is `{_data: hex}`: the entry's timestamp (seconds and increment, 8 hex
//! digits each) and a kind (2 hex digits: `01` an event, `00` a high-water mark that only says
//! how far the stream read, `02` the invalidate that ended a stream). Every member writes the
//! same timestamps for the same entries (optimes are derived from the log), so a token from one
//! member resumes on any other, across failovers.

use bson::{doc, Bson, Document, Timestamp};
use myriad_reply::error::{CommandError, CommandResult, ErrorCode};

const INVALID_RESUME_TOKEN: ErrorCode = ErrorCode::new(260);

/// What a resume token points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    HighWaterMark,
    Event,
    Invalidate,
}

impl TokenKind {
    fn code(self) -> u8 {
        match self {
            TokenKind::HighWaterMark => 0,
            TokenKind::Event => 1,
            TokenKind::Invalidate => 2,
        }
    }
}

/// `{_data: ...}` for a position in the oplog.
pub fn resume_token(ts: Timestamp, kind: TokenKind) -> Document {
    doc! { "_data": format!("{:08X}{:08X}{:02X}", ts.time, ts.increment, kind.code()) }
}

/// The timestamp and kind of a token from [`resume_token`].
pub fn parse_resume_token(token: &Bson) -> CommandResult<(Timestamp, TokenKind)> {
    let invalid = || CommandError::new(INVALID_RESUME_TOKEN, "Invalid resume token: the token was not produced by this server's change streams");
    let Bson::Document(token) = token else { return Err(invalid()) };
    let Ok(data) = token.get_str("_data") else { return Err(invalid()) };
    if data.len() != 18 || !data.is_ascii() {
        return Err(invalid());
    }
    let hex = |range: std::ops::Range<usize>| u32::from_str_radix(&data[range], 16).map_err(|_| invalid());
    let ts = Timestamp { time: hex(0..8)?, increment: hex(8..16)? };
    let kind = match hex(16..18)? {
        0 => TokenKind::HighWaterMark,
        1 => TokenKind::Event,
        2 => TokenKind::Invalidate,
        _ => return Err(invalid()),
    };
    Ok((ts, kind))
}

/// `{db, coll}` of a namespace `db.coll` (`{db}` alone for `db.$cmd`).
pub fn namespace_document(namespace: &str) -> Document {
    match namespace.split_once('.') {
        Some((db, "$cmd")) => doc! { "db": db },
        Some((db, collection)) => doc! { "db": db, "coll": collection },
        None => doc! { "db": namespace },
    }
}

/// `updateDescription` of a `$v: 2` diff: updated and inserted fields by dotted path, removed
/// fields, no truncated arrays (arrays are logged whole).
pub fn update_description(diff: &Document) -> Document {
    let (mut updated, mut removed) = (Document::new(), Vec::new());
    flatten_diff(diff, "", &mut updated, &mut removed, 0);
    doc! { "updatedFields": updated, "removedFields": removed, "truncatedArrays": Vec::<Bson>::new() }
}

/// Nesting levels of a diff followed (the diff itself is bounded by `update_diff.rs`).
const MAX_DIFF_NESTING: usize = 64;

fn flatten_diff(diff: &Document, prefix: &str, updated: &mut Document, removed: &mut Vec<Bson>, depth: usize) {
    let path = |name: &str| if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") };
    for (key, value) in diff {
        match (key.as_str(), value) {
            ("u" | "i", Bson::Document(fields)) => {
                for (name, value) in fields {
                    updated.insert(path(name), value.clone());
                }
            }
            ("d", Bson::Document(fields)) => removed.extend(fields.keys().map(|name| Bson::String(path(name)))),
            (nested, Bson::Document(inner)) if nested.starts_with('s') && depth < MAX_DIFF_NESTING => {
                flatten_diff(inner, &path(&nested[1..]), updated, removed, depth + 1);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_order_by_time() {
        let ts = Timestamp { time: 1_795_840_185, increment: 42 };
        for kind in [TokenKind::HighWaterMark, TokenKind::Event, TokenKind::Invalidate] {
            assert_eq!(parse_resume_token(&Bson::Document(resume_token(ts, kind))).unwrap(), (ts, kind));
        }
        let earlier = resume_token(Timestamp { time: 1_795_840_185, increment: 41 }, TokenKind::Event);
        assert!(earlier.get_str("_data").unwrap() < resume_token(ts, TokenKind::Event).get_str("_data").unwrap());
        assert!(parse_resume_token(&Bson::Document(doc! { "_data": "zz" })).is_err());
        assert!(parse_resume_token(&Bson::Int32(1)).is_err());
    }

    #[test]
    fn diffs_become_dotted_update_descriptions() {
        let diff = doc! { "d": { "b": false }, "u": { "a": 2 }, "i": { "h": 1 }, "sc": { "u": { "e": 3 }, "d": { "f": false } } };
        let description = update_description(&diff);
        assert_eq!(description.get_document("updatedFields").unwrap(), &doc! { "a": 2, "h": 1, "c.e": 3 });
        assert_eq!(description.get_array("removedFields").unwrap(), &vec![Bson::from("b"), Bson::from("c.f")]);
        assert_eq!(namespace_document("d.c.x"), doc! { "db": "d", "coll": "c.x" });
        assert_eq!(namespace_document("d.$cmd"), doc! { "db": "d" });
    }
}
