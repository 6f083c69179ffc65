//! `update`: each statement updates each matching document in one isolated read-modify-write
//! (see [`crate::modify`]): the filter is re-checked against the current version under the
//! collection's write lock. A multi-update never visits a document twice; later statements
//! read what earlier ones wrote. Every statement is its own slice (see [`crate::bulk`]); a
//! single-document statement may carry a `sort` (MongoDB 8.0): the first match in that order
//! is updated.

use std::borrow::Cow;
use std::sync::Arc;

use bson::{doc, rawdoc, Bson, DateTime, Document, RawDocumentBuf};
use myriad_query::filter::Filter;
use myriad_query::sort::SortSpec;
use myriad_query::update::{upsert_seed, Update, UpdateContext};
use myriad_storage::{CollectionHandle, Durability};

use myriad_execution::namespace_rules::written_collection_name;
use crate::bulk::{is_interruption, WriteErrors};
use crate::error::{CommandError, CommandResult, MISSING_FIELD};
use crate::modify::{for_each_current_match, Scope};
use crate::plan::QuerySpec;
use crate::retryable::{RetryStatement, RetryableWrite};
use crate::backend::begin_write_creating;
use crate::write::{durability, ordered, prepare_for_insert, statements};
use crate::{CommandRequest, ServerContext};

/// What one statement did.
#[derive(Default)]
pub struct StatementOutcome {
    pub matched: i64,
    pub modified: i64,
    pub upserted_id: Option<Bson>,
    /// The document before (or, with `return_new`, after) the first modification.
    pub document: Option<Document>,
}

pub struct UpdateStatement<'a> {
    pub filter_document: &'a Document,
    pub update: Update<'a>,
    pub multi: bool,
    pub upsert: bool,
    pub hint: Option<Bson>,
    pub sort: Option<myriad_query::sort::SortSpec>,
    pub return_new: bool,
    /// `bypassDocumentValidation` of the command.
    pub bypass_document_validation: bool,
    /// The statement's `collation` (findAndModify's: the command's).
    pub collation: crate::collation::GivenCollation,
}

/// `arrayFilters` of a statement; `field_path` names the field in type errors as MongoDB does
/// (`update.updates.arrayFilters`, `findAndModify.arrayFilters`).
pub fn parse_array_filters(statement: &Document, field_path: &str) -> CommandResult<Vec<Document>> {
    match statement.get("arrayFilters") {
        None | Some(Bson::Null) => Ok(Vec::new()),
        Some(Bson::Array(filters)) => filters
            .iter()
            .map(|filter| match filter {
                Bson::Document(filter) => Ok(filter.clone()),
                other => Err(crate::request::field_type_error(field_path, "object", other)),
            })
            .collect(),
        Some(other) => Err(crate::request::field_type_error(field_path, "array", other)),
    }
}

/// An upsert that loses a race to insert the same unique key is run again (it then finds and
/// updates the winner's document), as MongoDB retries it; this bounds the retries.
const MAX_UPSERT_ATTEMPTS: usize = 8;

