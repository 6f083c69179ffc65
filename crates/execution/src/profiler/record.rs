//! One finished operation as the profiler sees it, rendered two ways: the `system.profile`
//! document and the attributes of the "Slow query" log line, with MongoDB's field names,
//! order and number types (counts are int32 below 2^30, as mongod's `appendNumber` writes
//! them).

use std::net::SocketAddr;
use std::sync::Arc;

use bson::{doc, Bson, DateTime, Document, RawDocument};

use crate::execution::{bson_size_bytes, value_size_bytes};
use crate::operation::OperationMetrics;
use myriad_reply::reply::Reply;

use super::{FinishedOperation, PROFILE_COLLECTION};

/// MongoDB cuts the command of a profile document past 50 KB.
const MAX_PROFILED_COMMAND_BYTES: usize = 50 * 1024;
/// Log attributes are cut past 10 KB, as mongod's log does.
const MAX_LOGGED_COMMAND_BYTES: usize = 10 * 1024;
/// An OP_MSG reply's data beyond its body document: flag bits and the section kind byte.
const OP_MSG_OVERHEAD_BYTES: usize = 5;

/// What the reply tells: its length, and for cursor replies the batch size and cursor id.
struct ReplyFacts {
    length: usize,
    returned: Option<usize>,
    cursor_id: Option<i64>,
}

/// A failed operation's error.
struct ErrorFacts {
    message: String,
    code: i32,
    name: &'static str,
}

/// A finished operation: what was asked, what it did and what it answered.
pub struct OperationRecord {
    kind: &'static str,
    namespace: String,
    command: Arc<Document>,
    metrics: OperationMetrics,
    plan_summary: Option<String>,
    millis: i64,
    reply: ReplyFacts,
    error: Option<ErrorFacts>,
    client: Option<SocketAddr>,
    app_name: Option<String>,
    /// A getMore's cursor (MongoDB reports it even when the getMore exhausts it).
    requested_cursor_id: Option<i64>,
}

impl OperationRecord {
    pub fn new(finished: &FinishedOperation<'_>, metrics: OperationMetrics, millis: i64) -> OperationRecord {
        let operation = finished.operation.operation();
        let app_name = finished
            .request
            .connection
            .session
            .client_metadata()
            .and_then(|metadata| metadata.get_document("application").ok())
            .and_then(|application| application.get_str("name").ok())
            .map(str::to_string);
        let requested_cursor_id = match (finished.request.name.as_str(), finished.request.first_value()) {
            ("getMore", Some(Bson::Int64(id))) => Some(*id),
            _ => None,
        };
        OperationRecord {
            kind: operation.kind,
            namespace: operation.namespace.clone(),
            command: Arc::clone(&operation.command),
            metrics,
            plan_summary: operation.plan_summary(),
            millis,
            reply: reply_facts(finished.reply),
            error: finished.error.map(|error| ErrorFacts { message: error.message.clone(), code: error.code, name: error.code_name() }),
            client: finished.request.connection.remote_address,
            app_name,
            requested_cursor_id,
        }
    }

    /// True for operations on a `system.profile` collection, which are never profiled.
    pub fn is_on_profile_collection(&self) -> bool {
        self.namespace.split_once('.').is_some_and(|(_, collection)| collection == PROFILE_COLLECTION)
    }

    /// The cursor MongoDB reports: a getMore's, or the one a find or aggregate left open.
    fn cursor_id(&self) -> Option<i64> {
        self.requested_cursor_id.or(self.reply.cursor_id.filter(|id| *id != 0))
    }

    fn cursor_exhausted(&self) -> bool {
        self.reply.cursor_id == Some(0)
    }

