//! MONGODB-X509 through the Rust driver: a client certificate the CA signed logs in as the user
//! of `$external` named by its subject, explicitly and through hello's speculative
//! authentication; mongod's errors for a missing or unverified certificate, a user name that
//! is not the subject, another database, an unknown user; and `$external` holding users only.

mod certificates;

use std::path::Path;

use bson::{doc, Bson, Document};
use certificates::{Certificates, OTHER_X509_SUBJECT};
use myriad_testkit::{error_code, TestServer};
use mongodb::options::{AuthMechanism, ClientOptions, Credential, Tls, TlsOptions};
use mongodb::Client;

const ROOT_PASSWORD: &str = "root-secret";

fn path(file: &Path) -> &str {
    file.to_str().expect("utf-8 path")
}

/// A requireTLS server with --auth that asks clients for certificates from the test CA
/// (`extra` adds flags).
fn x509_server(certificates: &Certificates, extra: &[&str]) -> TestServer {
    let mut builder = TestServer::builder()
        .auth()
        .argument("--tlsMode")
        .argument("requireTLS")
        .argument("--tlsCertificateKeyFile")
        .argument(path(&certificates.server_file))
        .argument("--tlsCAFile")
        .argument(path(&certificates.ca_file));
    for argument in extra {
        builder = builder.argument(argument);
    }
    builder.start()
}

/// A TLS client presenting `certificate` (if any), authenticating with `credential` (if any).
async fn tls_client(server: &TestServer, certificates: &Certificates, certificate: Option<&Path>, credential: Option<Credential>) -> Client {
    let mut options = ClientOptions::parse(server.uri()).await.expect("uri parses");
    options.tls = Some(Tls::Enabled(
        TlsOptions::builder().ca_file_path(certificates.ca_file.clone()).cert_key_file_path(certificate.map(Path::to_path_buf)).build(),
    ));
    options.credential = credential;
    options.server_selection_timeout = Some(std::time::Duration::from_secs(10));
    Client::with_options(options).expect("client")
}

fn x509_credential() -> Credential {
    Credential::builder().mechanism(AuthMechanism::MongoDbX509).build()
}

async fn run(client: &Client, db: &str, command: Document) -> Result<Document, i32> {
    client.database(db).run_command(command).await.map_err(|error| error_code(&error).unwrap_or(-1))
}

/// The root user, created through the localhost exception on a TLS connection.
async fn root_client(server: &TestServer, certificates: &Certificates) -> Client {
    let anonymous = tls_client(server, certificates, Some(&certificates.client_file), None).await;
    run(&anonymous, "admin", doc! { "createUser": "root", "pwd": ROOT_PASSWORD, "roles": ["root"] }).await.expect("first user");
    let credential = Credential::builder().username("root".to_string()).password(ROOT_PASSWORD.to_string()).source("admin".to_string()).build();
    tls_client(server, certificates, Some(&certificates.client_file), Some(credential)).await
}

#[tokio::test]
async fn a_certificate_logs_in_as_its_subject_in_external() {
    let certificates = Certificates::generate();
    let server = x509_server(&certificates, &[]);
    let root = root_client(&server, &certificates).await;
    let subject = certificates.x509_subject.clone();
    let roles = vec![Bson::Document(doc! { "role": "readWrite", "db": "shop" })];
    run(&root, "$external", doc! { "createUser": &subject, "roles": roles.clone() }).await.expect("createUser on $external");

    let x509 = tls_client(&server, &certificates, Some(&certificates.x509_client_file), Some(x509_credential())).await;
    run(&x509, "shop", doc! { "insert": "items", "documents": [{ "by": "certificate" }] }).await.expect("insert as the certificate's user");
    let found = run(&x509, "shop", doc! { "find": "items" }).await.expect("find");
    assert_eq!(found.get_document("cursor").and_then(|cursor| cursor.get_array("firstBatch")).map(Vec::len), Ok(1));
    assert_eq!(run(&x509, "other", doc! { "find": "items" }).await.map(|_| ()), Err(13));
    let status = run(&x509, "admin", doc! { "connectionStatus": 1 }).await.expect("connectionStatus");
    let auth_info = status.get_document("authInfo").expect("authInfo");
    assert_eq!(auth_info.get_array("authenticatedUsers").expect("users"), &vec![Bson::Document(doc! { "user": &subject, "db": "$external" })]);
    assert_eq!(auth_info.get_array("authenticatedUserRoles").expect("roles"), &roles);

    let info = run(&root, "$external", doc! { "usersInfo": &subject, "showCredentials": true }).await.expect("usersInfo");
    let user = info.get_array("users").ok().and_then(|users| users.first()).and_then(Bson::as_document).expect("the user").clone();
    assert_eq!(user.get_str("_id"), Ok(format!("$external.{subject}").as_str()));
    assert_eq!(user.get_array("mechanisms").expect("mechanisms"), &vec![Bson::from("external")]);
    assert_eq!(user.get_document("credentials").expect("credentials"), &doc! { "external": true });

    let log = run(&root, "admin", doc! { "getLog": "global" }).await.expect("getLog");
    let logged_in = log.get_array("log").expect("lines").iter().filter_map(Bson::as_str).any(|line| {
        let line: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        line["id"] == 20250 && line["attr"]["mechanism"] == "MONGODB-X509" && line["attr"]["principalName"] == subject.as_str()
    });
    assert!(logged_in, "a 20250 line for the certificate's user");
}

