//! Authentication and authorization's vocabulary, below every command layer: identities
//! ([`UserName`], the internal user, `$external`), credentials and SCRAM ([`scram`],
//! [`scram_client`]), where users and roles are kept ([`store`]: the [`store::UserStore`] seam
//! a node and a router implement), privileges and roles ([`roles`]), and the server's
//! authentication state ([`Security`]). The check the dispatcher makes before every handler is
//! myriad-execution's `access`.
//!
//! Invariants:
//! - This crate knows nothing of storage, requests or handlers: it depends only on
//!   myriad-reply (its errors) and reads users and roles through [`store::UserStore`].
//! - Resolved privileges are cached per user, bounded, and dropped on every user or role change
//!   made through this process; a router also re-reads them after
//!   [`ROUTER_USER_CACHE_LIFETIME`], since another router may have changed them.
//! - Failed logins are rate-limited per client address with a bounded table.

// `CommandError` is returned by value, as everywhere in the command layers (see myriad-reply).
#![allow(clippy::result_large_err)]

pub mod rate_limit;
pub mod roles;
pub mod scram;
pub mod scram_client;
pub mod store;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use myriad_reply::error::{CommandResult, ErrorCode};
use roles::Resolved;

pub const AUTHENTICATION_FAILED: ErrorCode = ErrorCode::new(18);
pub const USER_NOT_FOUND: ErrorCode = ErrorCode::new(11);
pub const ROLE_NOT_FOUND: ErrorCode = ErrorCode::new(31);
pub const MECHANISM_UNAVAILABLE: ErrorCode = ErrorCode::new(334);
pub const USER_ALREADY_EXISTS: ErrorCode = ErrorCode::new(51003);

/// The cluster's internal user (`__system@local`), which members authenticate as with the
/// keyfile's secret (`--keyFile`), as MongoDB's internal authentication.
pub const INTERNAL_USER: &str = "__system";
pub const INTERNAL_DATABASE: &str = "local";

/// The database of users that authenticate outside Myriad (X.509 certificates).
pub const EXTERNAL: &str = "$external";

/// A keyfile's secret is 6 to 1024 base64 characters once whitespace is removed (mongod's rule).
const KEY_FILE_MIN_CHARACTERS: usize = 6;
const KEY_FILE_MAX_CHARACTERS: usize = 1024;

/// Reads a keyfile (`--keyFile`) as mongod does: whitespace is ignored, the rest must be 6 to
/// 1024 base64 characters, and on Unix the file must not be readable by group or others.
pub fn read_key_file(path: &str) -> Result<String, String> {
    let metadata = std::fs::metadata(path).map_err(|error| format!("cannot read the keyfile {path}: {error}"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if metadata.permissions().mode() & 0o077 != 0 {
            return Err(format!("permissions on {path} are too open"));
        }
    }
    let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read the keyfile {path}: {error}"))?;
    let key: String = text.chars().filter(|character| !character.is_whitespace()).collect();
    if !(KEY_FILE_MIN_CHARACTERS..=KEY_FILE_MAX_CHARACTERS).contains(&key.len()) {
        return Err(format!("the keyfile {path} must hold {KEY_FILE_MIN_CHARACTERS} to {KEY_FILE_MAX_CHARACTERS} characters, not {}", key.len()));
    }
    if let Some(bad) = key.chars().find(|character| !(character.is_ascii_alphanumeric() || *character == '+' || *character == '/' || *character == '=')) {
        return Err(format!("the keyfile {path} holds '{bad}', which is not a base64 character"));
    }
    Ok(key)
}

/// How long a router trusts a user's cached privileges (mongos's
/// `userCacheInvalidationIntervalSecs` default): a change made through another router is
/// enforced here at most this much later.
pub const ROUTER_USER_CACHE_LIFETIME: std::time::Duration = std::time::Duration::from_secs(30);

/// At most this many users' resolved privileges are cached.
const MAX_CACHED_USERS: usize = 10_000;

/// A user authenticated on a connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UserName {
    pub user: String,
    pub db: String,
}

