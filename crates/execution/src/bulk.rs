//! Many statements in one command: how insert, update, delete and bulkWrite apply them.
//!
//! Slices. A write command is not one atomic unit (neither is MongoDB's): its statements are
//! applied in slices, each one atomic storage batch (one [`WriteSession`] commit, holding the
//! collection's lock stripe only while the slice is applied), so a 100,000-statement insert
//! lets other writers and readers of the collection in between slices.
//! - Inserts: consecutive documents for one collection go into one slice until it holds
//!   [`SLICE_MAX_STATEMENTS`] documents or [`SLICE_MAX_BYTES`] of their records (the document
//!   that crosses the byte bound is the slice's last; a single larger document is a slice of
//!   its own). A document refused by storage (duplicate key, validation, size) leaves the slice's
//!   other documents in place: it is that statement's write error.
//! - Updates and deletes: every statement is its own slice, and a statement matching many
//!   documents commits every [`crate::modify::WRITE_CHUNK_DOCUMENTS`] documents (atomic per
//!   document, as MongoDB's multi-updates).
//!
//! Between slices the command checks for interruption: `maxTimeMS` or killOp stops it there.
//! What the slices before committed stays, and the command fails as MongoDB's does
//! (MaxTimeMSExpired, 50, for the whole command, not a write error), with what was done
//! reported beside the error (`n`, `nModified`... for insert, update and delete).
//!
//! Durability. Slices commit without syncing the journal; a command asking for `j: true` (or
//! `w: "majority"`) syncs it once after its last slice, before it replies, error or not.

use std::borrow::Cow;

use bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use myriad_storage::{CollectionHandle, Durability, PreparedInsert};

pub use crate::request::InsertDocument;

use myriad_reply::error::{CommandError, CommandResult};
use crate::backend::begin_write_on;
use crate::write::prepare_for_insert;
use crate::retryable::RetryableWrite;
use crate::ServerContext;

/// At most this many documents per insert slice.
pub const SLICE_MAX_STATEMENTS: usize = 1_000;
/// An insert slice closes once its documents reach this many bytes.
pub const SLICE_MAX_BYTES: usize = 4 * 1024 * 1024;

/// MongoDB's interruption codes: such an error fails the whole command (what was written
/// stays written), where any other error is the failing statement's write error.
pub fn is_interruption(error: &CommandError) -> bool {
    matches!(error.code, 50 | 262 | 279 | 11600 | 11601 | 11602)
}

/// One insert statement of a command: its index and document, or the reason it is refused
/// before storage sees it (a repeated field name).
pub struct InsertStatement<'a> {
    pub index: usize,
    pub document: InsertDocument<'a>,
    pub refused: Option<CommandError>,
}

/// A statement's document as it is stored: decoded (with its `_id` first), or BSON bytes
/// whose first field is a valid `_id`, decoded only if a validator must see it.
enum StoredDocument<'a> {
    Decoded(Cow<'a, Document>),
    Raw(&'a RawDocument),
}

impl StoredDocument<'_> {
    fn decoded(&self) -> CommandResult<Cow<'_, Document>> {
        match self {
            StoredDocument::Decoded(document) => Ok(Cow::Borrowed(document.as_ref())),
            StoredDocument::Raw(raw) => decode(raw).map(Cow::Owned),
        }
    }
}

/// Decodes sequence bytes (checked by the wire decoder, so this fails only on a bug).
fn decode(raw: &RawDocument) -> CommandResult<Document> {
    myriad_keystring::nesting::decode_document(raw, myriad_keystring::nesting::MAX_BSON_DEPTH)
        .map_err(|error| CommandError::bad_value(format!("invalid BSON in an inserted document: {error}")))
}

/// True when `raw` can be stored as it is: its first field is an `_id` that
/// [`prepare_for_insert`] would accept where it is.
fn id_first(raw: &RawDocument) -> bool {
    use bson::spec::ElementType;
    match raw.iter_elements().next() {
        Some(Ok(element)) => {
            element.key() == "_id"
                && !matches!(element.element_type(), ElementType::Array | ElementType::RegularExpression | ElementType::Undefined)
        }
        _ => false,
    }
}

/// Prepares one statement's document for `handle`: its stored form and storage work.
fn prepare_statement<'a>(handle: &CollectionHandle, document: InsertDocument<'a>) -> CommandResult<(StoredDocument<'a>, PreparedInsert)> {
    let decoded = match document {
        InsertDocument::Raw { document, within_storage_depth } if id_first(document) => {
            return Ok((StoredDocument::Raw(document), handle.prepare_raw_insert(document, within_storage_depth)?));
        }
        InsertDocument::Raw { document, .. } => Cow::Owned(prepare_for_insert(&decode(document)?)?.into_owned()),
        InsertDocument::Decoded(document) => prepare_for_insert(document)?,
    };
    let prepared = handle.prepare_insert(&decoded)?;
    Ok((StoredDocument::Decoded(decoded), prepared))
}

