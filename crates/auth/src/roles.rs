//! Privileges: resources, MongoDB's built-in roles, and the resolution of a user's roles
//! (built-in and custom, with inheritance) into the privileges they grant.

use std::collections::{HashSet, VecDeque};

use bson::{doc, Bson, Document};

use crate::store;
use crate::store::UserStore;
use myriad_reply::error::CommandResult;

/// What a privilege applies to, as MongoDB's resource patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pattern {
    AnyResource,
    Cluster,
    /// `{db: "", collection: ""}`: every database and its non-system collections.
    AnyNormal,
    /// `{db: X, collection: ""}`: database X and its non-system collections.
    Database(String),
    /// `{db: "", collection: C}`: collection C in every database.
    CollectionInAnyDatabase(String),
    Exact(String, String),
}

/// What a command touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Cluster,
    Database(String),
    Collection(String, String),
}

impl Pattern {
    pub fn matches(&self, target: &Target) -> bool {
        let normal = |collection: &str| !collection.starts_with("system.");
        match (self, target) {
            (Pattern::AnyResource, _) => true,
            (Pattern::Cluster, Target::Cluster) => true,
            (Pattern::AnyNormal, Target::Database(_)) => true,
            (Pattern::AnyNormal, Target::Collection(_, collection)) => normal(collection),
            (Pattern::Database(db), Target::Database(target_db)) => db == target_db,
            (Pattern::Database(db), Target::Collection(target_db, collection)) => db == target_db && normal(collection),
            (Pattern::CollectionInAnyDatabase(name), Target::Collection(_, collection)) => name == collection,
            (Pattern::Exact(db, name), Target::Collection(target_db, collection)) => db == target_db && name == collection,
            _ => false,
        }
    }

    pub fn from_document(resource: &Document) -> Option<Pattern> {
        if resource.get_bool("anyResource") == Ok(true) {
            return Some(Pattern::AnyResource);
        }
        if resource.get_bool("cluster") == Ok(true) {
            return Some(Pattern::Cluster);
        }
        let db = resource.get_str("db").ok()?;
        let collection = resource.get_str("collection").ok()?;
        Some(match (db, collection) {
            ("", "") => Pattern::AnyNormal,
            (db, "") => Pattern::Database(db.to_string()),
            ("", collection) => Pattern::CollectionInAnyDatabase(collection.to_string()),
            (db, collection) => Pattern::Exact(db.to_string(), collection.to_string()),
        })
    }

