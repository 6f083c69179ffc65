//! The shard version as it travels between routers and shards: MongoDB 7's
//! `shardVersion: {e: epoch, t: timestamp, v: Timestamp(major, minor)}`.

use std::fmt;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document, Timestamp};
use myriad_routing::ChunkVersion;

use crate::error::{ClusterError, ClusterResult};

/// A placement version (`major|minor`) of one incarnation (`epoch`, `timestamp`) of a
/// collection, or [`ShardVersion::UNSHARDED`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShardVersion {
    pub epoch: ObjectId,
    pub timestamp: Timestamp,
    pub major: u32,
    pub minor: u32,
}

impl ShardVersion {
    /// What routers send for a collection they believe unsharded (MongoDB's UNSHARDED).
    pub const UNSHARDED: ShardVersion =
        ShardVersion { epoch: ObjectId::from_bytes([0; 12]), timestamp: Timestamp { time: 0, increment: 0 }, major: 0, minor: 0 };

    pub fn is_unsharded(&self) -> bool {
        self.epoch.bytes() == [0; 12]
    }

    pub fn from_chunk_version(version: &ChunkVersion) -> ShardVersion {
        ShardVersion { epoch: version.epoch, timestamp: version.timestamp, major: version.major, minor: version.minor }
    }

    /// The version of a shard that owns no chunk of the collection.
    pub fn owning_nothing(epoch: ObjectId, timestamp: Timestamp) -> ShardVersion {
        ShardVersion { epoch, timestamp, major: 0, minor: 0 }
    }

    pub fn placement(&self) -> (u32, u32) {
        (self.major, self.minor)
    }

    /// Whether a command sent with this version may run against a shard at `wanted`: the same
    /// incarnation and the same major version (MongoDB's `isWriteCompatibleWith`). Only a
    /// migration moves data between shards, and every migration raises the major version of
    /// both shards involved; splits and merges raise the minor one and move nothing, so a
    /// router that missed them still targets the right shard.
    pub fn is_compatible_with(&self, wanted: &ShardVersion) -> bool {
        self.same_incarnation(wanted) && self.major == wanted.major
    }

    /// Same incarnation of the collection (epoch and timestamp).
    pub fn same_incarnation(&self, other: &ShardVersion) -> bool {
        self.epoch == other.epoch && self.timestamp == other.timestamp
    }

    /// `{e, t, v}`.
    pub fn to_document(&self) -> Document {
        doc! { "e": self.epoch, "t": self.timestamp, "v": Timestamp { time: self.major, increment: self.minor } }
    }

    /// Parses `{e, t, v}` (the older array form `[Timestamp, ObjectId]` is not accepted).
    pub fn parse(value: &Bson) -> ClusterResult<ShardVersion> {
        let Bson::Document(document) = value else {
            return Err(ClusterError::coded(crate::error::TYPE_MISMATCH, "shardVersion must be an object {e, t, v}"));
        };
        let epoch = match document.get("e") {
            Some(Bson::ObjectId(epoch)) => *epoch,
            _ => return Err(ClusterError::bad_value("shardVersion.e must be an ObjectId")),
        };
        let timestamp = match document.get("t") {
            Some(Bson::Timestamp(timestamp)) => *timestamp,
            _ => return Err(ClusterError::bad_value("shardVersion.t must be a Timestamp")),
        };
        let (major, minor) = match document.get("v") {
            Some(Bson::Timestamp(version)) => (version.time, version.increment),
            _ => return Err(ClusterError::bad_value("shardVersion.v must be a Timestamp")),
        };
        Ok(ShardVersion { epoch, timestamp, major, minor })
    }
}

impl fmt::Display for ShardVersion {
    /// `major|minor||epoch||Timestamp(t, i)`, as MongoDB's logs print a chunk version.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "{}|{}||{}||Timestamp({}, {})",
            self.major,
            self.minor,
            self.epoch.to_hex(),
            self.timestamp.time,
            self.timestamp.increment
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_round_trip_through_their_wire_form() {
        let version = ShardVersion { epoch: ObjectId::new(), timestamp: Timestamp { time: 7, increment: 2 }, major: 3, minor: 9 };
        assert_eq!(ShardVersion::parse(&Bson::Document(version.to_document())), Ok(version));
        assert!(ShardVersion::parse(&Bson::Document(ShardVersion::UNSHARDED.to_document())).is_ok_and(|parsed| parsed.is_unsharded()));
        assert!(ShardVersion::parse(&Bson::Int32(1)).is_err());
        assert!(ShardVersion::parse(&Bson::Document(doc! { "e": 1 })).is_err());
        assert!(version.to_string().starts_with("3|9||"));
    }

    #[test]
    fn a_minor_difference_is_compatible_a_major_or_incarnation_one_is_not() {
        let wanted = ShardVersion { epoch: ObjectId::new(), timestamp: Timestamp { time: 7, increment: 2 }, major: 3, minor: 9 };
        assert!(ShardVersion { minor: 1, ..wanted }.is_compatible_with(&wanted), "a router that missed a split");
        assert!(ShardVersion { minor: 12, ..wanted }.is_compatible_with(&wanted), "a shard that missed a split");
        assert!(!ShardVersion { major: 2, minor: 9, ..wanted }.is_compatible_with(&wanted), "a router that missed a migration");
        assert!(!ShardVersion { epoch: ObjectId::new(), ..wanted }.is_compatible_with(&wanted), "another incarnation");
        assert!(!ShardVersion { timestamp: Timestamp { time: 8, increment: 0 }, ..wanted }.is_compatible_with(&wanted));
        assert!(!ShardVersion::UNSHARDED.is_compatible_with(&wanted));
        let owning_nothing = ShardVersion::owning_nothing(wanted.epoch, wanted.timestamp);
        assert!(!wanted.is_compatible_with(&owning_nothing), "a shard that gave away its last chunk");
    }
}
