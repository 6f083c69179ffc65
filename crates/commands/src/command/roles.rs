//! Role commands: createRole, updateRole, dropRole, rolesInfo, grantPrivilegesToRole,
//! revokePrivilegesFromRole, grantRolesToRole and revokeRolesFromRole, over
//! `admin.system.roles` documents shaped as MongoDB's (`_id: "<db>.<role>"`, `role`, `db`,
//! `privileges: [{resource, actions}]`, `roles: [{role, db}]`).

use bson::{doc, Bson, Document};

use crate::auth::roles::{self, Pattern, Privilege};
use crate::auth::{store, ROLE_NOT_FOUND};
use crate::error::{CommandError, CommandResult, ErrorCode, BAD_VALUE, FAILED_TO_PARSE, NO_SUCH_KEY};
use crate::request::type_name;
use crate::{CommandRequest, ServerContext};

const ROLE_ALREADY_EXISTS: ErrorCode = ErrorCode::new(51002);
const INVALID_ROLE_MODIFICATION: ErrorCode = ErrorCode::new(49);

/// Refuses inheriting roles that lead back to the role itself, as MongoDB refuses a cycle.
fn refuse_cycle(context: &ServerContext, request: &CommandRequest, inherited: &[Bson]) -> CommandResult<()> {
    let role = role_name(request)?;
    for (name, db) in roles::role_names(inherited, &request.db) {
        let reached = roles::resolve(context.users.as_ref(), &[(name.clone(), db.clone())])?;
        if reached.roles.iter().any(|(reached_name, reached_db)| *reached_name == role && *reached_db == request.db) {
            return Err(CommandError::new(
                INVALID_ROLE_MODIFICATION,
                format!("Granting {name}@{db} to {role}@{} would introduce a cycle in the role graph", request.db),
            ));
        }
    }
    Ok(())
}

fn role_name(request: &CommandRequest) -> CommandResult<String> {
    match request.first_value() {
        Some(Bson::String(name)) if !name.is_empty() => Ok(name.clone()),
        Some(Bson::String(_)) => Err(CommandError::new(BAD_VALUE, "Role name must be non-empty")),
        Some(other) => Err(request.wrong_type(&request.name, "string", other)),
        None => Err(CommandError::new(NO_SUCH_KEY, format!("BSON field '{}' is missing but a required field", request.name))),
    }
}

fn required_array<'request>(request: &'request CommandRequest, field: &str) -> CommandResult<&'request Vec<Bson>> {
    request
        .optional_array(field)?
        .ok_or_else(|| CommandError::new(NO_SUCH_KEY, format!("BSON field '{}.{field}' is missing but a required field", request.name)))
}

/// Parses and checks privileges: known actions, and (outside admin) only this database's resources.
fn parse_privileges(request: &CommandRequest, list: &[Bson]) -> CommandResult<Vec<Privilege>> {
    let mut privileges = Vec::new();
    for entry in list {
        let Bson::Document(document) = entry else {
            return Err(CommandError::new(FAILED_TO_PARSE, format!("Privileges must be objects, not {}", type_name(entry))));
        };
        let Some(privilege) = Privilege::from_document(document) else {
            return Err(CommandError::new(FAILED_TO_PARSE, "A privilege must have a 'resource' ({db, collection}, {cluster: true} or {anyResource: true}) and an 'actions' array of strings"));
        };
        if let Some(unknown) = privilege.actions.iter().find(|action| !roles::is_action(action)) {
            return Err(CommandError::new(FAILED_TO_PARSE, format!("Unrecognized action privilege string: {unknown}")));
        }
        let same_database = matches!(&privilege.pattern, Pattern::Database(db) | Pattern::Exact(db, _) if db == &request.db);
        if request.db != store::ADMIN && !same_database {
            return Err(CommandError::new(BAD_VALUE, format!("Roles on the '{}' database cannot be granted privileges that target other databases or the cluster", request.db)));
        }
        privileges.push(privilege);
    }
    Ok(privileges)
}

/// `{role, db}` documents of existing roles.
fn parse_roles(context: &ServerContext, request: &CommandRequest, list: &[Bson]) -> CommandResult<Vec<Bson>> {
    let mut documents = Vec::new();
    for (role, db) in roles::role_names(list, &request.db) {
        if !roles::exists(context.users.as_ref(), &role, &db)? {
            return Err(CommandError::new(ROLE_NOT_FOUND, format!("Could not find role: {role}@{db}")));
        }
        let document = Bson::Document(doc! { "role": role, "db": db });
        if !documents.contains(&document) {
            documents.push(document);
        }
    }
    Ok(documents)
}