#[tokio::test]
async fn authenticate_and_speculative_authenticate_answer_as_mongod() {
    let certificates = Certificates::generate();
    let server = x509_server(&certificates, &[]);
    let root = root_client(&server, &certificates).await;
    let subject = certificates.x509_subject.clone();
    run(&root, "$external", doc! { "createUser": &subject, "roles": [{ "role": "read", "db": "shop" }] }).await.expect("createUser");

    // Connected with the certificate, not yet authenticated: the commands themselves.
    let connected = tls_client(&server, &certificates, Some(&certificates.x509_client_file), None).await;
    let speculative = doc! { "authenticate": 1, "mechanism": "MONGODB-X509", "db": "$external" };
    let hello = run(&connected, "admin", doc! { "hello": 1, "speculativeAuthenticate": speculative }).await.expect("hello");
    assert_eq!(hello.get_document("speculativeAuthenticate").expect("answered"), &doc! { "dbname": "$external", "user": &subject });
    let mismatched = doc! { "authenticate": 1, "mechanism": "MONGODB-X509", "user": OTHER_X509_SUBJECT };
    let hello = run(&connected, "admin", doc! { "hello": 1, "speculativeAuthenticate": mismatched.clone() }).await.expect("hello");
    assert!(hello.get("speculativeAuthenticate").is_none(), "a failed speculative attempt is silent");

    let named = run(&connected, "$external", doc! { "authenticate": 1, "mechanism": "MONGODB-X509", "user": &subject }).await.expect("authenticate");
    assert_eq!(named.get_str("user"), Ok(subject.as_str()));
    assert_eq!(named.get_str("dbname"), Ok("$external"));
    let unnamed = run(&connected, "$external", doc! { "authenticate": 1, "mechanism": "MONGODB-X509" }).await.expect("authenticate without user");
    assert_eq!(unnamed.get_str("user"), Ok(subject.as_str()));

    assert_eq!(run(&connected, "$external", mismatched).await.map(|_| ()), Err(18));
    let elsewhere = run(&connected, "admin", doc! { "authenticate": 1, "mechanism": "MONGODB-X509" }).await;
    assert_eq!(elsewhere.map(|_| ()), Err(17), "X.509 authentication must use $external");
    let scram = run(&connected, "$external", doc! { "authenticate": 1, "mechanism": "SCRAM-SHA-256" }).await;
    assert_eq!(scram.map(|_| ()), Err(18));
    let unknown_field = run(&connected, "$external", doc! { "authenticate": 1, "mechanism": "MONGODB-X509", "colour": "blue" }).await;
    assert_eq!(unknown_field.map(|_| ()), Err(40415));
    assert_eq!(run(&connected, "$external", doc! { "authenticate": 1 }).await.map(|_| ()), Err(40414));

    // A certificate from the CA whose subject has no user in $external.
    let stranger = tls_client(&server, &certificates, Some(&certificates.other_x509_client_file), None).await;
    assert_eq!(run(&stranger, "$external", doc! { "authenticate": 1, "mechanism": "MONGODB-X509" }).await.map(|_| ()), Err(11));
    let stranger = tls_client(&server, &certificates, Some(&certificates.other_x509_client_file), Some(x509_credential())).await;
    let refused = stranger.database("shop").run_command(doc! { "ping": 1 }).await.expect_err("no such user");
    assert!(matches!(*refused.kind, mongodb::error::ErrorKind::Authentication { .. }), "{refused}");
}

