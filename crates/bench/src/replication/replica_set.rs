//! A 3-member replica set of `myriad --replSet` children for the benchmark, started directly
//! (not through `myriad replset`) so that one member can be killed with SIGKILL and restarted
//! on its port and files while the others run. Members start on free ports, the set is
//! initiated on member 0, and every child is killed and every directory removed when the
//! guard drops, on error paths too.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bson::{doc, Bson};
use mongodb::Client;

use crate::client;
use crate::error::{BenchError, BenchResult};
use crate::server::{DataDirectory, ServerProcess};

/// The set's name unless its launch names it.
pub const SET_NAME: &str = "rs0";
/// How often members are polled while the set elects or a member catches up.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

pub struct ReplicaSetLaunch {
    pub binary: PathBuf,
    pub members: usize,
    pub cache_size_mebibytes: Option<usize>,
    pub work_directory: Option<PathBuf>,
    pub startup_timeout: Duration,
    pub operation_timeout: Duration,
    pub application: &'static str,
    /// Passed to every member after the standard flags.
    pub extra_arguments: Vec<OsString>,
    /// The set's name (`--replSet`).
    pub set_name: &'static str,
}

/// The running set. Field order is drop order: the members, then their directories.
pub struct BenchReplicaSet {
    /// None while a member is killed.
    members: Vec<Option<ServerProcess>>,
    ports: Vec<u16>,
    /// One direct-connection client per member (the driver reconnects after a restart).
    member_clients: Vec<Client>,
    binary: PathBuf,
    cache_size_mebibytes: Option<usize>,
    startup_timeout: Duration,
    operation_timeout: Duration,
    extra_arguments: Vec<OsString>,
    work_directory: Option<PathBuf>,
    application: &'static str,
    set_name: &'static str,
    directories: Vec<DataDirectory>,
}

impl BenchReplicaSet {
    pub async fn start(launch: &ReplicaSetLaunch) -> BenchResult<BenchReplicaSet> {
        let mut set = BenchReplicaSet {
            members: Vec::new(),
            ports: Vec::new(),
            member_clients: Vec::new(),
            binary: launch.binary.clone(),
            cache_size_mebibytes: launch.cache_size_mebibytes,
            startup_timeout: launch.startup_timeout,
            operation_timeout: launch.operation_timeout,
            extra_arguments: launch.extra_arguments.clone(),
            work_directory: launch.work_directory.clone(),
            application: launch.application,
            set_name: launch.set_name,
            directories: Vec::new(),
        };
        for index in 0..launch.members {
            let directory = DataDirectory::create(launch.work_directory.as_deref(), false, &format!("myriad-bench-rs-member{index}-"))?;
            set.directories.push(directory);
            let member = set.start_member(index, 0)?;
            set.ports.push(member.port());
            set.members.push(Some(member));
        }
        for address in set.addresses() {
            let uri = format!("mongodb://{address}/?directConnection=true");
            set.member_clients.push(client::connect(&uri, launch.application, 4, launch.operation_timeout).await?);
        }
        let members: Vec<Bson> = set.addresses().iter().enumerate().map(|(index, host)| Bson::Document(doc! { "_id": index as i32, "host": host })).collect();
        let initiate = doc! { "replSetInitiate": { "_id": launch.set_name, "members": members } };
        client::required_command(&set.member_clients[0], "admin", initiate, launch.operation_timeout, "replSetInitiate").await?;
        set.wait_for_primary(launch.startup_timeout).await?;
        Ok(set)
    }

    fn start_member(&self, index: usize, port: u16) -> BenchResult<ServerProcess> {
        let mut arguments: Vec<OsString> = vec!["--replSet".into(), self.set_name.into(), "--dbpath".into(), self.directories[index].path().into_os_string()];
        if let Some(cache) = self.cache_size_mebibytes {
            arguments.extend(["--cacheSizeMB".into(), cache.to_string().into()]);
        }
        arguments.extend(self.extra_arguments.iter().cloned());
        ServerProcess::start_on_port(&self.binary, &arguments, port, self.startup_timeout)
    }