/// MongoDB's DatabaseDifferCase: the collection's database cannot be created.
const DATABASE_DIFFER_CASE: i32 = 13297;

/// As mongod, a collection that cannot be created fails its documents one by one (each a
/// write error, the first alone when ordered), not the command. Returns whether to go on.
fn refuse_each<'a>(
    statements: impl Iterator<Item = InsertStatement<'a>>,
    error: &CommandError,
    ordered: bool,
    report: &mut dyn FnMut(usize, CommandResult<()>),
) -> bool {
    for statement in statements {
        report(statement.index, Err(error.clone()));
        if ordered {
            return false;
        }
    }
    true
}

/// Inserts `statements` into `db.collection` in slices (created on first write). Each
/// statement's outcome goes to `report` in order. Returns false when an ordered command must
/// stop (a statement failed); an interruption or a failed commit is the command's error.
///
/// A slice's documents are prepared (checked, encoded, their index keys computed) before its
/// write session takes the collection's lock stripe, so that concurrent inserts into one
/// collection only serialize on the unique checks and the write itself.
pub fn insert_in_slices<'a>(
    context: &ServerContext,
    db: &str,
    collection: &str,
    statements: impl IntoIterator<Item = InsertStatement<'a>>,
    ordered: bool,
    bypass_validation: bool,
    retry: Option<&RetryableWrite<'_>>,
    report: &mut dyn FnMut(usize, CommandResult<()>),
) -> CommandResult<bool> {
    let mut statements = statements.into_iter().peekable();
    while statements.peek().is_some() {
        crate::operation::check_interrupt()?;
        let handle = match context.backend.get_or_create_collection(db, collection).map_err(CommandError::from) {
            Ok(handle) => handle,
            Err(error) if error.code == DATABASE_DIFFER_CASE => return Ok(refuse_each(statements, &error, ordered, report)),
            Err(error) => return Err(error),
        };
        let slice = prepare_slice(&handle, &mut statements, ordered);
        let mut transaction = begin_write_on(context.backend.as_ref(), db, collection, handle)?;
        let validator = crate::validation::for_write(transaction.as_ref(), bypass_validation)?;
        let inserts: Vec<&PreparedInsert> = slice.iter().filter_map(|(_, prepared)| prepared.as_ref().ok().map(|(_, insert)| insert)).collect();
        // One document gains nothing from a batched read (its check reads its keys itself).
        if inserts.len() > 1 {
            transaction.read_unique_owners(&inserts)?;
        }
        let (mut inserted, mut stop) = (0i64, false);
        for (index, prepared) in slice {
            let statement = retry.map(|retry| retry.statement(index));
            if let Some(statement) = statement {
                if statement.executed()?.is_some() {
                    // An earlier attempt inserted it: counted, not inserted again.
                    inserted += 1;
                    report(index, Ok(()));
                    continue;
                }
            }
            let outcome = prepared.and_then(|(document, prepared)| {
                if let Some(validator) = validator.as_deref() {
                    validator.check(context, transaction.as_ref(), None, document.decoded()?.as_ref())?;
                }
                transaction.insert_prepared(prepared)?;
                if let Some(statement) = statement {
                    statement.record(transaction.as_mut(), &RawDocumentBuf::new())?;
                }
                Ok(())
            });
            match outcome {
                Ok(_) => {
                    inserted += 1;
                    report(index, Ok(()));
                }
                Err(error) => {
                    report(index, Err(error));
                    if ordered {
                        stop = true;
                        break;
                    }
                }
            }
        }
        transaction.commit(Durability::Default)?;
        context.count(&context.operation_counters.insert, inserted);
        crate::operation::note_inserted(inserted as u64);
        if stop {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One statement of a slice, prepared: the document to store and its storage work, or the
/// statement's error.
type PreparedStatement<'a> = (usize, CommandResult<(StoredDocument<'a>, PreparedInsert)>);

/// Takes the next slice's statements (at most [`SLICE_MAX_STATEMENTS`], closed once their
/// records reach [`SLICE_MAX_BYTES`]) and prepares each for `handle`, without any lock. An
/// ordered command's slice ends at its first failing statement.
fn prepare_slice<'a>(
    handle: &CollectionHandle,
    statements: &mut impl Iterator<Item = InsertStatement<'a>>,
    ordered: bool,
) -> Vec<PreparedStatement<'a>> {
    // Sized once: grown by doubling, a slice of 1,000 statements reallocated eight times and
    // touched fresh pages each time (about 2% of a bulk insert's server CPU).
    let capacity = statements.size_hint().0.clamp(1, SLICE_MAX_STATEMENTS);
    let (mut slice, mut bytes) = (Vec::with_capacity(capacity), 0usize);
    while slice.len() < SLICE_MAX_STATEMENTS && bytes < SLICE_MAX_BYTES {
        let Some(statement) = statements.next() else { break };
        let prepared = match statement.refused {
            Some(error) => Err(error),
            None => prepare_statement(handle, statement.document),
        };
        let failed = match &prepared {
            Ok((_, prepared)) => {
                bytes += prepared.size_bytes();
                false
            }
            Err(_) => true,
        };
        slice.push((statement.index, prepared));
        if failed && ordered {
            break;
        }
    }
    slice
}