/// Runs one update statement: each matching document is updated in its own isolated
/// read-modify-write ([`for_each_current_match`]); an upsert with no match inserts.
pub fn apply_statement(
    context: &ServerContext,
    collection: &CollectionHandle,
    statement: &UpdateStatement<'_>,
    durability: Durability,
    retry: Option<RetryStatement<'_>>,
) -> CommandResult<StatementOutcome> {
    if let Some(retry) = retry {
        if statement.multi {
            return Err(RetryableWrite::refuse_multi("multi=true"));
        }
        if let Some(recorded) = retry.executed()? {
            return outcome_from_record(&recorded);
        }
    }
    let spec = QuerySpec {
        filter: Arc::new(Filter::parse(statement.filter_document)?),
        filter_document: statement.filter_document.clone(),
        projection: None,
        sort: statement.sort.clone(),
        skip: 0,
        limit: None,
        hint: statement.hint.clone(),
        allow_disk_use: None,
        min_max: None,
        collation: statement.collation.clone(),
    }
    .with_collation(collection);
    let scope = if statement.multi { Scope::All } else { Scope::One };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut outcome = StatementOutcome::default();
        let now = DateTime::now();
        let matched = for_each_current_match(context.backend.as_ref(), collection, &spec, scope, durability, |transaction, record_id, old| {
            let position = spec.filter.matches_with_position(&old).and_then(|details| details.array_position);
            let update_context = UpdateContext { is_upsert_insert: false, matched_array_position: position, now };
            // arrayFilters, `$pull`, `$addToSet`, `$pullAll` and `$push`'s `$sort` compare by
            // the statement's collation.
            let updated = myriad_query::expression::with_collation(spec.collator(), || statement.update.apply_to(&old, &update_context))?;
            if let Some(new) = &updated {
                check_id_unchanged(&old, new)?;
                crate::validation::check_update(context, transaction, &old, new, statement.bypass_document_validation)?;
                if statement.update.is_replacement() {
                    transaction.replace(record_id, &old, new)?;
                } else {
                    transaction.update(record_id, &old, new)?;
                }
                outcome.modified += 1;
            }
            if outcome.document.is_none() {
                // Unchanged, the new document is the old one.
                outcome.document = Some(match updated {
                    Some(new) if statement.return_new => new,
                    _ => old,
                });
            }
            if let Some(retry) = retry {
                let done = StatementOutcome { matched: 1, modified: outcome.modified, upserted_id: None, document: outcome.document.clone() };
                retry.record(transaction, &outcome_record(&done, retry.keeps_document))?;
            }
            Ok(())
        })?;
        outcome.matched = matched as i64;
        if matched > 0 || !statement.upsert {
            return Ok(outcome);
        }
        match upsert(context, collection, statement, spec.collator(), now, durability, retry) {
            Err(error) if error.code == crate::error::DUPLICATE_KEY.code && attempt < MAX_UPSERT_ATTEMPTS => continue,
            Err(error) => return Err(error),
            Ok(inserted) => {
                outcome.upserted_id = inserted.get("_id").cloned();
                if statement.return_new {
                    outcome.document = Some(inserted);
                }
                return Ok(outcome);
            }
        }
    }
}

/// Inserts the document an upsert with no match creates; returns it.
fn upsert(
    context: &ServerContext,
    collection: &CollectionHandle,
    statement: &UpdateStatement<'_>,
    collator: Option<&std::sync::Arc<myriad_collation::Collator>>,
    now: DateTime,
    durability: Durability,
    retry: Option<RetryStatement<'_>>,
) -> CommandResult<Document> {
    let mut seed = upsert_seed(statement.filter_document)?;
    if statement.update.is_replacement() {
        let id = seed.remove("_id");
        seed.clear();
        if let Some(id) = id {
            seed.insert("_id", id);
        }
    }
    let update_context = UpdateContext { is_upsert_insert: true, matched_array_position: None, now };
    myriad_query::expression::with_collation(collator, || statement.update.apply(&mut seed, &update_context))?;
    let prepared = prepare_for_insert(&seed)?;
    // Created again if dropped since the statement began, as MongoDB's upsert does.
    let mut transaction = begin_write_creating(context.backend.as_ref(), collection.db(), collection.name())?;
    crate::validation::check_insert(context, transaction.as_ref(), &prepared, statement.bypass_document_validation)?;
    transaction.insert(&prepared)?;
    if let Some(retry) = retry {
        let document = statement.return_new.then(|| prepared.clone().into_owned());
        let done = StatementOutcome { matched: 0, modified: 0, upserted_id: prepared.get("_id").cloned(), document };
        retry.record(transaction.as_mut(), &outcome_record(&done, retry.keeps_document))?;
    }
    transaction.commit(durability)?;
    // The seed itself when it was stored as it is (no second copy of the upserted document).
    match prepared {
        Cow::Owned(reordered) => Ok(reordered),
        Cow::Borrowed(_) => Ok(seed),
    }
}

