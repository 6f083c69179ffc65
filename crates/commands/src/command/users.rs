//! User commands: createUser, updateUser, dropUser, dropAllUsersFromDatabase, usersInfo,
//! grantRolesToUser and revokeRolesFromUser, over `admin.system.users` documents shaped as
//! MongoDB's (`_id: "<db>.<user>"`, `userId`, `user`, `db`, `credentials`, `roles`). Users of
//! `$external` (MONGODB-X509, named by their certificate's subject) have no password: their
//! `credentials` are `{external: true}`, as mongod stores them.

use bson::{doc, Bson, Document};

use crate::auth::scram::{self, Credential, Mechanism};
use crate::auth::{roles, store, EXTERNAL, ROLE_NOT_FOUND, USER_ALREADY_EXISTS, USER_NOT_FOUND};
use crate::error::{CommandError, CommandResult, BAD_VALUE, NO_SUCH_KEY};
use crate::request::type_name;
use crate::{CommandRequest, ServerContext};

fn user_name(request: &CommandRequest) -> CommandResult<String> {
    match request.first_value() {
        Some(Bson::String(name)) if !name.is_empty() => Ok(name.clone()),
        Some(Bson::String(_)) => Err(CommandError::new(BAD_VALUE, "User document needs 'user' field to be non-empty")),
        Some(other) => Err(request.wrong_type(&request.name, "string", other)),
        None => Err(CommandError::new(NO_SUCH_KEY, format!("BSON field '{}' is missing but a required field", request.name))),
    }
}

/// The `roles` of a request as `{role, db}` documents, each checked to exist.
fn checked_roles(context: &ServerContext, request: &CommandRequest) -> CommandResult<Vec<Document>> {
    let Some(list) = request.optional_array("roles")? else {
        return Err(CommandError::new(NO_SUCH_KEY, format!("BSON field '{}.roles' is missing but a required field", request.name)));
    };
    let mut checked = Vec::new();
    for entry in list {
        if !matches!(entry, Bson::String(_) | Bson::Document(_)) {
            return Err(CommandError::new(BAD_VALUE, format!("Role names must be either strings or objects, not {}", type_name(entry))));
        }
    }
    for (role, db) in roles::role_names(list, &request.db) {
        if !roles::exists(context.users.as_ref(), &role, &db)? {
            return Err(CommandError::new(ROLE_NOT_FOUND, format!("Could not find role: {role}@{db}")));
        }
        let document = doc! { "role": role, "db": db };
        if !checked.contains(&document) {
            checked.push(document);
        }
    }
    Ok(checked)
}

/// Credentials for the requested mechanisms (both by default), never the password itself.
fn credentials(request: &CommandRequest, user: &str, password: &str) -> CommandResult<Document> {
    let mechanisms: Vec<Mechanism> = match request.optional_array("mechanisms")? {
        None => vec![Mechanism::Sha1, Mechanism::Sha256],
        Some(names) => {
            let mut mechanisms = Vec::new();
            for name in names {
                let mechanism = name.as_str().and_then(Mechanism::from_name);
                let Some(mechanism) = mechanism else {
                    return Err(CommandError::new(BAD_VALUE, format!("Unknown auth mechanism '{}'", name.as_str().unwrap_or_default())));
                };
                mechanisms.push(mechanism);
            }
            if mechanisms.is_empty() {
                return Err(CommandError::new(BAD_VALUE, "mechanisms field must not be empty"));
            }
            mechanisms
        }
    };
    if password.is_empty() {
        return Err(CommandError::new(BAD_VALUE, "Password cannot be empty"));
    }
    let mut credentials = Document::new();
    for mechanism in mechanisms {
        let Some(derived_from) = scram::mechanism_password(mechanism, user, password) else {
            return Err(CommandError::new(BAD_VALUE, "Error preflighting SCRAM-SHA-256 password: password contains prohibited characters"));
        };
        let credential = Credential::derive(mechanism, &derived_from, scram::iteration_count(mechanism));
        credentials.insert(mechanism.name(), credential.to_document());
    }
    Ok(credentials)
}

fn password(request: &CommandRequest) -> CommandResult<Option<String>> {
    Ok(request.optional_string("pwd")?.map(str::to_string))
}

/// A user of `$external` authenticates outside Myriad (MONGODB-X509): it has no password.
fn is_external(request: &CommandRequest) -> bool {
    request.db == EXTERNAL
}

