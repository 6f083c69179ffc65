//! Hostile clients over TCP against `myriad --auth`: 10,000 random and mutated messages sent on
//! an unauthenticated connection, and 10,000 on a connection logged in as a user with only the
//! `read` role. Afterwards the server still serves other clients, and no data changed (every
//! collection and index of every database, dumped before and after, compares equal).
//!
//! Messages start from a corpus of real commands and are mutated at the BSON level (values
//! replaced by hostile ones, fields dropped or added, the command renamed to a writing one, `$db`
//! changed) and at the byte level (bit flips, splices, truncation, flags, section kinds,
//! opcodes, OP_COMPRESSED wrapping), or are random bytes. Nearly every message keeps a correct
//! length, so the connection stays in step: each is followed by a sync command whose reply is
//! awaited (the replies to the hostile messages are tallied by code; see the test's output). A few lie about their length and go on a throwaway connection. A connection the
//! server closes is reopened (and logged in again). Seeded: a failure names its seed and index.

mod raw_client;

use std::time::Duration;

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};
use myriad_testkit::TestServer;
use futures_util::TryStreamExt;
use mongodb::options::AuthMechanism;
use mongodb::Client;
use raw_client::{RawConnection, ScramLogin, HEADER_BYTES};

const MESSAGES: usize = 10_000;
/// A reply slower than this means the server hangs on the message (nothing here is slow).
const REPLY_WAIT: Duration = Duration::from_secs(60);
const ROOT_PASSWORD: &str = "root-secret";
const READER_PASSWORD: &str = "reader-secret";

/// xorshift64*: deterministic, seedable, good enough to pick mutations.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn bytes(&mut self, count: usize) -> Vec<u8> {
        (0..count).map(|_| self.next() as u8).collect()
    }
}

/// Real commands a client might send, as the corpus to mutate. Authentication commands are
/// rare in the mix: every failed login costs its address a rate-limit wait.
fn corpus() -> Vec<Document> {
    vec![
        doc! { "find": "items", "filter": { "k": { "$gte": 3 } }, "sort": { "k": -1 }, "limit": 5, "projection": { "k": 1 } },
        doc! { "find": "items", "filter": { "$or": [{ "k": 1 }, { "tags": "b" }] }, "batchSize": 2 },
        doc! { "aggregate": "items", "pipeline": [{ "$match": { "k": { "$lt": 5 } } }, { "$group": { "_id": "$k", "n": { "$sum": 1 } } }], "cursor": {} },
        doc! { "aggregate": "items", "pipeline": [{ "$lookup": { "from": "items", "localField": "k", "foreignField": "k", "as": "same" } }, { "$limit": 3 }], "cursor": {} },
        doc! { "aggregate": "items", "pipeline": [{ "$out": "copied" }], "cursor": {} },
        doc! { "aggregate": "items", "pipeline": [{ "$merge": { "into": "merged" } }], "cursor": {} },
        doc! { "aggregate": 1, "pipeline": [{ "$currentOp": {} }], "cursor": {} },
        doc! { "insert": "items", "documents": [{ "_id": "intruder", "k": 99 }] },
        doc! { "update": "items", "updates": [{ "q": { "k": 1 }, "u": { "$set": { "owned": true } }, "multi": true }] },
        doc! { "delete": "items", "deletes": [{ "q": {}, "limit": 0 }] },
        doc! { "findAndModify": "items", "query": { "k": 2 }, "remove": true },
        doc! { "count": "items", "query": { "k": { "$in": [1, 2, 3] } } },
        doc! { "distinct": "items", "key": "tags" },
        doc! { "createIndexes": "items", "indexes": [{ "key": { "tags": 1 }, "name": "tags_1" }] },
        doc! { "dropIndexes": "items", "index": "k_1" },
        doc! { "drop": "items" },
        doc! { "dropDatabase": 1 },
        doc! { "create": "fresh", "capped": true, "size": 4096 },
        doc! { "collMod": "items", "validator": { "k": { "$type": "int" } } },
        doc! { "renameCollection": "hostile.items", "to": "hostile.stolen" },
        doc! { "listCollections": 1, "filter": {} },
        doc! { "listIndexes": "items" },
        doc! { "listDatabases": 1, "nameOnly": true },
        doc! { "dbStats": 1 },
        doc! { "collStats": "items" },
        doc! { "validate": "items", "full": true },
        doc! { "explain": { "find": "items", "filter": { "k": 1 } }, "verbosity": "executionStats" },
        doc! { "getMore": 123_456_789i64, "collection": "items" },
        doc! { "killCursors": "items", "cursors": [123_456_789i64] },
        doc! { "createUser": "mallory", "pwd": "x", "roles": ["root"] },
        doc! { "grantRolesToUser": "reader", "roles": [{ "role": "root", "db": "admin" }] },
        doc! { "updateUser": "reader", "roles": ["readWrite"] },
        doc! { "dropUser": "root" },
        doc! { "createRole": "evil", "privileges": [{ "resource": { "anyResource": true }, "actions": ["anyAction"] }], "roles": [] },
        doc! { "setParameter": 1, "notablescan": true },
        doc! { "getParameter": "*" },
        doc! { "profile": 2 },
        doc! { "currentOp": 1, "$ownOps": true },
        doc! { "killOp": 1, "op": 1 },
        doc! { "serverStatus": 1 },
        doc! { "hello": 1, "client": { "driver": { "name": "hostile", "version": "0" } }, "compression": ["zstd", "zlib", "snappy"] },
        doc! { "isMaster": 1, "helloOk": true },
        doc! { "ping": 1 },
        doc! { "buildInfo": 1 },
        doc! { "connectionStatus": 1, "showPrivileges": true },
        doc! { "listCommands": 1 },
        doc! { "endSessions": [{ "id": Binary { subtype: BinarySubtype::Uuid, bytes: vec![7; 16] } }] },
        doc! { "startSession": 1 },
        doc! { "usersInfo": 1 },
        doc! { "rolesInfo": 1 },
        doc! { "compact": "items" },
        doc! { "bulkWrite": 1, "ops": [{ "insert": 0, "document": { "x": 1 } }], "nsInfo": [{ "ns": "hostile.items" }] },
    ]
}

