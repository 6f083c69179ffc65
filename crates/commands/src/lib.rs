//! MongoDB's commands: one command table ([`table::COMMANDS`]) with its dispatcher, and one
//! module per command under [`command`]. Everything a handler runs on lives in the crates
//! below this one, each depending only on those before it: myriad-reply (replies and the one
//! error mapping), myriad-auth (identities, SCRAM, privileges), myriad-execution (requests,
//! context, access checks, planning, execution, cursors, operations, profiler, write paths).
//!
//! Invariants:
//! - Every reply is a MongoDB reply shape: `ok: 1` with the command's fields, or
//!   `{ok: 0, errmsg, code, codeName}`. Nothing a client sends can panic a handler; unknown
//!   errors become InternalError (1).
//! - Nothing below this crate names a handler or the table: what depends on a command's
//!   identity (its privileges, its latency class) is decided here and passed down.
//!
//! Old paths: the modules that moved to the crates below are re-exported here under their old
//! names (`myriad_commands::cursor`, `myriad_commands::error`, `myriad_commands::auth`, ...),
//! so the handlers and the crates above (server, cluster, testkit, bench) name them as before.
//! New code may name the owning crate directly.

// `CommandError` carries MongoDB's extra reply fields (a DuplicateKey's keyPattern and
// keyValue) by value, as every handler returns it; the larger `Err` is accepted, as in storage.
#![allow(clippy::result_large_err)]

pub mod command;
pub mod table;

pub use myriad_auth as auth;
pub use myriad_execution::{
    access, aggregate_server_state, aggregate_sources, backend, bulk, cluster_time, collation,
    command_class, context, cursor, execution, fail_point, generic_arguments, knobs, latency,
    let_variables, log, logical_sessions, member_write_concern, modify, operation, plan, profiler,
    request, retryable, role, session, snapshot_read, stages, system_databases, topology, transaction_statements,
    transactions, ttl,
    validation, write,
};
pub use myriad_reply::{error, reply};

pub use myriad_execution::{CommandRequest, ConnectionInfo, Process, ServerContext, ServerOptions};
pub use myriad_reply::{CommandError, CommandResult, Reply};
pub use table::dispatch;
