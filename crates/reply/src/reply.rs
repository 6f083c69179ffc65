//! A command's reply body, and the cursor reply built from documents already encoded.
//!
//! Most handlers build a [`Document`]. Cursor replies (find, getMore, aggregate,
//! listCollections) are built as BSON bytes instead: a stored record that no stage changed is
//! copied into the batch as it was read from storage, never decoded and encoded again, and the
//! batch's byte bound is checked on exact encoded sizes.
//!
//! Invariant: an [`Reply::Encoded`] body is one well-formed BSON document with `ok: 1`.

use bson::{Bson, Document, RawArrayBuf, RawDocumentBuf};

use crate::error::{CommandError, CommandResult};

/// What a handler answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A reply built field by field (the dispatcher adds `ok: 1` when missing).
    Document(Document),
    /// A reply already encoded as BSON, `ok` included.
    Encoded(RawDocumentBuf),
}

impl From<Document> for Reply {
    fn from(document: Document) -> Reply {
        Reply::Document(document)
    }
}

impl Reply {
    /// Adds `writeConcernError: error` (the write was applied; its write concern was not met).
    pub fn add_write_concern_error(&mut self, error: Document) {
        match self {
            Reply::Document(document) => {
                document.insert("writeConcernError", error);
            }
            Reply::Encoded(raw) => {
                if let Ok(error) = RawDocumentBuf::from_document(&error) {
                    raw.append("writeConcernError", error);
                }
            }
        }
    }

    /// True when the reply's `ok` field is 1 (or true).
    pub fn is_ok(&self) -> bool {
        let ok = match self {
            Reply::Document(document) => document.get("ok").cloned(),
            Reply::Encoded(raw) => raw.get("ok").ok().flatten().and_then(|value| Bson::try_from(value).ok()),
        };
        match ok {
            Some(Bson::Double(ok)) => ok == 1.0,
            Some(Bson::Int32(ok)) => ok == 1,
            Some(Bson::Int64(ok)) => ok == 1,
            Some(Bson::Boolean(ok)) => ok,
            _ => false,
        }
    }

    /// The reply as a document (decoding an encoded one): for callers that inspect replies,
    /// such as the legacy OP_QUERY path and tests. An encoded reply that cannot be decoded
    /// becomes the error reply it would have caused.
    pub fn into_document(self) -> Document {
        match self {
            Reply::Document(document) => document,
            Reply::Encoded(raw) => match myriad_query::decode_stored(&raw) {
                Ok(document) => document,
                Err(error) => CommandError::from(error).to_reply(),
            },
        }
    }
}

impl Reply {
    /// The reply with `field: value` added to its `cursor` document, or at its top level when it
    /// has none (a snapshot read's `atClusterTime`: in the cursor for find and aggregate, at the
    /// top for distinct). An encoded reply is copied once, batch bytes included.
    pub fn with_cursor_field(self, field: &str, value: bson::RawBson) -> Reply {
        match self {
            Reply::Document(mut document) => {
                let value = Bson::try_from(value).expect("a RawBson owns a valid value");
                match document.get_document_mut("cursor") {
                    Ok(cursor) => drop(cursor.insert(field, value)),
                    Err(_) => drop(document.insert(field, value)),
                }
                Reply::Document(document)
            }
            Reply::Encoded(mut raw) => {
                let Ok(cursor) = raw.get_document("cursor") else {
                    raw.append(field, value);
                    return Reply::Encoded(raw);
                };
                let mut cursor = cursor.to_raw_document_buf();
                cursor.append(field, value);
                let mut copied = RawDocumentBuf::new();
                for (name, element) in raw.iter().flatten() {
                    if name == "cursor" {
                        copied.append(name, cursor.clone());
                    } else {
                        copied.append(name, element.to_raw_bson());
                    }
                }
                Reply::Encoded(copied)
            }
        }
    }
}

/// Encodes a document built in memory (a projection's or a pipeline's output).
pub fn encode_document(document: &Document) -> CommandResult<RawDocumentBuf> {
    RawDocumentBuf::from_document(document).map_err(|error| CommandError::internal(format!("cannot encode a result: {error}")))
}

/// Encodes every document of a batch.
pub fn encode_documents(documents: Vec<Document>) -> CommandResult<Vec<RawDocumentBuf>> {
    documents.iter().map(encode_document).collect()
}

/// `{cursor: {firstBatch|nextBatch: [...], id, ns}, ok: 1}`, the batch copied in as encoded.
pub fn cursor_reply(batch_field: &str, cursor_id: i64, namespace: &str, batch: Vec<RawDocumentBuf>) -> Reply {
    cursor_reply_with_token(batch_field, cursor_id, namespace, batch, None)
}

/// [`cursor_reply`] with a change stream's `postBatchResumeToken` in the cursor document.
pub fn cursor_reply_with_token(
    batch_field: &str,
    cursor_id: i64,
    namespace: &str,
    batch: Vec<RawDocumentBuf>,
    post_batch_resume_token: Option<RawDocumentBuf>,
) -> Reply {
    let mut documents = RawArrayBuf::new();
    for document in batch {
        documents.push(document);
    }
    let mut cursor = RawDocumentBuf::new();
    cursor.append(batch_field, documents);
    if let Some(token) = post_batch_resume_token {
        cursor.append("postBatchResumeToken", token);
    }
    cursor.append("id", cursor_id);
    cursor.append("ns", namespace);
    let mut body = RawDocumentBuf::new();
    body.append("cursor", cursor);
    body.append("ok", 1.0);
    Reply::Encoded(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn a_cursor_field_goes_into_the_cursor_of_either_form_and_else_at_the_top() {
        let time = bson::Timestamp { time: 7, increment: 3 };
        let batch = vec![doc! { "_id": 1 }];
        let encoded = cursor_reply("firstBatch", 0, "d.c", encode_documents(batch.clone()).unwrap());
        let expected = doc! { "cursor": { "firstBatch": batch.clone(), "id": 0_i64, "ns": "d.c", "atClusterTime": time }, "ok": 1.0 };
        assert_eq!(encoded.clone().with_cursor_field("atClusterTime", bson::RawBson::Timestamp(time)).into_document(), expected);
        let document = Reply::Document(encoded.into_document());
        assert_eq!(document.with_cursor_field("atClusterTime", bson::RawBson::Timestamp(time)).into_document(), expected);
        let distinct = Reply::Document(doc! { "values": [1], "ok": 1.0 });
        assert_eq!(distinct.with_cursor_field("atClusterTime", bson::RawBson::Timestamp(time)).into_document(), doc! { "values": [1], "ok": 1.0, "atClusterTime": time });
    }

    #[test]
    fn an_encoded_cursor_reply_decodes_to_the_document_form() {
        let batch = vec![doc! { "_id": 1, "a": "x" }, doc! { "_id": 2, "b": [1, 2] }];
        let reply = cursor_reply("firstBatch", 42, "d.c", encode_documents(batch.clone()).unwrap());
        assert!(reply.is_ok());
        let expected = doc! { "cursor": { "firstBatch": batch, "id": 42_i64, "ns": "d.c" }, "ok": 1.0 };
        assert_eq!(reply.into_document(), expected);
    }

    #[test]
    fn ok_is_read_from_either_form() {
        assert!(!Reply::from(doc! { "ok": 0.0 }).is_ok());
        assert!(Reply::from(doc! { "ok": 1 }).is_ok());
        assert!(!Reply::from(doc! {}).is_ok());
        let mut raw = RawDocumentBuf::new();
        raw.append("ok", 0.0);
        assert!(!Reply::Encoded(raw).is_ok());
    }
}
