//! Starts a real sharded cluster for integration tests: a config server, shards and routers,
//! each a `myriad` process on a free loopback port with a data directory this builder owns.
//! Dropping the [`TestCluster`] kills every process it started and deletes the directories.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bson::{doc, Document};
use mongodb::options::ClientOptions;
use mongodb::Client;

/// How long a member may take to print "Waiting for connections".
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// One `myriad` process of the cluster.
pub struct Member {
    child: Option<Child>,
    pub port: u16,
    arguments: Vec<String>,
    /// Every log line is kept here as well as drained (tests read refresh lines).
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Member {
    /// Starts `myriad <arguments> --port <port> --bind_ip 127.0.0.1` and waits for its port.
    fn start(arguments: Vec<String>, port: u16) -> Member {
        let mut member = Member { child: None, port, arguments, log: Default::default() };
        member.launch();
        member
    }

    fn launch(&mut self) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_myriad"))
            .args(&self.arguments)
            .args(["--port", &self.port.to_string(), "--bind_ip", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start myriad");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (sender, receiver) = mpsc::channel();
        let log = std::sync::Arc::clone(&self.log);
        // Keep draining stderr for the member's whole life so it never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent && line.contains("Waiting for connections") {
                    let parsed: serde_json::Value = serde_json::from_str(&line).expect("log lines are JSON");
                    let _ = sender.send(parsed["attr"]["port"].as_u64().expect("port attribute") as u16);
                    sent = true;
                }
                if std::env::var_os("MYRIAD_TEST_LOG").is_some() {
                    eprintln!("{line}");
                }
                if let Ok(mut lines) = log.lock() {
                    if lines.len() < 100_000 {
                        lines.push(line);
                    }
                }
            }
        });
        self.port = receiver.recv_timeout(STARTUP_TIMEOUT).expect("member did not start listening");
        self.child = Some(child);
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Log lines containing `text`.
    pub fn log_lines(&self, text: &str) -> Vec<String> {
        self.log.lock().map(|lines| lines.iter().filter(|line| line.contains(text)).cloned().collect()).unwrap_or_default()
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills and starts the member again on the same port and data.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct TestCluster {
    pub config: Member,
    pub shards: Vec<Member>,
    pub routers: Vec<Member>,
    /// Shard names, as addShard gave them, in shard order.
    pub shard_names: Vec<String>,
    directory: tempfile::TempDir,
}

impl TestCluster {
    /// A config server, `shards` shards and one router, every shard added, the balancer
    /// stopped (as MongoDB's ShardingTest starts it; `start_balancer` turns it on).
    pub async fn start(shards: usize) -> TestCluster {
        let directory = tempfile::tempdir().expect("temp dir");
        let dbpath = |name: &str| -> String {
            let path: PathBuf = directory.path().join(name);
            path.to_string_lossy().into_owned()
        };
        let member = |role: &str, name: &str| vec![role.to_string(), "--dbpath".to_string(), dbpath(name), "--cacheSizeMB".to_string(), "64".to_string()];
        let config = Member::start(member("--configsvr", "config"), 0);
        let shard_members: Vec<Member> = (0..shards).map(|index| Member::start(member("--shardsvr", &format!("shard{index}")), 0)).collect();
        let mut cluster = TestCluster { config, shards: shard_members, routers: Vec::new(), shard_names: Vec::new(), directory };
        cluster.add_router();
        let client = cluster.router_client(0).await;
        for index in 0..shards {
            let reply = admin(&client, doc! { "addShard": cluster.shards[index].address() }).await.expect("addShard");
            cluster.shard_names.push(reply.get_str("shardAdded").expect("shard name").to_string());
        }
        admin(&client, doc! { "balancerStop": 1 }).await.expect("balancerStop");
        cluster
    }

    /// Turns the balancer on (and starts a round at once).
    pub async fn start_balancer(&self) {
        let client = self.router_client(0).await;
        admin(&client, doc! { "balancerStart": 1 }).await.expect("balancerStart");
    }

    /// Starts one more router; returns its index.
    pub fn add_router(&mut self) -> usize {
        let arguments = vec!["router".to_string(), "--configdb".to_string(), self.config.address()];
        self.routers.push(Member::start(arguments, 0));
        self.routers.len() - 1
    }

    pub fn router_uri(&self, index: usize) -> String {
        format!("mongodb://{}/", self.routers[index].address())
    }

    pub async fn router_client(&self, index: usize) -> Client {
        let mut options = ClientOptions::parse(self.router_uri(index)).await.expect("uri parses");
        options.server_selection_timeout = Some(Duration::from_secs(20));
        Client::with_options(options).expect("client")
    }

    /// A client connected straight to a shard (its requests carry no shard version).
    pub async fn shard_client(&self, index: usize) -> Client {
        let uri = format!("mongodb://{}/?directConnection=true", self.shards[index].address());
        Client::with_options(ClientOptions::parse(uri).await.expect("uri parses")).expect("client")
    }

    pub fn data_path(&self) -> &std::path::Path {
        self.directory.path()
    }
}

/// Runs a command against the admin database.
pub async fn admin(client: &Client, command: Document) -> mongodb::error::Result<Document> {
    client.database("admin").run_command(command).await
}

/// The MongoDB code of a driver error (command, write or bulk write error).
pub fn error_code(error: &mongodb::error::Error) -> Option<i32> {
    use mongodb::error::{ErrorKind, WriteFailure};
    match error.kind.as_ref() {
        ErrorKind::Command(command) => Some(command.code),
        ErrorKind::Write(WriteFailure::WriteError(write)) => Some(write.code),
        ErrorKind::InsertMany(insert_many) => insert_many.write_errors.as_ref()?.first().map(|write| write.code),
        _ => None,
    }
}
