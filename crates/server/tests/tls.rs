//! TLS through the official Rust driver: each mode, plain and TLS clients on one port, client
//! certificates checked against --tlsCAFile. Certificates are made per test (rcgen).

mod certificates;

use bson::doc;
use certificates::Certificates;
use myriad_testkit::TestServer;
use mongodb::Client;

/// Short enough that a refused client fails fast; the failure, not the time, is asserted.
const SELECTION_TIMEOUT_MS: u32 = 3000;

fn tls_server(certificates: &Certificates, mode: &str, extra: &[&str]) -> TestServer {
    let mut builder = TestServer::builder()
        .argument("--tlsMode")
        .argument(mode)
        .argument("--tlsCertificateKeyFile")
        .argument(certificates.server_file.to_str().expect("utf-8 path"));
    for argument in extra {
        builder = builder.argument(argument);
    }
    builder.start()
}

async fn connect(uri: String) -> Client {
    Client::with_uri_str(format!("{uri}&serverSelectionTimeoutMS={SELECTION_TIMEOUT_MS}")).await.expect("client options")
}

fn tls_uri(server: &TestServer, certificates: &Certificates) -> String {
    format!("{}&tls=true&tlsCAFile={}", server.uri(), certificates.ca_file.display())
}

/// Inserts and reads back a document: the connection works end to end.
async fn round_trip(client: &Client) -> Result<(), mongodb::error::Error> {
    let collection = client.database("tls").collection::<bson::Document>("items");
    collection.insert_one(doc! { "n": 1 }).await?;
    let found = collection.find_one(doc! { "n": 1 }).await?;
    assert_eq!(found.and_then(|document| document.get_i32("n").ok()), Some(1));
    collection.drop().await
}

#[tokio::test]
async fn require_tls_serves_tls_clients_and_refuses_plain_ones() {
    let certificates = Certificates::generate();
    let server = tls_server(&certificates, "requireTLS", &[]);
    let tls_client = connect(tls_uri(&server, &certificates)).await;
    round_trip(&tls_client).await.expect("a TLS client works");
    let plain_client = connect(server.uri()).await;
    let refused = plain_client.database("admin").run_command(doc! { "ping": 1 }).await;
    assert!(refused.is_err(), "a plain client was served by a requireTLS server");
}

#[tokio::test]
async fn prefer_and_allow_tls_serve_both_kinds_on_one_port() {
    let certificates = Certificates::generate();
    for mode in ["preferTLS", "allowTLS"] {
        let server = tls_server(&certificates, mode, &[]);
        let tls_client = connect(tls_uri(&server, &certificates)).await;
        round_trip(&tls_client).await.unwrap_or_else(|error| panic!("TLS client under {mode}: {error}"));
        let plain_client = connect(server.uri()).await;
        round_trip(&plain_client).await.unwrap_or_else(|error| panic!("plain client under {mode}: {error}"));
    }
}

#[tokio::test]
async fn disabled_refuses_tls_clients() {
    let certificates = Certificates::generate();
    let server = TestServer::start();
    let tls_client = connect(tls_uri(&server, &certificates)).await;
    let refused = tls_client.database("admin").run_command(doc! { "ping": 1 }).await;
    assert!(refused.is_err(), "a TLS client was served with TLS disabled");
    let plain_client = connect(server.uri()).await;
    round_trip(&plain_client).await.expect("a plain client works");
}

#[tokio::test]
async fn a_ca_file_requires_a_client_certificate_it_signed() {
    let certificates = Certificates::generate();
    let ca_file = certificates.ca_file.to_str().expect("utf-8 path").to_string();
    let server = tls_server(&certificates, "requireTLS", &["--tlsCAFile", &ca_file]);
    let with_certificate = format!("{}&tlsCertificateKeyFile={}", tls_uri(&server, &certificates), certificates.client_file.display());
    round_trip(&connect(with_certificate).await).await.expect("a client with a certificate from the CA works");
    let without_certificate = connect(tls_uri(&server, &certificates)).await;
    let refused = without_certificate.database("admin").run_command(doc! { "ping": 1 }).await;
    assert!(refused.is_err(), "a client without a certificate was served");
    let untrusted = format!("{}&tlsCertificateKeyFile={}", tls_uri(&server, &certificates), certificates.untrusted_client_file.display());
    let refused = connect(untrusted).await.database("admin").run_command(doc! { "ping": 1 }).await;
    assert!(refused.is_err(), "a client certificate from an unknown CA was accepted");
}

#[tokio::test]
async fn certificates_are_optional_or_unchecked_when_the_flags_say_so() {
    let certificates = Certificates::generate();
    let ca_file = certificates.ca_file.to_str().expect("utf-8 path").to_string();
    let server = tls_server(&certificates, "requireTLS", &["--tlsCAFile", &ca_file, "--tlsAllowConnectionsWithoutCertificates"]);
    round_trip(&connect(tls_uri(&server, &certificates)).await).await.expect("no certificate is allowed");
    drop(server);
    let server = tls_server(&certificates, "requireTLS", &["--tlsCAFile", &ca_file, "--tlsAllowInvalidCertificates"]);
    let untrusted = format!("{}&tlsCertificateKeyFile={}", tls_uri(&server, &certificates), certificates.untrusted_client_file.display());
    round_trip(&connect(untrusted).await).await.expect("an invalid certificate is allowed");
}

#[test]
fn a_missing_certificate_file_stops_start_up_with_a_message() {
    let directory = tempfile::tempdir().expect("temp dir");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_myriad"))
        .args(["--dbpath", directory.path().to_str().expect("utf-8 path"), "--port", "0", "--tlsMode", "requireTLS"])
        .args(["--tlsCertificateKeyFile", "/nonexistent/server.pem"])
        .output()
        .expect("run myriad");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("tlsCertificateKeyFile /nonexistent/server.pem"), "{stderr}");
}