    /// Starts a new member and adds it to the set's configuration (`rs.add`); returns its index.
    pub async fn add_member(&mut self) -> BenchResult<usize> {
        let index = self.members.len();
        let directory = DataDirectory::create(self.work_directory.as_deref(), false, &format!("myriad-bench-rs-member{index}-"))?;
        self.directories.push(directory);
        let member = self.start_member(index, 0)?;
        self.ports.push(member.port());
        self.members.push(Some(member));
        let host = self.addresses()[index].clone();
        let uri = format!("mongodb://{host}/?directConnection=true");
        self.member_clients.push(client::connect(&uri, self.application, 4, self.operation_timeout).await?);
        let primary = self.wait_for_primary(self.startup_timeout).await?;
        let current = client::required_command(&self.member_clients[primary], "admin", doc! { "replSetGetConfig": 1 }, self.operation_timeout, "replSetGetConfig").await?;
        let mut config = current.get_document("config").cloned().map_err(|error| BenchError::Server(format!("replSetGetConfig: {error}")))?;
        let version = config.get_i32("version").unwrap_or(1);
        config.insert("version", version + 1);
        let mut members = config.get_array("members").cloned().unwrap_or_default();
        members.push(Bson::Document(doc! { "_id": index as i32, "host": host }));
        config.insert("members", members);
        client::required_command(&self.member_clients[primary], "admin", doc! { "replSetReconfig": config }, self.operation_timeout, "replSetReconfig").await?;
        Ok(index)
    }

    pub fn addresses(&self) -> Vec<String> {
        self.ports.iter().map(|port| format!("127.0.0.1:{port}")).collect()
    }

    /// The set's connection string: the driver discovers the primary.
    pub fn uri(&self) -> String {
        format!("mongodb://{}/?replicaSet={}", self.addresses().join(","), self.set_name)
    }

    /// The set's address as `addShard` takes it: `name/host:port,...`.
    pub fn shard_address(&self) -> String {
        format!("{}/{}", self.set_name, self.addresses().join(","))
    }

    pub fn member_client(&self, index: usize) -> &Client {
        &self.member_clients[index]
    }

    pub fn running_members(&self) -> Vec<usize> {
        (0..self.members.len()).filter(|&index| self.members[index].is_some()).collect()
    }

    /// The member whose hello says it is the writable primary, if one does now.
    pub async fn primary_index(&self) -> Option<usize> {
        let probe = self.operation_timeout.min(Duration::from_secs(2));
        for index in self.running_members() {
            if let Ok(hello) = client::command(&self.member_clients[index], "admin", doc! { "hello": 1 }, probe).await {
                if hello.get_bool("isWritablePrimary").unwrap_or(false) {
                    return Some(index);
                }
            }
        }
        None
    }

    pub async fn wait_for_primary(&self, timeout: Duration) -> BenchResult<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(index) = self.primary_index().await {
                return Ok(index);
            }
            if Instant::now() >= deadline {
                return Err(BenchError::Timeout(format!("no member became primary within {timeout:?}; last log lines:\n{}", self.log_tails())));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// SIGKILL on member `index`; returns the instant the signal was sent.
    pub fn kill(&mut self, index: usize) -> Instant {
        let killed_at = Instant::now();
        if let Some(member) = self.members[index].take() {
            member.kill();
        }
        killed_at
    }

    /// Starts member `index` again on its port and files, and waits until it is a secondary of
    /// the set again (its hello names the set and it is not a primary without config).
    pub async fn restart(&mut self, index: usize) -> BenchResult<()> {
        let member = self.start_member(index, self.ports[index])?;
        self.members[index] = Some(member);
        let deadline = Instant::now() + self.startup_timeout;
        let probe = self.operation_timeout.min(Duration::from_secs(2));
        loop {
            if let Ok(hello) = client::command(&self.member_clients[index], "admin", doc! { "hello": 1 }, probe).await {
                let rejoined = hello.get_str("setName").is_ok() && (hello.get_bool("secondary").unwrap_or(false) || hello.get_bool("isWritablePrimary").unwrap_or(false));
                if rejoined {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(BenchError::Timeout(format!("member {index} did not rejoin the set within {:?}", self.startup_timeout)));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    pub fn log_tails(&self) -> String {
        self.members
            .iter()
            .enumerate()
            .filter_map(|(index, member)| member.as_ref().map(|member| format!("member {index}:\n{}", member.log_tail_text())))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGTERM to every running member (clean shutdowns), then the directories go.
    pub async fn stop(mut self) {
        for member_client in std::mem::take(&mut self.member_clients) {
            client::close(member_client).await;
        }
        for member in self.members.iter_mut().filter_map(Option::take) {
            let _ = member.stop(self.startup_timeout);
        }
    }
}
