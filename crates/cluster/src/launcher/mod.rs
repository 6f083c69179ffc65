//! `myriad cluster --shards N --dir DIR --port P [--replicas R]`: a local cluster for
//! development and tests, as child processes of the same executable: one config server, N
//! shards, one router. With `--replicas R` (R > 1) the config server and every shard are
//! R-member replica sets (`configRepl`, `shard0`, `shard1`...), added as `name/hosts`.
//!
//! Invariants:
//! - The addresses are recorded in `DIR/cluster.json` at the first start and reused after, so
//!   the catalog's shard hosts stay valid across restarts (the cluster comes back with its
//!   data); a restart may add shards, never remove them.
//! - Every child started is stopped: on SIGINT or SIGTERM, or when a child exits on its own,
//!   the router, then the shards, then the config server get SIGTERM (a clean shutdown that
//!   flushes storage), and SIGKILL after [`supervision::STOP_TIMEOUT`].

pub mod replica_set;
pub mod supervision;

use std::path::{Path, PathBuf};

use bson::doc;
use serde_json::json;

use crate::client::NodeClient;
use supervision::{offset_port, path_argument, stop_all, wait_until_ready, watch, Member, Spawner, StopSignals};

const LAYOUT_FILE: &str = "cluster.json";

pub struct ClusterOptions {
    pub shards: usize,
    /// Members of the config server and of each shard (1: single nodes).
    pub replicas: usize,
    pub dir: PathBuf,
    /// The router's port (0: free ports, recorded for restarts); the config server takes P+1
    /// and the shards P+2... when P is given.
    pub port: u16,
    pub bind_ip: String,
    /// The `myriad` executable the members run.
    pub executable: PathBuf,
    /// Extra arguments for every config server and shard (`--cacheSizeMB`...).
    pub member_arguments: Vec<String>,
    /// Arguments for every member, the router included: `--keyFile` and the TLS flags.
    pub security_arguments: Vec<String>,
}

/// The members' ports, as recorded in `DIR/cluster.json`. With replicas, `config` and each
/// shard's port are their first member's, and `replica_ports` the others' (config first).
#[derive(Debug, PartialEq)]
struct Layout {
    router: u16,
    config: u16,
    shards: Vec<u16>,
    replica_ports: Vec<Vec<u16>>,
}

/// The replica-set name of the config server.
const CONFIG_SET: &str = "configRepl";

impl Layout {
    fn load(path: &Path) -> Result<Option<Layout>, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|error| format!("{} is not JSON: {error}", path.display()))?;
        let port = |value: &serde_json::Value| value.as_u64().and_then(|port| u16::try_from(port).ok());
        let malformed = || format!("{} does not describe a cluster", path.display());
        Ok(Some(Layout {
            router: port(&value["routerPort"]).ok_or_else(malformed)?,
            config: port(&value["configPort"]).ok_or_else(malformed)?,
            shards: value["shardPorts"].as_array().ok_or_else(malformed)?.iter().map(port).collect::<Option<Vec<u16>>>().ok_or_else(malformed)?,
            replica_ports: match value.get("replicaPorts") {
                None => Vec::new(),
                Some(groups) => groups
                    .as_array()
                    .ok_or_else(malformed)?
                    .iter()
                    .map(|group| group.as_array().and_then(|ports| ports.iter().map(port).collect::<Option<Vec<u16>>>()))
                    .collect::<Option<Vec<Vec<u16>>>>()
                    .ok_or_else(malformed)?,
            },
        }))
    }

    fn save(&self, path: &Path) -> Result<(), String> {
        let mut value = json!({ "routerPort": self.router, "configPort": self.config, "shardPorts": self.shards });
        if !self.replica_ports.is_empty() {
            value["replicaPorts"] = json!(self.replica_ports);
        }
        std::fs::write(path, value.to_string()).map_err(|error| format!("cannot write {}: {error}", path.display()))
    }

    /// Members per group (1 without replicas).
    fn replicas(&self) -> usize {
        self.replica_ports.first().map_or(1, |others| others.len() + 1)
    }

    /// Group `index`'s member ports: 0 the config server, 1.. the shards.
    fn group_ports(&self, index: usize) -> Vec<u16> {
        let first = if index == 0 { self.config } else { self.shards[index - 1] };
        std::iter::once(first).chain(self.replica_ports.get(index).into_iter().flatten().copied()).collect()
    }
}

