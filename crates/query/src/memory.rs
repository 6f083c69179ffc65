//! A simple memory budget for blocking stages: MongoDB fails `$group`/`$sort` over 100 MiB
//! without `allowDiskUse`, with code 292; with it, they spill to disk instead. The approximate
//! sizes it charges also bound what a filter keeps (`crate::filter`) and what callers buffer.
//! (Re-exported as `crate::aggregate::memory`.)

use bson::Bson;

use crate::error::{QueryError, QueryResult};

/// MongoDB's default per-stage limit.
pub const STAGE_MEMORY_LIMIT_BYTES: u64 = 100 * 1024 * 1024;

/// Approximate in-memory size of a value (close to its BSON size).
pub fn approximate_size_bytes(value: &Bson) -> u64 {
    approximate_size_bytes_bounded(value, 0)
}

/// Approximate size of a document (close to its BSON size).
pub fn approximate_document_size_bytes(document: &bson::Document) -> u64 {
    approximate_document_size_bytes_bounded(document, 0)
}

/// `depth` counts enclosing containers; past the BSON depth limit (which no document reaching
/// here exceeds) values count as 8 bytes instead of being descended into.
fn approximate_size_bytes_bounded(value: &Bson, depth: usize) -> u64 {
    if depth > crate::limits::MAX_BSON_DEPTH {
        return 8;
    }
    match value {
        Bson::String(text) | Bson::Symbol(text) | Bson::JavaScriptCode(text) => 5 + text.len() as u64,
        Bson::Document(document) => approximate_document_size_bytes_bounded(document, depth + 1),
        Bson::Array(items) => 5 + items.iter().map(|value| 4 + approximate_size_bytes_bounded(value, depth + 1)).sum::<u64>(),
        Bson::Binary(binary) => 5 + binary.bytes.len() as u64,
        Bson::RegularExpression(regex) => 2 + regex.pattern.len() as u64 + regex.options.len() as u64,
        Bson::JavaScriptCodeWithScope(code) => {
            10 + code.code.len() as u64 + approximate_document_size_bytes_bounded(&code.scope, depth + 1)
        }
        Bson::Decimal128(_) => 16,
        Bson::ObjectId(_) => 12,
        _ => 8,
    }
}

fn approximate_document_size_bytes_bounded(document: &bson::Document, depth: usize) -> u64 {
    5 + document.iter().map(|(key, value)| 2 + key.len() as u64 + approximate_size_bytes_bounded(value, depth)).sum::<u64>()
}

/// Bytes charged by one stage so far.
#[derive(Debug)]
pub struct MemoryBudget {
    used_bytes: u64,
    limit_bytes: u64,
    /// The stage spills past the limit instead of failing: charges always succeed, and the
    /// stage asks [`MemoryBudget::exceeded`] after each document.
    spills: bool,
}

impl MemoryBudget {
    /// A budget whose charges fail with 292 before going past `limit_bytes`.
    pub fn new(limit_bytes: u64) -> MemoryBudget {
        MemoryBudget { used_bytes: 0, limit_bytes, spills: false }
    }

    /// A budget for a stage that spills to disk when it is exceeded.
    pub fn spilling(limit_bytes: u64) -> MemoryBudget {
        MemoryBudget { used_bytes: 0, limit_bytes, spills: true }
    }

    pub fn charge(&mut self, bytes: u64, stage: &str) -> QueryResult<()> {
        let used_bytes = self.used_bytes.saturating_add(bytes);
        if used_bytes > self.limit_bytes && !self.spills {
            return Err(QueryError::QueryExceededMemoryLimitNoDiskUseAllowed(format!(
                "Exceeded memory limit for {stage}, but didn't allow external sort. Pass allowDiskUse:true to opt in."
            )));
        }
        self.used_bytes = used_bytes;
        Ok(())
    }

    pub fn release(&mut self, bytes: u64) {
        self.used_bytes = self.used_bytes.saturating_sub(bytes);
    }

    /// True when a spilling stage holds more than its limit and should spill.
    pub fn exceeded(&self) -> bool {
        self.spills && self.used_bytes > self.limit_bytes
    }

    /// Everything charged was released (the stage spilled).
    pub fn reset(&mut self) {
        self.used_bytes = 0;
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }
}
