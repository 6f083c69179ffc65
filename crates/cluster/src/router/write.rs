//! What insert, update and delete share on the router: batches of statements sent to one
//! shard (split to stay within the wire limits), and the merge of the shards' write replies
//! with their statement indexes mapped back to the client's.

use bson::{doc, Bson, Document};

use crate::catalog::RoutingInfo;
use crate::error::{ClusterError, ClusterResult};
use crate::router::context::RouterContext;
use crate::router::forward;

/// Statements per shard batch (MongoDB's maxWriteBatchSize).
pub const MAX_BATCH_STATEMENTS: usize = 100_000;
/// Bytes of statements per shard batch, well inside the 16 MiB command limit.
pub const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// The merged outcome of a write command.
#[derive(Default)]
pub struct WriteOutcome {
    pub n: i64,
    pub modified: i64,
    pub upserted: Vec<(usize, Bson)>,
    pub errors: Vec<(usize, Document)>,
    /// The first shard's `writeConcernError`, passed on as mongos does.
    pub write_concern_error: Option<Document>,
}

impl WriteOutcome {
    /// Adds a shard's reply to a batch whose statement `i` is the client's statement
    /// `indexes[i]`. Returns whether the reply carried write errors.
    pub fn absorb(&mut self, reply: &Document, indexes: &[usize]) -> bool {
        self.n += reply.get("n").and_then(myriad_commands::request::integer_value).unwrap_or(0);
        self.modified += reply.get("nModified").and_then(myriad_commands::request::integer_value).unwrap_or(0);
        if self.write_concern_error.is_none() {
            self.write_concern_error = reply.get_document("writeConcernError").ok().cloned();
        }
        let original = |value: Option<&Bson>| -> Option<usize> {
            let local = value.and_then(myriad_commands::request::integer_value)?;
            indexes.get(usize::try_from(local).ok()?).copied()
        };
        if let Ok(upserted) = reply.get_array("upserted") {
            for entry in upserted {
                let Bson::Document(entry) = entry else { continue };
                if let (Some(index), Some(id)) = (original(entry.get("index")), entry.get("_id")) {
                    self.upserted.push((index, id.clone()));
                }
            }
        }
        let mut failed = false;
        if let Ok(errors) = reply.get_array("writeErrors") {
            for entry in errors {
                let Bson::Document(entry) = entry else { continue };
                let Some(index) = original(entry.get("index")) else { continue };
                let mut error = entry.clone();
                error.insert("index", index as i32);
                self.errors.push((index, error));
                failed = true;
            }
        }
        failed
    }

    /// Records an error for a whole batch the shard refused (each statement fails with it).
    pub fn fail_all(&mut self, error: &ClusterError, indexes: &[usize], ordered: bool) {
        for index in indexes {
            let mut entry = doc! { "index": *index as i32, "code": error.code(), "errmsg": error.message() };
            if let Some(extra) = error.extra() {
                entry.insert("errInfo", extra.clone());
            }
            self.errors.push((*index, entry));
            if ordered {
                break;
            }
        }
    }

    /// `{n, nModified?, upserted?, writeErrors?}`.
    pub fn to_reply(mut self, with_modified: bool) -> Document {
        let mut reply = doc! { "n": i32::try_from(self.n).unwrap_or(i32::MAX) };
        if with_modified {
            reply.insert("nModified", i32::try_from(self.modified).unwrap_or(i32::MAX));
        }
        if !self.upserted.is_empty() {
            self.upserted.sort_by_key(|(index, _)| *index);
            let upserted: Vec<Bson> = self.upserted.into_iter().map(|(index, id)| Bson::Document(doc! { "index": index as i32, "_id": id })).collect();
            reply.insert("upserted", upserted);
        }
        if !self.errors.is_empty() {
            self.errors.sort_by_key(|(index, _)| *index);
            reply.insert("writeErrors", self.errors.into_iter().map(|(_, error)| Bson::Document(error)).collect::<Vec<_>>());
        }
        if let Some(write_concern_error) = self.write_concern_error {
            reply.insert("writeConcernError", write_concern_error);
        }
        reply
    }
}

