//! A running replica-set member: its Raft instance (made once the member knows its id: at
//! replSetInitiate, or when a leader first contacts it), the replicator its engine writes
//! through, and what hello, replSetGetStatus and replSetGetConfig report.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bson::{doc, oid::ObjectId, Bson, DateTime, Document, Timestamp};
use myriad_storage::{Engine, ReplicatedWrite, StorageError, WriteReplicator};
use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{ChangeMembers, Config, RaftMetrics, ServerState, SnapshotPolicy};
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use crate::config::{MemberConfig, ReplicaSetConfig, ELECTION_TIMEOUT_MAX_MS, ELECTION_TIMEOUT_MIN_MS, HEARTBEAT_INTERVAL_MS};
use crate::group_commit::{stepped_down, GroupCommit};
use crate::leadership::{follow_leadership, Leadership};
use crate::log_store::LogStore;
use crate::network::{Contacts, Network, Partition, APPEND, SNAPSHOT, VOTE};
use crate::state_machine::snapshot::Snapshots;
use crate::state_machine::{Optime, RecentOptimes, StateMachine};
use crate::{decode, encode, Member, Raft, ReplicationError, Transport};

/// How long a restarted member waits before it may stand for election
/// ([`ReplicaSetMember::hold_elections_after_restart`]).
const RESTART_ELECTION_GRACE: Duration = Duration::from_secs(3);
/// How long a writer waits for its write to commit before giving up (outcome unknown).
const WRITE_WAIT: Duration = Duration::from_secs(30);

/// How long replSetReconfig waits for the members it adds to catch up before they count in
/// quorums (after it, they become voters anyway, and catch up as voters).
const CATCH_UP_WAIT: Duration = Duration::from_secs(60);

/// A member's role, as replSetGetStatus names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberRole {
    Startup,
    Primary,
    Secondary,
}

impl MemberRole {
    pub fn state(self) -> i32 {
        match self {
            MemberRole::Startup => 0,
            MemberRole::Primary => 1,
            MemberRole::Secondary => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MemberRole::Startup => "STARTUP",
            MemberRole::Primary => "PRIMARY",
            MemberRole::Secondary => "SECONDARY",
        }
    }
}

/// One member's line of replSetGetStatus.
#[derive(Clone, Debug)]
pub struct MemberStatus {
    pub id: u64,
    pub host: String,
    pub role: MemberRole,
    pub optime: Option<Optime>,
    pub is_self: bool,
    /// How long ago this member last heard from it (None: never since it started).
    pub last_contact: Option<Duration>,
}

/// The set as this member sees it.
#[derive(Clone, Debug)]
pub struct ReplicaSetStatus {
    pub config: ReplicaSetConfig,
    pub term: u64,
    pub members: Vec<MemberStatus>,
    /// The members Raft counts in quorums (the configuration's `votes: 1` members once a
    /// reconfiguration is complete).
    pub voting_members: usize,
}

pub struct ReplicaSetMember {
    set_name: String,
    me: String,
    engine: Arc<Engine>,
    log_store: LogStore,
    transport: Arc<dyn Transport>,
    runtime: tokio::runtime::Handle,
    raft: OnceCell<Raft>,
    recent: Arc<Mutex<RecentOptimes>>,
    /// While set, this member does not stand for election (replSetStepDown, replSetFreeze).
    frozen_until: Arc<Mutex<Option<Instant>>>,
    /// Held while a replSetReconfig changes the membership (one at a time).
    reconfiguring: tokio::sync::Mutex<()>,
    settings: MemberSettings,
    snapshots: Arc<Snapshots>,
    partition: Arc<Partition>,
    contacts: Arc<Contacts>,
    /// The writes waiting to be proposed together (`group_commit.rs`).
    group_commit: Arc<GroupCommit>,
    /// Whether this member restored its prepared transactions in its term as primary.
    leadership: Arc<Leadership>,
    /// Set while replSetStepDown runs: the member takes no new write, so its log goes quiet
    /// and, with its heartbeats off, the others' election timers fire even under a write load
    /// (MongoDB's step-down also stops writes before it waits for a successor).
    stepping_down: std::sync::atomic::AtomicBool,
}

