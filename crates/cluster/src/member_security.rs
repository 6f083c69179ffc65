//! How a cluster member connects to the others: over TLS when it serves TLS itself
//! (`--tlsMode preferTLS` or `requireTLS`, as mongod's outgoing connections), and
//! authenticated as the internal user (`__system@local`) with the keyfile's secret when it
//! has one (`--keyFile`), as MongoDB's internal authentication.
//!
//! Set once per process at start-up ([`set`]); every [`crate::client::NodeClient`] reads it
//! when it opens a connection, so routers, shards, the config server and the launcher all
//! connect the same way.
//!
//! Invariants: a connection is handed to a caller only after its TLS handshake and its
//! authentication have both succeeded; a failed step drops the connection (never pooled).

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;


/// What this process uses when it connects to another member.
#[derive(Clone, Default)]
pub struct MemberSecurity {
    /// The keyfile's secret: authenticate as the internal user.
    pub internal_key: Option<String>,
    /// Connect over TLS with this configuration (trust and client certificate).
    pub tls: Option<Arc<ClientConfig>>,
}

static MEMBER_SECURITY: OnceLock<MemberSecurity> = OnceLock::new();

/// Sets how this process connects to other members; the first call wins (start-up).
pub fn set(security: MemberSecurity) {
    let _ = MEMBER_SECURITY.set(security);
}

/// How this process connects to other members (plain and unauthenticated unless [`set`]).
pub fn current() -> &'static MemberSecurity {
    MEMBER_SECURITY.get_or_init(MemberSecurity::default)
}

/// A connection to a member: plain TCP or TLS over it.
pub enum MemberStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl MemberStream {
    /// The TCP socket underneath (for the liveness probe of an idle connection).
    pub fn socket(&self) -> &TcpStream {
        match self {
            MemberStream::Plain(stream) => stream,
            MemberStream::Tls(stream) => stream.get_ref().0,
        }
    }
}

/// Opens the TLS session `security` asks for over a connected socket to `address`.
pub async fn secure(stream: TcpStream, address: &str, security: &MemberSecurity) -> Result<MemberStream, String> {
    let Some(config) = &security.tls else { return Ok(MemberStream::Plain(stream)) };
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host).trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_string()).map_err(|error| format!("cannot verify {host} over TLS: {error}"))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
    let tls = connector.connect(name, stream).await.map_err(|error| format!("TLS handshake with {address} failed: {error}"))?;
    Ok(MemberStream::Tls(Box::new(tls)))
}

impl AsyncRead for MemberStream {
    fn poll_read(self: Pin<&mut Self>, context: &mut Context<'_>, buffer: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            MemberStream::Plain(stream) => Pin::new(stream).poll_read(context, buffer),
            MemberStream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(context, buffer),
        }
    }
}

impl AsyncWrite for MemberStream {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            MemberStream::Plain(stream) => Pin::new(stream).poll_write(context, data),
            MemberStream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(context, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            MemberStream::Plain(stream) => Pin::new(stream).poll_flush(context),
            MemberStream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(context),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            MemberStream::Plain(stream) => Pin::new(stream).poll_shutdown(context),
            MemberStream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(context),
        }
    }
}
