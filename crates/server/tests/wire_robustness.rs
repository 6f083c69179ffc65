//! Malformed, truncated and oversized messages get an error reply or close only their own
//! connection; the server keeps serving everyone else.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::TestServer;
use mongodb::bson::{doc, Document};

fn op_msg(request_id: i32, flags: u32, body: &Document, checksum: Option<u32>) -> Vec<u8> {
    let body_bytes = mongodb::bson::to_vec(body).expect("serialise");
    let mut message = Vec::new();
    let length = 16 + 4 + 1 + body_bytes.len() + if checksum.is_some() { 4 } else { 0 };
    message.extend_from_slice(&(length as i32).to_le_bytes());
    message.extend_from_slice(&request_id.to_le_bytes());
    message.extend_from_slice(&0i32.to_le_bytes());
    message.extend_from_slice(&2013i32.to_le_bytes());
    message.extend_from_slice(&flags.to_le_bytes());
    message.push(0);
    message.extend_from_slice(&body_bytes);
    if let Some(checksum) = checksum {
        message.extend_from_slice(&checksum.to_le_bytes());
    }
    message
}

fn connect(server: &TestServer) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    stream
}

/// Reads one reply and returns its body document.
fn read_reply(stream: &mut TcpStream) -> Option<Document> {
    let mut header = [0u8; 16];
    stream.read_exact(&mut header).ok()?;
    let length = i32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    let mut rest = vec![0u8; length - 16];
    stream.read_exact(&mut rest).ok()?;
    // flags (4) + section kind (1) + document
    mongodb::bson::from_slice(&rest[5..]).ok()
}

fn connection_is_closed(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 1];
    matches!(stream.read(&mut buffer), Ok(0) | Err(_))
}

async fn assert_server_healthy(server: &TestServer) {
    let client = server.client().await;
    client.database("admin").run_command(doc! { "ping": 1 }).await.expect("server still answers");
}

#[tokio::test]
async fn bad_messages_never_take_the_server_down() {
    let server = TestServer::start();

    // A well-formed ping gets ok: 1 on a raw connection.
    let mut stream = connect(&server);
    stream.write_all(&op_msg(1, 0, &doc! { "ping": 1, "$db": "admin" }, None)).expect("write");
    assert_eq!(read_reply(&mut stream).expect("reply").get_f64("ok").expect("ok"), 1.0);

    // A garbage body inside a valid frame: an error reply, and the connection stays usable.
    let mut garbage = op_msg(2, 0, &doc! { "ping": 1, "$db": "admin" }, None);
    let length = garbage.len();
    garbage[21..length].fill(0xAB);
    stream.write_all(&garbage).expect("write");
    let reply = read_reply(&mut stream).expect("an error reply");
    assert_eq!(reply.get_f64("ok").expect("ok"), 0.0);
    assert!(reply.get_i32("code").is_ok() && reply.get_str("codeName").is_ok() && reply.get_str("errmsg").is_ok());
    stream.write_all(&op_msg(3, 0, &doc! { "ping": 1, "$db": "admin" }, None)).expect("write");
    assert_eq!(read_reply(&mut stream).expect("reply").get_f64("ok").expect("ok"), 1.0);

    // A wrong CRC-32C with the checksum flag: an error reply.
    stream.write_all(&op_msg(4, 1, &doc! { "ping": 1, "$db": "admin" }, Some(0xDEAD_BEEF))).expect("write");
    let reply = read_reply(&mut stream).expect("an error reply");
    assert_eq!(reply.get_f64("ok").expect("ok"), 0.0);

    // A missing $db: an error reply.
    stream.write_all(&op_msg(5, 0, &doc! { "ping": 1 }, None)).expect("write");
    assert_eq!(read_reply(&mut stream).expect("reply").get_f64("ok").expect("ok"), 0.0);

    // A header claiming fewer than 16 bytes: that connection closes.
    let mut short = connect(&server);
    short.write_all(&[5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xDD, 0x07, 0, 0]).expect("write");
    assert!(connection_is_closed(&mut short));

    // A header claiming 1 GiB: closed without allocating it.
    let mut huge = connect(&server);
    huge.write_all(&[0, 0, 0, 0x40, 1, 0, 0, 0, 0, 0, 0, 0, 0xDD, 0x07, 0, 0]).expect("write");
    assert!(connection_is_closed(&mut huge));

    // An unknown opcode: closed or answered, never a crash.
    let mut unknown = connect(&server);
    unknown.write_all(&[16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x39, 0x05, 0, 0]).expect("write");
    let _ = read_reply(&mut unknown);

    // Truncated: half a message, then the client goes away.
    let mut truncated = connect(&server);
    let whole = op_msg(6, 0, &doc! { "ping": 1, "$db": "admin" }, None);
    truncated.write_all(&whole[..whole.len() / 2]).expect("write");
    drop(truncated);

    // Random bytes.
    let mut random = connect(&server);
    let noise: Vec<u8> = (0..4096u32).map(|index| (index.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let _ = random.write_all(&noise);
    drop(random);

    assert_server_healthy(&server).await;
    // The first raw connection is still being served.
    stream.write_all(&op_msg(7, 0, &doc! { "ping": 1, "$db": "admin" }, None)).expect("write");
    assert_eq!(read_reply(&mut stream).expect("reply").get_f64("ok").expect("ok"), 1.0);
}

#[tokio::test]
async fn more_to_come_writes_get_no_reply_but_are_applied() {
    let server = TestServer::start();
    let mut stream = connect(&server);
    // flags bit 1: moreToCome (a w:0 write).
    let insert = doc! { "insert": "fire", "documents": [{ "_id": 1 }], "writeConcern": { "w": 0 }, "$db": "w0" };
    stream.write_all(&op_msg(1, 2, &insert, None)).expect("write");
    stream.write_all(&op_msg(2, 0, &doc! { "count": "fire", "$db": "w0" }, None)).expect("write");
    let reply = read_reply(&mut stream).expect("the count's reply comes first: the insert had none");
    assert_eq!(reply.get_i64("n").or_else(|_| reply.get_i32("n").map(i64::from)).expect("n"), 1);
}