impl UserName {
    pub fn new(user: &str, db: &str) -> UserName {
        UserName { user: user.to_string(), db: db.to_string() }
    }

    pub fn full_name(&self) -> String {
        format!("{}@{}", self.user, self.db)
    }
}

/// The server's authentication state: on or off, the privilege cache, the failed-login limiter.
#[derive(Default)]
pub struct Security {
    enabled: AtomicBool,
    /// Each user's resolution and when it was made.
    cache: Mutex<HashMap<UserName, (std::time::Instant, Arc<Resolved>)>>,
    /// How long a resolution is trusted: forever on a node, whose users change only through
    /// it (and every change clears the cache); on a router, whose users live on the config
    /// server and may change through another router, a bounded time
    /// ([`ROUTER_USER_CACHE_LIFETIME`]). None: forever.
    cache_lifetime: std::sync::OnceLock<std::time::Duration>,
    /// Held while users or roles change, so check-then-write sequences do not interleave.
    pub change_lock: Mutex<()>,
    pub failed_logins: rate_limit::FailedLogins,
    /// The keyfile's secret, when the cluster authenticates its members (`--keyFile`).
    internal_key: std::sync::OnceLock<String>,
    /// The internal user's credentials, derived from the key on first use (SHA-1, SHA-256).
    internal_credentials: std::sync::OnceLock<[scram::Credential; 2]>,
}

impl Security {
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Release);
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// Authenticates cluster members as [`INTERNAL_USER`] with this secret, and turns
    /// authorization on, as `--keyFile` does in mongod. The first key set stays.
    pub fn set_internal_key(&self, key: String) {
        let _ = self.internal_key.set(key);
        self.enable();
    }

    /// The keyfile's secret, if members authenticate.
    pub fn internal_key(&self) -> Option<&str> {
        self.internal_key.get().map(String::as_str)
    }

    /// The credential `user@db` authenticates with when it is the internal user and a keyfile
    /// is set; None otherwise (ordinary users are read from the user store).
    pub fn internal_credential(&self, mechanism: scram::Mechanism, user: &str, db: &str) -> Option<scram::Credential> {
        if user != INTERNAL_USER || db != INTERNAL_DATABASE {
            return None;
        }
        let key = self.internal_key.get()?;
        let credentials = self.internal_credentials.get_or_init(|| {
            let derive = |mechanism| {
                let secret = scram::mechanism_password(mechanism, INTERNAL_USER, key).unwrap_or_default();
                scram::Credential::derive(mechanism, &secret, scram::iteration_count(mechanism))
            };
            [derive(scram::Mechanism::Sha1), derive(scram::Mechanism::Sha256)]
        });
        Some(credentials[usize::from(mechanism == scram::Mechanism::Sha256)].clone())
    }

    /// Bounds how long a cached resolution is trusted (a router's users change elsewhere too).
    /// The first call wins.
    pub fn set_cache_lifetime(&self, lifetime: std::time::Duration) {
        let _ = self.cache_lifetime.set(lifetime);
    }

    /// Users or roles changed: every cached resolution is stale.
    pub fn invalidate(&self) {
        self.cache.lock().clear();
    }

    /// The roles and privileges of a user (empty when the user no longer exists).
    pub fn resolve(&self, users: &dyn store::UserStore, user: &UserName) -> CommandResult<Arc<Resolved>> {
        if let Some((made, cached)) = self.cache.lock().get(user) {
            if self.cache_lifetime.get().map_or(true, |lifetime| made.elapsed() < *lifetime) {
                return Ok(Arc::clone(cached));
            }
        }
        if self.internal_key().is_some() && user.user == INTERNAL_USER && user.db == INTERNAL_DATABASE {
            return Ok(Arc::new(Resolved::internal_system()));
        }
        let direct = match users.get(store::USERS_COLLECTION, &store::document_id(&user.db, &user.user))? {
            Some(document) => roles::role_names(document.get_array("roles").map(|list| list.as_slice()).unwrap_or(&[]), &user.db),
            None => Vec::new(),
        };
        let resolved = Arc::new(roles::resolve(users, &direct)?);
        let mut cache = self.cache.lock();
        if cache.len() >= MAX_CACHED_USERS {
            cache.clear();
        }
        cache.insert(user.clone(), (std::time::Instant::now(), Arc::clone(&resolved)));
        Ok(resolved)
    }
}

