//! `$lookup`: the equality form (`localField`/`foreignField`), the pipeline form (`let`,
//! `pipeline`) and both at once (the equality becomes a leading `$match` of the pipeline).
//!
//! The foreign documents are read through the [`super::ForeignSource`], which answers the
//! equality with an index when one fits. The joined array is bounded by the stage memory
//! limit (MongoDB's 4568 past it).

use bson::{doc, Bson, Document};

use super::context::{Namespace, RunContext, TransformStage};
use super::parse::Nesting;
use super::stages::set_path;
use super::sub_pipeline::{collect_bounded, join_values, parse_join_path, SubPipelineStream};
use super::Pipeline;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::expression::Expression;

#[derive(Debug)]
pub(crate) struct Lookup {
    from: Namespace,
    as_path: Vec<String>,
    /// `localField` and `foreignField` of the equality form.
    equality: Option<(Vec<String>, String)>,
    let_variables: Vec<(String, Expression)>,
    pipeline: Option<Pipeline>,
}

fn failed(message: impl Into<String>) -> QueryError {
    QueryError::FailedToParse(message.into())
}

/// `from`: a collection name in the command's database.
pub(crate) fn parse_from(stage: &str, value: &Bson) -> QueryResult<Namespace> {
    match value {
        Bson::String(name) if !name.is_empty() => Ok(Namespace::in_current_database(name)),
        Bson::String(_) => Err(QueryError::Location(73, format!("{stage} 'from' names an invalid namespace: the collection name is empty"))),
        Bson::Document(namespace) => Err(failed(format!(
            "{stage} with syntax {{from: {{db:<>, coll:<>}},..}} is not supported for db: {} and coll: {}",
            namespace.get("db").map_or(String::new(), ToString::to_string),
            namespace.get("coll").map_or(String::new(), ToString::to_string)
        ))),
        other => Err(failed(format!("{stage} 'from' field must be a string or an object, but found {}", type_name(other)))),
    }
}

/// `let`: variable names (MongoDB's rules) and their expressions.
pub(crate) fn parse_let(stage: &str, value: &Bson) -> QueryResult<Vec<(String, Expression)>> {
    let Bson::Document(variables) = value else {
        return Err(failed(format!("{stage} argument 'let' must be an object, is type {}", type_name(value))));
    };
    let mut parsed = Vec::with_capacity(variables.len());
    for (name, expression) in variables {
        let valid_start = name.chars().next().is_some_and(|first| first.is_ascii_lowercase() || !first.is_ascii());
        if !valid_start || !name.chars().all(|character| character.is_ascii_alphanumeric() || character == '_' || !character.is_ascii()) {
            return Err(QueryError::Location(16867, format!("'{name}' starts with an invalid character for a user variable name")));
        }
        parsed.push((name.clone(), Expression::parse(expression)?));
    }
    Ok(parsed)
}

/// A sub-pipeline array, parsed with `variables` usable in it.
pub(crate) fn parse_sub_pipeline(stage: &'static str, value: &Bson, variables: &[String], nesting: Nesting) -> QueryResult<Pipeline> {
    let Bson::Array(items) = value else {
        return Err(failed(format!("{stage} argument 'pipeline' must be an array, is type {}", type_name(value))));
    };
    let mut stages = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Bson::Document(stage_document) => stages.push(stage_document.clone()),
            other => return Err(failed(format!("{stage} argument 'pipeline' must be an array of objects, found {}", type_name(other)))),
        }
    }
    let nested = nesting.enter(stage)?;
    crate::expression::with_declared_variables(variables, || Pipeline::parse_nested(&stages, nested))
}

impl Lookup {
    /// Parses the specification, with MongoDB 7.0's checks (FailedToParse throughout), and
    /// returns it with its explain form.
    pub(crate) fn parse(argument: &Bson, nesting: Nesting) -> QueryResult<(Lookup, Document)> {
        let Bson::Document(specification) = argument else {
            return Err(failed(format!("the $lookup specification must be an Object, but found {}", type_name(argument))));
        };
        let (mut from, mut as_path, mut local, mut foreign, mut let_value, mut pipeline_value) = (None, None, None, None, None, None);
        for (key, value) in specification {
            match key.as_str() {
                "from" => from = Some(parse_from("$lookup", value)?),
                "as" => as_path = Some(parse_join_path("$lookup", "as", value)?),
                "localField" => local = Some(parse_join_path("$lookup", "localField", value)?),
                "foreignField" => {
                    parse_join_path("$lookup", "foreignField", value)?;
                    foreign = value.as_str().map(str::to_string);
                }
                "let" => let_value = Some(value),
                "pipeline" => pipeline_value = Some(value),
                other => return Err(failed(format!("unknown argument to $lookup: {other}"))),
            }
        }
        let as_path = as_path.ok_or_else(|| failed("must specify 'as' field for a $lookup"))?;
        let from = from.ok_or_else(|| failed("must specify 'from' field for a $lookup"))?;
        let equality = match (local, foreign) {
            (Some(local), Some(foreign)) => Some((local, foreign)),
            (None, None) => None,
            _ if pipeline_value.is_some() => return Err(failed("$lookup requires both or neither of 'localField' and 'foreignField' to be specified")),
            _ => return Err(failed("$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified")),
        };
        if equality.is_none() && pipeline_value.is_none() {
            return Err(failed("$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified"));
        }
        if let_value.is_some() && pipeline_value.is_none() {
            return Err(failed("$lookup with a 'let' argument must also specify 'pipeline'"));
        }
        let let_variables = match let_value {
            Some(value) => parse_let("$lookup", value)?,
            None => Vec::new(),
        };
        let names: Vec<String> = let_variables.iter().map(|(name, _)| name.clone()).collect();
        let pipeline = pipeline_value.map(|value| parse_sub_pipeline("$lookup", value, &names, nesting)).transpose()?;
        let mut explained = specification.clone();
        explained.insert("from", from.collection.clone());
        Ok((Lookup { from, as_path, equality, let_variables, pipeline }, doc! { "$lookup": explained }))
    }

    /// The foreign filter of the equality form for one local document.
    fn equality_filter(&self, document: &Document) -> Document {
        let Some((local, foreign)) = &self.equality else { return Document::new() };
        let values = join_values(document, local);
        doc! { foreign.clone(): { "$in": values } }
    }
}

impl TransformStage for Lookup {
    fn apply(&self, mut document: Document, context: &RunContext) -> QueryResult<Option<Document>> {
        let foreign = context.foreign("$lookup")?;
        let filter = self.equality_filter(&document);
        let mut bound = Vec::with_capacity(self.let_variables.len());
        for (name, expression) in &self.let_variables {
            bound.push((name.clone(), expression.evaluate(&document)?));
        }
        let input = foreign.read(&self.from, &filter)?;
        let sub_context = context.with_more_variables(bound);
        let mut stream = SubPipelineStream::new(self.pipeline.as_ref(), &sub_context, input);
        let limit_bytes = context.memory_limit_bytes;
        let joined = collect_bounded(&mut stream, limit_bytes, || {
            QueryError::Location(
                4568,
                format!("Total size of documents in {} matching pipeline's $lookup stage exceeds {limit_bytes} bytes", self.from.collection),
            )
        })?;
        set_path(&mut document, &self.as_path, Some(Bson::Array(joined)), 0);
        Ok(Some(document))
    }
}