    pub fn to_document(&self) -> Document {
        match self {
            Pattern::AnyResource => doc! { "anyResource": true },
            Pattern::Cluster => doc! { "cluster": true },
            Pattern::AnyNormal => doc! { "db": "", "collection": "" },
            Pattern::Database(db) => doc! { "db": db, "collection": "" },
            Pattern::CollectionInAnyDatabase(collection) => doc! { "db": "", "collection": collection },
            Pattern::Exact(db, collection) => doc! { "db": db, "collection": collection },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Privilege {
    pub pattern: Pattern,
    pub actions: Vec<String>,
}

impl Privilege {
    fn new(pattern: Pattern, actions: &[&str]) -> Privilege {
        Privilege { pattern, actions: actions.iter().map(|action| action.to_string()).collect() }
    }

    pub fn allows(&self, target: &Target, action: &str) -> bool {
        self.actions.iter().any(|held| held == action) && self.pattern.matches(target)
    }

    pub fn from_document(document: &Document) -> Option<Privilege> {
        let pattern = Pattern::from_document(document.get_document("resource").ok()?)?;
        let actions = document.get_array("actions").ok()?.iter().filter_map(|action| action.as_str().map(str::to_string)).collect();
        Some(Privilege { pattern, actions })
    }

    pub fn to_document(&self) -> Document {
        doc! { "resource": self.pattern.to_document(), "actions": self.actions.clone() }
    }
}

const READ: &[&str] = &["changeStream", "collStats", "dbHash", "dbStats", "find", "killCursors", "listCollections", "listIndexes", "listSearchIndexes"];
const WRITE: &[&str] = &["convertToCapped", "createCollection", "createIndex", "dropCollection", "dropIndex", "insert", "remove", "renameCollectionSameDB", "update"];
const DB_ADMIN: &[&str] = &[
    "bypassDocumentValidation", "collMod", "collStats", "compact", "convertToCapped", "createCollection", "createIndex", "dbStats",
    "dropCollection", "dropDatabase", "dropIndex", "enableProfiler", "listCollections", "listIndexes", "planCacheIndexFilter",
    "planCacheRead", "planCacheWrite", "reIndex", "renameCollectionSameDB", "storageDetails", "validate",
];
const USER_ADMIN: &[&str] = &[
    "changeCustomData", "changePassword", "createRole", "createUser", "dropRole", "dropUser", "grantRole", "revokeRole",
    "setAuthenticationRestriction", "viewRole", "viewUser",
];
const CLUSTER_MONITOR: &[&str] = &["connPoolStats", "getCmdLineOpts", "getLog", "getParameter", "hostInfo", "inprog", "listDatabases", "listSessions", "netstat", "serverStatus", "top"];
const HOST_MANAGER: &[&str] = &["fsync", "killAnyCursor", "killAnySession", "killop", "logRotate", "setParameter", "shutdown", "flushRouterConfig", "invalidateUserCache"];

/// The sharding actions clusterManager grants: on the cluster, and on every normal resource.
const SHARDING_CLUSTER: &[&str] = &["addShard", "removeShard", "listShards", "balancer"];
const SHARDING_NAMESPACES: &[&str] = &["enableSharding", "splitChunk", "moveChunk", "getShardVersion"];

/// Actions outside the built-in roles' lists that custom roles may still name.
const OTHER_ACTIONS: &[&str] = &["anyAction", "authSchemaUpgrade", "indexStats", "getShardMap", "replSetGetStatus", "replSetGetConfig", "checkFreeMonitoringStatus"];

/// Whether `action` is one Myriad knows (custom roles may name only these).
pub fn is_action(action: &str) -> bool {
    [READ, WRITE, DB_ADMIN, USER_ADMIN, CLUSTER_MONITOR, HOST_MANAGER, SHARDING_CLUSTER, SHARDING_NAMESPACES, OTHER_ACTIONS].iter().any(|list| list.contains(&action))
        || ["listSessions", "compact", "killCursors", "enableProfiler", "dropDatabase", "listDatabases"].contains(&action)
}

/// The roles MongoDB defines in every database.
pub const DATABASE_ROLES: &[&str] = &["read", "readWrite", "dbAdmin", "dbOwner", "userAdmin"];
/// The roles MongoDB defines in admin only.
pub const ADMIN_ROLES: &[&str] = &[
    "clusterMonitor", "clusterManager", "hostManager", "clusterAdmin", "readAnyDatabase", "readWriteAnyDatabase",
    "userAdminAnyDatabase", "dbAdminAnyDatabase", "backup", "restore", "root",
];

/// `$external` holds users only: no role is built in there (mongod's RoleGraph agrees).
pub fn is_builtin(role: &str, db: &str) -> bool {
    db != crate::EXTERNAL && (DATABASE_ROLES.contains(&role) || (db == "admin" && ADMIN_ROLES.contains(&role)))
}

/// A built-in role's own privileges and the built-in roles it includes.
fn builtin(role: &str, db: &str) -> Option<(Vec<Privilege>, Vec<&'static str>)> {
    if !is_builtin(role, db) {
        return None;
    }
    let on_db = || Pattern::Database(db.to_string());
    let profile = || Pattern::Exact(db.to_string(), "system.profile".to_string());
    Some(match role {
        "read" => (vec![Privilege::new(on_db(), READ), Privilege::new(Pattern::Exact(db.to_string(), "system.js".into()), READ)], vec![]),
        "readWrite" => (vec![Privilege::new(on_db(), &[READ, WRITE].concat())], vec![]),
        "dbAdmin" => (vec![Privilege::new(on_db(), DB_ADMIN), Privilege::new(profile(), &["find", "collStats", "dropCollection", "createCollection", "listIndexes"])], vec![]),
        "userAdmin" => (vec![Privilege::new(on_db(), USER_ADMIN)], vec![]),
        "dbOwner" => (vec![], vec!["readWrite", "dbAdmin", "userAdmin"]),
        _ if db != "admin" => return None,
        "clusterMonitor" => (vec![
            Privilege::new(Pattern::Cluster, CLUSTER_MONITOR),
            Privilege::new(Pattern::AnyNormal, &["collStats", "dbStats", "indexStats"]),
            Privilege::new(Pattern::CollectionInAnyDatabase("system.profile".into()), &["find"]),
        ], vec![]),
        "hostManager" => (vec![Privilege::new(Pattern::Cluster, HOST_MANAGER)], vec![]),
        "clusterManager" => (vec![
            Privilege::new(Pattern::Cluster, &[&["listSessions", "killAnySession", "compact"], SHARDING_CLUSTER].concat()),
            Privilege::new(Pattern::AnyNormal, &[&["enableProfiler", "killCursors"], SHARDING_NAMESPACES].concat()),
        ], vec![]),
        "clusterAdmin" => (vec![Privilege::new(Pattern::AnyNormal, &["dropDatabase"])], vec!["clusterManager", "clusterMonitor", "hostManager"]),
        "readAnyDatabase" => (vec![Privilege::new(Pattern::AnyNormal, READ), Privilege::new(Pattern::Cluster, &["listDatabases"])], vec![]),
        "readWriteAnyDatabase" => (vec![Privilege::new(Pattern::AnyNormal, &[READ, WRITE].concat()), Privilege::new(Pattern::Cluster, &["listDatabases"])], vec![]),
        "userAdminAnyDatabase" => (vec![
            Privilege::new(Pattern::AnyNormal, USER_ADMIN),
            Privilege::new(Pattern::Cluster, &["authSchemaUpgrade", "invalidateUserCache", "listDatabases"]),
            Privilege::new(Pattern::Exact("admin".into(), store::USERS_COLLECTION.into()), &["find", "insert", "update", "remove", "createIndex", "dropIndex"]),
            Privilege::new(Pattern::Exact("admin".into(), store::ROLES_COLLECTION.into()), &["find", "insert", "update", "remove", "createIndex", "dropIndex"]),
        ], vec![]),
        "dbAdminAnyDatabase" => (vec![Privilege::new(Pattern::AnyNormal, DB_ADMIN), Privilege::new(Pattern::Cluster, &["listDatabases"]), Privilege::new(Pattern::CollectionInAnyDatabase("system.profile".into()), &["find", "collStats", "dropCollection"])], vec![]),
        "backup" => (vec![
            Privilege::new(Pattern::AnyNormal, &["find", "listCollections", "listIndexes", "collStats", "dbStats"]),
            Privilege::new(Pattern::Cluster, &["listDatabases", "serverStatus", "getParameter"]),
            Privilege::new(Pattern::Exact("admin".into(), store::USERS_COLLECTION.into()), &["find"]),
            Privilege::new(Pattern::Exact("admin".into(), store::ROLES_COLLECTION.into()), &["find"]),
        ], vec![]),
        "restore" => (vec![
            Privilege::new(Pattern::AnyNormal, &[
                "bypassDocumentValidation", "changeCustomData", "changePassword", "collMod", "convertToCapped", "createCollection", "createIndex",
                "createRole", "createUser", "dropCollection", "dropRole", "dropUser", "grantRole", "insert", "listCollections", "revokeRole", "viewRole", "viewUser",
            ]),
            Privilege::new(Pattern::Cluster, &["listDatabases", "getParameter"]),
        ], vec![]),
        "root" => (vec![Privilege::new(Pattern::AnyResource, &["anyAction"])], vec![]),
        _ => return None,
    })
}

/// `{role, db}` pairs from a `roles` array (strings name roles of `default_db`).
pub fn role_names(roles: &[Bson], default_db: &str) -> Vec<(String, String)> {
    roles
        .iter()
        .filter_map(|role| match role {
            Bson::String(name) => Some((name.clone(), default_db.to_string())),
            Bson::Document(document) => Some((document.get_str("role").ok()?.to_string(), document.get_str("db").ok()?.to_string())),
            _ => None,
        })
        .collect()
}

/// At most this many roles are followed from one user (cycles and huge graphs stop here).
const MAX_ROLES_RESOLVED: usize = 1000;

/// What a set of roles grants: every role reached (direct and inherited) and their privileges.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    pub roles: Vec<(String, String)>,
    pub privileges: Vec<Privilege>,
}

impl Resolved {
    /// The internal user's privileges (`__system`): every action on every resource.
    pub fn internal_system() -> Resolved {
        Resolved { roles: vec![("__system".to_string(), "admin".to_string())], privileges: vec![Privilege::new(Pattern::AnyResource, &["anyAction"])] }
    }

    pub fn allows(&self, target: &Target, action: &str) -> bool {
        self.privileges.iter().any(|privilege| {
            (privilege.pattern == Pattern::AnyResource && privilege.actions.iter().any(|held| held == "anyAction")) || privilege.allows(target, action)
        })
    }

    /// Whether some privilege reaches into database `db` (mongod's
    /// `isAuthorizedForAnyActionOnAnyResourceInDB`, which listDatabases' `authorizedDatabases`
    /// filters by): on any resource, any normal resource, the database, a collection of it, or
    /// a collection name in every database. A cluster privilege reaches no database.
    pub fn reaches_database(&self, db: &str) -> bool {
        self.privileges.iter().filter(|privilege| !privilege.actions.is_empty()).any(|privilege| match &privilege.pattern {
            Pattern::AnyResource | Pattern::AnyNormal | Pattern::CollectionInAnyDatabase(_) => true,
            Pattern::Database(name) | Pattern::Exact(name, _) => name == db,
            Pattern::Cluster => false,
        })
    }
}

pub fn resolve(users: &dyn UserStore, direct: &[(String, String)]) -> CommandResult<Resolved> {
    let mut resolved = Resolved::default();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let mut pending: VecDeque<(String, String)> = direct.iter().cloned().collect();
    while let Some((role, db)) = pending.pop_front() {
        if seen.len() >= MAX_ROLES_RESOLVED || !seen.insert((role.clone(), db.clone())) {
            continue;
        }
        if let Some((privileges, included)) = builtin(&role, &db) {
            resolved.privileges.extend(privileges);
            pending.extend(included.into_iter().map(|name| (name.to_string(), db.clone())));
        } else if let Some(custom) = users.get(store::ROLES_COLLECTION, &store::document_id(&db, &role))? {
            let privileges = custom.get_array("privileges").map(|list| list.as_slice()).unwrap_or(&[]);
            resolved.privileges.extend(privileges.iter().filter_map(|privilege| privilege.as_document().and_then(Privilege::from_document)));
            pending.extend(role_names(custom.get_array("roles").map(|list| list.as_slice()).unwrap_or(&[]), &db));
        } else {
            continue;
        }
        resolved.roles.push((role, db));
    }
    Ok(resolved)
}

/// Whether a role exists (built-in or in admin.system.roles).
pub fn exists(users: &dyn UserStore, role: &str, db: &str) -> CommandResult<bool> {
    Ok(is_builtin(role, db) || users.get(store::ROLES_COLLECTION, &store::document_id(db, role))?.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collection(db: &str, name: &str) -> Target {
        Target::Collection(db.to_string(), name.to_string())
    }

    #[test]
    fn builtin_roles_grant_their_actions_on_their_scope() {
        let (read, _) = builtin("read", "shop").expect("read exists everywhere");
        let resolved = Resolved { roles: vec![], privileges: read };
        assert!(resolved.allows(&collection("shop", "orders"), "find"));
        assert!(!resolved.allows(&collection("shop", "orders"), "insert"));
        assert!(!resolved.allows(&collection("other", "orders"), "find"));
        assert!(!resolved.allows(&collection("shop", "system.users"), "find"));
        assert!(builtin("root", "shop").is_none());
        let (root, _) = builtin("root", "admin").expect("root exists in admin");
        assert!(Resolved { roles: vec![], privileges: root }.allows(&Target::Cluster, "shutdown"));
    }

    #[test]
    fn patterns_round_trip_and_skip_system_collections() {
        for pattern in [Pattern::AnyResource, Pattern::Cluster, Pattern::AnyNormal, Pattern::Database("a".into()), Pattern::CollectionInAnyDatabase("c".into()), Pattern::Exact("a".into(), "c".into())] {
            assert_eq!(Pattern::from_document(&pattern.to_document()), Some(pattern));
        }
        assert!(Pattern::AnyNormal.matches(&collection("a", "c")));
        assert!(!Pattern::AnyNormal.matches(&collection("a", "system.profile")));
        assert!(!Pattern::Database("a".into()).matches(&Target::Cluster));
    }
}