/// Authentication attempts, picked rarely (see [`corpus`]).
fn authentication_corpus() -> Vec<Document> {
    let payload = Binary { subtype: BinarySubtype::Generic, bytes: b"n,,n=root,r=hostilenonce".to_vec() };
    vec![
        doc! { "saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": payload.clone(), "options": { "skipEmptyExchange": true } },
        doc! { "saslContinue": 1, "conversationId": 1, "payload": payload.clone() },
        doc! { "hello": 1, "speculativeAuthenticate": { "saslStart": 1, "mechanism": "SCRAM-SHA-1", "payload": payload, "db": "admin" } },
        doc! { "authenticate": 1, "mechanism": "MONGODB-X509" },
    ]
}

/// Commands a mutation may rename a command to: the ones that write or escalate.
const WRITING_COMMANDS: &[&str] = &[
    "insert", "update", "delete", "findAndModify", "drop", "dropDatabase", "create", "createIndexes", "dropIndexes", "collMod",
    "renameCollection", "createUser", "updateUser", "dropUser", "dropAllUsersFromDatabase", "grantRolesToUser", "createRole",
    "grantPrivilegesToRole", "setParameter", "profile", "compact", "killOp", "killCursors", "bulkWrite", "aggregate",
];

const DATABASES: &[&str] = &["hostile", "admin", "other", "local", "config", "$external", "", "a.b", "$cmd", "x\u{1}y"];

fn nested(depth: usize) -> Bson {
    let mut value = Bson::Int32(1);
    for _ in 0..depth {
        value = Bson::Document(doc! { "a": value });
    }
    value
}

