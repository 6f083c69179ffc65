//! The commit pipeline as a replication log: every write of a primary engine goes through a
//! replicator, which orders them in one log and applies each on the primary and on a follower
//! engine through `Engine::apply_replicated`. The follower must end up with the primary's
//! catalog, documents, indexes and counters, from the log alone.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use bson::{doc, Bson, Document};
use myriad_storage::{Durability, Engine, EngineOptions, ReplicatedWrite, StorageError, WriteReplicator};

const MARKER_KEY: &[u8] = b"Rtest-applied";

/// Orders writes in a log; applies each on the primary (its writer waits) and, on an applier
/// thread of its own (as a member's state machine runs), on the follower.
struct LogReplicator {
    primary: OnceLock<Weak<Engine>>,
    follower: Mutex<Option<std::sync::mpsc::Sender<(ReplicatedWrite, [u8; 8], std::sync::mpsc::Sender<Result<(), StorageError>>)>>>,
    log: Mutex<Vec<ReplicatedWrite>>,
    /// When set, writes are logged but the primary's writer is told it lost its role.
    failing: std::sync::atomic::AtomicBool,
}

impl WriteReplicator for LogReplicator {
    fn replicate(&self, write: ReplicatedWrite) -> Result<(), StorageError> {
        let mut log = self.log.lock().unwrap();
        log.push(write.clone());
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StorageError::Replication {
                code: 11602,
                code_name: "InterruptedDueToReplStateChange",
                message: "stepped down".into(),
            });
        }
        let position = (log.len() as u64).to_be_bytes();
        let primary = self.primary.get().and_then(Weak::upgrade).expect("the primary is open");
        primary.apply_replicated(&write, (MARKER_KEY, &position), None)?;
        let (applied, wait) = std::sync::mpsc::channel();
        let follower = self.follower.lock().unwrap();
        follower.as_ref().expect("the follower's applier runs").send((write, position, applied)).expect("the follower's applier runs");
        drop(follower);
        wait.recv().expect("the follower's applier answers")
    }
}

fn options() -> EngineOptions {
    EngineOptions { block_cache_size_bytes: 8 << 20, lock_stripes: 64, ..EngineOptions::default() }
}

/// Stops the follower's applier thread (closing its channel) and waits for it, so its engine
/// is closed before the test ends, never while the process exits.
struct Applier {
    replicator: Arc<LogReplicator>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Applier {
    fn drop(&mut self) {
        self.replicator.follower.lock().unwrap().take();
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the applier thread ends cleanly");
        }
    }
}

fn replicated_pair(directory: &tempfile::TempDir) -> (Arc<Engine>, Arc<Engine>, Arc<LogReplicator>, Applier) {
    let primary = Arc::new(Engine::open(&directory.path().join("primary"), &options()).unwrap());
    let follower = Arc::new(Engine::open(&directory.path().join("follower"), &options()).unwrap());
    assert_eq!(primary.family_fingerprint().unwrap(), follower.family_fingerprint().unwrap());
    let (sender, receiver) = std::sync::mpsc::channel::<(ReplicatedWrite, [u8; 8], std::sync::mpsc::Sender<_>)>();
    let applying = Arc::clone(&follower);
    let thread = std::thread::spawn(move || {
        for (write, position, applied) in receiver {
            let _ = applied.send(applying.apply_replicated(&write, (MARKER_KEY, &position), None));
        }
    });
    let replicator = Arc::new(LogReplicator {
        primary: OnceLock::new(),
        follower: Mutex::new(Some(sender)),
        log: Mutex::new(Vec::new()),
        failing: Default::default(),
    });
    replicator.primary.set(Arc::downgrade(&primary)).ok().unwrap();
    primary.set_replicator(Some(replicator.clone()));
    let applier = Applier { replicator: Arc::clone(&replicator), thread: Some(thread) };
    (primary, follower, replicator, applier)
}

fn insert(engine: &Engine, collection: &str, document: Document) -> Result<(), StorageError> {
    let handle = engine.collection("db", collection)?.expect("collection exists");
    let mut write = engine.begin_write(&handle);
    write.insert(&document)?;
    write.commit(Durability::Default)
}

fn count(engine: &Engine, collection: &str) -> i64 {
    let handle = engine.collection("db", collection).unwrap().expect("collection exists");
    engine.collection_stats(&handle).unwrap().count
}

