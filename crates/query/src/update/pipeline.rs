//! Pipeline-style updates (`u: [{$set: ...}, ...]`): the aggregation stages that keep one
//! document per document (`$addFields`/`$set`, `$project`, `$unset`, `$replaceRoot`/
//! `$replaceWith`), run by the aggregation pipeline itself on the document being updated. The
//! result replaces the document as a replacement update would: its `_id` is kept when the
//! pipeline drops it and may not change.

use bson::{Bson, Document};

use crate::aggregate::Pipeline;
use crate::error::{QueryError, QueryResult};

/// The stages mongod allows within an update.
const UPDATE_STAGES: &[&str] = &["$addFields", "$set", "$project", "$unset", "$replaceRoot", "$replaceWith"];

/// Parses the stages with `variables` (the command's `let`, `$$NOW`...) bound.
pub(super) fn parse(stages: &[Bson], variables: Vec<(String, Bson)>) -> QueryResult<Pipeline> {
    let mut documents = Vec::with_capacity(stages.len());
    for stage in stages {
        match stage {
            Bson::Document(stage) => documents.push(stage.clone()),
            other => {
                return Err(QueryError::FailedToParse(format!(
                    "Each element of the 'pipeline' array must be an object, found {}",
                    crate::bson_types::type_name(other)
                )))
            }
        }
    }
    let names: Vec<String> = variables.iter().map(|(name, _)| name.clone()).collect();
    let pipeline = Pipeline::parse_with_variables(&documents, &names)?;
    for stage in &documents {
        if let Some(name) = stage.keys().next().filter(|name| !UPDATE_STAGES.contains(&name.as_str())) {
            return Err(QueryError::Location(72, format!("{name} is not allowed to be used within an update")));
        }
    }
    Ok(pipeline.with_variables(variables))
}

/// What the pipeline makes of `document` (before the `_id` rules of a replacement apply).
pub(super) fn run(pipeline: &Pipeline, document: &Document) -> QueryResult<Document> {
    // The stages compare by the update's collation (the one its application runs under).
    let mut output = match crate::expression::current_collator() {
        Some(collator) => pipeline.clone().with_collator(Some(collator)).run(std::iter::once(document.clone()))?,
        None => pipeline.run(std::iter::once(document.clone()))?,
    };
    match (output.pop(), output.is_empty()) {
        (Some(updated), true) => Ok(updated),
        _ => Err(QueryError::Location(72, "an update pipeline must produce exactly one document".into())),
    }
}
