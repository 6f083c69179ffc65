//! A wire-protocol client on a plain blocking socket, for tests that need exact control of the
//! bytes (half-sent messages, silence, mutated messages): OP_MSG framing, replies matched by
//! `responseTo`, and a SCRAM-SHA-256 login written from RFC 5802/7677 (so a raw connection can
//! be authenticated too).

#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bson::spec::BinarySubtype;
use bson::{doc, Binary, Document};
use hmac::{KeyInit, Mac};
use sha2::Digest;

pub const OP_MSG: i32 = 2013;
pub const OP_REPLY: i32 = 1;
pub const HEADER_BYTES: usize = 16;
/// A reply larger than this is a test failure, not something to allocate.
const MAX_REPLY_BYTES: usize = 48 * 1024 * 1024;

/// An OP_MSG with one body section.
pub fn op_msg(request_id: i32, flags: u32, body: &Document) -> Vec<u8> {
    let body_bytes = bson::to_vec(body).expect("serialise");
    let length = HEADER_BYTES + 4 + 1 + body_bytes.len();
    let mut message = Vec::with_capacity(length);
    message.extend_from_slice(&(length as i32).to_le_bytes());
    message.extend_from_slice(&request_id.to_le_bytes());
    message.extend_from_slice(&0i32.to_le_bytes());
    message.extend_from_slice(&OP_MSG.to_le_bytes());
    message.extend_from_slice(&flags.to_le_bytes());
    message.push(0);
    message.extend_from_slice(&body_bytes);
    message
}

/// One reply: the request it answers, its opcode, and the body of an OP_MSG or OP_REPLY.
pub struct RawReply {
    pub response_to: i32,
    pub opcode: i32,
    pub body: Option<Document>,
}

pub struct RawConnection {
    stream: TcpStream,
    next_request_id: i32,
}

impl RawConnection {
    /// Connects to 127.0.0.1:`port`; reads give up after `read_timeout`.
    pub fn connect(port: u16, read_timeout: Duration) -> RawConnection {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(read_timeout)).expect("read timeout");
        stream.set_nodelay(true).expect("nodelay");
        RawConnection { stream, next_request_id: 1 }
    }

    pub fn take_request_id(&mut self) -> i32 {
        let id = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(1).max(1);
        id
    }

    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads one whole reply.
    pub fn read_reply(&mut self) -> std::io::Result<RawReply> {
        let mut header = [0u8; HEADER_BYTES];
        self.stream.read_exact(&mut header)?;
        let length = i32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let response_to = i32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        let opcode = i32::from_le_bytes([header[12], header[13], header[14], header[15]]);
        let length = usize::try_from(length).ok().filter(|length| (HEADER_BYTES..=MAX_REPLY_BYTES).contains(length));
        let length = length.ok_or_else(|| std::io::Error::new(ErrorKind::InvalidData, "bad reply length"))?;
        let mut rest = vec![0u8; length - HEADER_BYTES];
        self.stream.read_exact(&mut rest)?;
        let body = match opcode {
            OP_MSG if rest.len() > 5 && rest[4] == 0 => bson::from_slice(&rest[5..]).ok(),
            OP_REPLY if rest.len() > 20 => bson::from_slice(&rest[20..]).ok(),
            _ => None,
        };
        Ok(RawReply { response_to, opcode, body })
    }

    /// Runs a command on `db` and returns its reply body, skipping any reply to an earlier
    /// request (a streamed hello's, say).
    pub fn command(&mut self, db: &str, mut body: Document) -> std::io::Result<Document> {
        body.insert("$db", db);
        let request_id = self.take_request_id();
        self.send(&op_msg(request_id, 0, &body))?;
        self.reply_to(request_id)
    }

    /// Reads replies until the one answering `request_id`.
    pub fn reply_to(&mut self, request_id: i32) -> std::io::Result<Document> {
        loop {
            let reply = self.read_reply()?;
            if reply.response_to == request_id {
                return reply.body.ok_or_else(|| std::io::Error::new(ErrorKind::InvalidData, "reply without a body"));
            }
        }
    }

    /// True when the server closed the connection (a read sees end of stream or a reset) within
    /// the read timeout; false when the read timed out with the connection still open.
    pub fn is_closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(error) => !matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    }

    pub fn set_read_timeout(&mut self, timeout: Duration) {
        self.stream.set_read_timeout(Some(timeout)).expect("read timeout");
    }

    /// SCRAM-SHA-256 login of `login`'s user against `admin`.
    pub fn login(&mut self, login: &mut ScramLogin) -> Result<(), String> {
        let nonce = BASE64.encode(format!("{:?}{}", std::time::SystemTime::now(), self.next_request_id));
        let client_first_bare = format!("n={},r={nonce}", login.user);
        let start = doc! {
            "saslStart": 1,
            "mechanism": "SCRAM-SHA-256",
            "payload": binary(format!("n,,{client_first_bare}").into_bytes()),
            "options": { "skipEmptyExchange": true },
        };
        let reply = self.command("admin", start).map_err(|error| error.to_string())?;
        let server_first = payload_text(&reply)?;
        let attribute = |name: &str| server_first.split(',').find_map(|part| part.strip_prefix(name)).map(str::to_string);
        let combined_nonce = attribute("r=").ok_or("no nonce")?;
        let salt = BASE64.decode(attribute("s=").ok_or("no salt")?).map_err(|error| error.to_string())?;
        let iterations: u32 = attribute("i=").ok_or("no iteration count")?.parse().map_err(|_| "bad iteration count")?;
        let salted = login.salted_password(&salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        let stored_key = sha2::Sha256::digest(&client_key).to_vec();
        let without_proof = format!("c=biws,r={combined_nonce}");
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = hmac_sha256(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(key, signature)| key ^ signature).collect();
        let final_message = format!("{without_proof},p={}", BASE64.encode(proof));
        let conversation_id = reply.get_i32("conversationId").map_err(|error| error.to_string())?;
        let next = doc! { "saslContinue": 1, "conversationId": conversation_id, "payload": binary(final_message.into_bytes()) };
        let reply = self.command("admin", next).map_err(|error| error.to_string())?;
        if reply.get_f64("ok") != Ok(1.0) || reply.get_bool("done") != Ok(true) {
            return Err(format!("login refused: {reply}"));
        }
        Ok(())
    }
}

/// A user's SCRAM-SHA-256 password, with its salted form kept once computed (the key
/// derivation is the slow part of a login).
pub struct ScramLogin {
    pub user: String,
    password: String,
    salted: Option<(Vec<u8>, u32, Vec<u8>)>,
}

impl ScramLogin {
    pub fn new(user: &str, password: &str) -> ScramLogin {
        ScramLogin { user: user.to_string(), password: password.to_string(), salted: None }
    }

    fn salted_password(&mut self, salt: &[u8], iterations: u32) -> Vec<u8> {
        if let Some((known_salt, known_iterations, salted)) = &self.salted {
            if known_salt == salt && *known_iterations == iterations {
                return salted.clone();
            }
        }
        let mut salted = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<sha2::Sha256>(self.password.as_bytes(), salt, iterations, &mut salted);
        self.salted = Some((salt.to_vec(), iterations, salted.to_vec()));
        salted.to_vec()
    }
}

fn binary(bytes: Vec<u8>) -> Binary {
    Binary { subtype: BinarySubtype::Generic, bytes }
}

fn payload_text(reply: &Document) -> Result<String, String> {
    let payload = reply.get_binary_generic("payload").map_err(|_| format!("no payload in {reply}"))?;
    String::from_utf8(payload.clone()).map_err(|error| error.to_string())
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}
