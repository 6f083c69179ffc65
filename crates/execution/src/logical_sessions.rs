//! The process's local logical session cache, which `$listLocalSessions` reads: every session
//! a command names (`lsid`) or `startSession` hands out, with its owner and last use. A node
//! and a router keep one each, filled by the same code ([`note_use`]); a router forwards the
//! `lsid` to its shards, so their caches hold the session too, as mongos and mongod do.
//!
//! Bounds: sessions unused for [`LOGICAL_SESSION_TIMEOUT_MINUTES`] are forgotten; at most
//! [`MAX_SESSIONS`] are kept (MongoDB's `maxSessions` default): past it the least recently
//! used one is forgotten first. `endSessions`, `killSessions` and `killAllSessions` forget the
//! sessions they name.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bson::{doc, spec::BinarySubtype, Binary, Bson, DateTime, Document};
use parking_lot::Mutex;
use sha2::Digest;

use myriad_auth::UserName;
use crate::{CommandRequest, ServerContext};

/// How long a logical session lives unused (hello's `logicalSessionTimeoutMinutes`).
pub const LOGICAL_SESSION_TIMEOUT_MINUTES: i32 = 30;

/// Sessions kept at most (MongoDB's `maxSessions` default).
pub const MAX_SESSIONS: usize = 1_000_000;
const SESSION_TIMEOUT: Duration = Duration::from_secs(LOGICAL_SESSION_TIMEOUT_MINUTES as u64 * 60);

struct Entry {
    /// `user@db` of the user the session belongs to; none without authentication.
    user: Option<String>,
    last_use: Instant,
    last_use_wall: DateTime,
}

/// The sessions this process has seen, by `lsid.id`.
#[derive(Default)]
pub struct LogicalSessions {
    sessions: Mutex<HashMap<Vec<u8>, Entry>>,
}

/// Who may be listed: `$listLocalSessions`' `{}`, `{allUsers: true}` or `{users: [...]}`.
pub enum SessionOwners<'a> {
    All,
    Users(&'a [Document]),
    /// The caller's own sessions (those without a user when nobody is authenticated).
    Caller(Option<String>),
}

/// MongoDB's `uid`: SHA-256 of the owner's `user@db` (of the empty string without a user).
fn user_digest(user: Option<&str>) -> Binary {
    Binary { subtype: BinarySubtype::Generic, bytes: sha2::Sha256::digest(user.unwrap_or("").as_bytes()).to_vec() }
}

fn session_bytes(id: &Bson) -> Option<Vec<u8>> {
    match id {
        Bson::Binary(binary) if binary.subtype == BinarySubtype::Uuid => Some(binary.bytes.clone()),
        _ => None,
    }
}

/// MongoDB's `uid` of the sessions `request`'s connection owns: the digest of its user.
pub fn owner_digest(request: &CommandRequest) -> Vec<u8> {
    user_digest(owner(request).as_deref()).bytes
}

/// `user@db` of the connection's authenticated user.
fn owner(request: &CommandRequest) -> Option<String> {
    request.connection.session.authenticated_user_names().first().map(UserName::full_name)
}

impl LogicalSessions {
    /// Records a use of session `id` by `user`.
    pub fn touch(&self, id: &Bson, user: Option<String>) {
        let Some(key) = session_bytes(id) else { return };
        let now = Instant::now();
        let mut sessions = self.sessions.lock();
        if !sessions.contains_key(&key) && sessions.len() >= MAX_SESSIONS {
            sessions.retain(|_, entry| now.duration_since(entry.last_use) < SESSION_TIMEOUT);
            if sessions.len() >= MAX_SESSIONS {
                if let Some(oldest) = sessions.iter().min_by_key(|(_, entry)| entry.last_use).map(|(key, _)| key.clone()) {
                    sessions.remove(&oldest);
                }
            }
        }
        sessions.insert(key, Entry { user, last_use: now, last_use_wall: DateTime::now() });
    }

    pub fn forget(&self, id: &Bson) {
        if let Some(key) = session_bytes(id) {
            self.sessions.lock().remove(&key);
        }
    }

    pub fn forget_all(&self) {
        self.sessions.lock().clear();
    }

