//! Parsing stage documents into [`Stage`]s, with MongoDB's checks on where a stage may
//! appear (`$out` and `$merge` last, sources first, what a `$facet` or a sub-pipeline may
//! hold) and the bound on nested sub-pipelines.

use std::sync::Arc;

use bson::{Bson, Document};

use super::context::{MAX_SUB_PIPELINE_DEPTH, MAX_SUB_PIPELINE_DEPTH_EXCEEDED};
use super::group::GroupSpec;
use super::stages::{AddFields, Unwind};
use super::{bucket, facet, graph_lookup, lookup, redact, sample, sources, union_with, window, writes, Stage};
use crate::error::{QueryError, QueryResult};
use crate::expression::{integral_value, Expression};
use crate::filter::Filter;
use crate::projection::Projection;
use crate::sort::SortSpec;

/// Where a pipeline being parsed sits: how deep among sub-pipelines, and inside which stage.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Nesting {
    pub(crate) depth: usize,
    pub(crate) inside: Option<&'static str>,
}

impl Nesting {
    pub(crate) fn top() -> Nesting {
        Nesting { depth: 0, inside: None }
    }

    /// The nesting of a sub-pipeline of `stage`, refused past MongoDB's depth bound.
    pub(crate) fn enter(self, stage: &'static str) -> QueryResult<Nesting> {
        let depth = self.depth + 1;
        if depth > MAX_SUB_PIPELINE_DEPTH {
            return Err(QueryError::Location(
                MAX_SUB_PIPELINE_DEPTH_EXCEEDED,
                format!("Maximum number of nested sub-pipelines exceeded. Limit is {MAX_SUB_PIPELINE_DEPTH}"),
            ));
        }
        // Inside a $facet, everything nested is still inside it (no $out in a $lookup in a $facet).
        let inside = match self.inside {
            Some("$facet") => Some("$facet"),
            _ => Some(stage),
        };
        Ok(Nesting { depth, inside })
    }
}

/// What parsing builds: the stages, each stage as explain shows it, and a leading source.
#[derive(Default)]
pub(crate) struct Parsed {
    pub(crate) stages: Vec<Stage>,
    pub(crate) explained: Vec<Document>,
    pub(crate) source: Option<sources::SourceStage>,
}

fn single(name: &str, value: impl Into<Bson>) -> Document {
    let mut document = Document::new();
    document.insert(name, value.into());
    document
}

/// Refuses a writing stage that is not last or sits in a sub-pipeline.
fn check_writing_stage(name: &str, nesting: Nesting, position: usize, count: usize) -> QueryResult<()> {
    match nesting.inside {
        Some("$facet") => return Err(QueryError::Location(40600, format!("{name} is not allowed to be used within a $facet stage"))),
        Some("$lookup") => return Err(QueryError::Location(51047, format!("{name} is not allowed within a $lookup's sub-pipeline"))),
        Some("$unionWith") => return Err(QueryError::Location(31441, format!("{name} is not allowed within a $unionWith's sub-pipeline"))),
        Some(_) => return Err(QueryError::Location(40601, format!("{name} can only be the final stage in the pipeline"))),
        None => {}
    }
    if position + 1 != count {
        return Err(QueryError::Location(40601, format!("{name} can only be the final stage in the pipeline")));
    }
    Ok(())
}

/// `$bucket` as its `$group` and `$sort`; the explain form of the last.
fn parse_bucket(argument: &Bson, parsed: &mut Parsed) -> QueryResult<Document> {
    let (group, sort) = bucket::desugar_bucket(argument)?;
    parse_stage_core("$group", &Bson::Document(group.clone()), &mut parsed.stages)?;
    parse_stage_core("$sort", &Bson::Document(sort.clone()), &mut parsed.stages)?;
    parsed.explained.push(single("$group", group));
    Ok(single("$sort", bson::doc! { "sortKey": sort }))
}

/// `$fill` as a `$setWindowFields` and an `$addFields`; the explain form of the last, if any.
fn parse_fill(argument: &Bson, parsed: &mut Parsed) -> QueryResult<Option<Document>> {
    let (windows, add_fields) = window::fill::desugar(argument)?;
    if let Some(windows) = windows {
        parsed.explained.push(single("$setWindowFields", windows.describe()));
        parsed.stages.push(Stage::Buffered(Arc::new(windows)));
    }
    let Some(add_fields) = add_fields else { return Ok(None) };
    parsed.stages.push(Stage::AddFields(AddFields::parse("$addFields", &Bson::Document(add_fields.clone()))?));
    Ok(Some(single("$addFields", add_fields)))
}

