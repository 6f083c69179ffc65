//! A replica set for a test: [`TestReplicaSet`] starts `members` nodes with `--replSet NAME`,
//! each owning its data directory and port, initiates them as one set and waits for a primary.
//! A member can be killed (SIGKILL) and restarted on the same port and files; dropping the set
//! kills every member and deletes the directories.

use std::time::Duration;

use bson::doc;
use mongodb::options::{ClientOptions, ServerAddress};
use mongodb::Client;

use crate::process::MyriadProcess;
use crate::wait::eventually_some;

/// How long a test waits for an election.
pub const ELECTION_WAIT: Duration = Duration::from_secs(60);

pub struct TestReplicaSet {
    pub name: String,
    members: Vec<MyriadProcess>,
    // Declared after the processes, so they are killed before their directories go.
    data_directories: Vec<tempfile::TempDir>,
}

impl TestReplicaSet {
    pub async fn start(members: usize) -> TestReplicaSet {
        TestReplicaSet::start_named(members, "rs0", &[]).await
    }

    /// A set named `name` whose members also get `extra_arguments` (`--shardsvr` for a shard).
    pub async fn start_named(members: usize, name: &str, extra_arguments: &[&str]) -> TestReplicaSet {
        let name = name.to_string();
        let mut processes = Vec::with_capacity(members);
        let mut data_directories = Vec::with_capacity(members);
        for _ in 0..members {
            let data_directory = tempfile::tempdir().expect("temp dir");
            let mut arguments = ["--dbpath", &data_directory.path().to_string_lossy(), "--cacheSizeMB", "64", "--replSet", &name].map(str::to_string).to_vec();
            arguments.extend(extra_arguments.iter().map(|argument| argument.to_string()));
            processes.push(MyriadProcess::start(arguments, Vec::new(), 0));
            data_directories.push(data_directory);
        }
        let set = TestReplicaSet { name, members: processes, data_directories };
        let config_members: Vec<bson::Bson> =
            set.members.iter().enumerate().map(|(id, member)| bson::Bson::Document(doc! {"_id": id as i32, "host": member.address()})).collect();
        let first = set.member_client(0).await;
        crate::admin(&first, doc! {"replSetInitiate": {"_id": &set.name, "members": config_members}}).await.expect("replSetInitiate");
        set.wait_for_primary().await;
        set
    }

    /// A client of the whole set (`replicaSet=NAME`), following the primary.
    pub async fn client(&self) -> Client {
        let hosts: Vec<ServerAddress> = self.members.iter().map(|member| ServerAddress::Tcp { host: "127.0.0.1".into(), port: Some(member.port) }).collect();
        let mut options = ClientOptions::builder().hosts(hosts).repl_set_name(self.name.clone()).build();
        options.server_selection_timeout = Some(Duration::from_secs(30));
        Client::with_options(options).expect("client options")
    }

    /// A direct client of one member.
    pub async fn member_client(&self, index: usize) -> Client {
        let uri = format!("mongodb://{}/?directConnection=true&serverSelectionTimeoutMS=10000", self.members[index].address());
        Client::with_uri_str(uri).await.expect("client")
    }

    /// The member that says it is the writable primary, if any.
    pub async fn primary_index(&self) -> Option<usize> {
        for index in 0..self.members.len() {
            if self.members[index].pid().is_none() {
                continue;
            }
            let client = self.member_client(index).await;
            if let Ok(hello) = crate::admin(&client, doc! {"hello": 1}).await {
                if hello.get_bool("isWritablePrimary").unwrap_or(false) {
                    return Some(index);
                }
            }
        }
        None
    }

    pub async fn wait_for_primary(&self) -> usize {
        eventually_some(ELECTION_WAIT, "a writable primary", || self.primary_index()).await
    }

    /// SIGKILL, as a crash or a power cut of that member.
    pub fn kill(&mut self, index: usize) {
        self.members[index].kill();
    }

    /// Starts a killed member again on its port and files.
    pub fn restart(&mut self, index: usize) {
        self.members[index].restart();
    }

    /// The set's address as `addShard` takes it: `name/host:port,...`.
    pub fn shard_address(&self) -> String {
        let hosts: Vec<String> = self.members.iter().map(MyriadProcess::address).collect();
        format!("{}/{}", self.name, hosts.join(","))
    }

    pub fn member_port(&self, index: usize) -> u16 {
        self.members[index].port
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn data_path(&self, index: usize) -> &std::path::Path {
        self.data_directories[index].path()
    }
}