    /// The figures shared by the profile document and the log line, in MongoDB's order:
    /// cursor, examined counts, write counts, cursorExhausted.
    fn append_figures(&self, document: &mut Document) {
        if let Some(cursor_id) = self.cursor_id() {
            document.insert("cursorid", number(cursor_id));
        }
        if let Some(examined) = self.metrics.examined {
            document.insert("keysExamined", unsigned_number(examined.keys));
            document.insert("docsExamined", unsigned_number(examined.documents));
        }
        let writes = [
            ("nMatched", self.metrics.matched),
            ("nModified", self.metrics.modified),
            ("ninserted", self.metrics.inserted),
            ("ndeleted", self.metrics.deleted),
            ("nUpserted", self.metrics.upserted),
        ];
        for (name, count) in writes {
            if let Some(count) = count {
                document.insert(name, unsigned_number(count));
            }
        }
        if self.cursor_exhausted() {
            document.insert("cursorExhausted", true);
        }
    }

    fn append_error(&self, document: &mut Document, ok_value: Bson) {
        if let Some(error) = &self.error {
            document.insert("ok", ok_value);
            if !error.message.is_empty() {
                document.insert("errMsg", &error.message);
            }
            document.insert("errName", error.name);
            document.insert("errCode", error.code);
        }
    }

    /// The `system.profile` document.
    pub fn profile_document(&self) -> Document {
        let mut document = doc! {
            "op": self.kind,
            "ns": &self.namespace,
            "command": bounded_command(&self.command, MAX_PROFILED_COMMAND_BYTES),
        };
        self.append_figures(&mut document);
        document.insert("numYield", 0);
        if let Some(returned) = self.reply.returned {
            document.insert("nreturned", unsigned_number(returned as u64));
        }
        document.insert("locks", Document::new());
        document.insert("flowControl", Document::new());
        self.append_error(&mut document, Bson::Double(0.0));
        document.insert("responseLength", unsigned_number(self.reply.length as u64));
        document.insert("protocol", "op_msg");
        document.insert("millis", number(self.millis));
        if let Some(summary) = &self.plan_summary {
            document.insert("planSummary", summary);
        }
        document.insert("ts", DateTime::now());
        document.insert("client", self.client.map(|client| client.ip().to_string()).unwrap_or_default());
        if let Some(app_name) = &self.app_name {
            document.insert("appName", app_name);
        }
        document.insert("allUsers", Bson::Array(Vec::new()));
        document.insert("user", "");
        document
    }

    /// The `attr` of the "Slow query" log line.
    pub fn log_attributes(&self) -> serde_json::Value {
        let mut attributes = doc! { "type": "command", "ns": &self.namespace };
        if let Some(app_name) = &self.app_name {
            attributes.insert("appName", app_name);
        }
        attributes.insert("command", bounded_command(&self.command, MAX_LOGGED_COMMAND_BYTES));
        if let Some(summary) = &self.plan_summary {
            attributes.insert("planSummary", summary);
        }
        self.append_figures(&mut attributes);
        attributes.insert("numYields", 0);
        if let Some(returned) = self.reply.returned {
            attributes.insert("nreturned", unsigned_number(returned as u64));
        }
        self.append_error(&mut attributes, Bson::Int32(0));
        attributes.insert("reslen", unsigned_number(self.reply.length as u64));
        attributes.insert("locks", Document::new());
        if let Some(client) = self.client {
            attributes.insert("remote", client.to_string());
        }
        attributes.insert("protocol", "op_msg");
        attributes.insert("durationMillis", number(self.millis));
        Bson::Document(attributes).into_relaxed_extjson()
    }
}

fn reply_facts(reply: &Reply) -> ReplyFacts {
    match reply {
        Reply::Encoded(raw) => {
            let (returned, cursor_id) = raw_cursor_facts(raw);
            ReplyFacts { length: raw.as_bytes().len() + OP_MSG_OVERHEAD_BYTES, returned, cursor_id }
        }
        Reply::Document(document) => {
            let cursor = document.get_document("cursor").ok();
            let batch = cursor.and_then(|cursor| cursor.get_array("firstBatch").or_else(|_| cursor.get_array("nextBatch")).ok());
            ReplyFacts {
                length: bson_size_bytes(document) + OP_MSG_OVERHEAD_BYTES,
                returned: batch.map(Vec::len),
                cursor_id: cursor.and_then(|cursor| cursor.get_i64("id").ok()),
            }
        }
    }
}

