//! `insert`: one atomic WriteBatch per command. Ordered batches stop at the first error and
//! keep what came before it; unordered batches go on and report every error with its index.

use bson::Document;
use myriad_storage::StorageError;

use crate::backend::WriteSession;

use crate::error::{CommandError, CommandResult};
use crate::write::{check_batch_size, durability, ordered, prepare_for_insert, target_collection, write_reply};
use crate::{CommandRequest, ServerContext};

/// Attempts to find the collection still there under its write lock before giving up.
const MAX_CREATE_ATTEMPTS: usize = 16;

/// A write transaction on the command's collection, created if missing. A collection dropped
/// between its creation and the lock is created again, as MongoDB re-creates it for an insert
/// that races a drop.
fn open_transaction<'e>(context: &'e ServerContext, request: &CommandRequest) -> CommandResult<Box<dyn WriteSession + 'e>> {
    for _ in 0..MAX_CREATE_ATTEMPTS {
        let collection = target_collection(context.backend.as_ref(), request)?;
        let transaction = context.backend.begin_write(&collection);
        match transaction.handle() {
            Ok(_) => return Ok(transaction),
            Err(StorageError::NamespaceNotFound(_)) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Err(CommandError::new(crate::error::WRITE_CONFLICT, "the collection was dropped repeatedly while inserting"))
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let documents = request.document_array("documents")?;
    check_batch_size(documents.len())?;
    let ordered = ordered(request)?;
    let durability = durability(request)?;
    let mut transaction = open_transaction(context, request)?;
    let mut inserted = 0i64;
    let mut write_errors = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        let outcome = prepare_for_insert(document).and_then(|prepared| Ok(transaction.insert(&prepared)?));
        match outcome {
            Ok(_) => inserted += 1,
            Err(error) => {
                write_errors.push(error.to_write_error(index));
                if ordered {
                    break;
                }
            }
        }
    }
    transaction.commit(durability)?;
    context.count(&context.operation_counters.insert, inserted);
    Ok(write_reply(inserted, write_errors))
}
