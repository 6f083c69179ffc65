//! A cluster member that is a replica set (`name/host:port,host:port,...`, MongoDB's shard
//! and config server connection string): calls go to its primary, found by asking the members'
//! `hello` (the one that is writable, or the one they name as primary), and looked for again
//! after a failed exchange or a reply saying the member is not (or no longer) the primary. A
//! set of one host that is a single node (no `setName`) is that node, as mongos accepts a
//! `name/host` config server string for it.
//!
//! Bounds: discovery polls for at most [`PRIMARY_WAIT`] (an election takes about 1.5 s), and a
//! command that a not-primary reply refused is sent at most [`NOT_PRIMARY_ATTEMPTS`] times.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::NodeClient;
use crate::error::{ClusterError, ClusterResult};

/// How long a call waits for the set to have a primary.
pub const PRIMARY_WAIT: Duration = Duration::from_secs(20);
/// Sends of one command refused as not primary before its error is answered.
pub const NOT_PRIMARY_ATTEMPTS: usize = 5;
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// mongod's codes for "this member is not the primary (any more)": the command did not run.
const NOT_PRIMARY_CODES: [i32; 5] = [10107, 13435, 11602, 189, 13436];

pub struct SetTarget {
    name: String,
    members: Vec<String>,
    primary: Mutex<Option<String>>,
}

impl SetTarget {
    /// The set of a `name/host,host` address; None for a single `host:port`.
    pub fn parse(address: &str) -> Option<SetTarget> {
        let (name, hosts) = address.split_once('/')?;
        let members: Vec<String> = hosts.split(',').map(str::trim).filter(|host| !host.is_empty()).map(str::to_string).collect();
        if name.is_empty() || members.is_empty() {
            return None;
        }
        Some(SetTarget { name: name.to_string(), members, primary: Mutex::new(None) })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Forgets `host` as the primary (the next call looks again).
    pub fn forget(&self, host: &str) {
        let mut primary = self.primary.lock();
        if primary.as_deref() == Some(host) {
            *primary = None;
        }
    }

    /// The primary's host, looked for among the members when not known.
    pub async fn primary(&self, client: &NodeClient) -> ClusterResult<String> {
        if let Some(host) = self.primary.lock().clone() {
            return Ok(host);
        }
        let deadline = Instant::now() + PRIMARY_WAIT;
        loop {
            let mut named = None;
            for host in &self.members {
                let Ok(hello) = client.hello_of(host).await else { continue };
                let single_node = self.members.len() == 1 && !hello.contains_key("setName");
                if hello.get_str("setName").ok() != Some(self.name.as_str()) && !single_node {
                    continue;
                }
                if hello.get_bool("isWritablePrimary").unwrap_or(false) {
                    *self.primary.lock() = Some(host.clone());
                    return Ok(host.clone());
                }
                if let Ok(primary) = hello.get_str("primary") {
                    named = Some(primary.to_string());
                }
            }
            if let Some(host) = named {
                if client.hello_of(&host).await.is_ok_and(|hello| hello.get_bool("isWritablePrimary").unwrap_or(false)) {
                    *self.primary.lock() = Some(host.clone());
                    return Ok(host);
                }
            }
            if Instant::now() >= deadline {
                return Err(ClusterError::coded(133, format!("Could not find host matching read preference {{ mode: \"primary\" }} for set {}", self.name)));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

/// True when a reply message says its member is not the primary (the command did not run).
pub fn says_not_primary(message: &[u8]) -> bool {
    let Ok(body) = super::raw_reply_body(message) else { return false };
    match body.get_i32("code") {
        Ok(code) => NOT_PRIMARY_CODES.contains(&code),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_addresses_parse_and_single_hosts_do_not() {
        let set = SetTarget::parse("shard0/127.0.0.1:1, 127.0.0.1:2").expect("a set");
        assert_eq!((set.name(), set.members.as_slice()), ("shard0", &["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()][..]));
        assert!(SetTarget::parse("127.0.0.1:1").is_none());
        assert!(SetTarget::parse("/127.0.0.1:1").is_none());
        assert!(SetTarget::parse("rs/").is_none());
    }
}
