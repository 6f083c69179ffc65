//! A command as the router received it, and the body it forwards.

use std::net::SocketAddr;

use bson::{Bson, Document};

use crate::error::{ClusterError, ClusterResult};

/// Fields meaningful only between a client and the router: cluster time, read preference,
/// transaction numbers and API version are not forwarded to shards as the client sent them (a
/// transaction's fields are added again per shard by `router::transaction::decorate`). The session (`lsid`) is,
/// as mongos forwards it: each shard's session cache holds it, and the shard cursors a command
/// opens belong to it (the router's getMores carry it too). The router takes retryable
/// writes' transaction numbers, but its shards are standalone nodes, which refuse them: a
/// retried write is not yet recognised as a retry (that needs replica sets;
/// docs/design-cluster.md).
const CLIENT_ONLY_FIELDS: &[&str] = &[
    "$db", "$clusterTime", "$readPreference", "txnNumber", "autocommit", "startTransaction", "apiVersion", "apiStrict",
    "apiDeprecationErrors", "$audit", "$client", "shardVersion", "databaseVersion",
];

pub struct RouterRequest {
    pub db: String,
    pub name: String,
    pub body: Document,
    pub connection_id: i64,
    pub remote: Option<SocketAddr>,
}

impl RouterRequest {
    pub fn new(db: String, body: Document, connection_id: i64, remote: Option<SocketAddr>) -> ClusterResult<RouterRequest> {
        let name = body.keys().next().cloned().ok_or_else(|| ClusterError::bad_value("Empty command object"))?;
        myriad_commands::request::validate_database_name(&db)?;
        Ok(RouterRequest { db, name, body, connection_id, remote })
    }

    /// The collection named by the command's first field.
    pub fn collection(&self) -> ClusterResult<String> {
        Ok(myriad_commands::request::collection_name_of(self.body.get(&self.name))?)
    }

    pub fn namespace(&self) -> ClusterResult<String> {
        Ok(format!("{}.{}", self.db, self.collection()?))
    }

    /// The body sent to a shard: the command without the client-only fields.
    pub fn forwarded_body(&self) -> Document {
        forwarded(&self.body)
    }

    pub fn optional_document(&self, field: &str) -> ClusterResult<Option<&Document>> {
        match self.body.get(field) {
            None | Some(Bson::Null) => Ok(None),
            Some(Bson::Document(document)) => Ok(Some(document)),
            Some(other) => Err(myriad_commands::request::field_type_error(&format!("{}.{field}", self.name), "object", other).into()),
        }
    }

    /// A whole number field (int, long or integral double).
    pub fn optional_integer(&self, field: &str) -> ClusterResult<Option<i64>> {
        match self.body.get(field) {
            None | Some(Bson::Null) => Ok(None),
            Some(value) => myriad_commands::request::integer_value(value)
                .map(Some)
                .ok_or_else(|| ClusterError::coded(crate::error::TYPE_MISMATCH, format!("BSON field '{}.{field}' is the wrong type, expected a number", self.name))),
        }
    }

    /// The command as the node's parsers read it, so the router's argument errors are the
    /// node's own.
    pub fn node_request(&self) -> ClusterResult<myriad_commands::CommandRequest> {
        let connection = myriad_commands::ConnectionInfo::detached(self.connection_id);
        Ok(myriad_commands::CommandRequest::new(self.db.clone(), self.body.clone(), connection)?)
    }

    /// The client's session (`lsid`), which the shard cursors the command opens belong to.
    pub fn session(&self) -> Option<Document> {
        self.body.get_document("lsid").ok().cloned()
    }

    pub fn flag(&self, field: &str) -> bool {
        self.body.get(field).and_then(myriad_commands::request::truthy).unwrap_or(false)
    }
}

/// `body` without the client-only fields.
pub fn forwarded(body: &Document) -> Document {
    body.iter().filter(|(key, _)| !CLIENT_ONLY_FIELDS.contains(&key.as_str())).map(|(key, value)| (key.clone(), value.clone())).collect()
}
