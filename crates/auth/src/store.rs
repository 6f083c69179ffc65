//! Where users and roles are kept: the [`UserStore`] every user, role and authentication
//! command reads and writes through, and the layout MongoDB gives `admin.system.users` and
//! `admin.system.roles`: one document per user (`_id: "<db>.<user>"`) or role
//! (`_id: "<db>.<role>"`).
//!
//! Writers of one collection are serialised by the caller's lock
//! ([`crate::Security::change_lock`]), so a read-check-write sequence (createUser's "already
//! exists") cannot race another.

use bson::Document;

use myriad_reply::error::CommandResult;

/// Where a process keeps its users and roles: a node in its own `admin.system.users` and
/// `admin.system.roles` (myriad-execution's `LocalUserStore`); a router in the config
/// server's, as mongos does (crates/cluster implements that one). Every user, role and authentication command reads
/// and writes through this, so the node and the router share their code.
pub trait UserStore: Send + Sync {
    /// The document with `_id: id` of `collection` ([`USERS_COLLECTION`] or [`ROLES_COLLECTION`]).
    fn get(&self, collection: &str, id: &str) -> CommandResult<Option<Document>>;
    /// Every document of the collection (at most [`MAX_LISTED`]).
    fn all(&self, collection: &str) -> CommandResult<Vec<Document>>;
    /// Whether the collection holds at least one document.
    fn any(&self, collection: &str) -> CommandResult<bool>;
    /// Inserts a document, journaled before it returns (so is every change).
    fn insert(&self, collection: &str, document: &Document) -> CommandResult<()>;
    /// Replaces the document with `_id: id`; false when there is none.
    fn replace(&self, collection: &str, id: &str, new: &Document) -> CommandResult<bool>;
    /// Deletes the documents with these `_id`s; returns how many there were.
    fn delete(&self, collection: &str, ids: &[String]) -> CommandResult<usize>;
}

pub const ADMIN: &str = "admin";
pub const USERS_COLLECTION: &str = "system.users";
pub const ROLES_COLLECTION: &str = "system.roles";
/// At most this many users or roles are read by one listing (usersInfo, rolesInfo).
pub const MAX_LISTED: usize = 100_000;

/// `<db>.<name>`, the `_id` of a user or role document.
pub fn document_id(db: &str, name: &str) -> String {
    format!("{db}.{name}")
}
