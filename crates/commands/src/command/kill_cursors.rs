//! `killCursors`: closes the named cursors and reports which were found.

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let ids = cursor_ids(request)?;
    let mut killed = Vec::new();
    let mut not_found = Vec::new();
    for id in ids {
        // As in MongoDB, a cursor is killable from any session: drivers send killCursors for a
        // dropped cursor without its session (the Rust driver does). Who may kill it is the
        // authorization check's business (its users, or killAnyCursor), done before this runs.
        if context.cursors.kill(id) {
            killed.push(Bson::Int64(id));
        } else {
            not_found.push(Bson::Int64(id));
        }
    }
    Ok(doc! {
        "cursorsKilled": killed,
        "cursorsNotFound": not_found,
        "cursorsAlive": Bson::Array(Vec::new()),
        "cursorsUnknown": Bson::Array(Vec::new()),
        "ok": 1.0,
    })
}

/// The command's collection and `cursors` checked (a router checks them with this too): the
/// ids to kill.
pub fn cursor_ids(request: &CommandRequest) -> CommandResult<Vec<i64>> {
    // bulkWrite's results cursor is named `admin.$cmd.bulkWrite`, not a collection.
    let bulk_write_results = request.db == "admin" && matches!(request.first_value(), Some(Bson::String(name)) if name == "$cmd.bulkWrite");
    if !bulk_write_results {
        request.collection_name()?;
    }
    let Some(ids) = request.optional_array("cursors")? else {
        return Err(CommandError::new(
            crate::error::MISSING_FIELD,
            "BSON field 'killCursors.cursors' is missing but a required field",
        ));
    };
    ids.iter().map(|id| match id {
        Bson::Int64(id) => Ok(*id),
        other => Err(request.wrong_type("cursors", "long", other)),
    }).collect()
}
