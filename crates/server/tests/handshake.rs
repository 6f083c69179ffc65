//! The handshake seen from a raw socket: exhaust hello streams replies with moreToCome and
//! shutdown ends the stream; and quick commands answer while every command thread is busy.
//! What a driver sees of the handshake (awaitable hello's validation, an idle client's cost,
//! transactions refused) is tests/python/test_monitoring.py's (docs/testing.md).


use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bson::{doc, Bson, Document};
use myriad_testkit::TestServer;
use myriad_wire::{decode_message, encode_op_msg, OpMsg, Request, OP_MSG_FLAG_EXHAUST_ALLOWED, OP_MSG_FLAG_MORE_TO_COME};

fn send(stream: &mut TcpStream, request_id: i32, flags: u32, body: Document) {
    let message = OpMsg { flags, body, sequences: Vec::new(), checksum_present: false, duplicate_fields: Default::default() };
    stream.write_all(&encode_op_msg(request_id, 0, &message, None).expect("encode")).expect("send");
}

/// One reply: (requestID, responseTo, flags, body).
fn receive(stream: &mut TcpStream) -> (i32, i32, u32, Document) {
    let mut header = [0u8; 16];
    stream.read_exact(&mut header).expect("reply header");
    let length = i32::from_le_bytes(header[0..4].try_into().expect("four bytes")) as usize;
    let mut message = header.to_vec();
    message.resize(length, 0);
    stream.read_exact(&mut message[16..]).expect("reply body");
    let request_id = i32::from_le_bytes(header[4..8].try_into().expect("four bytes"));
    let response_to = i32::from_le_bytes(header[8..12].try_into().expect("four bytes"));
    match decode_message(&message).expect("decodes").request {
        Request::Msg(op_msg) => (request_id, response_to, op_msg.flags, op_msg.body),
        Request::Query(_) => panic!("an OP_MSG reply"),
    }
}

#[test]
fn exhaust_hello_streams_replies_with_more_to_come() {
    let server = TestServer::start();
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    send(&mut stream, 1, 0, doc! { "hello": 1, "$db": "admin" });
    let (_, response_to, flags, handshake) = receive(&mut stream);
    assert_eq!((response_to, flags & OP_MSG_FLAG_MORE_TO_COME), (1, 0));
    let version = handshake.get_document("topologyVersion").expect("topologyVersion").clone();

    // Without exhaustAllowed an awaitable hello gets one ordinary reply.
    send(&mut stream, 2, 0, doc! { "hello": 1, "topologyVersion": version.clone(), "maxAwaitTimeMS": 50, "$db": "admin" });
    let (_, response_to, flags, reply) = receive(&mut stream);
    assert_eq!((response_to, flags & OP_MSG_FLAG_MORE_TO_COME), (2, 0));
    assert_eq!(reply.get("ok"), Some(&Bson::Double(1.0)));

    send(
        &mut stream,
        3,
        OP_MSG_FLAG_EXHAUST_ALLOWED,
        doc! { "hello": 1, "topologyVersion": version.clone(), "maxAwaitTimeMS": 200, "$db": "admin" },
    );
    let mut answers = 3;
    for _ in 0..3 {
        let (request_id, response_to, flags, reply) = receive(&mut stream);
        assert_eq!(response_to, answers, "each streamed reply answers the previous one");
        assert_ne!(flags & OP_MSG_FLAG_MORE_TO_COME, 0, "moreToCome is set");
        assert_eq!(reply.get("isWritablePrimary"), Some(&Bson::Boolean(true)));
        assert_eq!(reply.get_document("topologyVersion").expect("topologyVersion"), &version);
        answers = request_id;
    }
    drop(stream);

    // The server is still serving after the client walked away from its stream.
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    send(&mut stream, 9, OP_MSG_FLAG_EXHAUST_ALLOWED, doc! { "hello": 1, "$db": "admin" });
    let (_, _, flags, reply) = receive(&mut stream);
    assert_eq!(flags & OP_MSG_FLAG_MORE_TO_COME, 0);
    assert_eq!(reply.get_i32("code"), Ok(51756), "exhaust needs maxAwaitTimeMS: {reply}");
}

