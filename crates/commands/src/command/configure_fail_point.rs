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
    if name == REPLICATION_NETWORK_PARTITION {
        let Some(member) = context.replication.get() else {
            return Err(CommandError::new(crate::error::ErrorCode::new(76), "replicationNetworkPartition needs a replica-set member"));
        };
        member.set_unreachable(partition_hosts(request, name)?);
        return Ok(configured_reply(0));
    }
    if name == CLUSTER_NETWORK_PARTITION {
        crate::fail_point::set_cluster_partition(partition_hosts(request, name)?);
        return Ok(configured_reply(0));
    }
    let count = context.fail_points.configure(name, &request.body)?;
    Ok(configured_reply(count))
}

/// A replica-set member's test fail point: `{mode: "alwaysOn", data: {hosts: [...]}}` makes it
/// send nothing to those members (`mode: "off"` heals); set on both sides, a partition.
const REPLICATION_NETWORK_PARTITION: &str = "replicationNetworkPartition";
/// The same for the calls a router or a shard makes to other cluster members (commands, a
/// coordinator's prepare and decision): they fail as unreachable hosts do.
const CLUSTER_NETWORK_PARTITION: &str = "clusterNetworkPartition";

/// The hosts of a partition fail point: `data.hosts` for `alwaysOn`, none for `off`.
fn partition_hosts(request: &CommandRequest, name: &str) -> CommandResult<Vec<String>> {
    let hosts = match request.body.get("mode") {
        Some(Bson::String(mode)) if mode == "off" => Vec::new(),
        Some(Bson::String(mode)) if mode == "alwaysOn" => {
            let data = request.optional_document("data")?.cloned().unwrap_or_default();
            match data.get("hosts") {
                Some(Bson::Array(hosts)) => hosts
                    .iter()
                    .map(|host| host.as_str().map(str::to_string).ok_or_else(|| CommandError::bad_value("data.hosts holds host:port strings")))
                    .collect::<CommandResult<Vec<String>>>()?,
                _ => return Err(CommandError::bad_value(format!("{name} needs data.hosts"))),
            }
        }
        _ => return Err(CommandError::bad_value(format!("{name} takes mode alwaysOn or off"))),
    };
    Ok(hosts)
}
