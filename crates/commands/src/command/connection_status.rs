//! `connectionStatus`: Myriad has no authentication yet, so no users or roles.

use bson::{doc, Document};

use crate::{CommandRequest, CommandResult, ServerContext};

pub fn run(_context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let mut auth_info = doc! { "authenticatedUsers": [], "authenticatedUserRoles": [] };
    if request.flag("showPrivileges")? {
        auth_info.insert("authenticatedUserPrivileges", bson::Bson::Array(Vec::new()));
    }
    Ok(doc! { "authInfo": auth_info, "ok": 1.0 })
}
