//! A sharded cluster for a test: a config server, shards and routers, each a `myriad` process
//! on a free loopback port with a data directory this builder owns. Dropping the
//! [`TestCluster`] kills every process it started and deletes the directories.

use std::path::PathBuf;
use std::time::Duration;

use bson::doc;
use mongodb::options::ClientOptions;
use mongodb::Client;

use crate::admin;
use crate::process::MyriadProcess;

pub struct TestCluster {
    pub config: MyriadProcess,
    pub shards: Vec<MyriadProcess>,
    pub routers: Vec<MyriadProcess>,
    /// Shard names, as addShard gave them, in shard order.
    pub shard_names: Vec<String>,
    // Declared after the processes, so they are killed before their directories go.
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
        let config = MyriadProcess::start(member("--configsvr", "config"), Vec::new(), 0);
        let shard_members: Vec<MyriadProcess> = (0..shards).map(|index| MyriadProcess::start(member("--shardsvr", &format!("shard{index}")), Vec::new(), 0)).collect();
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
        self.routers.push(MyriadProcess::start(arguments, Vec::new(), 0));
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
