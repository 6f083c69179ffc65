//! `--config FILE` (mongod's YAML format) on the real binary: options (and `setParameter`
//! entries) from the file take effect, flags override them, and an unknown option stops
//! start-up naming it.

mod certificates;

use bson::doc;
use certificates::Certificates;
use myriad_testkit::TestServer;

fn write_config(directory: &std::path::Path, yaml: &str) -> String {
    let path = directory.join("myriad.conf");
    std::fs::write(&path, yaml).expect("write config");
    path.to_str().expect("utf-8 path").to_string()
}

#[tokio::test]
async fn options_come_from_the_file_and_flags_override_it() {
    let certificates = Certificates::generate();
    let yaml = format!(
        "# as mongod's own files look\nstorage:\n  dbPath: /nonexistent/overridden-by-the-flag\nnet:\n  port: 1\n  bindIp: 127.0.0.1\n  tls:\n    mode: requireTLS\n    certificateKeyFile: {}\noperationProfiling:\n  mode: all\n  slowOpThresholdMs: 42\nsystemLog:\n  quiet: true\n  verbosity: 1\nsetParameter:\n  idleConnectionTimeoutMillis: 123456\n  notablescan: false\n",
        certificates.server_file.display()
    );
    let config = write_config(certificates.directory(), &yaml);
    // TestServer passes --dbpath and --port 0, which override the file's dbPath and port.
    let server = TestServer::builder().argument("--config").argument(&config).start();
    let uri = format!("{}&tls=true&tlsCAFile={}&serverSelectionTimeoutMS=5000", server.uri(), certificates.ca_file.display());
    let client = mongodb::Client::with_uri_str(uri).await.expect("client options");
    let database = client.database("configured");
    database.collection::<bson::Document>("items").insert_one(doc! { "n": 1 }).await.expect("insert over TLS");
    let profile = database.run_command(doc! { "profile": -1 }).await.expect("profile");
    assert_eq!(profile.get_i32("was"), Ok(2), "{profile:?}");
    assert_eq!(profile.get_i32("slowms"), Ok(42), "{profile:?}");
    assert!(server.files_under_data_path() > 0, "the data went to the --dbpath directory");
    let parameters = client.database("admin").run_command(doc! { "getParameter": 1, "idleConnectionTimeoutMillis": 1 }).await.expect("getParameter");
    assert_eq!(parameters.get_i64("idleConnectionTimeoutMillis"), Ok(123_456), "the file's setParameter section applies");
}

fn start_up_error(yaml: &str) -> (Option<i32>, String) {
    let directory = tempfile::tempdir().expect("temp dir");
    let config = write_config(directory.path(), yaml);
    myriad_testkit::start_up_failure(&["--config", &config, "--dbpath", directory.path().to_str().expect("utf-8 path"), "--port", "0"])
}

#[test]
fn an_unknown_option_stops_start_up_naming_it() {
    let (code, stderr) = start_up_error("net:\n  port: 27017\n  colour: blue\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("Unrecognized option: net.colour"), "{stderr}");
}

#[test]
fn a_bad_value_or_file_stops_start_up() {
    let (code, stderr) = start_up_error("security:\n  authorization: sometimes\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("security.authorization"), "{stderr}");
    let (code, stderr) = start_up_error("net: [unclosed\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not valid YAML"), "{stderr}");
}
