//! What a shard persists about migrations, in its own `config` database, as MongoDB's shards
//! do: `config.migrationCoordinators` (the donor's record of a migration until both sides know
//! its outcome) and `config.rangeDeletions` (ranges to delete: pending while a migration runs,
//! ready once it decided against this shard keeping them).
//!
//! Invariants: a donor writes its coordinator document and its pending range deletion before
//! the recipient receives anything, and a recipient writes its pending range deletion before
//! the first document arrives; so after a crash every document moved by an undecided migration
//! is covered by a task, and the decision (read from the config server) says which side keeps
//! it.

use bson::{doc, Binary, Bson, Document, Timestamp};
use myriad_commands::ServerContext;

use crate::error::{ClusterError, ClusterResult};
use crate::local::{self, Change};
use crate::migration::range::ChunkRange;

pub const LOCAL_CONFIG_DB: &str = "config";
pub const COORDINATORS: &str = "migrationCoordinators";
pub const RANGE_DELETIONS: &str = "rangeDeletions";

/// The outcome of a migration, once known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Committed,
    Aborted,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Committed => "committed",
            Decision::Aborted => "aborted",
        }
    }

    pub fn parse(text: &str) -> ClusterResult<Decision> {
        match text {
            "committed" => Ok(Decision::Committed),
            "aborted" => Ok(Decision::Aborted),
            other => Err(ClusterError::bad_value(format!("unknown migration decision '{other}'"))),
        }
    }
}

/// The donor's record of one migration.
#[derive(Clone, Debug, PartialEq)]
pub struct Coordinator {
    pub migration_id: Binary,
    pub namespace: String,
    /// The catalog uuid of the collection's incarnation.
    pub collection_uuid: Binary,
    pub key_pattern: Document,
    pub donor: String,
    pub recipient: String,
    pub range: ChunkRange,
    /// The moved chunk's `lastmod` when the migration started (the commit requires it).
    pub chunk_version: Timestamp,
    pub decision: Option<Decision>,
}

impl Coordinator {
    pub fn to_document(&self) -> Document {
        let mut document = doc! {
            "_id": self.migration_id.clone(),
            "nss": &self.namespace,
            "collectionUuid": self.collection_uuid.clone(),
            "keyPattern": self.key_pattern.clone(),
            "donorShardId": &self.donor,
            "recipientShardId": &self.recipient,
            "range": self.range.to_document(),
            "preMigrationChunkVersion": self.chunk_version,
        };
        if let Some(decision) = self.decision {
            document.insert("decision", decision.as_str());
        }
        document
    }

    pub fn from_document(document: &Document) -> ClusterResult<Coordinator> {
        let malformed = || ClusterError::internal(format!("malformed migration coordinator {document}"));
        let Some(Bson::Binary(migration_id)) = document.get("_id") else { return Err(malformed()) };
        let Some(Bson::Binary(collection_uuid)) = document.get("collectionUuid") else { return Err(malformed()) };
        let Some(Bson::Timestamp(chunk_version)) = document.get("preMigrationChunkVersion") else { return Err(malformed()) };
        let decision = match document.get_str("decision") {
            Ok(text) => Some(Decision::parse(text)?),
            Err(_) => None,
        };
        Ok(Coordinator {
            migration_id: migration_id.clone(),
            namespace: document.get_str("nss").map_err(|_| malformed())?.to_string(),
            collection_uuid: collection_uuid.clone(),
            key_pattern: document.get_document("keyPattern").map_err(|_| malformed())?.clone(),
            donor: document.get_str("donorShardId").map_err(|_| malformed())?.to_string(),
            recipient: document.get_str("recipientShardId").map_err(|_| malformed())?.to_string(),
            range: ChunkRange::from_document(document.get_document("range").map_err(|_| malformed())?)?,
            chunk_version: *chunk_version,
            decision,
        })
    }
}

/// A range of one collection this shard holds but will not keep.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeDeletion {
    /// The migration that produced it (one task per side per migration).
    pub id: Binary,
    pub namespace: String,
    pub collection_uuid: Binary,
    pub key_pattern: Document,
    /// The shard that donated the range (this shard for a donor's task).
    pub donor: String,
    pub range: ChunkRange,
    /// True while the migration is undecided: nothing is deleted yet.
    pub pending: bool,
    /// `"now"` on a recipient (its copy was never owned), `"delayed"` on a donor.
    pub when_to_clean: &'static str,
}

impl RangeDeletion {
    pub fn to_document(&self) -> Document {
        doc! {
            "_id": self.id.clone(),
            "nss": &self.namespace,
            "collectionUuid": self.collection_uuid.clone(),
            "keyPattern": self.key_pattern.clone(),
            "donorShardId": &self.donor,
            "range": self.range.to_document(),
            "pending": self.pending,
            "whenToClean": self.when_to_clean,
            "timestamp": crate::catalog::documents::now_timestamp(),
        }
    }