/// The batch size and cursor id of an encoded cursor reply, counted without decoding.
fn raw_cursor_facts(raw: &RawDocument) -> (Option<usize>, Option<i64>) {
    let Ok(cursor) = raw.get_document("cursor") else { return (None, None) };
    let batch = cursor.get_array("firstBatch").or_else(|_| cursor.get_array("nextBatch")).ok();
    (batch.map(|batch| batch.into_iter().count()), cursor.get_i64("id").ok())
}

/// mongod's `appendNumber`: int32 when the magnitude is below 2^30, else int64.
fn number(value: i64) -> Bson {
    if value.unsigned_abs() < 1 << 30 {
        Bson::Int32(value as i32)
    } else {
        Bson::Int64(value)
    }
}

fn unsigned_number(value: u64) -> Bson {
    number(i64::try_from(value).unwrap_or(i64::MAX))
}

/// The command whole when it fits in `limit` bytes; else `{$truncated: "<its start>..."}`,
/// built from the fields that fit, as MongoDB shows an oversized command.
fn bounded_command(command: &Document, limit: usize) -> Document {
    if bson_size_bytes(command) <= limit {
        return command.clone();
    }
    let mut text = String::from("{ ");
    let mut first = true;
    for (key, value) in command {
        // The BSON size bounds the shown text to a small multiple of it.
        if text.len() + key.len() + value_size_bytes(value) > limit {
            break;
        }
        if !first {
            text.push_str(", ");
        }
        first = false;
        text.push_str(&format!("{key}: {value}"));
    }
    let mut end = limit.saturating_sub(3).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("...");
    doc! { "$truncated": text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_follow_mongod_append_number() {
        assert_eq!(number(5), Bson::Int32(5));
        assert_eq!(number(-5), Bson::Int32(-5));
        assert_eq!(number((1 << 30) - 1), Bson::Int32((1 << 30) - 1));
        assert_eq!(number(1 << 30), Bson::Int64(1 << 30));
        assert_eq!(unsigned_number(u64::MAX), Bson::Int64(i64::MAX));
    }

    #[test]
    fn large_commands_are_cut_with_a_marker() {
        let small = doc! { "find": "c", "filter": { "a": 1 } };
        assert_eq!(bounded_command(&small, 1024), small);
        let large = doc! { "insert": "c", "documents": (0..10_000).map(Bson::Int32).collect::<Vec<_>>(), "ordered": true };
        let cut = bounded_command(&large, 1024);
        let text = cut.get_str("$truncated").expect("a truncated string");
        assert!(text.starts_with("{ insert: \"c\""), "{text}");
        assert!(text.ends_with("...") && text.len() <= 1024, "{}", text.len());
    }

    #[test]
    fn cursor_facts_are_read_from_encoded_replies() {
        let batch: Vec<bson::RawDocumentBuf> = (0..3).map(|index| bson::rawdoc! { "_id": index }).collect();
        let reply = myriad_reply::reply::cursor_reply("firstBatch", 42, "db.c", batch);
        let Reply::Encoded(raw) = &reply else { panic!("cursor replies are encoded") };
        assert_eq!(raw_cursor_facts(raw), (Some(3), Some(42)));
        let facts = reply_facts(&Reply::Document(doc! { "n": 1, "ok": 1.0 }));
        assert_eq!((facts.returned, facts.cursor_id), (None, None));
        assert_eq!(facts.length, bson_size_bytes(&doc! { "n": 1, "ok": 1.0 }) + OP_MSG_OVERHEAD_BYTES);
    }
}