/// Syncs the journal once at the end of a command whose write concern asks for it (`j: true`
/// or `w: "majority"`); the command's slices committed without syncing.
pub fn sync_journal_if_asked(context: &ServerContext, durability: Durability) -> CommandResult<()> {
    if durability == Durability::Journaled {
        context.backend.sync_wal()?;
    }
    Ok(())
}

/// Past the first write error, an error message longer than this is sent empty (MongoDB's
/// rule, so a reply with many errors stays small).
const MAX_LATER_MESSAGE_BYTES: usize = 1024 * 1024;
/// Once a reply's write errors hold this many bytes, later ones carry their code and index
/// only (no message, no details), so the reply stays within the 16 MiB a reply may hold.
const MAX_WRITE_ERRORS_BYTES: usize = 8 * 1024 * 1024;

/// The write errors of one command, bounded in bytes.
#[derive(Default)]
pub struct WriteErrors {
    errors: Vec<Document>,
    bytes: usize,
}

impl WriteErrors {
    /// The error as the command reports it: MongoDB's truncation, then this bound.
    pub fn shape(&mut self, mut error: CommandError) -> CommandError {
        let full_size = error.message.len() + error.extra.as_ref().map_or(0, |extra| {
            myriad_query::aggregate::memory::approximate_document_size_bytes(extra) as usize
        });
        if self.bytes > 0 && error.message.len() > MAX_LATER_MESSAGE_BYTES {
            error.message.clear();
        }
        if self.bytes + full_size > MAX_WRITE_ERRORS_BYTES {
            error.message.clear();
            error.extra = None;
        }
        self.bytes += 64 + error.message.len() + error.extra.as_ref().map_or(0, |_| full_size);
        error
    }

    /// Adds the `writeErrors` entry of statement `index`.
    pub fn push(&mut self, index: usize, error: CommandError) {
        let error = self.shape(error);
        self.errors.push(error.to_write_error(index));
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// Appends `writeErrors` to `reply` when there are any.
    pub fn append_to(self, reply: &mut Document) {
        if !self.errors.is_empty() {
            reply.insert("writeErrors", self.errors);
        }
    }
}

/// An interruption as a command's error, with what the command had done beside it.
pub fn interrupted_with(mut error: CommandError, done: Document) -> CommandError {
    let mut extra = error.extra.take().unwrap_or_default();
    for (key, value) in done {
        extra.insert(key, value);
    }
    error.extra = Some(extra);
    error
}

/// `{n}` (and more) of what a command did before it was interrupted.
pub fn counts(fields: &[(&str, i64)]) -> Document {
    fields.iter().map(|(name, count)| (name.to_string(), Bson::Int32(*count as i32))).collect()
}

/// `{n, ok: 1, writeErrors?}`; writeErrors never turn the reply into `ok: 0`.
pub fn write_reply(count: i64, write_errors: WriteErrors) -> Document {
    let mut reply = doc! { "n": count as i32 };
    write_errors.append_to(&mut reply);
    reply.insert("ok", 1.0);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_reply::error::{DUPLICATE_KEY, MAX_TIME_MS_EXPIRED};

    #[test]
    fn later_long_messages_are_emptied_and_the_total_is_bounded() {
        let mut errors = WriteErrors::default();
        let long = "x".repeat(MAX_LATER_MESSAGE_BYTES + 1);
        assert_eq!(errors.shape(CommandError::new(DUPLICATE_KEY, long.clone())).message.len(), long.len(), "the first keeps its message");
        assert!(errors.shape(CommandError::new(DUPLICATE_KEY, long)).message.is_empty());
        let mut bounded = WriteErrors::default();
        let mut total = 0;
        for index in 0..100 {
            let mut error = CommandError::new(DUPLICATE_KEY, "y".repeat(500_000));
            error.extra = Some(bson::doc! { "keyValue": { "_id": "z".repeat(500_000) } });
            bounded.push(index, error);
        }
        for entry in &bounded.errors {
            total += myriad_query::aggregate::memory::approximate_document_size_bytes(entry) as usize;
        }
        assert_eq!(bounded.len(), 100);
        assert!(total <= MAX_WRITE_ERRORS_BYTES + 2 * 1024 * 1024, "{total}");
        assert_eq!(bounded.errors[99].get_i32("code").unwrap(), DUPLICATE_KEY.code);
    }

    #[test]
    fn interruptions_fail_the_command_and_carry_counts() {
        let error = CommandError::new(MAX_TIME_MS_EXPIRED, "operation exceeded time limit");
        assert!(is_interruption(&error));
        assert!(!is_interruption(&CommandError::new(DUPLICATE_KEY, "dup")));
        let reply = interrupted_with(error, counts(&[("n", 7)])).to_reply();
        assert_eq!(reply.get_i32("code").unwrap(), 50);
        assert_eq!(reply.get_i32("n").unwrap(), 7);
    }
}
