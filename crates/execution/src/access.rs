//! Authorization of requests: what each command needs ([`Access`]), and the one check the
//! dispatcher makes before every handler ([`authorize`]), over the identities, roles and
//! privilege cache of [`myriad_auth`].
//!
//! Invariants:
//! - With `--auth` off (the default) nothing is refused; users can still authenticate.
//! - With `--auth` on, an unauthenticated connection runs only the commands whose
//!   [`Access`] is `Open`, plus, while no user exists and the peer is a loopback address,
//!   `createUser` against admin (the localhost exception).

use std::sync::Arc;

use bson::Document;

use myriad_auth::roles::{Resolved, Target};
use myriad_auth::{store, UserName, EXTERNAL};
use crate::context::ServerContext;
use myriad_reply::error::{CommandError, CommandResult, UNAUTHORIZED};
use crate::request::CommandRequest;

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

/// The collection a command names, else its database.
fn command_target(request: &CommandRequest) -> Target {
    match request.first_value() {
        Some(bson::Bson::String(collection)) if !collection.is_empty() => Target::Collection(request.db.clone(), collection.clone()),
        _ => Target::Database(request.db.clone()),
    }
}

/// The (target, action) pairs a command with this [`Access`] needs for this request; the
/// command table asks it for the command an explain wraps.
pub fn requirements_of(access: Access, request: &CommandRequest) -> Vec<(Target, &'static str)> {
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
    if request.db == EXTERNAL && !EXTERNAL_DATABASE_COMMANDS.contains(&name) {
        return Err(CommandError::new(myriad_reply::error::INVALID_NAMESPACE, format!("Invalid database name: '{}'", request.db)));
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
        resolved.push(context.security.resolve(context.users.as_ref(), user)?);
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
    users.iter().map(|user| context.security.resolve(context.users.as_ref(), user)).collect::<CommandResult<Vec<_>>>().map(Some)
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
