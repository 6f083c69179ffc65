//! The child processes of a local launcher (`myriad cluster`, `myriad replset`): spawned from
//! the same executable with their log under `DIR/logs`, pinged until they answer, watched
//! while they run, and stopped with SIGTERM (SIGKILL after [`STOP_TIMEOUT`]).
//!
//! Invariants: every child spawned is held by a [`Member`] until [`stop_all`] stops it; a
//! member that exits on its own ends the wait (start-up or watch) with an error naming it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bson::doc;

use crate::client::NodeClient;

/// How long a member may take to answer after it started.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a member may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often children are checked while the launcher runs.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// How the children of one launcher are started: the executable, where their logs go, the
/// address they bind, and the arguments every child gets after its own.
pub struct Spawner {
    /// The `myriad` executable the members run.
    pub executable: PathBuf,
    /// `DIR/logs/<name>.log` for each member.
    pub logs_directory: PathBuf,
    pub bind_ip: String,
    /// Arguments for every member (`--keyFile`, the TLS flags).
    pub common_arguments: Vec<String>,
}

impl Spawner {
    /// Starts `executable arguments... --bind_ip B --logpath DIR/logs/NAME.log --logappend
    /// common...`.
    pub fn spawn(&self, name: &str, arguments: &[String]) -> Result<Member, String> {
        let log = path_argument(&self.logs_directory.join(format!("{name}.log")));
        let child = Command::new(&self.executable)
            .args(arguments)
            .args(["--bind_ip", &self.bind_ip, "--logpath", &log, "--logappend"])
            .args(&self.common_arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|error| format!("cannot start {name}: {error}"))?;
        Ok(Member { name: name.to_string(), child })
    }
}

/// One running member.
pub struct Member {
    pub name: String,
    child: Child,
}

impl Member {
    /// SIGTERM (a clean shutdown that flushes storage), SIGKILL after [`STOP_TIMEOUT`].
    pub fn stop(mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions; the pid is
        // still ours (the child was not waited for yet).
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("myriad: {} did not stop in time and was killed", self.name);
    }
}

/// `count` distinct ports nothing listens on now (all held open while chosen).
pub fn free_ports(count: usize, bind_ip: &str) -> Result<Vec<u16>, String> {
    let listeners = (0..count).map(|_| TcpListener::bind((bind_ip, 0))).collect::<Result<Vec<_>, _>>().map_err(|error| format!("cannot find a free port: {error}"))?;
    listeners.iter().map(|listener| listener.local_addr().map(|address| address.port()).map_err(|error| error.to_string())).collect()
}

/// `base + offset` (`--port P`: member ports follow P).
pub fn offset_port(base: u16, offset: usize) -> Result<u16, String> {
    u16::try_from(usize::from(base) + offset).map_err(|_| "ports past 65535".to_string())
}

pub fn path_argument(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// An error as soon as any member has exited.
pub fn check_running(members: &mut [Member], while_doing: &str) -> Result<(), String> {
    for member in members.iter_mut() {
        if let Ok(Some(status)) = member.child.try_wait() {
            return Err(format!("{} exited ({status}){while_doing}; see its log", member.name));
        }
    }
    Ok(())
}

/// Pings until the member answers (an error as soon as any member exited).
pub async fn wait_until_ready(address: &str, members: &mut [Member]) -> Result<(), String> {
    let client = NodeClient::with_timeout(address, Duration::from_secs(5));
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        check_running(members, " while starting")?;
        match client.run("admin", doc! { "ping": 1 }).await {
            Ok(_) => return Ok(()),
            Err(error) if Instant::now() >= deadline => return Err(format!("{address} did not start: {error}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// SIGINT and SIGTERM, caught from the moment this is made (before the members start), so a
/// signal during start-up still stops every member cleanly once start-up ends.
pub struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Call inside the launcher's runtime.
    pub fn catch() -> Result<StopSignals, String> {
        use tokio::signal::unix::{signal, SignalKind};
        let interrupt = signal(SignalKind::interrupt()).map_err(|error| format!("cannot catch SIGINT: {error}"))?;
        let terminate = signal(SignalKind::terminate()).map_err(|error| format!("cannot catch SIGTERM: {error}"))?;
        Ok(StopSignals { interrupt, terminate })
    }
}

/// Waits for SIGINT or SIGTERM, or for a member to exit on its own (an error).
pub async fn watch(members: &mut [Member], signals: &mut StopSignals) -> Result<(), String> {
    let mut interval = tokio::time::interval(WATCH_INTERVAL);
    loop {
        tokio::select! {
            _ = signals.interrupt.recv() => return Ok(()),
            _ = signals.terminate.recv() => return Ok(()),
            _ = interval.tick() => check_running(members, "")?,
        }
    }
}

/// Stops the members in the reverse of their start order.
pub fn stop_all(members: Vec<Member>) {
    for member in members.into_iter().rev() {
        member.stop();
    }
}
