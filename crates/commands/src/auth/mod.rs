//! Authentication and authorization: SCRAM ([`scram`]), the user and role documents
//! ([`store`]), privileges and roles ([`roles`]), and the one check the dispatcher makes
//! before every handler ([`authorize`]).
//!
//! Invariants:
//! - With `--auth` off (the default) nothing is refused; users can still authenticate.
//! - With `--auth` on, an unauthenticated connection runs only the commands whose
//!   [`Access`] is `Open`, plus, while no user exists and the peer is a loopback address,
//!   `createUser` against admin (the localhost exception).
//! - Resolved privileges are cached per user, bounded, and dropped on every user or role change.
//! - Failed logins are rate-limited per client address with a bounded table.

pub mod rate_limit;
pub mod requirements;
pub mod roles;
pub mod scram;
pub mod scram_client;
pub mod store;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bson::Document;
use parking_lot::Mutex;

use crate::context::ServerContext;
use crate::error::{CommandError, CommandResult, ErrorCode, UNAUTHORIZED};
use crate::request::CommandRequest;
use roles::{Resolved, Target};

pub const AUTHENTICATION_FAILED: ErrorCode = ErrorCode::new(18);
pub const USER_NOT_FOUND: ErrorCode = ErrorCode::new(11);
pub const ROLE_NOT_FOUND: ErrorCode = ErrorCode::new(31);
pub const MECHANISM_UNAVAILABLE: ErrorCode = ErrorCode::new(334);
pub const USER_ALREADY_EXISTS: ErrorCode = ErrorCode::new(51003);

/// The cluster's internal user (`__system@local`), which members authenticate as with the
/// keyfile's secret (`--keyFile`), as MongoDB's internal authentication.
pub const INTERNAL_USER: &str = "__system";
pub const INTERNAL_DATABASE: &str = "local";

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

/// At most this many users' resolved privileges are cached.
const MAX_CACHED_USERS: usize = 10_000;

