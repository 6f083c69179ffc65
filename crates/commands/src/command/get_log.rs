//! `getLog`: `"*"` lists the log names; `global` and `startupWarnings` return recent lines.

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    match request.first_value() {
        Some(Bson::String(name)) if name == "*" => Ok(doc! { "names": ["global", "startupWarnings"], "ok": 1.0 }),
        Some(Bson::String(name)) if name == "global" => {
            let lines = context.logger.recent_lines();
            Ok(doc! { "totalLinesWritten": lines.len() as i32, "log": lines, "ok": 1.0 })
        }
        Some(Bson::String(name)) if name == "startupWarnings" => {
            Ok(doc! { "totalLinesWritten": 0, "log": Bson::Array(Vec::new()), "ok": 1.0 })
        }
        Some(Bson::String(name)) => Err(CommandError::bad_value(format!("no RamLog named: {name}"))),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "Argument to getLog must be of type String; found {} of type {}",
            other,
            crate::request::type_name(other)
        ))),
        None => Err(CommandError::bad_value("getLog requires a log name")),
    }
}
