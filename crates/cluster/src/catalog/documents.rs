//! The catalog's documents (`config.shards`, `config.databases`, `config.collections`,
//! `config.chunks`), with their BSON forms as MongoDB 7 stores them.

use bson::oid::ObjectId;
use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, DateTime, Document, RawDocument, Timestamp};
use myriad_routing::ShardKeyPattern;

use crate::error::{ClusterError, ClusterResult};

pub const CONFIG_DB: &str = "config";
pub const SHARDS: &str = "shards";
pub const DATABASES: &str = "databases";
pub const COLLECTIONS: &str = "collections";
pub const CHUNKS: &str = "chunks";
pub const SETTINGS: &str = "settings";
pub const VERSION: &str = "version";
pub const MONGOS: &str = "mongos";

fn malformed(what: &str, document: &Document) -> ClusterError {
    ClusterError::coded(crate::error::OPERATION_FAILED, format!("malformed {what} in the catalog: {document}"))
}

/// A `config.shards` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardEntry {
    pub name: String,
    pub host: String,
}

impl ShardEntry {
    pub fn to_document(&self, topology_time: Timestamp) -> Document {
        doc! { "_id": &self.name, "host": &self.host, "state": 1, "topologyTime": topology_time }
    }

    pub fn from_document(document: &Document) -> ClusterResult<ShardEntry> {
        let (Ok(name), Ok(host)) = (document.get_str("_id"), document.get_str("host")) else {
            return Err(malformed("shard", document));
        };
        Ok(ShardEntry { name: name.to_string(), host: host.to_string() })
    }
}

/// A `config.databases` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseEntry {
    pub name: String,
    /// The shard holding the database's unsharded collections.
    pub primary: String,
}

impl DatabaseEntry {
    pub fn to_document(&self, timestamp: Timestamp) -> Document {
        doc! {
            "_id": &self.name,
            "primary": &self.primary,
            "version": { "uuid": new_uuid(), "timestamp": timestamp, "lastMod": 1 },
        }
    }

    pub fn from_document(document: &Document) -> ClusterResult<DatabaseEntry> {
        let (Ok(name), Ok(primary)) = (document.get_str("_id"), document.get_str("primary")) else {
            return Err(malformed("database", document));
        };
        Ok(DatabaseEntry { name: name.to_string(), primary: primary.to_string() })
    }
}

/// A `config.collections` entry: one sharded collection's incarnation.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectionEntry {
    pub namespace: String,
    pub key: Document,
    pub unique: bool,
    pub epoch: ObjectId,
    pub timestamp: Timestamp,
    /// The cluster-wide id of this incarnation (chunks name it).
    pub uuid: Binary,
    pub last_modified: DateTime,
}

impl CollectionEntry {
    pub fn to_document(&self) -> Document {
        doc! {
            "_id": &self.namespace,
            "lastmodEpoch": self.epoch,
            "lastmod": self.last_modified,
            "timestamp": self.timestamp,
            "uuid": self.uuid.clone(),
            "key": self.key.clone(),
            "unique": self.unique,
            "noBalance": false,
        }
    }

    pub fn from_document(document: &Document) -> ClusterResult<CollectionEntry> {
        let namespace = document.get_str("_id").map_err(|_| malformed("collection", document))?;
        let key = document.get_document("key").map_err(|_| malformed("collection", document))?;
        let epoch = match document.get("lastmodEpoch").or_else(|| document.get("epoch")) {
            Some(Bson::ObjectId(epoch)) => *epoch,
            _ => return Err(malformed("collection", document)),
        };
        let Some(Bson::Timestamp(timestamp)) = document.get("timestamp") else {
            return Err(malformed("collection", document));
        };
        let Some(Bson::Binary(uuid)) = document.get("uuid") else {
            return Err(malformed("collection", document));
        };
        let last_modified = document.get_datetime("lastmod").copied().unwrap_or(DateTime::from_millis(0));
        Ok(CollectionEntry {
            namespace: namespace.to_string(),
            key: key.clone(),
            unique: document.get_bool("unique").unwrap_or(false),
            epoch,
            timestamp: *timestamp,
            uuid: uuid.clone(),
            last_modified,
        })
    }

    pub fn pattern(&self) -> ClusterResult<ShardKeyPattern> {
        Ok(ShardKeyPattern::from_document(&self.key)?)
    }

    /// `(db, collection)` of the namespace.
    pub fn split_namespace(&self) -> (&str, &str) {
        split_namespace(&self.namespace)
    }
}

/// A `config.chunks` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkEntry {
    pub id: ObjectId,
    pub uuid: Binary,
    pub min: Document,
    pub max: Document,
    pub shard: String,
    /// `major|minor` as Timestamp(major, minor).
    pub last_modified: Timestamp,
    pub on_current_shard_since: Timestamp,
}

impl ChunkEntry {
    pub fn to_document(&self) -> Document {
        doc! {
            "_id": self.id,
            "uuid": self.uuid.clone(),
            "min": self.min.clone(),
            "max": self.max.clone(),
            "shard": &self.shard,
            "lastmod": self.last_modified,
            "onCurrentShardSince": self.on_current_shard_since,
            "history": [{ "validAfter": self.on_current_shard_since, "shard": &self.shard }],
        }
    }

