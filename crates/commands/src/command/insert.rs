//! `insert`: one atomic WriteBatch per command. Ordered batches stop at the first error and
//! keep what came before it; unordered batches go on and report every error with its index.

use bson::Document;

use crate::error::CommandResult;
use crate::write::{begin_write_creating, check_batch_size, durability, ordered, prepare_for_insert, write_reply};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let documents = request.document_array("documents")?;
    check_batch_size(documents.len())?;
    let ordered = ordered(request)?;
    let durability = durability(request)?;
    let bypass_validation = crate::validation::bypass_requested(request)?;
    let mut transaction = begin_write_creating(context.backend.as_ref(), &request.db, &request.collection_name()?)?;
    let validator = crate::validation::for_write(transaction.as_ref(), bypass_validation)?;
    let mut inserted = 0i64;
    let mut write_errors = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        let outcome = match crate::duplicates::document_duplicate(request, index) {
            Some(error) => Err(error),
            None => prepare_for_insert(document).and_then(|prepared| {
                crate::validation::check_with(context, validator.as_deref(), transaction.as_ref(), &prepared)?;
                Ok(transaction.insert(&prepared)?)
            }),
        };
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
    crate::operation::note_inserted(inserted as u64);
    Ok(write_reply(inserted, write_errors))
}
