//! The privileges of commands whose needs depend on the request ([`crate::access::Access::Custom`]).

use bson::Bson;

use crate::auth::roles::Target;
use crate::request::CommandRequest;

fn named_collection(request: &CommandRequest) -> Target {
    match request.first_value() {
        Some(Bson::String(collection)) if !collection.is_empty() => Target::Collection(request.db.clone(), collection.clone()),
        _ => Target::Database(request.db.clone()),
    }
}

/// findAndModify reads and then updates or removes (and inserts when it upserts).
pub fn find_and_modify(request: &CommandRequest) -> Vec<(Target, &'static str)> {
    let target = named_collection(request);
    let removes = request.body.get("remove").and_then(crate::request::truthy).unwrap_or(false);
    let upserts = request.body.get("upsert").and_then(crate::request::truthy).unwrap_or(false);
    let mut needed = vec![(target.clone(), "find"), (target.clone(), if removes { "remove" } else { "update" })];
    if upserts {
        needed.push((target, "insert"));
    }
    needed
}

/// aggregate reads its source; `$out`/`$merge` also write their target in the same database;
/// `$currentOp` with `allUsers: true` needs inprog on the cluster.
pub fn aggregate(request: &CommandRequest) -> Vec<(Target, &'static str)> {
    let mut needed = vec![(named_collection(request), "find")];
    let stages = request.body.get_array("pipeline").map(|stages| stages.as_slice()).unwrap_or(&[]);
    for stage in stages.iter().filter_map(Bson::as_document) {
        let Some((name, argument)) = stage.iter().next() else { continue };
        match name.as_str() {
            "$out" | "$merge" => {
                let target = match argument {
                    Bson::String(collection) => Target::Collection(request.db.clone(), collection.clone()),
                    Bson::Document(spec) => {
                        let db = spec.get_str("db").unwrap_or(&request.db).to_string();
                        let collection = spec.get_str("coll").or_else(|_| spec.get_str("into")).unwrap_or_default().to_string();
                        Target::Collection(db, collection)
                    }
                    _ => named_collection(request),
                };
                needed.extend([(target.clone(), "insert"), (target.clone(), "remove"), (target, "update")]);
            }
            // allUsers (false by default) lists every user's operations and needs inprog;
            // otherwise the stage lists the caller's own (see aggregate_sources).
            "$currentOp" => {
                let all_users = argument.as_document().and_then(|spec| spec.get("allUsers")).and_then(crate::request::truthy).unwrap_or(false);
                needed = if all_users { vec![(Target::Cluster, "inprog")] } else { Vec::new() };
            }
            _ => {}
        }
    }
    needed
}

/// renameCollection within a database needs renameCollectionSameDB; across databases, read
/// and drop on the source and insert on the target. dropTarget also drops the target.
pub fn rename_collection(request: &CommandRequest) -> Vec<(Target, &'static str)> {
    let split = |namespace: Option<&str>| -> Target {
        match namespace.and_then(|namespace| namespace.split_once('.')) {
            Some((db, collection)) => Target::Collection(db.to_string(), collection.to_string()),
            None => Target::Database(String::new()),
        }
    };
    let source = split(request.body.get_str("renameCollection").ok());
    let target = split(request.body.get_str("to").ok());
    let same_database = matches!((&source, &target), (Target::Collection(from, _), Target::Collection(to, _)) if from == to);
    let mut needed = if same_database {
        vec![(source, "renameCollectionSameDB")]
    } else {
        vec![(source.clone(), "find"), (source, "dropCollection"), (target.clone(), "insert"), (target.clone(), "createIndex")]
    };
    if request.body.get("dropTarget").and_then(crate::request::truthy).unwrap_or(false) {
        needed.push((target, "dropCollection"));
    }
    needed
}

/// explain needs what the explained command needs.
pub fn explain(request: &CommandRequest) -> Vec<(Target, &'static str)> {
    let Some(Bson::Document(inner)) = request.body.get("explain") else { return vec![(Target::Database(request.db.clone()), "find")] };
    let Some((name, _)) = inner.iter().next() else { return vec![(Target::Database(request.db.clone()), "find")] };
    let Some(spec) = super::find_command(name) else { return vec![(Target::Database(request.db.clone()), "find")] };
    let mut body = inner.clone();
    body.insert("$db", request.db.clone());
    match CommandRequest::new(request.db.clone(), body, request.connection.clone()) {
        Ok(inner_request) if name != "explain" => crate::access::requirements_of(spec.access, &inner_request),
        _ => vec![(Target::Database(request.db.clone()), "find")],
    }
}