fn hostile_value(random: &mut Random) -> Bson {
    match random.below(24) {
        0 => Bson::Null,
        1 => Bson::Boolean(random.chance(50)),
        2 => Bson::Int32([0, -1, i32::MIN, i32::MAX, 1][random.below(5)]),
        3 => Bson::Int64([i64::MIN, i64::MAX, -1, 0][random.below(4)]),
        4 => Bson::Double([f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 1e308, 0.5][random.below(6)]),
        5 => Bson::String(["", "$", "$$ROOT", "a.b.c", "$where", "items", "hostile.items", "\u{FFFF}"][random.below(8)].to_string()),
        6 => Bson::String("x".repeat(100_000)),
        7 => Bson::Document(Document::new()),
        8 => Bson::Document(doc! { "$gt": 1 }),
        9 => Bson::Document(doc! { "$where": "sleep(100000)" }),
        10 => Bson::Document(doc! { "$expr": { "$divide": [1, 0] } }),
        11 => Bson::Array(Vec::new()),
        12 => Bson::Array((0..1000).map(Bson::Int32).collect()),
        13 => Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes: random.bytes(32) }),
        14 => Bson::ObjectId(bson::oid::ObjectId::new()),
        15 => Bson::DateTime(bson::DateTime::from_millis(i64::MIN)),
        16 => Bson::RegularExpression(bson::Regex { pattern: "(a+)+$".to_string(), options: "i".to_string() }),
        17 => Bson::Timestamp(bson::Timestamp { time: u32::MAX, increment: u32::MAX }),
        18 => Bson::MinKey,
        19 => Bson::MaxKey,
        20 => Bson::JavaScriptCode("while(true){}".to_string()),
        21 => nested(1 + random.below(180)),
        22 => Bson::Undefined,
        _ => Bson::Decimal128(bson::Decimal128::from_bytes([0xFF; 16])),
    }
}

/// Replaces one value somewhere in the document (a random walk down).
fn replace_somewhere(document: &mut Document, random: &mut Random) {
    let keys: Vec<String> = document.keys().cloned().collect();
    if keys.is_empty() {
        document.insert("x", hostile_value(random));
        return;
    }
    let key = &keys[random.below(keys.len())];
    match document.get_mut(key) {
        Some(Bson::Document(inner)) if random.chance(60) => replace_somewhere(inner, random),
        Some(Bson::Array(items)) if !items.is_empty() && random.chance(60) => {
            let index = random.below(items.len());
            match &mut items[index] {
                Bson::Document(inner) => replace_somewhere(inner, random),
                other => *other = hostile_value(random),
            }
        }
        Some(value) => *value = hostile_value(random),
        None => {}
    }
}

/// A BSON-level mutation of a command.
fn mutate_document(mut command: Document, random: &mut Random) -> Document {
    for _ in 0..=random.below(2) {
        match random.below(6) {
            0 | 1 => replace_somewhere(&mut command, random),
            2 => {
                let keys: Vec<String> = command.keys().skip(1).cloned().collect();
                if !keys.is_empty() {
                    command.remove(&keys[random.below(keys.len())]);
                }
            }
            3 => {
                let key = ["$where", "", "a.b", "$db", "lsid", "txnNumber", "writeConcern", "maxTimeMS", "comment", "$readPreference"][random.below(10)];
                command.insert(key, hostile_value(random));
            }
            4 => {
                // The same arguments under another command's name.
                let mut renamed = Document::new();
                let name = WRITING_COMMANDS[random.below(WRITING_COMMANDS.len())];
                for (index, (key, value)) in command.into_iter().enumerate() {
                    renamed.insert(if index == 0 { name.to_string() } else { key }, value);
                }
                command = renamed;
            }
            _ => {
                command.insert("$db", DATABASES[random.below(DATABASES.len())]);
            }
        }
    }
    command
}

/// A byte-level mutation of a whole message (its header's length is fixed afterwards).
fn mutate_bytes(message: &mut Vec<u8>, donor: &[u8], random: &mut Random) {
    let body_start = HEADER_BYTES;
    for _ in 0..=random.below(2) {
        let length = message.len();
        let position = body_start + random.below(length.saturating_sub(body_start).max(1));
        match random.below(10) {
            0 => {
                if position < length {
                    message[position] ^= 1 << random.below(8);
                }
            }
            1 => {
                if position < length {
                    message[position] = [0x00, 0xFF, 0x7F, 0x80, 0x01, 0x03, 0x04, 0x10][random.below(8)];
                }
            }
            2 => {
                let count = 1 + random.below(16);
                let inserted = random.bytes(count);
                message.splice(position.min(length)..position.min(length), inserted);
            }
            3 => {
                let end = (position + 1 + random.below(32)).min(length);
                if position < end {
                    message.drain(position..end);
                }
            }
            4 => {
                // A four-byte integer (a BSON length, a flag word) set to a hostile value.
                if position + 4 <= length {
                    let value = [0i32, -1, i32::MAX, i32::MIN, 5, (length - position) as i32 + 1][random.below(6)];
                    message[position..position + 4].copy_from_slice(&value.to_le_bytes());
                }
            }
            5 => {
                // OP_MSG flags: checksumPresent, moreToCome, exhaustAllowed, or noise.
                let flags = [1u32, 2, 1 << 16, 1 << 17, random.next() as u32][random.below(5)];
                if length >= body_start + 4 {
                    message[body_start..body_start + 4].copy_from_slice(&flags.to_le_bytes());
                }
            }
            6 => {
                // A document-sequence section, well formed or not.
                message.push(1);
                let count = random.below(40);
                let sequence = random.bytes(count);
                message.extend_from_slice(&((sequence.len() + 4) as i32).to_le_bytes());
                message.extend_from_slice(&sequence);
            }
            7 => message.truncate(body_start + random.below(length.saturating_sub(body_start).max(1))),
            8 => {
                // The tail of another message spliced on.
                let cut = donor.len().min(body_start + random.below(donor.len().saturating_sub(body_start).max(1)));
                message.truncate(position.min(length));
                message.extend_from_slice(&donor[cut..]);
            }
            _ => {
                let opcode = [2004i32, 2012, 1, 2001, random.next() as i32][random.below(5)];
                message[12..16].copy_from_slice(&opcode.to_le_bytes());
            }
        }
    }
}