#[tokio::test]
async fn external_holds_users_without_passwords_and_no_data() {
    let certificates = Certificates::generate();
    let server = x509_server(&certificates, &[]);
    let root = root_client(&server, &certificates).await;
    let with_password = run(&root, "$external", doc! { "createUser": OTHER_X509_SUBJECT, "pwd": "p", "roles": [] }).await;
    assert_eq!(with_password.map(|_| ()), Err(2));
    let builtin_here = run(&root, "$external", doc! { "createUser": OTHER_X509_SUBJECT, "roles": ["read"] }).await;
    assert_eq!(builtin_here.map(|_| ()), Err(31), "no role is built into $external");
    run(&root, "$external", doc! { "createUser": OTHER_X509_SUBJECT, "roles": [] }).await.expect("createUser");
    assert_eq!(run(&root, "$external", doc! { "updateUser": OTHER_X509_SUBJECT, "pwd": "p" }).await.map(|_| ()), Err(2));
    run(&root, "$external", doc! { "grantRolesToUser": OTHER_X509_SUBJECT, "roles": [{ "role": "read", "db": "shop" }] }).await.expect("grant");
    assert_eq!(run(&root, "$external", doc! { "insert": "items", "documents": [{}] }).await.map(|_| ()), Err(73));
    assert_eq!(run(&root, "$external", doc! { "find": "items" }).await.map(|_| ()), Err(73));
    // A SCRAM conversation for an external user fails: it has no SCRAM credentials.
    let scram = Credential::builder()
        .username(OTHER_X509_SUBJECT.to_string())
        .password("p".to_string())
        .source("$external".to_string())
        .mechanism(AuthMechanism::ScramSha256)
        .build();
    let scram_client = tls_client(&server, &certificates, Some(&certificates.client_file), Some(scram)).await;
    assert!(scram_client.database("shop").run_command(doc! { "ping": 1 }).await.is_err());
    run(&root, "$external", doc! { "dropUser": OTHER_X509_SUBJECT }).await.expect("dropUser");
    let parameters = run(&root, "admin", doc! { "getParameter": 1, "authenticationMechanisms": 1 }).await.expect("getParameter");
    assert!(parameters.get_array("authenticationMechanisms").expect("list").contains(&Bson::from("MONGODB-X509")));
}

#[tokio::test]
async fn only_a_certificate_the_ca_vouches_for_authenticates() {
    let certificates = Certificates::generate();
    // Certificates optional: a TLS client without one has no subject to log in as.
    let server = x509_server(&certificates, &["--tlsAllowConnectionsWithoutCertificates"]);
    let root = root_client(&server, &certificates).await;
    run(&root, "$external", doc! { "createUser": &certificates.x509_subject, "roles": [{ "role": "read", "db": "shop" }] }).await.expect("createUser");
    let without = tls_client(&server, &certificates, None, None).await;
    assert_eq!(run(&without, "$external", doc! { "authenticate": 1, "mechanism": "MONGODB-X509" }).await.map(|_| ()), Err(18));
    drop(server);

    // Invalid certificates allowed: one from an unknown CA connects but names no user, even one
    // whose subject exists; one from the CA still logs in.
    let server = x509_server(&certificates, &["--tlsAllowInvalidCertificates"]);
    let root = root_client(&server, &certificates).await;
    run(&root, "$external", doc! { "createUser": &certificates.x509_subject, "roles": [{ "role": "read", "db": "shop" }] }).await.expect("createUser");
    let untrusted = tls_client(&server, &certificates, Some(&certificates.untrusted_x509_client_file), None).await;
    run(&untrusted, "admin", doc! { "ping": 1 }).await.expect("an invalid certificate connects");
    assert_eq!(run(&untrusted, "$external", doc! { "authenticate": 1, "mechanism": "MONGODB-X509" }).await.map(|_| ()), Err(18));
    let trusted = tls_client(&server, &certificates, Some(&certificates.x509_client_file), Some(x509_credential())).await;
    run(&trusted, "shop", doc! { "find": "items" }).await.expect("a valid certificate logs in");
    drop(server);

    // A plain connection (preferTLS) has no certificate at all.
    let server = TestServer::builder()
        .auth()
        .argument("--tlsMode")
        .argument("preferTLS")
        .argument("--tlsCertificateKeyFile")
        .argument(path(&certificates.server_file))
        .start();
    let plain = server.client().await;
    assert_eq!(run(&plain, "$external", doc! { "authenticate": 1, "mechanism": "MONGODB-X509" }).await.map(|_| ()), Err(18));
}