/// Where a plan's new ports come from: `--port P` gives P + offset; `--port 0` gives free ports
/// drawn in one call, so no two members get the same one (the OS may hand out a port again once
/// the listener that found it closed).
enum Ports {
    Offsets(u16),
    Free(std::vec::IntoIter<u16>),
}

impl Ports {
    fn take(&mut self, offset: usize) -> Result<u16, String> {
        match self {
            Ports::Offsets(base) => offset_port(*base, offset),
            Ports::Free(ports) => ports.next().ok_or_else(|| "the plan drew too few free ports".to_string()),
        }
    }
}

fn plan_layout(options: &ClusterOptions, existing: Option<Layout>) -> Result<Layout, String> {
    let replicas = options.replicas.max(1);
    if let Some(layout) = &existing {
        if layout.shards.len() > options.shards {
            return Err(format!("the cluster in this directory has {} shards; start it with --shards {} or more", layout.shards.len(), layout.shards.len()));
        }
        if layout.replicas() != replicas {
            return Err(format!("the cluster in this directory has {} members per shard; start it with --replicas {}", layout.replicas(), layout.replicas()));
        }
    }
    let added_shards = options.shards - existing.as_ref().map_or(0, |layout| layout.shards.len());
    let added_ports = added_shards * replicas + if existing.is_none() { 1 + replicas } else { 0 };
    let mut ports = match options.port {
        0 => Ports::Free(supervision::free_ports(added_ports, &options.bind_ip)?.into_iter()),
        base => Ports::Offsets(base),
    };
    // Router, then each group's R members: config at 1..=R, shard k at 1+R(k+1)...
    let group_ports = |ports: &mut Ports, group: usize| (0..replicas).map(|member| ports.take(1 + group * replicas + member)).collect::<Result<Vec<u16>, String>>();
    let mut layout = match existing {
        Some(layout) => layout,
        None => {
            let router = ports.take(0)?;
            let config = group_ports(&mut ports, 0)?;
            let replica_ports = if replicas > 1 { vec![config[1..].to_vec()] } else { Vec::new() };
            Layout { router, config: config[0], shards: Vec::new(), replica_ports }
        }
    };
    while layout.shards.len() < options.shards {
        let shard = group_ports(&mut ports, 1 + layout.shards.len())?;
        layout.shards.push(shard[0]);
        if replicas > 1 {
            layout.replica_ports.push(shard[1..].to_vec());
        }
    }
    Ok(layout)
}

/// Starts the cluster, prints the router's connection string, and runs until a signal.
pub fn run(options: ClusterOptions) -> Result<(), String> {
    std::fs::create_dir_all(options.dir.join("logs")).map_err(|error| format!("cannot create {}: {error}", options.dir.display()))?;
    let layout_path = options.dir.join(LAYOUT_FILE);
    let layout = plan_layout(&options, Layout::load(&layout_path)?)?;
    layout.save(&layout_path)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|error| format!("cannot start the runtime: {error}"))?;
    let mut signals = runtime.block_on(async { StopSignals::catch() })?;
    let mut members: Vec<Member> = Vec::new();
    let started = runtime.block_on(start_members(&options, &layout, &mut members));
    if let Err(error) = started {
        stop_all(members);
        return Err(error);
    }
    let host = &options.bind_ip;
    println!("mongodb://{host}:{}/", layout.router);
    let group = |index: usize| layout.group_ports(index).iter().map(|port| format!("{host}:{port}")).collect::<Vec<_>>().join(",");
    println!("config server {}, shards {}", group(0), (1..=layout.shards.len()).map(group).collect::<Vec<_>>().join(", "));
    println!("data and logs under {}; Ctrl-C stops the cluster", options.dir.display());
    let outcome = runtime.block_on(watch(&mut members, &mut signals));
    stop_all(members);
    outcome
}

