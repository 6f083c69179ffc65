//! The server under test as a child process: found next to this executable (or given by
//! `--server-binary`), started on port 0 on a temporary data directory, its port read from the
//! "Waiting for connections" log line, always killed when the guard drops (error paths too).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cleanup;
use crate::error::{BenchError, BenchResult};

/// Log lines kept for error messages.
const LOG_TAIL_LINES: usize = 30;
/// Longest log line kept (a line can be arbitrarily long; the tail must stay bounded).
const LOG_LINE_LIMIT_BYTES: usize = 2048;
/// How often a stopping server is polled.
const EXIT_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How to start the server.
#[derive(Debug, Clone)]
pub struct ServerLaunch {
    pub binary: PathBuf,
    pub data_directory: PathBuf,
    pub cache_size_mebibytes: Option<usize>,
}

/// A running server child. Dropping it kills the process (SIGKILL) if it is still running.
pub struct ServerProcess {
    child: Child,
    port: u16,
    log_tail: Arc<Mutex<VecDeque<String>>>,
    /// From spawn to the "Waiting for connections" line.
    pub time_to_listening: Duration,
    pub spawned_at: Instant,
}

impl ServerProcess {
    /// Spawns the server and waits (at most `startup_timeout`) for it to report its port.
    pub fn start(launch: &ServerLaunch, startup_timeout: Duration) -> BenchResult<ServerProcess> {
        let mut arguments = vec!["--dbpath".into(), launch.data_directory.as_os_str().to_owned()];
        if let Some(cache) = launch.cache_size_mebibytes {
            arguments.extend(["--cacheSizeMB".into(), cache.to_string().into()]);
        }
        ServerProcess::start_with_arguments(&launch.binary, &arguments, startup_timeout)
    }

    /// Spawns `binary arguments... --port 0 --bind_ip 127.0.0.1` (any role: a standalone, a
    /// config server, a shard, a router) and waits for it to report its port.
    pub fn start_with_arguments(
        binary: &Path,
        arguments: &[std::ffi::OsString],
        startup_timeout: Duration,
    ) -> BenchResult<ServerProcess> {
        ServerProcess::start_on_port(binary, arguments, 0, startup_timeout)
    }

