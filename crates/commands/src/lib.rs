//! MongoDB commands over Myriad's storage and query crates: one command table
//! ([`table::COMMANDS`]), one module per command under [`command`], and one error mapping
//! ([`error`]) from every layer's error enum to MongoDB's codes.
//!
//! Invariants:
//! - Every reply is a MongoDB reply shape: `ok: 1` with the command's fields, or
//!   `{ok: 0, errmsg, code, codeName}`. Nothing a client sends can panic a handler; unknown
//!   errors become InternalError (1).
//! - A command resolves namespaces through the storage engine's immutable catalog snapshot, so
//!   readers never wait on DDL.
//! - Every cursor, batch and log buffer is bounded.

// `CommandError` carries MongoDB's extra reply fields (a DuplicateKey's keyPattern and
// keyValue) by value, as every handler returns it; the larger `Err` is accepted, as in storage.
#![allow(clippy::result_large_err)]

pub mod access;
pub mod aggregate_server_state;
pub mod auth;
pub mod aggregate_sources;
pub mod backend;
pub mod bulk;
pub mod collation;
pub mod command;
pub mod context;
pub mod cursor;
pub mod error;
pub mod execution;
pub mod knobs;
pub mod latency;
pub mod log;
pub mod logical_sessions;
pub mod modify;
pub mod operation;
pub mod plan;
pub mod profiler;
pub mod reply;
pub mod request;
pub mod role;
pub mod session;
pub mod stages;
pub mod table;
pub mod topology;
pub mod ttl;
pub mod validation;
pub mod write;

pub use context::{Process, ServerContext, ServerOptions};
pub use session::ConnectionInfo;
pub use error::{CommandError, CommandResult};
pub use reply::Reply;
pub use request::CommandRequest;
pub use table::dispatch;
