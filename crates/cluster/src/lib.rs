//! A MongoDB-style sharded cluster: the config server role, the shard role and the router
//! (the equivalent of mongos), all run by the one `myriad` binary, plus `myriad cluster`, a
//! local cluster of child processes for development and tests.
//!
//! Layers, each in its own module:
//! - [`client`]: an async client over `myriad-wire` for the calls members make to each other;
//! - [`catalog`]: the sharding catalog's documents, reads of it from the config server, and the
//!   routing cache (immutable snapshots over `myriad-routing`'s chunk map, swapped in by
//!   incremental, coalesced refreshes);
//! - [`config_server`]: the catalog's owner and its internal `_configsvr*` commands;
//! - [`shard`]: the version check, StaleConfig and the orphan filter of a shard;
//! - [`shard_role`]: the shard role's command hook, which wires the shard's state, its
//!   migrations and its auto-splitter together;
//! - [`router`]: the router's listener, command table, targeting, forwarding and merging;
//! - [`migration`]: chunk migration on shards (clone, capture, critical section, range
//!   deletion, recovery), and [`auto_split`], shards splitting chunks past the chunk size;
//! - [`balancer`]: the config server's balancer and its catalog changes (migration commit,
//!   merge, shard removal);
//! - [`launcher`]: `myriad cluster` and `myriad replset` (local clusters and replica sets of
//!   child processes).
//!
//! Invariants (docs/design-cluster.md, "Sharded cluster", has the protocol):
//! - Every versioned request from a router to a shard carries the shard version of one
//!   routing snapshot; a shard runs it only if that is exactly its own version, and otherwise
//!   refuses it with StaleConfig (13388) before anything runs, so retrying is always safe.
//! - A refresh never blocks an operation that has a snapshot: snapshots are swapped atomically
//!   and operations keep the one they started with.
//! - Refreshes cost O(changed chunks · log N): the catalog index on `(uuid, lastmod)` finds the
//!   changed chunks, and the chunk map applies them by copying only their paths.
//! - Every buffer is bounded: router cursors (count, bytes per cursor and in total), idle
//!   connections per node, cached namespaces.
//! - Errors are [`error::ClusterError`], mapped once to MongoDB's codes.

// Errors carry MongoDB's extra reply fields by value, as the command layer's do.
#![allow(clippy::result_large_err)]

pub mod auto_split;
pub mod balancer;
pub mod catalog;
pub mod client;
pub mod cluster_clock;
pub mod config_server;
pub mod coordinator;
pub mod error;
pub mod launcher;
pub mod local;
pub mod member_security;
pub mod migration;
pub mod router;
pub mod shard;
pub mod shard_role;
pub mod version;

pub use error::{ClusterError, ClusterResult};