async fn start_members(options: &ClusterOptions, layout: &Layout, members: &mut Vec<Member>) -> Result<(), String> {
    let host = &options.bind_ip;
    let spawner = Spawner {
        executable: options.executable.clone(),
        logs_directory: options.dir.join("logs"),
        bind_ip: options.bind_ip.clone(),
        common_arguments: options.security_arguments.clone(),
    };
    let replicated = layout.replicas() > 1;
    // Group 0 is the config server, group k the shard k - 1; each is one node or a set.
    let mut addresses = Vec::new();
    for group in 0..=layout.shards.len() {
        let (role, base_name) = if group == 0 { ("--configsvr", "config".to_string()) } else { ("--shardsvr", format!("shard{}", group - 1)) };
        let set_name = if group == 0 { CONFIG_SET.to_string() } else { base_name.clone() };
        let ports = layout.group_ports(group);
        for (member, port) in ports.iter().enumerate() {
            let name = if replicated { format!("{base_name}-{member}") } else { base_name.clone() };
            let mut arguments = vec![role.to_string(), "--dbpath".into(), path_argument(&options.dir.join(&name)), "--port".into(), port.to_string()];
            if replicated {
                arguments.extend(["--replSet".to_string(), set_name.clone()]);
            }
            arguments.extend(options.member_arguments.iter().cloned());
            members.push(spawner.spawn(&name, &arguments)?);
        }
        let hosts: Vec<String> = ports.iter().map(|port| format!("{host}:{port}")).collect();
        if replicated {
            replica_set::bring_up(&set_name, &hosts, members).await?;
            addresses.push(format!("{set_name}/{}", hosts.join(",")));
        } else {
            wait_until_ready(&hosts[0], members).await?;
            addresses.push(hosts[0].clone());
        }
    }
    let config_address = addresses.remove(0);
    members.push(spawner.spawn("router", &["router".into(), "--configdb".into(), config_address, "--port".into(), layout.router.to_string()])?);
    let router_address = format!("{host}:{}", layout.router);
    wait_until_ready(&router_address, members).await?;
    let router = NodeClient::new(&router_address);
    for address in &addresses {
        router.run("admin", doc! { "addShard": address.as_str() }).await.map_err(|error| format!("addShard {address} failed: {error}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(port: u16, shards: usize, dir: &Path) -> ClusterOptions {
        ClusterOptions {
            shards,
            replicas: 1,
            dir: dir.to_path_buf(),
            port,
            bind_ip: "127.0.0.1".into(),
            executable: PathBuf::from("myriad"),
            member_arguments: Vec::new(),
            security_arguments: Vec::new(),
        }
    }

    #[test]
    fn layouts_are_kept_across_restarts() {
        let directory = tempfile::tempdir().expect("temp dir");
        let path = directory.path().join(LAYOUT_FILE);
        let first = plan_layout(&options(40000, 2, directory.path()), None).expect("layout");
        assert_eq!(first, Layout { router: 40000, config: 40001, shards: vec![40002, 40003], replica_ports: Vec::new() });
        first.save(&path).expect("saved");
        let loaded = Layout::load(&path).expect("loads").expect("present");
        assert_eq!(loaded, first);
        let grown = plan_layout(&options(0, 3, directory.path()), Some(loaded)).expect("grows");
        assert_eq!(&grown.shards[..2], &[40002, 40003]);
        assert_eq!(grown.shards.len(), 3);
        let fewer = plan_layout(&options(40000, 1, directory.path()), Layout::load(&path).expect("loads"));
        assert!(fewer.is_err());
    }

    #[test]
    fn free_ports_are_distinct_across_every_member() {
        let directory = tempfile::tempdir().expect("temp dir");
        for _ in 0..20 {
            let layout = plan_layout(&ClusterOptions { replicas: 3, ..options(0, 4, directory.path()) }, None).expect("layout");
            let mut ports: Vec<u16> = (0..=layout.shards.len()).flat_map(|group| layout.group_ports(group)).chain([layout.router]).collect();
            assert_eq!(ports.len(), 1 + 5 * 3);
            ports.sort_unstable();
            ports.dedup();
            assert_eq!(ports.len(), 1 + 5 * 3, "{layout:?}");
        }
    }
}
