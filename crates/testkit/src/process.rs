//! One `myriad` process: started with its arguments on a free loopback port, ready once it
//! answers `hello` (a TLS listener: once it says it listens), its log drained and its last
//! lines kept, killed on drop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bson::doc;
use myriad_wire::{encode_op_msg, OpMsg, HEADER_SIZE_BYTES};

/// How long a process may take to listen and answer its first `hello`.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Log lines kept per process (the oldest go first).
const KEPT_LOG_LINES: usize = 100_000;

/// The `myriad` binary: `MYRIAD_BIN`, else the one next to the test executable
/// (`target/<profile>/deps/<test>` -> `target/<profile>/myriad`).
pub fn binary() -> PathBuf {
    if let Some(explicit) = std::env::var_os("MYRIAD_BIN") {
        return PathBuf::from(explicit);
    }
    let executable = std::env::current_exe().expect("the test executable's path");
    let profile_directory = executable.parent().and_then(|deps| deps.parent()).expect("the test executable lives in target/<profile>/deps");
    profile_directory.join("myriad")
}

/// Runs `myriad <arguments>` expecting it to stop during start-up (a bad flag, file or
/// option): its exit code and its stderr.
pub fn start_up_failure(arguments: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(binary()).args(arguments).stdout(Stdio::null()).stdin(Stdio::null()).output().expect("run myriad");
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

pub struct MyriadProcess {
    child: Option<Child>,
    /// The port it listens on (kept across restarts).
    pub port: u16,
    arguments: Vec<String>,
    environment: Vec<(String, String)>,
    log: Arc<Mutex<Vec<String>>>,
}

impl MyriadProcess {
    /// Starts `myriad <arguments> --port <port> --bind_ip 127.0.0.1` (port 0: a free one) and
    /// waits until it answers `hello`.
    pub fn start(arguments: Vec<String>, environment: Vec<(String, String)>, port: u16) -> MyriadProcess {
        let mut process = MyriadProcess { child: None, port, arguments, environment, log: Arc::default() };
        process.launch();
        process
    }

    fn launch(&mut self) {
        let started = Instant::now();
        let mut child = Command::new(binary())
            .args(&self.arguments)
            .args(["--port", &self.port.to_string(), "--bind_ip", "127.0.0.1"])
            .envs(self.environment.iter().map(|(name, value)| (name, value)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start myriad");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (sender, receiver) = mpsc::channel();
        let log = Arc::clone(&self.log);
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent && line.contains("Waiting for connections") {
                    let parsed: serde_json::Value = serde_json::from_str(&line).expect("log lines are JSON");
                    let port = parsed["attr"]["port"].as_u64().expect("port attribute") as u16;
                    let _ = sender.send((port, parsed["attr"]["ssl"] == "on"));
                    sent = true;
                }
                if std::env::var_os("MYRIAD_TEST_LOG").is_some() {
                    eprintln!("{line}");
                }
                if let Ok(mut lines) = log.lock() {
                    if lines.len() == KEPT_LOG_LINES {
                        lines.remove(0);
                    }
                    lines.push(line);
                }
            }
        });
        let (port, tls) = receiver.recv_timeout(STARTUP_TIMEOUT).expect("myriad did not start listening");
        self.port = port;
        self.child = Some(child);
        // A TLS listener (flags or config file) is taken at its word: a plain hello may be
        // refused there by design.
        if !tls {
            let remaining = STARTUP_TIMEOUT.saturating_sub(started.elapsed());
            answers_hello(self.port, remaining).unwrap_or_else(|reason| panic!("myriad on port {} does not answer hello: {reason}", self.port));
        }
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Log lines containing `text`.
    pub fn log_lines(&self, text: &str) -> Vec<String> {
        self.log.lock().map(|lines| lines.iter().filter(|line| line.contains(text)).cloned().collect()).unwrap_or_default()
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: no shutdown work at all, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits for the exit; its status code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions; the child
        // is not reaped yet, so the pid is still ours.
        unsafe {
            libc_kill(child.id() as i32, 15);
        }
        child.wait().ok()?.code()
    }

    /// Kills and starts it again on the same port, arguments and data.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }
}

impl Drop for MyriadProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

extern "C" {
    #[link_name = "kill"]
    pub(crate) fn libc_kill(pid: i32, signal: i32) -> i32;
}

/// Connects and sends `hello` as an OP_MSG until a reply comes, within `limit`.
fn answers_hello(port: u16, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let mut last_error = String::from("no attempt");
    while Instant::now() < deadline {
        match exchange_hello(port) {
            Ok(()) => return Ok(()),
            Err(error) => last_error = error,
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(last_error)
}

fn exchange_hello(port: u16) -> Result<(), String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|error| error.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).map_err(|error| error.to_string())?;
    let message = OpMsg { flags: 0, body: doc! { "hello": 1, "$db": "admin" }, sequences: Vec::new(), checksum_present: false, duplicate_fields: Default::default() };
    let encoded = encode_op_msg(1, 0, &message, None).map_err(|error| error.to_string())?;
    stream.write_all(&encoded).map_err(|error| error.to_string())?;
    let mut header = [0u8; HEADER_SIZE_BYTES];
    stream.read_exact(&mut header).map_err(|error| error.to_string())?;
    let length = i32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let mut rest = vec![0u8; usize::try_from(length).map_err(|_| "a negative length".to_string())?.saturating_sub(HEADER_SIZE_BYTES)];
    stream.read_exact(&mut rest).map_err(|error| error.to_string())?;
    Ok(())
}