#[test]
fn a_follower_applying_the_log_holds_what_the_primary_holds() {
    let directory = tempfile::tempdir().unwrap();
    let (primary, follower, replicator, _applier) = replicated_pair(&directory);
    primary.create_collection("db", "shared", Document::new()).unwrap();
    primary.create_indexes("db", "shared", vec![doc! {"key": {"owner": 1, "sequence": 1}, "name": "owner_sequence", "unique": true}]).unwrap();
    for thread in 0..4 {
        primary.create_collection("db", &format!("own{thread}"), Document::new()).unwrap();
    }
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let primary = Arc::clone(&primary);
            std::thread::spawn(move || {
                for sequence in 0..200 {
                    insert(&primary, "shared", doc! {"_id": format!("{thread}-{sequence}"), "owner": thread, "sequence": sequence}).unwrap();
                    insert(&primary, &format!("own{thread}"), doc! {"_id": sequence, "thread": thread}).unwrap();
                    // A duplicate of the unique index is refused on the primary and never logged.
                    let duplicate = insert(&primary, "shared", doc! {"_id": format!("dup{thread}-{sequence}"), "owner": thread, "sequence": sequence});
                    assert!(matches!(duplicate, Err(StorageError::DuplicateKey { .. })), "{duplicate:?}");
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|thread| thread.join().unwrap());
    primary.drop_collection("db", "own3").unwrap();

    assert_eq!(count(&follower, "shared"), 800);
    assert_eq!(count(&primary, "shared"), 800);
    for thread in 0..3 {
        assert_eq!(count(&follower, &format!("own{thread}")), 200);
    }
    assert!(follower.collection("db", "own3").unwrap().is_none());
    let shared = follower.collection("db", "shared").unwrap().unwrap();
    let stats = follower.collection_stats(&shared).unwrap();
    assert_eq!(stats, primary.collection_stats(&primary.collection("db", "shared").unwrap().unwrap()).unwrap());
    assert_eq!(stats.index_entries.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(), ["_id_", "owner_sequence"]);
    let found = follower.find_by_id(&shared, &Bson::String("2-150".into())).unwrap().expect("replicated document");
    assert_eq!(found.1.get_i32("sequence").unwrap(), 150);
    // Every logged write reached the follower once, with its position.
    let applied = follower.read_replication_state(MARKER_KEY).unwrap().unwrap();
    assert_eq!(u64::from_be_bytes(applied.try_into().unwrap()) as usize, replicator.log.lock().unwrap().len());
}

#[test]
fn a_write_its_writer_stopped_waiting_for_is_applied_whole_later() {
    let directory = tempfile::tempdir().unwrap();
    let (primary, _follower, replicator, _applier) = replicated_pair(&directory);
    primary.create_collection("db", "c", Document::new()).unwrap();
    insert(&primary, "c", doc! {"_id": 1}).unwrap();
    replicator.failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let refused = insert(&primary, "c", doc! {"_id": 2});
    assert!(matches!(refused, Err(StorageError::Replication { code: 11602, .. })), "{refused:?}");
    assert_eq!(count(&primary, "c"), 1);
    replicator.failing.store(false, std::sync::atomic::Ordering::SeqCst);
    // The write committed after all (a new primary applied it): this member applies it as a
    // follower would, record-id counter included, so its next insert takes a fresh record id.
    let pending = replicator.log.lock().unwrap().last().cloned().unwrap();
    primary.apply_replicated(&pending, (MARKER_KEY, b"late"), None).unwrap();
    assert_eq!(count(&primary, "c"), 2);
    insert(&primary, "c", doc! {"_id": 3}).unwrap();
    assert_eq!(count(&primary, "c"), 3);
    let handle = primary.collection("db", "c").unwrap().unwrap();
    for id in 1..=3 {
        assert!(primary.find_by_id(&handle, &Bson::Int32(id)).unwrap().is_some(), "document {id}");
    }
}

#[test]
fn a_member_with_other_family_ids_refuses_the_log() {
    let directory = tempfile::tempdir().unwrap();
    let engine = Engine::open(directory.path(), &options()).unwrap();
    let write = ReplicatedWrite {
        families: engine.family_fingerprint().unwrap() ^ 1,
        proposal: 0,
        wall_time_ms: 0,
        not_before: 0,
        batch: rocksdb_free_empty_batch(),
        effects: Vec::new(),
        operations: Vec::new(),
    };
    let refused = engine.apply_replicated(&write, (MARKER_KEY, b"x"), None);
    assert!(matches!(refused, Err(StorageError::Corrupt(ref message)) if message.contains("column families")), "{refused:?}");
}

/// An empty WriteBatch's bytes: a 12-byte header of zeros.
fn rocksdb_free_empty_batch() -> Vec<u8> {
    vec![0; 12]
}