    pub fn from_document(document: &Document) -> ClusterResult<RangeDeletion> {
        let malformed = || ClusterError::internal(format!("malformed range deletion task {document}"));
        let Some(Bson::Binary(id)) = document.get("_id") else { return Err(malformed()) };
        let Some(Bson::Binary(collection_uuid)) = document.get("collectionUuid") else { return Err(malformed()) };
        Ok(RangeDeletion {
            id: id.clone(),
            namespace: document.get_str("nss").map_err(|_| malformed())?.to_string(),
            collection_uuid: collection_uuid.clone(),
            key_pattern: document.get_document("keyPattern").map_err(|_| malformed())?.clone(),
            donor: document.get_str("donorShardId").map_err(|_| malformed())?.to_string(),
            range: ChunkRange::from_document(document.get_document("range").map_err(|_| malformed())?)?,
            pending: document.get_bool("pending").unwrap_or(false),
            when_to_clean: if document.get_str("whenToClean") == Ok("delayed") { "delayed" } else { "now" },
        })
    }
}

/// Inserts a document into one of the shard's migration collections (journaled).
pub fn insert(context: &ServerContext, collection: &str, document: Document) -> ClusterResult<()> {
    local::write_atomically(context, LOCAL_CONFIG_DB, collection, vec![Change::Insert(document)])
}

/// Replaces the document with `id` (journaled); a missing one is an error.
pub fn replace(context: &ServerContext, collection: &str, id: &Binary, document: Document) -> ClusterResult<()> {
    local::write_atomically(context, LOCAL_CONFIG_DB, collection, vec![Change::Replace { id: Bson::Binary(id.clone()), document }])
}

/// Removes the document with `id` if present (journaled).
pub fn remove(context: &ServerContext, collection: &str, id: &Binary) -> ClusterResult<()> {
    let command = doc! { "delete": collection, "deletes": [{ "q": { "_id": id.clone() }, "limit": 1 }], "writeConcern": { "j": true } };
    local::run(context, LOCAL_CONFIG_DB, command).map(drop)
}

pub fn coordinators(context: &ServerContext) -> ClusterResult<Vec<Coordinator>> {
    local::find(context, LOCAL_CONFIG_DB, COORDINATORS, Document::new(), None, Some(MAX_LISTED))?.iter().map(Coordinator::from_document).collect()
}

pub fn coordinator(context: &ServerContext, id: &Binary) -> ClusterResult<Option<Coordinator>> {
    let found = local::find(context, LOCAL_CONFIG_DB, COORDINATORS, doc! { "_id": id.clone() }, None, Some(1))?;
    found.first().map(Coordinator::from_document).transpose()
}

pub fn range_deletions(context: &ServerContext, filter: Document) -> ClusterResult<Vec<RangeDeletion>> {
    local::find(context, LOCAL_CONFIG_DB, RANGE_DELETIONS, filter, Some(doc! { "timestamp": 1 }), Some(MAX_LISTED))?
        .iter()
        .map(RangeDeletion::from_document)
        .collect()
}

pub fn range_deletion(context: &ServerContext, id: &Binary) -> ClusterResult<Option<RangeDeletion>> {
    let found = local::find(context, LOCAL_CONFIG_DB, RANGE_DELETIONS, doc! { "_id": id.clone() }, None, Some(1))?;
    found.first().map(RangeDeletion::from_document).transpose()
}

/// Marks a pending task ready (idempotent: an absent or ready task is left alone).
pub fn make_ready(context: &ServerContext, id: &Binary) -> ClusterResult<()> {
    let command = doc! {
        "update": RANGE_DELETIONS,
        "updates": [{ "q": { "_id": id.clone(), "pending": true }, "u": { "$set": { "pending": false } } }],
        "writeConcern": { "j": true },
    };
    local::run(context, LOCAL_CONFIG_DB, command).map(drop)
}

/// Tasks and coordinators read per pass (a shard has few; the rest wait for the next pass).
const MAX_LISTED: i64 = 1_000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::documents::new_uuid;

    #[test]
    fn documents_round_trip() {
        let coordinator = Coordinator {
            migration_id: new_uuid(),
            namespace: "d.c".into(),
            collection_uuid: new_uuid(),
            key_pattern: doc! { "x": 1 },
            donor: "shard0000".into(),
            recipient: "shard0001".into(),
            range: ChunkRange { min: doc! { "x": 1 }, max: doc! { "x": 2 } },
            chunk_version: Timestamp { time: 3, increment: 1 },
            decision: Some(Decision::Committed),
        };
        assert_eq!(Coordinator::from_document(&coordinator.to_document()), Ok(coordinator.clone()));
        let task = RangeDeletion {
            id: coordinator.migration_id.clone(),
            namespace: "d.c".into(),
            collection_uuid: coordinator.collection_uuid.clone(),
            key_pattern: doc! { "x": 1 },
            donor: "shard0000".into(),
            range: coordinator.range.clone(),
            pending: true,
            when_to_clean: "delayed",
        };
        assert_eq!(RangeDeletion::from_document(&task.to_document()), Ok(task));
        assert!(Decision::parse("maybe").is_err());
    }
}