/// An OP_COMPRESSED (noop compressor) wrapping `message`, its sizes possibly wrong.
fn compressed(message: &[u8], random: &mut Random) -> Vec<u8> {
    let inner = &message[HEADER_BYTES..];
    let original_opcode = i32::from_le_bytes([message[12], message[13], message[14], message[15]]);
    let mut wrapped = message[..HEADER_BYTES].to_vec();
    wrapped[12..16].copy_from_slice(&2012i32.to_le_bytes());
    wrapped.extend_from_slice(&original_opcode.to_le_bytes());
    let claimed = if random.chance(70) { inner.len() as i32 } else { [0, -1, i32::MAX, inner.len() as i32 * 1000][random.below(4)] };
    wrapped.extend_from_slice(&claimed.to_le_bytes());
    wrapped.push(if random.chance(80) { 0 } else { random.below(256) as u8 });
    wrapped.extend_from_slice(inner);
    wrapped
}

fn set_length(message: &mut [u8]) {
    let length = message.len() as i32;
    message[0..4].copy_from_slice(&length.to_le_bytes());
}

/// One hostile message. The bool says whether its header states its true length.
fn hostile_message(corpus: &[Vec<u8>], authentication: &[Vec<u8>], random: &mut Random) -> (Vec<u8>, bool) {
    let pick = |random: &mut Random| -> &Vec<u8> {
        if random.below(1000) < 3 {
            &authentication[random.below(authentication.len())]
        } else {
            &corpus[random.below(corpus.len())]
        }
    };
    let mut message = match random.below(12) {
        // Now and then a command as a client would send it, for the handlers' sake.
        10 | 11 => pick(random).clone(),
        0 => {
            // Random bytes behind a header with a real opcode.
            let mut message = vec![0u8; HEADER_BYTES];
            let opcode = [2013i32, 2004, 2012, 2013][random.below(4)];
            message[12..16].copy_from_slice(&opcode.to_le_bytes());
            let count = random.below(600);
            message.extend(random.bytes(count));
            message
        }
        1..=4 => {
            let base = pick(random).clone();
            let document: Document = bson::from_slice(&base[HEADER_BYTES + 5..]).expect("corpus documents parse");
            raw_client::op_msg(0, 0, &mutate_document(document, random))
        }
        _ => {
            let mut message = pick(random).clone();
            let donor = corpus[random.below(corpus.len())].clone();
            if random.chance(20) {
                let document: Document = bson::from_slice(&message[HEADER_BYTES + 5..]).expect("corpus documents parse");
                message = raw_client::op_msg(0, 0, &mutate_document(document, random));
            }
            mutate_bytes(&mut message, &donor, random);
            message
        }
    };
    if message.len() < HEADER_BYTES {
        message.resize(HEADER_BYTES, 0);
    }
    if random.chance(5) && i32::from_le_bytes([message[12], message[13], message[14], message[15]]) == 2013 {
        message = compressed(&message, random);
    }
    set_length(&mut message);
    message[4..8].copy_from_slice(&(1_000_000 + random.below(1_000_000) as i32).to_le_bytes());
    if random.below(100) < 2 {
        // A lie about the length: more than is sent, or less.
        let lie = [message.len() as i32 + 1 + random.below(1000) as i32, HEADER_BYTES as i32 + random.below(message.len()) as i32][random.below(2)];
        message[0..4].copy_from_slice(&lie.to_le_bytes());
        return (message, false);
    }
    (message, true)
}