/// A statement's outcome as a retryable write records it: `n` matched, `m` modified, `u` the
/// upserted `_id`, `d` the document it returned (findAndModify only).
fn outcome_record(outcome: &StatementOutcome, with_document: bool) -> RawDocumentBuf {
    let mut record = rawdoc! { "n": outcome.matched, "m": outcome.modified };
    if let Some(id) = &outcome.upserted_id {
        record.append("u", bson::RawBson::try_from(id.clone()).expect("an _id converts to raw BSON"));
    }
    if let (true, Some(document)) = (with_document, &outcome.document) {
        record.append("d", RawDocumentBuf::from_document(document).expect("a stored document converts to raw BSON"));
    }
    record
}

/// The outcome an earlier attempt recorded ([`outcome_record`]).
fn outcome_from_record(record: &RawDocumentBuf) -> CommandResult<StatementOutcome> {
    let record = record.to_document().map_err(|error| CommandError::new(crate::error::INTERNAL_ERROR, format!("statement record: {error}")))?;
    Ok(StatementOutcome {
        matched: record.get_i64("n").unwrap_or(0),
        modified: record.get_i64("m").unwrap_or(0),
        upserted_id: record.get("u").cloned(),
        document: record.get_document("d").ok().cloned(),
    })
}

fn check_id_unchanged(old: &Document, new: &Document) -> CommandResult<()> {
    match (old.get("_id"), new.get("_id")) {
        (Some(before), Some(after)) if myriad_keystring::values_equal(before, after) && before.element_type() == after.element_type() => Ok(()),
        (None, None) => Ok(()),
        _ => Err(CommandError::new(
            crate::error::IMMUTABLE_FIELD,
            "Performing an update on the path '_id' would modify the immutable field '_id'",
        )),
    }
}

/// Where an update statement's fields are and how errors name them: the update command's
/// `{q, u}` under `update.updates`, or bulkWrite's `{filter, updateMods}` under `bulkWrite.ops`.
pub struct StatementFields {
    pub filter: &'static str,
    pub update: &'static str,
    pub path: &'static str,
    /// The statement's constants for a pipeline-style update (`c`, bulkWrite's `constants`).
    pub constants: &'static str,
}

pub const UPDATE_COMMAND_FIELDS: StatementFields = StatementFields { filter: "q", update: "u", path: "update.updates", constants: "c" };

/// What a pipeline-style update may name as `$$name`: the command's `let` variables, `$$NOW`
/// (the command's start, the same for every statement) and `$$CLUSTER_TIME`.
pub fn update_variables(request: &CommandRequest) -> CommandResult<Vec<(String, Bson)>> {
    let (_, mut variables) = super::aggregate::command_variables(request)?;
    let now = bson::DateTime::now();
    let seconds = u32::try_from(now.timestamp_millis() / 1000).unwrap_or(u32::MAX);
    variables.push(("NOW".to_string(), Bson::DateTime(now)));
    variables.push(("CLUSTER_TIME".to_string(), Bson::Timestamp(bson::Timestamp { time: seconds, increment: 1 })));
    Ok(variables)
}

/// The update of a statement: a document (operators or a replacement) or a pipeline, with the
/// statement's constants added to `variables` for a pipeline.
pub fn parse_update<'s>(update: &'s Bson, statement: &Document, fields: &StatementFields, array_filters: &[Document], variables: &[(String, Bson)]) -> CommandResult<Update<'s>> {
    match update {
        Bson::Document(update) => Ok(Update::parse(update, array_filters)?),
        Bson::Array(stages) => {
            let mut bound = variables.to_vec();
            match statement.get(fields.constants) {
                None | Some(Bson::Null) => {}
                Some(Bson::Document(constants)) => bound.extend(constants.iter().map(|(name, value)| (name.clone(), value.clone()))),
                Some(other) => return Err(crate::request::field_type_error(&format!("{}.{}", fields.path, fields.constants), "object", other)),
            }
            Ok(Update::pipeline(stages, array_filters, bound)?)
        }
        other => Err(crate::request::field_type_error(&format!("{}.{}", fields.path, fields.update), "object", other)),
    }
}

