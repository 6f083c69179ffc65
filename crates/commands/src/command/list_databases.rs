//! `listDatabases`: per-database totals come from the stats family, so the cost does not grow
//! with the number of collections.
//!
//! With `--auth`, as mongod: a user holding the cluster's `listDatabases` action sees every
//! database; any other authenticated user sees only the databases some privilege of theirs
//! reaches (`authorizedDatabases`, whose default is true exactly when the user lacks the
//! action; `authorizedDatabases: false` without it is Unauthorized).

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_query::filter::Filter;

use crate::auth::roles::{Resolved, Target};
use crate::error::{CommandError, CommandResult, UNAUTHORIZED};
use crate::{CommandRequest, ServerContext};

/// The privileges that decide which databases are listed; None lists them all.
fn authorized_only(context: &ServerContext, request: &CommandRequest) -> CommandResult<Option<Vec<Arc<Resolved>>>> {
    let asked = request.optional_flag("authorizedDatabases")?;
    let Some(resolved) = crate::access::privileges_of(context, request)? else { return Ok(None) };
    let may_list_all = resolved.iter().any(|granted| granted.allows(&Target::Cluster, "listDatabases"));
    match asked {
        Some(false) if !may_list_all => Err(CommandError::new(UNAUTHORIZED, "Insufficient permissions to list all databases")),
        Some(false) => Ok(None),
        Some(true) => Ok(Some(resolved)),
        None if may_list_all => Ok(None),
        None => Ok(Some(resolved)),
    }
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let filter = match request.optional_document("filter")? {
        Some(filter) if !filter.is_empty() => Some(Filter::parse(filter)?),
        _ => None,
    };
    let name_only = request.flag("nameOnly")?;
    let authorized = authorized_only(context, request)?;
    let mut databases = Vec::new();
    let mut total_size = 0i64;
    for database in context.backend.list_databases()? {
        if let Some(resolved) = &authorized {
            if !resolved.iter().any(|granted| granted.reaches_database(&database.name)) {
                continue;
            }
        }
        let size = database.size_on_disk_bytes;
        let entry = doc! { "name": &database.name, "sizeOnDisk": size, "empty": database.empty };
        if filter.as_ref().is_none_or(|filter| filter.matches(&entry)) {
            total_size += size;
            databases.push(Bson::Document(if name_only { doc! { "name": &database.name } } else { entry }));
        }
    }
    if name_only {
        return Ok(doc! { "databases": databases, "ok": 1.0 });
    }
    Ok(doc! {
        "databases": databases,
        "totalSize": total_size,
        "totalSizeMb": total_size / (1024 * 1024),
        "ok": 1.0,
    })
}