/// A member's start-up settings.
#[derive(Clone, Copy, Debug)]
pub struct MemberSettings {
    /// The oplog's cap (`--oplogSizeMB`).
    pub oplog_cap_bytes: i64,
    /// Entries applied between snapshots; the log keeps as many before the last snapshot
    /// (`--setParameter replicationSnapshotLogEntries`).
    pub snapshot_log_entries: u64,
}

impl MemberSettings {
    /// 990 MiB of oplog (mongod's smallest default) and a snapshot every 100,000 entries.
    pub const DEFAULT: MemberSettings = MemberSettings { oplog_cap_bytes: 990 * 1024 * 1024, snapshot_log_entries: 100_000 };
}

/// The engine's replicator: the member, held weakly (the member owns the engine).
struct Replicator(Weak<ReplicaSetMember>);

impl ReplicaSetMember {
    /// Opens the member's log under `dbpath`, installs it as the engine's replicator, and
    /// starts Raft if this member already knows its id.
    pub async fn open(
        set_name: &str,
        me: &str,
        engine: Arc<Engine>,
        dbpath: &Path,
        transport: Arc<dyn Transport>,
        settings: MemberSettings,
    ) -> Result<Arc<ReplicaSetMember>, String> {
        let log_store = LogStore::open(&dbpath.join("replication"), Arc::clone(&engine))?;
        let snapshots = Snapshots::new(dbpath.join("replication-snapshot"), Arc::clone(&engine))?;
        let member = Arc::new(ReplicaSetMember {
            set_name: set_name.to_string(),
            me: me.to_string(),
            engine: Arc::clone(&engine),
            log_store,
            transport,
            runtime: tokio::runtime::Handle::current(),
            raft: OnceCell::new(),
            recent: Arc::new(Mutex::new(RecentOptimes::default())),
            frozen_until: Arc::new(Mutex::new(None)),
            reconfiguring: tokio::sync::Mutex::new(()),
            settings,
            snapshots,
            partition: Arc::default(),
            contacts: Arc::default(),
            group_commit: Arc::default(),
            leadership: Arc::default(),
            stepping_down: std::sync::atomic::AtomicBool::new(false),
        });
        engine.set_replicator(Some(Arc::new(Replicator(Arc::downgrade(&member)))));
        if let Some(id) = member.log_store.member_id()? {
            member.start(id).await.map_err(|error| error.to_string())?;
            member.hold_elections_after_restart();
        }
        Ok(member)
    }

    /// Runs one of this member's async calls from a thread outside the runtime (a command's
    /// blocking-pool thread).
    pub fn block_on<T>(&self, future: impl std::future::Future<Output = T>) -> T {
        self.runtime.block_on(future)
    }

    pub fn set_name(&self) -> &str {
        &self.set_name
    }

    async fn start(&self, id: u64) -> Result<&Raft, ReplicationError> {
        self.raft
            .get_or_try_init(|| async {
                let config = Config {
                    cluster_name: self.set_name.clone(),
                    heartbeat_interval: HEARTBEAT_INTERVAL_MS,
                    election_timeout_min: ELECTION_TIMEOUT_MIN_MS,
                    election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
                    snapshot_policy: SnapshotPolicy::LogsSinceLast(self.settings.snapshot_log_entries),
                    max_in_snapshot_log_to_keep: self.settings.snapshot_log_entries,
                    max_payload_entries: 64,
                    ..Config::default()
                };
                let config = Arc::new(config.validate().map_err(|error| ReplicationError::Raft(error.to_string()))?);
                let network = Network { transport: Arc::clone(&self.transport), set_name: self.set_name.clone(), partition: Arc::clone(&self.partition), contacts: Arc::clone(&self.contacts) };
                let state_machine = StateMachine::open(Arc::clone(&self.engine), Arc::clone(&self.recent), self.settings.oplog_cap_bytes, Arc::clone(&self.snapshots)).map_err(ReplicationError::Raft)?;
                self.log_store.set_member_id(id).map_err(ReplicationError::Raft)?;
                let raft = Raft::new(id, config, network, self.log_store.clone(), state_machine)
                    .await
                    .map_err(|error| ReplicationError::Raft(error.to_string()))?;
                self.runtime.spawn(follow_priority(raft.clone(), Arc::clone(&self.frozen_until)));
                self.runtime.spawn(Arc::clone(&self.group_commit).propose(raft.clone()));
                self.runtime.spawn(Arc::clone(&self.group_commit).fail_queued_on_step_down(raft.clone()));
                self.runtime.spawn(follow_leadership(raft.clone(), Arc::clone(&self.engine), Arc::clone(&self.leadership)));
                Ok(raft)
            })
            .await
    }