fn missing(fields: &StatementFields, field: &str) -> CommandError {
    CommandError::new(MISSING_FIELD, format!("BSON field '{}.{field}' is missing but a required field", fields.path))
}

/// Parses one statement whose field types [`check_statement_types`] accepted.
pub fn parse_statement<'s>(statement: &'s Document, fields: &StatementFields, bypass_document_validation: bool, variables: &[(String, Bson)]) -> CommandResult<UpdateStatement<'s>> {
    let filter_document = match statement.get(fields.filter) {
        Some(Bson::Document(filter)) => filter,
        Some(other) => return Err(crate::request::field_type_error(&format!("{}.{}", fields.path, fields.filter), "object", other)),
        None => return Err(missing(fields, fields.filter)),
    };
    let Some(update_value) = statement.get(fields.update) else { return Err(missing(fields, fields.update)) };
    let flag = |name: &str| -> CommandResult<bool> {
        match statement.get(name) {
            None => Ok(false),
            Some(value) => crate::request::truthy(value).ok_or_else(|| crate::request::field_type_error(&format!("{}.{name}", fields.path), "bool", value)),
        }
    };
    let array_filters = parse_array_filters(statement, &format!("{}.arrayFilters", fields.path))?;
    let update = parse_update(update_value, statement, fields, &array_filters, variables)?;
    let multi = flag("multi")?;
    if multi && update.is_replacement() {
        return Err(CommandError::new(crate::error::FAILED_TO_PARSE, "multi update is not supported for replacement-style update"));
    }
    let sort = match statement.get("sort") {
        Some(Bson::Document(sort)) if !sort.is_empty() => Some(SortSpec::parse(sort)?),
        _ => None,
    };
    Ok(UpdateStatement {
        filter_document,
        update,
        multi,
        upsert: flag("upsert")?,
        hint: statement.get("hint").filter(|hint| !matches!(hint, Bson::Null)).cloned(),
        sort,
        return_new: false,
        bypass_document_validation,
        collation: crate::collation::parse_field(fields.path, statement)?,
    })
}

/// Runs one parsed statement on `db.name` (created by an upsert; nothing matches in a
/// collection that does not exist). Commits without syncing (see [`crate::bulk`]).
pub fn update_statement(
    context: &ServerContext,
    db: &str,
    name: &str,
    statement: &UpdateStatement<'_>,
    retry: Option<RetryStatement<'_>>,
) -> CommandResult<StatementOutcome> {
    context.count(&context.operation_counters.update, 1);
    let collection = if statement.upsert {
        Some(context.backend.get_or_create_collection(db, name)?)
    } else {
        context.backend.collection(db, name)?
    };
    match collection {
        Some(collection) => apply_statement(context, &collection, statement, Durability::Default, retry),
        None => Ok(StatementOutcome::default()),
    }
}

/// What the command parser reads of an update before any statement runs; a failure fails the
/// whole command. A router runs it too before it routes the statements.
struct Arguments<'r> {
    statements: Vec<&'r Document>,
    ordered: bool,
    durability: myriad_storage::Durability,
    name: String,
    bypass_validation: bool,
}

fn parse_arguments(request: &CommandRequest, replica_set: bool) -> CommandResult<Arguments<'_>> {
    let statements = statements(request, "updates")?;
    let arguments = Arguments {
        ordered: ordered(request)?,
        durability: durability(request)?,
        name: written_collection_name(request, replica_set)?,
        bypass_validation: crate::validation::bypass_requested(request)?,
        statements,
    };
    for statement in &arguments.statements {
        check_statement_types(statement, &UPDATE_COMMAND_FIELDS)?;
    }
    Ok(arguments)
}

