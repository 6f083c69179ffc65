//! SCRAM-SHA-1 and SCRAM-SHA-256 (RFC 5802, RFC 7677) as MongoDB speaks them: the stored
//! credentials (salt, iteration count, storedKey, serverKey) and the server side of one
//! conversation. Every primitive comes from RustCrypto (`pbkdf2`, `hmac`, `sha1`, `sha2`,
//! `md-5`); nothing here is hand-rolled cryptography.
//!
//! SCRAM-SHA-1 uses MongoDB's password digest (hex md5 of `user:mongo:password`) as its
//! password; SCRAM-SHA-256 uses the SASLprep'd password.

use std::sync::atomic::{AtomicU32, Ordering};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bson::{doc, Bson, Document};
use hmac::{KeyInit, Mac};
use rand::RngCore;
use sha1::Digest;

pub const SCRAM_SHA_1: &str = "SCRAM-SHA-1";
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

/// MongoDB's defaults (`scramIterationCount`, `scramSHA256IterationCount`).
pub const DEFAULT_SHA1_ITERATIONS: u32 = 10_000;
pub const DEFAULT_SHA256_ITERATIONS: u32 = 15_000;
/// The current `scramIterationCount` and `scramSHA256IterationCount` (setParameter).
pub static SHA1_ITERATIONS: AtomicU32 = AtomicU32::new(DEFAULT_SHA1_ITERATIONS);
pub static SHA256_ITERATIONS: AtomicU32 = AtomicU32::new(DEFAULT_SHA256_ITERATIONS);
/// MongoDB refuses iteration counts below this.
pub const MIN_ITERATIONS: i64 = 5000;

/// The iteration count new credentials of `mechanism` get.
pub fn iteration_count(mechanism: Mechanism) -> u32 {
    match mechanism {
        Mechanism::Sha1 => SHA1_ITERATIONS.load(Ordering::Relaxed),
        Mechanism::Sha256 => SHA256_ITERATIONS.load(Ordering::Relaxed),
    }
}

/// Iteration counts accepted from a stored credential: beyond this a login would burn CPU.
pub const MAX_ITERATIONS: i64 = 10_000_000;
/// A client message longer than this is refused (names and nonces are short).
const MAX_MESSAGE_BYTES: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    Sha1,
    Sha256,
}

impl Mechanism {
    pub fn from_name(name: &str) -> Option<Mechanism> {
        match name {
            SCRAM_SHA_1 => Some(Mechanism::Sha1),
            SCRAM_SHA_256 => Some(Mechanism::Sha256),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha1 => SCRAM_SHA_1,
            Mechanism::Sha256 => SCRAM_SHA_256,
        }
    }

    /// MongoDB's salt lengths: 16 bytes for SHA-1, 28 for SHA-256.
    fn salt_length(self) -> usize {
        match self {
            Mechanism::Sha1 => 16,
            Mechanism::Sha256 => 28,
        }
    }

    pub(crate) fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha1 => sha1::Sha1::digest(data).to_vec(),
            Mechanism::Sha256 => sha2::Sha256::digest(data).to_vec(),
        }
    }

    pub(crate) fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // Both HMACs accept keys of any length, so the error branch cannot be taken.
        match self {
            Mechanism::Sha1 => match hmac::Hmac::<sha1::Sha1>::new_from_slice(key) {
                Ok(mut mac) => {
                    mac.update(data);
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            },
            Mechanism::Sha256 => match hmac::Hmac::<sha2::Sha256>::new_from_slice(key) {
                Ok(mut mac) => {
                    mac.update(data);
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            },
        }
    }

    pub(crate) fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::Sha1 => {
                let mut output = [0u8; 20];
                pbkdf2::pbkdf2_hmac::<sha1::Sha1>(password, salt, iterations, &mut output);
                output.to_vec()
            }
            Mechanism::Sha256 => {
                let mut output = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password, salt, iterations, &mut output);
                output.to_vec()
            }
        }
    }
}