    /// `{_id: {id, uid}, lastUse, user?: {name}}` of each live session `owners` selects.
    pub fn list(&self, owners: &SessionOwners<'_>) -> Vec<Document> {
        let now = Instant::now();
        let wanted_users: Vec<String> = match owners {
            SessionOwners::Users(users) => users
                .iter()
                .filter_map(|user| Some(format!("{}@{}", user.get_str("user").ok()?, user.get_str("db").ok()?)))
                .collect(),
            _ => Vec::new(),
        };
        let sessions = self.sessions.lock();
        let mut listed: Vec<(&Vec<u8>, &Entry)> = sessions
            .iter()
            .filter(|(_, entry)| now.duration_since(entry.last_use) < SESSION_TIMEOUT)
            .filter(|(_, entry)| match owners {
                SessionOwners::All => true,
                SessionOwners::Users(_) => entry.user.as_ref().is_some_and(|user| wanted_users.contains(user)),
                SessionOwners::Caller(caller) => entry.user == *caller,
            })
            .collect();
        listed.sort_by_key(|(_, entry)| entry.last_use);
        listed
            .into_iter()
            .map(|(id, entry)| {
                let id = Binary { subtype: BinarySubtype::Uuid, bytes: id.clone() };
                let mut document = doc! { "_id": { "id": id, "uid": user_digest(entry.user.as_deref()) }, "lastUse": entry.last_use_wall };
                if let Some(user) = &entry.user {
                    document.insert("user", doc! { "name": user });
                }
                document
            })
            .collect()
    }
}

/// Records the session a command names (`lsid`), and what the session commands do to the
/// cache: `endSessions`/`killSessions` forget the ones they list, `killAllSessions` all of
/// them. Run for every client command, on a node and on a router.
pub fn note_use(context: &ServerContext, request: &CommandRequest) {
    let sessions = &context.logical_sessions;
    if let Some(Bson::Document(lsid)) = request.body.get("lsid") {
        if let Some(id) = lsid.get("id") {
            sessions.touch(id, owner(request));
        }
    }
    match request.name.as_str() {
        "endSessions" | "killSessions" => {
            if let Some(Bson::Array(listed)) = request.body.get(&request.name) {
                for id in listed.iter().filter_map(Bson::as_document).filter_map(|entry| entry.get("id")) {
                    sessions.forget(id);
                }
            }
        }
        "killAllSessions" => sessions.forget_all(),
        _ => {}
    }
}

/// A session `startSession` handed out, recorded for its caller.
pub fn started(context: &ServerContext, request: &CommandRequest, id: &Bson) {
    context.logical_sessions.touch(id, owner(request));
}

/// `$listLocalSessions`' documents for this request's options.
pub fn list_local(context: &ServerContext, request: &CommandRequest, all_users: bool, users: &[Document]) -> Vec<Document> {
    let owners = if all_users {
        SessionOwners::All
    } else if !users.is_empty() {
        SessionOwners::Users(users)
    } else {
        SessionOwners::Caller(owner(request))
    };
    context.logical_sessions.list(&owners)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(byte: u8) -> Bson {
        Bson::Binary(Binary { subtype: BinarySubtype::Uuid, bytes: vec![byte; 16] })
    }

    #[test]
    fn sessions_are_listed_by_owner_and_forgotten() {
        let sessions = LogicalSessions::default();
        sessions.touch(&id(1), None);
        sessions.touch(&id(2), Some("ann@admin".into()));
        sessions.touch(&Bson::Int32(5), None);
        assert_eq!(sessions.list(&SessionOwners::All).len(), 2);
        let mine = sessions.list(&SessionOwners::Caller(None));
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].get_document("_id").ok().and_then(|key| key.get("uid")), Some(&Bson::Binary(user_digest(None))));
        let users = [doc! { "user": "ann", "db": "admin" }];
        let anns = sessions.list(&SessionOwners::Users(&users));
        assert_eq!(anns[0].get_document("user").ok(), Some(&doc! { "name": "ann@admin" }));
        sessions.forget(&id(2));
        assert!(sessions.list(&SessionOwners::Users(&users)).is_empty());
        sessions.forget_all();
        assert!(sessions.list(&SessionOwners::All).is_empty());
    }

    #[test]
    fn the_empty_users_digest_is_sha256_of_nothing() {
        assert_eq!(user_digest(None).bytes[..4], [0xe3, 0xb0, 0xc4, 0x42]);
    }
}
