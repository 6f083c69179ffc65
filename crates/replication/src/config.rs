//! MongoDB's replica-set configuration document (`rs.conf()`) and Raft membership: members with
//! `votes: 1` are Raft voters, `votes: 0` members are learners; each member's own entry travels
//! in its Raft node record ([`Member`]), so the membership log entry carries the whole
//! configuration and every member derives the same document from it.

use std::collections::{BTreeMap, BTreeSet};

use bson::{doc, Bson, Document};

use crate::{Member, ReplicationError};

/// Raft's timing: heartbeats, and the election timeout's range. openraft keeps a leader lease of
/// the range's maximum on top of a follower's timeout (a follower that heard from a leader
/// grants no vote within it), so a follower stands for election 1.2-1.6 s after the last
/// heartbeat of a dead primary. MongoDB's default election timeout alone is 10 s.
pub const HEARTBEAT_INTERVAL_MS: u64 = 100;
pub(crate) const ELECTION_TIMEOUT_MIN_MS: u64 = 400;
pub(crate) const ELECTION_TIMEOUT_MAX_MS: u64 = 800;

/// MongoDB's limits: 50 members, 7 voting.
const MAX_MEMBERS: usize = 50;
const MAX_VOTING_MEMBERS: usize = 7;

/// One member's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberConfig {
    pub id: u64,
    pub host: String,
    pub priority: f64,
    pub votes: i32,
    pub hidden: bool,
    pub tags: Document,
}

/// A replica set's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaSetConfig {
    pub name: String,
    pub version: i64,
    pub members: Vec<MemberConfig>,
}

fn invalid(message: impl Into<String>) -> ReplicationError {
    ReplicationError::InvalidConfig(message.into())
}

fn number(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(number) => Some(f64::from(*number)),
        Bson::Int64(number) => Some(*number as f64),
        Bson::Double(number) => Some(*number),
        _ => None,
    }
}

impl MemberConfig {
    fn parse(document: &Document) -> Result<MemberConfig, ReplicationError> {
        for key in document.keys() {
            if !["_id", "host", "priority", "votes", "hidden", "tags", "buildIndexes", "arbiterOnly", "secondaryDelaySecs"].contains(&key.as_str()) {
                return Err(invalid(format!("Unexpected field {key} in replica set member configuration")));
            }
        }
        let id = document.get("_id").and_then(number).filter(|id| id.fract() == 0.0 && *id >= 0.0 && *id <= 255.0);
        let id = id.ok_or_else(|| invalid("a member's _id must be an integer between 0 and 255"))? as u64;
        let host = document.get_str("host").map_err(|_| invalid(format!("member {id} needs a host string")))?.to_string();
        let priority = match document.get("priority") {
            None => 1.0,
            Some(value) => number(value).filter(|priority| (0.0..=1000.0).contains(priority)).ok_or_else(|| invalid("priority must be a number between 0 and 1000"))?,
        };
        let votes = match document.get("votes") {
            None => 1,
            Some(value) => number(value).filter(|votes| *votes == 0.0 || *votes == 1.0).ok_or_else(|| invalid("votes must be 0 or 1"))? as i32,
        };
        let hidden = document.get_bool("hidden").unwrap_or(false);
        if document.get_bool("arbiterOnly").unwrap_or(false) {
            return Err(invalid("arbiters are not supported: every member holds data"));
        }
        if hidden && priority != 0.0 {
            return Err(invalid(format!("priority must be 0 when hidden=true (member {id})")));
        }
        if votes == 0 && priority != 0.0 {
            return Err(invalid(format!("priority must be 0 when non-voting (votes:0) (member {id})")));
        }
        let tags = document.get_document("tags").cloned().unwrap_or_default();
        Ok(MemberConfig { id, host, priority, votes, hidden, tags })
    }

    /// A member's entry as its Raft node record carries it.
    pub(crate) fn from_node(id: u64, node: &Member) -> MemberConfig {
        let document: Document = bson::from_slice(&node.configuration).unwrap_or_default();
        MemberConfig::parse(&document).unwrap_or(MemberConfig {
            id,
            host: node.host.clone(),
            priority: 1.0,
            votes: 1,
            hidden: false,
            tags: Document::new(),
        })
    }

    pub fn to_document(&self) -> Document {
        doc! {
            "_id": self.id as i32,
            "host": &self.host,
            "arbiterOnly": false,
            "buildIndexes": true,
            "hidden": self.hidden,
            "priority": self.priority,
            "tags": self.tags.clone(),
            "secondaryDelaySecs": 0i64,
            "votes": self.votes,
        }
    }
}

