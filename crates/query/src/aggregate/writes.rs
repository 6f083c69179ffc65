//! The writing stages. `$out` writes every document into a temporary collection and, when the
//! input ends, renames it over the target (atomically replacing it, as MongoDB does; nothing
//! changes when the pipeline fails). `$merge` writes each document as it arrives, under the
//! target's write lock, matching on the `on` fields: `whenMatched` replace, keepExisting,
//! merge, fail or a pipeline; `whenNotMatched` insert, discard or fail.

use std::sync::Arc;

use bson::{doc, oid::ObjectId, Bson, Document};

use super::context::{BufferedStage, BufferedState, MemoryOutput, MergeDecision, Namespace, OutWriter, OutputStream, RunContext};
use super::lookup::parse_let;
use super::Pipeline;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::Expression;

/// MongoDB's `ImmutableField`.
const IMMUTABLE_FIELD: i32 = 66;
/// MongoDB's `MergeStageNoMatchingDocument`.
const MERGE_STAGE_NO_MATCHING_DOCUMENT: i32 = 13113;

fn check_collection_name(stage: &str, name: &str) -> QueryResult<()> {
    if name.is_empty() || name.contains('\0') || name.starts_with('.') {
        return Err(QueryError::Location(73, format!("Invalid {stage} target namespace: '{name}'")));
    }
    if name.starts_with("system.") {
        return Err(QueryError::Location(17385, format!("Can't {stage} to special collection: {name}")));
    }
    Ok(())
}

/// `{db, coll}` of `$out` and `$merge.into`.
fn parse_namespace_document(stage: &str, namespace: &Document) -> QueryResult<Namespace> {
    let (mut db, mut collection) = (None, None);
    for (key, value) in namespace {
        match (key.as_str(), value) {
            ("db", Bson::String(name)) => db = Some(name.clone()),
            ("coll", Bson::String(name)) => collection = Some(name.clone()),
            ("db" | "coll", other) => {
                return Err(QueryError::TypeMismatch(format!("BSON field '{stage}.{key}' is the wrong type '{}', expected type 'string'", type_name(other))))
            }
            (other, _) => return Err(QueryError::unknown_field(&format!("{stage}.{other}"))),
        }
    }
    let collection = collection.ok_or_else(|| QueryError::Location(40414, format!("BSON field '{stage}.coll' is missing but a required field")))?;
    Ok(Namespace { db, collection })
}

#[derive(Debug)]
pub(crate) struct Out {
    target: Namespace,
}

/// `$out: "coll"` or `{db, coll}`; the stage and its explain form.
pub(crate) fn parse_out(argument: &Bson) -> QueryResult<(Arc<dyn BufferedStage>, Document)> {
    let target = match argument {
        Bson::String(name) => Namespace::in_current_database(name),
        Bson::Document(namespace) => {
            if namespace.contains_key("timeseries") {
                return Err(QueryError::InvalidOptions("$out to a time-series collection is not supported".into()));
            }
            let target = parse_namespace_document("$out", namespace)?;
            if target.db.is_none() {
                return Err(QueryError::Location(40414, "BSON field '$out.db' is missing but a required field".into()));
            }
            target
        }
        other => return Err(QueryError::Location(16990, format!("$out only supports a string or object argument, but found {}", type_name(other)))),
    };
    check_collection_name("$out", &target.collection)?;
    let explained = doc! { "$out": target.describe() };
    Ok((Arc::new(Out { target }), explained))
}

impl BufferedStage for Out {
    fn start(&self, context: &RunContext) -> Box<dyn BufferedState> {
        Box::new(OutState { target: self.target.clone(), context: context.clone(), writer: None })
    }
}

struct OutState {
    target: Namespace,
    context: RunContext,
    writer: Option<Box<dyn OutWriter>>,
}

impl OutState {
    fn writer(&mut self) -> QueryResult<&mut Box<dyn OutWriter>> {
        if self.writer.is_none() {
            self.writer = Some(self.context.foreign("$out")?.begin_out(&self.target)?);
        }
        self.writer.as_mut().ok_or_else(|| QueryError::Location(1, "$out writer missing".into()))
    }
}

