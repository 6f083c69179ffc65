//! `connectionStatus`: the users authenticated on this connection and their roles (and, with
//! `showPrivileges`, the privileges those roles grant).

use bson::{doc, Bson, Document};

use crate::{CommandRequest, CommandResult, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let users = request.connection.session.authenticated_user_names();
    let mut roles = Vec::new();
    let mut privileges = Vec::new();
    for user in &users {
        let resolved = context.security.resolve(context.users.as_ref(), user)?;
        roles.extend(resolved.roles.iter().map(|(role, db)| Bson::Document(doc! { "role": role, "db": db })));
        privileges.extend(resolved.privileges.iter().map(|privilege| Bson::Document(privilege.to_document())));
    }
    let authenticated: Vec<Bson> = users.iter().map(|user| Bson::Document(doc! { "user": &user.user, "db": &user.db })).collect();
    let mut auth_info = doc! { "authenticatedUsers": authenticated, "authenticatedUserRoles": roles };
    if request.flag("showPrivileges")? {
        auth_info.insert("authenticatedUserPrivileges", privileges);
    }
    Ok(doc! { "authInfo": auth_info, "ok": 1.0 })
}