/// MongoDB's password digest for SCRAM-SHA-1: hex md5 of `user:mongo:password`.
pub fn mongodb_password_digest(user: &str, password: &str) -> String {
    let digest = md5::Md5::digest(format!("{user}:mongo:{password}").as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The password a mechanism derives its keys from; None when SASLprep refuses it.
pub fn mechanism_password(mechanism: Mechanism, user: &str, password: &str) -> Option<String> {
    match mechanism {
        Mechanism::Sha1 => Some(mongodb_password_digest(user, password)),
        Mechanism::Sha256 => stringprep::saslprep(password).ok().map(|prepared| prepared.into_owned()),
    }
}

/// One mechanism's stored credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub iteration_count: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl Credential {
    /// Derives a credential with a fresh random salt.
    pub fn derive(mechanism: Mechanism, password: &str, iterations: u32) -> Credential {
        let mut salt = vec![0u8; mechanism.salt_length()];
        rand::rngs::OsRng.fill_bytes(&mut salt);
        Credential::derive_with_salt(mechanism, password, salt, iterations)
    }

    pub fn derive_with_salt(mechanism: Mechanism, password: &str, salt: Vec<u8>, iterations: u32) -> Credential {
        let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        Credential {
            iteration_count: iterations,
            salt,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(&salted, b"Server Key"),
        }
    }

    /// The stored form: `{iterationCount, salt, storedKey, serverKey}` with base64 strings.
    pub fn to_document(&self) -> Document {
        doc! {
            "iterationCount": i32::try_from(self.iteration_count).unwrap_or(i32::MAX),
            "salt": BASE64.encode(&self.salt),
            "storedKey": BASE64.encode(&self.stored_key),
            "serverKey": BASE64.encode(&self.server_key),
        }
    }

    pub fn from_document(document: &Document) -> Option<Credential> {
        let iterations = match document.get("iterationCount")? {
            Bson::Int32(count) => i64::from(*count),
            Bson::Int64(count) => *count,
            _ => return None,
        };
        if !(1..=MAX_ITERATIONS).contains(&iterations) {
            return None;
        }
        let decode = |field: &str| document.get_str(field).ok().and_then(|text| BASE64.decode(text).ok());
        Some(Credential {
            iteration_count: u32::try_from(iterations).ok()?,
            salt: decode("salt")?,
            stored_key: decode("storedKey")?,
            server_key: decode("serverKey")?,
        })
    }
}

/// Why a conversation failed; every variant answers AuthenticationFailed to the client and
/// is named in the server's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScramError {
    Malformed(&'static str),
    UnknownUser,
    NonceMismatch,
    ChannelBindingMismatch,
    WrongProof,
}

impl std::fmt::Display for ScramError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScramError::Malformed(what) => write!(formatter, "BadValue: {what}"),
            ScramError::UnknownUser => write!(formatter, "UserNotFound: Could not find user"),
            ScramError::NonceMismatch => write!(formatter, "BadValue: Incorrect SCRAM client|server nonce"),
            ScramError::ChannelBindingMismatch => write!(formatter, "BadValue: Incorrect SCRAM channel binding"),
            ScramError::WrongProof => write!(formatter, "AuthenticationFailed: SCRAM authentication failed, storedKey mismatch"),
        }
    }
}

/// The parsed client-first message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientFirst {
    pub user: String,
    gs2_header: String,
    bare: String,
    client_nonce: String,
}

