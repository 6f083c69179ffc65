//! The machinery every command handler runs on, and no handler: request parsing
//! ([`request`]), the server's shared state ([`context`]) and connection state ([`session`]),
//! the authorization check ([`access`]) and the server role ([`role`]), the data seam
//! ([`backend`]), query planning ([`plan`]) and execution ([`execution`], [`stages`]), cursors
//! ([`cursor`]), operation control and currentOp ([`operation`]), the profiler
//! ([`profiler`]), the write paths shared by insert, update, delete, findAndModify and
//! bulkWrite ([`write`](mod@write), [`bulk`], [`modify`], [`validation`]), TTL deletion ([`ttl`]),
//! aggregation's server-state sources, collation, the log, knobs, latency counters and the
//! topology version.
//!
//! Invariants:
//! - Nothing here imports a command handler or the command table (myriad-commands): the
//!   layering is myriad-reply, myriad-auth, myriad-execution, myriad-commands, each depending
//!   only on those before it. What depends on a command's identity (its latency class, its
//!   privileges) is passed down by the table.
//! - A command resolves namespaces through the storage engine's immutable catalog snapshot, so
//!   readers never wait on DDL.
//! - Every cursor, batch and log buffer is bounded.

// `CommandError` is returned by value, as everywhere in the command layers (see myriad-reply).
#![allow(clippy::result_large_err)]

pub mod access;
pub mod aggregate_server_state;
pub mod aggregate_sources;
pub mod backend;
pub mod bulk;
pub mod cluster_time;
pub mod collation;
pub mod command_class;
pub mod context;
pub mod cursor;
pub mod execution;
pub mod fail_point;
pub mod generic_arguments;
pub mod knobs;
pub mod latency;
pub mod let_variables;
pub mod local_users;
pub mod log;
pub mod logical_sessions;
pub mod member_write_concern;
pub mod modify;
pub mod namespace_rules;
pub mod operation;
pub mod plan;
pub mod profiler;
pub mod request;
pub mod retryable;
pub mod role;
pub mod session;
pub mod snapshot_read;
pub mod stages;
pub mod system_databases;
pub mod timeseries;
pub mod topology;
pub mod transaction_statements;
pub mod transactions;
pub mod ttl;
pub mod validation;
pub mod write;

pub use context::{Process, ServerContext, ServerOptions};
pub use request::CommandRequest;
pub use session::ConnectionInfo;