fn privileges_bson(privileges: &[Privilege]) -> Vec<Bson> {
    privileges.iter().map(|privilege| Bson::Document(privilege.to_document())).collect()
}

pub fn create_role(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let role = role_name(request)?;
    if roles::is_builtin(&role, &request.db) {
        return Err(CommandError::new(BAD_VALUE, format!("Cannot create roles with the same name as a built-in role: {role}@{}", request.db)));
    }
    let privileges = parse_privileges(request, required_array(request, "privileges")?)?;
    let inherited = parse_roles(context, request, required_array(request, "roles")?)?;
    let document = doc! {
        "_id": store::document_id(&request.db, &role),
        "role": &role,
        "db": &request.db,
        "privileges": privileges_bson(&privileges),
        "roles": inherited,
    };
    let _changing = context.security.change_lock.lock();
    if context.users.get(store::ROLES_COLLECTION, &store::document_id(&request.db, &role))?.is_some() {
        return Err(CommandError::new(ROLE_ALREADY_EXISTS, format!("Role \"{role}@{}\" already exists", request.db)));
    }
    context.users.insert(store::ROLES_COLLECTION, &document)?;
    context.security.invalidate();
    Ok(doc! { "ok": 1.0 })
}

/// Applies `change` to a stored custom role, under the change lock.
fn change_role(context: &ServerContext, request: &CommandRequest, change: impl FnOnce(&mut Document)) -> CommandResult<Document> {
    let role = role_name(request)?;
    if roles::is_builtin(&role, &request.db) {
        return Err(CommandError::new(BAD_VALUE, format!("Cannot modify built-in role: {role}@{}", request.db)));
    }
    let id = store::document_id(&request.db, &role);
    let _changing = context.security.change_lock.lock();
    let Some(mut document) = context.users.get(store::ROLES_COLLECTION, &id)? else {
        return Err(CommandError::new(ROLE_NOT_FOUND, format!("Role '{role}@{}' not found", request.db)));
    };
    change(&mut document);
    context.users.replace(store::ROLES_COLLECTION, &id, &document)?;
    context.security.invalidate();
    Ok(doc! { "ok": 1.0 })
}

pub fn update_role(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let privileges = match request.optional_array("privileges")? {
        Some(list) => Some(parse_privileges(request, list)?),
        None => None,
    };
    let inherited = match request.optional_array("roles")? {
        Some(list) => Some(parse_roles(context, request, list)?),
        None => None,
    };
    if let Some(inherited) = &inherited {
        refuse_cycle(context, request, inherited)?;
    }
    if privileges.is_none() && inherited.is_none() {
        return Err(CommandError::new(BAD_VALUE, "Must specify at least one field to update in updateRole"));
    }
    change_role(context, request, |document| {
        if let Some(privileges) = privileges {
            document.insert("privileges", privileges_bson(&privileges));
        }
        if let Some(inherited) = inherited {
            document.insert("roles", inherited);
        }
    })
}

/// Adds (`grant`) or removes privileges' actions, as grantPrivilegesToRole/revokePrivilegesFromRole.
fn change_privileges(context: &ServerContext, request: &CommandRequest, grant: bool) -> CommandResult<Document> {
    let changed = parse_privileges(request, required_array(request, "privileges")?)?;
    change_role(context, request, |document| {
        let list = document.get_array("privileges").map(|list| list.as_slice()).unwrap_or(&[]);
        let mut current: Vec<Privilege> = list.iter().filter_map(|entry| entry.as_document().and_then(Privilege::from_document)).collect();
        for privilege in changed {
            match current.iter_mut().find(|held| held.pattern == privilege.pattern) {
                Some(held) if grant => {
                    for action in privilege.actions {
                        if !held.actions.contains(&action) {
                            held.actions.push(action);
                        }
                    }
                }
                Some(held) => held.actions.retain(|action| !privilege.actions.contains(action)),
                None if grant => current.push(privilege),
                None => {}
            }
        }
        current.retain(|privilege| !privilege.actions.is_empty());
        document.insert("privileges", privileges_bson(&current));
    })
}

pub fn grant_privileges(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    change_privileges(context, request, true)
}

pub fn revoke_privileges(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    change_privileges(context, request, false)
}