/// Parses one stage into `parsed`.
pub(crate) fn parse_stage(name: &str, argument: &Bson, parsed: &mut Parsed, nesting: Nesting, position: usize, count: usize) -> QueryResult<()> {
    if sources::is_source_stage(name) {
        if nesting.inside == Some("$facet") {
            return Err(QueryError::Location(40600, format!("{name} is not allowed to be used within a $facet stage")));
        }
        if position != 0 || nesting.depth > 0 {
            return Err(QueryError::Location(40602, format!("{name} is only valid as the first stage in a pipeline")));
        }
        let source = sources::SourceStage::parse(name, argument)?;
        parsed.explained.push(source.describe());
        parsed.source = Some(source);
        parsed.stages.push(Stage::Source);
        return Ok(());
    }
    let explained = match name {
        "$out" | "$merge" => {
            check_writing_stage(name, nesting, position, count)?;
            let (stage, explained) = if name == "$out" { writes::parse_out(argument)? } else { writes::parse_merge(argument)? };
            parsed.stages.push(Stage::Buffered(stage));
            explained
        }
        "$facet" => {
            if nesting.inside == Some("$facet") {
                return Err(QueryError::Location(40600, "$facet is not allowed to be used within a $facet stage".into()));
            }
            parsed.stages.push(Stage::Buffered(Arc::new(facet::Facet::parse(argument, nesting)?)));
            single(name, argument.clone())
        }
        "$lookup" => {
            let (stage, explained) = lookup::Lookup::parse(argument, nesting)?;
            parsed.stages.push(Stage::Transform(Arc::new(stage)));
            explained
        }
        "$graphLookup" => {
            let stage = graph_lookup::GraphLookup::parse(argument)?;
            let explained = single(name, stage.describe());
            parsed.stages.push(Stage::Transform(Arc::new(stage)));
            explained
        }
        "$unionWith" => {
            let stage = union_with::UnionWith::parse(argument, nesting)?;
            let explained = single(name, stage.describe());
            parsed.stages.push(Stage::UnionWith(Arc::new(stage)));
            explained
        }
        "$redact" => {
            parsed.stages.push(Stage::Transform(Arc::new(redact::Redact::parse(argument)?)));
            single(name, argument.clone())
        }
        "$sample" => {
            let stage = sample::Sample::parse(argument)?;
            let explained = single(name, bson::doc! { "size": stage.size_bson() });
            parsed.stages.push(Stage::Buffered(Arc::new(stage)));
            explained
        }
        "$bucket" => parse_bucket(argument, parsed)?,
        "$bucketAuto" => {
            parsed.stages.push(Stage::Buffered(Arc::new(bucket::BucketAuto::parse(argument)?)));
            single(name, argument.clone())
        }
        "$setWindowFields" => {
            parsed.stages.push(Stage::Buffered(Arc::new(window::SetWindowFields::parse(argument)?)));
            single(name, argument.clone())
        }
        "$fill" => match parse_fill(argument, parsed)? {
            Some(explained) => explained,
            None => return Ok(()),
        },
        "$densify" => {
            parsed.stages.push(Stage::Buffered(Arc::new(window::densify::Densify::parse(argument)?)));
            single(name, argument.clone())
        }
        "$sortByCount" => {
            parse_stage_core(name, argument, &mut parsed.stages)?;
            parsed.explained.push(single("$group", bson::doc! {"_id": argument.clone(), "count": {"$sum": 1}}));
            single("$sort", bson::doc! {"sortKey": {"count": -1}})
        }
        _ => {
            parse_stage_core(name, argument, &mut parsed.stages)?;
            single(name, argument.clone())
        }
    };
    parsed.explained.push(explained);
    Ok(())
}

/// `$skip` and `$limit`'s argument, as mongod's `parseIntegerElementToNonNegativeLong` reads
/// it: a number (5107200 / 5107201, "Expected a number in: ..."), integral ("Expected an
/// integer: ..."), not negative; and a `$limit` of 0 is 15958.
fn non_negative_count(stage: &str, argument: &Bson) -> QueryResult<u64> {
    let code = if stage == "$skip" { 5107200 } else { 5107201 };
    let invalid = |what: String| QueryError::Location(code, format!("invalid argument to {stage} stage: {what}"));
    if !matches!(argument, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)) {
        return Err(invalid(format!("Expected a number in: {stage}: {argument}")));
    }
    let value = integral_value(argument).ok_or_else(|| invalid(format!("Expected an integer: {stage}: {argument}")))?;
    if value < 0 {
        return Err(invalid(format!("Expected a non-negative number in: {stage}: {argument}")));
    }
    if stage == "$limit" && value == 0 {
        return Err(QueryError::Location(15958, "the limit must be positive".into()));
    }
    Ok(u64::try_from(value).unwrap_or(0))
}

