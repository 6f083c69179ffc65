//! Idle, unauthenticated and half-sent connections are closed; connections waiting on the
//! server (an awaitData getMore, an awaitable or streamed hello) are not idle; authenticated
//! clients keep working while other sockets are cut. The limits are set short through
//! `--setParameter`; raw sockets control exactly what is sent.

mod raw_client;

use std::time::Duration;

use bson::{doc, Document};
use myriad_testkit::TestServer;
use mongodb::options::AuthMechanism;
use raw_client::{op_msg, RawConnection, ScramLogin};

/// How long a test waits for the server to close a connection: far beyond every limit set
/// here, so only a connection the server keeps open reaches it.
const CLOSE_WAIT: Duration = Duration::from_secs(30);

fn server(arguments: &[&str]) -> TestServer {
    let mut builder = TestServer::builder();
    for argument in arguments {
        builder = builder.argument(argument);
    }
    builder.start()
}

fn ping(connection: &mut RawConnection) -> Document {
    connection.command("admin", doc! { "ping": 1 }).expect("ping answered")
}

/// A ping whose body is padded to about `bytes`.
fn padded_ping(request_id: i32, bytes: usize) -> Vec<u8> {
    op_msg(request_id, 0, &doc! { "ping": 1, "comment": "x".repeat(bytes), "$db": "admin" })
}