const NO_EXTERNAL_PASSWORD: &str = "Cannot set the password for users defined on the '$external' database";

pub fn create_user(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let user = user_name(request)?;
    let roles = checked_roles(context, request)?;
    let credentials = match (password(request)?, is_external(request)) {
        (Some(password), false) => credentials(request, &user, &password)?,
        (None, true) => doc! { "external": true },
        (Some(_), true) => return Err(CommandError::new(BAD_VALUE, NO_EXTERNAL_PASSWORD)),
        (None, false) => {
            return Err(CommandError::new(BAD_VALUE, "Must provide a 'pwd' field for all user documents, except those with '$external' as the user's source db"));
        }
    };
    let mut document = doc! {
        "_id": store::document_id(&request.db, &user),
        "userId": bson::Uuid::new(),
        "user": &user,
        "db": &request.db,
        "credentials": credentials,
        "roles": roles.into_iter().map(Bson::Document).collect::<Vec<Bson>>(),
    };
    if let Some(custom_data) = request.optional_document("customData")? {
        document.insert("customData", custom_data.clone());
    }
    let _changing = context.security.change_lock.lock();
    if context.users.get(store::USERS_COLLECTION, &store::document_id(&request.db, &user))?.is_some() {
        return Err(CommandError::new(USER_ALREADY_EXISTS, format!("User \"{user}@{}\" already exists", request.db)));
    }
    context.users.insert(store::USERS_COLLECTION, &document)?;
    context.security.invalidate();
    Ok(doc! { "ok": 1.0 })
}

/// Applies `change` to the stored user document, under the change lock.
fn change_user(context: &ServerContext, request: &CommandRequest, change: impl FnOnce(&mut Document) -> CommandResult<()>) -> CommandResult<Document> {
    let user = user_name(request)?;
    let id = store::document_id(&request.db, &user);
    let _changing = context.security.change_lock.lock();
    let Some(mut document) = context.users.get(store::USERS_COLLECTION, &id)? else {
        return Err(CommandError::new(USER_NOT_FOUND, format!("Could not find user \"{user}\" for db \"{}\"", request.db)));
    };
    change(&mut document)?;
    context.users.replace(store::USERS_COLLECTION, &id, &document)?;
    context.security.invalidate();
    Ok(doc! { "ok": 1.0 })
}

pub fn update_user(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let user = user_name(request)?;
    let new_roles = match request.body.contains_key("roles") { true => Some(checked_roles(context, request)?), false => None };
    let new_credentials = match password(request)? {
        Some(_) if is_external(request) => return Err(CommandError::new(BAD_VALUE, NO_EXTERNAL_PASSWORD)),
        Some(password) => Some(credentials(request, &user, &password)?),
        None => None,
    };
    let custom_data = request.optional_document("customData")?.cloned();
    if new_roles.is_none() && new_credentials.is_none() && custom_data.is_none() {
        return Err(CommandError::new(BAD_VALUE, "Must specify at least one field to update in updateUser"));
    }
    change_user(context, request, |document| {
        if let Some(roles) = new_roles {
            document.insert("roles", roles.into_iter().map(Bson::Document).collect::<Vec<Bson>>());
        }
        if let Some(credentials) = new_credentials {
            document.insert("credentials", credentials);
        }
        if let Some(custom_data) = custom_data {
            document.insert("customData", custom_data);
        }
        Ok(())
    })
}

pub fn grant_roles(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let granted = checked_roles(context, request)?;
    change_user(context, request, |document| {
        let mut roles: Vec<Bson> = document.get_array("roles").cloned().unwrap_or_default();
        for role in granted {
            if !roles.contains(&Bson::Document(role.clone())) {
                roles.push(Bson::Document(role));
            }
        }
        document.insert("roles", roles);
        Ok(())
    })
}

pub fn revoke_roles(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let revoked = checked_roles(context, request)?;
    change_user(context, request, |document| {
        let roles: Vec<Bson> = document.get_array("roles").cloned().unwrap_or_default();
        let kept: Vec<Bson> = roles.into_iter().filter(|role| !revoked.iter().any(|gone| role.as_document() == Some(gone))).collect();
        document.insert("roles", kept);
        Ok(())
    })
}

