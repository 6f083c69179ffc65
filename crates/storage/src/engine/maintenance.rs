//! Maintenance: compaction, memtable flushes and WAL syncs (the journal's progress).

use rocksdb::{BottommostLevelCompaction, CompactOptions, FlushOptions};

use crate::families::COLUMN_FAMILIES;
use crate::StorageError;

use super::Engine;

impl Engine {
    /// Compacts every column family fully, so dropped ranges give their space back.
    pub fn compact(&self) -> Result<(), StorageError> {
        let mut compact_options = CompactOptions::default();
        compact_options.set_bottommost_level_compaction(BottommostLevelCompaction::ForceOptimized);
        for name in COLUMN_FAMILIES {
            self.db.compact_range_cf_opt(self.family(name)?, None::<&[u8]>, None::<&[u8]>, &compact_options);
        }
        Ok(())
    }

    /// Flushes every memtable to SST files and syncs the WAL.
    pub fn flush(&self) -> Result<(), StorageError> {
        let mut flush_options = FlushOptions::default();
        flush_options.set_wait(true);
        for name in COLUMN_FAMILIES {
            self.db.flush_cf_opt(self.family(name)?, &flush_options)?;
        }
        self.journal.sync_wal_unless_a_write_failed(&self.db)
    }

    /// Makes every earlier commit durable: waits for a WAL sync covering it, shared with
    /// concurrent journaled writes (`journal.rs`).
    pub fn sync_wal(&self) -> Result<(), StorageError> {
        self.journal.sync_published(&self.db)
    }

    /// For a wait deferred by [`crate::defer_journal_waits`]: whether a WAL sync covers
    /// `sequence`, is running, or must be led.
    pub fn journal_progress(&self, sequence: u64) -> crate::JournalProgress {
        self.journal.progress(sequence)
    }

    /// Blocks until a WAL sync covers `sequence` (a published sequence number), leading one
    /// if none runs.
    pub fn sync_journal_through(&self, sequence: u64) -> Result<(), StorageError> {
        self.journal.sync_through(&self.db, sequence)
    }
}