#[test]
fn half_sent_and_dripping_messages_are_closed_and_silence_is_not_a_half_message() {
    let server = server(&["--setParameter", "messageReadTimeoutMillis=1000"]);

    // Half a header, then nothing.
    let mut half_header = RawConnection::connect(server.port, CLOSE_WAIT);
    half_header.send(&padded_ping(1, 100)[..10]).expect("send");
    assert!(half_header.is_closed_by_server(), "half a header held the connection");

    // A whole header and part of the body.
    let mut half_body = RawConnection::connect(server.port, CLOSE_WAIT);
    let message = padded_ping(1, 100);
    half_body.send(&message[..message.len() - 20]).expect("send");
    assert!(half_body.is_closed_by_server(), "half a message held the connection");

    // One byte every 200 ms: progress, but the message is not complete within its deadline.
    let mut dripping = RawConnection::connect(server.port, CLOSE_WAIT);
    let message = padded_ping(1, 400);
    let mut sent_everything = true;
    for byte in &message {
        if dripping.send(std::slice::from_ref(byte)).is_err() {
            sent_everything = false;
            break;
        }
        // Workload, not a wait: the drip rate is the stimulus under test.
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!sent_everything || dripping.is_closed_by_server(), "a dripping message held the connection");

    // A silent connection is idle, not mid-message: the (default, 10 minute) idle limit applies.
    let mut silent = RawConnection::connect(server.port, CLOSE_WAIT);
    // Workload, not a wait: three seconds of silence (past messageReadTimeoutMillis) is the
    // stimulus; nothing happens that could be polled for.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ping(&mut silent).get_f64("ok"), Ok(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_connections_get_the_shorter_limit() {
    let server = server(&["--auth", "--setParameter", "unauthenticatedConnectionTimeoutMillis=1500"]);
    let anonymous = server.client().await;
    anonymous
        .database("admin")
        .run_command(doc! { "createUser": "root", "pwd": "root-secret", "roles": ["root"] })
        .await
        .expect("the first user");
    let root = server.client_as("root", "root-secret", "admin", AuthMechanism::ScramSha256).await;
    root.database("shop").collection::<Document>("items").insert_one(doc! { "n": 1 }).await.expect("insert");
    let port = server.port;
    let raw = tokio::task::spawn_blocking(move || {
        // Silent and unauthenticated: closed.
        let mut silent = RawConnection::connect(port, CLOSE_WAIT);
        assert!(silent.is_closed_by_server(), "a silent unauthenticated connection stayed open");

        // Unauthenticated but speaking every 100 ms: each message restarts the wait.
        let mut chatty = RawConnection::connect(port, CLOSE_WAIT);
        for _ in 0..35 {
            assert_eq!(ping(&mut chatty).get_f64("ok"), Ok(1.0));
            // Workload: pacing the pings so together they outlast the short limit.
            std::thread::sleep(Duration::from_millis(100));
        }

        // Authenticated: the idle limit (10 minutes) applies, not the short one.
        let mut authenticated = RawConnection::connect(port, CLOSE_WAIT);
        authenticated.login(&mut ScramLogin::new("root", "root-secret")).expect("login");
        // Workload, not a wait: a silence longer than the unauthenticated limit is the stimulus.
        std::thread::sleep(Duration::from_secs(4));
        let found = authenticated.command("shop", doc! { "find": "items" }).expect("find after a silence");
        assert_eq!(found.get_f64("ok"), Ok(1.0), "{found}");
    });
    // Meanwhile the driver's pooled, authenticated connection stays usable across the silences
    // of the raw sockets.
    for _ in 0..3 {
        // Workload: the driver's connection sits silent past the short limit between uses.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let count = root.database("shop").collection::<Document>("items").count_documents(doc! {}).await.expect("count");
        assert_eq!(count, 1);
    }
    raw.await.expect("raw connections behaved");
    let parameters = root.database("admin").run_command(doc! { "getParameter": 1, "unauthenticatedConnectionTimeoutMillis": 1 }).await.expect("getParameter");
    assert_eq!(parameters.get_i64("unauthenticatedConnectionTimeoutMillis"), Ok(1500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_close_but_connections_waiting_on_the_server_do_not() {
    let server = server(&["--setParameter", "idleConnectionTimeoutMillis=1000"]);
    // A driver's pooled connection is idle between operations too: as README advises, the pool
    // drops connections before the server's limit (the Rust driver does not notice a closed
    // pooled socket until it uses it).
    let client = mongodb::Client::with_uri_str(format!("{}&maxIdleTimeMS=500", server.uri())).await.expect("client");
    let database = client.database("waits");
    database.run_command(doc! { "create": "log", "capped": true, "size": 65536 }).await.expect("capped collection");
    database.collection::<Document>("log").insert_one(doc! { "n": 1 }).await.expect("insert");
    let port = server.port;
    tokio::task::spawn_blocking(move || {
        let mut silent = RawConnection::connect(port, CLOSE_WAIT);
        assert!(silent.is_closed_by_server(), "a silent connection outlived the idle limit");

        // An awaitData getMore waits 3 s on the server: the connection is not idle meanwhile.
        let mut tailing = RawConnection::connect(port, CLOSE_WAIT);
        let opened = tailing.command("waits", doc! { "find": "log", "tailable": true, "awaitData": true }).expect("find");
        let cursor = opened.get_document("cursor").and_then(|cursor| cursor.get_i64("id")).expect("cursor id");
        let waited = tailing.command("waits", doc! { "getMore": cursor, "collection": "log", "maxTimeMS": 3000 }).expect("getMore answered");
        assert_eq!(waited.get_f64("ok"), Ok(1.0), "{waited}");
        assert_eq!(ping(&mut tailing).get_f64("ok"), Ok(1.0));

        // An awaitable hello waits 3 s too.
        let mut monitor = RawConnection::connect(port, CLOSE_WAIT);
        let hello = monitor.command("admin", doc! { "hello": 1 }).expect("hello");
        let version = hello.get_document("topologyVersion").expect("topologyVersion").clone();
        let awaited = monitor.command("admin", doc! { "hello": 1, "topologyVersion": version.clone(), "maxAwaitTimeMS": 3000 }).expect("awaited");
        assert_eq!(awaited.get_f64("ok"), Ok(1.0));

        // A streamed hello (exhaustAllowed): a reply every 400 ms for 3 s, the client silent.
        let request_id = monitor.take_request_id();
        let streamed = doc! { "hello": 1, "topologyVersion": version, "maxAwaitTimeMS": 400, "$db": "admin" };
        monitor.send(&op_msg(request_id, 1 << 16, &streamed)).expect("send");
        for _ in 0..8 {
            let reply = monitor.read_reply().expect("a streamed reply");
            assert_eq!(reply.body.and_then(|body| body.get_f64("ok").ok()), Some(1.0));
        }
        assert_eq!(ping(&mut monitor).get_f64("ok"), Ok(1.0), "speaking again ends the stream");
    })
    .await
    .expect("raw connections behaved");
    // The limit is a runtime parameter too.
    client.database("admin").run_command(doc! { "setParameter": 1, "idleConnectionTimeoutMillis": 600_000 }).await.expect("setParameter");
    tokio::task::spawn_blocking(move || {
        let mut silent = RawConnection::connect(port, CLOSE_WAIT);
        // Workload, not a wait: a silence past the old limit is the stimulus.
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(ping(&mut silent).get_f64("ok"), Ok(1.0));
    })
    .await
    .expect("a silent connection under the new limit");
    let refused = client.database("admin").run_command(doc! { "setParameter": 1, "messageReadTimeoutMillis": 0 }).await;
    assert_eq!(refused.map_err(|error| myriad_testkit::error_code(&error)).map(|_| ()), Err(Some(2)));
}

#[test]
fn a_bad_startup_parameter_stops_the_server_with_a_message() {
    let directory = tempfile::tempdir().expect("temp dir");
    let dbpath = directory.path().to_str().expect("utf-8 path");
    let (code, stderr) = myriad_testkit::start_up_failure(&["--dbpath", dbpath, "--port", "0", "--setParameter", "idleConnectionTimeoutMillis=soon"]);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("idleConnectionTimeoutMillis"), "{stderr}");
}