/// Every database's collections (documents in `_id` order, as BSON bytes) and indexes.
async fn dump(root: &Client) -> Vec<(String, Vec<Vec<u8>>)> {
    let mut dumped = Vec::new();
    let mut names = root.list_database_names().await.expect("listDatabases");
    names.sort();
    for name in names {
        let database = root.database(&name);
        let mut collections = database.list_collection_names().await.expect("listCollections");
        collections.sort();
        for collection_name in collections {
            let collection = database.collection::<Document>(&collection_name);
            let documents: Vec<Document> = collection.find(doc! {}).sort(doc! { "_id": 1 }).await.expect("find").try_collect().await.expect("documents");
            let mut entries: Vec<Vec<u8>> = documents.iter().map(|document| bson::to_vec(document).expect("serialise")).collect();
            let indexes: Vec<Document> = database
                .run_command(doc! { "listIndexes": &collection_name })
                .await
                .expect("listIndexes")
                .get_document("cursor")
                .and_then(|cursor| cursor.get_array("firstBatch"))
                .expect("indexes")
                .iter()
                .filter_map(|index| index.as_document().cloned())
                .collect();
            entries.extend(indexes.iter().map(|index| bson::to_vec(index).expect("serialise")));
            dumped.push((format!("{name}.{collection_name}"), entries));
        }
    }
    dumped
}

/// A server with --auth, a root user, a reader (read on `hostile`), and data to protect.
async fn protected_server() -> (TestServer, Client) {
    let server = TestServer::builder().auth().argument("--setParameter").argument("messageReadTimeoutMillis=2000").start();
    server
        .client()
        .await
        .database("admin")
        .run_command(doc! { "createUser": "root", "pwd": ROOT_PASSWORD, "roles": ["root"] })
        .await
        .expect("first user");
    let root = server.client_as("root", ROOT_PASSWORD, "admin", AuthMechanism::ScramSha256).await;
    root.database("admin")
        .run_command(doc! { "createUser": "reader", "pwd": READER_PASSWORD, "roles": [{ "role": "read", "db": "hostile" }] })
        .await
        .expect("reader");
    let items: Vec<Document> = (0..200).map(|index| doc! { "_id": index, "k": index % 10, "tags": (["a", "b", "c"][index as usize % 3]), "nested": { "n": index } }).collect();
    root.database("hostile").collection::<Document>("items").insert_many(items).await.expect("seed");
    root.database("hostile").run_command(doc! { "createIndexes": "items", "indexes": [{ "key": { "k": 1 }, "name": "k_1" }] }).await.expect("index");
    root.database("hostile").run_command(doc! { "create": "log", "capped": true, "size": 65536 }).await.expect("capped");
    root.database("hostile").collection::<Document>("log").insert_one(doc! { "line": 1 }).await.expect("log");
    root.database("other").collection::<Document>("things").insert_many((0..20).map(|n| doc! { "n": n })).await.expect("other");
    (server, root)
}

/// What happened to the messages, for the failure message.
#[derive(Debug, Default)]
struct Outcome {
    answered_in_step: usize,
    connections_closed_by_server: usize,
    lies_sent: usize,
    /// Replies to the hostile messages themselves: ok, and the error codes seen (with counts).
    succeeded: usize,
    error_codes: std::collections::BTreeMap<i32, usize>,
}

