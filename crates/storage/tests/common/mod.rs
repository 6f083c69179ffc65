//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;

use bson::{Bson, Document};
use myriad_storage::{CollectionHandle, Durability, Engine, EngineOptions, IndexKeyRange, RecordId};

pub fn small_options() -> EngineOptions {
    EngineOptions {
        block_cache_size_bytes: 8 << 20,
        write_buffer_size_bytes: 4 << 20,
        total_write_buffer_size_bytes: 64 << 20,
        lock_stripes: 64,
        ..EngineOptions::default()
    }
}

pub fn open(path: &Path) -> Engine {
    Engine::open(path, &small_options()).expect("open engine")
}

pub fn insert_all(engine: &Engine, handle: &CollectionHandle, documents: &[Document]) -> Vec<RecordId> {
    let mut transaction = engine.begin_write(handle);
    let ids = documents.iter().map(|document| transaction.insert(document).expect("insert")).collect();
    transaction.commit(Durability::Default).expect("commit");
    ids
}

/// Every (keystring, record id) of an index, in order.
pub fn index_entries(engine: &Engine, handle: &CollectionHandle, index: &str) -> Vec<(Vec<u8>, RecordId)> {
    let mut all = Vec::new();
    let mut resume: Option<Vec<u8>> = None;
    loop {
        let page = engine
            .scan_index(handle, index, &IndexKeyRange::full(), false, resume.as_deref(), 7)
            .expect("scan index");
        let Some((last, _)) = page.last() else { break };
        resume = Some(last.clone());
        all.extend(page);
    }
    all.into_iter().map(|(key, record_id)| (key[..key.len() - 8].to_vec(), record_id)).collect()
}

pub fn keystring(value: Bson) -> Vec<u8> {
    myriad_keystring::encode_key([(&value, myriad_keystring::Direction::Ascending)])
}

pub fn all_documents(engine: &Engine, handle: &CollectionHandle) -> Vec<(RecordId, Document)> {
    let mut all = Vec::new();
    let mut resume = None;
    loop {
        let page = engine.scan_records(handle, resume, 5).expect("scan records");
        let Some((last, _)) = page.last() else { break };
        resume = Some(*last);
        all.extend(page.into_iter().map(|(id, raw)| (id, raw.to_document().expect("document"))));
    }
    all
}
