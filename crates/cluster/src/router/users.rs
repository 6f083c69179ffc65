//! A router's users and roles: kept in the config server's `admin.system.users` and
//! `admin.system.roles`, as mongos keeps them, and reached through the same
//! [`UserStore`] interface a node's own collections are. So `createUser` through a router,
//! SCRAM on a router and authorization on a router run the node's code unchanged.
//!
//! Invariants: every write is journaled on the config server before it returns; a listing
//! reads at most [`MAX_LISTED`] documents; the calls block their thread (the command layer is
//! synchronous), so they run inside `block_in_place`, never stalling a runtime worker's other
//! tasks.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_commands::auth::store::{UserStore, ADMIN, MAX_LISTED};
use myriad_commands::error::{CommandError, CommandResult};

use crate::client::NodeClient;
use crate::error::ClusterError;

/// Documents asked for per batch of a listing.
const LISTING_BATCH: i32 = 1000;

pub struct ConfigServerUserStore {
    config: Arc<NodeClient>,
    runtime: tokio::runtime::Handle,
}

impl ConfigServerUserStore {
    pub fn new(config: Arc<NodeClient>, runtime: tokio::runtime::Handle) -> ConfigServerUserStore {
        ConfigServerUserStore { config, runtime }
    }

    /// Runs a command on the config server's admin database from synchronous code.
    fn run(&self, body: Document) -> CommandResult<Document> {
        let config = Arc::clone(&self.config);
        tokio::task::block_in_place(|| self.runtime.block_on(async move { config.run(ADMIN, body).await })).map_err(CommandError::from)
    }

    /// A write's reply: its first write error, or how many documents it touched.
    fn written(&self, body: Document) -> CommandResult<i64> {
        let reply = self.run(body)?;
        if let Ok(errors) = reply.get_array("writeErrors") {
            if let Some(Bson::Document(error)) = errors.first() {
                let mut reply = error.clone();
                reply.insert("ok", 0.0);
                return Err(ClusterError::from_reply(&reply).map(CommandError::from).unwrap_or_else(|| CommandError::internal("a write error without a code")));
            }
        }
        Ok(reply.get_i32("n").map(i64::from).or_else(|_| reply.get_i64("n")).unwrap_or(0))
    }

    fn find(&self, collection: &str, filter: Document, limit: i64) -> CommandResult<Vec<Document>> {
        let mut documents = Vec::new();
        let reply = self.run(doc! { "find": collection, "filter": filter, "limit": limit, "batchSize": LISTING_BATCH })?;
        let mut cursor = reply.get_document("cursor").cloned().unwrap_or_default();
        let mut batch_field = "firstBatch";
        loop {
            for document in cursor.get_array(batch_field).map(|batch| batch.as_slice()).unwrap_or_default() {
                if let Bson::Document(document) = document {
                    documents.push(document.clone());
                }
            }
            let id = cursor.get_i64("id").unwrap_or(0);
            if id == 0 || documents.len() >= MAX_LISTED {
                if id != 0 {
                    let _ = self.run(doc! { "killCursors": collection, "cursors": [id] });
                }
                break;
            }
            let more = self.run(doc! { "getMore": id, "collection": collection, "batchSize": LISTING_BATCH })?;
            cursor = more.get_document("cursor").cloned().unwrap_or_default();
            batch_field = "nextBatch";
        }
        documents.truncate(MAX_LISTED);
        Ok(documents)
    }
}

impl UserStore for ConfigServerUserStore {
    fn get(&self, collection: &str, id: &str) -> CommandResult<Option<Document>> {
        Ok(self.find(collection, doc! { "_id": id }, 1)?.into_iter().next())
    }

    fn all(&self, collection: &str) -> CommandResult<Vec<Document>> {
        self.find(collection, doc! {}, 0)
    }

    fn any(&self, collection: &str) -> CommandResult<bool> {
        Ok(!self.find(collection, doc! {}, 1)?.is_empty())
    }

    fn insert(&self, collection: &str, document: &Document) -> CommandResult<()> {
        self.written(doc! { "insert": collection, "documents": [document.clone()], "writeConcern": { "j": true } }).map(|_| ())
    }

    fn replace(&self, collection: &str, id: &str, new: &Document) -> CommandResult<bool> {
        let updated = self.written(doc! { "update": collection, "updates": [{ "q": { "_id": id }, "u": new.clone() }], "writeConcern": { "j": true } })?;
        Ok(updated > 0)
    }

    fn delete(&self, collection: &str, ids: &[String]) -> CommandResult<usize> {
        let deleted = self.written(doc! { "delete": collection, "deletes": [{ "q": { "_id": { "$in": ids } }, "limit": 0 }], "writeConcern": { "j": true } })?;
        Ok(usize::try_from(deleted).unwrap_or(0))
    }
}
