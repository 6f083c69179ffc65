//! A node started with `--replSet`: its replica-set member (crates/replication) over the
//! server's member connections, and the hello topology counter moved whenever its role, its
//! primary or its configuration changes, so awaitable hellos (drivers' monitors) answer at once.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use myriad_cluster::client::NodePool;
use myriad_commands::ServerContext;
use myriad_replication::{ReplicaSetMember, Transport};
use myriad_storage::Engine;

/// Raft's messages over the pooled, authenticated member connections of crates/cluster.
struct MemberTransport {
    pool: NodePool,
}

impl Transport for MemberTransport {
    fn call<'a>(&'a self, host: &'a str, command: bson::Document) -> Pin<Box<dyn Future<Output = Result<bson::Document, String>> + Send + 'a>> {
        Box::pin(async move { self.pool.client(host).command("admin", command).await.map_err(|error| error.to_string()) })
    }
}

/// Opens the member (installing its replicator on the engine before anything writes).
pub async fn open(set_name: &str, me: &str, engine: Arc<Engine>, dbpath: &str, oplog_size_mebibytes: u32) -> Result<Arc<ReplicaSetMember>, String> {
    let transport = Arc::new(MemberTransport { pool: NodePool::default() });
    let oplog_cap_bytes = i64::from(oplog_size_mebibytes) * 1024 * 1024;
    ReplicaSetMember::open(set_name, me, engine, Path::new(dbpath), transport, oplog_cap_bytes)
        .await
        .map_err(|error| format!("cannot start replica set member {me} of {set_name}: {error}"))
}

/// Moves the hello topology counter on every change of role, primary or configuration.
pub fn watch_topology(context: &Arc<ServerContext>, member: &Arc<ReplicaSetMember>) {
    let context = Arc::downgrade(context);
    let member = Arc::downgrade(member);
    tokio::spawn(async move {
        let mut last = None;
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let (Some(context), Some(member)) = (context.upgrade(), member.upgrade()) else { return };
            let now = member.topology_fingerprint();
            if last.is_some() && last != Some(now) {
                context.topology.record_change();
            }
            last = Some(now);
        }
    });
}