impl ReplicaSetConfig {
    /// Parses a replSetInitiate document for the set `set_name`.
    pub fn parse(document: &Document, set_name: &str) -> Result<ReplicaSetConfig, ReplicationError> {
        let config = ReplicaSetConfig::parse_document(document)?;
        if config.name != set_name {
            return Err(invalid(format!(
                "Attempting to initiate a replica set with name {}, but command line reports {set_name}; rejecting",
                config.name
            )));
        }
        Ok(config)
    }

    /// Parses a replSetReconfig document and checks, as mongod's `validateConfigForReconfig`
    /// does, that it may follow `self` (the configuration of term `term`): a greater version,
    /// the same set name, no host moved to another `_id`, and (unless `force`) at most one
    /// voting member added or removed, so every quorum of the new configuration overlaps every
    /// quorum of the old one.
    pub fn parse_successor(&self, document: &Document, term: u64, force: bool) -> Result<ReplicaSetConfig, ReplicationError> {
        let successor = ReplicaSetConfig::parse_document(document)?;
        if successor.version <= self.version {
            return Err(ReplicationError::Incompatible(format!(
                "New replica set configuration version and term must be greater than old, but {{version: {}, term: {term}}} is not greater than {{version: {}, term: {term}}} for replica set {}",
                successor.version, self.version, self.name
            )));
        }
        if successor.name != self.name {
            return Err(ReplicationError::Incompatible(format!(
                "New and old configurations differ in replica set name; old was {}, and new is {}",
                self.name, successor.name
            )));
        }
        for member in &successor.members {
            if let Some(old) = self.members.iter().find(|old| old.host == member.host && old.id != member.id) {
                return Err(ReplicationError::Incompatible(format!(
                    "New and old configurations both have members with host of {} but in the new configuration the _id field is {} and in the old configuration it is {} for replica set {}",
                    member.host, member.id, old.id, self.name
                )));
            }
        }
        if !force && self.voters().symmetric_difference(&successor.voters()).count() > 1 {
            return Err(invalid("Non force replica set reconfig can only add or remove at most 1 voting member."));
        }
        Ok(successor)
    }

    fn parse_document(document: &Document) -> Result<ReplicaSetConfig, ReplicationError> {
        let name = document.get_str("_id").map_err(|_| invalid("replica set configuration needs an _id string"))?;
        let version = document.get("version").and_then(number).map(|version| version as i64).unwrap_or(1);
        let members = document.get_array("members").map_err(|_| invalid("replica set configuration needs a members array"))?;
        if members.is_empty() || members.len() > MAX_MEMBERS {
            return Err(invalid(format!("a replica set has between 1 and {MAX_MEMBERS} members")));
        }
        let mut parsed = Vec::with_capacity(members.len());
        for member in members {
            let Bson::Document(member) = member else { return Err(invalid("each member is a document")) };
            parsed.push(MemberConfig::parse(member)?);
        }
        let ids: BTreeSet<u64> = parsed.iter().map(|member| member.id).collect();
        let hosts: BTreeSet<&str> = parsed.iter().map(|member| member.host.as_str()).collect();
        if ids.len() != parsed.len() || hosts.len() != parsed.len() {
            return Err(invalid("member _id and host values must be unique"));
        }
        let voting = parsed.iter().filter(|member| member.votes == 1).count();
        if voting == 0 || voting > MAX_VOTING_MEMBERS {
            return Err(invalid(format!("a replica set has between 1 and {MAX_VOTING_MEMBERS} voting members")));
        }
        if !parsed.iter().any(|member| member.priority > 0.0) {
            return Err(invalid("at least one member must be electable (priority > 0)"));
        }
        Ok(ReplicaSetConfig { name: name.to_string(), version, members: parsed })
    }

    /// The Raft nodes of this configuration.
    pub(crate) fn nodes(&self) -> BTreeMap<u64, Member> {
        self.members
            .iter()
            .map(|member| {
                let configuration = bson::to_vec(&member.to_document()).expect("a member document encodes");
                (member.id, Member { host: member.host.clone(), configuration, config_version: self.version })
            })
            .collect()
    }

    pub(crate) fn voters(&self) -> BTreeSet<u64> {
        self.members.iter().filter(|member| member.votes == 1).map(|member| member.id).collect()
    }