    fn metrics(&self) -> Option<RaftMetrics<u64, Member>> {
        self.raft.get().map(|raft| raft.metrics().borrow().clone())
    }

    /// replSetInitiate: `config` or, without one, a set of this member alone.
    pub async fn initiate(&self, config: Option<&Document>) -> Result<(), ReplicationError> {
        if self.metrics().is_some_and(|metrics| metrics.membership_config.membership().voter_ids().next().is_some()) {
            return Err(ReplicationError::AlreadyInitialized);
        }
        let default = doc! {"_id": &self.set_name, "version": 1, "members": [{"_id": 0, "host": &self.me}]};
        let config = ReplicaSetConfig::parse(config.unwrap_or(&default), &self.set_name)?;
        let me = config.members.iter().find(|member| same_host(&member.host, &self.me)).ok_or_else(|| {
            ReplicationError::InvalidConfig(format!(
                "No host described in new configuration with {{version: {}, term: 0}} for replica set {} maps to this node",
                config.version, self.set_name
            ))
        })?;
        let raft = self.start(me.id).await?;
        let nodes = config.nodes();
        let voters: BTreeMap<u64, Member> = nodes.iter().filter(|(id, _)| config.voters().contains(id)).map(|(id, node)| (*id, node.clone())).collect();
        raft.initialize(voters).await.map_err(|error| match error {
            RaftError::APIError(openraft::error::InitializeError::NotAllowed(_)) => ReplicationError::AlreadyInitialized,
            other => ReplicationError::Raft(other.to_string()),
        })?;
        for (id, node) in nodes.into_iter().filter(|(id, _)| !config.voters().contains(id)) {
            raft.add_learner(id, node, false).await.map_err(|error| ReplicationError::Raft(error.to_string()))?;
        }
        Ok(())
    }

    /// Answers a `replSetRaft` message addressed to member `target`.
    pub async fn handle_raft_message(&self, kind: &str, target: u64, payload: &[u8]) -> Result<Vec<u8>, ReplicationError> {
        let raft = match self.raft.get() {
            Some(raft) => raft,
            // A leader reaching a member that was never initiated: it learns its id from it.
            None => self.start(target).await?,
        };
        let id = raft.metrics().borrow().id;
        if id != target {
            return Err(ReplicationError::Malformed(format!("a message for member {target} reached member {id}")));
        }
        Ok(match kind {
            APPEND => {
                let request: openraft::raft::AppendEntriesRequest<crate::TypeConfig> = decode(payload)?;
                if let Some(leader) = request.vote.leader_id().voted_for() {
                    self.contacts.note(leader);
                }
                encode(&raft.append_entries(request).await)
            }
            VOTE => encode(&raft.vote(decode(payload)?).await),
            SNAPSHOT => encode(&raft.install_snapshot(decode(payload)?).await),
            other => return Err(ReplicationError::Malformed(format!("unknown Raft message {other}"))),
        })
    }

    /// The optime of the last entry this member applied: the cluster time it reports
    /// (`$clusterTime`, `operationTime`).
    pub fn last_applied_optime(&self) -> Optime {
        self.recent.lock().last.optime
    }

    /// Waits until this member applied an entry at or after `(seconds, increment)`, for at most
    /// `timeout`; true once it has (a causally consistent read's `afterClusterTime`).
    pub async fn wait_for_optime(&self, seconds: u32, increment: u32, timeout: std::time::Duration) -> bool {
        let reached = move |recent: &RecentOptimes| (recent.last.optime.seconds, recent.last.optime.increment) >= (seconds, increment);
        if reached(&self.recent.lock()) {
            return true;
        }
        let Some(raft) = self.raft.get() else { return false };
        let recent = Arc::clone(&self.recent);
        // Metrics change with every applied entry, so the condition is checked after each.
        let waited = raft.wait(Some(timeout)).metrics(move |_| reached(&recent.lock()), "afterClusterTime").await;
        waited.is_ok()
    }

