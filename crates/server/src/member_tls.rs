//! How this process connects to the other members of its cluster (a router to its config
//! server and shards, a shard to the config server and to other shards): configured once at
//! start-up from the same flags as its listener, as mongod does.
//!
//! - TLS: with `--tlsMode preferTLS` or `requireTLS`, outgoing connections use TLS too. The
//!   peer's certificate is verified against `--tlsCAFile` (not at all with
//!   `--tlsAllowInvalidCertificates`; without either, no member's certificate is trusted),
//!   and `--tlsCertificateKeyFile` is presented as the
//!   client certificate, since a member with a CA file asks its clients for one.
//! - Authentication: with `--keyFile`, every connection authenticates as the internal user.

use std::sync::Arc;

use myriad_cluster::member_security::{self, MemberSecurity};
use tokio_rustls::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{self, ClientConfig, DigitallySignedStruct, SignatureScheme};

use crate::tls::{read_ca_certificates, read_certificate_and_key, SignatureChecks, TlsMode, TlsOptions};

/// Sets how this process connects to other members (see the module's documentation).
pub fn configure_members(options: &TlsOptions, internal_key: Option<String>) -> Result<(), String> {
    let tls = client_config(options)?.map(Arc::new);
    member_security::set(MemberSecurity { internal_key, tls });
    Ok(())
}

/// The TLS configuration of outgoing connections; None when they are plain.
fn client_config(options: &TlsOptions) -> Result<Option<ClientConfig>, String> {
    if !matches!(options.mode, Some(TlsMode::PreferTls | TlsMode::RequireTls)) {
        return Ok(None);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("cannot configure TLS: {error}"))?;
    let builder = match (&options.ca_file, options.allow_invalid_certificates) {
        (_, true) => builder.dangerous().with_custom_certificate_verifier(Arc::new(AcceptAnyServerCertificate { signatures: SignatureChecks { provider } })),
        (Some(ca_file), false) => builder.with_root_certificates(read_ca_certificates(ca_file)?),
        // Nothing to verify the others against: connections to members fail their handshake
        // (a standalone node, which never connects to one, needs no CA file).
        (None, false) => builder.with_root_certificates(rustls::RootCertStore::empty()),
    };
    let config = match &options.certificate_key_file {
        Some(path) => {
            let (certificates, key) = read_certificate_and_key(path)?;
            builder.with_client_auth_cert(certificates, key).map_err(|error| format!("tlsCertificateKeyFile {path}: {error}"))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Some(config))
}

/// `--tlsAllowInvalidCertificates`: the other members' certificates are not validated (the
/// handshake's signatures still are, so the peer holds its key).
#[derive(Debug)]
struct AcceptAnyServerCertificate {
    signatures: SignatureChecks,
}

impl ServerCertVerifier for AcceptAnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(&self, message: &[u8], certificate: &CertificateDer<'_>, signature: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signatures.tls12(message, certificate, signature)
    }

    fn verify_tls13_signature(&self, message: &[u8], certificate: &CertificateDer<'_>, signature: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signatures.tls13(message, certificate, signature)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.signatures.schemes()
    }
}