/// Sends the messages on one connection (logged in as `login` if given), each followed by a
/// sync command whose reply must come.
fn send_hostile_messages(port: u16, mut login: Option<ScramLogin>, seed: u64) -> Outcome {
    let serialise = |commands: Vec<Document>| -> Vec<Vec<u8>> {
        commands
            .into_iter()
            .map(|mut command| {
                command.insert("$db", "hostile");
                raw_client::op_msg(0, 0, &command)
            })
            .collect()
    };
    let corpus = serialise(corpus());
    let authentication = serialise(authentication_corpus());
    let mut random = Random(seed);
    let mut outcome = Outcome::default();
    let open = |login: &mut Option<ScramLogin>| {
        let mut connection = RawConnection::connect(port, REPLY_WAIT);
        if let Some(login) = login.as_mut() {
            connection.login(login).expect("log in");
        }
        connection
    };
    let mut connection = open(&mut login);
    for index in 0..MESSAGES {
        let (message, honest) = hostile_message(&corpus, &authentication, &mut random);
        if !honest {
            let mut throwaway = RawConnection::connect(port, REPLY_WAIT);
            let _ = throwaway.send(&message);
            outcome.lies_sent += 1;
            continue;
        }
        let hostile_id = i32::from_le_bytes([message[4], message[5], message[6], message[7]]);
        let sync_id = connection.take_request_id();
        let sync = raw_client::op_msg(sync_id, 0, &doc! { "connectionStatus": 1, "$db": "admin" });
        let sent = connection.send(&message).and_then(|()| connection.send(&sync));
        let reply = sent.and_then(|()| loop {
            let reply = connection.read_reply()?;
            if reply.response_to == sync_id {
                break reply.body.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "sync reply without a body"));
            }
            if reply.response_to == hostile_id {
                match reply.body.as_ref().map(|body| (body.get_f64("ok").unwrap_or(0.0), body.get_i32("code"))) {
                    Some((1.0, _)) => outcome.succeeded += 1,
                    Some((_, Ok(code))) => *outcome.error_codes.entry(code).or_default() += 1,
                    _ => {}
                }
            }
        });
        match reply {
            Ok(status) => {
                outcome.answered_in_step += 1;
                let users = status.get_document("authInfo").and_then(|info| info.get_array("authenticatedUsers")).map(Vec::len).unwrap_or(0);
                if login.is_some() && users == 0 {
                    // A mutated logout: log in again.
                    connection = open(&mut login);
                }
            }
            Err(error) => {
                // The server may close a connection whose message it cannot frame (an unknown
                // opcode); it must never leave one hanging.
                assert!(
                    !matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
                    "seed {seed}, message {index}: no reply within {REPLY_WAIT:?} ({error}); message: {message:?}"
                );
                outcome.connections_closed_by_server += 1;
                connection = open(&mut login);
            }
        }
    }
    outcome
}

async fn survive_hostile_messages(login: Option<ScramLogin>, seed: u64) {
    let (server, root) = protected_server().await;
    let before = dump(&root).await;
    let port = server.port;
    let outcome = tokio::task::spawn_blocking(move || send_hostile_messages(port, login, seed)).await.expect("the hostile client finished");
    eprintln!("hostile client (seed {seed:#x}): {outcome:?}");
    assert!(outcome.answered_in_step > MESSAGES / 2, "{outcome:?}");
    // The messages reach the handlers, not only the parsers: some succeed (a read-only user's
    // finds, anyone's hellos) and some are refused for want of a privilege (13).
    assert!(outcome.succeeded > MESSAGES / 100 && outcome.error_codes.get(&13).copied().unwrap_or(0) > MESSAGES / 20, "{outcome:?}");
    // Still serving: a fresh client logs in, reads and writes.
    let after_client = server.client_as("root", ROOT_PASSWORD, "admin", AuthMechanism::ScramSha1).await;
    after_client.database("admin").run_command(doc! { "ping": 1 }).await.expect("ping after the hostile client");
    let reader = server.client_as("reader", READER_PASSWORD, "admin", AuthMechanism::ScramSha256).await;
    assert_eq!(reader.database("hostile").collection::<Document>("items").count_documents(doc! {}).await.expect("count"), 200);
    // Nothing changed.
    let after = dump(&after_client).await;
    assert_eq!(before.len(), after.len(), "collections before {:?}, after {:?}", names(&before), names(&after));
    for ((name, documents), (name_after, documents_after)) in before.iter().zip(&after) {
        assert_eq!(name, name_after);
        assert!(documents == documents_after, "{name} changed under a hostile client ({outcome:?})");
    }
    let validate = after_client.database("hostile").run_command(doc! { "validate": "items" }).await.expect("validate");
    assert_eq!(validate.get_bool("valid"), Ok(true), "{validate}");
    root.database("hostile").collection::<Document>("items").insert_one(doc! { "_id": "after" }).await.expect("writes still work");
}

fn names(dumped: &[(String, Vec<Vec<u8>>)]) -> Vec<&str> {
    dumped.iter().map(|(name, _)| name.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_hostile_messages_unauthenticated() {
    survive_hostile_messages(None, 0x5EED_0001).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_hostile_messages_as_a_read_only_user() {
    survive_hostile_messages(Some(ScramLogin::new("reader", READER_PASSWORD)), 0x5EED_0002).await;
}