    /// The members that hold data (every member of the configuration: there are no arbiters).
    pub fn data_bearing_members(&self) -> usize {
        self.config().map(|(config, _)| config.members.len()).unwrap_or(1)
    }

    /// On the primary, waits until `members` members (itself included) hold every entry it had
    /// applied when the call began, for at most `timeout`; true once they do (write concern
    /// `w: N`). A majority always does once a write is acknowledged.
    pub async fn wait_for_members(&self, members: usize, timeout: std::time::Duration) -> bool {
        let Some(raft) = self.raft.get() else { return false };
        // From the state machine, not the metrics (published later): at least the caller's write.
        let Some(target) = self.recent.lock().last.last_applied.map(|log_id| log_id.index) else { return members <= 1 };
        let holding = move |metrics: &RaftMetrics<u64, Member>| {
            let followers = metrics.replication.as_ref().map_or(0, |replication| {
                replication.iter().filter(|(id, matched)| **id != metrics.id && matched.is_some_and(|log_id| log_id.index >= target)).count()
            });
            followers + 1 >= members
        };
        raft.wait(Some(timeout)).metrics(holding, "write concern").await.is_ok()
    }

    /// Confirms, with a round of heartbeats, that this member is still the primary, then waits
    /// until it applied every entry committed when the call began: a read after this sees every
    /// write acknowledged before it (readConcern `linearizable`).
    pub async fn ensure_linearizable(&self) -> Result<(), ReplicationError> {
        let raft = self.raft.get().ok_or(ReplicationError::NotYetInitialized)?;
        if !self.is_writable_primary() {
            return Err(ReplicationError::NotPrimary("cannot satisfy linearizable read concern on non-primary node".into()));
        }
        raft.ensure_linearizable()
            .await
            .map(drop)
            .map_err(|_| ReplicationError::NotPrimary("cannot satisfy linearizable read concern on non-primary node".into()))
    }

    /// True when this member is the primary, applied every entry of earlier terms and
    /// prepared again the prepared transactions it holds records of (`leadership.rs`).
    pub fn is_writable_primary(&self) -> bool {
        if self.stepping_down.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        self.metrics().is_some_and(|metrics| {
            self.leadership.ready_in(metrics.current_term)
                && metrics.state == ServerState::Leader
                && metrics.current_leader == Some(metrics.id)
                && metrics.last_applied.is_some_and(|applied| applied.leader_id.term == metrics.current_term)
                && hears_a_majority(&metrics)
        })
    }

    /// What becoming or stopping being primary did with prepared transactions since the last
    /// call (lines for the server's log).
    pub fn take_leadership_reports(&self) -> Vec<String> {
        self.leadership.take_reports()
    }

    /// Test networking: this member sends nothing to `hosts` until called again (the
    /// `replicationNetworkPartition` fail point; an empty list heals).
    pub fn set_unreachable(&self, hosts: Vec<String>) {
        self.partition.set(hosts);
    }

    /// What hello reports that can change: writable, the primary, the term, the
    /// configuration's log position. Equal values mean hello's replica-set fields are unchanged.
    pub fn topology_fingerprint(&self) -> (bool, Option<u64>, u64, Option<u64>) {
        match self.metrics() {
            None => (false, None, 0, None),
            Some(metrics) => (
                self.is_writable_primary(),
                metrics.current_leader,
                metrics.current_term,
                metrics.membership_config.log_id().map(|log_id| log_id.index),
            ),
        }
    }

    pub fn role(&self) -> MemberRole {
        match self.metrics() {
            None => MemberRole::Startup,
            Some(metrics) if metrics.membership_config.membership().nodes().next().is_none() => MemberRole::Startup,
            Some(_) if self.is_writable_primary() => MemberRole::Primary,
            Some(_) => MemberRole::Secondary,
        }
    }