/// The update's argument errors, as the node answers them (see [`Arguments`]).
pub fn check_arguments(request: &CommandRequest) -> CommandResult<()> {
    parse_arguments(request, false).map(|_| ())
}

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let bound = crate::let_variables::bound_request(request)?;
    let request = bound.as_ref().unwrap_or(request);
    let Arguments { statements, ordered, durability, name, bypass_validation } = parse_arguments(request, context.replication.get().is_some())?;
    if let Some(timeseries) = super::timeseries::resolve(context, &request.db, &name)? {
        return super::timeseries::update(context, request, &name, &timeseries);
    }
    let variables = update_variables(request)?;
    let retry = crate::retryable::begin(context, request, statements.len())?;
    let (mut matched, mut modified) = (0i64, 0i64);
    let mut upserted = Vec::new();
    let mut write_errors = WriteErrors::default();
    let mut interruption = None;
    for (index, statement) in statements.into_iter().enumerate() {
        let result = crate::operation::check_interrupt()
            .and_then(|()| parse_statement(statement, &UPDATE_COMMAND_FIELDS, bypass_validation, &variables))
            .and_then(|parsed| update_statement(context, &request.db, &name, &parsed, retry.as_ref().map(|retry| retry.statement(index))));
        match result {
            Ok(outcome) => {
                matched += outcome.matched;
                modified += outcome.modified;
                if let Some(id) = outcome.upserted_id {
                    matched += 1;
                    upserted.push(doc! { "index": index as i32, "_id": id });
                }
            }
            Err(error) if is_interruption(&error) => {
                interruption = Some(error);
                break;
            }
            Err(error) => {
                write_errors.push(index, error);
                if ordered {
                    break;
                }
            }
        }
    }
    crate::operation::note_updated((matched - upserted.len() as i64) as u64, modified as u64, upserted.len() as u64);
    crate::bulk::sync_journal_if_asked(context, durability)?;
    let mut reply = doc! { "n": matched as i32, "nModified": modified as i32 };
    if !upserted.is_empty() {
        reply.insert("upserted", upserted);
    }
    if let Some(error) = interruption {
        return Err(crate::bulk::interrupted_with(error, reply));
    }
    write_errors.append_to(&mut reply);
    if let Some(retry) = &retry {
        retry.annotate_reply(&mut reply);
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

/// What MongoDB's command parser checks in every statement before any runs (a failure fails
/// the whole command, not one statement): the filter a document, the update a document or
/// pipeline, the flags booleans or numbers, no `sort` with `multi`. Parsing the filter and
/// update themselves stays per statement.
pub fn check_statement_types(statement: &Document, fields: &StatementFields) -> CommandResult<()> {
    for (field, allow_array) in [(fields.filter, false), (fields.update, true)] {
        match statement.get(field) {
            Some(Bson::Document(_)) => {}
            Some(Bson::Array(_)) if allow_array => {}
            Some(other) => return Err(crate::request::field_type_error(&format!("{}.{field}", fields.path), "object", other)),
            None => return Err(missing(fields, field)),
        }
    }
    let mut multi = false;
    for flag in ["multi", "upsert"] {
        if let Some(value) = statement.get(flag) {
            let Some(set) = crate::request::truthy(value) else {
                return Err(crate::request::field_type_error(&format!("{}.{flag}", fields.path), "bool", value));
            };
            multi |= flag == "multi" && set;
        }
    }
    match statement.get("sort") {
        None | Some(Bson::Null) => {}
        Some(Bson::Document(sort)) => {
            if multi && !sort.is_empty() {
                return Err(CommandError::new(crate::error::FAILED_TO_PARSE, "Cannot specify sort with multi=true"));
            }
        }
        Some(other) => return Err(crate::request::field_type_error(&format!("{}.sort", fields.path), "object", other)),
    }
    Ok(())
}
