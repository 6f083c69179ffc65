//! `myriad replset --members N --dir DIR --port P`: a local replica set for development, tests
//! and benchmarks, as child processes of the same executable: member `i` runs `myriad
//! --replSet NAME --dbpath DIR/member<i> --port P+i` (P = 0: free ports).
//!
//! Invariants:
//! - The set's name and ports are recorded in `DIR/replset.json` at the first start and reused
//!   after, so the members' hosts in the replica set config stay valid across restarts.
//! - The set is initiated (on member 0) only when no member reports a config: a restart over
//!   an existing DIR just starts the members, which elect a primary among themselves.
//! - The connection string is printed only once some member is the writable primary.
//! - Every child started is stopped (SIGTERM, SIGKILL after a timeout) on SIGINT or SIGTERM,
//!   when a member exits on its own, and when start-up fails.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use serde_json::json;

use super::supervision::{self, offset_port, path_argument, stop_all, wait_until_ready, watch, Member, Spawner, StopSignals};
use crate::client::NodeClient;

const LAYOUT_FILE: &str = "replset.json";
/// How long the set may take to have a writable primary after its members answer.
const PRIMARY_TIMEOUT: Duration = Duration::from_secs(60);
/// replSetInitiate's error when the member already has a config (AlreadyInitialized).
const ALREADY_INITIALIZED: i32 = 23;

pub struct ReplicaSetOptions {
    /// The set's name (`--replSet`), `rs0` by default.
    pub name: String,
    pub members: usize,
    pub dir: PathBuf,
    /// Member 0's port; member i takes P+i (0: free ports, recorded for restarts).
    pub port: u16,
    pub bind_ip: String,
    /// The `myriad` executable the members run.
    pub executable: PathBuf,
    /// Extra arguments for every member (`--cacheSizeMB`...).
    pub member_arguments: Vec<String>,
}

/// The set as recorded in `DIR/replset.json`.
#[derive(Debug, PartialEq)]
struct Layout {
    name: String,
    ports: Vec<u16>,
}

impl Layout {
    fn load(path: &Path) -> Result<Option<Layout>, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|error| format!("{} is not JSON: {error}", path.display()))?;
        let malformed = || format!("{} does not describe a replica set", path.display());
        let port = |value: &serde_json::Value| value.as_u64().and_then(|port| u16::try_from(port).ok());
        Ok(Some(Layout {
            name: value["name"].as_str().ok_or_else(malformed)?.to_string(),
            ports: value["ports"].as_array().ok_or_else(malformed)?.iter().map(port).collect::<Option<Vec<u16>>>().ok_or_else(malformed)?,
        }))
    }

    fn save(&self, path: &Path) -> Result<(), String> {
        let text = json!({ "name": self.name, "ports": self.ports }).to_string();
        std::fs::write(path, text).map_err(|error| format!("cannot write {}: {error}", path.display()))
    }

    fn hosts(&self, bind_ip: &str) -> Vec<String> {
        self.ports.iter().map(|port| format!("{bind_ip}:{port}")).collect()
    }
}

fn plan_layout(options: &ReplicaSetOptions, existing: Option<Layout>) -> Result<Layout, String> {
    if let Some(layout) = existing {
        if layout.ports.len() != options.members {
            return Err(format!("the replica set in this directory has {} members; start it with --members {}", layout.ports.len(), layout.ports.len()));
        }
        if layout.name != options.name {
            return Err(format!("the replica set in this directory is named {}", layout.name));
        }
        return Ok(layout);
    }
    let ports = if options.port == 0 {
        supervision::free_ports(options.members, &options.bind_ip)?
    } else {
        (0..options.members).map(|offset| offset_port(options.port, offset)).collect::<Result<Vec<u16>, String>>()?
    };
    Ok(Layout { name: options.name.clone(), ports })
}

/// The connection string drivers use for the set.
pub fn connection_string(hosts: &[String], name: &str) -> String {
    format!("mongodb://{}/?replicaSet={name}", hosts.join(","))
}

/// Starts the set, prints its connection string, and runs until a signal.
pub fn run(options: ReplicaSetOptions) -> Result<(), String> {
    std::fs::create_dir_all(options.dir.join("logs")).map_err(|error| format!("cannot create {}: {error}", options.dir.display()))?;
    let layout_path = options.dir.join(LAYOUT_FILE);
    let layout = plan_layout(&options, Layout::load(&layout_path)?)?;
    layout.save(&layout_path)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|error| format!("cannot start the runtime: {error}"))?;
    let mut signals = runtime.block_on(async { StopSignals::catch() })?;
    let mut members: Vec<Member> = Vec::new();
    let started = runtime.block_on(start_members(&options, &layout, &mut members));
    let primary = match started {
        Ok(primary) => primary,
        Err(error) => {
            stop_all(members);
            return Err(error);
        }
    };
    let hosts = layout.hosts(&options.bind_ip);
    println!("{}", connection_string(&hosts, &layout.name));
    println!("replica set {} of {} members, primary {primary}", layout.name, hosts.len());
    println!("data and logs under {}; Ctrl-C stops the replica set", options.dir.display());
    let outcome = runtime.block_on(watch(&mut members, &mut signals));
    stop_all(members);
    outcome
}