pub fn drop_user(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let user = user_name(request)?;
    let _changing = context.security.change_lock.lock();
    let deleted = context.users.delete(store::USERS_COLLECTION, &[store::document_id(&request.db, &user)])?;
    context.security.invalidate();
    if deleted == 0 {
        return Err(CommandError::new(USER_NOT_FOUND, format!("User '{user}@{}' not found", request.db)));
    }
    Ok(doc! { "ok": 1.0 })
}

pub fn drop_all_users(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let _changing = context.security.change_lock.lock();
    let ids: Vec<String> = context.users.all(store::USERS_COLLECTION)?
        .into_iter()
        .filter(|user| user.get_str("db") == Ok(request.db.as_str()))
        .filter_map(|user| user.get_str("_id").ok().map(str::to_string))
        .collect();
    let deleted = context.users.delete(store::USERS_COLLECTION, &ids)?;
    context.security.invalidate();
    Ok(doc! { "n": i32::try_from(deleted).unwrap_or(i32::MAX), "ok": 1.0 })
}

/// Which users `usersInfo` asks for: all of the database, all of every database, or names.
fn wanted_users(request: &CommandRequest) -> CommandResult<Option<Vec<(String, String)>>> {
    let entry = |value: &Bson| -> CommandResult<(String, String)> {
        match value {
            Bson::String(user) => Ok((user.clone(), request.db.clone())),
            Bson::Document(spec) => match (spec.get_str("user"), spec.get_str("db")) {
                (Ok(user), Ok(db)) => Ok((user.to_string(), db.to_string())),
                _ => Err(CommandError::new(BAD_VALUE, "User name must contain 'user' and 'db' fields")),
            },
            other => Err(CommandError::new(BAD_VALUE, format!("User name must be either a string or an object, not {}", type_name(other)))),
        }
    };
    match request.first_value() {
        Some(Bson::Array(list)) => Ok(Some(list.iter().map(entry).collect::<CommandResult<_>>()?)),
        Some(value @ (Bson::String(_) | Bson::Document(_))) => Ok(Some(vec![entry(value)?])),
        _ => Ok(None),
    }
}

pub fn users_info(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let show_credentials = request.flag("showCredentials")?;
    let show_privileges = request.flag("showPrivileges")?;
    let for_all_databases = request.body.get_document("usersInfo").ok().and_then(|spec| spec.get_bool("forAllDBs").ok()) == Some(true);
    let wanted = if for_all_databases { None } else { wanted_users(request)? };
    let mut users = Vec::new();
    for stored in context.users.all(store::USERS_COLLECTION)? {
        let (Ok(user), Ok(db)) = (stored.get_str("user"), stored.get_str("db")) else { continue };
        let selected = match &wanted {
            Some(names) => names.iter().any(|(name, name_db)| name == user && name_db == db),
            None => for_all_databases || db == request.db,
        };
        if selected {
            users.push(Bson::Document(user_info(context, &stored, show_credentials, show_privileges)?));
        }
    }
    Ok(doc! { "users": users, "ok": 1.0 })
}

fn user_info(context: &ServerContext, stored: &Document, show_credentials: bool, show_privileges: bool) -> CommandResult<Document> {
    let mut info = Document::new();
    for field in ["_id", "userId", "user", "db"] {
        if let Some(value) = stored.get(field) {
            info.insert(field, value.clone());
        }
    }
    let roles = stored.get_array("roles").cloned().unwrap_or_default();
    info.insert("roles", roles.clone());
    if let Ok(custom_data) = stored.get_document("customData") {
        info.insert("customData", custom_data.clone());
    }
    let credentials = stored.get_document("credentials").cloned().unwrap_or_default();
    info.insert("mechanisms", credentials.keys().map(|name| Bson::String(name.clone())).collect::<Vec<Bson>>());
    if show_credentials {
        info.insert("credentials", credentials);
    }
    if show_privileges {
        let db = stored.get_str("db").unwrap_or_default();
        let resolved = roles::resolve(context.users.as_ref(), &roles::role_names(&roles, db))?;
        info.insert("inheritedRoles", resolved.roles.iter().map(|(role, db)| Bson::Document(doc! { "role": role, "db": db })).collect::<Vec<Bson>>());
        info.insert("inheritedPrivileges", resolved.privileges.iter().map(|privilege| Bson::Document(privilege.to_document())).collect::<Vec<Bson>>());
    }
    Ok(info)
}
