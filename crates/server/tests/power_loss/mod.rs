//! Simulated power loss for crash tests.
//!
//! `kill -9` leaves the operating system's page cache intact: every byte the server wrote is
//! still there after the restart, synced or not. To model a power cut instead, the server runs
//! with `shim.c` preloaded (LD_PRELOAD), which logs what each successful fsync, fdatasync, sync
//! and syncfs made durable. After the kill, [`cut_to_durable`] replays that log and changes the
//! data directory to what the disk would hold after the cut:
//!
//! - File contents: a regular file keeps the bytes it had when it was last synced (its size
//!   just before the last successful fsync/fdatasync of that same inode), the rest is cut off.
//!   Files are appended to, never rewritten in place (true of RocksDB), so cutting to a length
//!   is the whole model; bytes appended after the last sync are lost entirely, never torn.
//! - Names: a file never synced loses all of its contents; it keeps a (now empty) name if its
//!   directory was fsynced while it existed, and is deleted otherwise. Renames are kept as
//!   performed (the renamed file keeps what was synced under its old name), as are deletions.
//!   A synced file keeps its name, as fsync on ext4 and XFS commits the new entry with it.
//! - `sync_file_range` makes nothing durable: it writes no metadata and guarantees nothing.
//!
//! Directories themselves are never removed. What is left after a cut is what the disk holds,
//! so it is appended to the log as durable: several power losses can follow one another.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variable naming the shim's log file.
pub const LOG_VARIABLE: &str = "POWER_LOSS_LOG";

/// The compiled shim and its log, in a temporary directory of their own.
pub struct Shim {
    directory: tempfile::TempDir,
}

impl Shim {
    /// Compiles `shim.c` with the system C compiler (`cc`, from build-essential).
    pub fn build() -> Shim {
        let directory = tempfile::tempdir().expect("temp dir for the shim");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/power_loss/shim.c");
        let output = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
            .arg(directory.path().join("libpowerloss.so"))
            .arg(&source)
            .arg("-ldl")
            .output()
            .expect("run cc (build-essential) to compile the power-loss shim");
        assert!(output.status.success(), "compiling {} failed:\n{}", source.display(), String::from_utf8_lossy(&output.stderr));
        Shim { directory }
    }

    pub fn library_path(&self) -> PathBuf {
        self.directory.path().join("libpowerloss.so")
    }

    pub fn log_path(&self) -> PathBuf {
        self.directory.path().join("durable.log")
    }

    /// The server environment that preloads the shim: (name, value) pairs.
    pub fn environment(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".to_string(), self.library_path().display().to_string()),
            (LOG_VARIABLE.to_string(), self.log_path().display().to_string()),
        ]
    }
}

/// A file as of one sync: which inode the path named, and how many of its bytes were durable.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct SyncedFile {
    device: u64,
    inode: u64,
    size: u64,
}

/// What the log says is durable.
#[derive(Default)]
struct DurableState {
    /// Per path, the file as of its last sync (moved along by renames).
    files: HashMap<PathBuf, SyncedFile>,
    /// Per directory, the (path, device, inode) of each regular file it held at its last fsync.
    directory_entries: HashMap<PathBuf, HashSet<(PathBuf, u64, u64)>>,
}

fn number(field: Option<&str>, line: &str) -> u64 {
    field.and_then(|text| text.parse().ok()).unwrap_or_else(|| panic!("malformed power-loss log line: {line:?}"))
}

fn replay(log: &str) -> DurableState {
    let mut state = DurableState::default();
    let mut current_directory: Option<PathBuf> = None;
    for line in log.lines() {
        let mut fields = line.split('\t');
        match fields.next() {
            Some("file") => {
                let (device, inode, size) = (number(fields.next(), line), number(fields.next(), line), number(fields.next(), line));
                let path = PathBuf::from(fields.next().expect("file path"));
                state.files.insert(path, SyncedFile { device, inode, size });
            }
            Some("directory") => {
                let path = PathBuf::from(fields.nth(2).expect("directory path"));
                state.directory_entries.insert(path.clone(), HashSet::new());
                current_directory = Some(path);
            }
            Some("entry") => {
                let (device, inode) = (number(fields.next(), line), number(fields.next(), line));
                let path = PathBuf::from(fields.next().expect("entry path"));
                let directory = current_directory.as_ref().expect("entry lines follow their directory line");
                state.directory_entries.get_mut(directory).expect("listed directory").insert((path, device, inode));
            }
            Some("rename") => {
                let old_path = PathBuf::from(fields.next().expect("old path"));
                let new_path = PathBuf::from(fields.next().expect("new path"));
                match state.files.remove(&old_path) {
                    Some(synced) => state.files.insert(new_path, synced),
                    None => state.files.remove(&new_path),
                };
            }
            Some("range") => {}
            _ => panic!("unknown power-loss log line: {line:?}"),
        }
    }
    state
}

