//! The server side of a SCRAM conversation (`myriad_commands::auth::scram`) on arbitrary client
//! messages. The input is a selector byte, the client-first message, a 0x00 byte and the
//! client-final message. Selector bit 0 picks SCRAM-SHA-256 over SCRAM-SHA-1; with bit 1 set,
//! every `@` of the client-final message is replaced by the nonce the server answered, so the
//! fuzzer reaches the proof check, which it could not by guessing a random nonce.
//!
//! Checked: no input panics; a client-first message that parses has a user name; the server's
//! first message is `r=<nonce>,s=<salt>,i=<iterations>` with the credential's salt and count;
//! and no proof made without the password is ever accepted.

use std::sync::OnceLock;

use myriad_commands::auth::scram::{parse_client_first, Credential, Mechanism, ServerConversation};

const PASSWORD: &str = "fuzzing password, never sent";

/// One credential per mechanism, derived once (PBKDF2 is slow by design).
fn credential(mechanism: Mechanism) -> &'static Credential {
    static CREDENTIALS: OnceLock<[Credential; 2]> = OnceLock::new();
    let credentials = CREDENTIALS.get_or_init(|| {
        [Mechanism::Sha1, Mechanism::Sha256].map(|mechanism| Credential::derive_with_salt(mechanism, PASSWORD, vec![7; 16], 5000))
    });
    match mechanism {
        Mechanism::Sha1 => &credentials[0],
        Mechanism::Sha256 => &credentials[1],
    }
}

pub fn conversation(data: &[u8]) {
    let Some((&selector, messages)) = data.split_first() else { return };
    let mechanism = if selector & 1 == 0 { Mechanism::Sha1 } else { Mechanism::Sha256 };
    let (client_first, client_final) = match messages.iter().position(|&byte| byte == 0) {
        Some(end) => (&messages[..end], &messages[end + 1..]),
        None => (messages, &[][..]),
    };
    let Ok(parsed) = parse_client_first(client_first) else { return };
    assert!(!parsed.user.is_empty(), "a parsed client-first message has a user name");
    let credential = credential(mechanism);
    let (conversation, server_first) = ServerConversation::start(mechanism, parsed, credential.clone());
    let mut attributes = server_first.split(',');
    let nonce = attributes.next().and_then(|attribute| attribute.strip_prefix("r=")).expect("server-first starts with the nonce");
    assert!(attributes.next().is_some_and(|salt| salt.starts_with("s=")), "server-first: {server_first}");
    assert_eq!(attributes.next(), Some(format!("i={}", credential.iteration_count).as_str()), "server-first: {server_first}");
    let client_final: Vec<u8> = if selector & 2 != 0 {
        let mut replaced = Vec::with_capacity(client_final.len() + nonce.len());
        for &byte in client_final {
            if byte == b'@' {
                replaced.extend_from_slice(nonce.as_bytes());
            } else {
                replaced.push(byte);
            }
        }
        replaced
    } else {
        client_final.to_vec()
    };
    if let Ok(answer) = conversation.finish(&client_final) {
        panic!("a proof made without the password was accepted: {answer}");
    }
}