/// What a command needs before it runs.
#[derive(Clone, Copy)]
pub enum Access {
    /// Runs before authentication (hello, saslStart, ping...).
    Open,
    /// Any authenticated user.
    Authenticated,
    /// These actions on the collection the command names (its database when it names none).
    Collection(&'static [&'static str]),
    /// These actions on the command's database.
    Database(&'static [&'static str]),
    /// These actions on the cluster.
    Cluster(&'static [&'static str]),
    /// Computed from the request: every (resource, action) pair is needed.
    Custom(fn(&CommandRequest) -> Vec<(Target, &'static str)>),
}

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
    cache: Mutex<HashMap<UserName, Arc<Resolved>>>,
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

    /// Users or roles changed: every cached resolution is stale.
    pub fn invalidate(&self) {
        self.cache.lock().clear();
    }

    /// The roles and privileges of a user (empty when the user no longer exists).
    pub fn resolve(&self, context: &ServerContext, user: &UserName) -> CommandResult<Arc<Resolved>> {
        if let Some(cached) = self.cache.lock().get(user) {
            return Ok(Arc::clone(cached));
        }
        if self.internal_key().is_some() && user.user == INTERNAL_USER && user.db == INTERNAL_DATABASE {
            return Ok(Arc::new(Resolved::internal_system()));
        }
        let direct = match context.users.get(store::USERS_COLLECTION, &store::document_id(&user.db, &user.user))? {
            Some(document) => roles::role_names(document.get_array("roles").map(|list| list.as_slice()).unwrap_or(&[]), &user.db),
            None => Vec::new(),
        };
        let resolved = Arc::new(roles::resolve(context.users.as_ref(), &direct)?);
        let mut cache = self.cache.lock();
        if cache.len() >= MAX_CACHED_USERS {
            cache.clear();
        }
        cache.insert(user.clone(), Arc::clone(&resolved));
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

/// The collection a command names, else its database.
fn command_target(request: &CommandRequest) -> Target {
    match request.first_value() {
        Some(bson::Bson::String(collection)) if !collection.is_empty() => Target::Collection(request.db.clone(), collection.clone()),
        _ => Target::Database(request.db.clone()),
    }
}

pub(crate) fn requirements_of(access: Access, request: &CommandRequest) -> Vec<(Target, &'static str)> {
    match access {
        Access::Open | Access::Authenticated => Vec::new(),
        Access::Collection(actions) => actions.iter().map(|action| (command_target(request), *action)).collect(),
        Access::Database(actions) => actions.iter().map(|action| (Target::Database(request.db.clone()), *action)).collect(),
        Access::Cluster(actions) => actions.iter().map(|action| (Target::Cluster, *action)).collect(),
        Access::Custom(compute) => compute(request),
    }
}

/// The commands that may name `$external` as their database: authentication, the user
/// commands, and the handshake and liveness commands drivers send anywhere.
const EXTERNAL_DATABASE_COMMANDS: &[&str] = &[
    "authenticate", "saslStart", "saslContinue", "logout", "createUser", "updateUser", "dropUser", "dropAllUsersFromDatabase",
    "usersInfo", "grantRolesToUser", "revokeRolesFromUser", "hello", "ping", "buildInfo", "connectionStatus", "listCommands",
    "endSessions", "whatsmyuri",
];

/// `$external` holds users, never data: any other command against it is InvalidNamespace.
pub fn check_external_database(request: &CommandRequest, name: &str) -> CommandResult<()> {
    if request.db == crate::command::authenticate::EXTERNAL && !EXTERNAL_DATABASE_COMMANDS.contains(&name) {
        return Err(CommandError::new(crate::error::INVALID_NAMESPACE, format!("Invalid database name: '{}'", request.db)));
    }
    Ok(())
}

/// The check before every handler: refuses with Unauthorized (13) as mongod does.
pub fn authorize(context: &ServerContext, request: &CommandRequest, name: &str, access: Access) -> CommandResult<()> {
    let session = &request.connection.session;
    if !context.security.is_enabled() || matches!(access, Access::Open) || session.is_internal() {
        return Ok(());
    }
    let users = session.authenticated_user_names();
    if users.is_empty() {
        if localhost_exception_applies(context, request, name)? {
            return Ok(());
        }
        return Err(CommandError::new(UNAUTHORIZED, format!("Command {name} requires authentication")));
    }
    let needed = requirements_of(access, request);
    let mut resolved = Vec::with_capacity(users.len());
    for user in &users {
        resolved.push(context.security.resolve(context, user)?);
    }
    for (target, action) in &needed {
        if !resolved.iter().any(|granted| granted.allows(target, action)) {
            return Err(not_authorized(request));
        }
    }
    check_cursor_owner(context, request, name, &users)
}

/// What the connection's users may do: None with enforcement off or for the node's own
/// requests (everything), else the
/// resolved privileges of each authenticated user.
pub fn privileges_of(context: &ServerContext, request: &CommandRequest) -> CommandResult<Option<Vec<Arc<Resolved>>>> {
    if !context.security.is_enabled() || request.connection.session.is_internal() {
        return Ok(None);
    }
    let users = request.connection.session.authenticated_user_names();
    users.iter().map(|user| context.security.resolve(context, user)).collect::<CommandResult<Vec<_>>>().map(Some)
}

/// Whether the connection's users hold `action` on the cluster (always, with enforcement off).
pub fn holds_cluster_action(context: &ServerContext, request: &CommandRequest, action: &str) -> CommandResult<bool> {
    Ok(match privileges_of(context, request)? {
        None => true,
        Some(resolved) => resolved.iter().any(|granted| granted.allows(&Target::Cluster, action)),
    })
}

/// MongoDB's refusal of an authenticated user that lacks a privilege.
pub fn not_authorized(request: &CommandRequest) -> CommandError {
    let shown = bson::Bson::Document(redacted(&request.body)).into_relaxed_extjson();
    CommandError::new(UNAUTHORIZED, format!("not authorized on {} to execute command {}", request.db, shown))
}

/// The command body without its passwords and its `$db`, for error messages and logs.
fn redacted(body: &Document) -> Document {
    let mut shown = body.clone();
    shown.remove("$db");
    if shown.contains_key("pwd") {
        shown.insert("pwd", "xxx");
    }
    shown
}

fn localhost_exception_applies(context: &ServerContext, request: &CommandRequest, name: &str) -> CommandResult<bool> {
    let loopback = request.connection.remote_address.is_some_and(|address| address.ip().is_loopback());
    Ok(loopback && name == "createUser" && request.db == store::ADMIN && !context.users.any(store::USERS_COLLECTION)?)
}

/// getMore and killCursors on a cursor another user opened answer Unauthorized.
fn check_cursor_owner(context: &ServerContext, request: &CommandRequest, name: &str, users: &[UserName]) -> CommandResult<()> {
    let ids: Vec<i64> = match name {
        "getMore" => request.body.get("getMore").and_then(crate::request::integer_value).into_iter().collect(),
        "killCursors" => request.body.get_array("cursors").map(|ids| ids.iter().filter_map(crate::request::integer_value).collect()).unwrap_or_default(),
        _ => return Ok(()),
    };
    let names: Vec<String> = users.iter().map(UserName::full_name).collect();
    for id in ids {
        if let Some(owners) = context.cursors.owner_users(id) {
            if !owners.is_empty() && owners != names {
                return Err(CommandError::new(UNAUTHORIZED, format!("cursor id {id} was not created by the authenticated user")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