impl BufferedState for OutState {
    fn add(&mut self, mut document: Document) -> QueryResult<()> {
        if !document.contains_key("_id") {
            let mut with_id = doc! { "_id": ObjectId::new() };
            with_id.extend(std::mem::take(&mut document));
            document = with_id;
        }
        self.writer()?.insert(document)
    }

    fn finish(mut self: Box<Self>) -> QueryResult<Box<dyn OutputStream>> {
        self.writer()?;
        if let Some(writer) = self.writer.take() {
            writer.commit()?;
        }
        Ok(Box::new(MemoryOutput(Vec::new().into_iter())))
    }
}

#[derive(Clone, Debug)]
enum WhenMatched {
    Replace,
    KeepExisting,
    Merge,
    Fail,
    Pipeline(Box<Pipeline>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum WhenNotMatched {
    Insert,
    Discard,
    Fail,
}

#[derive(Debug)]
pub(crate) struct Merge {
    target: Namespace,
    on: Vec<String>,
    let_variables: Vec<(String, Expression)>,
    when_matched: WhenMatched,
    when_not_matched: WhenNotMatched,
}

fn enumeration_error(field: &str, value: &str) -> QueryError {
    QueryError::BadValue(format!("Enumeration value '{value}' for field '$merge.{field}' is not a valid value."))
}

/// `$merge`; the stage and its explain form.
pub(crate) fn parse_merge(argument: &Bson) -> QueryResult<(Arc<dyn BufferedStage>, Document)> {
    let specification = match argument {
        Bson::String(name) => doc! { "into": name.clone() },
        Bson::Document(specification) => specification.clone(),
        other => return Err(QueryError::Location(51182, format!("$merge only supports a string or object argument, not {}", type_name(other)))),
    };
    let (mut target, mut on, mut let_value, mut matched_value, mut not_matched) = (None, None, None, None, WhenNotMatched::Insert);
    for (key, value) in &specification {
        match key.as_str() {
            "into" => {
                target = Some(match value {
                    Bson::String(name) => Namespace::in_current_database(name),
                    Bson::Document(namespace) => parse_namespace_document("$merge.into", namespace)?,
                    other => return Err(QueryError::Location(51178, format!("$merge 'into' field  must be either a string or an object, but found {}", type_name(other)))),
                })
            }
            "on" => on = Some(parse_on(value)?),
            "let" => let_value = Some(value.clone()),
            "whenMatched" => matched_value = Some(value.clone()),
            "whenNotMatched" => {
                not_matched = match value {
                    Bson::String(mode) if mode == "insert" => WhenNotMatched::Insert,
                    Bson::String(mode) if mode == "discard" => WhenNotMatched::Discard,
                    Bson::String(mode) if mode == "fail" => WhenNotMatched::Fail,
                    Bson::String(mode) => return Err(enumeration_error("whenNotMatched", mode)),
                    other => {
                        return Err(QueryError::TypeMismatch(format!("BSON field '$merge.whenNotMatched' is the wrong type '{}', expected type 'string'", type_name(other))))
                    }
                }
            }
            other => return Err(QueryError::unknown_field(&format!("$merge.{other}"))),
        }
    }
    let target = target.ok_or_else(|| QueryError::Location(40414, "BSON field '$merge.into' is missing but a required field".into()))?;
    check_collection_name("$merge", &target.collection)?;
    let let_variables = match &let_value {
        Some(value) => parse_let("$merge", value)?,
        None => Vec::new(),
    };
    let when_matched = parse_when_matched(matched_value.as_ref(), &let_variables)?;
    if let_value.is_some() && !matches!(when_matched, WhenMatched::Pipeline(_)) {
        return Err(QueryError::Location(51199, "Cannot use 'let' variables with 'whenMatched' modes other than a pipeline".into()));
    }
    let on = on.unwrap_or_else(|| vec!["_id".to_string()]);
    let mut explained = doc! { "into": target.describe() };
    explained.insert("on", Bson::Array(on.iter().cloned().map(Bson::String).collect()));
    explained.insert("whenMatched", matched_value.unwrap_or_else(|| Bson::String("merge".into())));
    explained.insert(
        "whenNotMatched",
        match not_matched {
            WhenNotMatched::Insert => "insert",
            WhenNotMatched::Discard => "discard",
            WhenNotMatched::Fail => "fail",
        },
    );
    let stage = Merge { target, on, let_variables, when_matched, when_not_matched: not_matched };
    Ok((Arc::new(stage), doc! { "$merge": explained }))
}

fn parse_on(value: &Bson) -> QueryResult<Vec<String>> {
    let fields: Vec<String> = match value {
        Bson::String(field) => vec![field.clone()],
        Bson::Array(items) => {
            if items.is_empty() {
                return Err(QueryError::Location(51187, "If explicitly specifying $merge 'on', must include at least one field".into()));
            }
            items
                .iter()
                .map(|item| match item {
                    Bson::String(field) => Ok(field.clone()),
                    _ => Err(QueryError::Location(51134, format!("Array passed to $merge's 'on' field must only contain strings, but found {}", type_name(item)))),
                })
                .collect::<QueryResult<_>>()?
        }
        other => return Err(QueryError::Location(51186, format!("$merge 'on' field  must be either a string or an array of strings, but found {}", type_name(other)))),
    };
    for (position, field) in fields.iter().enumerate() {
        crate::path::split_path(field)?;
        if fields.iter().take(position).any(|earlier| earlier == field) {
            return Err(QueryError::Location(31465, format!("Found a duplicate field '{field}'")));
        }
    }
    Ok(fields)
}

fn parse_when_matched(value: Option<&Bson>, let_variables: &[(String, Expression)]) -> QueryResult<WhenMatched> {
    Ok(match value {
        None => WhenMatched::Merge,
        Some(Bson::String(mode)) => match mode.as_str() {
            "replace" => WhenMatched::Replace,
            "keepExisting" => WhenMatched::KeepExisting,
            "merge" => WhenMatched::Merge,
            "fail" => WhenMatched::Fail,
            other => return Err(enumeration_error("whenMatched", other)),
        },
        Some(Bson::Array(items)) => {
            let mut stages = Vec::with_capacity(items.len());
            for item in items {
                let Bson::Document(stage) = item else {
                    return Err(QueryError::TypeMismatch("$merge 'whenMatched' pipeline stages must be objects".into()));
                };
                let name = stage.keys().next().map(String::as_str).unwrap_or_default();
                if !matches!(name, "$addFields" | "$set" | "$project" | "$unset" | "$replaceRoot" | "$replaceWith") {
                    return Err(QueryError::Location(
                        72,
                        format!("{name} is not allowed to be used within an update: only $addFields, $set, $project, $unset, $replaceRoot and $replaceWith are"),
                    ));
                }
                stages.push(stage.clone());
            }
            let mut names: Vec<String> = let_variables.iter().map(|(name, _)| name.clone()).collect();
            names.push("new".to_string());
            WhenMatched::Pipeline(Box::new(crate::expression::with_declared_variables(&names, || Pipeline::parse(&stages))?))
        }
        Some(other) => {
            return Err(QueryError::Location(51191, format!("$merge 'whenMatched' field must be either a string or an array, but found {}", type_name(other))))
        }
    })
}

impl BufferedStage for Merge {
    fn start(&self, context: &RunContext) -> Box<dyn BufferedState> {
        Box::new(MergeState {
            stage: Merge {
                target: self.target.clone(),
                on: self.on.clone(),
                let_variables: self.let_variables.clone(),
                when_matched: self.when_matched.clone(),
                when_not_matched: self.when_not_matched,
            },
            context: context.clone(),
            checked: false,
        })
    }
}

struct MergeState {
    stage: Merge,
    context: RunContext,
    checked: bool,
}

impl MergeState {
    fn check_target(&mut self) -> QueryResult<()> {
        if !self.checked {
            self.context.foreign("$merge")?.check_merge_target(&self.stage.target, &self.stage.on)?;
            self.checked = true;
        }
        Ok(())
    }

    /// The document's `on` values (an `_id` is generated when `on` is `_id` and it has none).
    fn on_values(&self, document: &mut Document) -> QueryResult<Document> {
        if self.stage.on == ["_id"] && !document.contains_key("_id") {
            let mut with_id = doc! { "_id": ObjectId::new() };
            with_id.extend(std::mem::take(document));
            *document = with_id;
        }
        let mut values = Document::new();
        for field in &self.stage.on {
            match crate::path::get_path(document, field) {
                Some(Bson::Null | Bson::Undefined | Bson::Array(_)) | None => {
                    return Err(QueryError::Location(
                        51132,
                        format!("$merge write error: 'on' field '{field}' cannot be missing, null, undefined or an array"),
                    ))
                }
                Some(value) => {
                    values.insert(field.clone(), value.clone());
                }
            }
        }
        Ok(values)
    }
}

/// `updated` keeps `existing`'s `_id`; a different one is MongoDB's ImmutableField.
fn keep_identifier(existing: &Document, mut updated: Document) -> QueryResult<Document> {
    let existing_id = existing.get("_id").cloned().unwrap_or(Bson::Null);
    match updated.get("_id") {
        Some(id) if myriad_keystring::compare::compare_values(id, &existing_id).is_eq() => Ok(updated),
        Some(_) => Err(QueryError::Location(
            IMMUTABLE_FIELD,
            "$merge failed to update the matching document, did you attempt to modify the _id or the shard key?".into(),
        )),
        None => {
            let mut with_id = doc! { "_id": existing_id };
            with_id.extend(std::mem::take(&mut updated));
            Ok(with_id)
        }
    }
}

fn decide(stage: &Merge, context: &RunContext, incoming: &Document, existing: Option<&Document>) -> QueryResult<MergeDecision> {
    let Some(existing) = existing else {
        return match stage.when_not_matched {
            WhenNotMatched::Insert => Ok(MergeDecision::Insert(incoming.clone())),
            WhenNotMatched::Discard => Ok(MergeDecision::Keep),
            WhenNotMatched::Fail => Err(QueryError::Location(
                MERGE_STAGE_NO_MATCHING_DOCUMENT,
                "$merge could not find a matching document in the target collection for at least one document in the source collection".into(),
            )),
        };
    };
    match &stage.when_matched {
        WhenMatched::KeepExisting => Ok(MergeDecision::Keep),
        WhenMatched::Fail => Ok(MergeDecision::Insert(incoming.clone())),
        WhenMatched::Replace => Ok(MergeDecision::Replace(keep_identifier(existing, incoming.clone())?)),
        WhenMatched::Merge => {
            let mut merged = existing.clone();
            for (key, value) in incoming {
                merged.insert(key.clone(), value.clone());
            }
            Ok(MergeDecision::Replace(keep_identifier(existing, merged)?))
        }
        WhenMatched::Pipeline(pipeline) => {
            let mut variables = vec![("new".to_string(), Bson::Document(incoming.clone()))];
            for (name, expression) in &stage.let_variables {
                variables.push((name.clone(), expression.evaluate(incoming)?));
            }
            let run = (**pipeline).clone().with_context(context.with_more_variables(variables));
            let mut output = run.run(std::iter::once(existing.clone()))?;
            let updated = output.pop().unwrap_or_default();
            Ok(MergeDecision::Replace(keep_identifier(existing, updated)?))
        }
    }
}

impl BufferedState for MergeState {
    fn add(&mut self, mut document: Document) -> QueryResult<()> {
        self.check_target()?;
        let on_values = self.on_values(&mut document)?;
        let foreign = self.context.foreign("$merge")?.clone();
        let (stage, context) = (&self.stage, &self.context);
        foreign.merge_one(&stage.target, &on_values, &mut |existing| decide(stage, context, &document, existing))
    }

    fn finish(mut self: Box<Self>) -> QueryResult<Box<dyn OutputStream>> {
        self.check_target()?;
        Ok(Box::new(MemoryOutput(Vec::new().into_iter())))
    }
}