/// usersInfo on the caller's own user needs nothing; on others, viewUser.
pub fn users_info(request: &CommandRequest) -> Vec<(Target, &'static str)> {
    let own = request.connection.session.authenticated_user_names();
    let asks_only_for_self = match request.first_value() {
        Some(Bson::String(user)) => own.iter().any(|name| &name.user == user && name.db == request.db),
        Some(Bson::Document(spec)) => own.iter().any(|name| spec.get_str("user") == Ok(name.user.as_str()) && spec.get_str("db") == Ok(name.db.as_str())),
        _ => false,
    };
    if asks_only_for_self {
        Vec::new()
    } else {
        vec![(Target::Database(request.db.clone()), "viewUser")]
    }
}

/// The databases of the roles a request names (strings are roles of its own database).
fn role_databases(request: &CommandRequest) -> Vec<String> {
    let roles = request.body.get_array("roles").map(|roles| roles.as_slice()).unwrap_or(&[]);
    let mut databases: Vec<String> = crate::auth::roles::role_names(roles, &request.db).into_iter().map(|(_, db)| db).collect();
    databases.sort();
    databases.dedup();
    databases
}

fn on_role_databases(request: &CommandRequest, action: &'static str) -> Vec<(Target, &'static str)> {
    role_databases(request).into_iter().map(|db| (Target::Database(db), action)).collect()
}

/// createUser and createRole: the create action here, grantRole on each granted role's database.
pub fn create_user(request: &CommandRequest) -> Vec<(Target, &'static str)> {
    let mut needed = vec![(Target::Database(request.db.clone()), "createUser")];
    needed.extend(on_role_databases(request, "grantRole"));
    needed
}

pub fn create_role(request: &CommandRequest) -> Vec<(Target, &'static str)> {
    let mut needed = vec![(Target::Database(request.db.clone()), "createRole")];
    needed.extend(on_role_databases(request, "grantRole"));
    needed
}

/// updateUser: changePassword, changeCustomData, and grant/revoke on the roles' databases.
pub fn update_user(request: &CommandRequest) -> Vec<(Target, &'static str)> {
    let here = || Target::Database(request.db.clone());
    let mut needed = Vec::new();
    if request.body.contains_key("pwd") {
        needed.push((here(), "changePassword"));
    }
    if request.body.contains_key("customData") {
        needed.push((here(), "changeCustomData"));
    }
    if request.body.contains_key("roles") {
        needed.extend(on_role_databases(request, "grantRole"));
        needed.push((here(), "revokeRole"));
    }
    needed
}

/// grantRolesToUser/grantRolesToRole: grantRole on each role's database.
pub fn grant_roles(request: &CommandRequest) -> Vec<(Target, &'static str)> {
    on_role_databases(request, "grantRole")
}

pub fn revoke_roles(request: &CommandRequest) -> Vec<(Target, &'static str)> {
    on_role_databases(request, "revokeRole")
}

/// bulkWrite: on each nsInfo namespace, insert, update or remove for the operations that name
/// it (insert too for an upsert), and bypassDocumentValidation when asked (as mongod's
/// getPrivileges). Entries the parser will refuse add nothing: the command fails anyway.
pub fn bulk_write(request: &CommandRequest) -> Vec<(Target, &'static str)> {
    use crate::command::bulk_write::{operation_target, split_namespace};
    const ACTIONS: [&str; 4] = ["insert", "update", "remove", "bypassDocumentValidation"];
    let array = |field: &str| request.body.get_array(field).map(|items| items.as_slice()).unwrap_or(&[]);
    let namespaces: Vec<Option<Target>> = array("nsInfo")
        .iter()
        .map(|entry| {
            let namespace = entry.as_document()?.get_str("ns").ok()?;
            split_namespace(namespace).map(|(db, collection)| Target::Collection(db, collection))
        })
        .collect();
    // Per namespace, a bit per action of ACTIONS.
    let mut wanted = vec![0u8; namespaces.len()];
    for operation in array("ops").iter().filter_map(Bson::as_document) {
        let Some((kind, index)) = operation_target(operation) else { continue };
        let Some(bits) = wanted.get_mut(index) else { continue };
        *bits |= match kind {
            "insert" => 1,
            "update" if operation.get("upsert").and_then(crate::request::truthy).unwrap_or(false) => 2 | 1,
            "update" => 2,
            "delete" => 4,
            _ => 0,
        };
    }
    if request.body.get("bypassDocumentValidation").and_then(crate::request::truthy).unwrap_or(false) {
        wanted.iter_mut().for_each(|bits| *bits |= 8);
    }
    let mut needed = Vec::new();
    for (target, bits) in namespaces.iter().zip(wanted) {
        let Some(target) = target else { continue };
        for (bit, action) in ACTIONS.iter().enumerate() {
            if bits & (1 << bit) != 0 {
                needed.push((target.clone(), *action));
            }
        }
    }
    needed
}
