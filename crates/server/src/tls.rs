//! TLS (rustls, with the ring provider): the server's configuration from `--tlsMode`,
//! `--tlsCertificateKeyFile`, `--tlsCAFile`, `--tlsAllowInvalidCertificates` and
//! `--tlsAllowConnectionsWithoutCertificates`, and the accepted connection, plain or TLS.
//!
//! With allowTLS and preferTLS one port serves both kinds: the first bytes of a connection say
//! which (a TLS record of type handshake carrying a ClientHello, or a wire message header), and
//! the bytes read to decide are replayed to whichever reader follows. Client certificates are
//! requested when a CA file is given: required unless connections without certificates are
//! allowed, verified against the CA unless invalid certificates are allowed. The subject of a
//! certificate the CA vouches for is handed to the connection's session ([`TlsListener::peer`]);
//! the MONGODB-X509 mechanism authenticates as it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use myriad_commands::session::TlsPeer;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a client may take to send its first bytes and finish the TLS handshake (in the
/// modes that read them before serving); a connection that takes longer is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);

/// Bytes read to tell a TLS ClientHello from a wire message header. Both kinds of client send
/// at least this much before waiting for an answer (a header is 16 bytes).
const PROBE_BYTES: usize = 6;

/// `--tlsMode`, as mongod names its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsMode {
    #[value(name = "disabled")]
    Disabled,
    #[value(name = "allowTLS")]
    AllowTls,
    #[value(name = "preferTLS")]
    PreferTls,
    #[value(name = "requireTLS")]
    RequireTls,
}

impl TlsMode {
    /// The mode as mongod spells it.
    pub fn name(self) -> &'static str {
        match self {
            TlsMode::Disabled => "disabled",
            TlsMode::AllowTls => "allowTLS",
            TlsMode::PreferTls => "preferTLS",
            TlsMode::RequireTls => "requireTLS",
        }
    }

    /// Parses a mode as mongod spells it (the config file's `net.tls.mode`).
    pub fn parse(text: &str) -> Option<TlsMode> {
        match text {
            "disabled" => Some(TlsMode::Disabled),
            "allowTLS" => Some(TlsMode::AllowTls),
            "preferTLS" => Some(TlsMode::PreferTls),
            "requireTLS" => Some(TlsMode::RequireTls),
            _ => None,
        }
    }
}

/// What the TLS options name, before any file is read.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    pub mode: Option<TlsMode>,
    pub certificate_key_file: Option<String>,
    pub ca_file: Option<String>,
    pub allow_invalid_certificates: bool,
    pub allow_connections_without_certificates: bool,
}

/// The listener's TLS state: the mode and, unless disabled, the acceptor.
#[derive(Clone)]
pub struct TlsListener {
    pub mode: TlsMode,
    acceptor: Option<TlsAcceptor>,
    trust: CertificateTrust,
}

/// Whether a client certificate that passed the handshake names a trustworthy subject (one
/// MONGODB-X509 may authenticate as).
#[derive(Clone)]
enum CertificateTrust {
    /// The handshake verified it against --tlsCAFile.
    Verified,
    /// --tlsAllowInvalidCertificates with --tlsCAFile: the handshake took any certificate, so it
    /// is verified against the CA afterwards; an invalid one names no subject (as in mongod).
    CheckAfterHandshake(Arc<dyn ClientCertVerifier>),
    /// Nothing to verify against: no subject is trusted.
    None,
}