#[test]
fn shutdown_ends_a_streaming_hello() {
    let mut server = TestServer::start();
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    send(&mut stream, 1, 0, doc! { "hello": 1, "$db": "admin" });
    let version = receive(&mut stream).3.get_document("topologyVersion").expect("topologyVersion").clone();
    send(
        &mut stream,
        2,
        OP_MSG_FLAG_EXHAUST_ALLOWED,
        doc! { "hello": 1, "topologyVersion": version, "maxAwaitTimeMS": 100, "$db": "admin" },
    );
    let (_, _, flags, _) = receive(&mut stream);
    assert_ne!(flags & OP_MSG_FLAG_MORE_TO_COME, 0, "the stream is running");
    assert_eq!(server.stop(), Some(0), "a clean exit with a stream open");
    // The stream ends with ShutdownInProgress (or the socket simply closes).
    let mut ending = None;
    let mut header = [0u8; 16];
    while stream.read_exact(&mut header).is_ok() {
        let length = i32::from_le_bytes(header[0..4].try_into().expect("four bytes")) as usize;
        let mut message = header.to_vec();
        message.resize(length, 0);
        stream.read_exact(&mut message[16..]).expect("reply body");
        let Request::Msg(reply) = decode_message(&message).expect("decodes").request else { panic!("an OP_MSG reply") };
        if reply.flags & OP_MSG_FLAG_MORE_TO_COME == 0 {
            ending = Some(reply.body);
            break;
        }
    }
    if let Some(reply) = ending {
        assert_eq!(reply.get_i32("code"), Ok(91), "{reply}");
    }
}

/// The server's blocking-pool size, by the server's own rule (MYRIAD_COMMAND_THREADS, else
/// four per core).
fn command_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |count| count.get());
    std::env::var("MYRIAD_COMMAND_THREADS").ok().and_then(|value| value.parse().ok()).unwrap_or(cores * 4).max(1)
}

/// The opids of the slow counts currentOp lists as running.
async fn running_slow_counts(observer: &mongodb::Client) -> Vec<mongodb::bson::Bson> {
    let listed = observer
        .database("admin")
        .run_command(mongodb::bson::doc! { "currentOp": 1, "command.count": "slow" })
        .await
        .expect("currentOp answers while the pool is busy");
    let operations = listed.get_array("inprog").expect("inprog");
    operations.iter().filter_map(|operation| operation.as_document().and_then(|operation| operation.get("opid").cloned())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quick_commands_answer_while_every_command_thread_is_busy() {
    let server = TestServer::start();
    let client = server.client().await;
    let collection = client.database("handshake").collection::<mongodb::bson::Document>("slow");
    let padding = "p".repeat(100);
    for batch in 0..8 {
        let documents: Vec<_> = (0..5_000).map(|index| mongodb::bson::doc! { "_id": batch * 5_000 + index, "pad": &padding }).collect();
        collection.insert_many(documents).await.expect("fill");
    }
    // Counts no document passes, through many $or branches: each keeps a thread busy.
    let branches: Vec<_> = (0..400).map(|branch| mongodb::bson::doc! { "pad": { "$regex": format!("^z{branch}") } }).collect();
    let threads = command_threads();
    let mut slow = Vec::new();
    for _ in 0..threads {
        let database = client.database("handshake");
        let body = mongodb::bson::doc! { "count": "slow", "query": { "$or": branches.clone() } };
        slow.push(tokio::spawn(async move { database.run_command(body).await }));
    }
    let observer = server.client().await;
    let busy = myriad_testkit::eventually_some(Duration::from_secs(60), "every command thread runs a slow count", || async {
        let busy = running_slow_counts(&observer).await;
        (busy.len() >= threads).then_some(busy)
    })
    .await;
    assert_eq!(busy.len(), threads, "every command thread runs a slow count");
    let admin = observer.database("admin");
    for quick in ["ping", "hello", "buildInfo", "whatsmyuri"] {
        admin.run_command(mongodb::bson::doc! { quick: 1 }).await.expect("a quick command answers");
    }
    // None of the slow counts had to finish to make room for them.
    let still_running = running_slow_counts(&observer).await;
    assert!(busy.iter().all(|opid| still_running.contains(opid)), "before {busy:?}, after {still_running:?}");
    for opid in still_running {
        admin.run_command(mongodb::bson::doc! { "killOp": 1, "op": opid }).await.expect("killOp");
    }
    for task in slow {
        let _ = task.await.expect("task");
    }
}
