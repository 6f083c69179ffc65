//! MongoDB's replica-set configuration document (`rs.conf()`) and Raft membership: members with
//! `votes: 1` are Raft voters, `votes: 0` members are learners; each member's own entry travels
//! in its Raft node record ([`Member`]), so the membership log entry carries the whole
//! configuration and every member derives the same document from it.

use std::collections::{BTreeMap, BTreeSet};

use bson::{doc, Bson, Document};

use crate::{Member, ReplicationError};

/// Raft's timing: heartbeats, and the election timeout's range (a follower that hears no
/// heartbeat for a random time in it stands for election). MongoDB's default election timeout
/// is 10 s; these make a failover take about 1-2 s.
pub(crate) const HEARTBEAT_INTERVAL_MS: u64 = 200;
pub(crate) const ELECTION_TIMEOUT_MIN_MS: u64 = 1000;
pub(crate) const ELECTION_TIMEOUT_MAX_MS: u64 = 2000;

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
    /// Parses a replSetInitiate or replSetReconfig document for the set `set_name`.
    pub fn parse(document: &Document, set_name: &str) -> Result<ReplicaSetConfig, ReplicationError> {
        let name = document.get_str("_id").map_err(|_| invalid("replica set configuration needs an _id string"))?;
        if name != set_name {
            return Err(invalid(format!(
                "Attempting to initiate a replica set with name {name}, but command line reports {set_name}; rejecting"
            )));
        }
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

    /// The configuration a Raft membership carries.
    pub(crate) fn from_nodes<'a>(name: &str, nodes: impl Iterator<Item = (&'a u64, &'a Member)>) -> ReplicaSetConfig {
        let mut version = 1;
        let members = nodes
            .map(|(id, node)| {
                version = node.config_version;
                let document: Document = bson::from_slice(&node.configuration).unwrap_or_default();
                MemberConfig::parse(&document).unwrap_or(MemberConfig {
                    id: *id,
                    host: node.host.clone(),
                    priority: 1.0,
                    votes: 1,
                    hidden: false,
                    tags: Document::new(),
                })
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