/// Splits `indexes` into batches within the statement and byte bounds (sizes from `size`).
pub fn split_batches(indexes: Vec<usize>, size: impl Fn(usize) -> usize) -> Vec<Vec<usize>> {
    let mut batches = Vec::new();
    let mut current = Vec::new();
    let mut bytes = 0usize;
    for index in indexes {
        let statement_bytes = size(index);
        if !current.is_empty() && (current.len() >= MAX_BATCH_STATEMENTS || bytes + statement_bytes > MAX_BATCH_BYTES) {
            batches.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += statement_bytes;
        current.push(index);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// The statements of one write command and what every shard batch of it shares.
pub struct Statements<'a> {
    pub db: &'a str,
    /// The command without its statements.
    pub base: &'a Document,
    /// `documents`, `updates` or `deletes`.
    pub field: &'a str,
    pub all: &'a [Document],
    /// The client's retryable-write transaction number: sent on, with each statement's id
    /// (its index in the client's command), to shards that are replica sets, which apply a
    /// retried statement once; standalone shards refuse transaction numbers and get none.
    pub transaction_number: Option<i64>,
}

impl Statements<'_> {
    /// The command holding the statements at `indexes`.
    pub fn body(&self, indexes: &[usize]) -> Document {
        let mut body = self.base.clone();
        body.insert(self.field, indexes.iter().map(|index| Bson::Document(self.all[*index].clone())).collect::<Vec<_>>());
        body
    }

    /// The command holding one (rewritten) statement.
    pub fn body_of(&self, statement: Document) -> Document {
        let mut body = self.base.clone();
        body.insert(self.field, vec![Bson::Document(statement)]);
        body
    }

    /// Approximate bytes of a statement, for batch bounds.
    pub fn size(&self, index: usize) -> usize {
        myriad_query::aggregate::memory::approximate_document_size_bytes(&self.all[index]) as usize
    }
}

/// Sends the statements at `indexes` to `shard`, versioned.
pub async fn send_batch(context: &RouterContext, shard: &str, statements: &Statements<'_>, indexes: &[usize], routing: &RoutingInfo) -> ClusterResult<Document> {
    let mut body = statements.body(indexes);
    if let Some(number) = statements.transaction_number {
        if context.shards.host(&context.config, shard).await?.contains('/') {
            body.insert("txnNumber", Bson::Int64(number));
            body.insert("stmtIds", indexes.iter().map(|index| Bson::Int32(*index as i32)).collect::<Vec<_>>());
        }
    }
    forward::versioned(context, shard, statements.db, body, routing).await
}

/// The retryable-write transaction number of a client's write command (with its session).
pub fn transaction_number(body: &Document) -> Option<i64> {
    match (body.get("txnNumber"), body.get("lsid")) {
        (Some(Bson::Int64(number)), Some(Bson::Document(_))) if !body.contains_key("autocommit") => Some(*number),
        _ => None,
    }
}

/// Consecutive runs of statements with the same target, in statement order.
pub fn runs_by_target(targets: Vec<(usize, String)>) -> Vec<(String, Vec<usize>)> {
    let mut runs: Vec<(String, Vec<usize>)> = Vec::new();
    for (index, shard) in targets {
        match runs.last_mut() {
            Some((last, indexes)) if *last == shard => indexes.push(index),
            _ => runs.push((shard, vec![index])),
        }
    }
    runs
}

/// One group per target, statement order kept within each.
pub fn groups_by_target(targets: Vec<(usize, String)>) -> Vec<(String, Vec<usize>)> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (index, shard) in targets {
        match groups.iter_mut().find(|(name, _)| *name == shard) {
            Some((_, indexes)) => indexes.push(index),
            None => groups.push((shard, vec![index])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_merge_with_client_indexes() {
        let mut outcome = WriteOutcome::default();
        let reply = doc! { "n": 1, "nModified": 1, "upserted": [{ "index": 1, "_id": 7 }], "writeErrors": [{ "index": 0, "code": 11000, "errmsg": "dup" }] };
        assert!(outcome.absorb(&reply, &[4, 9]));
        assert!(!outcome.absorb(&doc! { "n": 2 }, &[0, 1]));
        let merged = outcome.to_reply(true);
        assert_eq!(merged.get_i32("n").ok(), Some(3));
        assert_eq!(merged.get_array("upserted").ok().map(|entries| entries[0].clone()), Some(Bson::Document(doc! { "index": 9, "_id": 7 })));
        let errors = merged.get_array("writeErrors").expect("errors");
        assert_eq!(errors[0].as_document().and_then(|error| error.get_i32("index").ok()), Some(4));
    }

    #[test]
    fn a_shards_write_concern_error_is_passed_on() {
        let mut outcome = WriteOutcome::default();
        let concern_error = doc! { "code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out" };
        outcome.absorb(&doc! { "n": 1, "writeConcernError": concern_error.clone() }, &[0]);
        outcome.absorb(&doc! { "n": 1, "writeConcernError": { "code": 100, "errmsg": "later" } }, &[1]);
        let merged = outcome.to_reply(false);
        assert_eq!(merged.get_document("writeConcernError").ok(), Some(&concern_error));
        assert_eq!(merged.get_i32("n").ok(), Some(2));
    }

    #[test]
    fn batches_and_runs_keep_statement_order() {
        assert_eq!(split_batches(vec![0, 1, 2], |_| MAX_BATCH_BYTES / 2 + 1), vec![vec![0], vec![1], vec![2]]);
        assert_eq!(split_batches(vec![0, 1, 2], |_| 10), vec![vec![0, 1, 2]]);
        let targets = vec![(0, "a".to_string()), (1, "a".to_string()), (2, "b".to_string()), (3, "a".to_string())];
        assert_eq!(runs_by_target(targets.clone()), vec![("a".to_string(), vec![0, 1]), ("b".to_string(), vec![2]), ("a".to_string(), vec![3])]);
        assert_eq!(groups_by_target(targets), vec![("a".to_string(), vec![0, 1, 3]), ("b".to_string(), vec![2])]);
    }
}