impl TlsListener {
    /// Reads the certificate, key and CA files the options name. Errors say which option is
    /// wrong, for the start-up failure message.
    pub fn from_options(options: &TlsOptions) -> Result<TlsListener, String> {
        let mode = options.mode.unwrap_or(TlsMode::Disabled);
        if mode == TlsMode::Disabled {
            return Ok(TlsListener { mode, acceptor: None, trust: CertificateTrust::None });
        }
        let Some(certificate_key_file) = &options.certificate_key_file else {
            return Err("need tlsCertificateKeyFile or certificateSelector when TLS is enabled".to_string());
        };
        let (certificates, key) = read_certificate_and_key(certificate_key_file)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("cannot configure TLS: {error}"))?;
        let verifier = client_verifier(options, &provider)?;
        let trust = match (&options.ca_file, options.allow_invalid_certificates) {
            (None, _) => CertificateTrust::None,
            (Some(_), false) => CertificateTrust::Verified,
            (Some(ca_file), true) => {
                let roots = Arc::new(read_ca_certificates(ca_file)?);
                let strict = WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(&provider))
                    .build()
                    .map_err(|error| format!("tlsCAFile {ca_file}: {error}"))?;
                CertificateTrust::CheckAfterHandshake(strict)
            }
        };
        let builder = match verifier {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(certificates, key)
            .map_err(|error| format!("tlsCertificateKeyFile {certificate_key_file}: {error}"))?;
        Ok(TlsListener { mode, acceptor: Some(TlsAcceptor::from(Arc::new(config))), trust })
    }

    /// What the handshake learnt of a TLS client (None for a plain connection): the subject of
    /// its certificate when it presented one the CA vouches for.
    pub fn peer(&self, stream: &ClientStream) -> Option<TlsPeer> {
        let ClientStream::Tls(tls) = stream else { return None };
        let chain = tls.get_ref().1.peer_certificates().unwrap_or_default();
        let certificate_subject = chain.split_first().and_then(|(end_entity, intermediates)| {
            let trusted = match &self.trust {
                CertificateTrust::Verified => true,
                CertificateTrust::CheckAfterHandshake(verifier) => verifier.verify_client_cert(end_entity, intermediates, UnixTime::now()).is_ok(),
                CertificateTrust::None => false,
            };
            if trusted {
                crate::peer_certificate::subject_of(end_entity)
            } else {
                None
            }
        });
        Some(TlsPeer { certificate_subject })
    }

    /// The `ssl` attribute of the "Waiting for connections" log line.
    pub fn log_state(&self) -> &'static str {
        match self.mode {
            TlsMode::Disabled => "off",
            _ => "on",
        }
    }

    /// Turns an accepted TCP stream into the connection the server reads, doing the TLS
    /// handshake when the client starts one. Errors say why the connection is refused.
    pub async fn accept(&self, mut stream: TcpStream) -> Result<ClientStream, String> {
        let Some(acceptor) = &self.acceptor else {
            return Ok(ClientStream::Plain(PrefixedStream::new(Vec::new(), stream)));
        };
        let accepted = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
            let mut probe = [0u8; PROBE_BYTES];
            stream.read_exact(&mut probe).await.map_err(|error| format!("no first message: {error}"))?;
            let prefixed = PrefixedStream::new(probe.to_vec(), stream);
            if !is_tls_client_hello(&probe) {
                if self.mode == TlsMode::RequireTls {
                    return Err("plain connection refused: the server requires TLS (tlsMode requireTLS)".to_string());
                }
                return Ok(ClientStream::Plain(prefixed));
            }
            let tls = acceptor.accept(prefixed).await.map_err(|error| format!("TLS handshake failed: {error}"))?;
            Ok(ClientStream::Tls(Box::new(tls)))
        })
        .await;
        accepted.unwrap_or_else(|_| Err(format!("no TLS handshake or first message within {} seconds", HANDSHAKE_TIMEOUT.as_secs())))
    }
}

/// True when `probe` begins a TLS handshake record holding a ClientHello: content type 22,
/// protocol major version 3, and handshake type 1 after the 5-byte record header. A wire
/// message header would need a length whose low bytes read 0x16 0x03 and a request id whose
/// low byte is 1 to look the same; TLS ClientHellos always do.
pub fn is_tls_client_hello(probe: &[u8]) -> bool {
    matches!(probe, [0x16, 0x03, minor, _, _, 0x01, ..] if *minor <= 0x04)
}

pub(crate) fn read_certificate_and_key(path: &str) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    use rustls::pki_types::pem::{PemObject, SectionKind};
    let sections = <(SectionKind, Vec<u8>)>::pem_file_iter(path).map_err(|error| format!("cannot read tlsCertificateKeyFile {path}: {error}"))?;
    let mut certificates = Vec::new();
    let mut key = None;
    for section in sections {
        let (kind, der) = section.map_err(|error| format!("tlsCertificateKeyFile {path}: {error}"))?;
        match kind {
            SectionKind::Certificate => certificates.push(CertificateDer::from(der)),
            SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey if key.is_none() => {
                key = PrivateKeyDer::from_pem(kind, der);
            }
            _ => {}
        }
    }
    if certificates.is_empty() {
        return Err(format!("tlsCertificateKeyFile {path} holds no certificate"));
    }
    let key = key.ok_or_else(|| format!("tlsCertificateKeyFile {path} holds no private key"))?;
    Ok((certificates, key))
}

pub(crate) fn read_ca_certificates(path: &str) -> Result<RootCertStore, String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = RootCertStore::empty();
    let certificates = CertificateDer::pem_file_iter(path).map_err(|error| format!("cannot read tlsCAFile {path}: {error}"))?;
    for certificate in certificates {
        let certificate = certificate.map_err(|error| format!("tlsCAFile {path}: {error}"))?;
        roots.add(certificate).map_err(|error| format!("tlsCAFile {path}: {error}"))?;
    }
    if roots.is_empty() {
        return Err(format!("tlsCAFile {path} holds no certificate"));
    }
    Ok(roots)
}

/// Client certificates: none asked for without a CA file; with one, verified against it
/// (required unless connections without certificates are allowed); with invalid certificates
/// allowed, asked for and accepted whatever their chain (the handshake signature is still
/// checked, so the client holds the key).
fn client_verifier(options: &TlsOptions, provider: &Arc<CryptoProvider>) -> Result<Option<Arc<dyn ClientCertVerifier>>, String> {
    if options.allow_invalid_certificates {
        return Ok(Some(Arc::new(AcceptAnyClientCertificate { signatures: SignatureChecks { provider: Arc::clone(provider) } })));
    }
    let Some(ca_file) = &options.ca_file else { return Ok(None) };
    let roots = Arc::new(read_ca_certificates(ca_file)?);
    let mut builder = WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(provider));
    if options.allow_connections_without_certificates {
        builder = builder.allow_unauthenticated();
    }
    let verifier = builder.build().map_err(|error| format!("tlsCAFile {ca_file}: {error}"))?;
    Ok(Some(verifier))
}

