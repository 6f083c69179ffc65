//! `getCmdLineOpts`: argv and the parsed options, in mongod's shape.

use bson::{doc, Document};

use crate::{CommandRequest, CommandResult, ServerContext};

pub fn run(context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    let options = &context.options;
    let mut parsed = doc! {
        "net": { "bindIp": &options.bind_ip, "port": i32::from(options.port) },
        "storage": { "dbPath": &options.dbpath },
    };
    if let Some(path) = &options.logpath {
        parsed.insert("systemLog", doc! { "destination": "file", "path": path });
    }
    Ok(doc! { "argv": options.argv.clone(), "parsed": parsed, "ok": 1.0 })
}
