//! What every applied write and catalog change reports: its operation records, shaped like
//! MongoDB's oplog entries (`op`, `ns`, `ui`, `o`, `o2`), the observer that receives them
//! (where replication and change streams plug in), and a catalog change prepared as one batch
//! with the in-memory effects the engine applies once the batch is written.

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document, RawDocumentBuf};
use rocksdb::WriteBatch;

use crate::StorageError;

/// What an operation did to one document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperationKind {
    Insert,
    /// A whole-document replacement (the post-image).
    Update,
    Delete,
    /// A catalog change (create, drop...): `document` is the command, on `db.$cmd`.
    Command,
}

/// One document's change, as MongoDB's oplog describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct OperationRecord {
    pub kind: OperationKind,
    pub namespace: String,
    pub collection_uuid: [u8; 16],
    /// The document's `_id`.
    pub id: Bson,
    /// The inserted document or the update's post-image; None for a delete.
    pub document: Option<RawDocumentBuf>,
    /// An update's `$v: 2` diff from its pre-image (`update_diff.rs`), when it was kept (on a
    /// replica-set member): the oplog then logs the diff, not the post-image.
    pub diff: Option<Document>,
    /// The document before an update, replacement or delete, for a collection with
    /// `changeStreamPreAndPostImages: {enabled: true}` on a replica-set member: the oplog entry
    /// carries it as `preImage` (see [`OperationRecord::to_oplog_entry`]).
    pub pre_image: Option<RawDocumentBuf>,
    /// The retryable write statement that made this change, when one did: its oplog entry
    /// carries `lsid`, `txnNumber` and `stmtId`, as mongod's.
    pub statement: Option<StatementOrigin>,
}

/// A retryable write's statement: its session, transaction number and statement id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatementOrigin {
    /// The session's id bytes (`SessionId`'s: the lsid's `id`, then its `uid` or zeros).
    pub session: [u8; 48],
    pub transaction_number: i64,
    pub statement_id: i32,
}

impl StatementOrigin {
    /// The session as an lsid: `{id: UUID, uid: BinData}` (`uid` only when authenticated).
    pub fn lsid(&self) -> Document {
        let bytes = &self.session;
        let mut lsid = doc! { "id": Binary { subtype: BinarySubtype::Uuid, bytes: bytes[..16].to_vec() } };
        if bytes[16..].iter().any(|byte| *byte != 0) {
            lsid.insert("uid", Binary { subtype: BinarySubtype::Generic, bytes: bytes[16..].to_vec() });
        }
        lsid
    }
}

/// The largest oplog entry a pre-image is added to: past it the entry goes without one (a
/// change stream then finds none, as mongod's finds none for an expired pre-image).
pub const MAX_ENTRY_WITH_PRE_IMAGE_BYTES: usize = 16 * 1024 * 1024;

impl OperationRecord {
    /// `{op, ns, ui, o, o2?}` as in `local.oplog.rs` (updates as their diff when kept, else in
    /// replacement form).
    pub fn to_oplog_entry(&self) -> Result<Document, StorageError> {
        let uuid = Binary { subtype: BinarySubtype::Uuid, bytes: self.collection_uuid.to_vec() };
        let mut entry = doc! { "op": self.kind.code(), "ns": &self.namespace, "ui": uuid };
        match (&self.document, self.kind) {
            (_, OperationKind::Update) if self.diff.is_some() => {
                entry.insert("o", doc! { "$v": 2, "diff": self.diff.clone().unwrap_or_default() });
            }
            (Some(document), OperationKind::Insert | OperationKind::Update | OperationKind::Command) => {
                let document = document.to_document().map_err(|error| StorageError::Corrupt(format!("operation record: {error}")))?;
                entry.insert("o", document);
            }
            _ => {
                entry.insert("o", doc! { "_id": self.id.clone() });
            }
        }
        if self.kind == OperationKind::Update {
            entry.insert("o2", doc! { "_id": self.id.clone() });
        }
        if let Some(statement) = &self.statement {
            entry.insert("lsid", statement.lsid());
            entry.insert("txnNumber", statement.transaction_number);
            entry.insert("stmtId", statement.statement_id);
        }
        if let Some(pre_image) = &self.pre_image {
            let entry_bytes = bson::to_vec(&entry).map_or(usize::MAX, |bytes| bytes.len());
            if entry_bytes.saturating_add(pre_image.as_bytes().len()) < MAX_ENTRY_WITH_PRE_IMAGE_BYTES {
                let pre_image = pre_image.to_document().map_err(|error| StorageError::Corrupt(format!("pre-image: {error}")))?;
                entry.insert("preImage", pre_image);
            }
        }
        Ok(entry)
    }
}

impl OperationKind {
    /// The oplog's `op` letter.
    pub fn code(self) -> &'static str {
        match self {
            OperationKind::Insert => "i",
            OperationKind::Update => "u",
            OperationKind::Delete => "d",
            OperationKind::Command => "c",
        }
    }
}

/// Receives the operation records of every write and catalog change once applied: where
/// replication and change streams plug in.
pub type OperationObserver = std::sync::Arc<dyn Fn(&[OperationRecord]) + Send + Sync>;

/// A catalog change ready to apply: its batch, its operation record, and the in-memory
/// changes the batch implies, which [`crate::Engine`] applies only after the batch is written.
pub(crate) struct PreparedCatalogChange {
    pub(crate) batch: WriteBatch,
    pub(crate) operation: OperationRecord,
    pub(crate) effects: Vec<CatalogEffect>,
}

/// An in-memory change derived from a catalog batch.
pub(crate) enum CatalogEffect {
    /// The prefix counter moves to this value (prefixes are never reused).
    AdvancePrefixes(u64),
    /// The entry is published in the catalog snapshot.
    Publish(std::sync::Arc<crate::catalog::CollectionEntry>),
    /// The namespace leaves the catalog snapshot.
    Remove(std::sync::Arc<str>),
}

/// The `op: "c"` record of a catalog change on `db`.
pub(crate) fn command_record(db: &str, collection_uuid: [u8; 16], command: Document) -> Result<OperationRecord, StorageError> {
    let document = RawDocumentBuf::from_document(&command).map_err(|error| StorageError::Corrupt(format!("operation record: {error}")))?;
    Ok(OperationRecord {
        kind: OperationKind::Command,
        namespace: format!("{db}.$cmd"),
        collection_uuid,
        id: Bson::Null,
        document: Some(document),
        diff: None,
        pre_image: None,
        statement: None,
    })
}
