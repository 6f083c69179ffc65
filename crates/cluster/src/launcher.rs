//! `myriad cluster --shards N --dir DIR --port P`: a local cluster for development and tests,
//! as child processes of the same executable: one config server, N shards, one router.
//!
//! Invariants:
//! - The addresses are recorded in `DIR/cluster.json` at the first start and reused after, so
//!   the catalog's shard hosts stay valid across restarts (the cluster comes back with its
//!   data); a restart may add shards, never remove them.
//! - Every child started is stopped: on SIGINT or SIGTERM, or when a child exits on its own,
//!   the router, then the shards, then the config server get SIGTERM (a clean shutdown that
//!   flushes storage), and SIGKILL after [`STOP_TIMEOUT`].

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bson::doc;
use serde_json::json;

use crate::client::NodeClient;

/// How long a member may take to answer after it started.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a member may take to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often children are checked while the cluster runs.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);
const LAYOUT_FILE: &str = "cluster.json";

pub struct ClusterOptions {
    pub shards: usize,
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

/// The members' ports, as recorded in `DIR/cluster.json`.
#[derive(Debug, PartialEq)]
struct Layout {
    router: u16,
    config: u16,
    shards: Vec<u16>,
}

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
        }))
    }

    fn save(&self, path: &Path) -> Result<(), String> {
        let text = json!({ "routerPort": self.router, "configPort": self.config, "shardPorts": self.shards }).to_string();
        std::fs::write(path, text).map_err(|error| format!("cannot write {}: {error}", path.display()))
    }
}

/// A port nothing listens on now (the OS's choice).
fn free_port(bind_ip: &str) -> Result<u16, String> {
    let listener = TcpListener::bind((bind_ip, 0)).map_err(|error| format!("cannot find a free port: {error}"))?;
    listener.local_addr().map(|address| address.port()).map_err(|error| error.to_string())
}

fn plan_layout(options: &ClusterOptions, existing: Option<Layout>) -> Result<Layout, String> {
    let offset_port = |offset: usize| -> Result<u16, String> {
        if options.port == 0 {
            return free_port(&options.bind_ip);
        }
        u16::try_from(usize::from(options.port) + offset).map_err(|_| "ports past 65535".to_string())
    };
    let mut layout = match existing {
        Some(layout) => {
            if layout.shards.len() > options.shards {
                return Err(format!("the cluster in this directory has {} shards; start it with --shards {} or more", layout.shards.len(), layout.shards.len()));
            }
            layout
        }
        None => Layout { router: offset_port(0)?, config: offset_port(1)?, shards: Vec::new() },
    };
    while layout.shards.len() < options.shards {
        let port = offset_port(2 + layout.shards.len())?;
        layout.shards.push(port);
    }
    Ok(layout)
}

/// One running member.
struct Member {
    name: String,
    child: Child,
}

impl Member {
    fn stop(mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions; the pid is
        // still ours (the child was not waited for yet).
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("myriad cluster: {} did not stop in time and was killed", self.name);
    }
}

/// Starts the cluster, prints the router's connection string, and runs until a signal.
pub fn run(options: ClusterOptions) -> Result<(), String> {
    std::fs::create_dir_all(options.dir.join("logs")).map_err(|error| format!("cannot create {}: {error}", options.dir.display()))?;
    let layout_path = options.dir.join(LAYOUT_FILE);
    let layout = plan_layout(&options, Layout::load(&layout_path)?)?;
    layout.save(&layout_path)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|error| format!("cannot start the runtime: {error}"))?;
    let mut members: Vec<Member> = Vec::new();
    let started = runtime.block_on(start_members(&options, &layout, &mut members));
    if let Err(error) = started {
        stop_all(members);
        return Err(error);
    }
    let host = &options.bind_ip;
    println!("mongodb://{host}:{}/", layout.router);
    println!("config server {host}:{}, shards {}", layout.config, layout.shards.iter().map(|port| format!("{host}:{port}")).collect::<Vec<_>>().join(", "));
    println!("data and logs under {}; Ctrl-C stops the cluster", options.dir.display());
    let outcome = runtime.block_on(watch(&mut members));
    stop_all(members);
    outcome
}