    pub fn config(&self) -> Result<(ReplicaSetConfig, u64), ReplicationError> {
        let metrics = self.metrics().ok_or(ReplicationError::NotYetInitialized)?;
        let membership = metrics.membership_config.membership();
        if membership.nodes().next().is_none() {
            return Err(ReplicationError::NotYetInitialized);
        }
        Ok((ReplicaSetConfig::from_nodes(&self.set_name, membership.nodes()), metrics.current_term))
    }

    pub fn status(&self) -> Result<ReplicaSetStatus, ReplicationError> {
        let (config, term) = self.config()?;
        let metrics = self.metrics().ok_or(ReplicationError::NotYetInitialized)?;
        if config.member(metrics.id).is_none() {
            return Err(ReplicationError::InvalidConfig("Our replica set config is invalid or we are not a member of it".into()));
        }
        let voting_members = metrics.membership_config.membership().voter_ids().count();
        let recent = self.recent.lock();
        let replication = metrics.replication.clone().unwrap_or_default();
        let members = config
            .members
            .iter()
            .map(|member| {
                let is_self = member.id == metrics.id;
                let role = if Some(member.id) == metrics.current_leader { MemberRole::Primary } else { MemberRole::Secondary };
                let optime = if is_self {
                    Some(recent.last.optime)
                } else {
                    replication.get(&member.id).cloned().flatten().and_then(|log_id| recent.optime_at(log_id.index))
                };
                MemberStatus { id: member.id, host: member.host.clone(), role, optime, is_self, last_contact: self.contacts.since(member.id) }
            })
            .collect();
        Ok(ReplicaSetStatus { config, term, members, voting_members })
    }

    /// The replica-set fields of hello (`setName`, `hosts`, `primary`...); None before the
    /// member is part of an initiated set.
    pub fn hello_fields(&self) -> Document {
        let Ok((config, term)) = self.config() else {
            return doc! {"isWritablePrimary": false, "secondary": false, "info": "Does not have a valid replica set config", "isreplicaset": true};
        };
        let metrics = self.metrics().expect("a configured member runs Raft");
        if config.member(metrics.id).is_none() {
            // Removed from the set by a reconfiguration, as mongod's REMOVED member answers.
            return doc! {"isWritablePrimary": false, "secondary": false, "info": "Does not have a valid replica set config", "isreplicaset": true};
        }
        let visible = |member: &&crate::MemberConfig| !member.hidden;
        let hosts: Vec<Bson> = config.members.iter().filter(visible).filter(|member| member.priority > 0.0).map(|member| Bson::String(member.host.clone())).collect();
        let passives: Vec<Bson> = config.members.iter().filter(visible).filter(|member| member.priority == 0.0).map(|member| Bson::String(member.host.clone())).collect();
        let writable = self.is_writable_primary();
        let mut fields = doc! {
            "hosts": hosts,
            "setName": &self.set_name,
            "setVersion": config.version as i32,
            "isWritablePrimary": writable,
            "secondary": !writable,
        };
        if !passives.is_empty() {
            fields.insert("passives", passives);
        }
        if let Some(leader) = metrics.current_leader.and_then(|leader| config.member(leader)) {
            fields.insert("primary", &leader.host);
        }
        if let Some(me) = config.member(metrics.id) {
            fields.insert("me", &me.host);
            if me.hidden {
                fields.insert("hidden", true);
            }
            if me.priority == 0.0 {
                fields.insert("passive", true);
            }
            if !me.tags.is_empty() {
                fields.insert("tags", me.tags.clone());
            }
        }
        if writable {
            fields.insert("electionId", election_id(term));
        }
        let last = self.recent.lock().last.clone();
        let optime = optime_document(last.optime);
        let date = DateTime::from_millis(last.last_write_wall_time_ms);
        fields.insert(
            "lastWrite",
            doc! {"opTime": optime.clone(), "lastWriteDate": date, "majorityOpTime": optime, "majorityWriteDate": date},
        );
        fields
    }