    /// The configuration a Raft membership carries. While a reconfiguration is being made, its
    /// members' records carry two versions; the configuration is the newer one's.
    pub(crate) fn from_nodes<'a>(name: &str, nodes: impl Iterator<Item = (&'a u64, &'a Member)>) -> ReplicaSetConfig {
        let mut version = 1;
        let members = nodes
            .map(|(id, node)| {
                version = version.max(node.config_version);
                MemberConfig::from_node(*id, node)
            })
            .collect();
        ReplicaSetConfig { name: name.to_string(), version, members }
    }

    pub fn member(&self, id: u64) -> Option<&MemberConfig> {
        self.members.iter().find(|member| member.id == id)
    }

    /// `rs.conf()`'s document.
    pub fn to_document(&self, term: u64) -> Document {
        doc! {
            "_id": &self.name,
            "version": self.version as i32,
            "term": term as i64,
            "members": self.members.iter().map(|member| Bson::Document(member.to_document())).collect::<Vec<_>>(),
            "protocolVersion": 1i64,
            "writeConcernMajorityJournalDefault": true,
            "settings": {
                "chainingAllowed": false,
                "heartbeatIntervalMillis": HEARTBEAT_INTERVAL_MS as i32,
                "heartbeatTimeoutSecs": 10,
                "electionTimeoutMillis": ELECTION_TIMEOUT_MIN_MS as i32,
                "catchUpTimeoutMillis": -1,
                "getLastErrorModes": {},
                "getLastErrorDefaults": {"w": 1, "wtimeout": 0},
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_round_trips_through_raft_nodes() {
        let document = doc! {"_id": "rs", "members": [
            {"_id": 0, "host": "a:1"},
            {"_id": 1, "host": "b:1", "priority": 0, "hidden": true},
            {"_id": 2, "host": "c:1", "priority": 0, "votes": 0},
        ]};
        let config = ReplicaSetConfig::parse(&document, "rs").unwrap();
        assert_eq!(config.voters(), BTreeSet::from([0, 1]));
        let nodes = config.nodes();
        assert_eq!(ReplicaSetConfig::from_nodes("rs", nodes.iter()), config);
    }

    #[test]
    fn a_successor_configuration_is_checked_as_mongod_checks_it() {
        let current = ReplicaSetConfig::parse(
            &doc! {"_id": "rs", "version": 2, "members": [{"_id": 0, "host": "a:1"}, {"_id": 1, "host": "b:1"}, {"_id": 2, "host": "c:1"}]},
            "rs",
        )
        .unwrap();
        let with = |version: i32, members: Vec<Document>| doc! {"_id": "rs", "version": version, "members": members};
        let member = |id: i32, host: &str| doc! {"_id": id, "host": host};
        let three = vec![member(0, "a:1"), member(1, "b:1"), member(2, "c:1")];
        let refused = |document: Document, force: bool| current.parse_successor(&document, 4, force).unwrap_err();
        let stale = refused(with(2, three.clone()), false);
        assert_eq!((stale.code(), stale.to_string().contains("{version: 2, term: 4} is not greater than {version: 2, term: 4}")), (103, true));
        let renamed = refused(doc! {"_id": "other", "version": 3, "members": three.clone()}, false);
        assert_eq!(renamed.code(), 103);
        let moved = refused(with(3, vec![member(0, "a:1"), member(1, "b:1"), member(3, "c:1")]), false);
        assert_eq!((moved.code(), moved.to_string().contains("the _id field is 3")), (103, true));
        let five = vec![member(0, "a:1"), member(1, "b:1"), member(2, "c:1"), member(3, "d:1"), member(4, "e:1")];
        assert_eq!(refused(with(3, five.clone()), false).code(), 93);
        assert_eq!(current.parse_successor(&with(3, five), 4, true).unwrap().voters().len(), 5);
        let mut learner = three.clone();
        learner.push(doc! {"_id": 3, "host": "d:1", "votes": 0, "priority": 0});
        learner[2] = doc! {"_id": 2, "host": "c:1", "priority": 0, "hidden": true};
        let successor = current.parse_successor(&with(3, learner), 4, false).unwrap();
        assert_eq!((successor.version, successor.voters()), (3, BTreeSet::from([0, 1, 2])));
    }

    #[test]
    fn invalid_configurations_are_refused_with_mongodb_code() {
        for document in [
            doc! {"_id": "other", "members": [{"_id": 0, "host": "a:1"}]},
            doc! {"_id": "rs", "members": []},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}, {"_id": 0, "host": "b:1"}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1", "hidden": true}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1", "votes": 2}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1", "priority": 0}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1", "arbiterOnly": true}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1", "color": "red"}]},
        ] {
            let refused = ReplicaSetConfig::parse(&document, "rs").unwrap_err();
            assert_eq!(refused.code(), 93, "{document}");
        }
    }
}