async fn start_members(options: &ClusterOptions, layout: &Layout, members: &mut Vec<Member>) -> Result<(), String> {
    let host = &options.bind_ip;
    let config_address = format!("{host}:{}", layout.config);
    members.push(spawn(options, "config", &["--configsvr".into(), "--dbpath".into(), path_argument(&options.dir.join("config")), "--port".into(), layout.config.to_string()])?);
    wait_until_ready(&config_address, members).await?;
    for (index, port) in layout.shards.iter().enumerate() {
        let name = format!("shard{index}");
        let dbpath = path_argument(&options.dir.join(&name));
        members.push(spawn(options, &name, &["--shardsvr".into(), "--dbpath".into(), dbpath, "--port".into(), port.to_string()])?);
    }
    for port in &layout.shards {
        wait_until_ready(&format!("{host}:{port}"), members).await?;
    }
    members.push(spawn(options, "router", &["router".into(), "--configdb".into(), config_address, "--port".into(), layout.router.to_string()])?);
    let router_address = format!("{host}:{}", layout.router);
    wait_until_ready(&router_address, members).await?;
    let router = NodeClient::new(&router_address);
    for port in &layout.shards {
        router.run("admin", doc! { "addShard": format!("{host}:{port}") }).await.map_err(|error| format!("addShard {host}:{port} failed: {error}"))?;
    }
    Ok(())
}

fn path_argument(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn spawn(options: &ClusterOptions, name: &str, arguments: &[String]) -> Result<Member, String> {
    let log = path_argument(&options.dir.join("logs").join(format!("{name}.log")));
    let child = Command::new(&options.executable)
        .args(arguments)
        .args(["--bind_ip", &options.bind_ip, "--logpath", &log, "--logappend"])
        .args(if name == "router" { &[][..] } else { &options.member_arguments[..] })
        .args(&options.security_arguments)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|error| format!("cannot start {name}: {error}"))?;
    Ok(Member { name: name.to_string(), child })
}

/// Pings until the member answers (an error as soon as any member exited).
async fn wait_until_ready(address: &str, members: &mut [Member]) -> Result<(), String> {
    let client = NodeClient::with_timeout(address, Duration::from_secs(5));
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        for member in members.iter_mut() {
            if let Ok(Some(status)) = member.child.try_wait() {
                return Err(format!("{} exited ({status}) while the cluster started; see its log", member.name));
            }
        }
        match client.run("admin", doc! { "ping": 1 }).await {
            Ok(_) => return Ok(()),
            Err(error) if Instant::now() >= deadline => return Err(format!("{address} did not start: {error}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Waits for SIGINT or SIGTERM, or for a member to exit on its own (an error).
async fn watch(members: &mut [Member]) -> Result<(), String> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|error| error.to_string())?;
    let mut interval = tokio::time::interval(WATCH_INTERVAL);
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
            _ = interval.tick() => {
                for member in members.iter_mut() {
                    if let Ok(Some(status)) = member.child.try_wait() {
                        return Err(format!("{} exited ({status}); see its log", member.name));
                    }
                }
            }
        }
    }
}

/// Stops the router first, then the shards, then the config server.
fn stop_all(members: Vec<Member>) {
    for member in members.into_iter().rev() {
        member.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(port: u16, shards: usize, dir: &Path) -> ClusterOptions {
        ClusterOptions { shards, dir: dir.to_path_buf(), port, bind_ip: "127.0.0.1".into(), executable: PathBuf::from("myriad"), member_arguments: Vec::new(), security_arguments: Vec::new() }
    }

    #[test]
    fn layouts_are_kept_across_restarts() {
        let directory = tempfile::tempdir().expect("temp dir");
        let path = directory.path().join(LAYOUT_FILE);
        let first = plan_layout(&options(40000, 2, directory.path()), None).expect("layout");
        assert_eq!(first, Layout { router: 40000, config: 40001, shards: vec![40002, 40003] });
        first.save(&path).expect("saved");
        let loaded = Layout::load(&path).expect("loads").expect("present");
        assert_eq!(loaded, first);
        let grown = plan_layout(&options(0, 3, directory.path()), Some(loaded)).expect("grows");
        assert_eq!(&grown.shards[..2], &[40002, 40003]);
        assert_eq!(grown.shards.len(), 3);
        let fewer = plan_layout(&options(40000, 1, directory.path()), Layout::load(&path).expect("loads"));
        assert!(fewer.is_err());
    }
}