/// What [`cut_to_durable`] changed.
#[derive(Default, Debug)]
pub struct Outcome {
    /// (file, length before, length after) of every file that lost bytes.
    pub truncated: Vec<(PathBuf, u64, u64)>,
    /// Files deleted: never synced, created after their directory's last fsync.
    pub deleted: Vec<PathBuf>,
    /// Files left as they were.
    pub unchanged: usize,
}

impl Outcome {
    pub fn bytes_lost_from(&self, suffix: &str) -> u64 {
        self.truncated
            .iter()
            .filter(|(path, _, _)| path.to_string_lossy().ends_with(suffix))
            .map(|(_, before, after)| before - after)
            .sum()
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(formatter, "power loss: {} files unchanged", self.unchanged)?;
        for (path, before, after) in &self.truncated {
            writeln!(formatter, "  cut {} from {before} to {after} bytes", path.display())?;
        }
        for path in &self.deleted {
            writeln!(formatter, "  deleted {}", path.display())?;
        }
        Ok(())
    }
}

/// The directories under `root` (itself included) and the regular files in them.
fn directories_and_files(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut directories = Vec::new();
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        directories.push(directory.clone());
        for entry in std::fs::read_dir(&directory).expect("read data directory") {
            let entry = entry.expect("directory entry");
            let file_type = entry.file_type().expect("file type");
            if file_type.is_dir() {
                pending.push(entry.path());
            } else if file_type.is_file() {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    (directories, files)
}

/// Appends the current state of `root` to the log as durable: every directory with its
/// entries, every file with its size (the lines a sync() would have produced).
fn record_as_durable(root: &Path, log_path: &Path) {
    let (directories, _) = directories_and_files(root);
    let mut lines = String::new();
    for directory in directories {
        let metadata = std::fs::metadata(&directory).expect("directory metadata");
        lines.push_str(&format!("directory\t{}\t{}\t{}\n", metadata.dev(), metadata.ino(), directory.display()));
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&directory).expect("read directory") {
            let entry = entry.expect("directory entry");
            let metadata = entry.metadata().expect("entry metadata");
            if metadata.is_file() {
                lines.push_str(&format!("entry\t{}\t{}\t{}\n", metadata.dev(), metadata.ino(), entry.path().display()));
                files.push((entry.path(), metadata));
            }
        }
        for (path, metadata) in files {
            lines.push_str(&format!("file\t{}\t{}\t{}\t{}\n", metadata.dev(), metadata.ino(), metadata.len(), path.display()));
        }
    }
    let mut log = std::fs::OpenOptions::new().append(true).create(true).open(log_path).expect("open power-loss log");
    std::io::Write::write_all(&mut log, lines.as_bytes()).expect("append to power-loss log");
}

/// Cuts every file under `data_directory` back to what the shim's log at `log_path` says was
/// durable (see the module documentation). The server must no longer be running.
pub fn cut_to_durable(data_directory: &Path, log_path: &Path) -> Outcome {
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    let state = replay(&log);
    let root = data_directory.canonicalize().expect("canonical data directory");
    let mut outcome = Outcome::default();
    for path in directories_and_files(&root).1 {
        let metadata = std::fs::symlink_metadata(&path).expect("file metadata");
        let (device, inode, length) = (metadata.dev(), metadata.ino(), metadata.len());
        let durable_length = match state.files.get(&path) {
            Some(synced) if synced.device == device && synced.inode == inode => Some(synced.size.min(length)),
            _ => {
                let parent = path.parent().expect("file has a directory").to_path_buf();
                let listed = state.directory_entries.get(&parent).is_some_and(|entries| entries.contains(&(path.clone(), device, inode)));
                listed.then_some(0)
            }
        };
        match durable_length {
            Some(durable) if durable == length => outcome.unchanged += 1,
            Some(durable) => {
                let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open file to cut");
                file.set_len(durable).expect("cut file");
                file.sync_all().expect("sync cut file");
                outcome.truncated.push((path, length, durable));
            }
            None => {
                std::fs::remove_file(&path).expect("delete never-synced file");
                outcome.deleted.push(path);
            }
        }
    }
    record_as_durable(&root, log_path);
    outcome
}