    /// As [`ServerProcess::start_with_arguments`] on `port` (0: a free one), so a restarted
    /// replica set member comes back on the address its set knows.
    pub fn start_on_port(
        binary: &Path,
        arguments: &[std::ffi::OsString],
        port: u16,
        startup_timeout: Duration,
    ) -> BenchResult<ServerProcess> {
        let mut command = Command::new(binary);
        command
            .args(arguments)
            // Not --quiet: the server's quiet mode drops every NETWORK info line, including
            // "Waiting for connections", which names the port. The reader drains the rest.
            .args(["--port", &port.to_string(), "--bind_ip", "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let spawned_at = Instant::now();
        let mut child =
            command.spawn().map_err(|error| BenchError::Server(format!("cannot start {}: {error}", binary.display())))?;
        cleanup::track_child(child.id());
        let Some(stderr) = child.stderr.take() else {
            cleanup::forget_child(child.id());
            let _ = child.kill();
            let _ = child.wait();
            return Err(BenchError::Server("the child has no stderr pipe".into()));
        };
        let log_tail = Arc::new(Mutex::new(VecDeque::with_capacity(LOG_TAIL_LINES)));
        let (port_sender, port_receiver) = mpsc::channel::<u16>();
        let tail_for_reader = Arc::clone(&log_tail);
        // The reader keeps draining stderr for the life of the child, so the server never
        // blocks on a full pipe; it ends at EOF when the child exits.
        let reader = std::thread::Builder::new().name("myriad-server-log".into()).spawn(move || {
            let mut port_sender = Some(port_sender);
            for line in BufReader::new(stderr).lines() {
                let Ok(mut line) = line else { break };
                if let Some(port) = port_sender.as_ref().and_then(|_| listening_port(&line)) {
                    if let Some(sender) = port_sender.take() {
                        let _ = sender.send(port);
                    }
                }
                if line.len() > LOG_LINE_LIMIT_BYTES {
                    let mut cut = LOG_LINE_LIMIT_BYTES;
                    while !line.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    line.truncate(cut);
                }
                if let Ok(mut tail) = tail_for_reader.lock() {
                    if tail.len() == LOG_TAIL_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            }
        });
        let mut process = ServerProcess { child, port: 0, log_tail, time_to_listening: Duration::ZERO, spawned_at };
        if let Err(error) = reader {
            return Err(BenchError::Server(format!("cannot start the log reader thread: {error}")));
        }
        match port_receiver.recv_timeout(startup_timeout) {
            Ok(port) => {
                process.port = port;
                process.time_to_listening = spawned_at.elapsed();
                Ok(process)
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Err(BenchError::Timeout(format!(
                "the server did not report its port within {:?}; last log lines:\n{}",
                startup_timeout,
                process.log_tail_text()
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // EOF on stderr: the server exited (or closed its log); the guard kills it if not.
                let deadline = Instant::now() + Duration::from_secs(5);
                let mut status = String::from("still running");
                while Instant::now() < deadline {
                    if let Ok(Some(exit)) = process.child.try_wait() {
                        status = exit.to_string();
                        break;
                    }
                    std::thread::sleep(EXIT_POLL_INTERVAL);
                }
                Err(BenchError::Server(format!(
                    "the server closed its log before listening ({status}); last log lines:\n{}",
                    process.log_tail_text()
                )))
            }
        }
    }

    pub fn uri(&self) -> String {
        format!("mongodb://127.0.0.1:{}/?directConnection=true", self.port)
    }

    /// `127.0.0.1:port`, as cluster members name each other.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log_tail_text(&self) -> String {
        match self.log_tail.lock() {
            Ok(tail) => tail.iter().cloned().collect::<Vec<_>>().join("\n"),
            Err(_) => String::new(),
        }
    }

    /// Resident memory of the server process in bytes (VmRSS), if it is still running.
    pub fn resident_bytes(&self) -> Option<u64> {
        resident_bytes_of(self.child.id())
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// SIGKILL (`kill -9`: no shutdown, no flush) and reap.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        cleanup::forget_child(self.child.id());
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for a clean exit (flush included); SIGKILL after `timeout`.
    /// Returns how long the shutdown took and whether it had to be forced.
    pub fn stop(mut self, timeout: Duration) -> BenchResult<ShutdownOutcome> {
        let started = Instant::now();
        if let Ok(Some(_)) = self.child.try_wait() {
            cleanup::forget_child(self.child.id());
            return Err(BenchError::Server(format!(
                "the server had already exited; last log lines:\n{}",
                self.log_tail_text()
            )));
        }
        let signalled = send_terminate(self.child.id());
        let deadline = started + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    cleanup::forget_child(self.child.id());
                    return Ok(ShutdownOutcome {
                        elapsed: started.elapsed(),
                        forced: false,
                        clean_exit: status.success(),
                    });
                }
                Ok(None) if signalled && Instant::now() < deadline => std::thread::sleep(EXIT_POLL_INTERVAL),
                Ok(None) => {
                    let _ = self.child.kill();
                    cleanup::forget_child(self.child.id());
                    let _ = self.child.wait();
                    return Ok(ShutdownOutcome { elapsed: started.elapsed(), forced: true, clean_exit: false });
                }
                Err(error) => return Err(BenchError::Server(format!("waiting for the server to exit: {error}"))),
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            cleanup::forget_child(self.child.id());
            let _ = self.child.wait();
        }
        cleanup::forget_child(self.child.id());
    }
}

#[derive(Debug, Clone, Copy)]
pub struct ShutdownOutcome {
    pub elapsed: Duration,
    /// SIGTERM was not honoured in time (or could not be sent) and the child was killed.
    pub forced: bool,
    pub clean_exit: bool,
}

/// Name of the server executable cargo puts next to `myriad-bench` (target/<profile>/myriad).
const SERVER_BINARY_NAME: &str = "myriad";

/// The server binary to start: `explicit` (from `--server-binary`) if given, else `myriad` in
/// the directory of this executable. Either must exist.
pub fn locate_server_binary(explicit: Option<&Path>) -> BenchResult<PathBuf> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let executable =
                std::env::current_exe().map_err(|error| BenchError::io("locating this executable", error))?;
            let directory = executable
                .parent()
                .ok_or_else(|| BenchError::Server(format!("{} has no parent directory", executable.display())))?;
            directory.join(SERVER_BINARY_NAME)
        }
    };
    if path.is_file() {
        return Ok(path);
    }
    let hint = match explicit {
        Some(_) => "check --server-binary",
        None => "build it (`cargo build -p myriad`, with --release for a release bench) or pass --server-binary PATH",
    };
    Err(BenchError::Server(format!("the server binary {} does not exist: {hint}", path.display())))
}

/// A temporary data directory, removed on drop unless kept (and removed by the signal
/// watcher if the benchmark is interrupted).
pub struct DataDirectory {
    directory: Option<tempfile::TempDir>,
    kept: Option<PathBuf>,
}

impl DataDirectory {
    /// Made under `parent` (the system's temporary directory if none); with `keep`, left in
    /// place after the run and its path printed.
    pub fn create(parent: Option<&Path>, keep: bool, label: &str) -> BenchResult<DataDirectory> {
        let mut builder = tempfile::Builder::new();
        builder.prefix(label);
        let created = match parent {
            Some(parent) => builder.tempdir_in(parent),
            None => builder.tempdir(),
        };
        let directory = created.map_err(|error| BenchError::io("creating a temporary data directory", error))?;
        if keep {
            let path = directory.keep();
            eprintln!("myriad-bench: keeping data in {}", path.display());
            Ok(DataDirectory { directory: None, kept: Some(path) })
        } else {
            cleanup::track_directory(directory.path());
            Ok(DataDirectory { directory: Some(directory), kept: None })
        }
    }

