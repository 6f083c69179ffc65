//! What a command answers, below every command layer: a reply body ([`Reply`], and the cursor
//! reply built from documents already encoded, in [`reply`]) and the one error mapping
//! ([`error`]) from every layer's error enum (storage, query, wire) to MongoDB's codes.
//!
//! Invariants:
//! - Every reply is a MongoDB reply shape: `ok: 1` with the command's fields, or
//!   `{ok: 0, errmsg, code, codeName}`; a code's `codeName` comes from myriad-error-codes.
//! - Anything not mapped in [`error`] is InternalError (1).
//! - This crate depends on no command layer (auth, execution, handlers); they all depend on it.

// `CommandError` carries MongoDB's extra reply fields (a DuplicateKey's keyPattern and
// keyValue) by value, as every handler returns it; the larger `Err` is accepted, as in storage.
#![allow(clippy::result_large_err)]

pub mod error;
pub mod reply;

pub use error::{CommandError, CommandResult};
pub use reply::Reply;
