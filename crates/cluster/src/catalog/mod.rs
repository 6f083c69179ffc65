//! What routers and shards share about the sharding catalog: its documents, reads of it from
//! the config server, immutable routing snapshots and the cache that refreshes them.

pub mod cache;
pub mod documents;
pub mod loader;
pub mod presplit;
pub mod snapshot;

pub use cache::{CatalogCache, RefreshLog, RefreshRecord};
pub use snapshot::{RoutingInfo, ShardedCollection};
