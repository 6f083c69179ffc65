//! What must not outlive the benchmark if it is interrupted: server children and temporary
//! data directories. Guards clean up on drop, but a SIGINT/SIGTERM ends the process without
//! running destructors, so a watcher task kills the tracked children and removes the tracked
//! directories first.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use std::sync::Mutex;

/// A list behind a `std::sync::Mutex`; a poisoned lock is recovered, since the items are plain
/// ids and paths that no panic can leave half-written.
struct Registry<T>(Mutex<Vec<T>>);

impl<T: PartialEq> Registry<T> {
    const fn new() -> Self {
        Registry(Mutex::new(Vec::new()))
    }

    fn add(&self, item: T) {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(item);
    }

    fn remove(&self, item: &T) {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).retain(|existing| existing != item);
    }

    fn take_all(&self) -> Vec<T> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

static CHILDREN: Registry<u32> = Registry::new();
static DIRECTORIES: Registry<PathBuf> = Registry::new();

pub fn track_child(pid: u32) {
    CHILDREN.add(pid);
}

/// Call once the child is killed or exited, before it is reaped where possible, so the id
/// cannot have been reused by then.
pub fn forget_child(pid: u32) {
    CHILDREN.remove(&pid);
}

pub fn track_directory(path: &Path) {
    DIRECTORIES.add(path.to_path_buf());
}

pub fn forget_directory(path: &Path) {
    DIRECTORIES.remove(&path.to_path_buf());
}

/// Kills every tracked child (SIGKILL) and removes every tracked directory.
pub fn clean_up_now() {
    for pid in CHILDREN.take_all() {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    for directory in DIRECTORIES.take_all() {
        let _ = std::fs::remove_dir_all(&directory);
    }
}

/// On SIGINT or SIGTERM: clean up, then exit with 128 + the signal number.
/// A multi-threaded runtime whose threads are named `thread_name`, with the signal watcher
/// running on it (so an interrupted benchmark still stops what it started).
pub fn watched_runtime(thread_name: &str) -> crate::error::BenchResult<tokio::runtime::Runtime> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(thread_name)
        .build()
        .map_err(|error| crate::error::BenchError::io("starting the async runtime", error))?;
    spawn_signal_watcher(&runtime);
    Ok(runtime)
}

pub fn spawn_signal_watcher(runtime: &tokio::runtime::Runtime) {
    runtime.spawn(async {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut interrupt), Ok(mut terminate)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
        else {
            return;
        };
        let code = tokio::select! {
            _ = interrupt.recv() => 130,
            _ = terminate.recv() => 143,
        };
        eprintln!("myriad-bench: interrupted; stopping the server and removing its data");
        clean_up_now();
        std::process::exit(code);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_add_remove_and_drain() {
        let registry: Registry<u32> = Registry::new();
        registry.add(1);
        registry.add(2);
        registry.remove(&1);
        assert_eq!(registry.take_all(), vec![2]);
        assert!(registry.take_all().is_empty());
    }
}
