//! Malformed, truncated and oversized messages get an error reply or close only their own
//! connection; the server keeps serving everyone else.


use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use myriad_testkit::TestServer;
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

/// An OP_MSG with a body and one document sequence of `documents` (raw BSON each).
fn op_msg_with_sequence(request_id: i32, body: &Document, identifier: &str, documents: &[Vec<u8>]) -> Vec<u8> {
    let mut message = op_msg(request_id, 0, body, None);
    let mut section = Vec::new();
    section.extend_from_slice(identifier.as_bytes());
    section.push(0);
    documents.iter().for_each(|document| section.extend_from_slice(document));
    message.push(1);
    message.extend_from_slice(&((section.len() + 4) as i32).to_le_bytes());
    message.extend_from_slice(&section);
    let length = message.len() as i32;
    message[0..4].copy_from_slice(&length.to_le_bytes());
    message
}

/// `document`'s bytes with its embedded document `name` made an array, whose keys are then
/// whatever the embedded document's names were.
fn as_array(document: &Document, name: &str) -> Vec<u8> {
    let mut bytes = mongodb::bson::to_vec(document).expect("serialise");
    let mut element = vec![0x03];
    element.extend_from_slice(name.as_bytes());
    element.push(0);
    let position = bytes.windows(element.len()).position(|window| window == element.as_slice()).expect("embedded document");
    bytes[position] = 0x04;
    bytes
}

/// An insert's document sequence is stored as the bytes it came as, so the server must store
/// what MongoDB stores for any bytes a client sends: arrays keyed by position, `_id` first (one
/// made when missing), regular expression options in order, and a repeated `_id` refused.
#[tokio::test]
async fn insert_sequences_are_stored_as_decoding_would_store_them() {
    let server = TestServer::start();
    let mut stream = connect(&server);
    let regex = mongodb::bson::Regex { pattern: "^x".to_string(), options: "mi".to_string() };
    let mut unsorted_options = mongodb::bson::to_vec(&doc! { "_id": 4, "r": regex }).expect("serialise");
    // The encoder sorts options; put them back as a client could send them.
    let position = unsorted_options.windows(3).position(|window| window == b"im\0").expect("options");
    unsorted_options[position..position + 2].copy_from_slice(b"mi");
    let mut repeated_id = mongodb::bson::to_vec(&doc! { "_id": 5, "x_d": 6 }).expect("serialise");
    let position = repeated_id.windows(4).position(|window| window == b"x_d\0").expect("second name");
    repeated_id[position..position + 3].copy_from_slice(b"_id");
    let documents = vec![
        // {_id: 1, a: [10, 20]} with array keys "5" and "7".
        as_array(&doc! { "_id": 1, "a": { "5": 10, "7": 20 } }, "a"),
        mongodb::bson::to_vec(&doc! { "x": 1, "_id": 2 }).expect("serialise"),
        mongodb::bson::to_vec(&doc! { "x": 3 }).expect("serialise"),
        unsorted_options,
        repeated_id,
    ];
    let insert = doc! { "insert": "sequences", "ordered": false, "$db": "wire" };
    stream.write_all(&op_msg_with_sequence(1, &insert, "documents", &documents)).expect("write");
    let reply = read_reply(&mut stream).expect("reply");
    assert_eq!(reply.get_i32("n"), Ok(4), "{reply}");
    let errors = reply.get_array("writeErrors").expect("one write error");
    assert_eq!(errors.len(), 1, "{reply}");
    assert_eq!(errors[0].as_document().and_then(|error| error.get_i32("index").ok()), Some(4), "{reply}");

    let client = server.client().await;
    let collection = client.database("wire").collection::<mongodb::bson::RawDocumentBuf>("sequences");
    let array = collection.find_one(doc! { "a.0": 10, "a.1": 20 }).await.expect("find").expect("found by position");
    let keys: Vec<&str> = array.iter().map(|element| element.expect("element").0).collect();
    assert_eq!(keys, ["_id", "a"], "_id comes first");
    let items = array.get_array("a").expect("array");
    let stored = mongodb::bson::to_vec(&doc! { "_id": 1, "a": [10, 20] }).expect("serialise");
    assert_eq!(array.as_bytes(), stored.as_slice(), "stored with canonical array keys: {items:?}");
    let moved = collection.find_one(doc! { "_id": 2 }).await.expect("find").expect("found");
    assert_eq!(moved.iter().next().expect("first").expect("element").0, "_id");
    let generated = collection.find_one(doc! { "x": 3 }).await.expect("find").expect("found");
    assert!(matches!(generated.iter().next(), Some(Ok(("_id", mongodb::bson::RawBsonRef::ObjectId(_))))));
    let with_regex = collection.find_one(doc! { "_id": 4 }).await.expect("find").expect("found");
    assert_eq!(with_regex.get_regex("r").expect("regex").options, "im");
    let validate = client.database("wire").run_command(doc! { "validate": "sequences", "full": true }).await.expect("validate");
    assert_eq!(validate.get_bool("valid"), Ok(true), "{validate}");
}