pub fn parse_client_first(payload: &[u8]) -> Result<ClientFirst, ScramError> {
    let text = message_text(payload)?;
    let (gs2_header, bare) = split_gs2_header(text)?;
    let mut attributes = bare.split(',');
    let user_attribute = attributes.next().ok_or(ScramError::Malformed("missing user name"))?;
    if user_attribute.starts_with("m=") {
        return Err(ScramError::Malformed("SCRAM mandatory extensions are not supported"));
    }
    let user = user_attribute.strip_prefix("n=").ok_or(ScramError::Malformed("Invalid SCRAM user name"))?;
    let user = decode_sasl_name(user)?;
    let nonce_attribute = attributes.next().ok_or(ScramError::Malformed("missing client nonce"))?;
    let client_nonce = nonce_attribute.strip_prefix("r=").ok_or(ScramError::Malformed("Invalid SCRAM client nonce"))?;
    if client_nonce.is_empty() || !client_nonce.bytes().all(|byte| byte.is_ascii_graphic() && byte != b',') {
        return Err(ScramError::Malformed("Invalid SCRAM client nonce"));
    }
    Ok(ClientFirst { user, gs2_header: gs2_header.to_string(), bare: bare.to_string(), client_nonce: client_nonce.to_string() })
}

fn message_text(payload: &[u8]) -> Result<&str, ScramError> {
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(ScramError::Malformed("SCRAM message too long"));
    }
    std::str::from_utf8(payload).map_err(|_| ScramError::Malformed("SCRAM message is not UTF-8"))
}

/// `n,,` or `y,,` (optionally with `a=authzid`); `p=` (channel binding) is not offered.
fn split_gs2_header(text: &str) -> Result<(&str, &str), ScramError> {
    let flag = text.get(..2).ok_or(ScramError::Malformed("Invalid SCRAM message"))?;
    if flag != "n," && flag != "y," {
        return Err(ScramError::Malformed("Server does not support channel binding"));
    }
    let rest = &text[2..];
    let authzid_end = rest.find(',').ok_or(ScramError::Malformed("Invalid SCRAM gs2 header"))?;
    let header_end = 2 + authzid_end + 1;
    Ok((&text[..header_end], &text[header_end..]))
}

fn decode_sasl_name(name: &str) -> Result<String, ScramError> {
    let mut decoded = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(position) = rest.find('=') {
        decoded.push_str(&rest[..position]);
        match rest.get(position..position + 3) {
            Some("=2C") => decoded.push(','),
            Some("=3D") => decoded.push('='),
            _ => return Err(ScramError::Malformed("Invalid SCRAM user name encoding")),
        }
        rest = &rest[position + 3..];
    }
    decoded.push_str(rest);
    if decoded.is_empty() {
        return Err(ScramError::Malformed("Invalid SCRAM user name"));
    }
    Ok(decoded)
}

/// The server's half of a conversation, after the client-first message.
#[derive(Clone, Debug)]
pub struct ServerConversation {
    pub mechanism: Mechanism,
    client_first: ClientFirst,
    server_first: String,
    combined_nonce: String,
    credential: Credential,
}

impl ServerConversation {
    /// Answers the client-first message with `r=<nonce>,s=<salt>,i=<iterations>`.
    pub fn start(mechanism: Mechanism, client_first: ClientFirst, credential: Credential) -> (ServerConversation, String) {
        let mut server_nonce = [0u8; 24];
        rand::rngs::OsRng.fill_bytes(&mut server_nonce);
        let combined_nonce = format!("{}{}", client_first.client_nonce, BASE64.encode(server_nonce));
        let server_first = format!("r={combined_nonce},s={},i={}", BASE64.encode(&credential.salt), credential.iteration_count);
        let conversation = ServerConversation { mechanism, client_first, server_first: server_first.clone(), combined_nonce, credential };
        (conversation, server_first)
    }

    pub fn user(&self) -> &str {
        &self.client_first.user
    }

