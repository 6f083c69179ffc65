//! The client's half of a SCRAM conversation (RFC 5802, RFC 7677), with the same hashing code
//! as the server's half ([`super::scram`]): cluster members authenticate to each other with it
//! (the keyfile's internal user, `__system@local`).
//!
//! Invariants: the server's nonce must extend the client's; an iteration count below
//! [`super::scram::MIN_ITERATIONS`] or above [`super::scram::MAX_ITERATIONS`] is refused
//! before any hashing; the conversation succeeds only when the server's signature checks, so
//! a peer that does not know the password cannot pass as the server either.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use rand::RngCore;

use super::scram::{mechanism_password, Mechanism, MAX_ITERATIONS, MIN_ITERATIONS};

/// A conversation after the client-first message.
pub struct ClientConversation {
    mechanism: Mechanism,
    password: String,
    client_first_bare: String,
    client_nonce: String,
    /// Set by [`ClientConversation::client_final`]: the signature the server must answer.
    expected_server_signature: Option<Vec<u8>>,
}

impl ClientConversation {
    /// Starts a conversation; returns it and the client-first message to send with saslStart.
    /// None when SASLprep refuses the password.
    pub fn start(mechanism: Mechanism, user: &str, password: &str) -> Option<(ClientConversation, String)> {
        let password = mechanism_password(mechanism, user, password)?;
        let mut nonce = [0u8; 24];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let client_nonce = BASE64.encode(nonce);
        let escaped = user.replace('=', "=3D").replace(',', "=2C");
        let client_first_bare = format!("n={escaped},r={client_nonce}");
        let first = format!("n,,{client_first_bare}");
        Some((ClientConversation { mechanism, password, client_first_bare, client_nonce, expected_server_signature: None }, first))
    }

    /// Answers the server-first message (`r=...,s=...,i=...`) with the client-final message.
    pub fn client_final(&mut self, server_first: &str) -> Result<String, String> {
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for attribute in server_first.split(',') {
            match attribute.split_once('=') {
                Some(("r", value)) => nonce = Some(value),
                Some(("s", value)) => salt = Some(BASE64.decode(value).map_err(|_| "the server's salt is not base64".to_string())?),
                Some(("i", value)) => iterations = value.parse::<i64>().ok(),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!("a malformed server-first message: {server_first}"));
        };
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err("the server's nonce does not extend the client's".to_string());
        }
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!("the server asks for {iterations} iterations"));
        }
        let iterations = u32::try_from(iterations).map_err(|_| format!("the server asks for {iterations} iterations"))?;
        let mechanism = self.mechanism;
        let salted = mechanism.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        let stored_key = mechanism.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = mechanism.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&client_signature).map(|(key, signature)| key ^ signature).collect();
        let server_key = mechanism.hmac(&salted, b"Server Key");
        self.expected_server_signature = Some(mechanism.hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)))
    }

    /// Checks the server-final message (`v=<signature>`).
    pub fn verify_server_final(&self, server_final: &str) -> Result<(), String> {
        let signature = server_final.strip_prefix("v=").and_then(|value| BASE64.decode(value).ok());
        match (&self.expected_server_signature, signature) {
            (Some(expected), Some(signature)) if *expected == signature => Ok(()),
            (None, _) => Err("the server-final message came before the client-final one".to_string()),
            _ => Err(format!("the server's signature does not verify: {server_final}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scram::{parse_client_first, Credential, ServerConversation};

    fn converse(mechanism: Mechanism, client_password: &str, server_password: &str) -> Result<(), String> {
        let server_secret = mechanism_password(mechanism, "__system", server_password).expect("prepared");
        let credential = Credential::derive(mechanism, &server_secret, 5000);
        let (mut client, first) = ClientConversation::start(mechanism, "__system", client_password).expect("starts");
        let client_first = parse_client_first(first.as_bytes()).map_err(|error| error.to_string())?;
        let (server, server_first) = ServerConversation::start(mechanism, client_first, credential);
        let client_final = client.client_final(&server_first)?;
        let server_final = server.finish(client_final.as_bytes()).map_err(|error| error.to_string())?;
        client.verify_server_final(&server_final)
    }

    #[test]
    fn the_client_and_the_server_halves_agree_and_a_wrong_password_fails() {
        for mechanism in [Mechanism::Sha1, Mechanism::Sha256] {
            assert_eq!(converse(mechanism, "a keyfile's secret", "a keyfile's secret"), Ok(()), "{mechanism:?}");
            assert!(converse(mechanism, "a guess", "a keyfile's secret").is_err(), "{mechanism:?}");
        }
    }

    #[test]
    fn a_forged_server_is_refused() {
        let (mut client, _) = ClientConversation::start(Mechanism::Sha256, "u", "p").expect("starts");
        assert!(client.client_final("r=someone-else,s=c2FsdA==,i=5000").is_err(), "a nonce that does not extend the client's");
        let nonce = client.client_nonce.clone();
        assert!(client.client_final(&format!("r={nonce}x,s=c2FsdA==,i=10")).is_err(), "too few iterations");
        client.client_final(&format!("r={nonce}x,s=c2FsdA==,i=5000")).expect("a well-formed server-first");
        assert!(client.verify_server_final("v=AAAA").is_err());
    }
}