    /// replSetStepDown: stops standing for election for `seconds` and lets another member win.
    pub async fn step_down(self: &Arc<Self>, seconds: u64) -> Result<(), ReplicationError> {
        let raft = self.raft.get().ok_or(ReplicationError::NotYetInitialized)?;
        if !self.is_writable_primary() {
            return Err(ReplicationError::NotPrimary("not primary so can't step down".into()));
        }
        self.freeze(seconds);
        // No new writes, then no heartbeats: the others' election timers fire, and a newer term
        // demotes this member.
        let _stepping_down = SteppingDown::begin(&self.stepping_down);
        raft.runtime_config().heartbeat(false);
        let deadline = Instant::now() + Duration::from_millis(ELECTION_TIMEOUT_MAX_MS * 5);
        let mut metrics = raft.metrics();
        while Instant::now() < deadline && metrics.borrow().state == ServerState::Leader {
            let _ = tokio::time::timeout(Duration::from_millis(50), metrics.changed()).await;
        }
        raft.runtime_config().heartbeat(true);
        if metrics.borrow().state == ServerState::Leader {
            // Still the primary: no member could take over (none electable, or none caught up).
            // It answers once a majority acknowledged it again, so it is writable when it does.
            self.freeze(0);
            let _ = raft.trigger().heartbeat().await;
            let _ = raft.wait(Some(Duration::from_millis(ELECTION_TIMEOUT_MAX_MS * 2))).metrics(hears_a_majority, "quorum after a refused step-down").await;
            return Err(ReplicationError::NoElectableSecondary(format!(
                "No electable secondaries caught up as of {}. Please use the replSetStepDown command with the argument {{force: true}} to force node to step down.",
                DateTime::now().try_to_rfc3339_string().unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// replSetFreeze: no election bid for `seconds` (0 unfreezes).
    pub fn freeze(self: &Arc<Self>, seconds: u64) {
        let Some(raft) = self.raft.get() else { return };
        let until = (seconds > 0).then(|| Instant::now() + Duration::from_secs(seconds));
        *self.frozen_until.lock() = until;
        raft.runtime_config().elect(until.is_none() && self.electable());
        if let Some(until) = until {
            let member = Arc::downgrade(self);
            self.runtime.spawn(async move {
                tokio::time::sleep_until(until.into()).await;
                let Some(member) = member.upgrade() else { return };
                let thawed = member.frozen_until.lock().is_none_or(|frozen_until| frozen_until <= Instant::now());
                if thawed {
                    if let Some(raft) = member.raft.get() {
                        raft.runtime_config().elect(member.electable());
                    }
                }
            });
        }
    }

    /// A restarted member stands for no election for [`RESTART_ELECTION_GRACE`]: back before
    /// the primary's replication stream to it reconnected, it would otherwise time out, call an
    /// election with a newer term and depose a healthy primary. Implemented as a freeze that
    /// ends by itself (an operator's replSetFreeze meanwhile wins).
    fn hold_elections_after_restart(&self) {
        let Some(raft) = self.raft.get().cloned() else { return };
        let until = Instant::now() + RESTART_ELECTION_GRACE;
        *self.frozen_until.lock() = Some(until);
        raft.runtime_config().elect(false);
        let frozen_until = Arc::clone(&self.frozen_until);
        self.runtime.spawn(async move {
            tokio::time::sleep_until(until.into()).await;
            let still_ours = {
                let mut frozen = frozen_until.lock();
                let ours = *frozen == Some(until);
                if ours {
                    *frozen = None;
                }
                ours
            };
            if still_ours {
                let electable = priority_allows_election(&raft.metrics().borrow());
                raft.runtime_config().elect(electable);
            }
        });
    }

    fn electable(&self) -> bool {
        self.metrics().is_none_or(|metrics| priority_allows_election(&metrics))
    }

    /// replSetReconfig: checks `document` against the current configuration as mongod does,
    /// then changes Raft's membership to it in steps, each a membership log entry: every
    /// member's record (new members join as learners) with the new version; once the new
    /// members caught up (or [`CATCH_UP_WAIT`] passed), the voters; then the removed members
    /// leave (as learners first, so a removed member never stands for election).
    pub async fn reconfigure(&self, document: &Document, force: bool) -> Result<(), ReplicationError> {
        let raft = self.raft.get().ok_or(ReplicationError::NotYetInitialized)?;
        let (current, term) = self.config()?;
        if !self.is_writable_primary() {
            let state = self.role().name();
            return Err(ReplicationError::NotPrimary(if force {
                format!(
                    "force replSetReconfig is not supported on a {state} member: a Myriad replica set's configuration is its Raft membership, \
                     which only the primary changes (run replSetReconfig on the primary; a set without a primary needs a majority of its voting members up)"
                )
            } else {
                format!("replSetReconfig should only be run on a writable PRIMARY. Current state {state};")
            }));
        }
        let successor = current.parse_successor(document, term, force)?;
        let version_and_term = format!("{{version: {}, term: {term}}}", successor.version);
        let Some(me) = successor.members.iter().find(|member| same_host(&member.host, &self.me)) else {
            return Err(ReplicationError::NodeNotFound(format!(
                "No host described in new configuration with {version_and_term} for replica set {} maps to this node",
                self.set_name
            )));
        };
        if me.priority == 0.0 {
            return Err(ReplicationError::NodeNotElectable(format!(
                "This node, {}, with _id {} is not electable under the new configuration with {version_and_term} for replica set {}",
                me.host, me.id, self.set_name
            )));
        }
        let Ok(_reconfiguring) = self.reconfiguring.try_lock() else {
            return Err(ReplicationError::ConfigurationInProgress(
                "Cannot run replSetReconfig because the node is currently updating its configuration".into(),
            ));
        };
        let added: Vec<u64> = successor.members.iter().map(|member| member.id).filter(|id| current.member(*id).is_none()).collect();
        let removed: std::collections::BTreeSet<u64> =
            current.members.iter().map(|member| member.id).filter(|id| successor.member(*id).is_none()).collect();
        let recorded = raft.change_membership(ChangeMembers::SetNodes(successor.nodes()), true).await.map_err(membership_error)?;
        if !added.is_empty() {
            let index = recorded.log_id.index;
            let caught_up = |metrics: &RaftMetrics<u64, Member>| {
                let replication = metrics.replication.clone().unwrap_or_default();
                added.iter().all(|id| replication.get(id).cloned().flatten().is_some_and(|matched| matched.index >= index))
            };
            // Past the wait, the new members become voters all the same and catch up as such.
            let _ = raft.wait(Some(CATCH_UP_WAIT)).metrics(caught_up, "the added members caught up").await;
        }
        let voters = successor.voters();
        if !raft.metrics().borrow().membership_config.membership().voter_ids().eq(voters.iter().copied()) {
            raft.change_membership(ChangeMembers::ReplaceAllVoters(voters), true).await.map_err(membership_error)?;
        }
        if !removed.is_empty() {
            raft.change_membership(ChangeMembers::RemoveNodes(removed), true).await.map_err(membership_error)?;
        }
        Ok(())
    }

    /// Stops Raft (at shutdown).
    pub async fn shutdown(&self) {
        if let Some(raft) = self.raft.get() {
            let _ = raft.shutdown().await;
        }
    }

    /// Proposes `write` with the writes queued beside it (`group_commit.rs`) and waits until
    /// this member applied it, or its group failed, or [`WRITE_WAIT`] passed.
    fn replicate(&self, write: ReplicatedWrite) -> Result<(), StorageError> {
        if self.raft.get().is_none() || !self.is_writable_primary() {
            return Err(not_writable_primary());
        }
        let receiver = self.group_commit.submit(&write);
        // On a runtime worker (a write run on its connection task), the worker's queued tasks
        // move to another thread while this one waits: the proposer's tasks may be among them.
        let received = match tokio::runtime::Handle::try_current().map(|handle| handle.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| receiver.recv_timeout(WRITE_WAIT)),
            _ => receiver.recv_timeout(WRITE_WAIT),
        };
        match received {
            Ok(outcome) => outcome,
            Err(RecvTimeoutError::Timeout) => Err(StorageError::Replication {
                code: 64,
                code_name: "WriteConcernFailed",
                message: format!("waiting for replication timed out after {} s", WRITE_WAIT.as_secs()),
            }),
            // The proposer stopped (Raft shut down) without proposing it.
            Err(RecvTimeoutError::Disconnected) => Err(stepped_down()),
        }
    }
}

impl WriteReplicator for Replicator {
    fn replicate(&self, write: ReplicatedWrite) -> Result<(), StorageError> {
        match self.0.upgrade() {
            Some(member) => member.replicate(write),
            None => Err(not_writable_primary()),
        }
    }
}

/// Marks a member as stepping down until dropped (whatever way replSetStepDown ends).
struct SteppingDown<'a>(&'a std::sync::atomic::AtomicBool);

impl<'a> SteppingDown<'a> {
    fn begin(flag: &'a std::sync::atomic::AtomicBool) -> SteppingDown<'a> {
        flag.store(true, std::sync::atomic::Ordering::Release);
        SteppingDown(flag)
    }
}

impl Drop for SteppingDown<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// A membership change's failure, as replSetReconfig answers it.
fn membership_error(error: RaftError<u64, ClientWriteError<u64, Member>>) -> ReplicationError {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => {
            ReplicationError::NotPrimary("replSetReconfig was interrupted because this member stepped down".into())
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(ChangeMembershipError::InProgress(_))) => {
            ReplicationError::ConfigurationInProgress("Cannot run replSetReconfig because the node is currently updating its configuration".into())
        }
        other => ReplicationError::Raft(other.to_string()),
    }
}

/// True unless this member's own entry of the membership gives it priority 0.
fn priority_allows_election(metrics: &RaftMetrics<u64, Member>) -> bool {
    let node = metrics.membership_config.membership().get_node(&metrics.id);
    node.is_none_or(|node| MemberConfig::from_node(metrics.id, node).priority > 0.0)
}

/// Keeps Raft's election switch on this member's priority (a priority-0 member never stands
/// for election) and its freeze, read again at every membership change: a member learns its
/// own configuration from the membership log entries. Ends when Raft shuts down.
async fn follow_priority(raft: Raft, frozen_until: Arc<Mutex<Option<Instant>>>) {
    let mut metrics = raft.metrics();
    let mut seen = None;
    loop {
        let (membership, electable) = {
            let current = metrics.borrow_and_update();
            (current.membership_config.log_id().clone(), priority_allows_election(&current))
        };
        if seen.as_ref() != Some(&membership) {
            let frozen = frozen_until.lock().is_some_and(|until| until > Instant::now());
            raft.runtime_config().elect(electable && !frozen);
            seen = Some(membership);
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

fn not_writable_primary() -> StorageError {
    StorageError::Replication { code: 10107, code_name: "NotWritablePrimary", message: "not primary".into() }
}

/// Hosts name the same member when equal, `localhost` and `127.0.0.1` being one.
fn same_host(left: &str, right: &str) -> bool {
    let normal = |host: &str| host.replace("localhost:", "127.0.0.1:");
    normal(left) == normal(right)
}

/// MongoDB's electionId: an ObjectId holding 0x7fffffff then the term.
fn election_id(term: u64) -> ObjectId {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
    bytes[4..].copy_from_slice(&term.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

/// A leader that has not heard from a majority for this long stops being the writable primary
/// (as mongod's primary steps down when it cannot see a majority; its 10 s election timeout
/// bounds the same window there). Four election timeouts: a majority has elected another by
/// then, and a loaded machine's slow heartbeat is not taken for a partition.
const QUORUM_CONTACT_TIMEOUT_MS: u64 = 4 * ELECTION_TIMEOUT_MAX_MS;

/// True when a majority acknowledged this leader recently (always for a set of one voter).
fn hears_a_majority(metrics: &RaftMetrics<u64, Member>) -> bool {
    if metrics.membership_config.membership().voter_ids().count() <= 1 {
        return true;
    }
    metrics.millis_since_quorum_ack.is_some_and(|milliseconds| milliseconds <= QUORUM_CONTACT_TIMEOUT_MS)
}

/// `{ts, t}` of an optime.
pub fn optime_document(optime: Optime) -> Document {
    doc! {"ts": Timestamp { time: optime.seconds, increment: optime.increment }, "t": optime.term as i64}
}