thread_local! {
    /// The users of the connection whose command runs on this thread (cursor ownership).
    static CURRENT_USERS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Restores the previous current users when dropped, even if the handler panicked.
struct CurrentUsersGuard {
    previous: Vec<String>,
}

impl Drop for CurrentUsersGuard {
    fn drop(&mut self) {
        let previous = std::mem::take(&mut self.previous);
        CURRENT_USERS.with(|current| *current.borrow_mut() = previous);
    }
}

/// Runs `body` with `users` recorded as the current command's users.
pub fn with_current_users<T>(users: Vec<String>, body: impl FnOnce() -> T) -> T {
    let previous = CURRENT_USERS.with(|current| std::mem::replace(&mut *current.borrow_mut(), users));
    let _restore = CurrentUsersGuard { previous };
    body()
}

/// The users of the command running on this thread (empty outside one or when unauthenticated).
pub fn current_users() -> Vec<String> {
    CURRENT_USERS.with(|current| current.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::Document;
    use roles::Target;

    /// A user store holding one user whose roles a test changes, counting its reads.
    struct ChangingUsers {
        roles: parking_lot::Mutex<Vec<&'static str>>,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl store::UserStore for ChangingUsers {
        fn get(&self, collection: &str, _id: &str) -> CommandResult<Option<Document>> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Ok((collection == store::USERS_COLLECTION).then(|| bson::doc! { "roles": self.roles.lock().clone() }))
        }
        fn all(&self, _collection: &str) -> CommandResult<Vec<Document>> {
            Ok(Vec::new())
        }
        fn any(&self, _collection: &str) -> CommandResult<bool> {
            Ok(true)
        }
        fn insert(&self, _collection: &str, _document: &Document) -> CommandResult<()> {
            Ok(())
        }
        fn replace(&self, _collection: &str, _id: &str, _new: &Document) -> CommandResult<bool> {
            Ok(true)
        }
        fn delete(&self, _collection: &str, _ids: &[String]) -> CommandResult<usize> {
            Ok(0)
        }
    }

    #[test]
    fn a_routers_cached_privileges_expire_and_a_nodes_do_not() {
        let users = ChangingUsers { roles: parking_lot::Mutex::new(vec!["read"]), reads: Default::default() };
        let ann = UserName::new("ann", "shop");
        let orders = Target::Collection("shop".into(), "orders".into());
        let node = Security::default();
        assert!(!node.resolve(&users, &ann).expect("resolves").allows(&orders, "insert"));
        *users.roles.lock() = vec!["readWrite"];
        assert!(!node.resolve(&users, &ann).expect("cached").allows(&orders, "insert"), "a node trusts its cache until it changes users itself");
        node.invalidate();
        assert!(node.resolve(&users, &ann).expect("re-read").allows(&orders, "insert"));
        let router = Security::default();
        router.set_cache_lifetime(std::time::Duration::ZERO);
        *users.roles.lock() = vec!["read"];
        assert!(!router.resolve(&users, &ann).expect("resolves").allows(&orders, "insert"));
        *users.roles.lock() = vec!["readWrite"];
        let reads_before = users.reads.load(Ordering::SeqCst);
        assert!(router.resolve(&users, &ann).expect("re-read").allows(&orders, "insert"), "a router re-reads an expired resolution");
        assert!(users.reads.load(Ordering::SeqCst) > reads_before);
    }

    #[test]
    fn current_users_are_scoped_to_the_handler_even_when_it_panics() {
        assert!(current_users().is_empty());
        let seen = with_current_users(vec!["ann@admin".to_string()], current_users);
        assert_eq!(seen, vec!["ann@admin".to_string()]);
        let panicked = std::panic::catch_unwind(|| with_current_users(vec!["bob@shop".to_string()], || panic!("handler bug")));
        assert!(panicked.is_err());
        assert!(current_users().is_empty());
    }
}