/// Starts every member, initiates the set if no member has a config yet, and returns the
/// primary's host once there is one.
async fn start_members(options: &ReplicaSetOptions, layout: &Layout, members: &mut Vec<Member>) -> Result<String, String> {
    let spawner = Spawner {
        executable: options.executable.clone(),
        logs_directory: options.dir.join("logs"),
        bind_ip: options.bind_ip.clone(),
        common_arguments: Vec::new(),
    };
    for (index, port) in layout.ports.iter().enumerate() {
        let name = format!("member{index}");
        let mut arguments = vec!["--replSet".to_string(), layout.name.clone(), "--dbpath".into(), path_argument(&options.dir.join(&name)), "--port".into(), port.to_string()];
        arguments.extend(options.member_arguments.iter().cloned());
        members.push(spawner.spawn(&name, &arguments)?);
    }
    bring_up(&layout.name, &layout.hosts(&options.bind_ip), members).await
}

/// Waits for the started members at `hosts`, initiates set `name` over them unless a member
/// already holds a config (a restart), and returns the primary's host once there is one.
pub async fn bring_up(name: &str, hosts: &[String], members: &mut [Member]) -> Result<String, String> {
    for host in hosts {
        wait_until_ready(host, members).await?;
    }
    let clients: Vec<_> = hosts.iter().map(|host| NodeClient::with_timeout(host, Duration::from_secs(5))).collect();
    if !any_member_configured(&clients).await {
        initiate(&clients[0], name, hosts).await?;
    }
    wait_for_primary(&clients, members).await
}

/// Whether some member's hello names the set (it holds a config from an earlier start).
async fn any_member_configured(clients: &[std::sync::Arc<NodeClient>]) -> bool {
    for client in clients {
        if let Ok(hello) = client.run("admin", doc! { "hello": 1 }).await {
            if hello.contains_key("setName") {
                return true;
            }
        }
    }
    false
}

async fn initiate(client: &NodeClient, name: &str, hosts: &[String]) -> Result<(), String> {
    let members: Vec<Bson> = hosts.iter().enumerate().map(|(index, host)| Bson::Document(doc! { "_id": index as i32, "host": host })).collect();
    let config = doc! { "_id": name, "members": members };
    match client.run("admin", doc! { "replSetInitiate": config }).await {
        Ok(_) => Ok(()),
        Err(error) if error.code() == ALREADY_INITIALIZED => Ok(()),
        Err(error) => Err(format!("replSetInitiate on {} failed: {error}", client.address())),
    }
}

/// Polls every member's hello until one is the writable primary; its host.
async fn wait_for_primary(clients: &[std::sync::Arc<NodeClient>], members: &mut [Member]) -> Result<String, String> {
    let deadline = Instant::now() + PRIMARY_TIMEOUT;
    loop {
        supervision::check_running(members, " while the set elected a primary")?;
        for client in clients {
            let hello: Option<Document> = client.run("admin", doc! { "hello": 1 }).await.ok();
            if hello.as_ref().is_some_and(|hello| hello.get_bool("isWritablePrimary").unwrap_or(false)) {
                return Ok(client.address().to_string());
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("no member became primary within {PRIMARY_TIMEOUT:?}; see the logs"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(port: u16, members: usize, dir: &Path) -> ReplicaSetOptions {
        ReplicaSetOptions {
            name: "rs0".into(),
            members,
            dir: dir.to_path_buf(),
            port,
            bind_ip: "127.0.0.1".into(),
            executable: PathBuf::from("myriad"),
            member_arguments: Vec::new(),
        }
    }

    #[test]
    fn layouts_are_kept_across_restarts() {
        let directory = tempfile::tempdir().expect("temp dir");
        let path = directory.path().join(LAYOUT_FILE);
        let first = plan_layout(&options(40000, 3, directory.path()), None).expect("layout");
        assert_eq!(first, Layout { name: "rs0".into(), ports: vec![40000, 40001, 40002] });
        first.save(&path).expect("saved");
        let loaded = Layout::load(&path).expect("loads").expect("present");
        assert_eq!(loaded, first);
        let again = plan_layout(&options(0, 3, directory.path()), Some(loaded)).expect("same set");
        assert_eq!(again.ports, vec![40000, 40001, 40002]);
        assert!(plan_layout(&options(0, 5, directory.path()), Layout::load(&path).expect("loads")).is_err());
    }

    #[test]
    fn free_ports_are_distinct_and_the_uri_names_the_set() {
        let directory = tempfile::tempdir().expect("temp dir");
        let layout = plan_layout(&options(0, 3, directory.path()), None).expect("layout");
        assert_eq!(layout.ports.len(), 3);
        assert!(layout.ports.iter().all(|port| *port != 0));
        assert!(layout.ports[0] != layout.ports[1] && layout.ports[1] != layout.ports[2] && layout.ports[0] != layout.ports[2]);
        let hosts = vec!["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()];
        assert_eq!(connection_string(&hosts, "rs0"), "mongodb://127.0.0.1:1,127.0.0.1:2/?replicaSet=rs0");
    }
}