    /// Checks the client-final message's proof; answers `v=<server signature>`.
    pub fn finish(&self, payload: &[u8]) -> Result<String, ScramError> {
        let text = message_text(payload)?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or(ScramError::Malformed("missing SCRAM proof"))?;
        let mut attributes = without_proof.split(',');
        let binding = attributes.next().and_then(|attribute| attribute.strip_prefix("c=")).ok_or(ScramError::Malformed("missing channel binding"))?;
        if BASE64.decode(binding).ok().as_deref() != Some(self.client_first.gs2_header.as_bytes()) {
            return Err(ScramError::ChannelBindingMismatch);
        }
        let nonce = attributes.next().and_then(|attribute| attribute.strip_prefix("r=")).ok_or(ScramError::Malformed("missing nonce"))?;
        if nonce != self.combined_nonce {
            return Err(ScramError::NonceMismatch);
        }
        let proof = BASE64.decode(proof).map_err(|_| ScramError::Malformed("Invalid SCRAM proof"))?;
        let auth_message = format!("{},{},{}", self.client_first.bare, self.server_first, without_proof);
        let client_signature = self.mechanism.hmac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(ScramError::WrongProof);
        }
        let client_key: Vec<u8> = proof.iter().zip(&client_signature).map(|(left, right)| left ^ right).collect();
        if !constant_time_equal(&self.mechanism.hash(&client_key), &self.credential.stored_key) {
            return Err(ScramError::WrongProof);
        }
        let server_signature = self.mechanism.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)))
    }
}

/// Compares without stopping at the first difference.
fn constant_time_equal(left: &[u8], right: &[u8]) -> bool {
    left.len() == right.len() && left.iter().zip(right).fold(0u8, |difference, (a, b)| difference | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example (user "user", password "pencil"), replayed with the
    /// RFC's salt, nonces and iteration count.
    #[test]
    fn rfc_7677_example_conversation_verifies() {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("salt");
        let credential = Credential::derive_with_salt(Mechanism::Sha256, "pencil", salt, 4096);
        let client_first = parse_client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").expect("client first");
        assert_eq!(client_first.user, "user");
        let (mut conversation, _) = ServerConversation::start(Mechanism::Sha256, client_first, credential);
        conversation.combined_nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".to_string();
        conversation.server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".to_string();
        let final_message = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(conversation.finish(final_message.as_bytes()), Ok("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_string()));
        let wrong = final_message.replace("p=dHzb", "p=dHzc");
        assert_eq!(conversation.finish(wrong.as_bytes()), Err(ScramError::WrongProof));
        let other_nonce = final_message.replace("k0,p=", "k1,p=");
        assert_eq!(conversation.finish(other_nonce.as_bytes()), Err(ScramError::NonceMismatch));
    }

    #[test]
    fn credentials_round_trip_through_their_stored_form() {
        let credential = Credential::derive(Mechanism::Sha1, &mongodb_password_digest("ann", "secret"), 10_000);
        assert_eq!(credential.salt.len(), 16);
        assert_eq!(Credential::from_document(&credential.to_document()), Some(credential));
        assert_eq!(Credential::from_document(&doc! { "iterationCount": 0, "salt": "", "storedKey": "", "serverKey": "" }), None);
    }

    #[test]
    fn mongodb_digest_is_md5_of_user_mongo_password() {
        // md5("user:mongo:pencil"), the SCRAM-SHA-1 password of the driver spec's example.
        assert_eq!(mongodb_password_digest("user", "pencil"), "1c33006ec1ffd90f9cadcbcc0e118200");
        assert_eq!(mechanism_password(Mechanism::Sha256, "user", "I\u{00AD}X").as_deref(), Some("IX"));
        assert_eq!(mechanism_password(Mechanism::Sha256, "user", "a\u{0007}"), None);
    }

    #[test]
    fn malformed_client_first_messages_are_refused() {
        for message in [&b""[..], b"p=tls-unique,,n=user,r=abc", b"n,,m=ext,n=user,r=abc", b"n,,n=,r=abc", b"n,,n=us=5r,r=abc", b"n,,n=user", b"n,,n=user,r=", b"\xff\xfe"] {
            assert!(parse_client_first(message).is_err(), "{message:?}");
        }
        assert_eq!(parse_client_first(b"n,,n=a=2Cb=3Dc,r=xyz").map(|first| first.user), Ok("a,b=c".to_string()));
    }
}