fn change_inherited(context: &ServerContext, request: &CommandRequest, grant: bool) -> CommandResult<Document> {
    let changed = parse_roles(context, request, required_array(request, "roles")?)?;
    if grant {
        refuse_cycle(context, request, &changed)?;
    }
    change_role(context, request, |document| {
        let mut current = document.get_array("roles").cloned().unwrap_or_default();
        if grant {
            current.extend(changed.into_iter().filter(|role| !current.contains(role)).collect::<Vec<Bson>>());
        } else {
            current.retain(|role| !changed.contains(role));
        }
        document.insert("roles", current);
    })
}

pub fn grant_roles(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    change_inherited(context, request, true)
}

pub fn revoke_roles(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    change_inherited(context, request, false)
}

/// Drops the role, and removes it from every user and role that held it, as MongoDB does.
pub fn drop_role(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let role = role_name(request)?;
    let _changing = context.security.change_lock.lock();
    let deleted = context.users.delete(store::ROLES_COLLECTION, &[store::document_id(&request.db, &role)])?;
    if deleted == 0 {
        return Err(CommandError::new(ROLE_NOT_FOUND, format!("Role '{role}@{}' not found", request.db)));
    }
    let gone = Bson::Document(doc! { "role": &role, "db": &request.db });
    for collection in [store::USERS_COLLECTION, store::ROLES_COLLECTION] {
        for mut holder in context.users.all(collection)? {
            let Ok(held) = holder.get_array("roles") else { continue };
            if !held.contains(&gone) {
                continue;
            }
            let kept: Vec<Bson> = held.iter().filter(|entry| **entry != gone).cloned().collect();
            holder.insert("roles", kept);
            if let Ok(id) = holder.get_str("_id").map(str::to_string) {
                context.users.replace(collection, &id, &holder)?;
            }
        }
    }
    context.security.invalidate();
    Ok(doc! { "ok": 1.0 })
}

pub fn roles_info(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let show_privileges = request.flag("showPrivileges")?;
    let show_builtin = request.flag("showBuiltinRoles")?;
    let wanted: Option<Vec<(String, String)>> = match request.first_value() {
        Some(Bson::Array(list)) => Some(roles::role_names(list, &request.db)),
        Some(value @ (Bson::String(_) | Bson::Document(_))) => Some(roles::role_names(std::slice::from_ref(value), &request.db)),
        _ => None,
    };
    let names: Vec<(String, String)> = match wanted {
        Some(names) => names,
        None => {
            let mut names: Vec<(String, String)> = Vec::new();
            if show_builtin {
                let builtins = roles::DATABASE_ROLES.iter().chain(if request.db == store::ADMIN { roles::ADMIN_ROLES } else { &[] });
                names.extend(builtins.map(|role| (role.to_string(), request.db.clone())));
            }
            for stored in context.users.all(store::ROLES_COLLECTION)? {
                if let (Ok(role), Ok(db)) = (stored.get_str("role"), stored.get_str("db")) {
                    if db == request.db {
                        names.push((role.to_string(), db.to_string()));
                    }
                }
            }
            names
        }
    };
    let mut described = Vec::new();
    for (role, db) in names {
        if let Some(description) = describe_role(context, &role, &db, show_privileges)? {
            described.push(Bson::Document(description));
        }
    }
    Ok(doc! { "roles": described, "ok": 1.0 })
}

/// rolesInfo's description of one role; None when it does not exist.
fn describe_role(context: &ServerContext, role: &str, db: &str, show_privileges: bool) -> CommandResult<Option<Document>> {
    let builtin = roles::is_builtin(role, db);
    let stored = if builtin { None } else { context.users.get(store::ROLES_COLLECTION, &store::document_id(db, role))? };
    if !builtin && stored.is_none() {
        return Ok(None);
    }
    let direct = stored.as_ref().and_then(|document| document.get_array("roles").ok()).cloned().unwrap_or_default();
    let resolved = roles::resolve(context.users.as_ref(), &[(role.to_string(), db.to_string())])?;
    let inherited: Vec<Bson> = resolved.roles.iter().filter(|(name, name_db)| name != role || name_db != db).map(|(name, name_db)| Bson::Document(doc! { "role": name, "db": name_db })).collect();
    let mut description = doc! { "_id": store::document_id(db, role), "role": role, "db": db, "isBuiltin": builtin, "roles": direct, "inheritedRoles": inherited };
    if show_privileges {
        let own = stored.as_ref().and_then(|document| document.get_array("privileges").ok()).cloned();
        let own = own.unwrap_or_else(|| if builtin { privileges_bson(&resolved.privileges) } else { Vec::new() });
        description.insert("privileges", own);
        description.insert("inheritedPrivileges", privileges_bson(&resolved.privileges));
    }
    Ok(Some(description))
}
