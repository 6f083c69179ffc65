//! Starts real `myriad` processes for integration tests. A [`TestServer`] owns its data
//! directory and process; dropping it kills the process and deletes the directory.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use mongodb::options::{ClientOptions, Compressor};
use mongodb::Client;

/// How long a server may take to print "Waiting for connections".
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

pub struct TestServer {
    child: Option<Child>,
    pub port: u16,
    data_directory: tempfile::TempDir,
    extra_arguments: Vec<String>,
    /// Extra environment variables of the server process (kept across restarts).
    environment: Vec<(String, String)>,
}

#[derive(Default)]
pub struct TestServerBuilder {
    extra_arguments: Vec<String>,
    environment: Vec<(String, String)>,
}

impl TestServerBuilder {
    pub fn argument(mut self, argument: &str) -> Self {
        self.extra_arguments.push(argument.to_string());
        self
    }

    /// Starts the server with `--auth`: authentication required, roles enforced.
    pub fn auth(self) -> Self {
        self.argument("--auth")
    }

    /// Sets an environment variable of the server process, for this start and every restart.
    pub fn environment(mut self, name: &str, value: &str) -> Self {
        self.environment.push((name.to_string(), value.to_string()));
        self
    }

    pub fn start(self) -> TestServer {
        let data_directory = tempfile::tempdir().expect("temp dir");
        let mut server = TestServer {
            child: None,
            port: 0,
            data_directory,
            extra_arguments: self.extra_arguments,
            environment: self.environment,
        };
        server.launch();
        server
    }
}

impl TestServer {
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    pub fn start() -> TestServer {
        TestServer::builder().start()
    }

    pub fn data_path(&self) -> &Path {
        self.data_directory.path()
    }

    fn launch(&mut self) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_myriad"))
            .arg("--dbpath")
            .arg(self.data_directory.path())
            .args(["--port", "0", "--bind_ip", "127.0.0.1", "--cacheSizeMB", "64"])
            .args(&self.extra_arguments)
            .envs(self.environment.iter().map(|(name, value)| (name, value)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start myriad");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (sender, receiver) = mpsc::channel();
        // Keep draining stderr for the server's whole life so it never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent && line.contains("Waiting for connections") {
                    let parsed: serde_json::Value = serde_json::from_str(&line).expect("log lines are JSON");
                    let port = parsed["attr"]["port"].as_u64().expect("port attribute") as u16;
                    let _ = sender.send(port);
                    sent = true;
                }
                if std::env::var_os("MYRIAD_TEST_LOG").is_some() {
                    eprintln!("{line}");
                }
            }
        });
        self.port = receiver.recv_timeout(STARTUP_TIMEOUT).expect("server did not start listening");
        self.child = Some(child);
    }

    pub fn uri(&self) -> String {
        format!("mongodb://127.0.0.1:{}/?directConnection=true", self.port)
    }

    pub async fn client(&self) -> Client {
        let options = ClientOptions::parse(self.uri()).await.expect("uri parses");
        Client::with_options(options).expect("client")
    }

    /// A client that authenticates as `user` (defined in `source`) with `mechanism`.
    pub async fn client_as(&self, user: &str, password: &str, source: &str, mechanism: mongodb::options::AuthMechanism) -> Client {
        let mut options = ClientOptions::parse(self.uri()).await.expect("uri parses");
        options.credential = Some(
            mongodb::options::Credential::builder()
                .username(user.to_string())
                .password(password.to_string())
                .source(source.to_string())
                .mechanism(mechanism)
                .build(),
        );
        options.server_selection_timeout = Some(Duration::from_secs(10));
        Client::with_options(options).expect("client")
    }

    pub async fn client_with_compression(&self, compressor: Compressor) -> Client {
        let mut options = ClientOptions::parse(self.uri()).await.expect("uri parses");
        options.compressors = Some(vec![compressor]);
        Client::with_options(options).expect("client")
    }

    /// SIGKILL: no shutdown work at all, as a crash.
    pub fn kill_hard(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait for a clean exit; returns the exit status code.
    pub fn stop(&mut self) -> Option<i32> {
        let child = self.child.take()?;
        let mut child = child;
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe {
            libc_kill(child.id() as i32, 15);
        }
        let status = child.wait().ok()?;
        status.code()
    }

    /// A handle that SIGKILLs the server from any task, at the very moment it is used (the
    /// process is reaped by the next `kill_hard` or `restart`).
    pub fn killer(&self) -> Option<ServerKiller> {
        self.child.as_ref().map(|child| ServerKiller { pid: child.id() })
    }

    /// Starts again on the same data directory.
    pub fn restart(&mut self) {
        self.kill_hard();
        self.launch();
    }

    pub fn files_under_data_path(&self) -> usize {
        count_files(self.data_directory.path())
    }
}

/// Sends SIGKILL to a running test server (see [`TestServer::killer`]).
#[derive(Clone, Copy)]
pub struct ServerKiller {
    pid: u32,
}

impl ServerKiller {
    pub fn kill(self) {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions; the child
        // is not reaped until the TestServer waits for it, so the pid cannot be reused first.
        unsafe {
            libc_kill(self.pid as i32, 9);
        }
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

fn count_files(path: &Path) -> usize {
    let mut count = 0;
    let mut pending: Vec<PathBuf> = vec![path.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                count += 1;
            }
        }
    }
    count
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill_hard();
    }
}

/// The MongoDB code of a driver error: a command error, a write error, a write concern error,
/// or the first write error of an insert_many.
pub fn error_code(error: &mongodb::error::Error) -> Option<i32> {
    use mongodb::error::{ErrorKind, WriteFailure};
    match error.kind.as_ref() {
        ErrorKind::Command(command) => Some(command.code),
        ErrorKind::Write(WriteFailure::WriteError(write)) => Some(write.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(concern)) => Some(concern.code),
        ErrorKind::InsertMany(insert_many) => insert_many.write_errors.as_ref()?.first().map(|write| write.code),
        _ => None,
    }
}

/// Runs a command against the admin database.
pub async fn admin(client: &Client, command: bson::Document) -> mongodb::error::Result<bson::Document> {
    client.database("admin").run_command(command).await
}
