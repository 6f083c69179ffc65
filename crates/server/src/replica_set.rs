//! A node started with `--replSet`: its replica-set member (crates/replication) over the
//! server's member connections, and the hello topology counter moved whenever its role, its
//! primary or its configuration changes, so awaitable hellos (drivers' monitors) answer at once.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use myriad_cluster::client::NodePool;
use myriad_commands::ServerContext;
use myriad_replication::{MemberSettings, ReplicaSetMember, Transport};
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
pub async fn open(set_name: &str, me: &str, engine: Arc<Engine>, dbpath: &str, settings: MemberSettings) -> Result<Arc<ReplicaSetMember>, String> {
    let transport = Arc::new(MemberTransport { pool: NodePool::default() });
    ReplicaSetMember::open(set_name, me, engine, Path::new(dbpath), transport, settings)
        .await
        .map_err(|error| format!("cannot start replica set member {me} of {set_name}: {error}"))
}

/// The start-up-only parameter that sets how many entries a member applies between Raft
/// snapshots (and keeps in its log before the last one).
const SNAPSHOT_LOG_ENTRIES_PARAMETER: &str = "replicationSnapshotLogEntries";

/// True for a `--setParameter` the member takes at start-up (not a runtime parameter).
pub fn is_member_setting(assignment: &str) -> bool {
    assignment.split_once('=').is_some_and(|(name, _)| name == SNAPSHOT_LOG_ENTRIES_PARAMETER)
}

/// The member's settings from `--oplogSizeMB` and its start-up parameters.
pub fn settings(arguments: &crate::cli::ServerArguments) -> Result<MemberSettings, String> {
    let mut settings = MemberSettings { oplog_cap_bytes: i64::from(arguments.oplog_size_mebibytes) * 1024 * 1024, ..MemberSettings::DEFAULT };
    for assignment in arguments.set_parameters.iter().filter(|assignment| is_member_setting(assignment)) {
        let value = assignment.split_once('=').map(|(_, value)| value).unwrap_or("");
        settings.snapshot_log_entries = value
            .parse::<u64>()
            .ok()
            .filter(|entries| *entries >= 1)
            .ok_or_else(|| format!("--setParameter {SNAPSHOT_LOG_ENTRIES_PARAMETER} needs a positive number, not '{value}'"))?;
    }
    Ok(settings)
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
            for report in member.take_leadership_reports() {
                context.logger.info("REPL", 21400, "-", &report, serde_json::json!({}));
            }
            let now = member.topology_fingerprint();
            if last.is_some() && last != Some(now) {
                context.topology.record_change();
            }
            last = Some(now);
        }
    });
}
