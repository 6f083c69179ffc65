//! `configureFailPoint` (a test command: it exists only with `--setParameter
//! enableTestCommands=1`, see [`crate::table::find_command`]): sets a fail point of the process
//! ([`crate::fail_point`]) and answers the times it was entered before (`count`).

use bson::{Bson, Document};

use crate::error::{CommandError, CommandResult};
use crate::fail_point::configured_reply;
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = match request.first_value() {
        Some(Bson::String(name)) => name.as_str(),
        Some(other) => return Err(crate::request::field_type_error("configureFailPoint", "string", other)),
        None => return Err(CommandError::bad_value("configureFailPoint needs a fail point name")),
    };
    let count = context.fail_points.configure(name, &request.body)?;
    Ok(configured_reply(count))
}
