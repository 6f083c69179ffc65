//! The shard's sharding state, below the shard role (`crate::shard_role`) and the migrations:
//! the shard identity, the routing snapshot each versioned request is checked against, the
//! orphan filter built from it, and the StaleConfig error a mismatch answers.

pub mod filter;
mod state;

use bson::doc;

use crate::error::ClusterError;
use crate::version::ShardVersion;

pub use state::{chunk_median, ShardIdentity, ShardingState};

/// `{ns, vReceived, vWanted?, shardId}`: what a StaleConfig reply carries.
pub fn stale_config(namespace: &str, received: &ShardVersion, wanted: Option<&ShardVersion>, shard: &str) -> ClusterError {
    let mut extra = doc! { "ns": namespace, "vReceived": received.to_document(), "shardId": shard };
    if let Some(wanted) = wanted {
        extra.insert("vWanted", wanted.to_document());
    }
    let wanted_text = wanted.map_or_else(|| "unknown".to_string(), ToString::to_string);
    ClusterError::StaleConfig {
        message: format!("version mismatch detected for {namespace}: received {received}, this shard has {wanted_text}"),
        extra,
    }
}