    pub fn from_document(document: &Document) -> ClusterResult<ChunkEntry> {
        let Some(Bson::ObjectId(id)) = document.get("_id") else { return Err(malformed("chunk", document)) };
        let Some(Bson::Binary(uuid)) = document.get("uuid") else { return Err(malformed("chunk", document)) };
        let (Ok(min), Ok(max), Ok(shard)) = (document.get_document("min"), document.get_document("max"), document.get_str("shard")) else {
            return Err(malformed("chunk", document));
        };
        let Some(Bson::Timestamp(last_modified)) = document.get("lastmod") else { return Err(malformed("chunk", document)) };
        let on_current_shard_since = match document.get("onCurrentShardSince") {
            Some(Bson::Timestamp(since)) => *since,
            _ => *last_modified,
        };
        Ok(ChunkEntry {
            id: *id,
            uuid: uuid.clone(),
            min: min.clone(),
            max: max.clone(),
            shard: shard.to_string(),
            last_modified: *last_modified,
            on_current_shard_since,
        })
    }

    pub fn placement(&self) -> (u32, u32) {
        (self.last_modified.time, self.last_modified.increment)
    }
}

/// The bound's values in shard key order (a catalog bound holds exactly the key's fields, under
/// their dotted names).
pub fn bound_values(pattern: &ShardKeyPattern, bound: &Document) -> ClusterResult<Vec<Bson>> {
    if bound.len() != pattern.fields().len() {
        return Err(ClusterError::bad_value(format!("bound {bound} does not have the shard key's fields")));
    }
    pattern
        .fields()
        .iter()
        .map(|(name, _)| bound.get(name).cloned().ok_or_else(|| ClusterError::bad_value(format!("bound {bound} lacks shard key field {name}"))))
        .collect()
}

/// The key string of a catalog bound.
pub fn bound_key(pattern: &ShardKeyPattern, bound: &Document) -> ClusterResult<Vec<u8>> {
    Ok(pattern.key_for_bound(&bound_values(pattern, bound)?)?)
}

/// The key string of a catalog bound read in place (a full load reads millions of them).
pub fn raw_bound_key(pattern: &ShardKeyPattern, bound: &RawDocument) -> ClusterResult<Vec<u8>> {
    let malformed = || ClusterError::bad_value(format!("bound {bound:?} does not have the shard key's fields"));
    if bound.iter().count() != pattern.fields().len() {
        return Err(malformed());
    }
    let mut values = Vec::with_capacity(pattern.fields().len());
    for (name, _) in pattern.fields() {
        let value = bound.get(name).ok().flatten().ok_or_else(malformed)?;
        values.push(Bson::try_from(value).map_err(|_| malformed())?);
    }
    Ok(pattern.key_for_bound(&values)?)
}

/// `{field: MinKey, ...}` (or MaxKey) for every field of the pattern.
pub fn global_bound(pattern: &ShardKeyPattern, value: Bson) -> Document {
    pattern.fields().iter().map(|(name, _)| (name.clone(), value.clone())).collect()
}

/// `(db, collection)`; the collection part may contain dots.
pub fn split_namespace(namespace: &str) -> (&str, &str) {
    namespace.split_once('.').unwrap_or((namespace, ""))
}

/// A random (version 4) UUID as BSON binary subtype 4.
pub fn new_uuid() -> Binary {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0F) | 0x40;
    bytes[8] = (bytes[8] & 0x3F) | 0x80;
    Binary { subtype: BinarySubtype::Uuid, bytes: bytes.to_vec() }
}

/// A cluster timestamp: seconds since the epoch and a counter, increasing within the process.
pub fn now_timestamp() -> Timestamp {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let seconds = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|elapsed| elapsed.as_secs()).unwrap_or(0);
    let candidate = seconds << 32 | 1;
    let mut previous = LAST.load(Ordering::Relaxed);
    loop {
        let next = candidate.max(previous + 1);
        match LAST.compare_exchange_weak(previous, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Timestamp { time: (next >> 32) as u32, increment: next as u32 },
            Err(actual) => previous = actual,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let uuid = new_uuid();
        let collection = CollectionEntry {
            namespace: "d.c".into(),
            key: doc! { "x": 1 },
            unique: true,
            epoch: ObjectId::new(),
            timestamp: now_timestamp(),
            uuid: uuid.clone(),
            last_modified: DateTime::now(),
        };
        assert_eq!(CollectionEntry::from_document(&collection.to_document()), Ok(collection));
        let chunk = ChunkEntry {
            id: ObjectId::new(),
            uuid,
            min: doc! { "x": Bson::MinKey },
            max: doc! { "x": 10 },
            shard: "shard0000".into(),
            last_modified: Timestamp { time: 1, increment: 3 },
            on_current_shard_since: now_timestamp(),
        };
        assert_eq!(ChunkEntry::from_document(&chunk.to_document()), Ok(chunk.clone()));
        assert_eq!(chunk.placement(), (1, 3));
        assert!(ShardEntry::from_document(&doc! { "_id": 1 }).is_err());
    }

    #[test]
    fn timestamps_increase_and_uuids_differ() {
        let first = now_timestamp();
        let second = now_timestamp();
        assert!((second.time, second.increment) > (first.time, first.increment));
        assert_ne!(new_uuid(), new_uuid());
        assert_eq!(new_uuid().bytes.len(), 16);
    }

    #[test]
    fn bounds_follow_the_pattern() {
        let pattern = ShardKeyPattern::from_document(&doc! { "a": 1, "b.c": 1 }).expect("pattern");
        let key = bound_key(&pattern, &doc! { "a": 5, "b.c": Bson::MinKey }).expect("bound");
        assert!(key > pattern.lowest_key() && key < pattern.highest_key());
        assert!(bound_key(&pattern, &doc! { "a": 5 }).is_err());
        assert_eq!(global_bound(&pattern, Bson::MinKey), doc! { "a": Bson::MinKey, "b.c": Bson::MinKey });
    }
}
