//! Which namespaces a client may write into or create, as mongod 7.0 decides
//! (`userAllowedWriteNS` and `userAllowedCreateNS`, `NamespaceString::isLegalClientSystemNS`).
//!
//! - `system.profile` and `system.views` are never written by clients (InvalidNamespace,
//!   "cannot write to db.coll"), nor is `local.oplog.rs` on a replica-set member. A client may
//!   still create `system.profile`.
//! - Other `system.*` collections are refused (InvalidNamespace, "Invalid system namespace:
//!   db.coll") unless they are client system collections: `system.users`, `system.js` and
//!   `system.views` in any database, `system.buckets.<valid name>`, `system.resharding.*`,
//!   `system.statistics.*`; `admin.system.{roles,version,keys,backup_users}`;
//!   `config.system.{sessions,indexBuilds,sharding_ddl_coordinators,preimages,change_collection}`;
//!   `local.system.{replset,healthlog,collections_to_restore}`.
//! - A collection name holding `.system.` elsewhere is BadValue ("Invalid namespace: db.coll"),
//!   but for `config.cache.chunks.*` and the legal `config` system collections.
//!
//! Only client commands are checked (insert, update, delete, findAndModify, bulkWrite,
//! createIndexes, create): the server's own writes (users, roles, the profiler, sessions,
//! the oplog, start-up documents) go to storage directly and never pass here.

use myriad_reply::error::{CommandError, CommandResult, BAD_VALUE, INVALID_NAMESPACE};

use crate::request::CommandRequest;

const SYSTEM_PREFIX: &str = "system.";

/// A client write (insert, update, delete, findAndModify, bulkWrite, createIndexes) into
/// `db.collection`; `replica_set` when this node is a replica-set member (its oplog is then
/// the replication log's). Refuses as mongod's `userAllowedWriteNS`.
pub fn check_client_write(db: &str, collection: &str, replica_set: bool) -> CommandResult<()> {
    let oplog = db == "local" && collection == "oplog.rs" && replica_set;
    if collection == "system.profile" || collection == "system.views" || oplog {
        return Err(CommandError::new(INVALID_NAMESPACE, format!("cannot write to {db}.{collection}")));
    }
    check_client_create(db, collection)
}

/// The collection a client write command names by its first field, refused as mongod
/// refuses client writes into it ([`check_client_write`]); `replica_set` when this node is a
/// replica-set member (a router passes false).
pub fn written_collection_name(request: &CommandRequest, replica_set: bool) -> CommandResult<String> {
    let name = request.collection_name()?;
    check_client_write(&request.db, &name, replica_set)?;
    Ok(name)
}

/// A collection a client creates, explicitly or by writing into it. Refuses as mongod's
/// `userAllowedCreateNS` (the name itself is checked where the command is parsed).
pub fn check_client_create(db: &str, collection: &str) -> CommandResult<()> {
    if collection == "system.profile" {
        return Ok(());
    }
    if collection.starts_with(SYSTEM_PREFIX) && !is_legal_client_system_namespace(db, collection) {
        return Err(CommandError::new(INVALID_NAMESPACE, format!("Invalid system namespace: {db}.{collection}")));
    }
    if collection.contains(".system.") {
        let cache_chunks = db == "config" && collection.starts_with("cache.chunks.");
        let legal_config = db == "config" && is_legal_client_system_namespace(db, collection);
        if !cache_chunks && !legal_config {
            return Err(CommandError::new(BAD_VALUE, format!("Invalid namespace: {db}.{collection}")));
        }
    }
    Ok(())
}

/// mongod's `isLegalClientSystemNS`: the `system.*` collections clients may write or create.
pub fn is_legal_client_system_namespace(db: &str, collection: &str) -> bool {
    let in_database = match db {
        "admin" => matches!(collection, "system.roles" | "system.version" | "system.keys" | "system.backup_users"),
        "config" => {
            matches!(
                collection,
                "system.sessions" | "system.indexBuilds" | "system.sharding_ddl_coordinators" | "system.preimages" | "system.change_collection"
            ) || collection.contains(".system.resharding.")
        }
        "local" => matches!(collection, "system.replset" | "system.healthlog" | "system.collections_to_restore"),
        _ => false,
    };
    in_database
        || matches!(collection, "system.users" | "system.js" | "system.views")
        || collection.starts_with("system.resharding.")
        || collection.starts_with("system.statistics.")
        || collection.strip_prefix("system.buckets.").is_some_and(is_valid_buckets_target)
}

/// The view name a `system.buckets.` collection is for: a valid collection name of its own.
fn is_valid_buckets_target(name: &str) -> bool {
    crate::request::validate_collection_name(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(result: CommandResult<()>) -> Option<i32> {
        result.err().map(|error| error.code)
    }

    #[test]
    fn writes_follow_mongods_rules() {
        assert_eq!(code(check_client_write("shop", "system.profile", false)), Some(73));
        assert_eq!(code(check_client_write("shop", "system.views", false)), Some(73));
        assert_eq!(code(check_client_write("shop", "system.foo", false)), Some(73));
        assert_eq!(code(check_client_write("shop", "a.system.b", false)), Some(2));
        assert_eq!(code(check_client_write("local", "oplog.rs", true)), Some(73));
        assert_eq!(code(check_client_write("local", "oplog.rs", false)), None);
        for (db, collection) in [
            ("shop", "system.js"),
            ("shop", "system.users"),
            ("shop", "system.buckets.weather"),
            ("admin", "system.roles"),
            ("admin", "system.version"),
            ("config", "system.sessions"),
            ("config", "cache.chunks.config.system.sessions"),
            ("local", "system.replset"),
            ("shop", "things"),
        ] {
            assert_eq!(code(check_client_write(db, collection, true)), None, "{db}.{collection}");
        }
        assert_eq!(code(check_client_write("shop", "system.buckets.", false)), Some(73));
        assert_eq!(code(check_client_write("shop", "system.roles", false)), Some(73));
    }

    #[test]
    fn creation_allows_the_profile_and_views() {
        assert_eq!(code(check_client_create("shop", "system.profile")), None);
        assert_eq!(code(check_client_create("shop", "system.views")), None);
        assert_eq!(code(check_client_create("shop", "system.other")), Some(73));
    }
}