    pub fn path(&self) -> PathBuf {
        match (&self.directory, &self.kept) {
            (Some(directory), _) => directory.path().to_path_buf(),
            (None, Some(path)) => path.clone(),
            (None, None) => PathBuf::new(),
        }
    }
}

impl Drop for DataDirectory {
    fn drop(&mut self) {
        // The TempDir field removes the directory right after this.
        if let Some(directory) = &self.directory {
            cleanup::forget_directory(directory.path());
        }
    }
}

/// Sends SIGTERM through the `kill` utility (the workspace has no libc binding for the bench).
fn send_terminate(pid: u32) -> bool {
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|status| status.success())
        .unwrap_or(false)
}

/// The port in a `{"msg":"Waiting for connections","attr":{"port":N}}` log line.
pub fn listening_port(line: &str) -> Option<u16> {
    if !line.contains("Waiting for connections") {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    if value.get("msg")?.as_str()? != "Waiting for connections" {
        return None;
    }
    let port = value.get("attr")?.get("port")?.as_u64()?;
    u16::try_from(port).ok().filter(|port| *port != 0)
}

/// VmRSS of a process in bytes, from /proc/<pid>/status.
pub fn resident_bytes_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_resident_kibibytes(&status).map(|kibibytes| kibibytes * 1024)
}

pub fn parse_resident_kibibytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Files and bytes under a directory (recursive, depth-bounded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectoryUsage {
    pub files: u64,
    pub size_bytes: u64,
}

/// Deepest directory level visited; RocksDB's layout is flat, so this is generous.
const DIRECTORY_DEPTH_LIMIT: usize = 16;

pub fn directory_usage(root: &Path) -> BenchResult<DirectoryUsage> {
    let mut usage = DirectoryUsage::default();
    let mut pending = vec![(root.to_path_buf(), 0usize)];
    while let Some((directory, depth)) = pending.pop() {
        let entries = match std::fs::read_dir(&directory) {
            Ok(entries) => entries,
            // Files come and go while RocksDB compacts; a vanished directory is not an error.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && depth > 0 => continue,
            Err(error) => return Err(BenchError::io(format!("listing {}", directory.display()), error)),
        };
        for entry in entries.flatten() {
            let Ok(metadata) = entry.metadata() else { continue };
            if metadata.is_dir() {
                if depth < DIRECTORY_DEPTH_LIMIT {
                    pending.push((entry.path(), depth + 1));
                }
            } else {
                usage.files += 1;
                usage.size_bytes += metadata.len();
            }
        }
    }
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_port_from_the_listening_line() {
        let line = r#"{"t":{"$date":"2024-01-01T00:00:00.000Z"},"s":"I","c":"NETWORK","id":23016,"ctx":"listener","msg":"Waiting for connections","attr":{"port":40123,"ssl":"off"}}"#;
        assert_eq!(listening_port(line), Some(40123));
        assert_eq!(listening_port(r#"{"msg":"Waiting for connections","attr":{"port":0}}"#), None);
        assert_eq!(listening_port(r#"{"msg":"Build Info","attr":{"port":5}}"#), None);
        assert_eq!(listening_port("Waiting for connections on 5"), None);
        assert_eq!(listening_port(r#"{"msg":"Waiting for connections","attr":{"port":70000}}"#), None);
    }

    #[test]
    fn parses_vmrss() {
        let status = "Name:\tmyriad\nVmPeak:\t  100 kB\nVmRSS:\t   2048 kB\nThreads:\t4\n";
        assert_eq!(parse_resident_kibibytes(status), Some(2048));
        assert_eq!(parse_resident_kibibytes("Name:\tx\n"), None);
        assert!(resident_bytes_of(std::process::id()).is_some_and(|bytes| bytes > 0));
    }

    #[test]
    fn a_missing_server_binary_is_a_clear_error() {
        let message = locate_server_binary(Some(Path::new("/nonexistent/myriad"))).map_err(|error| error.to_string());
        assert!(message.as_ref().is_err_and(|text| text.contains("/nonexistent/myriad")), "{message:?}");
    }

    #[test]
    fn sums_files_recursively() {
        let directory = tempfile::tempdir().map_err(|error| error.to_string());
        let Ok(directory) = directory else { panic!("cannot make a temporary directory") };
        let nested = directory.path().join("nested");
        std::fs::create_dir(&nested).map_err(|error| error.to_string()).ok();
        std::fs::write(directory.path().join("a"), [0u8; 10]).ok();
        std::fs::write(nested.join("b"), [0u8; 5]).ok();
        let usage = directory_usage(directory.path()).map_err(|error| error.to_string());
        assert_eq!(usage, Ok(DirectoryUsage { files: 2, size_bytes: 15 }));
    }
}
