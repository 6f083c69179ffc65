//! A node for a test: [`TestServer`] owns its data directory and process; dropping it kills
//! the process and deletes the directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mongodb::options::{ClientOptions, Compressor};
use mongodb::Client;

use crate::process::{libc_kill, MyriadProcess};

pub struct TestServer {
    process: MyriadProcess,
    pub port: u16,
    // Declared after the process, so the process is killed before its directory goes.
    data_directory: tempfile::TempDir,
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
        let mut arguments = vec!["--dbpath".to_string(), data_directory.path().to_string_lossy().into_owned(), "--cacheSizeMB".to_string(), "64".to_string()];
        arguments.extend(self.extra_arguments);
        let process = MyriadProcess::start(arguments, self.environment, 0);
        TestServer { port: process.port, process, data_directory }
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

    /// Log lines containing `text`.
    pub fn log_lines(&self, text: &str) -> Vec<String> {
        self.process.log_lines(text)
    }

    /// SIGKILL: no shutdown work at all, as a crash.
    pub fn kill_hard(&mut self) {
        self.process.kill();
    }

    /// SIGTERM, then wait for a clean exit; returns the exit status code.
    pub fn stop(&mut self) -> Option<i32> {
        self.process.stop()
    }

    /// A handle that SIGKILLs the server from any task, at the very moment it is used (the
    /// process is reaped by the next `kill_hard` or `restart`).
    pub fn killer(&self) -> Option<ServerKiller> {
        self.process.pid().map(|pid| ServerKiller { pid })
    }

    /// Starts again on the same data directory and port.
    pub fn restart(&mut self) {
        self.process.restart();
        self.port = self.process.port;
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
