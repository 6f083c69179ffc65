//! `insert`: the documents are inserted in slices (see [`crate::bulk`]), each one atomic
//! storage batch. Ordered inserts stop at the first error and keep what came before it;
//! unordered ones go on and report every error with its statement index.

use bson::Document;

use myriad_execution::namespace_rules::written_collection_name;
use crate::bulk::{insert_in_slices, is_interruption, write_reply, InsertStatement, WriteErrors};
use crate::error::CommandResult;
use crate::write::{check_batch_size, durability, ordered};
use crate::{CommandRequest, ServerContext};

/// What the command parser reads of an insert before any document is written; a failure
/// fails the whole command. A router runs it too before it routes the documents.
struct Arguments<'r> {
    documents: Vec<crate::request::InsertDocument<'r>>,
    ordered: bool,
    durability: myriad_storage::Durability,
    bypass_validation: bool,
    collection: String,
}

fn parse_arguments(request: &CommandRequest, replica_set: bool) -> CommandResult<Arguments<'_>> {
    let documents = request.insert_documents()?;
    check_batch_size(documents.len())?;
    Ok(Arguments {
        documents,
        ordered: ordered(request)?,
        durability: durability(request)?,
        bypass_validation: crate::validation::bypass_requested(request)?,
        collection: written_collection_name(request, replica_set)?,
    })
}

/// The insert's argument errors, as the node answers them (see [`Arguments`]).
pub fn check_arguments(request: &CommandRequest) -> CommandResult<()> {
    parse_arguments(request, false).map(|_| ())
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let Arguments { documents, ordered, durability, bypass_validation, collection } = parse_arguments(request, context.replication.get().is_some())?;
    if let Some(timeseries) = super::timeseries::resolve(context, &request.db, &collection)? {
        return super::timeseries::insert(context, request, &collection, &timeseries);
    }
    let retry = crate::retryable::begin(context, request, documents.len())?;
    let statements = documents.into_iter().enumerate().map(|(index, document)| InsertStatement {
        index,
        document,
        refused: crate::request::duplicates::document_duplicate(request, index),
    });
    let mut inserted = 0i64;
    let mut write_errors = WriteErrors::default();
    let outcome = insert_in_slices(context, &request.db, &collection, statements, ordered, bypass_validation, retry.as_ref(), &mut |index, result| {
        match result {
            Ok(()) => inserted += 1,
            Err(error) => write_errors.push(index, error),
        }
    });
    crate::bulk::sync_journal_if_asked(context, durability)?;
    match outcome {
        Err(error) if is_interruption(&error) => Err(crate::bulk::interrupted_with(error, crate::bulk::counts(&[("n", inserted)]))),
        Err(error) => Err(error),
        Ok(_) => {
            let mut reply = write_reply(inserted, write_errors);
            if let Some(retry) = &retry {
                retry.annotate_reply(&mut reply);
            }
            Ok(reply)
        }
    }
}