/// `--tlsAllowInvalidCertificates`: client certificates are optional and not validated.
#[derive(Debug)]
struct AcceptAnyClientCertificate {
    signatures: SignatureChecks,
}

impl ClientCertVerifier for AcceptAnyClientCertificate {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn verify_client_cert(&self, _end_entity: &CertificateDer<'_>, _intermediates: &[CertificateDer<'_>], _now: UnixTime) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
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

/// The handshake signature checks a verifier that takes any certificate still makes (so the
/// peer holds its certificate's key): those of the crypto provider.
#[derive(Debug)]
pub(crate) struct SignatureChecks {
    pub(crate) provider: Arc<CryptoProvider>,
}

impl SignatureChecks {
    pub(crate) fn tls12(&self, message: &[u8], certificate: &CertificateDer<'_>, signature: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, certificate, signature, &self.provider.signature_verification_algorithms)
    }

    pub(crate) fn tls13(&self, message: &[u8], certificate: &CertificateDer<'_>, signature: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, certificate, signature, &self.provider.signature_verification_algorithms)
    }

    pub(crate) fn schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A TCP stream whose first bytes were already read: they are read again first.
pub struct PrefixedStream {
    prefix: Vec<u8>,
    consumed: usize,
    stream: TcpStream,
}

impl PrefixedStream {
    fn new(prefix: Vec<u8>, stream: TcpStream) -> PrefixedStream {
        PrefixedStream { prefix, consumed: 0, stream }
    }

    fn pending_prefix(&self) -> &[u8] {
        self.prefix.get(self.consumed..).unwrap_or_default()
    }
}

impl AsyncRead for PrefixedStream {
    fn poll_read(mut self: Pin<&mut Self>, context: &mut Context<'_>, buffer: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let pending = self.pending_prefix();
        if !pending.is_empty() {
            let count = pending.len().min(buffer.remaining());
            buffer.put_slice(&pending[..count]);
            self.consumed += count;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(context, buffer)
    }
}

impl AsyncWrite for PrefixedStream {
    fn poll_write(mut self: Pin<&mut Self>, context: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(context, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(context)
    }
}

/// An accepted connection: plain or TLS.
pub enum ClientStream {
    Plain(PrefixedStream),
    Tls(Box<TlsStream<PrefixedStream>>),
}

impl ClientStream {
    /// Waits until the client sent something or closed: Ok(0) when it closed (as
    /// `TcpStream::peek`). Over TLS this watches the socket: the bytes may be a record that
    /// ends the session, which the next read then reports.
    pub async fn peek(&mut self, probe: &mut [u8]) -> std::io::Result<usize> {
        let inner = match self {
            ClientStream::Plain(inner) => inner,
            ClientStream::Tls(tls) => tls.get_mut().0,
        };
        let pending = inner.pending_prefix();
        if !pending.is_empty() {
            let count = pending.len().min(probe.len());
            probe[..count].copy_from_slice(&pending[..count]);
            return Ok(count);
        }
        inner.stream.peek(probe).await
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(self: Pin<&mut Self>, context: &mut Context<'_>, buffer: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(inner) => Pin::new(inner).poll_read(context, buffer),
            ClientStream::Tls(inner) => Pin::new(inner.as_mut()).poll_read(context, buffer),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(inner) => Pin::new(inner).poll_write(context, data),
            ClientStream::Tls(inner) => Pin::new(inner.as_mut()).poll_write(context, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(inner) => Pin::new(inner).poll_flush(context),
            ClientStream::Tls(inner) => Pin::new(inner.as_mut()).poll_flush(context),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(inner) => Pin::new(inner).poll_shutdown(context),
            ClientStream::Tls(inner) => Pin::new(inner.as_mut()).poll_shutdown(context),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_hello_is_told_from_a_wire_header() {
        assert!(is_tls_client_hello(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]));
        // A hello of 278 bytes (0x116) has 0x16 first: the next byte tells it apart.
        assert!(!is_tls_client_hello(&[0x16, 0x01, 0x00, 0x00, 0x07, 0x00]));
        assert!(!is_tls_client_hello(&[0x16, 0x03, 0x01]));
    }

    #[test]
    fn modes_parse_as_mongod_spells_them() {
        assert_eq!(TlsMode::parse("requireTLS"), Some(TlsMode::RequireTls));
        assert_eq!(TlsMode::parse("preferTLS"), Some(TlsMode::PreferTls));
        assert_eq!(TlsMode::parse("requiretls"), None);
    }
}