fn parse_stage_core(name: &str, argument: &Bson, parsed: &mut Vec<Stage>) -> QueryResult<()> {
    let stage = match name {
        "$match" => {
            let Bson::Document(filter) = argument else {
                return Err(QueryError::Location(15959, "the match filter must be an expression in an object".into()));
            };
            Stage::Match(Box::new(Filter::parse(filter)?))
        }
        "$group" => Stage::Group(Box::new(GroupSpec::parse(argument)?)),
        "$project" => {
            let Bson::Document(specification) = argument else {
                return Err(QueryError::Location(15969, "$project specification must be an object".into()));
            };
            Stage::Project(Box::new(Projection::parse_aggregate(specification)?))
        }
        "$addFields" | "$set" => Stage::AddFields(AddFields::parse(name, argument)?),
        "$unset" => {
            // MongoDB's order of checks: the type (31002), then at least one field (31119),
            // then only strings (31120).
            let paths: Vec<String> = match argument {
                Bson::String(path) => vec![path.clone()],
                Bson::Array(items) if items.is_empty() => {
                    return Err(QueryError::Location(31119, "$unset specification must be a string or an array with at least one field".into()))
                }
                Bson::Array(items) => items
                    .iter()
                    .map(|item| match item {
                        Bson::String(path) => Ok(path.clone()),
                        _ => Err(QueryError::Location(31120, "$unset specification must be a string or an array containing only string values".into())),
                    })
                    .collect::<QueryResult<_>>()?,
                _ => return Err(QueryError::Location(31002, "$unset specification must be a string or an array".into())),
            };
            Stage::Project(Box::new(Projection::exclusion_of(&paths)?))
        }
        "$sort" => {
            let Bson::Document(specification) = argument else {
                return Err(QueryError::Location(15973, "the $sort key specification must be an object".into()));
            };
            let spec = SortSpec::parse(specification)?;
            if spec.is_empty() {
                return Err(QueryError::Location(15976, "$sort stage must have at least one sort key".into()));
            }
            Stage::Sort { spec, limit: None }
        }
        "$skip" => Stage::Skip(non_negative_count(name, argument)?),
        "$limit" => Stage::Limit(non_negative_count(name, argument)?),
        "$count" => {
            let Bson::String(field) = argument else {
                return Err(QueryError::Location(40156, "the count field must be a non-empty string".into()));
            };
            if field.is_empty() {
                return Err(QueryError::Location(40157, "the count field must be a non-empty string".into()));
            }
            if field.starts_with('$') {
                return Err(QueryError::Location(40158, "the count field cannot be a $-prefixed path".into()));
            }
            if field.contains('.') {
                return Err(QueryError::Location(40160, "the count field cannot contain '.'".into()));
            }
            Stage::Count(field.clone())
        }
        "$unwind" => Stage::FanOut(super::FanOut::Unwind(Unwind::parse(argument)?)),
        "$_internalUnpackBucket" => Stage::FanOut(super::FanOut::UnpackBucket(super::unpack_bucket::UnpackBucket::parse(argument)?)),
        "$replaceRoot" => {
            let Bson::Document(options) = argument else {
                return Err(QueryError::Location(40229, "expected an object as specification for $replaceRoot stage".into()));
            };
            let root = options.get("newRoot").ok_or_else(|| QueryError::Location(40231, "no newRoot specified for the $replaceRoot stage".into()))?;
            if let Some(other) = options.keys().find(|key| *key != "newRoot") {
                return Err(QueryError::unknown_field(&format!("$replaceRoot.{other}")));
            }
            Stage::ReplaceRoot(Expression::parse(root)?)
        }
        "$replaceWith" => Stage::ReplaceRoot(Expression::parse(argument)?),
        "$sortByCount" => {
            let valid = match argument {
                Bson::String(path) => path.starts_with('$'),
                Bson::Document(expression) => expression.len() == 1 && expression.keys().next().is_some_and(|key| key.starts_with('$')),
                _ => false,
            };
            if !valid {
                return Err(QueryError::Location(40148, "the sortByCount field must be specified as a string or an expression object".into()));
            }
            let group = bson::doc! {"_id": argument.clone(), "count": {"$sum": 1}};
            parsed.push(Stage::Group(Box::new(GroupSpec::parse(&Bson::Document(group))?)));
            Stage::Sort { spec: SortSpec::parse(&bson::doc! {"count": -1})?, limit: None }
        }
        other => {
            return Err(QueryError::Location(40324, format!("Unrecognized pipeline stage name: '{other}'")));
        }
    };
    parsed.push(stage);
    Ok(())
}


